//! Tracing capture for tests that assert what reaches fenzi's tracing output: every event and span
//! field of the whole test binary, at TRACE level, into one string.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

static CAPTURED: OnceLock<Arc<Mutex<String>>> = OnceLock::new();

struct Capture {
    out: Arc<Mutex<String>>,
    next: AtomicU64,
}

struct Fields<'a>(&'a Mutex<String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        let mut out = self.0.lock().unwrap();
        let _ = write!(out, " {}={value:?}", field.name());
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }
    fn new_span(&self, attrs: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        attrs.record(&mut Fields(&self.out));
        tracing::span::Id::from_u64(self.next.fetch_add(1, Ordering::Relaxed))
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        values.record(&mut Fields(&self.out));
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        event.record(&mut Fields(&self.out));
        self.out.lock().unwrap().push('\n');
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Installs the capture as the global subscriber (once per test binary).
pub fn capture() {
    CAPTURED.get_or_init(|| {
        let out = Arc::new(Mutex::new(String::new()));
        let capture = Capture {
            out: out.clone(),
            next: AtomicU64::new(1),
        };
        tracing::subscriber::set_global_default(capture).unwrap();
        out
    });
}

/// Everything captured so far.
pub fn captured() -> String {
    CAPTURED.get().unwrap().lock().unwrap().clone()
}
