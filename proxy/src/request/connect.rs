//! CONNECT: a target holding one of the session's placeholders is refused before it is parsed or
//! resolved (`credential_endpoint_mismatch`); otherwise the target is canonicalised and admitted
//! (route, resolve, check every address), the decision is recorded, and then the tunnel is either
//! passed through byte for byte (dialled before the 200, so an unreachable upstream is a 502) or
//! handed to interception when the route needs inspection.

use crate::attribution::Attributed;
use crate::audit::sink::Subject;
use crate::connection::body::{self, Body};
use crate::connection::tunnel;
use crate::request::admit::{Destination, admit_tunnel};
use crate::request::authority::{check_no_placeholder, logged_authority};
use crate::request::intercept;
use crate::request::refusal::Refusal;
use crate::request::upstream::dial;
use crate::session::context::{ConnGuard, SessionContext};
use fenzi_policy::host::split_authority;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;

/// Port of a CONNECT target that names none.
const DEFAULT_CONNECT_PORT: u16 = 443;

pub(crate) async fn connect(
    session: Arc<SessionContext>,
    guard: ConnGuard,
    mut req: Request<Incoming>,
) -> Response<Body> {
    let dest = match check_target(&session, guard.peer(), guard.program(), &req).await {
        Ok(dest) => Arc::new(dest),
        Err(refusal) => return refusal.answer(&session),
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    if dest.inspect {
        tokio::spawn(async move {
            match on_upgrade.await {
                Ok(upgraded) => {
                    intercept::serve(session, dest, TokioIo::new(upgraded), guard).await
                }
                Err(e) => tracing::debug!("CONNECT upgrade failed: {e}"),
            }
        });
    } else {
        let stream = match dial(&session, &dest).await {
            Ok(stream) => stream,
            Err(error) => {
                let subject = dest.subject("CONNECT", None);
                return Refusal::failed(&subject, error).answer(&session);
            }
        };
        let idle = session.options.idle_timeout;
        tokio::spawn(async move {
            match on_upgrade.await {
                Ok(upgraded) => {
                    let done = tunnel::splice(TokioIo::new(upgraded), stream, idle).await;
                    tracing::debug!(host = %dest.host, port = dest.port, ?done, "tunnel closed");
                }
                Err(e) => tracing::debug!("CONNECT upgrade failed: {e}"),
            }
            drop(guard);
        });
    }
    let mut response = Response::new(body::empty());
    *response.status_mut() = StatusCode::OK;
    response
}

/// The admitted destination of a CONNECT, its allowing decision recorded; or the refusal.
async fn check_target<B>(
    session: &SessionContext,
    client: SocketAddr,
    program: &Attributed,
    req: &Request<B>,
) -> Result<Destination, Refusal> {
    let target = req.uri().authority().map_or("", |a| a.as_str());
    // Until the target parses, the record names only what may be logged (no userinfo, no raw text).
    let (logged_host, logged_port) = logged_authority(target, DEFAULT_CONNECT_PORT);
    let mut subject = Subject::new(client, "CONNECT", logged_host, logged_port, None).by(program);
    // Before anything else: a placeholder in the target is never resolved, parsed or dialled.
    check_no_placeholder(session, target, "the CONNECT target", &subject)?;
    if target.contains('@') {
        let why = "a CONNECT target cannot carry credentials";
        return Err(Refusal::bad_request(&subject, why));
    }
    let (host, port) = split_authority(target)
        .map(|(host, port)| (host, port.unwrap_or(DEFAULT_CONNECT_PORT)))
        .map_err(|e| Refusal::bad_request(&subject, &e.to_string()))?;
    subject.host = host.to_string();
    subject.port = port;

    admit_tunnel(session, &host, port, &subject).await
}
