//! The internal-address classifier: which IP addresses fenzi refuses to dial unless the policy names
//! that exact IP literal. Covers IPv4 special ranges and IPv4 hidden inside IPv6 forms.

use std::net::IpAddr;

/// Why an address counts as internal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InternalRange {
    Unspecified,
    Loopback,
}

/// `None` for a public, dialable address; otherwise the range that makes it internal.
pub fn internal_range(_addr: IpAddr) -> Option<InternalRange> {
    todo!("host helper")
}
