//! The bridge: a local (stdio) MCP server offered as a Streamable HTTP server that only fenzi
//! serves. The request path decides and records every message exactly as for a remote server,
//! then hands the request to [`Bridge::handle`] instead of dialling out; the bridge writes the
//! messages to the server's stdin and answers with what the server writes to its stdout. The
//! answer goes back through the same response phases (list filtering, pins, limits, scrubbing).
//!
//! One server process per MCP session (a stdio server speaks to one client from `initialize` on).
//! The first is started before the agent ([`Bridge::prepare`]) and handed to the first session.
//! A session whose process ended answers 404, so the client starts a new session and with it a new
//! process. A server that keeps crashing is restarted with a growing backoff, and while it waits,
//! `initialize` gets 503 with `Retry-After`: never a hang.
//!
//! Both eras toward the client: Streamable HTTP at `/mcp` (POST, GET, DELETE with
//! `Mcp-Session-Id`), and the 2024-11-05 HTTP+SSE transport at `/sse` and `/messages`.
//!
//! May use: `connection`, `host_files`, `sandbox`.

mod message;
mod sandboxed;
mod server_process;
mod session;

pub use sandboxed::{Egress, EgressListeners, SandboxLauncher, SandboxedCommand};
pub use server_process::{HostCommand, Launch, ServerProcess};

use crate::connection::body::{self, Body};
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use hyper::body::Frame;
use session::{BridgeSession, PostGuard, SessionEvents};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// An answer the bridge gives instead of reaching the server (boxed: it is the rare path).
type Refusal = Box<Response<Body>>;

/// The header naming a Streamable HTTP session.
const SESSION_HEADER: &str = "mcp-session-id";
/// Sessions one bridged server may have at once (each is a process). Clients often leave a
/// session without ending it; a new session beyond this stops the one idle longest.
const MAX_SESSIONS: usize = 8;
/// The first wait after a crash; it doubles with each crash in a row, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A process that lived this long ended for reasons of its own, not a crash loop.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);

/// Where a bridged server's stderr lines and session ends are told.
pub trait BridgeLog: Send + Sync + 'static {
    fn stderr_line(&self, server: &str, line: &str);
    fn note(&self, server: &str, what: &str);
}

/// Stderr and notes to tracing (the session log under `fenzi run`).
#[derive(Debug, Default)]
pub struct TracingLog;

impl BridgeLog for TracingLog {
    fn stderr_line(&self, server: &str, line: &str) {
        tracing::info!(target: "fenzi::bridge", server, "{line}");
    }
    fn note(&self, server: &str, what: &str) {
        tracing::warn!(target: "fenzi::bridge", server, "{what}");
    }
}

/// The session's bridges, by server name.
pub type Bridges = HashMap<String, Arc<Bridge>>;

/// One bridged server.
pub struct Bridge {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    launch: Box<dyn Launch>,
    log: Arc<dyn BridgeLog>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    sessions: HashMap<String, Arc<BridgeSession>>,
    /// Started ahead of need, handed to the next session.
    ready: Option<(ServerProcess, Instant)>,
    /// When each live session's process started (for telling a crash loop from a long life).
    started: HashMap<String, Instant>,
    crashes_in_a_row: u32,
    last_crash: Option<Instant>,
}

impl Bridge {
    pub fn new(
        name: impl Into<String>,
        launch: Box<dyn Launch>,
        log: Arc<dyn BridgeLog>,
    ) -> Bridge {
        Bridge {
            inner: Arc::new(Inner {
                name: name.into(),
                launch,
                log,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// The server's name in the policy.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Starts the first process now (before the agent), so a server that cannot start is known at
    /// once. Must be called inside a tokio runtime.
    pub fn prepare(&self) -> std::io::Result<()> {
        let mut process = self.inner.launch.start()?;
        // Its stderr is read from now, not from when a session takes it: what a server says at
        // start (often why it is about to fail) reaches the log, and a chatty one never blocks
        // on a full pipe while it waits.
        let stderr = std::mem::replace(&mut process.stderr, Box::pin(tokio::io::empty()));
        let (log, name) = (self.inner.log.clone(), self.inner.name.clone());
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                log.stderr_line(&name, &line);
            }
        });
        self.inner.state.lock().expect("bridge state").ready = Some((process, Instant::now()));
        Ok(())
    }

    /// Stops every process (the session is ending).
    pub fn stop_all(&self) {
        let mut state = self.inner.state.lock().expect("bridge state");
        state.ready = None;
        for session in state.sessions.values() {
            session.stop();
        }
    }

    /// Live sessions (each one process).
    pub fn sessions(&self) -> usize {
        self.inner
            .state
            .lock()
            .expect("bridge state")
            .sessions
            .len()
    }

    /// Serves this bridge alone on `listener` over HTTP/1.1, until the listener fails: for tests
    /// and the conformance harness (`proxy/examples/bridge_serve.rs`). Under fenzi the request
    /// path reaches it through [`Bridge::serve_connection`], after its own decision.
    pub async fn serve_on(self: Arc<Self>, listener: tokio::net::TcpListener) {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(self.clone().serve_connection(stream));
        }
    }

