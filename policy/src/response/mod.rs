//! Reading what a remote MCP server sends back (README, "Reading responses"): every JSON-RPC
//! message, whether a whole `application/json` body or one server-sent event ([`sse`]), is parsed
//! as strictly as a request ([`crate::json`], the JSON-RPC shape rules) before any of it reaches the
//! agent, and list results are filtered.
//!
//! - A message that is not strict JSON-RPC is an error ([`ResponseError`]): the caller passes
//!   nothing of it on and answers the requests still waiting with a JSON-RPC error instead.
//! - List results are recognised by their shape, whatever request they answer and on whichever
//!   stream they arrive: `result.tools`, `result.prompts`, `result.resources` and
//!   `result.resourceTemplates`. Each must be an array; each entry is kept only when the policy
//!   allows it (the same decisions as a call: [`crate::mcp`]'s tool, prompt and resource rules,
//!   pins included), with its order and every other field kept. An entry without a string `name`
//!   (`uri`, `uriTemplate` for resources) is hidden. Two entries with one name make the message an
//!   error: which of them would the client use?
//! - Every tool entry is shown to the session's [`Inventory`] first (pinning, mirrored headers).
//! - `list: all` hides nothing, but lists are still read and tools still observed.
//!
//! Messages are first read only down to the members of `result` (cheap for the large results of
//! tool calls); only a list result is read whole, and only a filtered one is written back out.

pub mod sse;

use crate::inventory::Inventory;
use crate::json::{self, JsonError, JsonErrorKind, JsonLimits, Value};
use crate::json_text;
use crate::mcp::{RpcId, ServerRule, methods as rules, read_shape};
use crate::{Decision, Reason};
use std::collections::HashSet;

/// The largest message (a JSON body, or one event's data) read from a server, as a multiple of the
/// request limit: results are larger than requests (a file's contents, a long tool list).
pub const RESPONSE_LIMIT_FACTOR: usize = 4;

/// The limits responses from a server with request limits `limits` are read under.
pub fn response_limits(limits: JsonLimits) -> JsonLimits {
    JsonLimits {
        max_bytes: limits.max_bytes.saturating_mul(RESPONSE_LIMIT_FACTOR),
        ..limits
    }
}

/// The lists a result may carry, and the member that names each entry.
pub const LISTS: [(&str, &str); 4] = [
    ("tools", "name"),
    ("prompts", "name"),
    ("resources", "uri"),
    ("resourceTemplates", "uriTemplate"),
];

/// Why a message from a server cannot be passed on. The texts never quote the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    #[error("larger than {0} bytes")]
    TooLarge(usize),
    #[error("not strict JSON: {0}")]
    Json(JsonError),
    #[error("not a JSON-RPC message: {0}")]
    Shape(String),
    #[error("an empty batch")]
    EmptyBatch,
    #[error("result.{0} is not an array")]
    ListNotArray(&'static str),
    #[error("result.{0} lists one name twice")]
    DuplicateName(&'static str),
    #[error("an event stream that cannot be read: {0}")]
    Stream(#[from] sse::SseError),
    #[error("an event of a type MCP does not send")]
    EventType,
    #[error("an endpoint event whose data is not a single URI reference")]
    Endpoint,
    #[error("a {0} body, which is neither JSON nor an event stream")]
    ContentType(String),
    #[error("an encoded body ({0})")]
    Encoded(String),
}

/// What to make of one server-sent event's type before its data is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A JSON-RPC message (no `event` field, or `message`).
    Message,
    /// The legacy HTTP+SSE transport's `endpoint` event: the URI to POST to, passed as it is.
    Endpoint,
}

/// Classifies an event by its type and, for `endpoint`, checks its data: one line of printable
/// ASCII without spaces (a URI reference), nothing a model would read as text.
pub fn event_kind(event: &sse::SseEvent) -> Result<EventKind, ResponseError> {
    match event.event.as_deref() {
        None | Some("message") => Ok(EventKind::Message),
        Some("endpoint") => {
            let data = event.data.as_deref().unwrap_or_default();
            let uri_like = !data.is_empty()
                && data.len() <= 4096
                && data.bytes().all(|b| b.is_ascii_graphic());
            if uri_like {
                Ok(EventKind::Endpoint)
            } else {
                Err(ResponseError::Endpoint)
            }
        }
        Some(_) => Err(ResponseError::EventType),
    }
}

impl From<JsonError> for ResponseError {
    fn from(e: JsonError) -> Self {
        match e.kind {
            JsonErrorKind::TooLarge => ResponseError::TooLarge(e.offset),
            _ => ResponseError::Json(e),
        }
    }
}

/// One list result that lost entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filtered {
    /// The id of the response that carried it.
    pub rpc_id: Option<RpcId>,
    /// `tools`, `prompts`, `resources` or `resourceTemplates`.
    pub list: &'static str,
    pub hidden: usize,
    /// Of those, tools hidden because their definition is not the pinned one.
    pub changed: usize,
}

