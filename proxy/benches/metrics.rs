//! What `--metrics` adds to one request, point by point: finding and bumping a record's
//! `fenzi_decisions_total` cell, one histogram observation (a timer started and dropped), and the
//! same from two threads at once (the atomics' cache line shared). For comparison,
//! prometheus-client's own `Family` lookup and mutex-guarded `Histogram`, which this module does
//! not use. A scrape's encoding is measured too, though no request waits for it.
//!
//! ```text
//! cargo bench -p fenzi-proxy --bench metrics
//! ```

use criterion::{Criterion, criterion_group, criterion_main};
use fenzi_policy::Reason;
use fenzi_policy::audit::Outcome;
use fenzi_proxy::metrics::Metrics;
use fenzi_proxy::metrics::decisions::Decisions;
use fenzi_proxy::metrics::timing::{LOCAL_BOUNDS, Timing};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

const SERVERS: [&str; 6] = ["github", "linear", "deepwiki", "sentry", "notion", "local"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    decision: &'static str,
    reason: &'static str,
    server: &'static str,
}

fn bench(c: &mut Criterion) {
    let decisions = Decisions::new(SERVERS);
    c.bench_function("decisions: cell + add", |b| {
        b.iter(|| {
            let cell = decisions.cell(
                black_box(Outcome::Allowed),
                black_box(None::<Reason>),
                black_box(Some("deepwiki")),
            );
            decisions.add(cell);
        })
    });
    let timing = Timing::new(LOCAL_BOUNDS);
    c.bench_function("timing: start + drop", |b| b.iter(|| drop(timing.start())));
    c.bench_function("timing: observe", |b| {
        b.iter(|| timing.observe(black_box(Duration::from_micros(40))))
    });
    let shared = Arc::new(Timing::new(LOCAL_BOUNDS));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = {
        let (shared, stop) = (shared.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                shared.observe(Duration::from_micros(40));
            }
        })
    };
    c.bench_function("timing: observe, another thread observing too", |b| {
        b.iter(|| shared.observe(black_box(Duration::from_micros(40))))
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    other.join().unwrap();

    // prometheus-client's own types, for comparison.
    let family = Family::<Labels, Counter>::default();
    c.bench_function("prometheus-client Family::get_or_create + inc", |b| {
        b.iter(|| {
            let labels = Labels {
                decision: "allowed",
                reason: "",
                server: "deepwiki",
            };
            family.get_or_create(black_box(&labels)).inc();
        })
    });
    let histogram = Histogram::new(LOCAL_BOUNDS.iter().copied());
    c.bench_function("prometheus-client Histogram::observe", |b| {
        b.iter(|| histogram.observe(black_box(0.000_04)))
    });

    let metrics = Arc::new(Metrics::new(SERVERS));
    c.bench_function("scrape: encode", |b| b.iter(|| black_box(metrics.encode())));
}

criterion_group!(benches, bench);
criterion_main!(benches);
