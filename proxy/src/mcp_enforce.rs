//! The request-body phase of an inspected request: the body is buffered up to the policy's limit
//! (413 beyond it, and nothing forwarded) so that every decision about it is made before a byte goes
//! upstream; and, on an MCP server's host:port, the policy classifies the buffered request, one
//! audit record is written per JSON-RPC message (or one for a request without messages), and a
//! denial answers with the policy's JSON-RPC error body, so the client reports it as that call's
//! error and its session keeps working. The caller (`forward::exchange`) orders the phases and
//! writes the records.

use crate::audit_sink::{Subject, recorded_decision};
use crate::audit_writer::AuditEntry;
use crate::error::ProxyError;
use crate::respond::{self, Body};
use crate::server::Shared;
use bytes::Bytes;
use fenzi_policy::Decision;
use fenzi_policy::engine::McpServer;
use fenzi_policy::mcp::{McpDecision, RequestView, denial_body};
use http::Response;
use http::header::CONTENT_LENGTH;
use http::request::Parts;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use tokio::time::timeout;

/// Reads a request body whole, up to the policy's limit. `Err` is the answer to send instead
/// (already recorded): 413 beyond the limit, 400 when the client failed to send it.
pub(crate) async fn read_body(
    shared: &Shared,
    subject: &Subject,
    parts: &Parts,
    body: Incoming,
) -> Result<Bytes, Response<Body>> {
    let limit = shared.policy.limits().max_bytes;
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(shared, subject).await);
    }
    let wait = shared.options.body_read_timeout;
    match timeout(wait, Limited::new(body, limit).collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(too_large(shared, subject).await)
        }
        Ok(Err(e)) => {
            Err(client_failed(shared, subject, ProxyError::ClientBody(e.to_string())).await)
        }
        Err(_) => Err(client_failed(shared, subject, ProxyError::ClientBodyTimeout(wait)).await),
    }
}

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
    shared: &Shared,
    server: &McpServer,
    parts: &Parts,
    body: &[u8],
) -> McpDecision {
    with_view(parts, body, |view| shared.policy.decide_mcp(server, view))
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

/// The answer to a request the classifier refused: the policy's JSON-RPC error body, with the
/// status of the decision its record carries.
pub(crate) fn refusal(decision: &McpDecision, parts: &Parts, body: &[u8]) -> Response<Body> {
    let status = answered(decision)
        .reason()
        .map_or(403, |reason| reason.http_status());
    respond::json(
        status,
        with_view(parts, body, |view| denial_body(decision, view)),
    )
}

/// The answer on an MCP endpoint to a request refused before classification (a placeholder sent to
/// a host it is not bound to): each JSON-RPC request in it gets an error with `refused`'s reason,
/// so the client reports the call as failed and its session keeps working.
pub(crate) fn refusal_for(
    shared: &Shared,
    server: &McpServer,
    refused: &Decision,
    parts: &Parts,
    body: &[u8],
) -> Response<Body> {
    let mut decision = classify(shared, server, parts, body);
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

async fn too_large(shared: &Shared, subject: &Subject) -> Response<Body> {
    let decision = shared.policy.body_too_large();
    if !shared.record(subject.decided(&decision)).await {
        return respond::audit_unavailable();
    }
    respond::denied(&decision)
}

/// A request whose body never arrived whole: recorded as failed by the client, answered 400.
async fn client_failed(shared: &Shared, subject: &Subject, error: ProxyError) -> Response<Body> {
    if !shared.record(subject.failed(&error)).await {
        return respond::audit_unavailable();
    }
    respond::failure(&error)
}
