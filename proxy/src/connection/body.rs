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
