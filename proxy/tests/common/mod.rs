//! Test fixtures shared by the proxy's integration tests: a test PKI made at run time, upstream servers
//! on loopback that record every byte they receive (before and after TLS), a fake network that maps
//! test names and public addresses onto those servers (with per-step answers and a trap for every
//! other dial), audit sinks (in memory, or the real hash-chained log on a file), and small clients
//! (raw CONNECT, TLS, hyper).
#![allow(dead_code)]

pub mod tracing_capture;

use bytes::Bytes;
use fenzi_policy::config;
use fenzi_policy::engine::Policy;
use fenzi_policy::mcp::JsonLimits;
use fenzi_proxy::audit::writer::{AuditEntry, AuditWriter};
use fenzi_proxy::{AuditSink, Body, BoxFuture, Network, Proxy, ProxyOptions};
use http::request::Parts;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

// ---------------------------------------------------------------------------------------------
// Audit sinks

/// Keeps entries in memory; can be told to fail every record.
#[derive(Default)]
pub struct MemorySink {
    pub entries: Mutex<Vec<AuditEntry>>,
    pub fail: AtomicBool,
}

impl MemorySink {
    pub fn entries(&self) -> Vec<AuditEntry> {
        self.entries.lock().unwrap().clone()
    }
    pub fn failing() -> Arc<MemorySink> {
        let sink = MemorySink::default();
        sink.fail.store(true, Ordering::SeqCst);
        Arc::new(sink)
    }
}

impl AuditSink for MemorySink {
    fn record(&self, entry: AuditEntry) -> Result<u64, String> {
        if self.fail.load(Ordering::SeqCst) {
            return Err("disk full".to_string());
        }
        let mut entries = self.entries.lock().unwrap();
        entries.push(entry);
        Ok(entries.len() as u64)
    }
    fn flush(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
}

/// The real audit writer on `audit.jsonl` in a temporary directory (the hash-chained log as the proxy
/// writes it in production), counting the records it acknowledged (to know when traffic has settled).
pub struct FileSink {
    writer: AuditWriter,
    path: PathBuf,
    count: AtomicUsize,
    _dir: tempfile::TempDir,
}

impl FileSink {
    pub fn temp(session: &str) -> FileSink {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        FileSink {
            writer: AuditWriter::open(&path, session).unwrap(),
            path,
            count: AtomicUsize::new(0),
            _dir: dir,
        }
    }
    /// The log file (its head file is `audit_writer::head_path` of it).
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// How many records the writer has acknowledged.
    pub fn records(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }
}

impl AuditSink for FileSink {
    fn record(&self, entry: AuditEntry) -> Result<u64, String> {
        let seq = self.writer.append(entry).map_err(|e| e.to_string())?;
        self.count.fetch_add(1, Ordering::SeqCst);
        Ok(seq)
    }
    fn flush(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { self.writer.flush().await.map_err(|e| e.to_string()) })
    }
}

/// A compact view of an entry for assertions: `outcome reason method host:port path rpc tool`.
pub fn summary(entry: &AuditEntry) -> String {
    let outcome = entry.outcome.label();
    let mut out = format!("{outcome} {} {}:{}", entry.method, entry.host, entry.port);
    for part in [&entry.path, &entry.rpc, &entry.tool].into_iter().flatten() {
        out.push(' ');
        out.push_str(part);
    }
    if let Some(r) = entry.reason {
        out.push_str(" -> ");
        out.push_str(r.code());
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Test PKI

/// A CA for the test upstreams (not the proxy's session CA).
pub struct TestPki {
    issuer: Issuer<'static, KeyPair>,
    pub ca_der: CertificateDer<'static>,
    pub ca_pem: String,
}

impl TestPki {
    pub fn new() -> TestPki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        TestPki {
            ca_der: cert.der().clone(),
            ca_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for `names` (DNS names or IP addresses) and its key, as PEM, for a server
    /// that is not ours (a real MCP SDK server, started as a process): (chain, key).
    pub fn server_pem(&self, names: &[&str]) -> (String, String) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = names
            .iter()
            .map(|n| match n.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*n).try_into().unwrap()),
            })
            .collect();
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (
            format!("{}{}", cert.pem(), self.ca_pem),
            key.serialize_pem(),
        )
    }

    /// A server config for `names` (DNS names or IP addresses), ALPN http/1.1.
    pub fn server_config(&self, names: &[&str]) -> Arc<ServerConfig> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = names
            .iter()
            .map(|n| match n.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*n).try_into().unwrap()),
            })
            .collect();
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key_der)
            .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

