//! The end of a served connection when the session stops: the connection runs until it finishes
//! by itself or the stop signal comes, and then it is asked to end gracefully (hyper finishes the
//! request in flight, sends no new one to the service, and for h2 sends GOAWAY) and awaited to the
//! end, so no request that was admitted is cut and none is admitted after the stop.
//!
//! A macro rather than a function: hyper's three connection types (`http1::Connection`, its
//! upgradeable form and `http2::Connection`) share `graceful_shutdown` by name only, and
//! hyper-util's `GracefulConnection` trait leaves out the upgradeable HTTP/1.1 connection the proxy
//! port serves (and watches a channel, where fenzi races its own stop signal, see
//! [`super::woken`]).

/// `serve_until_stopped!(conn, stopping)` or `serve_until_stopped!(conn, stopping, { on_stop })`:
/// drives the hyper connection future `conn` until it ends, or until `stopping` resolves; then
/// runs `on_stop`, starts a graceful shutdown and awaits the connection's end. Evaluates to the
/// connection's result.
macro_rules! serve_until_stopped {
    ($conn:expr, $stopping:expr $(, $on_stop:block)?) => {{
        let conn = $conn;
        ::tokio::pin!(conn);
        ::tokio::select! {
            result = conn.as_mut() => result,
            _ = $stopping => {
                $($on_stop)?
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        }
    }};
}

pub(crate) use serve_until_stopped;
