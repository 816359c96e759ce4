//! The proxy's errors, each classified by where it came from: the client, the upstream or the proxy
//! itself (linkerd-style). The class is what a `failed` audit record names as its `source`, and the
//! error picks the reason code and so the status the client gets. A policy's refusal is a decision,
//! not an error, so no error comes from the policy.
//!
//! May use: `connection`, `lock_file`, `secrets`, `tls`.

use fenzi_policy::Reason;
use fenzi_policy::config::units::{show_duration, show_size};
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// Who caused a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorSource {
    Client,
    Upstream,
    Proxy,
}

impl ErrorSource {
    /// As written in the audit log's `source` field.
    pub fn label(self) -> &'static str {
        match self {
            ErrorSource::Client => "client",
            ErrorSource::Upstream => "upstream",
            ErrorSource::Proxy => "proxy",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("could not resolve {host}: {error}")]
    Resolve { host: String, error: io::Error },
    #[error("{host} resolved to no address")]
    NoAddress { host: String },
    /// A local server (DESIGN §18) that cannot be reached through a bridge.
    #[error("local MCP server {server}: {why}")]
    LocalServer { server: String, why: &'static str },
    #[error("resolving {host} took longer than {after:?}")]
    ResolveTimeout { host: String, after: Duration },
    #[error("could not connect to {addr}: {error}")]
    Connect { addr: SocketAddr, error: io::Error },
    #[error("connecting to {addr} took longer than {after:?}")]
    ConnectTimeout { addr: SocketAddr, after: Duration },
    #[error("TLS with upstream {host} failed: {error}")]
    UpstreamTls { host: String, error: io::Error },
    #[error("TLS handshake with upstream {host} took longer than {after:?}")]
    UpstreamTlsTimeout { host: String, after: Duration },
    #[error("the upstream HTTP exchange failed: {0}")]
    UpstreamHttp(hyper::Error),
    #[error("the upstream sent no response head within {0:?}")]
    UpstreamTimeout(Duration),
    /// The response body broke off after its head was passed on (its error, as text).
    #[error("the upstream's response body broke off: {0}")]
    UpstreamBody(String),
    #[error("TLS handshake with the client failed (does it trust the session CA?): {0}")]
    ClientTls(io::Error),
    #[error("TLS handshake with the client took longer than {0:?}")]
    ClientTlsTimeout(Duration),
    #[error("reading the request body failed: {0}")]
    ClientBody(String),
    #[error("the request body was not received within {0:?}")]
    ClientBodyTimeout(Duration),
    #[error("the audit log could not be written: {0}")]
    Audit(String),
    #[error("TLS setup failed: {0}")]
    TlsSetup(String),
    /// The upstream framed its answer in a way fenzi does not accept (a transfer-coding other than
    /// `chunked`, a `206` to a request a secret value was written into).
    #[error(transparent)]
    Unaccepted(#[from] crate::connection::framing::Unaccepted),
    /// The upstream's response cannot be checked for secret values (an encoded body).
    #[error(transparent)]
    Unscrubbable(#[from] crate::secrets::Unscrubbable),
    /// The session's secrets could not be set up, or a value could not be placed in a request.
    #[error(transparent)]
    Secrets(#[from] crate::secrets::SecretsError),
    /// A message from an MCP server that cannot be read strictly (never passed on).
    #[error("the upstream's answer cannot be read: {0}")]
    UnreadableResponse(#[from] fenzi_policy::response::ResponseError),
    /// An MCP server answered a POST of notifications and responses with something other than
    /// `202` without a body; the client got `202` without a body. `body` is fenzi's own words for
    /// what came (never the server's bytes or its `Content-Type`).
    #[error(
        "the server answered a POST of notifications or responses with {status} and {body}, not \
         202 without a body: the client got 202, the body was dropped unread"
    )]
    NotificationAnswer { status: u16, body: &'static str },
    /// A `tools/call`'s answer did not end within its `limits` entry's `timeout` ([`crate::session::limits`]).
    #[error("the answer did not end within {}, the limit {rule}", show_duration(*after))]
    LimitTimeout { after: Duration, rule: String },
    /// A `tools/call`'s answer grew past its `limits` entry's `max_response`.
    #[error("the answer is larger than {}, the limit {rule}", show_size(*cap))]
    ResponseTooLarge { cap: u64, rule: String },
    /// A pinned server's lock file cannot be used.
    #[error(transparent)]
    LockFile(#[from] crate::lock_file::LockFileError),
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl ProxyError {
    /// Who caused it.
    pub fn source_kind(&self) -> ErrorSource {
        use ProxyError::*;
        match self {
            Resolve { .. }
            | NoAddress { .. }
            | LocalServer { .. }
            | ResolveTimeout { .. }
            | Connect { .. }
            | ConnectTimeout { .. }
            | UpstreamTls { .. }
            | UpstreamTlsTimeout { .. }
            | UpstreamHttp(_)
            | UpstreamTimeout(_)
            | UpstreamBody(_)
            | UnreadableResponse(_)
            | NotificationAnswer { .. }
            | LimitTimeout { .. }
            | ResponseTooLarge { .. }
            | Unaccepted(_)
            | Unscrubbable(_) => ErrorSource::Upstream,
            ClientTls(_) | ClientTlsTimeout(_) | ClientBody(_) | ClientBodyTimeout(_) => {
                ErrorSource::Client
            }
            Audit(_) | TlsSetup(_) | Secrets(_) | LockFile(_) | Io(_) => ErrorSource::Proxy,
        }
    }

    /// What the audit record's `rule` says of a failure whose reason alone points nowhere: a
    /// client's TLS failure, with the alert or error it gave; the `limits` entry that cut an answer. Only texts made of fenzi's and
    /// rustls's own words (never a name or byte the peer chose) go into the record.
    pub fn record_detail(&self) -> Option<String> {
        match self {
            ProxyError::ClientTls(e) => {
                let tls = e
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<rustls::Error>());
                Some(match tls {
                    Some(tls) => format!("client TLS handshake: {tls}"),
                    None => format!("client TLS handshake: {:?}", e.kind()),
                })
            }
            ProxyError::ClientTlsTimeout(after) => Some(format!(
                "client TLS handshake: not finished within {}s",
                after.as_secs_f32()
            )),
            ProxyError::NotificationAnswer { status, body } => Some(format!(
                "notification answer: {status} with {body}, not 202 without a body; the client got 202"
            )),
            // The limit's rule, as a denial by a limit names it.
            ProxyError::LimitTimeout { rule, .. } | ProxyError::ResponseTooLarge { rule, .. } => {
                Some(rule.clone())
            }
            _ => None,
        }
    }

    /// The reason code the client's response and the audit record carry.
    pub fn reason(&self) -> Reason {
        match self {
            ProxyError::Audit(_) => Reason::AuditUnavailable,
            ProxyError::LimitTimeout { .. } => Reason::Timeout,
            ProxyError::ResponseTooLarge { .. } => Reason::ResponseTooLarge,
            _ => match self.source_kind() {
                ErrorSource::Client => Reason::BadRequest,
                // Our own failures (a leaf that could not be minted) also mean the upstream cannot be
                // reached through us; 502 tells the client not to blame its request.
                ErrorSource::Upstream | ErrorSource::Proxy => Reason::UpstreamError,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message and every source below it, as a chain printer (anyhow's `{:#}`) shows them.
    fn chain(error: &dyn std::error::Error) -> String {
        let mut text = error.to_string();
        let mut next = error.source();
        while let Some(cause) = next {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            next = cause.source();
        }
        text
    }

    #[test]
    fn a_cause_is_named_once_in_the_printed_chain() {
        let io = || io::Error::other("disk gone");
        let write = crate::secrets::SecretsError::Write {
            path: "/x/placeholders.env".into(),
            error: io(),
        };
        let cases: Vec<Box<dyn std::error::Error>> = vec![
            Box::new(ProxyError::Io(io())),
            Box::new(ProxyError::Secrets(write)),
            Box::new(crate::tls::CaError::Rustls(rustls::Error::General(
                "disk gone".into(),
            ))),
        ];
        for error in cases {
            let text = chain(error.as_ref());
            assert_eq!(text.matches("disk gone").count(), 1, "{text}");
        }
    }
}
