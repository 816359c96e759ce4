//! A streamed response body that records its own failure. A response head reached the client with an
//! `allowed` record already written; if the upstream then breaks off (reset, closed before the declared
//! length, a bad chunk) or the scrubber refuses the rest, the client sees the stream abort, and this
//! wrapper writes the `failed` record that says so (DESIGN.md §5: every failure upstream is recorded).
//! The record is written from a task because a body is polled, not awaited; it names the request's
//! subject and the error's source, never the error text.

use crate::audit_sink::Subject;
use crate::error::ProxyError;
use crate::respond::{Body, BoxError};
use crate::server::Shared;
use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// `inner`, recording a `failed` entry for `subject` the first time it yields an error.
pub(crate) struct RecordsFailure {
    inner: Body,
    /// Taken when the failure is recorded, so at most one record per response.
    record: Option<(Arc<Shared>, Subject)>,
}

impl RecordsFailure {
    pub fn new(inner: Body, shared: Arc<Shared>, subject: Subject) -> RecordsFailure {
        RecordsFailure {
            inner,
            record: Some((shared, subject)),
        }
    }
}

impl HttpBody for RecordsFailure {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Err(error))) = &polled
            && let Some((shared, subject)) = self.record.take()
        {
            tracing::warn!(host = %subject.host, port = subject.port, "response body failed: {error}");
            let failure = ProxyError::UpstreamBody(error.to_string());
            tokio::spawn(async move {
                // A write failure is logged by `record` itself; the response is already broken off.
                let _ = shared.record(subject.failed(&failure)).await;
            });
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
