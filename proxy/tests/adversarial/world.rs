//! The world an adversarial suite runs in, built from `tests/common`: a live `fenzi_proxy::Proxy` on
//! loopback with one policy (plus a `token: true` server, three bound secrets and their values for
//! `secrets.cases` and `secret_positions.cases`), upstream servers that record every byte they receive (before and after TLS), a
//! fake network that resolves test names (per case, even differently from one lookup to the next) and
//! routes public test addresses to those servers, sending every other dial to a trap that records it
//! too, and the real hash-chained audit log on a temp file, its records counted.

use crate::common::{
    FakeNetwork, FileSink, Handler, TestPki, TestProxy, Upstream, echo_upstream, http_upstream,
    options, policy, respond, serve_proxy, trap_upstream,
};
use bytes::Bytes;
use fenzi_policy::mcp::JsonLimits;
use fenzi_proxy::secrets::SecretSet;
use fenzi_proxy::{Body, Proxy, ProxyOptions};
use http::Response;
use http::request::Parts;
use rustls::pki_types::CertificateDer;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The policy every suite runs against. Names resolve through the world's [`FakeNetwork`]; the addresses are
/// public test addresses that the network routes to loopback servers.
pub const POLICY: &str = r#"version: 1
hosts:
  - web.test
  - web.test:80
  - "*.internal.test"
  - "*.internal.test:80"
  - "10.0.0.5:8080"
  - "93.184.216.60:80"
