//! The world an adversarial suite runs in: a live `fenzi_proxy::Proxy` on loopback with one policy
//! (plus a `token: true` server, two bound secrets and their values for `secrets.cases`),
//! upstream servers that record every byte they receive (before and after TLS), a network seam that
//! resolves test names (per case, even differently from one lookup to the next) and routes public test
//! addresses to those servers, sending every other dial to a trap that records it too, and an audit
//! sink that writes the real hash-chained log to a temp file while counting records.

use bytes::Bytes;
use fenzi_policy::config;
use fenzi_policy::engine::Policy;
use fenzi_policy::mcp::JsonLimits;
use fenzi_proxy::audit_sink::BoxFuture;
use fenzi_proxy::audit_writer::{AuditEntry, AuditWriter};
use fenzi_proxy::secrets::SecretSet;
use fenzi_proxy::{AuditSink, Body, Network, Proxy, ProxyOptions};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// The policy every suite runs against. Names resolve through [`WorldNetwork`]; the addresses are
/// public test addresses that the network routes to loopback servers.
pub const POLICY: &str = r#"version: 1
hosts:
  - web.test
  - web.test:80
  - "*.internal.test"
  - "*.internal.test:80"
  - "10.0.0.5:8080"
  - "93.184.216.60:80"
mcp:
  main:
    url: https://mcp.test/mcp
    tools:
      allow: [echo, "read_*"]
      deny: [delete_everything, read_secret]
  plain:
    url: http://plain-mcp.test/mcp
    tools:
      allow: [echo]
      deny: [delete_everything]
  byip:
    url: https://93.184.216.50/mcp
    tools:
      allow: [echo]
  claude:
    account: claude
    tools:
      allow: [echo]
"#;

/// What `secrets.cases` adds to [`POLICY`]: a `token: true` MCP server and two secrets bound to
/// their own hosts (one allowed in bodies). Only that file's world has secrets.
pub const SECRETS_POLICY: &str = r#"  tracker:
    url: https://tracker.test/mcp
    token: true
    tools:
      allow: [echo]
secrets:
  API_KEY:
    hosts: [api.test]
  BODY_KEY:
    hosts: [body.test]
    body: true
"#;

/// The case file whose world has secrets.
pub const SECRETS_FILE: &str = "secrets.cases";

/// The secrets of that world: name, placeholder, value. The placeholders are fixed (through
/// `SecretSet::insert_with_placeholder`) so that case files can spell them every way an attacker
/// would; case files write `${PH:NAME}` and `${VALUE:NAME}`.
pub const SECRETS: [(&str, &str, &str); 3] = [
    (
        "API_KEY",
        "fenzi_ph_Adv3rsarialApiKeyPlaceholder-0123456_xyz",
        "sk-adv-API-0123456789abcdef",
    ),
    (
        "BODY_KEY",
        "fenzi_ph_Adv3rsarialBodyKeyPlaceholder-012345_xyz",
        "bk-adv-BODY-0123456789",
    ),
    (
        "MCP_TRACKER",
        "fenzi_ph_Adv3rsarialTrackerPlaceholder-012345_xyz",
        "trk-adv-0123456789abcdef",
    ),
];

/// Inspected bodies are limited to this many bytes in the suites (small, so cases stay small).
pub const MAX_BYTES: usize = 64 * 1024;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

// ---------------------------------------------------------------------------------------------
// Recording upstreams

/// Every byte one upstream received: `raw` on the TCP connection (TLS records included), `app` after
/// TLS (the same as `raw` for plain servers).
#[derive(Default)]
pub struct Recorder {
    pub raw: Mutex<Vec<u8>>,
    pub app: Mutex<Vec<u8>>,
    pub connections: AtomicUsize,
}

/// What one upstream received so far (a snapshot, to diff per case).
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub raw: usize,
    pub app: usize,
    pub connections: usize,
}

