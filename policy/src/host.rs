//! Host names and host patterns: canonicalisation of what a client asks for (case, trailing dot,
//! brackets, every IPv4 spelling), and the `hosts:` patterns of the policy (`host`, `*.suffix`,
//! optional `:port`, IP literals). Pure functions only; resolution happens in the proxy.
//!
//! Two rules carry the security weight here:
//! - A name that a resolver would read as an IPv4 address (`127.1`, `0x7f.1`, `2130706433`,
//!   `0177.0.0.1`, inet_aton's every spelling) *is* that address: [`Host::parse`] returns
//!   [`Host::Ip`], never a [`Host::Name`] that a pattern or the resolver might see differently.
//!   A name whose last label is numeric but which is no valid IPv4 spelling is refused as ambiguous.
//! - Requests are parsed leniently where clients differ harmlessly (case, one trailing dot, loose
//!   IPv4), but the policy file is strict: an IPv4 literal in `fenzi.yaml` must be written in
//!   canonical dotted-decimal form, and `*` only stands as the whole first label of `*.domain.tld`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// Port a pattern means when it names none.
pub const DEFAULT_PORT: u16 = 443;

/// Longest DNS name (without the trailing dot), RFC 1035.
pub const MAX_NAME_LEN: usize = 253;
/// Longest DNS label, RFC 1035.
pub const MAX_LABEL_LEN: usize = 63;
/// Inputs longer than this are refused before any other look (a name, brackets and a port fit).
const MAX_INPUT_LEN: usize = 300;

/// A canonical destination host: a lower-case DNS name without trailing dot, or an IP address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("{0}")]
    Invalid(String),
}

/// The input as it goes into a message: quoted, control characters escaped, long text cut.
fn quote(text: &str) -> String {
    const SHOWN: usize = 80;
    if text.chars().count() > SHOWN {
        let head: String = text.chars().take(SHOWN).collect();
        format!("{head:?}...")
    } else {
        format!("{text:?}")
    }
}

fn bad_host(text: &str, why: impl fmt::Display) -> HostError {
    HostError::Invalid(format!("invalid host {}: {why}", quote(text)))
}

fn bad_pattern(text: &str, why: impl fmt::Display) -> HostError {
    HostError::Invalid(format!("invalid host pattern {}: {why}", quote(text)))
}

impl Host {
    /// Canonicalises a host as a client sent it (CONNECT target, Host header, SNI, URL).
    pub fn parse(text: &str) -> Result<Host, HostError> {
        let fail = |why: &str| Err(bad_host(text, why));
        if text.is_empty() {
            return fail("empty host");
        }
        if text.len() > MAX_INPUT_LEN {
            return fail("longer than any host name");
        }
        if let Some(c) = text.chars().find(|c| !c.is_ascii()) {
            return Err(bad_host(
                text,
                format!(
                    "non-ASCII character {c:?}; internationalised names must be sent in their \
                     ASCII (xn--) form"
                ),
            ));
        }
        if text.bytes().any(|b| b.is_ascii_control()) {
            return fail("control character");
        }
        if text.contains('%') {
            return fail("'%' is not allowed (no IPv6 zone ids, no percent-encoding)");
        }
        if let Some(rest) = text.strip_prefix('[') {
            let Some(inner) = rest.strip_suffix(']') else {
                return fail("'[' must enclose the whole host and end with ']'");
            };
            return match Ipv6Addr::from_str(inner) {
                Ok(v6) => Ok(Host::Ip(IpAddr::V6(v6))),
                Err(_) => fail("brackets must hold an IPv6 address"),
            };
        }
        if text.contains(':') {
            return match Ipv6Addr::from_str(text) {
                Ok(v6) => Ok(Host::Ip(IpAddr::V6(v6))),
                Err(_) => {
                    fail("':' is only allowed in an IPv6 address (a port is not part of a host)")
                }
            };
        }
        let lower = text.to_ascii_lowercase();
        // One trailing dot is the DNS root and means the same name; "a.com.." is an empty label.
        let name = lower.strip_suffix('.').unwrap_or(&lower);
        if name.is_empty() {
            return fail("empty host");
        }
        if let Some(c) = name.chars().find(|&c| !is_name_char(c)) {
            let what = match c {
                ' ' => "a space".to_string(),
                _ => format!("character {c:?}"),
            };
            return Err(bad_host(
                text,
                format!("{what} is not allowed in a host name (only a-z, 0-9, '-', '_', '.')"),
            ));
        }
        if name.split('.').any(str::is_empty) {
            return fail("empty label (leading dot or \"..\")");
        }
        // Before any length rule: whatever inet_aton reads as an address is that address.
        if let Some(v4) = parse_ipv4_loose(name) {
            return Ok(Host::Ip(IpAddr::V4(v4)));
        }
        let last = name.rsplit('.').next().unwrap_or(name);
        if looks_numeric(last) {
            return fail(
                "ends in a numeric label but is not a valid IPv4 address; refusing an ambiguous name",
            );
        }
        if name.split('.').any(|l| l.len() > MAX_LABEL_LEN) {
            return fail("a label is longer than 63 characters");
        }
        if name.len() > MAX_NAME_LEN {
            return fail("name is longer than 253 characters");
        }
        Ok(Host::Name(name.to_string()))
    }

