//! Runs every case file under `testdata/mcp/` (format: `testdata/mcp/README.md`) through
//! `mcp::classify` and `mcp::denial_body`, and reports every failing case by file:line and name.

use fenzi_policy::decision::{Reason, Verdict};
use fenzi_policy::mcp::inventory::Inventory;
use fenzi_policy::mcp::legacy::Authority;
use fenzi_policy::mcp::{
    EndpointPath, JsonLimits, McpDecision, MessageKind, RequestView, RpcId, ServerRule, classify,
    denial_body,
};
use fenzi_policy::tool_pattern::ToolPattern;
use fenzi_policy::uri_pattern::UriPattern;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn case_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/mcp")
}

/// One case as written in a file.
#[derive(Default)]
struct Case {
    file: String,
    line: usize,
    name: String,
    server: Option<ServerRule>,
    method: String,
    path: String,
    headers: Vec<(String, Vec<u8>)>,
    /// `endpoint` events the server sent this session, on a stream for `/sse` of `mcp.test:443`.
    announced: Vec<String>,
    /// What the server said about signing in this session (`mcp/oauth.rs`), on `https://mcp.test`:
    /// `challenge:` a `WWW-Authenticate` value, `resource-metadata:` and `server-metadata:`
    /// documents, `metadata-status: CODE PATH` a GET's answer. What cannot be learned is ignored:
    /// the decision shows it.
    sign_in: Vec<(String, String)>,
    no_content_type: bool,
    body: Vec<u8>,
    expect: Option<Verdict>,
    rule: Option<String>,
    message_contains: Vec<String>,
    batch: Option<bool>,
    message_count: Option<usize>,
    messages: Vec<(usize, MessageExpect)>,
    denial_body: Option<String>,
    denial_contains: Vec<String>,
}

#[derive(Default)]
struct MessageExpect {
    verdict: Option<Verdict>,
    kind: Option<Option<MessageKind>>,
    method: Option<Option<String>>,
    tool: Option<Option<String>>,
    prompt: Option<Option<String>>,
    resource: Option<Option<String>>,
    id: Option<Option<RpcId>>,
    rule: Option<String>,
}

fn verdict(text: &str) -> Result<Verdict, String> {
    let mut words = text.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("allowed"), None, None) => Ok(Verdict::Allowed),
        (Some("denied"), Some(code), None) => Reason::from_code(code)
            .map(Verdict::Denied)
            .ok_or(format!("unknown reason {code:?}")),
        _ => Err(format!(
            "expected `allowed` or `denied <reason>`, got {text:?}"
        )),
    }
}

/// `{{N*TEXT}}` → TEXT repeated N times.
fn expand(text: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or("unclosed {{")?;
        let (count, what) = after[..end].split_once('*').ok_or("expected {{N*TEXT}}")?;
        let count: usize = count.parse().map_err(|_| format!("bad count {count:?}"))?;
        out.push_str(&what.repeat(count));
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

fn hex(text: &str) -> Result<Vec<u8>, String> {
    let digits: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    hex::decode(&digits).map_err(|e| format!("bad hex: {e}"))
}

/// A value in `key=value`: a JSON string literal, or a bare word.
fn string_value(v: &str) -> Result<String, String> {
    if v.starts_with('"') {
        serde_json::from_str(v).map_err(|e| format!("bad string {v:?}: {e}"))
    } else {
        Ok(v.to_owned())
    }
}

/// Splits `a=1 b="x y" c` into tokens, keeping JSON string literals whole.
fn tokens(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut token = String::new();
        let mut in_string = false;
        let mut escaped = false;
        while let Some(&c) = chars.peek() {
            if !in_string && c.is_whitespace() {
                break;
            }
            chars.next();
            token.push(c);
            if in_string {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == '"' {
                    in_string = false;
                }
            } else if c == '"' {
                in_string = true;
            }
        }
        if in_string {
            return Err(format!("unterminated string in {text:?}"));
        }
        out.push(token);
    }
    Ok(out)
}

fn rpc_id(v: &str) -> Result<Option<RpcId>, String> {
    Ok(match v {
        "none" => None,
        "null" => Some(RpcId::Null),
        v if v.starts_with('"') => Some(RpcId::String(string_value(v)?)),
        v => Some(RpcId::Number(v.to_owned())),
    })
}

fn optional(v: &str) -> Result<Option<String>, String> {
    if v == "none" {
        Ok(None)
    } else {
        string_value(v).map(Some)
    }
}

