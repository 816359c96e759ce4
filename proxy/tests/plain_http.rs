//! Absolute-form plain-HTTP requests through the proxy: allowed hosts are forwarded origin-form with
//! hop-by-hop headers removed, every other destination is refused before anything is dialled.

mod common;

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::Full;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const POLICY: &str = "\
version: 1
hosts:
  - web.test:80
  - internal.test:80
  - mixed.test:80
  - down.test:80
  - gone.test:80
";

async fn setup(handler: Handler) -> (TestProxy, Upstream, Arc<FakeNetwork>) {
    let upstream = http_upstream(None, handler).await;
    let network = Arc::new(
        FakeNetwork::default()
            .name("web.test", &[WEB_IP])
            .route(&format!("{WEB_IP}:80"), upstream.addr)
            .name("internal.test", &["10.0.0.5"])
            .name("mixed.test", &[WEB_IP, "10.0.0.5"])
            .name("down.test", &["93.184.216.99"])
            .route("93.184.216.99:80", "127.0.0.1:1".parse().unwrap()),
    );
    let pki = TestPki::new();
    let proxy = start_proxy(
        policy(POLICY, None),
        options(&pki),
        network.clone(),
        Arc::new(MemorySink::default()),
    )
    .await;
    (proxy, upstream, network)
}

#[tokio::test]
async fn allowed_request_is_forwarded_origin_form_without_hop_by_hop_headers() {
    let (proxy, upstream, _) = setup(Arc::new(|_, _| respond(200, "text/plain", "hello"))).await;
    let mut client = h1(TcpStream::connect(proxy.addr).await.unwrap()).await;
    let mut req = get("http://web.test/hello?token=abc");
    let headers = req.headers_mut();
    headers.insert("proxy-authorization", "Basic Zm9vOmJhcg==".parse().unwrap());
    headers.insert("proxy-connection", "keep-alive".parse().unwrap());
    headers.insert("connection", "x-drop-me".parse().unwrap());
    headers.insert("x-drop-me", "1".parse().unwrap());
    headers.insert("x-keep-me", "2".parse().unwrap());
    let (status, body) = text(client.send_request(req).await.unwrap()).await;
    assert_eq!((status, body.as_str()), (200, "hello"));

    let seen = upstream.received_text().to_ascii_lowercase();
    assert!(
        seen.starts_with("get /hello?token=abc http/1.1\r\n"),
        "{seen}"
    );
    assert!(seen.contains("host: web.test\r\n"), "{seen}");
    assert!(seen.contains("x-keep-me: 2\r\n"), "{seen}");
    for gone in [
        "proxy-authorization",
        "proxy-connection",
        "x-drop-me",
        "connection:",
    ] {
        assert!(!seen.contains(gone), "{gone} was forwarded: {seen}");
    }
    // One record, and the query string (which may carry credentials) is not in it.
    assert_eq!(proxy.summaries(), ["allowed GET web.test:80 /hello"]);
    assert_eq!(
        proxy.entries()[0].rule.as_deref(),
        Some("hosts[0] web.test:80")
    );
}

#[tokio::test]
async fn host_not_in_policy_is_refused_with_a_json_body() {
    let (proxy, upstream, network) = setup(Arc::new(|_, _| respond(200, "text/plain", "x"))).await;
    let mut client = h1(TcpStream::connect(proxy.addr).await.unwrap()).await;
    let response = client.send_request(get("http://evil.test/")).await.unwrap();
    assert_eq!(response.headers()["content-type"], "application/json");
    let (status, body) = text(response).await;
    assert_eq!(status, 403);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["error"], "host_not_allowed");
    assert!(
        json["message"].as_str().unwrap().contains("evil.test:80"),
        "{body}"
    );
    assert_eq!(
        proxy.summaries(),
        ["denied GET evil.test:80 / -> host_not_allowed"]
    );
    assert!(network.dialled().is_empty());
    assert_eq!(upstream.connection_count(), 0);
}

