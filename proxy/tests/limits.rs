//! Per-tool limits (README, "Limits") over loopback with real TLS on both hops: a scripted MCP
//! upstream that answers, stalls, streams or sends too much by tool name, and the proxy in front
//! of it refusing over `rate` and `concurrency` (429, `Retry-After`, a JSON-RPC error, nothing
//! forwarded, one denied record) and cutting answers past `timeout` or `max_response` (a JSON-RPC
//! error for the call before the head, an error event after it, the upstream connection closed,
//! a `failed` record after the allowed one).

mod common;

use bytes::Bytes;
use common::*;
use fenzi_proxy::Body;
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};

/// What the scripted upstream saw.
#[derive(Default)]
struct Script {
    /// `tools/call` requests received.
    calls: AtomicUsize,
    /// Connections that ended (the proxy closed them, or they failed).
    closed: AtomicUsize,
    /// Lets a `slow` call answer.
    release: Notify,
}

impl Script {
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
    fn closed(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }
}

fn result(id: &serde_json::Value, text: &str) -> String {
    serde_json::json!({
        "jsonrpc": "2.0", "id": id,
        "result": {"content": [{"type": "text", "text": text}]}
    })
    .to_string()
}

fn event(data: &str) -> Bytes {
    Bytes::from(format!("event: message\ndata: {data}\n\n"))
}

/// An event stream fed by `chunks`, each after a short pause; the stream then stays open for
/// `hold` before it ends.
fn stream(chunks: Vec<Bytes>, hold: Duration) -> Response<Body> {
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        for chunk in chunks {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if tx.send(chunk).await.is_err() {
                return;
            }
        }
        tokio::time::sleep(hold).await;
    });
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(ChannelBody(rx).boxed_unsync())
        .unwrap()
}

/// Answers a `tools/call` by its tool: `echo` at once, `slow` once released (or after 10 s),
/// `big` with 64 KiB, `stream_big` with a progress event then 64 KiB, `stream_stall` with a
/// progress event and then nothing for 10 s.
async fn answer(script: Arc<Script>, req: Request<Incoming>) -> Response<Body> {
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let value: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    if let Some(batch) = value.as_array() {
        script.calls.fetch_add(batch.len(), Ordering::SeqCst);
        let replies: Vec<String> = batch.iter().map(|m| result(&m["id"], "hi")).collect();
        return respond(200, "application/json", format!("[{}]", replies.join(",")));
    }
    if value["method"] == "tools/call" {
        script.calls.fetch_add(1, Ordering::SeqCst);
    }
    let id = value["id"].clone();
    let progress = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#;
    let big = "x".repeat(64 * 1024);
    match value["params"]["name"].as_str().unwrap_or_default() {
        "slow" => {
            let _ = tokio::time::timeout(Duration::from_secs(10), script.release.notified()).await;
            respond(200, "application/json", result(&id, "late"))
        }
        "big" => respond(200, "application/json", result(&id, &big)),
        "stream_big" => stream(
            vec![event(progress), event(&result(&id, &big))],
            Duration::ZERO,
        ),
        "stream_stall" => stream(vec![event(progress)], Duration::from_secs(10)),
        _ => respond(200, "application/json", result(&id, "hi")),
    }
}

struct Setup {
    proxy: TestProxy,
    script: Arc<Script>,
    target: String,
}

