//! An intercepted tunnel: the proxy terminates the client's TLS with a leaf for the CONNECT host (or,
//! when the client speaks plain HTTP inside the tunnel, reads it as is), serves HTTP/1.1 or h2 (by ALPN)
//! on the decrypted stream, and hands every request to [`crate::request::exchange`] once it has checked
//! that the CONNECT target, the TLS server name and the Host (or `:authority`) agree by name. The
//! upstream transport follows the policy for an MCP server (an `https` server is reached over verified
//! TLS only, so plain HTTP inside its tunnel is refused, never sent on in clear text) and mirrors the
//! client for a plain host. A TLS server name holding one of the session's placeholders is refused
//! (`credential_endpoint_mismatch`, recorded with the secret's name) and the handshake abandoned; so
//! is a request whose Host or `:authority` holds one, before it is compared with the target. A
//! request hyper refuses as malformed HTTP/1.1, an h2 request the h2 library refuses by itself
//! ([`crate::connection::h2_streams`]), and an h2 connection that ends in a protocol error of the client's, are
//! each recorded as [`Refusal::unparsed`] (see [`crate::connection::malformed`]). The checks on names are in
//! [`crate::request::authority`].

use crate::audit::sink::Subject;
use crate::connection::body::Body;
use crate::connection::graceful::serve_until_stopped;
use crate::connection::h2_streams::{H2Streams, client_frames};
use crate::connection::io::Prefixed;
use crate::connection::malformed::{HeadProbe, Probed};
use crate::error::ProxyError;
use crate::request::admit::Destination;
use crate::request::authority::{
    check_no_placeholder, check_request_authorities, checked_authority, sni_mismatch,
};
use crate::request::context::RequestContext;
use crate::request::exchange::exchange;
use crate::request::refusal::Refusal;
use crate::request::upstream::Upstream;
use crate::session::context::{ConnGuard, SessionContext};
use fenzi_policy::Decision;
use http::{HeaderValue, Method, Request, Response};
use hyper::body::Incoming;
use hyper::service::{Service, service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::time::timeout;
use tokio_rustls::LazyConfigAcceptor;

/// First byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;
/// h2 keep-alive pings find dead clients on otherwise idle connections.
const H2_PING_INTERVAL: Duration = Duration::from_secs(30);

/// Serves the tunnel of an admitted CONNECT (or a transparent connection) until the client closes
/// it.
pub(crate) async fn serve<T>(
    session: Arc<SessionContext>,
    dest: Arc<Destination>,
    mut io: T,
    guard: ConnGuard,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let subject = dest.subject("CONNECT", None);
    let handshake = session.options.tls_handshake_timeout;
    let mut first = [0u8; 1];
    match timeout(handshake, io.read(&mut first)).await {
        Ok(Ok(1)) => {}
        // The client closed or stayed silent: no request, nothing to decide.
        _ => return,
    }
    let io = Prefixed::new(first.to_vec(), io);
    if first[0] != TLS_HANDSHAKE {
        let tunnel = Tunnel::new(session, dest, false, None);
        return tunnel.serve_http(io, false, guard).await;
    }

    let start = match timeout(
        handshake,
        LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io),
    )
    .await
    {
        Ok(Ok(start)) => start,
        Ok(Err(e)) => return failed(&session, &subject, ProxyError::ClientTls(e)),
        Err(_) => return failed(&session, &subject, ProxyError::ClientTlsTimeout(handshake)),
    };
    let sni = start.client_hello().server_name().map(str::to_string);
    // A placeholder sent as the TLS server name: refused, recorded with the secret's name, and the
    // handshake abandoned (nothing was dialled for this tunnel yet).
    if let Some(name) = &sni
        && let Err(refusal) = check_no_placeholder(&session, name, "the TLS server name", &subject)
    {
        return refusal.record(&session);
    }
    let sni_problem = sni_mismatch(&dest.host, sni.as_deref());
    // The leaf is always the CONNECT host's, whatever name the client asked for.
    let config = match session.ca.server_config(&dest.host) {
        Ok(config) => config,
        Err(e) => {
            let error = ProxyError::TlsSetup(e.to_string());
            return failed(&session, &subject, error);
        }
    };
    let stream = match timeout(handshake, start.into_stream(config)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return failed(&session, &subject, ProxyError::ClientTls(e)),
        Err(_) => return failed(&session, &subject, ProxyError::ClientTlsTimeout(handshake)),
    };
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
    let tunnel = Tunnel::new(session, dest, true, sni_problem);
    tunnel.serve_http(stream, h2, guard).await
}

/// Records the failure of a tunnel's TLS set-up: nothing is forwarded, and no one is left to answer.
fn failed(session: &SessionContext, subject: &Subject, error: ProxyError) {
    Refusal::failed(subject, error).record(session);
}

/// The requests of one intercepted tunnel.
struct Tunnel {
    session: Arc<SessionContext>,
    dest: Arc<Destination>,
    upstream: Upstream,
    /// Whether the client speaks TLS inside the tunnel.
    tls: bool,
    sni_problem: Option<String>,
    /// The refusal of every request when the client speaks plain HTTP to an https MCP server.
    transport_problem: Option<Decision>,
}

impl Tunnel {
    fn new(
        session: Arc<SessionContext>,
        dest: Arc<Destination>,
        tls: bool,
        sni_problem: Option<String>,
    ) -> Arc<Tunnel> {
        Arc::new(Tunnel {
            upstream: Upstream::new(dest.clone(), tls),
            transport_problem: dest.check_transport(tls),
            session,
            dest,
            tls,
            sni_problem,
        })
    }

