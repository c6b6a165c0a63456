//! The SSRF guard of every outbound fetch whose URL comes from outside (the web fallback's
//! result pages, URL sources of ingestion): which network addresses may be connected to.
//!
//! Every host is resolved *before* any connection and the request is then pinned to exactly
//! the addresses that were checked (so a DNS answer cannot change between the check and the
//! connection). A URL is refused when any of its addresses is
//!
//! - IPv4: unspecified / "this network" (`0.0.0.0/8`), loopback (`127.0.0.0/8`), private
//!   (`10/8`, `172.16/12`, `192.168/16`), shared carrier-grade NAT (`100.64/10`), link-local
//!   (`169.254/16`, the cloud metadata address among them), IETF protocol assignments
//!   (`192.0.0/24`), documentation (`192.0.2/24`, `198.51.100/24`, `203.0.113/24`),
//!   benchmarking (`198.18/15`), the 6to4 relay anycast (`192.88.99/24`), multicast (`224/4`),
//!   reserved (`240/4`) or broadcast;
//! - IPv6: unspecified (`::`), loopback (`::1`), unique-local (`fc00::/7`), link-local
//!   (`fe80::/10`), deprecated site-local (`fec0::/10`), multicast (`ff00::/8`),
//!   documentation (`2001:db8::/32`), Teredo (`2001::/32`), local-use NAT64 (`64:ff9b:1::/48`),
//!   and any IPv4 address embedded as IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible
//!   (`::a.b.c.d`), NAT64 (`64:ff9b::/96`) or 6to4 (`2002:AABB:CCDD::/48`) that the IPv4 rules
//!   refuse;
//!
//! unless that exact socket address (IP *and* port) is exempt: for the web fallback, one the
//! configured search endpoint itself resolves to — so a SearxNG running on the same machine or
//! network works, while a page on another local port or another private host is never fetched;
//! for ingestion, none (tests exempt their loopback server's address in code, never through
//! configuration).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use reqwest::Url;

use super::WebError;
use crate::load::redact_userinfo;

/// Why an address is not public, or `None` when it is.
pub fn non_public_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_reason(v4),
        IpAddr::V6(v6) => v6_reason(v6),
    }
}

fn v4_reason(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, _, _] = ip.octets();
    if ip.is_unspecified() || a == 0 {
        Some("unspecified address")
    } else if ip.is_loopback() {
        Some("loopback address")
    } else if ip.is_private() {
        Some("private address")
    } else if a == 100 && (64..128).contains(&b) {
        Some("shared (carrier-grade NAT) address")
    } else if ip.is_link_local() {
        Some("link-local address")
    } else if a == 198 && (b == 18 || b == 19) {
        Some("benchmarking address")
    } else if (a, b, ip.octets()[2]) == (192, 0, 0) {
        Some("IETF protocol assignment address")
    } else if matches!(
        (a, b, ip.octets()[2]),
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113)
    ) {
        Some("documentation address")
    } else if (a, b, ip.octets()[2]) == (192, 88, 99) {
        Some("6to4 relay anycast address")
    } else if ip.is_multicast() {
        Some("multicast address")
    } else if ip.is_broadcast() {
        Some("broadcast address")
    } else if a >= 240 {
        Some("reserved address")
    } else {
        None
    }
}

fn v6_reason(ip: Ipv6Addr) -> Option<&'static str> {
    let segments = ip.segments();
    if ip.is_unspecified() {
        return Some("unspecified address");
    }
    if ip.is_loopback() {
        return Some("loopback address");
    }
    if let Some(v4) = ip.to_ipv4_mapped() {
        return v4_reason(v4);
    }
    // IPv4-compatible (deprecated, ::a.b.c.d) and NAT64 (64:ff9b::/96) embed an IPv4 address.
    let embeds_v4 = segments[..6].iter().all(|&s| s == 0)
        || (segments[0] == 0x64 && segments[1] == 0xff9b && segments[2..6].iter().all(|&s| s == 0));
    if embeds_v4 {
        let [.., hi, lo] = segments;
        let v4 = Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
        return v4_reason(v4);
    }
    // 6to4 (2002::/16) embeds the IPv4 address of its relay in the next 32 bits.
    if segments[0] == 0x2002 {
        let [_, hi, lo, ..] = segments;
        let v4 = Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
        return v4_reason(v4).map(|_| "6to4 address embedding a non-public IPv4 address");
    }
    if segments[0] == 0x64 && segments[1] == 0xff9b && segments[2] == 1 {
        return Some("local-use NAT64 address");
    }
    if segments[0] == 0x2001 && segments[1] == 0x0db8 {
        return Some("documentation address");
    }
    if segments[0] == 0x2001 && segments[1] == 0 {
        return Some("Teredo tunnelling address");
    }
    match segments[0] {
        s if s & 0xfe00 == 0xfc00 => Some("unique-local (private) address"),
        s if s & 0xffc0 == 0xfe80 => Some("link-local address"),
        s if s & 0xffc0 == 0xfec0 => Some("site-local address"),
        s if s & 0xff00 == 0xff00 => Some("multicast address"),
        _ => None,
    }
}

