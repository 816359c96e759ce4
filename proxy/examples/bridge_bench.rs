//! What the bridge costs (DESIGN §18): a call through it against the same call straight over
//! stdio, side by side in one run, rounds interleaved (this machine is noisy), and the memory
//! one idle bridged session holds in fenzi's process.
//!
//!     bridge_bench [--calls N] [--rounds R] [--sessions K] [-- SERVER_COMMAND...]
//!
//! Without a server command it measures against itself run as `--echo-server`: a stdio server that
//! answers each request with a fixed result at once, so what is measured is the bridge and not a
//! server's own work. Each call is a `tools/call` whose answer is awaited before the next is sent.
//!
//! - direct: requests written to the server's stdin, answers read from its stdout;
//! - bridge: the same requests as the request path hands them to `Bridge::handle`, in-process,
//!   each answer read whole.
//!
//! Prints per-call latency (median, p90, p99) of both and the difference of the medians, then the
//! RSS of this process before and after K idle bridged sessions (their servers are other
//! processes and not counted), as one JSON line and a table.

use bytes::Bytes;
use fenzi_proxy::bridge::{Bridge, BridgeLog, HostCommand};
use http_body_util::BodyExt;
use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

struct Quiet;
impl BridgeLog for Quiet {
    fn stderr_line(&self, _: &str, _: &str) {}
    fn note(&self, server: &str, what: &str) {
        eprintln!("{server}: {what}");
    }
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

fn call(id: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"hello"}}}}}}"#
    )
}

/// The `--echo-server`: answers every request at once, ignores notifications.
fn echo_server() {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { return };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let (Some(id), Some(method)) = (v.get("id"), v.get("method").and_then(|m| m.as_str()))
        else {
            continue;
        };
        let result = if method == "initialize" {
            serde_json::json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"echo","version":"1"}})
        } else {
            serde_json::json!({"content":[{"type":"text","text":"hello"}]})
        };
        let answer = serde_json::json!({"jsonrpc":"2.0","id":id,"result":result});
        let _ = writeln!(out, "{answer}");
        let _ = out.flush();
    }
}

fn percentiles(mut samples: Vec<Duration>) -> (f64, f64, f64) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q) as usize].as_secs_f64() * 1e6;
    (at(0.5), at(0.9), at(0.99))
}

