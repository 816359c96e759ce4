//! What one well-formed JSON-RPC message is allowed to do on an MCP server (README, "What the proxy decides"): the
//! methods a client needs to connect and list, `tools/call` by tool name against the server's allow
//! and deny patterns (and, on a pinned server, its lock), `prompts/get` by name and
//! `resources/read` / `resources/subscribe` / `resources/unsubscribe` by URI, responses from the
//! client, and nothing else. [`tool`], [`prompt`] and [`resource`] are also what list filtering
//! asks, so a hidden entry and a refused call are always the same decision.
//!
//! Method and tool names and URIs are compared exactly (case-sensitive, after JSON unescaping,
//! never normalised).

use super::inventory::{CallPin, Inventory};
use super::shape::{self, Message};
use super::{MessageDecision, MessageKind, ServerRule};
use crate::args;
use crate::decision::{Decision, Reason, ToolDenial};
use crate::json::{self, Value};
use crate::tool_pattern::ToolPattern;
use crate::untrusted_text::{push_shown, quoted, shown};

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
/// The method decided by prompt name.
pub const PROMPTS_GET: &str = "prompts/get";
/// The methods decided by resource URI.
pub const RESOURCE_METHODS: [&str; 3] = [
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// Rule name for a message the shape rules refuse.
pub(super) const RULE_STRICT_JSON_RPC: &str = "strict json-rpc";

/// Decides one message (the body, or one element of a batch).
pub(super) fn decide(server: &ServerRule, inventory: &Inventory, v: &Value) -> MessageDecision {
    match shape::read(v) {
        Err(e) => {
            let (rpc_method, rpc_id) = shape::peek(v);
            MessageDecision {
                decision: Decision::deny(Reason::BadRequest, RULE_STRICT_JSON_RPC, e.to_string()),
                kind: None,
                rpc_method,
                tool: None,
                prompt: None,
                resource: None,
                rpc_id,
            }
        }
        Ok(message) => decide_message(server, inventory, &message),
    }
}

fn decide_message(
    server: &ServerRule,
    inventory: &Inventory,
    message: &Message<'_>,
) -> MessageDecision {
    let mut named = Named::default();
    let decision = match message.method {
        Some(method) => decide_request(server, inventory, message, method, &mut named),
        None => {
            debug_assert_eq!(message.kind, MessageKind::Response);
            Decision::allow(
                format!("mcp.{} client-response", server.name),
                "a response from the client",
            )
        }
    };
    MessageDecision {
        decision,
        kind: Some(message.kind),
        rpc_method: message.method.map(str::to_owned),
        tool: named.tool,
        prompt: named.prompt,
        resource: named.resource,
        rpc_id: message.id.clone(),
    }
}

/// What a request names, for its record.
#[derive(Default)]
struct Named {
    tool: Option<String>,
    prompt: Option<String>,
    resource: Option<String>,
}

/// The decision on a request or notification named `method`; what it names (tool, prompt,
/// resource) goes into `named`. One expression, so no branch can leave a decision unmade.
fn decide_request(
    server: &ServerRule,
    inventory: &Inventory,
    message: &Message<'_>,
    method: &str,
    named: &mut Named,
) -> Decision {
    let param = |key: &str| {
        message
            .params
            .and_then(|p| p.get(key))
            .and_then(Value::as_str)
    };
    let missing = |what: &str| {
        Decision::deny(
            Reason::PolicyDenied,
            default_deny(server),
            format!("{method} without a string {what}"),
        )
    };
    if method == TOOLS_CALL {
        let name = param("name");
        named.tool = name.map(str::to_owned);
        match name {
            Some(name) => {
                let arguments = message.params.and_then(|p| p.get("arguments"));
                call(server, inventory, name, arguments)
            }
            None => missing("params.name"),
        }
    } else if method == PROMPTS_GET {
        named.prompt = param("name").map(str::to_owned);
        match param("name") {
            Some(name) => prompt(server, name),
            None => missing("params.name"),
        }
    } else if RESOURCE_METHODS.contains(&method) {
        named.resource = param("uri").map(str::to_owned);
        match param("uri") {
            Some(uri) => resource(server, uri),
            None => missing("params.uri"),
        }
    } else if CONNECT_AND_LIST.contains(&method) {
        Decision::allow(
            format!("mcp.{} connect-and-list", server.name),
            format!("{method} is allowed without listing"),
        )
    } else {
        Decision::deny(
            Reason::PolicyDenied,
            default_deny(server),
            format!(
                "{} is not allowed: only connecting, listing and allowed tools are",
                shown(method)
            ),
        )
    }
}

/// `tools/call NAME` with `arguments`: the tool's own decision ([`tool`]), then, when that allows
/// it, the server's argument rules (`tools.rules`), which can only turn it into a denial.
fn call(
    server: &ServerRule,
    inventory: &Inventory,
    name: &str,
    arguments: Option<&Value>,
) -> Decision {
    let decision = tool(server, inventory, name);
    if !decision.is_allowed() || server.rules.is_empty() {
        return decision;
    }
    match args::check(&server.rules, name, arguments) {
        None => decision,
        Some(v) => Decision::deny(Reason::PolicyDenied, v.rule, v.message),
    }
}

/// `tools/call NAME` (its name only), and whether a listed tool is shown: deny wins; then `allow`, or on a pinned
/// server `allow_annotated: [read_only]` with a pinned definition that says so; then, on a pinned
/// server, the lock must vouch for the tool (`tool_changed` otherwise). A name nothing allows is
/// denied.
pub(crate) fn tool(server: &ServerRule, inventory: &Inventory, name: &str) -> Decision {
    let changed = |why: &str| {
        Decision::deny(
            Reason::ToolChanged,
            format!("mcp.{} pin", server.name),
            format!(
                "tools/call {}: {why}; review it with `fenzi mcp pin {}`",
                shown(name),
                server.name
            ),
        )
    };
    match tool_verdict(server, inventory, name) {
        ToolVerdict::Denied(pattern) => Decision::deny(
            Reason::PolicyDenied,
            format!(
                "mcp.{}.tools.deny {}",
                server.name,
                quoted(pattern.as_str())
            ),
            format!("tools/call {} is denied", shown(name)),
        )
        .by_tool_rule(ToolDenial::DenyListed {
            server: server.name.clone(),
        }),
        ToolVerdict::NotAllowed => Decision::deny(
            Reason::PolicyDenied,
            default_deny(server),
            format!("tools/call {} is not in the allowed tools", shown(name)),
        )
        .by_tool_rule(ToolDenial::NotAllowed {
            server: server.name.clone(),
        }),
        ToolVerdict::Changed => changed("its definition differs from the pinned one"),
        ToolVerdict::NotInLock => changed("the tool is not in the lock file"),
        ToolVerdict::Allowed(by) => {
            // Every allowed call builds these two texts: pushed in place, not through `format!`
            // and its temporaries (about 900 instructions a call).
            let mut rule = String::with_capacity(64);
            rule.push_str("mcp.");
            rule.push_str(&server.name);
            match by {
                Some(pattern) => {
                    rule.push_str(".tools.allow ");
                    json::write_string(&mut rule, pattern.as_str());
                }
                None => rule.push_str(".tools.allow_annotated read_only"),
            }
            let mut message = String::with_capacity(name.len() + 24);
            message.push_str("tools/call ");
            push_shown(&mut message, name);
            message.push_str(" is allowed");
            Decision::allow(rule, message)
        }
    }
}

/// What the tool rules say about `name`, before any message is written: [`tool`] for a call,
/// and for each entry of a filtered list (where only the verdict is needed).
#[derive(Debug, Clone, Copy)]
pub(crate) enum ToolVerdict<'s> {
    /// By this `deny` pattern.
    Denied(&'s ToolPattern),
    NotAllowed,
    /// Pinned server: the definition listed differs from the pinned one.
    Changed,
    /// Pinned server: the lock has no definition for it.
    NotInLock,
    /// By this `allow` pattern, or (`None`) by `allow_annotated: [read_only]`.
    Allowed(Option<&'s ToolPattern>),
}

pub(crate) fn tool_verdict<'s>(
    server: &'s ServerRule,
    inventory: &Inventory,
    name: &str,
) -> ToolVerdict<'s> {
    if let Some(pattern) = server.deny.iter().find(|p| p.matches(name)) {
        return ToolVerdict::Denied(pattern);
    }
    let pin = inventory.call(name);
    let allowed_by = match server.allow.iter().find(|p| p.matches(name)) {
        Some(pattern) => Some(Some(pattern)),
        None => match pin {
            CallPin::Pinned(hints) if server.allow_read_only && hints.is_read_only() => Some(None),
            _ => None,
        },
    };
    let Some(by) = allowed_by else {
        return ToolVerdict::NotAllowed;
    };
    match pin {
        CallPin::NotPinned | CallPin::Pinned(_) => ToolVerdict::Allowed(by),
        CallPin::Changed => ToolVerdict::Changed,
        CallPin::NotInLock => ToolVerdict::NotInLock,
    }
}

