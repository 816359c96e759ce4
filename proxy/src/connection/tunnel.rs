//! A passed-through tunnel: bytes copied both ways, untouched, until both sides are done or nothing has
//! moved in either direction for the idle timeout. A side that finishes sending has its write half shut
//! down on the other side, so half-closed protocols keep working. A side that fails (reset, or the
//! client connection evicted to make room, see [`crate::connection::capacity`]) ends the whole tunnel at once:
//! the other direction could carry nothing more to it, and waiting for its own end would hold both
//! sockets until the idle timeout.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

/// The copy buffer of each direction: it starts small, so an idle tunnel costs little memory, and
/// grows to the most once a read fills it.
const FIRST_BUF: usize = 2 * 1024;
const BUF: usize = 16 * 1024;

/// How a tunnel ended, with the bytes carried each way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Spliced {
    pub client_to_upstream: u64,
    pub upstream_to_client: u64,
    pub idle_timeout: bool,
}

/// Copies `client` <-> `upstream` until both directions end or the tunnel is idle for `idle`.
pub(crate) async fn splice<A, B>(client: A, upstream: B, idle: Duration) -> Spliced
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let start = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let (cr, cw) = tokio::io::split(client);
    let (ur, uw) = tokio::io::split(upstream);
    let up = AtomicU64::new(0);
    let down = AtomicU64::new(0);
    // Both directions until each ends cleanly; the first failure ends both.
    let copies = async {
        tokio::try_join!(
            copy_half(cr, uw, &up, &last, start),
            copy_half(ur, cw, &down, &last, start)
        )
    };
    let watchdog = async {
        loop {
            let since = Duration::from_millis(last.load(Ordering::Relaxed));
            let deadline = start + since + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    };
    let idle_timeout = tokio::select! {
        _ = copies => false,
        _ = watchdog => true,
    };
    Spliced {
        client_to_upstream: up.load(Ordering::Relaxed),
        upstream_to_client: down.load(Ordering::Relaxed),
        idle_timeout,
    }
}

/// Copies `from` to `to` until `from` ends (then shuts `to` down for writing) or either fails.
async fn copy_half<R, W>(
    mut from: R,
    mut to: W,
    count: &AtomicU64,
    last: &AtomicU64,
    start: Instant,
) -> Result<(), Failed>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; FIRST_BUF];
    loop {
        let n = from.read(&mut buf).await.map_err(|_| Failed)?;
        if n == 0 {
            break;
        }
        to.write_all(&buf[..n]).await.map_err(|_| Failed)?;
        count.fetch_add(n as u64, Ordering::Relaxed);
        last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
        if n == buf.len() && buf.len() < BUF {
            buf.resize(BUF, 0);
        }
    }
    // The peer may already be gone; the other direction decides how the tunnel ends.
    let _ = to.shutdown().await;
    Ok(())
}

/// One direction of a tunnel failed.
#[derive(Debug)]
struct Failed;

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::duplex;

    #[tokio::test]
    async fn a_half_close_keeps_the_other_direction_open() {
        let (mut client, proxy_client) = duplex(64);
        let (proxy_upstream, mut upstream) = duplex(64);
        let tunnel = tokio::spawn(splice(
            proxy_client,
            proxy_upstream,
            Duration::from_secs(30),
        ));
        client.write_all(b"request").await.unwrap();
        client.shutdown().await.unwrap();
        let mut got = Vec::new();
        upstream.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"request");
        upstream.write_all(b"late answer").await.unwrap();
        drop(upstream);
        let mut back = Vec::new();
        client.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"late answer");
        let done = tunnel.await.unwrap();
        assert_eq!((done.client_to_upstream, done.upstream_to_client), (7, 11));
        assert!(!done.idle_timeout);
    }

    /// A stream whose reads fail, as an evicted client's do.
    struct Broken;

    impl AsyncRead for Broken {
        fn poll_read(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            _: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Err(std::io::ErrorKind::ConnectionAborted.into()))
        }
    }

    impl AsyncWrite for Broken {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            _: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            std::task::Poll::Ready(Err(std::io::ErrorKind::ConnectionAborted.into()))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_failed_side_ends_the_tunnel_even_while_the_other_is_silent() {
        // The upstream stays open and silent: before, the tunnel would wait for the idle timeout.
        let (proxy_upstream, mut upstream) = duplex(64);
        let done = tokio::time::timeout(
            Duration::from_secs(5),
            splice(Broken, proxy_upstream, Duration::from_secs(300)),
        )
        .await
        .expect("the tunnel ended when its client side failed");
        assert!(!done.idle_timeout);
        // The upstream side was dropped: it sees the end.
        let mut rest = Vec::new();
        assert_eq!(upstream.read_to_end(&mut rest).await.unwrap(), 0);
    }
}
