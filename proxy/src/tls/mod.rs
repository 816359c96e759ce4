//! TLS on both sides of an intercepted connection: the per-session CA and the leaves it mints toward
//! the client ([`ca`]), and the verified client configuration toward upstreams ([`upstream`]). Both use
//! rustls with the `ring` provider, chosen explicitly rather than through a process-wide default.
//!
//! May use: nothing of this crate.

pub mod ca;
pub mod upstream;

pub use ca::{CaError, SessionCa};

use std::sync::Arc;

/// ring's provider with AES-128-GCM preferred over AES-256-GCM and ChaCha20 in each TLS version.
/// All of ring's default suites stay enabled; only the order changes. Why: the AES-256 suites hash the
/// transcript and derive keys with SHA-384, which ring computes in portable code, while SHA-256 uses
/// the CPU's SHA extensions where they exist; with a handshake per tunnel that was ~9% of the proxy's
/// CPU. AES-128-GCM is the suite TLS 1.3 makes mandatory and is not the weak link of these sessions.
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    // Built once: every leaf certificate's server config asks for it.
    static PROVIDER: std::sync::OnceLock<Arc<rustls::crypto::CryptoProvider>> =
        std::sync::OnceLock::new();
    PROVIDER.get_or_init(build_provider).clone()
}

fn build_provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites.sort_by_key(|suite| {
        use rustls::CipherSuite as C;
        let tls13 = matches!(suite, rustls::SupportedCipherSuite::Tls13(_));
        let rank = match suite.suite() {
            C::TLS13_AES_128_GCM_SHA256
            | C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
            | C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 0,
            C::TLS13_AES_256_GCM_SHA384
            | C::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
            | C::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => 1,
            _ => 2,
        };
        (!tls13, rank)
    });
    Arc::new(provider)
}

#[cfg(test)]
mod tests {
    #[test]
    fn aes_128_gcm_is_preferred_in_each_version_and_no_suite_is_dropped() {
        let default = rustls::crypto::ring::default_provider().cipher_suites;
        let ours = super::provider().cipher_suites.clone();
        assert_eq!(ours.len(), default.len());
        for suite in &default {
            assert!(ours.contains(suite), "{:?} dropped", suite.suite());
        }
        let names: Vec<String> = ours.iter().map(|s| format!("{:?}", s.suite())).collect();
        assert_eq!(names[0], "TLS13_AES_128_GCM_SHA256", "{names:?}");
        let first_tls12 = ours
            .iter()
            .position(|s| matches!(s, rustls::SupportedCipherSuite::Tls12(_)))
            .unwrap();
        assert!(names[first_tls12].contains("AES_128_GCM"), "{names:?}");
        assert!(
            ours[..first_tls12]
                .iter()
                .all(|s| matches!(s, rustls::SupportedCipherSuite::Tls13(_)))
        );
    }
}
