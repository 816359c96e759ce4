//! `fenzi-proxy`: the network side of fenzi. It asks `fenzi-policy` for every decision and carries it
//! out: a forward proxy (plain HTTP and CONNECT) that admits destinations by policy, resolves each name
//! once and dials only addresses it checked, passes uninspected tunnels through byte for byte, and
//! intercepts TLS for hosts that need inspection so every request to an MCP server is classified
//! before a byte goes upstream. It swaps the session's placeholders for real secret values only on
//! the hosts each secret is bound to, refuses a placeholder sent anywhere else, and swaps values
//! echoed back into responses for their placeholders. Every decision is written to the audit log
//! before anything is forwarded; when it cannot be written, nothing is.
//!
//! docs/architecture.md describes the request's path phase by phase and where each decision is
//! made. The crate is laid out by concept, one folder each, every folder's `//!` saying what it owns
//! and what it may use (`proxy/tests/module_graph.rs` holds the code to that):
//!
//! - [`server`]: `Proxy`, built once per session, and the accept loop; the only module that may use
//!   every other.
//! - [`transparent`]: connections from sandboxed programs that ignore the proxy variables.
//! - `request`: the request path, in the order a request meets it (routing by form, admission,
//!   interception, one request's phases, refusals).
//! - [`session`]: what a session's connections share and what changes while it runs (the policy in
//!   force, reloads, limits counters, tool inventories, the upstream pool).
//! - [`attribution`]: which programs inside the sandbox hold a connection's socket.
//! - [`audit`]: the audit sink and the hash-chained log writer.
//! - [`connection`]: sockets and bytes: the connection cap, shards, the network seam, stream and
//!   body types, tunnels.
//! - [`secrets`], [`tls`], [`credstore`], [`confirm`], [`metrics`], [`export`], [`outbound`]
//!   (fenzi's own clients off the request path), [`lock_file`], [`sandbox`], [`host_files`] (every
//!   file a session writes on the host), [`error`] and [`options`].

pub mod attribution;
pub mod audit;
pub mod bridge;
pub mod confirm;
pub mod connection;
pub mod credstore;
pub mod error;
pub mod export;
pub mod host_files;
pub mod lock_file;
pub mod metrics;
pub mod oauth;
pub mod options;
pub mod outbound;
mod request;
pub mod sandbox;
pub mod secrets;
pub mod server;
pub mod session;
pub mod tls;
pub mod transparent;

pub use audit::sink::AuditSink;
pub use connection::body::{Body, BoxError, BoxFuture};
pub use connection::net::{Network, SystemNetwork};
pub use error::{ErrorSource, ProxyError};
pub use options::ProxyOptions;
pub use server::{Proxy, ProxyBuilder, listener_from_std};
pub use session::inventories::LockFiles;
pub use session::reload::Reload;
pub use tls::SessionCa;

/// A new random session id: 16 lower-case hex digits.
pub fn new_session_id() -> Result<String, ProxyError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|e| ProxyError::Io(std::io::Error::other(format!("no randomness: {e}"))))?;
    Ok(hex::encode(bytes))
}
