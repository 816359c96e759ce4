//! Holding an allowed request's `tools.confirm` calls ([`crate::confirm`]): called by
//! [`crate::request::decide`] once every other decision allowed the request and its `limits` admitted it,
//! before its records are written and before anything is forwarded.
//!
//! Records: a `held` record per held call when the hold starts (its rule the confirm pattern, its
//! `confirm` field the longest wait), then exactly one decision per message as for any request:
//! `allowed` with `confirm: "yes by uid U pid P"` on each held call, or `denied` `not_confirmed`
//! on every message, whose `confirm` says why (`no by ...`, `no answer in 2m`, `session ended`,
//! `client gone`). So "one decision record per message" still holds: `held` is not a decision,
//! and `fenzi log` shows the wait and the answer beside each other.

use crate::audit::writer::AuditEntry;
use crate::confirm::protocol::cut_arguments;
use crate::confirm::{CLIENT_GONE, Call, Ended, show};
use crate::request::context::RequestContext;
use crate::request::mcp_enforce;
use crate::request::refusal::Refusal;
use crate::session::context::SessionContext;
use fenzi_policy::audit::Outcome;
use fenzi_policy::config::Confirm;
use fenzi_policy::engine::McpServer;
use fenzi_policy::json::{self, JsonLimits, Value};
use fenzi_policy::mcp::McpDecision;
use fenzi_policy::{Decision, Reason};
use http::request::Parts;
use std::sync::Arc;

/// Whether `decision` (allowed, to `server`) has a call `tools.confirm` holds: only then is
/// [`hold_confirm_calls`] needed.
pub(crate) fn holds_any(server: &McpServer, decision: &McpDecision) -> bool {
    decision.messages.iter().any(|m| {
        m.tool
            .as_deref()
            .is_some_and(|tool| server.confirm.matching(tool).is_some())
    })
}

/// Holds the confirm calls of `decision` (allowed, to `server`) until a person answers. `Ok` when
/// there are none or every one was confirmed (`entries`, the request's records, then name who
/// answered); else the `not_confirmed` refusal. `body` is the request as the client sent it
/// (placeholders, not values), `secrets` the secrets its records name.
pub(crate) async fn hold_confirm_calls(
    cx: &RequestContext<'_>,
    server: &McpServer,
    decision: &McpDecision,
    parts: &Parts,
    body: &[u8],
    secrets: &[String],
    entries: &mut [AuditEntry],
) -> Result<(), Refusal> {
    let held: Vec<(usize, &str, String)> = decision
        .messages
        .iter()
        .enumerate()
        .filter_map(|(i, m)| {
            let tool = m.tool.as_deref()?;
            let pattern = server.confirm.matching(tool)?;
            Some((i, tool, Confirm::rule(&server.name, &pattern.value)))
        })
        .collect();
    let Some((_, first_tool, first_rule)) = held.first() else {
        return Ok(());
    };
    let session = cx.session;
    let timeout = server.confirm.timeout;
    let arguments = arguments_of(body, decision.batch);
    let mut calls = Vec::new();
    for (i, tool, rule) in &held {
        let mut entry = cx
            .subject
            .message(&decision.messages[*i], &decision.overall);
        entry.outcome = Outcome::Held;
        entry.rule = Some(rule.clone());
        entry.confirm = Some(format!("waits up to {}", show(timeout)));
        entry.secrets = secrets.to_vec();
        session.record(entry)?;
        let text = arguments
            .get(*i)
            .cloned()
            .flatten()
            .map_or_else(|| "{}".to_string(), |t| masked(session, &t));
        calls.push(Call {
            server: server.name.clone(),
            tool: tool.to_string(),
            arguments: cut_arguments(&text),
            rule: rule.clone(),
        });
    }
    let refused_by = |why: &str| {
        Decision::deny(
            Reason::NotConfirmed,
            first_rule.clone(),
            format!(
                "tools/call {} was held for a person's answer ({first_rule}) and not confirmed: {why}",
                shown(first_tool)
            ),
        )
    };
    let refusal = |why: &str| {
        mcp_enforce::not_confirmed(&cx.subject, decision, refused_by(why), why, parts, body)
            .naming_secrets(secrets)
    };
    // The records of a hold whose client hung up: written by the hold's drop, off this task.
    let mut gone = mcp_enforce::not_confirmed_entries(
        &cx.subject,
        decision,
        refused_by(CLIENT_GONE),
        CLIENT_GONE,
    );
    for entry in &mut gone {
        entry.secrets = secrets.to_vec();
    }
    let on_drop: Box<dyn FnOnce() + Send> = {
        let session: Arc<SessionContext> = session.clone();
        Box::new(move || {
            tracing::info!("a held call's client went away; it is denied");
            // A failed write is logged by `record`; there is no one left to answer.
            let _ = session.record_all(gone);
        })
    };
    let hold = session.confirm.hold(calls, timeout, on_drop);
    let mut guard = cx.guard.clone();
    let ended = hold.wait(async move { guard.stopping().await }).await;
    match ended {
        Ended::Confirmed(peers) => {
            for ((i, ..), peer) in held.iter().zip(peers) {
                if let Some(entry) = entries.get_mut(*i) {
                    entry.confirm = Some(format!("yes by {peer}"));
                }
            }
            Ok(())
        }
        other => Err(refusal(&other.record_text())),
    }
}

