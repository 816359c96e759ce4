//! The proxy's limits and its life: fail closed when the audit log cannot be written, timeouts where a
//! peer can stall, the cap on concurrent connections, graceful shutdown, and the real audit writer.

mod common;

use bytes::Bytes;
use common::*;
use fenzi_policy::audit;
use fenzi_proxy::audit::writer::AuditWriter;
use fenzi_proxy::{Proxy, ProxyOptions};
use http_body_util::BodyExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

struct Setup {
    proxy: TestProxy,
    web: Upstream,
    echo: Upstream,
}

async fn setup(
    handler: Handler,
    sink: Arc<MemorySink>,
    tune: impl FnOnce(&mut ProxyOptions),
) -> Setup {
    let web = http_upstream(None, handler).await;
    let echo = echo_upstream().await;
    let network = Arc::new(plain_hosts_network(web.addr, echo.addr));
    let pki = TestPki::new();
    let mut opts = options(&pki);
    tune(&mut opts);
    let yaml = format!("version: 1\n{PLAIN_HOSTS_POLICY}");
    let proxy = start_proxy(policy(&yaml, None), opts, network, sink).await;
    Setup { proxy, web, echo }
}

#[tokio::test]
async fn when_the_audit_log_fails_nothing_is_forwarded() {
    let s = setup(hello(), MemorySink::failing(), |_| {}).await;
    let mut client = h1(TcpStream::connect(s.proxy.addr).await.unwrap()).await;
    let (status, body) = text(client.send_request(get("http://web.test/")).await.unwrap()).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("\"audit_unavailable\""), "{body}");
    let (_stream, status, _) = connect(s.proxy.addr, "echo.test:7000").await;
    assert_eq!(status, 503);
    // Denials too are answered 503 when they cannot be recorded.
    let (status, _) = text(client.send_request(get("http://evil.test/")).await.unwrap()).await;
    assert_eq!(status, 503);
    assert_eq!(s.web.connection_count(), 0);
    assert_eq!(s.echo.connection_count(), 0);
}

#[tokio::test]
async fn a_stalled_connect_to_upstream_times_out_as_502() {
    let s = setup(hello(), Arc::new(MemorySink::default()), |o| {
        o.connect_timeout = Duration::from_millis(200);
    })
    .await;
    let mut client = h1(TcpStream::connect(s.proxy.addr).await.unwrap()).await;
    let started = Instant::now();
    let (status, body) = text(client.send_request(get("http://slow.test/")).await.unwrap()).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("took longer than"), "{body}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_client_that_never_finishes_its_request_head_is_disconnected() {
    let s = setup(hello(), Arc::new(MemorySink::default()), |o| {
        o.header_read_timeout = Duration::from_millis(300);
    })
    .await;
    let mut stream = TcpStream::connect(s.proxy.addr).await.unwrap();
    stream
        .write_all(b"GET http://web.test/ HTTP/1.1\r\nHost: web")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut buf)).await;
    assert!(closed.is_ok(), "the proxy kept a stalled client open");
    assert_eq!(s.web.connection_count(), 0);
}

#[tokio::test]
async fn an_idle_tunnel_is_closed() {
    let s = setup(hello(), Arc::new(MemorySink::default()), |o| {
        o.idle_timeout = Duration::from_millis(300);
    })
    .await;
    let (mut stream, status, _) = connect(s.proxy.addr, "echo.test:7000").await;
    assert_eq!(status, 200);
    stream.write_all(b"ping").await.unwrap();
    let mut back = [0u8; 4];
    stream.read_exact(&mut back).await.unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the idle tunnel was not closed");
    assert!(rest.is_empty());
}

