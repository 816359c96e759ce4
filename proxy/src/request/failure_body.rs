//! A streamed response body that records its own failure. A response head reached the client with an
//! `allowed` record already written; if the upstream then breaks off (reset, closed before the declared
//! length, a bad chunk) or the scrubber refuses the rest, the client sees the stream abort, and this
//! wrapper writes the `failed` record that says so: every failure upstream is recorded.
//! The record is written inside the poll that sees the error (a record is one write(2), see
//! [`crate::audit::writer`]), before the error reaches the client. It names the request's subject and
//! the error's source, never the error text (that goes to the log).

use crate::audit::sink::Subject;
use crate::connection::body::BoxError;
use crate::error::ProxyError;
use crate::request::refusal::Refusal;
use crate::session::context::SessionContext;
use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

/// `inner`, recording a `failed` entry for `subject` the first time it yields an error.
pub(crate) struct RecordsFailure<B> {
    inner: B,
    /// Taken when the failure is recorded, so at most one record per response.
    record: Option<(Arc<SessionContext>, Subject)>,
}

impl<B> RecordsFailure<B> {
    pub fn new(inner: B, session: Arc<SessionContext>, subject: Subject) -> Self {
        RecordsFailure {
            inner,
            record: Some((session, subject)),
        }
    }
}

impl<B> HttpBody for RecordsFailure<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let error: BoxError = match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
            Some(Ok(frame)) => return Poll::Ready(Some(Ok(frame))),
            Some(Err(error)) => error.into(),
            None => return Poll::Ready(None),
        };
        if let Some((session, subject)) = self.record.take() {
            // The text is for the log line; the record takes only the reason and the source.
            let failure = ProxyError::UpstreamBody(error.to_string());
            if let Some(metrics) = &session.metrics {
                metrics.upstream_error(&failure);
            }
            // The response is already broken off: there is no answer left to give.
            Refusal::failed(&subject, failure).record(&session);
        }
        Poll::Ready(Some(Err(error)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
