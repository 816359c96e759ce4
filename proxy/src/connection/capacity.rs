//! How many client connections the proxy serves at once, and what happens when they are all taken.
//!
//! **The rule.** At most `max_connections` client connections are served at once, tunnels included
//! (each holds a slot until its last byte is carried). When a new client arrives and every slot is
//! taken, the connection that has been idle longest is closed to make room for it, provided it has
//! been idle for at least `eviction_grace` (default 1 s). So idle tunnels, idle keep-alive
//! connections and clients that dribble a request head can never lock others out: they give way,
//! oldest first, to whoever comes next. While no connection qualifies, the new client waits (the
//! proxy stops accepting, so later ones wait in the listen backlog) until one does or a slot frees.
//!
//! **Idle** means no bytes moved on the client's socket: neither a read from the client nor a write
//! to it. Everything a connection carries crosses that socket (a passed-through tunnel's bytes both
//! ways, an intercepted tunnel's TLS records, a response streamed from upstream), so this is "no
//! bytes in either direction" for tunnels and interceptions too. Two refinements:
//! - *A request head is not activity.* While a connection waits for a request head, the bytes of
//!   that head do not count; only a complete head does (it is dispatched as a request). A client
//!   sending a head a byte a second (slowloris) is therefore idle since it connected or since its
//!   last answer, and is the first to go. Counting those bytes would let each such client keep its
//!   slot for the whole `header_read_timeout` (30 s) and then reconnect: a few hundred of them would
//!   lock everyone else out indefinitely. Once a CONNECT is answered (or a protocol switch), the
//!   connection is a tunnel and every byte counts.
//! - *A request in flight is never evicted.* From the moment a request head is complete until its
//!   response head is sent, the connection is busy: the request has been decided and recorded, may
//!   already be at the upstream (a tool call with effects), and its answer is what the client waits
//!   for. Cutting it would lose that answer for a reason that is not about the request, so it is
//!   never a victim; a silent upstream is bounded by `response_header_timeout` instead. Starting a
//!   request and evicting exclude each other atomically: a connection's in-flight count and its
//!   evicted mark are one atomic word, a request's start increments it, and an eviction succeeds
//!   only by swapping it from 0 (nothing in flight, not evicted) to evicted. The scan for the
//!   longest idle only proposes a victim; if a request started since, the swap fails and the next
//!   longest idle is tried. A request that starts after an eviction (a head already buffered) runs
//!   against a socket that fails every read and write: it was not cut once started. A response
//!   body that stalls (an event stream with nothing to say) is idle like any other connection:
//!   Streamable HTTP clients resume such streams. The flip side: a client that stalls in the middle
//!   of its own request body keeps its slot until `body_read_timeout` (an inspected body) or
//!   `response_header_timeout` ends the request.
//!
//! Both refinements need the HTTP server to say when a head is complete and when its answer is
//! ready (`Admitted::request`, `InFlight::answered`) and when it waits for heads again
//! (`Admitted::reading_heads`); the proxy port's server and the HTTP/1.1 server inside an
//! intercepted tunnel both do. Over HTTP/2 every frame counts as activity, and each request is in
//! flight until its response head.
//!
//! **The grace** (1 s) keeps the rule from thrashing: a client that has just connected gets the time
//! any real client needs to send its request (well under a millisecond on loopback, a few round trips
//! elsewhere) before it can itself be displaced, so a flood of new connections cannot evict each
//! other before any of them is served. It is short enough that a legitimate client facing a full
//! proxy waits about a second, not the minutes of an idle timeout.
//!
//! **No audit record.** An eviction is not a policy decision about a request: nothing was in flight
//! (see above), so nothing was allowed or denied. It is a `tracing` warning (at most one every
//! [`REPORT_EVERY`], with the count since the last one) and a counter; each eviction is logged at
//! debug level with the peer and how long it had been idle.
//!
//! **Descriptors.** A connection holds up to [`FDS_PER_CONNECTION`] descriptors (its client socket
//! and, for a tunnel or a request in flight, one upstream socket). [`raise_fd_limit`] lifts the
//! soft `RLIMIT_NOFILE` to the hard limit at start; the default `max_connections` is what the hard
//! limit allows after a reserve ([`connections_for_fds`]), at most [`MAX_DEFAULT_CONNECTIONS`], and
//! the proxy never serves more than the current soft limit allows. If descriptors still run out
//! (`EMFILE` on accept), that is treated as being at capacity too.
//!
//! **Cost.** Activity is a relaxed atomic store of a coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`,
//! read from the vDSO without a system call) on each read or write that moved bytes; no lock is taken
//! per I/O. The connection registry is locked once when a connection opens and once when it closes,
//! and scanned (linearly, under its lock) only when a new client finds every slot taken.