#[tokio::test]
async fn connections_beyond_the_cap_wait_for_a_free_slot() {
    // No eviction during the test: this is about waiting (eviction is in tests/capacity.rs).
    let s = setup(hello(), Arc::new(MemorySink::default()), |o| {
        o.max_connections = 1;
        o.eviction_grace = std::time::Duration::from_secs(60);
    })
    .await;
    let mut first = h1(TcpStream::connect(s.proxy.addr).await.unwrap()).await;
    let (status, _) = text(first.send_request(get("http://web.test/1")).await.unwrap()).await;
    assert_eq!(status, 200);

    let mut second = h1(TcpStream::connect(s.proxy.addr).await.unwrap()).await;
    let pending = tokio::spawn(async move {
        text(second.send_request(get("http://web.test/2")).await.unwrap()).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !pending.is_finished(),
        "a second connection was served while the cap was reached"
    );
    drop(first);
    let (status, body) = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .expect("served once the first connection closed")
        .unwrap();
    assert_eq!((status, body.as_str()), (200, "hello"));
}

#[tokio::test]
async fn shutdown_stops_accepting_and_lets_in_flight_requests_finish() {
    type Slot = Arc<Mutex<Option<mpsc::Sender<Bytes>>>>;
    let slot: Slot = Arc::new(Mutex::new(None));
    let handler: Handler = {
        let slot = slot.clone();
        Arc::new(move |_, _| {
            let (tx, rx) = mpsc::channel(4);
            *slot.lock().unwrap() = Some(tx);
            http::Response::builder()
                .status(200)
                .body(ChannelBody(rx).boxed_unsync())
                .unwrap()
        })
    };
    let mut s = setup(handler, Arc::new(MemorySink::default()), |_| {}).await;
    let mut client = h1(TcpStream::connect(s.proxy.addr).await.unwrap()).await;
    let response = client
        .send_request(get("http://web.test/slow"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    s.proxy.shutdown();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        TcpStream::connect(s.proxy.addr).await.is_err(),
        "the proxy still accepts connections after shutdown began"
    );
    let upstream_tx = slot.lock().unwrap().take().unwrap();
    upstream_tx
        .send(Bytes::from_static(b"finished"))
        .await
        .unwrap();
    drop(upstream_tx);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "finished");
    let cut = tokio::time::timeout(Duration::from_secs(5), s.proxy.done.take().unwrap())
        .await
        .expect("serve returns once in-flight work is done")
        .unwrap();
    assert_eq!(cut, 0);
}

#[tokio::test]
async fn shutdown_cuts_what_does_not_finish_within_the_drain_time() {
    let mut s = setup(hello(), Arc::new(MemorySink::default()), |o| {
        o.drain_timeout = Duration::from_millis(200);
    })
    .await;
    // A pass-through tunnel that stays open.
    let (_stream, status, _) = connect(s.proxy.addr, "echo.test:7000").await;
    assert_eq!(status, 200);
    s.proxy.shutdown();
    let cut = tokio::time::timeout(Duration::from_secs(5), s.proxy.done.take().unwrap())
        .await
        .expect("serve returns after the drain time")
        .unwrap();
    assert_eq!(cut, 1);
}

#[tokio::test]
async fn the_audit_writer_records_a_verifiable_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let writer = AuditWriter::open(&path, "0123456789abcdef").unwrap();
    let web = http_upstream(None, hello()).await;
    let network = Arc::new(
        FakeNetwork::default()
            .name("web.test", &[WEB_IP])
            .route(&format!("{WEB_IP}:80"), web.addr),
    );
    let pki = TestPki::new();
    let policy = policy("version: 1\nhosts:\n  - web.test:80\n", None);
    let proxy = Proxy::with_network(policy, Arc::new(writer), options(&pki), network).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = proxy.clone();
    let done = tokio::spawn(async move {
        serving
            .serve(listener, async {
                let _ = stopped.await;
            })
            .await
            .unwrap()
    });

    let mut client = h1(TcpStream::connect(addr).await.unwrap()).await;
    assert_eq!(
        client
            .send_request(get("http://web.test/a"))
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        client
            .send_request(get("http://evil.test/b"))
            .await
            .unwrap()
            .status(),
        403
    );
    drop(client);
    let _ = stop.send(());
    done.await.unwrap();
    proxy.flush_audit().await.unwrap();

    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&[u8]> = text.lines().map(str::as_bytes).collect();
    let head = std::fs::read_to_string(fenzi_proxy::audit::writer::head_path(&path)).unwrap();
    let verified =
        audit::verify(lines.iter().copied(), audit::Head::parse(&head).as_ref()).unwrap();
    assert_eq!(verified.records, 2);
    let records: Vec<audit::AuditRecord> = lines
        .iter()
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(records[0].decision, audit::Outcome::Allowed);
    assert_eq!(records[0].host, "web.test");
    assert_eq!(records[0].path.as_deref(), Some("/a"));
    assert_eq!(records[1].decision, audit::Outcome::Denied);
    assert_eq!(records[1].reason.as_deref(), Some("host_not_allowed"));
    assert_eq!(records[1].session, "0123456789abcdef");
}
