//! MCP enforcement, the request-body phase for an MCP server's host:port: the body is buffered up to the
//! policy's limit (413 beyond it, and nothing forwarded), the policy classifies the request, one audit
//! record is written per JSON-RPC message (or one for a request without messages), and only then is the
//! exact buffered body released for forwarding. A denial answers with the policy's JSON-RPC error body,
//! so the client reports it as that call's error and its session keeps working.

use crate::audit_sink::{Subject, recorded_decision};
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

/// Reads and decides one request. `Ok` is the body to forward; `Err` is the answer to send instead.
pub(crate) async fn inspect(
    shared: &Shared,
    server: &McpServer,
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
    let bytes = match timeout(wait, Limited::new(body, limit).collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return Err(too_large(shared, subject).await);
        }
        Ok(Err(e)) => {
            return Err(
                client_failed(shared, subject, ProxyError::ClientBody(e.to_string())).await,
            );
        }
        Err(_) => {
            return Err(client_failed(shared, subject, ProxyError::ClientBodyTimeout(wait)).await);
        }
    };

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
        body: &bytes,
    };
    let decision = shared.policy.decide_mcp(server, &view);
    let entries = if decision.messages.is_empty() {
        vec![subject.decided(&decision.overall)]
    } else {
        decision
            .messages
            .iter()
            .map(|m| subject.message(m, &decision.overall))
            .collect()
    };
    for entry in entries {
        if !shared.record(entry).await {
            return Err(respond::audit_unavailable());
        }
    }
    if decision.overall.is_allowed() {
        Ok(bytes)
    } else {
        let status = answered(&decision)
            .reason()
            .map_or(403, |reason| reason.http_status());
        Err(respond::json(status, denial_body(&decision, &view)))
    }
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
