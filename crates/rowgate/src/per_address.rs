//! Open connections per client address (`limits.max_connections_per_address`), counted at
//! accept: one client must not hold every one of `limits.max_connections` (reconnecting
//! whenever its slow bodies time out). An IPv4 client counts by its address, an IPv6 client by
//! its /64 (one host is usually given a whole /64, and could otherwise take a new address per
//! connection).
//!
//! The count sits on the accept path: a map sharded by the address's hash, each shard's mutex
//! held for one hash-map update, so that accepts on several threads rarely meet.

use std::collections::hash_map::{Entry, RandomState};
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};

/// Shards of the map (a power of two).
const SHARDS: usize = 64;

/// The open connections of each address.
pub struct ConnectionsPerAddress {
    /// Most connections one address may hold.
    limit: usize,
    /// Picks an address's shard (keyed per process: addresses cannot be chosen to fall on one).
    hasher: RandomState,
    shards: Box<[Mutex<HashMap<IpAddr, usize>>]>,
}

impl ConnectionsPerAddress {
    /// Counts at most `limit` connections per address.
    pub fn new(limit: usize) -> Arc<ConnectionsPerAddress> {
        Arc::new(ConnectionsPerAddress {
            limit,
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        })
    }

    /// A slot for one more connection from `peer`, held while the connection lives; `None`
    /// when the address already holds the limit.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<AddressSlot> {
        let key = counted_as(peer);
        let mut shard = self.shard(key);
        let open = shard.entry(key).or_insert(0);
        if *open >= self.limit {
            return None;
        }
        *open += 1;
        drop(shard);
        Some(AddressSlot {
            counts: self.clone(),
            key,
        })
    }

    /// Connections open from `peer`'s address now.
    pub fn open(&self, peer: IpAddr) -> usize {
        let key = counted_as(peer);
        self.shard(key).get(&key).copied().unwrap_or(0)
    }

    fn shard(&self, key: IpAddr) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        let index = usize::try_from(self.hasher.hash_one(key)).unwrap_or(0) % SHARDS;
        self.shards[index]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One open connection of an address; the count goes down when it is dropped (with the
/// socket, whoever holds it: hyper, or the WebSocket session it was upgraded to).
pub struct AddressSlot {
    counts: Arc<ConnectionsPerAddress>,
    key: IpAddr,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut shard = self.counts.shard(self.key);
        if let Entry::Occupied(mut open) = shard.entry(self.key) {
            *open.get_mut() -= 1;
            if *open.get() == 0 {
                open.remove();
            }
        }
    }
}

/// What `peer` is counted as: its IPv4 address, or its IPv6 /64.
fn counted_as(peer: IpAddr) -> IpAddr {
    match peer.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    #[test]
    fn an_address_holds_at_most_the_limit() {
        let counts = ConnectionsPerAddress::new(2);
        let a = counts.admit(ip("203.0.113.7")).expect("first");
        let b = counts
            .admit(ip("::ffff:203.0.113.7"))
            .expect("second, the same address");
        assert!(counts.admit(ip("203.0.113.7")).is_none(), "third");
        let other = counts.admit(ip("203.0.113.8")).expect("another address");
        drop(a);
        let c = counts.admit(ip("203.0.113.7")).expect("a slot freed");
        assert_eq!(counts.open(ip("203.0.113.7")), 2);
        drop((b, c, other));
        assert_eq!(counts.open(ip("203.0.113.7")), 0);
        assert!(counts
            .shards
            .iter()
            .all(|s| s.lock().expect("shard").is_empty()));
    }

    #[test]
    fn an_ipv6_host_counts_by_its_64() {
        let counts = ConnectionsPerAddress::new(1);
        let _held = counts.admit(ip("2001:db8:1:2::1")).expect("first");
        assert!(
            counts.admit(ip("2001:db8:1:2:ffff::9")).is_none(),
            "the same /64"
        );
        assert!(counts.admit(ip("2001:db8:1:3::1")).is_some(), "another /64");
    }
}
