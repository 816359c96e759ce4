//! Where on an MCP server's host:port JSON-RPC may go, over loopback through the intercepting proxy:
//! only to the endpoint the policy's `url` names, or to the message path a legacy HTTP+SSE server
//! announced in its `endpoint` event; and `Mcp-Param-*` headers spelled with `_` never reach it.

mod common;

use bytes::Bytes;
use common::*;
use fenzi_policy::Reason;
use http::Request;
use http::request::Parts;
use http_body_util::{BodyExt, Full};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

struct Setup {
    proxy: TestProxy,
    upstream: Upstream,
    target: String,
}

/// An MCP server on 127.0.0.1 named by its IP literal, its endpoint at `path`, `echo` allowed.
async fn setup(path: &str, handler: Handler) -> Setup {
    let pki = TestPki::new();
    let upstream = http_upstream(Some(pki.server_config(&["127.0.0.1"])), handler).await;
    let target = format!("127.0.0.1:{}", upstream.port());
    let yaml = format!(
        "version: 1\nmcp:\n  local:\n    url: https://{target}{path}\n    tools:\n      allow: [echo]\n"
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
        upstream,
        target,
    }
}

impl Setup {
    async fn client(&self) -> Sender {
        self.proxy.intercepted_h1(&self.target).await
    }

    /// Sends `req`; returns the status, the body and the `content-type`.
    async fn send(&self, client: &mut Sender, req: Request<Full<Bytes>>) -> (u16, String, String) {
        let response = client.send_request(req).await.unwrap();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let (status, body) = text(response).await;
        (status, body, content_type)
    }

    /// Asserts a POST of an allowed `tools/call` to `path` is refused `policy_denied` with fenzi's
    /// usual answer, recorded, and that not a byte of it reached the server.
    async fn assert_refused_at(&self, client: &mut Sender, path: &str, id: u64) {
        let before = self.upstream.received_len();
        let records = self.proxy.entries().len();
        let (status, body, content_type) = self
            .send(client, tools_call(&self.target, path, id, "echo"))
            .await;
        assert_eq!(status, 403, "{path}: {body}");
        assert_eq!(content_type, "application/json", "{path}");
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["error"], "policy_denied", "{path}: {body}");
        assert!(
            answer["message"]
                .as_str()
                .unwrap()
                .ends_with("not permitted by policy"),
            "{path}: {body}"
        );
        assert_eq!(
            self.upstream.received_len(),
            before,
            "{path}: the refused POST reached the server"
        );
        let entries = self.proxy.entries();
        assert_eq!(entries.len(), records + 1, "{path}: one record");
        let record = entries.last().unwrap();
        assert_eq!(record.reason, Some(Reason::PolicyDenied), "{path}");
        assert_eq!(
            record.rule.as_deref(),
            Some("mcp.local default deny"),
            "{path}"
        );
        assert_eq!(record.method, "POST");
        let without_query = path.split('?').next().unwrap();
        assert_eq!(record.path.as_deref(), Some(without_query));
        assert_eq!(record.server.as_deref(), Some("local"));
    }
}

#[tokio::test]
async fn an_allowed_call_reaches_the_server_only_at_its_endpoint() {
    let s = setup("/mcp", mcp_handler()).await;
    let mut client = s.client().await;

    let (status, body, _) = s
        .send(&mut client, tools_call(&s.target, "/mcp", 1, "echo"))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("upstream says hi"), "{body}");
    let allowed = s.proxy.entries().pop().unwrap();
    assert_eq!(allowed.reason, None);
    assert_eq!(allowed.tool.as_deref(), Some("echo"));

    // The same call elsewhere on the host:port, including every spelling a server might resolve
    // to the endpoint, is refused and recorded; the session goes on.
    for (i, path) in [
        "/admin/run",
        "/messages?sessionId=1",
        "/",
        "/mcp/",
        "/MCP",
        "//mcp",
        "/./mcp",
        "/x/../mcp",
        "/%6dcp",
        "/mcp%2f",
        "/mcp;x=1",
        "/.well-known/oauth-protected-resource",
    ]
    .into_iter()
    .enumerate()
    {
        s.assert_refused_at(&mut client, path, 10 + i as u64).await;
    }

    let (status, body, _) = s
        .send(&mut client, tools_call(&s.target, "/mcp?k=v", 2, "echo"))
        .await;
    assert_eq!(status, 200, "the query is not the path: {body}");
    assert_eq!(
        s.upstream.received_text().matches("POST ").count(),
        2,
        "only the two calls to the endpoint arrived"
    );
}

