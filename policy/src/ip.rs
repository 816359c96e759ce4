//! The internal-address classifier: which IP addresses fenzi refuses to dial unless the policy names
//! that exact IP literal. Covers IPv4 special ranges and IPv4 hidden inside IPv6 forms.
//!
//! The rule is deny by default for anything that is not ordinary public unicast: a name that resolves
//! to one of these addresses is `private_address`, whatever the name was.
//!
//! | range | [`InternalRange`] | what it is |
//! |---|---|---|
//! | 169.254.169.254, 169.254.170.2, 100.100.100.200, 192.0.0.192, 168.63.129.16, fd00:ec2::254 | `Metadata` | cloud instance metadata (AWS/GCP/Azure, ECS task, Alibaba, Oracle, Azure WireServer, AWS IPv6) |
//! | 0.0.0.0/8 | `Unspecified` | "this network"; 0.0.0.0 reaches the local host on Linux |
//! | 127.0.0.0/8 | `Loopback` | |
//! | 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 | `Private` | RFC 1918 |
//! | 100.64.0.0/10 | `Cgnat` | shared address space, RFC 6598 |
//! | 169.254.0.0/16 | `LinkLocal` | |
//! | 192.0.0.0/24 | `IetfProtocol` | IETF protocol assignments |
//! | 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24 | `Documentation` | TEST-NET-1/2/3 |
//! | 192.88.99.0/24 | `Relay6to4` | deprecated 6to4 relay anycast |
//! | 198.18.0.0/15 | `Benchmarking` | |
//! | 224.0.0.0/4 | `Multicast` | |
//! | 255.255.255.255 | `Broadcast` | limited broadcast |
//! | 240.0.0.0/4 | `Reserved` | class E |
//! | :: | `Unspecified` | |
//! | ::1 | `Loopback` | |
//! | ::ffff:0:0/96 (mapped), ::ffff:0:0:0/96 (translated) | the embedded IPv4's | decided entirely by the IPv4 |
//! | ::/96 (IPv4-compatible, deprecated) | the embedded IPv4's, else `Reserved` | always internal |
//! | 64:ff9b::/96 (NAT64) | the embedded IPv4's | public when the IPv4 is |
//! | 64:ff9b:1::/48 (local-use NAT64) | the IPv4 in the last 32 bits, else `Reserved` | `Reserved` unless shaped like a /96 prefix |
//! | 2002::/16 (6to4) | the IPv4 in bits 16..48 | public when the IPv4 is |
//! | 2001::/32 (Teredo) | server (bits 32..64) or client (last 32 bits inverted) IPv4 | public when both are |
//! | 2001:2::/48 | `Benchmarking` | |
//! | 2001::/23 (other) | `IetfProtocol` | |
//! | 2001:db8::/32, 3fff::/20 | `Documentation` | |
//! | 100::/64 | `Discard` | discard-only prefix |
//! | 5f00::/16 | `Srv6` | SRv6 SIDs |
//! | fc00::/7 | `UniqueLocal` | |
//! | fe80::/10 | `LinkLocal` | |
//! | fec0::/10 | `SiteLocal` | deprecated site-local |
//! | ff00::/8 | `Multicast` | |
//! | anything else outside 2000::/3 | `Reserved` | not allocated as global unicast |

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address counts as internal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InternalRange {
    /// 0.0.0.0/8 ("this network") and `::`.
    Unspecified,
    /// 127.0.0.0/8 and `::1`.
    Loopback,
    /// RFC 1918: 10/8, 172.16/12, 192.168/16.
    Private,
    /// 100.64.0.0/10, carrier-grade NAT shared space.
    Cgnat,
    /// 169.254.0.0/16 and fe80::/10.
    LinkLocal,
    /// A cloud instance-metadata endpoint.
    Metadata,
    /// 192.0.0.0/24 and 2001::/23 (other than Teredo and benchmarking).
    IetfProtocol,
    /// TEST-NET-1/2/3, 2001:db8::/32, 3fff::/20.
    Documentation,
    /// 198.18.0.0/15 and 2001:2::/48.
    Benchmarking,
    /// 224.0.0.0/4 and ff00::/8.
    Multicast,
    /// 240.0.0.0/4, IPv4-compatible IPv6, and IPv6 outside 2000::/3 with no more specific entry.
    Reserved,
    /// 255.255.255.255.
    Broadcast,
    /// 192.88.99.0/24, the deprecated 6to4 relay anycast prefix.
    Relay6to4,
    /// fec0::/10, deprecated site-local.
    SiteLocal,
    /// fc00::/7.
    UniqueLocal,
    /// 100::/64, discard-only.
    Discard,
    /// 5f00::/16, SRv6 SIDs.
    Srv6,
}

