//! One client connection on the proxy port: HTTP/1.1 (keep-alive; pipelined requests one at a time,
//! CONNECT upgrades), each request sent to its phase by its form: CONNECT to [`crate::request::connect`],
//! absolute-form `http://` to [`crate::request::plain_http`], anything else (a request for the proxy itself) is
//! `bad_request`. A request hyper refuses as malformed never reaches the service; it is recorded
//! when the connection ends (see [`crate::connection::malformed`]).

use crate::audit::sink::Subject;
use crate::connection::body::Body;
use crate::connection::capacity::Tracked;
use crate::connection::graceful::serve_until_stopped;
use crate::connection::malformed::{HeadProbe, Probed, RequestLine, Target};
use crate::request::authority::{INVALID_TARGET, default_port, logged_authority};
use crate::request::connect::connect;
use crate::request::plain_http::plain_http;
use crate::request::refusal::Refusal;
use crate::session::context::{ConnGuard, SessionContext};
use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpStream;

pub(crate) async fn serve_client(
    session: Arc<SessionContext>,
    stream: Tracked<TcpStream>,
    peer: SocketAddr,
    guard: ConnGuard,
) {
    let _ = stream.set_nodelay(true);
    let mut stopping = guard.clone();
    let probe = HeadProbe::new();
    let service = {
        let session = session.clone();
        let probe = probe.clone();
        service_fn(move |req| {
            probe.dispatched();
            let session = session.clone();
            let guard = guard.clone();
            let in_flight = guard.request(&req);
            async move { Ok::<_, Infallible>(in_flight.answered(route(session, guard, req).await)) }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(session.options.header_read_timeout)
        .keep_alive(true);
    let conn = builder
        .serve_connection(TokioIo::new(Probed::new(stream, probe.clone())), service)
        .with_upgrades();
    let result = serve_until_stopped!(conn, stopping.stopping());
    if let Err(e) = result {
        tracing::debug!(%peer, "client connection ended: {e}");
        if e.is_parse() {
            let subject = refused_subject(peer, probe.refused()).by(stopping.program());
            let detail = format!("the request is not valid HTTP/1.1: {e}");
            Refusal::unparsed(&subject, &detail).record(&session);
        }
    }
}

/// The audit subject of a request on the proxy port that hyper refused: what its request line names,
/// as far as it may be logged (see [`logged_authority`]), else `-`.
fn refused_subject(peer: SocketAddr, line: RequestLine) -> Subject {
    let (host, port) = match &line.target {
        Target::Absolute {
            scheme, authority, ..
        } => logged_authority(authority, default_port(Some(scheme))),
        Target::Authority(authority) => logged_authority(authority, 443),
        Target::Invalid => (INVALID_TARGET.to_string(), 0),
        Target::Path(_) | Target::Unknown => ("-".to_string(), 0),
    };
    let method = line.method.as_deref().unwrap_or("-");
    Subject::new(peer, method, host, port, line.target.path())
}

/// Sends a request to its phase by its form.
async fn route(
    session: Arc<SessionContext>,
    guard: ConnGuard,
    req: Request<Incoming>,
) -> Response<Body> {
    if req.method() == Method::CONNECT {
        return connect(session, guard, req).await;
    }
    if req.uri().scheme().is_some() {
        return plain_http(session, &guard, req).await;
    }
    let subject = Subject::new(
        guard.peer(),
        req.method().as_str(),
        "-".to_string(),
        0,
        Some(req.uri().path()),
    )
    .by(guard.program());
    let why = "this is a proxy: send absolute-form http:// requests or CONNECT";
    Refusal::bad_request(&subject, why).answer(&session)
}