use std::io;
use std::net::SocketAddr;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Descriptors one connection may hold: its client socket and one upstream socket.
pub const FDS_PER_CONNECTION: u64 = 2;
/// Descriptors always kept out of the connection budget: standard streams, the listener, the audit
/// log and its head, the runtime's epoll and wake-up descriptors, resolver sockets.
const RESERVED_FDS: u64 = 64;
/// Beyond [`RESERVED_FDS`], this fraction of the limit (1/16) is also kept back, for idle pooled
/// upstream connections and the rest of the process.
const RESERVED_SHARE: u64 = 16;
/// The default `max_connections` never exceeds this, whatever the descriptor limit: an idle tunnel
/// costs a few KiB of memory, and an agent sandbox has no use for more.
pub const MAX_DEFAULT_CONNECTIONS: usize = 16_384;
/// The soft limit [`raise_fd_limit`] asks for when the hard limit is unlimited (Linux's default
/// `fs.nr_open`).
const UNLIMITED_FDS: u64 = 1 << 20;
/// After an eviction, how long the new client waits for the victim's slot before another is evicted.
const EVICTION_WAIT: Duration = Duration::from_secs(1);
/// While every connection is busy with a request, how often the new client looks again.
const BUSY_WAIT: Duration = Duration::from_millis(250);
/// At most one warning per this period about evictions, with the count since the last one.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (to 2^20 when the hard limit is unlimited) and
/// returns the soft limit now in force. A failure leaves the limit as it was.
pub fn raise_fd_limit() -> io::Result<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let target = limit.maximum.unwrap_or(UNLIMITED_FDS);
    match limit.current {
        Some(current) if current >= target => return Ok(current),
        None => return Ok(u64::MAX),
        Some(_) => {}
    }
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(target),
            maximum: limit.maximum,
        },
    )?;
    Ok(target)
}

/// The soft and hard `RLIMIT_NOFILE` (`None`: unlimited).
pub fn fd_limits() -> (Option<u64>, Option<u64>) {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    (limit.current, limit.maximum)
}

/// How many connections `fd_limit` descriptors can serve: the limit less a reserve (64 and 1/16 of
/// the limit), divided by [`FDS_PER_CONNECTION`]; at least 1.
pub fn connections_for_fds(fd_limit: Option<u64>) -> usize {
    let Some(limit) = fd_limit else {
        return usize::MAX;
    };
    let reserve = RESERVED_FDS + limit / RESERVED_SHARE;
    let n = limit.saturating_sub(reserve) / FDS_PER_CONNECTION;
    usize::try_from(n).unwrap_or(usize::MAX).max(1)
}

/// The default `max_connections`: what the hard descriptor limit allows (the proxy raises its soft
/// limit to it at start), at most [`MAX_DEFAULT_CONNECTIONS`].
pub fn default_max_connections() -> usize {
    connections_for_fds(fd_limits().1).min(MAX_DEFAULT_CONNECTIONS)
}

/// Milliseconds on the coarse monotonic clock (a few ms resolution, no system call).
fn now_ms() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    (t.tv_sec as u64).saturating_mul(1000) + (t.tv_nsec as u64) / 1_000_000
}

/// The bit of [`Slot::state`] that marks the connection evicted; the bits below count its requests
/// in flight.
const EVICTED: u32 = 1 << 31;

