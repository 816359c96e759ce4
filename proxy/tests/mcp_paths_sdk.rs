//! Servers by path with a real MCP server (README, "Servers by path"): one process of the official
//! Python SDK (`testdata/e2e/mcp_two_paths_server.py`, from the repository's `.venv`, which
//! `scripts/e2e/setup.sh` makes) serves two MCP servers on one TLS port, the full toolset at `/mcp`
//! and a read-only one at `/mcp/readonly`, each requiring its own bearer token. The policy has two
//! entries on that host:port with different tool allow lists and `token: true` each. Through the
//! intercepting proxy every request is decided by the entry its path names: its tools, its token
//! (added or swapped, never the sibling's), its record; a placeholder of one entry sent to the
//! other's path is `credential_endpoint_mismatch`, and a POST to a third path `policy_denied`.
//! The server's own log of calls proves what reached which server, and that nothing refused did.
//!
//! Without the `.venv` (or `FENZI_E2E_PYTHON`) the test says SKIPPED and passes, unless
//! `FENZI_REQUIRE_SDK` is set.

mod common;

use common::*;
use fenzi_policy::Reason;
use fenzi_proxy::Proxy;
use fenzi_proxy::secrets::SecretSet;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// What a record says of a request: its server, reason, secrets and rule.
type Seen<'a> = (
    Option<&'a str>,
    Option<Reason>,
    Vec<String>,
    Option<&'a str>,
);

const FULL_TOKEN: &str = "full-token-0123456789abcdef";
const READONLY_TOKEN: &str = "readonly-token-0123456789abcdef";

fn python() -> Option<PathBuf> {
    sdk_python("two_servers_on_one_port")
}

