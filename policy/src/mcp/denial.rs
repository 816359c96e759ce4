//! The body of a denial on an MCP server (README, "What the proxy decides"): a JSON-RPC error for each request that was
//! waiting for an answer, so the MCP client reports it as that call's error and the session goes on;
//! a plain `{"error": ..., "message": ...}` object when nothing in the request has an id.
//!
//! Error codes sit outside JSON-RPC's reserved −32768…−32000 range, one per reason
//! ([`ERROR_CODES`]). Messages name only the HTTP method, the path without its query string, the
//! JSON-RPC method and the tool: never other body content, never the query (where tokens travel).
//! A JSON-RPC error's `data` has the `reason`, the `rpc` method, the `tool`, the `rule` that refused
//! the message (policy text), and for a tool the tool rules refused, a `hint` ([`super::teach`]).

use super::http::path_of;
use super::teach;
use super::{McpDecision, MessageDecision, MessageKind, RequestView, RpcId};
use crate::decision::Reason;
use crate::json::write_string;
use crate::untrusted_text::{clip, shown};

/// The JSON-RPC `error.code` for each reason.
pub const ERROR_CODES: [(Reason, i64); 14] = [
    (Reason::PolicyDenied, -31001),
    (Reason::BadRequest, -31002),
    (Reason::BodyTooLarge, -31003),
    (Reason::HostNotAllowed, -31004),
    (Reason::PrivateAddress, -31005),
    (Reason::CredentialEndpointMismatch, -31006),
    (Reason::UpstreamError, -31007),
    (Reason::AuditUnavailable, -31008),
    (Reason::ToolChanged, -31009),
    (Reason::RateLimited, -31010),
    (Reason::Timeout, -31011),
    (Reason::ResponseTooLarge, -31012),
    (Reason::NotConfirmed, -31013),
    (Reason::ProgramNotAllowed, -31014),
];

/// The JSON-RPC error code fenzi answers `reason` with.
pub fn error_code(reason: Reason) -> i64 {
    ERROR_CODES
        .iter()
        .find(|(r, _)| *r == reason)
        .map_or(-31000, |(_, code)| *code)
}

/// Longest tool or method name copied into `error.data`.
const DATA_NAME_CHARS: usize = 256;

/// The response body for a denied request: for a single JSON-RPC request with an id, a JSON-RPC
/// error response with that id; for a batch, an array of error responses for the elements that had
/// ids (every one of them: the batch was not forwarded, so none of them will be answered
/// otherwise); else `{"error":"<reason>","message":"..."}`. Empty when `decision` allows the request.
///
/// The id is echoed as the same JSON value: a number with its exact text, a string re-escaped.
pub fn denial_body(decision: &McpDecision, req: &RequestView<'_>) -> Vec<u8> {
    let Some(overall) = decision.overall.reason() else {
        return Vec::new();
    };
    let prefix = format!("{} {}", shown(req.method), shown(path_of(req.path)));
    let replies: Vec<String> = decision
        .messages
        .iter()
        .filter_map(|m| {
            let id = answerable_id(m)?;
            let (reason, detail) = match m.decision.reason() {
                Some(reason) if reason == Reason::PolicyDenied => (reason, what(m)),
                Some(reason) => (reason, m.decision.message.clone()),
                None if decision.batch => (
                    overall,
                    format!("{} was not sent: {}", what(m), decision.overall.message),
                ),
                None => (overall, decision.overall.message.clone()),
            };
            // The rule that refused this message, or the whole request when this one was fine.
            let rule = match m.decision.reason() {
                Some(_) => &m.decision.rule,
                None => &decision.overall.rule,
            };
            Some(rpc_error(
                id,
                reason,
                &describe(&prefix, reason, &detail),
                rule,
                m,
            ))
        })
        .collect();
    let body = match (decision.batch, replies.as_slice()) {
        (true, [_, ..]) => format!("[{}]", replies.join(",")),
        (false, [single]) => single.clone(),
        _ => {
            // Name what was refused: the first message the policy denied, if that is the reason.
            let first_denied = decision
                .messages
                .iter()
                .find(|m| m.decision.reason() == Some(Reason::PolicyDenied));
            let detail = match first_denied {
                Some(m) if overall == Reason::PolicyDenied => what(m),
                _ => decision.overall.message.clone(),
            };
            let mut out = String::from("{\"error\":");
            write_string(&mut out, overall.code());
            out.push_str(",\"message\":");
            let message = if decision.messages.is_empty() && overall == Reason::PolicyDenied {
                format!("{prefix} not permitted by policy")
            } else {
                describe(&prefix, overall, &detail)
            };
            write_string(&mut out, &message);
            out.push('}');
            out
        }
    };
    body.into_bytes()
}

