//! The session's pool of upstream connections: requests from different client connections reuse one
//! upstream connection, a pooled connection is only reused for an address the request's own admission
//! checked, and idle pooled connections are closed after `upstream_idle_timeout`.

mod common;

use common::*;
use fenzi_proxy::ProxyOptions;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

const POLICY: &str = "\
version: 1
hosts:
  - web.test:80
";

async fn start(network: Arc<FakeNetwork>, options: ProxyOptions) -> TestProxy {
    let sink = Arc::new(MemorySink::default());
    start_proxy(policy(POLICY, None), options, network, sink).await
}

/// One GET of `http://web.test/` on a new client connection; returns status and body.
async fn get_on_new_connection(proxy: SocketAddr) -> (u16, String) {
    let mut client = h1(TcpStream::connect(proxy).await.unwrap()).await;
    text(client.send_request(get("http://web.test/")).await.unwrap()).await
}

#[tokio::test]
async fn requests_from_different_client_connections_share_one_upstream_connection() {
    let upstream = http_upstream(None, hello()).await;
    let network = FakeNetwork::default()
        .name("web.test", &["93.184.216.34"])
        .route("93.184.216.34:80", upstream.addr);
    let session = start(Arc::new(network), ProxyOptions::default()).await;

    for _ in 0..3 {
        assert_eq!(
            get_on_new_connection(session.addr).await,
            (200, "hello".to_string())
        );
    }
    assert_eq!(
        upstream.connection_count(),
        1,
        "the upstream connection is reused"
    );
    // Reuse changes nothing about decisions: one record per request.
    assert_eq!(session.summaries(), vec!["allowed GET web.test:80 /"; 3]);
}

#[tokio::test]
async fn a_pooled_connection_is_not_reused_once_the_name_resolves_elsewhere() {
    let first = http_upstream(None, Arc::new(|_, _| respond(200, "text/plain", "first"))).await;
    let second = http_upstream(None, Arc::new(|_, _| respond(200, "text/plain", "second"))).await;
    let network = Arc::new(
        FakeNetwork::default()
            .name("web.test", &["93.184.216.34"])
            .route("93.184.216.34:80", first.addr)
            .route("93.184.216.35:80", second.addr),
    );
    let session = start(network.clone(), ProxyOptions::default()).await;

    assert_eq!(get_on_new_connection(session.addr).await.1, "first");
    // The name now resolves to another address: the idle connection to the old one is not used.
    network.set_name("web.test", &["93.184.216.35"]);
    assert_eq!(get_on_new_connection(session.addr).await.1, "second");
    assert_eq!(get_on_new_connection(session.addr).await.1, "second");
    assert_eq!(
        (first.connection_count(), second.connection_count()),
        (1, 1)
    );
    // And back: the first connection, still idle in the pool, serves it again.
    network.set_name("web.test", &["93.184.216.34"]);
    assert_eq!(get_on_new_connection(session.addr).await.1, "first");
    assert_eq!(first.connection_count(), 1);
}

#[tokio::test]
async fn idle_pooled_connections_are_closed_after_the_idle_timeout() {
    let upstream = http_upstream(None, hello()).await;
    let network = FakeNetwork::default()
        .name("web.test", &["93.184.216.34"])
        .route("93.184.216.34:80", upstream.addr);
    let options = ProxyOptions {
        upstream_idle_timeout: Duration::from_millis(300),
        ..ProxyOptions::default()
    };
    let session = start(Arc::new(network), options).await;

    assert_eq!(get_on_new_connection(session.addr).await.0, 200);
    assert_eq!(get_on_new_connection(session.addr).await.0, 200);
    assert_eq!(upstream.connection_count(), 1);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // The idle connection was closed: the next request dials again.
    assert_eq!(get_on_new_connection(session.addr).await.0, 200);
    assert_eq!(upstream.connection_count(), 2);
}

/// A connection carrying a long response body is busy, not idle: once the body ends it is idle
/// from then, so it is still there for the next request well within the idle timeout.
#[tokio::test]
async fn idle_time_starts_when_a_long_response_ends_not_when_it_began() {
    let handler: Handler = Arc::new(|_, _| {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            let _ = tx.send(bytes::Bytes::from_static(b"first ")).await;
            // Longer than the idle timeout, with several sweeps while it streams.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let _ = tx.send(bytes::Bytes::from_static(b"last")).await;
        });
        http::Response::builder()
            .status(200)
            .body(http_body_util::BodyExt::boxed_unsync(ChannelBody(rx)))
            .unwrap()
    });
    let upstream = http_upstream(None, handler).await;
    let network = FakeNetwork::default()
        .name("web.test", &["93.184.216.34"])
        .route("93.184.216.34:80", upstream.addr);
    let options = ProxyOptions {
        // Swept every 150 ms.
        upstream_idle_timeout: Duration::from_millis(600),
        ..ProxyOptions::default()
    };
    let session = start(Arc::new(network), options).await;
    assert_eq!(
        get_on_new_connection(session.addr).await,
        (200, "first last".to_string())
    );
    // Past a sweep or two, well inside the idle timeout counted from the body's end.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(get_on_new_connection(session.addr).await.0, 200);
    assert_eq!(
        upstream.connection_count(),
        1,
        "the connection was closed as idle right after its long response"
    );
}

#[tokio::test]
async fn no_pooling_when_the_cap_is_zero() {
    let upstream = http_upstream(None, hello()).await;
    let network = FakeNetwork::default()
        .name("web.test", &["93.184.216.34"])
        .route("93.184.216.34:80", upstream.addr);
    let options = ProxyOptions {
        max_idle_upstream: 0,
        ..ProxyOptions::default()
    };
    let session = start(Arc::new(network), options).await;
    for _ in 0..2 {
        assert_eq!(get_on_new_connection(session.addr).await.0, 200);
    }
    assert_eq!(upstream.connection_count(), 2);
}

/// A raw HTTP/1.1 upstream that answers its very first request with `first` (which may hold more than
/// one response) and 50 ms later sends the `late` bytes on the same connection; every later request,
/// on any connection, gets `honest`.
async fn desync_upstream(first: &'static [u8], late: &'static [u8]) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let answered = answered.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let n = match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    seen.extend_from_slice(&buf[..n]);
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        let nth = answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let reply: &[u8] = if nth == 0 {
                            first
                        } else {
                            b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nhonest"
                        };
                        if stream.write_all(reply).await.is_err() {
                            return;
                        }
                        if nth == 0 && !late.is_empty() {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            let _ = stream.write_all(late).await;
                        }
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_second_response_smuggled_on_a_pooled_connection_never_answers_another_request() {
    const FIRST: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst";
    const SMUGGLED: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled";
    let both: &'static [u8] = Box::leak([FIRST, SMUGGLED].concat().into_boxed_slice());
    // Sent together with the first response, and sent a moment later while the connection is idle.
    for (first, late) in [(both, &b""[..]), (FIRST, SMUGGLED)] {
        let upstream = desync_upstream(first, late).await;
        let network = FakeNetwork::default()
            .name("web.test", &["93.184.216.34"])
            .route("93.184.216.34:80", upstream);
        let session = start(Arc::new(network), ProxyOptions::default()).await;
        assert_eq!(get_on_new_connection(session.addr).await.1, "first");
        tokio::time::sleep(Duration::from_millis(150)).await;
        for _ in 0..2 {
            let (status, body) = get_on_new_connection(session.addr).await;
            assert_ne!(
                body, "smuggled",
                "a stray response answered another client's request"
            );
            assert_eq!(status, 200);
            assert_eq!(body, "honest");
        }
    }
}
