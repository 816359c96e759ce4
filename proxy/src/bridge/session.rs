//! One MCP session through the bridge: one server process of its own (a stdio server serves one
//! client, from its `initialize` to its end), the streams its messages go to, and what happens
//! when it ends.
//!
//! Routing of what the server writes: a response goes to the POST that carried its request; a
//! progress notification to the POST whose request named its token; any other server message
//! (a request such as sampling or elicitation, a notification) to the oldest POST still waiting,
//! else to the standalone GET stream, else into a short backlog the next GET stream receives.

use super::message::{self, Kind, Routing};
use super::server_process::ServerProcess;
use bytes::Bytes;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// Server messages kept for a GET stream that is not open yet; older ones are dropped beyond it.
const BACKLOG: usize = 256;
/// A line longer than this from the server ends the session (it is not a message anyone can use).
const MAX_LINE: usize = 64 << 20;

/// A stream to one client: a POST's answer or the GET stream. Each item is one message.
pub(crate) type Outgoing = mpsc::UnboundedSender<Bytes>;

#[derive(Default)]
struct Routes {
    /// Request id (as written to the server) → the POST waiting for its response, and the id
    /// the client wrote when the bridge gave the server another one.
    pending: HashMap<String, (u64, Option<Value>)>,
    /// POST → its stream and how many responses it still waits for.
    posts: HashMap<u64, (Outgoing, usize)>,
    progress: HashMap<String, u64>,
    get: Option<Outgoing>,
    backlog: VecDeque<Bytes>,
    next_post: u64,
    next_id: u64,
}

/// A live session.
pub(crate) struct BridgeSession {
    pub id: String,
    /// The 2024-11-05 era (HTTP+SSE): every server message goes to the one SSE stream.
    pub legacy: bool,
    /// Shared by requests without a session (the 2026-07-28 era's `server/discover` and
    /// requests that carry their own protocol version): each request's id is replaced by one
    /// of the bridge's, so two clients' ids never meet at the server, and restored in the
    /// response.
    pub shared: bool,
    server: String,
    stdin: tokio::sync::Mutex<std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>>,
    routes: Mutex<Routes>,
    alive: AtomicBool,
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    /// When the client last sent something (a POST or a GET), for evicting the idlest session.
    last_used: Mutex<std::time::Instant>,
}

/// What to do with a server's stderr lines and with the end of a session.
pub(crate) trait SessionEvents: Send + Sync + 'static {
    fn stderr_line(&self, server: &str, line: &str);
    /// The server process ended; `requested`: the bridge stopped it (DELETE, shutdown).
    fn ended(&self, session: &str, requested: bool);
}

