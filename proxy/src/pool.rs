//! The session's pool of idle upstream connections, shared by every client connection: the requests
//! of a tunnel, of a plain-HTTP client connection, and of other clients of the same session going to
//! the same place reuse them.
//!
//! Reuse never widens what admission decided. A pooled connection is keyed by host, port and TLS, and
//! remembers the address it was dialled to; [`Pool::take`] hands it out only when that address is
//! among the addresses the request's own admission checked just now. Idle connections are closed after
//! `upstream_idle_timeout` (and at most `max_idle_upstream` are kept per destination), so an idle
//! session holds no upstream sockets for long.

use crate::body::Body;
use crate::options::ProxyOptions;
use fenzi_policy::host::Host;
use hyper::client::conn::http1::SendRequest;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// What makes two upstream connections interchangeable (besides the dialled address).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PoolKey {
    pub host: Host,
    pub port: u16,
    pub tls: bool,
}

/// One HTTP/1.1 connection to an upstream.
pub(crate) struct UpstreamConn {
    pub sender: SendRequest<Body>,
    /// The checked address this connection was dialled to.
    pub addr: SocketAddr,
    /// The shard whose thread drives it ([`crate::shards::current`] when it was dialled).
    pub shard: Option<usize>,
}

struct IdleConn {
    conn: UpstreamConn,
    /// When it was last handed back, or last seen still busy by a sweep.
    since: Instant,
}

/// The session's idle upstream connections, shared by every client connection.
#[derive(Default)]
pub(crate) struct Pool {
    idle: Mutex<HashMap<PoolKey, Vec<IdleConn>>>,
    /// Whether the task closing idle connections runs (started with the first kept connection).
    expiring: AtomicBool,
}

impl Pool {
    /// A ready connection for `key` to one of `allowed`, the most recently used first, and one this
    /// thread's shard drives before any other: a connection driven on another thread costs a
    /// cross-thread wake-up each way of every call.
    pub fn take(&self, key: &PoolKey, allowed: &[SocketAddr]) -> Option<UpstreamConn> {
        let shard = crate::shards::current();
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let conns = idle.get_mut(key)?;
        conns.retain(|c| !c.conn.sender.is_closed());
        let usable = |c: &IdleConn| c.conn.sender.is_ready() && allowed.contains(&c.conn.addr);
        let at = conns
            .iter()
            .rposition(|c| c.conn.shard == shard && usable(c))
            .or_else(|| conns.iter().rposition(usable))?;
        Some(conns.remove(at).conn)
    }

    /// Hands a connection back. It becomes ready again once its response body has been read; a
    /// connection that is never ready again (a long event stream) waits here until it closes or is
    /// pushed out. Beyond `cap` per destination the oldest is dropped (hyper finishes a response in
    /// flight on it, then closes it).
    pub fn put(self: &Arc<Self>, key: PoolKey, conn: UpstreamConn, options: &ProxyOptions) {
        let cap = options.max_idle_upstream;
        if cap == 0 {
            return;
        }
        if !self.expiring.swap(true, Ordering::Relaxed) {
            tokio::spawn(expire_idle(
                Arc::downgrade(self),
                options.upstream_idle_timeout,
            ));
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let conns = idle.entry(key).or_default();
        conns.retain(|c| !c.conn.sender.is_closed());
        if conns.len() >= cap {
            conns.remove(0);
        }
        conns.push(IdleConn {
            conn,
            since: Instant::now(),
        });
    }

    /// Drops connections idle for `max_idle` or longer (all idle ones for zero) and destinations left
    /// with none; returns how many connections were dropped.
    pub fn expire(&self, max_idle: Duration) -> usize {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let mut dropped = 0;
        idle.retain(|_, conns| {
            let before = conns.len();
            conns.retain_mut(|c| {
                if c.conn.sender.is_closed() {
                    return false;
                }
                // Still carrying a response body: busy, not idle. Its idle time starts from the
                // last sweep that saw it busy, not from when its response began.
                if !c.conn.sender.is_ready() {
                    c.since = now;
                    return true;
                }
                now.duration_since(c.since) < max_idle
            });
            dropped += before - conns.len();
            !conns.is_empty()
        });
        dropped
    }
}

/// Closes the idle connections of `pool` after `max_idle`, checking a few times per period, until the
/// session (the pool's owner) is gone.
async fn expire_idle(pool: Weak<Pool>, max_idle: Duration) {
    let every = (max_idle / 4).max(Duration::from_millis(100));
    loop {
        tokio::time::sleep(every).await;
        let Some(pool) = pool.upgrade() else { return };
        let dropped = pool.expire(max_idle);
        if dropped > 0 {
            tracing::debug!(dropped, "closed idle upstream connections");
        }
    }
}