    /// `name:port`, `a.b.c.d:port` or `[v6]:port`, as in a CONNECT target or Host header.
    pub fn authority(&self, port: u16) -> String {
        match self {
            Host::Ip(IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
            other => format!("{other}:{port}"),
        }
    }

    /// The address when this host is an IP literal.
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Host::Ip(ip) => Some(*ip),
            Host::Name(_) => None,
        }
    }

    /// True when this is a name strictly below `suffix` (at least one more label).
    fn is_below(&self, suffix: &str) -> bool {
        match self {
            Host::Name(name) => name_is_below(name, suffix),
            Host::Ip(_) => false,
        }
    }
}

impl FromStr for Host {
    type Err = HostError;
    fn from_str(text: &str) -> Result<Host, HostError> {
        Host::parse(text)
    }
}

impl fmt::Display for Host {
    /// Names as they are, IPv4 dotted, IPv6 in RFC 5952 form without brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.')
}

/// `name` ends with `.suffix` and has at least one label before it.
fn name_is_below(name: &str, suffix: &str) -> bool {
    name.len() > suffix.len() + 1
        && name.ends_with(suffix)
        && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
}

/// A label a URL parser or resolver would take for a number: decimal digits, or `0x` and hex digits.
fn looks_numeric(label: &str) -> bool {
    if let Some(hex) = label.strip_prefix("0x") {
        hex.bytes().all(|b| b.is_ascii_hexdigit())
    } else {
        !label.is_empty() && label.bytes().all(|b| b.is_ascii_digit())
    }
}

/// One inet_aton number: `0x` hex (at least one digit), `0` octal, else decimal; at most 2^32-1.
fn parse_ipv4_part(part: &str) -> Option<u64> {
    let (digits, radix) = if let Some(hex) = part.strip_prefix("0x") {
        (hex, 16)
    } else if part.len() > 1 && part.starts_with('0') {
        (&part[1..], 8)
    } else {
        (part, 10)
    };
    if digits.is_empty() {
        return None;
    }
    let mut value: u64 = 0;
    for c in digits.chars() {
        value = value * radix + u64::from(c.to_digit(radix as u32)?);
        if value > u64::from(u32::MAX) {
            return None;
        }
    }
    Some(value)
}

/// IPv4 in every form inet_aton accepts (lower-cased input): `a.b.c.d`, `a.b.c` (c 16 bits),
/// `a.b` (b 24 bits), `a` (32 bits), each part decimal, octal (`0` prefix) or hex (`0x` prefix).
fn parse_ipv4_loose(text: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = text.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut values = Vec::with_capacity(parts.len());
    for part in &parts {
        values.push(parse_ipv4_part(part)?);
    }
    let (last, leading) = values.split_last()?;
    if leading.iter().any(|&v| v > 255) {
        return None;
    }
    let last_bits = 8 * (5 - values.len() as u32);
    if *last >= 1u64 << last_bits {
        return None;
    }
    let mut addr: u64 = 0;
    for (i, v) in leading.iter().enumerate() {
        addr |= v << (24 - 8 * i as u32);
    }
    Some(Ipv4Addr::from((addr | last) as u32))
}

/// What part of the name space a pattern covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostMatcher {
    Exact(Host),
    /// `*.example.com` is stored as `example.com`; matches any name strictly below it.
    Suffix(String),
}

impl HostMatcher {
    /// True when `host` is in the part of the name space this matcher covers (ports aside).
    pub fn covers(&self, host: &Host) -> bool {
        match self {
            HostMatcher::Exact(exact) => exact == host,
            HostMatcher::Suffix(suffix) => host.is_below(suffix),
        }
    }
}

/// One `hosts:` entry (or a secret's host, or an MCP url's host:port).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPattern {
    pub matcher: HostMatcher,
    pub port: u16,
}