/// A legacy HTTP+SSE server: `GET /sse` opens a stream whose first event announces
/// `/messages?sessionId=abc`; POSTs are answered as [`mcp_handler`] does.
fn legacy_handler(stream_open: mpsc::Sender<mpsc::Sender<Bytes>>) -> Handler {
    let posts = mcp_handler();
    Arc::new(move |parts: Parts, body: Bytes| {
        if parts.method != http::Method::GET {
            return posts(parts, body);
        }
        let (tx, rx) = mpsc::channel::<Bytes>(4);
        let opened = stream_open.clone();
        tokio::spawn(async move {
            let _ = tx
                .send(Bytes::from_static(
                    b"event: endpoint\ndata: /messages?sessionId=abc\n\n",
                ))
                .await;
            // Held open, as a legacy stream is, until the test ends.
            let _ = opened.send(tx).await;
        });
        http::Response::builder()
            .status(200)
            .header("content-type", "text/event-stream")
            .body(ChannelBody(rx).boxed_unsync())
            .unwrap()
    })
}

#[tokio::test]
async fn a_legacy_server_is_posted_to_only_where_it_announced() {
    let (open_tx, mut open_rx) = mpsc::channel(1);
    let s = setup("/sse", legacy_handler(open_tx)).await;
    let mut posts = s.client().await;

    // Before the server said where, its message path is just another path.
    s.assert_refused_at(&mut posts, "/messages?sessionId=abc", 1)
        .await;

    let mut stream = s.client().await;
    let response = stream
        .send_request(
            Request::builder()
                .uri("/sse")
                .header("host", &s.target)
                .header("accept", "text/event-stream")
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), async {
        while !seen.ends_with(b"\n\n") {
            let frame = body.frame().await.unwrap().unwrap();
            if let Ok(data) = frame.into_data() {
                seen.extend_from_slice(&data);
            }
        }
    })
    .await
    .expect("the endpoint event");
    assert_eq!(
        String::from_utf8_lossy(&seen),
        "event: endpoint\ndata: /messages?sessionId=abc\n\n"
    );
    let _held = open_rx.recv().await.unwrap();

    let (status, reply, _) = s
        .send(
            &mut posts,
            tools_call(&s.target, "/messages?sessionId=abc", 2, "echo"),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    let allowed = s.proxy.entries().pop().unwrap();
    assert_eq!(allowed.reason, None);
    assert_eq!(allowed.path.as_deref(), Some("/messages"));
    // A denied tool at the announced path is still denied by the tool rules.
    let (status, reply, _) = s
        .send(
            &mut posts,
            tools_call(&s.target, "/messages?sessionId=abc", 3, "delete_everything"),
        )
        .await;
    assert_eq!(status, 403, "{reply}");
    assert!(reply.contains("\"id\":3"), "{reply}");

    // The announcement names one path, exactly.
    for (i, path) in [
        "/messages/",
        "/Messages",
        "/x/../messages",
        "/m%65ssages",
        "/admin",
    ]
    .into_iter()
    .enumerate()
    {
        s.assert_refused_at(&mut posts, path, 10 + i as u64).await;
    }
}

#[tokio::test]
async fn an_mcp_param_header_spelled_with_underscores_is_refused() {
    let s = setup("/mcp", mcp_handler()).await;
    let mut client = s.client().await;
    for (i, name) in ["Mcp_Param_Text", "mcp-param_text", "MCP_PARAM-TEXT"]
        .into_iter()
        .enumerate()
    {
        let before = s.upstream.received_len();
        let mut req = tools_call(&s.target, "/mcp", i as u64 + 1, "echo");
        req.headers_mut().insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            "hello".parse().unwrap(),
        );
        let (status, body, _) = s.send(&mut client, req).await;
        assert_eq!(status, 400, "{name}: {body}");
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            answer["error"]["data"]["reason"], "bad_request",
            "{name}: {body}"
        );
        assert_eq!(answer["id"], i as u64 + 1, "{name}: {body}");
        assert_eq!(
            s.upstream.received_len(),
            before,
            "{name} reached the server"
        );
        let record = s.proxy.entries().pop().unwrap();
        assert_eq!(record.reason, Some(Reason::BadRequest), "{name}");
        assert_eq!(record.rule.as_deref(), Some("mcp headers"), "{name}");
    }
    // The same call without it goes through.
    let (status, body, _) = s
        .send(&mut client, tools_call(&s.target, "/mcp", 9, "echo"))
        .await;
    assert_eq!(status, 200, "{body}");
}
