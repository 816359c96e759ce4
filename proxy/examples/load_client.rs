//! The load generator of `scripts/load`: drives a running `fenzi proxy` over loopback and prints
//! figures. Exits 1 when a check fails, 2 on a usage error.
//!
//! ```text
//! load_client limits
//! load_client certs DIR
//! load_client calls --proxy ADDR --target IP:PORT --ca PEM [--total 10000] [--connections 256]
//!                   [--tool echo]
//! load_client flood --proxy ADDR --target IP:PORT --ca PEM --tunnel-target IP:PORT
//!                   [--max-connections N] [--tunnels 10000] [--slowloris 2048] [--calls 200]
//!                   [--parallel 32]
//! ```
//!
//! - `limits`: the descriptor limits this process inherited and the connection budget the soft one
//!   gives the proxy (`fenzi_proxy::capacity`), as `key=value` lines.
//! - `certs`: a throwaway CA and a server certificate for 127.0.0.1 (for the upstream): writes
//!   DIR/test-ca.pem, DIR/server.pem (leaf then CA) and DIR/server-key.pem. The CA key is never
//!   written.
//! - `calls`: `--connections` keep-alive connections, each a CONNECT tunnel to the MCP server
//!   `--target` with TLS to the proxy (trusting its session CA `--ca`), share `--total` JSON-RPC
//!   `tools/call` requests (ids 1..=total). Every answer must be 200 with a JSON-RPC result carrying
//!   the request's id. Prints requests/s, latency percentiles and errors.
//! - `flood`: `--slowloris` clients each send a request head a byte a second, never finishing it (and
//!   connect again when the proxy closes them); then `--tunnels` CONNECT tunnels to `--tunnel-target`
//!   (a `hosts:` entry, passed through) are opened, `--parallel` at a time, and held idle. Once the
//!   proxy is at capacity (tunnels plus slowloris clients reach `--max-connections`, or every tunnel
//!   is open), a well-behaved client makes `--calls` tools/call requests, each on a new connection
//!   (CONNECT, TLS, one call), while the tunnels keep coming. Every tunnel must be answered 200 and
//!   every call must succeed; prints their latency and what the proxy closed.
//!
//! Descriptors: `calls` and `flood` raise the soft `RLIMIT_NOFILE` to the hard limit first.

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, ServerName};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Bound on any single step (connect, CONNECT answer, TLS, a call): generous, so a loaded CI
/// machine fails only when something is really stuck.
const STEP: Duration = Duration::from_secs(30);
/// How many error messages are kept to print.
const SAMPLES: usize = 5;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        eprintln!("usage: load_client limits|calls|flood [options] (see the source's doc)");
        return ExitCode::from(2);
    };
    if command == "limits" {
        limits();
        return ExitCode::SUCCESS;
    }
    if let Err(e) = fenzi_proxy::connection::capacity::raise_fd_limit() {
        eprintln!("load_client: could not raise the descriptor limit: {e}");
    }
    if command == "certs" {
        return match rest {
            [dir] => match certs(std::path::Path::new(dir)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("load_client: {e}");
                    ExitCode::from(1)
                }
            },
            _ => {
                eprintln!("usage: load_client certs DIR");
                ExitCode::from(2)
            }
        };
    }
    let opts = match Opts::parse(rest) {
        Ok(opts) => opts,
        Err(e) => {
            eprintln!("load_client: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("load_client: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        match command.as_str() {
            "calls" => calls(&opts).await,
            "flood" => flood(&opts).await,
            other => Err(format!("unknown command {other:?}").into()),
        }
    });
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("load_client: {e}");
            ExitCode::from(1)
        }
    }
}

#[derive(Default)]
struct Opts {
    proxy: Option<SocketAddr>,
    target: Option<SocketAddr>,
    tunnel_target: Option<SocketAddr>,
    ca: Option<String>,
    total: usize,
    connections: usize,
    tool: String,
    max_connections: usize,
    tunnels: usize,
    slowloris: usize,
    calls: usize,
    parallel: usize,
}

