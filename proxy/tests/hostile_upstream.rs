//! Hostile upstreams (SECURITY.md, "the deputy"): a bound host that echoes the secret
//! value fenzi swapped in, in every header and framing it controls, written byte by byte on the
//! wire (no HTTP library between the test and what the server sends). For each way of answering, over an
//! intercepted tunnel with HTTP/1.1 and HTTP/2 clients, for a `secrets:` host and a `token: true`
//! MCP server, the test checks what fenzi promises:
//!
//! - every header value, header name, reason phrase, JSON body, event stream, JSON-RPC error and
//!   trailer reaches the agent scrubbed (the value as its placeholder, an encoded value masked);
//! - a transfer-coding other than `chunked`, a `Content-Encoding`, and a `206` to a request a value
//!   was written into are `failed` `upstream_error`, and nothing of their body reaches the agent;
//! - a request a value was written into reaches the upstream without `Range`/`If-Range`;
//! - fenzi's own messages quote nothing the upstream chose.
//!
//! After each suite, no piece of a value (the value, any 8 bytes of it, its base64 and hex) is in
//! anything the agent received, in the audit log, or in the tracing output (captured at TRACE
//! level for the whole test binary); no placeholder is in the log or the tracing output either.
//! The plain-HTTP path is checked for the transfer-coding rule (no value is ever written into a
//! plain-HTTP request, so there it is the rule itself that is tested).

mod common;

use common::tracing_capture::{capture, captured};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use common::{FakeNetwork, TestPki};
use fenzi_policy::audit::{AuditRecord, Outcome};
use fenzi_proxy::Proxy;
use fenzi_proxy::audit::writer::AuditWriter;
use fenzi_proxy::secrets::SecretSet;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use rustls::ServerConfig;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

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
secrets:
  API_KEY:
    hosts: [api.test]
"#;

/// The real values: mixed case (HTTP lower-cases header names), and valid in a header name, with
/// a `+` that URL encoders escape.
const VALUES: [(&str, &str); 2] = [
    ("API_KEY", "hx7Qk2Lm9_Zp4Rt8Wv3+Nc-api"),
    ("MCP_TRACKER", "Tm4Jq8Xz2Vb6-Ns0Lk5Rw_mcp"),
];

/// In every body the upstream sends: when the agent gets it, the body was passed on.
const MARKER: &str = "BODY-MARKER-passed-on";

/// Where each upstream is: its name, host, public address and whether it speaks TLS.
const UPSTREAMS: [(&str, &str, bool); 3] = [
    ("api.test", "93.184.216.51:443", true),
    ("mcp.test", "93.184.216.52:443", true),
    ("plain.test", "93.184.216.53:80", false),
];