    /// The service for one connection of this tunnel. `dispatched` is told of every request it is
    /// handed (what tells the requests refused below it from the rest); a request is in flight
    /// (never evicted to make room) from its head to its response head.
    fn service(
        self: &Arc<Self>,
        guard: &ConnGuard,
        dispatched: impl Fn() + Send + Sync + 'static,
    ) -> impl Service<
        Request<Incoming>,
        Response = Response<Body>,
        Error = Infallible,
        Future: Send + 'static,
    > + Send
    + 'static {
        let (tunnel, guard) = (self.clone(), guard.clone());
        service_fn(move |req| {
            dispatched();
            let (tunnel, guard) = (tunnel.clone(), guard.clone());
            let in_flight = guard.request(&req);
            async move { Ok::<_, Infallible>(in_flight.answered(tunnel.handle(&guard, req).await)) }
        })
    }

    async fn serve_http<T>(self: Arc<Self>, io: T, h2: bool, guard: ConnGuard)
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        if h2 {
            self.serve_h2(io, guard).await
        } else {
            self.serve_h1(io, guard).await
        }
    }

    async fn serve_h2<T>(self: Arc<Self>, io: T, mut guard: ConnGuard)
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let streams = H2Streams::new();
        let counted = streams.clone();
        let service = self.service(&guard, move || counted.dispatched());
        let io = TokioIo::new(client_frames(io, streams.clone()));
        let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        builder
            .timer(TokioTimer::new())
            .keep_alive_interval(Some(H2_PING_INTERVAL));
        let conn = builder.serve_connection(io, service);
        let result = serve_until_stopped!(conn, guard.stopping(), {
            // Streams opened from now on are refused by our GOAWAY, not for anything the client
            // did wrong: they are not counted.
            streams.stop_counting();
        });
        if let Err(e) = &result {
            tracing::debug!(host = %self.dest.host, "h2 tunnel ended: {e}");
        }
        // One record per request that never reached `handle`. A protocol error that ends the
        // connection is one too, when it did not come with such a request (DATA on stream 0).
        let broken = result.as_ref().err().and_then(h2_protocol_error);
        let refused = streams.undispatched();
        let (count, detail) = match broken {
            Some(what) => (
                refused.max(1),
                format!("the connection broke the HTTP/2 protocol: {what}"),
            ),
            None => (
                refused,
                "an HTTP/2 request the h2 layer refused before the proxy could decide it \
                 (a malformed head, over the stream limit, or cancelled by the client)"
                    .to_string(),
            ),
        };
        let subject = self.dest.subject("-", None);
        for _ in 0..count {
            Refusal::unparsed(&subject, &detail).record(&self.session);
        }
    }

    async fn serve_h1<T>(self: Arc<Self>, io: T, mut guard: ConnGuard)
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let probe = HeadProbe::new();
        let dispatched = probe.clone();
        let service = self.service(&guard, move || dispatched.dispatched());
        // Bytes of an unfinished request head are not activity: a client dribbling heads inside
        // a tunnel is as evictable as one on the proxy port.
        guard.reading_heads();
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.session.options.idle_timeout)
            .keep_alive(true);
        let io = TokioIo::new(Probed::new(io, probe.clone()));
        let conn = builder.serve_connection(io, service);
        let result = serve_until_stopped!(conn, guard.stopping());
        match result {
            Err(e) if e.is_parse() => {
                let line = probe.refused();
                let method = line.method.as_deref().unwrap_or("-");
                let subject = self.dest.subject(method, line.target.path());
                let detail = format!("the request is not valid HTTP/1.1: {e}");
                Refusal::unparsed(&subject, &detail).record(&self.session);
            }
            Err(e) => tracing::debug!(host = %self.dest.host, "tunnel connection ended: {e}"),
            Ok(()) => {}
        }
    }

    async fn handle(&self, guard: &ConnGuard, req: Request<Incoming>) -> Response<Body> {
        let cx = RequestContext::new(&self.session, guard, &self.upstream, &req);
        match self.check(&cx.subject, &req) {
            Ok(host) => exchange(cx, req, host).await,
            Err(refusal) => refusal.answer(&self.session),
        }
    }

    /// The Host value to forward, once the request may go to this tunnel's destination at all.
    fn check(&self, subject: &Subject, req: &Request<Incoming>) -> Result<HeaderValue, Refusal> {
        if let Some(refused) = &self.transport_problem {
            return Err(Refusal::denied(subject, refused));
        }
        // An authority holding a placeholder is an attempt to carry a secret out in a name: it is
        // named as such, before the authority is compared with the target.
        check_request_authorities(&self.session, req, subject)?;
        if let Some(problem) = &self.sni_problem {
            return Err(Refusal::bad_request(subject, problem));
        }
        if req.method() == Method::CONNECT {
            let why = "CONNECT inside a tunnel is not allowed";
            return Err(Refusal::bad_request(subject, why));
        }
        let default_port = if self.tls { 443 } else { 80 };
        checked_authority(req, &self.dest.host, self.dest.port, default_port)
            .map_err(|why| Refusal::bad_request(subject, &why))
    }
}

/// What a client did wrong, when an h2 connection ended because our side found it breaking the
/// protocol (h2 answered with GOAWAY and an error code); `None` for a client that hung up, sent its
/// own GOAWAY, or a timeout. Streams the library resets one by one (a malformed request on a
/// healthy connection) are not reported by hyper: [`H2Streams`] counts them.
fn h2_protocol_error(error: &hyper::Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            let reason = h2.reason()?;
            return (h2.is_go_away() && h2.is_library() && reason != h2::Reason::NO_ERROR)
                .then(|| reason.description().to_string());
        }
        source = e.source();
    }
    None
}
