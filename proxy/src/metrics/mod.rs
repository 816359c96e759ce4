//! Prometheus metrics for one session (`--metrics ADDR`): what was decided and how long each phase
//! took, served as Prometheus text at `http://ADDR/metrics` by [`serve`] on a listener of its own.
//!
//! The metrics, all under `fenzi_`:
//!
//! | metric | type | counted where |
//! |---|---|---|
//! | `decisions_total{decision,reason,server}` | counter | each record the audit sink wrote (`SessionContext::record`), with the record's own labels, so the counts equal the log's |
//! | `decide_seconds` | histogram | a buffered request's decisions (`request/decide.rs`): secrets, classifier, substitution, limits; not the wait for a person |
//! | `upstream_seconds` | histogram | a request sent upstream until its response head (`Upstream::send`), failures and cancellations included |
//! | `audit_append_seconds` | histogram | each record's append to the audit sink (`SessionContext::record`; a staged record's staging and write, observed once) |
//! | `upstream_errors_total{kind}` | counter | dials, requests, resolutions and response bodies that failed on the upstream's side |
//! | `export_lag_records` | gauge | read at scrape time from the source the audit export registers ([`Metrics::set_export_lag_source`]); absent without one |
//!
//! Nothing here may slow a request or fail one. Every update is a few relaxed atomic additions into
//! tables made whole at the start ([`decisions`], [`timing`]): no lock, no allocation, no map a client
//! can grow. A session without `--metrics` has no [`Metrics`] at all, and each point pays one
//! `Option` check. Scrapes only read those atomics; the listener runs its own tasks, so a slow or
//! failing scrape touches no request.
//!
//! May use: `error`.

pub mod decisions;
mod serve;
pub mod timing;

pub use serve::serve;

use crate::error::ProxyError;
use decisions::{Cell, Decisions, UpstreamErrors};
use fenzi_policy::Reason;
use fenzi_policy::audit::Outcome;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::registry::Registry;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use timing::{LOCAL_BOUNDS, Timer, Timing, UPSTREAM_BOUNDS};

/// Where the export lag comes from: how many records are in the log but not yet shipped.
pub type LagSource = Arc<dyn Fn() -> u64 + Send + Sync>;

/// One session's metrics. Made by [`crate::ProxyBuilder::metrics`] from the policy (its servers are
/// the `server` labels); [`crate::Proxy::metrics`] hands it out for the listener and the export.
pub struct Metrics {
    decisions: Decisions,
    upstream_errors: UpstreamErrors,
    decide: Timing,
    upstream: Timing,
    audit_append: Timing,
    /// Only read by a scrape, never on the request path.
    export_lag: Mutex<Option<LagSource>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Metrics whose `server` labels are `servers` (the policy's MCP servers).
    pub fn new<'a>(servers: impl IntoIterator<Item = &'a str>) -> Metrics {
        Metrics {
            decisions: Decisions::new(servers),
            upstream_errors: UpstreamErrors::default(),
            decide: Timing::new(LOCAL_BOUNDS),
            upstream: Timing::new(UPSTREAM_BOUNDS),
            audit_append: Timing::new(LOCAL_BOUNDS),
            export_lag: Mutex::new(None),
        }
    }

    /// Makes `fenzi_export_lag_records` read `source` at every scrape (the audit export calls this
    /// once it starts). Until then the gauge is not printed.
    pub fn set_export_lag_source(&self, source: LagSource) {
        *self.export_lag.lock().unwrap_or_else(|e| e.into_inner()) = Some(source);
    }

    /// Where a record with these labels is counted (see [`Metrics::recorded`]).
    pub(crate) fn cell(
        &self,
        outcome: Outcome,
        reason: Option<Reason>,
        server: Option<&str>,
    ) -> Cell {
        self.decisions.cell(outcome, reason, server)
    }

    /// One record written to the audit log, its labels found by [`Metrics::cell`].
    pub(crate) fn recorded(&self, cell: Cell) {
        self.decisions.add(cell);
    }

