//! The response phase on an MCP server's host: the server's answer is read before any of it
//! reaches the client (README, "Reading responses"; the rules are [`fenzi_policy::response`]'s).
//!
//! - `application/json`: read whole (up to the response limit), read strictly, list results
//!   filtered; the client gets the checked text, or the filtered one with its `Content-Length`.
//! - `text/event-stream`: read event by event as it streams ([`SseRead`]); each event is passed on
//!   in canonical form as soon as it is read and nothing more is ready upstream (events that arrive
//!   together leave together, up to 16 KiB), so a stream open for hours holds what one read brought.
//!   A stream that answers requests (a POST's) and has answered the last of them waits a few turns
//!   for the server's end before passing that answer on, so the end leaves with it as the server
//!   sent them: a client reuses the connection (for its GET stream, right after `initialize`)
//!   only once the stream has ended, and one that saw the answer alone sends its next requests on
//!   other connections, in another order than it meant (the server then drops what it sends on a
//!   GET stream it does not have yet).
//! - An empty body passes; any other body is unreadable.
//! - A POST that carried only notifications and responses (no request) expects `202 Accepted`
//!   without a body. Any other success answer (a `200` with a JSON body, an event stream, a `204`,
//!   a `202` with a body) reaches the client as `202` without a body; the server's body is dropped
//!   unread (which closes its connection), and a `failed` record names the status and the kind of
//!   body (never its bytes, nor the server's own `Content-Type` text). A client never reads such a
//!   body (the SDKs ignore it), and reading it would let a server put messages (a request of its
//!   own included) where no client waits for them. An error status (`4xx`, `5xx`) passes as
//!   before: Streamable HTTP says a server that cannot accept the input answers with an error
//!   status, and clients act on it (`404`: the session expired, start a new one; `401`: sign in).
//!   A `3xx` passes as every redirect does.
//! - On the legacy HTTP+SSE transport (2024-11-05), a POST to the message path the server
//!   announced is answered `202` with a short text (`Accepted` in both SDKs), requests included:
//!   the answers come on the event stream. That `202` reaches the client without its body and
//!   without a `failed` record, as it is that transport's normal answer.
//! - An answer that cannot be read strictly is not passed on. On a success status, each request
//!   still waiting for an answer gets a JSON-RPC error in its place (a 502 body, or error events
//!   ending the stream) and a `failed` record says why. On an error status (a `401` with its
//!   `WWW-Authenticate`, a `404` for an expired session) the status and headers pass and the
//!   unreadable body is replaced by fenzi's own short JSON: clients act on the status.
//! - A list result that lost entries gets its `filtered` record before the client sees it; if that
//!   record cannot be written, the answer does not go out (503 for a JSON body, the stream breaks
//!   off for an event).
//!
//! - A `tools/call` under `limits` ([`crate::session::limits`]): the answer is cut at its `max_response`
//!   (counted on the bytes from upstream) or its `timeout` (until the last byte). A JSON body is
//!   not passed on then (504 `timeout` or 502 `response_too_large`, a JSON-RPC error for each
//!   waiting request); an event stream ends with a JSON-RPC error event for each. Either way the
//!   upstream body is dropped, which closes its connection, and a `failed` record follows.
//!
//! OAuth metadata (`GET /.well-known/...`) is a document, not MCP messages, and is not read here.