impl InternalRange {
    /// Short stable name, as used in the audit log, messages and test tables.
    pub fn label(self) -> &'static str {
        match self {
            InternalRange::Unspecified => "unspecified",
            InternalRange::Loopback => "loopback",
            InternalRange::Private => "private",
            InternalRange::Cgnat => "cgnat",
            InternalRange::LinkLocal => "link-local",
            InternalRange::Metadata => "metadata",
            InternalRange::IetfProtocol => "ietf-protocol",
            InternalRange::Documentation => "documentation",
            InternalRange::Benchmarking => "benchmarking",
            InternalRange::Multicast => "multicast",
            InternalRange::Reserved => "reserved",
            InternalRange::Broadcast => "broadcast",
            InternalRange::Relay6to4 => "6to4-relay",
            InternalRange::SiteLocal => "site-local",
            InternalRange::UniqueLocal => "unique-local",
            InternalRange::Discard => "discard",
            InternalRange::Srv6 => "srv6",
        }
    }
}

impl fmt::Display for InternalRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// `None` for a public, dialable address; otherwise the range that makes it internal.
pub fn internal_range(addr: IpAddr) -> Option<InternalRange> {
    match addr {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => internal_v6(v6),
    }
}

/// Cloud metadata endpoints. They sit inside ranges that are internal anyway (except Azure's
/// WireServer, a public-looking address only reachable from inside Azure); naming them separately
/// makes denials say what was at stake.
pub const METADATA_V4: [Ipv4Addr; 5] = [
    Ipv4Addr::new(169, 254, 169, 254), // AWS, GCP, Azure, DigitalOcean, ... IMDS
    Ipv4Addr::new(169, 254, 170, 2),   // AWS ECS task metadata / credentials
    Ipv4Addr::new(100, 100, 100, 200), // Alibaba Cloud
    Ipv4Addr::new(192, 0, 0, 192),     // Oracle Cloud
    Ipv4Addr::new(168, 63, 129, 16),   // Azure WireServer
];
pub const METADATA_V6: [Ipv6Addr; 1] = [
    Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254), // AWS IMDS over IPv6
];

/// True when `addr` is inside `net/len` (both as integers).
fn in_v4(addr: u32, net: [u8; 4], len: u32) -> bool {
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    addr & mask == u32::from_be_bytes(net) & mask
}

fn in_v6(addr: u128, net: Ipv6Addr, len: u32) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    addr & mask == u128::from(net) & mask
}

// Most specific first: 255.255.255.255 sits inside 240/4.
const V4_TABLE: &[([u8; 4], u32, InternalRange)] = &[
    ([0, 0, 0, 0], 8, InternalRange::Unspecified),
    ([10, 0, 0, 0], 8, InternalRange::Private),
    ([100, 64, 0, 0], 10, InternalRange::Cgnat),
    ([127, 0, 0, 0], 8, InternalRange::Loopback),
    ([169, 254, 0, 0], 16, InternalRange::LinkLocal),
    ([172, 16, 0, 0], 12, InternalRange::Private),
    ([192, 0, 0, 0], 24, InternalRange::IetfProtocol),
    ([192, 0, 2, 0], 24, InternalRange::Documentation),
    ([192, 88, 99, 0], 24, InternalRange::Relay6to4),
    ([192, 168, 0, 0], 16, InternalRange::Private),
    ([198, 18, 0, 0], 15, InternalRange::Benchmarking),
    ([198, 51, 100, 0], 24, InternalRange::Documentation),
    ([203, 0, 113, 0], 24, InternalRange::Documentation),
    ([224, 0, 0, 0], 4, InternalRange::Multicast),
    ([255, 255, 255, 255], 32, InternalRange::Broadcast),
    ([240, 0, 0, 0], 4, InternalRange::Reserved),
];

fn internal_v4(addr: Ipv4Addr) -> Option<InternalRange> {
    use InternalRange::*;
    if METADATA_V4.contains(&addr) {
        return Some(Metadata);
    }
    let a = u32::from(addr);
    V4_TABLE
        .iter()
        .find(|(net, len, _)| in_v4(a, *net, *len))
        .map(|(_, _, range)| *range)
}

