//! The proxy itself: [`Proxy`] holds one session's context (the compiled policy, the audit sink, the
//! session CA, the secrets and the options; built with [`Proxy::builder`]), and [`Proxy::serve`] is
//! the accept loop: it admits client connections under the connection cap (at most
//! `max_connections` at once, see [`crate::connection::capacity`]) and hands each to [`crate::request::client`]. Shutdown
//! stops accepting, lets in-flight connections finish within `drain_timeout`, and returns; the
//! caller then flushes the audit log.
//!
//! May use: any module.

use crate::attribution::Attributed;
use crate::audit::sink::AuditSink;
use crate::confirm::{Confirmations, ControlSocket};
use crate::connection::capacity::Capacity;
use crate::connection::net::{Network, SystemNetwork};
use crate::connection::shards::Shards;
use crate::error::ProxyError;
use crate::metrics::Metrics;
use crate::options::ProxyOptions;
use crate::request::client::serve_client;
use crate::secrets::{LiveSecrets, SecretSet, SessionSecrets};
use crate::session::context::{ConnGuard, SessionContext};
use crate::session::inventories::{Inventories, LockFiles};
use crate::session::live::LivePolicy;
use crate::session::reload::{self, Reload};
use crate::tls::{SessionCa, upstream};
use crate::transparent;
use fenzi_policy::engine::Policy;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

/// The egress proxy. Cheap to clone.
#[derive(Clone)]
pub struct Proxy {
    session: Arc<SessionContext>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("options", &self.session.options)
            .field("secrets", &self.session.secrets)
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
    lock_files: LockFiles,
    control: Option<ControlSocket>,
    metrics: bool,
    egress_of: Option<Arc<str>>,
}

impl ProxyBuilder {
    /// The control socket on which a person answers the calls `tools.confirm` holds (see
    /// [`crate::confirm`]). Without one, a held call can only time out: it is never forwarded.
    pub fn control_socket(mut self, socket: ControlSocket) -> ProxyBuilder {
        self.control = Some(socket);
        self
    }

    /// Where pinned servers' lock files are (default: none, pins held in memory only).
    /// This proxy is local server `server`'s own egress (DESIGN §18): its records name it.
    pub fn egress_of(mut self, server: &str) -> ProxyBuilder {
        self.egress_of = Some(Arc::from(server));
        self
    }

    pub fn lock_files(mut self, lock_files: LockFiles) -> ProxyBuilder {
        self.lock_files = lock_files;
        self
    }