// ---------------------------------------------------------------------------------------------
// Upstream servers

/// Wraps a stream and appends every byte read from it to `log`.
pub struct Recording<T> {
    inner: T,
    log: Arc<Mutex<Vec<u8>>>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Recording<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &poll {
            this.log
                .lock()
                .unwrap()
                .extend_from_slice(&buf.filled()[before..]);
        }
        poll
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Recording<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

pub type Handler = Arc<dyn Fn(Parts, Bytes) -> Response<Body> + Send + Sync>;

/// A loopback server that records what it receives.
pub struct Upstream {
    pub addr: SocketAddr,
    /// Every byte received after TLS (all of them, for a server without TLS).
    pub received: Arc<Mutex<Vec<u8>>>,
    /// Every byte received on the TCP connections, TLS records included (the same log as
    /// `received` for a server without TLS).
    pub raw: Arc<Mutex<Vec<u8>>>,
    pub connections: Arc<AtomicUsize>,
}

impl Upstream {
    fn new(addr: SocketAddr, tls: bool) -> Upstream {
        let received = Arc::new(Mutex::new(Vec::new()));
        let raw = if tls {
            Arc::new(Mutex::new(Vec::new()))
        } else {
            received.clone()
        };
        Upstream {
            addr,
            received,
            raw,
            connections: Arc::new(AtomicUsize::new(0)),
        }
    }
    pub fn received_text(&self) -> String {
        String::from_utf8_lossy(&self.received.lock().unwrap()).into_owned()
    }
    pub fn received_len(&self) -> usize {
        self.received.lock().unwrap().len()
    }
    /// What arrived after TLS from byte `from` on (a length [`Upstream::received_len`] gave).
    pub fn received_since(&self, from: usize) -> Vec<u8> {
        self.received.lock().unwrap()[from..].to_vec()
    }
    pub fn raw_len(&self) -> usize {
        self.raw.lock().unwrap().len()
    }
    pub fn connection_count(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

/// An HTTP/1.1 server (TLS when `tls` is given) answering every request with `handler`.
pub async fn http_upstream(tls: Option<Arc<ServerConfig>>, handler: Handler) -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = Upstream::new(listener.local_addr().unwrap(), tls.is_some());
    let (log, raw, count) = (
        upstream.received.clone(),
        upstream.raw.clone(),
        upstream.connections.clone(),
    );
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            count.fetch_add(1, Ordering::SeqCst);
            let (tls, handler, log, raw) = (tls.clone(), handler.clone(), log.clone(), raw.clone());
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| {
                    let handler = handler.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map(|c| c.to_bytes())
                            .unwrap_or_default();
                        Ok::<_, Infallible>(handler(parts, body))
                    }
                });
                let builder = hyper::server::conn::http1::Builder::new();
                match tls {
                    Some(config) => {
                        let raw = Recording {
                            inner: stream,
                            log: raw,
                        };
                        let Ok(stream) = tokio_rustls::TlsAcceptor::from(config).accept(raw).await
                        else {
                            return;
                        };
                        let io = Recording { inner: stream, log };
                        let _ = builder.serve_connection(TokioIo::new(io), service).await;
                    }
                    None => {
                        let io = Recording { inner: stream, log };
                        let _ = builder.serve_connection(TokioIo::new(io), service).await;
                    }
                }
            });
        }
    });
    upstream
}

/// A TCP server that echoes every byte back (for pass-through tunnels).
pub async fn echo_upstream() -> Upstream {
    tcp_upstream(None).await
}

/// A TCP server that records everything and answers each connection's first bytes once with
/// `599 Trap`: the place for dials no test route leads to ([`FakeNetwork::fallback`]).
pub async fn trap_upstream() -> Upstream {
    tcp_upstream(Some(b"HTTP/1.1 599 Trap\r\ncontent-length: 0\r\n\r\n")).await
}

/// Echoes every byte back, or with `answer`, sends it once and otherwise only reads.
async fn tcp_upstream(answer: Option<&'static [u8]>) -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = Upstream::new(listener.local_addr().unwrap(), false);
    let (log, count) = (upstream.received.clone(), upstream.connections.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            count.fetch_add(1, Ordering::SeqCst);
            let log = log.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut answered = false;
                loop {
                    let n = match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    log.lock().unwrap().extend_from_slice(&buf[..n]);
                    let out = match answer {
                        None => &buf[..n],
                        Some(answer) if !answered => {
                            answered = true;
                            answer
                        }
                        Some(_) => continue,
                    };
                    if stream.write_all(out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    upstream
}

/// A response body fed by a channel, so a test decides when each chunk is sent.
pub struct ChannelBody(pub mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = fenzi_proxy::BoxError;
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.get_mut()
            .0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|b| Ok(Frame::data(b))))
    }
}

