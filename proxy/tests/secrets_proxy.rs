//! Secrets end to end through a live proxy (README, "Secrets"), with real peers on loopback:
//! echo upstreams over TLS (certificates from a test CA made here) that answer with everything they
//! received, hyper clients that reach them through CONNECT and TLS interception, and the real audit
//! writer on a temp file. Each test proves what reached the upstream byte for byte, what came back
//! to the client, and what the audit log says; and every test ends by checking that neither a value
//! nor a placeholder appears anywhere in the audit log or in the tracing output (captured at TRACE
//! level for the whole test binary).

mod common;

use common::tracing_capture::{capture, captured};

use bytes::Bytes;
use common::{ChannelBody, FakeNetwork, Handler, TestPki, full_body, http_upstream, respond};
use fenzi_policy::audit::{AuditRecord, Outcome};
use fenzi_proxy::audit::writer::AuditWriter;
use fenzi_proxy::secrets::SecretSet;
use fenzi_proxy::{Body, Proxy};
use http::request::Parts;
use http::{HeaderMap, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::{Notify, mpsc, oneshot};

// ---------------------------------------------------------------------------------------------
// The world

const POLICY: &str = r#"version: 1
hosts:
  - plain.test:80
mcp:
  tracker:
    url: https://mcp.test/mcp
    token: true
    tools:
      allow: [echo]
  other:
    url: https://other-mcp.test/mcp
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

/// The real values. `BODY_KEY` needs escaping in JSON and in URLs.
const VALUES: [(&str, &str); 4] = [
    ("API_KEY", "sk-test-API-0123456789abcdef"),
    ("BODY_KEY", "bk \"quoted\" \\ and/slash 0123456789"),
    ("MCP_TRACKER", "trk_live_0123456789abcdefXYZ"),
    ("QUERY_KEY", "qk-test-0123456789abcdef"),
];

fn value(name: &str) -> &'static str {
    VALUES.iter().find(|(n, _)| *n == name).unwrap().1
}

/// Upstream names, their host, address and whether they speak TLS.
const UPSTREAMS: [(&str, &str, &str, bool); 6] = [
    ("api", "api.test", "93.184.216.41:443", true),
    ("body", "body.test", "93.184.216.42:443", true),
    ("mcp", "mcp.test", "93.184.216.43:443", true),
    ("other", "other-mcp.test", "93.184.216.44:443", true),
    ("plain", "plain.test", "93.184.216.45:80", false),
    ("query", "query.test", "93.184.216.46:443", true),
];

