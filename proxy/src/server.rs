//! The proxy itself: [`Proxy`] holds the compiled policy, the audit sink, the session CA, the
//! session's secrets and the options (built with [`Proxy::builder`]); [`Proxy::serve`] accepts client connections (at most `max_connections` at once), serves
//! HTTP/1.1 on each (keep-alive; pipelined requests one at a time) and sends every request to its phase:
//! CONNECT to [`crate::connect`], absolute-form `http://` to [`crate::forward`], anything else (a
//! request for the proxy itself) is `bad_request`; a request hyper refuses as malformed is recorded
//! through [`malformed`]. Shutdown stops accepting, lets in-flight connections
//! finish within `drain_timeout`, and returns; the caller then flushes the audit log.
//!
//! Every audit record goes through [`Shared::record`], which replaces any of the session's
//! placeholders in its text fields by `[placeholder:NAME]` first: whatever path, host or tool name a
//! client sends, the log names secrets only.

use crate::audit_sink::{AuditSink, INVALID_TARGET, Subject, logged_authority};
use crate::audit_writer::AuditEntry;
use crate::capacity::{Admitted, Capacity, InFlight, Tracked};
use crate::connect::connect;
use crate::error::{ErrorSource, ProxyError};
use crate::forward::{bad_request, default_port, plain_http};
use crate::net::{Network, SystemNetwork};
use crate::options::ProxyOptions;
use crate::respond::Body;
use crate::secrets::{SecretSet, SessionSecrets};
use crate::tls::{SessionCa, upstream};
use crate::upstream::Pool as UpstreamPool;
use fenzi_policy::engine::Policy;
use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::borrow::Cow;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub(crate) mod h2_streams;
pub(crate) mod malformed;

use malformed::{HeadProbe, Probed, RequestLine, Target};

/// What every connection shares.
pub(crate) struct Shared {
    pub policy: Policy,
    pub audit: Arc<dyn AuditSink>,
    pub ca: SessionCa,
    pub upstream_tls: Arc<rustls::ClientConfig>,
    pub options: ProxyOptions,
    pub network: Arc<dyn Network>,
    /// The session's placeholders and values (empty: no secrets, every request passes unchanged).
    pub secrets: SessionSecrets,
    /// Idle upstream connections, reused across requests and client connections.
    pub upstreams: Arc<UpstreamPool>,
}

impl Shared {
    /// Records one decision. `false` when it could not be written: the caller answers 503 and forwards
    /// nothing.
    pub async fn record(&self, entry: AuditEntry) -> bool {
        let entry = self.redacted(entry);
        match self.audit.record(entry).await {
            Ok(_) => true,
            Err(e) => {
                tracing::error!("audit record failed, denying: {e}");
                false
            }
        }
    }

    /// Logs one request's failure and records it (`failed`, naming the error's reason and source,
    /// never its text). `false` when the record could not be written, as for [`Shared::record`].
    pub async fn record_failure(&self, subject: &Subject, error: &ProxyError) -> bool {
        let (host, port, source) = (&subject.host, subject.port, error.source_kind());
        // The client's own failures (a TLS handshake it gave up) are routine; the rest are not.
        if source == ErrorSource::Client {
            tracing::info!(%host, port, "{} failed: {error}", source.label());
        } else {
            tracing::warn!(%host, port, "{} failed: {error}", source.label());
        }
        self.record(subject.failed(error)).await
    }

    /// `entry` with every placeholder of this session in its text fields replaced by
    /// `[placeholder:NAME]` (see `Scanner::redact`): text taken from a request may hold one. A
    /// real value is turned into its placeholder first, and so into the same mark; no request
    /// path puts one there, this makes sure none ever reaches the log.
    fn redacted(&self, mut entry: AuditEntry) -> AuditEntry {
        if self.secrets.is_empty() {
            return entry;
        }
        let (scanner, scrubber) = (self.secrets.scanner(), self.secrets.scrubber());
        let redact = |text: &mut String| {
            if let Some(scrubbed) = scrubber.scrub(text.as_bytes()) {
                *text = String::from_utf8_lossy(&scrubbed).into_owned();
            }
            if let Cow::Owned(safe) = scanner.redact(text) {
                *text = safe;
            }
        };
        redact(&mut entry.method);
        redact(&mut entry.host);
        for field in [
            &mut entry.path,
            &mut entry.server,
            &mut entry.rpc,
            &mut entry.tool,
            &mut entry.rpc_id,
            &mut entry.rule,
            &mut entry.source,
        ]
        .into_iter()
        .flatten()
        {
            redact(field);
        }
        entry
    }
}

/// Held by a client connection and everything it spawns (tunnels): its slot under the connection cap
/// (freed when the last clone is dropped), its activity as the eviction rule sees it, and the signal
/// that the proxy is shutting down.
#[derive(Clone)]
pub(crate) struct ConnGuard {
    conn: Arc<Admitted>,
    stop: watch::Receiver<bool>,
}

