//! The response phase: what an upstream sends back on its way to the client. Its framing is checked
//! first ([`crate::connection::framing`]: `chunked` the only transfer-coding, no `206` to a request a secret
//! value was written into), and a refused one passes nothing of its body on. The head loses its
//! hop-by-hop headers and gets the client's HTTP version; an MCP server's answer is read strictly
//! and its lists filtered ([`crate::request::mcp_response`]), and what it says about signing in
//! learned ([`crate::request::sign_in`]); with secrets in the session, the head is
//! checked (an encoded body cannot be scrubbed, so it is refused), its header names, values and
//! reason phrase scrubbed, and every value in the body is replaced by its placeholder as it
//! streams. A body that breaks off after its head went out gets its `failed` record
//! ([`crate::request::failure_body`]).

use crate::connection::body::{Body, BoxError};
use crate::connection::framing;
use crate::request::context::RequestContext;
use crate::request::failure_body::RecordsFailure;
use crate::request::head::strip_hop_by_hop;
use crate::request::mcp_response::{self, Reading};
use crate::request::refusal::Refusal;
use crate::request::sign_in;
use crate::session::limits::{Held, Permit};
use fenzi_policy::mcp::oauth::Step;
use http::header::CONTENT_LENGTH;
use http::{Response, StatusCode, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;

/// What the response phase needs to know of the request it answers.
pub(crate) struct Answering {
    /// The HTTP version the client spoke.
    pub client_version: Version,
    /// A HEAD request: its response has no body, whatever its length says.
    pub is_head: bool,
    /// The answer of an MCP server, to be read before it is passed on.
    pub reading: Option<Reading>,
    /// A secret value was written into the request: its answer may not come in pieces.
    pub swapped: bool,
    /// The request was a step of the OAuth sign-in flow on an MCP server ([`sign_in`]).
    pub sign_in: Option<Step>,
}

/// The upstream's `response` as the client gets it.
pub(crate) async fn finish(
    cx: RequestContext<'_>,
    request: Answering,
    response: Response<Incoming>,
) -> Result<Response<Body>, Refusal> {
    let (mut head, body) = response.into_parts();
    if let Err(unaccepted) = framing::check(&mut head, request.swapped) {
        // The body is dropped unread, and its connection with it.
        return Err(Refusal::failed(&cx.subject, unaccepted.into()));
    }
    strip_hop_by_hop(&mut head.headers);
    head.version = request.client_version;
    // What an MCP server says about signing in is learned before the client sees it.
    // (Only then: nothing more is done for any other answer.)
    let signing_in = request.sign_in.is_some()
        || matches!(
            head.status,
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
        );
    // The entry the request's path belongs to learns it (a host's own path: its first entry).
    let server = if signing_in { cx.server() } else { None };
    if let Some(server) = server {
        sign_in::observe_head(&cx, server, &head, request.sign_in);
    }
    let body: Body = match request.reading {
        Some(mut reading) => {
            // A call's concurrency slots are held until the body the client gets is done.
            let slots = reading.permit.as_mut().and_then(Permit::take_slots);
            let body = mcp_response::read(
                cx.session,
                &cx.subject,
                reading,
                &mut head,
                body,
                request.is_head,
            )
            .await?;
            Held::new(body, slots).boxed_unsync()
        }
        None => match (server, request.sign_in) {
            (Some(server), Some(step)) if step.is_metadata() => {
                sign_in::read_metadata(&cx, server, step, &mut head, body, request.is_head).await?
            }
            _ => body.map_err(BoxError::from).boxed_unsync(),
        },
    };
    if cx.session.secrets.is_empty() {
        let body = RecordsFailure::new(body, cx.session.clone(), cx.subject);
        return Ok(Response::from_parts(head, body.boxed_unsync()));
    }
    let secrets = cx.session.secrets.get();
    // A HEAD or 304 response has no body to scrub; its length describes another response. Nothing
    // checked that length (no body is framed by it), so it is kept only as a number that holds no
    // value.
    let length = (request.is_head || head.status == StatusCode::NOT_MODIFIED)
        .then(|| head.headers.get(CONTENT_LENGTH).cloned())
        .flatten()
        .filter(|length| {
            let digits = length.as_bytes();
            !digits.is_empty()
                && digits.iter().all(u8::is_ascii_digit)
                && secrets.scrubber().scrub(digits).is_none()
        });
    if let Err(refused) = secrets.scrubber().check_response_head(&mut head.headers) {
        return Err(Refusal::failed(&cx.subject, refused.into()));
    }
    secrets.scrubber().scrub_reason(&mut head.extensions);
    if let Some(length) = length {
        head.headers.insert(CONTENT_LENGTH, length);
    }
    let body = secrets.scrubber().body(body);
    let body = RecordsFailure::new(body, cx.session.clone(), cx.subject);
    Ok(Response::from_parts(head, body.boxed_unsync()))
}