impl Opts {
    fn parse(args: &[String]) -> Result<Opts, Error> {
        let mut o = Opts {
            total: 10_000,
            connections: 256,
            tool: "echo".to_string(),
            max_connections: usize::MAX,
            tunnels: 10_000,
            slowloris: 2048,
            calls: 200,
            parallel: 32,
            ..Opts::default()
        };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
            match flag.as_str() {
                "--proxy" => o.proxy = Some(value.parse()?),
                "--target" => o.target = Some(value.parse()?),
                "--tunnel-target" => o.tunnel_target = Some(value.parse()?),
                "--ca" => o.ca = Some(value.clone()),
                "--total" => o.total = value.parse()?,
                "--connections" => o.connections = value.parse::<usize>()?.max(1),
                "--tool" => o.tool = value.clone(),
                "--max-connections" => o.max_connections = value.parse()?,
                "--tunnels" => o.tunnels = value.parse()?,
                "--slowloris" => o.slowloris = value.parse()?,
                "--calls" => o.calls = value.parse()?,
                "--parallel" => o.parallel = value.parse::<usize>()?.max(1),
                other => return Err(format!("unknown option {other:?}").into()),
            }
        }
        Ok(o)
    }

    fn need<T: Copy>(value: Option<T>, flag: &str) -> Result<T, Error> {
        value.ok_or_else(|| format!("{flag} is required").into())
    }

    fn client(&self) -> Result<Client, Error> {
        let proxy = Opts::need(self.proxy, "--proxy")?;
        let target = Opts::need(self.target, "--target")?;
        let ca = self.ca.as_deref().ok_or("--ca is required")?;
        Client::new(proxy, target, ca)
    }
}

/// The descriptor limits this process inherited (what a sibling started from the same shell gets)
/// and the connection budget they give the proxy, as `key=value` lines for a shell.
fn limits() {
    use fenzi_proxy::connection::capacity::{
        connections_for_fds, default_max_connections, fd_limits,
    };
    let (soft, hard) = fd_limits();
    let show = |v: Option<u64>| v.map_or("unlimited".to_string(), |v| v.to_string());
    println!("fd_soft={}", show(soft));
    println!("fd_hard={}", show(hard));
    // An unlimited soft limit still stops at the kernel's `nr_open` (2^20 by default).
    println!(
        "fits={}",
        connections_for_fds(Some(soft.unwrap_or(1 << 20)))
    );
    println!("default_max_connections={}", default_max_connections());
}

/// A CA (valid a day) and a leaf for 127.0.0.1 signed by it, as PEM files in `dir`.
fn certs(dir: &std::path::Path) -> Result<(), Error> {
    use rcgen::{
        BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
    };
    let now = time::OffsetDateTime::now_utc();
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.not_before = now - time::Duration::minutes(5);
    ca.not_after = now + time::Duration::days(1);
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let mut leaf = CertificateParams::default();
    leaf.subject_alt_names = vec![SanType::IpAddress([127, 0, 0, 1].into())];
    leaf.not_before = now - time::Duration::minutes(5);
    leaf.not_after = now + time::Duration::days(1);
    let key = KeyPair::generate()?;
    let cert = leaf.signed_by(&key, &issuer)?;
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("test-ca.pem"), ca_cert.pem())?;
    std::fs::write(dir.join("server.pem"), cert.pem() + &ca_cert.pem())?;
    std::fs::write(dir.join("server-key.pem"), key.serialize_pem())?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Clients

/// How to reach the MCP server through the proxy.
#[derive(Clone)]
struct Client {
    proxy: SocketAddr,
    target: SocketAddr,
    tls: tokio_rustls::TlsConnector,
}

impl Client {
    fn new(proxy: SocketAddr, target: SocketAddr, ca: &str) -> Result<Client, Error> {
        let pem = std::fs::read(ca).map_err(|e| format!("{ca}: {e}"))?;
        let mut roots = RootCertStore::empty();
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            let cert: CertificateDer<'static> = cert?;
            roots.add(cert)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Client {
            proxy,
            target,
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }

    /// CONNECT to the MCP server, TLS with the proxy (no SNI: the target is an IP), HTTP/1.1.
    async fn mcp(&self) -> Result<SendRequest<Full<Bytes>>, Error> {
        let stream = step("CONNECT", open_tunnel(self.proxy, self.target)).await?;
        let name = ServerName::IpAddress(self.target.ip().into());
        let tls = step("TLS", async { Ok(self.tls.connect(name, stream).await?) }).await?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        Ok(sender)
    }

    /// One `tools/call` with `id`; Ok when answered 200 with a result for that id.
    async fn call(
        &self,
        sender: &mut SendRequest<Full<Bytes>>,
        id: usize,
        tool: &str,
    ) -> Result<(), Error> {
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": {"text": "load"}}
        });
        let req = Request::post("/mcp")
            .header("host", self.target.to_string())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Full::new(Bytes::from(body.to_string())))?;
        let answer = step("call", async {
            sender.ready().await?;
            let response = sender.send_request(req).await?;
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            Ok((status, body))
        })
        .await?;
        let (status, body) = answer;
        let text = String::from_utf8_lossy(&body);
        if status != 200 {
            return Err(format!("call {id}: status {status}: {}", clip(&text)).into());
        }
        let value: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| format!("call {id}: not JSON ({e}): {}", clip(&text)))?;
        if value["id"] != id || value.get("result").is_none() {
            return Err(format!("call {id}: not its result: {}", clip(&text)).into());
        }
        Ok(())
    }
}

