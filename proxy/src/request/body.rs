//! The request-body phase of a request something must be decided about: the body is read whole, up
//! to the policy's limit, before any decision is made and before a byte goes upstream. Beyond the
//! limit (declared or sent) it is 413 `body_too_large`; a body the client fails to send in time, or
//! breaks off, is a `failed` record of the client's and 400.

use crate::error::ProxyError;
use crate::request::context::RequestContext;
use crate::request::refusal::Refusal;
use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::request::Parts;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use tokio::time::timeout;

/// Reads a request body whole, up to the policy's limit.
pub(crate) async fn read(
    cx: &RequestContext<'_>,
    parts: &Parts,
    body: Incoming,
) -> Result<Bytes, Refusal> {
    let session = cx.session;
    let limit = cx.live.policy.limits().max_bytes;
    let too_large = || Refusal::denied(&cx.subject, &cx.live.policy.body_too_large());
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let wait = session.options.body_read_timeout;
    match timeout(wait, Limited::new(body, limit).collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Ok(Err(e)) => Err(Refusal::failed(
            &cx.subject,
            ProxyError::ClientBody(e.to_string()),
        )),
        Err(_) => Err(Refusal::failed(
            &cx.subject,
            ProxyError::ClientBodyTimeout(wait),
        )),
    }
}