    /// Serves one HTTP/1.1 connection (a socket, or the request path's in-memory connection)
    /// until it closes: each request's body is read whole, then [`Bridge::handle`]d.
    pub async fn serve_connection<T>(self: Arc<Self>, io: T)
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        use http_body_util::BodyExt;
        let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            let bridge = self.clone();
            async move {
                let (parts, body) = req.into_parts();
                let body = match body.collect().await {
                    Ok(body) => body.to_bytes(),
                    Err(_) => {
                        return Ok::<_, std::convert::Infallible>(plain(
                            StatusCode::BAD_REQUEST,
                            "the request body ended early",
                        ));
                    }
                };
                Ok(bridge.handle(Request::from_parts(parts, body)).await)
            }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(io), service)
            .await;
    }

    /// Answers one HTTP request to the bridged server. `body` is the request's whole body, already
    /// read and decided by the request path.
    pub async fn handle(&self, request: Request<Bytes>) -> Response<Body> {
        let path = request.uri().path().to_owned();
        match (request.method(), path.as_str()) {
            (&Method::POST, "/mcp") => self.post(request).await,
            // Without a session, a GET of the endpoint is a 2024-11-05 client opening its stream
            // (the spec's way to serve both eras at one URL).
            (&Method::GET, "/mcp") if !request.headers().contains_key(SESSION_HEADER) => {
                self.legacy_stream()
            }
            (&Method::GET, "/mcp") => self.get(&request),
            (&Method::DELETE, "/mcp") => self.delete(&request),
            (&Method::GET, "/sse") => self.legacy_stream(),
            (&Method::POST, "/messages") => self.legacy_post(request).await,
            (_, "/mcp" | "/sse" | "/messages") => {
                plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here")
            }
            _ => plain(
                StatusCode::NOT_FOUND,
                "a bridged MCP server answers at /mcp (and /sse, /messages for the 2024-11-05 transport)",
            ),
        }
    }

    async fn post(&self, request: Request<Bytes>) -> Response<Body> {
        let messages = match message::read_body(request.body()) {
            Ok(m) => m,
            Err(e) => return jsonrpc_error(StatusCode::BAD_REQUEST, -32700, &e.to_string()),
        };
        let initialize = messages.iter().any(|(r, _)| r.initialize);
        let session = if initialize {
            if messages.len() != 1 || request.headers().contains_key(SESSION_HEADER) {
                return jsonrpc_error(
                    StatusCode::BAD_REQUEST,
                    -32600,
                    "initialize must be alone in its POST and start a new session",
                );
            }
            match self.new_session(false) {
                Ok(s) => s,
                Err(refusal) => return *refusal,
            }
        } else if !request.headers().contains_key(SESSION_HEADER) {
            // The 2026-07-28 era: no handshake, no session; one shared process answers.
            match self.shared_session() {
                Ok(s) => s,
                Err(refusal) => return *refusal,
            }
        } else {
            match self.session_of(&request) {
                Ok(s) => s,
                Err(refusal) => return *refusal,
            }
        };
        let answers = match session.post(messages).await {
            Ok(answers) => answers,
            Err(e) => {
                return jsonrpc_error(
                    StatusCode::BAD_GATEWAY,
                    -32000,
                    &format!(
                        "cannot write to the local MCP server `{}`: {e}",
                        self.inner.name
                    ),
                );
            }
        };
        let session_id = (!session.shared).then_some(session.id.as_str());
        let Some((mut rx, guard)) = answers else {
            return with_session(Response::builder().status(StatusCode::ACCEPTED), session_id)
                .body(body::empty())
                .expect("a valid response");
        };
        // The first message decides the form: the response alone is JSON; anything the server
        // sends first (progress, a sampling request) makes it a stream.
        let Some(first) = rx.recv().await else {
            return jsonrpc_error(
                StatusCode::BAD_GATEWAY,
                -32000,
                &format!(
                    "the local MCP server `{}` ended without answering",
                    self.inner.name
                ),
            );
        };
        if rx.is_closed() && rx.is_empty() {
            return with_session(Response::builder().status(StatusCode::OK), session_id)
                .header(header::CONTENT_TYPE, "application/json")
                .body(body::full(first))
                .expect("a valid response");
        }
        sse_response(session_id, Some(first), rx, Some(guard), None)
    }

    fn get(&self, request: &Request<Bytes>) -> Response<Body> {
        let session = match self.session_of(request) {
            Ok(s) => s,
            Err(refusal) => return *refusal,
        };
        match session.open_stream() {
            Some(rx) => sse_response(Some(&session.id), None, rx, None, None),
            None => plain(
                StatusCode::CONFLICT,
                "this session's GET stream is already open",
            ),
        }
    }

    fn delete(&self, request: &Request<Bytes>) -> Response<Body> {
        match self.session_of(request) {
            Ok(session) => {
                session.stop();
                plain(StatusCode::OK, "")
            }
            Err(refusal) => *refusal,
        }
    }

    fn legacy_stream(&self) -> Response<Body> {
        let session = match self.new_session(true) {
            Ok(s) => s,
            Err(refusal) => return *refusal,
        };
        let rx = session
            .open_stream()
            .expect("a new session has no stream yet");
        let endpoint = format!("/messages?sessionId={}", session.id);
        sse_response(None, None, rx, None, Some(endpoint))
    }

    async fn legacy_post(&self, request: Request<Bytes>) -> Response<Body> {
        let id = request
            .uri()
            .query()
            .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("sessionId=")))
            .unwrap_or_default()
            .to_owned();
        let session = match self.live_session(&id) {
            Some(s) if s.legacy => s,
            _ => return plain(StatusCode::NOT_FOUND, "no such session"),
        };
        let messages = match message::read_body(request.body()) {
            Ok(m) => m,
            Err(e) => return jsonrpc_error(StatusCode::BAD_REQUEST, -32700, &e.to_string()),
        };
        match session.post(messages).await {
            Ok(_) => plain(StatusCode::ACCEPTED, ""),
            Err(e) => plain(
                StatusCode::BAD_GATEWAY,
                &format!("cannot write to the server: {e}"),
            ),
        }
    }

    fn live_session(&self, id: &str) -> Option<Arc<BridgeSession>> {
        let state = self.inner.state.lock().expect("bridge state");
        state
            .sessions
            .get(id)
            .filter(|s| s.is_alive() && !s.shared)
            .cloned()
    }

    /// The process requests without a session share, started when the first one comes.
    fn shared_session(&self) -> Result<Arc<BridgeSession>, Refusal> {
        {
            let state = self.inner.state.lock().expect("bridge state");
            if let Some(s) = state.sessions.values().find(|s| s.shared && s.is_alive()) {
                return Ok(s.clone());
            }
        }
        self.start_session(false, true)
    }

    fn session_of(&self, request: &Request<Bytes>) -> Result<Arc<BridgeSession>, Refusal> {
        let Some(id) = request
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
        else {
            return Err(Box::new(jsonrpc_error(
                StatusCode::BAD_REQUEST,
                -32600,
                "no Mcp-Session-Id: initialize first",
            )));
        };
        // 404 tells a client to start a new session (and with it, a new server process).
        self.live_session(id).ok_or_else(|| {
            Box::new(jsonrpc_error(
                StatusCode::NOT_FOUND,
                -32001,
                &format!(
                    "session not found: the local MCP server `{}` ended; initialize again",
                    self.inner.name
                ),
            ))
        })
    }

    /// A new session with its own process: the prepared one when it is still running, else a new
    /// one, unless the server is in its crash backoff or has too many sessions.
    fn new_session(&self, legacy: bool) -> Result<Arc<BridgeSession>, Refusal> {
        self.start_session(legacy, false)
    }

    fn start_session(&self, legacy: bool, shared: bool) -> Result<Arc<BridgeSession>, Refusal> {
        let mut state = self.inner.state.lock().expect("bridge state");
        state.sessions.retain(|_, s| s.is_alive());
        if state.sessions.len() >= MAX_SESSIONS {
            let idlest = state
                .sessions
                .values()
                .min_by_key(|s| s.last_used())
                .map(|s| s.id.clone());
            if let Some(session) = idlest.and_then(|id| state.sessions.remove(&id)) {
                session.stop();
                let note = format!(
                    "{MAX_SESSIONS} sessions were open; stopped the one idle longest to start another"
                );
                self.inner.log.note(&self.inner.name, &note);
            }
        }
        if let Some(wait) = state.backoff_left() {
            let seconds = wait.as_secs() + 1;
            let mut refusal = jsonrpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                -32000,
                &format!(
                    "the local MCP server `{}` crashed {} times in a row; fenzi starts it again in {seconds} s",
                    self.inner.name, state.crashes_in_a_row
                ),
            );
            refusal
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            return Err(Box::new(refusal));
        }
        let process = match state.ready.take() {
            Some((process, _)) => process,
            None => self.inner.launch.start().map_err(|e| {
                Box::new(jsonrpc_error(
                    StatusCode::BAD_GATEWAY,
                    -32000,
                    &format!(
                        "cannot start the local MCP server `{}`: {e}",
                        self.inner.name
                    ),
                ))
            })?,
        };
        let id = session_id();
        let events: Arc<dyn SessionEvents> = Arc::new(Events {
            inner: Arc::downgrade(&self.inner),
        });
        let session = BridgeSession::start(
            id.clone(),
            &self.inner.name,
            (legacy, shared),
            process,
            events,
        );
        state.started.insert(id.clone(), Instant::now());
        state.sessions.insert(id, session.clone());
        Ok(session)
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.stop_all();
    }
}

