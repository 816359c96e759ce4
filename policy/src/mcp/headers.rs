//! The 2026-07-28 standard headers (SEP-2243): `Mcp-Method` mirrors the body's `method`, `Mcp-Name`
//! mirrors `params.name` (`tools/call`, `prompts/get`) or `params.uri` (`resources/read`,
//! `resources/subscribe`, `resources/unsubscribe`). Intermediaries and servers may act on the header
//! alone, so when present it must say what the body says, or the body is not decided (`bad_request`).
//!
//! - Absent headers are fine (earlier protocol versions do not send them).
//! - Either header given twice, or on a batch or a response: refused.
//! - `Mcp-Method` equals the method byte for byte (optional whitespace around the value aside).
//! - `Mcp-Name` is compared after decoding the spec's Base64 form `=?base64?<standard Base64 of the
//!   UTF-8 value>?=` (markers exact and lowercase; a malformed payload is refused). For other
//!   methods it mirrors `params.name`, else `params.uri`, as the reference SDKs send it; an
//!   `Mcp-Name` with nothing in the body to mirror is refused.
//! - `Mcp-Param-*` headers (tool arguments mirrored by schema) are not checked here: the decision
//!   never depends on arguments, and the server, which knows the tool's schema, checks them.

use super::http::{header_values, trim_ows};
use crate::json::Value;

const MCP_METHOD: &str = "mcp-method";
const MCP_NAME: &str = "mcp-name";

/// Why the `Mcp-*` headers disagree with the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum HeaderError {
    #[error("{0} is given more than once")]
    Repeated(&'static str),
    #[error("{0} cannot be sent with a batch")]
    OnBatch(&'static str),
    #[error("{0} cannot be sent with a response")]
    OnResponse(&'static str),
    #[error("Mcp-Method does not match the body's method")]
    MethodMismatch,
    #[error("Mcp-Name does not match the body's {0}")]
    NameMismatch(&'static str),
    #[error("Mcp-Name is given but the body names no tool, prompt or resource")]
    NameWithoutTarget,
    #[error("Mcp-Name is not valid Base64-wrapped UTF-8")]
    NameEncoding,
}

/// Checks the `Mcp-*` headers of a POST against its parsed body.
pub(super) fn check(headers: &[(&str, &[u8])], body: &Value) -> Result<(), HeaderError> {
    let method_header = single(headers, MCP_METHOD, "Mcp-Method")?;
    let name_header = single(headers, MCP_NAME, "Mcp-Name")?;
    if method_header.is_none() && name_header.is_none() {
        return Ok(());
    }
    let present = if method_header.is_some() {
        "Mcp-Method"
    } else {
        "Mcp-Name"
    };
    if matches!(body, Value::Array(_)) {
        return Err(HeaderError::OnBatch(present));
    }
    let Some(method) = body.get("method") else {
        return Err(HeaderError::OnResponse(present));
    };
    let method = method.as_str();
    if let Some(header) = method_header
        && method.map(str::as_bytes) != Some(header)
    {
        return Err(HeaderError::MethodMismatch);
    }
    if let Some(header) = name_header {
        let decoded = decode_name(header).ok_or(HeaderError::NameEncoding)?;
        let params = body.get("params");
        let member = |key: &str| params.and_then(|p| p.get(key)).and_then(Value::as_str);
        let (field, expected) = match method.unwrap_or_default() {
            "tools/call" | "prompts/get" => ("params.name", member("name")),
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                ("params.uri", member("uri"))
            }
            _ => match (member("name"), member("uri")) {
                (Some(name), _) => ("params.name", Some(name)),
                (None, Some(uri)) => ("params.uri", Some(uri)),
                (None, None) => return Err(HeaderError::NameWithoutTarget),
            },
        };
        if expected.map(str::as_bytes) != Some(decoded.as_slice()) {
            return Err(HeaderError::NameMismatch(field));
        }
    }
    Ok(())
}

/// The one value of header `name` (whitespace-trimmed), if present.
fn single<'a>(
    headers: &'a [(&'a str, &'a [u8])],
    name: &'static str,
    shown: &'static str,
) -> Result<Option<&'a [u8]>, HeaderError> {
    let mut values = header_values(headers, name);
    let first = values.next().map(trim_ows);
    if values.next().is_some() {
        return Err(HeaderError::Repeated(shown));
    }
    Ok(first)
}

/// The `Mcp-Name` value as the body would carry it: Base64-decoded if wrapped, else as is.
fn decode_name(value: &[u8]) -> Option<Vec<u8>> {
    let Some(payload) = value
        .strip_prefix(b"=?base64?")
        .and_then(|rest| rest.strip_suffix(b"?="))
    else {
        return Some(value.to_vec());
    };
    let decoded = decode_base64(payload)?;
    std::str::from_utf8(&decoded).ok()?;
    Some(decoded)
}

