//! `fenzi approve` end to end, on audit logs written by real sessions: `fenzi proxy` on loopback in
//! front of a scripted MCP server over real TLS (a CA made here, trusted with `--upstream-ca`), and
//! a client that goes through the proxy as an agent would (CONNECT, TLS trusting only the
//! session's CA, a JSON-RPC POST). A denied call's error teaches (`data.rule`, `data.hint`), `fenzi
//! log` shows the same line, `fenzi approve` lists the pair, refuses what it must, adds exactly the
//! accepted tool (the file's exact text is checked), and the next session allows the call.

mod mcp_support;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use mcp_support::{command, text};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};

/// The scripted MCP server: answers every tools/call with its tool's name, and records the names.
struct Upstream {
    port: u16,
    ca_pem: String,
    called: Arc<Mutex<Vec<String>>>,
    _runtime: tokio::runtime::Runtime,
}

fn upstream() -> Upstream {
    let called = Arc::new(Mutex::new(Vec::new()));
    let seen = called.clone();
    let (port, ca_pem, runtime) = mcp_support::https_server(move |req: Request<Incoming>| {
        let seen = seen.clone();
        async move {
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let tool = msg["params"]["name"].as_str().unwrap_or("-").to_string();
            seen.lock().unwrap().push(tool.clone());
            let answer = json!({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "content": [{"type": "text", "text": format!("ran {tool}")}]}});
            Response::builder()
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(answer.to_string())))
                .unwrap()
        }
    });
    Upstream {
        port,
        ca_pem,
        called,
        _runtime: runtime,
    }
}

/// `fenzi ARGS` in `dir`, its state (audit logs) and machine file inside `dir`, no stdin.
fn fenzi(dir: &Path, args: &[&str]) -> Output {
    command(dir, args)
        .env("XDG_STATE_HOME", dir.join("state"))
        .stdin(Stdio::null())
        .output()
        .expect("fenzi runs")
}

fn both(o: &Output) -> String {
    format!("{}{}", text(&o.stdout), text(&o.stderr))
}

/// A running `fenzi proxy` session; stopped (SIGTERM, a clean shutdown) when dropped.
struct Session {
    child: Child,
    port: u16,
    ca: PathBuf,
}

impl Session {
    fn start(dir: &Path, extra: &[&str]) -> Session {
        let ca = dir.join(format!("ca-{}", mcp_support::random_hex()));
        let mut args = vec![
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream-ca",
            "upstream-ca.pem",
            "--ca-dir",
            ca.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let mut child = command(dir, &args)
            .env("XDG_STATE_HOME", dir.join("state"))
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let addr = mcp_support::listening_addr(&mut child);
        let port = addr
            .strip_prefix("127.0.0.1:")
            .unwrap_or_else(|| panic!("not on 127.0.0.1: {addr:?}"))
            .parse()
            .unwrap();
        Session { child, port, ca }
    }

    /// A `tools/call` of `tool` through the proxy to the upstream; the JSON-RPC answer.
    fn call(&self, upstream: u16, tool: &str) -> Value {
        let mut tcp = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(
            tcp,
            "CONNECT 127.0.0.1:{upstream} HTTP/1.1\r\nHost: 127.0.0.1:{upstream}\r\n\r\n"
        )
        .unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            tcp.read_exact(&mut byte).unwrap();
            head.push(byte[0]);
        }
        assert!(head.starts_with(b"HTTP/1.1 200"), "{}", text(&head));
        let ca = std::fs::read(self.ca.join("ca.pem")).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(&ca).unwrap())
            .unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                          "params": {"name": tool, "arguments": {}}})
        .to_string();
        write!(
            tls,
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{upstream}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = Vec::new();
        // A peer that closes without close_notify ends the read with an error; what came counts.
        let _ = tls.read_to_end(&mut answer);
        let answer = text(&answer);
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        let body = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            dechunk(body)
        } else {
            body.to_string()
        };
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {answer}"))
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, rest) = s.split_once("\r\n").unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn folder(up: &Upstream, project: Option<&str>, machine: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let fill = |t: &str| t.replace("PORT", &up.port.to_string());
    if let Some(p) = project {
        std::fs::write(dir.path().join("fenzi.yaml"), fill(p)).unwrap();
    }
    if let Some(m) = machine {
        std::fs::create_dir_all(dir.path().join("xdg/fenzi")).unwrap();
        std::fs::write(dir.path().join("xdg/fenzi/mcp.yaml"), fill(m)).unwrap();
    }
    std::fs::write(dir.path().join("upstream-ca.pem"), &up.ca_pem).unwrap();
    dir
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap()
}

const PROJECT: &str = "version: 1
# The tracker, over TLS on loopback.
mcp:
  tracker:
    url: https://127.0.0.1:PORT/mcp
    tools:
      allow: [get_issue]  # reading only, for now
      deny: [drop_database]
";