use crate::audit::sink::Subject;
use crate::audit::writer::AuditEntry;
use crate::connection::body::{self, Body, BoxError};
use crate::error::ProxyError;
use crate::request::refusal::Refusal;
use crate::request::respond;
use crate::session::context::{AuditUnavailable, SessionContext};
use crate::session::limits::{self, Permit};
use crate::session::live::Live;
use bytes::Bytes;
use fenzi_policy::Reason;
use fenzi_policy::engine::McpServer;
use fenzi_policy::mcp::{McpDecision, MessageKind, RpcId, ServerRule, is_endpoint_target};
use fenzi_policy::response::sse::{self, SseItem, SseReader};
use fenzi_policy::response::{
    self as reading, EventKind, ReadMessage, ResponseError, response_limits, unreadable_reply,
};
use http::header::{CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE};
use http::response::Parts;
use http::{HeaderValue, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// What the response phase needs to read the answer to one request on an MCP server.
pub(crate) struct Reading {
    /// The policy the request was decided under; its answer is read under it too.
    live: Arc<Live>,
    /// The server's position in that policy's servers.
    server: usize,
    /// The ids of the requests forwarded, each waiting for its answer.
    pending: Vec<RpcId>,
    /// What its calls' `limits` allow the answer, when any apply.
    pub permit: Option<Permit>,
    /// A POST of notifications and responses only: its answer is `202` without a body.
    answers_only: bool,
    /// A POST to a message path the server announced (legacy HTTP+SSE), not to its endpoint.
    legacy: bool,
}

impl Reading {
    /// The reading of the answer to a request to `target` (path and query) that `decision`
    /// allowed, on the server at `index` of `live`'s policy (the request's own, from
    /// `RequestContext::server_index`); `None` for OAuth sign-in steps.
    pub fn of(
        live: &Arc<Live>,
        index: usize,
        decision: &McpDecision,
        target: &str,
    ) -> Option<Self> {
        if decision.sign_in.is_some() {
            return None;
        }
        let server = live.policy.servers().get(index)?;
        let pending: Vec<RpcId> = decision
            .messages
            .iter()
            .filter(|m| m.kind == Some(MessageKind::Request))
            .filter_map(|m| m.rpc_id.clone())
            .collect();
        // Only a POST has messages; an allowed one has no message that is not well-formed.
        let answers_only = !decision.messages.is_empty()
            && decision
                .messages
                .iter()
                .all(|m| m.kind != Some(MessageKind::Request));
        let legacy = !decision.messages.is_empty() && !is_endpoint_target(&server.rule, target);
        Some(Reading {
            live: live.clone(),
            server: index,
            pending,
            permit: None,
            answers_only,
            legacy,
        })
    }

    /// The server, as the request's policy has it.
    fn server(&self) -> &McpServer {
        &self.live.policy.servers()[self.server]
    }

    /// The request is being forwarded: starts its `timeout`, returning the deadline if it has one.
    pub fn forwarded(&mut self) -> Option<tokio::time::Instant> {
        self.permit.as_mut()?.forwarded()
    }
}

/// The refusal of an answer a limit cut before its head went out: the `failed` record naming the
/// limit, and a 504 (`timeout`) or 502 (`response_too_large`) whose body answers each waiting
/// request with a JSON-RPC error.
pub(crate) fn cut(subject: &Subject, reading: &Reading, error: ProxyError) -> Refusal {
    let replies: Vec<String> = reading
        .pending
        .iter()
        .map(|id| limits::cut_reply(id, &error))
        .collect();
    let status = error.reason().http_status();
    let answer = match replies.as_slice() {
        [] => respond::failure(&error),
        [one] => respond::json(status, one.clone().into_bytes()),
        many => respond::json(status, format!("[{}]", many.join(",")).into_bytes()),
    };
    tracing::warn!(host = %subject.host, "{error}");
    let entry = subject.failed(&error);
    let detail = error.to_string();
    Refusal::records(vec![entry], answer, error.reason(), detail)
}

/// The body the client gets for an MCP server's answer with head `head` (updated: length, type).
pub(crate) async fn read(
    session: &Arc<SessionContext>,
    subject: &Subject,
    reading: Reading,
    head: &mut Parts,
    mut body: Incoming,
    bodiless: bool,
) -> Result<Body, Refusal> {
    let media = media_type(head.headers.get(CONTENT_TYPE));
    if head.status.is_success() && (reading.answers_only || reading.legacy) {
        let mut empty = body.is_end_stream();
        if head.status == StatusCode::ACCEPTED && !empty && !reading.legacy {
            // A `202` in chunked framing (Node's `writeHead(202).end()`) announces no length:
            // read up to its first data to tell an empty body from one.
            empty = ends_empty(&mut body, EMPTY_BODY_WAIT).await;
        }
        if head.status == StatusCode::ACCEPTED && (empty || reading.legacy) {
            // Accepted: nothing in the body is for the client. A legacy server's short `Accepted`
            // is read to its end (never kept) so that its connection serves the next message.
            if !empty {
                let drain = Limited::new(body, LEGACY_ACCEPTED_BYTES).collect();
                let _ = tokio::time::timeout(EMPTY_BODY_WAIT, drain).await;
            }
            return Ok(accepted(head));
        }
        if reading.answers_only {
            drop(body);
            let error = ProxyError::NotificationAnswer {
                status: head.status.as_u16(),
                body: match (empty, media) {
                    (true, _) => "no body",
                    (false, Media::Json) => "a JSON body",
                    (false, Media::EventStream) => "an event stream",
                    (false, Media::Other) => "a body of another type",
                },
            };
            tracing::info!(host = %subject.host, "{error}");
            session.record(subject.failed(&error))?;
            return Ok(accepted(head));
        }
    }
    if bodiless
        || head.status.is_informational()
        || matches!(
            head.status,
            StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED
        )
    {
        return Ok(body.map_err(BoxError::from).boxed_unsync());
    }
    let server = reading.server();
    let encoded = head.headers.get_all(CONTENT_ENCODING).iter().any(|v| {
        v.as_bytes()
            .split(|&b| b == b',')
            .map(<[u8]>::trim_ascii)
            .any(|e| !e.is_empty() && !e.eq_ignore_ascii_case(b"identity"))
    });
    if media == Media::EventStream && head.status.is_success() {
        if encoded {
            return Err(unreadable(subject, &reading, ResponseError::Encoded));
        }
        head.headers.remove(CONTENT_LENGTH);
        let stream = SseRead::new(body, session.clone(), subject.clone(), reading);
        return Ok(stream.boxed_unsync());
    }
    let limit = response_limits(server.rule.limits).max_bytes;
    // A `max_response` below the response limit is the limit that cuts.
    let cap = reading.permit.as_ref().and_then(Permit::max_response);
    let capped = cap.filter(|cap| *cap < limit as u64);
    let collect = Limited::new(body, capped.map_or(limit, |cap| cap as usize)).collect();
    let deadline = reading.permit.as_ref().and_then(Permit::deadline);
    let collected = match deadline {
        Some(deadline) => match tokio::time::timeout_at(deadline, collect).await {
            Ok(collected) => collected,
            Err(_) => {
                return Err(cut(
                    subject,
                    &reading,
                    limit_error(&reading, Reason::Timeout),
                ));
            }
        },
        None => collect.await,
    };
    let bytes = match collected {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() && capped.is_some() => {
            let error = limit_error(&reading, Reason::ResponseTooLarge);
            return Err(cut(subject, &reading, error));
        }
        Err(e) if e.is::<LengthLimitError>() => {
            return answer_unreadable(subject, &reading, head, ResponseError::TooLarge(limit));
        }
        Err(e) => {
            return Err(Refusal::failed(
                subject,
                ProxyError::UpstreamBody(e.to_string()),
            ));
        }
    };
    if bytes.is_empty() {
        return Ok(body::empty());
    }
    if encoded {
        return answer_unreadable(subject, &reading, head, ResponseError::Encoded);
    }
    if media != Media::Json {
        return answer_unreadable(subject, &reading, head, ResponseError::ContentType);
    }
    let read = match read_one(session, &server.rule, &bytes) {
        Ok(read) => read,
        Err(e) => return answer_unreadable(subject, &reading, head, e),
    };
    for filtered in &read.filtered {
        session.record(subject.filtered(&server.name, filtered))?;
    }
    let bytes = match read.rewritten {
        Some(text) => Bytes::from(text),
        None => bytes,
    };
    head.headers
        .insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    Ok(body::full(bytes))
}

/// The most of a legacy `202 Accepted` body read to keep its connection; a longer one is dropped
/// (and its connection with it).
const LEGACY_ACCEPTED_BYTES: usize = 1024;

/// How long a `202` without a length may take to show it is empty: its end comes with its head
/// from a conformant server; one still open after this counts as a body.
const EMPTY_BODY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether `body` ends without a byte of data, read up to its first data within `wait` (a body
/// still open then counts as one).
async fn ends_empty(body: &mut Incoming, wait: std::time::Duration) -> bool {
    let read = async {
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) if frame.data_ref().is_some_and(|d| !d.is_empty()) => return false,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
        true
    };
    tokio::time::timeout(wait, read).await.unwrap_or(false)
}

/// Turns `head` into a `202 Accepted` without a body (the answer to notifications and responses).
fn accepted(head: &mut Parts) -> Body {
    head.status = StatusCode::ACCEPTED;
    // The server's reason phrase was for its own status.
    head.extensions.remove::<hyper::ext::ReasonPhrase>();
    head.headers.remove(CONTENT_TYPE);
    head.headers.remove(CONTENT_ENCODING);
    head.headers.insert(CONTENT_LENGTH, HeaderValue::from(0));
    body::empty()
}

/// The failure of an answer cut by `reading`'s limit of this `reason` (`timeout` or
/// `response_too_large`).
fn limit_error(reading: &Reading, reason: Reason) -> ProxyError {
    match (&reading.permit, reason) {
        (Some(permit), Reason::Timeout) => permit.timed_out(),
        (Some(permit), _) => permit.too_large(),
        // Not reached: only a permit sets a deadline or a cap.
        (None, _) => ProxyError::UpstreamBody("cut by a limit".into()),
    }
}

/// Reads one message: shallow without the inventory, whole (and filtered) when it carries a list.
fn read_one(
    session: &SessionContext,
    rule: &ServerRule,
    text: &[u8],
) -> Result<ReadMessage, ResponseError> {
    let shape = reading::read_message(rule, text)?;
    let mut read = if shape.has_list {
        session.inventories.filter(rule, text, &shape)?
    } else {
        ReadMessage::default()
    };
    read.answered = shape.answered;
    Ok(read)
}

/// An unreadable whole body: on a success status, the refusal that answers the waiting requests
/// with JSON-RPC errors; on an error status, the status passes with fenzi's own body.
fn answer_unreadable(
    subject: &Subject,
    reading: &Reading,
    head: &mut Parts,
    error: ResponseError,
) -> Result<Body, Refusal> {
    if head.status.is_success() {
        return Err(unreadable(subject, reading, error));
    }
    tracing::info!(
        host = %subject.host,
        status = head.status.as_u16(),
        "the MCP server's error answer is not passed on: it is {error}"
    );
    let text = format!(
        "{{\"error\":\"upstream_error\",\"message\":\"the MCP server answered {} with a body fenzi does not pass on\"}}",
        head.status.as_u16()
    );
    head.headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    head.headers.remove(CONTENT_ENCODING);
    head.headers
        .insert(CONTENT_LENGTH, HeaderValue::from(text.len()));
    Ok(body::full(text))
}

/// The refusal of an unreadable answer on a success status: a `failed` record saying why, and a
/// 502 whose body answers each waiting request with a JSON-RPC error.
fn unreadable(subject: &Subject, reading: &Reading, error: ResponseError) -> Refusal {
    let replies: Vec<String> = reading
        .pending
        .iter()
        .map(|id| unreadable_reply(id, &error))
        .collect();
    let error = ProxyError::UnreadableResponse(error);
    let entry = subject.unreadable(&error);
    let answer = match replies.as_slice() {
        [] => respond::failure(&error),
        [one] => respond::json(502, one.clone().into_bytes()),
        many => respond::json(502, format!("[{}]", many.join(",")).into_bytes()),
    };
    tracing::warn!(host = %subject.host, "{error}");
    let detail = error.to_string();
    Refusal::records(vec![entry], answer, error.reason(), detail)
}

/// The media types an MCP server's answer may have; anything else is [`Media::Other`], never
/// kept as text (the server chose it, so it may hold anything).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Media {
    Json,
    EventStream,
    Other,
}