/// Strict standard Base64 (RFC 4648 §4): padded to a multiple of four, `=` only at the end, and
/// unused bits zero, so one value has exactly one encoding.
fn decode_base64(text: &[u8]) -> Option<Vec<u8>> {
    fn sextet(c: u8) -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    }
    if !text.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let chunks = text.len() / 4;
    for (n, chunk) in text.chunks_exact(4).enumerate() {
        let last = n + 1 == chunks;
        let pad = match chunk {
            [_, _, b'=', b'='] if last => 2,
            [_, _, _, b'='] if last => 1,
            _ => 0,
        };
        let mut bits = 0u32;
        for &c in &chunk[..4 - pad] {
            bits = bits << 6 | sextet(c)?;
        }
        bits <<= 6 * pad as u32;
        let bytes = [(bits >> 16) as u8, (bits >> 8) as u8, bits as u8];
        let keep = 3 - pad;
        // Bits beyond the kept bytes must be zero (canonical encoding).
        if bytes[keep..].iter().any(|&b| b != 0) {
            return None;
        }
        out.extend_from_slice(&bytes[..keep]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{JsonLimits, parse};

    fn check_with(headers: &[(&str, &[u8])], body: &str) -> Result<(), HeaderError> {
        check(
            headers,
            &parse(body.as_bytes(), &JsonLimits::default()).unwrap(),
        )
    }

    const CALL: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"café"}}"#;

    #[test]
    fn base64_is_strict() {
        assert_eq!(decode_base64(b"Y2Fmw6k="), Some("café".as_bytes().to_vec()));
        assert_eq!(decode_base64(b""), Some(vec![]));
        assert_eq!(decode_base64(b"YQ=="), Some(b"a".to_vec()));
        assert_eq!(decode_base64(b"YWI="), Some(b"ab".to_vec()));
        assert_eq!(decode_base64(b"YWJj"), Some(b"abc".to_vec()));
        assert_eq!(
            decode_base64(b"PT9iYXNlNjQ/bGl0ZXJhbD89"),
            Some(b"=?base64?literal?=".to_vec())
        );
        for bad in [
            &b"YQ"[..],
            b"YR==",
            b"YQ=a",
            b"Y===",
            b"YQ==YQ==",
            b"Y2Fm-6k=",
            b"YW J",
        ] {
            assert_eq!(decode_base64(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn headers_must_agree_with_the_body() {
        assert_eq!(check_with(&[], CALL), Ok(()));
        assert_eq!(check_with(&[("Mcp-Method", b"tools/call")], CALL), Ok(()));
        assert_eq!(
            check_with(&[("mcp-method", b" tools/call\t")], CALL),
            Ok(())
        );
        assert_eq!(
            check_with(&[("Mcp-Name", b"=?base64?Y2Fmw6k=?=")], CALL),
            Ok(())
        );
        assert_eq!(check_with(&[("Mcp-Name", "café".as_bytes())], CALL), Ok(()));
        assert_eq!(
            check_with(&[("Mcp-Method", b"tools/list")], CALL),
            Err(HeaderError::MethodMismatch)
        );
        assert_eq!(
            check_with(&[("Mcp-Method", b"Tools/call")], CALL),
            Err(HeaderError::MethodMismatch)
        );
        assert_eq!(
            check_with(&[("Mcp-Name", b"cafe")], CALL),
            Err(HeaderError::NameMismatch("params.name"))
        );
        assert_eq!(
            check_with(&[("Mcp-Name", b"=?base64?Y2Fmw6k?=")], CALL),
            Err(HeaderError::NameEncoding)
        );
        assert_eq!(
            check_with(
                &[("Mcp-Method", b"tools/call"), ("MCP-METHOD", b"tools/call")],
                CALL
            ),
            Err(HeaderError::Repeated("Mcp-Method"))
        );
        assert_eq!(
            check_with(
                &[("Mcp-Method", b"ping")],
                r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#
            ),
            Err(HeaderError::OnBatch("Mcp-Method"))
        );
        assert_eq!(
            check_with(
                &[("Mcp-Name", b"x")],
                r#"{"jsonrpc":"2.0","id":1,"result":{}}"#
            ),
            Err(HeaderError::OnResponse("Mcp-Name"))
        );
        assert_eq!(
            check_with(
                &[("Mcp-Name", b"x")],
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#
            ),
            Err(HeaderError::NameWithoutTarget)
        );
        let read = r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a","name":"n"}}"#;
        assert_eq!(check_with(&[("Mcp-Name", b"file:///a")], read), Ok(()));
        assert_eq!(
            check_with(&[("Mcp-Name", b"n")], read),
            Err(HeaderError::NameMismatch("params.uri"))
        );
    }
}
