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

/// TLS to `host` (a name, or an IP literal, bracketed or not) over `tcp`, verified by the
/// connector's config, then HTTP/1.1 on top: the connection of fenzi's own small clients (the team
/// policy fetch, OAuth sign-in), each of which has already decided where `tcp` may go.
pub(crate) async fn https1<B>(
    connector: &tokio_rustls::TlsConnector,
    tcp: tokio::net::TcpStream,
    host: &str,
) -> Result<hyper::client::conn::http1::SendRequest<B>, String>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let _ = tcp.set_nodelay(true);
    // A bracketed IPv6 literal is not a server name; rustls takes the address itself.
    let name = rustls::pki_types::ServerName::try_from(
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
    )
    .map_err(|e| format!("not a TLS server name: {e}"))?;
    let stream = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS failed: {e}"))?;
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP failed: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}
