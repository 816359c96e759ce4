//! The counters: `fenzi_decisions_total{decision,reason,server}` and
//! `fenzi_upstream_errors_total{kind}`, each a fixed table of atomics.
//!
//! Every label is from a closed set known when the session starts: the decisions
//! ([`Outcome`]), the reasons ([`Reason`], or none) and the policy's MCP servers (or none). So the
//! table is made whole at the start, an increment is one index computation and one relaxed atomic
//! addition (no lock, no allocation, no map that a client could grow), and a scrape prints the cells
//! that are not zero. A server name the policy does not have (none reaches a record today: every
//! record's `server` is a policy server's name) is counted under `server="_other"`, so the table
//! stays bounded whatever happens.

use crate::error::{ErrorSource, ProxyError};
use fenzi_policy::Reason;
use fenzi_policy::audit::Outcome;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::exemplar::Exemplar;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const OUTCOMES: [Outcome; 7] = [
    Outcome::Allowed,
    Outcome::Denied,
    Outcome::Failed,
    Outcome::Filtered,
    Outcome::Held,
    Outcome::Reloaded,
    Outcome::ReloadRefused,
];

fn outcome_index(outcome: Outcome) -> usize {
    // Exhaustive on purpose: a new outcome must be given a place in the table.
    match outcome {
        Outcome::Allowed => 0,
        Outcome::Denied => 1,
        Outcome::Failed => 2,
        Outcome::Filtered => 3,
        Outcome::Held => 4,
        Outcome::Reloaded => 5,
        Outcome::ReloadRefused => 6,
    }
}

/// Reason slots: one per [`Reason::ALL`], then the last for a record without a reason.
const REASONS: usize = Reason::ALL.len() + 1;

fn reason_index(reason: Option<Reason>) -> usize {
    reason
        .and_then(|r| Reason::ALL.iter().position(|known| *known == r))
        .unwrap_or(Reason::ALL.len())
}

fn reason_label(index: usize) -> &'static str {
    Reason::ALL.get(index).map_or("", |r| r.code())
}

/// The label a server name not in the policy is counted under.
pub const OTHER_SERVER: &str = "_other";

/// `fenzi_decisions_total`: records written, by decision, reason and server.
#[derive(Debug)]
pub struct Decisions {
    /// Server labels by slot: `""` (no server), the policy's servers, [`OTHER_SERVER`].
    servers: Vec<Box<str>>,
    slots: HashMap<Box<str>, usize>,
    cells: Vec<AtomicU64>,
}

impl Decisions {
    pub fn new<'a>(servers: impl IntoIterator<Item = &'a str>) -> Decisions {
        let mut labels: Vec<Box<str>> = vec!["".into()];
        for name in servers {
            if name != OTHER_SERVER && !labels.iter().any(|known| &**known == name) {
                labels.push(name.into());
            }
        }
        labels.push(OTHER_SERVER.into());
        let slots = labels[1..labels.len() - 1]
            .iter()
            .enumerate()
            .map(|(i, name)| (name.clone(), i + 1))
            .collect();
        let cells = (0..OUTCOMES.len() * REASONS * labels.len())
            .map(|_| AtomicU64::new(0))
            .collect();
        Decisions {
            servers: labels,
            slots,
            cells,
        }
    }

    fn server_index(&self, server: Option<&str>) -> usize {
        match server {
            None => 0,
            Some(name) => self
                .slots
                .get(name)
                .copied()
                .unwrap_or(self.servers.len() - 1),
        }
    }

    /// The cell of one label set, found before the record is written (the record is moved into
    /// the sink) and counted with [`Decisions::add`] once it was.
    pub fn cell(&self, outcome: Outcome, reason: Option<Reason>, server: Option<&str>) -> Cell {
        Cell(
            (outcome_index(outcome) * REASONS + reason_index(reason)) * self.servers.len()
                + self.server_index(server),
        )
    }

    pub fn add(&self, cell: Cell) {
        self.cells[cell.0].fetch_add(1, Relaxed);
    }

    /// One record written.
    pub fn count(&self, outcome: Outcome, reason: Option<Reason>, server: Option<&str>) {
        self.add(self.cell(outcome, reason, server));
    }

    /// The count for one label set (tests).
    pub fn get(&self, outcome: Outcome, reason: Option<Reason>, server: Option<&str>) -> u64 {
        self.cells[self.cell(outcome, reason, server).0].load(Relaxed)
    }
}

/// Where one label set is counted in [`Decisions`].
#[derive(Debug, Clone, Copy)]
pub struct Cell(usize);