impl ConnGuard {
    /// Resolves once shutdown has begun.
    pub async fn stopping(&mut self) {
        let _ = self.stop.wait_for(|stop| *stop).await;
    }

    /// A request head on this connection is complete and handed to the service: the connection is
    /// busy, so never evicted, until the returned value is answered (response head) or dropped.
    pub fn request<B>(&self, req: &Request<B>) -> InFlight {
        self.conn.request(req)
    }

    /// The connection (an intercepted tunnel serving HTTP/1.1) now waits for request heads: their
    /// bytes are not activity, so a client dribbling a head is evictable like one on the proxy port.
    pub fn reading_heads(&self) {
        self.conn.reading_heads();
    }
}

/// The egress proxy. Cheap to clone.
#[derive(Clone)]
pub struct Proxy {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("options", &self.shared.options)
            .field("secrets", &self.shared.secrets)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Proxy`]: the policy and the audit sink are required; options, the network seam and
/// the session's secrets have defaults (default options, the system resolver and sockets, no
/// secrets).
pub struct ProxyBuilder {
    policy: Policy,
    audit: Arc<dyn AuditSink>,
    options: ProxyOptions,
    network: Arc<dyn Network>,
    secrets: SecretSet,
}

impl ProxyBuilder {
    pub fn options(mut self, options: ProxyOptions) -> ProxyBuilder {
        self.options = options;
        self
    }

    /// Resolve and dial through `network` (tests route names to loopback servers).
    pub fn network(mut self, network: Arc<dyn Network>) -> ProxyBuilder {
        self.network = network;
        self
    }

    /// The session's secrets: each value and its minted placeholder. Every name must be one the
    /// policy binds (`policy.secrets()`); a secret the policy lists without a value here simply
    /// has no placeholder, and nothing is substituted for it.
    pub fn secrets(mut self, secrets: SecretSet) -> ProxyBuilder {
        self.secrets = secrets;
        self
    }

    /// A fresh session CA constrained to the policy's inspected hosts, the upstream TLS trust, and
    /// the compiled secrets.
    pub fn build(self) -> Result<Proxy, ProxyError> {
        let ProxyBuilder {
            policy,
            audit,
            options,
            network,
            secrets,
        } = self;
        let secrets = SessionSecrets::new(policy.secrets(), secrets)?;
        let ca = SessionCa::new(&policy.inspected_patterns(), options.ca_validity)
            .map_err(|e| ProxyError::TlsSetup(e.to_string()))?;
        let upstream_tls = upstream::client_config(&options.upstream_roots)
            .map_err(|e| ProxyError::TlsSetup(e.to_string()))?;
        Ok(Proxy {
            shared: Arc::new(Shared {
                policy,
                audit,
                ca,
                upstream_tls,
                options,
                network,
                secrets,
                upstreams: Arc::default(),
            }),
        })
    }
}

impl Proxy {
    /// Starts building a proxy for `policy`, recording to `audit`.
    pub fn builder(policy: Policy, audit: Arc<dyn AuditSink>) -> ProxyBuilder {
        ProxyBuilder {
            policy,
            audit,
            options: ProxyOptions::default(),
            network: Arc::new(SystemNetwork),
            secrets: SecretSet::new(),
        }
    }

    /// A proxy for `policy`, recording to `audit`, with a fresh session CA constrained to the policy's
    /// inspected hosts, and no secrets.
    pub fn new(
        policy: Policy,
        audit: Arc<dyn AuditSink>,
        options: ProxyOptions,
    ) -> Result<Proxy, ProxyError> {
        Proxy::builder(policy, audit).options(options).build()
    }

    /// As [`Proxy::new`], with the session's secrets (see [`ProxyBuilder::secrets`]).
    pub fn with_secrets(
        policy: Policy,
        audit: Arc<dyn AuditSink>,
        options: ProxyOptions,
        secrets: SecretSet,
    ) -> Result<Proxy, ProxyError> {
        Proxy::builder(policy, audit)
            .options(options)
            .secrets(secrets)
            .build()
    }

    /// As [`Proxy::new`], resolving and dialling through `network`.
    pub fn with_network(
        policy: Policy,
        audit: Arc<dyn AuditSink>,
        options: ProxyOptions,
        network: Arc<dyn Network>,
    ) -> Result<Proxy, ProxyError> {
        Proxy::builder(policy, audit)
            .options(options)
            .network(network)
            .build()
    }

    /// The names of the secrets this session substitutes (never values or placeholders).
    pub fn secret_names(&self) -> Vec<String> {
        self.shared
            .secrets
            .set()
            .names()
            .map(str::to_string)
            .collect()
    }

    /// The session CA certificate (PEM) clients must trust for intercepted hosts.
    pub fn ca_pem(&self) -> &str {
        self.shared.ca.cert_pem()
    }

    pub fn ca(&self) -> &SessionCa {
        &self.shared.ca
    }

    /// Flushes the audit sink (fsync and head), as at the end of a session.
    pub async fn flush_audit(&self) -> Result<(), ProxyError> {
        self.shared.audit.flush().await.map_err(ProxyError::Audit)
    }

    /// Closes every idle upstream connection the session keeps for reuse; the next request to each
    /// destination dials again. Connections in use are left alone.
    pub fn close_idle_upstreams(&self) {
        self.shared.upstreams.expire(std::time::Duration::ZERO);
    }

    /// Serves `listener` until `shutdown` resolves, then stops accepting and waits up to
    /// `drain_timeout` for in-flight connections. Returns how many connections were still open when
    /// the drain time ran out (they are cut when the runtime ends).
    ///
    /// At most `max_connections` clients are served at once; when all slots are taken, a new client
    /// takes the slot of the connection idle longest (see [`crate::capacity`]).
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<usize, ProxyError> {
        let options = &self.shared.options;
        let capacity = Capacity::new(options.max_connections, options.eviction_grace);
        tracing::debug!(max_connections = capacity.max(), "serving");
        let (stop_tx, stop_rx) = watch::channel(false);
        tokio::pin!(shutdown);
        loop {
            let (stream, peer) = tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors: as good as at capacity, so an idle connection gives
                        // way. Either way, back off instead of spinning.
                        if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                            capacity.out_of_descriptors();
                        }
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let admitted = tokio::select! {
                _ = &mut shutdown => break,
                admitted = capacity.admit(peer) => admitted,
            };
            let stream = admitted.track(stream);
            let guard = ConnGuard {
                conn: Arc::new(admitted),
                stop: stop_rx.clone(),
            };
            tokio::spawn(serve_client(self.shared.clone(), stream, peer, guard));
        }
        drop(listener);
        let _ = stop_tx.send(true);
        let drain = self.shared.options.drain_timeout;
        let open = capacity.drain(drain).await;
        if open > 0 {
            tracing::warn!("{open} connections still open after {drain:?}; cutting them");
        }
        let evicted = capacity.evictions();
        if evicted > 0 {
            tracing::warn!(
                "at capacity, in all: {evicted} idle connections were closed to admit new clients \
                 (max_connections {})",
                capacity.max()
            );
        }
        Ok(open)
    }
}

/// Makes a tokio listener from a std one created elsewhere (e.g. inside a network namespace).
pub fn listener_from_std(listener: std::net::TcpListener) -> std::io::Result<TcpListener> {
    listener.set_nonblocking(true)?;
    TcpListener::from_std(listener)
}

async fn serve_client(
    shared: Arc<Shared>,
    stream: Tracked<TcpStream>,
    peer: SocketAddr,
    guard: ConnGuard,
) {
    let _ = stream.set_nodelay(true);
    let mut stopping = guard.clone();
    let probe = HeadProbe::new();
    let service = {
        let shared = shared.clone();
        let probe = probe.clone();
        service_fn(move |req| {
            probe.dispatched();
            let shared = shared.clone();
            let guard = guard.clone();
            let in_flight = guard.request(&req);
            async move { Ok::<_, Infallible>(in_flight.answered(route(shared, guard, req).await)) }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(shared.options.header_read_timeout)
        .keep_alive(true);
    let conn = builder
        .serve_connection(TokioIo::new(Probed::new(stream, probe.clone())), service)
        .with_upgrades();
    tokio::pin!(conn);
    let result = tokio::select! {
        result = conn.as_mut() => result,
        _ = stopping.stopping() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, "client connection ended: {e}");
        if e.is_parse() {
            let subject = refused_subject(probe.refused());
            let detail = format!("the request is not valid HTTP/1.1: {e}");
            malformed::record_refused(&shared, &subject, &detail).await;
        }
    }
}

/// The audit subject of a request on the proxy port that hyper refused: what its request line names,
/// as far as it may be logged (see [`logged_authority`]), else `-`.
fn refused_subject(line: RequestLine) -> Subject {
    let (host, port) = match &line.target {
        Target::Absolute {
            scheme, authority, ..
        } => logged_authority(authority, default_port(Some(scheme))),
        Target::Authority(authority) => logged_authority(authority, 443),
        Target::Invalid => (INVALID_TARGET.to_string(), 0),
        Target::Path(_) | Target::Unknown => ("-".to_string(), 0),
    };
    Subject {
        path: line.target.path().map(str::to_string),
        method: line.method.unwrap_or_else(|| "-".to_string()),
        host,
        port,
        server: None,
    }
}

/// Sends a request to its phase by its form.
async fn route(shared: Arc<Shared>, guard: ConnGuard, req: Request<Incoming>) -> Response<Body> {
    if req.method() == Method::CONNECT {
        return connect(shared, guard, req).await;
    }
    if req.uri().scheme().is_some() {
        return plain_http(shared, &guard, req).await;
    }
    let subject = Subject {
        method: req.method().as_str().to_string(),
        host: "-".to_string(),
        port: 0,
        path: Some(req.uri().path().to_string()),
        server: None,
    };
    let why = "this is a proxy: send absolute-form http:// requests or CONNECT";
    bad_request(&shared, &subject, why).await
}
