//! Serving a session's proxy: the options and runtime `fenzi proxy` and `fenzi run` derive from their
//! shared flags ([`ProxyFlags`]), serving until stopped, and what the exit reports ([`Served`]).

use anyhow::{Context, Result, anyhow};
use fenzi_proxy::audit::writer::{AuditError, AuditWriter};
use fenzi_proxy::tls::upstream::{CertificateDer, parse_pem_certs};
use fenzi_proxy::{Proxy, ProxyOptions};
use std::path::PathBuf;
use std::time::Duration;

/// The name of the async runtime's thread, which runs the accept loop (connections run on the
/// proxy's `fenzi-shard-N` threads).
const MAIN_THREAD: &str = "fenzi-main";

/// How a session's serving ended: what `fenzi proxy` and `fenzi run` report at exit.
pub struct Served {
    /// Connections that did not finish within the drain time and were cut.
    pub cut: usize,
    /// What refused records cost (see [`refused_records`]).
    pub refused: Option<String>,
    /// Whether the log is whole now. Records refused earlier lost nothing (their requests were
    /// denied); an error here is the writer stopped for good (it says what that may have cost) or
    /// a head that still lags its records, and fails the exit.
    pub flushed: Result<(), AuditError>,
}

/// Serves `proxy` on `listener` until `stop`, then flushes the log. Serving runs on a worker task,
/// not the calling thread, so accepted connections start where they were accepted.
pub async fn serve_until(
    proxy: &Proxy,
    listener: tokio::net::TcpListener,
    transparent: Vec<tokio::net::TcpListener>,
    stop: impl Future<Output = ()> + Send + 'static,
    writer: &AuditWriter,
) -> Result<Served> {
    let serving = tokio::spawn({
        let proxy = proxy.clone();
        async move { proxy.serve_with(listener, transparent, stop).await }
    });
    let cut = serving.await.context("the proxy task failed")??;
    Ok(Served {
        cut,
        refused: refused_records(writer),
        flushed: writer.flush().await,
    })
}

/// What the session's refused records cost, for the line printed at exit; `None` when none was
/// refused. A refused record lost nothing: its request was denied.
pub fn refused_records(writer: &AuditWriter) -> Option<String> {
    let refused = writer.refused();
    (refused > 0).then(|| {
        format!(
            "{refused} audit records could not be written, and their requests were refused (503 audit_unavailable)"
        )
    })
}

/// Builds the session's proxy inside `runtime` (where it starts its tasks), as `fenzi proxy` and
/// `fenzi run` both do: `builder` with metrics when `--metrics` asked for them, and the control
/// socket when the policy can hold calls.
pub fn build_proxy(
    runtime: &tokio::runtime::Runtime,
    builder: fenzi_proxy::ProxyBuilder,
    flags: &ProxyFlags,
    control: Option<fenzi_proxy::confirm::ControlSocket>,
) -> Result<Proxy> {
    let _runtime = runtime.enter();
    let builder = match flags.wants_metrics() {
        true => builder.metrics(),
        false => builder,
    };
    match control {
        Some(socket) => builder.control_socket(socket),
        None => builder,
    }
    .build()
    .context("cannot start the proxy")
}

/// Flags that tune the proxy, shared by `fenzi proxy` and `fenzi run`.
#[derive(Debug, Clone, clap::Args)]
pub struct ProxyFlags {
    /// Extra root certificates (PEM) trusted for upstream TLS, beside the public roots. Repeatable.
    #[arg(long, value_name = "PEM")]
    pub(super) upstream_ca: Vec<PathBuf>,
    /// Client connections served at once, tunnels included. When all are taken, the one idle longest
    /// (at least a second) is closed to make room. The default is what this machine's descriptor
    /// limit allows, at most 16384.
    #[arg(long, value_name = "N", default_value_t = ProxyOptions::default().max_connections)]
    max_connections: usize,
    /// Time a client has to send a request head (also the idle keep-alive limit).
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    header_timeout: Option<Duration>,
    /// A tunnel with no traffic either way for this long is closed.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    idle_timeout: Option<Duration>,
    /// Dialling one upstream address.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    connect_timeout: Option<Duration>,
    /// A TLS handshake with the client or the upstream.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    tls_timeout: Option<Duration>,
    /// From a request sent upstream to its response head.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    response_timeout: Option<Duration>,
    /// At shutdown, how long in-flight requests get to finish [default: 10s]; with --otlp, also how
    /// long the export then gets to ship what is left [default: 5s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub(super) drain_timeout: Option<Duration>,
    /// Ship every audit record to this OTLP/HTTP logs endpoint (protobuf), the full path, e.g.
    /// http://127.0.0.1:4318/v1/logs or https://collector.example/v1/logs (trusting the public
    /// roots and --upstream-ca). From the log file, after the request: never slows or fails one.
    /// Progress is kept in <log>.otlp-cursor; `fenzi log --export-status` shows it.
    #[arg(long, value_name = "URL", value_parser = fenzi_proxy::export::Endpoint::parse)]
    pub(super) otlp: Option<fenzi_proxy::export::Endpoint>,
    /// Threads serving connections, each its own connections start to finish (with the upstream
    /// connections they use) [default: half the CPUs, rounded up, for `fenzi proxy` (it shares the
    /// machine with the agents it serves); 1 for `fenzi run`, whose one agent makes few calls at
    /// once]. On a machine that only proxies, one per CPU gets the most out of it.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// Serve Prometheus metrics at http://ADDR/metrics, e.g. 127.0.0.1:9464 (port 0 picks a free
    /// one; the address is printed on stderr): decisions by reason and server, as the audit log
    /// counts them, and latency histograms. Bind a loopback address unless a scraper elsewhere must
    /// reach it: whoever can connect sees the counts. `fenzi run` listens on the host, outside the
    /// sandbox, where the sandboxed command cannot reach it.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
}

