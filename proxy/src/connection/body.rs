//! The one body type every response shares, whether the proxy wrote it or it streams from an upstream,
//! and the small constructors for the bodies the proxy writes itself; with it the two boxed types the
//! crate's seams share (the error a body may end with, the future a trait method returns).

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use std::future::Future;
use std::pin::Pin;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the methods of the crate's traits ([`crate::AuditSink`], [`crate::Network`]) return
/// when they wait.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Every body the proxy sends or forwards: a full buffer or a stream, boxed.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

pub(crate) fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// Reads a whole response body of at most `max` bytes, refusing a larger one (by its
/// `Content-Length` before reading, else as soon as the bytes pass `max`). For fenzi's own small
/// clients (the team policy fetch, OAuth sign-in), whose answers are documents, never streams.
pub(crate) async fn read_bounded(
    response: http::Response<hyper::body::Incoming>,
    max: usize,
) -> Result<Vec<u8>, String> {
    let too_large = || format!("the answer is larger than the {max}-byte bound");
    if let Some(len) = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > max as u64
    {
        return Err(too_large());
    }
    let mut body = response.into_body();
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("the answer broke off: {e}"))?;
        if let Some(data) = frame.data_ref() {
            if out.len() + data.len() > max {
                return Err(too_large());
            }
            out.extend_from_slice(data);
        }
    }
    Ok(out)
}