impl EncodeMetric for Decisions {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let servers = self.servers.len();
        for (cell, value) in self.cells.iter().enumerate() {
            let value = value.load(Relaxed);
            if value == 0 {
                continue;
            }
            let (server, rest) = (cell % servers, cell / servers);
            let (outcome, reason) = (rest / REASONS, rest % REASONS);
            let labels = [
                ("decision", OUTCOMES[outcome].label()),
                ("reason", reason_label(reason)),
                ("server", &*self.servers[server]),
            ];
            encoder
                .encode_family(&labels)?
                .encode_counter::<NoLabelSet, _, u64>(&value, None::<&Exemplar<NoLabelSet, u64>>)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

/// The kinds of upstream error `fenzi_upstream_errors_total` tells apart.
const KINDS: [&str; 10] = [
    "resolve",
    "connect",
    "connect_timeout",
    "tls",
    "tls_timeout",
    "http",
    "response_timeout",
    "body",
    "unreadable",
    "other",
];

/// The kind of an upstream-sourced error; `None` for the client's or the proxy's own.
pub fn error_kind(error: &ProxyError) -> Option<usize> {
    use ProxyError::*;
    if error.source_kind() != ErrorSource::Upstream {
        return None;
    }
    Some(match error {
        Resolve { .. } | NoAddress { .. } | ResolveTimeout { .. } => 0,
        Connect { .. } => 1,
        ConnectTimeout { .. } => 2,
        UpstreamTls { .. } => 3,
        UpstreamTlsTimeout { .. } => 4,
        UpstreamHttp(_) => 5,
        UpstreamTimeout(_) => 6,
        UpstreamBody(_) => 7,
        UnreadableResponse(_) => 8,
        _ => 9,
    })
}

/// `fenzi_upstream_errors_total{kind}`: every kind is printed, zero or not.
#[derive(Debug, Default)]
pub struct UpstreamErrors {
    counts: [AtomicU64; KINDS.len()],
}

impl UpstreamErrors {
    pub fn count(&self, error: &ProxyError) {
        if let Some(kind) = error_kind(error) {
            self.counts[kind].fetch_add(1, Relaxed);
        }
    }

    /// All kinds' counts added up (tests).
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Relaxed)).sum()
    }
}

impl EncodeMetric for UpstreamErrors {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (kind, count) in KINDS.iter().zip(&self.counts) {
            let value = count.load(Relaxed);
            encoder
                .encode_family(&[("kind", *kind)])?
                .encode_counter::<NoLabelSet, _, u64>(&value, None::<&Exemplar<NoLabelSet, u64>>)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_and_reason_has_its_own_cell() {
        let decisions = Decisions::new(["github", "deepwiki"]);
        let servers = [None, Some("github"), Some("deepwiki"), Some("nowhere")];
        let reasons: Vec<Option<Reason>> = Reason::ALL
            .iter()
            .copied()
            .map(Some)
            .chain([None])
            .collect();
        let mut n = 0;
        for outcome in OUTCOMES {
            for reason in &reasons {
                for server in servers {
                    n += 1;
                    for _ in 0..n {
                        decisions.count(outcome, *reason, server);
                    }
                }
            }
        }
        let mut n = 0;
        for outcome in OUTCOMES {
            for reason in &reasons {
                for server in servers {
                    n += 1;
                    assert_eq!(decisions.get(outcome, *reason, server), n);
                }
            }
        }
        // An unknown server shares the `_other` cell, and only it.
        assert_eq!(
            decisions.get(Outcome::Denied, None, Some("elsewhere")),
            decisions.get(Outcome::Denied, None, Some("nowhere"))
        );
    }

    #[test]
    fn a_server_named_twice_in_the_list_gets_one_cell() {
        let decisions = Decisions::new(["a", "a"]);
        assert_eq!(decisions.servers.len(), 3);
        decisions.count(Outcome::Allowed, None, Some("a"));
        assert_eq!(decisions.get(Outcome::Allowed, None, Some("a")), 1);
        assert_eq!(decisions.get(Outcome::Allowed, None, Some(OTHER_SERVER)), 0);
    }

    #[test]
    fn only_upstream_errors_are_counted() {
        let errors = UpstreamErrors::default();
        errors.count(&ProxyError::UpstreamTimeout(std::time::Duration::ZERO));
        errors.count(&ProxyError::ClientBody("gone".into()));
        errors.count(&ProxyError::Audit("full".into()));
        assert_eq!(errors.total(), 1);
        assert_eq!(errors.counts[6].load(Relaxed), 1);
    }
}