/// The host of `url` as the resolver and the pinning need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlHost {
    Ip(IpAddr),
    Domain(String),
}

/// Checks URLs against the address rules, with exact socket addresses exempt (the search
/// endpoint's own addresses for the web fallback; none for ingestion).
#[derive(Debug, Clone)]
pub struct AddressGuard {
    /// Whose addresses are exempt, resolved when first needed.
    endpoint: Option<Url>,
    /// Socket addresses exempt as given.
    exempt: Vec<SocketAddr>,
    resolve_timeout: Duration,
    /// Who is refused, for the message ("the web fallback", "URL ingestion").
    purpose: &'static str,
}

/// A URL whose addresses passed the guard: connect to these and nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedTarget {
    pub host: UrlHost,
    pub addrs: Vec<SocketAddr>,
}

/// The host and port of an http(s) URL.
pub fn host_and_port(url: &Url) -> Result<(UrlHost, u16), WebError> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(WebError::Refused {
            url: url.to_string(),
            reason: format!("the scheme `{}` is not http or https", url.scheme()),
        });
    }
    let port = url
        .port_or_known_default()
        .ok_or_else(|| WebError::Refused {
            url: url.to_string(),
            reason: "the URL has no port and its scheme has no default".into(),
        })?;
    // The URL parser has already normalised IPv4 spellings (`0x7f.1`, `2130706433`) to the
    // dotted form and wrapped IPv6 literals in brackets.
    let raw = url.host_str().ok_or_else(|| WebError::Refused {
        url: url.to_string(),
        reason: "the URL has no host".into(),
    })?;
    let unbracketed = raw.trim_start_matches('[').trim_end_matches(']');
    let host = match unbracketed.parse::<IpAddr>() {
        Ok(ip) => UrlHost::Ip(ip),
        Err(_) => UrlHost::Domain(raw.to_ascii_lowercase()),
    };
    Ok((host, port))
}

impl AddressGuard {
    /// A guard exempting the addresses of `endpoint` (the configured search endpoint).
    pub fn new(endpoint: Url, resolve_timeout: Duration) -> Self {
        Self {
            endpoint: Some(endpoint),
            exempt: Vec::new(),
            resolve_timeout,
            purpose: "the web fallback",
        }
    }

    /// A guard exempting nothing: public addresses only. `purpose` names the caller in
    /// refusals ("URL ingestion").
    pub fn public_only(resolve_timeout: Duration, purpose: &'static str) -> Self {
        Self {
            endpoint: None,
            exempt: Vec::new(),
            resolve_timeout,
            purpose,
        }
    }

    /// Exempts these exact socket addresses (IP and port) too.
    pub fn with_exempt(mut self, addrs: impl IntoIterator<Item = SocketAddr>) -> Self {
        self.exempt.extend(addrs);
        self
    }

    async fn resolve(&self, url: &Url) -> Result<CheckedTarget, WebError> {
        let (host, port) = host_and_port(url)?;
        let addrs = match &host {
            UrlHost::Ip(ip) => vec![SocketAddr::new(*ip, port)],
            UrlHost::Domain(domain) => {
                let lookup = tokio::net::lookup_host((domain.as_str(), port));
                let found = tokio::time::timeout(self.resolve_timeout, lookup)
                    .await
                    .map_err(|_| WebError::Download {
                        url: url.to_string(),
                        reason: format!(
                            "resolving {domain} took longer than {} ms",
                            self.resolve_timeout.as_millis()
                        ),
                    })?
                    .map_err(|e| WebError::Download {
                        url: url.to_string(),
                        reason: format!("cannot resolve {domain}: {e}"),
                    })?;
                let mut addrs: Vec<SocketAddr> = found.collect();
                addrs.sort();
                addrs.dedup();
                addrs
            }
        };
        if addrs.is_empty() {
            return Err(WebError::Download {
                url: url.to_string(),
                reason: "the host resolved to no address".into(),
            });
        }
        Ok(CheckedTarget { host, addrs })
    }

