//! The response direction: a real value echoed back by an upstream reaches the sandbox as its
//! placeholder. Header values are rewritten whole; the body is rewritten as it streams
//! ([`ScrubBody`] wraps any response body), holding back only bytes that could start a value, so SSE
//! events are delivered as promptly as before (values cannot contain CR or LF, so an event's line
//! end is never held).
//!
//! Each value is looked for in the spellings an echo realistically uses: raw, JSON-escaped (with and
//! without `\/`), and percent-encoded (upper- and lower-case hex, and with `+` for spaces). Out of
//! scope: a value inside base64 (an echoed `Basic` header), compressed bodies, HTML entities. So
//! that compression cannot hide a value, the request path asks upstreams for `identity`
//! ([`request_identity`]) and [`Scrubber::check_response_head`] refuses a response that comes back
//! encoded anyway; the caller answers it as an upstream failure.
//!
//! A value is at least 8 bytes (refused shorter at load): shorter values would match ordinary
//! text and scrubbing would mangle it. High-entropy tokens never do.

use super::SecretsError;
use super::placeholders::SecretSet;
use super::replace::{Patterns, StreamReplacer};
use super::spelling::{json_escape, percent_encode};
use crate::BoxError;
use bytes::Bytes;
use http::header::{ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_LENGTH};
use http::{HeaderMap, HeaderValue};
use hyper::body::{Body, Frame, SizeHint};
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use zeroize::Zeroizing;

/// A response whose body the scrubber cannot read.
#[derive(Debug, thiserror::Error)]
#[error(
    "the upstream answered with Content-Encoding {encoding:?} although identity was asked for; \
     an encoded body cannot be checked for secret values"
)]
pub struct Unscrubbable {
    pub encoding: String,
}

struct Inner {
    patterns: Patterns,
    /// Pattern id → the placeholder it becomes.
    with: Vec<Option<Vec<u8>>>,
    names: Vec<String>,
}

/// Every value of the session, compiled for scrubbing. Cheap to clone (shared).
#[derive(Clone)]
pub struct Scrubber {
    inner: Arc<Inner>,
}

/// The spellings of one value an echo may use, each distinct.
fn spellings(value: &[u8]) -> Vec<Zeroizing<Vec<u8>>> {
    let mut out: Vec<Zeroizing<Vec<u8>>> = vec![Zeroizing::new(value.to_vec())];
    let mut add = |s: Vec<u8>| {
        let s = Zeroizing::new(s);
        if !out.contains(&s) {
            out.push(s);
        }
    };
    if let Some(json) = json_escape(value) {
        let slashed: Vec<u8> = json
            .iter()
            .flat_map(|&b| {
                if b == b'/' {
                    vec![b'\\', b'/']
                } else {
                    vec![b]
                }
            })
            .collect();
        add(json);
        add(slashed);
    }
    let upper = percent_encode(value, true);
    add(String::from_utf8_lossy(&upper)
        .replace("%20", "+")
        .into_bytes());
    add(upper);
    add(percent_encode(value, false));
    out
}

impl Scrubber {
    pub fn new(set: &SecretSet) -> Result<Scrubber, SecretsError> {
        let mut patterns = vec![];
        let mut with = vec![];
        let mut names = vec![];
        for (name, placeholder, value) in set.iter() {
            names.push(name.to_string());
            for spelled in spellings(value.as_bytes()) {
                patterns.push(spelled);
                with.push(Some(placeholder.as_bytes().to_vec()));
            }
        }
        Ok(Scrubber {
            inner: Arc::new(Inner {
                patterns: Patterns::new(patterns, false)?,
                with,
                names,
            }),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.inner.names.is_empty()
    }

    /// `bytes` with every value replaced by its placeholder; `None` when there was none.
    pub fn scrub(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        self.inner.patterns.replace_all(bytes, &self.inner.with)
    }

    /// Rewrites every header value that holds a value. Returns how many were rewritten.
    pub fn scrub_headers(&self, headers: &mut HeaderMap) -> usize {
        let mut count = 0;
        for value in headers.values_mut() {
            if let Some(new) = self.scrub(value.as_bytes()) {
                // Placeholders are `[A-Za-z0-9_-]`, so the result is a valid header value whenever
                // the original was; if it somehow is not, the header is emptied rather than kept.
                *value = HeaderValue::from_bytes(&new).unwrap_or(HeaderValue::from_static(""));
                count += 1;
            }
        }
        count
    }

    /// The response-head phase: refuses an encoded body, scrubs header values, and removes
    /// `Content-Length` (scrubbing may change the body's length, so it goes out chunked or
    /// close-delimited).
    pub fn check_response_head(&self, headers: &mut HeaderMap) -> Result<(), Unscrubbable> {
        for value in headers.get_all(CONTENT_ENCODING) {
            let text = String::from_utf8_lossy(value.as_bytes());
            if text
                .split(',')
                .map(str::trim)
                .any(|e| !e.is_empty() && !e.eq_ignore_ascii_case("identity"))
            {
                return Err(Unscrubbable {
                    encoding: text.chars().take(100).collect(),
                });
            }
        }
        self.scrub_headers(headers);
        headers.remove(CONTENT_LENGTH);
        Ok(())
    }

    /// A streaming scrub of one body.
    pub fn stream(&self) -> ScrubStream {
        ScrubStream {
            scrubber: self.clone(),
            replacer: StreamReplacer::default(),
            finished: false,
        }
    }

    /// Wraps a response body so that it is scrubbed as it streams.
    pub fn body<B>(&self, body: B) -> ScrubBody<B> {
        ScrubBody {
            inner: body,
            stream: self.stream(),
            trailers: None,
            done: false,
        }
    }
}

impl fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scrubber")
            .field("secrets", &self.inner.names)
            .finish_non_exhaustive()
    }
}

