//! Property tests for host parsing, patterns and the internal-address classifier: the rules that must
//! hold for every input, not just the table rows in `testdata/hosts/`.

use fenzi_policy::host::{Host, HostMatcher, HostPattern, split_authority};
use fenzi_policy::ip::{embedded_ipv4, internal_range};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Internal IPv4 blocks (network, prefix length) that every embedding must keep internal.
const INTERNAL_V4: &[([u8; 4], u32)] = &[
    ([0, 0, 0, 0], 8),
    ([10, 0, 0, 0], 8),
    ([100, 64, 0, 0], 10),
    ([127, 0, 0, 0], 8),
    ([169, 254, 0, 0], 16),
    ([172, 16, 0, 0], 12),
    ([192, 0, 0, 0], 24),
    ([192, 0, 2, 0], 24),
    ([192, 88, 99, 0], 24),
    ([192, 168, 0, 0], 16),
    ([198, 18, 0, 0], 15),
    ([198, 51, 100, 0], 24),
    ([203, 0, 113, 0], 24),
    ([224, 0, 0, 0], 4),
    ([240, 0, 0, 0], 4),
];

/// A public Teredo server (RFC 4380's example).
const TEREDO_SERVER: u32 = 0x4136_e378;

fn internal_v4() -> impl Strategy<Value = Ipv4Addr> {
    (prop::sample::select(INTERNAL_V4), any::<u32>()).prop_map(|((net, len), bits)| {
        let host_mask = u32::MAX >> len;
        Ipv4Addr::from((u32::from_be_bytes(net) & !host_mask) | (bits & host_mask))
    })
}

fn v6(bits: u128) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(bits))
}

fn mapped(v4: Ipv4Addr) -> IpAddr {
    v6(0xffff_0000_0000 | u128::from(u32::from(v4)))
}
fn translated(v4: Ipv4Addr) -> IpAddr {
    v6(0xffff_0000_0000_0000 | u128::from(u32::from(v4)))
}
fn compatible(v4: Ipv4Addr) -> IpAddr {
    v6(u128::from(u32::from(v4)))
}
fn nat64(v4: Ipv4Addr) -> IpAddr {
    v6((0x0064_ff9b_u128 << 96) | u128::from(u32::from(v4)))
}
fn nat64_local(v4: Ipv4Addr) -> IpAddr {
    v6((0x0064_ff9b_0001_u128 << 80) | u128::from(u32::from(v4)))
}
fn six_to_four(v4: Ipv4Addr, rest: u128) -> IpAddr {
    v6((0x2002_u128 << 112) | (u128::from(u32::from(v4)) << 80) | (rest & ((1 << 80) - 1)))
}
fn teredo(server: u32, flags: u32, client: Ipv4Addr) -> IpAddr {
    v6((0x2001_0000_u128 << 96)
        | (u128::from(server) << 64)
        | (u128::from(flags) << 32)
        | u128::from(!u32::from(client)))
}

/// One label of a DNS name, mixed case, never all-numeric.
fn label() -> impl Strategy<Value = String> {
    "[a-zA-Z_][a-zA-Z0-9_-]{0,14}"
}

/// A name of 1-5 labels, as a client might send it (mixed case).
fn name() -> impl Strategy<Value = String> {
    prop::collection::vec(label(), 1..=5).prop_map(|labels| labels.join("."))
}

/// A suffix a wildcard may stand on: at least two labels.
fn suffix() -> impl Strategy<Value = String> {
    prop::collection::vec(label(), 2..=4).prop_map(|labels| labels.join(".").to_ascii_lowercase())
}

/// Spells `addr` the way inet_aton would read it: 1-4 parts, each decimal, octal or hex.
fn loose_ipv4() -> impl Strategy<Value = (Ipv4Addr, String)> {
    (
        any::<u32>(),
        1usize..=4,
        prop::collection::vec((0u8..3, 0usize..3, any::<bool>()), 4),
    )
        .prop_map(|(addr, parts, styles)| {
            let bytes = addr.to_be_bytes();
            let mut values: Vec<u64> = bytes[..parts - 1].iter().map(|&b| u64::from(b)).collect();
            let tail = bytes[parts - 1..]
                .iter()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
            values.push(tail);
            let text: Vec<String> = values
                .iter()
                .zip(&styles)
                .map(|(&v, &(radix, zeros, upper))| {
                    let pad = "0".repeat(zeros);
                    match radix {
                        0 => format!("{v}"),
                        1 => format!("0{pad}{v:o}"),
                        _ if upper => format!("0X{pad}{v:X}"),
                        _ => format!("0x{pad}{v:x}"),
                    }
                })
                .collect();
            (Ipv4Addr::from(addr), text.join("."))
        })
}