/// `fut`, failing after [`STEP`].
async fn step<T>(
    what: &str,
    fut: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    tokio::time::timeout(STEP, fut)
        .await
        .map_err(|_| format!("{what}: no progress in {STEP:?}"))?
}

fn clip(text: &str) -> String {
    text.chars().take(200).collect()
}

/// A TCP connection to `proxy` with an answered `CONNECT target` (the answer read byte by byte, so
/// nothing after it is consumed).
async fn open_tunnel(proxy: SocketAddr, target: SocketAddr) -> Result<TcpStream, Error> {
    let mut stream = TcpStream::connect(proxy).await?;
    let _ = stream.set_nodelay(true);
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut head = Vec::with_capacity(64);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await? == 0 {
            return Err(format!(
                "CONNECT {target}: closed after {:?}",
                String::from_utf8_lossy(&head)
            )
            .into());
        }
        head.push(byte[0]);
        if head.len() > 8192 {
            return Err("CONNECT: answer head too long".into());
        }
    }
    if !head.starts_with(b"HTTP/1.1 200") {
        let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
        return Err(format!("CONNECT {target}: {}", String::from_utf8_lossy(line)).into());
    }
    Ok(stream)
}

// ---------------------------------------------------------------------------------------------
// Figures

/// Latencies and errors of a set of calls.
#[derive(Default)]
struct Tally {
    latencies: Vec<Duration>,
    errors: u64,
    samples: Vec<String>,
}

impl Tally {
    fn error(&mut self, e: impl std::fmt::Display) {
        self.errors += 1;
        if self.samples.len() < SAMPLES {
            self.samples.push(e.to_string());
        }
    }

    fn merge(&mut self, other: Tally) {
        self.latencies.extend(other.latencies);
        self.errors += other.errors;
        for s in other.samples {
            if self.samples.len() < SAMPLES {
                self.samples.push(s);
            }
        }
    }

    fn percentile(sorted: &[Duration], p: f64) -> f64 {
        if sorted.is_empty() {
            return f64::NAN;
        }
        let at = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
        sorted[at].as_secs_f64() * 1000.0
    }

    /// `p50 X ms  p99 Y ms  max Z ms`.
    fn latency(&mut self) -> String {
        self.latencies.sort();
        let l = &self.latencies;
        format!(
            "p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
            Tally::percentile(l, 0.50),
            Tally::percentile(l, 0.99),
            Tally::percentile(l, 1.0)
        )
    }

