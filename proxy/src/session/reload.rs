//! A running session's policy reload (README, "Reloading the policy"): a policy loaded and
//! validated by the caller (the CLI watches the files) is compared with the one in force
//! ([`fenzi_policy::engine::reload::compare`]), which splits the change: the MCP tool rules of the
//! session's servers take effect now (the policy in force with them adopted is swapped in whole,
//! [`crate::session::live`]), the rest waits for the next session. A reload that did not load is
//! [`refuse`]d. Every outcome is one `policy` record, written before anything changes: a reload
//! whose record cannot be written does not happen. What applied now and what waits are one
//! record (`reloaded`, its rule naming both), so the log never says half of it.

use crate::audit::writer::AuditEntry;
use crate::error::ProxyError;
use crate::session::context::SessionContext;
use crate::session::live::Live;
use fenzi_policy::audit::Outcome;
use fenzi_policy::engine::Policy;
use fenzi_policy::engine::reload::compare;
use std::sync::Arc;

/// Longest reason a `reload_refused` record keeps (the rest is on stderr or the session log).
const MAX_WHY_CHARS: usize = 400;

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reload {
    /// The new policy enforces exactly what the one in force does: nothing changed, no record.
    Unchanged,
    /// New tool rules are in force for every request from now on (the policy's hash; the servers
    /// whose tool rules changed); `next_session` names what else changed, which waits (empty when
    /// nothing does).
    Reloaded {
        policy: String,
        servers: Vec<String>,
        next_session: Vec<String>,
    },
    /// Only what waits for the next session changed: nothing changed now (`reload_refused`). What
    /// differs, as policy keys.
    NextSession { what: Vec<String> },
}

/// Compares `policy` (loaded and validated from `files`) with the one in force, and swaps in the
/// policy in force with its new tool rules. The record comes first: `Err` (the audit log cannot be
/// written) leaves the old policy in force.
pub(crate) async fn reload(
    session: &SessionContext,
    policy: Policy,
    files: &str,
) -> Result<Reload, ProxyError> {
    let _one = session.live.one_reload_at_a_time().await;
    let old = session.live.current();
    // A session opens its control socket at start, only when its policy holds calls; one without
    // it could hold a call no one can answer.
    let change = compare(&old.policy, &policy, session.confirm.answerable());
    let next_session = change.next_session;
    let Some(now) = change.now else {
        if next_session.is_empty() {
            return Ok(Reload::Unchanged);
        }
        record(
            session,
            Outcome::ReloadRefused,
            &old.hash,
            files,
            waiting(&next_session),
        )?;
        return Ok(Reload::NextSession { what: next_session });
    };
    let limits = old.limits.carried(&now.policy);
    let new = Arc::new(Live::new(now.policy, limits));
    let mut what = format!("tool rules of {}", servers_text(&now.servers));
    if !next_session.is_empty() {
        what.push_str("; ");
        what.push_str(&waiting(&next_session));
    }
    record(session, Outcome::Reloaded, &new.hash, files, what)?;
    let hash = new.hash.to_string();
    session.live.swap_in(new);
    Ok(Reload::Reloaded {
        policy: hash,
        servers: now.servers,
        next_session,
    })
}

fn waiting(what: &[String]) -> String {
    format!("takes effect in the next session: {}", what.join(", "))
}

/// Records that a change to `files` could not be loaded (`why`, which names no secret: config
/// errors name keys and places); the policy in force stays.
pub(crate) async fn refuse(
    session: &SessionContext,
    files: &str,
    why: &str,
) -> Result<(), ProxyError> {
    let _one = session.live.one_reload_at_a_time().await;
    let hash = session.live.current().hash.clone();
    record(session, Outcome::ReloadRefused, &hash, files, clip(why))
}

fn record(
    session: &SessionContext,
    outcome: Outcome,
    hash: &Arc<str>,
    files: &str,
    rule: String,
) -> Result<(), ProxyError> {
    let mut entry = AuditEntry::new(outcome, None, "POLICY", "", 0);
    entry.path = Some(files.to_string());
    entry.rule = Some(rule);
    entry.policy = Some(hash.clone());
    session
        .record(entry)
        .map_err(|_| ProxyError::Audit("the policy record could not be written".into()))
}

fn servers_text(servers: &[String]) -> String {
    let named: Vec<String> = servers.iter().map(|s| format!("mcp.{s}")).collect();
    named.join(", ")
}

/// The first line of `why`, cut to [`MAX_WHY_CHARS`], with a count of what was left out.
fn clip(why: &str) -> String {
    let mut lines = why.lines().filter(|l| !l.trim().is_empty());
    let first = lines.next().unwrap_or("the policy could not be loaded");
    let mut out: String = first.chars().take(MAX_WHY_CHARS).collect();
    if out.len() < first.len() {
        out.push('…');
    }
    let rest = lines
        .filter(|l| !l.starts_with(char::is_whitespace))
        .count();
    if rest > 0 {
        out.push_str(&format!(" (and {rest} more)"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_reason_keeps_its_first_line() {
        let why = "fenzi.yaml:3:1: bad\n  hint: fix it\nfenzi.yaml:9:2: worse\n";
        assert_eq!(clip(why), "fenzi.yaml:3:1: bad (and 1 more)");
        let long = "x".repeat(1000);
        assert_eq!(clip(&long).chars().count(), MAX_WHY_CHARS + 1);
        assert_eq!(clip(""), "the policy could not be loaded");
    }
}
