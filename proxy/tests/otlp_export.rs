//! The OTLP exporter against an in-process OTLP/HTTP receiver on loopback (hyper, decoding
//! `ExportLogsServiceRequest` with prost), with a real audit writer writing the log as the exporter
//! tails it. The receiver follows a script: it fails (500), stalls past the request timeout,
//! answers 429 with `Retry-After`, answers a partial success, refuses for good (400), and is
//! stopped and started again on the same port. Each test checks what arrived: every seq, in order,
//! no gaps, a batch sent again only after a failed try, and the bodies (the original lines) verify
//! downstream as a hash chain.

mod common;

use bytes::Bytes;
use fenzi_policy::audit::{self, Outcome};
use fenzi_proxy::audit::writer::{AuditEntry, AuditWriter};
use fenzi_proxy::export::{self, Endpoint, ExportConfig, Exporter, Note};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How the receiver answers one request.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Act {
    Ok,
    Status(u16),
    /// 429 with `Retry-After: 1`.
    TooMany,
    /// Answers only after this long (past the exporter's request timeout).
    Stall(Duration),
    /// 200 with a partial success rejecting this many records.
    Partial(i64),
}

impl Act {
    fn accepted(self) -> bool {
        matches!(self, Act::Ok | Act::Partial(_))
    }
}

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
struct Got {
    at: Instant,
    act: Act,
    /// (session, seq, body) of each log record.
    records: Vec<(String, u64, String)>,
    content_type: String,
    service_name: String,
}

#[derive(Default)]
struct Script {
    acts: Mutex<VecDeque<Act>>,
    got: Mutex<Vec<Got>>,
}

struct Receiver {
    addr: SocketAddr,
    script: Arc<Script>,
    task: tokio::task::JoinHandle<()>,
    scheme: &'static str,
}

impl Receiver {
    async fn start(acts: &[Act]) -> Receiver {
        Receiver::on(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(Script::default()),
            acts,
        )
        .await
    }

    /// A receiver on `addr` sharing `script` (a restart keeps what was received).
    async fn on(addr: SocketAddr, script: Arc<Script>, acts: &[Act]) -> Receiver {
        Receiver::serve(addr, script, acts, None).await
    }

    /// An `https` receiver with a certificate from `tls`.
    async fn tls(tls: Arc<rustls::ServerConfig>) -> Receiver {
        let addr = "127.0.0.1:0".parse().unwrap();
        let mut r = Receiver::serve(addr, Arc::new(Script::default()), &[], Some(tls)).await;
        r.scheme = "https";
        r
    }