fn message_expect(text: &str) -> Result<(usize, MessageExpect), String> {
    let toks = tokens(text)?;
    let mut it = toks.iter();
    let index: usize = it
        .next()
        .ok_or("msg needs an index")?
        .parse()
        .map_err(|_| "msg index must be a number")?;
    let mut m = MessageExpect::default();
    let mut pending_denied = false;
    for tok in it {
        if pending_denied {
            m.verdict = Some(verdict(&format!("denied {tok}"))?);
            pending_denied = false;
            continue;
        }
        match tok.split_once('=') {
            None if tok == "allowed" => m.verdict = Some(Verdict::Allowed),
            None if tok == "denied" => pending_denied = true,
            Some(("kind", k)) => {
                m.kind = Some(match k {
                    "request" => Some(MessageKind::Request),
                    "notification" => Some(MessageKind::Notification),
                    "response" => Some(MessageKind::Response),
                    "none" => None,
                    _ => return Err(format!("unknown kind {k:?}")),
                })
            }
            Some(("method", v)) => m.method = Some(optional(v)?),
            Some(("tool", v)) => m.tool = Some(optional(v)?),
            Some(("prompt", v)) => m.prompt = Some(optional(v)?),
            Some(("resource", v)) => m.resource = Some(optional(v)?),
            Some(("id", v)) => m.id = Some(rpc_id(v)?),
            Some(("rule", v)) => m.rule = Some(string_value(v)?),
            _ => return Err(format!("unknown msg field {tok:?}")),
        }
    }
    if pending_denied {
        return Err("`denied` needs a reason".into());
    }
    Ok((index, m))
}

fn server_line(text: &str) -> Result<ServerRule, String> {
    let toks = tokens(text)?;
    let mut it = toks.iter();
    let name = it.next().ok_or("server needs a name")?.clone();
    let mut server = ServerRule::with_tools(
        &name,
        EndpointPath::Exact("/mcp".into()),
        Vec::new(),
        Vec::new(),
        JsonLimits::default(),
    );
    let patterns = |list: &str| -> Result<Vec<ToolPattern>, String> {
        list.split(',')
            .filter(|p| !p.is_empty())
            .map(|p| ToolPattern::parse(p).map_err(|e| e.to_string()))
            .collect()
    };
    for tok in it {
        match tok.split_once('=') {
            Some(("endpoint", v)) => server.endpoint = EndpointPath::Exact(v.into()),
            Some(("prefix", v)) => server.endpoint = EndpointPath::Prefix(v.into()),
            Some(("allow", v)) => server.allow = patterns(v)?,
            Some(("deny", v)) => server.deny = patterns(v)?,
            Some(("prompts", v)) => server.prompts = patterns(v)?,
            Some(("resources", v)) => {
                server.resources = v
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(|p| UriPattern::parse(p).map_err(|e| e.to_string()))
                    .collect::<Result<_, _>>()?
            }
            Some(("max_bytes", v)) => {
                server.limits.max_bytes = v.parse().map_err(|_| "bad max_bytes")?
            }
            Some(("max_depth", v)) => {
                server.limits.max_depth = v.parse().map_err(|_| "bad max_depth")?
            }
            _ => return Err(format!("unknown server field {tok:?}")),
        }
    }
    Ok(server)
}

