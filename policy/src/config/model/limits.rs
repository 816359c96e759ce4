//! One server's `limits` entries (README, "Limits"): the [`ToolLimit`] model, the rule name a
//! record gives each of its limits, and which entries a `tools/call` meets ([`applicable`]).
//! Reading them is `schema/limits.rs`, the machine + project rule `merge/limits.rs`; counting is
//! the proxy's (`proxy/src/session/limits.rs`), and nothing here reads a clock.
//!
//! Uses the rest of the model and `units` (how a limit's value is written).

use super::{Location, Origin};
use crate::config::units::Rate;
use crate::config::yaml::push_key;
use crate::tool_pattern::ToolPattern;
use std::fmt;
use std::time::Duration;

use crate::config::units::{show_duration, show_size};

/// One `limits:` entry (README, "Limits"). The first entry of each file whose `tool` matches a
/// call applies to it; each entry's counters are shared by every tool it matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolLimit {
    /// The tools it applies to, a pattern as in `tools.allow`.
    pub tool: ToolPattern,
    /// Calls per period, with a burst of the same count.
    pub rate: Option<Rate>,
    /// Calls in flight at once.
    pub concurrency: Option<u32>,
    /// From forwarding the call to the last byte of its answer.
    pub timeout: Option<Duration>,
    /// Bytes of the answer's body, as the upstream sent them.
    pub max_response: Option<u64>,
    /// The file that wrote it.
    pub origin: Origin,
    /// A project entry on a machine server it narrows (its records say `(project)`).
    pub project_on_machine: bool,
    /// Where it was written; the key is `mcp.NAME.limits[i]`.
    pub at: Location,
}

impl fmt::Display for ToolLimit {
    /// `* rate=60/min concurrency=4 timeout=30s max_response=1MiB`, each limit only when set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.tool)?;
        if let Some(r) = self.rate {
            write!(f, " rate={r}")?;
        }
        if let Some(c) = self.concurrency {
            write!(f, " concurrency={c}")?;
        }
        if let Some(t) = self.timeout {
            write!(f, " timeout={}", show_duration(t))?;
        }
        if let Some(m) = self.max_response {
            write!(f, " max_response={}", show_size(m))?;
        }
        Ok(())
    }
}

impl ToolLimit {
    /// The rule a record names for this entry's `kind` (`rate`, `concurrency`, `timeout`,
    /// `max_response`): `mcp.linear.limits[0].rate`, with ` (project)` for a project entry on a
    /// machine server, whose key path the machine's own entries share.
    pub fn rule(&self, kind: &str) -> String {
        let mut rule = self.at.key.clone();
        push_key(&mut rule, kind);
        if self.project_on_machine {
            rule.push_str(" (project)");
        }
        rule
    }
}

/// The entries that apply to a call of `tool`, with their positions in `limits`: the first match
/// among the team policy's entries, the first among the machine file's and the first among the
/// project file's.
pub fn applicable<'l>(
    limits: &'l [ToolLimit],
    tool: &str,
) -> impl Iterator<Item = (usize, &'l ToolLimit)> {
    let first = move |origin: Origin| {
        limits
            .iter()
            .enumerate()
            .find(|(_, l)| l.origin == origin && l.tool.matches(tool))
    };
    first(Origin::Team)
        .into_iter()
        .chain(first(Origin::Machine))
        .chain(first(Origin::Project))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn pattern(text: &str) -> ToolPattern {
        ToolPattern::parse(text).unwrap()
    }

    fn limit(tool: &str, origin: Origin) -> ToolLimit {
        ToolLimit {
            tool: pattern(tool),
            rate: None,
            concurrency: Some(1),
            timeout: None,
            max_response: None,
            origin,
            project_on_machine: false,
            at: Location {
                file: Arc::from("f.yaml"),
                line: 1,
                column: 1,
                key: "mcp.s.limits[0]".into(),
            },
        }
    }

    #[test]
    fn each_file_contributes_its_first_match() {
        let limits = vec![
            limit("get_*", Origin::Machine),
            limit("*", Origin::Machine),
            limit("get_issue", Origin::Project),
            limit("*", Origin::Project),
        ];
        let at = |tool| {
            applicable(&limits, tool)
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
        };
        assert_eq!(at("get_issue"), [0, 2]);
        assert_eq!(at("get_team"), [0, 3]);
        assert_eq!(at("save"), [1, 3]);
        assert_eq!(applicable(&limits[..1], "save").count(), 0);
        let mut p = limit("*", Origin::Project);
        assert_eq!(p.rule("rate"), "mcp.s.limits[0].rate");
        p.project_on_machine = true;
        assert_eq!(p.rule("timeout"), "mcp.s.limits[0].timeout (project)");
    }
}