async fn direct(command: &[OsString], calls: u64) -> Vec<Duration> {
    let mut child = tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the server starts");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdin
        .write_all(format!("{INITIALIZE}\n{INITIALIZED}\n").as_bytes())
        .await
        .unwrap();
    stdout.read_line(&mut line).await.unwrap();
    let mut samples = Vec::with_capacity(calls as usize);
    for id in 1..=calls {
        let request = format!("{}\n", call(id));
        let t = Instant::now();
        stdin.write_all(request.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
        line.clear();
        stdout.read_line(&mut line).await.unwrap();
        samples.push(t.elapsed());
        assert!(line.contains("\"result\""), "{line}");
    }
    samples
}

fn post(body: String, session: Option<&str>) -> http::Request<Bytes> {
    let mut req = http::Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(s) = session {
        req = req.header("mcp-session-id", s);
    }
    req.body(Bytes::from(body)).unwrap()
}

async fn session(bridge: &Bridge) -> String {
    let r = bridge.handle(post(INITIALIZE.into(), None)).await;
    let id = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let _ = r.into_body().collect().await;
    let _ = bridge.handle(post(INITIALIZED.into(), Some(&id))).await;
    id
}

async fn bridged(bridge: &Bridge, calls: u64) -> Vec<Duration> {
    let id = session(bridge).await;
    let mut samples = Vec::with_capacity(calls as usize);
    for n in 1..=calls {
        let request = post(call(n), Some(&id));
        let t = Instant::now();
        let response = bridge.handle(request).await;
        let body = response.into_body().collect().await.unwrap().to_bytes();
        samples.push(t.elapsed());
        assert!(body.windows(8).any(|w| w == b"\"result\""));
    }
    let _ = bridge
        .handle(
            http::Request::delete("/mcp")
                .header("mcp-session-id", &id)
                .body(Bytes::new())
                .unwrap(),
        )
        .await;
    samples
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.first().is_some_and(|a| a == "--echo-server") {
        echo_server();
        return;
    }
    let (mut calls, mut rounds, mut sessions) = (5000u64, 3u32, 8usize);
    let mut command = Vec::new();
    while !args.is_empty() {
        let a = args.remove(0);
        match a.to_str() {
            Some("--calls") => calls = args.remove(0).to_str().unwrap().parse().unwrap(),
            Some("--rounds") => rounds = args.remove(0).to_str().unwrap().parse().unwrap(),
            Some("--sessions") => sessions = args.remove(0).to_str().unwrap().parse().unwrap(),
            Some("--") => {
                command = std::mem::take(&mut args);
            }
            _ => {
                panic!("usage: bridge_bench [--calls N] [--rounds R] [--sessions K] [-- SERVER...]")
            }
        }
    }
    let label = if command.is_empty() {
        command = vec![
            std::env::current_exe().unwrap().into(),
            "--echo-server".into(),
        ];
        "echo-server (answers at once)".to_owned()
    } else {
        command
            .iter()
            .map(|c| c.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let launch = HostCommand {
        program: command[0].clone(),
        args: command[1..].to_vec(),
        env: vec![("PATH".into(), std::env::var_os("PATH").unwrap_or_default())],
        cwd: std::env::current_dir().unwrap(),
    };
    let bridge = Bridge::new("bench", Box::new(launch), Arc::new(Quiet));
    let (mut all_direct, mut all_bridge) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        // Interleaved, so drift on a noisy machine falls on both alike.
        let d = direct(&command, calls).await;
        let b = bridged(&bridge, calls).await;
        let (dm, bm) = (percentiles(d.clone()).0, percentiles(b.clone()).0);
        eprintln!("round {round}: direct median {dm:.1} µs, bridge median {bm:.1} µs");
        all_direct.extend(d);
        all_bridge.extend(b);
    }
    let (d50, d90, d99) = percentiles(all_direct);
    let (b50, b90, b99) = percentiles(all_bridge);
    // Memory: K idle sessions, each a server process of its own; fenzi's share is what this
    // process grows by.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = rss_kib();
    let mut ids = Vec::new();
    for _ in 0..sessions {
        ids.push(session(&bridge).await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = rss_kib();
    let per_session = (after.saturating_sub(before)) as f64 / sessions as f64;
    println!(
        "{}",
        serde_json::json!({
            "server": label, "calls_per_round": calls, "rounds": rounds,
            "direct_us": {"p50": d50, "p90": d90, "p99": d99},
            "bridge_us": {"p50": b50, "p90": b90, "p99": b99},
            "added_us_p50": b50 - d50,
            "rss_kib_before": before, "rss_kib_after": after, "sessions": sessions,
            "rss_kib_per_idle_session": per_session,
        })
    );
    println!();
    println!("server: {label}; {rounds} rounds x {calls} sequential tools/call");
    println!(
        "{:<28}{:>10}{:>10}{:>10}",
        "per call (µs)", "p50", "p90", "p99"
    );
    println!(
        "{:<28}{:>10.1}{:>10.1}{:>10.1}",
        "direct over stdio", d50, d90, d99
    );
    println!(
        "{:<28}{:>10.1}{:>10.1}{:>10.1}",
        "through the bridge", b50, b90, b99
    );
    println!("{:<28}{:>10.1}", "added by the bridge (p50)", b50 - d50);
    println!(
        "fenzi's memory per idle bridged session: {per_session:.0} KiB ({sessions} sessions: RSS {before} -> {after} KiB; each server process is its own)"
    );
}
