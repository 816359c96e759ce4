//! Reading a remote MCP server's whole tool list the way an MCP client does, for `fenzi mcp pin`:
//! `initialize`, `notifications/initialized`, `tools/list` page by page (following `nextCursor`),
//! then `DELETE` of the session. Answers may be JSON or an event stream; both are read strictly
//! (the policy crate's JSON parser and SSE reader), and only the answer carrying the request's id
//! is taken (notifications and server requests on the stream are skipped).
//!
//! The connection is made directly, not through a proxy: the person running the command chose the
//! server by naming it in their policy. TLS is verified as the proxy verifies upstreams (the public
//! roots plus `--upstream-ca`), and a request carries the server's token only when the policy says
//! `token: true`. Errors name the step and what was wrong; they never quote the token, and quote
//! nothing of an answer but its status and a JSON-RPC error's code and message (withheld when it
//! holds the token in any spelling the scrubber knows, [`crate::secrets::scrub`]).

use crate::tls::upstream::client_config;
use bytes::Bytes;
use fenzi_policy::config::RemoteUrl;
use fenzi_policy::json::{self, JsonLimits, Value};
use fenzi_policy::mcp::inventory::MAX_TOOLS;
use fenzi_policy::response::sse::{SseItem, SseReader};
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST};
use http::{HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use std::collections::HashSet;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// The protocol version asked for in `initialize` (the server may answer with another it speaks).
pub const PROTOCOL_VERSION: &str = "2025-06-18";
/// Largest answer read, in bytes.
pub const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;
/// Most `tools/list` pages followed.
pub const MAX_PAGES: usize = 1000;

/// Where and how to list.
pub struct ListingTarget<'a> {
    pub url: &'a RemoteUrl,
    /// Sent as `Authorization: Bearer …` when present.
    pub bearer: Option<&'a str>,
    /// Trusted beside the public roots.
    pub extra_roots: &'a [CertificateDer<'static>],
    /// For each exchange (connect, TLS, answer).
    pub timeout: Duration,
}

/// Why the list could not be read. `step` is the request being made.
#[derive(Debug, thiserror::Error)]
pub enum ListingError {
    #[error("{step}: cannot connect to {authority}: {source}")]
    Connect {
        step: &'static str,
        authority: String,
        source: std::io::Error,
    },
    #[error("{step}: TLS with {authority} failed: {source}")]
    Tls {
        step: &'static str,
        authority: String,
        source: std::io::Error,
    },
    #[error("{step}: {why}")]
    Http { step: &'static str, why: String },
    #[error("{step}: the server answered {status}{hint}")]
    Status {
        step: &'static str,
        status: StatusCode,
        hint: &'static str,
    },
    #[error("{step}: the server's answer cannot be used: {why}")]
    Answer { step: &'static str, why: String },
    #[error("{step}: no answer within {}s", .timeout.as_secs_f32())]
    Timeout {
        step: &'static str,
        timeout: Duration,
    },
    #[error("the server's TLS settings cannot be made: {0}")]
    Config(String),
}

impl ListingError {
    fn http(step: &'static str, why: impl std::fmt::Display) -> ListingError {
        ListingError::Http {
            step,
            why: why.to_string(),
        }
    }
    fn answer(step: &'static str, why: impl Into<String>) -> ListingError {
        ListingError::Answer {
            step,
            why: why.into(),
        }
    }
}

/// What the server said about itself and its tools.
#[derive(Debug)]
pub struct Listing {
    /// The protocol version the server answered `initialize` with.
    pub protocol_version: String,
    /// Every `tools/list` entry, in the order listed (each an object with a string `name`; names
    /// are unique).
    pub tools: Vec<Value>,
}

/// Lists every tool of the server at `target`.
pub async fn list_tools(target: &ListingTarget<'_>) -> Result<Listing, ListingError> {
    let mut client = Client::new(target)?;
    let init = client
        .rpc(
            "initialize",
            serde_json::json!({
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "fenzi", "version": env!("CARGO_PKG_VERSION")},
            }),
        )
        .await?;
    let version = init
        .get("protocolVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| ListingError::answer("initialize", "the result has no protocolVersion"))?;
    client.protocol_version = Some(version.to_string());
    client.notify("notifications/initialized").await?;

    let listed = list_pages(&mut client).await;
    // The session ends whatever the listing gave; a server that does not support DELETE is fine.
    client.end_session().await;
    Ok(Listing {
        protocol_version: version.to_string(),
        tools: listed?,
    })
}

async fn list_pages(client: &mut Client<'_>) -> Result<Vec<Value>, ListingError> {
    const STEP: &str = "tools/list";
    let mut tools = Vec::new();
    let mut names = HashSet::new();
    let mut cursors = HashSet::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = match &cursor {
            Some(c) => serde_json::json!({"cursor": c}),
            None => serde_json::json!({}),
        };
        let result = client.rpc(STEP, params).await?;
        let Some(Value::Array(page)) = result.get("tools") else {
            return Err(ListingError::answer(STEP, "the result has no tools array"));
        };
        for (i, entry) in page.iter().enumerate() {
            let name = entry
                .as_object()
                .and_then(|_| entry.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ListingError::answer(
                        STEP,
                        format!("entry {i} of a page is not an object with a string name"),
                    )
                })?;
            if !names.insert(name.to_string()) {
                return Err(ListingError::answer(
                    STEP,
                    format!(
                        "the server lists the tool {name:?} twice; which definition is meant cannot be told"
                    ),
                ));
            }
            tools.push(entry.clone());
        }
        if tools.len() > MAX_TOOLS {
            return Err(ListingError::answer(
                STEP,
                format!("more than {MAX_TOOLS} tools"),
            ));
        }
        match result.get("nextCursor") {
            None | Some(Value::Null) => return Ok(tools),
            Some(Value::String(next)) => {
                if !cursors.insert(next.clone()) {
                    return Err(ListingError::answer(
                        STEP,
                        "the server gave the same nextCursor twice (its pages loop)",
                    ));
                }
                cursor = Some(next.clone());
            }
            Some(_) => return Err(ListingError::answer(STEP, "nextCursor is not a string")),
        }
    }
    Err(ListingError::answer(
        STEP,
        format!("more than {MAX_PAGES} pages"),
    ))
}

