//! `--metrics` against real traffic: a live proxy writing the real hash-chained log, a plain host
//! allowed and one denied, a host whose upstream refuses the connection, and an intercepted MCP
//! server with allowed and denied tool calls, some decided while another call is in flight (their
//! records staged and written together). The metrics listener is scraped over loopback, and
//! its text is checked against the log: `fenzi_decisions_total` per (decision, reason, server)
//! equals the log's own counts, and each histogram counted every request that went through its
//! phase.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const WEB_IP: &str = "93.184.216.50";
const DEAD_IP: &str = "93.184.216.51";

/// Sends `request` (a whole HTTP/1.1 request, `Connection: close`) to `addr` and returns the
/// status and the body.
async fn raw(addr: SocketAddr, request: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).await.unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_string(), body.to_string())
}

async fn scrape(addr: SocketAddr) -> String {
    let (status, head, body) = raw(
        addr,
        "GET /metrics HTTP/1.1\r\nHost: metrics\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    body
}

/// The samples of the text: `name{labels}` → value, labels as printed.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (key, value) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad line {l:?}"));
            (key.to_string(), value.parse().unwrap())
        })
        .collect()
}

/// `fenzi_decisions_total`'s samples as (decision, reason, server) → count.
fn decisions(samples: &BTreeMap<String, f64>) -> BTreeMap<(String, String, String), u64> {
    let mut out = BTreeMap::new();
    for (key, value) in samples {
        let Some(labels) = key.strip_prefix("fenzi_decisions_total{") else {
            continue;
        };
        let labels = labels.strip_suffix('}').unwrap();
        let mut map = BTreeMap::new();
        for pair in labels.split(',') {
            let (k, v) = pair.split_once('=').unwrap();
            map.insert(k.to_string(), v.trim_matches('"').to_string());
        }
        assert_eq!(map.len(), 3, "{key}");
        out.insert(
            (
                map["decision"].clone(),
                map["reason"].clone(),
                map["server"].clone(),
            ),
            *value as u64,
        );
    }
    out
}

/// The log's records as (decision, reason or "", server or "") → count.
fn logged(path: &std::path::Path) -> (BTreeMap<(String, String, String), u64>, u64) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = BTreeMap::new();
    let mut lines = 0;
    for line in text.lines() {
        lines += 1;
        let record: serde_json::Value = serde_json::from_str(line).unwrap();
        let field = |name: &str| record[name].as_str().unwrap_or("").to_string();
        *out.entry((field("decision"), field("reason"), field("server")))
            .or_insert(0) += 1;
    }
    (out, lines)
}