/// The media type of a `Content-Type` value (case-insensitive, parameters ignored).
fn media_type(value: Option<&HeaderValue>) -> Media {
    let bytes = value.map_or(&[][..], HeaderValue::as_bytes);
    let media = bytes.split(|&b| b == b';').next().unwrap_or_default();
    let media = media.trim_ascii();
    if media.eq_ignore_ascii_case(b"application/json") {
        Media::Json
    } else if media.eq_ignore_ascii_case(b"text/event-stream") {
        Media::EventStream
    } else {
        Media::Other
    }
}

/// An event stream from an MCP server, read and passed on event by event.
struct SseRead {
    /// `None` once it ended or was abandoned (dropping it closes the upstream connection).
    inner: Option<Incoming>,
    reader: SseReader,
    session: Arc<SessionContext>,
    subject: Subject,
    reading: Reading,
    /// Bytes ready for the client.
    out: Vec<u8>,
    /// A record could not be written: the stream breaks off (see [`SseRead::record_then`]).
    audit_failed: bool,
    /// Nothing more comes after `out` (the stream ended, or was ended for an unreadable event).
    done: bool,
    /// The upstream's error, passed on once `out` has gone.
    failed_upstream: Option<BoxError>,
    /// The length of `out` when it was last held back for the upstream to catch up (`poll_frame`).
    yielded: Option<usize>,
    /// Turns left to wait for the upstream's end once every request it answers is answered (see
    /// `poll_frame`); zero for a stream that answers none (the GET stream).
    end_turns: u8,
    /// The `timeout` of the calls it answers, running since the request was forwarded.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Bytes from upstream so far, and the `max_response` they may reach.
    seen: u64,
    cap: Option<u64>,
}

