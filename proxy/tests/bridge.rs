//! The bridge with real peers: the official Python SDK's stdio server
//! (`testdata/e2e/mcp_stdio_server.py`) behind [`fenzi_proxy::bridge::Bridge`], served on a
//! loopback port, and the SDK's own Streamable HTTP client (`testdata/e2e/bridge_client.py`) in
//! front: lists, calls, progress, a sampling request from the server, one process per session, a
//! crash that fails the call promptly and a restart after it. Then the crash backoff (503 with
//! `Retry-After`) and the server's stderr in the log, with plain HTTP.
//!
//! Without the `.venv` (or `FENZI_E2E_PYTHON`) the test says SKIPPED and passes, unless
//! `FENZI_REQUIRE_SDK` is set.

mod common;

use bytes::Bytes;
use common::repo;
use fenzi_proxy::bridge::{Bridge, BridgeLog, HostCommand, SandboxLauncher, SandboxedCommand};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

fn python() -> Option<PathBuf> {
    common::sdk_python("bridge")
}

#[derive(Default)]
struct Lines(Mutex<Vec<String>>);

impl BridgeLog for Lines {
    fn stderr_line(&self, server: &str, line: &str) {
        self.0.lock().unwrap().push(format!("{server}: {line}"));
    }
    fn note(&self, server: &str, what: &str) {
        self.0
            .lock()
            .unwrap()
            .push(format!("{server} (fenzi): {what}"));
    }
}

/// Serves `bridge` on a loopback port; returns the port.
async fn serve(bridge: Arc<Bridge>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(bridge.serve_on(listener));
    port
}

fn stdio_server(python: &PathBuf, calls: &std::path::Path) -> HostCommand {
    HostCommand {
        program: python.into(),
        args: vec![
            repo().join("testdata/e2e/mcp_stdio_server.py").into(),
            "--calls".into(),
            calls.into(),
        ],
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: repo(),
    }
}

async fn post(port: u16, body: &str, session: Option<&str>) -> (u16, http::HeaderMap, String) {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::post("/mcp")
        .header("host", "bridge")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(s) = session {
        req = req.header("mcp-session-id", s);
    }
    let response = send
        .send_request(
            req.body(http_body_util::Full::new(Bytes::from(body.to_owned())))
                .unwrap(),
        )
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = String::from_utf8(
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    (status, headers, text)
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_reaches_a_stdio_server_through_the_bridge() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls");
    let log = Arc::new(Lines::default());
    let bridge = Arc::new(Bridge::new(
        "local",
        Box::new(stdio_server(&python, &calls)),
        log.clone(),
    ));
    bridge
        .prepare()
        .expect("the server starts before any client");
    let port = serve(bridge.clone()).await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let out = tokio::process::Command::new(&python)
        .arg(repo().join("testdata/e2e/bridge_client.py"))
        .args(["--url", &url, "--crash"])
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the client failed:\n{stdout}\n{stderr}"
    );
    assert!(!stdout.contains("FAIL"), "{stdout}");
    for check in [
        "legacy: echo",
        "auto: echo",
        "legacy: a sampling request from the server, answered",
        "legacy: progress notifications before the answer",
        "auto: progress notifications before the answer",
        "two sessions are two server processes",
        "a crashed server: the call fails promptly",
        "after the crash a new session starts a new server",
    ] {
        assert!(
            stdout.contains(&format!("PASS {check}")),
            "no PASS {check}:\n{stdout}"
        );
    }
    let calls = std::fs::read_to_string(&calls).unwrap();
    assert!(
        calls.lines().filter(|l| *l == "echo").count() >= 3,
        "{calls}"
    );
    let logged = log.0.lock().unwrap().join("\n");
    assert!(
        logged.contains("local: fenzi-stdio server"),
        "stderr reaches the log: {logged}"
    );
    assert!(
        logged.contains("local (fenzi): the local MCP server exited (crash 1 in a row)"),
        "{logged}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_keeps_crashing_is_refused_with_retry_after_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    // A "server" that exits at once: every session it starts ends before it answers.
    let launch = HostCommand {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), "echo dying >&2; exit 7".into()],
        env: vec![],
        cwd: dir.path().to_path_buf(),
    };
    let log = Arc::new(Lines::default());
    let bridge = Arc::new(Bridge::new("flaky", Box::new(launch), log.clone()));
    let port = serve(bridge.clone()).await;
    let (status, _, body) = post(port, INITIALIZE, None).await;
    // Depending on who is first, the write to its stdin fails (502), the wait for its answer ends
    // with nothing (502), or the request was sent and the end answers it with an error (200 with a
    // JSON-RPC error): each an error at once, never a hang.
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        (status == 502
            && (message.contains("ended without answering")
                || message.contains("cannot write to the local MCP server `flaky`")))
            || (status == 200 && message.contains("`flaky` exited")),
        "the first session fails at once: {status} {body}"
    );
    // The crash is counted when the process is reaped; give it a moment.
    for _ in 0..50 {
        if log
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("crash 1 in a row"))
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (status, headers, body) = post(port, INITIALIZE, None).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(headers.get("retry-after").unwrap(), "1");
    assert!(body.contains("crashed 1 times in a row"), "{body}");
    // Without a session id the request is not an initialize: 404 for a session that is gone.
    let (status, _, body) = post(
        port,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        Some("0123"),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("initialize again"), "{body}");
    let logged = log.0.lock().unwrap().join("\n");
    assert!(logged.contains("flaky: dying"), "{logged}");
}

