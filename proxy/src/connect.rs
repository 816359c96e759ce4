//! CONNECT: a target holding one of the session's placeholders is refused before it is parsed or
//! resolved (`credential_endpoint_mismatch`); otherwise the target is canonicalised and admitted (route, resolve, check every address), the decision
//! is recorded, and then the tunnel is either passed through byte for byte (dialled before the 200, so
//! an unreachable upstream is a 502) or handed to interception when the route needs inspection.

use crate::admit::{Admission, admit};
use crate::audit_sink::{Subject, logged_authority};
use crate::forward::{authority_refusal, bad_request, refuse_authority};
use crate::intercept;
use crate::respond::{self, Body};
use crate::server::{ConnGuard, Shared};
use crate::tunnel;
use crate::upstream::dial;
use fenzi_policy::host::split_authority;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::sync::Arc;

/// Port of a CONNECT target that names none.
const DEFAULT_CONNECT_PORT: u16 = 443;

pub(crate) async fn connect(
    shared: Arc<Shared>,
    guard: ConnGuard,
    mut req: Request<Incoming>,
) -> Response<Body> {
    let target = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_string())
        .unwrap_or_default();
    // Until the target parses, the record names only what may be logged (no userinfo, no raw text).
    let (logged_host, logged_port) = logged_authority(&target, DEFAULT_CONNECT_PORT);
    let mut subject = Subject {
        method: "CONNECT".to_string(),
        host: logged_host,
        port: logged_port,
        path: None,
        server: None,
    };
    // Before anything else: a placeholder in the target is never resolved, parsed or dialled.
    if let Some((refused, names)) = authority_refusal(&shared, &target, "the CONNECT target") {
        return refuse_authority(&shared, &subject, &refused, names).await;
    }
    if target.contains('@') {
        return bad_request(
            &shared,
            &subject,
            "a CONNECT target cannot carry credentials",
        )
        .await;
    }
    let (host, port) = match split_authority(&target) {
        Ok((host, port)) => (host, port.unwrap_or(DEFAULT_CONNECT_PORT)),
        Err(e) => return bad_request(&shared, &subject, &e.to_string()).await,
    };
    subject.host = host.to_string();
    subject.port = port;

    let dest = match admit(&shared, &host, port).await {
        Admission::Admitted(dest) => dest,
        Admission::Denied(decision) => {
            if !shared.record(subject.decided(&decision)).await {
                return respond::audit_unavailable();
            }
            return respond::denied(&decision);
        }
        Admission::Failed(error) => {
            if !shared.record(subject.failed(&error)).await {
                return respond::audit_unavailable();
            }
            return respond::failure(&error);
        }
    };
    let subject = dest.subject("CONNECT", None);
    if !shared.record(subject.decided(&dest.decision)).await {
        return respond::audit_unavailable();
    }

    let on_upgrade = hyper::upgrade::on(&mut req);
    if dest.inspect {
        let dest: Arc<_> = Arc::from(dest);
        tokio::spawn(async move {
            match on_upgrade.await {
                Ok(upgraded) => intercept::serve(shared, dest, upgraded, guard).await,
                Err(e) => tracing::debug!("CONNECT upgrade failed: {e}"),
            }
        });
    } else {
        let stream = match dial(&shared, &dest).await {
            Ok(stream) => stream,
            Err(error) => {
                if !shared.record_failure(&subject, &error).await {
                    return respond::audit_unavailable();
                }
                return respond::failure(&error);
            }
        };
        let idle = shared.options.idle_timeout;
        tokio::spawn(async move {
            match on_upgrade.await {
                Ok(upgraded) => {
                    let done = tunnel::splice(TokioIo::new(upgraded), stream, idle).await;
                    tracing::debug!(host = %dest.host, port, ?done, "tunnel closed");
                }
                Err(e) => tracing::debug!("CONNECT upgrade failed: {e}"),
            }
            drop(guard);
        });
    }
    let mut response = Response::new(respond::empty());
    *response.status_mut() = StatusCode::OK;
    response
}
