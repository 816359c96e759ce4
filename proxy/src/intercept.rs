//! An intercepted tunnel: the proxy terminates the client's TLS with a leaf for the CONNECT host (or,
//! when the client speaks plain HTTP inside the tunnel, reads it as is), serves HTTP/1.1 or h2 (by ALPN)
//! on the decrypted stream, and hands every request to [`crate::forward::exchange`] once it has checked
//! that the CONNECT target, the TLS server name and the Host (or `:authority`) agree by name. The
//! upstream transport follows the policy for an MCP server (an `https` server is reached over verified
//! TLS only, so plain HTTP inside its tunnel is refused, never sent on in clear text) and mirrors the
//! client for a plain host. A TLS server name holding one of the session's placeholders is refused
//! (`credential_endpoint_mismatch`, recorded with the secret's name) and the handshake abandoned; so
//! is a request whose Host or `:authority` holds one, before it is compared with the target. A
//! request hyper refuses as malformed HTTP/1.1, an h2 request the h2 library refuses by itself
//! ([`crate::server::h2_streams`]), and an h2 connection that ends in a protocol error of the
//! client's, are each recorded through [`crate::server::malformed`].

use crate::admit::Destination;
use crate::audit_sink::Subject;
use crate::error::ProxyError;
use crate::forward::{authority_refusal, bad_request, exchange, refuse_authority};
use crate::io::Prefixed;
use crate::respond::{self, Body};
use crate::server::h2_streams::{H2Streams, client_frames};
use crate::server::malformed::{HeadProbe, Probed, record_refused};
use crate::server::{ConnGuard, Shared};
use crate::upstream::Upstream;
use fenzi_policy::Decision;
use fenzi_policy::host::{Host, split_authority};
use http::header::HOST;
use http::{HeaderValue, Method, Request, Response};
use hyper::body::Incoming;
use hyper::service::{Service, service_fn};
use hyper::upgrade::Upgraded;
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

/// Serves the tunnel of an admitted CONNECT until the client closes it.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    dest: Arc<Destination>,
    upgraded: Upgraded,
    guard: ConnGuard,
) {
    let subject = dest.subject("CONNECT", None);
    let handshake = shared.options.tls_handshake_timeout;
    let mut io = TokioIo::new(upgraded);
    let mut first = [0u8; 1];
    match timeout(handshake, io.read(&mut first)).await {
        Ok(Ok(1)) => {}
        // The client closed or stayed silent: no request, nothing to decide.
        _ => return,
    }
    let io = Prefixed::new(first.to_vec(), io);
    if first[0] != TLS_HANDSHAKE {
        let tunnel = Tunnel::new(shared, dest, false, None);
        return tunnel.serve_http(io, false, guard).await;
    }

    let start = match timeout(
        handshake,
        LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io),
    )
    .await
    {
        Ok(Ok(start)) => start,
        Ok(Err(e)) => return failed(&shared, &subject, ProxyError::ClientTls(e)).await,
        Err(_) => return failed(&shared, &subject, ProxyError::ClientTlsTimeout(handshake)).await,
    };
    let sni = start.client_hello().server_name().map(str::to_string);
    // A placeholder sent as the TLS server name: refused, recorded with the secret's name, and the
    // handshake abandoned (nothing was dialled for this tunnel yet).
    if let Some(name) = &sni
        && let Some((refused, names)) = authority_refusal(&shared, name, "the TLS server name")
    {
        let mut entry = subject.decided(&refused);
        entry.secrets = names;
        let _ = shared.record(entry).await;
        return;
    }
    let sni_problem = sni_mismatch(&dest.host, sni.as_deref());
    // The leaf is always the CONNECT host's, whatever name the client asked for.
    let config = match shared.ca.server_config(&dest.host) {
        Ok(config) => config,
        Err(e) => {
            let error = ProxyError::TlsSetup(e.to_string());
            return failed(&shared, &subject, error).await;
        }
    };
    let stream = match timeout(handshake, start.into_stream(config)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return failed(&shared, &subject, ProxyError::ClientTls(e)).await,
        Err(_) => return failed(&shared, &subject, ProxyError::ClientTlsTimeout(handshake)).await,
    };
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
    let tunnel = Tunnel::new(shared, dest, true, sni_problem);
    tunnel.serve_http(stream, h2, guard).await
}