struct Client<'a> {
    target: &'a ListingTarget<'a>,
    tls: Option<TlsConnector>,
    authority: String,
    session: Option<HeaderValue>,
    protocol_version: Option<String>,
    next_id: u64,
}

/// One HTTP exchange's answer, read whole or up to the awaited message.
struct Answer {
    status: StatusCode,
    content_type: String,
    session: Option<HeaderValue>,
    body: hyper::body::Incoming,
}

impl<'a> Client<'a> {
    fn new(target: &'a ListingTarget<'a>) -> Result<Client<'a>, ListingError> {
        let url = target.url;
        let tls = if url.tls {
            let config = client_config(target.extra_roots)
                .map_err(|e| ListingError::Config(e.to_string()))?;
            Some(TlsConnector::from(config))
        } else {
            None
        };
        let host = match &url.host {
            fenzi_policy::host::Host::Ip(std::net::IpAddr::V6(ip)) => format!("[{ip}]"),
            host => host.to_string(),
        };
        let default_port = if url.tls { 443 } else { 80 };
        let authority = if url.port == default_port {
            host
        } else {
            format!("{host}:{}", url.port)
        };
        Ok(Client {
            target,
            tls,
            authority,
            session: None,
            protocol_version: None,
            next_id: 1,
        })
    }

    /// A request and its JSON-RPC result.
    async fn rpc(
        &mut self,
        step: &'static str,
        params: serde_json::Value,
    ) -> Result<Value, ListingError> {
        let id = self.next_id;
        self.next_id += 1;
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": step, "params": params});
        let timeout = self.target.timeout;
        let exchange = async {
            let answer = self
                .send(step, Method::POST, Some(body.to_string()))
                .await?;
            if step == "initialize" {
                self.session = answer.session.clone();
            }
            check_status(step, answer.status)?;
            read_result(step, id, answer, self.target.bearer).await
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| ListingError::Timeout { step, timeout })?
    }

    /// A notification: any success status will do, and the body is not read.
    async fn notify(&mut self, method: &'static str) -> Result<(), ListingError> {
        let body = serde_json::json!({"jsonrpc": "2.0", "method": method});
        let timeout = self.target.timeout;
        let answer = tokio::time::timeout(
            timeout,
            self.send(method, Method::POST, Some(body.to_string())),
        )
        .await
        .map_err(|_| ListingError::Timeout {
            step: method,
            timeout,
        })??;
        check_status(method, answer.status)
    }

    async fn end_session(&mut self) {
        if self.session.is_none() {
            return;
        }
        let _ = tokio::time::timeout(
            self.target.timeout,
            self.send("DELETE", Method::DELETE, None),
        )
        .await;
    }

    /// One exchange on a fresh connection (a server may close after each answer; a listing is a
    /// handful of requests).
    async fn send(
        &self,
        step: &'static str,
        method: Method,
        body: Option<String>,
    ) -> Result<Answer, ListingError> {
        let url = self.target.url;
        let host = url.host.to_string();
        let tcp = TcpStream::connect((host.as_str(), url.port))
            .await
            .map_err(|source| ListingError::Connect {
                step,
                authority: self.authority.clone(),
                source,
            })?;
        let _ = tcp.set_nodelay(true);
        let mut request = Request::builder()
            .method(method)
            .uri(url.path.as_str())
            .header(HOST, self.authority.as_str())
            .header(ACCEPT, "application/json, text/event-stream");
        if body.is_some() {
            request = request.header(CONTENT_TYPE, "application/json");
        }
        if let Some(version) = &self.protocol_version {
            request = request.header("mcp-protocol-version", version.as_str());
        }
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session.clone());
        }
        if let Some(token) = self.target.bearer {
            let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                ListingError::http(step, "the server's token is not a valid header value")
            })?;
            value.set_sensitive(true);
            request = request.header(AUTHORIZATION, value);
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| ListingError::http(step, e))?;
        let response = match &self.tls {
            Some(tls) => {
                let name = ServerName::try_from(host.clone())
                    .map_err(|e| ListingError::http(step, format!("{host}: {e}")))?;
                let stream = tls
                    .connect(name, tcp)
                    .await
                    .map_err(|source| ListingError::Tls {
                        step,
                        authority: self.authority.clone(),
                        source,
                    })?;
                exchange(step, TokioIo::new(stream), request).await?
            }
            None => exchange(step, TokioIo::new(tcp), request).await?,
        };
        let (parts, body) = response.into_parts();
        let header = |name: &str| parts.headers.get(name).cloned();
        Ok(Answer {
            status: parts.status,
            content_type: header(CONTENT_TYPE.as_str())
                .and_then(|v| v.to_str().ok().map(str::to_ascii_lowercase))
                .unwrap_or_default(),
            session: header("mcp-session-id"),
            body,
        })
    }
}