pub fn full_body(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

pub fn respond(status: u16, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(full_body(body))
        .unwrap()
}

/// An MCP-ish handler: answers every POST with a JSON-RPC result echoing the request's id.
pub fn mcp_handler() -> Handler {
    Arc::new(|parts: Parts, body: Bytes| {
        if parts.method != http::Method::POST {
            return respond(200, "text/plain", "not a post");
        }
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let id = value.get("id").cloned().unwrap_or(serde_json::Value::Null);
        let reply = serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "result": {"content": [{"type": "text", "text": "upstream says hi"}]}
        });
        respond(200, "application/json", reply.to_string())
    })
}

// ---------------------------------------------------------------------------------------------
// Fake network

/// The public address `web.test` resolves to in [`plain_hosts_network`].
pub const WEB_IP: &str = "93.184.216.34";
/// The public address `echo.test` resolves to in [`plain_hosts_network`].
pub const ECHO_IP: &str = "93.184.216.35";
/// The public address `slow.test` resolves to in [`plain_hosts_network`].
pub const SLOW_IP: &str = "93.184.216.36";
/// The `hosts:` lines that admit the names of [`plain_hosts_network`].
pub const PLAIN_HOSTS_POLICY: &str =
    "hosts:\n  - web.test:80\n  - echo.test:7000\n  - slow.test:80\n";

/// Three plain hosts: `web.test:80` reaches `web`, `echo.test:7000` reaches `echo`, and a dial to
/// `slow.test:80` never completes.
pub fn plain_hosts_network(web: SocketAddr, echo: SocketAddr) -> FakeNetwork {
    FakeNetwork::default()
        .name("web.test", &[WEB_IP])
        .route(&format!("{WEB_IP}:80"), web)
        .name("echo.test", &[ECHO_IP])
        .route(&format!("{ECHO_IP}:7000"), echo)
        .name("slow.test", &[SLOW_IP])
        .blackhole(&format!("{SLOW_IP}:80"))
}

/// What lookups of one name answer: the n-th lookup gets the n-th list (the last one repeats), or
/// every lookup fails.
#[derive(Debug, Clone)]
pub enum Answers {
    Seq(Vec<Vec<IpAddr>>),
    Fail,
}

/// Resolves test names to the addresses the test chose and connects addresses to loopback servers.
/// Names may be rebound while a proxy uses the network ([`FakeNetwork::set_name`]), or answered
/// differently until [`FakeNetwork::reset`] ([`FakeNetwork::override_name`]). Lookups and dials are
/// logged.
#[derive(Default)]
pub struct FakeNetwork {
    names: Mutex<HashMap<String, Vec<IpAddr>>>,
    /// Answers taking precedence over `names`, each with the number of lookups it has served.
    overrides: Mutex<HashMap<String, (Answers, usize)>>,
    pub routes: HashMap<SocketAddr, SocketAddr>,
    /// Addresses whose connection attempts never complete.
    pub blackholes: Vec<SocketAddr>,
    /// Where a dial to an address without a route goes; without one, to the address itself.
    pub fallback: Option<SocketAddr>,
    pub lookups: Mutex<Vec<String>>,
    pub dialled: Mutex<Vec<SocketAddr>>,
}

impl FakeNetwork {
    pub fn name(self, name: &str, ips: &[&str]) -> Self {
        self.set_name(name, ips);
        self
    }
    /// Makes `name` resolve to `ips` from now on, replacing what it resolved to before.
    pub fn set_name(&self, name: &str, ips: &[&str]) {
        self.names.lock().unwrap().insert(
            name.to_string(),
            ips.iter().map(|ip| ip.parse().unwrap()).collect(),
        );
    }
    pub fn route(mut self, from: &str, to: SocketAddr) -> Self {
        self.routes.insert(from.parse().unwrap(), to);
        self
    }
    pub fn blackhole(mut self, addr: &str) -> Self {
        self.blackholes.push(addr.parse().unwrap());
        self
    }
    /// Sends every dial to an address without a route to `to` (e.g. a [`trap_upstream`]).
    pub fn fallback(mut self, to: SocketAddr) -> Self {
        self.fallback = Some(to);
        self
    }
    /// Answers lookups of `name` with `answers` until [`FakeNetwork::reset`].
    pub fn override_name(&self, name: &str, answers: Answers) {
        self.overrides
            .lock()
            .unwrap()
            .insert(name.to_string(), (answers, 0));
    }
    /// Forgets the overrides and the lookup and dial logs.
    pub fn reset(&self) {
        self.overrides.lock().unwrap().clear();
        self.lookups.lock().unwrap().clear();
        self.dialled.lock().unwrap().clear();
    }
    pub fn dialled(&self) -> Vec<SocketAddr> {
        self.dialled.lock().unwrap().clone()
    }
    /// The names looked up so far, in order.
    pub fn lookups(&self) -> Vec<String> {
        self.lookups.lock().unwrap().clone()
    }
}

