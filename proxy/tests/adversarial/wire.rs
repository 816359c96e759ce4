//! The client side of a case and the reading of bytes: running a case's send steps over a stream
//! while reading responses, TLS toward the proxy (verified, or as a lying client), HTTP/2 requests,
//! and two small HTTP/1.1 readers: responses as the client got them, and the request lines an
//! upstream received, read the way an upstream would frame them (so a smuggled request shows).

use super::cases::{Message, Sni, Step};
use crate::common::{AnyCert, client_config};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest a case waits for its responses.
const DEADLINE: Duration = Duration::from_secs(6);
/// Quiet time after the expected responses before a case counts as done.
const QUIET: Duration = Duration::from_millis(80);

/// One response as the client read it.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Resp {
    /// The reason code the body names: `error` (a string) of a plain denial, `error.data.reason` of a
    /// JSON-RPC error, the common one of an array of them; `-` when it names none.
    pub fn reason(&self) -> String {
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(&self.body) else {
            return "-".into();
        };
        fn one(v: &serde_json::Value) -> Option<String> {
            if let Some(s) = v.get("error").and_then(|e| e.as_str()) {
                return Some(s.to_string());
            }
            v.get("error")?
                .get("data")?
                .get("reason")?
                .as_str()
                .map(str::to_string)
        }
        match &value {
            serde_json::Value::Array(items) => {
                // Each distinct reason once, in order: `a` or `a,b`; `-` when none names one.
                let mut reasons: Vec<String> = Vec::new();
                for r in items.iter().filter_map(one) {
                    if !reasons.contains(&r) {
                        reasons.push(r);
                    }
                }
                if reasons.is_empty() {
                    "-".into()
                } else {
                    reasons.join(",")
                }
            }
            v => one(v).unwrap_or_else(|| "-".into()),
        }
    }
}

/// What the client saw.
#[derive(Debug, Default)]
pub struct Seen {
    pub responses: Vec<Resp>,
    /// Bytes after the last complete response (pass-through data, or a response cut short).
    pub tail: Vec<u8>,
    pub closed: bool,
    pub timed_out: bool,
    pub tls_error: Option<String>,
    /// Set when the CONNECT before a tunnel was not answered 200.
    pub connect_refused: Option<String>,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Decodes a chunked body starting at `at`; `Some((body, end))` when complete.
fn dechunk(buf: &[u8], mut at: usize) -> Option<(Vec<u8>, usize)> {
    let mut body = Vec::new();
    loop {
        let line_end = at + find(&buf[at..], b"\r\n")?;
        let size_text = std::str::from_utf8(&buf[at..line_end]).ok()?;
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).ok()?;
        at = line_end + 2;
        if size == 0 {
            // Trailers until an empty line.
            loop {
                let end = at + find(&buf[at..], b"\r\n")?;
                let empty = end == at;
                at = end + 2;
                if empty {
                    return Some((body, at));
                }
            }
        }
        if buf.len() < at + size + 2 {
            return None;
        }
        body.extend_from_slice(&buf[at..at + size]);
        at += size + 2;
    }
}

/// Parses complete HTTP/1.x responses from `buf`; returns them and where parsing stopped.
pub fn parse_responses(buf: &[u8], eof: bool) -> (Vec<Resp>, usize) {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        if !buf[at..].starts_with(b"HTTP/") {
            break;
        }
        let Some(head_len) = find(&buf[at..], b"\r\n\r\n") else {
            break;
        };
        let head = String::from_utf8_lossy(&buf[at..at + head_len]).into_owned();
        let Some(status) = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.get(..3))
            .and_then(|s| s.parse::<u16>().ok())
        else {
            break;
        };
        let body_at = at + head_len + 4;
        if (100..200).contains(&status) || status == 204 || status == 304 {
            out.push(Resp {
                status,
                body: Vec::new(),
            });
            at = body_at;
            if status == 101 {
                break;
            }
            continue;
        }
        let chunked = header(&head, "transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        if chunked {
            let Some((body, end)) = dechunk(buf, body_at) else {
                break;
            };
            out.push(Resp { status, body });
            at = end;
        } else if let Some(len) = header(&head, "content-length").and_then(|v| v.parse().ok()) {
            let len: usize = len;
            if buf.len() < body_at + len {
                break;
            }
            out.push(Resp {
                status,
                body: buf[body_at..body_at + len].to_vec(),
            });
            at = body_at + len;
        } else if (200..300).contains(&status) {
            // Unframed 2xx: the answer to a CONNECT; what follows is the tunnel.
            out.push(Resp {
                status,
                body: Vec::new(),
            });
            at = body_at;
        } else if eof {
            out.push(Resp {
                status,
                body: buf[body_at..].to_vec(),
            });
            at = buf.len();
        } else {
            break;
        }
    }
    (out, at)
}

