//! Requests that hyper refuses itself. A head hyper cannot parse (conflicting lengths, a bad transfer
//! coding, control characters, obs-fold, an oversize head, an HTTP/2 preface on an HTTP/1.1
//! connection) never reaches the proxy's service: hyper answers it with a bare 400, 414 or 431 (there
//! is no way to give it our JSON body) and ends the connection with a parse error. Every request still
//! gets one decision and one record, so the connection's owner records a
//! [`crate::request::refusal::Refusal::unparsed`] when its HTTP/1 connection ends with such an error.
//!
//! What the record can name: a [`HeadProbe`] keeps the first line a connection sent, read through
//! [`Probed`], until the first request is handed to the service. If hyper refused the first request,
//! that line is its request line and the record carries its method and target (what may be logged of
//! them); for a later request on a keep-alive connection, the bytes cannot be told apart reliably and
//! the record names only what the connection is known to be about.

use crate::connection::io::{Observed, ReadObserver};
use http::Uri;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The most of a first line kept: enough for a method and a path, bounded per connection.
const MAX_LINE: usize = 8 * 1024;
/// The longest method the record names (longer ones are not methods anyone uses).
const MAX_METHOD: usize = 32;

/// The first line a connection sent, until its first request is dispatched.
#[derive(Default)]
pub(crate) struct HeadProbe {
    /// Fast path for every read once there is nothing more to keep.
    capturing: AtomicBool,
    /// Whether a request has been handed to the service.
    dispatched: AtomicBool,
    state: Mutex<Capture>,
}

#[derive(Default)]
struct Capture {
    line: Vec<u8>,
}

impl HeadProbe {
    pub fn new() -> Arc<HeadProbe> {
        let probe = HeadProbe::default();
        probe.capturing.store(true, Ordering::Relaxed);
        Arc::new(probe)
    }

    /// A request was handed to the service: from now on, a refused request is not the first one.
    pub fn dispatched(&self) {
        if !self.dispatched.swap(true, Ordering::Relaxed) {
            self.capturing.store(false, Ordering::Relaxed);
            self.lock().line = Vec::new();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Capture> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn observe(&self, bytes: &[u8]) {
        if !self.capturing.load(Ordering::Relaxed) {
            return;
        }
        let mut state = self.lock();
        let mut bytes = bytes;
        if state.line.is_empty() {
            // Empty lines before a request line are ignored by HTTP/1.1 parsers (RFC 9112 §2.2).
            let start = bytes
                .iter()
                .position(|b| !matches!(b, b'\r' | b'\n'))
                .unwrap_or(bytes.len());
            bytes = &bytes[start..];
        }
        let room = MAX_LINE - state.line.len();
        let (take, done) = match bytes.iter().position(|&b| b == b'\n') {
            Some(end) if end < room => (end + 1, true),
            _ => (bytes.len().min(room), bytes.len() >= room),
        };
        state.line.extend_from_slice(&bytes[..take]);
        if done {
            self.capturing.store(false, Ordering::Relaxed);
        }
    }

    /// What is known of a request hyper refused on this connection: its request line when it was the
    /// connection's first request, else nothing.
    pub fn refused(&self) -> RequestLine {
        if self.dispatched.load(Ordering::Relaxed) {
            return RequestLine::default();
        }
        RequestLine::parse(&self.lock().line)
    }
}

/// What the start of a request line says, as far as it can be read and safely logged.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct RequestLine {
    /// The method, when it is an HTTP token.
    pub method: Option<String>,
    pub target: Target,
}

/// The request target of a refused request.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) enum Target {
    /// Not known: not sent, cut off, or not the connection's first request.
    #[default]
    Unknown,
    /// Sent, but not a request target that may be logged: not visible ASCII, not a URI, or its end
    /// is ambiguous.
    Invalid,
    /// Origin-form (or `*`): the path, without the query.
    Path(String),
    /// Absolute-form: the scheme, the authority as sent, and the path without the query.
    Absolute {
        scheme: String,
        authority: String,
        path: String,
    },
    /// Authority-form (CONNECT), as sent.
    Authority(String),
}

impl RequestLine {
    fn parse(line: &[u8]) -> RequestLine {
        let complete = line.ends_with(b"\n");
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(sp) = line.iter().position(|&b| b == b' ') else {
            return RequestLine {
                method: complete.then(|| method(line)).flatten(),
                target: Target::Unknown,
            };
        };
        let rest = &line[sp + 1..];
        let target = if complete {
            // `target SP HTTP-version`, or an HTTP/0.9 line without a version. A space anywhere else
            // leaves it open where the target ends, so it is not named.
            match rest.iter().position(|&b| b == b' ') {
                Some(end) if is_version(&rest[end + 1..]) => Target::parse(&rest[..end]),
                Some(_) => Target::Invalid,
                None => Target::parse(rest),
            }
        } else {
            // Cut off at the capture limit: a path is known up to where its query begins.
            match rest.iter().position(|&b| b == b'?' || b == b'#') {
                Some(end) => Target::parse(&rest[..end]),
                None => Target::Unknown,
            }
        };
        RequestLine {
            method: method(&line[..sp]),
            target,
        }
    }
}

