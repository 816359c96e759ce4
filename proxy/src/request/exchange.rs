//! One request to an admitted destination, from its head to the response the client gets. Shared by
//! plain-HTTP proxy requests ([`crate::request::plain_http`]) and requests inside intercepted tunnels
//! ([`crate::request::intercept`]). The phases, in order, each in its own module:
//!
//! 1. head ([`crate::request::head`]): hop-by-hop headers out, the checked Host in, identity encoding asked
//!    for when the response may need scrubbing. The decisions see exactly what will be forwarded.
//! 2. body ([`crate::request::body`]): streamed when nothing is decided about it (a plain host in a
//!    session without secrets, which then gets its one admitting record), else read whole up to the
//!    limit.
//! 3. decide ([`crate::request::decide`]): secrets, MCP classification, substitution; every record written.
//! 4. upstream ([`crate::request::upstream`]): origin-form, a pooled or new connection to a checked address;
//!    a call's `limits` timeout ([`crate::session::limits`]) starts here.
//! 5. response ([`crate::request::response`]): hop-by-hop out, an MCP server's answer read strictly and its
//!    lists filtered ([`crate::request::mcp_response`]), secret values scrubbed as the body streams, a
//!    broken-off body recorded.
//!
//! Any phase may refuse: it returns a [`Refusal`], which [`exchange`] records and answers. Redirects
//! are answers like any other: passed back, never followed.

use crate::connection::body::{self, Body, BoxError};
use crate::error::ProxyError;
use crate::request::admit::Handling;
use crate::request::body as request_body;
use crate::request::context::RequestContext;
use crate::request::decide::decide;
use crate::request::head;
use crate::request::mcp_response::{self, Reading};
use crate::request::refusal::Refusal;
use crate::request::response::{self, Answering};
use crate::session::limits::Permit;
use http::{HeaderValue, Method, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::time::Duration;

/// Decides, records and forwards `req`; `host` is the checked Host value to send.
pub(crate) async fn exchange(
    cx: RequestContext<'_>,
    req: Request<Incoming>,
    host: HeaderValue,
) -> Response<Body> {
    let session = cx.session;
    // On the heap: the phases' future is kilobytes, and every future that holds it inline
    // (this one, the tunnel's, hyper's service future) would copy all of it when created.
    match Box::pin(phases(cx, req, host)).await {
        Ok(response) => response,
        Err(refusal) => refusal.answer(session),
    }
}

async fn phases(
    cx: RequestContext<'_>,
    req: Request<Incoming>,
    host: HeaderValue,
) -> Result<Response<Body>, Refusal> {
    let (mut parts, body) = req.into_parts();
    let session = cx.session;
    let mut answering = Answering {
        client_version: parts.version,
        is_head: parts.method == Method::HEAD,
        reading: None,
        swapped: false,
        sign_in: None,
    };
    // A response that will be scrubbed or read must come unencoded.
    let mcp = matches!(cx.dest().handling, Handling::Mcp(_));
    head::prepare_request(&mut parts, host, !session.secrets.is_empty() || mcp);

    let body: Body = if session.secrets.is_empty() && matches!(cx.dest().handling, Handling::Plain)
    {
        // Nothing to decide about the body: one record for the route, then it streams.
        session.record(cx.subject.decided(&cx.dest().decision))?;
        body.map_err(BoxError::from).boxed_unsync()
    } else {
        let bytes = request_body::read(&cx, &parts, body).await?;
        let decided = decide(&cx, &mut parts, bytes).await?;
        answering.reading = decided.reading;
        answering.swapped = decided.swapped;
        answering.sign_in = decided.sign_in;
        body::full(decided.body)
    };

    head::to_origin_form(&mut parts);
    let deadline = answering.reading.as_mut().and_then(Reading::forwarded);
    let sent = cx.upstream.send(session, Request::from_parts(parts, body));
    let sent = match (deadline, &answering.reading) {
        // A `limits` timeout runs from here; past it before the head, the request is dropped,
        // and its upstream connection with it.
        (Some(deadline), Some(reading)) => match tokio::time::timeout_at(deadline, sent).await {
            Ok(sent) => sent,
            Err(_) => {
                let error = reading.permit.as_ref().map(Permit::timed_out);
                let error = error.unwrap_or(ProxyError::UpstreamTimeout(Duration::ZERO));
                return Err(mcp_response::cut(&cx.subject, reading, error));
            }
        },
        _ => sent.await,
    };
    let response = sent.map_err(|error: ProxyError| Refusal::failed(&cx.subject, error))?;
    response::finish(cx, answering, response).await
}
