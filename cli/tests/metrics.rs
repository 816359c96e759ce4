//! `fenzi proxy --metrics 127.0.0.1:0`: the real binary says where its metrics are on stderr
//! (`metrics on http://ADDR/metrics`), serves them there while it proxies, and its decision counts
//! equal its audit log's. A `--metrics` address that cannot be bound stops the start, naming it.

mod mcp_support;

use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fenzi-metrics-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn fenzi_proxy(dir: &Path, metrics: &str) -> Command {
    mcp_support::proxy_command(dir, &["--metrics", metrics])
}

/// Sends one request (absolute-form through the proxy, or to the metrics listener) and returns
/// the status and the body.
fn send(addr: &str, request: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok());
    (status.unwrap_or_else(|| panic!("{text}")), body.to_string())
}

fn call(proxy: &str, upstream: u16, id: u64, tool: &str) -> u16 {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": id,
        "method": "tools/call", "params": {"name": tool, "arguments": {}}})
    .to_string();
    let target = format!("127.0.0.1:{upstream}");
    let request = format!(
        "POST http://{target}/mcp HTTP/1.1\r\nHost: {target}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    send(proxy, &request).0
}

/// `metrics on http://ADDR/metrics` from the stderr file, waited for up to 5 s.
fn metrics_addr(stderr: &Path) -> String {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(stderr).unwrap_or_default();
        let found = text.lines().find_map(|l| {
            l.split_once("metrics on http://")
                .and_then(|(_, rest)| rest.strip_suffix("/metrics"))
                .map(str::to_string)
        });
        if let Some(addr) = found {
            return addr;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no metrics line:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    assert!(child.wait().unwrap().success());
}

#[test]
fn fenzi_proxy_serves_metrics_that_count_what_it_logged() {
    let dir = temp_dir("counts");
    let upstream = mcp_support::plain_mcp_server();
    std::fs::write(
        dir.join("fenzi.yaml"),
        format!(
            "version: 1\nhosts: [github.com]\nmcp:\n  local:\n    url: http://127.0.0.1:{upstream}/mcp\n    \
             tools:\n      allow: [echo]\n      deny: [drop]\n"
        ),
    )
    .unwrap();
    let stderr = dir.join("stderr");
    let mut child = fenzi_proxy(&dir, "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let proxy = mcp_support::listening_addr(&mut child);
    let metrics = metrics_addr(&stderr);
    assert!(
        metrics.starts_with("127.0.0.1:") && !metrics.ends_with(":0"),
        "{metrics}"
    );

    assert_eq!(call(&proxy, upstream, 1, "echo"), 200);
    assert_eq!(call(&proxy, upstream, 2, "echo"), 200);
    assert_eq!(call(&proxy, upstream, 3, "drop"), 403);
    let (status, _) = send(
        &proxy,
        "GET http://nope.test/ HTTP/1.1\r\nHost: nope.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 403);

    let (status, text) = send(
        &metrics,
        "GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 200, "{text}");
    let mut counted = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("fenzi_decisions_total{") else {
            continue;
        };
        let (labels, value) = rest.rsplit_once("} ").unwrap();
        counted.insert(labels.to_string(), value.parse::<u64>().unwrap());
    }
    let mut logged = BTreeMap::new();
    let log = std::fs::read_to_string(dir.join("audit.jsonl")).unwrap();
    for line in log.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let field = |name: &str| r[name].as_str().unwrap_or("").to_string();
        let labels = format!(
            "decision=\"{}\",reason=\"{}\",server=\"{}\"",
            field("decision"),
            field("reason"),
            field("server")
        );
        *logged.entry(labels).or_insert(0) += 1;
    }
    assert_eq!(counted, logged, "\n{text}");
    assert_eq!(
        logged.get("decision=\"denied\",reason=\"policy_denied\",server=\"local\""),
        Some(&1)
    );
    assert_eq!(
        logged.get("decision=\"allowed\",reason=\"\",server=\"local\""),
        Some(&2)
    );
    assert!(text.contains("\nfenzi_decide_seconds_count 3\n"), "{text}");
    assert!(
        text.contains("\nfenzi_upstream_seconds_count 2\n"),
        "{text}"
    );
    stop(child);
    let _ = std::fs::remove_dir_all(&dir);
}

/// With `--otlp` too, `fenzi_export_lag_records` is the export's lag: here a receiver that is not
/// there, so every record the log holds is behind.
#[test]
fn the_export_lag_gauge_counts_records_the_receiver_has_not_acknowledged() {
    let dir = temp_dir("lag");
    std::fs::write(dir.join("fenzi.yaml"), "version: 1\nhosts: [github.com]\n").unwrap();
    // A port nothing listens on: every export attempt is refused, and retried.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let stderr = dir.join("stderr");
    let mut child = fenzi_proxy(&dir, "127.0.0.1:0")
        .args(["--otlp", &format!("http://{closed}/v1/logs")])
        .args(["--drain-timeout", "1s"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let proxy = mcp_support::listening_addr(&mut child);
    let metrics = metrics_addr(&stderr);
    for _ in 0..3 {
        let (status, _) = send(
            &proxy,
            "GET http://nope.test/ HTTP/1.1\r\nHost: nope.test\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(status, 403);
    }
    let logged = std::fs::read_to_string(dir.join("audit.jsonl"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(logged, 3);
    // The exporter looks at the log a few times a second.
    let start = Instant::now();
    let text = loop {
        let (status, text) = send(
            &metrics,
            "GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(status, 200, "{text}");
        if text.contains(&format!("\nfenzi_export_lag_records {logged}\n")) {
            break text;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "lag never reached {logged}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        text.contains("# TYPE fenzi_export_lag_records gauge"),
        "{text}"
    );
    stop(child);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_metrics_address_that_cannot_be_bound_stops_the_start() {
    let dir = temp_dir("taken");
    std::fs::write(dir.join("fenzi.yaml"), "version: 1\nhosts: [github.com]\n").unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let output = fenzi_proxy(&dir, &addr)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains("listening on"), "{stdout}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("cannot listen for --metrics on {addr}")),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `fenzi run --metrics` listens on the host: a scraper there gets the text while the command
/// runs, and the sandboxed command, in its own network namespace, cannot connect to it.
#[test]
fn fenzi_run_metrics_are_out_of_the_sandboxs_reach() {
    let sandbox = Command::new("unshare")
        .args(["--user", "--net", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !sandbox {
        assert!(
            std::env::var_os("FENZI_REQUIRE_SANDBOX").is_none(),
            "user namespaces are unavailable but FENZI_REQUIRE_SANDBOX is set"
        );
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED fenzi_run_metrics_are_out_of_the_sandboxs_reach: no user namespaces\n"
        );
        return;
    }
    let dir = temp_dir("run");
    std::fs::write(dir.join("fenzi.yaml"), "version: 1\nhosts: [github.com]\n").unwrap();
    // A free port, named to the command in advance.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = format!(
        "if (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; then echo REACHED; else echo UNREACHABLE; fi; sleep 2"
    );
    let stderr = dir.join("stderr");
    let child = Command::new(env!("CARGO_BIN_EXE_fenzi"))
        .args(["run", "--metrics", &format!("127.0.0.1:{port}"), "--"])
        .args(["bash", "-c", &script])
        .current_dir(&dir)
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env("XDG_STATE_HOME", dir.join("state"))
        .env("XDG_RUNTIME_DIR", dir.join("runtime"))
        .env("FENZI_CREDSTORE", "memory")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let metrics = metrics_addr(&stderr);
    assert_eq!(metrics, format!("127.0.0.1:{port}"));
    let (status, text) = send(
        &metrics,
        "GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("# TYPE fenzi_decisions_total counter"),
        "{text}"
    );
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert_eq!(stdout.trim(), "UNREACHABLE");
    let _ = std::fs::remove_dir_all(&dir);
}
