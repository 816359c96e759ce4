//! The response direction: a real value echoed back by an upstream must not reach the sandbox.
//! Header values are rewritten whole; the body is rewritten as it streams ([`ScrubBody`] wraps any
//! response body), holding back only bytes that could start a value, so SSE events are delivered as
//! promptly as before (values cannot contain CR or LF, so an event's line end is never held).
//!
//! A value is looked for in two kinds of spelling, one pass of one automaton over the text:
//!
//! - **As text**, which the place it stands in decodes back to the value: raw, in JSON as the
//!   common encoders write it (`\"`, `\/`, `\uXXXX` for non-ASCII or HTML-sensitive characters, in
//!   either hex case: [`spelling::JSON_STYLES`]) and percent-encoded as the common URL encoders write
//!   it ([`spelling::percent_styles`]). It becomes the secret's placeholder, which needs no escaping
//!   in any of those places, so the agent reads its placeholder there and can use it again.
//! - **Encoded**, inside base64 (either alphabet, any alignment, padded or not) or hex (either case):
//!   the encoding's core, and the edge characters that carry the value's first and last bits
//!   ([`encoded`]). It becomes a mask of the same length: the encoding of `*` bytes in the value's
//!   place. The run still decodes, to the original bytes with the value masked. The placeholder
//!   could not be written in place, since its length would shift the rest of the run.
//!
//! Why these: they are what a host's own software writes when it reflects a value it received (its
//! JSON library, its URL encoder, a base64 or hex field: a `Basic` header in a debug echo, a token
//! shown as hex), in every variant those encoders have. A host that transforms a value on request
//! (encrypts, reverses or splits it) is beyond any scrubber: a bound host holds the value and can
//! always do that. Which hosts and tools the agent may reach at all is the policy's job.
//!
//! Out of scope: spellings other encoders make (one character escaped in a way no common encoder
//! writes, double encoding), HTML entities, the limits listed in [`encoded`], and compressed
//! bodies. So that compression cannot hide a value, the request path asks upstreams for `identity`
//! ([`request_identity`]) and [`Scrubber::check_response_head`] refuses a response that comes back
//! encoded anyway; the caller answers it as an upstream failure.
//!
//! A value is at least 8 bytes (refused shorter at load): shorter values would match ordinary
//! text and scrubbing would mangle it. High-entropy tokens never do.
//!
//! Streaming holds back, between chunks: the longest tail that is a proper prefix of some spelling
//! (shorter than the longest spelling); up to 3 bytes before it that could be an edge character of
//! an encoding starting in the next chunk; or an encoded match whose edge character, or the match
//! that may follow it, is not in yet. So what is held is at most twice the longest spelling and a
//! few bytes, and the output is the same however the body is cut.

use super::SecretsError;
use super::encoded::{self, After, Form};
use super::placeholders::SecretSet;
use super::replace::Patterns;
use super::spelling::{self, json_escape_with, percent_encode_with};
use crate::BoxError;
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, Input, Match, PatternID};
use bytes::Bytes;
use http::header::{ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_LENGTH};
use http::{HeaderMap, HeaderName, HeaderValue};
use hyper::body::{Body, Frame, SizeHint};
use hyper::ext::ReasonPhrase;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use zeroize::Zeroizing;

/// A response whose body the scrubber cannot read. It does not say which encoding: the upstream
/// chose that text, and it may hold anything (the value it was sent included).
#[derive(Debug, thiserror::Error)]
#[error(
    "the upstream answered with a Content-Encoding other than identity although identity was \
     asked for; an encoded body cannot be checked for secret values"
)]
pub struct Unscrubbable;

/// What a pattern is, so what replaces it.
#[derive(Clone, Copy)]
enum Kind {
    /// A value written as text: becomes the placeholder of secret `secret`.
    Text { secret: usize },
    /// The core of an encoded value: becomes the mask of `forms[form]`.
    Encoded { form: usize },
}

struct Inner {
    /// Every spelling of every value (secret material: zeroed on drop, never printed); `kinds`
    /// says what each one is.
    patterns: Patterns,
    kinds: Vec<Kind>,
    placeholders: Vec<Vec<u8>>,
    forms: Vec<Form>,
    /// Some form has a lead edge: bytes that could be one are held back at a chunk's end.
    leads: bool,
    names: Vec<String>,
    /// The text spellings again, in any letter case: for header names, which HTTP lower-cases.
    in_names: AhoCorasick,
}

