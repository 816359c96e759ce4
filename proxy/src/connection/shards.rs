//! Connection shards: each accepted connection is served, start to finish, on one thread.
//!
//! An intercepted call is a ping-pong between two connections' tasks: the client's (TLS, the HTTP
//! server, the decision, the audit append) and the upstream's (hyper's client connection, TLS to the
//! server). On a work-stealing runtime each hand-over may wake the other worker thread: a futex wake,
//! a context switch and cold caches, several per call (docs/benchmarks.md: the scheduler was 40% of
//! the profile at one connection). nginx avoids this by giving each worker process its own
//! connections; shards do the same inside one process. [`Shards::start`] runs `n` threads, each with
//! its own current-thread runtime (its own reactor and timers), and [`Shards::serve`] hands an
//! accepted socket to the least busy one. Everything that connection spawns (its upstream
//! connections' tasks, timers, the idle-pool sweeper) lives on that thread too, and the pool hands
//! a thread its own idle upstream connections first ([`current`]).
//!
//! What stays shared is what was shared before: the session (policy, secrets, CA, audit writer,
//! pool), reached through `Arc`s. The accept loop, the control socket and the policy watcher keep
//! running on the caller's runtime. When the [`Shards`] are dropped (after the drain) their threads
//! stop taking work, and connections still open are cut, as they were when the runtime ended.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::mpsc;

/// A connection handed to a shard: spawned and first polled on the shard's thread, inside its runtime,
/// so the sockets it makes or adopts (`TcpStream::from_std`) register with that shard's reactor.
type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

thread_local! {
    static CURRENT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The shard this thread serves, if it is a shard's thread.
pub(crate) fn current() -> Option<usize> {
    CURRENT.with(Cell::get)
}

struct Lane {
    jobs: mpsc::UnboundedSender<Job>,
    /// Connections this shard is serving now.
    open: Arc<AtomicUsize>,
}

/// Threads that each serve their own connections; see the module docs.
pub struct Shards {
    lanes: Vec<Lane>,
    threads: Vec<std::thread::JoinHandle<()>>,
    next: AtomicUsize,
}

impl Shards {
    /// Starts `n` (at least one) shard threads named `name-0`, `name-1`, ...
    pub fn start(n: usize, name: &str) -> std::io::Result<Shards> {
        let mut lanes = Vec::new();
        let mut threads = Vec::new();
        for index in 0..n.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (jobs, mut queue) = mpsc::unbounded_channel::<Job>();
            let open = Arc::new(AtomicUsize::new(0));
            let thread = std::thread::Builder::new()
                .name(format!("{name}-{index}"))
                .spawn(move || {
                    CURRENT.with(|c| c.set(Some(index)));
                    runtime.block_on(async move {
                        while let Some(job) = queue.recv().await {
                            tokio::spawn(job);
                        }
                    });
                    // Connections still open were given their drain time by the caller: cut them.
                    // A resolver thread stuck in getaddrinfo is not waited for.
                    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
                })?;
            lanes.push(Lane { jobs, open });
            threads.push(thread);
        }
        Ok(Shards {
            lanes,
            threads,
            next: AtomicUsize::new(0),
        })
    }

    /// How many shards serve connections.
    pub fn len(&self) -> usize {
        self.lanes.len()
    }

    /// Always false: there is at least one shard.
    pub fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }

    /// Serves one connection on the shard with the fewest open connections (ties taken in turn, so
    /// a burst of new clients spreads evenly). `connection` is not polled before it is on that
    /// shard's thread. False when the shard has stopped (the proxy is shutting down).
    pub fn serve(&self, connection: impl Future<Output = ()> + Send + 'static) -> bool {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let count = self.lanes.len();
        let lane = (0..count)
            .map(|i| &self.lanes[(start + i) % count])
            .min_by_key(|lane| lane.open.load(Ordering::Relaxed))
            .expect("at least one shard");
        let open = lane.open.clone();
        open.fetch_add(1, Ordering::Relaxed);
        let job: Job = Box::pin(async move {
            let _open = OpenConnection(open);
            connection.await;
        });
        lane.jobs.send(job).is_ok()
    }

    /// Stops taking work and waits (off the async runtime) for the threads to end; connections still
    /// open are cut.
    pub async fn stop(mut self) {
        self.lanes.clear();
        let threads = std::mem::take(&mut self.threads);
        let _ = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        })
        .await;
    }
}

/// Counts a connection as open on its shard until it ends (or is cut).
struct OpenConnection(Arc<AtomicUsize>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Mutex;

    #[tokio::test]
    async fn each_connection_runs_on_a_shard_thread_and_spreads_evenly() {
        let shards = Shards::start(2, "test-shard").unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (done_tx, mut done_rx) = mpsc::unbounded_channel();
        let (release_tx, release_rx) = tokio::sync::watch::channel(false);
        for _ in 0..6 {
            let seen = seen.clone();
            let done = done_tx.clone();
            let mut release = release_rx.clone();
            assert!(shards.serve(async move {
                // Polled on the shard's thread, where `current` names it.
                let shard = current();
                let thread = std::thread::current().name().map(str::to_owned);
                seen.lock().unwrap().push((shard, thread));
                done.send(()).unwrap();
                // Held open, so the next connection sees this shard as busier.
                let _ = release.wait_for(|go| *go).await;
            }));
        }
        for _ in 0..6 {
            done_rx.recv().await.unwrap();
        }
        let seen = seen.lock().unwrap().clone();
        let shards_used: Vec<usize> = seen.iter().map(|(s, _)| s.expect("on a shard")).collect();
        assert_eq!(shards_used.iter().filter(|&&s| s == 0).count(), 3);
        assert_eq!(shards_used.iter().filter(|&&s| s == 1).count(), 3);
        let names: HashSet<_> = seen.iter().map(|(_, t)| t.clone().unwrap()).collect();
        assert_eq!(
            names,
            HashSet::from(["test-shard-0".to_string(), "test-shard-1".to_string()])
        );
        assert_eq!(current(), None, "the caller's thread is not a shard");
        release_tx.send(true).unwrap();
        shards.stop().await;
    }

    #[tokio::test]
    async fn stopping_cuts_connections_still_open() {
        let shards = Shards::start(1, "test-cut").unwrap();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let (_never_tx, never_rx) = tokio::sync::oneshot::channel::<()>();
        struct Dropped(Option<tokio::sync::oneshot::Sender<()>>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                let _ = self.0.take().unwrap().send(());
            }
        }
        let (dropped_tx, dropped_rx) = tokio::sync::oneshot::channel();
        assert!(shards.serve(async move {
            let _dropped = Dropped(Some(dropped_tx));
            started_tx.send(()).unwrap();
            let _ = never_rx.await;
        }));
        started_rx.await.unwrap();
        shards.stop().await;
        dropped_rx.await.expect("the open connection was cut");
    }
}
