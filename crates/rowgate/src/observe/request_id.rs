//! `X-Request-Id`: a request's id, taken from the request when it sends a sensible one (a
//! proxy in front, a client tracing its calls) or made here, and echoed on the answer and in
//! the access log.
//!
//! A made id is 32 hex digits: a random number drawn once per process, and a counter mixed
//! (SplitMix64) so that ids do not show how many requests came before; unique across
//! processes and nodes but for a 2^-64 chance, and cheap (no system call per request).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use http::{HeaderMap, HeaderValue};

/// The header.
pub const HEADER: http::HeaderName = http::HeaderName::from_static("x-request-id");

/// The longest id taken from a request.
pub const MAX_LEN: usize = 200;

/// The request's own id when it is 1-200 visible ASCII characters, else a new one.
pub fn of(headers: &HeaderMap) -> HeaderValue {
    match headers.get(HEADER) {
        Some(sent)
            if (1..=MAX_LEN).contains(&sent.len())
                && sent.as_bytes().iter().all(u8::is_ascii_graphic) =>
        {
            sent.clone()
        }
        _ => new_id(),
    }
}

/// A new id.
pub fn new_id() -> HeaderValue {
    static SEED: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| {
        let mut bytes = [0u8; 8];
        if getrandom::fill(&mut bytes).is_err() {
            // no entropy source: the pid and the clock still set processes apart
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos();
            #[allow(clippy::cast_possible_truncation)]
            return u64::from(std::process::id()) << 32 ^ nanos as u64;
        }
        u64::from_le_bytes(bytes)
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut id = [0u8; 32];
    hex(seed, &mut id[..16]);
    hex(mix(seed ^ n), &mut id[16..]);
    HeaderValue::from_bytes(&id).unwrap_or_else(|_| HeaderValue::from_static("0"))
}

/// `value` as 16 lower-case hex digits into `out`.
fn hex(value: u64, out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, digit) in out.iter_mut().enumerate() {
        *digit = DIGITS[((value >> (60 - 4 * i)) & 0xf) as usize];
    }
}

/// SplitMix64's finaliser: a bijection, so distinct counters give distinct ids.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sensible_id_is_kept_and_others_replaced() {
        let mut digits = [0u8; 16];
        hex(0x0123_4567_89ab_cdef, &mut digits);
        assert_eq!(&digits, b"0123456789abcdef");
        let mut headers = HeaderMap::new();
        headers.insert(HEADER, HeaderValue::from_static("trace-42"));
        assert_eq!(of(&headers), "trace-42");
        headers.insert(HEADER, HeaderValue::from_static("has space"));
        let made = of(&headers);
        assert_eq!(made.len(), 32);
        assert!(made.as_bytes().iter().all(u8::is_ascii_hexdigit));
        headers.insert(
            HEADER,
            HeaderValue::from_str(&"x".repeat(201)).expect("value"),
        );
        assert_eq!(of(&headers).len(), 32);
        let ids: std::collections::HashSet<HeaderValue> = (0..1000).map(|_| new_id()).collect();
        assert_eq!(ids.len(), 1000, "distinct");
    }
}