/// One connection's state, shared by its stream wrapper and the registry.
struct Slot {
    peer: SocketAddr,
    /// When bytes last moved ([`now_ms`]).
    last: AtomicU64,
    /// Requests dispatched and not yet answered (low bits) and whether the connection has been
    /// evicted ([`EVICTED`]). One atomic, so starting a request and evicting exclude each other:
    /// eviction succeeds only from exactly 0 (nothing in flight, not yet evicted).
    state: AtomicU32,
    /// Whether the connection is waiting for request heads (their bytes are not activity) rather than
    /// carrying a tunnel.
    heads: AtomicBool,
    /// The tasks last blocked reading from and writing to the client, woken on eviction.
    wakers: Mutex<[Option<Waker>; 2]>,
}

const READ: usize = 0;
const WRITE: usize = 1;

impl Slot {
    fn new(peer: SocketAddr) -> Slot {
        Slot {
            peer,
            last: AtomicU64::new(now_ms()),
            state: AtomicU32::new(0),
            heads: AtomicBool::new(true),
            wakers: Mutex::new([None, None]),
        }
    }

    fn touch(&self) {
        self.last.store(now_ms(), Ordering::Relaxed);
    }

    fn evicted(&self) -> bool {
        self.state.load(Ordering::Acquire) & EVICTED != 0
    }

    /// Neither a request in flight nor evicted: a candidate victim (checked again by [`Slot::evict`]).
    fn evictable(&self) -> bool {
        self.state.load(Ordering::Relaxed) == 0
    }

    /// A request starts. Returns whether the connection had already been evicted: that request then
    /// runs against a socket that fails every read and write, so no answer reaches the client, but it
    /// was never cut after it started.
    fn start(&self) -> bool {
        self.state.fetch_add(1, Ordering::AcqRel) & EVICTED != 0
    }

    /// A request started by [`Slot::start`] has been answered or dropped.
    fn end(&self) {
        self.state.fetch_sub(1, Ordering::AcqRel);
    }

    /// Marks the connection evicted, unless a request is in flight (or it already is evicted), and
    /// wakes whatever waits on its socket; the wrapper then fails every read and write, which ends
    /// the connection's tasks and frees its slot. Returns whether it was evicted now.
    fn evict(&self) -> bool {
        if self
            .state
            .compare_exchange(0, EVICTED, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // The waker lock orders this with `Tracked::blocked`: a task that registers after the take
        // sees the flag when it checks, one that registered before is woken here.
        let wakers = std::mem::take(&mut *self.wakers.lock().unwrap_or_else(|p| p.into_inner()));
        for waker in wakers.into_iter().flatten() {
            waker.wake();
        }
        true
    }
}

/// The live connections, for the scan that picks an eviction victim.
#[derive(Default)]
struct Registry {
    slots: Vec<Option<Arc<Slot>>>,
    free: Vec<usize>,
}

/// The connection slots of one [`crate::Proxy::serve`] run and the eviction rule (see the module
/// doc).
pub(crate) struct Capacity {
    permits: Arc<Semaphore>,
    max: usize,
    grace_ms: u64,
    registry: Mutex<Registry>,
    evictions: AtomicU64,
    /// Requests dispatched and not yet answered, over every connection (see [`InFlight`]).
    in_flight: AtomicUsize,
    /// Evictions not yet reported in a warning, and when the last warning was written.
    unreported: AtomicU64,
    reported_at: AtomicU64,
}

/// What a look for an eviction victim found.
enum Victim {
    Evicted,
    /// The longest-idle connection reaches the grace after this long.
    NotYet(Duration),
    /// Every connection is busy with a request (or already evicted).
    None,
}

impl Capacity {
    /// Slots for `max` connections (lowered to what the current soft descriptor limit allows), idle
    /// connections evictable after `grace`.
    pub fn new(max: usize, grace: Duration) -> Arc<Capacity> {
        let fits = connections_for_fds(fd_limits().0);
        let max = max.clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        if max > fits {
            tracing::warn!(
                "max_connections {max} needs more descriptors than the soft limit allows; \
                 serving at most {fits} connections at once"
            );
        }
        let max = max.min(fits);
        Arc::new(Capacity {
            permits: Arc::new(Semaphore::new(max)),
            max,
            grace_ms: u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
            registry: Mutex::new(Registry::default()),
            evictions: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            unreported: AtomicU64::new(0),
            reported_at: AtomicU64::new(0),
        })
    }

