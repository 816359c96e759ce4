//! What the bridge needs to know of a JSON-RPC message to route it: its kind, its id (as the
//! JSON text it was written with, so `1` and `"1"` stay different), and a progress token. The
//! message itself travels as the bytes it came in; the policy's strict reading happened on the
//! request path before the bridge, and the request path reads the server's answers again after.

use serde_json::Value;

/// The three kinds of JSON-RPC message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Request,
    Notification,
    Response,
}

/// One message's routing facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Routing {
    pub kind: Kind,
    /// The id's JSON text (requests and responses).
    pub id: Option<String>,
    /// `initialize` (it starts a server of its own).
    pub initialize: bool,
    /// A request's `params._meta.progressToken`, or a progress notification's
    /// `params.progressToken`, as JSON text.
    pub progress_token: Option<String>,
}

/// Why a message cannot be routed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MessageError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("not a JSON-RPC 2.0 message (an object with \"jsonrpc\": \"2.0\")")]
    NotJsonRpc,
    #[error("a JSON-RPC id must be a string or a number")]
    BadId,
}

/// Reads one message's routing facts.
pub(crate) fn route(message: &Value) -> Result<Routing, MessageError> {
    let object = message.as_object().ok_or(MessageError::NotJsonRpc)?;
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(MessageError::NotJsonRpc);
    }
    let id = match object.get("id") {
        None => None,
        Some(id @ (Value::String(_) | Value::Number(_))) => Some(id.to_string()),
        // A response to a request the server could not read carries a null id.
        Some(Value::Null) if object.get("method").is_none() => Some("null".to_owned()),
        Some(_) => return Err(MessageError::BadId),
    };
    let method = object.get("method").and_then(Value::as_str);
    let kind = match (method, &id) {
        (Some(_), Some(_)) => Kind::Request,
        (Some(_), None) => Kind::Notification,
        (None, Some(_)) => Kind::Response,
        (None, None) => return Err(MessageError::NotJsonRpc),
    };
    let params = object.get("params");
    let progress_token = match method {
        Some("notifications/progress") => params.and_then(|p| p.get("progressToken")),
        Some(_) => params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("progressToken")),
        None => None,
    }
    .map(Value::to_string);
    Ok(Routing {
        kind,
        id,
        initialize: method == Some("initialize") && kind == Kind::Request,
        progress_token,
    })
}

/// Reads a POST body: one message or a batch (the 2025-03-26 era's arrays), each with its
/// routing facts.
pub(crate) fn read_body(body: &[u8]) -> Result<Vec<(Routing, Value)>, MessageError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| MessageError::NotJson(e.to_string()))?;
    let messages = match value {
        Value::Array(items) if !items.is_empty() => items,
        Value::Array(_) => return Err(MessageError::NotJsonRpc),
        one => vec![one],
    };
    messages.into_iter().map(|m| Ok((route(&m)?, m))).collect()
}

/// The single line to write to a server for `message` (no newline inside: JSON's own
/// serialisation never writes one outside a string, and strings escape theirs).
pub(crate) fn line(message: &Value) -> Vec<u8> {
    let mut line = serde_json::to_vec(message).expect("a Value always serialises");
    line.push(b'\n');
    line
}

/// The JSON-RPC error response the bridge writes for a request the server will never answer.
pub(crate) fn error_response(id: &str, code: i64, message: &str) -> Vec<u8> {
    // `id` is JSON text read from the client's own request (a string or a number).
    let id: Value = serde_json::from_str(id).unwrap_or(Value::Null);
    serde_json::to_vec(&serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": code, "message": message },
    }))
    .expect("a Value always serialises")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_ids_and_progress_tokens() {
        let r = route(&json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
            "params":{"name":"x","_meta":{"progressToken":"p1"}}}))
        .unwrap();
        assert_eq!(r.kind, Kind::Request);
        assert_eq!(r.id.as_deref(), Some("1"));
        assert_eq!(r.progress_token.as_deref(), Some("\"p1\""));
        assert!(!r.initialize);
        let r = route(&json!({"jsonrpc":"2.0","id":"1","result":{}})).unwrap();
        assert_eq!((r.kind, r.id.as_deref()), (Kind::Response, Some("\"1\"")));
        let r = route(&json!({"jsonrpc":"2.0","method":"notifications/progress",
            "params":{"progressToken":7,"progress":1}}))
        .unwrap();
        assert_eq!(
            (r.kind, r.progress_token.as_deref()),
            (Kind::Notification, Some("7"))
        );
        assert!(
            route(&json!({"jsonrpc":"2.0","id":1,"method":"initialize"}))
                .unwrap()
                .initialize
        );
        let r = route(&json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}))
            .unwrap();
        assert_eq!(r.id.as_deref(), Some("null"));
    }

    #[test]
    fn what_is_not_json_rpc_is_refused() {
        assert_eq!(route(&json!([1])), Err(MessageError::NotJsonRpc));
        assert_eq!(
            route(&json!({"jsonrpc":"1.0","id":1,"method":"x"})),
            Err(MessageError::NotJsonRpc)
        );
        assert_eq!(
            route(&json!({"jsonrpc":"2.0","id":{},"method":"x"})),
            Err(MessageError::BadId)
        );
        assert_eq!(
            route(&json!({"jsonrpc":"2.0"})),
            Err(MessageError::NotJsonRpc)
        );
        assert!(matches!(read_body(b"{"), Err(MessageError::NotJson(_))));
        assert_eq!(read_body(b"[]"), Err(MessageError::NotJsonRpc));
    }

    #[test]
    fn a_pretty_printed_body_becomes_one_line_per_message() {
        let body = b"[\n {\"jsonrpc\": \"2.0\",\n \"method\": \"notifications/initialized\"},\n {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\",\"params\":{\"s\":\"a\\nb\"}}\n]";
        let messages = read_body(body).unwrap();
        assert_eq!(messages.len(), 2);
        for (_, m) in &messages {
            let line = line(m);
            assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
            assert_eq!(line.last(), Some(&b'\n'));
        }
        assert_eq!(messages[1].0.id.as_deref(), Some("2"));
    }
}
