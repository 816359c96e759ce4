//! The model of a `programs:` list (DESIGN §17): its items as written. Deciding with them is
//! the crate's `programs`; reading them is `schema/programs.rs`.
//!
//! Uses the rest of the model only.

use super::{Located, Location, Origin};
use std::fmt;

/// One item of a `programs:` list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ProgramRef {
    /// `agent`: the agent's own process.
    Agent,
    /// An absolute path: that executable, whatever its content.
    Path(String),
    /// `{path, sha256}`: that executable with exactly that content (lower-case hex).
    Pinned { path: String, sha256: String },
}

impl ProgramRef {
    /// The path it names, if any.
    pub fn path(&self) -> Option<&str> {
        match self {
            ProgramRef::Agent => None,
            ProgramRef::Path(p) | ProgramRef::Pinned { path: p, .. } => Some(p),
        }
    }
}

impl fmt::Display for ProgramRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProgramRef::Agent => f.write_str("agent"),
            ProgramRef::Path(p) => f.write_str(p),
            ProgramRef::Pinned { path, sha256 } => {
                write!(f, "{path} (sha256 {})", &sha256[..sha256.len().min(12)])
            }
        }
    }
}

/// A `programs:` list as one file wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramList {
    pub items: Vec<Located<ProgramRef>>,
    /// The file it came from (the entry's own origin: its default is replaced, not narrowed).
    pub origin: Origin,
    /// The `programs` key; its path names the list in decisions (`mcp.linear.programs`).
    pub at: Location,
}

/// A `hosts` entry's `programs:`: the programs that may reach the hosts it matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPrograms {
    pub pattern: crate::host::HostPattern,
    pub list: ProgramList,
}