/// One tools/call on an initialized session; returns the text of its result.
async fn call(port: u16, session: &str, id: u32, tool: &str, args: serde_json::Value) -> String {
    let body = serde_json::json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args}});
    let (status, _, text) = post(port, &body.to_string(), Some(session)).await;
    assert_eq!(status, 200, "{text}");
    let answer: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{text}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_server_writes_only_its_state_directory_and_lives_in_its_own_namespaces() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let launcher = match SandboxLauncher::new(SandboxedCommand {
        program: python.clone().into(),
        args: vec![repo().join("testdata/e2e/mcp_stdio_server.py").into()],
        env: vec![("LANG".into(), "C.UTF-8".into())],
        path: "/usr/bin:/bin".into(),
        state_dir: state.clone(),
        cwd: None,
        overlays: vec![],
        transparent: None,
    }) {
        Ok(l) => l,
        Err(e) => panic!("{e}"),
    };
    let log = Arc::new(Lines::default());
    let bridge = Arc::new(Bridge::new("boxed", Box::new(launcher), log.clone()));
    if let Err(e) = bridge.prepare() {
        assert!(
            std::env::var_os("FENZI_REQUIRE_SANDBOX").is_none(),
            "the sandbox is required here: {e}"
        );
        eprintln!("*** SKIPPED: the sandbox cannot run here: {e}");
        return;
    }
    let port = serve(bridge.clone()).await;
    let (status, headers, text) = post(port, INITIALIZE, None).await;
    assert_eq!(status, 200, "{text}");
    let session = headers
        .get("mcp-session-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let (status, _, _) = post(
        port,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        Some(&session),
    )
    .await;
    assert_eq!(status, 202);

    let who = call(port, &session, 2, "whoami", serde_json::json!({})).await;
    // PID 1 is the sandbox's init: the server is a low pid of a namespace of its own.
    let pid: u32 = who
        .split_whitespace()
        .next()
        .unwrap()
        .trim_start_matches("pid=")
        .parse()
        .unwrap();
    assert!(pid < 10, "the server sees its own PID namespace: {who}");
    assert!(
        who.contains(&format!("home={}", state.display())),
        "HOME is the state directory: {who}"
    );
    let inside = state.join("note");
    assert_eq!(
        call(
            port,
            &session,
            3,
            "write",
            serde_json::json!({"path": inside})
        )
        .await,
        "wrote"
    );
    assert!(inside.exists());
    let refused = call(
        port,
        &session,
        4,
        "write",
        serde_json::json!({"path": outside.join("x")}),
    )
    .await;
    assert!(
        refused.starts_with("refused: "),
        "Landlock keeps it to its state directory: {refused}"
    );
    assert!(!outside.join("x").exists());
    let tmp = call(
        port,
        &session,
        5,
        "write",
        serde_json::json!({"path": "/tmp/fenzi-bridge-escape"}),
    )
    .await;
    assert!(
        tmp.starts_with("refused: "),
        "the shared /tmp is not writable: {tmp}"
    );
    bridge.stop_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_the_server_left_in_its_state_directory_stops_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let elsewhere = dir.path().join("the-persons-files");
    std::fs::create_dir(&state).unwrap();
    std::fs::create_dir(&elsewhere).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    // What a hostile server can do in the one place it may write: make its `tmp` a link out.
    std::os::unix::fs::symlink(&elsewhere, state.join("tmp")).unwrap();
    let launcher = SandboxLauncher::new(SandboxedCommand {
        program: "/bin/true".into(),
        args: vec![],
        env: vec![],
        path: "/usr/bin:/bin".into(),
        state_dir: state.clone(),
        cwd: None,
        overlays: vec![],
        transparent: None,
    })
    .unwrap();
    let bridge = Bridge::new("planted", Box::new(launcher), Arc::new(Lines::default()));
    let refused = bridge
        .prepare()
        .expect_err("a link in place of tmp/ is refused");
    assert!(refused.to_string().contains("symbolic link"), "{refused}");
    // Nothing was made or changed through the link.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&elsewhere).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o755, "the link's target kept its mode");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    // The state directory itself as a link is refused the same way.
    let linked_state = dir.path().join("linked-state");
    std::os::unix::fs::symlink(&elsewhere, &linked_state).unwrap();
    let launcher = SandboxLauncher::new(SandboxedCommand {
        program: "/bin/true".into(),
        args: vec![],
        env: vec![],
        path: "/usr/bin:/bin".into(),
        state_dir: linked_state,
        cwd: None,
        overlays: vec![],
        transparent: None,
    })
    .unwrap();
    let bridge = Bridge::new("planted", Box::new(launcher), Arc::new(Lines::default()));
    assert!(bridge.prepare().is_err());
    assert_eq!(
        std::fs::metadata(&elsewhere).unwrap().permissions().mode() & 0o777,
        0o755
    );
}
