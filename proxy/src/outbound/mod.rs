//! fenzi's own clients, off the request path: fetching a signed team policy at a session's start
//! ([`team_fetch`]) and reading a server's whole tool list for `fenzi mcp pin`
//! ([`tool_listing`]). Both verify upstream TLS as the proxy does and are bounded in size and time;
//! neither runs while a request waits.
//!
//! May use: `connection`, `error`, `secrets`, `tls`.

pub mod team_fetch;
pub mod tool_listing;