    /// One record's append to the audit sink, which took `took` (a staged record's staging and its
    /// write together).
    pub(crate) fn audit_appended(&self, took: Duration) {
        self.audit_append.observe(took);
    }

    /// Times one request's decisions.
    pub(crate) fn decide(&self) -> Timer<'_> {
        self.decide.start()
    }

    /// Times one request upstream, to its response head.
    pub(crate) fn upstream(&self) -> Timer<'_> {
        self.upstream.start()
    }

    /// One error; counted only when it is the upstream's.
    pub(crate) fn upstream_error(&self, error: &ProxyError) {
        self.upstream_errors.count(error);
    }

    /// Everything, as Prometheus text (exposition format 0.0.4).
    pub fn encode(self: &Arc<Self>) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self.clone()));
        let mut text = String::new();
        // Writing into a String cannot fail, and our encoders return no error of their own.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &registry);
        text
    }
}

impl Collector for Metrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let metrics: [(&str, &str, &dyn EncodeMetric); 5] = [
            (
                "fenzi_decisions",
                "Audit records written, by decision, reason and MCP server (equal to the log's counts)",
                &self.decisions,
            ),
            (
                "fenzi_decide_seconds",
                "Time a buffered request's decisions took (secrets, MCP classifier, substitution, limits)",
                &self.decide,
            ),
            (
                "fenzi_upstream_seconds",
                "Time from a request sent upstream to its response head",
                &self.upstream,
            ),
            (
                "fenzi_audit_append_seconds",
                "Time one audit record took to append",
                &self.audit_append,
            ),
            (
                "fenzi_upstream_errors",
                "Upstream failures, by kind",
                &self.upstream_errors,
            ),
        ];
        for (name, help, metric) in metrics {
            let described = encoder.encode_descriptor(name, help, None, metric.metric_type())?;
            metric.encode(described)?;
        }
        let lag = self
            .export_lag
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(lag) = lag {
            let gauge = prometheus_client::metrics::gauge::ConstGauge::new(lag() as i64);
            let described = encoder.encode_descriptor(
                "fenzi_export_lag_records",
                "Audit records written but not yet exported",
                None,
                gauge.metric_type(),
            )?;
            gauge.encode(described)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_names_each_metric_with_its_labels() {
        let metrics = Arc::new(Metrics::new(["deepwiki"]));
        let denied = metrics.cell(
            Outcome::Denied,
            Some(Reason::PolicyDenied),
            Some("deepwiki"),
        );
        metrics.recorded(denied);
        metrics.recorded(denied);
        metrics.recorded(metrics.cell(Outcome::Allowed, None, None));
        drop(metrics.decide());
        let text = metrics.encode();
        for line in [
            "# TYPE fenzi_decisions_total counter",
            "fenzi_decisions_total{decision=\"denied\",reason=\"policy_denied\",server=\"deepwiki\"} 2",
            "fenzi_decisions_total{decision=\"allowed\",reason=\"\",server=\"\"} 1",
            "# TYPE fenzi_decide_seconds histogram",
            "fenzi_decide_seconds_count 1",
            "fenzi_decide_seconds_bucket{le=\"+Inf\"} 1",
            "fenzi_upstream_seconds_count 0",
            "fenzi_audit_append_seconds_count 0",
            "fenzi_upstream_errors_total{kind=\"connect\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert!(!text.contains("fenzi_export_lag_records"), "{text}");
    }

    #[test]
    fn the_export_lag_is_read_at_each_scrape() {
        let metrics = Arc::new(Metrics::new([]));
        let lag = Arc::new(std::sync::atomic::AtomicU64::new(7));
        let source = lag.clone();
        metrics.set_export_lag_source(Arc::new(move || {
            source.load(std::sync::atomic::Ordering::Relaxed)
        }));
        assert!(metrics.encode().contains("\nfenzi_export_lag_records 7\n"));
        lag.store(0, std::sync::atomic::Ordering::Relaxed);
        assert!(metrics.encode().contains("\nfenzi_export_lag_records 0\n"));
    }
}
