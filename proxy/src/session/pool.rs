//! The session's pool of idle upstream connections, shared by every client connection: the requests
//! of a tunnel, of a plain-HTTP client connection, and of other clients of the same session going to
//! the same place reuse them.
//!
//! Reuse never widens what admission decided. A pooled connection is keyed by host, port and TLS, and
//! remembers the address it was dialled to; [`Pool::take`] hands it out only when that address is
//! among the addresses the request's own admission checked just now. Idle connections are closed after
//! `upstream_idle_timeout` (and at most `max_idle_upstream` are kept per destination and shard), so an
//! idle session holds no upstream sockets for long. On a proxy served by connection shards
//! ([`crate::connection::shards`]) each shard reuses only the connections it drives, kept in a part of the pool
//! with its own lock, so shards do not contend for one lock on every call.

use crate::connection::body::Body;
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
    /// The shard whose thread drives it ([`crate::connection::shards::current`] when it was dialled).
    pub shard: Option<usize>,
}

struct IdleConn {
    conn: UpstreamConn,
    /// When it was last handed back, or last seen still busy by a sweep.
    since: Instant,
}

/// How many separately locked parts the pool has: a shard's connections live in the part of its
/// index (modulo this), so two shards do not take one lock, or pull one cache line back and forth,
/// on every call. More shards than parts share parts, correctly and a little slower.
const PARTS: usize = 16;

/// One part of the pool, on its own cache lines (128 bytes: adjacent-line prefetch pairs them).
#[derive(Default)]
#[repr(align(128))]
struct Part(Mutex<HashMap<PoolKey, Vec<IdleConn>>>);

impl Part {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PoolKey, Vec<IdleConn>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The part a connection driven by `shard` is kept in; connections off the shards share part 0.
fn part_of(shard: Option<usize>) -> usize {
    shard.map_or(0, |s| (s + 1) % PARTS)
}

/// The session's idle upstream connections, shared by every client connection.
pub(crate) struct Pool {
    parts: [Part; PARTS],
    /// Whether the task closing idle connections runs (started with the first kept connection).
    expiring: AtomicBool,
}

impl Default for Pool {
    fn default() -> Pool {
        Pool {
            parts: std::array::from_fn(|_| Part::default()),
            expiring: AtomicBool::new(false),
        }
    }
}

impl Pool {
    /// A ready connection for `key` to one of `allowed`, the most recently used first. For a shard
    /// (`shard`, the caller's [`crate::connection::shards::current`]) only a connection that shard drives is
    /// handed out: one driven on another thread costs
    /// a cross-thread wake-up each way of every call for as long as it is reused (at one client
    /// connection that doubled the CPU of a call, docs/benchmarks.md), while dialling a shard its
    /// own costs one handshake. So each shard keeps its own idle connections, as each nginx worker
    /// keeps its own upstream keep-alive cache.
    pub fn take(
        &self,
        key: &PoolKey,
        allowed: &[SocketAddr],
        shard: Option<usize>,
    ) -> Option<UpstreamConn> {
        match shard {
            Some(_) => self.take_from(part_of(shard), key, allowed, shard),
            // Off the shards any connection is reused, whichever part it is in.
            None => (0..PARTS).find_map(|part| self.take_from(part, key, allowed, None)),
        }
    }

    fn take_from(
        &self,
        part: usize,
        key: &PoolKey,
        allowed: &[SocketAddr],
        shard: Option<usize>,
    ) -> Option<UpstreamConn> {
        let mut idle = self.parts[part].lock();
        let conns = idle.get_mut(key)?;
        // Newest first, dropping the closed ones met on the way: a call stops at the first ready
        // connection instead of checking every idle one (the sweep drops the rest).
        let mut at = conns.len();
        while at > 0 {
            at -= 1;
            let c = &conns[at].conn;
            if c.sender.is_closed() {
                conns.remove(at);
            } else if (shard.is_none() || c.shard == shard)
                && c.sender.is_ready()
                && allowed.contains(&c.addr)
            {
                return Some(conns.remove(at).conn);
            }
        }
        None
    }

    /// Hands a connection back. It becomes ready again once its response body has been read; a
    /// connection that is never ready again (a long event stream) waits here until it closes or is
    /// pushed out. Beyond `cap` per destination and shard the oldest of that shard is dropped (hyper
    /// finishes a response in flight on it, then closes it).
    pub fn put(self: &Arc<Self>, key: &PoolKey, conn: UpstreamConn, options: &ProxyOptions) {
        let cap = options.max_idle_upstream;
        if cap == 0 {
            return;
        }
        // Read first: a swap on every call would pull the flag's cache line from shard to shard.
        if !self.expiring.load(Ordering::Relaxed) && !self.expiring.swap(true, Ordering::Relaxed) {
            tokio::spawn(expire_idle(
                Arc::downgrade(self),
                options.upstream_idle_timeout,
            ));
        }
        let mut idle = self.parts[part_of(conn.shard)].lock();
        let idle_conn = IdleConn {
            conn,
            since: Instant::now(),
        };
        let Some(conns) = idle.get_mut(key) else {
            // A new destination: the only time the key is cloned (a host name's clone allocates).
            idle.insert(key.clone(), vec![idle_conn]);
            return;
        };
        let same_shard = |c: &IdleConn| c.conn.shard == idle_conn.conn.shard;
        let full = |conns: &Vec<IdleConn>| conns.iter().filter(|c| same_shard(c)).count() >= cap;
        // Closed connections are dropped only when they would take a place (take and the sweep
        // drop them too): checking each on every call cost an atomic read per idle connection.
        if full(conns) {
            conns.retain(|c| !c.conn.sender.is_closed());
        }
        if full(conns)
            && let Some(oldest) = conns.iter().position(same_shard)
        {
            conns.remove(oldest);
        }
        conns.push(idle_conn);
    }

