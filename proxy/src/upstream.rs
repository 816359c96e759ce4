//! Connections to admitted destinations: dial only a destination's checked addresses (each with a
//! timeout), TLS toward it verified against the webpki roots and `--upstream-ca` (a failure is an
//! error, never a downgrade), HTTP/1.1 on top, and one proxy-wide [`Pool`] of idle connections so
//! requests reuse them: the requests of a tunnel, of a plain-HTTP client connection, and of other
//! clients of the same session going to the same place.
//!
//! Whether TLS is used is the destination's to say, not the caller's: an `https` MCP server is always
//! reached over TLS, whatever the client spoke to the proxy.
//!
//! Reuse never widens what admission decided. A pooled connection is keyed by host, port and TLS, and
//! remembers the address it was dialled to; a request takes it only when that address is among the
//! addresses its own admission checked just now. Every request is decided and recorded on its own
//! before it is sent, whichever connection carries it. Idle connections are closed after
//! `upstream_idle_timeout` (and at most `max_idle_upstream` are kept per destination), so an idle
//! session holds no upstream sockets for long.

use crate::admit::Destination;
use crate::error::ProxyError;
use crate::options::ProxyOptions;
use crate::respond::Body;
use crate::server::Shared;
use fenzi_policy::host::Host;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Opens a TCP connection to the first of `dest`'s checked addresses that answers.
pub(crate) async fn dial(shared: &Shared, dest: &Destination) -> Result<TcpStream, ProxyError> {
    dial_checked(shared, dest).await.map(|(stream, _)| stream)
}

/// [`dial`], also naming which checked address answered.
async fn dial_checked(
    shared: &Shared,
    dest: &Destination,
) -> Result<(TcpStream, SocketAddr), ProxyError> {
    let after = shared.options.connect_timeout;
    let mut last = None;
    for addr in &dest.addrs {
        match timeout(after, shared.network.connect(*addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok((stream, *addr));
            }
            Ok(Err(error)) => last = Some(ProxyError::Connect { addr: *addr, error }),
            Err(_) => last = Some(ProxyError::ConnectTimeout { addr: *addr, after }),
        }
    }
    Err(last.unwrap_or_else(|| ProxyError::NoAddress {
        host: dest.host.to_string(),
    }))
}

/// The name the upstream's certificate must carry: the DNS name, or the IP for an IP literal.
fn server_name(host: &Host) -> Result<ServerName<'static>, ProxyError> {
    match host {
        Host::Ip(ip) => Ok(ServerName::IpAddress((*ip).into())),
        Host::Name(name) => ServerName::try_from(name.clone())
            .map_err(|e| ProxyError::TlsSetup(format!("{name} cannot be a TLS server name: {e}"))),
    }
}

/// What makes two upstream connections interchangeable (besides the dialled address).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PoolKey {
    host: Host,
    port: u16,
    tls: bool,
}

