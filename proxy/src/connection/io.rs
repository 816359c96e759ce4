//! Stream wrappers that change only how a stream is read: [`Prefixed`] puts bytes already read back
//! in front, so the proxy can look at the first byte of a tunnel (TLS or not) and still hand the
//! whole stream to the TLS acceptor or the HTTP server; [`Observed`] shows every byte read to a
//! [`ReadObserver`] (the malformed-request probe, the h2 stream counter) on its way through.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

pub(crate) struct Prefixed<T> {
    prefix: Vec<u8>,
    at: usize,
    inner: T,
}

impl<T> Prefixed<T> {
    pub fn new(prefix: Vec<u8>, inner: T) -> Prefixed<T> {
        Prefixed {
            prefix,
            at: 0,
            inner,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Prefixed<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.prefix.len() {
            let n = (this.prefix.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

/// Sees every byte a stream reads, in order, as it is read.
pub(crate) trait ReadObserver {
    fn observe(&mut self, bytes: &[u8]);
}

/// A stream whose reads an observer sees; writes pass straight through.
pub(crate) struct Observed<T, O> {
    inner: T,
    observer: O,
}

impl<T, O> Observed<T, O> {
    pub fn new(inner: T, observer: O) -> Observed<T, O> {
        Observed { inner, observer }
    }
}

impl<T: AsyncRead + Unpin, O: ReadObserver + Unpin> AsyncRead for Observed<T, O> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            this.observer.observe(&buf.filled()[before..]);
        }
        polled
    }
}

/// Implements `AsyncWrite` for a wrapper that only changes the read side, by passing every write
/// call to its `inner` field. Extra type parameters after the stream's are named after the wrapper
/// (`delegate_async_write!(Observed, O)`).
macro_rules! delegate_async_write {
    ($wrapper:ident $(, $extra:ident)*) => {
        impl<T: tokio::io::AsyncWrite + Unpin $(, $extra: Unpin)*> tokio::io::AsyncWrite
            for $wrapper<T $(, $extra)*>
        {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
            }

            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_flush(cx)
            }

            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
            }

            fn poll_write_vectored(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.inner.is_write_vectored()
            }
        }
    };
}

delegate_async_write!(Prefixed);
delegate_async_write!(Observed, O);
