//! The answers the proxy writes itself: denials (`{"error": "<reason>", "message": ...}`, or a JSON
//! body built elsewhere, such as the JSON-RPC errors of an MCP endpoint), failures, and the 503 of a
//! decision that could not be recorded. Only [`crate::refusal`] sends them to a client.

use crate::body::{Body, full};
use crate::error::ProxyError;
use fenzi_policy::{Decision, Reason};
use http::{HeaderValue, Response, StatusCode, header};

/// A JSON response with `status`.
pub(crate) fn json(status: u16, body: Vec<u8>) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// `{"error": "<reason>", "message": "..."}` with the reason's status.
pub(crate) fn denial(reason: Reason, message: &str) -> Response<Body> {
    let body = serde_json::json!({ "error": reason.code(), "message": message });
    json(reason.http_status(), body.to_string().into_bytes())
}

/// The response for a denied decision outside an MCP endpoint.
pub(crate) fn denied(decision: &Decision) -> Response<Body> {
    // An allowed decision never gets here; should one, refuse rather than answer 200.
    let reason = decision.reason().unwrap_or(Reason::PolicyDenied);
    denial(reason, &decision.message)
}

/// The response for an error.
pub(crate) fn failure(error: &ProxyError) -> Response<Body> {
    denial(error.reason(), &error.to_string())
}

/// 503 for a decision that could not be recorded: nothing is forwarded.
pub(crate) fn audit_unavailable() -> Response<Body> {
    denial(
        Reason::AuditUnavailable,
        "the audit log could not be written, so the request was not forwarded",
    )
}
