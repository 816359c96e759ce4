//! `limits:` on a `url` or `account` server in a policy file (README, "Limits"): reading the
//! entries and checking that each can apply at all. The model is `model/limits.rs`, the values'
//! syntax and bounds `units`, the machine + project rule `merge/limits.rs`.
//!
//! Decisions the README does not spell out (each tested in `units` or under `testdata/config/`):
//! - An entry has a `tool` and at least one limit; `timeout` and `max_response` are written as
//!   `units` says (`30s`, `1MiB`, or a bare byte count for `max_response`).
//! - An entry that can never apply is an error: one whose `tool` no `tools.allow` pattern can
//!   match (unless `allow_annotated` may allow any name), one all of whose tools `tools.deny`
//!   denies, and one an earlier entry of the same list covers (the first match applies, so it
//!   would never be reached).

use super::{Fields, Reader, child, index};
use crate::config::ConfigError;
use crate::config::model::{Location, ServerKind, ToolLimit, ToolRules, place};
use crate::config::units::{MAX_CONCURRENCY, check_size, parse_duration, parse_rate, parse_size};
use crate::config::yaml::{Node, Value, push_key};
use crate::tool_pattern::ToolPattern;

const KEYS: &[&str] = &["tool", "rate", "concurrency", "timeout", "max_response"];
const LIMITS_HINT: &str = "write a list of entries, e.g. `limits: [{tool: \"*\", rate: 60/min, \
     concurrency: 4, timeout: 30s, max_response: 1MiB}]`";
const TOOL_HINT: &str = "name the tools the entry counts, as in `tools.allow`: an exact name, a \
     glob like `get_*`, or `\"*\"` for every tool";
const RATE_HINT: &str = "write calls per second, minute or hour: `10/s`, `60/min`, `1000/h`";
const CONCURRENCY_HINT: &str = "write how many calls may be in flight at once, e.g. `4`";
const TIMEOUT_HINT: &str = "write a number and a unit, ms, s, m or h: `500ms`, `30s`, `2m`";
const SIZE_HINT: &str = "write a byte count or a number and a unit, B, KB, MB, GB, KiB, MiB or \
     GiB: `1MiB`, `512KiB`, `1000000`";