/// `HTTP/d.d`, the shape of every HTTP-version (RFC 9112 §2.3).
fn is_version(bytes: &[u8]) -> bool {
    matches!(bytes, [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
        if major.is_ascii_digit() && minor.is_ascii_digit())
}

fn method(bytes: &[u8]) -> Option<String> {
    let token = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    if bytes.is_empty() || bytes.len() > MAX_METHOD || !bytes.iter().all(token) {
        return None;
    }
    String::from_utf8(bytes.to_vec()).ok()
}

impl Target {
    fn parse(bytes: &[u8]) -> Target {
        if bytes.is_empty() || !bytes.iter().all(|b| (0x21..=0x7e).contains(b)) {
            return Target::Invalid;
        }
        let Ok(uri) = Uri::try_from(bytes) else {
            return Target::Invalid;
        };
        match (uri.scheme_str(), uri.authority()) {
            (Some(scheme), Some(authority)) => Target::Absolute {
                scheme: scheme.to_ascii_lowercase(),
                authority: authority.as_str().to_string(),
                path: uri.path().to_string(),
            },
            (None, Some(authority)) => Target::Authority(authority.as_str().to_string()),
            (None, None) => Target::Path(uri.path().to_string()),
            (Some(_), None) => Target::Invalid,
        }
    }

    /// The path a record may carry.
    pub fn path(&self) -> Option<&str> {
        match self {
            Target::Path(path) | Target::Absolute { path, .. } => Some(path),
            Target::Unknown | Target::Invalid | Target::Authority(_) => None,
        }
    }
}

/// A client stream whose reads the probe sees.
pub(crate) type Probed<T> = Observed<T, Arc<HeadProbe>>;

impl ReadObserver for Arc<HeadProbe> {
    fn observe(&mut self, bytes: &[u8]) {
        HeadProbe::observe(self, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(chunks: &[&[u8]]) -> RequestLine {
        let probe = HeadProbe::new();
        for chunk in chunks {
            HeadProbe::observe(&probe, chunk);
        }
        probe.refused()
    }

    fn path(p: &str) -> Target {
        Target::Path(p.to_string())
    }

    #[test]
    fn the_first_request_line_names_method_and_target() {
        let line = seen(&[
            b"POST /mcp?token=x HTTP/1.1\r\nHost: a\r\n",
            b"X: \0\r\n\r\n",
        ]);
        assert_eq!(line.method.as_deref(), Some("POST"));
        assert_eq!(line.target, path("/mcp"));
        // Read in pieces, after empty lines.
        let line = seen(&[b"\r\n\r\nGE", b"T /a/b HTT", b"P/1.1\r\n"]);
        assert_eq!(line.method.as_deref(), Some("GET"));
        assert_eq!(line.target, path("/a/b"));
        let line = seen(&[b"GET http://u:pw@web.test:8080/x?q HTTP/1.1\r\n"]);
        assert_eq!(
            line.target,
            Target::Absolute {
                scheme: "http".into(),
                authority: "u:pw@web.test:8080".into(),
                path: "/x".into()
            }
        );
        let line = seen(&[b"CONNECT mcp.test:443 HTTP/1.1\r\n"]);
        assert_eq!(line.target, Target::Authority("mcp.test:443".into()));
        // HTTP/0.9: no version, but the line is complete.
        assert_eq!(seen(&[b"GET /mcp\r\n"]).target, path("/mcp"));
        assert_eq!(seen(&[b"PRI * HTTP/2.0\r\n"]).target, path("*"));
    }

    #[test]
    fn a_long_target_is_known_only_up_to_its_query() {
        let mut long = b"POST /mcp?".to_vec();
        long.extend(std::iter::repeat_n(b'a', 70_000));
        let line = seen(&[&long]);
        assert_eq!(line.method.as_deref(), Some("POST"));
        assert_eq!(line.target, path("/mcp"));
        let mut long = b"POST /".to_vec();
        long.extend(std::iter::repeat_n(b'a', 70_000));
        assert_eq!(seen(&[&long]).target, Target::Unknown, "cut off");
        let mut long = b"POST /m cp?".to_vec();
        long.extend(std::iter::repeat_n(b'a', 70_000));
        assert_eq!(seen(&[&long]).target, Target::Invalid);
    }

    #[test]
    fn what_is_not_a_token_or_visible_ascii_is_not_named() {
        for (sent, method, target) in [
            (&b"PO\x1bST /mcp HTTP/1.1\r\n"[..], None, path("/mcp")),
            (
                b"CONNECT mcp.test\x1b[2J:443 HTTP/1.1\r\n",
                Some("CONNECT"),
                Target::Invalid,
            ),
            (b"POST  /mcp HTTP/1.1\r\n", Some("POST"), Target::Invalid),
            (b"GET /\xc3\xa9 HTTP/1.1\r\n", Some("GET"), Target::Invalid),
            (b"GET /m cp HTTP/1.1\r\n", Some("GET"), Target::Invalid),
            (b"GET /mcp HTTP/1.1 x\r\n", Some("GET"), Target::Invalid),
            (
                b"CONNECT mcp.test:443:443 HTTP/1.1\r\n",
                Some("CONNECT"),
                Target::Invalid,
            ),
            (b"POST /mcp HTTP/2.0\r\n", Some("POST"), path("/mcp")),
            // Named as sent; the record passes an authority through `logged_authority`.
            (
                b"GET mcp.test:99x HTTP/1.1\r\n",
                Some("GET"),
                Target::Authority("mcp.test:99x".into()),
            ),
            (b"\x16\x03\x01\x00\x02\x01\x00", None, Target::Unknown),
        ] {
            let line = seen(&[sent]);
            assert_eq!(line.method.as_deref(), method, "{sent:?}");
            assert_eq!(line.target, target, "{sent:?}");
        }
        let very_long_method = [b'A'; 40];
        assert_eq!(seen(&[&very_long_method, b" / HTTP/1.1\r\n"]).method, None);
    }

    #[test]
    fn nothing_is_known_of_a_request_after_the_first() {
        let probe = HeadProbe::new();
        HeadProbe::observe(
            &probe,
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /second HTTP/1.1\r\n",
        );
        probe.dispatched();
        HeadProbe::observe(&probe, b"POST /third HTTP/1.1\r\n");
        assert_eq!(probe.refused(), RequestLine::default());
    }
}