    fn print_samples(&self) {
        for s in &self.samples {
            println!("  error: {s}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// calls

async fn calls(opts: &Opts) -> Result<bool, Error> {
    let client = opts.client()?;
    let (total, n) = (opts.total, opts.connections.min(opts.total.max(1)));
    let setup = Instant::now();
    // Every connection first (CONNECT, TLS), so the clock then measures calls only.
    let mut opening = Vec::with_capacity(n);
    for _ in 0..n {
        let client = client.clone();
        opening.push(tokio::spawn(async move { client.mcp().await }));
    }
    let mut senders = Vec::with_capacity(n);
    let mut tally = Tally::default();
    for task in opening {
        match task.await? {
            Ok(sender) => senders.push(sender),
            Err(e) => tally.error(format!("opening a connection: {e}")),
        }
    }
    println!(
        "calls: {} connections open in {:.2} s (CONNECT + TLS with the proxy)",
        senders.len(),
        setup.elapsed().as_secs_f64()
    );
    if senders.is_empty() {
        tally.print_samples();
        return Ok(false);
    }
    let next = Arc::new(AtomicUsize::new(1));
    let started = Instant::now();
    let mut workers = Vec::with_capacity(senders.len());
    for mut sender in senders {
        let (client, next, tool) = (client.clone(), next.clone(), opts.tool.clone());
        workers.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            loop {
                let id = next.fetch_add(1, Ordering::Relaxed);
                if id > total {
                    return tally;
                }
                let t = Instant::now();
                match client.call(&mut sender, id, &tool).await {
                    Ok(()) => tally.latencies.push(t.elapsed()),
                    Err(e) => {
                        tally.error(e);
                        // The connection may be broken: carry on with a new one.
                        match client.mcp().await {
                            Ok(fresh) => sender = fresh,
                            Err(e) => {
                                tally.error(format!("reconnecting: {e}"));
                                return tally;
                            }
                        }
                    }
                }
            }
        }));
    }
    for worker in workers {
        tally.merge(worker.await?);
    }
    let secs = started.elapsed().as_secs_f64();
    let ok = tally.latencies.len();
    println!(
        "calls: {ok} of {total} answered 200 with their result in {secs:.2} s: {:.0} req/s, {}, errors {}",
        ok as f64 / secs,
        tally.latency(),
        tally.errors
    );
    tally.print_samples();
    Ok(ok == total && tally.errors == 0)
}

// ---------------------------------------------------------------------------------------------
// flood

#[derive(Default)]
struct FloodStats {
    slowloris_connects: AtomicU64,
    slowloris_connect_failures: AtomicU64,
    /// Slowloris connections the proxy closed.
    slowloris_closed: AtomicU64,
    /// Slowloris connections that got bytes back (an answer to a head never finished).
    slowloris_answered: AtomicU64,
    tunnels_opened: AtomicU64,
    tunnels_failed: AtomicU64,
    /// Open tunnels the proxy closed later.
    tunnels_closed: AtomicU64,
    tunnels_open: AtomicI64,
    tunnels_peak: AtomicI64,
    samples: Mutex<Vec<String>>,
}

impl FloodStats {
    fn sample(&self, e: impl std::fmt::Display) {
        let mut samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        if samples.len() < SAMPLES {
            samples.push(e.to_string());
        }
    }
}

/// A request head that never ends: a byte a second, forever.
const SLOW_HEAD: &[u8] =
    b"GET http://slowloris.invalid/ HTTP/1.1\r\nHost: slowloris.invalid\r\nX-Slowloris: ";

async fn slowloris(
    proxy: SocketAddr,
    start_after: Duration,
    stats: Arc<FloodStats>,
    mut stop: watch::Receiver<bool>,
) {
    tokio::time::sleep(start_after).await;
    let mut buf = [0u8; 256];
    while !*stop.borrow() {
        let mut stream = match TcpStream::connect(proxy).await {
            Ok(stream) => stream,
            Err(e) => {
                stats
                    .slowloris_connect_failures
                    .fetch_add(1, Ordering::Relaxed);
                stats.sample(format!("slowloris connect: {e}"));
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        stats.slowloris_connects.fetch_add(1, Ordering::Relaxed);
        let mut sent = 0usize;
        loop {
            let byte = SLOW_HEAD.get(sent).copied().unwrap_or(b'a');
            if stream.write_all(&[byte]).await.is_err() {
                stats.slowloris_closed.fetch_add(1, Ordering::Relaxed);
                break;
            }
            sent += 1;
            tokio::select! {
                read = stream.read(&mut buf) => {
                    match read {
                        Ok(0) | Err(_) => stats.slowloris_closed.fetch_add(1, Ordering::Relaxed),
                        Ok(_) => stats.slowloris_answered.fetch_add(1, Ordering::Relaxed),
                    };
                    break;
                }
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.changed() => return,
            }
        }
    }
}

/// Holds an open tunnel idle until the proxy closes it or the flood ends.
async fn hold(mut stream: TcpStream, stats: Arc<FloodStats>, mut stop: watch::Receiver<bool>) {
    let open = stats.tunnels_open.fetch_add(1, Ordering::Relaxed) + 1;
    stats.tunnels_peak.fetch_max(open, Ordering::Relaxed);
    let mut buf = [0u8; 64];
    tokio::select! {
        read = stream.read(&mut buf) => {
            stats.tunnels_closed.fetch_add(1, Ordering::Relaxed);
            if let Ok(n) = read && n > 0 {
                stats.sample(format!("an idle tunnel received {n} bytes"));
            }
        }
        _ = stop.changed() => {}
    }
    stats.tunnels_open.fetch_sub(1, Ordering::Relaxed);
}

async fn flood(opts: &Opts) -> Result<bool, Error> {
    let client = opts.client()?;
    let tunnel_target = Opts::need(opts.tunnel_target, "--tunnel-target")?;
    let stats = Arc::new(FloodStats::default());
    let (stop_tx, stop) = watch::channel(false);
    let started = Instant::now();

    // The slowloris clients, connecting over about a second.
    let spread = Duration::from_secs(1).as_micros() as u64 / opts.slowloris.max(1) as u64;
    let mut background = Vec::new();
    for i in 0..opts.slowloris {
        background.push(tokio::spawn(slowloris(
            client.proxy,
            Duration::from_micros(spread * i as u64),
            stats.clone(),
            stop.clone(),
        )));
    }
    let deadline = Instant::now() + STEP;
    while (stats.slowloris_connects.load(Ordering::Relaxed) as usize) < opts.slowloris
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "flood: {} slowloris clients connected in {:.2} s, each sending a request head a byte a second",
        stats.slowloris_connects.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );

    // The well-behaved client, started once the proxy is at capacity.
    let at_capacity = Arc::new(tokio::sync::Notify::new());
    let well_behaved = {
        let (client, at_capacity, calls, tool) = (
            client.clone(),
            at_capacity.clone(),
            opts.calls,
            opts.tool.clone(),
        );
        tokio::spawn(async move {
            at_capacity.notified().await;
            let mut tally = Tally::default();
            for id in 1..=calls {
                let t = Instant::now();
                let result = async {
                    let mut sender = client.mcp().await?;
                    client.call(&mut sender, id, &tool).await
                }
                .await;
                match result {
                    Ok(()) => tally.latencies.push(t.elapsed()),
                    Err(e) => tally.error(e),
                }
            }
            tally
        })
    };

    // The tunnels, `--parallel` at a time.
    let next = Arc::new(AtomicUsize::new(0));
    let mut openers = Vec::new();
    let tunnels_started = Instant::now();
    let capacity_signalled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for _ in 0..opts.parallel {
        let (next, stats, stop, at_capacity, signalled) = (
            next.clone(),
            stats.clone(),
            stop.clone(),
            at_capacity.clone(),
            capacity_signalled.clone(),
        );
        let (proxy, total, slow, max) = (
            client.proxy,
            opts.tunnels,
            opts.slowloris,
            opts.max_connections,
        );
        openers.push(tokio::spawn(async move {
            let mut holders = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < total {
                match step("tunnel", open_tunnel(proxy, tunnel_target)).await {
                    Ok(stream) => {
                        let opened =
                            stats.tunnels_opened.fetch_add(1, Ordering::Relaxed) as usize + 1;
                        holders.push(tokio::spawn(hold(stream, stats.clone(), stop.clone())));
                        if (opened + slow >= max || opened == total)
                            && !signalled.swap(true, Ordering::Relaxed)
                        {
                            at_capacity.notify_one();
                        }
                    }
                    Err(e) => {
                        stats.tunnels_failed.fetch_add(1, Ordering::Relaxed);
                        stats.sample(format!("tunnel: {e}"));
                    }
                }
            }
            holders
        }));
    }
    let mut holders = Vec::new();
    for opener in openers {
        holders.extend(opener.await?);
    }
    if !capacity_signalled.swap(true, Ordering::Relaxed) {
        at_capacity.notify_one();
    }
    let tunnel_secs = tunnels_started.elapsed().as_secs_f64();
    let mut tally = well_behaved.await?;
    let _ = stop_tx.send(true);
    for task in background.into_iter().chain(holders) {
        let _ = task.await;
    }

    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let opened = get(&stats.tunnels_opened);
    println!(
        "flood: {opened} of {} tunnels opened (CONNECT answered 200) in {tunnel_secs:.2} s, {} failed; \
         at most {} open at once; {} closed by the proxy to make room",
        opts.tunnels,
        get(&stats.tunnels_failed),
        stats.tunnels_peak.load(Ordering::Relaxed),
        get(&stats.tunnels_closed),
    );
    println!(
        "flood: slowloris: {} connections in all, {} closed by the proxy, {} answered, {} connect failures",
        get(&stats.slowloris_connects),
        get(&stats.slowloris_closed),
        get(&stats.slowloris_answered),
        get(&stats.slowloris_connect_failures),
    );
    let ok = tally.latencies.len();
    println!(
        "flood: well-behaved client: {ok} of {} calls succeeded (new connection each: CONNECT, TLS, tools/call), {}",
        opts.calls,
        tally.latency()
    );
    tally.print_samples();
    for s in stats
        .samples
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
    {
        println!("  flood error: {s}");
    }
    println!("flood: {:.2} s in all", started.elapsed().as_secs_f64());
    Ok(ok == opts.calls
        && tally.errors == 0
        && opened == opts.tunnels as u64
        && get(&stats.tunnels_failed) == 0)
}
