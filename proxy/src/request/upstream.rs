//! Connections to admitted destinations: dial only a destination's checked addresses (each with a
//! timeout), TLS toward it verified against the webpki roots and `--upstream-ca` (a failure is an
//! error, never a downgrade), HTTP/1.1 on top, and idle connections taken from and handed back to
//! the session's [`crate::session::pool::Pool`]. Every request is decided and recorded on its own before it
//! is sent, whichever connection carries it.
//!
//! Whether TLS is used is the destination's to say, not the caller's: an `https` MCP server is always
//! reached over TLS, whatever the client spoke to the proxy.
//!
//! A local server (DESIGN §18) is reached through its bridge instead of a socket: an in-memory
//! HTTP/1.1 connection to [`crate::bridge::Bridge::handle`], pooled like any other, after the same
//! decisions. Nothing is dialled for it; a session without its bridge refuses its requests.

use crate::connection::body::Body;
use crate::error::ProxyError;
use crate::request::admit::{Destination, Handling};
use crate::session::context::SessionContext;
use crate::session::pool::{PoolKey, UpstreamConn};
use fenzi_policy::host::Host;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// The address a local server's destination carries, and its pooled connections: no socket has it
/// ([`dial`] refuses a bridged destination before looking at its addresses).
pub(crate) const BRIDGE_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);

/// Bytes the in-memory connection to a bridge buffers each way.
const BRIDGE_BUFFER: usize = 64 * 1024;

/// Opens a TCP connection to the first of `dest`'s checked addresses that answers.
pub(crate) async fn dial(
    session: &SessionContext,
    dest: &Destination,
) -> Result<TcpStream, ProxyError> {
    let dialled = dial_checked(session, dest).await;
    if let (Some(metrics), Err(error)) = (&session.metrics, &dialled) {
        metrics.upstream_error(error);
    }
    dialled.map(|(stream, _)| stream)
}

/// [`dial`], also naming which checked address answered.
async fn dial_checked(
    session: &SessionContext,
    dest: &Destination,
) -> Result<(TcpStream, SocketAddr), ProxyError> {
    if dest.bridged() {
        // A local server's name is fenzi's own; it is served by the bridge, not the network.
        return Err(ProxyError::LocalServer {
            server: dest.host.to_string(),
            why: "a local server is reached through its bridge, never dialled",
        });
    }
    let after = session.options.connect_timeout;
    let mut last = None;
    for addr in &dest.addrs {
        match timeout(after, session.network.connect(*addr)).await {
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

    /// The destination its requests were admitted for.
    pub fn destination(&self) -> &Destination {
        &self.dest
    }

    /// True when a request is in TLS on both hops (client to proxy, proxy to upstream): the only
    /// requests a secret value may be written into.
    pub fn secure(&self) -> bool {
        self.client_tls && self.key.tls
    }

    /// Sends `req` (origin-form, Host set) and returns the response head; the body streams.
    pub async fn send(
        &self,
        session: &SessionContext,
        req: Request<Body>,
    ) -> Result<Response<Incoming>, ProxyError> {
        let Some(metrics) = &session.metrics else {
            return self.send_unmetered(session, req).await;
        };
        // Dropped with the future too, so a request cut by its `limits` timeout is timed as well.
        let _timer = metrics.upstream();
        let sent = self.send_unmetered(session, req).await;
        if let Err(error) = &sent {
            metrics.upstream_error(error);
        }
        sent
    }

    async fn send_unmetered(
        &self,
        session: &SessionContext,
        mut req: Request<Body>,
    ) -> Result<Response<Incoming>, ProxyError> {
        let wait = session.options.response_header_timeout;
        while let Some(mut conn) = self.take_pooled(session) {
            match timeout(wait, conn.sender.try_send_request(req)).await {
                Err(_) => return Err(ProxyError::UpstreamTimeout(wait)),
                Ok(Ok(response)) => {
                    self.keep(session, conn);
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
        // Dialling is the rare path (a shard reuses its connections) and its future is most of
        // this one's size: on the heap, it is not moved with every call.
        let mut conn = Box::pin(self.connect(session)).await?;
        let response = timeout(wait, conn.sender.send_request(req))
            .await
            .map_err(|_| ProxyError::UpstreamTimeout(wait))?
            .map_err(ProxyError::UpstreamHttp)?;
        self.keep(session, conn);
        Ok(response)
    }

    fn take_pooled(&self, session: &SessionContext) -> Option<UpstreamConn> {
        session.upstreams.take(
            &self.key,
            &self.dest.addrs,
            crate::connection::shards::current(),
        )
    }

    fn keep(&self, session: &SessionContext, conn: UpstreamConn) {
        session.upstreams.put(&self.key, conn, &session.options);
    }

    async fn connect(&self, session: &SessionContext) -> Result<UpstreamConn, ProxyError> {
        if let Handling::Mcp(server) = &self.dest.handling
            && self.dest.bridged()
        {
            return bridge_connection(session, &server.name).await;
        }
        let (tcp, addr) = dial_checked(session, &self.dest).await?;
        // hyper's connection task is spawned here, on this thread's runtime: its shard drives it.
        let conn = |sender| UpstreamConn {
            sender,
            addr,
            shard: crate::connection::shards::current(),
        };
        if !self.key.tls {
            return Ok(conn(handshake(tcp).await?));
        }
        let name = server_name(&self.dest.host)?;
        let connector = tokio_rustls::TlsConnector::from(session.upstream_tls.clone());
        let after = session.options.tls_handshake_timeout;
        let host = self.dest.host.to_string();
        let tls = timeout(after, connector.connect(name, tcp))
            .await
            .map_err(|_| ProxyError::UpstreamTlsTimeout {
                host: host.clone(),
                after,
            })?
            .map_err(|error| ProxyError::UpstreamTls { host, error })?;
        Ok(conn(handshake(tls).await?))
    }
}

/// An in-memory HTTP/1.1 connection to local server `name`'s bridge: the request path's client on
/// one end, the bridge serving the other, as a remote server's socket would be.
async fn bridge_connection(
    session: &SessionContext,
    name: &str,
) -> Result<UpstreamConn, ProxyError> {
    let bridge = session
        .bridges
        .get()
        .and_then(|bridges| bridges.get(name))
        .cloned()
        .ok_or_else(|| ProxyError::LocalServer {
            server: name.to_string(),
            why: "it is not running in this session (fenzi starts local servers when a session \
                  starts; one added since waits for the next session)",
        })?;
    let (client, server) = tokio::io::duplex(BRIDGE_BUFFER);
    tokio::spawn(bridge.serve_connection(server));
    Ok(UpstreamConn {
        sender: handshake(client).await?,
        addr: BRIDGE_ADDR,
        shard: crate::connection::shards::current(),
    })
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