    /// Resolves `url` and checks every address: the target to pin the connection to, or
    /// [`WebError::Refused`] naming the first refused address and why.
    pub async fn check(&self, url: &Url) -> Result<CheckedTarget, WebError> {
        let target = self.resolve(url).await?;
        let mut exempt: Option<Vec<SocketAddr>> = None;
        for addr in &target.addrs {
            let Some(reason) = non_public_reason(addr.ip()) else {
                continue;
            };
            if self.exempt.contains(addr) {
                continue;
            }
            if exempt.is_none() {
                // Resolved only when needed: most URLs are public.
                exempt = Some(match &self.endpoint {
                    Some(endpoint) => match self.resolve(endpoint).await {
                        Ok(endpoint) => endpoint.addrs,
                        Err(_) => Vec::new(),
                    },
                    None => Vec::new(),
                });
            }
            if exempt.as_ref().is_some_and(|e| e.contains(addr)) {
                continue;
            }
            let shown = redact_userinfo(url.as_str());
            tracing::warn!(url = %shown, address = %addr, reason, purpose = self.purpose, "refused a non-public address");
            let only = match self.endpoint {
                Some(_) => "public addresses (or to the configured search endpoint itself)",
                None => "public addresses",
            };
            return Err(WebError::Refused {
                url: shown,
                reason: format!(
                    "{addr} is a {reason}; {} only connects to {only}",
                    self.purpose
                ),
            });
        }
        Ok(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(ip: &str) -> bool {
        non_public_reason(ip.parse().unwrap()).is_some()
    }

    #[test]
    fn non_public_v4_and_v6_addresses_are_recognised() {
        for ip in [
            "127.0.0.1",
            "127.8.9.10",
            "10.0.0.1",
            "10.255.255.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "0.1.2.3",
            "100.64.0.1",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "240.0.0.1",
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "198.18.0.1",
            "198.19.255.254",
            "192.0.0.8",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.9",
            "192.88.99.1",
            "2002:7f00:1::1",
            "2002:a9fe:a9fe::1",
            "2002:c612:1::",
            "64:ff9b:1::a00:1",
            "2001:db8::1",
            "2001:0:4136:e378::1",
            "::ffff:198.18.0.1",
            "::ffff:100.64.0.1",
        ] {
            assert!(refused(ip), "{ip} should be refused");
        }
        for ip in [
            "93.184.216.34",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "192.169.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "198.20.0.1",
            "2002:808:808::1",
        ] {
            assert!(!refused(ip), "{ip} should be allowed");
        }
    }

    #[test]
    fn hosts_are_read_after_url_normalisation() {
        let host = |u: &str| host_and_port(&Url::parse(u).unwrap()).unwrap();
        assert_eq!(
            host("http://0x7f.1:8080/x"),
            (UrlHost::Ip("127.0.0.1".parse().unwrap()), 8080)
        );
        assert_eq!(
            host("http://2130706433/"),
            (UrlHost::Ip("127.0.0.1".parse().unwrap()), 80)
        );
        assert_eq!(
            host("https://[::1]/"),
            (UrlHost::Ip("::1".parse().unwrap()), 443)
        );
        assert_eq!(
            host("https://Example.COM/a"),
            (UrlHost::Domain("example.com".into()), 443)
        );
        let err = host_and_port(&Url::parse("file:///etc/passwd").unwrap()).unwrap_err();
        assert!(err.to_string().contains("not http or https"), "{err}");
    }

    #[tokio::test]
    async fn only_the_endpoint_socket_address_is_exempt() {
        let guard = AddressGuard::new(
            Url::parse("http://127.0.0.1:8888").unwrap(),
            Duration::from_secs(2),
        );
        let ok = guard
            .check(&Url::parse("http://127.0.0.1:8888/page.html").unwrap())
            .await
            .unwrap();
        assert_eq!(ok.addrs, vec!["127.0.0.1:8888".parse().unwrap()]);
        for url in [
            "http://127.0.0.1:8889/page.html",
            "http://10.0.0.7/admin",
            "http://[::1]:8888/",
            "http://169.254.169.254/latest/meta-data/",
            "http://localhost:9/",
        ] {
            let err = guard.check(&Url::parse(url).unwrap()).await.unwrap_err();
            assert!(matches!(err, WebError::Refused { .. }), "{url}: {err}");
        }
        let public = guard
            .check(&Url::parse("http://93.184.216.34/").unwrap())
            .await
            .unwrap();
        assert_eq!(public.addrs.len(), 1);
    }

    #[tokio::test]
    async fn a_public_only_guard_exempts_exactly_the_given_socket_addresses() {
        let guard = AddressGuard::public_only(Duration::from_secs(2), "URL ingestion");
        let err = guard
            .check(&Url::parse("http://user:secret@127.0.0.1:8888/x").unwrap())
            .await
            .unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("URL ingestion only connects to public addresses"),
            "{message}"
        );
        assert!(!message.contains("secret"), "{message}");
        let guard = guard.with_exempt(["127.0.0.1:8888".parse().unwrap()]);
        guard
            .check(&Url::parse("http://127.0.0.1:8888/x").unwrap())
            .await
            .unwrap();
        for url in ["http://127.0.0.1:8889/x", "http://[::1]:8888/x"] {
            let err = guard.check(&Url::parse(url).unwrap()).await.unwrap_err();
            assert!(matches!(err, WebError::Refused { .. }), "{url}: {err}");
        }
    }
}