struct World {
    addr: SocketAddr,
    proxy: Proxy,
    log: PathBuf,
    ups: BTreeMap<&'static str, common::Upstream>,
    network: Arc<FakeNetwork>,
    /// Secret name → this session's placeholder.
    ph: BTreeMap<&'static str, String>,
    /// The SSE upstream waits for this before sending the event that holds a value.
    sse_go: Arc<Notify>,
    stop: Option<oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl World {
    async fn start() -> World {
        capture();
        let pki = TestPki::new();
        let sse_go = Arc::new(Notify::new());
        let mut ups = BTreeMap::new();
        let mut network = FakeNetwork::default();
        for (name, host, addr, tls) in UPSTREAMS {
            let config = tls.then(|| pki.server_config(&[host]));
            let up = http_upstream(config, echo_handler(sse_go.clone())).await;
            let ip = addr.split(':').next().unwrap();
            network = network.name(host, &[ip]).route(addr, up.addr);
            ups.insert(name, up);
        }
        let network = Arc::new(network);

        let mut set = SecretSet::new();
        for (name, value) in VALUES {
            set.insert(name, value.as_bytes().to_vec()).unwrap();
        }
        let ph = VALUES
            .iter()
            .map(|(n, _)| (*n, set.placeholder(n).unwrap().as_str().to_string()))
            .collect();

        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.jsonl");
        let writer = AuditWriter::open(&log, "secrets-test").unwrap();
        let proxy = Proxy::builder(common::policy(POLICY, None), Arc::new(writer))
            .options(common::options(&pki))
            .network(network.clone())
            .secrets(set)
            .build()
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let serving = proxy.clone();
        tokio::spawn(async move {
            let _ = serving
                .serve(listener, async {
                    let _ = stopped.await;
                })
                .await;
        });
        World {
            addr,
            proxy,
            log,
            ups,
            network,
            ph,
            sse_go,
            stop: Some(stop),
            _dir: dir,
        }
    }

    fn ph(&self, name: &str) -> &str {
        &self.ph[name]
    }

    fn received(&self, upstream: &str) -> String {
        self.ups[upstream].received_text()
    }

    /// Asserts that `upstream` received nothing at all: no connection, no byte.
    fn untouched(&self, upstream: &str) {
        assert_eq!(
            self.ups[upstream].connection_count(),
            0,
            "{upstream} was dialled"
        );
        assert_eq!(self.received(upstream), "", "{upstream} received bytes");
    }

    fn records(&self) -> Vec<AuditRecord> {
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The records of requests (CONNECTs left out).
    fn requests(&self) -> Vec<AuditRecord> {
        self.records()
            .into_iter()
            .filter(|r| !(r.method == "CONNECT" && r.decision == Outcome::Allowed))
            .collect()
    }

    /// Stops the proxy, flushes the log, and checks that no value and no placeholder of this
    /// session is anywhere in the audit log or the tracing output.
    async fn finish(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.proxy.flush_audit().await.unwrap();
        let log = std::fs::read_to_string(&self.log).unwrap();
        let traced = captured();
        for (name, value) in VALUES {
            let ph = self.ph(name);
            for (what, text) in [("the audit log", &log), ("the tracing output", &traced)] {
                for secret in [value, ph, &ph[9..]] {
                    assert!(
                        !text.contains(secret),
                        "{what} holds a value or placeholder of {name}:\n{text}"
                    );
                }
            }
        }
    }
}

/// Answers with everything it received: `{"method","target","headers","body"}`, the request's
/// `authorization` and `x-api-key` echoed as `x-echo-*` response headers. `/sse` streams events,
/// the second one holding API_KEY's value split across two writes, after the client saw the first;
/// `/gzip` answers with an encoded body.
fn echo_handler(sse_go: Arc<Notify>) -> Handler {
    Arc::new(move |parts: Parts, body: Bytes| match parts.uri.path() {
        "/sse" => {
            let (tx, rx) = mpsc::channel::<Bytes>(4);
            let go = sse_go.clone();
            tokio::spawn(async move {
                let _ = tx.send(Bytes::from_static(b"data: first\n\n")).await;
                go.notified().await;
                let event = format!("data: {{\"token\":\"{}\"}}\n\n", value("API_KEY"));
                let cut = event.find("API").unwrap() + 2;
                let _ = tx.send(Bytes::from(event[..cut].to_string())).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = tx.send(Bytes::from(event[cut..].to_string())).await;
                let _ = tx.send(Bytes::from_static(b"data: last\n\n")).await;
            });
            Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .body(ChannelBody(rx).boxed_unsync())
                .unwrap()
        }
        "/gzip" => {
            let mut r = respond(200, "application/json", value("API_KEY"));
            r.headers_mut()
                .insert("content-encoding", "gzip".parse().unwrap());
            r
        }
        _ => {
            // `authorization` is echoed only as a header: a value inside base64 (Basic) is out of
            // the scrubber's reach (see `secrets::scrub`), and this echo is for what it covers.
            let headers: BTreeMap<String, String> = parts
                .headers
                .iter()
                .filter(|(k, _)| *k != "authorization")
                .map(|(k, v)| {
                    (
                        k.as_str().to_string(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect();
            let echo = serde_json::json!({
                "method": parts.method.as_str(),
                "target": parts.uri.to_string(),
                "headers": headers,
                // A JSON body is echoed as JSON (its strings escaped once), anything else as text.
                "body": serde_json::from_slice::<serde_json::Value>(&body)
                    .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned().into()),
            });
            // An MCP server's answer must be JSON-RPC (fenzi reads it): the echo is the result.
            let echo = match parts.uri.path() {
                "/mcp" => serde_json::json!({"jsonrpc": "2.0",
                    "id": serde_json::from_slice::<serde_json::Value>(&body)
                        .ok()
                        .and_then(|v| v.get("id").cloned())
                        .unwrap_or(serde_json::Value::from(0)),
                    "result": {"echo": echo}}),
                _ => echo,
            };
            let mut r = respond(200, "application/json", echo.to_string());
            for name in ["authorization", "x-api-key"] {
                if let Some(v) = parts.headers.get(name) {
                    r.headers_mut().insert(
                        format!("x-echo-{name}")
                            .parse::<http::HeaderName>()
                            .unwrap(),
                        v.clone(),
                    );
                }
            }
            r
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Clients

/// `CONNECT host:443`, TLS with the proxy (trusting only its session CA), HTTP/1.1.
async fn tunnel(w: &World, host: &str) -> SendRequest<Body> {
    let (stream, status, _) = common::connect(w.addr, &format!("{host}:443")).await;
    assert_eq!(status, 200, "CONNECT {host}");
    let tls = common::tls_over(stream, w.proxy.ca().cert_der(), host, &[b"http/1.1"])
        .await
        .unwrap();
    h1(tls).await
}

/// An HTTP/1.1 client straight to the proxy (absolute-form requests).
async fn direct(w: &World) -> SendRequest<Body> {
    h1(TcpStream::connect(w.addr).await.unwrap()).await
}

async fn h1<T>(io: T) -> SendRequest<Body>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

fn request(
    method: &str,
    uri: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: Body,
) -> Request<Body> {
    let mut b = Request::builder()
        .method(method)
        .uri(uri)
        .header("host", host);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(body).unwrap()
}

/// A body sent as separate chunks, with a pause between them (so the proxy reads them apart).
fn chunked(parts: Vec<Vec<u8>>) -> Body {
    let (tx, rx) = mpsc::channel::<Bytes>(parts.len().max(1));
    tokio::spawn(async move {
        for part in parts {
            let _ = tx.send(Bytes::from(part)).await;
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    });
    ChannelBody(rx).boxed_unsync()
}

struct Answer {
    status: u16,
    headers: HeaderMap,
    body: String,
}

async fn send(sender: &mut SendRequest<Body>, req: Request<Body>) -> Answer {
    sender.ready().await.unwrap();
    let response = sender.send_request(req).await.unwrap();
    answer(response).await
}

async fn answer(response: Response<Incoming>) -> Answer {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Base64 as `Basic` credentials are written.
fn basic(user_pass: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = user_pass.as_bytes();
    let mut out = String::from("Basic ");
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |acc, &b| (acc << 8) | b as u32) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn decode_basic(header: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let payload = header.strip_prefix("Basic ").unwrap().trim_end_matches('=');
    let mut bits = 0u32;
    let mut nbits = 0;
    let mut out = Vec::new();
    for c in payload.bytes() {
        bits = (bits << 6) | ALPHABET.iter().position(|&a| a == c).unwrap() as u32;
        nbits += 6;
        if nbits >= 8 {
            nbits -= 8;
            out.push((bits >> nbits) as u8);
            bits &= (1 << nbits) - 1;
        }
    }
    String::from_utf8(out).unwrap()
}

fn percent(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The one request record written since `before` records, checked for outcome, reason and secrets.
fn one_record(
    w: &World,
    before: usize,
    decision: Outcome,
    reason: Option<&str>,
    secrets: &[&str],
) -> AuditRecord {
    let records = w.requests();
    assert_eq!(records.len(), before + 1, "records: {records:#?}");
    let r = records.last().unwrap().clone();
    assert_eq!(r.decision, decision, "{r:?}");
    assert_eq!(r.reason.as_deref(), reason, "{r:?}");
    assert_eq!(r.secrets, secrets, "{r:?}");
    r
}

// ---------------------------------------------------------------------------------------------
// The bound host gets the real value

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bound_host_receives_the_value_in_headers_basic_auth_and_query() {
    let w = World::start().await;
    let (ph, val) = (w.ph("API_KEY").to_string(), value("API_KEY"));
    let mut c = tunnel(&w, "api.test").await;
    let auth = basic(&format!("agent:{ph}"));
    let a = send(
        &mut c,
        request(
            "GET",
            &format!("/v1/models?key={ph}&limit=2"),
            "api.test",
            &[("x-api-key", &ph), ("authorization", &auth)],
            full_body(""),
        ),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let got = w.received("api");
    assert!(got.contains(&format!("x-api-key: {val}\r\n")), "{got}");
    assert!(
        got.contains(&format!("GET /v1/models?key={val}&limit=2 HTTP/1.1")),
        "{got}"
    );
    assert!(
        !got.contains(&ph),
        "the upstream got the placeholder: {got}"
    );
    let sent_auth = got
        .lines()
        .find_map(|l| l.strip_prefix("authorization: "))
        .unwrap();
    assert_eq!(decode_basic(sent_auth), format!("agent:{val}"));
    let echoed = json(&a.body);
    // The bound host's echo comes back scrubbed: the client sees only its placeholder.
    assert!(!a.body.contains(val), "{}", a.body);
    assert_eq!(echoed["headers"]["x-api-key"], ph.as_str());
    assert_eq!(a.headers["x-echo-x-api-key"], ph.as_str());
    assert_eq!(echoed["target"], format!("/v1/models?key={ph}&limit=2"));
    let r = one_record(&w, 0, Outcome::Allowed, None, &["API_KEY"]);
    assert_eq!(r.path.as_deref(), Some("/v1/models"));
    w.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_get_the_value_only_where_the_secret_says_body_true() {
    let w = World::start().await;
    // API_KEY has no `body: true`: its placeholder in a body to its own host goes as it is.
    let api = w.ph("API_KEY").to_string();
    let mut c = tunnel(&w, "api.test").await;
    let body = format!("{{\"note\":\"{api}\"}}");
    let a = send(
        &mut c,
        request(
            "POST",
            "/v1/echo",
            "api.test",
            &[("content-type", "application/json")],
            full_body(body),
        ),
    )
    .await;
    assert_eq!(a.status, 200);
    let got = w.received("api");
    assert!(
        got.contains(&api) && !got.contains(value("API_KEY")),
        "{got}"
    );
    one_record(&w, 0, Outcome::Allowed, None, &[]);

    // BODY_KEY has `body: true`: JSON-escaped in a JSON body, with a Content-Length that fits.
    let bk = w.ph("BODY_KEY").to_string();
    let mut c = tunnel(&w, "body.test").await;
    let body = format!("{{\"key\":\"{bk}\",\"n\":1}}");
    let a = send(
        &mut c,
        request(
            "POST",
            "/store",
            "body.test",
            &[
                ("content-type", "application/json"),
                ("content-length", &body.len().to_string()),
            ],
            full_body(body),
        ),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let got = w.received("body");
    let sent: serde_json::Value = json(got.split("\r\n\r\n").nth(1).unwrap());
    assert_eq!(sent["key"], value("BODY_KEY"));
    let length = sent.to_string().len();
    assert!(
        got.contains(&format!("content-length: {length}\r\n")),
        "{got}"
    );
    // Echoed back JSON-escaped: scrubbed to the placeholder.
    assert_eq!(json(&a.body)["body"]["key"], bk.as_str());
    assert!(!a.body.contains("quoted"), "{}", a.body);
    one_record(&w, 1, Outcome::Allowed, None, &["BODY_KEY"]);

    // A form body gets it percent-encoded; a query string too.
    let mut c = tunnel(&w, "body.test").await;
    let a = send(
        &mut c,
        request(
            "POST",
            &format!("/form?k={bk}"),
            "body.test",
            &[("content-type", "application/x-www-form-urlencoded")],
            full_body(format!("token={bk}&x=1")),
        ),
    )
    .await;
    assert_eq!(a.status, 200);
    let got = w.received("body");
    let enc = percent(value("BODY_KEY"));
    assert!(
        got.contains(&format!("POST /form?k={enc} HTTP/1.1")),
        "{got}"
    );
    assert!(got.ends_with(&format!("token={enc}&x=1")), "{got}");
    w.finish().await;
}

// ---------------------------------------------------------------------------------------------
// Anywhere else: 403, nothing forwarded

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_sent_to_another_inspected_host_is_refused_and_nothing_is_forwarded() {
    let w = World::start().await;
    let ph = w.ph("API_KEY").to_string();
    let (head, tail) = ph.split_at(20);
    let pct_first = format!("%{:02X}{}", ph.as_bytes()[0], &ph[1..]);
    let json_u = format!("\\u{:04x}{}", ph.as_bytes()[0], &ph[1..]);
    let cases: Vec<(&str, Request<Body>)> = vec![
        (
            "header",
            request(
                "GET",
                "/",
                "body.test",
                &[("x-api-key", &ph)],
                full_body(""),
            ),
        ),
        (
            "path",
            request(
                "GET",
                &format!("/leak/{ph}"),
                "body.test",
                &[],
                full_body(""),
            ),
        ),
        (
            "query",
            request(
                "GET",
                &format!("/q?k={ph}"),
                "body.test",
                &[],
                full_body(""),
            ),
        ),
        (
            "body split across reads",
            request(
                "POST",
                "/up",
                "body.test",
                &[("content-type", "text/plain")],
                chunked(vec![
                    format!("x={head}").into_bytes(),
                    tail.as_bytes().to_vec(),
                ]),
            ),
        ),
        (
            "percent-encoded query",
            request(
                "GET",
                &format!("/q?k={pct_first}"),
                "body.test",
                &[],
                full_body(""),
            ),
        ),
        (
            "percent-encoded body",
            request(
                "POST",
                "/up",
                "body.test",
                &[("content-type", "application/x-www-form-urlencoded")],
                full_body(format!("k={pct_first}")),
            ),
        ),
        (
            "JSON \\u escape in the body",
            request(
                "POST",
                "/up",
                "body.test",
                &[("content-type", "application/json")],
                full_body(format!("{{\"k\":\"{json_u}\"}}")),
            ),
        ),
        (
            "inside Basic auth",
            request(
                "GET",
                "/",
                "body.test",
                &[("authorization", &basic(&format!("u:{ph}")))],
                full_body(""),
            ),
        ),
        (
            "lower-cased header",
            request(
                "GET",
                "/",
                "body.test",
                &[("x-k", &ph.to_ascii_lowercase())],
                full_body(""),
            ),
        ),
    ];
    for (i, (what, req)) in cases.into_iter().enumerate() {
        let mut c = tunnel(&w, "body.test").await;
        let a = send(&mut c, req).await;
        assert_eq!(a.status, 403, "{what}: {}", a.body);
        assert_eq!(
            json(&a.body)["error"],
            "credential_endpoint_mismatch",
            "{what}"
        );
        assert!(
            !a.body.contains(&ph[9..]),
            "{what}: the answer repeats the placeholder"
        );
        let r = one_record(
            &w,
            i,
            Outcome::Denied,
            Some("credential_endpoint_mismatch"),
            &["API_KEY"],
        );
        assert_eq!(r.host, "body.test", "{what}");
        if what == "path" {
            assert_eq!(r.path.as_deref(), Some("/leak/[placeholder:API_KEY]"));
        }
        w.untouched("body");
    }
    w.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_refuses_another_servers_token_with_a_json_rpc_error() {
    let w = World::start().await;
    let ph = w.ph("MCP_TRACKER").to_string();
    let mut c = tunnel(&w, "other-mcp.test").await;
    let body = serde_json::json!({"jsonrpc":"2.0","id":7,"method":"tools/call",
        "params":{"name":"echo","arguments":{"text":"hi"}}});
    let a = send(
        &mut c,
        request(
            "POST",
            "/mcp",
            "other-mcp.test",
            &[
                ("content-type", "application/json"),
                ("accept", "application/json, text/event-stream"),
                ("authorization", &format!("Bearer {ph}")),
            ],
            full_body(body.to_string()),
        ),
    )
    .await;
    assert_eq!(a.status, 403, "{}", a.body);
    let reply = json(&a.body);
    assert_eq!(reply["id"], 7);
    assert_eq!(
        reply["error"]["data"]["reason"],
        "credential_endpoint_mismatch"
    );
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("MCP_TRACKER")
    );
    one_record(
        &w,
        0,
        Outcome::Denied,
        Some("credential_endpoint_mismatch"),
        &["MCP_TRACKER"],
    );
    w.untouched("other");
    w.untouched("mcp");
    w.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_text_never_carries_a_value_not_even_to_the_bound_host() {
    let w = World::start().await;
    let ph = w.ph("API_KEY").to_string();
    // Plain HTTP to an allowed host.
    let mut c = direct(&w).await;
    let a = send(
        &mut c,
        request(
            "GET",
            "http://plain.test/x",
            "plain.test",
            &[("x-api-key", &ph)],
            full_body(""),
        ),
    )
    .await;
    assert_eq!(a.status, 403);
    assert_eq!(json(&a.body)["error"], "credential_endpoint_mismatch");
    one_record(
        &w,
        0,
        Outcome::Denied,
        Some("credential_endpoint_mismatch"),
        &["API_KEY"],
    );
    w.untouched("plain");

    // The bound host, named in an http:// URL.
    let mut c = direct(&w).await;
    let a = send(
        &mut c,
        request(
            "GET",
            "http://api.test:443/v1",
            "api.test:443",
            &[("x-api-key", &ph)],
            full_body(""),
        ),
    )
    .await;
    assert_eq!(a.status, 403);
    one_record(
        &w,
        1,
        Outcome::Denied,
        Some("credential_endpoint_mismatch"),
        &["API_KEY"],
    );

    // The bound host, plain HTTP inside its CONNECT tunnel.
    let (mut stream, status, _) = common::connect(w.addr, "api.test:443").await;
    assert_eq!(status, 200);
    let raw = format!("GET /v1 HTTP/1.1\r\nHost: api.test:443\r\nx-api-key: {ph}\r\n\r\n");
    stream.write_all(raw.as_bytes()).await.unwrap();
    let (status, _) = common::read_head(&mut stream).await;
    assert_eq!(status, 403);
    one_record(
        &w,
        2,
        Outcome::Denied,
        Some("credential_endpoint_mismatch"),
        &["API_KEY"],
    );
    w.untouched("api");

    // A `token: true` server (https; the loader refuses `token: true` on http) spoken to in clear
    // text inside its tunnel: refused before anything is decided, so no bearer is ever added.
    let (mut stream, status, _) = common::connect(w.addr, "mcp.test:443").await;
    assert_eq!(status, 200);
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#;
    let raw = format!(
        "POST /mcp HTTP/1.1\r\nHost: mcp.test:443\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{call}",
        call.len()
    );
    stream.write_all(raw.as_bytes()).await.unwrap();
    let (status, _) = common::read_head(&mut stream).await;
    assert_eq!(status, 400);
    one_record(&w, 3, Outcome::Denied, Some("bad_request"), &[]);
    w.untouched("mcp");
    w.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_as_a_host_name_is_refused_before_it_is_resolved() {
    let w = World::start().await;
    let ph = w.ph("API_KEY").to_string();
    // The CONNECT target.
    // (`x` after it: a label may not end in `-`, which a placeholder may.)
    let (_, status, _) = common::connect(w.addr, &format!("{ph}x.api.test:443")).await;
    assert_eq!(status, 403);
    let r = one_record(
        &w,
        0,
        Outcome::Denied,
        Some("credential_endpoint_mismatch"),
        &["API_KEY"],
    );
    assert_eq!(r.method, "CONNECT");
    assert!(r.host.contains("[placeholder:API_KEY]"), "{r:?}");
    // An absolute URL's host.
    let mut c = direct(&w).await;
    let url = format!("http://{}x.plain.test/", ph.to_ascii_lowercase());
    let a = send(&mut c, request("GET", &url, "x", &[], full_body(""))).await;
    assert_eq!(a.status, 403);
    one_record(
        &w,
        1,
        Outcome::Denied,
        Some("credential_endpoint_mismatch"),
        &["API_KEY"],
    );
    // The TLS server name of an allowed tunnel: the handshake is refused.
    let (stream, status, _) = common::connect(w.addr, "api.test:443").await;
    assert_eq!(status, 200);
    let tls = common::tls_over(
        stream,
        w.proxy.ca().cert_der(),
        &format!("{ph}x.api.test"),
        &[],
    )
    .await;
    assert!(tls.is_err(), "the handshake went through");
    let r = one_record(
        &w,
        2,
        Outcome::Denied,
        Some("credential_endpoint_mismatch"),
        &["API_KEY"],
    );
    assert_eq!(
        (r.method.as_str(), r.host.as_str()),
        ("CONNECT", "api.test")
    );
    assert!(
        w.network.dialled().is_empty(),
        "dialled {:?}",
        w.network.dialled()
    );
    for up in ["api", "plain"] {
        w.untouched(up);
    }
    w.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_that_only_looks_like_a_placeholder_passes() {
    let w = World::start().await;
    let lookalike = format!("fenzi_ph_{}", "Q".repeat(43));
    let near = {
        // This session's placeholder with one character changed is another string.
        let mut p = w.ph("API_KEY").as_bytes().to_vec();
        let last = p.len() - 1;
        p[last] = if p[last] == b'A' { b'B' } else { b'A' };
        String::from_utf8(p).unwrap()
    };
    let mut c = tunnel(&w, "body.test").await;
    let a = send(
        &mut c,
        request(
            "POST",
            &format!("/x?a={lookalike}"),
            "body.test",
            &[("x-note", &near), ("content-type", "text/plain")],
            full_body(format!("{lookalike} {near}")),
        ),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let got = w.received("body");
    assert!(
        got.contains(&format!("x-note: {near}")) && got.contains(&lookalike),
        "{got}"
    );
    one_record(&w, 0, Outcome::Allowed, None, &[]);
    w.finish().await;
}

// ---------------------------------------------------------------------------------------------
// token: true

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_server_gets_the_bearer_when_the_request_has_no_authorization() {
    let w = World::start().await;
    let (ph, val) = (w.ph("MCP_TRACKER").to_string(), value("MCP_TRACKER"));
    let call = common::tools_call("mcp.test", "/mcp", 1, "echo");
    let (parts, body) = call.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    let with = |auth: Option<&str>| {
        let mut req = Request::from_parts(parts.clone_head(), full_body(body.clone()));
        if let Some(a) = auth {
            req.headers_mut()
                .insert("authorization", a.parse().unwrap());
        }
        req
    };

    // No Authorization: the proxy adds the real bearer.
    let mut c = tunnel(&w, "mcp.test").await;
    let a = send(&mut c, with(None)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(
        w.received("mcp")
            .contains(&format!("authorization: Bearer {val}\r\n"))
    );
    // The echo of it comes back as the placeholder.
    assert_eq!(
        a.headers["x-echo-authorization"],
        format!("Bearer {ph}").as_str()
    );
    let r = one_record(&w, 0, Outcome::Allowed, None, &["MCP_TRACKER"]);
    assert_eq!(r.tool.as_deref(), Some("echo"));

    // The placeholder as the bearer: swapped.
    let a = send(&mut c, with(Some(&format!("Bearer {ph}")))).await;
    assert_eq!(a.status, 200);
    one_record(&w, 1, Outcome::Allowed, None, &["MCP_TRACKER"]);

    // An Authorization of the client's own: kept as it is, nothing added.
    let a = send(&mut c, with(Some("Bearer the-clients-own-token"))).await;
    assert_eq!(a.status, 200);
    let got = w.received("mcp");
    assert_eq!(got.matches("authorization: ").count(), 3, "{got}");
    assert!(
        got.contains("authorization: Bearer the-clients-own-token\r\n"),
        "{got}"
    );
    assert!(!got.contains(&ph));
    one_record(&w, 2, Outcome::Allowed, None, &[]);
    w.finish().await;
}

trait CloneHead {
    fn clone_head(&self) -> http::request::Parts;
}

impl CloneHead for http::request::Parts {
    fn clone_head(&self) -> http::request::Parts {
        let mut b = Request::builder()
            .method(self.method.clone())
            .uri(self.uri.clone())
            .version(self.version);
        for (k, v) in &self.headers {
            b = b.header(k, v);
        }
        b.body(()).unwrap().into_parts().0
    }
}

// ---------------------------------------------------------------------------------------------
// Responses

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echoed_value_in_a_streamed_sse_body_comes_back_as_the_placeholder() {
    let w = World::start().await;
    let (ph, val) = (w.ph("API_KEY").to_string(), value("API_KEY"));
    let mut c = tunnel(&w, "api.test").await;
    let response = c
        .send_request(request(
            "GET",
            "/sse",
            "api.test",
            &[("accept", "text/event-stream")],
            full_body(""),
        ))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("content-length").is_none());
    let mut body = response.into_body();
    let mut seen = Vec::new();
    // The first event arrives before the upstream sends the next one: the body streams.
    let first = tokio::time::timeout(Duration::from_secs(5), async {
        while !seen.ends_with(b"data: first\n\n") {
            let frame = body.frame().await.unwrap().unwrap();
            if let Ok(data) = frame.into_data() {
                seen.extend_from_slice(&data);
            }
        }
    })
    .await;
    assert!(first.is_ok(), "the first event was held back: {seen:?}");
    w.sse_go.notify_one();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            seen.extend_from_slice(&data);
        }
    }
    let text = String::from_utf8(seen).unwrap();
    assert_eq!(
        text,
        format!("data: first\n\ndata: {{\"token\":\"{ph}\"}}\n\ndata: last\n\n")
    );
    assert!(!text.contains(&val[..12]));
    w.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_that_cannot_be_checked_is_a_502() {
    let w = World::start().await;
    let mut c = tunnel(&w, "api.test").await;
    let a = send(
        &mut c,
        request("GET", "/gzip", "api.test", &[], full_body("")),
    )
    .await;
    assert_eq!(a.status, 502, "{}", a.body);
    assert_eq!(json(&a.body)["error"], "upstream_error");
    assert!(!a.body.contains(value("API_KEY")));
    // The request's own record, then the failure.
    let records = w.requests();
    assert_eq!(records.len(), 2, "{records:#?}");
    assert_eq!(records[1].decision, Outcome::Failed);
    assert_eq!(records[1].reason.as_deref(), Some("upstream_error"));
    assert_eq!(records[1].source.as_deref(), Some("upstream"));
    // And the upstream was asked for an unencoded body.
    assert!(w.received("api").contains("accept-encoding: identity\r\n"));
    // The failure was traced: the capture the leak checks read is live.
    assert!(captured().contains("upstream failed"), "nothing traced");
    w.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_h2_the_same_rules_hold() {
    let w = World::start().await;
    let (ph, val) = (w.ph("API_KEY").to_string(), value("API_KEY"));
    let (stream, status, _) = common::connect(w.addr, "api.test:443").await;
    assert_eq!(status, 200);
    let tls = common::tls_over(stream, w.proxy.ca().cert_der(), "api.test", &[b"h2"])
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(b"h2".as_slice()));
    let mut c = common::h2(tls).await;
    let req = Request::builder()
        .uri("https://api.test/v1")
        .header("x-api-key", ph.as_str())
        .body(http_body_util::Full::new(Bytes::new()))
        .unwrap();
    let (status, body) = common::text(c.send_request(req).await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    assert!(w.received("api").contains(&format!("x-api-key: {val}\r\n")));
    assert_eq!(json(&body)["headers"]["x-api-key"], ph.as_str());
    one_record(&w, 0, Outcome::Allowed, None, &["API_KEY"]);
    w.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_is_413_when_the_session_has_secrets() {
    let w = World::start().await;
    let mut c = tunnel(&w, "body.test").await;
    let big = vec![b'x'; 4 * 1024 * 1024 + 1];
    let a = send(
        &mut c,
        request(
            "POST",
            "/up",
            "body.test",
            &[("content-type", "text/plain")],
            chunked(vec![big]),
        ),
    )
    .await;
    assert_eq!(a.status, 413);
    one_record(&w, 0, Outcome::Denied, Some("body_too_large"), &[]);
    w.untouched("body");
    w.finish().await;
}

// ---------------------------------------------------------------------------------------------
// Positions: a secret with positions (`in:`, a `token: true` server's Authorization) is swapped
// only there; on its own host anywhere else, the request is refused and nothing is forwarded.

/// Extra request headers of a case.
type Headers<'a> = Vec<(&'a str, &'a str)>;

/// A `tools/call` to the tracker's `echo`, with `headers`, on `c`.
async fn tracker_call(c: &mut SendRequest<Body>, target: &str, headers: &[(&str, &str)]) -> Answer {
    let body = serde_json::json!({"jsonrpc":"2.0","id":3,"method":"tools/call",
        "params":{"name":"echo","arguments":{"text":"hi"}}});
    let mut all = vec![
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    all.extend_from_slice(headers);
    send(
        c,
        request(
            "POST",
            target,
            "mcp.test",
            &all,
            full_body(body.to_string()),
        ),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_servers_token_is_swapped_in_authorization_only() {
    let w = World::start().await;
    let (ph, val) = (w.ph("MCP_TRACKER").to_string(), value("MCP_TRACKER"));
    let mut c = tunnel(&w, "mcp.test").await;
    let bearer = format!("Bearer {ph}");
    let a = tracker_call(&mut c, "/mcp", &[("authorization", &bearer)]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let got = w.received("mcp");
    assert!(
        got.contains(&format!("authorization: Bearer {val}\r\n")),
        "{got}"
    );
    one_record(&w, 0, Outcome::Allowed, None, &["MCP_TRACKER"]);

    // The same token in a Referer, in the query, or in another header, beside a good
    // Authorization: refused, with nothing sent on.
    let referer = format!("https://mcp.test/search?q={ph}");
    let spelled = format!("%{:02X}{}", ph.as_bytes()[0], &ph[1..]);
    let cases: [(String, Headers, &str, &str); 4] = [
        (
            "/mcp".into(),
            vec![("authorization", &bearer), ("referer", &referer)],
            "mcp.tracker.token header:referer",
            "header `referer`",
        ),
        (
            format!("/mcp?access_token={ph}"),
            vec![("authorization", &bearer)],
            "mcp.tracker.token query:access_token",
            "query parameter `access_token`",
        ),
        (
            format!("/mcp?q={spelled}"),
            vec![],
            "mcp.tracker.token query:q",
            "query parameter `q`",
        ),
        (
            "/mcp".into(),
            vec![("authorization", &bearer), ("x-forwarded-token", &ph)],
            "mcp.tracker.token header:x-forwarded-token",
            "header `x-forwarded-token`",
        ),
    ];
    for (i, (target, headers, rule, words)) in cases.iter().enumerate() {
        let before = w.received("mcp").len();
        let a = tracker_call(&mut c, target, headers).await;
        assert_eq!(a.status, 403, "{target}: {}", a.body);
        let reply = json(&a.body);
        assert_eq!(
            reply["error"]["data"]["reason"],
            "credential_endpoint_mismatch"
        );
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(message.contains(words), "{message}");
        assert!(message.contains("header:Authorization"), "{message}");
        assert!(!message.contains(&ph[9..]), "{message}");
        let r = one_record(
            &w,
            i + 1,
            Outcome::Denied,
            Some("credential_endpoint_mismatch"),
            &["MCP_TRACKER"],
        );
        assert_eq!(r.rule.as_deref(), Some(*rule));
        assert_eq!(
            w.received("mcp").len(),
            before,
            "{target} reached the upstream"
        );
    }
    // Without Authorization the bearer is still added.
    let a = tracker_call(&mut c, "/mcp", &[]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let got = w.received("mcp");
    let last = got.rsplit("POST /mcp").next().unwrap();
    assert!(
        last.contains(&format!("authorization: Bearer {val}\r\n")),
        "{last}"
    );
    w.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_in_query_key_is_swapped_only_in_that_parameter() {
    let w = World::start().await;
    let (ph, val) = (w.ph("QUERY_KEY").to_string(), value("QUERY_KEY"));
    let mut c = tunnel(&w, "query.test").await;
    // Every `key` parameter, its name percent-encoded or not; nothing else changes.
    let a = send(
        &mut c,
        request(
            "GET",
            &format!("/v1/geo?key={ph}&q=paris&k%65y={ph}"),
            "query.test",
            &[],
            full_body(""),
        ),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let got = w.received("query");
    assert!(
        got.contains(&format!(
            "GET /v1/geo?key={val}&q=paris&k%65y={val} HTTP/1.1"
        )),
        "{got}"
    );
    assert!(!a.body.contains(val), "the echo is scrubbed");
    one_record(&w, 0, Outcome::Allowed, None, &["QUERY_KEY"]);

    let refused: [(String, Headers, &str); 6] = [
        (
            format!("/v1/geo?key=x&q={ph}"),
            vec![],
            "secrets.QUERY_KEY.in query:q",
        ),
        (
            format!("/v1/geo?KEY={ph}"),
            vec![],
            "secrets.QUERY_KEY.in query:KEY",
        ),
        (
            format!("/v1/geo?key={ph};q=1"),
            vec![],
            "secrets.QUERY_KEY.in query",
        ),
        (
            format!("/v1/geo?{ph}=key"),
            vec![],
            "secrets.QUERY_KEY.in query_name",
        ),
        (
            "/v1/geo".into(),
            vec![("x-api-key", ph.as_str())],
            "secrets.QUERY_KEY.in header:x-api-key",
        ),
        (
            format!("/v1/{ph}?key={ph}"),
            vec![],
            "secrets.QUERY_KEY.in path",
        ),
    ];
    for (i, (target, headers, rule)) in refused.iter().enumerate() {
        let before = w.received("query").len();
        let a = send(
            &mut c,
            request("GET", target, "query.test", headers, full_body("")),
        )
        .await;
        assert_eq!(a.status, 403, "{target}: {}", a.body);
        assert!(
            a.body.contains("credential_endpoint_mismatch"),
            "{}",
            a.body
        );
        assert!(
            a.body
                .contains("which its positions do not include (query:key)"),
            "{}",
            a.body
        );
        let r = one_record(
            &w,
            i + 1,
            Outcome::Denied,
            Some("credential_endpoint_mismatch"),
            &["QUERY_KEY"],
        );
        assert_eq!(r.rule.as_deref(), Some(*rule), "{target}");
        assert_eq!(
            w.received("query").len(),
            before,
            "{target} reached the upstream"
        );
    }
    w.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_h2_positions_hold_too() {
    let w = World::start().await;
    let (ph, val) = (w.ph("QUERY_KEY").to_string(), value("QUERY_KEY"));
    let (stream, status, _) = common::connect(w.addr, "query.test:443").await;
    assert_eq!(status, 200);
    let tls = common::tls_over(stream, w.proxy.ca().cert_der(), "query.test", &[b"h2"])
        .await
        .unwrap();
    let mut c = common::h2(tls).await;
    let get = |target: String, referer: Option<&str>| {
        let mut b = Request::builder().uri(format!("https://query.test{target}"));
        if let Some(r) = referer {
            b = b.header("referer", r);
        }
        b.body(http_body_util::Full::new(Bytes::new())).unwrap()
    };
    let (status, body) = common::text(
        c.send_request(get(format!("/v1?key={ph}"), None))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        w.received("query")
            .contains(&format!("GET /v1?key={val} HTTP/1.1"))
    );
    let before = w.received("query").len();
    let referer = format!("https://query.test/?key={ph}");
    let (status, body) = common::text(
        c.send_request(get("/v1?key=x".into(), Some(&referer)))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("header `referer`"), "{body}");
    assert_eq!(w.received("query").len(), before);
    let r = one_record(
        &w,
        1,
        Outcome::Denied,
        Some("credential_endpoint_mismatch"),
        &["QUERY_KEY"],
    );
    assert_eq!(
        r.rule.as_deref(),
        Some("secrets.QUERY_KEY.in header:referer")
    );
    w.finish().await;
}