impl Network for FakeNetwork {
    fn resolve<'a>(&'a self, host: &'a str, _port: u16) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            self.lookups.lock().unwrap().push(host.to_string());
            if let Some((answers, served)) = self.overrides.lock().unwrap().get_mut(host) {
                return match answers {
                    Answers::Fail => Err(io::Error::new(io::ErrorKind::NotFound, "test: NXDOMAIN")),
                    Answers::Seq(seq) => {
                        let at = (*served).min(seq.len().saturating_sub(1));
                        *served += 1;
                        Ok(seq.get(at).cloned().unwrap_or_default())
                    }
                };
            }
            self.names
                .lock()
                .unwrap()
                .get(host)
                .cloned()
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such test name"))
        })
    }
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        self.dialled.lock().unwrap().push(addr);
        if self.blackholes.contains(&addr) {
            return Box::pin(std::future::pending());
        }
        let to = (self.routes.get(&addr).copied())
            .or(self.fallback)
            .unwrap_or(addr);
        Box::pin(TcpStream::connect(to))
    }
}

// ---------------------------------------------------------------------------------------------
// The proxy under test

/// A proxy serving on loopback, with the sink it records to.
pub struct TestProxy<S = MemorySink> {
    pub addr: SocketAddr,
    pub proxy: Proxy,
    pub sink: Arc<S>,
    stop: Option<oneshot::Sender<()>>,
    pub done: Option<tokio::task::JoinHandle<usize>>,
}

impl<S> TestProxy<S> {
    /// An HTTP/1.1 client inside an intercepted tunnel to `target` (a `127.0.0.1:PORT` MCP
    /// server): CONNECT answered 200, then TLS with the session CA's leaf for 127.0.0.1.
    pub async fn intercepted_h1(&self, target: &str) -> Sender {
        let (stream, status, head) = connect(self.addr, target).await;
        assert_eq!(status, 200, "{head}");
        let ca = self.proxy.ca().cert_der().clone();
        let tls = tls_over(stream, &ca, "127.0.0.1", &[b"http/1.1"])
            .await
            .expect("TLS with the proxy");
        h1(tls).await
    }

    /// Starts shutdown; `done` resolves with the number of connections cut.
    pub fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl TestProxy {
    pub fn entries(&self) -> Vec<AuditEntry> {
        self.sink.entries()
    }
    pub fn summaries(&self) -> Vec<String> {
        self.entries().iter().map(summary).collect()
    }
    /// Polls the sink until it holds at least `n` entries, for records written after the client
    /// has its answer (e.g. a request hyper refused is recorded once the connection has ended).
    pub async fn wait_for_entries(&self, n: usize) {
        for _ in 0..200 {
            if self.entries().len() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("expected {n} entries, got {:?}", self.summaries());
    }
}

pub fn policy(yaml: &str, limits: Option<JsonLimits>) -> Policy {
    let config = config::load(None, Some((yaml, "test.yaml")))
        .unwrap_or_else(|e| panic!("test policy is invalid:\n{e}\n---\n{yaml}"));
    match limits {
        Some(limits) => Policy::with_limits(&config, limits),
        None => Policy::from_config(&config),
    }
}

pub fn options(upstream_ca: &TestPki) -> ProxyOptions {
    ProxyOptions {
        upstream_roots: vec![upstream_ca.ca_der.clone()],
        drain_timeout: Duration::from_secs(3),
        ..ProxyOptions::default()
    }
}

pub async fn start_proxy(
    policy: Policy,
    options: ProxyOptions,
    network: Arc<FakeNetwork>,
    sink: Arc<MemorySink>,
) -> TestProxy {
    let proxy = Proxy::with_network(policy, sink.clone(), options, network).unwrap();
    serve_proxy(proxy, sink).await
}

/// Serves `proxy` (built to record to `sink`) on a loopback port until [`TestProxy::shutdown`].
pub async fn serve_proxy<S>(proxy: Proxy, sink: Arc<S>) -> TestProxy<S> {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let serving = proxy.clone();
    let done = tokio::spawn(async move {
        serving
            .serve(listener, async {
                let _ = stopped.await;
            })
            .await
            .unwrap()
    });
    TestProxy {
        addr,
        proxy,
        sink,
        stop: Some(stop),
        done: Some(done),
    }
}

// ---------------------------------------------------------------------------------------------
// Clients

/// Reads one HTTP/1.1 response head (up to the blank line) from `stream`, byte by byte so nothing after
/// it is consumed. Returns the status and the head text.
pub async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> (u16, String) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).await.unwrap();
        assert!(n == 1, "connection closed inside a response head: {head:?}");
        head.push(byte[0]);
    }
    let text = String::from_utf8(head).unwrap();
    let status = text.split(' ').nth(1).unwrap().parse().unwrap();
    (status, text)
}

