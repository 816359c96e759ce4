//! The answers the proxy writes itself: denials (`{"error": "<reason>", "message": ...}`, or a JSON
//! body built elsewhere, such as the JSON-RPC errors of an MCP endpoint), failures, and the 503 of a
//! decision that could not be recorded. Only [`crate::request::refusal`] sends them to a client, each naming
//! its reason where clients show it ([`naming`]): a `Proxy-Status` header (RFC 9209) with the
//! reason and a line for people, and on HTTP/1.1 a reason phrase such as `Forbidden
//! (policy_denied)`, which is what curl and Python print for a refused tunnel.

use crate::connection::body::{Body, full};
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

/// What the 503 of a decision that could not be recorded says.
pub(crate) const AUDIT_UNAVAILABLE: &str =
    "the audit log could not be written, so the request was not forwarded";

/// 503 for a decision that could not be recorded: nothing is forwarded.
pub(crate) fn audit_unavailable() -> Response<Body> {
    denial(Reason::AuditUnavailable, AUDIT_UNAVAILABLE)
}

/// The longest `details` a `Proxy-Status` carries.
const MAX_DETAIL: usize = 200;

/// `answer` with `Proxy-Status: fenzi; error=<type>; details="<reason>: <detail>"` and the reason
/// phrase `<standard phrase> (<reason>)`. The detail is the decision's message (policy names and
/// request metadata, never secret material), kept to printable ASCII.
pub(crate) fn naming(mut answer: Response<Body>, reason: Reason, detail: &str) -> Response<Body> {
    let mut details = format!("{}: ", reason.code());
    for c in detail.chars().take(MAX_DETAIL) {
        match c {
            '"' | '\\' => {
                details.push('\\');
                details.push(c);
            }
            ' '..='~' => details.push(c),
            _ => details.push('?'),
        }
    }
    let value = format!(
        "fenzi; error={}; details=\"{details}\"",
        proxy_error_type(reason)
    );
    if let Ok(value) = HeaderValue::from_str(&value) {
        answer.headers_mut().insert("proxy-status", value);
    }
    let phrase = format!(
        "{} ({})",
        answer.status().canonical_reason().unwrap_or("Error"),
        reason.code()
    );
    if let Ok(phrase) = hyper::ext::ReasonPhrase::try_from(phrase) {
        answer.extensions_mut().insert(phrase);
    }
    answer
}

/// The RFC 9209 error type closest to each reason.
fn proxy_error_type(reason: Reason) -> &'static str {
    match reason {
        Reason::PrivateAddress => "destination_ip_prohibited",
        Reason::HostNotAllowed
        | Reason::PolicyDenied
        | Reason::CredentialEndpointMismatch
        | Reason::ToolChanged
        | Reason::RateLimited
        | Reason::NotConfirmed
        | Reason::ProgramNotAllowed => "http_request_denied",
        Reason::BodyTooLarge | Reason::BadRequest => "http_request_error",
        Reason::UpstreamError => "destination_unavailable",
        Reason::AuditUnavailable => "proxy_internal_error",
        Reason::Timeout => "http_response_timeout",
        Reason::ResponseTooLarge => "http_response_body_size",
    }
}