fn parse_file(path: &Path) -> Result<Vec<Case>, String> {
    let file = path.file_name().unwrap().to_string_lossy().into_owned();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{file}: {e}"))?;
    let mut cases: Vec<Case> = Vec::new();
    let mut server: Option<ServerRule> = None;
    for (n, raw) in text.lines().enumerate() {
        let line = n + 1;
        let at = |e: String| format!("{file}:{line}: {e}");
        let trimmed = raw.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let (key, value) = match raw.split_once(':') {
            Some((k, v)) if !k.contains(' ') || k.starts_with("msg ") => {
                (k.trim(), v.strip_prefix(' ').unwrap_or(v))
            }
            _ => (raw.trim(), ""),
        };
        if let Some(rest) = raw.strip_prefix("server ") {
            server = Some(server_line(rest).map_err(at)?);
            continue;
        }
        if key == "case" {
            cases.push(Case {
                file: file.clone(),
                line,
                name: value.to_owned(),
                server: server.clone(),
                ..Case::default()
            });
            continue;
        }
        let case = cases
            .last_mut()
            .ok_or_else(|| at("a case line before any `case:`".into()))?;
        match key {
            "request" => {
                let (method, path) = value
                    .split_once(' ')
                    .ok_or_else(|| at("request: METHOD TARGET".into()))?;
                case.method = method.to_owned();
                case.path = path.to_owned();
            }
            "header" => {
                let (name, v) = value
                    .split_once(':')
                    .ok_or_else(|| at("header: Name: value".into()))?;
                let v = v.strip_prefix(' ').unwrap_or(v);
                case.headers
                    .push((name.to_owned(), expand(v).map_err(at)?.into_bytes()));
            }
            "header-hex" => {
                let (name, v) = value
                    .split_once(':')
                    .ok_or_else(|| at("header-hex: Name: hex".into()))?;
                case.headers.push((name.to_owned(), hex(v).map_err(at)?));
            }
            "announced" => case.announced.push(value.to_owned()),
            "challenge" | "resource-metadata" | "server-metadata" | "metadata-status" => {
                case.sign_in.push((key.to_owned(), value.to_owned()))
            }
            "no-content-type" => case.no_content_type = true,
            "body" => case.body.extend(expand(value).map_err(at)?.into_bytes()),
            "body-raw" => case.body.extend(value.as_bytes()),
            "body-hex" => case.body.extend(hex(value).map_err(at)?),
            "body-utf16le" => case.body.extend(
                expand(value)
                    .map_err(at)?
                    .encode_utf16()
                    .flat_map(u16::to_le_bytes),
            ),
            "body-utf16be" => case.body.extend(
                expand(value)
                    .map_err(at)?
                    .encode_utf16()
                    .flat_map(u16::to_be_bytes),
            ),
            "body-utf32be" => case.body.extend(
                expand(value)
                    .map_err(at)?
                    .chars()
                    .flat_map(|c| u32::from(c).to_be_bytes()),
            ),
            "expect" => case.expect = Some(verdict(value).map_err(at)?),
            "rule" => case.rule = Some(value.to_owned()),
            "message-contains" => case.message_contains.push(value.to_owned()),
            "batch" => {
                case.batch = Some(match value {
                    "true" => true,
                    "false" => false,
                    _ => return Err(at("batch: true|false".into())),
                })
            }
            "messages" => {
                case.message_count = Some(value.parse().map_err(|_| at("messages: N".into()))?)
            }
            k if k.starts_with("msg ") => {
                let index_and_rest = format!("{} {value}", &k[4..]);
                case.messages
                    .push(message_expect(&index_and_rest).map_err(at)?);
            }
            "denial-body" => case.denial_body = Some(value.to_owned()),
            "denial-contains" => case.denial_contains.push(expand(value).map_err(at)?),
            other => return Err(at(format!("unknown key {other:?}"))),
        }
    }
    Ok(cases)
}

/// Every way `decision` differs from what `case` expects.
fn check(case: &Case, decision: &McpDecision, denial: &[u8]) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(expected) = case.expect {
        if decision.overall.verdict != expected {
            problems.push(format!(
                "expected {}, got {} (rule {:?}, message {:?})",
                show_verdict(expected),
                show_verdict(decision.overall.verdict),
                decision.overall.rule,
                decision.overall.message
            ));
        }
    } else {
        problems.push("case has no `expect:`".into());
    }
    if let Some(rule) = &case.rule
        && &decision.overall.rule != rule
    {
        problems.push(format!(
            "rule: expected {rule:?}, got {:?}",
            decision.overall.rule
        ));
    }
    for needle in &case.message_contains {
        if !decision.overall.message.contains(needle.as_str()) {
            problems.push(format!(
                "message {:?} does not contain {needle:?}",
                decision.overall.message
            ));
        }
    }
    if let Some(batch) = case.batch
        && decision.batch != batch
    {
        problems.push(format!("batch: expected {batch}, got {}", decision.batch));
    }
    if let Some(count) = case.message_count
        && decision.messages.len() != count
    {
        problems.push(format!(
            "messages: expected {count}, got {}",
            decision.messages.len()
        ));
    }
    for (index, expect) in &case.messages {
        let Some(got) = index.checked_sub(1).and_then(|i| decision.messages.get(i)) else {
            problems.push(format!(
                "msg {index}: no such message (got {})",
                decision.messages.len()
            ));
            continue;
        };
        let mut differ = |what: &str, expected: String, actual: String| {
            if expected != actual {
                problems.push(format!(
                    "msg {index} {what}: expected {expected}, got {actual}"
                ));
            }
        };
        if let Some(v) = expect.verdict {
            differ(
                "verdict",
                show_verdict(v),
                show_verdict(got.decision.verdict),
            );
        }
        if let Some(k) = expect.kind {
            differ("kind", format!("{k:?}"), format!("{:?}", got.kind));
        }
        if let Some(m) = &expect.method {
            differ("method", format!("{m:?}"), format!("{:?}", got.rpc_method));
        }
        if let Some(t) = &expect.tool {
            differ("tool", format!("{t:?}"), format!("{:?}", got.tool));
        }
        if let Some(p) = &expect.prompt {
            differ("prompt", format!("{p:?}"), format!("{:?}", got.prompt));
        }
        if let Some(r) = &expect.resource {
            differ("resource", format!("{r:?}"), format!("{:?}", got.resource));
        }
        if let Some(id) = &expect.id {
            differ("id", format!("{id:?}"), format!("{:?}", got.rpc_id));
        }
        if let Some(rule) = &expect.rule {
            differ(
                "rule",
                format!("{rule:?}"),
                format!("{:?}", got.decision.rule),
            );
        }
    }
    let denial_text = String::from_utf8_lossy(denial);
    if let Some(expected) = &case.denial_body
        && denial_text != expected.as_str()
    {
        problems.push(format!(
            "denial body:\n      expected {expected}\n      got      {denial_text}"
        ));
    }
    for needle in &case.denial_contains {
        if !denial_text.contains(needle.as_str()) {
            problems.push(format!(
                "denial body {denial_text} does not contain {needle}"
            ));
        }
    }
    // Every denial body is strict JSON and ASCII, whatever the case checks.
    if !denial.is_empty() {
        if !denial.is_ascii() {
            problems.push("denial body is not ASCII".into());
        }
        if let Err(e) = fenzi_policy::json::parse(denial, &JsonLimits::default()) {
            problems.push(format!("denial body is not strict JSON: {e}"));
        }
    } else if !decision.overall.is_allowed() {
        problems.push("a denial has an empty body".into());
    }
    problems
}

