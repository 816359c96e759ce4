//! The connection cap under pressure, over real loopback sockets: when every slot is taken, a new
//! client is served once the connection idle longest gives way (idle tunnels, passed through or
//! intercepted, idle keep-alive connections, clients dribbling a request head); a connection moving
//! bytes and a request in flight are never the ones closed; closing one writes no audit record.

mod common;

use common::*;
use fenzi_proxy::ProxyOptions;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// The cap the tests fill.
const MAX: usize = 8;
/// Generous bound for "promptly" on a loaded CI machine; the grace is 1 s.
const PROMPTLY: Duration = Duration::from_secs(10);

struct Setup {
    proxy: TestProxy,
    mcp: Upstream,
}

async fn setup(tune: impl FnOnce(&mut ProxyOptions)) -> Setup {
    let pki = TestPki::new();
    let web = http_upstream(None, Arc::new(|_, _| respond(200, "text/plain", "hello"))).await;
    let echo = echo_upstream().await;
    let mcp = http_upstream(Some(pki.server_config(&["127.0.0.1"])), mcp_handler()).await;
    let network = Arc::new(plain_hosts_network(web.addr, echo.addr));
    let mut opts = options(&pki);
    opts.max_connections = MAX;
    tune(&mut opts);
    let yaml = format!(
        "version: 1\n{PLAIN_HOSTS_POLICY}mcp:\n  local:\n    url: https://127.0.0.1:{}/mcp\n    tools:\n      allow: [echo]\n",
        mcp.port()
    );
    let proxy = start_proxy(
        policy(&yaml, None),
        opts,
        network,
        Arc::new(MemorySink::default()),
    )
    .await;
    Setup { proxy, mcp }
}

/// A passed-through tunnel to the echo server, checked with one round trip.
async fn echo_tunnel(proxy: &TestProxy) -> TcpStream {
    let (mut stream, status, head) = connect(proxy.addr, "echo.test:7000").await;
    assert_eq!(status, 200, "{head}");
    assert!(echoes(&mut stream).await, "a new tunnel echoes");
    stream
}

/// Whether a round trip through `stream` (to an echo server) still works.
async fn echoes<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) -> bool {
    if stream.write_all(b"ping").await.is_err() {
        return false;
    }
    let mut back = [0u8; 4];
    matches!(
        tokio::time::timeout(PROMPTLY, stream.read_exact(&mut back)).await,
        Ok(Ok(_)) if &back == b"ping"
    )
}

/// Whether the proxy has closed `stream` (end of stream or reset) within `within`.
async fn closed<S: AsyncRead + Unpin>(stream: &mut S, within: Duration) -> bool {
    let mut buf = [0u8; 64];
    match tokio::time::timeout(within, stream.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => true,
        Ok(Ok(n)) => panic!("unexpected bytes from the proxy: {:?}", &buf[..n]),
        Err(_) => false,
    }
}

/// One plain-HTTP request on a new connection: its status, how long it took, and the connection,
/// which keeps its slot (idle) for as long as the caller holds it.
async fn served(proxy: &TestProxy) -> (u16, Duration, Sender) {
    let started = Instant::now();
    let stream = TcpStream::connect(proxy.addr).await.unwrap();
    let mut client = h1(stream).await;
    let response = tokio::time::timeout(PROMPTLY, client.send_request(get("http://web.test/")))
        .await
        .expect("the new client was served promptly")
        .unwrap();
    let (status, body) = text(response).await;
    assert_eq!(body, "hello");
    (status, started.elapsed(), client)
}

