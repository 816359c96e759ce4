//! Intercepted tunnels to MCP servers: TLS terminated with a leaf from the session CA, every request
//! classified before a byte goes upstream, denials answered with a JSON-RPC error, upstream TLS
//! verified, bodies over the limit refused, responses (event streams included) streamed.

mod common;

use bytes::Bytes;
use common::*;
use fenzi_policy::mcp::JsonLimits;
use http::Request;
use http_body_util::{BodyExt, Full};
use rustls::pki_types::{CertificateDer, ServerName};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

const MCP_IP: &str = "93.184.216.40";

fn mcp_policy(url: &str) -> String {
    format!(
        "version: 1\nmcp:\n  local:\n    url: {url}\n    tools:\n      allow: [echo]\n      deny: [delete_everything]\n"
    )
}

struct Setup {
    proxy: TestProxy,
    upstream: Upstream,
    /// host:port the client CONNECTs to (and sends as Host).
    target: String,
}

/// An MCP upstream on 127.0.0.1, named in the policy by its IP literal (no resolution, no SNI).
async fn setup_ip(handler: Handler, limits: Option<JsonLimits>) -> Setup {
    let pki = TestPki::new();
    let upstream = http_upstream(Some(pki.server_config(&["127.0.0.1"])), handler).await;
    let target = format!("127.0.0.1:{}", upstream.port());
    let yaml = mcp_policy(&format!("https://{target}/mcp"));
    let proxy = start_proxy(
        policy(&yaml, limits),
        options(&pki),
        Arc::new(FakeNetwork::default()),
        Arc::new(MemorySink::default()),
    )
    .await;
    Setup {
        proxy,
        upstream,
        target,
    }
}

/// An MCP upstream named `mcp.test` (port 443), resolved by the fake network to a public address that
/// is routed to the loopback server.
async fn setup_name(upstream_names: &[&str], trust_upstream: bool) -> Setup {
    let pki = TestPki::new();
    let upstream = http_upstream(Some(pki.server_config(upstream_names)), mcp_handler()).await;
    let network = Arc::new(
        FakeNetwork::default()
            .name("mcp.test", &[MCP_IP])
            .route(&format!("{MCP_IP}:443"), upstream.addr),
    );
    let mut opts = options(&pki);
    if !trust_upstream {
        opts.upstream_roots.clear();
    }
    let proxy = start_proxy(
        policy(&mcp_policy("https://mcp.test/mcp"), None),
        opts,
        network,
        Arc::new(MemorySink::default()),
    )
    .await;
    Setup {
        proxy,
        upstream,
        target: "mcp.test:443".to_string(),
    }
}

