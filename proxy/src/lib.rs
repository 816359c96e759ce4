//! `fenzi-proxy`: the network side of fenzi. It asks `fenzi-policy` for every decision and carries it
//! out: a forward proxy (plain HTTP and CONNECT) that admits destinations by policy, resolves each name
//! once and dials only addresses it checked, passes uninspected tunnels through byte for byte, and
//! intercepts TLS for hosts that need inspection so every request to an MCP server is classified
//! before a byte goes upstream. It swaps the session's placeholders for real secret values only on
//! the hosts each secret is bound to, refuses a placeholder sent anywhere else, and swaps values
//! echoed back into responses for their placeholders. Every decision is written to the audit log
//! before anything is forwarded; when it cannot be written, nothing is.
//!
//! Modules, in the order a request meets them: [`server`] (accept, shutdown, audit redaction),
//! [`capacity`] (the connection cap, idle connections giving way, descriptor limits), `connect`
//! (CONNECT, placeholders in the target), `forward` (plain HTTP and the shared request phases: body,
//! secrets, MCP, upstream, response scrubbing), `admit` (route, resolve,
//! address checks), `intercept` (TLS termination and the Host/SNI checks), `mcp_enforce` (body
//! buffering and classification), [`secrets`] (placeholders, scanning, substitution, scrubbing),
//! `upstream` (dialling, upstream TLS, pooling), `tunnel` (pass-through copy), [`tls`] (session CA,
//! leaves, upstream trust), [`audit_sink`] and [`audit_writer`] (the log), [`credstore`] (where
//! values live), [`error`], [`options`], [`net`].

pub mod audit_sink;
pub mod audit_writer;
pub mod capacity;
pub mod error;
pub mod net;
pub mod options;
pub mod server;
pub mod tls;

mod admit;
mod connect;
mod failure_body;
mod forward;
mod intercept;
mod io;
mod mcp_enforce;
mod respond;
mod tunnel;
mod upstream;

pub use audit_sink::AuditSink;
pub use error::{ErrorSource, ProxyError};
pub use net::{Network, SystemNetwork};
pub use options::ProxyOptions;
pub use respond::{Body, BoxError};
pub use server::{Proxy, ProxyBuilder, listener_from_std};
pub use tls::SessionCa;

/// A new random session id: 16 lower-case hex digits.
pub fn new_session_id() -> Result<String, ProxyError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|e| ProxyError::Io(std::io::Error::other(format!("no randomness: {e}"))))?;
    Ok(hex::encode(bytes))
}
pub mod credstore;
pub mod sandbox;
pub mod secrets;
