//! Private destinations by name, through the proxy over loopback: a name whose `hosts` entry (or
//! MCP server) lists `private:` ranges reaches a real upstream on an internal address inside them,
//! and every other case keeps `private_address` with nothing dialled. The test resolver maps the
//! names onto the loopback upstream's address, so the policy sees 127.0.0.1 as production would.

mod common;

use common::*;
use fenzi_policy::config;
use fenzi_policy::engine::Policy;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The policy as a machine file: only the machine file may name private ranges.
fn machine_policy(yaml: &str) -> Policy {
    let config = config::load(Some((yaml, "mcp.yaml")), None)
        .unwrap_or_else(|e| panic!("test policy is invalid:\n{e}\n---\n{yaml}"));
    Policy::from_config(&config)
}

struct Setup {
    proxy: TestProxy,
    upstream: Upstream,
    network: Arc<FakeNetwork>,
}

/// A loopback upstream answering `hello`, and a proxy whose policy is `policy` with `PORT`
/// replaced by the upstream's port. `registry.test`, `other.test` and `mcp.test` resolve to the
/// upstream's address (127.0.0.1); `mixed.test` to it and 127.0.0.2.
async fn setup(policy: &str, handler: Handler) -> Setup {
    let upstream = http_upstream(None, handler).await;
    let network = Arc::new(
        FakeNetwork::default()
            .name("registry.test", &["127.0.0.1"])
            .name("other.test", &["127.0.0.1"])
            .name("mcp.test", &["127.0.0.1"])
            .name("mixed.test", &["127.0.0.1", "127.0.0.2"]),
    );
    let policy = policy.replace("PORT", &upstream.port().to_string());
    let pki = TestPki::new();
    let proxy = start_proxy(
        machine_policy(&policy),
        options(&pki),
        network.clone(),
        Arc::new(MemorySink::default()),
    )
    .await;
    Setup {
        proxy,
        upstream,
        network,
    }
}

fn hello() -> Handler {
    Arc::new(|_, _| respond(200, "text/plain", "hello"))
}

#[tokio::test]
async fn a_name_on_a_loopback_address_is_refused_by_default() {
    let s = setup("version: 1\nhosts: [\"registry.test:PORT\"]\n", hello()).await;
    let port = s.upstream.port();
    let mut client = h1(TcpStream::connect(s.proxy.addr).await.unwrap()).await;
    let (status, body) = text(
        client
            .send_request(get(&format!("http://registry.test:{port}/")))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["error"], "private_address");
    assert!(
        json["message"]
            .as_str()
            .unwrap()
            .contains("resolves to 127.0.0.1, an internal address (loopback)"),
        "{body}"
    );
    assert!(s.network.dialled().is_empty(), "{:?}", s.network.dialled());
    assert_eq!(s.upstream.connection_count(), 0);
}