impl Setup {
    fn proxy_ca(&self) -> CertificateDer<'static> {
        self.proxy.proxy.ca().cert_der().clone()
    }

    /// CONNECT + TLS (SNI `server_name`) + HTTP/1.1.
    async fn h1_client(&self, server_name: &str) -> Sender {
        let (stream, status, head) = connect(self.proxy.addr, &self.target).await;
        assert_eq!(status, 200, "{head}");
        let tls = tls_over(stream, &self.proxy_ca(), server_name, &[b"http/1.1"])
            .await
            .expect("TLS with the proxy");
        h1(tls).await
    }
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[tokio::test]
async fn allowed_and_denied_tool_calls_share_one_session() {
    let s = setup_ip(mcp_handler(), None).await;
    let mut client = s.h1_client("127.0.0.1").await;

    let (status, body) = text(
        client
            .send_request(tools_call(&s.target, "/mcp", 1, "echo"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        json(&body)["result"]["content"][0]["text"],
        "upstream says hi"
    );

    let response = client
        .send_request(tools_call(&s.target, "/mcp", 2, "delete_everything"))
        .await
        .unwrap();
    assert_eq!(response.headers()["content-type"], "application/json");
    let (status, body) = text(response).await;
    assert_eq!(status, 403, "{body}");
    let error = json(&body);
    assert_eq!(error["jsonrpc"], "2.0");
    assert_eq!(error["id"], 2);
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("not permitted by policy") && message.contains("delete_everything"),
        "{message}"
    );
    assert_eq!(error["error"]["data"]["reason"], "policy_denied");

    // The session goes on: the next allowed call works on the same connection.
    let (status, body) = text(
        client
            .send_request(tools_call(&s.target, "/mcp", 3, "echo"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["id"], 3);

    let seen = s.upstream.received_text();
    assert_eq!(seen.matches("\"tools/call\"").count(), 2, "{seen}");
    assert!(
        !seen.contains("delete_everything"),
        "the denied call reached upstream: {seen}"
    );
    let port = s.upstream.port();
    assert_eq!(
        s.proxy.summaries(),
        [
            format!("allowed CONNECT 127.0.0.1:{port}"),
            format!("allowed POST 127.0.0.1:{port} /mcp tools/call echo"),
            format!(
                "denied POST 127.0.0.1:{port} /mcp tools/call delete_everything -> policy_denied"
            ),
            format!("allowed POST 127.0.0.1:{port} /mcp tools/call echo"),
        ]
    );
    let entries = s.proxy.entries();
    assert_eq!(entries[0].server.as_deref(), Some("local"));
    assert_eq!(entries[2].rpc_id.as_deref(), Some("2"));
    // Upstream connections are reused within the tunnel.
    assert_eq!(s.upstream.connection_count(), 1);
}

#[tokio::test]
async fn a_denied_first_request_never_opens_an_upstream_connection() {
    let s = setup_ip(mcp_handler(), None).await;
    let mut client = s.h1_client("127.0.0.1").await;
    let (status, _) = text(
        client
            .send_request(tools_call(&s.target, "/mcp", 9, "delete_everything"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 403);
    // Other methods and paths on the MCP host are refused too.
    for (method, path) in [("PUT", "/mcp"), ("GET", "/admin"), ("OPTIONS", "/mcp")] {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", &s.target)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let (status, body) = text(client.send_request(req).await.unwrap()).await;
        assert_eq!(status, 403, "{method} {path}: {body}");
        assert!(body.contains("policy_denied"), "{body}");
    }
    let not_json = Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", &s.target)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2}",
        )))
        .unwrap();
    let (status, body) = text(client.send_request(not_json).await.unwrap()).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(s.upstream.connection_count(), 0);
    assert!(s.upstream.received.lock().unwrap().is_empty());
}

#[tokio::test]
async fn h2_clients_are_served_by_alpn() {
    let s = setup_ip(mcp_handler(), None).await;
    let (stream, status, _) = connect(s.proxy.addr, &s.target).await;
    assert_eq!(status, 200);
    let tls = tls_over(stream, &s.proxy_ca(), "127.0.0.1", &[b"h2", b"http/1.1"])
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(b"h2".as_slice()));
    let mut client = h2(tls).await;
    let mut req = tools_call(&s.target, &format!("https://{}/mcp", s.target), 5, "echo");
    req.headers_mut().remove("host");
    let (status, body) = text(client.send_request(req).await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["id"], 5);
    let mut denied = tools_call(
        &s.target,
        &format!("https://{}/mcp", s.target),
        6,
        "delete_everything",
    );
    denied.headers_mut().remove("host");
    let (status, body) = text(client.send_request(denied).await.unwrap()).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(json(&body)["id"], 6);
    // The upstream got HTTP/1.1 with the client's authority as Host.
    let seen = s.upstream.received_text().to_ascii_lowercase();
    assert!(seen.starts_with("post /mcp http/1.1\r\n"), "{seen}");
    assert!(seen.contains(&format!("host: {}\r\n", s.target)), "{seen}");
}

#[tokio::test]
async fn host_header_must_match_the_connect_target() {
    let s = setup_ip(mcp_handler(), None).await;
    let mut client = s.h1_client("127.0.0.1").await;
    let port = s.upstream.port();
    for host in [
        format!("127.0.0.2:{port}"),
        "127.0.0.1".to_string(), // port 443 by default, not the target's
        format!("evil.test:{port}"),
    ] {
        let (status, body) = text(
            client
                .send_request(tools_call(&host, "/mcp", 1, "echo"))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 400, "{host}: {body}");
        assert!(body.contains("does not match the CONNECT target"), "{body}");
    }
    // The same name in another spelling is the same host.
    let (status, body) = text(
        client
            .send_request(tools_call(&format!("127.1:{port}"), "/mcp", 1, "echo"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(s.upstream.received_text().matches("POST").count(), 1);
}

#[tokio::test]
async fn names_get_a_leaf_for_the_name_and_upstream_is_verified_by_name() {
    let s = setup_name(&["mcp.test"], true).await;
    let mut client = s.h1_client("mcp.test").await;
    let (status, body) = text(
        client
            .send_request(tools_call("mcp.test", "/mcp", 1, "echo"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = text(
        client
            .send_request(tools_call("MCP.test.", "/mcp", 2, "echo"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "Host is compared by canonical name");
    assert!(s.upstream.received_text().contains("host: mcp.test\r\n"));
}

#[tokio::test]
async fn a_tls_server_name_other_than_the_connect_target_is_a_bad_request() {
    let s = setup_name(&["mcp.test"], true).await;
    let (stream, status, _) = connect(s.proxy.addr, &s.target).await;
    assert_eq!(status, 200);
    let mut config = (*client_config(&[], &[b"http/1.1"])).clone();
    config
        .dangerous()
        .set_certificate_verifier(Arc::new(AnyCert));
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("other.test").unwrap(), stream)
        .await
        .unwrap();
    let mut client = h1(tls).await;
    let (status, body) = text(
        client
            .send_request(tools_call("mcp.test", "/mcp", 1, "echo"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("TLS server name \\\"other.test\\\""),
        "{body}"
    );
    assert_eq!(s.upstream.connection_count(), 0);
    assert_eq!(
        s.proxy.summaries().last().unwrap(),
        "denied POST mcp.test:443 /mcp -> bad_request"
    );
}

#[tokio::test]
async fn an_upstream_certificate_that_does_not_verify_is_a_502() {
    for (names, trusted) in [(&["mcp.test"][..], false), (&["wrong.test"][..], true)] {
        let s = setup_name(names, trusted).await;
        let mut client = s.h1_client("mcp.test").await;
        let (status, body) = text(
            client
                .send_request(tools_call("mcp.test", "/mcp", 1, "echo"))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 502, "{body}");
        assert!(body.contains("\"upstream_error\""), "{body}");
        assert!(body.contains("TLS with upstream mcp.test failed"), "{body}");
        assert!(
            s.upstream.received.lock().unwrap().is_empty(),
            "no plaintext may reach an unverified upstream"
        );
        let summaries = s.proxy.summaries();
        assert_eq!(
            summaries[1..],
            [
                "allowed POST mcp.test:443 /mcp tools/call echo",
                "failed POST mcp.test:443 /mcp -> upstream_error",
            ]
        );
    }
}

#[tokio::test]
async fn bodies_over_the_limit_are_refused_and_never_forwarded() {
    let limits = JsonLimits {
        max_bytes: 1024,
        max_depth: 64,
    };
    let s = setup_ip(mcp_handler(), Some(limits)).await;
    let mut client = s.h1_client("127.0.0.1").await;
    let padding = "x".repeat(2000);
    let body = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{{\"name\":\"echo\",\"arguments\":{{\"pad\":\"{padding}\"}}}}}}"
    );
    let req = Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", &s.target)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.clone())))
        .unwrap();
    let (status, answer) = text(client.send_request(req).await.unwrap()).await;
    assert_eq!(status, 413, "{answer}");
    assert!(answer.contains("\"body_too_large\""), "{answer}");

    // Chunked, with no length announced: cut off at the limit all the same.
    let (stream, _, _) = connect(s.proxy.addr, &s.target).await;
    let mut tls = tls_over(stream, &s.proxy_ca(), "127.0.0.1", &[b"http/1.1"])
        .await
        .unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        s.target,
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    let (status, _) = read_head(&mut tls).await;
    assert_eq!(status, 413);

    assert_eq!(s.upstream.connection_count(), 0);
    let summaries = s.proxy.summaries();
    assert_eq!(
        summaries
            .iter()
            .filter(|s| s.ends_with("-> body_too_large"))
            .count(),
        2,
        "{summaries:?}"
    );
}

#[tokio::test]
async fn event_streams_are_streamed_not_buffered() {
    type Slot = Arc<Mutex<Option<mpsc::Sender<Bytes>>>>;
    let slot: Slot = Arc::new(Mutex::new(None));
    let handler: Handler = {
        let slot = slot.clone();
        Arc::new(move |_, _| {
            let (tx, rx) = mpsc::channel(4);
            *slot.lock().unwrap() = Some(tx);
            http::Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .body(ChannelBody(rx).boxed_unsync())
                .unwrap()
        })
    };
    let s = setup_ip(handler, None).await;
    let mut client = s.h1_client("127.0.0.1").await;
    let response = client
        .send_request(tools_call(&s.target, "/mcp", 1, "echo"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let upstream_tx = slot.lock().unwrap().take().unwrap();
    let mut body = response.into_body();

    upstream_tx
        .send(Bytes::from_static(
            b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n",
        ))
        .await
        .unwrap();
    // The first event arrives while the upstream is still holding the stream open.
    let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("the first event must arrive before the stream ends")
        .unwrap()
        .unwrap();
    assert_eq!(
        frame.into_data().unwrap(),
        "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n"
    );

    upstream_tx
        .send(Bytes::from_static(
            b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
        ))
        .await
        .unwrap();
    drop(upstream_tx);
    let rest = body.collect().await.unwrap().to_bytes();
    // Each event is read, then passed on as it was (already in canonical form).
    assert_eq!(
        rest,
        "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"
    );
}

const GET_EVENT: &str =
    "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n";

#[tokio::test]
async fn get_stream_and_delete_on_the_endpoint_are_allowed() {
    let s = setup_ip(
        // Answers as an MCP server does: GET an event stream, DELETE an empty 200.
        Arc::new(|parts: http::request::Parts, _| {
            if parts.method == http::Method::GET {
                respond(200, "text/event-stream", GET_EVENT)
            } else {
                respond(200, "application/json", "")
            }
        }),
        None,
    )
    .await;
    let mut client = s.h1_client("127.0.0.1").await;
    for method in ["GET", "DELETE"] {
        let req = Request::builder()
            .method(method)
            .uri("/mcp?session=1")
            .header("host", &s.target)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let (status, body) = text(client.send_request(req).await.unwrap()).await;
        let expected = if method == "GET" { GET_EVENT } else { "" };
        assert_eq!((status, body.as_str()), (200, expected));
    }
    let port = s.upstream.port();
    assert_eq!(
        s.proxy.summaries()[1..],
        [
            format!("allowed GET 127.0.0.1:{port} /mcp"),
            format!("allowed DELETE 127.0.0.1:{port} /mcp"),
        ]
    );
}

#[tokio::test]
async fn a_client_that_rejects_the_session_ca_is_recorded_and_nothing_is_forwarded() {
    let s = setup_ip(mcp_handler(), None).await;
    let (stream, status, _) = connect(s.proxy.addr, &s.target).await;
    assert_eq!(status, 200);
    // This client trusts only some other CA, as an agent would whose trust store misses ca.pem.
    let other = TestPki::new();
    let config = client_config(&[&other.ca_der], &[b"http/1.1"]);
    let name = ServerName::IpAddress("127.0.0.1".parse::<std::net::IpAddr>().unwrap().into());
    let result = tokio_rustls::TlsConnector::from(config)
        .connect(name, stream)
        .await;
    assert!(result.is_err(), "the client must refuse the leaf");
    let port = s.upstream.port();
    let expected = format!("failed CONNECT 127.0.0.1:{port} -> bad_request");
    s.proxy.wait_for_entries(2).await;
    assert_eq!(s.proxy.summaries()[1..], [expected]);
    assert_eq!(s.proxy.entries()[1].source.as_deref(), Some("client"));
    assert_eq!(s.upstream.connection_count(), 0);
}

/// A plain-http MCP server: reached by absolute-form requests or by plain HTTP inside a CONNECT
/// tunnel, and enforced the same way on both.
#[tokio::test]
async fn plain_http_mcp_servers_are_enforced_with_or_without_a_tunnel() {
    let upstream = http_upstream(None, mcp_handler()).await;
    let target = format!("127.0.0.1:{}", upstream.port());
    let pki = TestPki::new();
    let proxy = start_proxy(
        policy(&mcp_policy(&format!("http://{target}/mcp")), None),
        options(&pki),
        Arc::new(FakeNetwork::default()),
        Arc::new(MemorySink::default()),
    )
    .await;

    // Absolute-form through the proxy.
    let mut client = h1(tokio::net::TcpStream::connect(proxy.addr).await.unwrap()).await;
    let url = format!("http://{target}/mcp");
    let (status, body) = text(
        client
            .send_request(tools_call(&target, &url, 1, "echo"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = text(
        client
            .send_request(tools_call(&target, &url, 2, "delete_everything"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(json(&body)["id"], 2);

    // Plain HTTP inside a tunnel.
    let (stream, status, _) = connect(proxy.addr, &target).await;
    assert_eq!(status, 200);
    let mut tunnel = h1(stream).await;
    let (status, _) = text(
        tunnel
            .send_request(tools_call(&target, "/mcp", 3, "echo"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let (status, body) = text(
        tunnel
            .send_request(tools_call(&target, "/mcp", 4, "delete_everything"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 403, "{body}");

    let seen = upstream.received_text();
    assert_eq!(seen.matches("\"echo\"").count(), 2, "{seen}");
    assert!(!seen.contains("delete_everything"), "{seen}");
    let summaries = proxy.summaries();
    assert_eq!(
        summaries
            .iter()
            .filter(|s| s.contains("tools/call delete_everything -> policy_denied"))
            .count(),
        2,
        "{summaries:?}"
    );
}

/// The transport to an MCP server follows the policy's scheme: a client speaking plain HTTP inside
/// the tunnel to an https server, or sending it an http:// URL, is refused and nothing is dialled.
#[tokio::test]
async fn an_https_server_is_never_reached_in_clear_text() {
    let s = setup_ip(mcp_handler(), None).await;
    let (stream, status, _) = connect(s.proxy.addr, &s.target).await;
    assert_eq!(status, 200);
    let mut tunnel = h1(stream).await;
    for id in [1, 2] {
        let (status, body) = text(
            tunnel
                .send_request(tools_call(&s.target, "/mcp", id, "echo"))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(json(&body)["error"], "bad_request");
        assert!(body.contains("is an https MCP server"), "{body}");
    }
    let mut client = h1(tokio::net::TcpStream::connect(s.proxy.addr).await.unwrap()).await;
    let url = format!("http://{}/mcp", s.target);
    let (status, body) = text(
        client
            .send_request(tools_call(&s.target, &url, 3, "echo"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{body}");

    assert_eq!(s.upstream.connection_count(), 0);
    let denied = format!("denied POST {} /mcp -> bad_request", s.target);
    assert_eq!(
        s.proxy.summaries(),
        [
            format!("allowed CONNECT {}", s.target),
            denied.clone(),
            denied.clone(),
            denied
        ]
    );
}

/// A request hyper refuses inside a tunnel is recorded once, against the tunnel's destination.
#[tokio::test]
async fn malformed_requests_in_a_tunnel_are_recorded() {
    let s = setup_ip(mcp_handler(), None).await;
    let (stream, status, _) = connect(s.proxy.addr, &s.target).await;
    assert_eq!(status, 200);
    let tls = tls_over(stream, &s.proxy_ca(), "127.0.0.1", &[b"http/1.1"])
        .await
        .expect("TLS with the proxy");
    let mut tls = tls;
    let request = "POST /mcp?k=v HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n";
    tls.write_all(request.as_bytes()).await.unwrap();
    let (status, _) = read_head(&mut tls).await;
    assert_eq!(status, 400);
    s.proxy.wait_for_entries(2).await;
    let entries = s.proxy.entries();
    assert_eq!(
        s.proxy.summaries()[1..],
        [format!("denied POST {} /mcp -> bad_request", s.target)]
    );
    assert_eq!(entries[1].source.as_deref(), Some("client"));
    assert_eq!(entries[1].server.as_deref(), Some("local"));
    assert_eq!(s.upstream.connection_count(), 0);
}

/// The HTTP/2 client preface and an empty SETTINGS frame.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// Raw HTTP/2 inside an intercepted tunnel (ALPN h2). Bytes that break the protocol end the
/// connection with one `bad_request` record from the client; a request the h2 layer refuses by
/// itself (a stream reset, the connection carrying on) gets one record per request when the
/// connection ends; a client that merely hangs up, or says goodbye with its own GOAWAY, gets none.
/// The upstream never hears of any of it.
#[tokio::test]
async fn h2_protocol_errors_in_a_tunnel_are_recorded() {
    struct Case {
        name: &'static str,
        /// Bytes after the preface.
        bytes: &'static [u8],
        /// Whether the proxy ends the connection (else the client hangs up).
        proxy_closes: bool,
        records: usize,
    }
    let case = |name, bytes, proxy_closes, records| Case {
        name,
        bytes,
        proxy_closes,
        records,
    };
    let cases = [
        case(
            "DATA on stream 0",
            b"\x00\x00\x01\x00\x00\x00\x00\x00\x00x",
            true,
            1,
        ),
        case(
            "HEADERS with an upper-case header name",
            b"\x00\x00\x0e\x01\x05\x00\x00\x00\x01\x83\x87\x84\x41\x01x\x00\x04X-Up\x01v",
            true,
            1,
        ),
        case(
            "a frame longer than the maximum",
            b"\xff\xff\xff\x00\x00\x00\x00\x00\x01",
            true,
            1,
        ),
        // POST, https, :authority x, and no :path: the library resets the stream.
        case(
            "a request without :path",
            b"\x00\x00\x05\x01\x05\x00\x00\x00\x01\x83\x87\x41\x01x",
            false,
            1,
        ),
        case(
            "two requests without :path",
            b"\x00\x00\x05\x01\x05\x00\x00\x00\x01\x83\x87\x41\x01x\
              \x00\x00\x05\x01\x05\x00\x00\x00\x03\x83\x87\x41\x01x",
            false,
            2,
        ),
        case("nothing more, then hang up", b"", false, 0),
        case(
            "hang up halfway through a frame",
            b"\x00\x00\x10\x00",
            false,
            0,
        ),
        case(
            "the client's own GOAWAY, naming an error of ours",
            b"\x00\x00\x08\x07\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01",
            true,
            0,
        ),
    ];
    for Case {
        name,
        bytes,
        proxy_closes,
        records,
    } in cases
    {
        let s = setup_ip(mcp_handler(), None).await;
        let (stream, status, _) = connect(s.proxy.addr, &s.target).await;
        assert_eq!(status, 200);
        let mut tls = tls_over(stream, &s.proxy_ca(), "127.0.0.1", &[b"h2"])
            .await
            .expect("TLS with the proxy");
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(b"h2".as_slice()));
        tls.write_all(H2_PREFACE).await.unwrap();
        tls.write_all(bytes).await.unwrap();
        let mut sink = Vec::new();
        let ended = tokio::time::timeout(
            Duration::from_millis(if proxy_closes { 5000 } else { 300 }),
            tokio::io::AsyncReadExt::read_to_end(&mut tls, &mut sink),
        )
        .await;
        assert_eq!(ended.is_ok(), proxy_closes, "{name}: did the proxy close?");
        if !proxy_closes {
            let _ = tls.shutdown().await;
            drop(tls);
        }
        s.proxy.wait_for_entries(records + 1).await;
        // Anything late would show here.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut expected = vec![format!("allowed CONNECT {}", s.target)];
        expected.extend((0..records).map(|_| format!("denied - {} -> bad_request", s.target)));
        assert_eq!(s.proxy.summaries(), expected, "{name}");
        for entry in &s.proxy.entries()[1..] {
            assert_eq!(entry.source.as_deref(), Some("client"), "{name}");
            assert_eq!(entry.rule.as_deref(), Some("malformed request"), "{name}");
        }
        assert_eq!(s.upstream.connection_count(), 0, "{name}");
    }
}

/// Requests a real h2 client sends are served and recorded once each: none of them is counted again
/// as refused when the connection ends.
#[tokio::test]
async fn served_h2_requests_are_not_counted_as_refused() {
    let s = setup_ip(mcp_handler(), None).await;
    let (stream, status, _) = connect(s.proxy.addr, &s.target).await;
    assert_eq!(status, 200);
    let tls = tls_over(stream, &s.proxy_ca(), "127.0.0.1", &[b"h2"])
        .await
        .unwrap();
    let mut client = h2(tls).await;
    for id in 1..=3 {
        let mut req = tools_call(&s.target, &format!("https://{}/mcp", s.target), id, "echo");
        req.headers_mut().remove("host");
        let (status, body) = text(client.send_request(req).await.unwrap()).await;
        assert_eq!(status, 200, "{body}");
    }
    drop(client);
    s.proxy.wait_for_entries(4).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let allowed = format!("allowed POST {} /mcp tools/call echo", s.target);
    assert_eq!(
        s.proxy.summaries(),
        [
            format!("allowed CONNECT {}", s.target),
            allowed.clone(),
            allowed.clone(),
            allowed
        ],
        "served h2 requests must not be counted as refused"
    );
}

/// A client that does not trust the session CA ends the handshake with an alert: the tunnel's
/// failed record names it as the client's TLS failure, with the alert the client gave.
#[tokio::test]
async fn a_client_tls_failure_is_recorded_with_its_alert() {
    let s = setup_ip(mcp_handler(), None).await;
    let (stream, status, head) = connect(s.proxy.addr, &s.target).await;
    assert_eq!(status, 200, "{head}");
    let other_ca = TestPki::new().ca_der;
    let refused = tls_over(stream, &other_ca, "127.0.0.1", &[b"http/1.1"]).await;
    assert!(refused.is_err(), "the client must refuse the proxy's leaf");
    s.proxy.wait_for_entries(2).await;
    let entries = s.proxy.sink.entries();
    let failed = entries.last().unwrap();
    assert_eq!(
        summary(failed),
        format!("failed CONNECT {} -> bad_request", s.target)
    );
    assert_eq!(failed.source.as_deref(), Some("client"));
    let rule = failed.rule.as_deref().unwrap_or_default();
    assert!(
        rule.starts_with("client TLS handshake: received fatal alert: ")
            && rule.contains("UnknownCA"),
        "{rule}"
    );
    assert_eq!(s.upstream.received_len(), 0);
}

/// A denied tool call names its reason where clients show it: `Proxy-Status` with the reason and
/// the decision's message, and the HTTP/1.1 reason phrase.
#[tokio::test]
async fn a_denied_call_names_its_reason_in_proxy_status_and_the_reason_phrase() {
    let s = setup_ip(mcp_handler(), None).await;
    let mut client = s.h1_client("127.0.0.1").await;
    let response = client
        .send_request(tools_call(&s.target, "/mcp", 7, "delete_everything"))
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let phrase = response
        .extensions()
        .get::<hyper::ext::ReasonPhrase>()
        .map(|p| String::from_utf8_lossy(p.as_bytes()).into_owned());
    assert_eq!(phrase.as_deref(), Some("Forbidden (policy_denied)"));
    let status = response.headers()["proxy-status"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        status.starts_with("fenzi; error=http_request_denied; details=\"policy_denied: ")
            && status.contains("delete_everything"),
        "{status}"
    );
}

/// Every record about a connection or a request names the peer address of the client connection
/// it came on (`client`), as the proxy accepted it, and the hash of the policy in force (`policy`):
/// the tunnel's CONNECT record, the JSON-RPC records inside it, a refused plain-HTTP request on a
/// second connection, and a request hyper refused on a third. The lines are read from the real
/// hash-chained log.
#[tokio::test]
async fn records_name_the_client_peer_and_the_policy_in_force() {
    use fenzi_policy::audit::{self, AuditRecord};
    let pki = TestPki::new();
    let upstream = http_upstream(Some(pki.server_config(&["127.0.0.1"])), mcp_handler()).await;
    let target = format!("127.0.0.1:{}", upstream.port());
    let policy = policy(&mcp_policy(&format!("https://{target}/mcp")), None);
    let hash = policy.sha256();
    let sink = Arc::new(FileSink::temp("peer"));
    let network = Arc::new(FakeNetwork::default());
    let proxy =
        fenzi_proxy::Proxy::with_network(policy, sink.clone(), options(&pki), network).unwrap();
    let proxy = serve_proxy(proxy, sink.clone()).await;

    // One tunnel: its CONNECT record and two tool calls inside it.
    let (stream, status, head) = connect(proxy.addr, &target).await;
    assert_eq!(status, 200, "{head}");
    let tunnel_peer = stream.local_addr().unwrap();
    let ca = proxy.proxy.ca().cert_der().clone();
    let tls = tls_over(stream, &ca, "127.0.0.1", &[b"http/1.1"])
        .await
        .expect("TLS with the proxy");
    let mut client = h1(tls).await;
    for (id, tool) in [(1, "echo"), (2, "delete_everything")] {
        let response = client
            .send_request(tools_call(&target, "/mcp", id, tool))
            .await
            .unwrap();
        let _ = text(response).await;
    }
    // A prompt and a resource (neither allowed): each record names what it asked for, the URI
    // without its query.
    let batch = serde_json::json!([
        {"jsonrpc": "2.0", "id": 3, "method": "prompts/get", "params": {"name": "review"}},
        {"jsonrpc": "2.0", "id": 4, "method": "resources/read",
         "params": {"uri": "https://docs.test/a?token=s3cret"}},
    ]);
    let request = Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", &target)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(Full::new(Bytes::from(batch.to_string())))
        .unwrap();
    let _ = text(client.send_request(request).await.unwrap()).await;

    // A second connection: a plain-HTTP request to a host the policy does not name.
    let mut plain = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let plain_peer = plain.local_addr().unwrap();
    plain
        .write_all(b"GET http://evil.test/x HTTP/1.1\r\nHost: evil.test\r\n\r\n")
        .await
        .unwrap();
    let (status, _) = read_head(&mut plain).await;
    assert_eq!(status, 403);

    // A third: bytes that are not HTTP, recorded when the connection ends.
    let mut garbage = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let garbage_peer = garbage.local_addr().unwrap();
    garbage
        .write_all(b"\x01\x02 nonsense\r\n\r\n")
        .await
        .unwrap();
    drop(garbage);
    for _ in 0..200 {
        if sink.records() >= 7 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let log = std::fs::read_to_string(sink.path()).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    audit::verify(lines.iter().map(|l| l.as_bytes()), None).expect("the log verifies");
    let records: Vec<AuditRecord> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seen: Vec<(String, Option<String>, Option<String>)> = records
        .iter()
        .map(|r| {
            (
                format!("{} {}", r.decision.label(), r.method),
                r.tool.clone(),
                r.client.clone(),
            )
        })
        .collect();
    let (tunnel, plain, garbage) = (
        Some(tunnel_peer.to_string()),
        Some(plain_peer.to_string()),
        Some(garbage_peer.to_string()),
    );
    assert_eq!(
        seen,
        [
            ("allowed CONNECT".into(), None, tunnel.clone()),
            ("allowed POST".into(), Some("echo".into()), tunnel.clone()),
            (
                "denied POST".into(),
                Some("delete_everything".into()),
                tunnel.clone()
            ),
            ("denied POST".into(), None, tunnel.clone()),
            ("denied POST".into(), None, tunnel.clone()),
            ("denied GET".into(), None, plain),
            ("denied -".into(), None, garbage),
        ],
        "{log}"
    );
    assert_eq!(records[3].prompt.as_deref(), Some("review"));
    assert_eq!(
        records[4].resource.as_deref(),
        Some("https://docs.test/a"),
        "{log}"
    );
    assert!(!log.contains("s3cret"), "{log}");
    assert_ne!(tunnel_peer, plain_peer);
    for r in &records {
        assert_eq!(r.policy.as_deref(), Some(hash.as_str()), "{r:?}");
    }
}

/// Many tunnels calling at once, recorded by the real writer: with other requests in flight, an
/// allowed call's record is staged and written in a batch shared with the calls decided in the same
/// turn. Every call still gets exactly one record, each answered call's record is in the file (the
/// proxy forwards only once its batch is written), and the log is one chain that verifies with its
/// head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_are_each_recorded_once_in_one_chain_that_verifies() {
    use fenzi_policy::audit::{self, AuditRecord, Head};
    use fenzi_proxy::audit::writer::{AuditWriter, head_path};
    const TUNNELS: u64 = 16;
    const CALLS: u64 = 25;
    let pki = TestPki::new();
    let upstream = http_upstream(Some(pki.server_config(&["127.0.0.1"])), mcp_handler()).await;
    let target = format!("127.0.0.1:{}", upstream.port());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let writer = Arc::new(AuditWriter::open(&path, "batches").unwrap());
    let policy = policy(&mcp_policy(&format!("https://{target}/mcp")), None);
    let network = Arc::new(FakeNetwork::default());
    let proxy =
        fenzi_proxy::Proxy::with_network(policy, writer.clone(), options(&pki), network).unwrap();
    let mut proxy = serve_proxy(proxy, writer).await;
    let ca = proxy.proxy.ca().cert_der().clone();

    let mut tunnels = Vec::new();
    for t in 0..TUNNELS {
        let (addr, target, ca) = (proxy.addr, target.clone(), ca.clone());
        tunnels.push(tokio::spawn(async move {
            let (stream, status, head) = connect(addr, &target).await;
            assert_eq!(status, 200, "{head}");
            let tls = tls_over(stream, &ca, "127.0.0.1", &[b"http/1.1"])
                .await
                .expect("TLS with the proxy");
            let mut client = h1(tls).await;
            for i in 0..CALLS {
                let id = t * 1000 + i;
                let (tool, expected) = if i % 5 == 4 {
                    ("delete_everything", 403)
                } else {
                    ("echo", 200)
                };
                let response = client
                    .send_request(tools_call(&target, "/mcp", id, tool))
                    .await
                    .unwrap();
                let (status, body) = text(response).await;
                assert_eq!(status, expected, "{tool} {id}: {body}");
                assert_eq!(json(&body)["id"], id, "{body}");
            }
        }));
    }
    for tunnel in tunnels {
        tunnel.await.unwrap();
    }
    proxy.shutdown();
    proxy.done.take().unwrap().await.unwrap();
    proxy.sink.flush().await.unwrap();

    let log = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    let head = Head::parse(&std::fs::read_to_string(head_path(&path)).unwrap()).unwrap();
    let verified = audit::verify(lines.iter().map(|l| l.as_bytes()), Some(&head))
        .expect("one chain that verifies with its head");
    let calls = TUNNELS * CALLS;
    assert_eq!(verified.records as u64, TUNNELS + calls, "{log}");
    assert_eq!(
        head.seq,
        TUNNELS + calls,
        "flushed, the head names the last record"
    );
    let records: Vec<AuditRecord> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut ids: Vec<u64> = Vec::new();
    for r in records
        .iter()
        .filter(|r| r.rpc.as_deref() == Some("tools/call"))
    {
        let id: u64 = r.rpc_id.as_deref().unwrap().parse().unwrap();
        let expected = if id % 1000 % 5 == 4 {
            ("denied", "delete_everything")
        } else {
            ("allowed", "echo")
        };
        assert_eq!(
            (r.decision.label(), r.tool.as_deref().unwrap()),
            expected,
            "{r:?}"
        );
        ids.push(id);
    }
    ids.sort_unstable();
    let all: Vec<u64> = (0..TUNNELS)
        .flat_map(|t| (0..CALLS).map(move |i| t * 1000 + i))
        .collect();
    assert_eq!(ids, all, "one record per call");
    let connects = records.iter().filter(|r| r.method == "CONNECT").count();
    assert_eq!(connects as u64, TUNNELS);
}