struct IdleConn {
    sender: SendRequest<Body>,
    /// The checked address this connection was dialled to.
    addr: SocketAddr,
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
    /// A ready connection for `key` to one of `allowed`, the most recently used first.
    fn take(
        &self,
        key: &PoolKey,
        allowed: &[SocketAddr],
    ) -> Option<(SendRequest<Body>, SocketAddr)> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let conns = idle.get_mut(key)?;
        conns.retain(|c| !c.sender.is_closed());
        let at = conns
            .iter()
            .rposition(|c| c.sender.is_ready() && allowed.contains(&c.addr))?;
        let conn = conns.remove(at);
        Some((conn.sender, conn.addr))
    }

    /// Hands a connection back. It becomes ready again once its response body has been read; a
    /// connection that is never ready again (a long event stream) waits here until it closes or is
    /// pushed out. Beyond `cap` per destination the oldest is dropped (hyper finishes a response in
    /// flight on it, then closes it).
    fn put(
        self: &Arc<Self>,
        key: PoolKey,
        conn: (SendRequest<Body>, SocketAddr),
        options: &ProxyOptions,
    ) {
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
        let (sender, addr) = conn;
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let conns = idle.entry(key).or_default();
        conns.retain(|c| !c.sender.is_closed());
        if conns.len() >= cap {
            conns.remove(0);
        }
        conns.push(IdleConn {
            sender,
            addr,
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
                if c.sender.is_closed() {
                    return false;
                }
                // Still carrying a response body: busy, not idle. Its idle time starts from the
                // last sweep that saw it busy, not from when its response began.
                if !c.sender.is_ready() {
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

/// The way to one admitted destination for the requests of one tunnel or one plain-HTTP request.
pub(crate) struct Upstream {
    dest: Arc<Destination>,
    /// Whether the requests reached the proxy inside TLS.
    client_tls: bool,
    key: PoolKey,
}

impl Upstream {
    /// The way to `dest` for requests that reached the proxy over TLS (`client_tls`) or not.
    pub fn new(dest: Arc<Destination>, client_tls: bool) -> Upstream {
        let key = PoolKey {
            host: dest.host.clone(),
            port: dest.port,
            tls: dest.upstream_tls(client_tls),
        };
        Upstream {
            client_tls,
            key,
            dest,
        }
    }

    /// True when a request is in TLS on both hops (client to proxy, proxy to upstream): the only
    /// requests a secret value may be written into.
    pub fn secure(&self) -> bool {
        self.client_tls && self.key.tls
    }

    /// Sends `req` (origin-form, Host set) and returns the response head; the body streams.
    pub async fn send(
        &self,
        shared: &Shared,
        mut req: Request<Body>,
    ) -> Result<Response<Incoming>, ProxyError> {
        let wait = shared.options.response_header_timeout;
        while let Some((mut sender, addr)) = self.take_pooled(shared) {
            match timeout(wait, sender.try_send_request(req)).await {
                Err(_) => return Err(ProxyError::UpstreamTimeout(wait)),
                Ok(Ok(response)) => {
                    self.keep(shared, sender, addr);
                    return Ok(response);
                }
                // The pooled connection closed before the request went out: it is intact, try the
                // next one (or a fresh connection). Once any of it was written, it is not resent.
                Ok(Err(mut e)) => match e.take_message() {
                    Some(unsent) => req = unsent,
                    None => return Err(ProxyError::UpstreamHttp(e.into_error())),
                },
            }
        }
        let (mut sender, addr) = self.connect(shared).await?;
        let response = timeout(wait, sender.send_request(req))
            .await
            .map_err(|_| ProxyError::UpstreamTimeout(wait))?
            .map_err(ProxyError::UpstreamHttp)?;
        self.keep(shared, sender, addr);
        Ok(response)
    }

    fn take_pooled(&self, shared: &Shared) -> Option<(SendRequest<Body>, SocketAddr)> {
        shared.upstreams.take(&self.key, &self.dest.addrs)
    }

    fn keep(&self, shared: &Shared, sender: SendRequest<Body>, addr: SocketAddr) {
        let key = self.key.clone();
        shared.upstreams.put(key, (sender, addr), &shared.options);
    }

    async fn connect(
        &self,
        shared: &Shared,
    ) -> Result<(SendRequest<Body>, SocketAddr), ProxyError> {
        let (tcp, addr) = dial_checked(shared, &self.dest).await?;
        if !self.key.tls {
            return Ok((handshake(tcp).await?, addr));
        }
        let name = server_name(&self.dest.host)?;
        let connector = tokio_rustls::TlsConnector::from(shared.upstream_tls.clone());
        let after = shared.options.tls_handshake_timeout;
        let host = self.dest.host.to_string();
        let tls = timeout(after, connector.connect(name, tcp))
            .await
            .map_err(|_| ProxyError::UpstreamTlsTimeout {
                host: host.clone(),
                after,
            })?
            .map_err(|error| ProxyError::UpstreamTls { host, error })?;
        Ok((handshake(tls).await?, addr))
    }
}

async fn handshake<T>(io: T) -> Result<SendRequest<Body>, ProxyError>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::Builder::new()
        .handshake(TokioIo::new(io))
        .await
        .map_err(ProxyError::UpstreamHttp)?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("upstream connection ended: {e}");
        }
    });
    Ok(sender)
}
