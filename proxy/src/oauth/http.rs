//! fenzi's own HTTPS client for signing in and renewing, on the host: one request per connection,
//! HTTP/1.1, no redirects followed, bounded in size and time. Every endpoint must be `https` on a
//! host the policy admits (`host_not_allowed` otherwise), and every address it resolves to must
//! pass the policy's address rules (internal addresses only where `private:` allows them), as for
//! the proxy's own upstream connections. TLS is verified against the public roots plus
//! `--upstream-ca`. Errors name the endpoint's origin and the step, never a body.

use crate::tls::upstream::{client_config, https1};
use bytes::Bytes;
use fenzi_policy::config::parse_url;
use fenzi_policy::engine::Policy;
use fenzi_policy::host::{Host, HostPattern};
use http::header::{ACCEPT, CONTENT_TYPE, HOST, USER_AGENT, WWW_AUTHENTICATE};
use http::{HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::Full;
use rustls::pki_types::CertificateDer;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Largest answer read (metadata, registration, token answers are small).
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// An absolute `https` URL fenzi will send to: its host, port and request target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: Host,
    pub port: u16,
    /// Path and query, as given.
    pub target: String,
}

impl Endpoint {
    /// Reads `url`: `https`, no user info, no fragment; a query is kept. `what` names the URL in
    /// errors (`the token endpoint`); the URL itself is not repeated.
    pub fn parse(url: &str, what: &str) -> Result<Endpoint, String> {
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (url, None),
        };
        if url.contains('#') {
            return Err(format!("{what} has a fragment (`#`), which OAuth forbids"));
        }
        let parsed =
            parse_url(base).map_err(|e| format!("{what} cannot be used: {}", e.message))?;
        if !parsed.tls {
            return Err(format!(
                "{what} is not https: fenzi sends sign-in requests over TLS only"
            ));
        }
        let mut target = parsed.path;
        if let Some(q) = query {
            target.push('?');
            target.push_str(q);
        }
        Ok(Endpoint {
            host: parsed.host,
            port: parsed.port,
            target,
        })
    }

    /// `https://host[:port]`.
    pub fn origin(&self) -> String {
        if self.port == 443 {
            format!("https://{}", self.host)
        } else {
            format!("https://{}", self.host.authority(self.port))
        }
    }

    /// `https://host[:port]/path` without the query.
    pub fn url_without_query(&self) -> String {
        let path = self.target.split('?').next().unwrap_or("/");
        format!("{}{path}", self.origin())
    }

    /// The path without the query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("/")
    }

    /// The host pattern a value sent here is stored for (`host:port`).
    pub fn pattern(&self) -> HostPattern {
        HostPattern::for_host(self.host.clone(), self.port)
    }
}

/// An answer: status, the headers sign-in reads, and the whole body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub content_type: Option<String>,
    pub www_authenticate: Vec<Vec<u8>>,
    pub body: Vec<u8>,
}

impl Answer {
    /// `application/json` (any parameters), as metadata and token answers must be.
    pub fn is_json(&self) -> bool {
        self.content_type.as_deref().is_some_and(|ct| {
            let media = ct.split(';').next().unwrap_or("").trim();
            media.eq_ignore_ascii_case("application/json")
        })
    }
}

/// The client: TLS trust and the bound on each exchange.
#[derive(Clone)]
pub struct HttpClient {
    tls: TlsConnector,
    timeout: Duration,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// A request body: its media type and bytes.
pub struct Body<'a> {
    pub content_type: &'a str,
    pub bytes: Vec<u8>,
}

