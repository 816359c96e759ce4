//! The response phase of the OAuth sign-in flow on an MCP server's host (README, "Signing in to
//! OAuth servers"; the rules are [`fenzi_policy::mcp::oauth`]'s): what the server says there is read
//! strictly, and what fenzi learns from it goes into the session's inventory of that server
//! ([`crate::session::inventories`]), where the classifier reads it for the next request.
//!
//! - Any `401` or `403` from the server: the `resource_metadata` of its `Bearer` challenge.
//! - The answer to a GET of authorization-server metadata: a `404` at the root form is a server
//!   that publishes none (the 2025-03-26 defaults).
//! - A metadata document on a success status is read whole, up to
//!   [`fenzi_policy::mcp::oauth::METADATA_LIMITS`], as `application/json` with no content coding,
//!   before any of it reaches the client. One that cannot be read strictly is not passed on: a
//!   `failed` record says why and the client gets a 502. A document fenzi reads but cannot learn
//!   all of (a path it cannot match, another origin) passes: the requests it names stay refused.
//! - Every other answer of the flow (a metadata error status, the authorization endpoint's
//!   redirect, the token endpoint's tokens) is passed on unread: it is not MCP messages, and fenzi
//!   learns nothing from it. Nothing of a body is logged.

use crate::connection::body::{self, Body, BoxError};
use crate::error::ProxyError;
use crate::request::context::RequestContext;
use crate::request::refusal::Refusal;
use bytes::Bytes;
use fenzi_policy::engine::McpServer;
use fenzi_policy::mcp::oauth::{self, METADATA_LIMITS, MetadataError, Origin, Step};
use fenzi_policy::response::ResponseError;
use http::header::{CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::response::Parts;
use http::{HeaderValue, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;

/// The origin the request reached: the entry's scheme, and the host and port its subject names.
fn origin<'a>(cx: &'a RequestContext<'_>, server: &McpServer) -> Origin<'a> {
    Origin {
        tls: server.tls,
        host: &cx.subject.host,
        port: cx.subject.port,
    }
}

/// Learns what the head of `server`'s answer says about signing in: a challenge's
/// `resource_metadata`, and whether authorization-server metadata exists (`step` is the
/// request's sign-in step, if it was one).
pub(crate) fn observe_head(
    cx: &RequestContext<'_>,
    server: &McpServer,
    head: &Parts,
    step: Option<Step>,
) {
    let status = head.status;
    let challenged = matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN)
        && head.headers.contains_key(WWW_AUTHENTICATE);
    let metadata_status = step == Some(Step::ServerMetadata) && !status.is_success();
    if !challenged && !metadata_status {
        return;
    }
    let origin = origin(cx, server);
    let path = cx.subject.path.as_deref().unwrap_or("/");
    cx.session.inventories.sign_in(&server.name, |sign_in| {
        if metadata_status {
            sign_in.note_metadata_status(path, status.as_u16());
        }
        if challenged {
            let values = head
                .headers
                .get_all(WWW_AUTHENTICATE)
                .iter()
                .map(HeaderValue::as_bytes);
            if let Err(e) = sign_in.learn_challenge(origin, values) {
                tracing::warn!(server = %server.name, "its WWW-Authenticate challenge: {e}; nothing learned");
            }
        }
    });
}

/// The body the client gets for the answer to a metadata GET (`step`) on `server`.
pub(crate) async fn read_metadata(
    cx: &RequestContext<'_>,
    server: &McpServer,
    step: Step,
    head: &mut Parts,
    body: Incoming,
    bodiless: bool,
) -> Result<Body, Refusal> {
    let unread =
        bodiless || !head.status.is_success() || matches!(head.status, StatusCode::NO_CONTENT);
    if unread {
        return Ok(body.map_err(BoxError::from).boxed_unsync());
    }
    let refuse = |e: MetadataError| {
        let error = ProxyError::UnreadableResponse(ResponseError::Metadata(e));
        tracing::warn!(host = %cx.subject.host, "{error}");
        let entry = cx.subject.unreadable(&error);
        let answer = crate::request::respond::failure(&error);
        let detail = error.to_string();
        Refusal::records(vec![entry], answer, error.reason(), detail)
    };
    let encoded = head.headers.get_all(CONTENT_ENCODING).iter().any(|v| {
        v.as_bytes()
            .split(|&b| b == b',')
            .map(<[u8]>::trim_ascii)
            .any(|e| !e.is_empty() && !e.eq_ignore_ascii_case(b"identity"))
    });
    if encoded {
        return Err(refuse(MetadataError::Encoded));
    }
    if !is_json(head.headers.get(CONTENT_TYPE)) {
        return Err(refuse(MetadataError::ContentType));
    }
    let bytes: Bytes = match Limited::new(body, METADATA_LIMITS.max_bytes)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => return Err(refuse(MetadataError::TooLarge)),
        Err(e) => {
            return Err(Refusal::failed(
                &cx.subject,
                ProxyError::UpstreamBody(e.to_string()),
            ));
        }
    };
    let origin = origin(cx, server);
    let learned = match step {
        Step::ResourceMetadata => {
            let doc = oauth::read_resource_metadata(&bytes).map_err(refuse)?;
            cx.session
                .inventories
                .sign_in(&server.name, |s| s.learn_resource_metadata(origin, &doc))
        }
        _ => {
            let doc = oauth::read_server_metadata(&bytes).map_err(refuse)?;
            cx.session
                .inventories
                .sign_in(&server.name, |s| s.learn_server_metadata(origin, &doc))
        }
    };
    if let Some(Err(e)) = learned {
        tracing::warn!(server = %server.name, "its {}: {e}; those requests stay refused", step.name());
    }
    head.headers
        .insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    Ok(body::full(bytes))
}

/// `application/json` (case-insensitive, parameters aside).
fn is_json(value: Option<&HeaderValue>) -> bool {
    let bytes = value.map_or(&[][..], HeaderValue::as_bytes);
    let media = bytes.split(|&b| b == b';').next().unwrap_or_default();
    media.trim_ascii().eq_ignore_ascii_case(b"application/json")
}