/// Where an IPv6 address carries IPv4 addresses, and how much they decide.
enum Embedding {
    /// Not an IPv4-carrying form.
    None,
    /// Mapped or translated: the IPv4 alone decides.
    Entire(Ipv4Addr),
    /// IPv4-compatible (deprecated): internal whatever the IPv4 is.
    Compatible(Ipv4Addr),
    /// Local-use NAT64 not shaped like a /96: where the IPv4 sits is the site's choice.
    OpaqueLocalNat64,
    /// NAT64 (/96), 6to4, Teredo: internal when any carried IPv4 is, public otherwise.
    Carried(Vec<Ipv4Addr>),
}

fn v4_at(bits: u128, shift: u32) -> Ipv4Addr {
    Ipv4Addr::from((bits >> shift) as u32)
}

fn embedding(addr: Ipv6Addr) -> Embedding {
    let a = u128::from(addr);
    let low32 = v4_at(a, 0);
    if in_v6(a, Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96)
        || in_v6(a, Ipv6Addr::new(0, 0, 0, 0, 0xffff, 0, 0, 0), 96)
    {
        return Embedding::Entire(low32);
    }
    if a >> 32 == 0 {
        // `::` and `::1` are their own ranges, not compatible addresses.
        return if a <= 1 {
            Embedding::None
        } else {
            Embedding::Compatible(low32)
        };
    }
    if in_v6(a, Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96) {
        return Embedding::Carried(vec![low32]);
    }
    if in_v6(a, Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48) {
        // RFC 8215 lets a site pick any RFC 6052 prefix length inside the /48; only the /96 shape
        // (bits 48..96 zero) says unambiguously where the IPv4 is.
        return if (a >> 32) & ((1u128 << 48) - 1) == 0 {
            Embedding::Carried(vec![low32])
        } else {
            Embedding::OpaqueLocalNat64
        };
    }
    if in_v6(a, Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16) {
        return Embedding::Carried(vec![v4_at(a, 80)]);
    }
    if in_v6(a, Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32) {
        // Teredo: server IPv4 in bits 32..64, client IPv4 obfuscated (inverted) in the last 32 bits.
        let server = v4_at(a, 64);
        let client = Ipv4Addr::from(!u32::from(low32));
        return Embedding::Carried(vec![server, client]);
    }
    Embedding::None
}

/// The IPv4 addresses an IPv6 address carries: IPv4-mapped, IPv4-translated, IPv4-compatible,
/// NAT64 (64:ff9b::/96 and /96-shaped local-use 64:ff9b:1::/48), 6to4 and Teredo (server, then client).
/// Empty for every other address.
pub fn embedded_ipv4(addr: Ipv6Addr) -> Vec<Ipv4Addr> {
    match embedding(addr) {
        Embedding::None | Embedding::OpaqueLocalNat64 => Vec::new(),
        Embedding::Entire(v4) | Embedding::Compatible(v4) => vec![v4],
        Embedding::Carried(v4s) => v4s,
    }
}

const fn v6(s0: u16, s1: u16, s2: u16, s3: u16) -> Ipv6Addr {
    Ipv6Addr::new(s0, s1, s2, s3, 0, 0, 0, 0)
}

// Most specific first: 2001:2::/48 inside 2001::/23, 100::/64 and 5f00::/16 outside 2000::/3.
const V6_TABLE: &[(Ipv6Addr, u32, InternalRange)] = &[
    (v6(0x2001, 0x2, 0, 0), 48, InternalRange::Benchmarking),
    (v6(0x2001, 0, 0, 0), 23, InternalRange::IetfProtocol),
    (v6(0x2001, 0xdb8, 0, 0), 32, InternalRange::Documentation),
    (v6(0x3fff, 0, 0, 0), 20, InternalRange::Documentation),
    (v6(0x100, 0, 0, 0), 64, InternalRange::Discard),
    (v6(0x5f00, 0, 0, 0), 16, InternalRange::Srv6),
    (v6(0xfc00, 0, 0, 0), 7, InternalRange::UniqueLocal),
    (v6(0xfe80, 0, 0, 0), 10, InternalRange::LinkLocal),
    (v6(0xfec0, 0, 0, 0), 10, InternalRange::SiteLocal),
    (v6(0xff00, 0, 0, 0), 8, InternalRange::Multicast),
    // Only 2000::/3 is allocated as global unicast; everything else is reserved by the IETF.
    (v6(0x2000, 0, 0, 0), 3, InternalRange::Reserved),
];

