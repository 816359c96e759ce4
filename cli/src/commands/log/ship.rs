//! `fenzi log --otlp URL`: ships what a finished log's cursor lacks to an OTLP/HTTP receiver, then
//! exits, for a session's log that its own `--otlp` export left behind (the receiver was down when
//! that session ended, or the session ran without `--otlp`). It is the same exporter
//! (`fenzi_proxy::export`) with the same cursor, started in its drain: it ships until caught up or
//! `--drain-timeout` (30 s by default) has passed. A log a running fenzi still writes is refused
//! (its lock is held): that fenzi's own `--otlp` ships it.

use anyhow::{Context, Result, bail};
use fenzi_proxy::export::{Endpoint, ExportConfig, Exporter};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// How long `fenzi log --otlp` ships by default.
const SHIP_TIMEOUT: Duration = Duration::from_secs(30);

/// The flags of `fenzi log --otlp`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ShipArgs {
    /// Ship what this log's cursor lacks to an OTLP/HTTP logs endpoint (e.g.
    /// http://127.0.0.1:4318/v1/logs), then exit: 0 when caught up, 1 when not.
    #[arg(long, value_name = "URL", value_parser = Endpoint::parse,
          conflicts_with_all = ["denied", "server", "tool", "since", "follow", "verify", "json", "export_status"])]
    pub otlp: Option<Endpoint>,
    /// With --otlp: extra root certificates (PEM) trusted for an https endpoint. Repeatable.
    #[arg(long, value_name = "PEM", requires = "otlp")]
    pub upstream_ca: Vec<PathBuf>,
    /// With --otlp: how long to keep trying [default: 30s].
    #[arg(long, value_name = "DUR", requires = "otlp",
          value_parser = crate::session::parse_duration)]
    pub drain_timeout: Option<Duration>,
}

pub fn run(log: &Path, endpoint: Endpoint, args: &ShipArgs) -> Result<ExitCode> {
    let file =
        std::fs::File::open(log).with_context(|| format!("cannot read {}", log.display()))?;
    // Shared: other readers are fine; a writer (a running fenzi) holds it exclusively.
    if let Err(e) = rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared) {
        if e == rustix::io::Errno::WOULDBLOCK {
            bail!(
                "{} is still being written by a running fenzi; its own --otlp ships it",
                log.display()
            );
        }
        return Err(std::io::Error::from(e)).context(format!("cannot lock {}", log.display()));
    }
    let note = std::sync::Arc::new(|line: &str| eprintln!("fenzi log: {line}"));
    let config = ExportConfig {
        extra_roots: crate::session::upstream_roots(&args.upstream_ca)?,
        ..ExportConfig::new(endpoint, log.to_path_buf(), note)
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let report = runtime.block_on(async {
        let exporter = Exporter::start(config)?;
        anyhow::Ok(
            exporter
                .drain(args.drain_timeout.unwrap_or(SHIP_TIMEOUT))
                .await,
        )
    })?;
    drop(file);
    println!("{report}");
    Ok(if report.caught_up() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
