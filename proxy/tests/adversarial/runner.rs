//! Runs one case file against a fresh [`World`]: every case in order, each checked against everything
//! it expects (responses, what each upstream received, dials and lookups, the audit records and their
//! stored lines), all failures collected with file:line, name, expected and got. `known_failure`
//! cases must fail (and are printed loudly); one that passes is a failure of its own. At the end the
//! whole log must verify as a hash chain against its head, and hold exactly the records counted.

use super::cases::{self, Case, Via};
use super::wire::{self, Seen};
use super::world::{SECRETS, World};
use crate::common::{Answers, Upstream};
use fenzi_policy::audit::{self, AuditRecord, Head};
use fenzi_policy::host::split_authority;
use fenzi_proxy::audit::writer::head_path;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Seek, SeekFrom};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The outcome of a whole file.
pub struct Report {
    pub file: String,
    pub cases: usize,
    pub passed: usize,
    pub failures: Vec<String>,
    pub known: Vec<String>,
}

pub fn testdata(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/adversarial")
        .join(file)
}

/// A compact view of a record: `decision METHOD host:port [path] [rpc] [tool] [-> reason]
/// [secrets=A,B]`.
pub fn summary(r: &AuditRecord) -> String {
    let decision = r.decision.label();
    let mut out = format!("{decision} {} {}:{}", r.method, r.host, r.port);
    for part in [&r.path, &r.rpc, &r.tool].into_iter().flatten() {
        out.push(' ');
        out.push_str(part);
    }
    if let Some(reason) = &r.reason {
        out.push_str(" -> ");
        out.push_str(reason);
    }
    if !r.secrets.is_empty() {
        out.push_str(" secrets=");
        out.push_str(&r.secrets.join(","));
    }
    out
}

fn parse_answers(text: &str) -> Result<Answers, String> {
    if text.trim() == "fail" {
        return Ok(Answers::Fail);
    }
    let mut seq = Vec::new();
    for lookup in text.split('|') {
        let lookup = lookup.trim();
        if lookup == "empty" {
            seq.push(Vec::new());
            continue;
        }
        let ips: Result<Vec<IpAddr>, _> = lookup.split(',').map(|a| a.trim().parse()).collect();
        seq.push(ips.map_err(|e| format!("bad dns answer {lookup:?}: {e}"))?);
    }
    Ok(Answers::Seq(seq))
}

/// Reads the log lines appended since `offset` (complete lines only) and moves `offset` past them.
fn new_lines(log: &Path, offset: &mut u64) -> Vec<Vec<u8>> {
    let mut file = std::fs::File::open(log).unwrap();
    file.seek(SeekFrom::Start(*offset)).unwrap();
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).unwrap();
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    *offset += complete as u64;
    bytes[..complete]
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

fn show(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let shown: String = text.chars().take(300).collect();
    format!("{shown:?}")
}

fn lower(bytes: &[u8]) -> Vec<u8> {
    bytes.to_ascii_lowercase()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty()
        || lower(hay)
            .windows(needle.len())
            .any(|w| w == lower(needle).as_slice())
}

/// Drives the client side of one case.
async fn drive(world: &World, case: &Case) -> Seen {
    let mut seen = Seen::default();
    let expected = case.expect.responses.as_ref().map_or(0, Vec::len);
    match &case.via {
        Via::Proxy => match tokio::net::TcpStream::connect(world.proxy_addr()).await {
            Ok(stream) => {
                wire::converse(stream, &case.steps, expected, case.wait_ms, &mut seen).await
            }
            Err(e) => seen.connect_refused = Some(format!("cannot reach the proxy: {e}")),
        },
        Via::TunnelPlain { target } => match wire::open_tunnel(world.proxy_addr(), target).await {
            Ok(stream) => {
                wire::converse(stream, &case.steps, expected, case.wait_ms, &mut seen).await
            }
            Err(e) => seen.connect_refused = Some(e),
        },
        Via::Tunnel { target, sni, h2 } => {
            let stream = match wire::open_tunnel(world.proxy_addr(), target).await {
                Ok(stream) => stream,
                Err(e) => {
                    seen.connect_refused = Some(e);
                    return seen;
                }
            };
            let host = match split_authority(target) {
                Ok((host, _)) => host.to_string(),
                Err(_) => target.clone(),
            };
            let tls = match wire::tls(stream, &world.proxy_ca(), &host, sni, *h2).await {
                Ok(tls) => tls,
                Err(e) => {
                    seen.tls_error = Some(e);
                    return seen;
                }
            };
            if *h2 {
                if tls.get_ref().1.alpn_protocol() != Some(b"h2".as_slice()) {
                    seen.tls_error = Some("the proxy did not choose h2".into());
                    return seen;
                }
                wire::h2_exchange(tls, &case.messages, &mut seen).await;
            } else {
                wire::converse(tls, &case.steps, expected, case.wait_ms, &mut seen).await;
            }
        }
    }
    seen
}

