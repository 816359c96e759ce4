//! `tools.confirm` end to end with the real binary: `fenzi proxy` holds calls, `fenzi approve
//! --watch` answers them from a piped standard input, `y` then `n`;
//! and from inside `fenzi run`'s sandbox the session's control socket can be seen but neither
//! reached nor replaced.

mod mcp_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn fenzi() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fenzi"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A plain-HTTP MCP server on 127.0.0.1 answering every `tools/call` with a result, and counting
/// them.
fn mcp_server() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let value: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            if value["method"] == "tools/call" {
                counter.fetch_add(1, Ordering::SeqCst);
            }
            let reply = serde_json::json!({"jsonrpc": "2.0", "id": value["id"],
                "result": {"content": [{"type": "text", "text": "done upstream"}]}})
            .to_string();
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    (port, calls)
}

/// `tools/call TOOL` sent through the proxy at `proxy` as an absolute-form request; the status
/// and body.
fn call(proxy: &str, port: u16, id: u64, tool: &str) -> (u16, String) {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": {"issue": "ENG-1"}}})
    .to_string();
    let mut stream = TcpStream::connect(proxy).unwrap();
    write!(
        stream,
        "POST http://127.0.0.1:{port}/mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
    (status, body)
}

struct Dir(tempfile::TempDir);

impl Dir {
    fn new(policy: &str) -> Dir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("fenzi.yaml"), policy).unwrap();
        Dir(dir)
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
    fn runtime(&self) -> PathBuf {
        self.path().join("runtime")
    }
    fn env(&self, command: &mut Command) {
        command
            .current_dir(self.path())
            .env("XDG_RUNTIME_DIR", self.runtime())
            .env("XDG_CONFIG_HOME", self.path().join("xdg"))
            .env("XDG_STATE_HOME", self.path().join("state"))
            .env("FENZI_CREDSTORE", "memory")
            .env("NO_COLOR", "1");
    }
}

fn stop(child: Child) -> String {
    mcp_support::terminate(child)
}

