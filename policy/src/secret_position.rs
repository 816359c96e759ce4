//! Secret positions (README, "Secrets"): the places in a request where a secret's
//! placeholder may be swapped for its value, as a top-level secret's `in:` names them
//! (`header:Authorization`, `query:token`, `body`), and how the proxy tells which place a
//! placeholder sits in. Pure: the loader parses positions here, the secret-use decision compares
//! sightings against them, and the proxy's scanner and substituter split a query string with
//! [`query_params`] so that both read it the same way.
//!
//! How a position matches:
//!
//! - `header:NAME`: the value of every header of that name (ASCII case-insensitive, as HTTP says;
//!   each of several same-named headers), `Basic` credentials inside it included. NAME is an HTTP
//!   token (RFC 9110 `tchar`).
//! - `query:NAME`: the value of every query parameter of that name. The query is split on `&`;
//!   each parameter's name is what precedes its first `=`, compared byte for byte after one level
//!   of percent-decoding (`k%65y` is `key`; `+` is not read as a space, and since NAME may hold
//!   neither `+` nor a space, neither reading of `+` can match). A parameter that holds `;` is
//!   never attributed: some servers split on `;` too, so `a=x;key=…` could be read as parameter
//!   `key` or as part of `a`. NAME is made of letters, digits and `-._~[]`.
//! - `body`: the whole body.
//!
//! A placeholder in a parameter's *name*, in the path, in a header name, or anywhere the proxy
//! cannot attribute to one named place is in no position at all.

use std::fmt;
use std::ops::Range;

/// One place a secret's placeholder may be swapped.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SecretPosition {
    /// A header's value, by name as written (matched case-insensitively).
    Header(String),
    /// A query parameter's value, by its percent-decoded name.
    Query(String),
    Body,
}

/// Headers that describe one hop, never forwarded (RFC 9110 §7.6.1), plus `Expect`, which the
/// proxy's own server answers. The proxy strips exactly these (`fenzi_proxy`'s `request/head.rs`), which is
/// why a position may not name them: one list, so the two cannot drift apart.
pub const HOP_BY_HOP_HEADERS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
];

/// Whether a position may not name this header: the proxy removes it (hop by hop) or writes it
/// itself (`Host`, `Content-Length`), so a placeholder there is never forwarded.
pub fn is_unnameable_header(name: &str) -> bool {
    ["host", "content-length"]
        .iter()
        .chain(HOP_BY_HOP_HEADERS)
        .any(|h| h.eq_ignore_ascii_case(name))
}

/// Why a position's text was refused; the loader words it (never quoting an invalid name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PositionError {
    /// Not `header:`, `query:` or `body`. The kind as written, when it is a plain word.
    UnknownKind(Option<String>),
    /// `header:` or `query:` with nothing after it.
    EmptyName(&'static str),
    /// A header name that is not an HTTP token.
    BadHeaderName,
    /// A header the proxy removes or sets itself.
    UnnameableHeader(String),
    /// A query parameter name outside letters, digits and `-._~[]`.
    BadQueryName,
    /// `body:something`.
    BodyWithName,
}

impl SecretPosition {
    /// Parses `header:NAME`, `query:NAME` or `body`.
    pub fn parse(text: &str) -> Result<SecretPosition, PositionError> {
        if text == "body" {
            return Ok(SecretPosition::Body);
        }
        let Some((kind, name)) = text.split_once(':') else {
            return Err(PositionError::UnknownKind(plain_word(text)));
        };
        match kind {
            "header" if name.is_empty() => Err(PositionError::EmptyName("header")),
            "header" if !is_http_token(name) => Err(PositionError::BadHeaderName),
            "header" if is_unnameable_header(name) => {
                Err(PositionError::UnnameableHeader(name.to_string()))
            }
            "header" => Ok(SecretPosition::Header(name.to_string())),
            "query" if name.is_empty() => Err(PositionError::EmptyName("query")),
            "query" if !is_query_name(name) => Err(PositionError::BadQueryName),
            "query" => Ok(SecretPosition::Query(name.to_string())),
            "body" => Err(PositionError::BodyWithName),
            other => Err(PositionError::UnknownKind(plain_word(other))),
        }
    }

    /// True when the two name the same place (header names compared case-insensitively).
    pub fn same_place(&self, other: &SecretPosition) -> bool {
        match (self, other) {
            (SecretPosition::Header(a), SecretPosition::Header(b)) => a.eq_ignore_ascii_case(b),
            (a, b) => a == b,
        }
    }

    /// True when a header of this (lower- or mixed-case) name is this position.
    pub fn is_header(&self, name: &str) -> bool {
        matches!(self, SecretPosition::Header(h) if h.eq_ignore_ascii_case(name))
    }

    /// True when a query parameter with this decoded name is this position.
    pub fn is_query(&self, decoded_name: &[u8]) -> bool {
        matches!(self, SecretPosition::Query(q) if q.as_bytes() == decoded_name)
    }
}

impl fmt::Display for SecretPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretPosition::Header(h) => write!(f, "header:{h}"),
            SecretPosition::Query(q) => write!(f, "query:{q}"),
            SecretPosition::Body => f.write_str("body"),
        }
    }
}

/// A list of positions as written in messages: `header:Authorization, query:token`.
pub fn list(positions: &[SecretPosition]) -> String {
    positions
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn plain_word(text: &str) -> Option<String> {
    (!text.is_empty() && text.len() <= 32 && text.bytes().all(|b| b.is_ascii_alphanumeric()))
        .then(|| text.to_string())
}

/// RFC 9110 `token`: one or more `tchar`.
pub fn is_http_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Letters, digits and `-._~[]`: the names a `query:` position may hold.
pub fn is_query_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~[]".contains(&b))
}

