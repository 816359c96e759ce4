//! The upstream for `scripts/bench`: a small, fast hyper server on 127.0.0.1 so the benchmark measures
//! the proxies, not the server (the Python MCP SDK would be the bottleneck).
//!
//! ```text
//! bench_upstream --cert CHAIN_PEM --key KEY_PEM [--download-bytes N]
//! ```
//!
//! It binds four listeners on 127.0.0.1 (ports chosen by the kernel) and prints one line
//! `ports http=P tls=P mcp=P mcp_secret=P`:
//! - `http`: plain HTTP;
//! - `tls`: HTTPS, for CONNECT pass-through (listed under `hosts:` in the bench policy);
//! - `mcp`: HTTPS, the MCP server the bench policy intercepts;
//! - `mcp_secret`: HTTPS, the MCP server with `token: true`; it answers 401 unless the request carries
//!   `Authorization: Bearer $BENCH_BEARER`, so a run proves the proxy substituted the real value.
//!
//! Every listener answers the same way, as an MCP server would where it matters:
//! - a POST is read whole and answered with a JSON-RPC result carrying the request's `id`: for
//!   `tools/list`, a list of 200 tools (about 93 KB, the shape of `policy/benches/response.rs`);
//!   for anything else a small `tools/call` result;
//! - a GET of `/mcp` with `x-bench-events: N` streams N small `notifications/progress` events, one
//!   per write (`text/event-stream`); without it, `--download-bytes` (default 100 MiB) of
//!   64 KiB `notifications/message` events;
//! - a GET of `/download` streams `--download-bytes` bytes in 64 KiB chunks with a Content-Length;
//! - any other GET gets a short text body.
//!
//! HTTP/1.1 with keep-alive; ALPN `http/1.1`.

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::net::TcpListener;

type Error = Box<dyn std::error::Error + Send + Sync>;
type ResBody = BoxBody<Bytes, Infallible>;

const CHUNK: usize = 64 * 1024;
const DEFAULT_DOWNLOAD: u64 = 100 * 1024 * 1024;

/// What one listener checks beyond the common behaviour.
#[derive(Clone)]
struct Role {
    /// `Authorization` value every request must carry, if any.
    bearer: Option<Arc<str>>,
    download_bytes: u64,
    /// The `tools/list` result after `"id":` (the id goes first).
    tools_list_tail: Bytes,
    /// One 64 KiB event of the SSE download.
    big_event: Bytes,
}

/// Tools in the `tools/list` answer.
const LISTED_TOOLS: usize = 200;

/// One listed tool, as in `policy/benches/response.rs`.
fn tool(i: usize) -> String {
    let verb = ["get", "list", "create", "delete", "update"][i % 5];
    format!(
        r#"{{"name":"{verb}_thing_{i}","title":"{verb} thing {i}","description":"Does {verb} on thing number {i}. Returns the thing as JSON, with its owner, its labels and its history; fails when the thing does not exist.","inputSchema":{{"type":"object","properties":{{"id":{{"type":"string","description":"The thing's id"}},"limit":{{"type":"integer","minimum":1,"maximum":100}},"labels":{{"type":"array","items":{{"type":"string"}}}}}},"required":["id"]}},"annotations":{{"readOnlyHint":{},"destructiveHint":{}}}}}"#,
        verb == "get" || verb == "list",
        verb == "delete"
    )
}

fn tools_list_tail() -> Bytes {
    let tools: Vec<String> = (0..LISTED_TOOLS).map(tool).collect();
    Bytes::from(format!(r#","result":{{"tools":[{}]}}}}"#, tools.join(",")))
}

/// A `notifications/message` event of exactly `CHUNK` bytes, framing included.
fn big_event() -> Bytes {
    let head = r#"data: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":""#;
    let tail = "\"}}\n\n";
    let pad = CHUNK - head.len() - tail.len();
    Bytes::from(format!("{head}{}{tail}", "x".repeat(pad)))
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut cert = None;
    let mut key = None;
    let mut download_bytes = DEFAULT_DOWNLOAD;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--cert" => cert = it.next().cloned(),
            "--key" => key = it.next().cloned(),
            "--download-bytes" => {
                download_bytes = it.next().ok_or("--download-bytes N")?.parse()?
            }
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    let usage = "usage: bench_upstream --cert CHAIN_PEM --key KEY_PEM [--download-bytes N]";
    let tls = tls_config(&cert.ok_or(usage)?, &key.ok_or(usage)?)?;
    let bearer = std::env::var("BENCH_BEARER")
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| Arc::<str>::from(format!("Bearer {v}")));

    // Two workers: the upstream must never be what limits a run, but it shares the machine with the
    // load generator and the proxy under test.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let open = Role {
            bearer: None,
            download_bytes,
            tools_list_tail: tools_list_tail(),
            big_event: big_event(),
        };
        let secret = Role {
            bearer: bearer.clone(),
            ..open.clone()
        };
        let http = TcpListener::bind("127.0.0.1:0").await?;
        let tls_l = TcpListener::bind("127.0.0.1:0").await?;
        let mcp = TcpListener::bind("127.0.0.1:0").await?;
        let mcp_secret = TcpListener::bind("127.0.0.1:0").await?;
        println!(
            "ports http={} tls={} mcp={} mcp_secret={}",
            http.local_addr()?.port(),
            tls_l.local_addr()?.port(),
            mcp.local_addr()?.port(),
            mcp_secret.local_addr()?.port()
        );
        if bearer.is_none() {
            eprintln!(
                "bench_upstream: BENCH_BEARER unset: the mcp_secret listener refuses everything"
            );
        }
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        tokio::spawn(serve(http, None, open.clone()));
        tokio::spawn(serve(tls_l, Some(acceptor.clone()), open.clone()));
        tokio::spawn(serve(mcp, Some(acceptor.clone()), open));
        serve(mcp_secret, Some(acceptor), secret).await;
        Ok(())
    })
}