#[test]
fn the_watcher_answers_yes_then_no_from_a_pipe() {
    let (port, calls) = mcp_server();
    let dir = Dir::new(&format!(
        "version: 1\nmcp:\n  issues:\n    url: http://127.0.0.1:{port}/mcp\n    tools:\n      \
         allow: [\"*\"]\n      confirm: [delete_issue]\n      confirm_timeout: 20s\n"
    ));
    let audit = dir.path().join("audit.jsonl");
    let mut proxy = fenzi();
    dir.env(&mut proxy);
    let mut proxy = proxy
        .args(["proxy", "--config", "fenzi.yaml", "--listen", "127.0.0.1:0"])
        .arg("--audit")
        .arg(&audit)
        .arg("--ca-dir")
        .arg(dir.path().join("ca"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = mcp_support::listening_addr(&mut proxy);
    let sockets: Vec<_> = std::fs::read_dir(dir.runtime().join("fenzi"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sock"))
        .collect();
    assert_eq!(sockets.len(), 1, "one control socket for the session");

    let mut watcher = fenzi();
    dir.env(&mut watcher);
    let mut watcher = watcher
        .args(["approve", "--watch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    watcher.stdin.take().unwrap().write_all(b"y\nn\n").unwrap();

    let (status, body) = call(&addr, port, 1, "delete_issue");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("done upstream"), "{body}");
    let (status, body) = call(&addr, port, 2, "delete_issue");
    assert_eq!(status, 403, "{body}");
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"]["data"]["reason"], "not_confirmed");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "only the confirmed call went"
    );
    // Not held: straight through.
    assert_eq!(call(&addr, port, 3, "get_issue").0, 200);

    let started = Instant::now();
    let out = loop {
        if let Some(_status) = watcher.try_wait().unwrap() {
            break watcher.wait_with_output().unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the watcher did not end once its answers were used"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{shown}\n{}", text(&out.stderr));
    for expected in [
        "server issues  tool delete_issue",
        "rule       mcp.issues.tools.confirm \"delete_issue\"",
        "arguments  {\"issue\":\"ENG-1\"}",
        "answer: y",
        "sent: yes",
        "answer: n",
        "sent: no",
    ] {
        assert!(shown.contains(expected), "{expected:?} in\n{shown}");
    }
    assert!(shown.contains("s left)"), "{shown}");

    let stderr = stop(proxy);
    assert!(stderr.contains("fenzi approve --watch"), "{stderr}");
    assert!(!sockets[0].exists(), "the socket is removed at the end");
    let log = std::fs::read_to_string(&audit).unwrap();
    let records: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|r: &serde_json::Value| r["rpc"] == "tools/call")
        .collect();
    let summary: Vec<(String, String, String)> = records
        .iter()
        .map(|r| {
            (
                r["decision"].as_str().unwrap_or_default().to_string(),
                r["reason"].as_str().unwrap_or_default().to_string(),
                r["confirm"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let uid = rustix_uid();
    assert_eq!(summary.len(), 5, "{log}");
    assert_eq!(
        summary[0],
        ("held".into(), "".into(), "waits up to 20s".into())
    );
    assert_eq!(summary[1].0, "allowed");
    assert!(
        summary[1].2.starts_with(&format!("yes by uid {uid} pid ")),
        "{summary:?}"
    );
    assert_eq!(summary[2].0, "held");
    assert_eq!(summary[3].0, "denied");
    assert_eq!(summary[3].1, "not_confirmed");
    assert!(
        summary[3].2.starts_with(&format!("no by uid {uid} pid ")),
        "{summary:?}"
    );
    assert_eq!(summary[4], ("allowed".into(), "".into(), "".into()));

    // `fenzi log` shows the wait and the answer.
    let mut log_cmd = fenzi();
    dir.env(&mut log_cmd);
    let out = log_cmd
        .arg("log")
        .arg("--file")
        .arg(&audit)
        .output()
        .unwrap();
    let shown = text(&out.stdout);
    assert!(
        shown.contains("held    POST 127.0.0.1:")
            && shown.contains("confirm: \"no by uid")
            && shown.contains("not_confirmed"),
        "{shown}"
    );
}

fn rustix_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(0, |m| m.uid())
}

#[test]
fn the_sandbox_cannot_reach_or_replace_the_control_socket() {
    let sandbox = Command::new("unshare")
        .args(["--user", "--net", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !sandbox || !Path::new("/usr/bin/python3").exists() {
        assert!(
            std::env::var_os("FENZI_REQUIRE_SANDBOX").is_none(),
            "the sandbox cannot run here"
        );
        eprintln!("\n*** SKIPPED the sandbox control-socket test: no user namespaces or python3\n");
        return;
    }
    let (port, _) = mcp_server();
    let dir = Dir::new(&format!(
        "version: 1\nmcp:\n  issues:\n    url: http://127.0.0.1:{port}/mcp\n    tools:\n      \
         allow: [\"*\"]\n      confirm: [delete_issue]\n"
    ));
    let control = dir.runtime().join("fenzi");
    // Seen from inside: the socket is listed, connecting fails, and nothing can be put beside it
    // or in its place.
    let script = format!(
        r#"
import os, socket, errno
d = {control:?}
socks = [n for n in os.listdir(d) if n.endswith('.sock')]
print('sockets', len(socks))
for n in socks:
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(os.path.join(d, n))
        print('connect CONNECTED')
    except OSError as e:
        print('connect', errno.errorcode[e.errno])
    try:
        os.unlink(os.path.join(d, n))
        print('unlink DONE')
    except OSError as e:
        print('unlink', errno.errorcode[e.errno])
try:
    open(os.path.join(d, 'forged.sock'), 'w').close()
    print('create DONE')
except OSError as e:
    print('create', errno.errorcode[e.errno])
"#,
        control = control.display().to_string()
    );
    let mut run = fenzi();
    dir.env(&mut run);
    let out = run
        .args([
            "run",
            "--config",
            "fenzi.yaml",
            "--",
            "/usr/bin/python3",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("fenzi approve --watch"), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        ["sockets 1", "connect EPERM", "unlink EROFS", "create EROFS"],
        "{stderr}"
    );
    // The control: the same socket answers on the host while a session runs. (Its removal at
    // the end shows it was this session's.)
    assert!(
        std::fs::read_dir(&control).unwrap().all(|e| !e
            .unwrap()
            .path()
            .to_string_lossy()
            .ends_with(".sock")),
        "removed when the session ended"
    );
}