#[tokio::test]
async fn the_counts_agree_with_the_audit_log() {
    let pki = TestPki::new();
    let mcp = http_upstream(Some(pki.server_config(&["127.0.0.1"])), mcp_handler()).await;
    let web = http_upstream(None, hello()).await;
    // A port nobody listens on: the upstream refuses the connection.
    let dead = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let network = Arc::new(
        FakeNetwork::default()
            .name("web.test", &[WEB_IP])
            .route(&format!("{WEB_IP}:80"), web.addr)
            .name("dead.test", &[DEAD_IP])
            .route(&format!("{DEAD_IP}:80"), dead),
    );
    let target = format!("127.0.0.1:{}", mcp.port());
    let yaml = format!(
        "version: 1\nhosts:\n  - web.test:80\n  - dead.test:80\nmcp:\n  local:\n    url: https://{target}/mcp\n    tools:\n      allow: [echo]\n      deny: [delete_everything]\n"
    );
    let sink = Arc::new(FileSink::temp("metrics-test"));
    let proxy = fenzi_proxy::Proxy::builder(policy(&yaml, None), sink.clone())
        .options(options(&pki))
        .network(network)
        .metrics()
        .build()
        .unwrap();
    let metrics_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics_addr = metrics_listener.local_addr().unwrap();
    tokio::spawn(fenzi_proxy::metrics::serve(
        metrics_listener,
        proxy.metrics().unwrap().clone(),
    ));
    let p = serve_proxy(proxy, sink.clone()).await;

    // Before any traffic: nothing counted, every histogram empty.
    let before = samples(&scrape(metrics_addr).await);
    assert!(decisions(&before).is_empty(), "{before:?}");
    assert_eq!(before["fenzi_upstream_seconds_count"], 0.0);

    // Plain HTTP: three allowed, one host not allowed, one whose upstream refuses.
    let mut plain = h1(TcpStream::connect(p.addr).await.unwrap()).await;
    for _ in 0..3 {
        let (status, body) = text(plain.send_request(get("http://web.test/")).await.unwrap()).await;
        assert_eq!((status, body.as_str()), (200, "hello"));
    }
    let (status, _) = text(plain.send_request(get("http://nope.test/")).await.unwrap()).await;
    assert_eq!(status, 403);
    let (status, _) = text(plain.send_request(get("http://dead.test/")).await.unwrap()).await;
    assert_eq!(status, 502);
    // CONNECT to a host not allowed.
    let (_, status, head) = connect(p.addr, "nope.test:443").await;
    assert_eq!(status, 403, "{head}");

    // MCP: a call held in flight in its own tunnel (its head sent, half its body), so that the
    // calls below are decided while another request is in flight and take the path that stages
    // their records and writes them together. Each record still counts as one append.
    let ca = p.proxy.ca().cert_der().clone();
    let (stream, status, head) = connect(p.addr, &target).await;
    assert_eq!(status, 200, "{head}");
    let mut held = tls_over(stream, &ca, "127.0.0.1", &[b"http/1.1"])
        .await
        .unwrap();
    let body = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"text":"held"}}}"#;
    let (first, rest) = body.split_at(body.len() / 2);
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {target}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{first}",
        body.len()
    );
    held.write_all(request.as_bytes()).await.unwrap();
    held.flush().await.unwrap();
    // Time for the proxy to read the head and dispatch the request.
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Two allowed calls and one denied, in another intercepted tunnel.
    let (stream, status, head) = connect(p.addr, &target).await;
    assert_eq!(status, 200, "{head}");
    let tls = tls_over(stream, &ca, "127.0.0.1", &[b"http/1.1"])
        .await
        .unwrap();
    let mut client = h1(tls).await;
    for (id, tool, expected) in [
        (1, "echo", 200),
        (2, "delete_everything", 403),
        (3, "echo", 200),
    ] {
        let response = client
            .send_request(tools_call(&target, "/mcp", id, tool))
            .await
            .unwrap();
        let (status, body) = text(response).await;
        assert_eq!(status, expected, "{tool}: {body}");
    }
    held.write_all(rest.as_bytes()).await.unwrap();
    held.flush().await.unwrap();
    let (status, head) = read_head(&mut held).await;
    assert_eq!(status, 200, "{head}");

    // Every record is written before its answer, so the log is complete now.
    let (log, lines) = logged(sink.path());
    assert_eq!(lines, sink.records() as u64);
    let after = samples(&scrape(metrics_addr).await);
    assert_eq!(decisions(&after), log, "\n{after:#?}");
    // What the traffic above must have logged, so the comparison is not between two empty maps.
    let has = |d: &str, r: &str, s: &str| log.get(&(d.into(), r.into(), s.into())).copied();
    assert_eq!(has("allowed", "", ""), Some(4)); // web.test ×3, dead.test
    assert_eq!(has("denied", "host_not_allowed", ""), Some(2));
    assert_eq!(has("failed", "upstream_error", ""), Some(1));
    assert_eq!(has("allowed", "", "local"), Some(5)); // two CONNECTs, the held call and two calls
    assert_eq!(has("denied", "policy_denied", "local"), Some(1));

    // Each histogram counted each request through its phase.
    assert_eq!(after["fenzi_audit_append_seconds_count"], lines as f64);
    // Decided: the four MCP requests (plain bodies stream, nothing is decided about them).
    assert_eq!(after["fenzi_decide_seconds_count"], 4.0);
    // Sent upstream: web.test ×3, dead.test, the held call and two allowed calls.
    assert_eq!(after["fenzi_upstream_seconds_count"], 7.0);
    assert_eq!(
        after["fenzi_upstream_seconds_bucket{le=\"+Inf\"}"],
        after["fenzi_upstream_seconds_count"]
    );
    assert!(after["fenzi_upstream_seconds_sum"] > 0.0);
    assert_eq!(after["fenzi_upstream_errors_total{kind=\"connect\"}"], 1.0);
    let errors: f64 = after
        .iter()
        .filter(|(k, _)| k.starts_with("fenzi_upstream_errors_total{"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(errors, 1.0);
    // No export registered its lag: the gauge is absent.
    assert!(!after.keys().any(|k| k.starts_with("fenzi_export_lag")));
}

#[tokio::test]
async fn the_listener_serves_only_get_and_head_of_metrics() {
    let sink = Arc::new(MemorySink::default());
    let proxy =
        fenzi_proxy::Proxy::builder(policy("version: 1\nhosts:\n  - web.test:80\n", None), sink)
            .metrics()
            .build()
            .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(fenzi_proxy::metrics::serve(
        listener,
        proxy.metrics().unwrap().clone(),
    ));
    let close = "Host: m\r\nConnection: close\r\n\r\n";
    let (status, _, _) = raw(addr, &format!("GET / HTTP/1.1\r\n{close}")).await;
    assert_eq!(status, 404);
    let (status, _, _) = raw(addr, &format!("GET /metrics/x HTTP/1.1\r\n{close}")).await;
    assert_eq!(status, 404);
    let (status, head, _) = raw(
        addr,
        &format!("POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n{close}"),
    )
    .await;
    assert_eq!(status, 405);
    assert!(
        head.to_ascii_lowercase().contains("allow: get, head"),
        "{head}"
    );
    let (status, head, body) = raw(addr, &format!("HEAD /metrics HTTP/1.1\r\n{close}")).await;
    assert_eq!(status, 200, "{head}");
    assert!(body.is_empty(), "{body}");
    // A scraper that connects and says nothing holds only its own connection.
    let _idle = TcpStream::connect(addr).await.unwrap();
    let body = tokio::time::timeout(Duration::from_secs(5), scrape(addr))
        .await
        .unwrap();
    assert!(
        body.contains("# TYPE fenzi_decisions_total counter"),
        "{body}"
    );
}

#[tokio::test]
async fn without_metrics_there_are_none() {
    let sink = Arc::new(MemorySink::default());
    let proxy =
        fenzi_proxy::Proxy::builder(policy("version: 1\nhosts:\n  - web.test:80\n", None), sink)
            .build()
            .unwrap();
    assert!(proxy.metrics().is_none());
}
