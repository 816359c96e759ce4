//! [`Timing`]: a latency histogram made of atomics only. prometheus-client's own `Histogram` takes a
//! mutex on every `observe`; the request path must not, so each bucket here is one `AtomicU64` and an
//! observation is three relaxed additions. [`Timer`] observes when it is dropped, so a phase that
//! returns early, fails or is cancelled (a `limits` timeout drops the upstream future) is still
//! counted once.

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Upper bounds for phases that run in the proxy itself (a policy decision, an audit append):
/// microseconds, with room for a slow disk.
pub const LOCAL_BOUNDS: &[f64] = &[
    0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005,
    0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// Upper bounds for a round trip to an upstream: a millisecond on loopback to a slow tool call.
pub const UPSTREAM_BOUNDS: &[f64] = &[
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// A histogram of durations, in seconds on the wire.
#[derive(Debug)]
pub struct Timing {
    /// Upper bounds, in nanoseconds (inclusive, as Prometheus's `le`).
    bounds: Vec<u64>,
    /// The same bounds in seconds, as they are printed.
    seconds: Vec<f64>,
    /// One count per bound, plus the last for everything above the highest bound (not cumulative).
    counts: Vec<AtomicU64>,
    sum_nanos: AtomicU64,
}

impl Timing {
    pub fn new(bounds: &[f64]) -> Timing {
        Timing {
            bounds: bounds.iter().map(|s| (s * 1e9).round() as u64).collect(),
            seconds: bounds.to_vec(),
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_nanos: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let bucket = self.bounds.partition_point(|&bound| bound < nanos);
        self.counts[bucket].fetch_add(1, Relaxed);
        self.sum_nanos.fetch_add(nanos, Relaxed);
    }

    /// A timer that observes the time from now to its drop.
    pub fn start(&self) -> Timer<'_> {
        Timer {
            timing: self,
            started: Instant::now(),
        }
    }

    /// How many observations so far.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Relaxed)).sum()
    }
}

impl EncodeMetric for Timing {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        // The count is the buckets' sum, read once, so `_count` always equals the `+Inf` bucket.
        let buckets: Vec<(f64, u64)> = self
            .seconds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.counts.iter().map(|c| c.load(Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = self.sum_nanos.load(Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// Observes into its [`Timing`] when dropped.
pub struct Timer<'a> {
    timing: &'a Timing,
    started: Instant,
}

impl Drop for Timer<'_> {
    fn drop(&mut self) {
        self.timing.observe(self.started.elapsed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_observation_lands_in_the_first_bucket_whose_bound_holds_it() {
        let timing = Timing::new(&[0.001, 0.01]);
        for ms in [0, 1, 2, 10, 11, 5000] {
            timing.observe(Duration::from_millis(ms));
        }
        let counts: Vec<u64> = timing.counts.iter().map(|c| c.load(Relaxed)).collect();
        // le=0.001 holds 0 and 1 ms (inclusive bound), le=0.01 holds 2 and 10, the rest is above.
        assert_eq!(counts, [2, 2, 2]);
        assert_eq!(timing.count(), 6);
        assert_eq!(timing.sum_nanos.load(Relaxed), 5_024_000_000);
    }

    #[test]
    fn a_timer_observes_once_when_dropped() {
        let timing = Timing::new(LOCAL_BOUNDS);
        {
            let _timer = timing.start();
        }
        drop(timing.start());
        assert_eq!(timing.count(), 2);
    }
}
