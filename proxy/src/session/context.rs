//! The context every request runs in. [`SessionContext`] is what all connections of one proxy
//! session share: the policy in force ([`crate::session::live`]), the audit sink, the session CA, the upstream TLS trust, the
//! options, the network seam, the session's secrets and the upstream connection pool. [`ConnGuard`]
//! is what one client connection (and every tunnel it spawns) holds: its slot under the connection
//! cap, its activity as the eviction rule sees it, and the shutdown signal.
//!
//! Every audit record is written by [`SessionContext::record`], which first replaces any of the
//! session's placeholders (or values) in the record's text fields by `[placeholder:NAME]`: whatever
//! path, host or tool name a client sends, the log names secrets only. A record that cannot be
//! written is [`AuditUnavailable`], which the refusal funnel ([`crate::request::refusal`]) turns into a 503.
//! A record that does not name the policy it was decided under gets the hash of the one in force.

use crate::attribution::Attributed;
use crate::audit::sink::AuditSink;
use crate::audit::writer::AuditEntry;
use crate::confirm::Confirmations;
use crate::connection::capacity::{Admitted, InFlight};
use crate::connection::net::Network;
use crate::metrics::Metrics;
use crate::metrics::decisions::Cell;
use crate::options::ProxyOptions;
use crate::secrets::{LiveSecrets, SessionSecrets};
use crate::session::inventories::Inventories;
use crate::session::live::LivePolicy;
use crate::session::pool::Pool;
use crate::session::synthetic::SyntheticNames;
use crate::tls::SessionCa;
use http::Request;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// What every connection of one session shares.
pub(crate) struct SessionContext {
    /// The policy in force, with its `limits` counters; swapped whole by a reload.
    pub live: LivePolicy,
    pub audit: Arc<dyn AuditSink>,
    pub ca: SessionCa,
    pub upstream_tls: Arc<rustls::ClientConfig>,
    pub options: ProxyOptions,
    pub network: Arc<dyn Network>,
    /// The session's placeholders and values (empty: no secrets, every request passes unchanged).
    pub secrets: LiveSecrets,
    /// Idle upstream connections, reused across requests and client connections.
    pub upstreams: Arc<Pool>,
    /// The names the sandbox's DNS stub handed out, by synthetic address (the transparent path).
    pub synthetic: Arc<SyntheticNames>,
    /// What the session knows of each MCP server's tools (pins, listed schemas); kept across
    /// reloads.
    pub inventories: Inventories,
    /// The calls held by `tools.confirm`, and the control socket a person answers them on.
    pub confirm: Arc<Confirmations>,
    /// `--metrics`: counted at a few points of the request path; `None` costs one check each.
    pub metrics: Option<Arc<Metrics>>,
    /// `fenzi run`'s attribution of connections to the sandbox's programs (DESIGN §17), set once
    /// the sandbox runs; unset, any program may use anything.
    pub attribution: std::sync::OnceLock<Arc<crate::attribution::Attributor>>,
    /// The bridges of the policy's local servers, by server name (DESIGN §18), set once they are
    /// started; a local server without one is refused, never dialled.
    pub bridges: std::sync::OnceLock<crate::bridge::Bridges>,
    /// Set on a local server's own egress proxy: every record names the server.
    pub egress_of: Option<Arc<str>>,
}

/// `text` with every value and placeholder of `secrets` as `[placeholder:NAME]`.
fn redact_with(secrets: &SessionSecrets, text: &mut String) {
    if let Some(scrubbed) = secrets.scrubber().scrub(text.as_bytes()) {
        *text = String::from_utf8_lossy(&scrubbed).into_owned();
    }
    if let Cow::Owned(safe) = secrets.scanner().redact(text) {
        *text = safe;
    }
}

/// An audit record could not be written: nothing may be forwarded, and the client gets 503.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AuditUnavailable;

impl SessionContext {
    /// Writes one record. The write failure is logged here; the caller answers 503 (through
    /// [`crate::request::refusal::Refusal`]) and forwards nothing. A plain call, not a future: nothing here
    /// waits (see [`AuditSink`]), and a future would be built, moved into every caller's future
    /// and polled for a call that never yields.
    pub fn record(&self, entry: AuditEntry) -> Result<(), AuditUnavailable> {
        let entry = self.prepared(entry);
        let cell = self.cell(&entry);
        let mut took = Duration::ZERO;
        let written = self.clocked(&mut took, || self.audit.record(entry).map(drop));
        self.appended(took);
        self.written(written, cell)
    }

    /// Writes `entries` in order with [`SessionContext::record`], stopping at the first that cannot
    /// be written: what follows it (the rest, and whatever they are about) must not go out either.
    pub fn record_all(
        &self,
        entries: impl IntoIterator<Item = AuditEntry>,
    ) -> Result<(), AuditUnavailable> {
        entries.into_iter().try_for_each(|entry| self.record(entry))
    }