    /// Keeps the session's metrics (`--metrics`), labelled by the policy's MCP servers; serve them
    /// with [`crate::metrics::serve`] on [`Proxy::metrics`]. Without this call there are none.
    pub fn metrics(mut self) -> ProxyBuilder {
        self.metrics = true;
        self
    }

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
            lock_files,
            control,
            metrics,
            egress_of,
        } = self;
        let secrets = SessionSecrets::new(policy.secrets(), secrets)?;
        let inventories = Inventories::load(&policy, &lock_files)?;
        let ca = SessionCa::new(&policy.inspected_patterns(), options.ca_validity)
            .map_err(|e| ProxyError::TlsSetup(e.to_string()))?;
        let upstream_tls = upstream::client_config(&options.upstream_roots)
            .map_err(|e| ProxyError::TlsSetup(e.to_string()))?;
        let session = control
            .as_ref()
            .map(|c| c.session().to_string())
            .unwrap_or_default();
        let confirm = Arc::new(Confirmations::new(session, control));
        let metrics = metrics.then(|| {
            Arc::new(Metrics::new(
                policy.servers().iter().map(|s| s.name.as_str()),
            ))
        });
        Ok(Proxy {
            session: Arc::new(SessionContext {
                live: LivePolicy::new(policy),
                audit,
                ca,
                upstream_tls,
                options,
                network,
                secrets: LiveSecrets::new(secrets),
                upstreams: Arc::default(),
                synthetic: Arc::default(),
                inventories,
                confirm,
                metrics,
                attribution: std::sync::OnceLock::new(),
                bridges: std::sync::OnceLock::new(),
                egress_of,
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
            lock_files: LockFiles::default(),
            control: None,
            metrics: false,
            egress_of: None,
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

    /// The session's metrics, when [`ProxyBuilder::metrics`] asked for them.
    pub fn metrics(&self) -> Option<&Arc<Metrics>> {
        self.session.metrics.as_ref()
    }

    /// The SHA-256 of the policy in force (`Policy::sha256`), as its records carry it.
    pub fn policy_hash(&self) -> String {
        self.session.live.current().hash.to_string()
    }

    /// Offers `policy`, loaded and validated from the changed `files` (their names, for the
    /// record), to the running session: swapped in whole for the next request when only MCP tool
    /// rules changed, otherwise left for the next session (see [`crate::session::reload`]). Both write a
    /// `policy` record first; `Err` means it could not be written, and nothing changed.
    pub async fn reload(&self, policy: Policy, files: &str) -> Result<Reload, ProxyError> {
        reload::reload(&self.session, policy, files).await
    }

    /// Records that a change to `files` was refused because it did not load (`why`); the policy
    /// in force stays.
    pub async fn refuse_reload(&self, files: &str, why: &str) -> Result<(), ProxyError> {
        reload::refuse(&self.session, files, why).await
    }

    /// Keeps the session's OAuth sign-ins current (`crate::oauth::keeper`): renews each that is
    /// due now before returning, then renews each before it expires for as long as the runtime
    /// runs. Call before serving.
    pub async fn keep_sign_ins(
        &self,
        signins: Vec<crate::oauth::KeptSignIn>,
        client: crate::oauth::http::HttpClient,
        store: Arc<dyn crate::credstore::CredentialStore>,
    ) {
        crate::oauth::keeper::start(self.session.clone(), signins, client, store).await;
    }

    /// The names of the secrets this session substitutes (never values or placeholders).
    pub fn secret_names(&self) -> Vec<String> {
        self.session
            .secrets
            .load()
            .set()
            .names()
            .map(str::to_string)
            .collect()
    }

    /// The session CA certificate (PEM) clients must trust for intercepted hosts.
    pub fn ca_pem(&self) -> &str {
        self.session.ca.cert_pem()
    }

    pub fn ca(&self) -> &SessionCa {
        &self.session.ca
    }

    /// Serves the sandbox's DNS stub on `socket` (see [`crate::transparent::dns`]) until the
    /// returned future is dropped. Names resolve to the synthetic addresses this proxy's
    /// transparent listeners map back.
    pub fn serve_dns(
        &self,
        socket: std::net::UdpSocket,
    ) -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
        socket.set_nonblocking(true)?;
        let socket = tokio::net::UdpSocket::from_std(socket)?;
        Ok(transparent::dns::serve(
            socket,
            self.session.synthetic.clone(),
        ))
    }

    /// Attributes every connection accepted from now on to the programs holding its socket in
    /// the sandbox `attributor` looks into (DESIGN §17); `programs:` rules then apply. Set once:
    /// `false` when an attribution was already set.
    pub fn attribute(&self, attributor: crate::attribution::Attributor) -> bool {
        self.session.attribution.set(Arc::new(attributor)).is_ok()
    }

    /// Serves the policy's local servers through `bridges` (DESIGN §18), once: until then (and for
    /// a server without a bridge) their requests are refused. False when already set.
    pub fn serve_local_servers(&self, bridges: crate::bridge::Bridges) -> bool {
        self.session.bridges.set(bridges).is_ok()
    }

    /// Flushes the audit sink (fsync and head), as at the end of a session.
    pub async fn flush_audit(&self) -> Result<(), ProxyError> {
        self.session.audit.flush().await.map_err(ProxyError::Audit)
    }

    /// Closes every idle upstream connection the session keeps for reuse; the next request to each
    /// destination dials again. Connections in use are left alone.
    pub fn close_idle_upstreams(&self) {
        self.session.upstreams.expire(std::time::Duration::ZERO);
    }

    /// Serves `listener` until `shutdown` resolves, then stops accepting and waits up to
    /// `drain_timeout` for in-flight connections. Returns how many connections were still open when
    /// the drain time ran out (they are cut when the runtime ends).
    ///
    /// At most `max_connections` clients are served at once; when all slots are taken, a new client
    /// takes the slot of the connection idle longest (see [`crate::connection::capacity`]).
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<usize, ProxyError> {
        self.serve_with(listener, Vec::new(), shutdown).await
    }

    /// As [`Proxy::serve`], also accepting on `transparent` listeners: connections from programs
    /// that ignore the proxy variables, admitted by where they were going (see
    /// [`crate::transparent`]). They share the connection cap with the proxy port.
    pub async fn serve_with(
        &self,
        listener: TcpListener,
        transparent: Vec<TcpListener>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<usize, ProxyError> {
        let (accepted_tx, mut accepted_rx) = mpsc::channel::<(TcpStream, SocketAddr)>(64);
        let acceptors: Vec<_> = transparent
            .into_iter()
            .map(|l| tokio::spawn(accept_into(l, accepted_tx.clone())))
            .collect();
        drop(accepted_tx);
        let options = &self.session.options;
        let capacity = Capacity::new(options.max_connections, options.eviction_grace);
        tracing::debug!(max_connections = capacity.max(), "serving");
        let (stop_tx, stop_rx) = watch::channel(false);
        // The control socket is served as long as the proxy is, and closed with it.
        let control = self
            .session
            .confirm
            .socket
            .lock()
            .map(|mut s| s.take())
            .ok()
            .flatten();
        // Should it fail, held calls still time out: nothing held is ever forwarded unanswered.
        let control_task =
            control
                .as_ref()
                .and_then(|socket| match socket.serve(self.session.confirm.clone()) {
                    Ok(serving) => Some(tokio::spawn(serving)),
                    Err(e) => {
                        tracing::error!("cannot serve the control socket: {e}");
                        None
                    }
                });
        let shards = match options.shards {
            0 => None,
            n => Some(Shards::start(n, SHARD_THREAD).map_err(ProxyError::Io)?),
        };
        tokio::pin!(shutdown);
        loop {
            let (stream, peer, transparent) = tokio::select! {
                _ = &mut shutdown => break,
                Some((stream, peer)) = accepted_rx.recv() => (stream, peer, true),
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => (stream, peer, false),
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
            let session = self.session.clone();
            let stop = stop_rx.clone();
            let Some(shards) = &shards else {
                let guard = ConnGuard::new(admitted, stop);
                tokio::spawn(serve_connection(session, stream, peer, guard, transparent));
                continue;
            };
            // The socket moves to the shard's reactor: deregistered here, registered there.
            let stream = match stream.into_std() {
                Ok(stream) => stream,
                Err(e) => {
                    tracing::warn!("cannot hand a connection to a shard: {e}");
                    continue;
                }
            };
            shards.serve(async move {
                match TcpStream::from_std(stream) {
                    Ok(stream) => {
                        let guard = ConnGuard::new(admitted, stop);
                        serve_connection(session, stream, peer, guard, transparent).await;
                    }
                    Err(e) => tracing::warn!("a shard cannot take a connection: {e}"),
                }
            });
        }
        drop(listener);
        for acceptor in acceptors {
            acceptor.abort();
        }
        let _ = stop_tx.send(true);
        let drain = self.session.options.drain_timeout;
        // Held calls are denied now (their connections see `stop`), and are withdrawn from
        // watchers before the socket goes.
        let open = capacity.drain(drain).await;
        if let Some(shards) = shards {
            shards.stop().await;
        }
        if let Some(task) = control_task {
            task.abort();
        }
        drop(control);
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

/// The name of the threads serving connections when sharded (a profile or `top -H` tells them apart).
const SHARD_THREAD: &str = "fenzi-shard";

/// Serves one admitted connection to its end: a proxy client, or a program caught by a transparent
/// listener.
async fn serve_connection(
    session: Arc<SessionContext>,
    stream: TcpStream,
    peer: SocketAddr,
    guard: ConnGuard,
    transparent: bool,
) {
    let guard = match session.attribution.get() {
        Some(attributor) => guard.attributed(attribute(attributor, &stream, peer).await),
        None => guard,
    };
    let stream = guard.track(stream);
    if transparent {
        transparent::serve(session, stream, guard).await
    } else {
        serve_client(session, stream, peer, guard).await
    }
}

/// The programs holding the client's end of `stream`, looked up off the connection's thread
/// (reading `/proc`, and the first time an executable is seen, hashing it).
async fn attribute(
    attributor: &Arc<crate::attribution::Attributor>,
    stream: &TcpStream,
    peer: SocketAddr,
) -> Attributed {
    let local = match stream.local_addr() {
        Ok(local) => local,
        Err(e) => return Attributed::Failed(Arc::from(format!("no local address: {e}"))),
    };
    // On this thread when every holder's executable is hashed already (the usual case: a few
    // reads of `/proc`); else off it, where hashing a new executable may take a while.
    match attributor.attribute_cached(peer, local) {
        Ok(program) => return Attributed::Found(program),
        Err(crate::attribution::AttributionError::NotHashed) => {}
        Err(e) => return Attributed::Failed(Arc::from(e.to_string())),
    }
    let attributor = attributor.clone();
    match tokio::task::spawn_blocking(move || attributor.attribute(peer, local)).await {
        Ok(Ok(program)) => Attributed::Found(program),
        Ok(Err(e)) => Attributed::Failed(Arc::from(e.to_string())),
        Err(e) => Attributed::Failed(Arc::from(format!("the lookup did not finish: {e}"))),
    }
}

/// Accepts on a transparent listener and hands each connection to the accept loop.
async fn accept_into(listener: TcpListener, to: mpsc::Sender<(TcpStream, SocketAddr)>) {
    loop {
        match listener.accept().await {
            Ok(accepted) => {
                if to.send(accepted).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!("transparent accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// Makes a tokio listener from a std one created elsewhere (e.g. inside a network namespace).
pub fn listener_from_std(listener: std::net::TcpListener) -> std::io::Result<TcpListener> {
    listener.set_nonblocking(true)?;
    TcpListener::from_std(listener)
}
