//! Address ranges as a policy's `private:` lists write them (`10.20.0.0/16`, `fd12:3456::/48`, a
//! bare address for that one address), and the checks that make such a range worth naming: it
//! lies inside one internal block of [`crate::ip`] and covers no cloud metadata address.
//!
//! Parsing is strict, like host patterns: canonical dotted-decimal IPv4, a prefix length in plain
//! decimal, no host bits set (`10.20.0.1/16` is refused, and the error says `10.20.0.0/16`).

use crate::ip::{InternalRange, METADATA_V4, METADATA_V6, internal_blocks, internal_range};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

/// One address range: a network address with no host bits set, and its prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    net: IpAddr,
    len: u8,
}

/// Why a range as written cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CidrError {
    /// Not `ADDRESS` or `ADDRESS/LENGTH`.
    Syntax(String),
    /// Host bits set; the range they probably meant.
    HostBits(Cidr),
}

impl Cidr {
    /// Parses `ADDRESS/LENGTH` or a bare `ADDRESS` (/32 or /128).
    pub fn parse(text: &str) -> Result<Cidr, CidrError> {
        let (addr_text, len_text) = match text.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (text, None),
        };
        let net: IpAddr = addr_text
            .parse()
            .map_err(|_| CidrError::Syntax(format!("`{addr_text}` is not an IP address")))?;
        if let IpAddr::V4(v4) = net
            && v4.to_string() != addr_text
        {
            return Err(CidrError::Syntax(format!(
                "IPv4 address `{addr_text}` must be written in canonical dotted-decimal form"
            )));
        }
        let max = if net.is_ipv4() { 32 } else { 128 };
        let len = match len_text {
            None => max,
            Some(l) => {
                let canonical = l.parse::<u8>().ok().filter(|n| n.to_string() == l);
                match canonical {
                    Some(n) if n <= max => n,
                    _ => {
                        return Err(CidrError::Syntax(format!(
                            "`/{l}` is not a prefix length (0 to {max})"
                        )));
                    }
                }
            }
        };
        let cidr = Cidr {
            net: mask(net, len),
            len,
        };
        if cidr.net != net {
            return Err(CidrError::HostBits(cidr));
        }
        Ok(cidr)
    }

    pub fn network(&self) -> IpAddr {
        self.net
    }

    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// True when `addr` is in the range. An IPv4-mapped IPv6 address (`::ffff:10.20.0.5`) is the
    /// IPv4 address it maps (dialling it reaches that address), so only IPv4 ranges contain it.
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = addr.to_canonical();
        addr.is_ipv4() == self.net.is_ipv4() && mask(addr, self.len) == self.net
    }

    /// True when every address of `other` is in this range (both of one family).
    pub fn covers(&self, other: &Cidr) -> bool {
        other.net.is_ipv4() == self.net.is_ipv4()
            && other.len >= self.len
            && mask(other.net, self.len) == self.net
    }

    /// The first cloud metadata address (as [`crate::ip`] lists them, with each IPv4 one also in its
    /// IPv4-mapped IPv6 form) the range covers.
    pub fn metadata_address(&self) -> Option<IpAddr> {
        let v4 = METADATA_V4.iter().map(|a| IpAddr::V4(*a));
        let mapped = METADATA_V4.iter().map(|a| IpAddr::V6(a.to_ipv6_mapped()));
        let v6 = METADATA_V6.iter().map(|a| IpAddr::V6(*a));
        // `contains` reads a mapped address as its IPv4, so compare in the range's own family.
        v4.chain(mapped)
            .chain(v6)
            .find(|a| a.is_ipv4() == self.net.is_ipv4() && mask(*a, self.len) == self.net)
    }

    /// The internal block the whole range lies inside, most specific first.
    pub fn block(&self) -> Option<(Cidr, InternalRange)> {
        internal_blocks()
            .map(|(net, len, range)| (Cidr { net, len }, range))
            .find(|(block, _)| block.covers(self))
    }

    /// Whether the range is worth naming as private: `Ok` with the internal block it lies in;
    /// otherwise the message and hint of why not.
    pub fn check_private(&self) -> Result<(Cidr, InternalRange), (String, String)> {
        if let Some(meta) = self.metadata_address() {
            return Err((
                format!("`{self}` covers {meta}, a cloud metadata address"),
                "metadata endpoints hand out the machine's cloud credentials and are never \
                 allowed by name; name a narrower range that leaves them out"
                    .into(),
            ));
        }
        if let Some(found) = self.block() {
            return Ok(found);
        }
        if internal_range(self.net).is_none() {
            return Err((
                format!("`{self}` is a public range"),
                "public addresses are allowed without `private`; list only the internal \
                 ranges this name resolves to, e.g. 10.20.0.0/16"
                    .into(),
            ));
        }
        let past = match Cidr::host(self.net).block() {
            Some((b, r)) => format!(" (it reaches past {b}, {r})"),
            None => String::new(),
        };
        Err((
            format!("`{self}` is not inside one internal range{past}"),
            format!(
                "a private range lies inside one of: {}; split a wider range",
                block_list()
            ),
        ))
    }

    /// The range of exactly `addr`.
    pub fn host(addr: IpAddr) -> Cidr {
        Cidr {
            net: addr,
            len: if addr.is_ipv4() { 32 } else { 128 },
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.len)
    }
}