    async fn serve(
        addr: SocketAddr,
        script: Arc<Script>,
        acts: &[Act],
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> Receiver {
        script.acts.lock().unwrap().extend(acts.iter().copied());
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn({
            let script = script.clone();
            async move {
                // Dropped with the task: a stopped receiver cuts its connections too.
                let mut connections = tokio::task::JoinSet::new();
                loop {
                    let (tcp, _) = listener.accept().await.unwrap();
                    let script = script.clone();
                    let tls = tls.clone().map(tokio_rustls::TlsAcceptor::from);
                    connections.spawn(async move {
                        let service = service_fn(move |req| answer(script.clone(), req));
                        let http = hyper::server::conn::http1::Builder::new();
                        match tls {
                            Some(tls) => {
                                let Ok(stream) = tls.accept(tcp).await else {
                                    return;
                                };
                                let _ = http.serve_connection(TokioIo::new(stream), service).await;
                            }
                            None => {
                                let _ = http.serve_connection(TokioIo::new(tcp), service).await;
                            }
                        }
                    });
                }
            }
        });
        Receiver {
            addr,
            script,
            task,
            scheme: "http",
        }
    }

    fn url(&self) -> String {
        format!("{}://{}/v1/logs", self.scheme, self.addr)
    }

    fn got(&self) -> Vec<Got> {
        self.script.got.lock().unwrap().clone()
    }

    async fn stop(self) -> (SocketAddr, Arc<Script>) {
        self.task.abort();
        let _ = self.task.await;
        (self.addr, self.script)
    }
}

async fn answer(
    script: Arc<Script>,
    req: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<Full<Bytes>>, hyper::Error> {
    let content_type = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    assert_eq!(req.uri().path(), "/v1/logs");
    let body = req.into_body().collect().await?.to_bytes();
    let request = ExportLogsServiceRequest::decode(body).expect("an ExportLogsServiceRequest");
    let act = script.acts.lock().unwrap().pop_front().unwrap_or(Act::Ok);
    let rl = &request.resource_logs[0];
    let service_name = match &rl.resource.as_ref().unwrap().attributes[0].value {
        Some(v) => format!("{:?}", v.value),
        None => String::new(),
    };
    let records = rl.scope_logs[0]
        .log_records
        .iter()
        .map(|r| {
            let attr = |key: &str| {
                r.attributes
                    .iter()
                    .find(|a| a.key == key)
                    .and_then(|a| a.value.clone())
                    .and_then(|v| v.value)
            };
            let Some(Value::StringValue(session)) = attr("fenzi.session") else {
                panic!("fenzi.session is not a string")
            };
            let Some(Value::IntValue(seq)) = attr("fenzi.seq") else {
                panic!("fenzi.seq is not an int")
            };
            let Some(Value::StringValue(line)) = r.body.clone().and_then(|b| b.value) else {
                panic!("the body is not a string")
            };
            (session, seq as u64, line)
        })
        .collect();
    script.got.lock().unwrap().push(Got {
        at: Instant::now(),
        act,
        records,
        content_type,
        service_name,
    });
    let response = |status: u16, body: Vec<u8>| {
        http::Response::builder()
            .status(status)
            .header(http::header::CONTENT_TYPE, "application/x-protobuf")
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    };
    Ok(match act {
        Act::Ok => response(200, ExportLogsServiceResponse::default().encode_to_vec()),
        Act::Status(s) => response(s, Vec::new()),
        Act::TooMany => {
            let mut r = response(429, Vec::new());
            r.headers_mut()
                .insert(http::header::RETRY_AFTER, "1".parse().unwrap());
            r
        }
        Act::Stall(d) => {
            tokio::time::sleep(d).await;
            response(200, Vec::new())
        }
        Act::Partial(n) => response(
            200,
            ExportLogsServiceResponse {
                partial_success: Some(ExportLogsPartialSuccess {
                    rejected_log_records: n,
                    error_message: "record too large".into(),
                }),
            }
            .encode_to_vec(),
        ),
    })
}

/// Lines the exporter said, for assertions.
#[derive(Clone, Default)]
struct Notes(Arc<Mutex<Vec<String>>>);

impl Notes {
    fn note(&self) -> Note {
        let notes = self.0.clone();
        Arc::new(move |line: &str| notes.lock().unwrap().push(line.to_string()))
    }
    fn all(&self) -> String {
        self.0.lock().unwrap().join("\n")
    }
}

fn config(url: &str, log: &Path, notes: &Notes) -> ExportConfig {
    ExportConfig {
        batch_records: 7,
        poll: Duration::from_millis(20),
        request_timeout: Duration::from_millis(300),
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        ..ExportConfig::new(
            Endpoint::parse(url).unwrap(),
            log.to_path_buf(),
            notes.note(),
        )
    }
}

fn write(writer: &AuditWriter, n: usize) {
    for i in 0..n {
        writer
            .append(AuditEntry {
                path: Some(format!("/item/{i}")),
                ..AuditEntry::new(Outcome::Allowed, None, "GET", "example.com", 80)
            })
            .unwrap();
    }
}

/// The log opened again by a new session, once the last one's lock is released.
async fn reopen(log: &Path, session: &str) -> AuditWriter {
    let started = Instant::now();
    loop {
        match AuditWriter::open(log, session) {
            Ok(w) => return w,
            Err(e) if started.elapsed() < Duration::from_secs(5) => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
}

fn log_path() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    (dir, path)
}

/// What arrived, checked: every request after a failed one starts at the same seq again (within
/// one exporter, it is the same batch: `exact`), every request after an accepted one starts right
/// after it; the accepted records are seq `1..=n` in order, and their bodies verify as a hash
/// chain equal to the log.
fn check_arrivals(got: &[Got], n: u64, log: &Path) {
    check_arrivals_with(got, n, log, true)
}

fn check_arrivals_with(got: &[Got], n: u64, log: &Path, exact: bool) {
    assert!(!got.is_empty());
    for g in got {
        assert_eq!(g.content_type, "application/x-protobuf");
        assert!(g.service_name.contains("\"fenzi\""), "{}", g.service_name);
        for (session, seq, line) in &g.records {
            let record: audit::AuditRecord = serde_json::from_str(line).unwrap();
            assert_eq!((&record.session, record.seq), (session, *seq));
        }
    }
    let seqs = |g: &Got| g.records.iter().map(|r| r.1).collect::<Vec<_>>();
    assert_eq!(
        seqs(&got[0])[0],
        1,
        "the first batch starts at the log's start"
    );
    for pair in got.windows(2) {
        let (prev, next) = (seqs(&pair[0]), seqs(&pair[1]));
        if pair[0].act.accepted() {
            assert_eq!(
                next[0],
                prev.last().unwrap() + 1,
                "{:?} then {:?}",
                pair[0].act,
                next
            );
        } else if exact {
            assert_eq!(next, prev, "after {:?} the same batch again", pair[0].act);
        } else {
            assert_eq!(
                next[0], prev[0],
                "after {:?} the same seq again",
                pair[0].act
            );
        }
    }
    let accepted: Vec<&(String, u64, String)> = got
        .iter()
        .filter(|g| g.act.accepted())
        .flat_map(|g| &g.records)
        .collect();
    let seqs: Vec<u64> = accepted.iter().map(|r| r.1).collect();
    assert_eq!(
        seqs,
        (1..=n).collect::<Vec<_>>(),
        "every seq once, in order"
    );
    let lines: Vec<&[u8]> = accepted.iter().map(|r| r.2.as_bytes()).collect();
    let verified = audit::verify(lines, None).expect("the shipped lines verify as a chain");
    assert_eq!(verified.records as u64, n);
    let local = std::fs::read_to_string(log).unwrap();
    let shipped: String = accepted.iter().map(|r| format!("{}\n", r.2)).collect();
    assert_eq!(
        shipped, local,
        "the bodies are the log's lines byte for byte"
    );
}

fn cursor_of(log: &Path) -> export::Cursor {
    export::cursor::read(log).unwrap().expect("a cursor")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_arrives_in_order_through_failures_stalls_and_429() {
    let (_dir, log) = log_path();
    let writer = AuditWriter::open(&log, "s1").unwrap();
    write(&writer, 10);
    let receiver = Receiver::start(&[
        Act::Ok,
        Act::Status(500),
        Act::Status(503),
        Act::Ok,
        Act::Stall(Duration::from_millis(900)),
        Act::Ok,
        Act::TooMany,
        Act::Ok,
    ])
    .await;
    let notes = Notes::default();
    let exporter = Exporter::start(config(&receiver.url(), &log, &notes)).unwrap();
    let progress = exporter.progress();
    // Records keep coming while the exporter ships and retries.
    for _ in 0..8 {
        write(&writer, 5);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    writer.flush().await.unwrap();
    let report = exporter.drain(Duration::from_secs(10)).await;
    assert!(report.caught_up(), "{report}");
    assert_eq!(
        (report.acked, report.written, &report.stopped),
        (50, 50, &None)
    );
    assert_eq!((progress.acked(), progress.lag()), (50, 0));
    assert!(report.to_string().contains("caught up"), "{report}");
    let got = receiver.got();
    check_arrivals(&got, 50, &log);
    // Retry-After: 1 was obeyed (the backoff alone is at most 200 ms).
    let i = got.iter().position(|g| g.act == Act::TooMany).unwrap();
    let gap = got[i + 1].at - got[i].at;
    assert!(gap >= Duration::from_millis(950), "retried after {gap:?}");
    let c = cursor_of(&log);
    assert_eq!((c.seq, c.rejected), (50, 0));
    assert_eq!(c.offset, std::fs::metadata(&log).unwrap().len());
    // A failing streak is said once, and its end once.
    let notes = notes.all();
    assert!(notes.contains("500 Internal Server Error"), "{notes}");
    assert!(notes.contains("delivering again"), "{notes}");
    assert!(!notes.contains("503"), "one line per streak: {notes}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_success_is_not_sent_again() {
    let (_dir, log) = log_path();
    let writer = AuditWriter::open(&log, "s1").unwrap();
    write(&writer, 20);
    writer.flush().await.unwrap();
    let receiver = Receiver::start(&[Act::Ok, Act::Partial(2)]).await;
    let notes = Notes::default();
    let exporter = Exporter::start(config(&receiver.url(), &log, &notes)).unwrap();
    let report = exporter.drain(Duration::from_secs(5)).await;
    assert!(report.caught_up(), "{report}");
    assert_eq!(report.rejected, 2);
    check_arrivals(&receiver.got(), 20, &log);
    assert_eq!(cursor_of(&log).rejected, 2);
    let notes = notes.all();
    assert!(
        notes.contains("rejected 2 of the 7 records of seq 8..14")
            && notes.contains("record too large"),
        "{notes}"
    );
    assert!(
        report.to_string().contains("2 of them rejected"),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4xx_stops_the_export_once_and_a_restart_resumes_from_the_cursor() {
    let (_dir, log) = log_path();
    let writer = AuditWriter::open(&log, "s1").unwrap();
    write(&writer, 10);
    writer.flush().await.unwrap();
    let receiver = Receiver::start(&[Act::Ok, Act::Status(400)]).await;
    let notes = Notes::default();
    let exporter = Exporter::start(config(&receiver.url(), &log, &notes)).unwrap();
    let progress = exporter.progress();
    let started = Instant::now();
    while !progress.stopped() {
        assert!(started.elapsed() < Duration::from_secs(5), "never stopped");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // No loop: more records and more time bring no more requests.
    write(&writer, 5);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(receiver.got().len(), 2);
    assert_eq!(
        progress.lag(),
        8,
        "a stopped export still counts what is written"
    );
    let report = exporter.drain(Duration::from_secs(1)).await;
    assert!(!report.caught_up());
    assert_eq!((report.acked, report.written), (7, 15));
    assert!(
        report
            .stopped
            .as_deref()
            .unwrap()
            .contains("400 Bad Request"),
        "{report:?}"
    );
    assert_eq!(
        cursor_of(&log).seq,
        7,
        "the cursor stays at the last acknowledged batch"
    );
    let said = notes.all();
    assert_eq!(said.matches("400 Bad Request").count(), 1, "{said}");

    // A restarted fenzi continues the same log (a new session) and its export resumes at seq 8,
    // towards a receiver that takes everything.
    writer.flush().await.unwrap();
    drop(writer);
    let writer = reopen(&log, "s2").await;
    write(&writer, 5);
    writer.flush().await.unwrap();
    let second = Receiver::start(&[]).await;
    let exporter = Exporter::start(config(&second.url(), &log, &notes)).unwrap();
    assert_eq!(exporter.progress().lag(), 13);
    let report = exporter.drain(Duration::from_secs(5)).await;
    assert!(report.caught_up(), "{report}");
    let got = second.got();
    let seqs: Vec<u64> = got
        .iter()
        .flat_map(|g| g.records.iter().map(|r| r.1))
        .collect();
    assert_eq!(seqs, (8..=20).collect::<Vec<_>>());
    let sessions: Vec<&str> = got
        .iter()
        .flat_map(|g| g.records.iter().map(|r| r.0.as_str()))
        .collect();
    assert_eq!(sessions.first(), Some(&"s1"));
    assert_eq!(sessions.last(), Some(&"s2"));
    let all: Vec<Got> = receiver.got().into_iter().chain(got).collect();
    check_arrivals_with(&all, 20, &log, false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_restarts_loses_nothing() {
    let (_dir, log) = log_path();
    let writer = AuditWriter::open(&log, "s1").unwrap();
    write(&writer, 10);
    let receiver = Receiver::start(&[]).await;
    let notes = Notes::default();
    let exporter = Exporter::start(config(&receiver.url(), &log, &notes)).unwrap();
    let progress = exporter.progress();
    let started = Instant::now();
    while progress.acked() < 10 {
        assert!(started.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (addr, script) = receiver.stop().await;
    write(&writer, 10);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        progress.acked(),
        10,
        "nothing acknowledged while the receiver is down"
    );
    assert!(progress.lag() >= 10, "lag {}", progress.lag());
    let receiver = Receiver::on(addr, script, &[]).await;
    write(&writer, 3);
    writer.flush().await.unwrap();
    let report = exporter.drain(Duration::from_secs(5)).await;
    assert!(report.caught_up(), "{report}");
    check_arrivals(&receiver.got(), 23, &log);
    assert!(notes.all().contains("cannot connect"), "{}", notes.all());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_gives_up_on_time_and_says_how_far_it_got() {
    let (_dir, log) = log_path();
    let writer = AuditWriter::open(&log, "s1").unwrap();
    write(&writer, 12);
    writer.flush().await.unwrap();
    let receiver = Receiver::start(&[Act::Ok]).await;
    receiver
        .script
        .acts
        .lock()
        .unwrap()
        .extend([Act::Status(503); 1000]);
    let notes = Notes::default();
    let exporter = Exporter::start(config(&receiver.url(), &log, &notes)).unwrap();
    let progress = exporter.progress();
    let started = Instant::now();
    while progress.acked() < 7 || receiver.got().len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the first batch never went"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = Instant::now();
    let report = exporter.drain(Duration::from_millis(400)).await;
    let took = started.elapsed();
    assert!(took < Duration::from_millis(900), "the drain took {took:?}");
    assert_eq!((report.acked, report.written), (7, 12));
    let text = report.to_string();
    assert!(
        text.contains("acknowledged up to seq 7 of 12") && text.contains("5 records not shipped"),
        "{text}"
    );
    assert!(text.contains("audit.jsonl.otlp-cursor"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_that_does_not_fit_the_log_ships_it_again_and_a_changed_log_stops_it() {
    let (_dir, log) = log_path();
    let writer = AuditWriter::open(&log, "s1").unwrap();
    write(&writer, 5);
    writer.flush().await.unwrap();
    // A cursor for another file at this path.
    export::cursor::store(
        &log,
        &export::Cursor {
            seq: 3,
            offset: 10,
            hash: "ab".repeat(32),
            rejected: 0,
        },
    )
    .unwrap();
    let receiver = Receiver::start(&[]).await;
    let notes = Notes::default();
    let exporter = Exporter::start(config(&receiver.url(), &log, &notes)).unwrap();
    let report = exporter.drain(Duration::from_secs(5)).await;
    assert!(report.caught_up(), "{report}");
    check_arrivals(&receiver.got(), 5, &log);
    assert!(
        notes.all().contains("does not fit the log"),
        "{}",
        notes.all()
    );

    // A line that does not continue the chain after the cursor is not shipped.
    drop(writer);
    let mut text = std::fs::read_to_string(&log).unwrap();
    text.push_str(
        &text
            .lines()
            .last()
            .unwrap()
            .replace("\"seq\":5", "\"seq\":6"),
    );
    text.push('\n');
    std::fs::write(&log, text).unwrap();
    let before = receiver.got().len();
    let exporter = Exporter::start(config(&receiver.url(), &log, &notes)).unwrap();
    let report = exporter.drain(Duration::from_secs(2)).await;
    assert_eq!(receiver.got().len(), before);
    let why = report.stopped.unwrap();
    assert!(why.contains("does not continue the hash chain"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_is_verified_against_the_extra_roots() {
    let (_dir, log) = log_path();
    let writer = AuditWriter::open(&log, "s1").unwrap();
    write(&writer, 9);
    writer.flush().await.unwrap();
    let pki = common::TestPki::new();
    let receiver = Receiver::tls(pki.server_config(&["127.0.0.1"])).await;

    // Without the receiver's CA among the roots: TLS fails, nothing is acknowledged.
    let notes = Notes::default();
    let exporter = Exporter::start(config(&receiver.url(), &log, &notes)).unwrap();
    let report = exporter.drain(Duration::from_millis(500)).await;
    assert_eq!(report.acked, 0);
    assert!(receiver.got().is_empty());
    assert!(
        notes.all().contains("TLS with 127.0.0.1:"),
        "{}",
        notes.all()
    );

    // With it (as `--upstream-ca` gives it): everything arrives.
    let trusted = ExportConfig {
        extra_roots: vec![pki.ca_der.clone()],
        ..config(&receiver.url(), &log, &notes)
    };
    let report = Exporter::start(trusted)
        .unwrap()
        .drain(Duration::from_secs(5))
        .await;
    assert!(report.caught_up(), "{report}");
    check_arrivals(&receiver.got(), 9, &log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_out_when_the_drain_begins_is_cut_at_its_deadline() {
    let (_dir, log) = log_path();
    let writer = AuditWriter::open(&log, "s1").unwrap();
    write(&writer, 3);
    writer.flush().await.unwrap();
    let receiver = Receiver::start(&[Act::Stall(Duration::from_secs(30))]).await;
    let notes = Notes::default();
    let slow = ExportConfig {
        request_timeout: Duration::from_secs(20),
        ..config(&receiver.url(), &log, &notes)
    };
    let exporter = Exporter::start(slow).unwrap();
    let started = Instant::now();
    while receiver.got().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(5), "nothing sent");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = Instant::now();
    let report = exporter.drain(Duration::from_millis(300)).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(1500),
        "the drain took {took:?}"
    );
    assert_eq!(
        (report.acked, report.written, &report.stopped),
        (0, 3, &None)
    );
    assert!(report.url.starts_with("http://127.0.0.1:"), "{report:?}");
}