impl ProxyFlags {
    /// The async runtime that runs the accept loop, the control socket and the policy watcher. The
    /// connections themselves are served by the proxy's shards ([`ProxyOptions::shards`], set by
    /// [`ProxyFlags::options`]), one thread each, so one worker is all this runtime needs.
    /// Also lifts the soft descriptor limit to the hard one first: each connection holds up to two.
    pub fn runtime(&self) -> Result<tokio::runtime::Runtime> {
        match fenzi_proxy::connection::capacity::raise_fd_limit() {
            Ok(limit) => tracing::debug!("descriptor limit {limit}"),
            Err(e) => tracing::warn!("cannot raise the descriptor limit: {e}"),
        }
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .worker_threads(1)
            // Named so that a profile or `top -H` tells it from the shards and `fenzi-audit-sync`.
            .thread_name(MAIN_THREAD)
            .build()
            .context("cannot start the async runtime")
    }

    /// Whether `--metrics` was given (the proxy must then keep its metrics).
    pub fn wants_metrics(&self) -> bool {
        self.metrics.is_some()
    }

    /// `--metrics`'s listener, bound now: a taken port stops the start, before anything is served.
    pub fn metrics_listener(&self) -> Result<Option<std::net::TcpListener>> {
        let Some(addr) = self.metrics else {
            return Ok(None);
        };
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("cannot listen for --metrics on {addr}"))?;
        listener.set_nonblocking(true)?;
        Ok(Some(listener))
    }

    /// The proxy options these flags ask for, on top of the defaults: `--threads` shards, else
    /// `default_threads` (`None`: [`shared_machine_shards`]).
    pub fn options(&self, default_threads: Option<usize>) -> Result<ProxyOptions> {
        let threads = self.threads.map(usize::from).or(default_threads);
        let mut options = ProxyOptions {
            max_connections: self.max_connections.max(1),
            shards: threads.unwrap_or_else(shared_machine_shards),
            ..ProxyOptions::default()
        };
        let set = |slot: &mut Duration, value: Option<Duration>| {
            if let Some(value) = value {
                *slot = value;
            }
        };
        set(&mut options.header_read_timeout, self.header_timeout);
        set(&mut options.idle_timeout, self.idle_timeout);
        set(&mut options.connect_timeout, self.connect_timeout);
        set(&mut options.tls_handshake_timeout, self.tls_timeout);
        set(&mut options.response_header_timeout, self.response_timeout);
        set(&mut options.drain_timeout, self.drain_timeout);
        options.upstream_roots = upstream_roots(&self.upstream_ca)?;
        Ok(options)
    }
}

/// Serves `proxy`'s metrics on `listener` (from [`ProxyFlags::metrics_listener`]) on a task of the
/// current runtime, for as long as it runs; returns the line that says where.
pub fn serve_metrics(proxy: &Proxy, listener: std::net::TcpListener) -> Result<String> {
    let metrics = proxy
        .metrics()
        .context("the proxy was built without metrics")?
        .clone();
    let addr = listener.local_addr()?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    tokio::spawn(fenzi_proxy::metrics::serve(listener, metrics));
    Ok(format!("metrics on http://{addr}/metrics"))
}

/// The certificates of every `--upstream-ca` file; a file without one is an error naming it.
pub fn upstream_roots(paths: &[PathBuf]) -> Result<Vec<CertificateDer<'static>>> {
    let mut roots = Vec::new();
    for path in paths {
        let pem = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let certs = parse_pem_certs(&pem).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        roots.extend(certs);
    }
    Ok(roots)
}

/// `500ms`, `30s`, `5m`, `1h`, or a bare number of seconds; more than zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 30s, 5m, 500ms)"))?;
    let duration = match unit {
        "" | "s" => Duration::from_secs(n),
        "ms" => Duration::from_millis(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        _ => {
            return Err(format!(
                "unknown unit {unit:?} in {text:?} (use ms, s, m or h)"
            ));
        }
    };
    if duration.is_zero() {
        return Err("a timeout must be more than zero".to_string());
    }
    Ok(duration)
}

/// Shards for a proxy that shares its machine with the programs it serves: half the CPUs the
/// process may use (cgroup quotas count), rounded up. Measured on two cores shared with the load
/// and the upstream (docs/benchmarks.md, issue 18, round three), one shard served an intercepted
/// call with 25 µs of CPU and two with 31: two half-idle threads sleep and are woken (an IPI on a
/// VM) far more often than one busy thread, and the agent's own processes want the other cores.
/// Only a call much heavier than the wake-ups (a 93 KB `tools/list`) gained from the second.
fn shared_machine_shards() -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .div_ceil(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("-1").is_err());
    }
}
