//! `--otlp URL` for `fenzi proxy` and `fenzi run`: starting the audit export of the session's log
//! (`fenzi_proxy::export`, on its own thread) and, at exit, its drain within `--drain-timeout`
//! (after the requests' own drain and the log's last flush), with the line saying how far it got.
//! The export never decides the exit code: every record is in the local log whatever the receiver
//! did, and the cursor says where the next run with this log resumes.

use super::ProxyFlags;
use super::serving::upstream_roots;
use anyhow::Result;
use fenzi_proxy::export::{ExportConfig, Exporter, Note};
use std::path::Path;
use std::time::Duration;

/// How long the export gets at exit when `--drain-timeout` is not given.
pub const EXPORT_DRAIN: Duration = Duration::from_secs(5);

/// Starts exporting `log` when `--otlp` asks; `note` takes what the export has to say (failures
/// starting and ending, a permanent refusal, rejected records).
pub fn start_export(flags: &ProxyFlags, log: &Path, note: fn(&str)) -> Result<Option<Exporter>> {
    let Some(endpoint) = flags.otlp.clone() else {
        return Ok(None);
    };
    let note: Note = std::sync::Arc::new(note);
    let config = ExportConfig {
        extra_roots: upstream_roots(&flags.upstream_ca)?,
        ..ExportConfig::new(endpoint, log.to_path_buf(), note)
    };
    Ok(Some(Exporter::start(config)?))
}

/// With both `--otlp` and `--metrics`, `fenzi_export_lag_records` reads the export's progress.
pub fn report_export_lag(proxy: &fenzi_proxy::Proxy, exporter: Option<&Exporter>) {
    if let (Some(metrics), Some(exporter)) = (proxy.metrics(), exporter) {
        let progress = exporter.progress();
        metrics.set_export_lag_source(std::sync::Arc::new(move || progress.lag()));
    }
}

/// Drains the export, if there is one, and returns the line saying how far it got.
pub async fn finish_export(exporter: Option<Exporter>, flags: &ProxyFlags) -> Option<String> {
    let exporter = exporter?;
    let report = exporter
        .drain(flags.drain_timeout.unwrap_or(EXPORT_DRAIN))
        .await;
    Some(report.to_string())
}

impl ProxyFlags {
    /// The status line about the export, for the session's start.
    pub fn otlp_note(&self, log: &Path) -> Option<String> {
        self.otlp.as_ref().map(|endpoint| {
            format!(
                "audit export to {endpoint} (OTLP/HTTP), progress in {}",
                fenzi_proxy::export::cursor_path(log).display()
            )
        })
    }
}
