//! The TLS client configuration toward upstreams: the webpki roots plus any `--upstream-ca`, server
//! names and IP SANs verified by rustls (no way to turn verification off), ALPN http/1.1.

pub use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};
use std::sync::Arc;

/// Parses every certificate in a PEM text; a text with none is an error.
pub fn parse_pem_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let mut reader = pem;
    let certs = rustls_pemfile::certs(&mut reader)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not valid PEM: {e}"))?;
    if certs.is_empty() {
        return Err("no CERTIFICATE block found".to_string());
    }
    Ok(certs)
}

/// The verified client config: webpki roots plus `extra_roots`.
pub fn client_config(
    extra_roots: &[CertificateDer<'static>],
) -> Result<Arc<ClientConfig>, rustls::Error> {
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for cert in extra_roots {
        roots.add(cert.clone())?;
    }
    let mut config = ClientConfig::builder_with_provider(super::provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