/// Asks the upstream for an unencoded response body, so it can be scrubbed.
pub fn request_identity(headers: &mut HeaderMap) {
    headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
}

/// A body scrub under way: [`ScrubStream::push`] each chunk, then [`ScrubStream::finish`].
pub struct ScrubStream {
    scrubber: Scrubber,
    replacer: StreamReplacer,
    finished: bool,
}

impl ScrubStream {
    /// The final, scrubbed bytes of `chunk` (a possible start of a value waits for the next one).
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let inner = &self.scrubber.inner;
        let mut out = Vec::with_capacity(chunk.len());
        self.replacer
            .push(&inner.patterns, chunk, &inner.with, &mut out);
        out
    }

    /// What is still held back, scrubbed. Later calls return nothing.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = vec![];
        if !self.finished {
            self.finished = true;
            let inner = &self.scrubber.inner;
            self.replacer.finish(&inner.patterns, &inner.with, &mut out);
        }
        out
    }
}

impl fmt::Debug for ScrubStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScrubStream")
            .field("held", &self.replacer.held())
            .finish()
    }
}

/// A response body scrubbed as it streams. Data frames come out scrubbed (possibly re-cut), the
/// held-back bytes are flushed before trailers and at the end, and trailer values are scrubbed.
pub struct ScrubBody<B> {
    inner: B,
    stream: ScrubStream,
    trailers: Option<HeaderMap>,
    done: bool,
}

impl<B> Body for ScrubBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if let Some(trailers) = this.trailers.take() {
                return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        let out = this.stream.push(&data);
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                        }
                    }
                    Err(frame) => {
                        if let Ok(mut trailers) = frame.into_trailers() {
                            this.stream.scrubber.scrub_headers(&mut trailers);
                            this.trailers = Some(trailers);
                            let rest = this.stream.finish();
                            if !rest.is_empty() {
                                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest)))));
                            }
                        }
                    }
                },
                Some(Err(e)) => return Poll::Ready(Some(Err(e.into()))),
                None => {
                    this.done = true;
                    let rest = this.stream.finish();
                    if !rest.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest)))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        // The length may change; only "unknown" is true.
        SizeHint::default()
    }
}

