//! `tools.confirm` (README, "Confirm") over loopback with real TLS on both hops: a held call is
//! offered on the session's control socket (a real Unix socket, read and answered here as a
//! watcher would), and reaches the upstream only after `yes`. `no`, no answer in time, the
//! client hanging up and the session ending each deny it `not_confirmed` with nothing forwarded;
//! each case's records are checked.

mod common;

use common::*;
use fenzi_proxy::Proxy;
use fenzi_proxy::confirm::ControlSocket;
use fenzi_proxy::confirm::protocol::{Offer, ServerLine, WatcherLine};
use http_body_util::Full;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

struct Setup {
    proxy: TestProxy,
    upstream: Upstream,
    target: String,
    socket: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

/// The upstream `local` (TLS on 127.0.0.1) allowing every tool and holding `delete_issue` and
/// `create_*` for `timeout`, and the proxy with its control socket in a private directory.
async fn setup(timeout: &str) -> Setup {
    let pki = TestPki::new();
    let upstream = http_upstream(Some(pki.server_config(&["127.0.0.1"])), handler()).await;
    let target = format!("127.0.0.1:{}", upstream.port());
    let yaml = format!(
        "version: 1\nmcp:\n  local:\n    url: https://{target}/mcp\n    tools:\n      allow: [\"*\"]\n      \
         confirm: [delete_issue, \"create_*\"]\n      confirm_timeout: {timeout}\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("fenzi");
    let control = ControlSocket::bind(&run, "sess1").unwrap();
    let socket = control.path().to_path_buf();
    let sink = Arc::new(MemorySink::default());
    let proxy = Proxy::builder(policy(&yaml, None), sink.clone())
        .options(options(&pki))
        .network(Arc::new(FakeNetwork::default()))
        .control_socket(control)
        .build()
        .unwrap();
    let proxy = serve_proxy(proxy, sink).await;
    Setup {
        proxy,
        upstream,
        target,
        socket,
        _dir: dir,
    }
}

/// [`mcp_handler`], answering a batch with one result per call.
fn handler() -> Handler {
    let single = mcp_handler();
    Arc::new(move |parts, body| {
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let Some(batch) = value.as_array() else {
            return single(parts, body);
        };
        let replies: Vec<_> = batch
            .iter()
            .map(
                |m| serde_json::json!({"jsonrpc": "2.0", "id": m["id"], "result": {"content": []}}),
            )
            .collect();
        respond(
            200,
            "application/json",
            serde_json::Value::from(replies).to_string(),
        )
    })
}

/// A watcher's connection to the control socket.
struct Watcher {
    lines: tokio::io::Lines<BufReader<OwnedReadHalf>>,
    write: OwnedWriteHalf,
}

impl Watcher {
    async fn connect(path: &std::path::Path) -> Watcher {
        // The socket is served once the proxy's accept loop runs.
        let mut tries = 0;
        let stream = loop {
            match UnixStream::connect(path).await {
                Ok(s) => break s,
                Err(e) if tries < 100 => {
                    tries += 1;
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => panic!("cannot connect to {}: {e}", path.display()),
            }
        };
        let (read, write) = stream.into_split();
        Watcher {
            lines: BufReader::new(read).lines(),
            write,
        }
    }

    async fn next(&mut self) -> ServerLine {
        let line = tokio::time::timeout(Duration::from_secs(5), self.lines.next_line())
            .await
            .expect("a line from fenzi within 5s")
            .unwrap()
            .expect("the control socket stays open");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    async fn held(&mut self) -> Offer {
        match self.next().await {
            ServerLine::Held(offer) => offer,
            other => panic!("expected a held call, got {other:?}"),
        }
    }

    async fn answer(&mut self, id: &str, allow: bool) {
        let line = WatcherLine::Answer {
            id: id.into(),
            allow,
        }
        .to_line();
        self.write.write_all(line.as_bytes()).await.unwrap();
        assert_eq!(
            self.next().await,
            ServerLine::Answered {
                id: id.into(),
                allow
            }
        );
    }
}

impl Setup {
    async fn client(&self) -> Sender {
        let (stream, status, head) = connect(self.proxy.addr, &self.target).await;
        assert_eq!(status, 200, "{head}");
        let ca = self.proxy.proxy.ca().cert_der().clone();
        h1(tls_over(stream, &ca, "127.0.0.1", &[b"http/1.1"])
            .await
            .unwrap())
        .await
    }

    /// A call sent on a new connection, answered in the background.
    fn send(&self, client: Sender, id: u64, tool: &str) -> tokio::task::JoinHandle<(u16, String)> {
        self.send_request(client, tools_call(&self.target, "/mcp", id, tool))
    }

    fn send_request(
        &self,
        mut client: Sender,
        req: http::Request<Full<bytes::Bytes>>,
    ) -> tokio::task::JoinHandle<(u16, String)> {
        tokio::spawn(async move { text(client.send_request(req).await.unwrap()).await })
    }

    /// The records after the CONNECT's: `(summary, rule, confirm)`.
    fn records(&self) -> Vec<(String, Option<String>, Option<String>)> {
        self.proxy
            .entries()
            .iter()
            .filter(|e| e.method != "CONNECT")
            .map(|e| (summary(e), e.rule.clone(), e.confirm.clone()))
            .collect()
    }

    fn line(&self, outcome: &str, tool: &str, reason: Option<&str>) -> String {
        let mut out = format!("{outcome} POST {} /mcp tools/call {tool}", self.target);
        if let Some(reason) = reason {
            out.push_str(" -> ");
            out.push_str(reason);
        }
        out
    }

    fn upstream_calls(&self) -> usize {
        self.upstream.received_text().matches("tools/call").count()
    }
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

const RULE: &str = "mcp.local.tools.confirm \"delete_issue\"";

fn yes_by_me() -> String {
    format!("yes by uid {} pid {}", rustix_uid(), std::process::id())
}

fn rustix_uid() -> u32 {
    std::fs::metadata("/proc/self").map_or(0, |m| std::os::unix::fs::MetadataExt::uid(&m))
}

fn assert_not_confirmed(status: u16, body: &str, id: u64) {
    assert_eq!(status, 403, "{body}");
    let error = json(body);
    assert_eq!(error["id"], id);
    assert_eq!(error["error"]["code"], -31013);
    assert_eq!(error["error"]["data"]["reason"], "not_confirmed");
}

#[tokio::test]
async fn a_confirmed_call_reaches_the_upstream_and_its_answer_the_client() {
    let s = setup("5s").await;
    let mut watcher = Watcher::connect(&s.socket).await;
    let call = s.send(s.client().await, 7, "delete_issue");
    let offer = watcher.held().await;
    assert_eq!(
        (
            offer.session.as_str(),
            offer.server.as_str(),
            offer.tool.as_str()
        ),
        ("sess1", "local", "delete_issue")
    );
    assert_eq!(offer.arguments, r#"{"text":"hello"}"#);
    assert_eq!(offer.rule, RULE);
    assert!(
        offer.timeout_ms > 0 && offer.timeout_ms <= 5000,
        "{offer:?}"
    );
    assert!(offer.deadline.ends_with('Z'), "{offer:?}");
    // Held: nothing forwarded yet.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(s.upstream_calls(), 0, "a held call reached the upstream");
    assert!(!call.is_finished());

    watcher.answer(&offer.id, true).await;
    let (status, body) = call.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("upstream says hi"), "{body}");
    assert_eq!(s.upstream_calls(), 1);
    assert_eq!(
        s.records(),
        [
            (
                s.line("held", "delete_issue", None),
                Some(RULE.to_string()),
                Some("waits up to 5s".to_string())
            ),
            (
                s.line("allowed", "delete_issue", None),
                Some("mcp.local.tools.allow \"*\"".to_string()),
                Some(yes_by_me())
            ),
        ]
    );
    // A second answer to the same call is refused.
    let again = WatcherLine::Answer {
        id: offer.id.clone(),
        allow: false,
    };
    watcher
        .write
        .write_all(again.to_line().as_bytes())
        .await
        .unwrap();
    assert!(matches!(watcher.next().await, ServerLine::Error(e) if e.contains("no call")));
}

#[tokio::test]
async fn a_call_not_listed_in_confirm_is_not_held() {
    let s = setup("5s").await;
    let (status, body) = s.send(s.client().await, 1, "get_issue").await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        s.records(),
        [(
            s.line("allowed", "get_issue", None),
            Some("mcp.local.tools.allow \"*\"".to_string()),
            None
        )]
    );
}

#[tokio::test]
async fn a_refused_call_gets_403_not_confirmed_and_the_upstream_sees_nothing() {
    let s = setup("5s").await;
    let mut watcher = Watcher::connect(&s.socket).await;
    let call = s.send(s.client().await, 8, "delete_issue");
    let offer = watcher.held().await;
    watcher.answer(&offer.id, false).await;
    let (status, body) = call.await.unwrap();
    assert_not_confirmed(status, &body, 8);
    let message = json(&body)["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains(RULE) && message.contains("no by uid"),
        "{message}"
    );
    assert_eq!(s.upstream_calls(), 0);
    let records = s.records();
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0].0, s.line("held", "delete_issue", None));
    assert_eq!(
        records[1],
        (
            s.line("denied", "delete_issue", Some("not_confirmed")),
            Some(RULE.to_string()),
            Some(format!(
                "no by uid {} pid {}",
                rustix_uid(),
                std::process::id()
            ))
        )
    );
}

#[tokio::test]
async fn a_call_nobody_answers_is_denied_after_its_timeout() {
    let s = setup("300ms").await;
    let started = std::time::Instant::now();
    let (status, body) = s.send(s.client().await, 9, "create_issue").await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_not_confirmed(status, &body, 9);
    assert_eq!(s.upstream_calls(), 0);
    let rule = "mcp.local.tools.confirm \"create_*\"".to_string();
    assert_eq!(
        s.records(),
        [
            (
                s.line("held", "create_issue", None),
                Some(rule.clone()),
                Some("waits up to 300ms".into())
            ),
            (
                s.line("denied", "create_issue", Some("not_confirmed")),
                Some(rule),
                Some("no answer in 300ms".into())
            ),
        ]
    );
    // A watcher connecting later is shown nothing: the call is gone.
    let mut watcher = Watcher::connect(&s.socket).await;
    let call = s.send(s.client().await, 10, "delete_issue");
    let offer = watcher.held().await;
    assert_eq!(offer.tool, "delete_issue", "only the new call is shown");
    watcher.answer(&offer.id, true).await;
    assert_eq!(call.await.unwrap().0, 200);
}

#[tokio::test]
async fn a_client_that_hangs_up_while_held_drops_the_hold_and_it_is_recorded() {
    let s = setup("10s").await;
    let mut watcher = Watcher::connect(&s.socket).await;
    let call = s.send(s.client().await, 11, "delete_issue");
    let offer = watcher.held().await;
    // The client goes away: its connection (owned by the task) is dropped.
    call.abort();
    assert_eq!(
        watcher.next().await,
        ServerLine::Gone {
            id: offer.id.clone(),
            why: "client gone".into()
        }
    );
    s.proxy.wait_for_entries(3).await;
    let records = s.records();
    assert_eq!(
        records[1],
        (
            s.line("denied", "delete_issue", Some("not_confirmed")),
            Some(RULE.to_string()),
            Some("client gone".into())
        ),
        "{records:?}"
    );
    assert_eq!(s.upstream_calls(), 0);
}

#[tokio::test]
async fn a_batch_is_held_until_each_confirm_call_is_answered_and_one_no_refuses_it() {
    let s = setup("5s").await;
    let mut watcher = Watcher::connect(&s.socket).await;
    let batch = serde_json::json!([
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "delete_issue", "arguments": {"id": "ENG-1"}}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "get_issue", "arguments": {}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "create_issue", "arguments": {"title": "x"}}}
    ]);
    let req = |body: &serde_json::Value| {
        http::Request::builder()
            .method("POST")
            .uri("/mcp")
            .header("host", &s.target)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Full::new(bytes::Bytes::from(body.to_string())))
            .unwrap()
    };
    let call = s.send_request(s.client().await, req(&batch));
    let first = watcher.held().await;
    let second = watcher.held().await;
    assert_eq!(
        (first.tool.as_str(), first.arguments.as_str()),
        ("delete_issue", r#"{"id":"ENG-1"}"#)
    );
    assert_eq!(second.tool, "create_issue");
    watcher.answer(&first.id, true).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!call.is_finished(), "one yes does not release the batch");
    watcher.answer(&second.id, false).await;
    let (status, body) = call.await.unwrap();
    assert_eq!(status, 403, "{body}");
    let replies = json(&body);
    let replies = replies.as_array().unwrap();
    assert_eq!(replies.len(), 3);
    assert!(
        replies
            .iter()
            .all(|r| r["error"]["data"]["reason"] == "not_confirmed")
    );
    assert_eq!(s.upstream_calls(), 0);
    let summaries: Vec<String> = s.records().into_iter().map(|r| r.0).collect();
    assert_eq!(
        summaries,
        [
            s.line("held", "delete_issue", None),
            s.line("held", "create_issue", None),
            s.line("denied", "delete_issue", Some("not_confirmed")),
            s.line("denied", "get_issue", Some("not_confirmed")),
            s.line("denied", "create_issue", Some("not_confirmed")),
        ]
    );

    // Both confirmed: the batch goes, every record allowed.
    let call = s.send_request(s.client().await, req(&batch));
    let (a, b) = (watcher.held().await, watcher.held().await);
    watcher.answer(&b.id, true).await;
    watcher.answer(&a.id, true).await;
    let (status, body) = call.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(s.upstream_calls(), 3);
    let records = s.records();
    let allowed: Vec<_> = records[records.len() - 3..].to_vec();
    assert_eq!(allowed[0].0, s.line("allowed", "delete_issue", None));
    assert_eq!(allowed[0].2, Some(yes_by_me()));
    assert_eq!(allowed[1].2, None, "get_issue was not held");
    assert_eq!(allowed[2].2, Some(yes_by_me()));
}

