//! Fetching a team policy and its signature (`URL` and `URL.minisig`) at the start of a session,
//! off the request path. The rules on which copy is used are `fenzi_policy::team`'s; this module
//! only brings the bytes, or says why it could not.
//!
//! - HTTPS only (the url was checked so by the config schema or the CLI), verified as upstreams
//!   are: the public roots plus `--upstream-ca`. The connection is made directly, not through a
//!   proxy: the person or the machine file named the server.
//! - HTTP/1.1 GET, no redirects followed (a 3xx is an answer that is not the policy), any
//!   non-2xx is a failure.
//! - Bounded: each file's whole exchange (connect, TLS, answer, body) has `timeout`, and a body
//!   larger than the bound is abandoned as soon as it passes it.

use crate::tls::upstream::{client_config, https1};
use bytes::Bytes;
use fenzi_policy::config::RemoteUrl;
use fenzi_policy::team::{MAX_POLICY_BYTES, MAX_SIGNATURE_BYTES};
use http::header::{ACCEPT, HOST, USER_AGENT};
use http::{Method, Request};
use http_body_util::Empty;
use rustls::pki_types::CertificateDer;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// How long each of the two files may take, end to end, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The policy's bytes and its signature's.
#[derive(Debug, Clone)]
pub struct TeamFiles {
    pub policy: Vec<u8>,
    pub signature: Vec<u8>,
}

/// Fetches `url` and `url.minisig`. `Err` says which file and why, naming the url (never more
/// of an answer than its status).
pub async fn fetch(
    url: &RemoteUrl,
    extra_roots: &[CertificateDer<'static>],
    timeout: Duration,
) -> Result<TeamFiles, String> {
    if !url.tls {
        return Err(format!(
            "{}: a team policy is fetched over https only",
            url.text
        ));
    }
    let tls = client_config(extra_roots).map_err(|e| format!("TLS set-up: {e}"))?;
    let connector = TlsConnector::from(tls);
    let policy = get(&connector, url, &url.path, MAX_POLICY_BYTES, timeout).await?;
    let sig_path = format!("{}.minisig", url.path);
    let signature = get(&connector, url, &sig_path, MAX_SIGNATURE_BYTES, timeout).await?;
    Ok(TeamFiles { policy, signature })
}

async fn get(
    connector: &TlsConnector,
    url: &RemoteUrl,
    path: &str,
    max: usize,
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    let shown = format!("https://{}{path}", url.host.authority(url.port));
    match tokio::time::timeout(timeout, get_inner(connector, url, path, max)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(why)) => Err(format!("{shown}: {why}")),
        Err(_) => Err(format!(
            "{shown}: no whole answer within {}s",
            timeout.as_secs_f32()
        )),
    }
}

async fn get_inner(
    connector: &TlsConnector,
    url: &RemoteUrl,
    path: &str,
    max: usize,
) -> Result<Vec<u8>, String> {
    let host = url.host.to_string();
    let authority = url.host.authority(url.port);
    let tcp = TcpStream::connect((host.as_str(), url.port))
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let mut sender = https1(connector, tcp, &host).await?;
    let request = Request::builder()
        .method(Method::GET)
        .uri(path)
        .header(HOST, authority.as_str())
        .header(ACCEPT, "*/*")
        .header(USER_AGENT, concat!("fenzi/", env!("CARGO_PKG_VERSION")))
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("HTTP failed: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("HTTP failed: {e}"))?;
    let status = response.status();
    if !status.is_success() {
        let note = if status.is_redirection() {
            " (redirects are not followed: give the final url)"
        } else {
            ""
        };
        return Err(format!("the server answered {status}{note}"));
    }
    crate::connection::body::read_bounded(response, max).await
}
