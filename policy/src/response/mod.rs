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

use crate::Reason;
use crate::json::{self, JsonError, JsonErrorKind, JsonLimits, Value};
use crate::mcp::inventory::Inventory;
use crate::mcp::methods::ToolVerdict;
use crate::mcp::{RpcId, ServerRule, methods as rules, read_shape};
use std::borrow::Cow;
use std::collections::HashSet;
use std::ops::Range;

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

/// Why a message from a server cannot be passed on. The texts never quote the message, nor any
/// other byte the server chose.
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
    /// An OAuth metadata document on an MCP host that cannot be read strictly
    /// ([`crate::mcp::oauth`]): nothing is learned from it and it is not passed on.
    #[error("a sign-in metadata document that is {0}")]
    Metadata(#[from] crate::mcp::oauth::MetadataError),
    /// The server's own words (its `Content-Type`, `Content-Encoding`) are never quoted: they
    /// may hold anything, a secret value it echoes included.
    #[error(
        "a body whose Content-Type is not one an MCP server may send (JSON or an event stream)"
    )]
    ContentType,
    #[error("an encoded body (a Content-Encoding other than identity)")]
    Encoded,
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
    /// Each list member of a result, where [`filter_lists`] finds it in the checked text.
    pub lists: Vec<ListAt>,
}

/// One list member of a result, as the shallow read found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListAt {
    /// The id of the response that carries it.
    pub rpc_id: Option<RpcId>,
    /// `tools`, `prompts`, `resources` or `resourceTemplates`.
    pub list: &'static str,
    /// The array's range in the text; `None` when the member is not an array.
    pub array: Option<Range<usize>>,
    /// Each element's range, in order.
    pub elements: Vec<Range<usize>>,
}

/// The result members that are lists, by key.
const LIST_KEYS: [&str; 4] = [LISTS[0].0, LISTS[1].0, LISTS[2].0, LISTS[3].0];

/// Reads one message (a body or an event's data) from `server` strictly, whole, building only
/// the members of its results; the session's inventory is not needed. Where a result carries a
/// list, the spans of the list's elements are kept for [`filter_lists`], which then reads nothing
/// twice.
pub fn read_message(server: &ServerRule, text: &[u8]) -> Result<Shape, ResponseError> {
    let limits = response_limits(server.limits);
    let spanned = json::parse_to_depth_with_spans(
        text,
        &limits,
        if is_batch(text) { 3 } else { 2 },
        &LIST_KEYS,
    )?;
    let messages: Vec<(usize, &Value)> = match &spanned.value {
        Value::Array(items) if items.is_empty() => return Err(ResponseError::EmptyBatch),
        Value::Array(items) => children(0, items.iter()).collect(),
        single => vec![(0, single)],
    };
    let mut out = Shape::default();
    for (span, m) in messages {
        let id = read_shape(m).map_err(|e| ResponseError::Shape(e.to_string()))?;
        if let Some(id) = &id {
            out.answered.push(id.clone());
        }
        let Value::Object(members) = m else { continue };
        let result = children(span, members.iter().map(|(_, v)| v))
            .zip(members.iter().map(|(k, _)| k))
            .find(|(_, k)| *k == "result");
        let Some(((result_span, Value::Object(result)), _)) = result else {
            continue;
        };
        let members = children(result_span, result.iter().map(|(_, v)| v))
            .zip(result.iter().map(|(k, _)| k.as_str()));
        for ((member_span, value), key) in members {
            let Some(&(list, _)) = LISTS.iter().find(|(l, _)| *l == key) else {
                continue;
            };
            out.has_list = true;
            // A list is elided at this depth; an elided object, or a scalar, is not an array.
            let array = match value {
                Value::Elided => spanned
                    .spans
                    .get(member_span)
                    .filter(|r| text.get(r.start) == Some(&b'['))
                    .cloned(),
                _ => None,
            };
            let elements = match array {
                Some(_) => spanned
                    .elements
                    .iter()
                    .filter(|e| e.list == member_span)
                    .map(|e| e.range.clone())
                    .collect(),
                None => Vec::new(),
            };
            out.lists.push(ListAt {
                rpc_id: id.clone(),
                list,
                array,
                elements,
            });
        }
    }
    Ok(out)
}

