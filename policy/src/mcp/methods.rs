//! What one well-formed JSON-RPC message is allowed to do on an MCP server (README, "What the proxy decides"): the
//! methods a client needs to connect and list, `tools/call` by tool name against the server's allow
//! and deny patterns, responses from the client, and nothing else.
//!
//! Method names are compared exactly (case-sensitive, after JSON unescaping, never normalised).

use super::shape::{self, Message};
use super::text::{quoted, shown};
use super::{MessageDecision, MessageKind, ServerRule};
use crate::decision::{Decision, Reason};
use crate::json::Value;

/// Methods allowed without listing, in every protocol version from 2025-03-26 to 2026-07-28: the
/// handshake, discovery, listing, keep-alive, cancellation and progress, and the task plumbing of
/// 2025-11-25+ (a task only exists if a call that created it was allowed).
pub const CONNECT_AND_LIST: [&str; 17] = [
    "initialize",
    "notifications/initialized",
    "server/discover",
    "ping",
    "tools/list",
    "resources/list",
    "resources/templates/list",
    "prompts/list",
    "subscriptions/listen",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
    "notifications/tasks/status",
    "tasks/get",
    "tasks/result",
    "tasks/list",
    "tasks/cancel",
];

/// The method decided by tool name.
pub const TOOLS_CALL: &str = "tools/call";

/// Rule name for a message the shape rules refuse.
pub(super) const RULE_STRICT_JSON_RPC: &str = "strict json-rpc";

/// Decides one message (the body, or one element of a batch).
pub(super) fn decide(server: &ServerRule, v: &Value) -> MessageDecision {
    match shape::read(v) {
        Err(e) => {
            let (rpc_method, rpc_id) = shape::peek(v);
            MessageDecision {
                decision: Decision::deny(Reason::BadRequest, RULE_STRICT_JSON_RPC, e.to_string()),
                kind: None,
                rpc_method,
                tool: None,
                rpc_id,
            }
        }
        Ok(message) => decide_message(server, &message),
    }
}

fn decide_message(server: &ServerRule, message: &Message<'_>) -> MessageDecision {
    let mut out = MessageDecision {
        decision: Decision::allow(
            format!("mcp.{} client-response", server.name),
            "a response from the client",
        ),
        kind: Some(message.kind),
        rpc_method: message.method.map(str::to_owned),
        tool: None,
        rpc_id: message.id.clone(),
    };
    let Some(method) = message.method else {
        debug_assert_eq!(message.kind, MessageKind::Response);
        return out;
    };
    if method == TOOLS_CALL {
        let name = message
            .params
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str);
        out.tool = name.map(str::to_owned);
        out.decision = match name {
            Some(name) => decide_tool(server, name),
            None => Decision::deny(
                Reason::PolicyDenied,
                default_deny(server),
                "tools/call without a string params.name",
            ),
        };
    } else if CONNECT_AND_LIST.contains(&method) {
        out.decision = Decision::allow(
            format!("mcp.{} connect-and-list", server.name),
            format!("{method} is allowed without listing"),
        );
    } else {
        out.decision = Decision::deny(
            Reason::PolicyDenied,
            default_deny(server),
            format!(
                "{} is not allowed: only connecting, listing and allowed tools are",
                shown(method)
            ),
        );
    }
    out
}

/// Deny wins over allow; a name no pattern matches is denied.
fn decide_tool(server: &ServerRule, name: &str) -> Decision {
    if let Some(pattern) = server.deny.iter().find(|p| p.matches(name)) {
        return Decision::deny(
            Reason::PolicyDenied,
            format!(
                "mcp.{}.tools.deny {}",
                server.name,
                quoted(pattern.as_str())
            ),
            format!("tools/call {} is denied", shown(name)),
        );
    }
    if let Some(pattern) = server.allow.iter().find(|p| p.matches(name)) {
        return Decision::allow(
            format!(
                "mcp.{}.tools.allow {}",
                server.name,
                quoted(pattern.as_str())
            ),
            format!("tools/call {} is allowed", shown(name)),
        );
    }
    Decision::deny(
        Reason::PolicyDenied,
        default_deny(server),
        format!("tools/call {} is not in the allowed tools", shown(name)),
    )
}

pub(super) fn default_deny(server: &ServerRule) -> String {
    format!("mcp.{} default deny", server.name)
}