    /// Drops connections idle for `max_idle` or longer (all idle ones for zero) and destinations left
    /// with none; returns how many connections were dropped.
    pub fn expire(&self, max_idle: Duration) -> usize {
        let now = Instant::now();
        let mut dropped = 0;
        for part in &self.parts {
            dropped += Self::expire_part(&mut part.lock(), now, max_idle);
        }
        dropped
    }

    fn expire_part(
        idle: &mut HashMap<PoolKey, Vec<IdleConn>>,
        now: Instant,
        max_idle: Duration,
    ) -> usize {
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

#[cfg(test)]
mod tests {
    use super::*;
    use hyper_util::rt::TokioIo;
    use tokio::io::DuplexStream;

    /// An HTTP/1.1 client connection over an in-memory pipe, as if dialled by `shard`, and the
    /// pipe's far end (the upstream).
    async fn dialled(shard: Option<usize>, addr: SocketAddr) -> (UpstreamConn, DuplexStream) {
        let (ours, theirs) = tokio::io::duplex(1024);
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(ours))
            .await
            .unwrap();
        tokio::spawn(connection);
        let conn = UpstreamConn {
            sender,
            addr,
            shard,
        };
        (conn, theirs)
    }

    /// A ready connection; its far end is held open for the whole test.
    async fn conn(shard: Option<usize>, addr: SocketAddr) -> UpstreamConn {
        let (mut conn, theirs) = dialled(shard, addr).await;
        std::mem::forget(theirs);
        conn.sender.ready().await.unwrap();
        conn
    }

    /// A connection whose far end has hung up, once the pool's view of it says closed.
    async fn closed_conn(shard: Option<usize>, addr: SocketAddr) -> UpstreamConn {
        let (conn, theirs) = dialled(shard, addr).await;
        drop(theirs);
        for _ in 0..200 {
            if conn.sender.is_closed() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(conn.sender.is_closed());
        conn
    }

    #[tokio::test]
    async fn a_closed_connection_is_passed_over_and_dropped() {
        let (pool, addr, options) = (fresh(), upstream(), ProxyOptions::default());
        pool.put(&key(), conn(Some(0), addr).await, &options);
        pool.put(&key(), closed_conn(Some(0), addr).await, &options);
        assert!(
            pool.take(&key(), &[addr], Some(0)).is_some(),
            "the open one"
        );
        assert!(pool.take(&key(), &[addr], Some(0)).is_none());
        let part = pool.parts[part_of(Some(0))].lock();
        assert!(
            part.get(&key()).is_none_or(Vec::is_empty),
            "the closed one is gone"
        );
    }

    fn fresh() -> Arc<Pool> {
        Arc::new(Pool::default())
    }

    fn upstream() -> SocketAddr {
        "192.0.2.1:443".parse().unwrap()
    }

    fn key() -> PoolKey {
        PoolKey {
            host: Host::parse("upstream.test").unwrap(),
            port: 443,
            tls: true,
        }
    }

    #[tokio::test]
    async fn a_shard_takes_only_the_connections_it_drives() {
        let (pool, addr, options) = (fresh(), upstream(), ProxyOptions::default());
        pool.put(&key(), conn(Some(0), addr).await, &options);

        assert!(
            pool.take(&key(), &[addr], Some(1)).is_none(),
            "shard 1 dials its own"
        );
        let taken = pool
            .take(&key(), &[addr], Some(0))
            .expect("shard 0 reuses its own");
        assert_eq!(taken.shard, Some(0));
        pool.put(&key(), taken, &options);
        // Off the shards (a proxy served on the caller's runtime) any connection is reused.
        assert!(pool.take(&key(), &[addr], None).is_some());
    }

    #[tokio::test]
    async fn shards_that_share_a_part_still_take_only_their_own() {
        let (pool, addr, options) = (fresh(), upstream(), ProxyOptions::default());
        let (one, other) = (1, 1 + PARTS);
        assert_eq!(part_of(Some(one)), part_of(Some(other)));
        pool.put(&key(), conn(Some(one), addr).await, &options);
        assert!(pool.take(&key(), &[addr], Some(other)).is_none());
        pool.put(&key(), conn(Some(other), addr).await, &options);
        let taken = pool.take(&key(), &[addr], Some(other)).unwrap();
        assert_eq!(taken.shard, Some(other));
        let taken = pool.take(&key(), &[addr], Some(one)).unwrap();
        assert_eq!(taken.shard, Some(one));
        assert!(pool.take(&key(), &[addr], Some(one)).is_none());
    }

    #[tokio::test]
    async fn the_idle_cap_holds_per_shard() {
        let (pool, addr) = (fresh(), upstream());
        let options = ProxyOptions {
            max_idle_upstream: 2,
            ..ProxyOptions::default()
        };
        for shard in [0, 0, 0, 1] {
            pool.put(&key(), conn(Some(shard), addr).await, &options);
        }
        let mut taken = Vec::new();
        while let Some(c) = pool.take(&key(), &[addr], Some(0)) {
            taken.push(c);
        }
        assert_eq!(taken.len(), 2, "shard 0 keeps at most two");
        assert!(
            pool.take(&key(), &[addr], Some(1)).is_some(),
            "shard 0's overflow did not push out shard 1's connection"
        );
    }
}