const PRIVATE: &str = "\
version: 1
hosts:
  - {host: \"registry.test:PORT\", private: [\"127.0.0.1/32\"]}
  - {host: \"mixed.test:PORT\", private: [\"127.0.0.1/32\"]}
  - other.test:PORT
";

#[tokio::test]
async fn a_name_with_the_range_reaches_the_upstream_and_the_record_names_the_entry() {
    let s = setup(PRIVATE, hello()).await;
    let port = s.upstream.port();
    let mut client = h1(TcpStream::connect(s.proxy.addr).await.unwrap()).await;
    let (status, body) = text(
        client
            .send_request(get(&format!("http://registry.test:{port}/simple/")))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, body.as_str()), (200, "hello"));
    assert!(
        s.upstream
            .received_text()
            .starts_with("GET /simple/ HTTP/1.1\r\n"),
        "{}",
        s.upstream.received_text()
    );
    assert_eq!(
        s.proxy.summaries(),
        [format!("allowed GET registry.test:{port} /simple/")]
    );
    assert_eq!(
        s.proxy.entries()[0].rule.as_deref(),
        Some("hosts[0].private \"127.0.0.1/32\"")
    );

    // A CONNECT tunnel to the same name: passed through to the upstream, one record naming the
    // entry.
    let (mut tunnel, status, head) = connect(s.proxy.addr, &format!("registry.test:{port}")).await;
    assert_eq!(status, 200, "{head}");
    tunnel
        .write_all(b"GET /tunnelled HTTP/1.1\r\nHost: registry.test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    tunnel.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("hello"), "{answer}");
    let last = s.proxy.entries().pop().unwrap();
    assert_eq!(
        summary(&last),
        format!("allowed CONNECT registry.test:{port}")
    );
    assert_eq!(
        last.rule.as_deref(),
        Some("hosts[0].private \"127.0.0.1/32\"")
    );
}

#[tokio::test]
async fn another_name_on_the_same_address_is_refused() {
    let s = setup(PRIVATE, hello()).await;
    let port = s.upstream.port();
    let mut client = h1(TcpStream::connect(s.proxy.addr).await.unwrap()).await;
    let (status, body) = text(
        client
            .send_request(get(&format!("http://other.test:{port}/")))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("\"private_address\""), "{body}");
    let (_, status, head) = connect(s.proxy.addr, &format!("other.test:{port}")).await;
    assert_eq!(status, 403, "{head}");
    assert!(s.network.dialled().is_empty(), "{:?}", s.network.dialled());
    assert_eq!(s.upstream.connection_count(), 0);
    assert_eq!(
        s.proxy.summaries(),
        [
            format!("denied GET other.test:{port} / -> private_address"),
            format!("denied CONNECT other.test:{port} -> private_address"),
        ]
    );
}

#[tokio::test]
async fn one_address_outside_the_ranges_refuses_the_lot() {
    let s = setup(PRIVATE, hello()).await;
    let port = s.upstream.port();
    let mut client = h1(TcpStream::connect(s.proxy.addr).await.unwrap()).await;
    let (status, body) = text(
        client
            .send_request(get(&format!("http://mixed.test:{port}/")))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["error"], "private_address");
    assert_eq!(
        json["message"],
        format!(
            "mixed.test:{port} resolves to 127.0.0.2, an internal address (127.0.0.0/8), outside \
             its private ranges (127.0.0.1/32); to allow it, add 127.0.0.2/32 (or a range \
             holding it) to hosts[1].private"
        )
    );
    assert!(s.network.dialled().is_empty(), "{:?}", s.network.dialled());
    assert_eq!(s.upstream.connection_count(), 0);
    assert_eq!(
        s.proxy.entries()[0].rule.as_deref(),
        Some("hosts[1].private")
    );
}

#[tokio::test]
async fn an_mcp_server_with_private_ranges_is_reached_and_still_checked_per_tool() {
    let policy = "\
version: 1
mcp:
  corp:
    url: http://mcp.test:PORT/mcp
    private: [\"127.0.0.1\"]
    tools: {allow: [search]}
";
    let s = setup(policy, mcp_handler()).await;
    let port = s.upstream.port();
    let url = format!("http://mcp.test:{port}/mcp");
    let target = format!("mcp.test:{port}");
    let mut client = h1(TcpStream::connect(s.proxy.addr).await.unwrap()).await;
    let (status, body) = text(
        client
            .send_request(tools_call(&target, &url, 1, "search"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("upstream says hi"), "{body}");
    let (status, body) = text(
        client
            .send_request(tools_call(&target, &url, 2, "delete_everything"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("policy_denied"), "{body}");
    assert_eq!(
        s.proxy.summaries(),
        [
            format!("allowed POST mcp.test:{port} /mcp tools/call search"),
            format!(
                "denied POST mcp.test:{port} /mcp tools/call delete_everything -> policy_denied"
            ),
        ]
    );
    assert_eq!(s.upstream.received_text().matches("POST ").count(), 1);
}
