//! A future that is polled only when it woke its task itself.
//!
//! `tokio::select!` polls every branch each time its task wakes. A connection's task races its
//! HTTP connection against the session's stop signal, and wakes several times per request for the
//! connection alone; each poll of the stop signal (a `watch` receiver) takes the lock of a waiter
//! list shared by every connection of the session, on every shard's thread, so the cores pass that
//! cache line back and forth on every wake-up. [`OnlyWhenWoken`] gives the inner future a waker of
//! its own: the inner future is polled first, and afterwards only once that waker has fired.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

/// `inner`, polled only on its first poll and after it woke the task (see the module docs).
pub(crate) fn only_when_woken<F: Future>(inner: F) -> OnlyWhenWoken<F> {
    OnlyWhenWoken {
        inner: Box::pin(inner),
        gate: Arc::new(Gate {
            woken: AtomicBool::new(true),
            task: Mutex::new(None),
        }),
    }
}

pub(crate) struct OnlyWhenWoken<F> {
    inner: Pin<Box<F>>,
    gate: Arc<Gate>,
}

/// The inner future's waker: remembers that it fired, and wakes the task that polls the wrapper.
struct Gate {
    woken: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Wake for Gate {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(task) = task.as_ref() {
            task.wake_by_ref();
        }
    }
}

impl<F: Future> Future for OnlyWhenWoken<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        {
            // Per connection, taken on its own thread: uncontended.
            let mut task = self.gate.task.lock().unwrap_or_else(|p| p.into_inner());
            if !task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        if !self.gate.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        let waker = Waker::from(self.gate.clone());
        self.inner.as_mut().poll(&mut Context::from_waker(&waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts its polls; ready once `open` is set, waking through the waker it was last given.
    struct Counted {
        polls: Arc<AtomicUsize>,
        open: Arc<AtomicBool>,
        waker: Arc<Mutex<Option<Waker>>>,
    }

    impl Future for Counted {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.open.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    struct CountWakes(AtomicUsize);
    impl Wake for CountWakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_inner_future_is_polled_first_and_then_only_after_its_own_wake() {
        let polls = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicBool::new(false));
        let inner_waker = Arc::new(Mutex::new(None));
        let mut gated = Box::pin(only_when_woken(Counted {
            polls: polls.clone(),
            open: open.clone(),
            waker: inner_waker.clone(),
        }));
        let task = Arc::new(CountWakes(AtomicUsize::new(0)));
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);

        assert!(gated.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 1, "polled on the first poll");
        // The task woke for something else: the inner future is left alone.
        for _ in 0..5 {
            assert!(gated.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::SeqCst), 1);

        // The inner future's own wake reaches the task and lets the next poll through.
        open.store(true, Ordering::SeqCst);
        inner_waker.lock().unwrap().take().unwrap().wake();
        assert_eq!(task.0.load(Ordering::SeqCst), 1, "the task was woken");
        assert!(gated.as_mut().poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }
}