/// The internal blocks a `private:` range of the policy may lie inside, most specific first:
/// every row of the tables above as (network, prefix length, range), plus `::/128` and `::1/128`,
/// but not 2000::/3 (the one allowed IPv6 block) nor the IPv4-carrying IPv6 forms (a resolver
/// answers with the IPv4 itself). Metadata addresses sit inside some of these blocks; callers
/// that name ranges check them separately.
pub fn internal_blocks() -> impl Iterator<Item = (IpAddr, u8, InternalRange)> {
    let v4 = V4_TABLE
        .iter()
        .map(|&(net, len, range)| (IpAddr::from(net), len as u8, range));
    let singles = [
        (
            IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            128,
            InternalRange::Unspecified,
        ),
        (
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            128,
            InternalRange::Loopback,
        ),
    ];
    let v6 = V6_TABLE
        .iter()
        .filter(|(_, _, range)| *range != InternalRange::Reserved)
        .map(|&(net, len, range)| (IpAddr::V6(net), len as u8, range));
    v4.chain(singles).chain(v6)
}

fn internal_v6(addr: Ipv6Addr) -> Option<InternalRange> {
    use InternalRange::*;
    let a = u128::from(addr);
    if a == 0 {
        return Some(Unspecified);
    }
    if a == 1 {
        return Some(Loopback);
    }
    if METADATA_V6.contains(&addr) {
        return Some(Metadata);
    }
    match embedding(addr) {
        Embedding::Entire(v4) => return internal_v4(v4),
        Embedding::Compatible(v4) => return Some(internal_v4(v4).unwrap_or(Reserved)),
        Embedding::OpaqueLocalNat64 => return Some(Reserved),
        Embedding::Carried(v4s) => return v4s.into_iter().find_map(internal_v4),
        Embedding::None => {}
    }
    for &(net, len, range) in V6_TABLE {
        if in_v6(a, net, len) {
            // The last row is the one allowed block, not an internal one.
            return (range != Reserved).then_some(range);
        }
    }
    Some(Reserved)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(text: &str) -> Option<&'static str> {
        internal_range(text.parse().unwrap()).map(InternalRange::label)
    }

    #[test]
    fn v4_edges() {
        assert_eq!(range("172.15.255.255"), None);
        assert_eq!(range("172.16.0.0"), Some("private"));
        assert_eq!(range("172.31.255.255"), Some("private"));
        assert_eq!(range("172.32.0.0"), None);
        assert_eq!(range("100.63.255.255"), None);
        assert_eq!(range("100.127.255.255"), Some("cgnat"));
        assert_eq!(range("100.128.0.0"), None);
        assert_eq!(range("255.255.255.255"), Some("broadcast"));
        assert_eq!(range("255.255.255.254"), Some("reserved"));
        assert_eq!(range("8.8.8.8"), None);
        assert_eq!(range("169.254.169.254"), Some("metadata"));
    }

    #[test]
    fn v6_forms() {
        assert_eq!(range("::ffff:8.8.8.8"), None);
        assert_eq!(range("::ffff:127.0.0.1"), Some("loopback"));
        assert_eq!(range("::8.8.8.8"), Some("reserved"));
        assert_eq!(range("64:ff9b::a00:1"), Some("private"));
        assert_eq!(range("64:ff9b::808:808"), None);
        assert_eq!(range("2002:7f00:1::"), Some("loopback"));
        assert_eq!(range("2002:808:808::1"), None);
        assert_eq!(range("2606:4700::1111"), None);
        assert_eq!(range("fd00:ec2::254"), Some("metadata"));
        assert_eq!(range("2001:db8::1"), Some("documentation"));
        assert_eq!(range("4000::1"), Some("reserved"));
    }

    #[test]
    fn teredo_both_ends() {
        // server 65.54.227.120, client 192.0.2.45 inverted: documentation.
        assert_eq!(
            range("2001:0:4136:e378:8000:63bf:3fff:fdd2"),
            Some("documentation")
        );
        let addr: Ipv6Addr = "2001:0:4136:e378:8000:63bf:3fff:fdd2".parse().unwrap();
        assert_eq!(
            embedded_ipv4(addr),
            vec![
                Ipv4Addr::new(65, 54, 227, 120),
                Ipv4Addr::new(192, 0, 2, 45)
            ]
        );
    }

    #[test]
    fn labels_display() {
        assert_eq!(InternalRange::Relay6to4.to_string(), "6to4-relay");
        assert_eq!(InternalRange::LinkLocal.label(), "link-local");
    }
}