/// Random upper/lower case and maybe a trailing dot: what clients do to a name.
fn variant(name: &str, mask: u64, dot: bool) -> String {
    let mut out: String = name
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if (mask >> (i % 64)) & 1 == 1 {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect();
    if dot {
        out.push('.');
    }
    out
}

fn pattern() -> impl Strategy<Value = HostPattern> {
    let port = prop_oneof![Just(443u16), Just(8443u16), 1u16..];
    let matcher = prop_oneof![
        suffix().prop_map(HostMatcher::Suffix),
        name().prop_map(|n| HostMatcher::Exact(Host::parse(&n).unwrap())),
        any::<IpAddr>().prop_map(|ip| HostMatcher::Exact(Host::Ip(ip))),
    ];
    (matcher, port).prop_map(|(matcher, port)| HostPattern { matcher, port })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// An internal IPv4 stays internal, with the same range, in every IPv6 form that carries it.
    #[test]
    fn internal_v4_is_internal_in_every_embedding(
        v4 in internal_v4(),
        rest in any::<u128>(),
        flags in any::<u32>(),
    ) {
        let range = internal_range(IpAddr::V4(v4));
        prop_assert!(range.is_some(), "{v4} should be internal");
        let forms = [
            mapped(v4),
            translated(v4),
            compatible(v4),
            nat64(v4),
            nat64_local(v4),
            six_to_four(v4, rest),
            teredo(TEREDO_SERVER, flags, v4),
            teredo(u32::from(v4), flags, Ipv4Addr::new(8, 8, 8, 8)),
        ];
        for form in forms {
            // `::` and `::1` are IPv4-compatible spellings of 0.0.0.0 / 0.0.0.1 with their own names.
            if form == v6(0) || form == v6(1) {
                prop_assert!(internal_range(form).is_some());
                continue;
            }
            prop_assert_eq!(internal_range(form), range, "{} carrying {}", form, v4);
        }
    }

    /// For mapped, translated and NAT64 forms the IPv4 decides entirely, public or not; the
    /// deprecated IPv4-compatible form is internal whatever it carries.
    #[test]
    fn embedded_v4_decides(addr in any::<u32>(), rest in any::<u128>()) {
        let v4 = Ipv4Addr::from(addr);
        let range = internal_range(IpAddr::V4(v4));
        prop_assert_eq!(internal_range(mapped(v4)), range);
        prop_assert_eq!(internal_range(translated(v4)), range);
        prop_assert_eq!(internal_range(nat64(v4)), range);
        prop_assert_eq!(internal_range(nat64_local(v4)), range);
        prop_assert_eq!(internal_range(six_to_four(v4, rest)), range);
        prop_assert!(internal_range(compatible(v4)).is_some());
        let IpAddr::V6(six) = six_to_four(v4, rest) else { unreachable!() };
        prop_assert_eq!(embedded_ipv4(six), vec![v4]);
    }

    /// Every address parses back from its Display (bare and bracketed) to itself.
    #[test]
    fn ip_display_round_trips(ip in any::<IpAddr>(), port in 1u16..) {
        let host = Host::Ip(ip);
        let shown = host.to_string();
        prop_assert_eq!(Host::parse(&shown), Ok(host.clone()));
        if ip.is_ipv6() {
            prop_assert!(!shown.contains('['));
            prop_assert_eq!(Host::parse(&format!("[{shown}]")), Ok(host.clone()));
        }
        prop_assert_eq!(split_authority(&host.authority(port)), Ok((host.clone(), Some(port))));
    }

    /// Host::parse is idempotent on its Display, and whatever it accepts as a name is canonical.
    #[test]
    fn parse_is_idempotent(text in prop_oneof![name(), "[a-zA-Z0-9._:-]{0,30}", ".{0,30}"]) {
        if let Ok(host) = Host::parse(&text) {
            let shown = host.to_string();
            prop_assert_eq!(Host::parse(&shown), Ok(host.clone()));
            if let Host::Name(name) = &host {
                prop_assert!(!name.is_empty() && name.len() <= 253);
                prop_assert!(!name.ends_with('.') && !name.contains(".."));
                prop_assert!(name.bytes().all(|b| b.is_ascii_lowercase()
                    || b.is_ascii_digit() || b"-_.".contains(&b)));
                prop_assert_eq!(&shown, name);
            }
        }
    }

    /// A suffix pattern matches names strictly below it, never its apex, never an IP.
    #[test]
    fn suffix_never_matches_apex_or_ip(
        suffix in suffix(),
        sub in label(),
        ip in any::<IpAddr>(),
        port in 1u16..,
    ) {
        let pattern = HostPattern::parse(&format!("*.{suffix}:{port}")).unwrap();
        prop_assert_eq!(&pattern.matcher, &HostMatcher::Suffix(suffix.clone()));
        prop_assert!(!pattern.matches(&Host::parse(&suffix).unwrap(), port));
        prop_assert!(!pattern.matches(&Host::Ip(ip), port));
        prop_assert_eq!(pattern.exact_ip(), None);
        let below = Host::parse(&format!("{sub}.{suffix}")).unwrap();
        prop_assert!(pattern.matches(&below, port));
        let other_port = if port == 1 { 2 } else { port - 1 };
        prop_assert!(!pattern.matches(&below, other_port));
        // Gluing the label on without a dot is a different domain.
        let glued = Host::parse(&format!("{sub}{suffix}")).unwrap();
        prop_assert!(!pattern.matches(&glued, port));
    }

    /// Upper-case and trailing-dot spellings of a name match exactly the patterns the name matches.
    #[test]
    fn case_and_trailing_dot_do_not_matter(
        name in name(),
        mask in any::<u64>(),
        dot in any::<bool>(),
        patterns in prop::collection::vec(pattern(), 1..8),
        port in prop_oneof![Just(443u16), Just(8443u16)],
    ) {
        let canonical = Host::parse(&name).unwrap();
        let spelled = Host::parse(&variant(&name, mask, dot)).unwrap();
        prop_assert_eq!(&spelled, &canonical);
        for pattern in &patterns {
            prop_assert_eq!(pattern.matches(&spelled, port), pattern.matches(&canonical, port));
        }
        // A pattern written with that spelling is the same pattern.
        let written = HostPattern::parse(&variant(&name, !mask, dot)).unwrap();
        prop_assert!(written.matches(&canonical, 443));
    }

    /// Every loose IPv4 spelling of an address is that address; the policy file refuses all of them
    /// but the canonical one.
    #[test]
    fn loose_ipv4_spellings_are_the_address((addr, text) in loose_ipv4(), dot in any::<bool>()) {
        let spelled = if dot { format!("{text}.") } else { text.clone() };
        prop_assert_eq!(Host::parse(&spelled), Ok(Host::Ip(IpAddr::V4(addr))), "{}", spelled);
        let canonical = addr.to_string();
        let in_config = HostPattern::parse(&spelled);
        if spelled == canonical {
            prop_assert!(in_config.is_ok());
        } else {
            let err = in_config.unwrap_err().to_string();
            prop_assert!(err.contains(&canonical), "{}", err);
        }
    }

    /// Display of a pattern parses back to the same pattern.
    #[test]
    fn pattern_display_round_trips(pattern in pattern()) {
        let shown = pattern.to_string();
        prop_assert_eq!(HostPattern::parse(&shown), Ok(pattern.clone()), "{}", shown);
    }

    /// overlaps is symmetric, reflexive, and true whenever one host:port matches both patterns.
    #[test]
    fn overlaps_agrees_with_matches(
        a in pattern(),
        b in pattern(),
        sub in label(),
        host_name in name(),
    ) {
        prop_assert_eq!(a.overlaps(&b), b.overlaps(&a));
        prop_assert!(a.overlaps(&a));
        let mut hosts = vec![Host::parse(&host_name).unwrap()];
        for p in [&a, &b] {
            match &p.matcher {
                HostMatcher::Exact(h) => hosts.push(h.clone()),
                HostMatcher::Suffix(s) => hosts.push(Host::parse(&format!("{sub}.{s}")).unwrap()),
            }
        }
        let mut witnessed = false;
        for host in &hosts {
            for port in [a.port, b.port] {
                if a.matches(host, port) && b.matches(host, port) {
                    witnessed = true;
                    prop_assert!(a.overlaps(&b), "{} and {} both match {}", a, b, host.authority(port));
                }
            }
        }
        // And the other way: overlapping patterns share one of these candidate hosts.
        prop_assert_eq!(a.overlaps(&b), witnessed, "{} vs {}", a, b);
    }
}