/// The internal blocks, for hints.
fn block_list() -> String {
    internal_blocks()
        .map(|(net, len, _)| Cidr { net, len }.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => {
            let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & m))
        }
        IpAddr::V6(v6) => {
            let m = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6((u128::from(v6) & m).into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(text: &str) -> Cidr {
        Cidr::parse(text).unwrap()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn parses_ranges_and_bare_addresses() {
        for (text, shown) in [
            ("10.20.0.0/16", "10.20.0.0/16"),
            ("127.0.0.1", "127.0.0.1/32"),
            ("::1", "::1/128"),
            ("fd12:3456:0::/48", "fd12:3456::/48"),
            ("0.0.0.0/0", "0.0.0.0/0"),
            ("::/0", "::/0"),
        ] {
            assert_eq!(cidr(text).to_string(), shown, "{text}");
        }
    }

    #[test]
    fn refuses_what_is_not_a_range() {
        for text in [
            "",
            "10.20.0.0/",
            "10.20.0.0/33",
            "::/129",
            "10.20.0.0/016",
            "10.20.0.0/+16",
            "10.020.0.0/16",
            "10.20/16",
            "registry.corp.example",
            "[::1]",
            "fe80::1%eth0",
            "10.20.0.0/16/8",
            " 10.20.0.0/16",
        ] {
            assert!(
                matches!(Cidr::parse(text), Err(CidrError::Syntax(_))),
                "{text:?}"
            );
        }
    }

    #[test]
    fn host_bits_give_the_normalised_range() {
        assert_eq!(
            Cidr::parse("10.20.0.1/16"),
            Err(CidrError::HostBits(cidr("10.20.0.0/16")))
        );
        assert_eq!(
            Cidr::parse("fd12::1/64"),
            Err(CidrError::HostBits(cidr("fd12::/64")))
        );
    }

    #[test]
    fn containment() {
        let r = cidr("10.20.0.0/16");
        assert!(r.contains(ip("10.20.0.0")));
        assert!(r.contains(ip("10.20.255.255")));
        assert!(!r.contains(ip("10.21.0.0")));
        assert!(!r.contains(ip("10.19.255.255")));
        // The mapped form of an address inside is that address; other IPv6 forms are not.
        assert!(r.contains(ip("::ffff:10.20.0.5")));
        assert!(!r.contains(ip("64:ff9b::a14:5")));
        assert!(!r.contains(ip("::a14:5")));
        assert!(cidr("::/0").contains(ip("fd00::1")));
        // Mapped addresses are matched by IPv4 ranges only.
        assert!(!cidr("::/0").contains(ip("10.0.0.1")));
        assert!(!cidr("::/0").contains(ip("::ffff:10.0.0.1")));
        assert!(cidr("127.0.0.1").contains(ip("127.0.0.1")));
        assert!(!cidr("127.0.0.1").contains(ip("127.0.0.2")));
        assert!(r.covers(&cidr("10.20.1.0/24")));
        assert!(r.covers(&r));
        assert!(!r.covers(&cidr("10.0.0.0/8")));
        assert!(!r.covers(&cidr("10.21.0.0/24")));
        assert!(!r.covers(&cidr("fd00::/8")));
    }

    #[test]
    fn private_check() {
        let ok = |t: &str| {
            cidr(t)
                .check_private()
                .map(|(b, r)| (b.to_string(), r.label()))
        };
        assert_eq!(ok("10.20.0.0/16"), Ok(("10.0.0.0/8".into(), "private")));
        assert_eq!(ok("127.0.0.0/8"), Ok(("127.0.0.0/8".into(), "loopback")));
        assert_eq!(ok("::1"), Ok(("::1/128".into(), "loopback")));
        assert_eq!(
            ok("192.0.2.0/24"),
            Ok(("192.0.2.0/24".into(), "documentation"))
        );
        assert_eq!(
            ok("fd12:3456::/48"),
            Ok(("fc00::/7".into(), "unique-local"))
        );
        assert_eq!(ok("100.64.0.0/16"), Ok(("100.64.0.0/10".into(), "cgnat")));
        // Oracle's metadata address is inside 192.0.0.0/24; a /25 that leaves it out is fine.
        assert_eq!(
            ok("192.0.0.0/25"),
            Ok(("192.0.0.0/24".into(), "ietf-protocol"))
        );

        let err = |t: &str| cidr(t).check_private().unwrap_err().0;
        for (range, meta) in [
            ("169.254.0.0/16", "169.254.169.254"),
            ("169.254.170.2", "169.254.170.2"),
            ("100.64.0.0/10", "100.100.100.200"),
            ("192.0.0.0/24", "192.0.0.192"),
            ("168.63.129.16", "168.63.129.16"),
            ("fd00::/8", "fd00:ec2::254"),
            ("fc00::/7", "fd00:ec2::254"),
            ("::ffff:0:0/96", "::ffff:169.254.169.254"),
            ("0.0.0.0/0", "169.254.169.254"),
            ("::/0", "::ffff:169.254.169.254"),
        ] {
            let message = err(range);
            assert!(message.contains(meta), "{range}: {message}");
            assert!(message.contains("metadata"), "{range}: {message}");
        }
        assert!(err("8.8.8.0/24").contains("public range"));
        assert!(err("2606:4700::/32").contains("public range"));
        assert_eq!(
            err("10.0.0.0/7"),
            "`10.0.0.0/7` is not inside one internal range (it reaches past 10.0.0.0/8, private)"
        );
        assert!(err("224.0.0.0/3").contains("not inside one internal range"));
        // IPv4 hidden in IPv6 is named by its IPv4.
        assert!(err("::ffff:10.0.0.0/104").contains("not inside one internal range"));
    }
}
