//! `tools.confirm` and `tools.confirm_timeout` on a `url` or `account` server (README, "Confirm"):
//! the [`Confirm`] model and which pattern a call meets. Reading them from a file is
//! `schema/confirm.rs`, the machine + project rule `merge/confirm.rs`; holding a call and asking a
//! person is the proxy's (`proxy/src/confirm/`).
//!
//! - `confirm` is a list of tool patterns, written as in `tools.allow`. A call the policy allows
//!   whose tool matches one of them is held until a person answers, or `confirm_timeout` passes.
//! - `confirm_timeout` is a duration as `limits` write it (`30s`, `2m`), from 1 ms to
//!   [`MAX_CONFIRM_TIMEOUT`]; [`DEFAULT_CONFIRM_TIMEOUT`] when omitted.
//!
//! Uses the rest of the model only.

use super::{Located, Location};
use crate::tool_pattern::ToolPattern;
use std::time::Duration;

/// The wait when `confirm_timeout` is not written.
pub const DEFAULT_CONFIRM_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest `confirm_timeout`: a call held longer than this is one nobody is answering.
pub const MAX_CONFIRM_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// `tools.confirm` and `tools.confirm_timeout` of one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirm {
    /// The tools whose allowed calls are held; after a merge, the machine's then the project's.
    pub tools: Vec<Located<ToolPattern>>,
    /// How long a held call waits for an answer.
    pub timeout: Duration,
    /// Where `confirm_timeout` was written; `None` when it was not (the default applies, or the
    /// machine's after a merge).
    pub timeout_at: Option<Location>,
}

impl Default for Confirm {
    fn default() -> Confirm {
        Confirm {
            tools: Vec::new(),
            timeout: DEFAULT_CONFIRM_TIMEOUT,
            timeout_at: None,
        }
    }
}

impl Confirm {
    /// True when no call is ever held.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The first pattern `tool` matches: the call is to be held.
    pub fn matching(&self, tool: &str) -> Option<&Located<ToolPattern>> {
        self.tools.iter().find(|p| p.value.matches(tool))
    }

    /// The rule a held call's records name: `mcp.linear.tools.confirm "create_*"`.
    pub fn rule(server: &str, pattern: &ToolPattern) -> String {
        format!("mcp.{server}.tools.confirm \"{pattern}\"")
    }
}

/// A `Confirm` as a file would give it, for the tests of the model and of the merge step.
#[cfg(test)]
pub(crate) mod fixture {
    use super::*;
    use std::sync::Arc;

    pub(crate) fn at(line: u32, key: &str) -> Location {
        Location {
            file: Arc::from("f.yaml"),
            line,
            column: 1,
            key: key.into(),
        }
    }

    /// `tools` as `tools.confirm` patterns, and `confirm_timeout` in seconds when given.
    pub(crate) fn confirm(tools: &[&str], timeout: Option<u64>) -> Confirm {
        Confirm {
            tools: tools
                .iter()
                .map(|t| Located {
                    value: ToolPattern::parse(t).unwrap(),
                    at: at(1, "mcp.s.tools.confirm[0]"),
                })
                .collect(),
            timeout: timeout.map_or(DEFAULT_CONFIRM_TIMEOUT, Duration::from_secs),
            timeout_at: timeout.map(|_| at(2, "mcp.s.tools.confirm_timeout")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::confirm;
    use super::*;

    #[test]
    fn the_first_matching_pattern_holds_the_call() {
        let c = confirm(&["delete_*", "delete_issue"], None);
        assert_eq!(
            c.matching("delete_issue").map(|p| p.value.to_string()),
            Some("delete_*".into())
        );
        assert!(c.matching("get_issue").is_none());
        assert!(Confirm::default().matching("x").is_none());
        assert_eq!(
            Confirm::rule("linear", &c.tools[0].value),
            "mcp.linear.tools.confirm \"delete_*\""
        );
    }
}