impl HttpClient {
    pub fn new(
        extra_roots: &[CertificateDer<'static>],
        timeout: Duration,
    ) -> Result<HttpClient, String> {
        let config = client_config(extra_roots).map_err(|e| format!("TLS set-up: {e}"))?;
        Ok(HttpClient {
            tls: TlsConnector::from(config),
            timeout,
        })
    }

    /// Sends one request to `endpoint`, when `policy` admits its host and addresses. `what` names
    /// the step in errors (`the token request`).
    pub async fn send(
        &self,
        policy: &Policy,
        method: Method,
        endpoint: &Endpoint,
        headers: &[(HeaderName, HeaderValue)],
        body: Option<Body<'_>>,
        what: &str,
    ) -> Result<Answer, String> {
        let origin = endpoint.origin();
        if let Err(denied) = policy.route(&endpoint.host, endpoint.port) {
            return Err(format!(
                "{what}: {origin} is not a host the policy allows ({}); add it to `hosts:` in \
                 the policy to sign in through it",
                denied.message
            ));
        }
        let exchange = self.exchange(policy, method, endpoint, headers, body);
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(why)) => Err(format!("{what} to {origin}: {why}")),
            Err(_) => Err(format!(
                "{what} to {origin}: no whole answer within {}s",
                self.timeout.as_secs_f32()
            )),
        }
    }

    async fn connect(&self, policy: &Policy, endpoint: &Endpoint) -> Result<TcpStream, String> {
        let name = endpoint.host.to_string();
        let bare = name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((bare.as_str(), endpoint.port))
            .await
            .map_err(|e| format!("cannot resolve the host: {e}"))?
            .collect();
        let mut last = "the host resolves to no address".to_string();
        for addr in addrs {
            let decision = policy.check_address(&endpoint.host, endpoint.port, addr.ip());
            if !decision.is_allowed() {
                last = decision.message.clone();
                continue;
            }
            match TcpStream::connect(addr).await {
                Ok(tcp) => return Ok(tcp),
                Err(e) => last = format!("cannot connect: {e}"),
            }
        }
        Err(last)
    }

    async fn exchange(
        &self,
        policy: &Policy,
        method: Method,
        endpoint: &Endpoint,
        headers: &[(HeaderName, HeaderValue)],
        body: Option<Body<'_>>,
    ) -> Result<Answer, String> {
        let tcp = self.connect(policy, endpoint).await?;
        let mut sender = https1(&self.tls, tcp, &endpoint.host.to_string()).await?;
        let mut request = Request::builder()
            .method(method)
            .uri(endpoint.target.as_str())
            .header(HOST, endpoint.host.authority(endpoint.port))
            .header(USER_AGENT, concat!("fenzi/", env!("CARGO_PKG_VERSION")));
        if !headers.iter().any(|(name, _)| name == ACCEPT) {
            request = request.header(ACCEPT, "application/json");
        }
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let bytes = match body {
            Some(b) => {
                request = request.header(CONTENT_TYPE, b.content_type);
                Bytes::from(b.bytes)
            }
            None => Bytes::new(),
        };
        let request = request
            .body(Full::new(bytes))
            .map_err(|e| format!("HTTP failed: {e}"))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("HTTP failed: {e}"))?;
        let status = response.status();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let www_authenticate = response
            .headers()
            .get_all(WWW_AUTHENTICATE)
            .iter()
            .map(|v| v.as_bytes().to_vec())
            .collect();
        let body = crate::connection::body::read_bounded(response, MAX_ANSWER_BYTES).await?;
        Ok(Answer {
            status,
            content_type,
            www_authenticate,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_is_https_without_fragment_or_user_and_keeps_its_query() {
        let e = Endpoint::parse(
            "https://auth.example.com:8443/oauth/authorize?tenant=a",
            "x",
        )
        .unwrap();
        assert_eq!(e.port, 8443);
        assert_eq!(e.target, "/oauth/authorize?tenant=a");
        assert_eq!(e.path(), "/oauth/authorize");
        assert_eq!(
            e.url_without_query(),
            "https://auth.example.com:8443/oauth/authorize"
        );
        assert_eq!(e.pattern().to_string(), "auth.example.com:8443");
        assert_eq!(
            Endpoint::parse("https://auth.example.com/token", "x")
                .unwrap()
                .origin(),
            "https://auth.example.com"
        );
        let plain = Endpoint::parse("http://auth.example.com/token", "the token endpoint");
        assert!(
            plain
                .unwrap_err()
                .contains("the token endpoint is not https")
        );
        assert!(Endpoint::parse("https://auth.example.com/t#f", "x").is_err());
        let user = Endpoint::parse("https://u:secret-pass@auth.example.com/t", "x").unwrap_err();
        assert!(!user.contains("secret-pass"), "{user}");
    }
}
