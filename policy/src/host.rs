//! Host names and host patterns: canonicalisation of what a client asks for (case, trailing dot,
//! brackets, every IPv4 spelling), and the `hosts:` patterns of the policy (`host`, `*.suffix`,
//! optional `:port`, IP literals). Pure functions only; resolution happens in the proxy.

use std::fmt;
use std::net::IpAddr;

/// Port a pattern means when it names none.
pub const DEFAULT_PORT: u16 = 443;

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

impl Host {
    /// Canonicalises a host as a client sent it (CONNECT target, Host header, SNI, URL).
    pub fn parse(_text: &str) -> Result<Host, HostError> {
        todo!("host helper")
    }
}

impl fmt::Display for Host {
    fn fmt(&self, _f: &mut fmt::Formatter<'_>) -> fmt::Result {
        todo!("host helper")
    }
}

/// What part of the name space a pattern covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostMatcher {
    Exact(Host),
    /// `*.example.com` is stored as `example.com`; matches any name strictly below it.
    Suffix(String),
}

/// One `hosts:` entry (or a secret's host, or an MCP url's host:port).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPattern {
    pub matcher: HostMatcher,
    pub port: u16,
}

impl HostPattern {
    /// Parses a pattern as written in `fenzi.yaml`.
    pub fn parse(_text: &str) -> Result<HostPattern, HostError> {
        todo!("host helper")
    }

    pub fn matches(&self, _host: &Host, _port: u16) -> bool {
        todo!("host helper")
    }

    /// True when some host:port matches both patterns.
    pub fn overlaps(&self, _other: &HostPattern) -> bool {
        todo!("host helper")
    }
}

/// Splits `host[:port]` / `[v6]:port` into a canonical host and the port if present.
pub fn split_authority(_text: &str) -> Result<(Host, Option<u16>), HostError> {
    todo!("host helper")
}