impl BridgeSession {
    /// Takes a started process: spawns its stdout reader, stderr reader and exit watcher.
    pub(crate) fn start(
        id: String,
        server: &str,
        (legacy, shared): (bool, bool),
        process: ServerProcess,
        events: Arc<dyn SessionEvents>,
    ) -> Arc<BridgeSession> {
        let session = Arc::new(BridgeSession {
            id,
            legacy,
            shared,
            server: server.to_owned(),
            stdin: tokio::sync::Mutex::new(process.stdin),
            routes: Mutex::new(Routes::default()),
            alive: AtomicBool::new(true),
            stop: Mutex::new(Some(process.stop)),
            last_used: Mutex::new(std::time::Instant::now()),
        });
        let reader = session.clone();
        let reader_events = events.clone();
        let stdout = process.stdout;
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                match AsyncReadExt::take(&mut lines, MAX_LINE as u64 + 1)
                    .read_until(b'\n', &mut line)
                    .await
                {
                    Ok(0) | Err(_) => break,
                    Ok(_) if line.len() > MAX_LINE => {
                        reader_events.stderr_line(
                            &reader.server,
                            "fenzi: the server wrote a line longer than 64 MiB; stopping it",
                        );
                        break;
                    }
                    Ok(_) => reader.server_wrote(&line, reader_events.as_ref()),
                }
            }
            reader.end(reader_events.as_ref());
        });
        let stderr = process.stderr;
        let stderr_events = events.clone();
        let name = server.to_owned();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                stderr_events.stderr_line(&name, &line);
            }
        });
        let watcher = session.clone();
        let exited = process.exited;
        tokio::spawn(async move {
            exited.await;
            watcher.end(events.as_ref());
        });
        session
    }

    pub(crate) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    pub(crate) fn last_used(&self) -> std::time::Instant {
        *self.last_used.lock().expect("bridge last use")
    }

    fn touch(&self) {
        *self.last_used.lock().expect("bridge last use") = std::time::Instant::now();
    }

    /// Stops the server; the session ends as for a crash, but says it was asked to.
    pub(crate) fn stop(&self) {
        if let Some(stop) = self.stop.lock().expect("bridge stop").take() {
            let _ = stop.send(());
        }
    }

    fn requested_stop(&self) -> bool {
        self.stop.lock().expect("bridge stop").is_none()
    }

    /// Registers a POST's requests, writes its messages, and returns the stream its answers come
    /// on (`None` when it carried no request: the answer is 202).
    pub(crate) async fn post(
        self: &Arc<Self>,
        mut messages: Vec<(Routing, Value)>,
    ) -> std::io::Result<Option<(mpsc::UnboundedReceiver<Bytes>, PostGuard)>> {
        self.touch();
        let requests = messages
            .iter()
            .filter(|(r, _)| r.kind == Kind::Request)
            .count();
        let registered = if requests == 0 || self.legacy {
            None
        } else {
            let (tx, rx) = mpsc::unbounded_channel();
            let mut routes = self.routes.lock().expect("bridge routes");
            let post = routes.next_post;
            routes.next_post += 1;
            for (r, message) in messages.iter_mut() {
                if r.kind != Kind::Request {
                    continue;
                }
                let Some(id) = &r.id else { continue };
                if self.shared {
                    let ours = routes.next_id;
                    routes.next_id += 1;
                    let theirs = message
                        .as_object_mut()
                        .and_then(|o| o.insert("id".to_owned(), Value::from(ours)));
                    routes.pending.insert(ours.to_string(), (post, theirs));
                } else {
                    routes.pending.insert(id.clone(), (post, None));
                }
                if let Some(token) = &r.progress_token {
                    routes.progress.insert(token.clone(), post);
                }
            }
            routes.posts.insert(post, (tx, requests));
            Some((
                rx,
                PostGuard {
                    session: self.clone(),
                    post,
                },
            ))
        };
        let mut stdin = self.stdin.lock().await;
        for (_, message) in &messages {
            stdin.write_all(&message::line(message)).await?;
        }
        stdin.flush().await?;
        Ok(registered)
    }

    /// Opens the standalone stream (GET, or the legacy era's SSE stream); `None` when one is
    /// already open.
    pub(crate) fn open_stream(&self) -> Option<mpsc::UnboundedReceiver<Bytes>> {
        self.touch();
        let mut routes = self.routes.lock().expect("bridge routes");
        if routes.get.as_ref().is_some_and(|g| !g.is_closed()) {
            return None;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        for message in routes.backlog.drain(..) {
            let _ = tx.send(message);
        }
        routes.get = Some(tx);
        Some(rx)
    }

    /// One line from the server.
    fn server_wrote(&self, line: &[u8], events: &dyn SessionEvents) {
        let trimmed = line.trim_ascii();
        if trimmed.is_empty() {
            return;
        }
        let parsed: Result<Value, _> = serde_json::from_slice(trimmed)
            .map_err(|e| message::MessageError::NotJson(e.to_string()));
        let (routing, mut value) = match parsed.and_then(|v| Ok((message::route(&v)?, v))) {
            Ok(r) => r,
            Err(e) => {
                // Never forwarded: what is not a message is the server's noise, shown as such.
                events.stderr_line(
                    &self.server,
                    &format!(
                        "fenzi: dropped a line on stdout that is not a JSON-RPC message ({e})"
                    ),
                );
                return;
            }
        };
        let mut routes = self.routes.lock().expect("bridge routes");
        let mut bytes = None;
        let post = match routing.kind {
            Kind::Response => routing
                .id
                .as_ref()
                .and_then(|id| routes.pending.remove(id))
                .map(|(post, theirs)| {
                    if let (Some(theirs), Some(o)) = (theirs, value.as_object_mut()) {
                        o.insert("id".to_owned(), theirs);
                        bytes = Some(Bytes::from(
                            serde_json::to_vec(&value).expect("a Value always serialises"),
                        ));
                    }
                    post
                }),
            Kind::Notification | Kind::Request => routing
                .progress_token
                .as_ref()
                .and_then(|t| routes.progress.get(t).copied())
                .or_else(|| {
                    // The oldest POST still waiting, unless the GET stream is open and none is.
                    routes.posts.keys().min().copied()
                }),
        };
        let bytes = bytes.unwrap_or_else(|| Bytes::copy_from_slice(trimmed));
        if let Some(post) = post {
            let done = match routes.posts.get_mut(&post) {
                Some((tx, outstanding)) => {
                    let _ = tx.send(bytes);
                    if routing.kind == Kind::Response {
                        *outstanding -= 1;
                    }
                    *outstanding == 0
                }
                None => false,
            };
            if done {
                routes.forget_post(post);
            }
            return;
        }
        if routing.kind == Kind::Response && !self.legacy {
            // A response to nothing pending (its POST went away): nobody is waiting for it.
            return;
        }
        match &routes.get {
            Some(get) if get.send(bytes.clone()).is_ok() => {}
            _ => {
                if routes.backlog.len() == BACKLOG {
                    routes.backlog.pop_front();
                }
                routes.backlog.push_back(bytes);
            }
        }
    }

    /// The server ended: every request still waiting gets an error response, every stream ends.
    fn end(&self, events: &dyn SessionEvents) {
        if !self.alive.swap(false, Ordering::AcqRel) {
            return;
        }
        let requested = self.requested_stop();
        let mut routes = self.routes.lock().expect("bridge routes");
        let pending: Vec<(String, (u64, Option<Value>))> = routes.pending.drain().collect();
        let message = format!(
            "the local MCP server `{}` {}; fenzi starts it again when the client reconnects",
            self.server,
            if requested { "was stopped" } else { "exited" }
        );
        for (id, (post, theirs)) in pending {
            let id = theirs.map(|v| v.to_string()).unwrap_or(id);
            if let Some((tx, _)) = routes.posts.get(&post) {
                let _ = tx.send(Bytes::from(message::error_response(&id, -32000, &message)));
            }
        }
        routes.posts.clear();
        routes.progress.clear();
        routes.get = None;
        drop(routes);
        if let Some(stop) = self.stop.lock().expect("bridge stop").take() {
            let _ = stop.send(());
        }
        events.ended(&self.id, requested);
    }
}

impl Routes {
    fn forget_post(&mut self, post: u64) {
        self.posts.remove(&post);
        self.pending.retain(|_, (p, _)| *p != post);
        self.progress.retain(|_, p| *p != post);
    }
}

/// Held by a POST's answer stream: when the client goes away, its requests are forgotten
/// (their responses, when they come, are dropped).
pub(crate) struct PostGuard {
    session: Arc<BridgeSession>,
    post: u64,
}

impl Drop for PostGuard {
    fn drop(&mut self) {
        if let Ok(mut routes) = self.session.routes.lock() {
            routes.forget_post(self.post);
        }
    }
}