impl HostPattern {
    /// Parses a pattern as written in `fenzi.yaml`.
    pub fn parse(text: &str) -> Result<HostPattern, HostError> {
        if text.is_empty() {
            return Err(bad_pattern(text, "empty"));
        }
        if text.chars().any(char::is_whitespace) {
            return Err(bad_pattern(text, "contains whitespace"));
        }
        if text.contains("://") {
            return Err(bad_pattern(
                text,
                "is a URL; write only the host (and :port if not 443)",
            ));
        }
        let (host_text, port_text) = split_host_port(text).map_err(|why| bad_pattern(text, why))?;
        let port = match port_text {
            None => DEFAULT_PORT,
            Some(p) => parse_port(p).map_err(|why| bad_pattern(text, why))?,
        };
        let matcher = if host_text.contains('*') {
            HostMatcher::Suffix(parse_wildcard(host_text).map_err(|why| bad_pattern(text, why))?)
        } else {
            let host = Host::parse(host_text)?;
            if let Host::Ip(IpAddr::V4(v4)) = host {
                let canonical = v4.to_string();
                if host_text != canonical {
                    return Err(bad_pattern(
                        text,
                        format!(
                            "IPv4 address {} must be written in canonical dotted-decimal form: {canonical}",
                            quote(host_text)
                        ),
                    ));
                }
            }
            HostMatcher::Exact(host)
        };
        Ok(HostPattern { matcher, port })
    }

    /// The pattern that matches exactly `host` on `port`.
    pub fn for_host(host: Host, port: u16) -> HostPattern {
        HostPattern {
            matcher: HostMatcher::Exact(host),
            port,
        }
    }

    /// `Some` when the pattern names one IP literal (the only way to allow an internal address).
    pub fn exact_ip(&self) -> Option<IpAddr> {
        match &self.matcher {
            HostMatcher::Exact(host) => host.ip(),
            HostMatcher::Suffix(_) => None,
        }
    }

    pub fn matches(&self, host: &Host, port: u16) -> bool {
        port == self.port && self.matcher.covers(host)
    }

    /// True when every host:port this pattern matches, `other` matches too (the team policy's
    /// ceiling on the `hosts` of the layers below it).
    pub fn is_covered_by(&self, other: &HostPattern) -> bool {
        use HostMatcher::{Exact, Suffix};
        self.port == other.port
            && match (&self.matcher, &other.matcher) {
                (Exact(a), Exact(b)) => a == b,
                (Exact(host), Suffix(suffix)) => host.is_below(suffix),
                (Suffix(_), Exact(_)) => false,
                (Suffix(a), Suffix(b)) => a == b || name_is_below(a, b),
            }
    }

    /// True when some host:port matches both patterns.
    pub fn overlaps(&self, other: &HostPattern) -> bool {
        use HostMatcher::{Exact, Suffix};
        self.port == other.port
            && match (&self.matcher, &other.matcher) {
                (Exact(a), Exact(b)) => a == b,
                (Exact(host), Suffix(suffix)) | (Suffix(suffix), Exact(host)) => {
                    host.is_below(suffix)
                }
                (Suffix(a), Suffix(b)) => a == b || name_is_below(a, b) || name_is_below(b, a),
            }
    }
}

impl FromStr for HostPattern {
    type Err = HostError;
    fn from_str(text: &str) -> Result<HostPattern, HostError> {
        HostPattern::parse(text)
    }
}