/// Sends `CONNECT target` and returns the stream and the response status (and head).
pub async fn connect(proxy: SocketAddr, target: &str) -> (TcpStream, u16, String) {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let (status, head) = read_head(&mut stream).await;
    (stream, status, head)
}

/// A TLS client config trusting `roots`, offering `alpn`.
pub fn client_config(roots: &[&CertificateDer<'static>], alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let mut store = RootCertStore::empty();
    for root in roots {
        store.add((*root).clone()).unwrap();
    }
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// Accepts any certificate: a client that ignores names (domain fronting, or one that lies about the
/// name it wants), set with `config.dangerous().set_certificate_verifier(Arc::new(AnyCert))`.
#[derive(Debug)]
pub struct AnyCert;

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// TLS over an established tunnel, trusting the proxy's session CA.
pub async fn tls_over(
    stream: TcpStream,
    proxy_ca: &CertificateDer<'static>,
    server_name: &str,
    alpn: &[&[u8]],
) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let config = client_config(&[proxy_ca], alpn);
    let name = ServerName::try_from(server_name.to_string()).unwrap();
    tokio_rustls::TlsConnector::from(config)
        .connect(name, stream)
        .await
}

pub type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// An HTTP/1.1 client connection over `io`.
pub async fn h1<T>(io: T) -> Sender
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

/// An h2 client connection over `io`.
pub async fn h2<T>(io: T) -> hyper::client::conn::http2::SendRequest<Full<Bytes>>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .unwrap();
    tokio::spawn(conn);
    sender
}

/// A JSON-RPC `tools/call` POST to `path` with `host`.
pub fn tools_call(host: &str, path: &str, id: u64, tool: &str) -> Request<Full<Bytes>> {
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": {"text": "hello"}}
    });
    Request::builder()
        .method("POST")
        .uri(path)
        .header("host", host)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

/// An absolute-form GET of `uri` (for the proxy port) with its Host header, no body.
pub fn get(uri: &str) -> Request<Full<Bytes>> {
    let host = http::Uri::try_from(uri)
        .unwrap()
        .authority()
        .unwrap()
        .to_string();
    Request::builder()
        .uri(uri)
        .header("host", host)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

/// An upstream handler answering every request 200 `hello`.
pub fn hello() -> Handler {
    Arc::new(|_, _| respond(200, "text/plain", "hello"))
}

/// The response status and its whole body as text.
pub async fn text(response: Response<Incoming>) -> (u16, String) {
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The repository's root.
pub fn repo() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Python that has the official MCP SDK: `FENZI_E2E_PYTHON`, else the repository's `.venv`
/// (`scripts/e2e/setup.sh` makes it). Without it, `test` says SKIPPED and gets `None`, unless
/// `FENZI_REQUIRE_SDK` is set, which makes it a failure.
pub fn sdk_python(test: &str) -> Option<std::path::PathBuf> {
    let python = std::env::var_os("FENZI_E2E_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv/bin/python"));
    if python.exists() {
        return Some(python);
    }
    assert!(
        std::env::var_os("FENZI_REQUIRE_SDK").is_none(),
        "{} is missing: run scripts/e2e/setup.sh",
        python.display()
    );
    eprintln!(
        "*** SKIPPED {test}: {} is missing (scripts/e2e/setup.sh makes it)",
        python.display()
    );
    None
}