/// The scripted upstream on 127.0.0.1 (TLS), and the proxy with `limits` (YAML list items, each
/// line indented by six spaces) on its one server `local`, which allows every tool.
async fn setup(limits: &str) -> Setup {
    let pki = TestPki::new();
    let tls = pki.server_config(&["127.0.0.1"]);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let script = Arc::new(Script::default());
    let serving = script.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (tls, script) = (tls.clone(), serving.clone());
            tokio::spawn(async move {
                if let Ok(stream) = tokio_rustls::TlsAcceptor::from(tls).accept(stream).await {
                    let handler = script.clone();
                    let service = service_fn(move |req| {
                        let script = handler.clone();
                        async move { Ok::<_, Infallible>(answer(script, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }
                script.closed.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    let target = format!("127.0.0.1:{}", addr.port());
    let yaml = format!(
        "version: 1\nmcp:\n  local:\n    url: https://{target}/mcp\n    tools: {{allow: [\"*\"]}}\n    limits:\n{limits}"
    );
    let proxy = start_proxy(
        policy(&yaml, None),
        options(&pki),
        Arc::new(FakeNetwork::default()),
        Arc::new(MemorySink::default()),
    )
    .await;
    Setup {
        proxy,
        script,
        target,
    }
}

impl Setup {
    /// A new client connection: CONNECT, TLS with the session CA, HTTP/1.1.
    async fn client(&self) -> Sender {
        let (stream, status, head) = connect(self.proxy.addr, &self.target).await;
        assert_eq!(status, 200, "{head}");
        let ca = self.proxy.proxy.ca().cert_der().clone();
        h1(tls_over(stream, &ca, "127.0.0.1", &[b"http/1.1"])
            .await
            .unwrap())
        .await
    }

    async fn call(&self, client: &mut Sender, id: u64, tool: &str) -> Response<Incoming> {
        client
            .send_request(tools_call(&self.target, "/mcp", id, tool))
            .await
            .unwrap()
    }

    /// The records after the CONNECTs'.
    fn records(&self) -> Vec<String> {
        let all = self.proxy.summaries();
        assert!(all[0].starts_with("allowed CONNECT"), "{all:?}");
        all.into_iter()
            .filter(|r| !r.starts_with("allowed CONNECT"))
            .collect()
    }

    async fn wait_until_closed(&self, n: usize) {
        let start = Instant::now();
        while self.script.closed() < n {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "the upstream connection stayed open"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// `allowed POST 127.0.0.1:PORT /mcp tools/call TOOL` and the like, for the records.
fn line(s: &Setup, outcome: &str, tool: &str, reason: Option<&str>) -> String {
    let mut out = format!("{outcome} POST {} /mcp tools/call {tool}", s.target);
    if let Some(reason) = reason {
        out.push_str(" -> ");
        out.push_str(reason);
    }
    out
}

#[tokio::test]
async fn the_61st_call_in_a_minute_is_refused_and_never_forwarded() {
    let s = setup("      - {tool: \"*\", rate: 60/min}\n").await;
    let mut client = s.client().await;
    for id in 1..=60 {
        let (status, body) = text(s.call(&mut client, id, "echo").await).await;
        assert_eq!(status, 200, "call {id}: {body}");
    }
    let response = s.call(&mut client, 61, "echo").await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    let proxy_status = response.headers()["proxy-status"].to_str().unwrap();
    assert!(
        proxy_status.contains("error=http_request_denied") && proxy_status.contains("rate_limited"),
        "{proxy_status}"
    );
    let (_, body) = text(response).await;
    let error = json(&body);
    assert_eq!(error["id"], 61);
    assert_eq!(error["error"]["code"], -31010);
    assert_eq!(error["error"]["data"]["reason"], "rate_limited");
    assert_eq!(error["error"]["data"]["tool"], "echo");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("mcp.local.limits[0].rate"), "{message}");
    assert_eq!(
        s.script.calls(),
        60,
        "the refused call reached the upstream"
    );

    let records = s.records();
    assert_eq!(records.len(), 61, "{records:?}");
    assert!(
        records[..60]
            .iter()
            .all(|r| *r == line(&s, "allowed", "echo", None))
    );
    assert_eq!(
        records[60],
        line(&s, "denied", "echo", Some("rate_limited"))
    );
    let denied = s.proxy.entries().pop().unwrap();
    assert_eq!(denied.rule.as_deref(), Some("mcp.local.limits[0].rate"));
    assert_eq!(denied.rpc_id.as_deref(), Some("61"));
    // Another path on the server's host is no way around the limit: JSON-RPC goes only to the
    // endpoint, and the path is refused before the limit is asked.
    let (status, body) = text(
        client
            .send_request(tools_call(&s.target, "/other", 62, "echo"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("policy_denied"), "{body}");
    assert_eq!(
        s.script.calls(),
        60,
        "the refused call reached the upstream"
    );
}

#[tokio::test]
async fn a_second_call_in_flight_over_concurrency_1_is_refused() {
    let s = setup("      - {tool: \"*\", concurrency: 1}\n").await;
    let (mut first, mut second) = (s.client().await, s.client().await);
    let target = s.target.clone();
    let slow = tokio::spawn(async move {
        text(
            first
                .send_request(tools_call(&target, "/mcp", 1, "slow"))
                .await
                .unwrap(),
        )
        .await
    });
    while s.script.calls() < 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let response = s.call(&mut second, 2, "echo").await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    let (_, body) = text(response).await;
    let error = json(&body);
    assert_eq!(error["id"], 2);
    assert_eq!(error["error"]["data"]["reason"], "rate_limited");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("mcp.local.limits[0].concurrency"),
        "{body}"
    );
    assert_eq!(s.script.calls(), 1);

    s.script.release.notify_one();
    let (status, body) = slow.await.unwrap();
    assert_eq!(status, 200, "{body}");
    // The slot came back with the first answer's body.
    let (status, body) = text(s.call(&mut second, 3, "echo").await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        s.records(),
        [
            line(&s, "allowed", "slow", None),
            line(&s, "denied", "echo", Some("rate_limited")),
            line(&s, "allowed", "echo", None),
        ]
    );
}

#[tokio::test]
async fn a_call_past_its_timeout_gets_504_and_its_upstream_connection_is_closed() {
    let s =
        setup("      - {tool: slow, timeout: 300ms}\n      - {tool: \"*\", rate: 100/s}\n").await;
    let mut client = s.client().await;
    let started = Instant::now();
    let response = s.call(&mut client, 7, "slow").await;
    let waited = started.elapsed();
    assert_eq!(response.status(), 504);
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    let proxy_status = response.headers()["proxy-status"].to_str().unwrap();
    assert!(
        proxy_status.contains("http_response_timeout"),
        "{proxy_status}"
    );
    let (_, body) = text(response).await;
    let error = json(&body);
    assert_eq!(error["id"], 7);
    assert_eq!(error["error"]["code"], -31011);
    assert_eq!(error["error"]["data"]["reason"], "timeout");
    s.wait_until_closed(1).await;

    assert_eq!(
        s.records(),
        [
            line(&s, "allowed", "slow", None),
            format!("failed POST {} /mcp -> timeout", s.target),
        ]
    );
    let failed = s.proxy.entries().pop().unwrap();
    assert_eq!(failed.rule.as_deref(), Some("mcp.local.limits[0].timeout"));
    assert_eq!(failed.source.as_deref(), Some("upstream"));

    // The tunnel goes on, over a new upstream connection; an unlimited call is not cut.
    let (status, body) = text(s.call(&mut client, 8, "echo").await).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn an_oversized_json_answer_gets_502_response_too_large() {
    let s = setup("      - {tool: \"*\", max_response: 4KiB}\n").await;
    let mut client = s.client().await;
    let response = s.call(&mut client, 3, "big").await;
    assert_eq!(response.status(), 502);
    let proxy_status = response.headers()["proxy-status"].to_str().unwrap();
    assert!(
        proxy_status.contains("http_response_body_size"),
        "{proxy_status}"
    );
    let (_, body) = text(response).await;
    assert!(
        body.len() < 1024,
        "the answer was passed on: {} bytes",
        body.len()
    );
    let error = json(&body);
    assert_eq!(error["id"], 3);
    assert_eq!(error["error"]["code"], -31012);
    assert_eq!(error["error"]["data"]["reason"], "response_too_large");
    assert_eq!(
        s.records(),
        [
            line(&s, "allowed", "big", None),
            format!("failed POST {} /mcp -> response_too_large", s.target),
        ]
    );
    let failed = s.proxy.entries().pop().unwrap();
    assert_eq!(
        failed.rule.as_deref(),
        Some("mcp.local.limits[0].max_response")
    );
    // A small answer passes under the same cap.
    let (status, body) = text(s.call(&mut client, 4, "echo").await).await;
    assert_eq!(status, 200, "{body}");
}

/// The events of an event-stream body, as (event, data) pairs.
fn events(body: &str) -> Vec<serde_json::Value> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let data: String = e
                .lines()
                .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
                .collect();
            json(&data)
        })
        .collect()
}

#[tokio::test]
async fn an_event_stream_over_the_cap_ends_with_an_error_event_for_the_call() {
    let s = setup("      - {tool: \"*\", max_response: 4KiB}\n").await;
    let mut client = s.client().await;
    let response = s.call(&mut client, 5, "stream_big").await;
    // The head went out with the first event, before the stream grew past the cap.
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let (_, body) = text(response).await;
    let got = events(&body);
    assert_eq!(got.len(), 2, "{body}");
    assert_eq!(got[0]["method"], "notifications/progress");
    assert_eq!(got[1]["id"], 5);
    assert_eq!(got[1]["error"]["code"], -31012);
    assert_eq!(got[1]["error"]["data"]["reason"], "response_too_large");
    assert!(!body.contains("xxxx"), "part of the answer was passed on");
    s.wait_until_closed(1).await;
    assert_eq!(
        s.records(),
        [
            line(&s, "allowed", "stream_big", None),
            format!("failed POST {} /mcp -> response_too_large", s.target),
        ]
    );
}

#[tokio::test]
async fn an_event_stream_past_its_timeout_ends_with_an_error_event_for_the_call() {
    let s = setup("      - {tool: \"*\", timeout: 500ms}\n").await;
    let mut client = s.client().await;
    let started = Instant::now();
    let response = s.call(&mut client, 6, "stream_stall").await;
    assert_eq!(response.status(), 200);
    let (_, body) = text(response).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    let got = events(&body);
    assert_eq!(got.len(), 2, "{body}");
    assert_eq!(got[0]["method"], "notifications/progress");
    assert_eq!(got[1]["id"], 6);
    assert_eq!(got[1]["error"]["code"], -31011);
    assert_eq!(got[1]["error"]["data"]["reason"], "timeout");
    s.wait_until_closed(1).await;
    assert_eq!(
        s.records(),
        [
            line(&s, "allowed", "stream_stall", None),
            format!("failed POST {} /mcp -> timeout", s.target),
        ]
    );
    let failed = s.proxy.entries().pop().unwrap();
    assert_eq!(failed.rule.as_deref(), Some("mcp.local.limits[0].timeout"));
}

#[tokio::test]
async fn a_batch_over_the_rate_is_refused_whole() {
    let s = setup("      - {tool: \"*\", rate: 2/min}\n").await;
    let mut client = s.client().await;
    let batch = |ids: &[u64]| {
        let calls: Vec<_> = ids
            .iter()
            .map(|id| {
                serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "echo", "arguments": {}}})
            })
            .collect();
        Request::builder()
            .method("POST")
            .uri("/mcp")
            .header("host", &s.target)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(http_body_util::Full::new(Bytes::from(
                serde_json::Value::Array(calls).to_string(),
            )))
            .unwrap()
    };
    // Three calls, two tokens: the batch is refused and takes none of them.
    let response = client.send_request(batch(&[1, 2, 3])).await.unwrap();
    assert_eq!(response.status(), 429);
    let (_, body) = text(response).await;
    let replies = json(&body);
    let ids: Vec<_> = replies
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].clone())
        .collect();
    assert_eq!(ids, [1, 2, 3]);
    assert!(
        replies
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["error"]["data"]["reason"] == "rate_limited")
    );
    assert_eq!(s.script.calls(), 0);
    // Both tokens are still there.
    let response = client.send_request(batch(&[4, 5])).await.unwrap();
    let (status, body) = text(response).await;
    assert_eq!(status, 200, "{body}");
    let denied = line(&s, "denied", "echo", Some("rate_limited"));
    let allowed = line(&s, "allowed", "echo", None);
    assert_eq!(
        s.records(),
        [
            denied.clone(),
            denied.clone(),
            denied,
            allowed.clone(),
            allowed
        ]
    );
}

#[tokio::test]
async fn a_client_that_goes_away_gives_its_concurrency_slot_back() {
    let s = setup("      - {tool: \"*\", concurrency: 1}\n").await;
    let mut first = s.client().await;
    let streaming = s.call(&mut first, 1, "stream_stall").await;
    assert_eq!(streaming.status(), 200);
    let mut second = s.client().await;
    assert_eq!(s.call(&mut second, 2, "echo").await.status(), 429);
    // The agent hangs up in the middle of the answer.
    drop(streaming);
    drop(first);
    let started = Instant::now();
    for id in 3.. {
        let (status, body) = text(s.call(&mut second, id, "echo").await).await;
        if status == 200 {
            break;
        }
        assert_eq!(status, 429, "{body}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the slot was not given back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
