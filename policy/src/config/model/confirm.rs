//! `tools.confirm` and `tools.confirm_timeout` on a `url` or `account` server (README, "Confirm"):
//! the model, which pattern a call meets, and the machine + project rule. Reading them from a file
//! is `schema/confirm.rs`; holding a call and asking a person is the proxy's (`proxy/src/confirm/`).
//!
//! - `confirm` is a list of tool patterns, written as in `tools.allow`. A call the policy allows
//!   whose tool matches one of them is held until a person answers, or `confirm_timeout` passes.
//! - `confirm_timeout` is a duration as `limits` write it (`30s`, `2m`), from 1 ms to
//!   [`MAX_CONFIRM_TIMEOUT`]; [`DEFAULT_CONFIRM_TIMEOUT`] when omitted.
//! - A pattern no allowed tool can match, or one `tools.deny` covers, would never hold anything: it
//!   is an error (the same rule as for `tools.rules`).
//! - A `confirm_timeout` on a server with no `confirm` pattern (after the merge) changes nothing:
//!   it is an error.
//! - Machine and project: the project's patterns are added to the machine's (neither file can take
//!   one away), and the project may shorten the machine's timeout, never lengthen it.

use super::ConfigError;
use super::limits::show_duration;
use super::model::{Config, Located, Location, ServerKind};
use super::rules::place;
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

/// The confirm settings of a machine server a project entry narrows: both files' patterns (each
/// once), and the project's timeout when it is not longer than the machine's.
pub(super) fn narrow(
    server: &str,
    machine: &Confirm,
    project: &Confirm,
    layers: &super::merge::Layers,
    errors: &mut Vec<ConfigError>,
) -> Confirm {
    let super::merge::Layers {
        upper,
        upper_file,
        lower,
        ..
    } = *layers;
    let mut tools = machine.tools.clone();
    for p in &project.tools {
        if !tools.iter().any(|m| m.value == p.value) {
            tools.push(p.clone());
        }
    }
    let (timeout, timeout_at) = match &project.timeout_at {
        Some(at) if project.timeout > machine.timeout => {
            let theirs = match &machine.timeout_at {
                Some(m) => format!(
                    "`confirm_timeout: {}` ({})",
                    show_duration(machine.timeout),
                    place(m)
                ),
                None => format!("default of {}", show_duration(machine.timeout)),
            };
            errors.push(ConfigError {
                at: Some(at.clone()),
                message: format!(
                    "the {lower} sets `confirm_timeout: {}` on {upper} server `{server}`, longer \
                     than the {upper}'s {theirs}",
                    show_duration(project.timeout)
                ),
                hint: Some(format!(
                    "a {lower} can only shorten how long a held call waits; write a shorter \
                     value, remove it to keep the {upper}'s, or change the {upper_file}"
                )),
            });
            (machine.timeout, machine.timeout_at.clone())
        }
        Some(at) => (project.timeout, Some(at.clone())),
        None => (machine.timeout, machine.timeout_at.clone()),
    };
    Confirm {
        tools,
        timeout,
        timeout_at,
    }
}

/// A `confirm_timeout` on a merged server that holds no call is an error: it would never apply.
pub(super) fn check_unused(config: &Config, errors: &mut Vec<ConfigError>) {
    for s in &config.mcp {
        let (ServerKind::Remote { tools, .. } | ServerKind::Account { tools, .. }) = &s.kind else {
            continue;
        };
        if let (true, Some(at)) = (tools.confirm.is_empty(), &tools.confirm.timeout_at) {
            errors.push(ConfigError {
                at: Some(at.clone()),
                message: format!(
                    "`confirm_timeout` on server `{}`, which holds no call: it has no `confirm` \
                     list",
                    s.name
                ),
                hint: Some(
                    "list the tools whose calls a person must confirm, e.g. `confirm: \
                     [delete_issue]`, or remove `confirm_timeout`"
                        .into(),
                ),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn at(line: u32, key: &str) -> Location {
        Location {
            file: Arc::from("f.yaml"),
            line,
            column: 1,
            key: key.into(),
        }
    }

    fn confirm(tools: &[&str], timeout: Option<u64>) -> Confirm {
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

    #[test]
    fn a_project_adds_patterns_and_may_only_shorten_the_wait() {
        let mut errors = Vec::new();
        let merged = narrow(
            "s",
            &confirm(&["a"], Some(60)),
            &confirm(&["a", "b"], Some(30)),
            &super::super::merge::PROJECT_ON_MACHINE,
            &mut errors,
        );
        assert!(errors.is_empty());
        let names: Vec<_> = merged.tools.iter().map(|p| p.value.to_string()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(merged.timeout, Duration::from_secs(30));

        // Omitted: the machine's stays, even the default.
        let merged = narrow(
            "s",
            &confirm(&["a"], None),
            &confirm(&[], None),
            &super::super::merge::PROJECT_ON_MACHINE,
            &mut errors,
        );
        assert!(errors.is_empty());
        assert_eq!(merged.timeout, DEFAULT_CONFIRM_TIMEOUT);
        assert_eq!(merged.tools.len(), 1);

        // Longer than the machine's (here its default): refused, the machine's kept.
        let merged = narrow(
            "s",
            &confirm(&["a"], None),
            &confirm(&[], Some(600)),
            &super::super::merge::PROJECT_ON_MACHINE,
            &mut errors,
        );
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0]
                .message
                .contains("longer than the machine's default of 2m")
        );
        assert_eq!(merged.timeout, DEFAULT_CONFIRM_TIMEOUT);
    }
}
