//! Connections to one admitted destination: dial only its checked addresses (each with a timeout), TLS
//! toward it verified against the webpki roots and `--upstream-ca` (a failure is an error, never a
//! downgrade), HTTP/1.1 on top, and a small pool so the requests of one tunnel reuse connections.
//! Whether TLS is used is the destination's to say, not the caller's: an `https` MCP server is always
//! reached over TLS, whatever the client spoke to the proxy.

use crate::admit::Destination;
use crate::error::ProxyError;
use crate::respond::Body;
use crate::server::Shared;
use fenzi_policy::host::Host;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Opens a TCP connection to the first of `dest`'s checked addresses that answers.
pub(crate) async fn dial(shared: &Shared, dest: &Destination) -> Result<TcpStream, ProxyError> {
    let after = shared.options.connect_timeout;
    let mut last = None;
    for addr in &dest.addrs {
        match timeout(after, shared.network.connect(*addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
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

/// Connections to one destination, reused across the requests of one tunnel (or made fresh for each
/// plain-HTTP request).
pub(crate) struct Upstream {
    dest: Arc<Destination>,
    /// Whether the requests reached the proxy inside TLS.
    client_tls: bool,
    /// Whether the proxy talks TLS to the destination.
    tls: bool,
    idle: Mutex<Vec<SendRequest<Body>>>,
}

impl Upstream {
    /// Connections to `dest` for requests that reached the proxy over TLS (`client_tls`) or not.
    pub fn new(dest: Arc<Destination>, client_tls: bool) -> Upstream {
        Upstream {
            tls: dest.upstream_tls(client_tls),
            client_tls,
            dest,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// True when a request is in TLS on both hops (client to proxy, proxy to upstream): the only
    /// requests a secret value may be written into.
    pub fn secure(&self) -> bool {
        self.client_tls && self.tls
    }

    /// Sends `req` (origin-form, Host set) and returns the response head; the body streams.
    pub async fn send(
        &self,
        shared: &Shared,
        mut req: Request<Body>,
    ) -> Result<Response<Incoming>, ProxyError> {
        let wait = shared.options.response_header_timeout;
        if let Some(mut sender) = self.take_ready() {
            match timeout(wait, sender.try_send_request(req)).await {
                Err(_) => return Err(ProxyError::UpstreamTimeout(wait)),
                Ok(Ok(response)) => {
                    self.keep(shared, sender);
                    return Ok(response);
                }
                // The pooled connection closed before the request went out: it is intact, retry once
                // on a fresh connection. Once any of it was written, it is not resent.
                Ok(Err(mut e)) => match e.take_message() {
                    Some(unsent) => req = unsent,
                    None => return Err(ProxyError::UpstreamHttp(e.into_error())),
                },
            }
        }
        let mut sender = self.connect(shared).await?;
        let response = timeout(wait, sender.send_request(req))
            .await
            .map_err(|_| ProxyError::UpstreamTimeout(wait))?
            .map_err(ProxyError::UpstreamHttp)?;
        self.keep(shared, sender);
        Ok(response)
    }

    fn take_ready(&self) -> Option<SendRequest<Body>> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.retain(|s| !s.is_closed());
        let at = idle.iter().position(|s| s.is_ready())?;
        Some(idle.swap_remove(at))
    }

    /// Keeps a connection for reuse. It becomes ready again once the response body has been read; a
    /// connection that is never ready again (a long event stream) just waits in the list.
    fn keep(&self, shared: &Shared, sender: SendRequest<Body>) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.retain(|s| !s.is_closed());
        if idle.len() < shared.options.max_idle_upstream {
            idle.push(sender);
        }
    }

    async fn connect(&self, shared: &Shared) -> Result<SendRequest<Body>, ProxyError> {
        let tcp = dial(shared, &self.dest).await?;
        if !self.tls {
            return handshake(tcp).await;
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
        handshake(tls).await
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
