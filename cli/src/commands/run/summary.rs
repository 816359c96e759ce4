//! What `fenzi run` prints when the session ends: its denials (how many, by reason, the first few
//! as `fenzi log` shows them, the command that shows them all, and `fenzi approve` when a denied
//! tool could be approved), and where the session's
//! warnings went, since nothing is written onto the agent's terminal while it runs.

use crate::commands::log::render::{hint, render};
use fenzi_policy::audit::{AuditRecord, Outcome};
use std::collections::BTreeMap;
use std::path::Path;

/// Denials shown in full at the end; the rest are counted.
const SHOWN: usize = 3;

/// The session's refusals, read from its audit log.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Denials {
    /// By reason code (`policy_denied`, ...), denied and failed records alike.
    pub by_reason: BTreeMap<String, usize>,
    /// The first few, rendered as `fenzi log` renders them.
    pub first: Vec<String>,
    pub total: usize,
    /// Tool calls denied only because no `allow` pattern names the tool (`fenzi approve` can).
    pub approvable: usize,
}

impl Denials {
    /// Reads the log at `path`; a log that cannot be read (or lines that are not records) counts
    /// as what it can.
    pub fn read(path: &Path) -> Denials {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        Denials::from_lines(text.lines())
    }

    fn from_lines<'a>(lines: impl Iterator<Item = &'a str>) -> Denials {
        let mut out = Denials::default();
        for line in lines {
            let Ok(record) = serde_json::from_str::<AuditRecord>(line) else {
                continue;
            };
            if record.decision != Outcome::Denied {
                continue;
            }
            out.total += 1;
            if hint(&record).is_some_and(|h| h.starts_with("fenzi approve ")) {
                out.approvable += 1;
            }
            let reason = record.reason.clone().unwrap_or_else(|| "-".into());
            *out.by_reason.entry(reason).or_default() += 1;
            if out.first.len() < SHOWN {
                out.first.push(render(&record, false, false));
            }
        }
        out
    }

    /// The lines to print; none when nothing was denied.
    pub fn lines(&self, session: &str) -> Vec<String> {
        if self.total == 0 {
            return Vec::new();
        }
        let counts: Vec<String> = self
            .by_reason
            .iter()
            .map(|(reason, n)| format!("{reason} {n}"))
            .collect();
        let mut out = vec![format!(
            "fenzi run: {} {} denied in this session ({}):",
            self.total,
            if self.total == 1 {
                "request was"
            } else {
                "requests were"
            },
            counts.join(", ")
        )];
        out.extend(self.first.iter().map(|l| format!("  {l}")));
        if self.total > self.first.len() {
            out.push(format!("  … and {} more", self.total - self.first.len()));
        }
        out.push(format!(
            "  all of them: fenzi log --session {session} --denied"
        ));
        if self.approvable > 0 {
            out.push(format!(
                "  to allow a denied tool (one tool, one server): fenzi approve --session {session}"
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(decision: &str, reason: Option<&str>, tool: &str) -> String {
        let reason = reason.map_or("null".to_string(), |r| format!("\"{r}\""));
        format!(
            r#"{{"ts":"2026-12-03T10:00:00.000Z","seq":1,"session":"s","decision":"{decision}","reason":{reason},"method":"POST","host":"mcp.example.com","port":443,"path":"/mcp","server":"m","rpc":"tools/call","tool":"{tool}","rpc_id":"1","secrets":[],"rule":"r","prev":"0000000000000000000000000000000000000000000000000000000000000000"}}"#
        )
    }

    #[test]
    fn denials_are_counted_by_reason_and_the_first_are_shown() {
        let lines = [
            line("allowed", None, "echo"),
            line("denied", Some("policy_denied"), "delete_a"),
            line("denied", Some("tool_changed"), "echo"),
            "not a record".to_string(),
            line("denied", Some("policy_denied"), "delete_b"),
            line("denied", Some("policy_denied"), "delete_c"),
        ];
        let d = Denials::from_lines(lines.iter().map(String::as_str));
        assert_eq!(d.total, 4);
        assert_eq!(d.by_reason["policy_denied"], 3);
        let out = d.lines("abc");
        assert_eq!(
            out[0],
            "fenzi run: 4 requests were denied in this session (policy_denied 3, tool_changed 1):"
        );
        assert!(
            out[1].contains("tools/call delete_a  policy_denied"),
            "{out:?}"
        );
        assert!(out[3].contains("delete_b"), "{out:?}");
        assert_eq!(out[4], "  … and 1 more");
        assert_eq!(out[5], "  all of them: fenzi log --session abc --denied");
        assert_eq!(out.len(), 6, "no approve line: no rule says `default deny`");
        assert!(Denials::default().lines("abc").is_empty());
        let approvable = line("denied", Some("policy_denied"), "delete_a")
            .replace("\"rule\":\"r\"", "\"rule\":\"mcp.m default deny\"");
        let out = Denials::from_lines([approvable.as_str()].into_iter()).lines("abc");
        assert_eq!(
            out.last().unwrap(),
            "  to allow a denied tool (one tool, one server): fenzi approve --session abc"
        );
    }
}