    /// Writes `entries` in order, together with the records of other requests decided in the same
    /// turn of this thread's loop, when `others` says other requests are in flight: all are staged
    /// ([`AuditSink::stage`]) and the task yields once, so that theirs can join the batch before
    /// the first of them writes it, with one write(2) for all. Returns once every entry is in the
    /// log; on `Err` none of the batch is (it is refused whole), and nothing may be forwarded.
    /// Alone, a request writes its records as [`SessionContext::record_all`] does: it would wait
    /// for nobody.
    pub async fn record_all_together(
        &self,
        entries: impl IntoIterator<Item = AuditEntry>,
        others: bool,
    ) -> Result<(), AuditUnavailable> {
        if !others {
            return self.record_all(entries);
        }
        let mut staged = Vec::new();
        for entry in entries {
            let entry = self.prepared(entry);
            let cell = self.cell(&entry);
            let mut took = Duration::ZERO;
            match self.clocked(&mut took, || self.audit.stage(entry)) {
                Ok(record) => staged.push((record, cell, took)),
                // What was staged before it is written when dropped, and refused with it if the
                // writer has stopped; this request forwards nothing either way.
                Err(e) => {
                    self.appended(took);
                    return self.written(Err(e), None);
                }
            }
        }
        tokio::task::yield_now().await;
        for (record, cell, mut took) in staged {
            let written = self.clocked(&mut took, || record.write().map(drop));
            self.appended(took);
            self.written(written, cell)?;
        }
        Ok(())
    }

    /// `entry` as the log gets it: naming the policy in force if it names none, and redacted.
    fn prepared(&self, mut entry: AuditEntry) -> AuditEntry {
        if entry.policy.is_none() {
            // `load`, not `current`: no reference count taken on the shared policy.
            entry.policy = Some(self.live.load_hash());
        }
        if entry.local_server.is_none() {
            entry.local_server = self.egress_of.clone();
        }
        self.redacted(entry)
    }

    /// Runs `step`, a part of one record's append to the audit sink, adding the time it takes to
    /// `took` when `--metrics` is on: a staged record's staging and its write, on either side of
    /// the yield, are one append.
    fn clocked<T>(&self, took: &mut Duration, step: impl FnOnce() -> T) -> T {
        if self.metrics.is_none() {
            return step();
        }
        let started = Instant::now();
        let out = step();
        *took += started.elapsed();
        out
    }

    /// One record's append, which took `took` in all, observed once (`--metrics`).
    fn appended(&self, took: Duration) {
        if let Some(metrics) = &self.metrics {
            metrics.audit_appended(took);
        }
    }

    /// Where `--metrics` counts `entry` once it is written.
    fn cell(&self, entry: &AuditEntry) -> Option<Cell> {
        let metrics = self.metrics.as_ref()?;
        Some(metrics.cell(entry.outcome, entry.reason, entry.server.as_deref()))
    }

    /// Counts a written record (as the log has it: only a record that was written, under its own
    /// labels), or logs why it was not.
    fn written(
        &self,
        written: Result<(), String>,
        cell: Option<Cell>,
    ) -> Result<(), AuditUnavailable> {
        match written {
            Ok(()) => {
                if let (Some(metrics), Some(cell)) = (&self.metrics, cell) {
                    metrics.recorded(cell);
                }
                Ok(())
            }
            Err(e) => {
                tracing::error!("audit record failed, denying: {e}");
                Err(AuditUnavailable)
            }
        }
    }

    /// `text` with every value and placeholder of this session as `[placeholder:NAME]` (values
    /// are turned into their placeholders first). For text that may hold what a peer chose (an
    /// error's words, a failure's detail) on its way to a log line or a client.
    pub fn redact(&self, text: &mut String) {
        if self.secrets.is_empty() {
            return;
        }
        redact_with(&self.secrets.get(), text);
    }

    /// `entry` with every placeholder of this session in its text fields replaced by
    /// `[placeholder:NAME]` (see `Scanner::redact`): text taken from a request may hold one. A
    /// real value is turned into its placeholder first, and so into the same mark; no request
    /// path puts one there, this makes sure none ever reaches the log.
    fn redacted(&self, mut entry: AuditEntry) -> AuditEntry {
        if self.secrets.is_empty() {
            return entry;
        }
        // One set for the whole record.
        let secrets = self.secrets.get();
        let redact = |text: &mut String| redact_with(&secrets, text);
        redact(&mut entry.method);
        redact(&mut entry.host);
        for field in [
            &mut entry.path,
            &mut entry.server,
            &mut entry.rpc,
            &mut entry.tool,
            &mut entry.prompt,
            &mut entry.resource,
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
    /// The program the connection was attributed to, once, when it was accepted.
    program: Attributed,
}

impl ConnGuard {
    pub fn new(conn: Admitted, stop: watch::Receiver<bool>) -> ConnGuard {
        ConnGuard {
            conn: Arc::new(conn),
            stop,
            program: Attributed::Unknown,
        }
    }

    /// The same guard, for a connection attributed to `program`.
    pub fn attributed(mut self, program: Attributed) -> ConnGuard {
        self.program = program;
        self
    }

    /// What the connection was attributed to.
    pub fn program(&self) -> &Attributed {
        &self.program
    }

    /// The peer address of the client connection, as accepted (what its records name as `client`).
    pub fn peer(&self) -> std::net::SocketAddr {
        self.conn.peer()
    }

    /// The client's stream, its activity tracked and cut on eviction.
    pub fn track<T>(&self, inner: T) -> crate::connection::capacity::Tracked<T> {
        self.conn.track(inner)
    }

    /// Resolves once shutdown has begun. Raced against a connection in `select!`, it is polled only
    /// when the stop signal woke the task, not on each of the connection's own wake-ups
    /// ([`crate::connection::woken`]).
    pub fn stopping(&mut self) -> impl std::future::Future<Output = ()> + Send + '_ {
        crate::connection::woken::only_when_woken(async move {
            let _ = self.stop.wait_for(|stop| *stop).await;
        })
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

    /// Whether requests other than the caller's are in flight in the proxy.
    pub fn others_in_flight(&self) -> bool {
        self.conn.requests_in_flight() > 1
    }
}
