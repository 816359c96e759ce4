//! Where the export goes and how a batch gets there: the `--otlp` URL (`http://` or `https://`, the
//! full path, e.g. `http://127.0.0.1:4318/v1/logs`) and an HTTP/1.1 client that POSTs one body and
//! reads the answer. TLS is verified as the proxy verifies upstreams (the public roots plus
//! `--upstream-ca`). The connection is made directly, not through the proxy's policy: the person
//! running fenzi chose the receiver. One connection is kept alive and made again after any error.

use crate::tls::upstream::client_config;
use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST, RETRY_AFTER, USER_AGENT};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Largest answer body read; the rest is not needed to judge a batch.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// A parsed `--otlp` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    tls: bool,
    /// The host to dial and verify, without IPv6 brackets.
    host: String,
    port: u16,
    /// The Host header.
    authority: String,
    /// Path and query, as given.
    path: String,
    url: String,
}

impl Endpoint {
    /// Parses `http://HOST[:PORT]/PATH` or `https://…`; a URL without a path is refused, since
    /// OTLP/HTTP has no default path here (give `/v1/logs`).
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("{url:?} is not a URL: {e}"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            Some(other) => {
                return Err(format!(
                    "{url:?}: the scheme {other:?} is not http or https"
                ));
            }
            None => {
                return Err(format!(
                    "{url:?}: give the scheme, e.g. http://127.0.0.1:4318/v1/logs"
                ));
            }
        };
        let authority = uri
            .authority()
            .ok_or_else(|| format!("{url:?} has no host"))?;
        if authority.as_str().contains('@') {
            return Err(format!(
                "{url:?}: user information in the URL is not supported"
            ));
        }
        let host = authority.host();
        if host.is_empty() {
            return Err(format!("{url:?} has no host"));
        }
        let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let path = match uri.path_and_query() {
            Some(p) if p.as_str() != "/" => p.as_str().to_string(),
            _ => {
                return Err(format!(
                    "{url:?} has no path: give the full path, e.g. {}/v1/logs",
                    url.trim_end_matches('/')
                ));
            }
        };
        Ok(Endpoint {
            tls,
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
            authority: authority.as_str().to_string(),
            path,
            url: url.to_string(),
        })
    }

    /// The URL as given.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)
    }
}

/// A receiver's answer to one POST.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: StatusCode,
    /// The `Retry-After` header's value, as sent.
    pub retry_after: Option<String>,
    pub body: Bytes,
}

/// The client of one endpoint.
pub(crate) struct Client {
    endpoint: Endpoint,
    tls: Option<TlsConnector>,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Client {
    pub fn new(
        endpoint: Endpoint,
        extra_roots: &[CertificateDer<'static>],
    ) -> Result<Client, String> {
        let tls = if endpoint.tls {
            let config = client_config(extra_roots)
                .map_err(|e| format!("TLS set-up for {endpoint}: {e}"))?;
            Some(TlsConnector::from(config))
        } else {
            None
        };
        Ok(Client {
            endpoint,
            tls,
            sender: None,
        })
    }

    /// POSTs `body` and reads the answer within `timeout` (connecting included). On any error the
    /// connection is dropped, so the next try starts a new one.
    pub async fn post(&mut self, body: Bytes, timeout: Duration) -> Result<Answer, String> {
        let result = tokio::time::timeout(timeout, self.exchange(body)).await;
        let result = match result {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {timeout:?}")),
        };
        if result.is_err() {
            self.sender = None;
        }
        result
    }

    async fn exchange(&mut self, body: Bytes) -> Result<Answer, String> {
        let reusable = match &mut self.sender {
            Some(sender) => sender.ready().await.is_ok(),
            None => false,
        };
        if !reusable {
            self.sender = Some(self.connect().await?);
        }
        let sender = self.sender.as_mut().expect("connected above");
        let request = Request::builder()
            .method(Method::POST)
            .uri(self.endpoint.path.as_str())
            .header(HOST, self.endpoint.authority.as_str())
            .header(CONTENT_TYPE, "application/x-protobuf")
            .header(USER_AGENT, concat!("fenzi/", env!("CARGO_PKG_VERSION")))
            .body(Full::new(body))
            .map_err(|e| format!("cannot build the request: {e}"))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("the request failed: {e}"))?;
        let (parts, body) = response.into_parts();
        let retry_after = parts
            .headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = Limited::new(body, MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| format!("reading the answer failed: {e}"))?
            .to_bytes();
        Ok(Answer {
            status: parts.status,
            retry_after,
            body,
        })
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        let e = &self.endpoint;
        let tcp = TcpStream::connect((e.host.as_str(), e.port))
            .await
            .map_err(|err| format!("cannot connect to {}: {err}", e.authority))?;
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            Some(tls) => {
                let name = ServerName::try_from(e.host.clone())
                    .map_err(|err| format!("{}: {err}", e.host))?;
                let stream = tls
                    .connect(name, tcp)
                    .await
                    .map_err(|err| format!("TLS with {} failed: {err}", e.authority))?;
                handshake(TokioIo::new(stream)).await
            }
            None => handshake(TokioIo::new(tcp)).await,
        }
    }
}

async fn handshake<T>(io: TokioIo<T>) -> Result<SendRequest<Full<Bytes>>, String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("HTTP handshake failed: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let e = Endpoint::parse("http://127.0.0.1:4318/v1/logs").unwrap();
        assert_eq!(
            (
                e.tls,
                e.host.as_str(),
                e.port,
                e.path.as_str(),
                e.authority.as_str()
            ),
            (false, "127.0.0.1", 4318, "/v1/logs", "127.0.0.1:4318")
        );
        let e = Endpoint::parse("https://collector.example/v1/logs?x=1").unwrap();
        assert_eq!(
            (e.tls, e.port, e.path.as_str()),
            (true, 443, "/v1/logs?x=1")
        );
        let e = Endpoint::parse("http://[::1]:4318/v1/logs").unwrap();
        assert_eq!(
            (e.host.as_str(), e.authority.as_str()),
            ("::1", "[::1]:4318")
        );
        for (bad, says) in [
            ("ftp://h/v1/logs", "not http or https"),
            ("127.0.0.1:4318/v1/logs", "not a URL"),
            ("http://127.0.0.1:4318", "no path"),
            ("http://127.0.0.1:4318/", "no path"),
            ("http://u:p@h/v1/logs", "user information"),
            ("/v1/logs", "scheme"),
        ] {
            let e = Endpoint::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