impl<B> fmt::Debug for ScrubBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScrubBody")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    const PA: &str = "fenzi_ph_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    const PB: &str = "fenzi_ph_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB";
    const VA: &str = "sk-live-a.b*c+d?(e)[f]{g}|h^$";
    const VB: &str = "tok \"q\" & x=y/é\\n";

    fn scrubber() -> Scrubber {
        let mut set = SecretSet::new();
        set.insert_with_placeholder("A_KEY", PA, VA.as_bytes().to_vec())
            .unwrap();
        set.insert_with_placeholder("B_KEY", PB, VB.as_bytes().to_vec())
            .unwrap();
        Scrubber::new(&set).unwrap()
    }

    fn scrubbed(s: &Scrubber, input: &[u8]) -> Vec<u8> {
        s.scrub(input).unwrap_or_else(|| input.to_vec())
    }

    #[test]
    fn every_spelling_becomes_the_placeholder() {
        let s = scrubber();
        let json_b = serde_json::to_string(VB).unwrap();
        let echoed = format!(
            "raw={VA} json={json_b} slashed={} pct={} pct_lower={} form={} end",
            json_b.replace('/', "\\/"),
            String::from_utf8(percent_encode(VB.as_bytes(), true)).unwrap(),
            String::from_utf8(percent_encode(VB.as_bytes(), false)).unwrap(),
            String::from_utf8(percent_encode(VB.as_bytes(), true))
                .unwrap()
                .replace("%20", "+"),
        );
        let out = String::from_utf8(scrubbed(&s, echoed.as_bytes())).unwrap();
        assert_eq!(
            out,
            format!(
                "raw={PA} json=\"{PB}\" slashed=\"{PB}\" pct={PB} pct_lower={PB} form={PB} end"
            )
        );
        // A JSON document stays valid.
        let doc = serde_json::json!({ "echo": VB, "a": [VA] }).to_string();
        let out: serde_json::Value = serde_json::from_slice(&scrubbed(&s, doc.as_bytes())).unwrap();
        assert_eq!(out["echo"], PB);
        assert_eq!(out["a"][0], PA);
        // Text that only resembles a value passes.
        let near = &VA[..VA.len() - 1];
        assert_eq!(s.scrub(near.as_bytes()), None);
    }

    #[test]
    fn values_split_at_every_chunk_boundary_are_scrubbed() {
        let s = scrubber();
        let body = format!(
            "data: {{\"token\":\"{VA}\"}}\n\ndata: {}\n\n",
            serde_json::to_string(VB).unwrap()
        );
        let want = scrubbed(&s, body.as_bytes());
        assert!(!String::from_utf8_lossy(&want).contains(VA));
        for i in 0..=body.len() {
            for j in (i..=body.len()).step_by(3) {
                let mut st = s.stream();
                let mut out = st.push(&body.as_bytes()[..i]);
                out.extend(st.push(&body.as_bytes()[i..j]));
                out.extend(st.push(&body.as_bytes()[j..]));
                out.extend(st.finish());
                assert_eq!(out, want, "cuts {i},{j}");
            }
        }
    }

    #[test]
    fn sse_events_are_not_held_back() {
        let s = scrubber();
        let mut st = s.stream();
        let event = b"event: message\ndata: {\"ok\":true}\n\n";
        assert_eq!(st.push(event), event);
        // A partial value is held, then released scrubbed when it completes.
        let half = VA.len() / 2;
        let first = st.push(format!("data: {}", &VA[..half]).as_bytes());
        assert_eq!(first, b"data: ");
        let second = st.push(format!("{}\n\n", &VA[half..]).as_bytes());
        assert_eq!(second, format!("{PA}\n\n").as_bytes());
    }

    #[test]
    fn a_value_at_the_end_of_a_mebibyte_response_is_scrubbed() {
        let s = scrubber();
        let mut body = vec![b'.'; 1 << 20];
        body.extend_from_slice(VA.as_bytes());
        let mut st = s.stream();
        let mut out = vec![];
        for chunk in body.chunks(8192 + 7) {
            out.extend(st.push(chunk));
        }
        out.extend(st.finish());
        assert_eq!(out.len(), (1 << 20) + PA.len());
        assert!(out.ends_with(PA.as_bytes()));
    }

    #[test]
    fn headers_are_scrubbed_and_encoded_bodies_refused() {
        let s = scrubber();
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-echo",
            HeaderValue::from_str(&format!("Bearer {VA}")).unwrap(),
        );
        headers.insert("content-length", HeaderValue::from_static("100"));
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        s.check_response_head(&mut headers).unwrap();
        assert_eq!(headers["x-echo"], format!("Bearer {PA}").as_str());
        assert!(!headers.contains_key("content-length"));
        assert_eq!(headers["content-type"], "text/plain");

        for (encoding, refused) in [("gzip", true), ("identity", false), ("identity, br", true)] {
            let mut headers = HeaderMap::new();
            headers.insert("content-encoding", HeaderValue::from_static(encoding));
            assert_eq!(
                s.check_response_head(&mut headers).is_err(),
                refused,
                "{encoding}"
            );
        }
        let mut headers = HeaderMap::new();
        request_identity(&mut headers);
        assert_eq!(headers[ACCEPT_ENCODING], "identity");
    }

    /// A body of ready frames, so the test needs no extra crate.
    struct Frames(std::collections::VecDeque<Result<Frame<Bytes>, std::io::Error>>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            Poll::Ready(self.0.pop_front())
        }
    }

    #[tokio::test]
    async fn scrub_body_rewrites_frames_and_trailers() {
        let s = scrubber();
        let cut = 5;
        let mut trailers = HeaderMap::new();
        trailers.insert("x-t", HeaderValue::from_str(VA).unwrap());
        let frames = Frames(
            [
                Ok(Frame::data(Bytes::from(format!("a {}", &VA[..cut])))),
                Ok(Frame::data(Bytes::from(format!("{} b ", &VA[cut..])))),
                Ok(Frame::data(Bytes::from(VA[..cut].to_string()))),
                Ok(Frame::trailers(trailers)),
            ]
            .into(),
        );
        let collected = s.body(frames).collect().await.unwrap();
        let trailers = collected.trailers().cloned().unwrap();
        assert_eq!(trailers["x-t"], PA);
        let bytes = collected.to_bytes();
        assert_eq!(bytes, format!("a {PA} b {}", &VA[..cut]).as_bytes());
    }

    #[tokio::test]
    async fn scrub_body_flushes_at_the_end_and_passes_errors() {
        let s = scrubber();
        let frames = Frames(
            [
                Ok(Frame::data(Bytes::from("x "))),
                Ok(Frame::data(Bytes::from(VA.to_string()))),
            ]
            .into(),
        );
        let bytes = s.body(frames).collect().await.unwrap().to_bytes();
        assert_eq!(bytes, format!("x {PA}").as_bytes());
        let frames = Frames([Err(std::io::Error::other("reset"))].into());
        assert!(s.body(frames).collect().await.is_err());
    }

    #[test]
    fn debug_is_names_only() {
        let s = scrubber();
        let text = format!("{s:?} {:?}", s.stream());
        assert!(text.contains("A_KEY"));
        assert!(
            !text.contains("sk-live") && !text.contains("AAAA"),
            "{text}"
        );
    }
}
