//! The session's pool of upstream connections: requests from different client connections reuse one
//! upstream connection, a pooled connection is only reused for an address the request's own admission
//! checked, and idle pooled connections are closed after `upstream_idle_timeout`.

mod common;

use bytes::Bytes;
use common::*;
use fenzi_proxy::Network;
use fenzi_proxy::audit_sink::BoxFuture;
use fenzi_proxy::{Proxy, ProxyOptions};
use http::Request;
use http_body_util::Full;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

const POLICY: &str = "\
version: 1
hosts:
  - web.test:80
";

/// Resolves `web.test` to whatever the test set last, and connects each public test address to the
/// loopback server the test routed it to.
#[derive(Default)]
struct SwitchingNetwork {
    answer: Mutex<Vec<IpAddr>>,
    routes: Mutex<Vec<(SocketAddr, SocketAddr)>>,
}

impl SwitchingNetwork {
    fn answer(&self, ip: &str) {
        *self.answer.lock().unwrap() = vec![ip.parse().unwrap()];
    }
    fn route(&self, from: &str, to: SocketAddr) {
        self.routes
            .lock()
            .unwrap()
            .push((from.parse().unwrap(), to));
    }
}

impl Network for SwitchingNetwork {
    fn resolve<'a>(&'a self, host: &'a str, _port: u16) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            if host != "web.test" {
                return Err(io::Error::new(io::ErrorKind::NotFound, "no such test name"));
            }
            Ok(self.answer.lock().unwrap().clone())
        })
    }
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        let routes = self.routes.lock().unwrap();
        let to = routes.iter().find(|(from, _)| *from == addr).map(|r| r.1);
        Box::pin(async move {
            match to {
                Some(to) => TcpStream::connect(to).await,
                None => Err(io::Error::new(io::ErrorKind::ConnectionRefused, "no route")),
            }
        })
    }
}

struct Session {
    addr: SocketAddr,
    sink: Arc<MemorySink>,
    _stop: oneshot::Sender<()>,
}

async fn start(network: Arc<SwitchingNetwork>, options: ProxyOptions) -> Session {
    let sink = Arc::new(MemorySink::default());
    let proxy = Proxy::with_network(policy(POLICY, None), sink.clone(), options, network).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = proxy
            .serve(listener, async {
                let _ = stopped.await;
            })
            .await;
    });
    Session {
        addr,
        sink,
        _stop: stop,
    }
}

/// One GET of `http://web.test/` on a new client connection; returns status and body.
async fn get_on_new_connection(proxy: SocketAddr) -> (u16, String) {
    let mut client = h1(TcpStream::connect(proxy).await.unwrap()).await;
    let req = Request::builder()
        .uri("http://web.test/")
        .header("host", "web.test")
        .body(Full::new(Bytes::new()))
        .unwrap();
    text(client.send_request(req).await.unwrap()).await
}

#[tokio::test]
async fn requests_from_different_client_connections_share_one_upstream_connection() {
    let upstream = http_upstream(None, hello()).await;
    let network = Arc::new(SwitchingNetwork::default());
    network.answer("93.184.216.34");
    network.route("93.184.216.34:80", upstream.addr);
    let session = start(network, ProxyOptions::default()).await;

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
    let records: Vec<String> = session.sink.entries().iter().map(summary).collect();
    assert_eq!(records, vec!["allowed GET web.test:80 /"; 3]);
}

#[tokio::test]
async fn a_pooled_connection_is_not_reused_once_the_name_resolves_elsewhere() {
    let first = http_upstream(None, Arc::new(|_, _| respond(200, "text/plain", "first"))).await;
    let second = http_upstream(None, Arc::new(|_, _| respond(200, "text/plain", "second"))).await;
    let network = Arc::new(SwitchingNetwork::default());
    network.route("93.184.216.34:80", first.addr);
    network.route("93.184.216.35:80", second.addr);
    let session = start(network.clone(), ProxyOptions::default()).await;

    network.answer("93.184.216.34");
    assert_eq!(get_on_new_connection(session.addr).await.1, "first");
    // The name now resolves to another address: the idle connection to the old one is not used.
    network.answer("93.184.216.35");
    assert_eq!(get_on_new_connection(session.addr).await.1, "second");
    assert_eq!(get_on_new_connection(session.addr).await.1, "second");
    assert_eq!(
        (first.connection_count(), second.connection_count()),
        (1, 1)
    );
    // And back: the first connection, still idle in the pool, serves it again.
    network.answer("93.184.216.34");
    assert_eq!(get_on_new_connection(session.addr).await.1, "first");
    assert_eq!(first.connection_count(), 1);
}

#[tokio::test]
async fn idle_pooled_connections_are_closed_after_the_idle_timeout() {
    let upstream = http_upstream(None, hello()).await;
    let network = Arc::new(SwitchingNetwork::default());
    network.answer("93.184.216.34");
    network.route("93.184.216.34:80", upstream.addr);
    let options = ProxyOptions {
        upstream_idle_timeout: Duration::from_millis(300),
        ..ProxyOptions::default()
    };
    let session = start(network, options).await;

    assert_eq!(get_on_new_connection(session.addr).await.0, 200);
    assert_eq!(get_on_new_connection(session.addr).await.0, 200);
    assert_eq!(upstream.connection_count(), 1);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // The idle connection was closed: the next request dials again.
    assert_eq!(get_on_new_connection(session.addr).await.0, 200);
    assert_eq!(upstream.connection_count(), 2);
}

#[tokio::test]
async fn no_pooling_when_the_cap_is_zero() {
    let upstream = http_upstream(None, hello()).await;
    let network = Arc::new(SwitchingNetwork::default());
    network.answer("93.184.216.34");
    network.route("93.184.216.34:80", upstream.addr);
    let options = ProxyOptions {
        max_idle_upstream: 0,
        ..ProxyOptions::default()
    };
    let session = start(network, options).await;
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
        let network = Arc::new(SwitchingNetwork::default());
        network.answer("93.184.216.34");
        network.route("93.184.216.34:80", upstream);
        let session = start(network, ProxyOptions::default()).await;
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