/// A tool name as a denial message shows it: printable ASCII, at most 128 characters.
fn shown(tool: &str) -> String {
    tool.chars()
        .take(128)
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect()
}

/// `params.arguments` of each message of `body` as compact JSON text (`None` where a message has
/// none), in message order.
fn arguments_of(body: &[u8], batch: bool) -> Vec<Option<String>> {
    let Ok(value) = json::parse(body, &JsonLimits::default()) else {
        return Vec::new();
    };
    let one = |m: &Value| {
        m.get("params")
            .and_then(|p| p.get("arguments"))
            .map(fenzi_policy::json_text::compact)
    };
    match (&value, batch) {
        (Value::Array(items), true) => items.iter().map(one).collect(),
        (m, false) => vec![one(m)],
        _ => Vec::new(),
    }
}

/// `text` with this session's placeholders (and any value) as `[placeholder:NAME]`, and anything
/// else shaped like a placeholder as `[placeholder]`: a person is shown names, never tokens.
fn masked(session: &SessionContext, text: &str) -> String {
    let mut text = text.to_string();
    if !session.secrets.is_empty() {
        let secrets = session.secrets.get();
        if let Some(scrubbed) = secrets.scrubber().scrub(text.as_bytes()) {
            text = String::from_utf8_lossy(&scrubbed).into_owned();
        }
        text = secrets.scanner().redact(&text).into_owned();
    }
    crate::secrets::placeholders::mask_placeholder_like(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_read_per_message() {
        let one = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"b":1,"a":[true]}}}"#;
        assert_eq!(
            arguments_of(one, false),
            [Some(r#"{"b":1,"a":[true]}"#.to_string())]
        );
        let batch = br#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"b","arguments":{}}}]"#;
        assert_eq!(arguments_of(batch, true), [None, Some("{}".to_string())]);
        assert!(arguments_of(b"not json", false).is_empty());
    }

    #[test]
    fn anything_shaped_like_a_placeholder_is_masked() {
        let ph = format!("fenzi_ph_{}", "A".repeat(43));
        assert_eq!(
            crate::secrets::placeholders::mask_placeholder_like(&format!(
                "{{\"t\":\"Bearer {ph}\",\"u\":\"{ph}x\"}}"
            )),
            "{\"t\":\"Bearer [placeholder]\",\"u\":\"[placeholder]\"}"
        );
        assert_eq!(
            crate::secrets::placeholders::mask_placeholder_like("plain fenzi_"),
            "plain fenzi_"
        );
    }
}