/// Filters the lists [`read_message`] found in `text` (the same text, which it checked): shows
/// each tool to `inventory` and keeps only the entries the policy allows. `answered` in the
/// result is left empty (the shallow read has it).
///
/// Each entry's name is read from its span, and an entry is read whole only when its definition is
/// needed (a pinned server, or a schema that may declare `x-mcp-header`). A filtered message is the
/// checked text with each filtered list reduced to the entries kept, copied as they were: nothing
/// is written out again.
pub fn filter_lists(
    server: &ServerRule,
    inventory: &mut Inventory,
    text: &[u8],
    shape: &Shape,
) -> Result<ReadMessage, ResponseError> {
    // read_message checked it is UTF-8.
    let text = std::str::from_utf8(text).map_err(|e| {
        ResponseError::Json(JsonError {
            offset: e.valid_up_to(),
            kind: JsonErrorKind::InvalidUtf8,
        })
    })?;
    let mut read = Reading {
        server,
        inventory,
        text,
        limits: response_limits(server.limits),
        edits: Vec::new(),
        out: ReadMessage::default(),
    };
    // Every list is checked before any is shown to the inventory, and every tool is shown before
    // any list is filtered (a later definition of a pinned tool hides the earlier one too).
    let prepared = shape
        .lists
        .iter()
        .map(|at| read.prepare(at))
        .collect::<Result<Vec<_>, _>>()?;
    for list in &prepared {
        read.observe(list);
    }
    for list in &prepared {
        read.filter(list);
    }
    let Reading { edits, mut out, .. } = read;
    if !edits.is_empty() {
        out.rewritten = Some(apply_edits(text, &edits));
    }
    Ok(out)
}

fn is_batch(text: &[u8]) -> bool {
    text.iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        == Some(&b'[')
}

/// Each child with the index of its span, for the children of the container whose span is `parent`
/// (pre-order: the first child's span follows the parent's, and each child's subtree follows it).
fn children<'v>(
    parent: usize,
    values: impl Iterator<Item = &'v Value>,
) -> impl Iterator<Item = (usize, &'v Value)> {
    let mut next = parent + 1;
    values.map(move |v| {
        let at = next;
        next += json::containers_in(v);
        (at, v)
    })
}

/// A list whose entries were filtered: its span in the input and the spans of the entries kept.
struct Edit {
    list: Range<usize>,
    kept: Vec<Range<usize>>,
}

fn apply_edits(text: &str, edits: &[Edit]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for edit in edits {
        out.push_str(text.get(at..edit.list.start).unwrap_or_default());
        out.push('[');
        for (i, kept) in edit.kept.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(text.get(kept.clone()).unwrap_or_default());
        }
        out.push(']');
        at = edit.list.end;
    }
    out.push_str(text.get(at..).unwrap_or_default());
    out
}

/// One list checked and named, ready to be shown to the inventory and filtered.
struct Prepared<'l, 't> {
    at: &'l ListAt,
    array: Range<usize>,
    entries: Vec<PreparedEntry<'t>>,
}

struct PreparedEntry<'t> {
    range: Range<usize>,
    /// `None`: not an object with a string name (hidden).
    name: Option<Cow<'t, str>>,
    /// A tool entry read whole, when the inventory needs it.
    whole: Option<Value>,
}

/// One message's filtering in progress.
struct Reading<'a> {
    server: &'a ServerRule,
    inventory: &'a mut Inventory,
    text: &'a str,
    limits: JsonLimits,
    edits: Vec<Edit>,
    out: ReadMessage,
}