impl State {
    fn backoff_left(&self) -> Option<Duration> {
        let last = self.last_crash?;
        if self.crashes_in_a_row == 0 {
            return None;
        }
        let wait = FIRST_BACKOFF
            .saturating_mul(1 << (self.crashes_in_a_row - 1).min(16))
            .min(MAX_BACKOFF);
        wait.checked_sub(last.elapsed()).filter(|d| !d.is_zero())
    }
}

/// A session's end, told back to its bridge (weakly: a session never keeps a bridge alive).
struct Events {
    inner: std::sync::Weak<Inner>,
}

impl SessionEvents for Events {
    fn stderr_line(&self, server: &str, line: &str) {
        if let Some(inner) = self.inner.upgrade() {
            inner.log.stderr_line(server, line);
        }
    }

    fn ended(&self, session: &str, requested: bool) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        let mut state = inner.state.lock().expect("bridge state");
        state.sessions.remove(session);
        let lived = state.started.remove(session).map(|t| t.elapsed());
        if requested {
            return;
        }
        if lived.is_some_and(|l| l >= HEALTHY_AFTER) {
            state.crashes_in_a_row = 0;
        }
        state.crashes_in_a_row = state.crashes_in_a_row.saturating_add(1);
        state.last_crash = Some(Instant::now());
        let n = state.crashes_in_a_row;
        drop(state);
        inner.log.note(
            &inner.name,
            &format!("the local MCP server exited (crash {n} in a row); it starts again with the client's next session"),
        );
    }
}