impl Recorder {
    pub fn seen(&self) -> Seen {
        Seen {
            raw: self.raw.lock().unwrap().len(),
            app: self.app.lock().unwrap().len(),
            connections: self.connections.load(Ordering::SeqCst),
        }
    }

    pub fn app_since(&self, from: usize) -> Vec<u8> {
        self.app.lock().unwrap()[from..].to_vec()
    }
}

/// Which log a [`Tap`] writes to.
#[derive(Clone, Copy)]
enum Layer {
    Raw,
    App,
}

/// Wraps a stream and appends every byte read from it to one of the recorder's logs.
struct Tap<T> {
    inner: T,
    recorder: Arc<Recorder>,
    layer: Layer,
}

impl<T> Tap<T> {
    fn new(inner: T, recorder: Arc<Recorder>, layer: Layer) -> Tap<T> {
        Tap {
            inner,
            recorder,
            layer,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tap<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &poll {
            let log = match this.layer {
                Layer::Raw => &this.recorder.raw,
                Layer::App => &this.recorder.app,
            };
            log.lock()
                .unwrap()
                .extend_from_slice(&buf.filled()[before..]);
        }
        poll
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tap<T> {
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

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn reply(status: u16, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(full(body))
        .unwrap()
}

/// How an HTTP upstream answers.
#[derive(Clone, Copy)]
enum Answer {
    /// JSON-RPC results echoing each request's id (an array for a batch); GET is a short event stream.
    Mcp,
    /// `200 web` for everything.
    Web,
    /// `200` with the request as it arrived (request line, headers, body) as text, so a value the
    /// proxy wrote into it comes back; `/gzip` answers the same with `Content-Encoding: gzip`.
    Echo,
}

fn echo(parts: &http::request::Parts, body: &[u8]) -> Response<Body> {
    let mut text = format!("{} {}\n", parts.method, parts.uri).into_bytes();
    for (name, value) in &parts.headers {
        text.extend_from_slice(format!("{name}: ").as_bytes());
        text.extend_from_slice(value.as_bytes());
        text.push(b'\n');
    }
    text.push(b'\n');
    text.extend_from_slice(body);
    let mut response = reply(200, "text/plain", text);
    if parts.uri.path() == "/gzip" {
        response.headers_mut().insert(
            http::header::CONTENT_ENCODING,
            http::HeaderValue::from_static("gzip"),
        );
    }
    response
}

fn answer(kind: Answer, parts: &http::request::Parts, body: &[u8]) -> Response<Body> {
    let method = &parts.method;
    match kind {
        Answer::Echo => echo(parts, body),
        Answer::Web => reply(200, "text/plain", "web"),
        Answer::Mcp if method == http::Method::GET => {
            reply(200, "text/event-stream", "data: {}\n\n")
        }
        Answer::Mcp if method != http::Method::POST => reply(200, "text/plain", "ok"),
        Answer::Mcp => {
            let result = |v: &serde_json::Value| {
                serde_json::json!({"jsonrpc": "2.0", "id": v.get("id").cloned().unwrap_or_default(),
                    "result": {"content": [{"type": "text", "text": "upstream says hi"}]}})
            };
            let out = match serde_json::from_slice::<serde_json::Value>(body) {
                Ok(serde_json::Value::Array(items)) => {
                    serde_json::Value::Array(items.iter().map(result).collect())
                }
                Ok(one) => result(&one),
                Err(_) => serde_json::Value::Null,
            };
            reply(200, "application/json", out.to_string())
        }
    }
}

async fn http_upstream(
    tls: Option<Arc<ServerConfig>>,
    kind: Answer,
) -> (SocketAddr, Arc<Recorder>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let recorder = Arc::new(Recorder::default());
    let rec = recorder.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            rec.connections.fetch_add(1, Ordering::SeqCst);
            let (tls, rec) = (tls.clone(), rec.clone());
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| async move {
                    let (parts, body) = req.into_parts();
                    let body = body
                        .collect()
                        .await
                        .map(|c| c.to_bytes())
                        .unwrap_or_default();
                    Ok::<_, Infallible>(answer(kind, &parts, &body))
                });
                let raw = Tap::new(stream, rec.clone(), Layer::Raw);
                let builder = hyper::server::conn::http1::Builder::new();
                match tls {
                    Some(config) => {
                        let Ok(stream) = tokio_rustls::TlsAcceptor::from(config).accept(raw).await
                        else {
                            return;
                        };
                        let io = Tap::new(stream, rec, Layer::App);
                        let _ = builder.serve_connection(TokioIo::new(io), service).await;
                    }
                    None => {
                        let io = Tap::new(raw, rec, Layer::App);
                        let _ = builder.serve_connection(TokioIo::new(io), service).await;
                    }
                }
            });
        }
    });
    (addr, recorder)
}

