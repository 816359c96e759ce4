//! The shape of one JSON-RPC 2.0 message as MCP uses it: request, notification or response, and
//! everything else refused (`bad_request`).
//!
//! - Members: only `jsonrpc`, `id`, `method`, `params`, `result`, `error` (JSON-RPC says a message
//!   MUST NOT carry others; a member we do not know is a member we cannot vouch for).
//! - `jsonrpc` is the string `"2.0"`.
//! - A request has a string `method` and an `id` that is a string or an integer (MCP forbids
//!   `null` request ids; a fraction or exponent is refused too: MCP ids are strings or integers).
//! - A notification has a string `method` and no `id`.
//! - `params`, when present, is an object or an array (not `null`).
//! - A response has no `method` and no `params`, an `id`, and exactly one of `result` (an object, as
//!   MCP results are) or `error` (an object with an integer `code`, a string `message` and an
//!   optional `data`, nothing else). Only an error response may have a `null` id (JSON-RPC uses it
//!   when the request's id could not be read).

use super::{MessageKind, RpcId};
use crate::json::Value;

/// A message that passed the shape rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Message<'v> {
    pub kind: MessageKind,
    /// For requests and notifications.
    pub method: Option<&'v str>,
    pub id: Option<RpcId>,
    pub params: Option<&'v Value>,
}

/// Why a value is not a JSON-RPC message. The texts name members, never their contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum ShapeError {
    #[error("a batch element is an array; batches do not nest")]
    NestedBatch,
    #[error("a JSON-RPC message is an object, not {0}")]
    NotAnObject(&'static str),
    #[error(
        "a JSON-RPC message has a member other than jsonrpc, id, method, params, result and error"
    )]
    UnknownMember,
    #[error("\"jsonrpc\" must be the string \"2.0\"")]
    Version,
    #[error("\"method\" must be a string")]
    MethodNotString,
    #[error("\"params\" must be an object or an array")]
    Params,
    #[error("\"id\" must be a string or an integer")]
    Id,
    #[error("a request id cannot be null")]
    NullRequestId,
    #[error("a message cannot have \"method\" together with \"result\" or \"error\"")]
    MethodAndResult,
    #[error("a response cannot have both \"result\" and \"error\"")]
    ResultAndError,
    #[error("a message needs a \"method\", or an \"id\" with a \"result\" or an \"error\"")]
    Incomplete,
    #[error("a response needs an \"id\"")]
    ResponseWithoutId,
    #[error("a response cannot have \"params\"")]
    ResponseParams,
    #[error("\"result\" must be an object")]
    Result,
    #[error("only an error response may have a null id")]
    NullResultId,
    #[error(
        "\"error\" must be an object with an integer \"code\", a string \"message\" and an optional \"data\""
    )]
    ErrorObject,
}

/// Reads one message (an element of a batch, or the whole body).
pub(super) fn read(v: &Value) -> Result<Message<'_>, ShapeError> {
    let members = match v {
        Value::Object(members) => members,
        Value::Array(_) => return Err(ShapeError::NestedBatch),
        other => return Err(ShapeError::NotAnObject(other.type_name())),
    };
    let (mut version, mut id, mut method, mut params, mut result, mut error) =
        (None, None, None, None, None, None);
    for (key, value) in members {
        let slot = match key.as_str() {
            "jsonrpc" => &mut version,
            "id" => &mut id,
            "method" => &mut method,
            "params" => &mut params,
            "result" => &mut result,
            "error" => &mut error,
            _ => return Err(ShapeError::UnknownMember),
        };
        *slot = Some(value);
    }
    if version.and_then(Value::as_str) != Some("2.0") {
        return Err(ShapeError::Version);
    }
    let id = id.map(rpc_id).transpose()?;
    if let Some(p) = params
        && !matches!(p, Value::Object(_) | Value::Array(_))
    {
        return Err(ShapeError::Params);
    }
    if let Some(method) = method {
        let method = method.as_str().ok_or(ShapeError::MethodNotString)?;
        if result.is_some() || error.is_some() {
            return Err(ShapeError::MethodAndResult);
        }
        let kind = match id {
            None => MessageKind::Notification,
            Some(RpcId::Null) => return Err(ShapeError::NullRequestId),
            Some(_) => MessageKind::Request,
        };
        return Ok(Message {
            kind,
            method: Some(method),
            id,
            params,
        });
    }
    match (result, error) {
        (Some(_), Some(_)) => return Err(ShapeError::ResultAndError),
        (None, None) => return Err(ShapeError::Incomplete),
        _ => {}
    }
    let Some(id) = id else {
        return Err(ShapeError::ResponseWithoutId);
    };
    if params.is_some() {
        return Err(ShapeError::ResponseParams);
    }
    if let Some(result) = result {
        if !matches!(result, Value::Object(_)) {
            return Err(ShapeError::Result);
        }
        if id == RpcId::Null {
            return Err(ShapeError::NullResultId);
        }
    }
    if let Some(error) = error {
        check_error_object(error)?;
    }
    Ok(Message {
        kind: MessageKind::Response,
        method: None,
        id: Some(id),
        params: None,
    })
}