#[tokio::test]
async fn names_resolving_to_internal_addresses_are_refused() {
    let (proxy, _upstream, network) = setup(Arc::new(|_, _| respond(200, "text/plain", "x"))).await;
    let mut client = h1(TcpStream::connect(proxy.addr).await.unwrap()).await;
    for host in ["internal.test", "mixed.test"] {
        let (status, body) = text(
            client
                .send_request(get(&format!("http://{host}/")))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 403, "{host}: {body}");
        assert!(body.contains("\"private_address\""), "{body}");
        assert!(body.contains("10.0.0.5"), "{body}");
    }
    // An IP literal the policy does not name is not even routed.
    let (status, body) = text(
        client
            .send_request(get("http://127.0.0.1:80/"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 403);
    assert!(body.contains("host_not_allowed"), "{body}");
    assert!(network.dialled().is_empty(), "{:?}", network.dialled());
    assert_eq!(
        proxy.summaries(),
        [
            "denied GET internal.test:80 / -> private_address",
            "denied GET mixed.test:80 / -> private_address",
            "denied GET 127.0.0.1:80 / -> host_not_allowed",
        ]
    );
}

#[tokio::test]
async fn redirects_are_passed_back_not_followed() {
    let handler: Handler = Arc::new(|_, _| {
        http::Response::builder()
            .status(302)
            .header("location", "http://web.test/elsewhere")
            .body(full_body(""))
            .unwrap()
    });
    let (proxy, upstream, _) = setup(handler).await;
    let mut client = h1(TcpStream::connect(proxy.addr).await.unwrap()).await;
    let response = client
        .send_request(get("http://web.test/start"))
        .await
        .unwrap();
    assert_eq!(response.status(), 302);
    assert_eq!(response.headers()["location"], "http://web.test/elsewhere");
    assert_eq!(upstream.received_text().matches("GET ").count(), 1);
    assert!(!upstream.received_text().contains("/elsewhere"));
}

#[tokio::test]
async fn requests_for_the_proxy_itself_and_https_urls_are_bad_requests() {
    let (proxy, _upstream, network) = setup(Arc::new(|_, _| respond(200, "text/plain", "x"))).await;
    let mut client = h1(TcpStream::connect(proxy.addr).await.unwrap()).await;
    let origin_form = Request::builder()
        .uri("/")
        .header("host", "web.test")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (status, body) = text(client.send_request(origin_form).await.unwrap()).await;
    assert_eq!(status, 400);
    assert!(body.contains("\"bad_request\""), "{body}");
    let (status, body) = text(client.send_request(get("https://web.test/")).await.unwrap()).await;
    assert_eq!(status, 400);
    assert!(body.contains("CONNECT"), "{body}");
    assert!(network.dialled().is_empty());
    assert_eq!(proxy.entries().len(), 2);
}

#[tokio::test]
async fn unreachable_upstream_is_a_502_recorded_after_the_allowed_record() {
    let (proxy, _upstream, _) = setup(Arc::new(|_, _| respond(200, "text/plain", "x"))).await;
    let mut client = h1(TcpStream::connect(proxy.addr).await.unwrap()).await;
    let (status, body) = text(
        client
            .send_request(get("http://down.test/x"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 502);
    assert!(body.contains("\"upstream_error\""), "{body}");
    assert_eq!(
        proxy.summaries(),
        [
            "allowed GET down.test:80 /x",
            "failed GET down.test:80 /x -> upstream_error"
        ]
    );
    assert_eq!(proxy.entries()[1].source.as_deref(), Some("upstream"));
    // A name that does not resolve has no address to decide on: one failed record, nothing dialled.
    let (status, body) = text(client.send_request(get("http://gone.test/")).await.unwrap()).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("could not resolve gone.test"), "{body}");
    assert_eq!(
        proxy.summaries()[2..],
        ["failed GET gone.test:80 / -> upstream_error"]
    );
}

/// Reads one response (head and a Content-Length body) from a raw stream.
async fn read_response(stream: &mut TcpStream) -> (u16, String) {
    let (status, head) = read_head(stream).await;
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.unwrap();
    (status, String::from_utf8(body).unwrap())
}

#[tokio::test]
async fn keep_alive_and_pipelined_requests_are_answered_in_order() {
    let handler: Handler =
        Arc::new(|parts, _| respond(200, "text/plain", parts.uri.path().to_string()));
    let (proxy, _upstream, _) = setup(handler).await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    // Two requests one after the other on one connection...
    for path in ["/one", "/two"] {
        let req = format!("GET http://web.test{path} HTTP/1.1\r\nHost: web.test\r\n\r\n");
        stream.write_all(req.as_bytes()).await.unwrap();
        assert_eq!(read_response(&mut stream).await, (200, path.to_string()));
    }
    // ...and three pipelined in a single write, one of them denied.
    let pipelined = "GET http://web.test/a HTTP/1.1\r\nHost: web.test\r\n\r\n\
                     GET http://evil.test/b HTTP/1.1\r\nHost: evil.test\r\n\r\n\
                     GET http://web.test/c HTTP/1.1\r\nHost: web.test\r\n\r\n";
    stream.write_all(pipelined.as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut stream).await, (200, "/a".to_string()));
    let (status, body) = read_response(&mut stream).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(read_response(&mut stream).await, (200, "/c".to_string()));
    assert_eq!(proxy.entries().len(), 5);
}

#[tokio::test]
async fn requests_hyper_refuses_are_recorded_once_as_the_clients_bad_request() {
    let (proxy, upstream, network) = setup(Arc::new(|_, _| respond(200, "text/plain", ""))).await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    let malformed = "GET http://user:pw@web.test/x?key=sesame HTTP/1.1\r\nHost: web.test\r\n\
                     Content-Length: 1\r\nContent-Length: 2\r\n\r\n";
    stream.write_all(malformed.as_bytes()).await.unwrap();
    let (status, _) = read_head(&mut stream).await;
    assert_eq!(status, 400, "hyper's own answer");
    proxy.wait_for_entries(1).await;
    let entries = proxy.entries();
    assert_eq!(
        proxy.summaries(),
        ["denied GET web.test:80 /x -> bad_request"]
    );
    assert_eq!(entries[0].source.as_deref(), Some("client"));
    assert!(upstream.received_text().is_empty());
    assert!(network.dialled().is_empty(), "{:?}", network.dialled());

    // After a request that was served, the refused one names nothing it cannot be sure of.
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    let two = "GET http://web.test/ok HTTP/1.1\r\nHost: web.test\r\n\r\n\
               GET http://web.test/bad HTTP/1.1\r\nHost: web.test\r\nX: a\0b\r\n\r\n";
    stream.write_all(two.as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut stream).await.0, 200);
    assert_eq!(read_head(&mut stream).await.0, 400);
    proxy.wait_for_entries(3).await;
    assert_eq!(
        proxy.summaries()[1..],
        ["allowed GET web.test:80 /ok", "denied - -:0 -> bad_request"]
    );
}

#[tokio::test]
async fn credentials_and_unparsed_hosts_in_urls_are_not_logged() {
    let (proxy, _upstream, network) = setup(Arc::new(|_, _| respond(200, "text/plain", ""))).await;
    let mut client = h1(TcpStream::connect(proxy.addr).await.unwrap()).await;
    for uri in ["http://agent:hunter2@web.test/", "http://web.test:99999/"] {
        let (status, body) = text(client.send_request(get(uri)).await.unwrap()).await;
        assert_eq!(status, 400, "{uri}: {body}");
    }
    assert_eq!(
        proxy.summaries(),
        [
            "denied GET web.test:80 / -> bad_request",
            "denied GET <invalid target>:0 / -> bad_request"
        ]
    );
    assert!(network.dialled().is_empty());
}

#[tokio::test]
async fn a_response_body_cut_short_aborts_the_client_and_is_recorded_as_failed() {
    // An upstream that promises 100,000 bytes, sends 1,000 and closes.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let cut_addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let mut reply = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n".to_vec();
                reply.extend_from_slice(&[b'x'; 1000]);
                let _ = stream.write_all(&reply).await;
            });
        }
    });
    let network = Arc::new(
        FakeNetwork::default()
            .name("web.test", &[WEB_IP])
            .route(&format!("{WEB_IP}:80"), cut_addr),
    );
    let proxy = start_proxy(
        policy(POLICY, None),
        options(&TestPki::new()),
        network,
        Arc::new(MemorySink::default()),
    )
    .await;
    let mut client = h1(TcpStream::connect(proxy.addr).await.unwrap()).await;
    let response = client
        .send_request(get("http://web.test/big"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = http_body_util::BodyExt::collect(response.into_body()).await;
    assert!(
        body.is_err(),
        "a cut body must not arrive as a complete one"
    );
    proxy.wait_for_entries(2).await;
    assert_eq!(
        proxy.summaries(),
        [
            "allowed GET web.test:80 /big",
            "failed GET web.test:80 /big -> upstream_error"
        ]
    );
    assert_eq!(proxy.entries()[1].source.as_deref(), Some("upstream"));
}