/// The server process; killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the two-path SDK server with a certificate from `pki`; returns it and its port.
fn start_server(python: &PathBuf, pki: &TestPki, dir: &std::path::Path) -> (Server, u16) {
    let (chain, key) = pki.server_pem(&["127.0.0.1"]);
    std::fs::write(dir.join("server.pem"), chain).unwrap();
    std::fs::write(dir.join("server-key.pem"), key).unwrap();
    let mut child = Command::new(python)
        .arg(repo().join("testdata/e2e/mcp_two_paths_server.py"))
        .args([
            "--cert",
            "server.pem",
            "--key",
            "server-key.pem",
            "--calls",
            "calls",
        ])
        .args(["--full-bearer-env", "FULL_TOKEN"])
        .args(["--readonly-bearer-env", "READONLY_TOKEN"])
        .env("FULL_TOKEN", FULL_TOKEN)
        .env("READONLY_TOKEN", READONLY_TOKEN)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the SDK server starts");
    let stdout = child.stdout.take().unwrap();
    let server = Server(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the SDK server says where it listens");
    let port = line
        .trim()
        .strip_prefix("listening on 127.0.0.1:")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
    (server, port)
}

#[tokio::test]
async fn two_servers_on_one_port() {
    let Some(python) = python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new();
    let (_server, port) = start_server(&python, &pki, dir.path());
    let target = format!("127.0.0.1:{port}");
    let yaml = format!(
        "version: 1\nmcp:\n  full:\n    url: https://{target}/mcp\n    token: true\n    tools:\n      \
         allow: [\"*\"]\n  readonly:\n    url: https://{target}/mcp/readonly\n    token: true\n    \
         tools:\n      allow: [echo]\n"
    );
    let mut set = SecretSet::new();
    set.insert("MCP_FULL", FULL_TOKEN.as_bytes().to_vec())
        .unwrap();
    set.insert("MCP_READONLY", READONLY_TOKEN.as_bytes().to_vec())
        .unwrap();
    let full_ph = set.placeholder("MCP_FULL").unwrap().as_str().to_string();
    let readonly_ph = set
        .placeholder("MCP_READONLY")
        .unwrap()
        .as_str()
        .to_string();
    let sink = Arc::new(MemorySink::default());
    let proxy = Proxy::builder(policy(&yaml, None), sink.clone())
        .options(options(&pki))
        .network(Arc::new(FakeNetwork::default()))
        .secrets(set)
        .build()
        .unwrap();
    let proxy = serve_proxy(proxy, sink).await;

    let mut client = proxy.intercepted_h1(&target).await;
    let mut send = async |path: &str, tool: &str, bearer: Option<&str>| {
        let mut req = tools_call(&target, path, 1, tool);
        req.headers_mut().insert(
            "mcp-protocol-version",
            http::HeaderValue::from_static("2025-11-25"),
        );
        if let Some(ph) = bearer {
            req.headers_mut()
                .insert("authorization", format!("Bearer {ph}").parse().unwrap());
        }
        text(client.send_request(req).await.unwrap()).await
    };

    // Each entry's own rules, and its own token: added when the client sends none, swapped in
    // for its own placeholder. The server checks each path's token itself (401 otherwise).
    let (status, body) = send("/mcp", "create_issue", None).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("full created hello"), "{body}");
    let (status, body) = send("/mcp/readonly", "echo", Some(&readonly_ph)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("readonly: hello"), "{body}");
    let (status, body) = send("/mcp", "echo", Some(&full_ph)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("full: hello"), "{body}");
    // The read-only entry does not allow what the full one does.
    let (status, body) = send("/mcp/readonly", "create_issue", None).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("policy_denied"), "{body}");
    // One entry's placeholder on the other's path: refused, nothing sent.
    let (status, body) = send("/mcp/readonly", "echo", Some(&full_ph)).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("credential_endpoint_mismatch"), "{body}");
    let (status, body) = send("/mcp", "echo", Some(&readonly_ph)).await;
    assert_eq!(status, 403, "{body}");
    // A third path, and a spelling of an entry's path: no entry's.
    for path in ["/mcp/admin", "/mcp/readonly/", "/MCP"] {
        let (status, body) = send(path, "echo", None).await;
        assert_eq!(status, 403, "{path}: {body}");
        assert!(body.contains("policy_denied"), "{path}: {body}");
    }

    // What reached the server: the three allowed calls, each at its own path with its own token
    // (no `unauthorized`), and nothing else.
    let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap_or_default();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        ["full:create_issue", "readonly:echo", "full:echo"],
        "{calls}"
    );

    // The CONNECT is the host's, every entry on it, and names no one server; then one record per
    // request, naming the entry its path belongs to.
    let all = proxy.entries();
    let connect = &all[0];
    assert_eq!(connect.method, "CONNECT");
    assert_eq!(connect.server, None);
    assert_eq!(connect.rule.as_deref(), Some("mcp.full, mcp.readonly"));
    let records: Vec<_> = all.into_iter().skip(1).collect();
    let got: Vec<Seen<'_>> = records
        .iter()
        .map(|r| {
            (
                r.server.as_deref(),
                r.reason,
                r.secrets.clone(),
                r.rule.as_deref(),
            )
        })
        .collect();
    let nobody = format!("mcp.{target} no server at this path");
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        got,
        vec![
            (
                Some("full"),
                None,
                s(&["MCP_FULL"]),
                Some("mcp.full.tools.allow \"*\"")
            ),
            (
                Some("readonly"),
                None,
                s(&["MCP_READONLY"]),
                Some("mcp.readonly.tools.allow \"echo\"")
            ),
            (
                Some("full"),
                None,
                s(&["MCP_FULL"]),
                Some("mcp.full.tools.allow \"*\"")
            ),
            (
                Some("readonly"),
                Some(Reason::PolicyDenied),
                s(&[]),
                Some("mcp.readonly default deny")
            ),
            (
                Some("readonly"),
                Some(Reason::CredentialEndpointMismatch),
                s(&["MCP_FULL"]),
                Some("secrets.MCP_FULL hosts")
            ),
            (
                Some("full"),
                Some(Reason::CredentialEndpointMismatch),
                s(&["MCP_READONLY"]),
                Some("secrets.MCP_READONLY hosts")
            ),
            (
                None,
                Some(Reason::PolicyDenied),
                s(&[]),
                Some(nobody.as_str())
            ),
            (
                None,
                Some(Reason::PolicyDenied),
                s(&[]),
                Some(nobody.as_str())
            ),
            (
                None,
                Some(Reason::PolicyDenied),
                s(&[]),
                Some(nobody.as_str())
            ),
        ]
    );
}