/// How much one upstream had received at some point, to diff per case.
struct Counts {
    raw: usize,
    app: usize,
    connections: usize,
}

fn counts(upstream: &Upstream) -> Counts {
    Counts {
        raw: upstream.raw_len(),
        app: upstream.received_len(),
        connections: upstream.connection_count(),
    }
}

type Snapshot = BTreeMap<&'static str, Counts>;

fn snapshot(world: &World) -> Snapshot {
    world
        .upstreams
        .iter()
        .map(|(name, upstream)| (*name, counts(upstream)))
        .collect()
}

/// Waits until the case's expected number of records has arrived (a record written as a connection
/// ends can come well after the response on a loaded machine; bounded, so a case that gets fewer
/// records fails instead of hanging), then until nothing changes for a while: records, upstream
/// bytes, dials.
async fn settle(world: &World, records_at_least: usize) {
    let start = Instant::now();
    while world.records() < records_at_least && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let state = || {
        let raw: usize = world.upstreams.values().map(Upstream::raw_len).sum();
        (world.records(), raw, world.network.dialled().len())
    };
    let start = Instant::now();
    let mut last = state();
    let mut since = Instant::now();
    while start.elapsed() < Duration::from_secs(4) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let now = state();
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= Duration::from_millis(60) {
            break;
        }
    }
}

