//! Private destinations by name: `Policy::check_address` and `check_addresses` for names whose
//! `hosts` entry or MCP server lists `private:` ranges, and for every other name.

use fenzi_policy::Reason;
use fenzi_policy::config;
use fenzi_policy::host::Host;
use std::net::IpAddr;

const POLICY: &str = r#"
version: 1
hosts:
  - github.com
  - {host: registry.corp.example, private: ["10.20.0.0/16", "10.21.0.0/24"]}
  - {host: "loop.corp.example:8080", private: ["127.0.0.1", "::1"]}
  - {host: v6.corp.example, private: ["fd12:3456::/48"]}
  - {host: mirror.example, private: ["192.0.2.0/24"]}
  - {host: meta.corp.example, private: ["169.254.0.0/17"]}
  - "*.corp.example"
  - "10.0.0.5:8080"
mcp:
  corp:
    url: https://mcp.internal.example/mcp
    private: ["10.1.0.0/16"]
    tools: {allow: [search]}
"#;

fn policy() -> fenzi_policy::engine::Policy {
    let config = config::load(None, Some((POLICY, "fenzi.yaml")));
    // A project file may not name private ranges: load it as the machine file.
    assert!(
        config.is_err(),
        "a project's private ranges must be refused"
    );
    let config = config::load(Some((POLICY, "mcp.yaml")), None).unwrap();
    fenzi_policy::engine::Policy::from_config(&config)
}

