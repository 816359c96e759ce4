//! What the bridge costs (DESIGN §18): a call through it, alone and behind fenzi's whole request
//! path, against the same call straight over stdio, side by side in one run, rounds interleaved
//! (this machine is noisy), and the memory one idle bridged session holds in fenzi's process.
//!
//!     bridge_bench [--calls N] [--rounds R] [--sessions K] [--server-delay-us D] [-- SERVER_COMMAND...]
//!
//! Without a server command it measures against itself run as `--echo-server`: a stdio server that
//! answers each request with a fixed result at once, so what is measured is the bridge and not a
//! server's own work (with `--server-delay-us`, after sleeping D µs: a server that takes time, so
//! that fenzi's threads go idle between a request and its answer, as with real servers). Each call is a `tools/call` whose answer is awaited before the next is sent.
//! Each round opens a fresh session of each of the three below, then gives them N calls each in
//! turns of 50, so that the machine's drift falls on all three alike:
//!
//! - direct: requests written to the server's stdin, answers read from its stdout;
//! - bridge: the same requests as the request path hands them to `Bridge::handle`, in-process,
//!   each answer read whole;
//! - fenzi: the same requests through fenzi's whole request path: a `Proxy` (in this process,
//!   its audit log a real `AuditWriter` in a temporary directory) whose policy names the server as
//!   a command server (`tools: {allow: ["*"]}`), its bridge given with `serve_local_servers`,
//!   served on a loopback port; one keep-alive HTTP/1.1 connection sends each request in absolute
//!   form to `http://bench.stdio.fenzi.internal/mcp` with the session's `Mcp-Session-Id`, as an
//!   agent does through `HTTP_PROXY`. So each call is parsed, decided, recorded and carried over
//!   the in-memory connection to the bridge, and its answer read whole.
//!
//! Prints per-call latency (median, p90, p99) of the three over all rounds, and what the bridge and
//! the whole path add over direct (difference of the medians, and each round's), checks that fenzi
//! recorded every timed call as an allowed `tools/call` with `transport: stdio`, then the RSS of
//! this process before and after K idle bridged sessions (their servers are other processes and
//! not counted), opened on the bridge alone and then through fenzi's proxy port, as one JSON line
//! and a table.

use bytes::Bytes;
use fenzi_policy::config;
use fenzi_policy::engine::Policy;
use fenzi_proxy::Proxy;
use fenzi_proxy::audit::writer::AuditWriter;
use fenzi_proxy::bridge::{Bridge, BridgeLog, Bridges, HostCommand};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
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