/// What can be told about a message that failed the shape rules, for the audit log and for
/// answering with its id: its `method` if that is a string, its `id` if that is a valid id.
pub(super) fn peek(v: &Value) -> (Option<String>, Option<RpcId>) {
    let method = v.get("method").and_then(Value::as_str).map(str::to_owned);
    let id = v.get("id").and_then(|id| rpc_id(id).ok());
    (method, id)
}

/// An id: a string, an integer (kept as its text) or `null`.
fn rpc_id(v: &Value) -> Result<RpcId, ShapeError> {
    match v {
        Value::String(s) => Ok(RpcId::String(s.clone())),
        Value::Number(text) if is_integer(text) => Ok(RpcId::Number(text.clone())),
        Value::Null => Ok(RpcId::Null),
        _ => Err(ShapeError::Id),
    }
}

/// An integer in JSON's number syntax (the parser already checked the grammar).
fn is_integer(text: &str) -> bool {
    !text.contains(['.', 'e', 'E'])
}

fn check_error_object(v: &Value) -> Result<(), ShapeError> {
    let members = v.as_object().ok_or(ShapeError::ErrorObject)?;
    let (mut code, mut message) = (false, false);
    for (key, value) in members {
        match (key.as_str(), value) {
            ("code", Value::Number(text)) if is_integer(text) => code = true,
            ("message", Value::String(_)) => message = true,
            ("data", _) => {}
            _ => return Err(ShapeError::ErrorObject),
        }
    }
    if code && message {
        Ok(())
    } else {
        Err(ShapeError::ErrorObject)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{JsonLimits, parse};

    fn shape(text: &str) -> Result<MessageKind, ShapeError> {
        let v = parse(text.as_bytes(), &JsonLimits::default()).unwrap();
        read(&v).map(|m| m.kind)
    }

    #[test]
    fn the_three_kinds() {
        use MessageKind::*;
        assert_eq!(
            shape(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Ok(Request)
        );
        assert_eq!(
            shape(r#"{"jsonrpc":"2.0","id":"a","method":"x","params":[]}"#),
            Ok(Request)
        );
        assert_eq!(
            shape(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Ok(Notification)
        );
        assert_eq!(
            shape(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            Ok(Response)
        );
        assert_eq!(
            shape(
                r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"x","data":[1]}}"#
            ),
            Ok(Response)
        );
    }

    #[test]
    fn everything_else_is_refused() {
        use ShapeError::*;
        let cases = [
            (r#"[]"#, NestedBatch),
            (r#""x""#, NotAnObject("string")),
            (r#"null"#, NotAnObject("null")),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"ping","extra":1}"#,
                UnknownMember,
            ),
            (r#"{"id":1,"method":"ping"}"#, Version),
            (r#"{"jsonrpc":"2.00","id":1,"method":"ping"}"#, Version),
            (r#"{"jsonrpc":2.0,"id":1,"method":"ping"}"#, Version),
            (r#"{"jsonrpc":"2.0","id":1,"method":7}"#, MethodNotString),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":null}"#,
                Params,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":"x"}"#,
                Params,
            ),
            (r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#, Id),
            (r#"{"jsonrpc":"2.0","id":1e3,"method":"ping"}"#, Id),
            (r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#, Id),
            (r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#, Id),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                NullRequestId,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}"#,
                MethodAndResult,
            ),
            (
                r#"{"jsonrpc":"2.0","method":"ping","error":{}}"#,
                MethodAndResult,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"m"}}"#,
                ResultAndError,
            ),
            (r#"{"jsonrpc":"2.0","id":1}"#, Incomplete),
            (r#"{"jsonrpc":"2.0"}"#, Incomplete),
            (r#"{"jsonrpc":"2.0","result":{}}"#, ResponseWithoutId),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{},"params":{}}"#,
                ResponseParams,
            ),
            (r#"{"jsonrpc":"2.0","id":1,"result":[]}"#, Result),
            (r#"{"jsonrpc":"2.0","id":null,"result":{}}"#, NullResultId),
            (
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":1}}"#,
                ErrorObject,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":1.5,"message":"m"}}"#,
                ErrorObject,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m","x":1}}"#,
                ErrorObject,
            ),
            (r#"{"jsonrpc":"2.0","id":1,"error":"boom"}"#, ErrorObject),
        ];
        for (text, expected) in cases {
            assert_eq!(shape(text), Err(expected), "{text}");
        }
    }

    #[test]
    fn peek_reads_what_it_can() {
        let v = parse(
            br#"{"id":7,"method":"tools/call","x":1}"#,
            &JsonLimits::default(),
        )
        .unwrap();
        assert_eq!(
            peek(&v),
            (Some("tools/call".into()), Some(RpcId::Number("7".into())))
        );
        let v = parse(br#"{"id":1.5,"method":3}"#, &JsonLimits::default()).unwrap();
        assert_eq!(peek(&v), (None, None));
    }
}