fn host(s: &str) -> Host {
    Host::parse(s).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn check_address_table() {
    let p = policy();
    // (host, port, address, Ok(rule) when allowed, Err(message part) when refused)
    let table: &[(&str, u16, &str, Result<&str, &str>)] = &[
        // Inside the ranges, at both edges; the rule names the entry and the range.
        (
            "registry.corp.example",
            443,
            "10.20.0.5",
            Ok("hosts[1].private \"10.20.0.0/16\""),
        ),
        (
            "registry.corp.example",
            443,
            "10.20.255.255",
            Ok("hosts[1].private \"10.20.0.0/16\""),
        ),
        (
            "registry.corp.example",
            443,
            "10.21.0.200",
            Ok("hosts[1].private \"10.21.0.0/24\""),
        ),
        // The IPv4-mapped form of an address inside is that address.
        (
            "registry.corp.example",
            443,
            "::ffff:10.20.0.5",
            Ok("hosts[1].private \"10.20.0.0/16\""),
        ),
        // Outside: refused, naming the block and the ranges it has.
        (
            "registry.corp.example",
            443,
            "10.30.0.5",
            Err(
                "registry.corp.example:443 resolves to 10.30.0.5, an internal address (10.0.0.0/8), \
                 outside its private ranges (10.20.0.0/16, 10.21.0.0/24); to allow it, add \
                 10.30.0.5/32 (or a range holding it) to hosts[1].private",
            ),
        ),
        (
            "registry.corp.example",
            443,
            "10.21.1.0",
            Err("outside its private ranges"),
        ),
        (
            "registry.corp.example",
            443,
            "192.168.1.1",
            Err("(192.168.0.0/16)"),
        ),
        // Other IPv6 forms of an address inside are not it.
        (
            "registry.corp.example",
            443,
            "64:ff9b::a14:5",
            Err("outside its private ranges"),
        ),
        // Loopback only where it is listed.
        (
            "registry.corp.example",
            443,
            "127.0.0.1",
            Err("(127.0.0.0/8)"),
        ),
        (
            "loop.corp.example",
            8080,
            "127.0.0.1",
            Ok("hosts[2].private \"127.0.0.1/32\""),
        ),
        (
            "loop.corp.example",
            8080,
            "::1",
            Ok("hosts[2].private \"::1/128\""),
        ),
        (
            "loop.corp.example",
            8080,
            "127.0.0.2",
            Err("outside its private ranges"),
        ),
        (
            "loop.corp.example",
            8080,
            "0.0.0.0",
            Err("outside its private ranges"),
        ),
        // Same name, other port: not the entry.
        (
            "loop.corp.example",
            8081,
            "127.0.0.1",
            Err("an internal address (loopback)"),
        ),
        // IPv6.
        (
            "v6.corp.example",
            443,
            "fd12:3456::10",
            Ok("hosts[3].private \"fd12:3456::/48\""),
        ),
        ("v6.corp.example", 443, "fd12:3457::10", Err("(fc00::/7)")),
        ("v6.corp.example", 443, "fe80::1", Err("(fe80::/10)")),
        // The documentation range a new user's mirror may sit in.
        (
            "mirror.example",
            443,
            "192.0.2.10",
            Ok("hosts[4].private \"192.0.2.0/24\""),
        ),
        // Metadata is never allowed by name, even inside a listed range's block.
        (
            "meta.corp.example",
            443,
            "169.254.1.1",
            Ok("hosts[5].private \"169.254.0.0/17\""),
        ),
        (
            "meta.corp.example",
            443,
            "169.254.169.254",
            Err("a cloud metadata address, which is never allowed by name"),
        ),
        (
            "meta.corp.example",
            443,
            "::ffff:169.254.169.254",
            Err("never allowed by name"),
        ),
        (
            "registry.corp.example",
            443,
            "100.100.100.200",
            Err("never allowed by name"),
        ),
        (
            "v6.corp.example",
            443,
            "fd00:ec2::254",
            Err("never allowed by name"),
        ),
        // Public addresses stay allowed.
        (
            "registry.corp.example",
            443,
            "140.82.112.3",
            Ok("public address"),
        ),
        // Other names never: a name under the wildcard, a plain entry, an unlisted name.
        (
            "other.corp.example",
            443,
            "10.20.0.5",
            Err("an internal address (private)"),
        ),
        (
            "github.com",
            443,
            "10.20.0.5",
            Err("an internal address (private)"),
        ),
        (
            "evil.example",
            443,
            "10.20.0.5",
            Err("an internal address (private)"),
        ),
        (
            "sub.registry.corp.example",
            443,
            "10.20.0.5",
            Err("an internal address (private)"),
        ),
        // The MCP server's url host, on its port.
        (
            "mcp.internal.example",
            443,
            "10.1.2.3",
            Ok("mcp.corp.private \"10.1.0.0/16\""),
        ),
        (
            "mcp.internal.example",
            443,
            "10.2.0.1",
            Err("outside its private ranges (10.1.0.0/16)"),
        ),
        (
            "mcp.internal.example",
            8443,
            "10.1.2.3",
            Err("an internal address (private)"),
        ),
        // An IP literal is unaffected: named, it is reached; an address of a name is not it.
        (
            "10.0.0.5",
            8080,
            "10.0.0.5",
            Ok("policy names this IP literal"),
        ),
        (
            "10.20.0.5",
            443,
            "10.20.0.5",
            Err("an internal address (private)"),
        ),
    ];
    let mut problems = Vec::new();
    for (name, port, addr, want) in table {
        let d = p.check_address(&host(name), *port, ip(addr));
        let ok = match want {
            Ok(rule) => d.is_allowed() && d.rule == *rule,
            Err(part) => {
                d.reason() == Some(Reason::PrivateAddress)
                    && d.message.contains(part)
                    && !d.rule.is_empty()
            }
        };
        if !ok {
            problems.push(format!(
                "{name}:{port} {addr}: want {want:?}, got {:?} rule={:?} {:?}",
                d.verdict, d.rule, d.message
            ));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn a_refusal_outside_the_ranges_names_the_entry() {
    let p = policy();
    let d = p.check_address(&host("registry.corp.example"), 443, ip("10.30.0.5"));
    assert_eq!(d.rule, "hosts[1].private");
    let d = p.check_address(&host("mcp.internal.example"), 443, ip("10.2.0.1"));
    assert_eq!(d.rule, "mcp.corp.private");
}

#[test]
fn every_address_of_a_resolution_is_checked() {
    let p = policy();
    let name = host("registry.corp.example");
    assert_eq!(
        p.check_addresses(
            &name,
            443,
            &[ip("10.20.0.5"), ip("10.21.0.1"), ip("10.20.0.6")]
        ),
        Ok(Some(
            "hosts[1].private \"10.20.0.0/16\", hosts[1].private \"10.21.0.0/24\"".into()
        ))
    );
    // One outside refuses the lot, whichever comes first.
    for addrs in [
        [ip("10.20.0.5"), ip("10.30.0.5")],
        [ip("10.30.0.5"), ip("10.20.0.5")],
    ] {
        let d = p.check_addresses(&name, 443, &addrs).unwrap_err();
        assert_eq!(d.reason(), Some(Reason::PrivateAddress));
        assert!(d.message.contains("10.30.0.5"), "{}", d.message);
    }
    // Public addresses alone: nothing allowed by name.
    assert_eq!(
        p.check_addresses(&name, 443, &[ip("140.82.112.3")]),
        Ok(None)
    );
    // A public and a private one: the private range is still what the record names.
    assert_eq!(
        p.check_addresses(&name, 443, &[ip("140.82.112.3"), ip("10.20.0.5")]),
        Ok(Some("hosts[1].private \"10.20.0.0/16\"".into()))
    );
}