/// The `--echo-server [DELAY_US]`: answers every request at once (or after sleeping DELAY_US, as a
/// server doing some work would), ignores notifications.
fn echo_server(delay: Duration) {
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
        if !delay.is_zero() && method == "tools/call" {
            std::thread::sleep(delay);
        }
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

/// The server spoken to straight over its stdin and stdout.
struct Direct {
    _child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: BufReader<tokio::process::ChildStdout>,
    line: String,
}

impl Direct {
    async fn start(command: &[OsString]) -> Direct {
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
        Direct {
            _child: child,
            stdin,
            stdout,
            line,
        }
    }

    async fn call(&mut self, id: u64) -> Duration {
        let request = format!("{}\n", call(id));
        let t = Instant::now();
        self.stdin.write_all(request.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
        self.line.clear();
        self.stdout.read_line(&mut self.line).await.unwrap();
        let took = t.elapsed();
        assert!(self.line.contains("\"result\""), "{}", self.line);
        took
    }
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

/// A session of the bridge alone, as the request path hands it requests.
async fn bridged_call(bridge: &Bridge, session: &str, n: u64) -> Duration {
    let request = post(call(n), Some(session));
    let t = Instant::now();
    let response = bridge.handle(request).await;
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let took = t.elapsed();
    assert!(body.windows(8).any(|w| w == b"\"result\""));
    took
}

async fn end_session(bridge: &Bridge, session: &str) {
    let _ = bridge
        .handle(
            http::Request::delete("/mcp")
                .header("mcp-session-id", session)
                .body(Bytes::new())
                .unwrap(),
        )
        .await;
}

/// The bridged server's name in the bench policy, and its address under fenzi.
const NAME: &str = "bench";
const URL: &str = "http://bench.stdio.fenzi.internal/mcp";

/// fenzi in this process, served on a loopback port until the process ends.
struct Fenzi {
    addr: std::net::SocketAddr,
    proxy: Proxy,
    /// Holds the audit log (removed when dropped).
    audit_dir: tempfile::TempDir,
}

/// fenzi with a policy naming `command` as the command server `bench`, every tool allowed; its
/// bridge is `bridge`.
async fn fenzi(command: &[OsString], bridge: Arc<Bridge>) -> Fenzi {
    let words: Vec<String> = command
        .iter()
        .map(|c| c.to_str().expect("a UTF-8 server command").to_owned())
        .collect();
    // JSON is YAML: the command's words quoted whatever they hold.
    let yaml = format!(
        "version: 1\nmcp:\n  {NAME}:\n    command: {}\n    tools: {{allow: [\"*\"]}}\n",
        serde_json::to_string(&words).unwrap()
    );
    let config = config::load(None, Some((&yaml, "bench.yaml")))
        .unwrap_or_else(|e| panic!("the bench policy is invalid:\n{e}\n---\n{yaml}"));
    let audit_dir = tempfile::tempdir().expect("a temporary directory");
    let audit =
        AuditWriter::open(&audit_dir.path().join("audit.jsonl"), "bench").expect("the audit log");
    let proxy = Proxy::builder(Policy::from_config(&config), Arc::new(audit))
        .build()
        .expect("fenzi starts");
    assert!(proxy.serve_local_servers(Bridges::from([(NAME.to_owned(), bridge)])));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = proxy.clone();
    tokio::spawn(async move { serving.serve(listener, std::future::pending()).await });
    Fenzi {
        addr,
        proxy,
        audit_dir,
    }
}

impl Fenzi {
    /// The `tools/call` records fenzi wrote allowed to the bridged server (`transport: stdio`).
    async fn calls_recorded(&self) -> usize {
        self.proxy
            .flush_audit()
            .await
            .expect("the audit log flushes");
        let log = std::fs::read_to_string(self.audit_dir.path().join("audit.jsonl")).unwrap();
        log.lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .filter(|r| {
                r["decision"] == "allowed"
                    && r["rpc"] == "tools/call"
                    && r["transport"] == "stdio"
                    && r["host"] == "bench.stdio.fenzi.internal"
            })
            .count()
    }
}

/// An absolute-form request to the bridged server through fenzi, as an agent sends it to its proxy.
fn through(method: http::Method, body: &str, session: Option<&str>) -> http::Request<Full<Bytes>> {
    let mut req = http::Request::builder()
        .method(method)
        .uri(URL)
        .header("host", "bench.stdio.fenzi.internal")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(s) = session {
        req = req.header("mcp-session-id", s);
    }
    req.body(Full::new(Bytes::from(body.to_owned()))).unwrap()
}

async fn send(
    client: &mut SendRequest<Full<Bytes>>,
    req: http::Request<Full<Bytes>>,
) -> (http::response::Parts, Bytes) {
    client
        .ready()
        .await
        .expect("fenzi keeps the connection open");
    let response = client.send_request(req).await.expect("fenzi answers");
    let (parts, body) = response.into_parts();
    (
        parts,
        body.collect().await.expect("the whole answer").to_bytes(),
    )
}

/// A keep-alive HTTP/1.1 connection to fenzi's proxy port.
async fn connect(proxy: std::net::SocketAddr) -> SendRequest<Full<Bytes>> {
    let stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (client, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// A session with the bridged server through fenzi: `initialize`, then `initialized`.
async fn session_through(client: &mut SendRequest<Full<Bytes>>) -> String {
    let (head, body) = send(client, through(http::Method::POST, INITIALIZE, None)).await;
    assert_eq!(
        head.status,
        200,
        "initialize through fenzi: {}",
        String::from_utf8_lossy(&body)
    );
    let id = head.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let (head, _) = send(client, through(http::Method::POST, INITIALIZED, Some(&id))).await;
    assert!(
        head.status.is_success(),
        "initialized through fenzi: {}",
        head.status
    );
    id
}

/// A session with the bridged server through fenzi, on one keep-alive connection.
struct Through {
    client: SendRequest<Full<Bytes>>,
    session: String,
}

impl Through {
    async fn open(proxy: std::net::SocketAddr) -> Through {
        let mut client = connect(proxy).await;
        let session = session_through(&mut client).await;
        Through { client, session }
    }

    async fn call(&mut self, n: u64) -> Duration {
        let request = through(http::Method::POST, &call(n), Some(&self.session));
        let t = Instant::now();
        let (head, body) = send(&mut self.client, request).await;
        let took = t.elapsed();
        assert!(
            head.status == 200 && body.windows(8).any(|w| w == b"\"result\""),
            "a call through fenzi: {} {}",
            head.status,
            String::from_utf8_lossy(&body)
        );
        took
    }

    async fn close(mut self) {
        let request = through(http::Method::DELETE, "", Some(&self.session));
        let (head, _) = send(&mut self.client, request).await;
        assert!(
            head.status.is_success(),
            "DELETE through fenzi: {}",
            head.status
        );
    }
}

/// Calls of one contender in a row before the next one's turn: short enough that the machine's
/// drift falls on the three alike, long enough that each stays warm.
const BLOCK: u64 = 50;

/// One round: a fresh session of each contender, then `calls` calls each, in turns of [`BLOCK`].
async fn round(
    command: &[OsString],
    bridge: &Bridge,
    proxy: std::net::SocketAddr,
    calls: u64,
) -> [Vec<Duration>; 3] {
    let mut direct = Direct::start(command).await;
    let bridge_session = session(bridge).await;
    let mut fenzi = Through::open(proxy).await;
    let mut samples: [Vec<Duration>; 3] = Default::default();
    let mut n = 0;
    while n < calls {
        let block = BLOCK.min(calls - n);
        for i in 1..=block {
            samples[0].push(direct.call(n + i).await);
        }
        for i in 1..=block {
            samples[1].push(bridged_call(bridge, &bridge_session, n + i).await);
        }
        for i in 1..=block {
            samples[2].push(fenzi.call(n + i).await);
        }
        n += block;
    }
    end_session(bridge, &bridge_session).await;
    fenzi.close().await;
    samples
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
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
        let delay = args
            .get(1)
            .map_or(0, |d| d.to_str().unwrap().parse().unwrap());
        echo_server(Duration::from_micros(delay));
        return;
    }
    let (mut calls, mut rounds, mut sessions, mut delay) = (5000u64, 3u32, 8usize, 0u64);
    let mut command = Vec::new();
    while !args.is_empty() {
        let a = args.remove(0);
        match a.to_str() {
            Some("--calls") => calls = args.remove(0).to_str().unwrap().parse().unwrap(),
            Some("--rounds") => rounds = args.remove(0).to_str().unwrap().parse().unwrap(),
            Some("--sessions") => sessions = args.remove(0).to_str().unwrap().parse().unwrap(),
            Some("--server-delay-us") => delay = args.remove(0).to_str().unwrap().parse().unwrap(),
            Some("--") => {
                command = std::mem::take(&mut args);
            }
            _ => {
                panic!(
                    "usage: bridge_bench [--calls N] [--rounds R] [--sessions K] [--server-delay-us D] [-- SERVER...]"
                )
            }
        }
    }
    let label = if command.is_empty() {
        command = vec![
            std::env::current_exe().unwrap().into(),
            "--echo-server".into(),
            delay.to_string().into(),
        ];
        if delay == 0 {
            "echo-server (answers at once)".to_owned()
        } else {
            format!("echo-server (answers after {delay} µs)")
        }
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
    let bridge = Bridge::new(NAME, Box::new(launch.clone()), Arc::new(Quiet));
    // fenzi's own bridge, so that its sessions and the bridge-alone ones do not share processes.
    let behind_fenzi = Arc::new(Bridge::new(NAME, Box::new(launch), Arc::new(Quiet)));
    behind_fenzi.prepare().expect("the server starts");
    let fenzi = fenzi(&command, behind_fenzi.clone()).await;
    let (mut all_direct, mut all_bridge, mut all_fenzi) = (Vec::new(), Vec::new(), Vec::new());
    // What each round's medians say fenzi and the bridge add: the machine is noisy, and the
    // medians of these per-round differences move less than the difference of pooled medians.
    let (mut added_bridge, mut added_fenzi) = (Vec::new(), Vec::new());
    for r in 1..=rounds {
        let [d, b, f] = round(&command, &bridge, fenzi.addr, calls).await;
        let (dm, bm, fm) = (
            percentiles(d.clone()).0,
            percentiles(b.clone()).0,
            percentiles(f.clone()).0,
        );
        eprintln!(
            "round {r}: medians: direct {dm:.1} µs, bridge {bm:.1} µs, fenzi -> bridge {fm:.1} µs; added: bridge {:.1}, fenzi {:.1}",
            bm - dm,
            fm - dm
        );
        added_bridge.push(bm - dm);
        added_fenzi.push(fm - dm);
        all_direct.extend(d);
        all_bridge.extend(b);
        all_fenzi.extend(f);
    }
    let (d50, d90, d99) = percentiles(all_direct);
    let (b50, b90, b99) = percentiles(all_bridge);
    let (f50, f90, f99) = percentiles(all_fenzi);
    // Every timed call through fenzi was decided and recorded as a call to the bridged server.
    let recorded = fenzi.calls_recorded().await;
    assert_eq!(
        recorded as u64,
        calls * u64::from(rounds),
        "allowed tools/call records with transport stdio in fenzi's audit log"
    );
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
    // The same through fenzi: each session opened by its own connection, which then closes, as an
    // agent that went quiet; fenzi's share now includes what its request path keeps per session.
    let before_fenzi = rss_kib();
    for _ in 0..sessions {
        let mut client = connect(fenzi.addr).await;
        session_through(&mut client).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after_fenzi = rss_kib();
    assert_eq!(
        behind_fenzi.sessions(),
        sessions,
        "idle sessions behind fenzi"
    );
    let per_session_fenzi = (after_fenzi.saturating_sub(before_fenzi)) as f64 / sessions as f64;
    println!(
        "{}",
        serde_json::json!({
            "server": label, "calls_per_round": calls, "rounds": rounds,
            "direct_us": {"p50": d50, "p90": d90, "p99": d99},
            "bridge_us": {"p50": b50, "p90": b90, "p99": b99},
            "fenzi_us": {"p50": f50, "p90": f90, "p99": f99},
            "added_us_p50": b50 - d50,
            "fenzi_added_us_p50": f50 - d50,
            "added_us_per_round": added_bridge, "fenzi_added_us_per_round": added_fenzi,
            "added_us_median_of_rounds": median(&added_bridge),
            "fenzi_added_us_median_of_rounds": median(&added_fenzi),
            "rss_kib_before": before, "rss_kib_after": after, "sessions": sessions,
            "rss_kib_per_idle_session": per_session,
            "rss_kib_before_fenzi": before_fenzi, "rss_kib_after_fenzi": after_fenzi,
            "rss_kib_per_idle_session_through_fenzi": per_session_fenzi,
            "fenzi_calls_recorded": recorded,
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
    println!(
        "{:<28}{:>10.1}{:>10.1}{:>10.1}",
        "fenzi -> bridge", f50, f90, f99
    );
    let rounds_said = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "{:<28}{:>10.1}   (p50s of all rounds; each round's: {})",
        "added by the bridge",
        b50 - d50,
        rounds_said(&added_bridge)
    );
    println!(
        "{:<28}{:>10.1}   (p50s of all rounds; each round's: {}; DESIGN §18 target: under 150)",
        "added by fenzi -> bridge",
        f50 - d50,
        rounds_said(&added_fenzi)
    );
    println!(
        "fenzi's memory per idle bridged session: {per_session:.0} KiB ({sessions} sessions: RSS {before} -> {after} KiB; each server process is its own)"
    );
    println!(
        "  opened through fenzi's proxy port: {per_session_fenzi:.0} KiB ({sessions} sessions: RSS {before_fenzi} -> {after_fenzi} KiB)"
    );
    println!(
        "fenzi recorded {recorded} allowed tools/call to the bridged server (transport: stdio)"
    );
}