/// Echoes every byte (pass-through tunnels) or, as the trap, answers once with status 599 and keeps
/// recording: a dial that reaches the trap is an address no case should reach.
async fn raw_upstream(trap: bool) -> (SocketAddr, Arc<Recorder>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let recorder = Arc::new(Recorder::default());
    let rec = recorder.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            rec.connections.fetch_add(1, Ordering::SeqCst);
            let rec = rec.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                let mut answered = false;
                loop {
                    let n = match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    rec.raw.lock().unwrap().extend_from_slice(&buf[..n]);
                    rec.app.lock().unwrap().extend_from_slice(&buf[..n]);
                    let out: &[u8] = if !trap {
                        &buf[..n]
                    } else if !answered {
                        answered = true;
                        b"HTTP/1.1 599 Trap\r\ncontent-length: 0\r\n\r\n"
                    } else {
                        &[]
                    };
                    if stream.write_all(out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, recorder)
}

/// A CA for the upstreams (the proxy trusts it through `upstream_roots`).
struct UpstreamPki {
    issuer: Issuer<'static, KeyPair>,
    ca_der: CertificateDer<'static>,
}

impl UpstreamPki {
    fn new() -> UpstreamPki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        UpstreamPki {
            ca_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    fn server_config(&self, names: &[&str]) -> Arc<ServerConfig> {
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
// The network seam

/// One test name's answers: the n-th lookup gets `answers[n]` (the last one repeats).
#[derive(Debug, Clone)]
pub enum Answers {
    Seq(Vec<Vec<IpAddr>>),
    Fail,
}

/// Resolves test names and dials routed addresses; every other address goes to the trap.
pub struct WorldNetwork {
    base: HashMap<String, Vec<IpAddr>>,
    overrides: Mutex<HashMap<String, (Answers, usize)>>,
    routes: HashMap<SocketAddr, SocketAddr>,
    trap: SocketAddr,
    pub lookups: Mutex<Vec<String>>,
    pub dialled: Mutex<Vec<SocketAddr>>,
}

impl WorldNetwork {
    /// Sets the answers for `name` until [`WorldNetwork::reset`].
    pub fn set(&self, name: &str, answers: Answers) {
        self.overrides
            .lock()
            .unwrap()
            .insert(name.to_string(), (answers, 0));
    }

    /// Forgets per-case answers and the lookup and dial logs.
    pub fn reset(&self) {
        self.overrides.lock().unwrap().clear();
        self.lookups.lock().unwrap().clear();
        self.dialled.lock().unwrap().clear();
    }
}

impl Network for WorldNetwork {
    fn resolve<'a>(&'a self, host: &'a str, _port: u16) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            self.lookups.lock().unwrap().push(host.to_string());
            let mut overrides = self.overrides.lock().unwrap();
            if let Some((answers, n)) = overrides.get_mut(host) {
                return match answers {
                    Answers::Fail => Err(io::Error::new(io::ErrorKind::NotFound, "test: NXDOMAIN")),
                    Answers::Seq(seq) => {
                        let at = (*n).min(seq.len().saturating_sub(1));
                        *n += 1;
                        Ok(seq.get(at).cloned().unwrap_or_default())
                    }
                };
            }
            self.base
                .get(host)
                .cloned()
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such test name"))
        })
    }

    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        self.dialled.lock().unwrap().push(addr);
        let to = self.routes.get(&addr).copied().unwrap_or(self.trap);
        Box::pin(TcpStream::connect(to))
    }
}