fn show_verdict(v: Verdict) -> String {
    match v {
        Verdict::Allowed => "allowed".into(),
        Verdict::Denied(r) => format!("denied {r}"),
    }
}

#[test]
fn mcp_case_files() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(case_dir())
        .expect("testdata/mcp exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cases"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .cases files in testdata/mcp");
    let mut report = String::new();
    let mut total = 0;
    let mut failed = 0;
    for path in &files {
        let cases = match parse_file(path) {
            Ok(cases) => cases,
            Err(e) => {
                failed += 1;
                writeln!(report, "{e}").unwrap();
                continue;
            }
        };
        for mut case in cases {
            total += 1;
            let Some(server) = case.server.take() else {
                failed += 1;
                writeln!(
                    report,
                    "{}:{}: {}: no server line before the case",
                    case.file, case.line, case.name
                )
                .unwrap();
                continue;
            };
            if case.method == "POST"
                && !case.no_content_type
                && !case
                    .headers
                    .iter()
                    .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
            {
                case.headers
                    .insert(0, ("Content-Type".into(), b"application/json".to_vec()));
            }
            let headers: Vec<(&str, &[u8])> = case
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_slice()))
                .collect();
            let req = RequestView {
                method: &case.method,
                path: &case.path,
                headers: &headers,
                body: &case.body,
            };
            let mut inventory = Inventory::unpinned();
            let authority = Authority {
                host: "mcp.test",
                port: 443,
            };
            let mut problems = Vec::new();
            for data in &case.announced {
                if let Err(e) = inventory.announce_message_path(authority, "/sse", data) {
                    problems.push(format!("announced {data:?} was not recorded: {e}"));
                }
            }
            learn(inventory.sign_in_mut(), &case.sign_in);
            let decision = classify(&server, &inventory, &req);
            let denial = denial_body(&decision, &req);
            problems.extend(check(&case, &decision, &denial));
            if !problems.is_empty() {
                failed += 1;
                writeln!(report, "{}:{}: {}", case.file, case.line, case.name).unwrap();
                for p in problems {
                    writeln!(report, "    {p}").unwrap();
                }
            }
        }
    }
    eprintln!(
        "mcp cases: {total} run, {failed} failed, from {} files",
        files.len()
    );
    assert!(
        failed == 0,
        "{failed} of {total} MCP cases failed:\n{report}"
    );
    assert!(total >= 150, "only {total} MCP cases");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    const SEEDS: [&str; 6] = [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_x","arguments":{"a":[1,"\u00e9"]}}}"#,
        r#"[{"jsonrpc":"2.0","id":"a","method":"tools/list"},{"jsonrpc":"2.0","method":"notifications/initialized"}]"#,
        r#"{"jsonrpc":"2.0","id":2,"result":{"x":null}}"#,
        r#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"m"}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"file:///a"}}"#,
        r#"[]"#,
    ];

    /// A seed body with a few bytes overwritten, inserted or removed.
    fn body() -> impl Strategy<Value = Vec<u8>> {
        (
            proptest::sample::select(SEEDS.to_vec()),
            proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 0..4),
        )
            .prop_map(|(seed, edits)| {
                let mut bytes = seed.as_bytes().to_vec();
                for (at, byte, op) in edits {
                    let at = at % (bytes.len() + 1);
                    match op {
                        0 if at < bytes.len() => bytes[at] = byte,
                        1 => bytes.insert(at, byte),
                        _ if at < bytes.len() => {
                            bytes.remove(at);
                        }
                        _ => {}
                    }
                }
                bytes
            })
    }

    fn header() -> impl Strategy<Value = (String, Vec<u8>)> {
        (
            proptest::sample::select(vec![
                "Content-Type",
                "content-encoding",
                "Transfer-Encoding",
                "Content-Length",
                "Mcp-Method",
                "Mcp-Name",
            ])
            .prop_map(str::to_owned),
            prop_oneof![
                proptest::sample::select(vec![
                    "application/json",
                    "application/json; charset=\"utf-8\"",
                    "identity",
                    "chunked",
                    "0",
                    "tools/call",
                    "get_x",
                    "=?base64?Z2V0X3g=?=",
                ])
                .prop_map(|s| s.as_bytes().to_vec()),
                proptest::collection::vec(any::<u8>(), 0..12),
            ],
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// Whatever the request, classify answers (no panic), a POST gets one decision per
        /// message, and every denial has a strict-JSON ASCII body.
        #[test]
        fn any_request_gets_a_decision_and_a_json_denial(
            method in proptest::sample::select(vec!["POST", "GET", "DELETE", "PUT", "post", ""]),
            path in prop_oneof![
                proptest::sample::select(vec!["/mcp", "/mcp?x=1", "/.well-known/a", "/v1/mcp/x", "*", "/a b"])
                    .prop_map(str::to_owned),
                "[ -~]{0,12}",
            ],
            headers in proptest::collection::vec(header(), 0..4),
            body in body(),
            prefix in any::<bool>(),
        ) {
            let server = ServerRule::with_tools(
                "s",
                if prefix {
                    EndpointPath::Prefix("/v1/mcp/".into())
                } else {
                    EndpointPath::Exact("/mcp".into())
                },
                vec![ToolPattern::parse("get_*").unwrap()],
                vec![ToolPattern::parse("get_secret").unwrap()],
                JsonLimits::default(),
            );
            let headers: Vec<(&str, &[u8])> =
                headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
            let req = RequestView { method, path: &path, headers: &headers, body: &body };
            let decision = classify(&server, &Inventory::unpinned(), &req);
            let denial = denial_body(&decision, &req);
            if decision.overall.is_allowed() {
                prop_assert!(denial.is_empty());
                prop_assert!(decision.messages.iter().all(|m| m.decision.is_allowed()));
            } else {
                prop_assert!(denial.is_ascii());
                prop_assert!(fenzi_policy::json::parse(&denial, &JsonLimits::default()).is_ok());
            }
            if !decision.batch {
                prop_assert!(decision.messages.len() <= 1);
            }
        }
    }
}

/// Teaches `sign_in` what a case's server said (see [`Case::sign_in`]).
fn learn(sign_in: &mut fenzi_policy::mcp::oauth::SignIn, said: &[(String, String)]) {
    use fenzi_policy::mcp::oauth::{self, Origin};
    let origin = Origin {
        tls: true,
        host: "mcp.test",
        port: 443,
    };
    for (key, value) in said {
        match key.as_str() {
            "challenge" => {
                let _ = sign_in.learn_challenge(origin, [value.as_bytes()]);
            }
            "resource-metadata" => {
                if let Ok(doc) = oauth::read_resource_metadata(value.as_bytes()) {
                    let _ = sign_in.learn_resource_metadata(origin, &doc);
                }
            }
            "server-metadata" => {
                if let Ok(doc) = oauth::read_server_metadata(value.as_bytes()) {
                    let _ = sign_in.learn_server_metadata(origin, &doc);
                }
            }
            _ => {
                let (code, path) = value.split_once(' ').expect("metadata-status: CODE PATH");
                sign_in.note_metadata_status(path, code.parse().expect("a status code"));
            }
        }
    }
}
