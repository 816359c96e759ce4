//! What one well-formed JSON-RPC message is allowed to do on an MCP server (README, "What the proxy decides"): the
//! methods a client needs to connect and list, the session utilities that act on nothing
//! (`logging/setLevel`), `tools/call` by tool name against the server's allow and deny patterns
//! (and, on a pinned server, its lock), `prompts/get` by name and `resources/read` /
//! `resources/subscribe` / `resources/unsubscribe` by URI, `completion/complete` by what its `ref`
//! names (a prompt by the prompt rules, a resource by the resource rules), responses from the
//! client, and nothing else. [`tool`], [`prompt`] and [`resource`] are also what list filtering
//! asks, so a hidden entry and a refused call are always the same decision.
//!
//! Methods the specification defines only for the server to send (`sampling/createMessage`,
//! `elicitation/create`, `roots/list`, `notifications/message`, the `list_changed` and
//! `resources/updated` notifications) stay denied when a client sends them: no client has a reason
//! to, and a server that gets one from a client is in a state its authors did not test. What a
//! server sends the other way (its own requests and notifications, on a response or on the GET
//! stream) is read by [`crate::response`] by shape, whatever its method, and the client's answers
//! to it are client responses, allowed here.
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

/// Session utilities a client may send on every server: they act on nothing the policy guards.
///
/// - `logging/setLevel` asks the server to send its log messages (`notifications/message`) from a
///   level on. It reads and changes nothing outside the session, and what it brings back is read
///   like every other message from the server. Clients send it before calling tools (the
///   conformance suite's `tools-call-with-logging`), so refusing it breaks them outright.
///
/// `ping` is in [`CONNECT_AND_LIST`] (it keeps a connection alive).
pub const UTILITIES: [&str; 1] = ["logging/setLevel"];

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

/// The method decided by what its `ref` names: a prompt or a resource (template).
pub const COMPLETION_COMPLETE: &str = "completion/complete";

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
    } else if method == COMPLETION_COMPLETE {
        completion(server, message.params, named)
    } else if CONNECT_AND_LIST.contains(&method) {
        Decision::allow(
            format!("mcp.{} connect-and-list", server.name),
            format!("{method} is allowed without listing"),
        )
    } else if UTILITIES.contains(&method) {
        Decision::allow(
            format!("mcp.{} utility", server.name),
            format!("{method} is allowed on every server"),
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

/// Whether `body` (a message or a batch) holds a `completion/complete`, whose `ref` the classifier
/// must read one level deeper than it keeps otherwise.
pub(super) fn names_completion(body: &Value) -> bool {
    let is_completion =
        |m: &Value| m.get("method").and_then(Value::as_str) == Some(COMPLETION_COMPLETE);
    match body {
        Value::Array(items) => items.iter().any(is_completion),
        single => is_completion(single),
    }
}

/// `completion/complete`: the suggestions a server offers for an argument of a prompt or a
/// resource template reveal what that prompt or template is about, so the completion gets the
/// decision a use of it gets: `{"type":"ref/prompt","name":N}` is decided as `prompts/get N`,
/// `{"type":"ref/resource","uri":U}` as `resources/read U` (a template's URI is matched as list
/// filtering matches `uriTemplate`). Anything else names nothing the policy allows:
/// `policy_denied`, as `tools/call` without a name is. That covers a missing or non-object `ref`, a
/// `type` other than those two (`ref/tool`, case variants, `ref/prompt ` with a space), and a member
/// beyond the ones its type defines (`title`, a string, is the only optional one, on a prompt
/// reference since 2025-06-18): `{"type":"ref/prompt","name":"allowed","uri":"denied"}` names
/// two things, and which one a server reads is not ours to guess. Its denial names the method and
/// the rule, as a `prompts/get` denial does, never the prompt or the URI.
fn completion(server: &ServerRule, params: Option<&Value>, named: &mut Named) -> Decision {
    let deny = |why: &str| {
        Decision::deny(
            Reason::PolicyDenied,
            default_deny(server),
            format!("{COMPLETION_COMPLETE} {why}"),
        )
    };
    let Some(Value::Object(members)) = params.and_then(|p| p.get("ref")) else {
        return deny("without a ref object");
    };
    let (mut kind, mut name, mut uri, mut title) = (None, None, None, None);
    for (key, value) in members {
        let slot = match key.as_str() {
            "type" => &mut kind,
            "name" => &mut name,
            "uri" => &mut uri,
            "title" => &mut title,
            _ => return deny("with a ref member other than type, name, title and uri"),
        };
        match value {
            Value::String(text) => *slot = Some(text.as_str()),
            _ => return deny("with a ref member that is not a string"),
        }
    }
    match (kind, name, uri, title) {
        (Some("ref/prompt"), Some(name), None, _) => {
            named.prompt = Some(name.to_owned());
            prompt_as(server, name, Some(COMPLETION_COMPLETE))
        }
        (Some("ref/resource"), None, Some(uri), None) => {
            named.resource = Some(uri.to_owned());
            resource_as(server, uri, Some(COMPLETION_COMPLETE))
        }
        (Some("ref/prompt"), ..) => deny("with a ref/prompt that is not exactly a name"),
        (Some("ref/resource"), ..) => deny("with a ref/resource that is not exactly a uri"),
        _ => deny("with a ref that is neither ref/prompt nor ref/resource"),
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
    prompt_as(server, name, None)
}

/// [`prompt`]; `via` names a method other than `prompts/get` that is decided by it, for the
/// decision's message.
fn prompt_as(server: &ServerRule, name: &str, via: Option<&str>) -> Decision {
    match server.prompts.iter().find(|p| p.matches(name)) {
        Some(pattern) => Decision::allow(
            format!(
                "mcp.{}.prompts.allow {}",
                server.name,
                quoted(pattern.as_str())
            ),
            match via {
                None => format!("{PROMPTS_GET} {} is allowed", shown(name)),
                Some(method) => format!("{method} of prompt {} is allowed", shown(name)),
            },
        ),
        None => Decision::deny(
            Reason::PolicyDenied,
            default_deny(server),
            format!(
                "{}prompt {} is not in the allowed prompts",
                via_prefix(via),
                shown(name)
            ),
        ),
    }
}

/// `"METHOD of "` before a message about a method decided by another method's rules.
fn via_prefix(via: Option<&str>) -> String {
    via.map(|method| format!("{method} of "))
        .unwrap_or_default()
}

/// `resources/read URI` (and subscribing to it), and whether a listed resource or template is
/// shown: `resources.allow`, default deny.
pub(crate) fn resource(server: &ServerRule, uri: &str) -> Decision {
    resource_as(server, uri, None)
}

/// [`resource`]; `via` as in [`prompt_as`].
fn resource_as(server: &ServerRule, uri: &str, via: Option<&str>) -> Decision {
    match server.resources.iter().find(|p| p.matches(uri)) {
        Some(pattern) => Decision::allow(
            format!(
                "mcp.{}.resources.allow {}",
                server.name,
                quoted(pattern.as_str())
            ),
            format!("{}resource {} is allowed", via_prefix(via), shown(uri)),
        ),
        None => Decision::deny(
            Reason::PolicyDenied,
            default_deny(server),
            format!(
                "{}resource {} is not in the allowed resources",
                via_prefix(via),
                shown(uri)
            ),
        ),
    }
}

pub(super) fn default_deny(server: &ServerRule) -> String {
    format!("mcp.{} default deny", server.name)
}
