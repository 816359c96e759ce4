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
//! - `Mcp-Param-{Name}` headers mirror the `tools/call` arguments the tool's schema marks with
//!   `x-mcp-header: Name`, as the lists this session read declared them ([`Inventory::mirrored`]).
//!   Each one present must be the only one of its name, go with a single `tools/call` of a tool
//!   whose schema the session has read and that declares it, and equal the argument's scalar
//!   spelling (a string as is, an integer's JSON text, `true`/`false`) after the same Base64
//!   decoding as `Mcp-Name`. Anything else cannot be checked, so it is refused. An argument whose
//!   header is absent is fine: clients before 2026-07-28 send none.
//!
//! Spellings (README, "What the proxy decides"): servers behind CGI-style gateways, and some
//! frameworks, read `_` in a header name as `-`. `Mcp-Method` and `Mcp-Name` are checked in every
//! such spelling ([`header_values`]): the name says nothing but which header it is, every spelling
//! must equal the body, and two spellings are the header given twice. An `Mcp-Param-*` header's
//! name also says which argument it mirrors, so it is checked only as the standard spells it:
//! `Mcp-Param-` (any case) and then the declared name exactly (any case). A name a server could fold
//! into `Mcp-Param-…` but spelled otherwise (`Mcp_Param_Region`, `mcp-param_region`) is refused,
//! as is a declared name spelled with `_` for `-` or the reverse (it is not the declared header),
//! and a tool whose declared names fold into one header has declarations that cannot be checked
//! ([`Inventory::mirrored`]).

use super::http::{header_values, trim_ows};
use crate::json::Value;
use crate::mcp::inventory::Inventory;

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
    #[error("an Mcp-Param-* header spelled with `_` for `-`; only Mcp-Param- is checked")]
    ParamSpelling,
    #[error("Mcp-Param-* headers only go with a single tools/call")]
    ParamNotOnCall,
    #[error("an Mcp-Param-* header is given more than once")]
    ParamRepeated,
    #[error("Mcp-Param-* headers for a tool no list in this session has shown")]
    ParamSchemaUnknown,
    #[error("an Mcp-Param-* header the tool's schema does not declare")]
    ParamUndeclared,
    #[error("an Mcp-Param-* header is not valid Base64-wrapped UTF-8")]
    ParamEncoding,
    #[error("an Mcp-Param-* header does not match the argument it mirrors")]
    ParamMismatch,
}

const MCP_PARAM: &str = "mcp-param-";

/// Whether the request carries `Mcp-Param-*` headers (the classifier then keeps the arguments).
pub(super) fn mirrors_arguments(headers: &[(&str, &[u8])]) -> bool {
    headers.iter().any(|(name, _)| is_param(name))
}

/// Is `name` an `Mcp-Param-*` header in any spelling a server might read as one (case, and `_` for
/// `-`)?
fn is_param(name: &str) -> bool {
    // Bytes, not a str slice: a hostile header name need not have a char boundary there.
    let name = name.as_bytes();
    name.len() > MCP_PARAM.len()
        && name[..MCP_PARAM.len()]
            .iter()
            .zip(MCP_PARAM.bytes())
            .all(|(&c, p)| c.to_ascii_lowercase() == p || (c == b'_' && p == b'-'))
}

/// Is the `Mcp-Param-` of an [`is_param`] name spelled with dashes?
fn dash_spelled(name: &str) -> bool {
    name.as_bytes()[..MCP_PARAM.len()].eq_ignore_ascii_case(MCP_PARAM.as_bytes())
}