impl fmt::Display for HostPattern {
    /// As a user would write it: `*.x.com`, `x.com:8443`, `::1`, `[::1]:8443`; `:443` omitted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let default_port = self.port == DEFAULT_PORT;
        match &self.matcher {
            HostMatcher::Suffix(suffix) => write!(f, "*.{suffix}")?,
            HostMatcher::Exact(Host::Ip(IpAddr::V6(v6))) if !default_port => {
                return write!(f, "[{v6}]:{}", self.port);
            }
            HostMatcher::Exact(host) => write!(f, "{host}")?,
        }
        if !default_port {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

/// `*.rest`: `rest` must be a DNS name of at least two labels; `*` nowhere else.
fn parse_wildcard(host_text: &str) -> Result<String, String> {
    if host_text == "*" {
        return Err("a bare '*' would allow every host; list hosts, or use '*.example.com'".into());
    }
    let Some(rest) = host_text.strip_prefix("*.") else {
        return Err("'*' is only allowed as the whole first label, as in '*.example.com'".into());
    };
    if rest.contains('*') {
        return Err("'*' is only allowed as the whole first label, as in '*.example.com'".into());
    }
    match Host::parse(rest).map_err(|e| e.to_string())? {
        Host::Ip(_) => Err("a wildcard cannot cover an IP address".into()),
        Host::Name(name) if !name.contains('.') => Err(format!(
            "'*.{name}' would cover a whole top-level domain; a wildcard needs at least two labels \
             after '*.'"
        )),
        Host::Name(name) => Ok(name),
    }
}

/// Splits `host`, `host:port`, `[v6]`, `[v6]:port` or a bare IPv6 literal (no port) into the host
/// text (brackets kept) and the port text.
fn split_host_port(text: &str) -> Result<(&str, Option<&str>), String> {
    if text.starts_with('[') {
        let Some(close) = text.find(']') else {
            return Err("'[' without a closing ']'".into());
        };
        let (host, rest) = text.split_at(close + 1);
        if rest.is_empty() {
            return Ok((host, None));
        }
        return match rest.strip_prefix(':') {
            Some(port) => Ok((host, Some(port))),
            None => Err(format!("unexpected {} after ']'", quote(rest))),
        };
    }
    match text.split_once(':') {
        // Two or more colons without brackets: an IPv6 literal, which cannot carry a port.
        Some((host, port)) if !port.contains(':') => Ok((host, Some(port))),
        _ => Ok((text, None)),
    }
}

/// A decimal port 1-65535: digits only (no sign, no spaces).
fn parse_port(text: &str) -> Result<u16, String> {
    if text.is_empty() {
        return Err("empty port after ':'".into());
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("port {} is not a decimal number", quote(text)));
    }
    let mut value: u32 = 0;
    for b in text.bytes() {
        value = (value * 10 + u32::from(b - b'0')).min(1 << 20);
    }
    match u16::try_from(value) {
        Ok(port) if port != 0 => Ok(port),
        _ => Err(format!("port {text} is out of range 1-65535")),
    }
}

/// Splits `host[:port]` / `[v6]:port` into a canonical host and the port if present.
pub fn split_authority(text: &str) -> Result<(Host, Option<u16>), HostError> {
    if text.len() > MAX_INPUT_LEN {
        return Err(bad_host(text, "longer than any host and port"));
    }
    let (host_text, port_text) = split_host_port(text).map_err(|why| bad_host(text, why))?;
    let host = Host::parse(host_text)?;
    let port = match port_text {
        None => None,
        Some(p) => Some(parse_port(p).map_err(|why| bad_host(text, why))?),
    };
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(text: &str) -> String {
        Host::parse(text).unwrap().to_string()
    }

    #[test]
    fn loose_ipv4_is_an_ip() {
        for text in [
            "127.1",
            "0x7f.1",
            "2130706433",
            "017700000001",
            "0177.0.0.1",
            "0x7F.0.0.1.",
        ] {
            assert_eq!(
                Host::parse(text).unwrap(),
                Host::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST)),
                "{text}"
            );
        }
        assert!(Host::parse("1.2.3.4.5").is_err());
        assert!(Host::parse("08.1.2.3").is_err());
        assert!(Host::parse("4294967296").is_err());
        assert_eq!(canon("4294967295"), "255.255.255.255");
    }

    #[test]
    fn names_and_v6() {
        assert_eq!(canon("GitHub.COM."), "github.com");
        assert_eq!(canon("[::FFFF:7f00:1]"), "::ffff:127.0.0.1");
        assert_eq!(canon("2001:DB8:0:0:0:0:0:1"), "2001:db8::1");
        assert!(Host::parse("fe80::1%eth0").is_err());
        assert!(Host::parse("a..b").is_err());
        assert!(Host::parse("a.com..").is_err());
        assert!(Host::parse("gïthub.com").is_err());
    }

    #[test]
    fn pattern_display_round_trips() {
        for text in [
            "*.x.com",
            "x.com:8443",
            "::1",
            "[::1]:8443",
            "10.0.0.5:8080",
            "x.com",
        ] {
            let p = HostPattern::parse(text).unwrap();
            assert_eq!(p.to_string(), text);
            assert_eq!(HostPattern::parse(&p.to_string()).unwrap(), p);
        }
        assert_eq!(
            HostPattern::parse("X.com:443").unwrap().to_string(),
            "x.com"
        );
    }

    #[test]
    fn pattern_errors_say_what() {
        let err = HostPattern::parse("x.com:0").unwrap_err().to_string();
        assert!(err.contains("port 0 is out of range 1-65535"), "{err}");
        let err = HostPattern::parse("127.1").unwrap_err().to_string();
        assert!(
            err.contains("canonical dotted-decimal form: 127.0.0.1"),
            "{err}"
        );
        let err = HostPattern::parse("*.com").unwrap_err().to_string();
        assert!(err.contains("at least two labels"), "{err}");
    }

    #[test]
    fn authority_forms() {
        let (h, p) = split_authority("[::1]:8443").unwrap();
        assert_eq!((h.authority(p.unwrap())), "[::1]:8443");
        assert_eq!(split_authority("::1").unwrap().1, None);
        assert!(split_authority("x.com:").is_err());
        assert!(split_authority("x.com:+80").is_err());
    }
}
