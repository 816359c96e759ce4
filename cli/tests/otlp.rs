//! `fenzi proxy --otlp URL`, the real binary, against an OTLP/HTTP receiver on loopback (hyper,
//! decoding `ExportLogsServiceRequest` with prost). Requests through the proxy (refused ones: each
//! still gets its record) reach the receiver as log records; the receiver's 503s are retried; a
//! receiver that is gone at exit leaves the drain short, said on stderr, and `fenzi log
//! --export-status` shows the lag; the next `fenzi proxy` on the same log resumes from the cursor,
//! and every record has then arrived once acknowledged, in order, verifying as a hash chain.

mod mcp_support;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the receiver took: (seq, body) of each record of each request it answered 200.
#[derive(Default)]
struct Received {
    accepted: Mutex<Vec<(u64, String)>>,
    /// Requests still to answer 503.
    fail: AtomicUsize,
    requests: AtomicUsize,
}

struct Receiver {
    url: String,
    received: Arc<Received>,
    runtime: tokio::runtime::Runtime,
}

impl Receiver {
    fn start(fail: usize) -> Receiver {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let received = Arc::new(Received::default());
        received.fail.store(fail, Ordering::SeqCst);
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("http://{}/v1/logs", listener.local_addr().unwrap());
        let shared = received.clone();
        runtime.spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let shared = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| answer(shared.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        Receiver {
            url,
            received,
            runtime,
        }
    }

    fn accepted(&self) -> Vec<(u64, String)> {
        self.received.accepted.lock().unwrap().clone()
    }

    /// Stops answering: the listener and every connection go with the runtime.
    fn stop(self) -> Vec<(u64, String)> {
        let accepted = self.accepted();
        self.runtime.shutdown_timeout(Duration::from_secs(1));
        accepted
    }
}

async fn answer(
    received: Arc<Received>,
    req: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<Full<Bytes>>, hyper::Error> {
    assert_eq!(req.uri().path(), "/v1/logs");
    assert_eq!(req.headers()["content-type"], "application/x-protobuf");
    let body = req.into_body().collect().await?.to_bytes();
    let request = ExportLogsServiceRequest::decode(body).unwrap();
    received.requests.fetch_add(1, Ordering::SeqCst);
    let failing = received
        .fail
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if failing {
        return Ok(http::Response::builder()
            .status(503)
            .body(Full::new(Bytes::new()))
            .unwrap());
    }
    let mut accepted = received.accepted.lock().unwrap();
    for record in request
        .resource_logs
        .iter()
        .flat_map(|r| &r.scope_logs)
        .flat_map(|s| &s.log_records)
    {
        let seq = record
            .attributes
            .iter()
            .find(|a| a.key == "fenzi.seq")
            .and_then(|a| a.value.clone()?.value);
        let (Some(Any::IntValue(seq)), Some(Any::StringValue(line))) =
            (seq, record.body.clone().and_then(|b| b.value))
        else {
            panic!("a record without fenzi.seq or a string body: {record:?}")
        };
        accepted.push((seq as u64, line));
    }
    Ok(http::Response::builder()
        .status(200)
        .body(Full::new(Bytes::new()))
        .unwrap())
}

struct Proxy {
    child: Child,
    addr: String,
    stderr: PathBuf,
}

fn start_proxy(dir: &Path, otlp: &str, run: usize) -> Proxy {
    start_proxy_with(dir, &["--otlp", otlp, "--drain-timeout", "1s"], run)
}

fn start_proxy_with(dir: &Path, extra: &[&str], run: usize) -> Proxy {
    let stderr = dir.join(format!("stderr-{run}"));
    let mut child = mcp_support::proxy_command(dir, extra)
        .env("XDG_STATE_HOME", dir.join("state"))
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let addr = mcp_support::listening_addr(&mut child);
    Proxy {
        child,
        addr,
        stderr,
    }
}

impl Proxy {
    /// A plain-HTTP request to a host the policy does not allow: refused, and recorded.
    fn request(&self, n: usize) {
        let mut stream = TcpStream::connect(&self.addr).unwrap();
        write!(
            stream,
            "GET http://blocked.example/{n} HTTP/1.1\r\nHost: blocked.example\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    }

    /// SIGTERM, then the exit status and stderr.
    fn stop(mut self) -> (std::process::ExitStatus, String) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let status = self.child.wait().unwrap();
        (status, std::fs::read_to_string(&self.stderr).unwrap())
    }
}

fn log_lines(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("audit.jsonl"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn export_status(dir: &Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_fenzi"))
        .args(["log", "--file", "audit.jsonl", "--export-status", "--json"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn fenzi_proxy_ships_its_log_and_resumes_after_a_restart() {
    let dir = std::env::temp_dir().join(format!("fenzi-otlp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fenzi.yaml"), "version: 1\nhosts: [github.com]\n").unwrap();

    // First run: the receiver answers 503 twice, then takes everything.
    let receiver = Receiver::start(2);
    let proxy = start_proxy(&dir, &receiver.url, 1);
    for n in 0..10 {
        proxy.request(n);
    }
    wait_for("10 records acknowledged", || {
        export_status(&dir)["acknowledged"].as_u64() == Some(10)
    });
    assert!(receiver.received.requests.load(Ordering::SeqCst) >= 3);
    // The receiver goes away; the next records cannot be shipped before the proxy stops.
    let first = receiver.stop();
    for n in 10..15 {
        proxy.request(n);
    }
    let (status, stderr) = proxy.stop();
    assert!(status.success(), "{status:?}\n{stderr}");
    assert!(
        stderr.contains("audit export to http://127.0.0.1:"),
        "{stderr}"
    );
    assert!(stderr.contains("503 Service Unavailable"), "{stderr}");
    assert!(
        stderr.contains("acknowledged up to seq 10 of 15")
            && stderr.contains("5 records not shipped"),
        "{stderr}"
    );
    let status = export_status(&dir);
    assert_eq!(
        (
            status["written"].as_u64(),
            status["acknowledged"].as_u64(),
            status["behind"].as_u64()
        ),
        (Some(15), Some(10), Some(5)),
        "{status}"
    );

    // Second run, same log, a receiver that takes everything: it resumes at seq 11.
    let receiver = Receiver::start(0);
    let proxy = start_proxy(&dir, &receiver.url, 2);
    proxy.request(15);
    wait_for("16 records acknowledged", || {
        export_status(&dir)["acknowledged"].as_u64() == Some(16)
    });
    let (status, stderr) = proxy.stop();
    assert!(status.success(), "{status:?}\n{stderr}");
    assert!(
        stderr.contains("caught up, every record up to seq 16"),
        "{stderr}"
    );
    let second = receiver.stop();
    assert_eq!(
        second.first().map(|r| r.0),
        Some(11),
        "resumed from the cursor"
    );

    let arrived: Vec<(u64, String)> = first.into_iter().chain(second).collect();
    let seqs: Vec<u64> = arrived.iter().map(|r| r.0).collect();
    assert_eq!(seqs, (1..=16).collect::<Vec<_>>());
    let lines: Vec<String> = arrived.into_iter().map(|r| r.1).collect();
    assert_eq!(lines, log_lines(&dir), "the bodies are the log's lines");
    let verified = fenzi_policy::audit::verify(lines.iter().map(|l| l.as_bytes()), None).unwrap();
    assert_eq!(verified.records, 16);

    let text = Command::new(env!("CARGO_BIN_EXE_fenzi"))
        .args(["log", "--file", "audit.jsonl", "--export-status"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("caught up: written and acknowledged up to seq 16"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `fenzi run --otlp`: the records of the command's requests are shipped, and when the command
/// ends the export drains before fenzi exits (its line comes after the command's output).
#[test]
fn fenzi_run_ships_the_session_log_and_drains_when_the_command_ends() {
    if Command::new("curl").arg("--version").output().is_err() {
        eprintln!("SKIP fenzi_run_ships_the_session_log: no curl");
        return;
    }
    let dir = std::env::temp_dir().join(format!("fenzi-otlp-run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("xdg")).unwrap();
    std::fs::write(dir.join("fenzi.yaml"), "version: 1\nhosts: []\n").unwrap();
    // One 503 first: the retry happens while the command runs or in the drain.
    let receiver = Receiver::start(1);
    let out = Command::new(env!("CARGO_BIN_EXE_fenzi"))
        .args(["run", "--no-isolation", "--otlp", &receiver.url, "--"])
        .args([
            "sh",
            "-c",
            "for h in a b c; do curl -s -o /dev/null http://$h.blocked.example/; done; echo ran",
        ])
        .current_dir(&dir)
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env("XDG_STATE_HOME", dir.join("state"))
        .env("XDG_RUNTIME_DIR", dir.join("runtime"))
        .env("FENZI_CREDSTORE", "memory")
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ran");
    assert!(
        err.contains("fenzi run: audit export to http://127.0.0.1:"),
        "{err}"
    );
    assert!(
        err.contains("fenzi run: export to http://127.0.0.1:")
            && err.contains("caught up, every record up to seq 3 acknowledged"),
        "{err}"
    );
    let accepted = receiver.stop();
    assert_eq!(accepted.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2, 3]);
    for (_, line) in &accepted {
        let record: Value = serde_json::from_str(line).unwrap();
        assert_eq!(record["reason"], "host_not_allowed", "{line}");
    }
    let lines: Vec<&[u8]> = accepted.iter().map(|r| r.1.as_bytes()).collect();
    fenzi_policy::audit::verify(lines, None).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

fn fenzi_log(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fenzi"))
        .arg("log")
        .args(args)
        .current_dir(dir)
        .env("XDG_STATE_HOME", dir.join("state"))
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// `fenzi log --otlp URL`: a finished log (written without --otlp) shipped afterwards from its
/// cursor; again, nothing more to send; a receiver that keeps failing is exit 1; a log a running
/// fenzi still writes is refused.
#[test]
fn fenzi_log_ships_a_finished_log_from_its_cursor() {
    let dir = std::env::temp_dir().join(format!("fenzi-otlp-ship-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fenzi.yaml"), "version: 1\nhosts: [github.com]\n").unwrap();
    let proxy = start_proxy_with(&dir, &[], 1);
    for n in 0..4 {
        proxy.request(n);
    }
    // While that fenzi writes the log, it is its own to ship.
    let receiver = Receiver::start(0);
    let busy = fenzi_log(&dir, &["--file", "audit.jsonl", "--otlp", &receiver.url]);
    assert_eq!(busy.status.code(), Some(2), "{busy:?}");
    assert!(
        String::from_utf8_lossy(&busy.stderr).contains("still being written by a running fenzi")
    );
    let (status, _) = proxy.stop();
    assert!(status.success());

    let out = fenzi_log(&dir, &["--file", "audit.jsonl", "--otlp", &receiver.url]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text.contains("caught up, every record up to seq 4"),
        "{text}"
    );
    let again = fenzi_log(&dir, &["--file", "audit.jsonl", "--otlp", &receiver.url]);
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    assert_eq!(
        receiver.received.requests.load(Ordering::SeqCst),
        1,
        "nothing sent twice"
    );
    let accepted = receiver.stop();
    assert_eq!(
        accepted.iter().map(|r| r.0).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );

    // New records, and a receiver that only fails: exit 1, saying how far.
    let proxy = start_proxy_with(&dir, &[], 2);
    proxy.request(4);
    let _ = proxy.stop();
    let failing = Receiver::start(usize::MAX);
    let out = fenzi_log(
        &dir,
        &[
            "--file",
            "audit.jsonl",
            "--otlp",
            &failing.url,
            "--drain-timeout",
            "1s",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("acknowledged up to seq 4 of 5"), "{text}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("503"),
        "{out:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