impl Reader {
    /// `limits` of a `url` or `account` entry (the mapping `f` at `path`), checked against its
    /// tool rules: those of `server`, or none when they are themselves wrong (the entries are then
    /// read but not checked against them). `None` when anything was wrong.
    pub(super) fn limits(
        &mut self,
        f: &Fields<'_>,
        path: &str,
        server: Option<&ServerKind>,
    ) -> Option<Vec<ToolLimit>> {
        let Some((_, node)) = f.get("limits") else {
            return Some(Vec::new());
        };
        let tools = match server {
            Some(
                ServerKind::Remote { tools, .. }
                | ServerKind::Account { tools, .. }
                | ServerKind::Local { tools, .. },
            ) => Some(tools),
            _ => None,
        };
        let path = child(path, "limits");
        let before = self.errors.len();
        let Value::Seq(items) = &node.value else {
            self.wrong_type(node, &path, "a list of limits entries", LIMITS_HINT);
            return None;
        };
        let mut out: Vec<(ToolLimit, Location)> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            if let Some(entry) = self.limit_entry(item, &index(&path, i)) {
                out.push(entry);
            }
        }
        if let Some(tools) = tools {
            self.check_limits_apply(&out, tools);
        }
        (self.errors.len() == before).then(|| out.into_iter().map(|(l, _)| l).collect())
    }

    /// One entry, and where its `tool` was written.
    fn limit_entry(&mut self, node: &Node, key: &str) -> Option<(ToolLimit, Location)> {
        let Value::Map(pairs) = &node.value else {
            self.wrong_type(
                node,
                key,
                "a mapping with `tool` and its limits",
                LIMITS_HINT,
            );
            return None;
        };
        let mut ok = true;
        // An unknown key is likely a misspelt limit: "no limit" is then not said as well.
        let mut unknown = false;
        let mut tool = None;
        let (mut rate, mut concurrency, mut timeout, mut max_response) = (None, None, None, None);
        for (k, v) in pairs {
            let Value::Str(name) = &k.value else {
                self.wrong_type(k, key, "a string key", "write keys as plain names");
                ok = false;
                continue;
            };
            let mut vkey = key.to_string();
            push_key(&mut vkey, name);
            let read: Result<(), String> = match (name.as_str(), &v.value) {
                ("tool", Value::Str(s)) => ToolPattern::parse(s)
                    .map(|p| tool = Some((p, self.at(v, &vkey))))
                    .map_err(|err| err.to_string()),
                ("rate", Value::Str(s)) => parse_rate(s).map(|r| rate = Some(r)),
                ("concurrency", Value::Int(n)) => match u32::try_from(*n) {
                    Ok(0) => {
                        Err("a concurrency of 0 allows no call at all; it is at least 1".into())
                    }
                    Ok(n) if n <= MAX_CONCURRENCY => {
                        concurrency = Some(n);
                        Ok(())
                    }
                    _ => Err(format!("a concurrency is from 1 to {MAX_CONCURRENCY}")),
                },
                ("timeout", Value::Str(s)) => parse_duration(s).map(|d| timeout = Some(d)),
                ("timeout", Value::Int(n)) => Err(format!("`{n}` needs a unit: ms, s, m or h")),
                ("max_response", Value::Str(s)) => parse_size(s).map(|b| max_response = Some(b)),
                ("max_response", Value::Int(n)) => {
                    check_size(u64::try_from(*n).ok(), &n.to_string())
                        .map(|b| max_response = Some(b))
                }
                (known @ ("tool" | "rate" | "concurrency" | "timeout" | "max_response"), _) => {
                    let (what, hint) = match known {
                        "tool" => ("a tool name or glob", TOOL_HINT),
                        "rate" => ("a rate like 60/min", RATE_HINT),
                        "concurrency" => ("an integer", CONCURRENCY_HINT),
                        "timeout" => ("a duration like 30s", TIMEOUT_HINT),
                        _ => ("a size like 1MiB", SIZE_HINT),
                    };
                    self.wrong_type(v, &vkey, what, hint);
                    ok = false;
                    continue;
                }
                (other, _) => {
                    unknown = true;
                    let hint = match KEYS.iter().find(|a| a.eq_ignore_ascii_case(other)) {
                        Some(a) => format!("keys are case-sensitive: did you mean `{a}`?"),
                        None => format!("known keys here: {}", KEYS.join(", ")),
                    };
                    self.error(k, &vkey, format!("unknown key `{other}`"), &hint);
                    ok = false;
                    continue;
                }
            };
            if let Err(message) = read {
                let hint = match name.as_str() {
                    "tool" => TOOL_HINT,
                    "rate" => RATE_HINT,
                    "concurrency" => CONCURRENCY_HINT,
                    "timeout" => TIMEOUT_HINT,
                    _ => SIZE_HINT,
                };
                self.error(v, &vkey, message, hint);
                ok = false;
            }
        }
        let has_tool_key = pairs
            .iter()
            .any(|(k, _)| matches!(&k.value, Value::Str(s) if s == "tool"));
        if !has_tool_key {
            self.error(
                node,
                key,
                "the entry has no `tool`",
                "add `tool: \"*\"` to limit every tool, or the name or glob of the tools it counts",
            );
            ok = false;
        }
        let has_limit = pairs
            .iter()
            .any(|(k, _)| matches!(&k.value, Value::Str(s) if KEYS[1..].contains(&s.as_str())));
        if !has_limit && !unknown {
            self.error(
                node,
                key,
                "the entry sets no limit",
                "add at least one of `rate`, `concurrency`, `timeout`, `max_response`",
            );
            ok = false;
        }
        let (tool, tool_at) = tool?;
        ok.then(|| {
            (
                ToolLimit {
                    tool,
                    rate,
                    concurrency,
                    timeout,
                    max_response,
                    origin: self.origin,
                    project_on_machine: false,
                    at: self.at(node, key),
                },
                tool_at,
            )
        })
    }

    /// Every entry must be able to apply: not behind an earlier entry covering it, not on tools the
    /// server denies, not on tools it does not allow.
    fn check_limits_apply(&mut self, entries: &[(ToolLimit, Location)], tools: &ToolRules) {
        let allowed = tools
            .allow
            .iter()
            .map(|a| format!("`{}`", a.value))
            .collect::<Vec<_>>()
            .join(", ");
        for (i, (limit, at)) in entries.iter().enumerate() {
            let pattern = &limit.tool;
            if let Some((earlier, _)) = entries[..i]
                .iter()
                .find(|(earlier, _)| pattern.is_covered_by(&earlier.tool))
            {
                self.error_at(
                    at.clone(),
                    format!(
                        "this entry never applies: `{}` ({}, `tool: {}`) comes first and matches \
                     every tool `{pattern}` matches",
                        earlier.at.key,
                        place(&earlier.at),
                        earlier.tool
                    ),
                    "the first matching entry applies: put the narrower entry first",
                );
            } else if let Some(d) = tools.deny.iter().find(|d| pattern.is_covered_by(&d.value)) {
                self.error_at(
                at.clone(),
                format!(
                    "every tool `{pattern}` matches is denied (`{}` at line {}), so the limit never \
                     applies",
                    d.value, d.at.line
                ),
                "limit tools the server allows, or remove the entry",
            );
            } else if tools.allow_annotated.is_empty()
                && !tools.allow.iter().any(|a| a.value.overlaps(pattern))
            {
                let hint = if allowed.is_empty() {
                    "the server allows no tool (`tools.allow: []`), so no limit can apply; remove \
                 `limits`"
                        .to_string()
                } else {
                    format!(
                        "limit tools the server allows ({allowed}), or write `tool: \"*\"` for all \
                     of them"
                    )
                };
                self.error_at(
                    at.clone(),
                    format!(
                        "`{pattern}` matches no tool this server allows, so the limit never applies"
                    ),
                    &hint,
                );
            }
        }
    }

    /// A problem at `at` (a place already taken from the tree).
    fn error_at(&mut self, at: Location, message: impl Into<String>, hint: &str) {
        self.errors.push(ConfigError {
            at: Some(at),
            message: message.into(),
            hint: Some(hint.to_string()),
        });
    }
}