/// Whether the client connection `sender` is closed within `within`.
async fn sender_closed(sender: &Sender, within: Duration) -> bool {
    tokio::time::timeout(within, async {
        while !sender.is_closed() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .is_ok()
}

#[tokio::test]
async fn idle_tunnels_give_way_to_a_new_client_longest_idle_first() {
    let s = setup(|_| {}).await;
    // Fill every slot: passed-through tunnels, and intercepted ones (TLS with the proxy, one call).
    let mut tunnels = Vec::new();
    for _ in 0..MAX - 2 {
        tunnels.push(echo_tunnel(&s.proxy).await);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let target = format!("127.0.0.1:{}", s.mcp.port());
    let mut intercepted = Vec::new();
    for id in 0..2 {
        let (stream, status, _) = connect(s.proxy.addr, &target).await;
        assert_eq!(status, 200);
        let ca = s.proxy.proxy.ca().cert_der().clone();
        let tls = tls_over(stream, &ca, "127.0.0.1", &[b"http/1.1"])
            .await
            .unwrap();
        let (mut client, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .unwrap();
        let conn = tokio::spawn(conn);
        let response = client
            .send_request(tools_call(&target, "/mcp", id, "echo"))
            .await
            .unwrap();
        assert_eq!(text(response).await.0, 200);
        intercepted.push((client, conn));
    }
    // Nothing is evicted before the grace: the first tunnels are still fine.
    assert!(echoes(&mut tunnels[1]).await);
    tokio::time::sleep(Duration::from_millis(1200)).await;

    // Tunnel 0 has been idle longest: a new client takes its slot (and keeps it).
    let (status, took, _first) = served(&s.proxy).await;
    assert_eq!(status, 200);
    eprintln!("served at capacity in {took:?}");
    assert!(
        closed(&mut tunnels[0], PROMPTLY).await,
        "tunnel 0 was closed"
    );
    // Tunnel 1 was pinged after tunnel 2..5 were opened, so tunnel 2 is next.
    let (status, _, _second) = served(&s.proxy).await;
    assert_eq!(status, 200);
    assert!(
        closed(&mut tunnels[2], PROMPTLY).await,
        "tunnel 2 was closed"
    );
    for i in [1, 3, 4, 5] {
        assert!(echoes(&mut tunnels[i]).await, "tunnel {i} was left alone");
    }
    // Every passed-through tunnel has moved bytes since; the intercepted ones are idle longest now.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for i in [1, 3, 4, 5] {
        assert!(echoes(&mut tunnels[i]).await);
    }
    let (status, _, _third) = served(&s.proxy).await;
    assert_eq!(status, 200);
    let (_, conn) = intercepted.remove(0);
    let ended = tokio::time::timeout(PROMPTLY, conn).await;
    assert!(ended.is_ok(), "the idle intercepted tunnel was closed");
    for i in [1, 3, 4, 5] {
        assert!(echoes(&mut tunnels[i]).await, "tunnel {i} was left alone");
    }
    // No audit record for an eviction: only the decisions (6 + 2 CONNECTs, 2 calls, 3 GETs).
    let summaries = s.proxy.summaries();
    assert_eq!(summaries.len(), 13, "{summaries:#?}");
    assert!(
        summaries.iter().all(|s| s.starts_with("allowed ")),
        "{summaries:#?}"
    );
}

#[tokio::test]
async fn a_tunnel_moving_bytes_is_never_evicted() {
    let s = setup(|_| {}).await;
    // The oldest connection, and the one that keeps talking.
    let mut active = echo_tunnel(&s.proxy).await;
    let stop = Arc::new(AtomicBool::new(false));
    let round_trips = Arc::new(AtomicU64::new(0));
    let talking = {
        let (stop, round_trips) = (stop.clone(), round_trips.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if !echoes(&mut active).await {
                    return false;
                }
                round_trips.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            true
        })
    };
    let mut idle = Vec::new();
    for _ in 1..MAX {
        idle.push(echo_tunnel(&s.proxy).await);
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // Twice as many new clients as there are slots: every idle connection goes, then the new
    // clients' own idle connections (kept open here) in turn; the active tunnel stays.
    let mut kept = Vec::new();
    for _ in 0..2 * MAX {
        let stream = TcpStream::connect(s.proxy.addr).await.unwrap();
        let mut client = h1(stream).await;
        let response = tokio::time::timeout(PROMPTLY, client.send_request(get("http://web.test/")))
            .await
            .expect("served promptly")
            .unwrap();
        assert_eq!(text(response).await.0, 200);
        kept.push(client);
    }
    for (i, tunnel) in idle.iter_mut().enumerate() {
        assert!(closed(tunnel, PROMPTLY).await, "idle tunnel {i} was closed");
    }
    stop.store(true, Ordering::Relaxed);
    assert!(
        talking.await.unwrap(),
        "the active tunnel's round trips failed"
    );
    assert!(round_trips.load(Ordering::Relaxed) >= 10);
}

#[tokio::test]
async fn slowloris_clients_give_way_and_get_no_record() {
    let s = setup(|_| {}).await;
    // Every slot held by a client sending its request head a byte at a time.
    let head = b"GET http://web.test/ HTTP/1.1\r\nHost: web.test\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let cut = Arc::new(AtomicU64::new(0));
    let mut dribblers = Vec::new();
    for _ in 0..MAX {
        let mut stream = TcpStream::connect(s.proxy.addr).await.unwrap();
        let cut = cut.clone();
        dribblers.push(tokio::spawn(async move {
            for byte in head.iter().take(head.len() - 1) {
                if stream.write_all(&[*byte]).await.is_err() {
                    break;
                }
                let mut buf = [0u8; 1];
                match tokio::time::timeout(Duration::from_millis(250), stream.read(&mut buf)).await
                {
                    Ok(Ok(0)) | Ok(Err(_)) => break,
                    Ok(Ok(_)) => panic!("the proxy answered an incomplete head"),
                    Err(_) => {}
                }
            }
            cut.fetch_add(1, Ordering::Relaxed);
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // They keep dribbling (a byte every 250 ms), yet a new client is served once the grace is over.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, took, first) = served(&s.proxy).await;
    assert_eq!(status, 200);
    eprintln!("served past {MAX} slowloris clients in {took:?}");
    let mut kept = vec![first];
    // Another, and another: each takes a slowloris client's slot, never waiting for the 30 s head
    // timeout.
    for _ in 0..3 {
        let (status, _, client) = served(&s.proxy).await;
        assert_eq!(status, 200);
        kept.push(client);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(cut.load(Ordering::Relaxed) >= 4);
    for dribbler in dribblers {
        dribbler.abort();
    }
    // An incomplete head is no request: no decision, no record. Only the four GETs are recorded.
    assert_eq!(
        s.proxy.summaries(),
        vec!["allowed GET web.test:80 /"; 4],
        "evictions wrote records"
    );
}

#[tokio::test]
async fn a_request_in_flight_is_never_evicted() {
    let s = setup(|o| {
        o.max_connections = 2;
        o.connect_timeout = Duration::from_secs(3);
    })
    .await;
    // A: a request whose upstream never answers the dial; it is silent from here on, and the
    // connection idle longest by bytes, but it is in flight.
    let stream = TcpStream::connect(s.proxy.addr).await.unwrap();
    let mut a = h1(stream).await;
    let in_flight = tokio::spawn(async move {
        let response = a.send_request(get("http://slow.test/")).await;
        text(response.expect("the in-flight request was answered, not cut")).await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // B: answered, then idle.
    let stream = TcpStream::connect(s.proxy.addr).await.unwrap();
    let mut b = h1(stream).await;
    let response = b.send_request(get("http://web.test/")).await.unwrap();
    assert_eq!(text(response).await.0, 200);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // C takes B's slot, not A's.
    let (status, _, _c) = served(&s.proxy).await;
    assert_eq!(status, 200);
    assert!(sender_closed(&b, PROMPTLY).await, "B was closed");
    let (status, body) = tokio::time::timeout(PROMPTLY, in_flight)
        .await
        .expect("A's answer came")
        .unwrap();
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("upstream_error"), "{body}");
}

#[tokio::test]
async fn below_the_grace_a_new_client_waits_instead_of_evicting() {
    let s = setup(|o| {
        o.max_connections = 1;
        o.eviction_grace = Duration::from_secs(2);
    })
    .await;
    let mut tunnel = echo_tunnel(&s.proxy).await;
    let started = Instant::now();
    let (status, took, _client) = served(&s.proxy).await;
    assert_eq!(status, 200);
    // It had to wait until the tunnel had been idle for the grace.
    assert!(took >= Duration::from_millis(1500), "served after {took:?}");
    assert!(started.elapsed() < PROMPTLY);
    assert!(closed(&mut tunnel, PROMPTLY).await);
}