/// Checks the `Mcp-*` headers of a POST against its parsed body.
pub(super) fn check(
    headers: &[(&str, &[u8])],
    body: &Value,
    inventory: &Inventory,
) -> Result<(), HeaderError> {
    check_params(headers, body, inventory)?;
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

/// The `Mcp-Param-*` headers against the arguments they mirror.
fn check_params(
    headers: &[(&str, &[u8])],
    body: &Value,
    inventory: &Inventory,
) -> Result<(), HeaderError> {
    let params: Vec<(String, &[u8])> = headers
        .iter()
        .filter(|(name, _)| is_param(name))
        .map(|(name, value)| (name.to_ascii_lowercase(), trim_ows(value)))
        .collect();
    if params.is_empty() {
        return Ok(());
    }
    if !params.iter().all(|(name, _)| dash_spelled(name)) {
        return Err(HeaderError::ParamSpelling);
    }
    if body.get("method").and_then(Value::as_str) != Some("tools/call") {
        return Err(HeaderError::ParamNotOnCall);
    }
    let call = body.get("params");
    let tool = call
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str)
        .ok_or(HeaderError::ParamNotOnCall)?;
    let declared = match inventory.mirrored(tool) {
        None => return Err(HeaderError::ParamSchemaUnknown),
        Some(None) => return Err(HeaderError::ParamUndeclared),
        Some(Some(declared)) => declared,
    };
    let arguments = call.and_then(|p| p.get("arguments"));
    for (i, (name, value)) in params.iter().enumerate() {
        if params[..i].iter().any(|(other, _)| other == name) {
            return Err(HeaderError::ParamRepeated);
        }
        let argument = declared.get(name).ok_or(HeaderError::ParamUndeclared)?;
        let decoded = decode_name(value).ok_or(HeaderError::ParamEncoding)?;
        let spelled = match arguments.and_then(|a| a.get(argument)) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) if n.bytes().all(|b| b.is_ascii_digit() || b == b'-') => {
                n.clone()
            }
            Some(Value::Bool(b)) => b.to_string(),
            _ => return Err(HeaderError::ParamMismatch),
        };
        if spelled.as_bytes() != decoded.as_slice() {
            return Err(HeaderError::ParamMismatch);
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
            &Inventory::unpinned(),
        )
    }

    #[test]
    fn mirrored_arguments_must_match_the_schema_this_session_read() {
        let mut inventory = Inventory::unpinned();
        let listed = r#"{"name":"sql","inputSchema":{"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"},
            "limit":{"type":"integer","x-mcp-header":"Limit"},
            "dry":{"type":"boolean","x-mcp-header":"Dry"}}}}"#;
        inventory.observe(
            "sql",
            &parse(listed.as_bytes(), &JsonLimits::default()).unwrap(),
        );
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sql",
            "arguments":{"region":"eu-west-1","limit":10,"dry":true}}}"#;
        let run = |headers: &[(&str, &[u8])], body: &str, inv: &Inventory| {
            check(
                headers,
                &parse(body.as_bytes(), &JsonLimits::default()).unwrap(),
                inv,
            )
        };
        let ok: &[(&str, &[u8])] = &[
            ("Mcp-Param-Region", b"eu-west-1"),
            ("mcp-param-limit", b"10"),
            ("MCP-PARAM-DRY", b"true"),
        ];
        assert_eq!(run(ok, body, &inventory), Ok(()));
        assert_eq!(
            run(
                &[("Mcp-Param-Region", b"=?base64?ZXUtd2VzdC0x?=")],
                body,
                &inventory
            ),
            Ok(())
        );
        assert_eq!(
            run(&[("Mcp-Param-Region", b"us-east-1")], body, &inventory),
            Err(HeaderError::ParamMismatch)
        );
        assert_eq!(
            run(&[("Mcp-Param-Other", b"x")], body, &inventory),
            Err(HeaderError::ParamUndeclared)
        );
        assert_eq!(
            run(
                &[
                    ("Mcp-Param-Region", b"eu-west-1"),
                    ("mcp-param-region", b"eu-west-1")
                ],
                body,
                &inventory
            ),
            Err(HeaderError::ParamRepeated)
        );
        assert_eq!(
            run(
                &[("Mcp-Param-Region", b"eu-west-1")],
                body,
                &Inventory::unpinned()
            ),
            Err(HeaderError::ParamSchemaUnknown)
        );
        assert_eq!(
            run(
                &[("Mcp-Param-Region", b"x")],
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
                &inventory
            ),
            Err(HeaderError::ParamNotOnCall)
        );
        let absent = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sql","arguments":{}}}"#;
        assert_eq!(
            run(&[("Mcp-Param-Region", b"eu-west-1")], absent, &inventory),
            Err(HeaderError::ParamMismatch)
        );
        assert_eq!(run(&[], absent, &inventory), Ok(()));
        // Found by the request_head fuzz target: a name with a multi-byte character where the
        // prefix ends once panicked instead of being read as another header.
        assert!(!mirrors_arguments(&[("mcp-paramé", b"x")]));
        assert!(!mirrors_arguments(&[("mcp-parame", b"x")]));
        assert!(mirrors_arguments(&[("MCP-PARAM-x", b"x")]));
    }

    #[test]
    fn param_headers_in_another_spelling_are_refused() {
        let mut inventory = Inventory::unpinned();
        let listed = r#"{"name":"sql","inputSchema":{"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"},
            "dry":{"type":"boolean","x-mcp-header":"Dry_Run"}}}}"#;
        inventory.observe(
            "sql",
            &parse(listed.as_bytes(), &JsonLimits::default()).unwrap(),
        );
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sql",
            "arguments":{"region":"eu-west-1","dry":true}}}"#;
        let run = |headers: &[(&str, &[u8])], body: &str| {
            check(
                headers,
                &parse(body.as_bytes(), &JsonLimits::default()).unwrap(),
                &inventory,
            )
        };
        // The standard spelling is checked, in any case, the declared name as declared.
        assert_eq!(run(&[("mcp-param-region", b"eu-west-1")], call), Ok(()));
        assert_eq!(run(&[("MCP-PARAM-DRY_RUN", b"true")], call), Ok(()));
        assert_eq!(
            run(&[("Mcp-Param-Dry_Run", b"false")], call),
            Err(HeaderError::ParamMismatch)
        );
        // `_` anywhere in the prefix: refused whatever the value, even one that matches.
        for name in [
            "Mcp_Param_Region",
            "mcp_param-region",
            "MCP-PARAM_region",
            "Mcp-Param_Region",
            "mcp_Param_region",
            "Mcp_Param-Dry_Run",
        ] {
            for value in [&b"eu-west-1"[..], b"us-east-1", b"true"] {
                assert_eq!(
                    run(&[(name, value)], call),
                    Err(HeaderError::ParamSpelling),
                    "{name}"
                );
            }
            // Beside the standard spelling, and on a message that is not a call.
            assert_eq!(
                run(&[("Mcp-Param-Region", b"eu-west-1"), (name, b"x")], call),
                Err(HeaderError::ParamSpelling),
                "{name}"
            );
            assert_eq!(
                run(
                    &[(name, b"x")],
                    r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#
                ),
                Err(HeaderError::ParamSpelling),
                "{name}"
            );
            assert!(mirrors_arguments(&[(name, b"x")]), "{name}");
        }
        // The declared name with `_` for `-` (or the reverse) is another header: not declared.
        assert_eq!(
            run(&[("Mcp-Param-Dry-Run", b"true")], call),
            Err(HeaderError::ParamUndeclared)
        );
        assert_eq!(
            run(
                &[
                    ("Mcp-Param-Dry_Run", b"true"),
                    ("Mcp-Param-Dry-Run", b"true")
                ],
                call
            ),
            Err(HeaderError::ParamUndeclared)
        );
        // Not a parameter header in any spelling: left alone.
        for name in ["Mcp-Params", "Mcp_Paramx", "Mcp-Param", "Mcp.Param.Region"] {
            assert!(!mirrors_arguments(&[(name, b"x")]), "{name}");
            assert_eq!(run(&[(name, b"x")], call), Ok(()), "{name}");
        }
    }

    #[test]
    fn method_and_name_are_checked_in_every_spelling() {
        for name in ["Mcp_Method", "mcp_method", "MCP-METHOD", "Mcp-Method"] {
            assert_eq!(check_with(&[(name, b"tools/call")], CALL), Ok(()), "{name}");
            assert_eq!(
                check_with(&[(name, b"tools/list")], CALL),
                Err(HeaderError::MethodMismatch),
                "{name}"
            );
        }
        for name in ["Mcp_Name", "MCP_NAME", "mcp-name"] {
            assert_eq!(
                check_with(&[(name, "café".as_bytes())], CALL),
                Ok(()),
                "{name}"
            );
            assert_eq!(
                check_with(&[(name, b"cafe")], CALL),
                Err(HeaderError::NameMismatch("params.name")),
                "{name}"
            );
        }
        // Two spellings are the header given twice, even when both agree with the body.
        assert_eq!(
            check_with(
                &[("Mcp-Method", b"tools/call"), ("Mcp_Method", b"tools/call")],
                CALL
            ),
            Err(HeaderError::Repeated("Mcp-Method"))
        );
        assert_eq!(
            check_with(&[("mcp_name", b"x"), ("Mcp-Name", "café".as_bytes())], CALL),
            Err(HeaderError::Repeated("Mcp-Name"))
        );
        // A spelling on a batch or a response is refused as the standard one is.
        assert_eq!(
            check_with(
                &[("Mcp_Method", b"ping")],
                r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#
            ),
            Err(HeaderError::OnBatch("Mcp-Method"))
        );
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