#[tokio::test]
async fn held_calls_are_denied_when_the_session_ends() {
    let mut s = setup("30s").await;
    let mut watcher = Watcher::connect(&s.socket).await;
    let call = s.send(s.client().await, 12, "delete_issue");
    let offer = watcher.held().await;
    s.proxy.shutdown();
    let (status, body) = call.await.unwrap();
    assert_not_confirmed(status, &body, 12);
    assert_eq!(
        watcher.next().await,
        ServerLine::Gone {
            id: offer.id,
            why: "session ended".into()
        }
    );
    let records = s.records();
    assert_eq!(
        records[1].2.as_deref(),
        Some("session ended"),
        "{records:?}"
    );
    s.proxy.done.take().unwrap().await.unwrap();
    assert!(
        !s.socket.exists(),
        "the control socket is removed with the session"
    );
}

#[tokio::test]
async fn a_peer_of_another_uid_is_refused() {
    // Needs root to connect as another user (uid 65534, through setpriv) and Python to connect.
    if rustix_uid() != 0 || !std::path::Path::new("/usr/bin/python3").exists() {
        eprintln!("*** SKIPPED a_peer_of_another_uid_is_refused: needs root and /usr/bin/python3");
        return;
    }
    let s = setup("5s").await;
    let _watcher = Watcher::connect(&s.socket).await;
    // Open the path to others, so that only the uid check stands between them and the socket.
    let dir = s.socket.parent().unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(&s.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let call = s.send(s.client().await, 13, "delete_issue");
    s.proxy.wait_for_entries(2).await;
    let script = format!(
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({:?})\n\
         print(s.makefile().readline(), end='')\n",
        s.socket.display().to_string()
    );
    let out = tokio::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["/usr/bin/python3", "-c", &script])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("only uid 0, not uid 65534"),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Its answer was not taken: the call is still held, then times out.
    let (status, body) = call.await.unwrap();
    assert_not_confirmed(status, &body, 13);
    assert_eq!(
        s.records()[1].2.as_deref(),
        Some("no answer in 5s"),
        "{:?}",
        s.records()
    );
}