struct World {
    addr: SocketAddr,
    proxy: Proxy,
    log: PathBuf,
    /// Each upstream's received request heads, by host.
    heads: Vec<(&'static str, Arc<Mutex<Vec<String>>>)>,
    /// Secret name → this session's placeholder.
    ph: Vec<(&'static str, String)>,
    stop: Option<oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl World {
    async fn start() -> World {
        capture();
        let pki = TestPki::new();
        let mut network = FakeNetwork::default();
        let mut heads = Vec::new();
        for (host, addr, tls) in UPSTREAMS {
            let config = tls.then(|| pki.server_config(&[host]));
            let (up, seen) = raw_upstream(config).await;
            let ip = addr.split(':').next().unwrap();
            network = network.name(host, &[ip]).route(addr, up);
            heads.push((host, seen));
        }
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
        let writer = AuditWriter::open(&log, "hostile-test").unwrap();
        let proxy = Proxy::builder(common::policy(POLICY, None), Arc::new(writer))
            .options(common::options(&pki))
            .network(Arc::new(network))
            .secrets(set)
            .build()
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
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
            heads,
            ph,
            stop: Some(stop),
            _dir: dir,
        }
    }

    fn ph(&self, name: &str) -> &str {
        &self.ph.iter().find(|(n, _)| *n == name).unwrap().1
    }

    fn heads(&self, host: &str) -> Vec<String> {
        let seen = &self.heads.iter().find(|(h, _)| *h == host).unwrap().1;
        seen.lock().unwrap().clone()
    }

    async fn records(&self) -> Vec<AuditRecord> {
        self.proxy.flush_audit().await.unwrap();
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Stops the proxy, and checks that no piece of a value and no placeholder is in the audit
    /// log or the tracing output, and no piece of a value in what the agent received.
    async fn finish(mut self, received: &[u8]) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.proxy.flush_audit().await.unwrap();
        let log = std::fs::read(&self.log).unwrap();
        let traced = captured();
        for (what, bytes) in [
            ("the agent", received),
            ("the audit log", &log[..]),
            ("the tracing output", traced.as_bytes()),
        ] {
            assert_no_piece_of_a_value(what, bytes);
        }
        for (name, _) in VALUES {
            let ph = self.ph(name);
            for (what, bytes) in [
                ("the audit log", &log[..]),
                ("the tracing output", traced.as_bytes()),
            ] {
                for piece in [ph, &ph[9..]] {
                    assert!(
                        find(bytes, piece.as_bytes()).is_none(),
                        "{what} holds the placeholder of {name}"
                    );
                }
            }
        }
    }
}

/// Every piece of a value fenzi must keep from `bytes`: each 8-byte window of it (in any case), its
/// base64 (either alphabet, without the edge characters that also carry a neighbour's bits) and its
/// hex.
fn assert_no_piece_of_a_value(what: &str, bytes: &[u8]) {
    // In any letter case: HTTP lower-cases a header name, so a name that held a value shows it so.
    let lower = bytes.to_ascii_lowercase();
    for (name, value) in VALUES {
        let value = value.as_bytes();
        for window in value.to_ascii_lowercase().windows(8) {
            if let Some(at) = find(&lower, window) {
                let from = at.saturating_sub(60);
                let to = (at + 60).min(bytes.len());
                panic!(
                    "{what} got a piece of {name}'s value: …{}…",
                    String::from_utf8_lossy(&bytes[from..to])
                );
            }
        }
        let b64 = STANDARD.encode(value);
        let core = &b64[1..b64.len() - 4];
        let url_core = core.replace('+', "-").replace('/', "_");
        for encoded in [
            core.to_string(),
            url_core,
            hex(value),
            hex(value).to_uppercase(),
        ] {
            assert!(
                find(bytes, encoded.as_bytes()).is_none(),
                "{what} got {name}'s value encoded ({encoded})"
            );
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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

// ---------------------------------------------------------------------------------------------
// The hostile upstream: reads one request, answers with the scripted bytes, closes.

/// A server on loopback (TLS with `tls`) answering each connection's one request as its `x-case`
/// header says, with the value it found in `Authorization` spliced in. Records the request heads.
async fn raw_upstream(tls: Option<Arc<ServerConfig>>) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let heads = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (tls, heads) = (tls.clone(), heads.clone());
            tokio::spawn(async move {
                match tls {
                    Some(config) => {
                        let acceptor = tokio_rustls::TlsAcceptor::from(config);
                        if let Ok(stream) = acceptor.accept(tcp).await {
                            answer_one(stream, heads).await;
                        }
                    }
                    None => answer_one(tcp, heads).await,
                }
            });
        }
    });
    (addr, seen)
}

async fn answer_one<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, heads: Arc<Mutex<Vec<String>>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(at) = find(&buf, b"\r\n\r\n") {
            break at + 4;
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    let length: usize = header("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    while buf.len() < end + length {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    heads.lock().unwrap().push(head.clone());
    let case = header("x-case").unwrap_or_default();
    // The echo: what fenzi wrote into the request (nothing on plain HTTP).
    let secret = header("authorization")
        .and_then(|a| a.strip_prefix("Bearer ").map(str::to_string))
        .unwrap_or_else(|| "no-value-on-plain-http".to_string());
    let mcp = head.starts_with("POST /mcp ");
    let _ = s.write_all(&scripted(&case, &secret, mcp)).await;
    let _ = s.flush().await;
    let _ = s.shutdown().await;
}

/// What fenzi must make of an answer, for a `secrets:` host and for an MCP server.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// Passed on (scrubbed) with the upstream's status; no `failed` record.
    Pass,
    /// A `failed` `upstream_error` record (the head may have gone out already).
    Failed,
    /// Refused before any of the body: a `failed` `upstream_error` record, a 502, no body byte.
    Refused,
    /// Either way, as long as nothing leaks.
    Any,
}

use Expect::*;

/// Each way of answering: its name, what it must come to on a `secrets:` host and on an MCP server.
const CASES: &[(&str, Expect, Expect)] = &[
    ("headers", Pass, Pass),
    ("header-named", Pass, Pass),
    ("reason", Pass, Pass),
    ("informational", Pass, Pass),
    ("content-type", Pass, Failed),
    ("content-type-param", Pass, Pass),
    ("content-encoding", Refused, Refused),
    ("content-encoding-list", Refused, Refused),
    ("content-length-short", Any, Any),
    ("content-length-long", Failed, Failed),
    ("content-length-twice", Refused, Refused),
    ("te-gzip-chunked", Refused, Refused),
    ("te-secret-chunked", Refused, Refused),
    ("te-identity", Refused, Refused),
    ("te-chunked-gzip", Refused, Refused),
    ("te-two-lines", Refused, Refused),
    ("te-chunked-twice", Refused, Refused),
    ("te-chunked-and-length", Pass, Pass),
    ("trailers", Pass, Pass),
    ("partial", Refused, Refused),
    ("sse", Pass, Pass),
    ("sse-event-type", Pass, Failed),
    ("rpc-error", Pass, Pass),
    ("bad-json", Pass, Failed),
    ("error-status", Pass, Pass),
    // A HEAD to the `secrets:` host (an MCP server is sent its POST): a length nothing framed.
    ("head-length", Pass, Refused),
];

/// The bytes of the answer `case`, echoing `s` (for an MCP server when `mcp`).
fn scripted(case: &str, s: &str, mcp: bool) -> Vec<u8> {
    let b64 = STANDARD.encode(s);
    let hx = hex(s.as_bytes());
    let pct = percent(s);
    let body = if mcp {
        format!(
            r#"{{"jsonrpc":"2.0","id":7,"result":{{"content":[{{"type":"text","text":"{s} {b64} {hx} {pct} {MARKER}"}}]}}}}"#
        )
    } else {
        format!(r#"{{"echo":"{s}","b64":"{b64}","hex":"{hx}","pct":"{pct}","m":"{MARKER}"}}"#)
    };
    let json = "Content-Type: application/json".to_string();
    let chunked = |body: &str| format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
    let event = |fields: &str| {
        format!(
            "{fields}data: {{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{{\"t\":\"{s} {b64} {MARKER}\"}}}}\n\n"
        )
    };
    match case {
        "headers" => message(
            "200 OK",
            &[
                json,
                format!("X-Echo: {s}"),
                format!("Set-Cookie: token={s}; Secure"),
                format!("WWW-Authenticate: Bearer error=\"{s}\""),
                format!("Link: <https://api.test/?t={pct}>; rel=\"next\""),
                format!("X-Basic: Basic {}", STANDARD.encode(format!("agent:{s}"))),
                format!("X-Hex: {hx}"),
                format!("X-Tail: abc{s}"),
            ],
            &body,
        ),
        "header-named" => message(
            "200 OK",
            &[json, format!("{s}: 1"), format!("X-{s}-Y: 2")],
            &body,
        ),
        "reason" => message(&format!("200 Fine {s}"), &[json], &body),
        "informational" => {
            let mut out = format!("HTTP/1.1 103 Early {s}\r\nLink: <{s}>\r\n\r\n").into_bytes();
            out.extend(message("200 OK", &[json], &body));
            out
        }
        "content-type" => message("200 OK", &[format!("Content-Type: application/{s}")], &body),
        "content-type-param" => message(
            "200 OK",
            &[format!("Content-Type: application/json; charset={s}")],
            &body,
        ),
        "content-encoding" => message("200 OK", &[json, format!("Content-Encoding: {s}")], &body),
        "content-encoding-list" => message(
            "200 OK",
            &[json, format!("Content-Encoding: identity, {s}")],
            &body,
        ),
        "content-length-short" => {
            // The declared length ends before the value; the rest would be a next answer.
            let tail =
                format!("{body}HTTP/1.1 200 {s}\r\nX-Next: {s}\r\nContent-Length: 2\r\n\r\n{{}}");
            message("200 OK", &[json, "Content-Length: 10".into()], &tail)
        }
        "content-length-long" => message("200 OK", &[json, "Content-Length: 100000".into()], &body),
        "content-length-twice" => message(
            "200 OK",
            &[
                json,
                format!("Content-Length: {}", body.len()),
                "Content-Length: 3".into(),
            ],
            &body,
        ),
        "te-gzip-chunked" => message(
            "200 OK",
            &[json, "Transfer-Encoding: gzip, chunked".into()],
            &chunked(&body),
        ),
        "te-secret-chunked" => message(
            "200 OK",
            &[json, format!("Transfer-Encoding: {s}, chunked")],
            &chunked(&body),
        ),
        "te-identity" => message(
            "200 OK",
            &[json, "Transfer-Encoding: identity".into()],
            &body,
        ),
        "te-chunked-gzip" => message(
            "200 OK",
            &[json, "Transfer-Encoding: chunked, gzip".into()],
            &chunked(&body),
        ),
        "te-two-lines" => message(
            "200 OK",
            &[
                json,
                "Transfer-Encoding: gzip".into(),
                "Transfer-Encoding: chunked".into(),
            ],
            &chunked(&body),
        ),
        "te-chunked-twice" => message(
            "200 OK",
            &[json, "Transfer-Encoding: chunked, chunked".into()],
            &chunked(&chunked(&body)),
        ),
        "te-chunked-and-length" => message(
            "200 OK",
            &[
                json,
                "Transfer-Encoding: chunked".into(),
                "Content-Length: 3".into(),
            ],
            &chunked(&body),
        ),
        "trailers" => message(
            "200 OK",
            &[
                json,
                "Transfer-Encoding: chunked".into(),
                "Trailer: X-Sum".into(),
            ],
            &format!(
                "{:x};ext={s}\r\n{body}\r\n0\r\nX-Sum: {s}\r\nX-{s}: 1\r\n\r\n",
                body.len()
            ),
        ),
        "partial" => message(
            "206 Partial Content",
            &[
                json,
                format!("Content-Range: bytes 0-{}/999", body.len() - 1),
            ],
            &body,
        ),
        "sse" => message(
            "200 OK",
            &["Content-Type: text/event-stream".into()],
            &format!(
                ": comment {s}\n\n{}{}",
                event(&format!("id: {s}\nretry: 1000\n")),
                event("event: message\n")
            ),
        ),
        "sse-event-type" => message(
            "200 OK",
            &["Content-Type: text/event-stream".into()],
            &event(&format!("event: {s}\n")),
        ),
        "rpc-error" => message(
            "200 OK",
            &[json],
            &format!(
                r#"{{"jsonrpc":"2.0","id":7,"error":{{"code":-32000,"message":"bad token {s} {MARKER}","data":{{"token":"{b64}"}}}}}}"#
            ),
        ),
        "bad-json" => message(
            "200 OK",
            &[json],
            &format!("{{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{s}}}"),
        ),
        "error-status" => message(
            &format!("500 Broken {s}"),
            &["Content-Type: text/html".into()],
            &format!("<p>{s} {MARKER}</p>"),
        ),
        "head-length" => message("200 OK", &[json, format!("Content-Length: {s}")], ""),
        other => panic!("no case {other}"),
    }
}

/// A response: status line, `headers` (a `Content-Length` added unless they frame it), body.
fn message(status: &str, headers: &[String], body: &str) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\n");
    let framed = headers.iter().any(|h| {
        let h = h.to_ascii_lowercase();
        h.starts_with("content-length:") || h.starts_with("transfer-encoding:")
    });
    for h in headers {
        out.push_str(h);
        out.push_str("\r\n");
    }
    if !framed {
        out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    out.push_str("Connection: close\r\n\r\n");
    out.push_str(body);
    out.into_bytes()
}

// ---------------------------------------------------------------------------------------------
// The agent

#[derive(Clone, Copy, Debug, PartialEq)]
enum Wire {
    H1,
    H2,
}

/// What the agent got: the status, and every byte it could read (reason phrase, header names and
/// values, body, trailers) in one buffer. A body that broke off ends where it broke.
struct Got {
    status: u16,
    bytes: Vec<u8>,
}

async fn collect(response: hyper::Response<Incoming>) -> Got {
    let status = response.status().as_u16();
    let mut bytes = Vec::new();
    if let Some(reason) = response.extensions().get::<hyper::ext::ReasonPhrase>() {
        bytes.extend_from_slice(reason.as_bytes());
        bytes.push(b'\n');
    }
    let headers = |bytes: &mut Vec<u8>, map: &http::HeaderMap| {
        for (name, value) in map {
            bytes.extend_from_slice(name.as_str().as_bytes());
            bytes.extend_from_slice(b": ");
            bytes.extend_from_slice(value.as_bytes());
            bytes.push(b'\n');
        }
    };
    headers(&mut bytes, response.headers());
    let mut body = response.into_body();
    while let Some(Ok(frame)) = body.frame().await {
        match frame.into_data() {
            Ok(data) => bytes.extend_from_slice(&data),
            Err(frame) => {
                if let Some(trailers) = frame.trailers_ref() {
                    headers(&mut bytes, trailers);
                }
            }
        }
    }
    Got { status, bytes }
}

/// One request through a fresh intercepted tunnel to `host` (TLS with the session CA).
async fn through_tunnel(w: &World, wire: Wire, host: &str, req: Request<Full<Bytes>>) -> Got {
    let (stream, status, _) = common::connect(w.addr, &format!("{host}:443")).await;
    assert_eq!(status, 200, "CONNECT {host}");
    let alpn: &[u8] = match wire {
        Wire::H1 => b"http/1.1",
        Wire::H2 => b"h2",
    };
    let tls = common::tls_over(stream, w.proxy.ca().cert_der(), host, &[alpn])
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(alpn));
    // The client is kept until the body is read. A connection that broke before a head gave the
    // agent nothing.
    let nothing = || Got {
        status: 0,
        bytes: Vec::new(),
    };
    match wire {
        Wire::H1 => {
            let mut c = common::h1(tls).await;
            match c.send_request(req).await {
                Ok(response) => collect(response).await,
                Err(_) => nothing(),
            }
        }
        Wire::H2 => {
            let mut c = common::h2(tls).await;
            match c.send_request(req).await {
                Ok(response) => collect(response).await,
                Err(_) => nothing(),
            }
        }
    }
}

/// The request the agent sends for `case`: to the `secrets:` host with its placeholder, or a
/// `tools/call` to the MCP server (fenzi adds its token). Both ask for a range.
fn agent_request(w: &World, wire: Wire, mcp: bool, case: &str) -> Request<Full<Bytes>> {
    let (host, path) = if mcp {
        ("mcp.test", "/mcp".to_string())
    } else {
        ("api.test", format!("/case/{case}"))
    };
    let mut req = if mcp {
        common::tools_call(host, &path, 7, "echo")
    } else {
        Request::builder()
            .method(if case.starts_with("head-") {
                "HEAD"
            } else {
                "GET"
            })
            .uri(&path)
            .header("host", host)
            .header("authorization", format!("Bearer {}", w.ph("API_KEY")))
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    if wire == Wire::H2 {
        *req.uri_mut() = format!("https://{host}{path}").parse().unwrap();
        req.headers_mut().remove("host");
    }
    let headers = req.headers_mut();
    headers.insert("x-case", case.parse().unwrap());
    headers.insert("range", "bytes=0-9".parse().unwrap());
    headers.insert("if-range", "\"v1\"".parse().unwrap());
    req
}

async fn every_case(wire: Wire, mcp: bool) {
    let w = World::start().await;
    let (host, secret) = if mcp {
        ("mcp.test", "MCP_TRACKER")
    } else {
        ("api.test", "API_KEY")
    };
    let ph = w.ph(secret).to_string();
    let mut received = Vec::new();
    for &(case, on_host, on_mcp) in CASES {
        let expect = if mcp { on_mcp } else { on_host };
        let before = w.records().await.len();
        let got = through_tunnel(&w, wire, host, agent_request(&w, wire, mcp, case)).await;
        let records = w.records().await;
        let new = &records[before..];
        let failed = new
            .iter()
            .filter(|r| r.decision == Outcome::Failed)
            .collect::<Vec<_>>();
        let text = String::from_utf8_lossy(&got.bytes).into_owned();
        match expect {
            Pass => {
                assert!(failed.is_empty(), "{case}: {failed:?}");
                let want = if case == "error-status" { 500 } else { 200 };
                assert_eq!(got.status, want, "{case}: {text}");
            }
            Failed | Refused => {
                assert!(
                    failed
                        .iter()
                        .any(|r| r.reason.as_deref() == Some("upstream_error")
                            && r.source.as_deref() == Some("upstream")),
                    "{case}: no failed upstream_error record in {new:?}"
                );
            }
            Any => {}
        }
        if expect == Refused {
            assert_eq!(got.status, 502, "{case}: {text}");
            assert!(
                !text.contains(MARKER),
                "{case}: the body was passed on: {text}"
            );
        }
        // The echoes that were passed on came back as the placeholder.
        if case == "headers" {
            assert!(text.contains(&format!("x-echo: {ph}")), "{case}: {text}");
        }
        if case == "reason" && wire == Wire::H1 {
            assert!(text.starts_with(&format!("Fine {ph}\n")), "{case}: {text}");
        }
        // fenzi's own words say what was wrong with a Content-Type it refused.
        if case == "content-type" && mcp {
            assert!(
                text.contains("Content-Type is not one an MCP server may send"),
                "{text}"
            );
        }
        received.extend_from_slice(case.as_bytes());
        received.extend_from_slice(b":\n");
        received.extend_from_slice(&got.bytes);
        received.push(b'\n');
    }
    // The value reached the upstream (so each echo held it), and never with a range.
    let heads = w.heads(host);
    assert_eq!(heads.len(), CASES.len(), "{heads:?}");
    let value = VALUES.iter().find(|(n, _)| *n == secret).unwrap().1;
    for head in &heads {
        assert!(
            head.contains(&format!("Bearer {value}")),
            "no value was written in"
        );
        for line in head.lines() {
            let line = line.to_ascii_lowercase();
            assert!(
                !line.starts_with("range:") && !line.starts_with("if-range:"),
                "a range went upstream with a value: {line}"
            );
        }
    }
    w.finish(&received).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secrets_host_over_h1_gets_nothing_past_the_scrubber() {
    every_case(Wire::H1, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secrets_host_over_h2_gets_nothing_past_the_scrubber() {
    every_case(Wire::H2, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_over_h1_gets_nothing_past_the_scrubber() {
    every_case(Wire::H1, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_over_h2_gets_nothing_past_the_scrubber() {
    every_case(Wire::H2, true).await;
}

/// Plain HTTP: no value is ever written in, so the range goes as the agent sent it; a
/// transfer-coding other than `chunked` is refused all the same, and `chunked` passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_accepts_only_chunked() {
    let w = World::start().await;
    let cases = [
        ("te-gzip-chunked", Refused),
        ("te-secret-chunked", Refused),
        ("te-identity", Refused),
        ("te-chunked-gzip", Refused),
        ("te-two-lines", Refused),
        ("te-chunked-twice", Refused),
        ("trailers", Pass),
        ("partial", Pass),
    ];
    let mut received = Vec::new();
    for (case, expect) in cases {
        let before = w.records().await.len();
        let mut req = common::get(&format!("http://plain.test/case/{case}"));
        req.headers_mut().insert("x-case", case.parse().unwrap());
        req.headers_mut()
            .insert("range", "bytes=0-9".parse().unwrap());
        let mut c = common::h1(TcpStream::connect(w.addr).await.unwrap()).await;
        let got = collect(c.send_request(req).await.unwrap()).await;
        let text = String::from_utf8_lossy(&got.bytes).into_owned();
        let records = w.records().await;
        let failed: Vec<_> = records[before..]
            .iter()
            .filter(|r| r.decision == Outcome::Failed)
            .collect();
        match expect {
            Refused => {
                assert_eq!(got.status, 502, "{case}: {text}");
                assert!(
                    !text.contains(MARKER),
                    "{case}: the body was passed on: {text}"
                );
                assert_eq!(failed.len(), 1, "{case}: {failed:?}");
                assert_eq!(failed[0].reason.as_deref(), Some("upstream_error"));
                // fenzi's words, not the upstream's.
                assert!(
                    text.contains("only transfer-coding fenzi accepts"),
                    "{text}"
                );
                assert!(!text.contains("gzip"), "{case}: {text}");
            }
            _ => {
                let want = if case == "partial" { 206 } else { 200 };
                assert_eq!(got.status, want, "{case}: {text}");
                assert!(text.contains(MARKER), "{case}: {text}");
                assert!(failed.is_empty(), "{case}: {failed:?}");
            }
        }
        received.extend_from_slice(&got.bytes);
    }
    // Without a value in it, the request keeps its range.
    let heads = w.heads("plain.test");
    assert!(
        heads
            .iter()
            .all(|h| h.to_ascii_lowercase().contains("\r\nrange: bytes=0-9\r\n")),
        "{heads:?}"
    );
    w.finish(&received).await;
}