fn tls_config(cert: &str, key: &str) -> Result<Arc<ServerConfig>, Error> {
    let chain: Vec<CertificateDer<'static>> =
        rustls_pemfile::certs(&mut std::io::BufReader::new(std::fs::File::open(cert)?))
            .collect::<Result<_, _>>()?;
    let key: PrivateKeyDer<'static> =
        rustls_pemfile::private_key(&mut std::io::BufReader::new(std::fs::File::open(key)?))?
            .ok_or("no private key in --key")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

async fn serve(listener: TcpListener, tls: Option<tokio_rustls::TlsAcceptor>, role: Role) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (tls, role) = (tls.clone(), role.clone());
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let role = role.clone();
                async move { Ok::<_, Infallible>(answer(&role, req).await) }
            });
            let builder = hyper::server::conn::http1::Builder::new();
            match tls {
                None => {
                    let _ = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }
                Some(acceptor) => {
                    let Ok(stream) = acceptor.accept(stream).await else {
                        return;
                    };
                    let _ = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }
            }
        });
    }
}

fn full(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<ResBody> {
    let mut response = Response::new(Full::new(body.into()).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

async fn answer(role: &Role, req: Request<Incoming>) -> Response<ResBody> {
    if let Some(expected) = &role.bearer {
        let got = req
            .headers()
            .get(header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        if got != Some(expected.as_bytes()) {
            // Drain so the connection stays usable for the next request.
            let _ = req.into_body().collect().await;
            return full(
                StatusCode::UNAUTHORIZED,
                "text/plain",
                "wrong or missing token\n",
            );
        }
    }
    if req.method() == http::Method::POST {
        let Ok(body) = req.into_body().collect().await.map(|c| c.to_bytes()) else {
            return full(StatusCode::BAD_REQUEST, "text/plain", "body\n");
        };
        // Only `id` and `method` are kept; serde skips the rest without building it.
        #[derive(serde::Deserialize)]
        struct Call {
            id: Option<serde_json::Value>,
            method: Option<String>,
        }
        let call = serde_json::from_slice::<Call>(&body).ok();
        let is_list = call
            .as_ref()
            .is_some_and(|c| c.method.as_deref() == Some("tools/list"));
        let id = call
            .and_then(|c| c.id)
            .map_or_else(|| "null".to_string(), |id| id.to_string());
        if is_list {
            let mut reply = format!(r#"{{"jsonrpc":"2.0","id":{id}"#).into_bytes();
            reply.extend_from_slice(&role.tools_list_tail);
            return full(StatusCode::OK, "application/json", reply);
        }
        let reply = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"ok"}}],"isError":false}}}}"#
        );
        return full(StatusCode::OK, "application/json", reply);
    }
    let events = req
        .headers()
        .get("x-bench-events")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match req.uri().path() {
        "/mcp" => {
            let body = match events {
                Some(n) => SmallEvents { next: 0, total: n }.boxed(),
                None => Download {
                    left: role.download_bytes / CHUNK as u64 * CHUNK as u64,
                    chunk: role.big_event.clone(),
                }
                .boxed(),
            };
            let mut response = Response::new(body);
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/event-stream"),
            );
            response
        }
        "/download" => {
            let mut response = Response::new(
                Download {
                    left: role.download_bytes,
                    chunk: Bytes::from(vec![b'x'; CHUNK]),
                }
                .boxed(),
            );
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/octet-stream"),
            );
            response
        }
        _ => full(StatusCode::OK, "text/plain", "hello from bench_upstream\n"),
    }
}

/// `total` small progress events, one per frame.
struct SmallEvents {
    next: u64,
    total: u64,
}

impl Body for SmallEvents {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.next == self.total {
            return Poll::Ready(None);
        }
        self.next += 1;
        let event = format!(
            "data: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":\"bench\",\"progress\":{},\"total\":{}}}}}\n\n",
            self.next, self.total
        );
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(event)))))
    }

    fn is_end_stream(&self) -> bool {
        self.next == self.total
    }
}

/// `left` bytes of one shared chunk, streamed: the server holds 64 KiB whatever the size.
struct Download {
    left: u64,
    chunk: Bytes,
}

impl Body for Download {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let n = self.left.min(CHUNK as u64) as usize;
        self.left -= n as u64;
        Poll::Ready(Some(Ok(Frame::data(self.chunk.slice(..n)))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}
