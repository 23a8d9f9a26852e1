//! Trusted proxies (`trusted_proxies`): the peers whose forwarding headers are believed: RFC
//! 7239's `Forwarded` (`for=`, `host=`, `proto=`) when a request carries one, else
//! `X-Forwarded-For`, `X-Forwarded-Host` and `X-Forwarded-Proto`. From any other peer these headers are the
//! client's own words and are ignored: a client could otherwise name any host for the links an
//! answer carries (and poison a shared cache in front), or any address for the per-address
//! limits. The list is empty by default: no peer is trusted.
//!
//! [`TrustedProxies::client_address`] is the one answer to "who is the client": the peer, or,
//! for a request a trusted proxy passed on, the address the forwarding header names last that
//! is not itself a trusted proxy (each proxy appends the address it got the request from, so the
//! addresses left of an untrusted one are the client's say).

use std::net::{IpAddr, SocketAddr};

use anyhow::Context as _;
use http::HeaderMap;
use ipnet::IpNet;

/// RFC 7239's header: one element per proxy (`for=…;proto=…;host=…`), comma-separated.
pub const FORWARDED: &str = "forwarded";
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
    /// `peer` is a trusted proxy that sent one; `None` from any other peer. A request with a
    /// `Forwarded` header is read by it alone: its first element's `host=` or `proto=`.
    pub fn forwarded<'h>(
        &self,
        peer: IpAddr,
        headers: &'h HeaderMap,
        name: &str,
    ) -> Option<&'h str> {
        if !self.trusts(peer) {
            return None;
        }
        if headers.contains_key(FORWARDED) {
            let parameter = match name {
                FORWARDED_HOST => "host",
                FORWARDED_PROTO => "proto",
                _ => return None,
            };
            return forwarded_elements(headers)
                .next()
                .and_then(|element| element_parameter(element, parameter));
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
        let hops: Vec<&str> = if headers.contains_key(FORWARDED) {
            // an element without `for=` is a hop of unknown address: the walk ends there
            forwarded_elements(headers)
                .map(|element| element_parameter(element, "for").unwrap_or(""))
                .collect()
        } else {
            headers
                .get_all(FORWARDED_FOR)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .collect()
        };
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

/// The elements of a request's `Forwarded` headers, in order: one per proxy.
fn forwarded_elements(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(FORWARDED)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
}

/// The value of `name` (`for`, `host`, `proto`; any case) in a `Forwarded` element
/// (`for=192.0.2.60;proto=https`), a quoted string unquoted; `None` when absent or empty.
fn element_parameter<'e>(element: &'e str, name: &str) -> Option<&'e str> {
    element.split(';').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        if !key.trim().eq_ignore_ascii_case(name) {
            return None;
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        (!value.is_empty()).then_some(value)
    })
}

/// One forwarded hop's address (an `X-Forwarded-For` entry or a `Forwarded` `for=` value) (`203.0.113.7`, `2001:db8::1`, with a port or in
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
    fn rfc_7239_forwarded_is_read_before_the_x_headers() {
        let p = proxies(&["10.0.0.0/8"]);
        let h = headers(&[
            (
                FORWARDED,
                r#"for=1.1.1.1, For="[2001:db8:cafe::17]:4711";proto=https;host="api.example.com""#,
            ),
            (FORWARDED, "for=10.0.0.2;by=10.0.0.1"),
            (FORWARDED_FOR, "198.51.100.5"),
            (FORWARDED_HOST, "x.example"),
        ]);
        assert_eq!(
            p.client_address(ip("10.0.0.1"), &h),
            ip("2001:db8:cafe::17")
        );
        // the first element's host and proto (the client's own words, as the first proxy
        // passed them on); none here
        assert_eq!(p.forwarded(ip("10.0.0.1"), &h, FORWARDED_HOST), None);
        let first = headers(&[(
            FORWARDED,
            "proto=https;host=api.example.com;for=203.0.113.9",
        )]);
        assert_eq!(
            p.forwarded(ip("10.0.0.1"), &first, FORWARDED_HOST),
            Some("api.example.com")
        );
        assert_eq!(
            p.forwarded(ip("10.0.0.1"), &first, FORWARDED_PROTO),
            Some("https")
        );
        assert_eq!(p.forwarded(ip("203.0.113.1"), &first, FORWARDED_HOST), None);
        // an obfuscated or unknown hop ends the walk at the proxy that named it
        let hidden = headers(&[(FORWARDED, "for=203.0.113.9, for=_hidden, for=10.0.0.3")]);
        assert_eq!(p.client_address(ip("10.0.0.1"), &hidden), ip("10.0.0.3"));
        // from an untrusted peer, nothing of it counts
        assert_eq!(p.client_address(ip("198.51.100.1"), &h), ip("198.51.100.1"));
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