/// What reading one message found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReadMessage {
    /// The text to pass on in place of the original, when entries were hidden.
    pub rewritten: Option<String>,
    /// The ids of the responses in it (the requests it answers).
    pub answered: Vec<RpcId>,
    pub filtered: Vec<Filtered>,
    /// The inventory pinned a tool at first sight: the lock file needs writing.
    pub lock_changed: bool,
}

/// What the first, shallow read of a message found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Shape {
    /// The ids of the responses in it (the requests it answers).
    pub answered: Vec<RpcId>,
    /// It carries a list result: [`filter_lists`] must read it.
    pub has_list: bool,
}

/// Reads one message (a body or an event's data) from `server` down to the members of its
/// results, strictly (the whole text is checked). The session's inventory is not needed.
pub fn read_message(server: &ServerRule, text: &[u8]) -> Result<Shape, ResponseError> {
    let limits = response_limits(server.limits);
    let batch = text
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        == Some(&b'[');
    let shallow = json::parse_to_depth(text, &limits, if batch { 3 } else { 2 })?;
    let messages: Vec<&Value> = match &shallow {
        Value::Array(items) if items.is_empty() => return Err(ResponseError::EmptyBatch),
        Value::Array(items) => items.iter().collect(),
        single => vec![single],
    };
    let mut out = Shape::default();
    for m in &messages {
        let id = read_shape(m).map_err(|e| ResponseError::Shape(e.to_string()))?;
        if let Some(id) = id {
            out.answered.push(id);
        }
        out.has_list |= m
            .get("result")
            .and_then(Value::as_object)
            .is_some_and(|r| r.iter().any(|(k, _)| LISTS.iter().any(|(l, _)| l == k)));
    }
    Ok(out)
}

/// Reads a message [`read_message`] found a list in, whole: shows its tools to `inventory` and
/// filters its lists. `answered` in the result is left empty (the shallow read has it).
pub fn filter_lists(
    server: &ServerRule,
    inventory: &mut Inventory,
    text: &[u8],
) -> Result<ReadMessage, ResponseError> {
    let mut out = ReadMessage::default();
    let mut whole = json::parse(text, &response_limits(server.limits))?;
    let mut changed_any = false;
    match &mut whole {
        Value::Array(items) => {
            for item in items {
                changed_any |= filter_message(server, inventory, item, &mut out)?;
            }
        }
        single => changed_any |= filter_message(server, inventory, single, &mut out)?,
    }
    if changed_any {
        out.rewritten = Some(json_text::compact(&whole));
    }
    Ok(out)
}

/// Both reads in one: what a caller holding the inventory anyway (tests, `fenzi check`) uses.
pub fn read_and_filter(
    server: &ServerRule,
    inventory: &mut Inventory,
    text: &[u8],
) -> Result<ReadMessage, ResponseError> {
    let shape = read_message(server, text)?;
    let mut out = if shape.has_list {
        filter_lists(server, inventory, text)?
    } else {
        ReadMessage::default()
    };
    out.answered = shape.answered;
    Ok(out)
}

/// A JSON-RPC error response for `id` saying the server's answer could not be read: what the
/// client gets in place of a message fenzi did not pass on.
pub fn unreadable_reply(id: &RpcId, why: &ResponseError) -> String {
    let mut out = String::from("{\"jsonrpc\":\"2.0\",\"id\":");
    match id {
        RpcId::Number(n) => out.push_str(n),
        RpcId::String(s) => json::write_string(&mut out, s),
        RpcId::Null => out.push_str("null"),
    }
    out.push_str(&format!(
        ",\"error\":{{\"code\":{},\"message\":",
        crate::mcp::error_code(Reason::UpstreamError)
    ));
    json::write_string(
        &mut out,
        &format!("fenzi did not pass on the server's answer: it is {why}"),
    );
    out.push_str(",\"data\":{\"reason\":\"upstream_error\"}}}");
    out
}