/// How many turns an answered stream waits for its end before what was read goes without it.
const END_TURNS: u8 = 8;

/// Events read are held back to fill a frame of this size only while more is ready upstream.
const FLUSH_BYTES: usize = 16 * 1024;

impl SseRead {
    fn new(
        inner: Incoming,
        session: Arc<SessionContext>,
        subject: Subject,
        reading: Reading,
    ) -> Self {
        let limit = response_limits(reading.server().rule.limits).max_bytes;
        let permit = reading.permit.as_ref();
        let deadline = permit
            .and_then(Permit::deadline)
            .map(|at| Box::pin(tokio::time::sleep_until(at)));
        let cap = permit.and_then(Permit::max_response);
        let end_turns = if reading.pending.is_empty() {
            0
        } else {
            END_TURNS
        };
        SseRead {
            inner: Some(inner),
            reader: SseReader::new(limit),
            session,
            subject,
            reading,
            out: Vec::new(),
            audit_failed: false,
            done: false,
            failed_upstream: None,
            yielded: None,
            end_turns,
            deadline,
            seen: 0,
            cap,
        }
    }

    /// Passes on what is ready, or waits (a waker is registered by whoever returned pending).
    fn flush_or_pending(&mut self) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.out.is_empty() {
            return Poll::Pending;
        }
        self.yielded = None;
        let bytes = Bytes::from(std::mem::take(&mut self.out));
        Poll::Ready(Some(Ok(Frame::data(bytes))))
    }

    /// Handles one item from the reader; `Err` when the stream cannot be read on.
    fn handle(&mut self, item: SseItem) -> Result<(), ResponseError> {
        let event = match item {
            SseItem::Comment => {
                sse::write_comment(&mut self.out);
                return Ok(());
            }
            SseItem::Event(event) => event,
        };
        let data = match (reading::event_kind(&event)?, event.data.as_deref()) {
            (EventKind::Endpoint, data) => {
                // The legacy transport's message path: where this session may POST ([`Inventories::announce`]).
                let server = &self.reading.server().name;
                let data = data.unwrap_or_default();
                self.session
                    .inventories
                    .announce(server, &self.subject, data);
                sse::write_event(&mut self.out, &event, Some(data));
                return Ok(());
            }
            (EventKind::Message, data @ (None | Some(""))) => {
                sse::write_event(&mut self.out, &event, data);
                return Ok(());
            }
            (EventKind::Message, Some(data)) => data,
        };
        let live = self.reading.live.clone();
        let server = &live.policy.servers()[self.reading.server];
        let read = read_one(&self.session, &server.rule, data.as_bytes())?;
        self.reading
            .pending
            .retain(|id| !read.answered.contains(id));
        let text = read.rewritten.as_deref().unwrap_or(data);
        if read.filtered.is_empty() {
            sse::write_event(&mut self.out, &event, Some(text));
            return Ok(());
        }
        let mut held = Vec::new();
        sse::write_event(&mut held, &event, Some(text));
        let entries: Vec<AuditEntry> = read
            .filtered
            .iter()
            .map(|f| self.subject.filtered(&server.name, f))
            .collect();
        self.record_then(entries, held);
        Ok(())
    }

    /// Writes `entries`, then queues `held`, the bytes that may only follow them. When a record
    /// cannot be written, nothing more is passed on (`poll_frame` breaks the stream off).
    fn record_then(&mut self, entries: Vec<AuditEntry>, held: Vec<u8>) {
        match self.session.record_all(entries) {
            Ok(()) => self.out.extend_from_slice(&held),
            Err(AuditUnavailable) => self.audit_failed = true,
        }
    }

    /// Ends the stream for `error`: each waiting request gets a JSON-RPC error event, then the
    /// `failed` record is written and the stream ends.
    fn fail(&mut self, error: ResponseError) {
        self.end_with(|id| unreadable_reply(id, &error));
        let error = ProxyError::UnreadableResponse(error);
        tracing::warn!(host = %self.subject.host, "{error}");
        let entry = self.subject.unreadable(&error);
        self.record_then(vec![entry], Vec::new());
    }

    /// Ends the stream cut by a limit (`timeout`, `response_too_large`): as [`SseRead::fail`],
    /// with the limit's reason and rule.
    fn cut(&mut self, reason: Reason) {
        let error = limit_error(&self.reading, reason);
        self.end_with(|id| limits::cut_reply(id, &error));
        tracing::warn!(host = %self.subject.host, "{error}");
        let entry = self.subject.failed(&error);
        self.record_then(vec![entry], Vec::new());
    }

    /// An error event for each waiting request, and no more from upstream (dropping its body
    /// closes the connection).
    fn end_with(&mut self, reply: impl Fn(&RpcId) -> String) {
        for id in std::mem::take(&mut self.reading.pending) {
            let event = sse::SseEvent {
                event: Some("message".to_string()),
                ..Default::default()
            };
            sse::write_event(&mut self.out, &event, Some(&reply(&id)));
        }
        self.inner = None;
        self.deadline = None;
        self.done = true;
    }
}

