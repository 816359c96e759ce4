//! Sign-in that keeps the token outside (DESIGN §19, last point): fenzi signs in to an `oauth:
//! true` MCP server itself, on the host, keeps the tokens in the credential store, and keeps the
//! access token current for the session, which swaps it in for the agent's placeholder on that
//! server only (the ordinary secret path: `crate::secrets`).
//!
//! - [`http`]: fenzi's own HTTPS client for these requests (policy-checked hosts and addresses).
//! - [`flow`]: discovery, registration, the authorization URL, token, refresh and revocation
//!   requests; the pure reading is `fenzi_policy::mcp::oauth` and `oauth_client`.
//! - [`redirect`]: the loopback redirect a sign-in comes back to.
//! - [`record`]: what is stored, and where.
//! - [`keeper`]: the session's renewals.
//!
//! May use: `audit`, `connection`, `credstore`, `secrets`, `session`, `tls`.

pub mod flow;
pub mod http;
pub(crate) mod keeper;
pub mod record;
pub mod redirect;

pub use keeper::KeptSignIn;