/// Filters the lists in one message's `result`; `true` when anything was hidden.
fn filter_message(
    server: &ServerRule,
    inventory: &mut Inventory,
    message: &mut Value,
    out: &mut ReadMessage,
) -> Result<bool, ResponseError> {
    let rpc_id = read_shape(message).ok().flatten();
    let Value::Object(members) = message else {
        return Ok(false);
    };
    let Some((_, Value::Object(result))) = members.iter_mut().find(|(k, _)| k == "result") else {
        return Ok(false);
    };
    let mut hid_any = false;
    for (key, value) in result.iter_mut() {
        let Some(&(list, name_key)) = LISTS.iter().find(|(l, _)| l == key) else {
            continue;
        };
        let Value::Array(entries) = value else {
            return Err(ResponseError::ListNotArray(list));
        };
        let mut seen = HashSet::with_capacity(entries.len());
        for entry in entries.iter() {
            if let Some(name) = entry.get(name_key).and_then(Value::as_str)
                && !seen.insert(name)
            {
                return Err(ResponseError::DuplicateName(list));
            }
        }
        if list == "tools" {
            for entry in entries.iter() {
                if let Some(name) = entry.get("name").and_then(Value::as_str) {
                    out.lock_changed |= inventory.observe(name, entry).lock_changed;
                }
            }
        }
        if !server.filter_lists {
            continue;
        }
        let before = entries.len();
        let mut changed = 0;
        entries.retain(|entry| {
            let Some(name) = entry.get(name_key).and_then(Value::as_str) else {
                return false;
            };
            let decision: Decision = match list {
                "tools" => rules::tool(server, inventory, name),
                "prompts" => rules::prompt(server, name),
                _ => rules::resource(server, name),
            };
            if decision.reason() == Some(Reason::ToolChanged) {
                changed += 1;
            }
            decision.is_allowed()
        });
        let hidden = before - entries.len();
        if hidden > 0 {
            hid_any = true;
            out.filtered.push(Filtered {
                rpc_id: rpc_id.clone(),
                list,
                hidden,
                changed,
            });
        }
    }
    Ok(hid_any)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::EndpointPath;
    use crate::tool_pattern::ToolPattern;
    use crate::uri_pattern::UriPattern;

    fn server() -> ServerRule {
        let mut s = ServerRule::with_tools(
            "s",
            EndpointPath::Exact("/mcp".into()),
            vec![ToolPattern::parse("get_*").unwrap()],
            vec![ToolPattern::parse("get_secret").unwrap()],
            JsonLimits::default(),
        );
        s.prompts = vec![ToolPattern::parse("summary").unwrap()];
        s.resources = vec![UriPattern::parse("file:///docs/*").unwrap()];
        s
    }

    fn read(server: &ServerRule, text: &str) -> Result<ReadMessage, ResponseError> {
        read_and_filter(server, &mut Inventory::unpinned(), text.as_bytes())
    }

    #[test]
    fn unreadable_replies_are_json_rpc_errors_for_the_id() {
        let why = ResponseError::DuplicateName("tools");
        let reply = unreadable_reply(&RpcId::String("a\"b".into()), &why);
        let v = json::parse(reply.as_bytes(), &JsonLimits::default()).unwrap();
        assert_eq!(v.get("id").and_then(Value::as_str), Some("a\"b"));
        assert!(reply.contains("lists one name twice"));
        assert!(unreadable_reply(&RpcId::Number("7".into()), &why).contains("\"id\":7,"));
    }

    #[test]
    fn tool_lists_keep_only_allowed_tools_in_order() {
        let text = r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"get_a","x":1},{"name":"delete"},{"name":"get_secret"},{"name":"get_b"},{"nameless":true}],"nextCursor":"c2"}}"#;
        let got = read(&server(), text).unwrap();
        assert_eq!(
            got.rewritten.as_deref(),
            Some(
                r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"get_a","x":1},{"name":"get_b"}],"nextCursor":"c2"}}"#
            )
        );
        assert_eq!(got.answered, vec![RpcId::Number("3".into())]);
        assert_eq!(
            got.filtered,
            vec![Filtered {
                rpc_id: Some(RpcId::Number("3".into())),
                list: "tools",
                hidden: 3,
                changed: 0
            }]
        );
    }

    #[test]
    fn prompts_resources_and_templates_follow_their_rules() {
        let text = r#"{"jsonrpc":"2.0","id":"a","result":{"prompts":[{"name":"summary"},{"name":"other"}],"resources":[{"uri":"file:///docs/a"},{"uri":"file:///etc/passwd"}],"resourceTemplates":[{"uriTemplate":"file:///docs/{p}"},{"uriTemplate":"db://{t}"}]}}"#;
        let got = read(&server(), text).unwrap();
        assert_eq!(got.filtered.len(), 3);
        let rewritten = got.rewritten.unwrap();
        assert!(rewritten.contains("summary") && !rewritten.contains("other"));
        assert!(rewritten.contains("file:///docs/a") && !rewritten.contains("passwd"));
        assert!(rewritten.contains("{p}") && !rewritten.contains("db://"));
    }

    #[test]
    fn nothing_hidden_means_nothing_rewritten() {
        let text = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"get_a"}]}}"#;
        assert_eq!(read(&server(), text).unwrap().rewritten, None);
        let call = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hi"}]}}"#;
        let got = read(&server(), call).unwrap();
        assert_eq!((got.rewritten, got.filtered.len()), (None, 0));
        let mut all = server();
        all.filter_lists = false;
        let text = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"delete"}]}}"#;
        assert_eq!(read(&all, text).unwrap().rewritten, None);
    }

    #[test]
    fn lists_are_recognised_by_shape_in_batches_and_notifications_pass() {
        let text = r#"[{"jsonrpc":"2.0","method":"notifications/message","params":{}},{"jsonrpc":"2.0","id":9,"result":{"tools":[{"name":"delete"}]}}]"#;
        let got = read(&server(), text).unwrap();
        assert_eq!(
            got.rewritten.as_deref(),
            Some(
                r#"[{"jsonrpc":"2.0","method":"notifications/message","params":{}},{"jsonrpc":"2.0","id":9,"result":{"tools":[]}}]"#
            )
        );
        assert_eq!(got.answered, vec![RpcId::Number("9".into())]);
    }

    #[test]
    fn unreadable_messages_are_errors() {
        let s = server();
        for (text, want) in [
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{},"result":{}}"#,
                "not strict JSON",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","name":"b"}]}}"#,
                "not strict JSON",
            ),
            (r#"{"jsonrpc":"2.0","id":1}"#, "not a JSON-RPC message"),
            (r#"{"id":1,"result":{}}"#, "not a JSON-RPC message"),
            ("[]", "an empty batch"),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"tools":{}}}"#,
                "result.tools is not an array",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"get_a"},{"name":"get_a","x":1}]}}"#,
                "lists one name twice",
            ),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"x\":\"\u{00ff}\"}} trailing",
                "not strict JSON",
            ),
        ] {
            let e = read(&s, text).unwrap_err();
            assert!(e.to_string().contains(want), "{text}: {e}");
        }
        let e = read_and_filter(
            &s,
            &mut Inventory::unpinned(),
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"a\":\"\xff\"}}",
        )
        .unwrap_err();
        assert!(matches!(e, ResponseError::Json(_)));
    }

    #[test]
    fn pinned_servers_hide_changed_and_new_tools() {
        let mut s = server();
        s.pin = true;
        let mut inv = Inventory::new(true, None);
        let first =
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"get_a","description":"v1"}]}}"#;
        let got = read_and_filter(&s, &mut inv, first.as_bytes()).unwrap();
        assert!(got.lock_changed && got.rewritten.is_none());
        let entry = inv.lock_entry().cloned();
        let mut next = Inventory::new(true, entry);
        let later = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"get_a","description":"v2"},{"name":"get_new"}]}}"#;
        let got = read_and_filter(&s, &mut next, later.as_bytes()).unwrap();
        assert_eq!(got.filtered[0].hidden, 2);
        assert_eq!(got.filtered[0].changed, 2);
        assert!(!got.lock_changed);
        assert_eq!(
            crate::mcp::methods::tool(&s, &next, "get_a").reason(),
            Some(Reason::ToolChanged)
        );
    }

    #[test]
    fn annotations_allow_read_only_pinned_tools_and_deny_still_wins() {
        let mut s = server();
        s.pin = true;
        s.allow_read_only = true;
        s.deny.push(ToolPattern::parse("ro_denied").unwrap());
        let mut inv = Inventory::new(true, None);
        let list = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[
            {"name":"ro","annotations":{"readOnlyHint":true}},
            {"name":"ro_destructive","annotations":{"readOnlyHint":true,"destructiveHint":true}},
            {"name":"ro_denied","annotations":{"readOnlyHint":true}},
            {"name":"plain"}]}}"#;
        let got = read_and_filter(&s, &mut inv, list.as_bytes()).unwrap();
        let text = got.rewritten.unwrap();
        assert!(text.contains("\"ro\""), "{text}");
        assert!(
            !text.contains("ro_destructive")
                && !text.contains("ro_denied")
                && !text.contains("plain")
        );
        let d = crate::mcp::methods::tool(&s, &inv, "ro");
        assert_eq!(d.rule, "mcp.s.tools.allow_annotated read_only");
    }
}