impl HttpBody for SseRead {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if this.audit_failed {
                // A record (of what was hidden, or of how the stream ended) is not in the log:
                // what it is about is not passed on, and the stream breaks off.
                this.inner = None;
                return Poll::Ready(Some(Err("audit log unavailable".into())));
            }
            // Events read are passed on together, as soon as nothing more is ready upstream (so
            // none waits for the next), or once they fill a frame.
            if this.out.len() >= FLUSH_BYTES {
                return this.flush_or_pending();
            }
            if this.done {
                if this.out.is_empty() {
                    return Poll::Ready(this.failed_upstream.take().map(Err));
                }
                return this.flush_or_pending();
            }
            match this.reader.next_item() {
                Ok(Some(item)) => {
                    if let Err(e) = this.handle(item) {
                        this.fail(e);
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    this.fail(e.into());
                    continue;
                }
            }
            let Some(inner) = this.inner.as_mut() else {
                match this.reader.finish() {
                    Ok(()) => this.done = true,
                    Err(e) => this.fail(e.into()),
                }
                continue;
            };
            // Polled before the upstream, so that its timer wakes this stream.
            if let Some(deadline) = this.deadline.as_mut()
                && deadline.as_mut().poll(cx).is_ready()
            {
                this.cut(Reason::Timeout);
                continue;
            }
            match Pin::new(inner).poll_frame(cx) {
                Poll::Pending
                    if !this.out.is_empty()
                        && this.reading.pending.is_empty()
                        && this.end_turns > 0 =>
                {
                    // The last answer is read: a server ends the stream right after it, in the same
                    // write. Its end goes out with it, as it came, when it follows within a few
                    // turns: a client frees the connection for its next request (the GET stream,
                    // after `initialize`) only once the stream has ended, and one that sees the
                    // answer first sends that request on another connection, in another order.
                    this.end_turns -= 1;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Poll::Pending if !this.out.is_empty() && this.yielded != Some(this.out.len()) => {
                    // Let the upstream connection run before passing on what was read, as long as
                    // that brings more: what it decodes meanwhile leaves in the same frame, not in
                    // one write each. Once a turn brings nothing, what was read goes.
                    this.yielded = Some(this.out.len());
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Poll::Pending => return this.flush_or_pending(),
                Poll::Ready(None) => this.inner = None,
                Poll::Ready(Some(Ok(frame))) => {
                    // Trailers carry nothing an MCP client reads; they are not passed on.
                    if let Ok(data) = frame.into_data() {
                        this.seen = this.seen.saturating_add(data.len() as u64);
                        if this.cap.is_some_and(|cap| this.seen > cap) {
                            this.cut(Reason::ResponseTooLarge);
                            continue;
                        }
                        this.reader.push(&data);
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    this.inner = None;
                    this.done = true;
                    if !this.out.is_empty() {
                        // What was read before the error goes first; the error comes next poll.
                        this.failed_upstream = Some(e.into());
                        return this.flush_or_pending();
                    }
                    return Poll::Ready(Some(Err(e.into())));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.out.is_empty() && !self.audit_failed && self.failed_upstream.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
