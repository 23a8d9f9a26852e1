//! How many realtime connections (WebSockets of both protocols, SSE streams) each client
//! address holds, against `realtime.max_connections_per_address`: a connection takes a slot
//! before it is accepted and gives it back when it ends, whoever holds it then.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::error::{ApiError, ErrorCode};

/// The open realtime connections per client address.
#[derive(Default)]
pub struct Addresses {
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One connection's place in its address's count, given back when dropped.
pub struct AddressSlot {
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
    address: IpAddr,
}

impl Addresses {
    /// A slot for one more connection from `address`, or 429 `RG429` when it holds `max`
    /// already (`0`: no limit).
    pub fn admit(&self, address: IpAddr, max: usize) -> Result<AddressSlot, ApiError> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let held = open.entry(address).or_insert(0);
        if max > 0 && *held >= max {
            return Err(ApiError::new(
                ErrorCode::RealtimeCrowded,
                format!("at most {max} realtime connections from one address"),
            )
            .hint("close a connection first, or raise realtime.max_connections_per_address"));
        }
        *held += 1;
        Ok(AddressSlot {
            open: self.open.clone(),
            address,
        })
    }

    /// Connections `address` holds now.
    pub fn held(&self, address: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&address).copied().unwrap_or(0)
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = open.get_mut(&self.address) {
            *held -= 1;
            if *held == 0 {
                open.remove(&self.address);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address gets `max` slots, the next is refused with 429, and a slot dropped makes room
    /// again; other addresses are counted apart, and 0 is no limit.
    #[test]
    fn an_address_holds_at_most_max() {
        let addresses = Addresses::default();
        let a: IpAddr = "10.0.0.1".parse().expect("ip");
        let b: IpAddr = "10.0.0.2".parse().expect("ip");
        let first = addresses.admit(a, 2).expect("first");
        let _second = addresses.admit(a, 2).expect("second");
        let refused = addresses.admit(a, 2).err().expect("third refused");
        assert_eq!(refused.code, ErrorCode::RealtimeCrowded);
        assert!(addresses.admit(b, 2).is_ok());
        drop(first);
        assert_eq!(addresses.held(a), 1);
        let _again = addresses.admit(a, 2).expect("room again");
        let unlimited: Vec<AddressSlot> = (0..5)
            .map(|_| addresses.admit(b, 0).expect("no limit"))
            .collect();
        assert_eq!(addresses.held(b), 5);
        drop(unlimited);
        assert_eq!(addresses.held(b), 0);
    }
}