#[test]
fn a_denied_tool_is_approved_exactly_and_the_next_session_allows_it() {
    let up = upstream();
    let tmp = folder(&up, Some(PROJECT), None);
    let dir = tmp.path();
    let port = up.port;

    {
        let s = Session::start(dir, &["--no-machine"]);
        assert_eq!(
            s.call(port, "get_issue")["result"]["content"][0]["text"],
            "ran get_issue"
        );
        // Not in allow: the error teaches the exact approve line, and names the rule.
        let denied = s.call(port, "delete_issue");
        assert_eq!(denied["error"]["code"], -31001, "{denied}");
        let data = &denied["error"]["data"];
        assert_eq!(data["reason"], "policy_denied");
        assert_eq!(data["rule"], "mcp.tracker default deny");
        assert_eq!(data["hint"], "fenzi approve --yes tracker/delete_issue");
        s.call(port, "delete_issue");
        // Deny-listed: the hint says so instead of suggesting approve.
        let data = s.call(port, "drop_database")["error"]["data"].clone();
        assert_eq!(data["rule"], "mcp.tracker.tools.deny \"drop_database\"");
        assert_eq!(
            data["hint"],
            "denied by the policy's deny list (mcp.tracker.tools.deny \"drop_database\"); fenzi \
             approve does not undo a deny"
        );
        // A name that is not plain: no hint (approve refuses it).
        let data = s.call(port, "get_*")["error"]["data"].clone();
        assert_eq!(data["rule"], "mcp.tracker default deny");
        assert!(data.get("hint").is_none(), "{data}");
    }
    assert_eq!(*up.called.lock().unwrap(), ["get_issue"]);

    // `fenzi log` shows the same line under the record.
    let o = fenzi(dir, &["log"]);
    let out = text(&o.stdout);
    assert!(
        out.contains(&format!(
            "denied  POST 127.0.0.1:{port}/mcp tools/call delete_issue  policy_denied\n  fenzi \
             approve --yes tracker/delete_issue\n"
        )),
        "{out}"
    );
    assert!(
        out.contains(
            "tools/call drop_database  policy_denied\n  denied by the policy's deny list \
             (mcp.tracker.tools.deny \"drop_database\"); fenzi approve does not undo a deny\n"
        ),
        "{out}"
    );
    // --json stays the records as stored.
    let o = fenzi(dir, &["log", "--json"]);
    assert!(!text(&o.stdout).contains("fenzi approve"));

    // The list, as JSON: nothing written.
    let o = fenzi(dir, &["approve", "--json", "--no-machine"]);
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    let list: Value = serde_json::from_slice(&o.stdout).unwrap();
    let pairs: Vec<(String, String, u64)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let keys: Vec<&String> = p.as_object().unwrap().keys().collect();
            assert_eq!(keys, ["count", "first_seen", "server", "tool"]);
            assert!(p["first_seen"].as_str().unwrap().ends_with('Z'));
            (
                p["server"].as_str().unwrap().into(),
                p["tool"].as_str().unwrap().into(),
                p["count"].as_u64().unwrap(),
            )
        })
        .collect();
    let pair = |t: &str, n| ("tracker".to_string(), t.to_string(), n);
    assert_eq!(
        pairs,
        [
            pair("delete_issue", 2),
            pair("drop_database", 1),
            pair("get_*", 1)
        ]
    );
    assert_eq!(
        read(dir, "fenzi.yaml"),
        PROJECT.replace("PORT", &port.to_string())
    );

    // No terminal, no --yes: listed, each with what approve would do, nothing written, exit 1.
    let o = fenzi(dir, &["approve", "--no-machine"]);
    let out = both(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    for line in [
        "tracker/delete_issue: denied 2 times, first at ",
        "    fenzi approve --yes tracker/delete_issue\n",
        "tracker/drop_database: denied once",
        "approve will not: drop_database is denied by mcp.tracker.tools.deny",
        "approve will not: get_* is not a plain tool name",
        "not a terminal, so not asking",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}");
    }
    assert_eq!(
        read(dir, "fenzi.yaml"),
        PROJECT.replace("PORT", &port.to_string())
    );

    // Refusals: a deny-listed tool, a glob, a pair the session was not denied. Nothing written.
    for (pair, why) in [
        (
            "tracker/drop_database",
            "that was a choice, and approve does not undo it",
        ),
        (
            "tracker/get_*",
            "approve adds exact names only, never a glob",
        ),
        ("tracker/list_issues", "has no denied call of it"),
        ("other/delete_issue", "has no denied call of it"),
    ] {
        let o = fenzi(dir, &["approve", "--no-machine", "--yes", pair]);
        assert_eq!(o.status.code(), Some(1), "{pair}: {}", both(&o));
        assert!(text(&o.stderr).contains(why), "{pair}: {}", both(&o));
        assert_eq!(
            read(dir, "fenzi.yaml"),
            PROJECT.replace("PORT", &port.to_string())
        );
    }
    // Not SERVER/TOOL at all: a usage error.
    let o = fenzi(dir, &["approve", "--yes", "delete_issue"]);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));

    // Accepted: exactly that name, in that server's allow, every other byte kept.
    let o = fenzi(
        dir,
        &["approve", "--no-machine", "--yes", "tracker/delete_issue"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    assert!(
        text(&o.stdout).contains("added delete_issue to tracker's tools.allow in fenzi.yaml"),
        "{}",
        both(&o)
    );
    let want = PROJECT
        .replace("PORT", &port.to_string())
        .replace("[get_issue]", "[get_issue, delete_issue]");
    assert_eq!(read(dir, "fenzi.yaml"), want);
    // Again: nothing to do, said so, exit 0, the file untouched.
    let o = fenzi(
        dir,
        &["approve", "--no-machine", "--yes", "tracker/delete_issue"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    assert!(
        text(&o.stdout).contains("already allowed by mcp.tracker.tools.allow \"delete_issue\""),
        "{}",
        both(&o)
    );
    assert_eq!(read(dir, "fenzi.yaml"), want);

    // The next session allows it.
    {
        let s = Session::start(dir, &["--no-machine"]);
        assert_eq!(
            s.call(port, "delete_issue")["result"]["content"][0]["text"],
            "ran delete_issue"
        );
    }
    assert_eq!(*up.called.lock().unwrap(), ["get_issue", "delete_issue"]);
}

const MACHINE: &str = "version: 1\r
mcp:\r
  # the team's tracker\r
  tracker:\r
    url: https://127.0.0.1:PORT/mcp\r
    tools:\r
      allow:\r
        - get_issue\r
        - list_*   # listing is fine\r
";

const NARROWING: &str = "version: 1
mcp:
  tracker:
    url: https://127.0.0.1:PORT/mcp
    tools:
      allow:
      - get_issue
";

#[test]
fn machine_servers_get_the_name_in_the_file_that_governs_them() {
    let up = upstream();
    let port = up.port;

    // Narrowed by the project: the project's allow is in force. A tool the machine allows goes
    // there; one it does not is refused, naming the machine file.
    let tmp = folder(&up, Some(NARROWING), Some(MACHINE));
    let dir = tmp.path();
    {
        let s = Session::start(dir, &[]);
        for tool in ["list_issues", "delete_issue"] {
            assert_eq!(
                s.call(port, tool)["error"]["data"]["hint"],
                format!("fenzi approve --yes tracker/{tool}")
            );
        }
    }
    let machine = MACHINE.replace("PORT", &port.to_string());
    let project = NARROWING.replace("PORT", &port.to_string());
    let o = fenzi(dir, &["approve", "--yes", "tracker/delete_issue"]);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(
        text(&o.stderr).contains("the machine file must change first"),
        "{}",
        both(&o)
    );
    assert_eq!(read(dir, "fenzi.yaml"), project);
    assert_eq!(read(dir, "xdg/fenzi/mcp.yaml"), machine);

    let o = fenzi(dir, &["approve", "--yes", "tracker/list_issues"]);
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    assert_eq!(
        read(dir, "fenzi.yaml"),
        project.replace("- get_issue\n", "- get_issue\n      - list_issues\n")
    );
    assert_eq!(read(dir, "xdg/fenzi/mcp.yaml"), machine);
    {
        let s = Session::start(dir, &[]);
        assert_eq!(
            s.call(port, "list_issues")["result"]["content"][0]["text"],
            "ran list_issues"
        );
    }

    // Not narrowed: the name goes into the machine file, which declares the server (its CRLF
    // line endings and comments kept).
    let tmp = folder(&up, Some("version: 1\n"), Some(MACHINE));
    let dir = tmp.path();
    {
        let s = Session::start(dir, &[]);
        s.call(port, "delete_issue");
    }
    // Without the machine file the server is not in the policy at all: refused.
    let o = fenzi(
        dir,
        &["approve", "--no-machine", "--yes", "tracker/delete_issue"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(
        text(&o.stderr).contains("the policy has no MCP server named tracker"),
        "{}",
        both(&o)
    );
    let o = fenzi(dir, &["approve", "--yes", "tracker/delete_issue"]);
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    assert!(
        text(&o.stdout).contains("declared in the machine file"),
        "{}",
        both(&o)
    );
    assert_eq!(
        read(dir, "xdg/fenzi/mcp.yaml"),
        machine.replace(
            "listing is fine\r\n",
            "listing is fine\r\n        - delete_issue\r\n"
        )
    );
    assert_eq!(read(dir, "fenzi.yaml"), "version: 1\n");
    {
        let s = Session::start(dir, &[]);
        assert_eq!(
            s.call(port, "delete_issue")["result"]["content"][0]["text"],
            "ran delete_issue"
        );
    }
}