mcp:
  main:
    url: https://mcp.test/mcp
    tools:
      allow: [echo, "read_*", write_note]
      deny: [delete_everything, read_secret]
      rules:
        - tool: write_note
          args:
            /path: {prefix: "notes/"}
            /tags/*: {one_of: [todo, idea]}
          deny_args:
            /path: {glob: "*..*"}
            /a~1b: {absent: false}
    prompts:
      allow: [summarize]
    resources:
      allow: ["notes://public/*"]
  plain:
    url: http://plain-mcp.test/mcp
    tools:
      allow: [echo]
      deny: [delete_everything]
  byip:
    url: https://93.184.216.50/mcp
    tools:
      allow: [echo]
  claude:
    account: claude
    tools:
      allow: [echo]
  paths-full:
    url: https://paths.test/mcp
    tools:
      allow: ["*"]
      deny: [delete_everything]
  paths-readonly:
    url: https://paths.test/mcp/readonly
    tools:
      allow: [echo]
"#;

/// What the secrets files add to [`POLICY`]: a `token: true` MCP server, two more on one host at
/// two paths, and three secrets bound to their own hosts (one allowed in bodies, one only in the
/// query parameter `key`). Only those
/// files' world has secrets.
pub const SECRETS_POLICY: &str = r#"  tracker:
    url: https://tracker.test/mcp
    token: true
    tools:
      allow: [echo]
  tokens-full:
    url: https://tokens.test/mcp
    token: true
    tools:
      allow: ["*"]
  tokens-readonly:
    url: https://tokens.test/mcp/readonly
    token: true
    tools:
      allow: [echo]
secrets:
  API_KEY:
    hosts: [api.test]
  BODY_KEY:
    hosts: [body.test]
    body: true
  QUERY_KEY:
    hosts: [query.test]
    in: [query:key]
"#;

/// The case files whose world has secrets.
pub const SECRETS_FILES: [&str; 2] = ["secrets.cases", "secret_positions.cases"];

/// The secrets of that world: name, placeholder, value. The placeholders are fixed (through
/// `SecretSet::insert_with_placeholder`) so that case files can spell them every way an attacker
/// would; case files write `${PH:NAME}` and `${VALUE:NAME}`.
pub const SECRETS: [(&str, &str, &str); 6] = [
    (
        "API_KEY",
        "fenzi_ph_Adv3rsarialApiKeyPlaceholder-0123456_xyz",
        "sk-adv-API-0123456789abcdef",
    ),
    (
        "BODY_KEY",
        "fenzi_ph_Adv3rsarialBodyKeyPlaceholder-012345_xyz",
        "bk-adv-BODY-0123456789",
    ),
    (
        "MCP_TRACKER",
        "fenzi_ph_Adv3rsarialTrackerPlaceholder-012345_xyz",
        "trk-adv-0123456789abcdef",
    ),
    (
        "QUERY_KEY",
        "fenzi_ph_Adv3rsarialQueryKeyPlaceholder-01234_xyz",
        "qk-adv-0123456789abcdef",
    ),
    (
        "MCP_TOKENS_FULL",
        "fenzi_ph_Adv3rsarialTokensFullPlaceholder-0123_xyz",
        "tf-adv-0123456789abcdef",
    ),
    (
        "MCP_TOKENS_READONLY",
        "fenzi_ph_Adv3rsarialTokensRoPlaceholder-012345_xyz",
        "tr-adv-0123456789abcdef",
    ),
];

/// Inspected bodies are limited to this many bytes in the suites (small, so cases stay small).
pub const MAX_BYTES: usize = 64 * 1024;

// ---------------------------------------------------------------------------------------------
// How the HTTP upstreams answer

/// What a real MCP server sends back: a JSON-RPC result echoing each request's id (an array for a
/// batch), `202` with no body when the request carried no requests (notifications, client
/// responses); GET is a short event stream of one notification, DELETE an empty `200`. It is its
/// own authorization server ([`sign_in_answer`]) at `scheme://` its Host.
///
/// A hostile server, when the request says `X-Answer: request` (or `sse-request`): a POST without
/// requests is answered `200` with a JSON body (or an event stream) carrying a JSON-RPC request of
/// the server's own, where no client waits for one.
fn mcp_answers(scheme: &'static str) -> Handler {
    Arc::new(move |parts: Parts, body: Bytes| {
        if let Some(answer) = sign_in_answer(scheme, &parts) {
            return answer;
        }
        let method = &parts.method;
        if method == http::Method::GET {
            return respond(
                200,
                "text/event-stream",
                "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n",
            );
        }
        if method != http::Method::POST {
            return respond(200, "application/json", "");
        }
        let result = |v: &serde_json::Value| {
            let id = v.get("id").filter(|_| v.get("method").is_some())?;
            Some(serde_json::json!({"jsonrpc": "2.0", "id": id,
                "result": {"content": [{"type": "text", "text": "upstream says hi"}]}}))
        };
        let out = match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(serde_json::Value::Array(items)) => {
                let results: Vec<_> = items.iter().filter_map(result).collect();
                (!results.is_empty()).then_some(serde_json::Value::Array(results))
            }
            Ok(one) => result(&one),
            Err(_) => None,
        };
        let Some(out) = out else {
            let smuggled = "{\"jsonrpc\":\"2.0\",\"id\":\"srv-1\",\"method\":\"sampling/createMessage\",\"params\":{\"messages\":[],\"maxTokens\":1}}";
            return match parts.headers.get("x-answer").map(|v| v.as_bytes()) {
                Some(b"request") => respond(200, "application/json", smuggled),
                Some(b"sse-request") => respond(
                    200,
                    "text/event-stream",
                    format!("event: message\ndata: {smuggled}\n\n"),
                ),
                _ => respond(202, "application/json", ""),
            };
        };
        respond(200, "application/json", out.to_string())
    })
}

/// The sign-in side of the `mcp` upstream (`oauth.cases`), at `base` = `scheme://` its Host:
/// protected-resource metadata at every well-known form and at `/custom/prm.json`, naming itself as
/// authorization server; authorization-server metadata naming `/oauth/{authorize,token,register,
/// revoke}`; those endpoints; and hostile variants under `/.well-known/oauth-authorization-server/`
/// (`malformed`: a duplicate member, `oversized`: past fenzi's limit, `foreign`: endpoints on other
/// origins, `elsewhere`: a document for another host) and `.../oauth-protected-resource/foreign`
/// (an authorization server on a host the policy does not name). A `POST /mcp` with
/// `X-Test-Challenge: named` or `foreign` is answered `401` naming protected-resource metadata
/// here or on another host.
fn sign_in_answer(scheme: &str, parts: &Parts) -> Option<Response<Body>> {
    let host = parts.headers.get("host")?.to_str().ok()?;
    let base = format!("{scheme}://{host}");
    let json = |v: serde_json::Value| respond(200, "application/json", v.to_string());
    let server_metadata = |at: &str| {
        json(serde_json::json!({"issuer": base,
            "authorization_endpoint": format!("{at}/oauth/authorize"),
            "token_endpoint": format!("{at}/oauth/token"),
            "registration_endpoint": format!("{at}/oauth/register"),
            "revocation_endpoint": format!("{at}/oauth/revoke"),
            "response_types_supported": ["code"]}))
    };
    let path = parts.uri.path();
    let get = parts.method == http::Method::GET;
    if scheme == "http" {
        return march_2025_answer(parts, get, path);
    }
    let answer = match (get, path) {
        (false, "/mcp") => {
            let named = match parts.headers.get("x-test-challenge")?.as_bytes() {
                b"named" => format!("{base}/custom/prm.json"),
                _ => "https://elsewhere.test/custom/prm.json".to_string(),
            };
            let mut answer = respond(401, "application/json", r#"{"error":"invalid_token"}"#);
            let challenge = format!(r#"Bearer error="invalid_token", resource_metadata="{named}""#);
            answer
                .headers_mut()
                .insert("www-authenticate", challenge.parse().unwrap());
            answer
        }
        (true, "/.well-known/oauth-protected-resource/foreign") => json(serde_json::json!({
            "resource": format!("{base}/mcp"),
            "authorization_servers": ["https://auth.elsewhere.test"]})),
        (true, "/.well-known/oauth-authorization-server/malformed") => respond(
            200,
            "application/json",
            format!(
                r#"{{"issuer":"{base}","token_endpoint":"{base}/bad/token","token_endpoint":"{base}/bad/token"}}"#
            ),
        ),
        (true, "/.well-known/oauth-authorization-server/oversized") => json(serde_json::json!({
            "issuer": base, "token_endpoint": format!("{base}/big/token"),
            "op_policy_uri": "x".repeat(70 * 1024)})),
        (true, "/.well-known/oauth-authorization-server/foreign") => json(serde_json::json!({
            "issuer": base,
            "token_endpoint": "https://auth.elsewhere.test/foreign/token",
            "registration_endpoint": format!("{base}:8443/foreign/register")})),
        (true, "/.well-known/oauth-authorization-server/encoded") => {
            let mut answer = server_metadata(&base);
            answer.headers_mut().insert(
                http::header::CONTENT_ENCODING,
                http::HeaderValue::from_static("gzip"),
            );
            answer
        }
        (true, "/.well-known/oauth-authorization-server/html") => respond(
            200,
            "text/html",
            format!(r#"<html>{{"token_endpoint":"{base}/html/token"}}</html>"#),
        ),
        (true, "/.well-known/oauth-authorization-server/elsewhere") => {
            server_metadata("https://auth.elsewhere.test")
        }
        (true, p) if p.contains("oauth-protected-resource") || p == "/custom/prm.json" => {
            json(serde_json::json!({"resource": format!("{base}/mcp"),
                "authorization_servers": [base]}))
        }
        (true, p)
            if p.contains("oauth-authorization-server") || p.contains("openid-configuration") =>
        {
            server_metadata(&base)
        }
        (true, "/oauth/authorize") => Response::builder()
            .status(302)
            .header("location", "http://127.0.0.1:9/callback?code=c0de&state=s")
            .body(crate::common::full_body(""))
            .unwrap(),
        (false, "/oauth/token") => {
            json(serde_json::json!({"access_token": "t0ken", "token_type": "Bearer"}))
        }
        (false, "/oauth/register") => json(serde_json::json!({"client_id": "c1"})),
        (false, "/oauth/revoke") => json(serde_json::json!({})),
        _ => return None,
    };
    Some(answer)
}

/// The sign-in side of the `plainmcp` upstream: a 2025-03-26 server that publishes no metadata
/// (`404` at every well-known form), challenges with a bare `Bearer` on `POST /mcp` with
/// `X-Test-Challenge`, and serves the default endpoints `/authorize`, `/token` and `/register`.
fn march_2025_answer(parts: &Parts, get: bool, path: &str) -> Option<Response<Body>> {
    let json = |v: serde_json::Value| respond(200, "application/json", v.to_string());
    let answer = match (get, path) {
        (false, "/mcp") => {
            parts.headers.get("x-test-challenge")?;
            let mut answer = respond(401, "application/json", r#"{"error":"invalid_token"}"#);
            answer
                .headers_mut()
                .insert("www-authenticate", http::HeaderValue::from_static("Bearer"));
            answer
        }
        (true, p) if p.starts_with("/.well-known/") => respond(404, "text/plain", "not found"),
        (true, "/authorize") => Response::builder()
            .status(302)
            .header("location", "http://127.0.0.1:9/callback?code=c0de&state=s")
            .body(crate::common::full_body(""))
            .unwrap(),
        (false, "/token") => {
            json(serde_json::json!({"access_token": "t0ken", "token_type": "Bearer"}))
        }
        (false, "/register") => json(serde_json::json!({"client_id": "c1"})),
        _ => return None,
    };
    Some(answer)
}

/// `200 web` for everything.
fn web_answer() -> Handler {
    Arc::new(|_, _| respond(200, "text/plain", "web"))
}

/// `200` with the request as it arrived (request line, headers, body) as text, so a value the proxy
/// wrote into it comes back; `/gzip` answers the same with `Content-Encoding: gzip`.
fn echo_request() -> Handler {
    Arc::new(|parts: Parts, body: Bytes| -> Response<Body> {
        let mut text = format!("{} {}\n", parts.method, parts.uri).into_bytes();
        for (name, value) in &parts.headers {
            text.extend_from_slice(format!("{name}: ").as_bytes());
            text.extend_from_slice(value.as_bytes());
            text.push(b'\n');
        }
        text.push(b'\n');
        text.extend_from_slice(&body);
        let mcp_path = matches!(parts.uri.path(), "/mcp" | "/mcp/readonly");
        if mcp_path && parts.method == http::Method::POST {
            // An MCP server's answer must be JSON-RPC: the echo travels as the call's text.
            let id = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("id").cloned())
                .unwrap_or(serde_json::Value::from(0));
            let text = String::from_utf8_lossy(&text).into_owned();
            let out = serde_json::json!({"jsonrpc": "2.0", "id": id,
                "result": {"content": [{"type": "text", "text": text}]}});
            return respond(200, "application/json", out.to_string());
        }
        let mut response = respond(200, "text/plain", text);
        if parts.uri.path() == "/gzip" {
            response.headers_mut().insert(
                http::header::CONTENT_ENCODING,
                http::HeaderValue::from_static("gzip"),
            );
        }
        response
    })
}

// ---------------------------------------------------------------------------------------------
// The world

pub struct World {
    pub proxy: TestProxy<FileSink>,
    pub network: Arc<FakeNetwork>,
    /// Whether this world's proxy has [`SECRETS`].
    pub secrets: bool,
    /// Upstreams by the names case files use: `mcp`, `plainmcp`, `web`, `echo`, `trap`, and the
    /// echoing `api`, `body`, `tracker`, `query` and `tokens` that only the secrets files reach.
    pub upstreams: BTreeMap<&'static str, Upstream>,
}

impl World {
    /// The world for case file `file`: [`POLICY`] for every file, plus [`SECRETS_POLICY`] and the
    /// [`SECRETS`] for [`SECRETS_FILES`].
    pub async fn start(file: &str) -> World {
        let with_secrets = SECRETS_FILES.contains(&file);
        let pki = TestPki::new();
        let mcp_tls = pki.server_config(&[
            "mcp.test",
            "93.184.216.50",
            "mcp-proxy.anthropic.com",
            "paths.test",
        ]);
        let mcp = http_upstream(Some(mcp_tls), mcp_answers("https")).await;
        let secret_tls = pki.server_config(&[
            "api.test",
            "body.test",
            "tracker.test",
            "query.test",
            "tokens.test",
        ]);
        let api = http_upstream(Some(secret_tls.clone()), echo_request()).await;
        let body = http_upstream(Some(secret_tls.clone()), echo_request()).await;
        let tracker = http_upstream(Some(secret_tls.clone()), echo_request()).await;
        let tokens = http_upstream(Some(secret_tls.clone()), echo_request()).await;
        let query = http_upstream(Some(secret_tls), echo_request()).await;
        let plainmcp = http_upstream(None, mcp_answers("http")).await;
        let web = http_upstream(None, web_answer()).await;
        let echo = echo_upstream().await;
        let trap = trap_upstream().await;
        // A port nothing listens on: dials to 93.184.216.99 are refused.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };

        let names = [
            ("mcp.test", "93.184.216.10"),
            ("mcp-proxy.anthropic.com", "93.184.216.11"),
            ("paths.test", "93.184.216.12"),
            ("plain-mcp.test", "93.184.216.20"),
            ("web.test", "93.184.216.30"),
            ("api.test", "93.184.216.70"),
            ("body.test", "93.184.216.71"),
            ("tracker.test", "93.184.216.72"),
            ("query.test", "93.184.216.73"),
            ("tokens.test", "93.184.216.74"),
        ];
        let routes: [(&str, SocketAddr); 21] = [
            ("93.184.216.10:443", mcp.addr),
            ("93.184.216.11:443", mcp.addr),
            ("93.184.216.12:443", mcp.addr),
            ("93.184.216.50:443", mcp.addr),
            ("93.184.216.20:80", plainmcp.addr),
            ("93.184.216.30:80", web.addr),
            ("93.184.216.30:443", echo.addr),
            ("93.184.216.31:80", web.addr),
            ("93.184.216.31:443", echo.addr),
            ("[2606:2800:220:1::31]:80", web.addr),
            ("[2606:2800:220:1::31]:443", echo.addr),
            ("[64:ff9b::5db8:d81f]:443", echo.addr),
            ("10.0.0.5:8080", web.addr),
            ("93.184.216.60:80", web.addr),
            ("93.184.216.99:443", closed),
            ("93.184.216.99:80", closed),
            ("93.184.216.70:443", api.addr),
            ("93.184.216.71:443", body.addr),
            ("93.184.216.72:443", tracker.addr),
            ("93.184.216.73:443", query.addr),
            ("93.184.216.74:443", tokens.addr),
        ];
        let network = FakeNetwork::default().fallback(trap.addr);
        let network = names
            .into_iter()
            .fold(network, |net, (name, ip)| net.name(name, &[ip]));
        let network = routes
            .into_iter()
            .fold(network, |net, (from, to)| net.route(from, to));
        let network = Arc::new(network);

        let sink = Arc::new(FileSink::temp("adversarial"));
        let text = if with_secrets {
            format!("{POLICY}{SECRETS_POLICY}")
        } else {
            POLICY.to_string()
        };
        let limits = JsonLimits {
            max_bytes: MAX_BYTES,
            ..JsonLimits::default()
        };
        let policy = policy(&text, Some(limits));
        let secs = Duration::from_secs;
        let options = ProxyOptions {
            header_read_timeout: secs(2),
            idle_timeout: secs(3),
            resolve_timeout: secs(2),
            connect_timeout: secs(2),
            tls_handshake_timeout: secs(2),
            response_header_timeout: secs(3),
            body_read_timeout: secs(2),
            drain_timeout: secs(2),
            ..options(&pki)
        };
        let mut set = SecretSet::new();
        if with_secrets {
            for (name, placeholder, value) in SECRETS {
                set.insert_with_placeholder(name, placeholder, value.as_bytes().to_vec())
                    .unwrap();
            }
        }
        let proxy = Proxy::builder(policy, sink.clone())
            .options(options)
            .network(network.clone())
            .secrets(set)
            .build()
            .unwrap();
        let proxy = serve_proxy(proxy, sink).await;

        let upstreams = BTreeMap::from([
            ("mcp", mcp),
            ("plainmcp", plainmcp),
            ("web", web),
            ("echo", echo),
            ("trap", trap),
            ("api", api),
            ("body", body),
            ("tracker", tracker),
            ("query", query),
            ("tokens", tokens),
        ]);
        World {
            proxy,
            network,
            secrets: with_secrets,
            upstreams,
        }
    }

    pub fn proxy_addr(&self) -> SocketAddr {
        self.proxy.addr
    }

    /// The session CA the proxy mints leaves with.
    pub fn proxy_ca(&self) -> CertificateDer<'static> {
        self.proxy.proxy.ca().cert_der().clone()
    }

    /// The audit log file.
    pub fn log(&self) -> &Path {
        self.proxy.sink.path()
    }

    /// How many audit records were acknowledged.
    pub fn records(&self) -> usize {
        self.proxy.sink.records()
    }

    /// Stops accepting and flushes the log (head file written).
    pub async fn finish(&mut self) {
        self.proxy.shutdown();
        self.proxy.proxy.flush_audit().await.unwrap();
    }
}