/// Every value of the session, compiled for scrubbing. Cheap to clone (shared).
#[derive(Clone)]
pub struct Scrubber {
    inner: Arc<Inner>,
}

/// The text spellings of one value (raw, JSON, percent), each distinct.
fn text_spellings(value: &[u8]) -> Vec<Zeroizing<Vec<u8>>> {
    let mut out: Vec<Zeroizing<Vec<u8>>> = vec![Zeroizing::new(value.to_vec())];
    let mut add = |s: Vec<u8>| {
        let s = Zeroizing::new(s);
        if !out.contains(&s) {
            out.push(s);
        }
    };
    for style in spelling::JSON_STYLES {
        if let Some(json) = json_escape_with(value, style) {
            add(json);
        }
    }
    for style in spelling::percent_styles() {
        add(percent_encode_with(value, style));
    }
    out
}

/// An encoded match as it will be replaced: `start..end` of the buffer (edges included) and the
/// edge characters' masked 6-bit values.
struct Masked {
    start: usize,
    end: usize,
    lead: Option<u8>,
    trail: Option<u8>,
}

impl Scrubber {
    pub fn new(set: &SecretSet) -> Result<Scrubber, SecretsError> {
        let mut patterns: Vec<Zeroizing<Vec<u8>>> = vec![];
        let mut kinds = vec![];
        let mut placeholders = vec![];
        let mut forms = vec![];
        let mut names = vec![];
        let mut texts: Vec<Zeroizing<Vec<u8>>> = vec![];
        // The first secret to claim a spelling keeps it (two secrets with one value share it).
        let mut add = |pattern: Zeroizing<Vec<u8>>, kind: Kind| {
            if !patterns.contains(&pattern) {
                patterns.push(pattern);
                kinds.push(kind);
            }
        };
        for (secret, (name, placeholder, value)) in set.iter().enumerate() {
            names.push(name.to_string());
            placeholders.push(placeholder.as_bytes().to_vec());
            for spelled in text_spellings(value.as_bytes()) {
                texts.push(spelled.clone());
                add(spelled, Kind::Text { secret });
            }
            for form in encoded::forms(value.as_bytes()) {
                for spelled in form.spellings() {
                    add(spelled.clone(), Kind::Encoded { form: forms.len() });
                }
                forms.push(form);
            }
        }
        // No prefilter: values start with common bytes (see `Patterns::new`).
        let patterns = Patterns::new(patterns, false)?;
        let in_names = AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .build(texts.iter().map(|t| t.as_slice()))
            .map_err(|e| SecretsError::Matcher(e.to_string()))?;
        Ok(Scrubber {
            inner: Arc::new(Inner {
                patterns,
                kinds,
                placeholders,
                leads: forms.iter().any(|f| f.lead().is_some()),
                forms,
                names,
                in_names,
            }),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.inner.names.is_empty()
    }

    /// `bytes` with every value replaced (by its placeholder or mask); `None` when there was none.
    pub fn scrub(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        self.inner.patterns.automaton().find(bytes)?;
        let mut out = Vec::with_capacity(bytes.len());
        self.inner.step(bytes, true, &mut out);
        Some(out)
    }

    /// Rewrites every header value that holds a value, and removes every header whose name holds
    /// one (in any letter case: a name cannot take a placeholder in its place, since HTTP
    /// lower-cases it). Returns how many were rewritten or removed.
    pub fn scrub_headers(&self, headers: &mut HeaderMap) -> usize {
        let mut count = 0;
        let named: Vec<HeaderName> = headers
            .keys()
            .filter(|name| self.inner.in_names.is_match(name.as_str()))
            .cloned()
            .collect();
        for name in named {
            headers.remove(&name);
            count += 1;
        }
        for value in headers.values_mut() {
            if let Some(new) = self.scrub(value.as_bytes()) {
                // Placeholders are `[A-Za-z0-9_-]` and masks letters and digits, so the result is a
                // valid header value whenever the original was; if it somehow is not, the header is
                // emptied rather than kept.
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
            if value
                .as_bytes()
                .split(|&b| b == b',')
                .map(<[u8]>::trim_ascii)
                .any(|e| !e.is_empty() && !e.eq_ignore_ascii_case(b"identity"))
            {
                return Err(Unscrubbable);
            }
        }
        self.scrub_headers(headers);
        headers.remove(CONTENT_LENGTH);
        Ok(())
    }

    /// Scrubs the reason phrase of an HTTP/1.1 status line (hyper keeps one that is not the
    /// standard phrase, and a server writes it out again): the upstream chose it.
    pub fn scrub_reason(&self, extensions: &mut http::Extensions) {
        let Some(phrase) = extensions.get::<ReasonPhrase>() else {
            return;
        };
        if let Some(new) = self.scrub(phrase.as_bytes()) {
            // A placeholder or a mask is valid in a reason phrase; if not, the standard one goes.
            match ReasonPhrase::try_from(new) {
                Ok(new) => extensions.insert(new),
                Err(_) => extensions.remove::<ReasonPhrase>(),
            };
        }
    }

    /// A streaming scrub of one body.
    pub fn stream(&self) -> ScrubStream {
        ScrubStream {
            scrubber: self.clone(),
            carry: Zeroizing::new(vec![]),
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

impl Inner {
    /// Scrubs `buf` into `out` up to the point where the rest must wait for more input, and returns
    /// that point. With `last` (the input ends here) that is all of it.
    ///
    /// Matches are leftmost-longest and never overlap. What is emitted is final: no later input can
    /// make a match start (edge included) before the returned point. That is what makes the output
    /// the same however the input is cut.
    fn step(&self, buf: &[u8], last: bool, out: &mut Vec<u8>) -> usize {
        // Matches from here on may not be complete yet.
        let open = if last {
            buf.len()
        } else {
            buf.len() - self.patterns.held_back(buf)
        };
        let mut cursor = 0;
        let mut wait = None;
        while let Some(m) = self
            .patterns
            .automaton()
            .find(Input::new(buf).span(cursor..buf.len()))
        {
            if m.start() >= open {
                break;
            }
            match self.kinds[m.pattern().as_usize()] {
                Kind::Text { secret } => {
                    out.extend_from_slice(&buf[cursor..m.start()]);
                    out.extend_from_slice(&self.placeholders[secret]);
                    cursor = m.end();
                }
                Kind::Encoded { form } => {
                    let form = &self.forms[form];
                    match self.extend(form, buf, cursor, m, last) {
                        Ok(masked) => {
                            out.extend_from_slice(&buf[cursor..masked.start]);
                            form.write_mask(masked.lead, masked.trail, out);
                            cursor = masked.end;
                        }
                        Err(from) => {
                            wait = Some(from);
                            break;
                        }
                    }
                }
            }
        }
        let keep = match wait {
            Some(from) => from,
            None if last => buf.len(),
            None => {
                // An encoding starting in the next chunk may take its lead character from here.
                let mut keep = open;
                if self.leads {
                    let floor = cursor.max(open.saturating_sub(3));
                    while keep > floor && encoded::is_edge_byte(buf[keep - 1]) {
                        keep -= 1;
                    }
                }
                keep
            }
        }
        .max(cursor);
        out.extend_from_slice(&buf[cursor..keep]);
        keep
    }

    /// Takes an encoded match's edge characters into it when they hold the value's bits. `Err`
    /// with where to resume when the character after it is not in yet.
    fn extend(
        &self,
        form: &Form,
        buf: &[u8],
        cursor: usize,
        m: Match,
        last: bool,
    ) -> Result<Masked, usize> {
        let lead = form.lead().and_then(|edge| {
            let (sextet, len) = encoded::char_before(&buf[cursor..m.start()])?;
            edge.accepts(sextet).then(|| (edge.mask(sextet), len))
        });
        let start = m.start() - lead.map_or(0, |(_, len)| len);
        let mut masked = Masked {
            start,
            end: m.end(),
            lead: lead.map(|(sextet, _)| sextet),
            trail: None,
        };
        let Some(edge) = form.trail() else {
            return Ok(masked);
        };
        // A match starting right after owns that character: it is not this value's edge (and if
        // it is another value's core, it is masked with that core).
        if self.match_at(buf, m.end(), last).ok_or(start)?.is_some() {
            return Ok(masked);
        }
        match encoded::char_after(&buf[m.end()..]) {
            After::NeedMore if !last => Err(start),
            After::Char(sextet, len) if edge.accepts(sextet) => {
                let mut trail = edge.mask(sextet);
                // A second value right after, in the same run, shares this character: its first
                // bits are masked too.
                if let Some(next) = self.match_at(buf, m.end() + len, last).ok_or(start)?
                    && let Kind::Encoded { form } = self.kinds[next.as_usize()]
                    && let Some(next_lead) = self.forms[form].lead()
                    && next_lead.accepts(sextet)
                {
                    trail = next_lead.mask(trail);
                }
                masked.trail = Some(trail);
                masked.end += len;
                Ok(masked)
            }
            _ => Ok(masked),
        }
    }

    /// The pattern of the match that starts at `at`, if one does; `None` (outer) when that cannot
    /// be told before more input arrives.
    fn match_at(&self, buf: &[u8], at: usize, last: bool) -> Option<Option<PatternID>> {
        let rest = &buf[at..];
        if !last && self.patterns.held_back(rest) == rest.len() {
            return None;
        }
        // A match is at most `longest` long, so the search need not look further.
        let window = at..buf.len().min(at + self.patterns.longest());
        Some(
            self.patterns
                .automaton()
                .find(Input::new(buf).span(window))
                .filter(|m| m.start() == at)
                .map(|m| m.pattern()),
        )
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
    /// Held-back bytes. May hold part of a value: zeroed on drop.
    carry: Zeroizing<Vec<u8>>,
    finished: bool,
}

impl ScrubStream {
    /// The final, scrubbed bytes of `chunk` (what could still be part of a value waits for the
    /// next one).
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let inner = &self.scrubber.inner;
        let mut out = Vec::with_capacity(chunk.len());
        if self.carry.is_empty() {
            let keep = inner.step(chunk, false, &mut out);
            self.carry.extend_from_slice(&chunk[keep..]);
        } else {
            let mut buf = Zeroizing::new(std::mem::take(&mut *self.carry));
            buf.extend_from_slice(chunk);
            let keep = inner.step(&buf, false, &mut out);
            self.carry.extend_from_slice(&buf[keep..]);
        }
        out
    }

    /// What is still held back, scrubbed. Later calls return nothing.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = vec![];
        if !self.finished {
            self.finished = true;
            let carry = Zeroizing::new(std::mem::take(&mut *self.carry));
            self.scrubber.inner.step(&carry, true, &mut out);
        }
        out
    }

    /// Bytes held back so far.
    pub fn held(&self) -> usize {
        self.carry.len()
    }
}

impl fmt::Debug for ScrubStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScrubStream")
            .field("held", &self.carry.len())
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
    use crate::secrets::spelling::percent_encode;
    use http_body_util::BodyExt;

    const PA: &str = "fenzi_ph_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    const PB: &str = "fenzi_ph_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB";
    const VA: &str = "sk-live-a.b*c+d?(e)[f]{g}|h^$";
    const VB: &str = "tok \"q\" & x=y/é\\n";
    const PC: &str = "fenzi_ph_CCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC";
    /// Its base64 has `+` or `/` as an edge character: after `c` (lead) and before `ÿ` (trail).
    const VC: &str = "€-token-value-?";

    fn scrubber() -> Scrubber {
        let mut set = SecretSet::new();
        set.insert_with_placeholder("A_KEY", PA, VA.as_bytes().to_vec())
            .unwrap();
        set.insert_with_placeholder("B_KEY", PB, VB.as_bytes().to_vec())
            .unwrap();
        set.insert_with_placeholder("C_KEY", PC, VC.as_bytes().to_vec())
            .unwrap();
        Scrubber::new(&set).unwrap()
    }

    /// `parts` scrubbed as a stream, one push each, then finished.
    fn streamed(s: &Scrubber, parts: &[&[u8]]) -> Vec<u8> {
        let mut st = s.stream();
        let mut out = Vec::new();
        for part in parts {
            out.extend(st.push(part));
        }
        out.extend(st.finish());
        out
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
                let b = body.as_bytes();
                let out = streamed(&s, &[&b[..i], &b[i..j], &b[j..]]);
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

    use base64::Engine;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

    /// No spelling of any form of `value` is left in `out`.
    fn assert_no_encoding(out: &[u8], value: &str) {
        for form in encoded::forms(value.as_bytes()) {
            for spelled in form.spellings() {
                assert!(
                    !out.windows(spelled.len()).any(|w| w == &spelled[..]),
                    "{:?} of a value left in {}",
                    form.encoding,
                    String::from_utf8_lossy(out)
                );
            }
        }
    }

    fn masked(before: &[u8], value: &str, after: &[u8]) -> Vec<u8> {
        [before, &vec![b'*'; value.len()], after].concat()
    }

    #[test]
    fn text_spellings_of_every_style_become_the_placeholder() {
        let s = scrubber();
        for value in [VA, VB] {
            let ph = if value == VA { PA } else { PB };
            let mut spelled: Vec<Vec<u8>> = spelling::JSON_STYLES
                .iter()
                .map(|&style| json_escape_with(value.as_bytes(), style).unwrap())
                .collect();
            spelled.extend(
                spelling::percent_styles()
                    .map(|style| percent_encode_with(value.as_bytes(), style)),
            );
            for text in spelled {
                let body = [&b"<"[..], &text, b">"].concat();
                assert_eq!(
                    scrubbed(&s, &body),
                    format!("<{ph}>").as_bytes(),
                    "{}",
                    String::from_utf8_lossy(&text)
                );
            }
        }
    }

    #[test]
    fn encoded_values_are_masked_and_still_decode() {
        let s = scrubber();
        for value in [VA, VB, VC] {
            for before in [&b""[..], b"c", b"u:", b"agent:", b"\xff\x00"] {
                for after in [&b""[..], b":", "ÿ".as_bytes(), b"{\"n\":1}"] {
                    let data = [before, value.as_bytes(), after].concat();
                    let want = masked(before, value, after);
                    // Base64, both alphabets, padded and not; hex, both cases.
                    let padded = STANDARD.encode(&data);
                    let bare = URL_SAFE_NO_PAD.encode(&data);
                    let body = format!(
                        "{{\"a\":\"Basic {padded}\",\"b\":\"{bare}\",\"c\":\"{}\",\"d\":\"{}\"}}",
                        hex::encode(&data),
                        hex::encode_upper(&data)
                    );
                    let out = scrubbed(&s, body.as_bytes());
                    assert_no_encoding(&out, value);
                    assert_eq!(out.len(), body.len(), "masks keep the length");
                    let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
                    let field = |k: &str| doc[k].as_str().unwrap().to_string();
                    let a = field("a");
                    assert_eq!(
                        STANDARD.decode(a.strip_prefix("Basic ").unwrap()).unwrap(),
                        want
                    );
                    assert_eq!(URL_SAFE_NO_PAD.decode(field("b")).unwrap(), want);
                    assert_eq!(hex::decode(field("c")).unwrap(), want);
                    assert_eq!(hex::decode(field("d")).unwrap(), want);
                    // Base64 written into JSON by PHP (`\/`) and into a URL (`%2B`, `%2F`).
                    let php = padded.replace('/', "\\/");
                    let out = scrubbed(&s, format!("{{\"a\":\"{php}\"}}").as_bytes());
                    let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
                    assert_eq!(STANDARD.decode(doc["a"].as_str().unwrap()).unwrap(), want);
                    let query = padded.replace('+', "%2B").replace('/', "%2F");
                    let out = scrubbed(&s, format!("?a={query}&b=1").as_bytes());
                    let out = String::from_utf8(out).unwrap();
                    let got = out[3..out.len() - 4]
                        .replace("%2B", "+")
                        .replace("%2F", "/");
                    assert_eq!(STANDARD.decode(got).unwrap(), want, "{query}");
                }
            }
        }
    }

    #[test]
    fn two_values_in_one_run_are_both_masked() {
        let s = scrubber();
        // VA is 29 bytes: the character after it holds its last bits and VB's first.
        for before in [&b""[..], b"a", b"ab"] {
            let data = [before, VA.as_bytes(), VB.as_bytes(), b"!"].concat();
            let text = STANDARD.encode(&data);
            let out = scrubbed(&s, text.as_bytes());
            let want = [before, &vec![b'*'; VA.len() + VB.len()], b"!"].concat();
            assert_eq!(STANDARD.decode(&out).unwrap(), want);
        }
        // A raw value right after an encoded one, where the encoding's last character would be,
        // is not cut short by taking its first byte as that character.
        // (VB is 18 bytes; after `x` its last 2 bits are the top of the next character, as in `s`.)
        let encoded = URL_SAFE_NO_PAD.encode(format!("x{VB}"));
        let text = format!("{}{VA}", &encoded[..encoded.len() - 1]);
        let out = String::from_utf8(scrubbed(&s, text.as_bytes())).unwrap();
        assert!(out.ends_with(PA), "{out}");
        assert_no_encoding(out.as_bytes(), VB);
    }

    /// A body with a value in every kind of spelling, encodings at each alignment and edge.
    fn mixed_body() -> String {
        let b64 = |prefix: &str, v: &str| STANDARD.encode(format!("{prefix}{v}"));
        format!(
            "data: {{\"auth\":\"Basic {}\",\"raw\":\"{VA}\"}}\n\ndata: {}|{}|{}\n\n{}:{}\n{}{}",
            b64("agent:", VA),
            URL_SAFE_NO_PAD.encode(format!("a{VB}tail")),
            b64("ab", VA).replace('/', "\\/"),
            hex::encode_upper(VB),
            percent_encode(VB.as_bytes(), false).escape_ascii(),
            serde_json::to_string(VB).unwrap(),
            b64("", &format!("{VA}{VB}")),
            URL_SAFE_NO_PAD.encode(format!("xy{VA}")),
        ) + &format!(
            "\n?a={}&b={}\n",
            b64("c", VC).replace('+', "%2B"),
            b64("", &format!("{VC}ÿ")).replace('/', "\\/"),
        )
    }

    #[test]
    fn every_encoding_is_scrubbed_the_same_at_every_chunk_boundary() {
        let s = scrubber();
        let body = mixed_body();
        let want = scrubbed(&s, body.as_bytes());
        for value in [VA, VB, VC] {
            assert_no_encoding(&want, value);
        }
        assert!(!String::from_utf8_lossy(&want).contains(VA));
        // The escaped edge characters are there to be cut.
        assert!(body.contains("%2B") && body.contains("\\/"), "{body}");
        for i in 0..=body.len() {
            for j in (i..=body.len()).step_by(5) {
                let b = body.as_bytes();
                let out = streamed(&s, &[&b[..i], &b[i..j], &b[j..]]);
                assert_eq!(out, want, "cuts {i},{j}");
            }
        }
        // Byte by byte, holding back no more than the bound in the module doc.
        let longest = s.inner.patterns.longest();
        let mut st = s.stream();
        let mut out = vec![];
        for b in body.as_bytes() {
            out.extend(st.push(std::slice::from_ref(b)));
            assert!(st.held() <= 2 * longest + 6, "held {}", st.held());
        }
        out.extend(st.finish());
        assert_eq!(out, want);
    }

    #[test]
    fn an_escaped_edge_character_cut_in_two_waits_for_its_end() {
        // No spelling of this value starts with `%` or `\\`, so only the edge rule holds them back.
        let value = "token-value-foo";
        let mut set = SecretSet::new();
        set.insert_with_placeholder("D_KEY", PA, value.as_bytes().to_vec())
            .unwrap();
        let s = Scrubber::new(&set).unwrap();
        for before in [&b"a"[..], b"ab"] {
            // `\xff` after the value makes the last character `/`: JSON writes `\/`, a URL `%2F`.
            let data = [before, value.as_bytes(), b"\xff\xff\xff"].concat();
            let plain = STANDARD.encode(&data);
            assert!(plain.contains('/'));
            for (text, unescape) in [
                (plain.replace('/', "\\/"), ["\\/", "/"]),
                (plain.replace('/', "%2F"), ["%2F", "/"]),
            ] {
                let want = scrubbed(&s, text.as_bytes());
                let plain_out = String::from_utf8(want.clone())
                    .unwrap()
                    .replace(unescape[0], unescape[1]);
                assert_eq!(
                    STANDARD.decode(plain_out).unwrap(),
                    masked(before, value, b"\xff\xff\xff")
                );
                for cut in 0..=text.len() {
                    let (head, tail) = text.as_bytes().split_at(cut);
                    let out = streamed(&s, &[head, tail]);
                    assert_eq!(out, want, "{text} cut at {cut}");
                }
            }
        }
    }

    #[test]
    fn an_event_ending_in_an_encoded_value_is_not_held_back() {
        let s = scrubber();
        let mut st = s.stream();
        let event = format!("data: {}\n\n", STANDARD.encode(format!("k={VA}")));
        let out = st.push(event.as_bytes());
        assert_eq!(out.len(), event.len());
        assert!(out.ends_with(b"\n\n"));
        assert_no_encoding(&out, VA);
        assert_eq!(st.held(), 0);
        // Cut right after the core, the edge character waits, then comes out masked.
        let text = STANDARD.encode(format!("k={VA}"));
        let cut = text.len() - 3;
        let first = st.push(&text.as_bytes()[..cut]);
        let rest = st.push(format!("{}\n", &text[cut..]).as_bytes());
        let out = [first, rest].concat();
        assert_eq!(
            STANDARD.decode(&out[..out.len() - 1]).unwrap(),
            masked(b"k=", VA, b"")
        );
    }

    #[test]
    fn an_encoded_value_in_a_header_is_masked() {
        let s = scrubber();
        let mut headers = HeaderMap::new();
        let basic = STANDARD.encode(format!("agent:{VA}"));
        headers.insert(
            "x-echo",
            HeaderValue::from_str(&format!("Basic {basic}")).unwrap(),
        );
        s.check_response_head(&mut headers).unwrap();
        let echoed = headers["x-echo"].to_str().unwrap();
        let decoded = STANDARD
            .decode(echoed.strip_prefix("Basic ").unwrap())
            .unwrap();
        assert_eq!(decoded, masked(b"agent:", VA, b""));
    }

    #[test]
    fn a_header_named_by_a_value_goes_and_a_reason_phrase_is_scrubbed() {
        // A value that is a valid header name, sent in upper and mixed case: HTTP lower-cases it.
        const VN: &str = "Tok-Name-0123456789ABCDEF";
        let mut set = SecretSet::new();
        set.insert_with_placeholder("N_KEY", PA, VN.as_bytes().to_vec())
            .unwrap();
        let s = Scrubber::new(&set).unwrap();
        let mut headers = HeaderMap::new();
        let lower = VN.to_ascii_lowercase();
        for name in [lower.clone(), format!("x-{lower}-y")] {
            headers.insert(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_static("1"),
            );
        }
        headers.insert("x-kept", HeaderValue::from_static("tok-name-0123"));
        s.check_response_head(&mut headers).unwrap();
        let left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-kept"]);

        let mut extensions = http::Extensions::new();
        extensions.insert(ReasonPhrase::try_from(format!("OK {VN}")).unwrap());
        s.scrub_reason(&mut extensions);
        let phrase = extensions.get::<ReasonPhrase>().unwrap().as_bytes();
        assert_eq!(phrase, format!("OK {PA}").as_bytes());
        // A phrase without a value is left as the upstream wrote it.
        extensions.insert(ReasonPhrase::from_static(b"Fine"));
        s.scrub_reason(&mut extensions);
        assert_eq!(
            extensions.get::<ReasonPhrase>().unwrap().as_bytes(),
            b"Fine"
        );
    }

    #[test]
    fn the_refusal_of_an_encoded_body_quotes_nothing_of_it() {
        let s = scrubber();
        let mut headers = HeaderMap::new();
        headers.insert(
            CONTENT_ENCODING,
            HeaderValue::from_str(&format!("identity, {}", "sk-live-quoted")).unwrap(),
        );
        let refused = s.check_response_head(&mut headers).unwrap_err();
        assert!(!refused.to_string().contains("sk-live"), "{refused}");
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
