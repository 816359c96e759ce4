//! A passed-through tunnel: bytes copied both ways, untouched, until both sides are done or nothing has
//! moved in either direction for the idle timeout. A side that finishes sending has its write half shut
//! down on the other side, so half-closed protocols keep working.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

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
    let copies = async {
        tokio::join!(
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

async fn copy_half<R, W>(
    mut from: R,
    mut to: W,
    count: &AtomicU64,
    last: &AtomicU64,
    start: Instant,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; BUF];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
        count.fetch_add(n as u64, Ordering::Relaxed);
        last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    let _ = to.shutdown().await;
}
