//! MCP enforcement on a buffered request to an MCP server's host:port: the policy classifies it, one
//! audit record is made per JSON-RPC message (or one for a request without messages), and a denial
//! answers with the policy's JSON-RPC error body, so the client reports it as that call's error and
//! its session keeps working. [`crate::request::decide`] orders this after the secrets check and writes the
//! records.

use crate::audit::sink::{Subject, recorded_decision};
use crate::audit::writer::AuditEntry;
use crate::connection::body::Body;
use crate::request::refusal::Refusal;
use crate::request::respond;
use crate::session::limits::Over;
use fenzi_policy::engine::{McpServer, Policy};
use fenzi_policy::mcp::inventory::Inventory;
use fenzi_policy::mcp::{McpDecision, RequestView, denial_body};
use fenzi_policy::{Decision, Reason};
use http::header::RETRY_AFTER;
use http::request::Parts;
use http::{HeaderValue, Response};

/// Runs `f` on the policy's view of a buffered request.
fn with_view<T>(parts: &Parts, body: &[u8], f: impl FnOnce(&RequestView<'_>) -> T) -> T {
    let headers: Vec<(&str, &[u8])> = parts
        .headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_bytes()))
        .collect();
    let view = RequestView {
        method: parts.method.as_str(),
        path: parts
            .uri
            .path_and_query()
            .map(|pq| pq.as_str())
            .unwrap_or("/"),
        headers: &headers,
        body,
    };
    f(&view)
}

/// The policy's decision about a buffered request to `server`.
pub(crate) fn classify(
    policy: &Policy,
    inventory: &Inventory,
    server: &McpServer,
    parts: &Parts,
    body: &[u8],
) -> McpDecision {
    with_view(parts, body, |view| {
        policy.decide_mcp(server, inventory, view)
    })
}

/// The audit entries of a decision: one per JSON-RPC message, or one for a request without any.
pub(crate) fn entries(subject: &Subject, decision: &McpDecision) -> Vec<AuditEntry> {
    if decision.messages.is_empty() {
        vec![subject.decided(&decision.overall)]
    } else {
        decision
            .messages
            .iter()
            .map(|m| subject.message(m, &decision.overall))
            .collect()
    }
}

/// A request the classifier refused: its records, answered with the policy's JSON-RPC error body
/// and the status of the decision its record carries.
pub(crate) fn refused(
    subject: &Subject,
    decision: &McpDecision,
    parts: &Parts,
    body: &[u8],
) -> Refusal {
    let named = answered(decision);
    Refusal::records(
        entries(subject, decision),
        answer(decision, parts, body),
        named.reason().unwrap_or(Reason::PolicyDenied),
        named.message.clone(),
    )
}

/// A request over a `limits` rate or concurrency ([`crate::session::limits`]): every message is recorded as
/// refused by the limit, and each request in it gets a JSON-RPC error, with 429 and `Retry-After`.
pub(crate) fn limited(
    subject: &Subject,
    decision: &McpDecision,
    over: Over,
    parts: &Parts,
    body: &[u8],
) -> Refusal {
    let mut limited = decision.clone();
    // Every message was allowed on its own; each now shares the limit's refusal.
    limited.overall = over.decision;
    let mut answer = answer(&limited, parts, body);
    answer
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(over.retry_after));
    Refusal::records(
        entries(subject, &limited),
        answer,
        Reason::RateLimited,
        limited.overall.message.clone(),
    )
}

/// The records of a request whose held calls were not confirmed ([`crate::request::held`]): every message
/// shares `refused_by` (`not_confirmed`), and each record says why in its `confirm` field.
pub(crate) fn not_confirmed_entries(
    subject: &Subject,
    decision: &McpDecision,
    refused_by: Decision,
    confirm: &str,
) -> Vec<AuditEntry> {
    let mut refused = decision.clone();
    refused.overall = refused_by;
    let mut records = entries(subject, &refused);
    for r in &mut records {
        r.confirm = Some(confirm.to_string());
    }
    records
}

/// The refusal of a request whose held calls were not confirmed: its records (above), 403, and a
/// JSON-RPC error for each request in it.
pub(crate) fn not_confirmed(
    subject: &Subject,
    decision: &McpDecision,
    refused_by: Decision,
    confirm: &str,
    parts: &Parts,
    body: &[u8],
) -> Refusal {
    let mut refused = decision.clone();
    refused.overall = refused_by.clone();
    let message = refused_by.message.clone();
    Refusal::records(
        not_confirmed_entries(subject, decision, refused_by, confirm),
        answer(&refused, parts, body),
        Reason::NotConfirmed,
        message,
    )
}

fn answer(decision: &McpDecision, parts: &Parts, body: &[u8]) -> Response<Body> {
    let status = answered(decision)
        .reason()
        .map_or(403, |reason| reason.http_status());
    respond::json(
        status,
        with_view(parts, body, |view| denial_body(decision, view)),
    )
}

/// The answer on an MCP endpoint to a request refused for another reason than its classification (a
/// placeholder sent to a host it is not bound to): each JSON-RPC request in it gets an error with
/// `refused`'s reason, so the client reports the call as failed and its session keeps working.
pub(crate) fn answer_as_rpc_errors(
    policy: &Policy,
    inventory: &Inventory,
    server: &McpServer,
    refused: &Decision,
    parts: &Parts,
    body: &[u8],
) -> Response<Body> {
    let mut decision = classify(policy, inventory, server, parts, body);
    decision.overall = refused.clone();
    for m in &mut decision.messages {
        m.decision = refused.clone();
    }
    let status = refused.reason().map_or(403, |reason| reason.http_status());
    respond::json(
        status,
        with_view(parts, body, |view| denial_body(&decision, view)),
    )
}

/// The decision a refused request's HTTP status follows, so that the status, the body and the record
/// agree: for a single message, the one its record carries (a message the policy denies keeps
/// `policy_denied` even when the request is also malformed, e.g. its `Mcp-*` headers disagree); for a
/// batch or a request without messages, the decision about the request as a whole.
fn answered(decision: &McpDecision) -> &Decision {
    match (decision.batch, decision.messages.as_slice()) {
        (false, [only]) => recorded_decision(only, &decision.overall),
        _ => &decision.overall,
    }
}