/// Runs one case; returns what did not match (empty when the case passed).
async fn run_case(world: &World, case: &Case, log_offset: &mut u64) -> Vec<String> {
    let mut problems = Vec::new();
    world.network.reset();
    for (name, answers) in &case.dns {
        match parse_answers(answers) {
            Ok(a) => world.network.override_name(name, a),
            Err(e) => return vec![e],
        }
    }
    let before = snapshot(world);
    let expected_records = world.records() + case.expect.audit.as_ref().map_or(0, Vec::len);
    let seen = drive(world, case).await;
    // Requests within a case may share upstream connections; the next case must not reuse this
    // one's, so that its `dialled:` lines and connection counts are its own. Closing them here lets
    // `settle` count their last bytes (a TLS close_notify) in this case.
    world.proxy.proxy.close_idle_upstreams();
    settle(world, expected_records).await;
    let after = snapshot(world);
    let lines = new_lines(world.log(), log_offset);
    let records: Vec<AuditRecord> = lines
        .iter()
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect();
    if records.len() != lines.len() {
        problems.push("a stored audit line is not a valid record".to_string());
    }
    let e = &case.expect;

    // The client's view.
    if let Some(why) = &seen.connect_refused {
        problems.push(format!("tunnel: {why}"));
    }
    match (&seen.tls_error, e.tls_fails) {
        (Some(why), false) => problems.push(why.clone()),
        (None, true) => problems.push("TLS with the proxy: expected to fail, it succeeded".into()),
        _ => {}
    }
    if let Some(expected) = &e.responses {
        let got: Vec<String> = seen
            .responses
            .iter()
            .map(|r| format!("{} {}", r.status, r.reason()))
            .collect();
        let matches = expected.len() == seen.responses.len()
            && expected.iter().zip(&seen.responses).all(|(x, r)| {
                x.status == r.status && x.reason.as_ref().is_none_or(|want| *want == r.reason())
            });
        if !matches {
            let want: Vec<String> = expected
                .iter()
                .map(|x| format!("{} {}", x.status, x.reason.as_deref().unwrap_or("*")))
                .collect();
            let mut msg = format!("responses: expected {want:?} got {got:?}");
            if seen.timed_out {
                msg.push_str(" (timed out waiting)");
            }
            if !seen.tail.is_empty() {
                let _ = write!(
                    msg,
                    " then {} more bytes {}",
                    seen.tail.len(),
                    show(&seen.tail)
                );
            }
            if let Some(r) = seen.responses.first() {
                let _ = write!(msg, "; first body {}", show(&r.body));
            }
            problems.push(msg);
        }
    }
    let bodies: Vec<u8> = seen.responses.iter().flat_map(|r| r.body.clone()).collect();
    for text in &e.body_contains {
        if !contains(&bodies, text.as_bytes()) {
            problems.push(format!("response bodies lack {text:?}: {}", show(&bodies)));
        }
    }

    for text in &e.body_lacks {
        if contains(&bodies, text) {
            problems.push(format!(
                "response bodies contain {}: {}",
                show(text),
                show(&bodies)
            ));
        }
    }

    // What the upstreams received.
    let mut named: Vec<&str> = Vec::new();
    if let Some(list) = &e.upstream {
        for (name, _) in list {
            named.push(name);
        }
    }
    for (name, _) in &e.upstream_bytes {
        named.push(name);
    }
    for (name, rec) in &world.upstreams {
        let (b, a) = (&before[name], &after[name]);
        let app = rec.received_since(b.app);
        let got_lines = wire::request_lines(&app);
        if named.contains(name) {
            if let Some(list) = &e.upstream {
                let want: Vec<&String> = list
                    .iter()
                    .filter(|(n, _)| n == name)
                    .map(|(_, l)| l)
                    .collect();
                if !want.is_empty()
                    && want
                        .iter()
                        .map(|s| s.as_str())
                        .ne(got_lines.iter().map(|s| s.as_str()))
                {
                    problems.push(format!(
                        "upstream {name}: expected request lines {want:?} got {got_lines:?}"
                    ));
                }
            }
        } else if a.raw != b.raw || (e.dialled.is_none() && a.connections != b.connections) {
            problems.push(format!(
                "upstream {name}: expected nothing, got {} connections, {} bytes ({} after TLS): {:?} {}",
                a.connections - b.connections,
                a.raw - b.raw,
                a.app - b.app,
                got_lines,
                show(&app)
            ));
        }
    }
    for (name, n) in &e.upstream_bytes {
        match (before.get(name.as_str()), after.get(name.as_str())) {
            (Some(b), Some(a)) if a.app - b.app == *n => {}
            (Some(b), Some(a)) => problems.push(format!(
                "upstream {name}: expected {n} bytes, got {}",
                a.app - b.app
            )),
            _ => problems.push(format!("no upstream named {name:?}")),
        }
    }
    for (name, text) in &e.upstream_contains {
        let Some(rec) = world.upstreams.get(name.as_str()) else {
            problems.push(format!("no upstream named {name:?}"));
            continue;
        };
        let app = rec.received_since(before[name.as_str()].app);
        if !contains(&app, text) {
            problems.push(format!(
                "upstream {name} lacks {}: got {}",
                show(text),
                show(&app)
            ));
        }
    }
    for text in &e.upstream_lacks {
        for (name, rec) in &world.upstreams {
            let app = rec.received_since(before[name].app);
            if contains(&app, text) {
                problems.push(format!("upstream {name} received {}", show(text)));
            }
        }
    }
    let dialled: Vec<String> = world
        .network
        .dialled()
        .iter()
        .map(|a| a.to_string())
        .collect();
    // `upstream: none` also means no dial, unless the case lists the dials it expects.
    if e.upstream.as_ref().is_some_and(Vec::is_empty)
        && e.upstream_bytes.is_empty()
        && e.dialled.is_none()
        && !dialled.is_empty()
    {
        problems.push(format!("upstream: none, but the proxy dialled {dialled:?}"));
    }
    if let Some(want) = &e.dialled
        && *want != dialled
    {
        problems.push(format!("dialled: expected {want:?} got {dialled:?}"));
    }
    for (name, n) in &e.lookups {
        let got = world
            .network
            .lookups()
            .iter()
            .filter(|l| *l == name)
            .count();
        if got != *n {
            problems.push(format!("lookups of {name}: expected {n} got {got}"));
        }
    }

    // The audit records.
    let mut summaries: Vec<String> = records.iter().map(summary).collect();
    if matches!(case.via, Via::Tunnel { .. } | Via::TunnelPlain { .. })
        && seen.connect_refused.is_none()
    {
        match summaries.first() {
            Some(first) if first.starts_with("allowed CONNECT ") => {
                summaries.remove(0);
            }
            _ => problems.push(format!(
                "tunnel: the first record is not an allowed CONNECT: {summaries:?}"
            )),
        }
    }
    if let Some(want) = &e.audit
        && *want != summaries
    {
        problems.push(format!("audit: expected {want:?} got {summaries:?}"));
    }
    for line in &lines {
        let text = String::from_utf8_lossy(line);
        if let Some(c) = text.chars().find(|&c| audit::needs_escape(c)) {
            problems.push(format!("stored line has an unescaped {c:?}: {text}"));
        }
    }
    let stored: Vec<u8> = lines.join(&b'\n');
    for text in &e.stored_contains {
        if !stored.windows(text.len()).any(|w| w == text.as_bytes()) {
            problems.push(format!("stored lines lack {text:?}: {}", show(&stored)));
        }
    }
    for text in &e.stored_lacks {
        if stored.windows(text.len()).any(|w| w == text.as_slice()) {
            problems.push(format!("stored lines contain {}", show(text)));
        }
    }
    problems
}