fn session_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS random source");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn with_session(builder: http::response::Builder, id: Option<&str>) -> http::response::Builder {
    match id {
        Some(id) => builder.header(SESSION_HEADER, id),
        None => builder,
    }
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(body::full(text.to_owned()))
        .expect("a valid response")
}

fn jsonrpc_error(status: StatusCode, code: i64, message: &str) -> Response<Body> {
    let body = serde_json::to_vec(&serde_json::json!({
        "jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}
    }))
    .expect("a Value always serialises");
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body::full(body))
        .expect("a valid response")
}

fn sse_response(
    session: Option<&str>,
    first: Option<Bytes>,
    rx: mpsc::UnboundedReceiver<Bytes>,
    guard: Option<PostGuard>,
    endpoint: Option<String>,
) -> Response<Body> {
    let mut prelude = Vec::new();
    if let Some(endpoint) = endpoint {
        prelude.push(Bytes::from(format!(
            "event: endpoint\ndata: {endpoint}\n\n"
        )));
    }
    if let Some(first) = first {
        prelude.push(event(&first));
    }
    use http_body_util::BodyExt;
    let stream = SseBody {
        prelude,
        rx,
        _guard: guard,
    };
    with_session(Response::builder().status(StatusCode::OK), session)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(stream.boxed_unsync())
        .expect("a valid response")
}

/// One SSE event carrying one message (a server's line never holds a newline).
fn event(message: &Bytes) -> Bytes {
    let mut out = Vec::with_capacity(message.len() + 22);
    out.extend_from_slice(b"event: message\ndata: ");
    out.extend_from_slice(message);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// An SSE body fed by a session's stream; ends when the stream does.
struct SseBody {
    prelude: Vec<Bytes>,
    rx: mpsc::UnboundedReceiver<Bytes>,
    _guard: Option<PostGuard>,
}

impl hyper::body::Body for SseBody {
    type Data = Bytes;
    type Error = crate::connection::body::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if !self.prelude.is_empty() {
            let next = self.prelude.remove(0);
            return Poll::Ready(Some(Ok(Frame::data(next))));
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(message)) => Poll::Ready(Some(Ok(Frame::data(event(&message))))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}