/// `prompts/get NAME`, and whether a listed prompt is shown: `prompts.allow`, default deny.
pub(crate) fn prompt(server: &ServerRule, name: &str) -> Decision {
    match server.prompts.iter().find(|p| p.matches(name)) {
        Some(pattern) => Decision::allow(
            format!(
                "mcp.{}.prompts.allow {}",
                server.name,
                quoted(pattern.as_str())
            ),
            format!("prompts/get {} is allowed", shown(name)),
        ),
        None => Decision::deny(
            Reason::PolicyDenied,
            default_deny(server),
            format!("prompt {} is not in the allowed prompts", shown(name)),
        ),
    }
}

/// `resources/read URI` (and subscribing to it), and whether a listed resource or template is
/// shown: `resources.allow`, default deny.
pub(crate) fn resource(server: &ServerRule, uri: &str) -> Decision {
    match server.resources.iter().find(|p| p.matches(uri)) {
        Some(pattern) => Decision::allow(
            format!(
                "mcp.{}.resources.allow {}",
                server.name,
                quoted(pattern.as_str())
            ),
            format!("resource {} is allowed", shown(uri)),
        ),
        None => Decision::deny(
            Reason::PolicyDenied,
            default_deny(server),
            format!("resource {} is not in the allowed resources", shown(uri)),
        ),
    }
}

pub(super) fn default_deny(server: &ServerRule) -> String {
    format!("mcp.{} default deny", server.name)
}
