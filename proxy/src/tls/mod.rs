//! TLS on both sides of an intercepted connection: the per-session CA and the leaves it mints toward
//! the client ([`ca`]), and the verified client configuration toward upstreams ([`upstream`]). Both use
//! rustls with the `ring` provider, chosen explicitly rather than through a process-wide default.

pub mod ca;
pub mod upstream;

pub use ca::{CaError, SessionCa};

use std::sync::Arc;

pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