/// The request lines in `bytes` as an HTTP/1.1 server would frame them (Content-Length or chunked
/// bodies skipped); anything that does not frame is shown as `<unframed N bytes>`.
pub fn request_lines(bytes: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let Some(head_len) = find(&bytes[at..], b"\r\n\r\n") else {
            out.push(format!("<unframed {} bytes>", bytes.len() - at));
            break;
        };
        let head = String::from_utf8_lossy(&bytes[at..at + head_len]).into_owned();
        out.push(head.split("\r\n").next().unwrap_or("").to_string());
        let body_at = at + head_len + 4;
        let chunked = header(&head, "transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        if chunked {
            match dechunk(bytes, body_at) {
                Some((_, end)) => at = end,
                None => {
                    out.push(format!("<unframed {} bytes>", bytes.len() - body_at));
                    break;
                }
            }
        } else {
            let len: usize = header(&head, "content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if bytes.len() < body_at + len {
                out.push(format!("<unframed {} bytes>", bytes.len() - body_at));
                break;
            }
            at = body_at + len;
        }
    }
    out
}

#[derive(Default)]
struct ReadState {
    buf: Vec<u8>,
    eof: bool,
    last: Option<Instant>,
}

/// Runs `steps` over `stream` while reading what comes back; stops at EOF, or once `expected`
/// responses have come and the line has been quiet, or at the deadline.
pub async fn converse<S>(stream: S, steps: &[Step], expected: usize, wait_ms: u64, seen: &mut Seen)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut rd, mut wr) = tokio::io::split(stream);
    let state = Arc::new(Mutex::new(ReadState::default()));
    let reader = {
        let state = state.clone();
        tokio::spawn(async move {
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                let n = rd.read(&mut chunk).await.unwrap_or(0);
                let mut s = state.lock().unwrap();
                s.last = Some(Instant::now());
                if n == 0 {
                    s.eof = true;
                    return;
                }
                s.buf.extend_from_slice(&chunk[..n]);
            }
        })
    };
    let parsed = |state: &Mutex<ReadState>| {
        let s = state.lock().unwrap();
        (parse_responses(&s.buf, s.eof).0.len(), s.eof, s.last)
    };
    let start = Instant::now();
    let mut awaited = 0;
    for step in steps {
        match step {
            Step::Send(bytes) => {
                // The proxy may close first; what it answered is still read.
                if wr.write_all(bytes).await.is_err() {
                    break;
                }
                let _ = wr.flush().await;
            }
            Step::Pause(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
            Step::AwaitResponse => {
                awaited += 1;
                loop {
                    let (n, eof, _) = parsed(&state);
                    if n >= awaited || eof || start.elapsed() > DEADLINE {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
    }
    let sent_at = Instant::now();
    let quiet = QUIET.max(Duration::from_millis(wait_ms));
    loop {
        let (n, eof, last) = parsed(&state);
        if eof {
            break;
        }
        let since = last.map_or(sent_at.elapsed(), |l| l.elapsed().min(sent_at.elapsed()));
        if n >= expected && since >= quiet {
            break;
        }
        if start.elapsed() > DEADLINE {
            seen.timed_out = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    reader.abort();
    let s = state.lock().unwrap();
    let (responses, used) = parse_responses(&s.buf, s.eof);
    seen.responses.extend(responses);
    seen.tail = s.buf[used..].to_vec();
    seen.closed = s.eof;
}

/// Sends `CONNECT target` and reads the answer's head byte by byte (nothing after it is consumed).
pub async fn open_tunnel(proxy: std::net::SocketAddr, target: &str) -> Result<TcpStream, String> {
    let mut stream = TcpStream::connect(proxy)
        .await
        .map_err(|e| format!("cannot reach the proxy: {e}"))?;
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout(DEADLINE, stream.read(&mut byte)).await {
            Ok(Ok(1)) => head.push(byte[0]),
            _ => {
                return Err(format!(
                    "CONNECT answer cut short: {:?}",
                    String::from_utf8_lossy(&head)
                ));
            }
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    if text.split(' ').nth(1) != Some("200") {
        let mut body = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_millis(300), stream.read(&mut body))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(0);
        return Err(format!(
            "CONNECT {target} answered {:?} {}",
            text.lines().next().unwrap_or(""),
            String::from_utf8_lossy(&body[..n])
        ));
    }
    Ok(stream)
}

/// TLS with the proxy over an open tunnel to `host` (the CONNECT target's canonical host).
pub async fn tls(
    stream: TcpStream,
    ca: &CertificateDer<'static>,
    host: &str,
    sni: &Sni,
    h2: bool,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let alpn: &[&[u8]] = if h2 {
        &[b"h2", b"http/1.1"]
    } else {
        &[b"http/1.1"]
    };
    let mut config = (*client_config(&[ca], alpn)).clone();
    let name = match sni {
        Sni::Target => host.to_string(),
        Sni::Name(name) => name.clone(),
        Sni::None => host.to_string(),
    };
    if *sni != Sni::Target {
        config
            .dangerous()
            .set_certificate_verifier(Arc::new(AnyCert));
    }
    if *sni == Sni::None {
        config.enable_sni = false;
    }
    let name = ServerName::try_from(
        name.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
    )
    .map_err(|e| format!("bad TLS name {name:?}: {e}"))?;
    let connect = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, stream);
    match tokio::time::timeout(DEADLINE, connect).await {
        Ok(Ok(tls)) => Ok(tls),
        Ok(Err(e)) => Err(format!("TLS with the proxy failed: {e}")),
        Err(_) => Err("TLS with the proxy timed out".into()),
    }
}

/// Sends each message as an HTTP/2 request, one after another, over `io`.
pub async fn h2_exchange<T>(io: T, messages: &[Message], seen: &mut Seen)
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let handshake = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io));
    let (mut sender, conn) = match handshake.await {
        Ok(pair) => pair,
        Err(e) => {
            seen.tls_error = Some(format!("h2 handshake failed: {e}"));
            return;
        }
    };
    tokio::spawn(conn);
    for m in messages {
        let mut builder = http::Request::builder()
            .method(m.method.as_str())
            .uri(m.target.as_str());
        for (name, value) in &m.headers {
            builder = builder.header(name.as_str(), value.as_slice());
        }
        if m.method == "POST"
            && !m.no_content_type
            && !m
                .headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
        {
            builder = builder.header("content-type", "application/json");
        }
        let req = match builder.body(Full::new(Bytes::from(m.body.clone()))) {
            Ok(req) => req,
            Err(e) => {
                seen.tls_error = Some(format!("cannot build the h2 request: {e}"));
                return;
            }
        };
        let sent = tokio::time::timeout(DEADLINE, sender.send_request(req)).await;
        let response = match sent {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                seen.tls_error = Some(format!("h2 request failed: {e}"));
                return;
            }
            Err(_) => {
                seen.timed_out = true;
                return;
            }
        };
        let status = response.status().as_u16();
        let body = match response.into_body().collect().await {
            Ok(c) => c.to_bytes().to_vec(),
            Err(_) => Vec::new(),
        };
        seen.responses.push(Resp { status, body });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_and_request_lines_frame_like_http() {
        let buf = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhiHTTP/1.1 403 Forbidden\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nrest";
        let (rs, used) = parse_responses(buf, false);
        assert_eq!(
            rs.iter().map(|r| r.status).collect::<Vec<_>>(),
            [100, 200, 403]
        );
        assert_eq!(rs[2].body, b"abc");
        assert_eq!(&buf[used..], b"rest");
        let reqs = b"POST /a HTTP/1.1\r\ncontent-length: 3\r\n\r\nabcGET /b HTTP/1.1\r\n\r\nxx";
        assert_eq!(
            request_lines(reqs),
            ["POST /a HTTP/1.1", "GET /b HTTP/1.1", "<unframed 2 bytes>"]
        );
    }
}
