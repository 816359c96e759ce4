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
//! made. The modules, in the order a request meets them: [`server`] (the accept loop), [`capacity`]
//! (the connection cap, idle connections giving way, descriptor limits), `client` (HTTP/1.1 on the
//! proxy port, routing by form), `connect` (CONNECT) and `plain_http` (absolute-form `http://`),
//! `authority` (the names a request gives and the checks on them), `admit` (route, resolve, address
//! checks), `intercept` (TLS termination, h1/h2 in the tunnel), `exchange` (one request's phases in
//! order: `head`, `request_body`, `decide` with `mcp_enforce` and `limits`, `upstream` with
//! `pool`, `response` with `failure_body`), `tunnel` (pass-through copy), and on every exit `refusal` (records, then
//! answers with `respond`). Around them: `context` (what a session and a connection share),
//! `request_context`, `malformed` and `h2_streams` (requests hyper or h2 refuse themselves), `io`,
//! `body`, `live` (the policy in force) and `reload` (changing it), [`secrets`], [`tls`], [`audit_sink`] and [`audit_writer`], [`export`] (`--otlp`: the log shipped as OTLP log records), [`credstore`], [`sandbox`], [`host_files`] (every file a session writes on the host, through descriptors opened before the agent runs),
//! [`error`], [`options`], [`net`].

pub mod audit_sink;
pub mod audit_writer;
pub mod capacity;
pub mod confirm;
pub mod error;
pub mod export;
pub mod host_files;
pub mod lock_file;
pub mod lock_trust;
pub mod metrics;
pub mod net;
pub mod options;
pub mod server;
pub mod shards;
pub mod synthetic;
pub mod team_fetch;
pub mod tls;
pub mod tool_listing;
pub mod transparent;

mod admit;
mod authority;
mod body;
mod client;
mod connect;
mod context;
mod decide;
mod exchange;
mod failure_body;
mod framing;
mod h2_streams;
mod head;
mod held;
mod intercept;
mod inventories;
mod io;
mod limits;
mod live;
mod malformed;
mod mcp_enforce;
mod mcp_response;
mod plain_http;
mod pool;
mod refusal;
mod reload;
mod request_body;
mod request_context;
mod respond;
mod response;
mod tunnel;
mod upstream;
mod woken;

pub use audit_sink::AuditSink;
pub use body::{Body, BoxError};
pub use error::{ErrorSource, ProxyError};
pub use inventories::LockFiles;
pub use net::{Network, SystemNetwork};
pub use options::ProxyOptions;
pub use reload::Reload;
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