/// One `&`-separated piece of a query string, as byte ranges into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryParam {
    /// The piece's name: the bytes before its first `=` (the whole piece when it has none).
    pub name: Range<usize>,
    /// The bytes after the first `=`; `None` when the piece has no `=`.
    pub value: Option<Range<usize>>,
    /// The name, percent-decoded once.
    pub decoded_name: Vec<u8>,
    /// The piece holds `;`: which parameter its bytes belong to depends on the server.
    pub ambiguous: bool,
}

impl QueryParam {
    /// The whole piece.
    pub fn piece(&self) -> Range<usize> {
        let end = self.value.as_ref().map_or(self.name.end, |v| v.end);
        self.name.start..end
    }
}

/// The query string's `&`-separated pieces, empty ones left out.
pub fn query_params(query: &[u8]) -> Vec<QueryParam> {
    let mut out = vec![];
    let mut start = 0;
    for piece in query.split(|&b| b == b'&') {
        let end = start + piece.len();
        if !piece.is_empty() {
            let (name, value) = match piece.iter().position(|&b| b == b'=') {
                Some(eq) => (start..start + eq, Some(start + eq + 1..end)),
                None => (start..end, None),
            };
            out.push(QueryParam {
                decoded_name: percent_decode(&query[name.clone()]),
                name,
                value,
                ambiguous: piece.contains(&b';'),
            });
        }
        start = end + 1;
    }
    out
}

/// One level of percent-decoding; a `%` not followed by two hex digits stays as it is.
pub fn percent_decode(bytes: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_parse_and_print_as_written() {
        for text in [
            "header:Authorization",
            "header:X-Api-Key",
            "query:token",
            "body",
        ] {
            assert_eq!(SecretPosition::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(
            SecretPosition::parse("query:filter[key]"),
            Ok(SecretPosition::Query("filter[key]".into()))
        );
    }

    #[test]
    fn bad_positions_are_refused_by_kind() {
        use PositionError::*;
        for (text, want) in [
            ("cookie:sid", UnknownKind(Some("cookie".into()))),
            ("Header:Authorization", UnknownKind(Some("Header".into()))),
            ("headers", UnknownKind(Some("headers".into()))),
            ("sk-live xyz", UnknownKind(None)),
            ("", UnknownKind(None)),
            ("header:", EmptyName("header")),
            ("query:", EmptyName("query")),
            ("header:X Api", BadHeaderName),
            ("header:X:Api", BadHeaderName),
            ("header:Host", UnnameableHeader("Host".into())),
            (
                "header:proxy-authorization",
                UnnameableHeader("proxy-authorization".into()),
            ),
            ("query:a b", BadQueryName),
            ("query:a+b", BadQueryName),
            ("query:a%62", BadQueryName),
            ("query:a=b", BadQueryName),
            ("body:json", BodyWithName),
        ] {
            assert_eq!(SecretPosition::parse(text), Err(want), "{text}");
        }
    }

    #[test]
    fn header_places_ignore_case_query_places_do_not() {
        let h = SecretPosition::Header("Authorization".into());
        assert!(h.is_header("authorization") && h.is_header("AUTHORIZATION"));
        assert!(!h.is_header("authorization2"));
        assert!(h.same_place(&SecretPosition::Header("authorization".into())));
        let q = SecretPosition::Query("key".into());
        assert!(q.is_query(b"key") && !q.is_query(b"KEY") && !q.is_query(b"key "));
        assert!(!q.same_place(&SecretPosition::Query("Key".into())));
        assert!(!SecretPosition::Body.is_header("body") && !SecretPosition::Body.is_query(b"body"));
    }

    #[test]
    fn a_query_is_split_on_ampersands_and_names_are_decoded_once() {
        let q = b"key=1&&k%65y=2&flag&a=x;key=3&=v&%6B%65%79=a=b&k%2565y=4&%zz=5";
        let params = query_params(q);
        let seen: Vec<(String, Option<String>, bool)> = params
            .iter()
            .map(|p| {
                (
                    String::from_utf8_lossy(&p.decoded_name).into_owned(),
                    p.value
                        .clone()
                        .map(|v| String::from_utf8_lossy(&q[v]).into_owned()),
                    p.ambiguous,
                )
            })
            .collect();
        let want = [
            ("key", Some("1"), false),
            ("key", Some("2"), false),
            ("flag", None, false),
            ("a", Some("x;key=3"), true),
            ("", Some("v"), false),
            ("key", Some("a=b"), false),
            ("k%65y", Some("4"), false),
            ("%zz", Some("5"), false),
        ]
        .map(|(n, v, a)| (n.to_string(), v.map(String::from), a));
        assert_eq!(seen, want);
        // Each piece's range is exactly its bytes.
        assert_eq!(&q[params[1].piece()], b"k%65y=2");
        assert_eq!(&q[params[2].piece()], b"flag");
        assert!(query_params(b"").is_empty() && query_params(b"&&").is_empty());
    }

    #[test]
    fn percent_decoding_is_one_level_and_keeps_broken_escapes() {
        assert_eq!(percent_decode(b"%41%4a%4A"), b"AJJ");
        assert_eq!(percent_decode(b"%2541"), b"%41");
        assert_eq!(percent_decode(b"%4"), b"%4");
        assert_eq!(percent_decode(b"%%41"), b"%A");
        assert_eq!(percent_decode(b"a+b"), b"a+b");
        assert_eq!(percent_decode(b"%ff"), [0xff]);
    }
}