    /// Connections served at once.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Connections closed so far to make room.
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// A slot for a client that has just connected from `peer`. When every slot is taken, closes the
    /// connection idle longest (once it has been idle for the grace) and takes its slot; waits while
    /// none qualifies.
    pub async fn admit(self: &Arc<Self>, peer: SocketAddr) -> Admitted {
        loop {
            if let Ok(permit) = self.permits.clone().try_acquire_owned() {
                return self.register(permit, peer);
            }
            let wait = match self.evict_longest_idle() {
                Victim::Evicted => EVICTION_WAIT,
                Victim::NotYet(left) => left.max(Duration::from_millis(10)),
                Victim::None => BUSY_WAIT,
            };
            tokio::select! {
                permit = self.permits.clone().acquire_owned() => {
                    if let Ok(permit) = permit {
                        return self.register(permit, peer);
                    }
                    // The semaphore is never closed; should it be, fall back to polling.
                    tokio::time::sleep(wait).await;
                }
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Descriptors ran out although slots remain: makes room the same way as a full proxy does.
    pub fn out_of_descriptors(&self) {
        let _ = self.evict_longest_idle();
    }

    fn register(self: &Arc<Self>, permit: OwnedSemaphorePermit, peer: SocketAddr) -> Admitted {
        let slot = Arc::new(Slot::new(peer));
        let mut registry = self.lock();
        let index = match registry.free.pop() {
            Some(index) => {
                registry.slots[index] = Some(slot.clone());
                index
            }
            None => {
                registry.slots.push(Some(slot.clone()));
                registry.slots.len() - 1
            }
        };
        Admitted {
            capacity: self.clone(),
            slot,
            index,
            _permit: permit,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn evict_longest_idle(&self) -> Victim {
        let now = now_ms();
        let idle_ms = |s: &Arc<Slot>| now.saturating_sub(s.last.load(Ordering::Relaxed));
        // The scan only proposes a victim; `evict` decides, atomically with any request starting
        // on it. When a request won (its head completed after the scan), that slot is busy and the
        // next scan passes it over, so the next-longest idle is tried. Bounded all the same.
        let mut attempts = self.max;
        let (victim, idle) = loop {
            let longest = {
                let registry = self.lock();
                registry
                    .slots
                    .iter()
                    .flatten()
                    .filter(|s| s.evictable())
                    .max_by_key(|s| idle_ms(s))
                    .cloned()
            };
            let Some(slot) = longest.filter(|_| attempts > 0) else {
                return Victim::None;
            };
            let idle = idle_ms(&slot);
            if idle < self.grace_ms {
                return Victim::NotYet(Duration::from_millis(self.grace_ms - idle));
            }
            if slot.evict() {
                break (slot, idle);
            }
            attempts -= 1;
        };
        self.evictions.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(peer = %victim.peer, idle_ms = idle, "at capacity: closed the connection idle longest");
        self.report(now, idle);
        Victim::Evicted
    }

    /// The rate-limited warning about evictions. Only the accept loop evicts (`admit` and
    /// `out_of_descriptors` are called from [`crate::Proxy::serve`]'s loop alone), so plain loads and
    /// stores suffice: no two calls race.
    fn report(&self, now: u64, idle: u64) {
        let pending = self.unreported.load(Ordering::Relaxed) + 1;
        let last = self.reported_at.load(Ordering::Relaxed);
        let every = REPORT_EVERY.as_millis() as u64;
        if last != 0 && now.saturating_sub(last) < every {
            self.unreported.store(pending, Ordering::Relaxed);
            return;
        }
        self.reported_at.store(now.max(1), Ordering::Relaxed);
        self.unreported.store(0, Ordering::Relaxed);
        tracing::warn!(
            "at capacity ({} connections): closed {pending} idle connection(s) to admit new clients \
             ({} in all; the latest had been idle {idle} ms)",
            self.max,
            self.evictions.load(Ordering::Relaxed),
        );
    }

    /// Waits up to `timeout` for every connection to end; returns how many were still open.
    pub async fn drain(&self, timeout: Duration) -> usize {
        let all = u32::try_from(self.max).unwrap_or(u32::MAX);
        match tokio::time::timeout(timeout, self.permits.acquire_many(all)).await {
            Ok(_) => 0,
            Err(_) => self.max - self.permits.available_permits(),
        }
    }
}

/// One admitted connection: its slot under the cap and its activity. Dropped (with the last of its
/// tasks) it leaves the registry and frees the slot.
pub(crate) struct Admitted {
    capacity: Arc<Capacity>,
    slot: Arc<Slot>,
    index: usize,
    _permit: OwnedSemaphorePermit,
}

impl Admitted {
    /// The peer address the connection was accepted from.
    pub fn peer(&self) -> SocketAddr {
        self.slot.peer
    }

    /// The client's stream, its activity tracked and cut on eviction.
    pub fn track<T>(&self, inner: T) -> Tracked<T> {
        Tracked {
            inner,
            slot: self.slot.clone(),
            registered: [None, None],
        }
    }

    /// A request head is complete: the connection is busy until the returned value is answered or
    /// dropped.
    pub fn request<B>(&self, req: &http::Request<B>) -> InFlight {
        self.slot.start();
        self.slot.touch();
        self.capacity.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight {
            slot: self.slot.clone(),
            capacity: self.capacity.clone(),
            connect: req.method() == http::Method::CONNECT,
        }
    }

    /// Requests in flight on every connection of the proxy, this one's included: more than one
    /// means another request may be decided in the same turn of the loop (see
    /// [`crate::session::context::SessionContext::record_all_together`]).
    pub fn requests_in_flight(&self) -> usize {
        self.capacity.in_flight.load(Ordering::Relaxed)
    }

    /// The connection now waits for request heads (HTTP inside an intercepted tunnel): their bytes
    /// stop counting as activity until a request is dispatched.
    pub fn reading_heads(&self) {
        self.slot.heads.store(true, Ordering::Relaxed);
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut registry = self.capacity.lock();
        registry.slots[self.index] = None;
        registry.free.push(self.index);
    }
}

/// A request in flight on a connection (see [`Admitted::request`]).
pub(crate) struct InFlight {
    slot: Arc<Slot>,
    capacity: Arc<Capacity>,
    connect: bool,
}

impl InFlight {
    /// The response head is ready: the request is no longer in flight. An answered CONNECT (2xx) or a
    /// protocol switch (101) turns the connection into a tunnel, whose every byte is activity.
    pub fn answered<B>(self, response: http::Response<B>) -> http::Response<B> {
        let status = response.status();
        if status == http::StatusCode::SWITCHING_PROTOCOLS || (self.connect && status.is_success())
        {
            self.slot.heads.store(false, Ordering::Relaxed);
        }
        self.slot.touch();
        response
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.slot.end();
        self.capacity.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A client stream whose reads and writes mark its connection active, and which fails every read
/// and write once the connection has been evicted.
pub(crate) struct Tracked<T> {
    inner: T,
    slot: Arc<Slot>,
    /// The wakers last handed to the slot, so its lock is taken only when another task polls.
    registered: [Option<Waker>; 2],
}

impl<T> Tracked<T> {
    /// Remembers the waker of the task now blocked on `side`, for [`Slot::evict`]. True when the
    /// connection has been evicted in the meantime.
    fn blocked(&mut self, side: usize, waker: &Waker) -> bool {
        if !self.registered[side]
            .as_ref()
            .is_some_and(|w| w.will_wake(waker))
        {
            self.registered[side] = Some(waker.clone());
            let mut wakers = self.slot.wakers.lock().unwrap_or_else(|p| p.into_inner());
            wakers[side] = Some(waker.clone());
        }
        self.slot.evicted()
    }
}

fn evicted() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "closed to make room for a new client (the proxy is at max_connections)",
    )
}

/// The stream itself (e.g. for socket options).
impl<T> Deref for Tracked<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.slot.evicted() {
            return Poll::Ready(Err(evicted()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before && !this.slot.heads.load(Ordering::Relaxed) {
                    this.slot.touch();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending if this.blocked(READ, cx.waker()) => Poll::Ready(Err(evicted())),
            other => other,
        }
    }
}

impl<T: AsyncWrite + Unpin> Tracked<T> {
    fn written(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match polled {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.slot.touch();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Pending if self.blocked(WRITE, cx.waker()) => Poll::Ready(Err(evicted())),
            other => other,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.slot.evicted() {
            return Poll::Ready(Err(evicted()));
        }
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.written(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.slot.evicted() {
            return Poll::Ready(Err(evicted()));
        }
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.written(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_budget_leaves_a_reserve_and_counts_two_descriptors_each() {
        assert_eq!(connections_for_fds(Some(1024)), (1024 - 64 - 64) / 2);
        assert_eq!(connections_for_fds(Some(20_000)), (20_000 - 64 - 1250) / 2);
        assert_eq!(connections_for_fds(Some(10)), 1, "never zero");
        assert_eq!(connections_for_fds(None), usize::MAX);
        assert!(default_max_connections() <= MAX_DEFAULT_CONNECTIONS);
        assert!(default_max_connections() >= 1);
    }

    #[test]
    fn raising_the_descriptor_limit_reaches_the_hard_limit() {
        let raised = raise_fd_limit().unwrap();
        let (soft, hard) = fd_limits();
        assert_eq!(soft, Some(raised).filter(|&r| r != u64::MAX));
        if let Some(hard) = hard {
            assert_eq!(raised, hard);
        }
        // Idempotent.
        assert_eq!(raise_fd_limit().unwrap(), raised);
    }

    #[test]
    fn the_coarse_clock_moves_forward() {
        let a = now_ms();
        std::thread::sleep(Duration::from_millis(30));
        let b = now_ms();
        assert!(b >= a + 20, "{a} -> {b}");
    }

    fn peer() -> SocketAddr {
        "127.0.0.1:1".parse().unwrap()
    }

    #[tokio::test]
    async fn the_longest_idle_connection_is_evicted_once_past_the_grace() {
        let capacity = Capacity::new(3, Duration::from_millis(100));
        let a = capacity.admit(peer()).await;
        let b = capacity.admit(peer()).await;
        let c = capacity.admit(peer()).await;
        // Nobody has been idle for the grace yet.
        assert!(matches!(capacity.evict_longest_idle(), Victim::NotYet(_)));
        tokio::time::sleep(Duration::from_millis(150)).await;
        a.slot.touch();
        let busy = c.request(&http::Request::new(()));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(matches!(capacity.evict_longest_idle(), Victim::Evicted));
        assert!(b.slot.evicted(), "b was idle longest");
        assert!(!a.slot.evicted() && !c.slot.evicted());
        // a is now the longest idle, but not for the grace; c is in flight.
        assert!(matches!(capacity.evict_longest_idle(), Victim::NotYet(_)));
        drop(busy);
        drop((a, b, c));
        assert_eq!(capacity.lock().free.len(), 3);
    }

    #[test]
    fn a_started_request_and_an_eviction_exclude_each_other() {
        let slot = Slot::new(peer());
        assert!(!slot.start(), "not evicted when the request started");
        assert!(!slot.evictable());
        assert!(!slot.evict(), "a request is in flight");
        assert!(!slot.evicted());
        slot.end();
        assert!(slot.evictable());
        assert!(slot.evict());
        assert!(slot.evicted() && !slot.evictable());
        assert!(!slot.evict(), "evicted once only");
        // A request that starts afterwards sees the mark, and ending it leaves the mark.
        assert!(slot.start());
        assert!(slot.evicted());
        slot.end();
        assert!(slot.evicted() && !slot.evictable());
    }

    /// Whichever of a request's start and an eviction comes first, the other sees it: never both an
    /// eviction and a request that started on a live connection. Holds for every interleaving, so
    /// the threads only make more interleavings happen.
    #[test]
    fn racing_a_request_and_an_eviction_never_cuts_the_request() {
        use std::sync::Barrier;
        const ROUNDS: usize = 20_000;
        let round: Arc<Mutex<Arc<Slot>>> = Arc::new(Mutex::new(Arc::new(Slot::new(peer()))));
        let barrier = Arc::new(Barrier::new(2));
        let requests = {
            let (round, barrier) = (round.clone(), barrier.clone());
            std::thread::spawn(move || {
                (0..ROUNDS)
                    .map(|_| {
                        barrier.wait();
                        let slot = round.lock().unwrap().clone();
                        let late = slot.start();
                        barrier.wait();
                        late
                    })
                    .collect::<Vec<bool>>()
            })
        };
        let mut evictions = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            let slot = Arc::new(Slot::new(peer()));
            *round.lock().unwrap() = slot.clone();
            barrier.wait();
            evictions.push(slot.evict());
            barrier.wait();
        }
        let late = requests.join().unwrap();
        for (evicted, late) in evictions.into_iter().zip(late) {
            // Evicted exactly when the request saw the mark, i.e. the eviction came first.
            assert_eq!(evicted, late);
        }
    }

    #[tokio::test]
    async fn a_request_in_flight_is_passed_over_and_one_started_after_eviction_keeps_the_mark() {
        let capacity = Capacity::new(1, Duration::ZERO);
        let admitted = capacity.admit(peer()).await;
        let busy = admitted.request(&http::Request::new(()));
        assert!(matches!(capacity.evict_longest_idle(), Victim::None));
        assert!(!admitted.slot.evicted());
        drop(busy);
        assert!(matches!(capacity.evict_longest_idle(), Victim::Evicted));
        assert!(admitted.slot.evicted());
        let late = admitted.request(&http::Request::new(()));
        assert!(admitted.slot.evicted());
        assert!(matches!(capacity.evict_longest_idle(), Victim::None));
        drop(late);
        assert!(admitted.slot.evicted());
        assert_eq!(capacity.evictions(), 1);
    }

    #[tokio::test]
    async fn head_bytes_are_not_activity_until_a_tunnel_starts() {
        let capacity = Capacity::new(1, Duration::from_millis(100));
        let admitted = capacity.admit(peer()).await;
        let (client, server) = tokio::io::duplex(64);
        let mut tracked = admitted.track(server);
        let mut client = client;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let at = admitted.slot.last.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(30)).await;
        client.write_all(b"GET / HT").await.unwrap();
        let mut buf = [0u8; 8];
        tracked.read_exact(&mut buf).await.unwrap();
        assert_eq!(admitted.slot.last.load(Ordering::Relaxed), at);
        let connect = http::Request::builder().method("CONNECT").body(()).unwrap();
        let answer = http::Response::builder().status(200).body(()).unwrap();
        admitted.request(&connect).answered(answer);
        let answered = admitted.slot.last.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(30)).await;
        client.write_all(b"tunnel").await.unwrap();
        tracked.read_exact(&mut buf[..6]).await.unwrap();
        assert!(admitted.slot.last.load(Ordering::Relaxed) > answered);
    }

    #[tokio::test]
    async fn an_evicted_stream_fails_its_blocked_read() {
        let capacity = Capacity::new(1, Duration::ZERO);
        let admitted = capacity.admit(peer()).await;
        let (_client, server) = tokio::io::duplex(64);
        let mut tracked = admitted.track(server);
        let reading = tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut buf = [0u8; 1];
            tracked.read(&mut buf).await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(matches!(capacity.evict_longest_idle(), Victim::Evicted));
        let read = tokio::time::timeout(Duration::from_secs(5), reading)
            .await
            .expect("the blocked read was woken")
            .unwrap();
        assert_eq!(read.unwrap_err().kind(), io::ErrorKind::ConnectionAborted);
    }
}