async fn exchange<T>(
    step: &'static str,
    io: TokioIo<T>,
    request: Request<Full<Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, ListingError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| ListingError::http(step, e))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    sender
        .send_request(request)
        .await
        .map_err(|e| ListingError::http(step, e))
}

fn check_status(step: &'static str, status: StatusCode) -> Result<(), ListingError> {
    if status.is_success() {
        return Ok(());
    }
    let hint = match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            " (does the server need `token: true` and a stored token: `fenzi mcp token SERVER`?)"
        }
        _ => "",
    };
    Err(ListingError::Status { step, status, hint })
}

fn limits() -> JsonLimits {
    JsonLimits {
        max_bytes: MAX_ANSWER_BYTES,
        ..JsonLimits::default()
    }
}

/// The `result` of the answer to request `id`, from a JSON body or an event stream.
async fn read_result(
    step: &'static str,
    id: u64,
    answer: Answer,
    bearer: Option<&str>,
) -> Result<Value, ListingError> {
    let media = answer
        .content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    let mut body = answer.body;
    match media.as_str() {
        "application/json" => {
            let mut bytes = Vec::new();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| ListingError::http(step, e))?;
                if let Some(data) = frame.data_ref() {
                    bytes.extend_from_slice(data);
                    if bytes.len() > MAX_ANSWER_BYTES {
                        return Err(ListingError::answer(
                            step,
                            format!("larger than {MAX_ANSWER_BYTES} bytes"),
                        ));
                    }
                }
            }
            let value = json::parse(&bytes, &limits())
                .map_err(|e| ListingError::answer(step, format!("not strict JSON: {e}")))?;
            let messages = match value {
                Value::Array(items) => items,
                one => vec![one],
            };
            for message in &messages {
                if let Some(result) = answer_to(step, id, message, bearer)? {
                    return Ok(result);
                }
            }
            Err(ListingError::answer(
                step,
                "the JSON answer does not answer the request",
            ))
        }
        "text/event-stream" => {
            let mut reader = SseReader::new(MAX_ANSWER_BYTES);
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| ListingError::http(step, e))?;
                let Some(data) = frame.data_ref() else {
                    continue;
                };
                reader.push(data);
                while let Some(item) = reader
                    .next_item()
                    .map_err(|e| ListingError::answer(step, format!("event stream: {e}")))?
                {
                    let SseItem::Event(event) = item else {
                        continue;
                    };
                    let Some(data) = event.data else { continue };
                    let message = json::parse(data.as_bytes(), &limits()).map_err(|e| {
                        ListingError::answer(step, format!("an event is not strict JSON: {e}"))
                    })?;
                    if let Some(result) = answer_to(step, id, &message, bearer)? {
                        return Ok(result);
                    }
                }
            }
            Err(ListingError::answer(
                step,
                "the event stream ended without the answer",
            ))
        }
        // The server's own text is not quoted: it could hold anything, the token included.
        _ => Err(ListingError::answer(
            step,
            "the answer's Content-Type is not application/json or text/event-stream",
        )),
    }
}

