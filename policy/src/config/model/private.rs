//! Private destinations by name (README "Configuration"): the model of a `private:` list, one
//! exact name and port and the internal ranges it may resolve to. Reading it is
//! `schema/private.rs`, its rule in the machine/project merge `merge/private.rs`; deciding with it
//! is `Policy::check_address`.
//!
//! Uses the rest of the model only.

use super::{Located, Location, Origin};
use crate::cidr::Cidr;
use crate::host::HostPattern;

/// One name that may resolve to internal addresses inside its ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrivateName {
    /// An exact name and port: never an IP literal, never a wildcard.
    pub pattern: HostPattern,
    /// The ranges, each a range [`Cidr::check_private`] accepts.
    pub ranges: Vec<Located<Cidr>>,
    pub origin: Origin,
    /// The `private` key. Its path (`hosts[2].private`, `mcp.corp.private`) names the entry in
    /// decisions.
    pub at: Location,
}