async fn failed(shared: &Shared, subject: &Subject, error: ProxyError) {
    // Nothing is forwarded either way; a failure to record it has no one left to tell.
    let _ = shared.record_failure(subject, &error).await;
}

/// Why the TLS server name does not fit the CONNECT target, if it does not. Clients send no SNI for an
/// IP address, so none is needed there.
pub(crate) fn sni_mismatch(target: &Host, sni: Option<&str>) -> Option<String> {
    match sni {
        None if matches!(target, Host::Ip(_)) => None,
        None => Some(format!(
            "the client sent no TLS server name for the CONNECT target {target}"
        )),
        Some(name) => match Host::parse(name) {
            Ok(host) if &host == target => None,
            _ => Some(format!(
                "the TLS server name {name:?} does not match the CONNECT target {target}"
            )),
        },
    }
}

/// The requests of one intercepted tunnel.
struct Tunnel {
    shared: Arc<Shared>,
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
        shared: Arc<Shared>,
        dest: Arc<Destination>,
        tls: bool,
        sni_problem: Option<String>,
    ) -> Arc<Tunnel> {
        Arc::new(Tunnel {
            upstream: Upstream::new(dest.clone(), tls),
            transport_problem: dest.check_transport(tls),
            shared,
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
        tokio::pin!(conn);
        let result = tokio::select! {
            result = conn.as_mut() => result,
            _ = guard.stopping() => {
                // Streams opened from now on are refused by our GOAWAY, not for anything the
                // client did wrong: they are not counted.
                streams.stop_counting();
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
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
            record_refused(&self.shared, &subject, &detail).await;
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
            .header_read_timeout(self.shared.options.idle_timeout)
            .keep_alive(true);
        let io = TokioIo::new(Probed::new(io, probe.clone()));
        let conn = builder.serve_connection(io, service);
        tokio::pin!(conn);
        let result = tokio::select! {
            result = conn.as_mut() => result,
            _ = guard.stopping() => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        match result {
            Err(e) if e.is_parse() => {
                let line = probe.refused();
                let method = line.method.as_deref().unwrap_or("-");
                let subject = self.dest.subject(method, line.target.path());
                let detail = format!("the request is not valid HTTP/1.1: {e}");
                record_refused(&self.shared, &subject, &detail).await;
            }
            Err(e) => tracing::debug!(host = %self.dest.host, "tunnel connection ended: {e}"),
            Ok(()) => {}
        }
    }

    async fn handle(&self, guard: &ConnGuard, req: Request<Incoming>) -> Response<Body> {
        let subject = self
            .dest
            .subject(req.method().as_str(), Some(req.uri().path()));
        if let Some(refused) = &self.transport_problem {
            if !self.shared.record(subject.decided(refused)).await {
                return respond::audit_unavailable();
            }
            return respond::denied(refused);
        }
        // An authority holding a placeholder is an attempt to carry a secret out in a name: it is
        // named as such, before the authority is compared with the target.
        if let Some((refused, names)) = placeholder_in_authority(&self.shared, &req) {
            return refuse_authority(&self.shared, &subject, &refused, names).await;
        }
        if let Some(problem) = &self.sni_problem {
            return bad_request(&self.shared, &subject, problem).await;
        }
        if req.method() == Method::CONNECT {
            let why = "CONNECT inside a tunnel is not allowed";
            return bad_request(&self.shared, &subject, why).await;
        }
        let default_port = if self.tls { 443 } else { 80 };
        let host = match checked_authority(&req, &self.dest.host, self.dest.port, default_port) {
            Ok(host) => host,
            Err(why) => return bad_request(&self.shared, &subject, &why).await,
        };
        exchange(&self.shared, guard, &self.dest, &self.upstream, req, host).await
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

/// The refusal of a request inside a tunnel whose Host header or `:authority` (absolute or h2)
/// holds one of the session's placeholders; `None` when none does, or the session has no secrets.
/// Bytes that are not UTF-8 are replaced for the scan, which cannot hide a placeholder (placeholders
/// are ASCII). Borrows the text: this runs on every request.
fn placeholder_in_authority<B>(
    shared: &Shared,
    req: &Request<B>,
) -> Option<(Decision, Vec<String>)> {
    if shared.secrets.is_empty() {
        return None;
    }
    let hosts = req.headers().get_all(HOST).iter();
    hosts
        .map(|v| ("the Host header", String::from_utf8_lossy(v.as_bytes())))
        .chain(
            req.uri()
                .authority()
                .map(|a| ("the request's authority", a.as_str().into())),
        )
        .find_map(|(what, text)| authority_refusal(shared, &text, what))
}

/// The Host value to forward, once every authority the request names (Host header, absolute or h2
/// `:authority`) is the CONNECT target by name and port.
pub(crate) fn checked_authority<B>(
    req: &Request<B>,
    target: &Host,
    port: u16,
    default_port: u16,
) -> Result<HeaderValue, String> {
    let mut named: Vec<&str> = Vec::new();
    let mut hosts = req.headers().get_all(HOST).iter();
    if let Some(value) = hosts.next() {
        if hosts.next().is_some() {
            return Err("the request has more than one Host header".to_string());
        }
        named.push(
            value
                .to_str()
                .map_err(|_| "the Host header is not ASCII text".to_string())?,
        );
    }
    if let Some(authority) = req.uri().authority() {
        named.push(authority.as_str());
    }
    let Some(first) = named.first().copied() else {
        return Err("the request names no host (no Host header or :authority)".to_string());
    };
    for text in &named {
        if text.contains('@') {
            return Err(format!("the authority {text:?} carries credentials"));
        }
        let (host, named_port) = split_authority(text).map_err(|e| e.to_string())?;
        if &host != target || named_port.unwrap_or(default_port) != port {
            return Err(format!(
                "the request's host {text:?} does not match the CONNECT target {}",
                target.authority(port)
            ));
        }
    }
    HeaderValue::from_str(first).map_err(|_| format!("the host {first:?} is not a valid header"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(text: &str) -> Host {
        Host::parse(text).unwrap()
    }

    #[test]
    fn sni_must_name_the_connect_target() {
        let name = host("mcp.example.com");
        assert_eq!(sni_mismatch(&name, Some("mcp.example.com")), None);
        assert_eq!(sni_mismatch(&name, Some("MCP.Example.com.")), None);
        assert!(sni_mismatch(&name, Some("other.example.com")).is_some());
        assert!(sni_mismatch(&name, None).is_some(), "a name needs SNI");
        let ip = host("10.0.0.5");
        assert_eq!(
            sni_mismatch(&ip, None),
            None,
            "clients send no SNI for an IP"
        );
        assert!(sni_mismatch(&ip, Some("mcp.example.com")).is_some());
    }

    fn request(host_headers: &[&str], uri: &str) -> Request<()> {
        let mut builder = Request::builder().uri(uri);
        for h in host_headers {
            builder = builder.header(HOST, *h);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn authorities_must_all_name_the_target_by_name_and_port() {
        let target = host("mcp.example.com");
        let check =
            |hosts: &[&str], uri: &str| checked_authority(&request(hosts, uri), &target, 443, 443);
        assert_eq!(
            check(&["mcp.example.com"], "/mcp").unwrap(),
            "mcp.example.com"
        );
        assert_eq!(
            check(&["mcp.example.com:443"], "/mcp").unwrap(),
            "mcp.example.com:443"
        );
        assert!(check(&["mcp.example.com"], "https://mcp.example.com/mcp").is_ok());
        assert!(check(&[], "https://mcp.example.com/mcp").is_ok());
        for (hosts, uri) in [
            (&["mcp.example.com:8443"][..], "/mcp"),
            (&["evil.com"][..], "/mcp"),
            (&["mcp.example.com"][..], "https://evil.com/mcp"),
            (&["mcp.example.com", "mcp.example.com"][..], "/mcp"),
            (&["user@mcp.example.com"][..], "/mcp"),
            (&[][..], "/mcp"),
        ] {
            assert!(check(hosts, uri).is_err(), "{hosts:?} {uri}");
        }
        // Plain HTTP in a tunnel defaults to port 80.
        let plain = checked_authority(&request(&["mcp.example.com"], "/"), &target, 80, 80);
        assert!(plain.is_ok());
    }
}
