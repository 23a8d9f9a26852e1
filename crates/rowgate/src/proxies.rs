//! Trusted proxies (`trusted_proxies`): the peers whose `X-Forwarded-For`, `X-Forwarded-Host`
//! and `X-Forwarded-Proto` headers are believed. From any other peer these headers are the
//! client's own words and are ignored: a client could otherwise name any host for the links an
//! answer carries (and poison a shared cache in front), or any address for the per-address
//! limits. The list is empty by default: no peer is trusted.
//!
//! [`TrustedProxies::client_address`] is the one answer to "who is the client": the peer, or,
//! for a request a trusted proxy passed on, the address `X-Forwarded-For` names last that is
//! not itself a trusted proxy (each proxy appends the address it got the request from, so the
//! addresses left of an untrusted one are the client's say).

use std::net::{IpAddr, SocketAddr};

use anyhow::Context as _;
use http::HeaderMap;
use ipnet::IpNet;

/// The header a proxy appends the address it got the request from to.
pub const FORWARDED_FOR: &str = "x-forwarded-for";
/// The host the client asked a proxy for.
pub const FORWARDED_HOST: &str = "x-forwarded-host";
/// The scheme (`https`) the client spoke to a proxy.
pub const FORWARDED_PROTO: &str = "x-forwarded-proto";

/// The compiled `trusted_proxies`: addresses and CIDR blocks.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
}

impl TrustedProxies {
    /// Parses `trusted_proxies`' entries: IP addresses (`10.0.0.7`, `::1`) or CIDR blocks
    /// (`10.0.0.0/8`, `fd00::/8`); an entry that is neither is an error naming it.
    pub fn parse(entries: &[String]) -> anyhow::Result<TrustedProxies> {
        let nets = entries
            .iter()
            .map(|entry| {
                let text = entry.trim();
                text.parse::<IpNet>()
                    .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
                    .ok()
                    .with_context(|| {
                        format!(
                            "trusted_proxies: {entry:?} is not an IP address or CIDR block (like 127.0.0.1, 10.0.0.0/8 or fd00::/8)"
                        )
                    })
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(TrustedProxies { nets })
    }

    /// Whether no peer is trusted.
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// Whether `peer` is a trusted proxy.
    pub fn trusts(&self, peer: IpAddr) -> bool {
        if self.nets.is_empty() {
            return false;
        }
        let peer = peer.to_canonical();
        self.nets.iter().any(|net| net.contains(&peer))
    }

    /// The first value of the forwarding header `name` (`X-Forwarded-Host`, `-Proto`), when
    /// `peer` is a trusted proxy that sent one; `None` from any other peer.
    pub fn forwarded<'h>(
        &self,
        peer: IpAddr,
        headers: &'h HeaderMap,
        name: &str,
    ) -> Option<&'h str> {
        if !self.trusts(peer) {
            return None;
        }
        headers
            .get(name)?
            .to_str()
            .ok()?
            .split(',')
            .next()
            .map(str::trim)
            .filter(|v| !v.is_empty())
    }

    /// The client's address for a request that came from `peer`: `peer` itself, unless it is
    /// a trusted proxy; then the last address of `X-Forwarded-For` (all its headers, in order)
    /// that is not a trusted proxy, or its first when they all are. A hop that is not an
    /// address ends the walk at the one before it.
    pub fn client_address(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut client = peer.to_canonical();
        if !self.trusts(client) {
            return client;
        }
        let hops: Vec<&str> = headers
            .get_all(FORWARDED_FOR)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .collect();
        for hop in hops.iter().rev() {
            let Some(address) = hop_address(hop) else {
                break;
            };
            client = address;
            if !self.trusts(address) {
                break;
            }
        }
        client
    }
}

/// One `X-Forwarded-For` entry's address (`203.0.113.7`, `2001:db8::1`, with a port or in
/// brackets as some proxies write it).
fn hop_address(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    let address = hop
        .parse::<IpAddr>()
        .or_else(|_| hop.parse::<SocketAddr>().map(|s| s.ip()))
        .or_else(|_| {
            hop.strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(hop)
                .parse::<IpAddr>()
        })
        .ok()?;
    Some(address.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies(entries: &[&str]) -> TrustedProxies {
        TrustedProxies::parse(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>())
            .expect("valid")
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().expect("header value"));
        }
        map
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    #[test]
    fn entries_are_addresses_or_blocks() {
        let p = proxies(&["10.0.0.0/8", "192.168.1.7", "fd00::/8", " ::1 "]);
        assert!(p.trusts(ip("10.200.3.4")));
        assert!(p.trusts(ip("192.168.1.7")));
        assert!(!p.trusts(ip("192.168.1.8")));
        assert!(p.trusts(ip("fd12::5")));
        assert!(p.trusts(ip("::1")));
        // an IPv4 peer on a dual-stack socket
        assert!(p.trusts(ip("::ffff:10.1.1.1")));
        assert!(!TrustedProxies::default().trusts(ip("127.0.0.1")));
        for bad in ["10.0.0.0/33", "localhost", "10.0.0", ""] {
            let err = TrustedProxies::parse(&[bad.to_string()]).expect_err(bad);
            assert!(err.to_string().contains("trusted_proxies"), "{err}");
        }
    }

    #[test]
    fn forwarded_headers_count_from_trusted_peers_only() {
        let p = proxies(&["127.0.0.1"]);
        let h = headers(&[
            (FORWARDED_HOST, "api.example.com, inner"),
            (FORWARDED_PROTO, "https"),
        ]);
        assert_eq!(
            p.forwarded(ip("127.0.0.1"), &h, FORWARDED_HOST),
            Some("api.example.com")
        );
        assert_eq!(
            p.forwarded(ip("127.0.0.1"), &h, FORWARDED_PROTO),
            Some("https")
        );
        assert_eq!(p.forwarded(ip("203.0.113.9"), &h, FORWARDED_HOST), None);
    }

    #[test]
    fn the_client_is_the_last_untrusted_hop() {
        let p = proxies(&["10.0.0.0/8"]);
        let h = headers(&[
            (FORWARDED_FOR, "1.1.1.1, 203.0.113.7"),
            (FORWARDED_FOR, "10.0.0.2"),
        ]);
        // a forged first entry is left of the address the first proxy saw
        assert_eq!(p.client_address(ip("10.0.0.1"), &h), ip("203.0.113.7"));
        // from an untrusted peer, the header is ignored
        assert_eq!(p.client_address(ip("198.51.100.1"), &h), ip("198.51.100.1"));
        // no header: the proxy itself
        assert_eq!(
            p.client_address(ip("10.0.0.1"), &HeaderMap::new()),
            ip("10.0.0.1")
        );
        // every hop trusted: the first
        let inner = headers(&[(FORWARDED_FOR, "10.0.0.9, 10.0.0.2")]);
        assert_eq!(p.client_address(ip("10.0.0.1"), &inner), ip("10.0.0.9"));
        // garbage ends the walk at the hop before it
        let garbage = headers(&[(FORWARDED_FOR, "203.0.113.7, unknown, 10.0.0.2")]);
        assert_eq!(p.client_address(ip("10.0.0.1"), &garbage), ip("10.0.0.2"));
        // ports and brackets
        let ported = headers(&[(FORWARDED_FOR, "[2001:db8::1]:443")]);
        assert_eq!(p.client_address(ip("10.0.0.1"), &ported), ip("2001:db8::1"));
        let ported = headers(&[(FORWARDED_FOR, "203.0.113.7:5000")]);
        assert_eq!(p.client_address(ip("10.0.0.1"), &ported), ip("203.0.113.7"));
    }
}