/// Whether `text` holds `token`: as it is, or in any spelling the session scrubber finds (JSON,
/// percent, base64, hex).
fn holds_token(text: &str, token: &str) -> bool {
    if token.is_empty() {
        return false;
    }
    if text.contains(token) {
        return true;
    }
    let mut set = crate::secrets::SecretSet::new();
    // A token the set refuses (too short for scrubbing) was looked for as it is above.
    if set
        .insert("MCP_LISTING", token.as_bytes().to_vec())
        .is_err()
    {
        return false;
    }
    crate::secrets::Scrubber::new(&set)
        .map(|scrubber| scrubber.scrub(text.as_bytes()).is_some())
        // A scrubber that cannot be built finds nothing: withhold rather than show.
        .unwrap_or(true)
}

/// `Some(result)` when `message` answers request `id`; an error when it answers it with an error.
fn answer_to(
    step: &'static str,
    id: u64,
    message: &Value,
    bearer: Option<&str>,
) -> Result<Option<Value>, ListingError> {
    let answers = matches!(message.get("id"), Some(Value::Number(n)) if n == &id.to_string())
        && message.get("method").is_none();
    if !answers {
        return Ok(None);
    }
    if let Some(error) = message.get("error") {
        let code = match error.get("code") {
            Some(Value::Number(n)) => n.clone(),
            _ => "?".into(),
        };
        let text = error.get("message").and_then(Value::as_str).unwrap_or("");
        let text: String = if bearer.is_some_and(|b| holds_token(text, b)) {
            "(message withheld: it holds the token)".into()
        } else {
            text.chars().filter(|c| !c.is_control()).take(200).collect()
        };
        return Err(ListingError::answer(
            step,
            format!("JSON-RPC error {code}: {text}"),
        ));
    }
    message
        .get("result")
        .filter(|r| r.as_object().is_some())
        .cloned()
        .map(Some)
        .ok_or_else(|| ListingError::answer(step, "the answer has no result object"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    #[test]
    fn a_message_holding_the_token_in_any_spelling_is_withheld() {
        let token = "tok_0123456789/abcdef";
        let b64 = base64::engine::general_purpose::STANDARD.encode(token);
        for text in [
            format!("bad token {token}"),
            format!("bad token {}", token.replace('/', "\\/")),
            format!("bad token {}", token.replace('/', "%2F")),
            format!("echo {b64}"),
        ] {
            assert!(holds_token(&text, token), "{text}");
        }
        assert!(!holds_token("invalid token", token));
        let message = serde_json::json!({"jsonrpc": "2.0", "id": 2,
            "error": {"code": -32001, "message": format!("bad {b64}")}});
        let message = json::parse(message.to_string().as_bytes(), &limits()).unwrap();
        let error = answer_to("tools/list", 2, &message, Some(token)).unwrap_err();
        let shown = error.to_string();
        assert!(
            shown.contains("withheld") && !shown.contains(&b64),
            "{shown}"
        );
    }
}