/// The id a reply can carry: a string or integer id of a message that expects an answer (a
/// request, or a malformed message whose id could still be read).
fn answerable_id(m: &MessageDecision) -> Option<&RpcId> {
    if matches!(
        m.kind,
        Some(MessageKind::Notification | MessageKind::Response)
    ) {
        return None;
    }
    match m.rpc_id.as_ref()? {
        RpcId::Null => None,
        id => Some(id),
    }
}

/// What a message asked for, as denial messages name it: `tools/call <tool>` or the method.
fn what(m: &MessageDecision) -> String {
    match (&m.tool, &m.rpc_method) {
        (Some(tool), _) => format!("tools/call {}", shown(tool)),
        (None, Some(method)) => shown(method),
        (None, None) => "the message".to_owned(),
    }
}

/// `POST /mcp not permitted by policy: tools/call x`, or `POST /mcp refused (bad_request): ...`.
fn describe(prefix: &str, reason: Reason, detail: &str) -> String {
    match reason {
        Reason::PolicyDenied => format!("{prefix} not permitted by policy: {detail}"),
        other => format!("{prefix} refused ({}): {detail}", other.code()),
    }
}

fn rpc_error(id: &RpcId, reason: Reason, message: &str, rule: &str, m: &MessageDecision) -> String {
    let mut out = String::from("{\"jsonrpc\":\"2.0\",\"id\":");
    match id {
        RpcId::Number(text) => out.push_str(text),
        RpcId::String(s) => write_string(&mut out, s),
        RpcId::Null => out.push_str("null"),
    }
    out.push_str(&format!(
        ",\"error\":{{\"code\":{},\"message\":",
        error_code(reason)
    ));
    write_string(&mut out, message);
    out.push_str(",\"data\":{\"reason\":");
    write_string(&mut out, reason.code());
    if let Some(method) = &m.rpc_method {
        out.push_str(",\"rpc\":");
        write_string(&mut out, clip(method, DATA_NAME_CHARS));
    }
    if let Some(tool) = &m.tool {
        out.push_str(",\"tool\":");
        write_string(&mut out, clip(tool, DATA_NAME_CHARS));
    }
    // Rules are policy text (names and patterns), never request content.
    out.push_str(",\"rule\":");
    write_string(&mut out, rule);
    // Only for the message's own tool-rule denial: the approve line, or why approve cannot help.
    let hint = match (&m.tool, m.decision.reason(), &m.decision.tool_denial) {
        (Some(tool), Some(Reason::PolicyDenied), Some(denial)) => {
            teach::tool_hint(denial, &m.decision.rule, tool)
        }
        _ => None,
    };
    if let Some(hint) = hint {
        out.push_str(",\"hint\":");
        write_string(&mut out, &hint);
    }
    out.push_str("}}}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_outside_the_reserved_range() {
        for (i, (reason, code)) in ERROR_CODES.iter().enumerate() {
            assert!(!(-32768..=-32000).contains(code), "{reason}");
            assert_eq!(error_code(*reason), *code);
            assert!(
                ERROR_CODES[i + 1..]
                    .iter()
                    .all(|(r, c)| r != reason && c != code)
            );
        }
        assert_eq!(ERROR_CODES.len(), Reason::ALL.len());
    }
}
