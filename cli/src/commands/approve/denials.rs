//! Reading a session's audit log into what `fenzi approve` offers: the distinct (server, tool)
//! pairs of the `tools/call`s denied as `policy_denied`, in the order they were first denied, with
//! how often and the rules that denied them. Only the log is read; nothing is written to it.

use anyhow::{Context, Result};
use fenzi_policy::audit::{AuditRecord, Outcome};
use std::collections::BTreeSet;
use std::io::BufRead;
use std::path::Path;

/// One denied (server, tool) pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub server: String,
    pub tool: String,
    pub count: u64,
    /// The first denial's `ts`.
    pub first_seen: String,
    /// Every rule that denied it (`mcp.x default deny`, a deny pattern, an argument rule).
    pub rules: BTreeSet<String>,
}

/// What the log held.
#[derive(Debug, Default)]
pub struct Session {
    /// The session id of its records (the first one's).
    pub id: Option<String>,
    pub denied: Vec<Denied>,
    /// Lines that are not audit records (a log being written, or damaged).
    pub unreadable: usize,
}

/// A record approve can act on: a denied `tools/call` of a named tool on a named server, denied by
/// the policy (not a rate limit, a pin or a broken request).
fn pair(r: &AuditRecord) -> Option<(&str, &str)> {
    (r.decision == Outcome::Denied
        && r.reason.as_deref() == Some("policy_denied")
        && r.rpc.as_deref() == Some(fenzi_policy::mcp::TOOLS_CALL))
    .then_some((r.server.as_deref()?, r.tool.as_deref()?))
}

pub fn read(path: &Path) -> Result<Session> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot read the audit log {}", path.display()))?;
    read_from(std::io::BufReader::new(file))
        .with_context(|| format!("cannot read the audit log {}", path.display()))
}

pub fn read_from(reader: impl BufRead) -> std::io::Result<Session> {
    let mut s = Session::default();
    for line in reader.split(b'\n') {
        let line = line?;
        if line.is_empty() {
            continue;
        }
        let Ok(r) = serde_json::from_slice::<AuditRecord>(&line) else {
            s.unreadable += 1;
            continue;
        };
        if s.id.is_none() {
            s.id = Some(r.session.clone());
        }
        let Some((server, tool)) = pair(&r) else {
            continue;
        };
        match s
            .denied
            .iter_mut()
            .find(|d| d.server == server && d.tool == tool)
        {
            Some(d) => {
                d.count += 1;
                d.rules.extend(r.rule.clone());
            }
            None => s.denied.push(Denied {
                server: server.to_string(),
                tool: tool.to_string(),
                count: 1,
                first_seen: r.ts.clone(),
                rules: r.rule.iter().cloned().collect(),
            }),
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fenzi_policy::audit::{GENESIS, to_line};

    fn record(ts: &str, decision: Outcome, reason: Option<&str>, tool: &str) -> String {
        to_line(&AuditRecord {
            program: None,
            ts: ts.into(),
            seq: 1,
            session: "s1".into(),
            decision,
            reason: reason.map(Into::into),
            method: "POST".into(),
            host: "127.0.0.1".into(),
            port: 8443,
            path: Some("/mcp".into()),
            server: Some("tracker".into()),
            rpc: Some("tools/call".into()),
            tool: Some(tool.into()),
            rpc_id: Some("1".into()),
            secrets: vec![],
            rule: Some("mcp.tracker default deny".into()),
            source: None,
            hidden: None,
            confirm: None,
            policy: None,
            client: None,
            prompt: None,
            resource: None,
            transport: None,
            local_server: None,
            prev: GENESIS.into(),
        })
    }

    #[test]
    fn distinct_pairs_in_first_seen_order_with_counts() {
        let log = [
            record(
                "2026-01-01T00:00:01.000Z",
                Outcome::Denied,
                Some("policy_denied"),
                "b",
            ),
            record("2026-01-01T00:00:02.000Z", Outcome::Allowed, None, "ok"),
            record(
                "2026-01-01T00:00:03.000Z",
                Outcome::Denied,
                Some("policy_denied"),
                "a",
            ),
            record(
                "2026-01-01T00:00:04.000Z",
                Outcome::Denied,
                Some("policy_denied"),
                "b",
            ),
            record(
                "2026-01-01T00:00:05.000Z",
                Outcome::Denied,
                Some("rate_limited"),
                "c",
            ),
            "not a record".to_string(),
        ]
        .join("\n");
        let s = read_from(log.as_bytes()).unwrap();
        assert_eq!(s.id.as_deref(), Some("s1"));
        assert_eq!(s.unreadable, 1);
        let got: Vec<(&str, u64, &str)> = s
            .denied
            .iter()
            .map(|d| (d.tool.as_str(), d.count, d.first_seen.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("b", 2, "2026-01-01T00:00:01.000Z"),
                ("a", 1, "2026-01-01T00:00:03.000Z")
            ]
        );
    }
}