// ---------------------------------------------------------------------------------------------
// The audit sink

/// The real audit writer, plus a count of records acknowledged (to know when a case has settled).
pub struct CountingSink {
    writer: AuditWriter,
    pub count: AtomicUsize,
}

impl AuditSink for CountingSink {
    fn record(&self, entry: AuditEntry) -> BoxFuture<'_, Result<u64, String>> {
        Box::pin(async move {
            let seq = self.writer.record(entry).await.map_err(|e| e.to_string())?;
            self.count.fetch_add(1, Ordering::SeqCst);
            Ok(seq)
        })
    }
    fn flush(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { self.writer.flush().await.map_err(|e| e.to_string()) })
    }
}

// ---------------------------------------------------------------------------------------------
// The world

pub struct World {
    pub proxy_addr: SocketAddr,
    pub proxy: Proxy,
    pub network: Arc<WorldNetwork>,
    pub sink: Arc<CountingSink>,
    pub log: PathBuf,
    /// Whether this world's proxy has [`SECRETS`].
    pub secrets: bool,
    /// Upstreams by the names case files use: `mcp`, `plainmcp`, `web`, `echo`, `trap`, and the
    /// echoing `api`, `body` and `tracker` that only `secrets.cases` reaches.
    pub upstreams: BTreeMap<&'static str, Arc<Recorder>>,
    stop: Option<oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn sa(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

impl World {
    /// The world for case file `file`: [`POLICY`] for every file, plus [`SECRETS_POLICY`] and the
    /// [`SECRETS`] for [`SECRETS_FILE`].
    pub async fn start(file: &str) -> World {
        let with_secrets = file == SECRETS_FILE;
        let pki = UpstreamPki::new();
        let mcp_tls = pki.server_config(&["mcp.test", "93.184.216.50", "mcp-proxy.anthropic.com"]);
        let (mcp_addr, mcp) = http_upstream(Some(mcp_tls), Answer::Mcp).await;
        let secret_tls = pki.server_config(&["api.test", "body.test", "tracker.test"]);
        let (api_addr, api) = http_upstream(Some(secret_tls.clone()), Answer::Echo).await;
        let (body_addr, body) = http_upstream(Some(secret_tls.clone()), Answer::Echo).await;
        let (tracker_addr, tracker) = http_upstream(Some(secret_tls), Answer::Echo).await;
        let (plainmcp_addr, plainmcp) = http_upstream(None, Answer::Mcp).await;
        let (web_addr, web) = http_upstream(None, Answer::Web).await;
        let (echo_addr, echo) = raw_upstream(false).await;
        let (trap_addr, trap) = raw_upstream(true).await;
        // A port nothing listens on: dials to 93.184.216.99 are refused.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };

        let base: HashMap<String, Vec<IpAddr>> = [
            ("mcp.test", "93.184.216.10"),
            ("mcp-proxy.anthropic.com", "93.184.216.11"),
            ("plain-mcp.test", "93.184.216.20"),
            ("web.test", "93.184.216.30"),
            ("api.test", "93.184.216.70"),
            ("body.test", "93.184.216.71"),
            ("tracker.test", "93.184.216.72"),
        ]
        .into_iter()
        .map(|(n, a)| (n.to_string(), vec![ip(a)]))
        .collect();
        let routes: HashMap<SocketAddr, SocketAddr> = [
            ("93.184.216.10:443", mcp_addr),
            ("93.184.216.11:443", mcp_addr),
            ("93.184.216.50:443", mcp_addr),
            ("93.184.216.20:80", plainmcp_addr),
            ("93.184.216.30:80", web_addr),
            ("93.184.216.30:443", echo_addr),
            ("93.184.216.31:80", web_addr),
            ("93.184.216.31:443", echo_addr),
            ("[2606:2800:220:1::31]:80", web_addr),
            ("[2606:2800:220:1::31]:443", echo_addr),
            ("[64:ff9b::5db8:d81f]:443", echo_addr),
            ("10.0.0.5:8080", web_addr),
            ("93.184.216.60:80", web_addr),
            ("93.184.216.99:443", closed),
            ("93.184.216.99:80", closed),
            ("93.184.216.70:443", api_addr),
            ("93.184.216.71:443", body_addr),
            ("93.184.216.72:443", tracker_addr),
        ]
        .into_iter()
        .map(|(from, to)| (sa(from), to))
        .collect();
        let network = Arc::new(WorldNetwork {
            base,
            overrides: Mutex::new(HashMap::new()),
            routes,
            trap: trap_addr,
            lookups: Mutex::new(Vec::new()),
            dialled: Mutex::new(Vec::new()),
        });

        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.jsonl");
        let sink = Arc::new(CountingSink {
            writer: AuditWriter::open(&log, "adversarial").unwrap(),
            count: AtomicUsize::new(0),
        });

        let text = if with_secrets {
            format!("{POLICY}{SECRETS_POLICY}")
        } else {
            POLICY.to_string()
        };
        let config = config::load(None, Some((&text, "adversarial.yaml")))
            .unwrap_or_else(|e| panic!("the adversarial policy is invalid:\n{e}"));
        let limits = JsonLimits {
            max_bytes: MAX_BYTES,
            ..JsonLimits::default()
        };
        let policy = Policy::with_limits(&config, limits);
        let secs = Duration::from_secs;
        let options = ProxyOptions {
            upstream_roots: vec![pki.ca_der.clone()],
            header_read_timeout: secs(2),
            idle_timeout: secs(3),
            resolve_timeout: secs(2),
            connect_timeout: secs(2),
            tls_handshake_timeout: secs(2),
            response_header_timeout: secs(3),
            body_read_timeout: secs(2),
            drain_timeout: secs(2),
            ..ProxyOptions::default()
        };
        let mut set = SecretSet::new();
        if with_secrets {
            for (name, placeholder, value) in SECRETS {
                set.insert_with_placeholder(name, placeholder, value.as_bytes().to_vec())
                    .unwrap();
            }
        }
        let proxy = Proxy::builder(policy, sink.clone())
            .options(options)
            .network(network.clone())
            .secrets(set)
            .build()
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let serving = proxy.clone();
        tokio::spawn(async move {
            let _ = serving
                .serve(listener, async {
                    let _ = stopped.await;
                })
                .await;
        });

        let upstreams = BTreeMap::from([
            ("mcp", mcp),
            ("plainmcp", plainmcp),
            ("web", web),
            ("echo", echo),
            ("trap", trap),
            ("api", api),
            ("body", body),
            ("tracker", tracker),
        ]);
        World {
            proxy_addr,
            proxy,
            network,
            sink,
            log,
            secrets: with_secrets,
            upstreams,
            stop: Some(stop),
            _dir: dir,
        }
    }

    /// The session CA the proxy mints leaves with.
    pub fn proxy_ca(&self) -> CertificateDer<'static> {
        self.proxy.ca().cert_der().clone()
    }

    pub fn records(&self) -> usize {
        self.sink.count.load(Ordering::SeqCst)
    }

    /// Stops accepting and flushes the log (head file written).
    pub async fn finish(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.proxy.flush_audit().await.unwrap();
    }
}