impl<'a> Reading<'a> {
    /// Everything about one list that can make the message unreadable, checked before anything
    /// is shown to the inventory: an answer the client never gets must pin nothing.
    fn prepare<'l>(&self, at: &'l ListAt) -> Result<Prepared<'l, 'a>, ResponseError> {
        let list = at.list;
        let Some(array) = &at.array else {
            return Err(ResponseError::ListNotArray(list));
        };
        let name_key = LISTS
            .iter()
            .find(|(l, _)| *l == list)
            .map_or("name", |(_, k)| *k);
        // Each entry and its name; one that is not an object with a string name has none and is
        // hidden.
        let text = self.text;
        let mut entries = Vec::with_capacity(at.elements.len());
        for range in &at.elements {
            let entry = text.get(range.clone()).unwrap_or_default();
            let name = json::object_member_str(entry, name_key);
            let whole = match (&name, list) {
                (Some(_), "tools") => self.whole_entry(entry)?,
                _ => None,
            };
            entries.push(PreparedEntry {
                range: range.clone(),
                name,
                whole,
            });
        }
        let mut seen = HashSet::with_capacity(entries.len());
        for e in &entries {
            if let Some(name) = &e.name
                && !seen.insert(name.as_ref())
            {
                return Err(ResponseError::DuplicateName(list));
            }
        }
        Ok(Prepared {
            at,
            array: array.clone(),
            entries,
        })
    }

    /// Shows a prepared tools list to the inventory (pinning at first sight, mirrored headers).
    fn observe(&mut self, list: &Prepared<'_, '_>) {
        if list.at.list != "tools" {
            return;
        }
        for e in &list.entries {
            let Some(name) = &e.name else { continue };
            let sighting = self
                .inventory
                .observe(name, e.whole.as_ref().unwrap_or(&Value::Null));
            self.out.lock_changed |= sighting.lock_changed;
        }
    }

    /// Keeps the entries the policy allows; records the list when any were hidden.
    fn filter(&mut self, prepared: &Prepared<'_, '_>) {
        if !self.server.filter_lists {
            return;
        }
        let list = prepared.at.list;
        let mut kept = Vec::with_capacity(prepared.entries.len());
        let mut changed = 0;
        for e in &prepared.entries {
            let Some(name) = &e.name else { continue };
            let allowed = match list {
                "tools" => match rules::tool_verdict(self.server, self.inventory, name) {
                    ToolVerdict::Allowed(_) => true,
                    ToolVerdict::Changed | ToolVerdict::NotInLock => {
                        changed += 1;
                        false
                    }
                    ToolVerdict::Denied(_) | ToolVerdict::NotAllowed => false,
                },
                "prompts" => rules::prompt(self.server, name).is_allowed(),
                _ => rules::resource(self.server, name).is_allowed(),
            };
            if allowed {
                kept.push(e.range.clone());
            }
        }
        let hidden = prepared.entries.len() - kept.len();
        if hidden > 0 {
            self.edits.push(Edit {
                list: prepared.array.clone(),
                kept,
            });
            self.out.filtered.push(Filtered {
                rpc_id: prepared.at.rpc_id.clone(),
                list,
                hidden,
                changed,
            });
        }
    }

    /// A tool entry read whole, when the inventory needs more of it than its name: a pinned
    /// server's definition, or a schema that may declare `x-mcp-header` (the name spelled out, or
    /// any escape, which could spell it). `None`: its name says all there is to say (no headers to
    /// mirror).
    fn whole_entry(&self, entry: &str) -> Result<Option<Value>, ResponseError> {
        let bytes = entry.as_bytes();
        let needed = self.inventory.is_pinned()
            || bytes.contains(&b'\\')
            || memchr::memmem::find(bytes, HEADER_KEY).is_some();
        if !needed {
            return Ok(None);
        }
        Ok(Some(json::parse(bytes, &self.limits)?))
    }
}

/// The schema member that mirrors an argument into a header.
const HEADER_KEY: &[u8] = b"x-mcp-header";

/// Both reads in one: what a caller holding the inventory anyway (tests, `fenzi check`) uses.
pub fn read_and_filter(
    server: &ServerRule,
    inventory: &mut Inventory,
    text: &[u8],
) -> Result<ReadMessage, ResponseError> {
    let shape = read_message(server, text)?;
    let mut out = if shape.has_list {
        filter_lists(server, inventory, text, &shape)?
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
    fn listed_schemas_declare_mirrored_headers_however_the_key_is_spelled() {
        let list = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[
            {"name":"get_a","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}},
            {"name":"get_b","inputSchema":{"type":"object","properties":{"zone":{"type":"string","x\u002dmcp-header":"Zone"}}}},
            {"name":"get_c","inputSchema":{"type":"object","properties":{"q":{"type":"string"}}}}]}}"#;
        let mut inv = Inventory::new(false, None);
        read_and_filter(&server(), &mut inv, list.as_bytes()).unwrap();
        let headers = |tool: &str| {
            inv.mirrored(tool)
                .and_then(|m| m.as_ref())
                .map(|m| m.keys().cloned().collect::<Vec<_>>())
        };
        assert_eq!(headers("get_a"), Some(vec!["mcp-param-region".to_string()]));
        assert_eq!(headers("get_b"), Some(vec!["mcp-param-zone".to_string()]));
        assert_eq!(headers("get_c"), Some(vec![]));
        assert_eq!(headers("get_unlisted"), None);
    }

    #[test]
    fn an_unreadable_message_pins_nothing() {
        let mut s = server();
        s.pin = true;
        let echo = r#"{"name":"get_a","description":"v1"}"#;
        for text in [
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[{echo}],"prompts":[{{"name":"p"}},{{"name":"p"}}]}}}}"#
            ),
            format!(
                r#"[{{"jsonrpc":"2.0","id":1,"result":{{"tools":[{echo}]}}}},{{"jsonrpc":"2.0","id":2,"result":{{"tools":[{{"name":"x"}},{{"name":"x"}}]}}}}]"#
            ),
            format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[{echo}],"resources":{{}}}}}}"#),
        ] {
            let mut inv = Inventory::new(true, None);
            assert!(
                read_and_filter(&s, &mut inv, text.as_bytes()).is_err(),
                "{text}"
            );
            assert!(!inv.has_lock_entry(), "{text}");
            assert_eq!(
                crate::mcp::methods::tool(&s, &inv, "get_a").reason(),
                Some(Reason::ToolChanged)
            );
        }
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