/// Runs every case of `file` and checks the log as a whole.
pub async fn run_file(file: &str) -> Report {
    let mut world = World::start(file).await;
    let path = testdata(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut text = text
        .replace("${PROXY_PORT}", &world.proxy_addr().port().to_string())
        .replace("${PROXY}", &world.proxy_addr().to_string());
    for (name, placeholder, value) in SECRETS {
        text = text
            .replace(&format!("${{PH:{name}}}"), placeholder)
            .replace(&format!("${{VALUE:{name}}}"), value);
    }
    let cases = cases::parse(file, &text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut report = Report {
        file: file.to_string(),
        cases: cases.len(),
        passed: 0,
        failures: Vec::new(),
        known: Vec::new(),
    };
    let mut offset = 0u64;
    for case in &cases {
        let problems = run_case(&world, case, &mut offset).await;
        let label = case.label();
        match (&case.known_failure, problems.is_empty()) {
            (None, true) => report.passed += 1,
            (None, false) => report
                .failures
                .push(format!("{label}\n    {}", problems.join("\n    "))),
            (Some(why), false) => report
                .known
                .push(format!("{label} [{why}]\n    {}", problems.join("\n    "))),
            (Some(why), true) => report.failures.push(format!(
                "{label}: marked known_failure ({why}) but it passed: remove the mark"
            )),
        }
    }

    // The whole log: a verified chain, and every record accounted for by a case.
    world.finish().await;
    let bytes = std::fs::read(world.log()).unwrap();
    let lines: Vec<&[u8]> = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let head = std::fs::read_to_string(head_path(world.log()))
        .ok()
        .and_then(|t| Head::parse(&t));
    if head.is_none() {
        report
            .failures
            .push(format!("{file}: no readable head file after the suite"));
    }
    match audit::verify(lines.iter().copied(), head.as_ref()) {
        Ok(v) if v.records == world.records() && offset == bytes.len() as u64 => {}
        Ok(v) => report.failures.push(format!(
            "{file}: the log holds {} records ({} bytes) but {} were acknowledged and cases read {} bytes",
            v.records,
            bytes.len(),
            world.records(),
            offset
        )),
        Err(e) => report
            .failures
            .push(format!("{file}: the audit chain does not verify: {e}")),
    }
    // With secrets: the log names them, and holds no value or placeholder in any spelling the
    // scanner knows (exact, either case, the random part alone).
    if world.secrets {
        let lower = lower(&bytes);
        for (name, placeholder, value) in SECRETS {
            for text in [value, placeholder, &placeholder[9..]] {
                if contains(&lower, text.as_bytes()) {
                    report.failures.push(format!(
                        "{file}: the audit log holds a value or placeholder of {name}"
                    ));
                }
            }
        }
    }
    report
}

impl Report {
    /// Prints the report and panics if anything failed.
    pub fn check(&self) {
        let path = format!("testdata/adversarial/{}", self.file);
        println!(
            "{path}: {} cases, {} passed, {} known failures, {} failures",
            self.cases,
            self.passed,
            self.known.len(),
            self.failures.len()
        );
        for k in &self.known {
            println!("KNOWN FAILURE (expected to fail until fixed): {path} {k}");
        }
        if !self.failures.is_empty() {
            panic!(
                "{} adversarial failures in {path}:\n{}",
                self.failures.len(),
                self.failures.join("\n")
            );
        }
    }
}
