//! `fenzi proxy`: the standalone egress proxy (CI, containers, a sidecar). It loads and validates the
//! policy (exit 2 with every problem when it is not valid), opens the audit log, makes the session CA
//! and writes its certificate to `--ca-dir/ca.pem`, binds `--listen`, prints exactly
//! `listening on HOST:PORT` as its first stdout line, and serves until SIGINT or SIGTERM. Then it stops
//! accepting, lets in-flight requests finish within the drain time, flushes the log and exits 0.

use crate::commands::log::audit_dir;
use crate::config_files::PolicyArgs;
use anyhow::{Context, Result, anyhow};
use fenzi_policy::engine::Policy;
use fenzi_proxy::audit_writer::AuditWriter;
use fenzi_proxy::tls::upstream::parse_pem_certs;
use fenzi_proxy::{Proxy, ProxyOptions};
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  fenzi proxy --config fenzi.yaml --listen 127.0.0.1:0
  fenzi proxy --config fenzi.yaml --listen 127.0.0.1:8080 --ca-dir ./ca --upstream-ca corp-root.pem

Clients use it as HTTP(S)_PROXY and trust DIR/ca.pem for the hosts it intercepts.
Durations take a unit: 500ms, 30s, 5m, 1h (a bare number is seconds).")]
pub struct Args {
    #[command(flatten)]
    policy: PolicyArgs,
    /// Address to listen on, e.g. 127.0.0.1:8080 (port 0 picks a free port).
    #[arg(long, value_name = "ADDR")]
    listen: String,
    /// The audit log [default: $XDG_STATE_HOME/fenzi/audit/<session>.jsonl].
    #[arg(long, value_name = "FILE")]
    audit: Option<PathBuf>,
    /// Directory for the session CA certificate (ca.pem) [default: a new temporary directory].
    #[arg(long, value_name = "DIR")]
    ca_dir: Option<PathBuf>,
    /// Extra root certificates (PEM) trusted for upstream TLS, beside the public roots. Repeatable.
    #[arg(long, value_name = "PEM")]
    upstream_ca: Vec<PathBuf>,
    /// Client connections served at once; more wait in the listen backlog.
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
    /// At shutdown, how long in-flight requests get to finish.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    drain_timeout: Option<Duration>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let loaded = args.policy.load()?.result;
    let config = match loaded {
        Ok(config) => config,
        Err(errors) => {
            eprintln!("{errors}");
            return Ok(ExitCode::from(2));
        }
    };
    let policy = Policy::from_config(&config);
    let options = options(&args)?;

    let session = fenzi_proxy::new_session_id()?;
    let audit_path = match &args.audit {
        Some(path) => path.clone(),
        None => audit_dir(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME"))
            .context(
                "cannot choose an audit log: neither XDG_STATE_HOME nor HOME is set; pass --audit",
            )?
            .join(format!("{session}.jsonl")),
    };
    let writer = AuditWriter::open(&audit_path, &session)
        .with_context(|| format!("cannot open the audit log {}", audit_path.display()))?;
    let ca_dir = match &args.ca_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("fenzi-{session}")),
    };

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(serve(
        &args.listen,
        policy,
        writer,
        options,
        &ca_dir,
        &session,
        &audit_path,
    ));
    // Connections cut after the drain time may leave a resolver thread behind; do not wait on it.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn serve(
    listen: &str,
    policy: Policy,
    writer: AuditWriter,
    options: ProxyOptions,
    ca_dir: &Path,
    session: &str,
    audit_path: &Path,
) -> Result<ExitCode> {
    let proxy = Proxy::new(policy, Arc::new(writer), options).context("cannot start the proxy")?;
    write_ca(ca_dir, proxy.ca_pem())?;
    // Handlers first: a signal right after the listening line must shut down cleanly, not kill.
    let shutdown = shutdown_signal()?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let addr = listener.local_addr()?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {addr}")?;
        out.flush()?;
    }
    eprintln!(
        "fenzi proxy: session {session}, audit log {}, CA certificate {}",
        audit_path.display(),
        ca_dir.join("ca.pem").display()
    );
    let cut = proxy.serve(listener, shutdown).await?;
    proxy
        .flush_audit()
        .await
        .context("cannot flush the audit log")?;
    if cut > 0 {
        eprintln!("fenzi proxy: stopped; {cut} connections did not finish in time and were cut");
    } else {
        eprintln!("fenzi proxy: stopped");
    }
    Ok(ExitCode::SUCCESS)
}

fn options(args: &Args) -> Result<ProxyOptions> {
    let mut options = ProxyOptions {
        max_connections: args.max_connections.max(1),
        ..ProxyOptions::default()
    };
    let set = |slot: &mut Duration, value: Option<Duration>| {
        if let Some(value) = value {
            *slot = value;
        }
    };
    set(&mut options.header_read_timeout, args.header_timeout);
    set(&mut options.idle_timeout, args.idle_timeout);
    set(&mut options.connect_timeout, args.connect_timeout);
    set(&mut options.tls_handshake_timeout, args.tls_timeout);
    set(&mut options.response_header_timeout, args.response_timeout);
    set(&mut options.drain_timeout, args.drain_timeout);
    for path in &args.upstream_ca {
        let pem = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let certs = parse_pem_certs(&pem).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        options.upstream_roots.extend(certs);
    }
    Ok(options)
}

/// Creates `dir` (private to the user when new) and writes the CA certificate, never its key.
fn write_ca(dir: &Path, pem: &str) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join("ca.pem");
    let tmp = dir.join(".ca.pem.tmp");
    std::fs::write(&tmp, pem).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()> + Send> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}

/// `500ms`, `30s`, `5m`, `1h`, or a bare number of seconds; more than zero.
fn parse_duration(text: &str) -> Result<Duration, String> {
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

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

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
