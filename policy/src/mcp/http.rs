//! The HTTP side of an MCP request: the request target and which paths are the server's endpoint or
//! its OAuth metadata, whether a GET/DELETE carries a body, and the framing headers of an inspected
//! POST body (`Content-Type`, `Content-Encoding`, `Transfer-Encoding`, `Content-Length`).
//!
//! Paths are decided on the raw bytes, never decoded or normalised: a path is the endpoint only if it
//! is byte-equal to it (query string aside), so `/mcp/../admin`, `/MCP`, `/mcp;x` and `/mcp%2f..`
//! are other paths. Under a prefix (account connectors, `/.well-known/`) the rest of the path may
//! not contain anything a server could resolve elsewhere: no `%`, no `;`, no empty, `.` or `..`
//! segment.

use super::{EndpointPath, RequestView};

/// Why the HTTP framing of a request cannot be decided strictly (`bad_request`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HttpError {
    #[error("the request target is not a path (origin-form)")]
    NotOriginForm,
    #[error("the request target has a character URIs do not allow")]
    TargetCharacter,
    #[error("the request target has a malformed percent-escape")]
    BadPercentEscape,
    #[error("Content-Type is missing; MCP messages are application/json")]
    ContentTypeMissing,
    #[error("Content-Type is given more than once")]
    ContentTypeRepeated,
    #[error("Content-Type is not application/json")]
    ContentType,
    #[error("Content-Type is not application/x-www-form-urlencoded")]
    FormContentType,
    #[error("Content-Type charset is not utf-8")]
    Charset,
    #[error("Content-Encoding is not identity; encoded bodies cannot be inspected")]
    ContentEncoding,
    #[error("Transfer-Encoding has a coding other than chunked; such bodies cannot be inspected")]
    TransferEncoding,
    #[error("Content-Length is not a single decimal number")]
    ContentLength,
}

/// An origin-form request target split at the first `?`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Target<'a> {
    pub path: &'a str,
}

/// Checks `raw` is origin-form (`/path[?query]`) made only of characters RFC 3986 allows there, with
/// well-formed percent-escapes, and returns its path.
pub(crate) fn parse_target(raw: &str) -> Result<Target<'_>, HttpError> {
    if !raw.starts_with('/') {
        return Err(HttpError::NotOriginForm);
    }
    let bytes = raw.as_bytes();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'%' => {
                let hex = |j: usize| bytes.get(j).is_some_and(u8::is_ascii_hexdigit);
                if !(hex(i + 1) && hex(i + 2)) {
                    return Err(HttpError::BadPercentEscape);
                }
                i += 3;
                continue;
            }
            b if b.is_ascii_alphanumeric() => {}
            // unreserved, sub-delims, and ':' '@' '/' '?'
            b'-' | b'.' | b'_' | b'~' | b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+'
            | b',' | b';' | b'=' | b':' | b'@' | b'/' | b'?' => {}
            _ => return Err(HttpError::TargetCharacter),
        }
        i += 1;
    }
    let path = raw.split_once('?').map_or(raw, |(path, _)| path);
    Ok(Target { path })
}

/// The target without its query string, for messages (no validation).
pub(crate) fn path_of(raw: &str) -> &str {
    raw.split_once('?').map_or(raw, |(path, _)| path)
}

/// Is `path` (already without its query) the server's MCP endpoint?
pub(super) fn is_endpoint(endpoint: &EndpointPath, path: &str) -> bool {
    match endpoint {
        EndpointPath::Exact(exact) => {
            // The configured URL's own query, if any, is not part of the path; an empty path is `/`.
            let exact = path_of(exact);
            path == if exact.is_empty() { "/" } else { exact }
        }
        EndpointPath::Prefix(prefix) => {
            let prefix = path_of(prefix);
            if prefix.is_empty() {
                return false;
            }
            if path == prefix || path == prefix.trim_end_matches('/') {
                return true;
            }
            // Only whole segments below the prefix: `/v1/mcp` does not cover `/v1/mcpx`.
            let rest = if prefix.ends_with('/') {
                path.strip_prefix(prefix)
            } else {
                path.strip_prefix(prefix)
                    .and_then(|rest| rest.strip_prefix('/'))
            };
            rest.is_some_and(is_plain_subpath)
        }
    }
}

/// The metadata documents an MCP client reads to sign in with OAuth: protected-resource metadata
/// (RFC 9728), authorization-server metadata (RFC 8414) and OpenID Connect discovery.
const OAUTH_METADATA: [&str; 3] = [
    "oauth-protected-resource",
    "oauth-authorization-server",
    "openid-configuration",
];

/// Which of the [`OAUTH_METADATA`] documents `path` asks for, if any, as clients ask for them: under
/// `/.well-known/` (RFC 8615), optionally followed by the resource's or issuer's path (the
/// path-suffixed forms of RFC 9728 §3.1 and RFC 8414 §3.1), or under the server's own endpoint
/// (`/mcp/.well-known/openid-configuration`, OpenID Connect's issuer-relative form, which some
/// clients also try for protected-resource metadata)? Nothing a server could resolve to another
/// path is accepted.
pub(super) fn oauth_metadata(endpoint: &EndpointPath, path: &str) -> Option<&'static str> {
    if let Some(rest) = path.strip_prefix("/.well-known/") {
        let (name, suffix) = match rest.split_once('/') {
            Some((name, suffix)) => (name, Some(suffix)),
            None => (rest, None),
        };
        let known = OAUTH_METADATA.iter().find(|known| **known == name)?;
        return suffix.is_none_or(is_plain_subpath).then_some(*known);
    }
    OAUTH_METADATA.iter().copied().find(|name| {
        path.strip_suffix(name)
            .and_then(|p| p.strip_suffix("/.well-known/"))
            .is_some_and(|endpoint_path| {
                !endpoint_path.is_empty() && is_endpoint(endpoint, endpoint_path)
            })
    })
}

/// Which resource an [`OAUTH_METADATA`] request path names, for giving it to one entry of a host
/// (`crate::engine::by_path`): `Some(Some(path))` when it names a path (the path-suffixed form
/// `/.well-known/<doc>/<path>`, or the endpoint-relative form `<path>/.well-known/<doc>`),
/// `Some(None)` for the bare `/.well-known/<doc>`, `None` when it is not such a request. The path
/// named is compared byte for byte by the caller; nothing here is decoded.
pub(crate) fn oauth_metadata_resource(path: &str) -> Option<Option<&str>> {
    if let Some(rest) = path.strip_prefix("/.well-known/") {
        return match rest.split_once('/') {
            Some((name, _)) if OAUTH_METADATA.contains(&name) => {
                Some(Some(&path["/.well-known/".len() + name.len()..]))
            }
            None if OAUTH_METADATA.contains(&rest) => Some(None),
            _ => None,
        };
    }
    OAUTH_METADATA.iter().find_map(|name| {
        path.strip_suffix(name)
            .and_then(|p| p.strip_suffix("/.well-known/"))
            .filter(|p| !p.is_empty())
            .map(Some)
    })
}

/// A relative path a server cannot resolve outside the prefix it follows: non-empty segments, none of
/// them `.` or `..`, no percent-escapes (an encoded `/`, `.` or `\` is read differently by different
/// servers) and no `;` parameters. A trailing `/` is allowed.
pub(super) fn is_plain_subpath(rest: &str) -> bool {
    if rest.contains(['%', ';', '\\']) {
        return false;
    }
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    rest.is_empty()
        || rest
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

/// All values of header `name`: case-insensitive, and with `_` and `-` taken as the same character.
/// Servers behind CGI-style gateways (and some frameworks) read `Mcp_Name` as `Mcp-Name`, so a
/// header a server may read as `name` is checked as `name`: two spellings count as the header given
/// twice, never as one checked header and one ignored.
pub(super) fn header_values<'a>(
    headers: &'a [(&'a str, &'a [u8])],
    name: &'a str,
) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers
        .iter()
        .filter(move |(n, _)| same_header_name(n, name))
        .map(|(_, v)| *v)
}

fn same_header_name(a: &str, b: &str) -> bool {
    let fold = |c: u8| {
        if c == b'_' {
            b'-'
        } else {
            c.to_ascii_lowercase()
        }
    };
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| fold(x) == fold(y))
}

/// A header value without the optional whitespace around it (RFC 9110 §5.5).
pub(super) fn trim_ows(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(start, |i| i + 1);
    &v[start..end.max(start)]
}

/// The declared `Content-Length`: every such header must be a decimal number and all must agree.
pub(super) fn declared_length(req: &RequestView<'_>) -> Result<Option<u64>, HttpError> {
    let mut length = None;
    for value in header_values(req.headers, "content-length") {
        let value = trim_ows(value);
        if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
            return Err(HttpError::ContentLength);
        }
        let n = value.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
        if length.is_some_and(|l| l != n) {
            return Err(HttpError::ContentLength);
        }
        length = Some(n);
    }
    Ok(length)
}

/// Does a GET/DELETE carry (or announce) a body?
pub(super) fn has_body(req: &RequestView<'_>) -> Result<bool, HttpError> {
    let declared = declared_length(req)?;
    let chunked = header_values(req.headers, "transfer-encoding")
        .next()
        .is_some();
    Ok(!req.body.is_empty() || chunked || declared.is_some_and(|n| n > 0))
}

/// The framing headers of a POST body the classifier will parse: exactly one `Content-Type` of
/// `application/json` (parameters allowed, a charset only if it is UTF-8), no `Content-Encoding`
/// other than `identity`, no transfer coding other than `chunked`, and a well-formed
/// `Content-Length` if there is one.
pub(super) fn check_post_headers(req: &RequestView<'_>) -> Result<(), HttpError> {
    check_body_headers(req, b"application/json")
}

/// [`check_post_headers`] for a body of media type `media` (lower case).
pub(super) fn check_body_headers(req: &RequestView<'_>, media: &[u8]) -> Result<(), HttpError> {
    declared_length(req)?;
    let mut content_types = header_values(req.headers, "content-type");
    let content_type = content_types.next().ok_or(HttpError::ContentTypeMissing)?;
    if content_types.next().is_some() {
        return Err(HttpError::ContentTypeRepeated);
    }
    check_media_type(content_type, media).map_err(|e| match e {
        HttpError::ContentType if media != b"application/json" => HttpError::FormContentType,
        e => e,
    })?;
    for value in header_values(req.headers, "content-encoding") {
        if !codings(value).all(|c| c.eq_ignore_ascii_case(b"identity")) {
            return Err(HttpError::ContentEncoding);
        }
    }
    for value in header_values(req.headers, "transfer-encoding") {
        if !codings(value).all(|c| c.eq_ignore_ascii_case(b"chunked")) {
            return Err(HttpError::TransferEncoding);
        }
    }
    Ok(())
}

/// The comma-separated codings of an encoding header; an empty element counts as a coding of its
/// own (and so is refused), never as nothing.
fn codings(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(trim_ows)
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        )
}

/// `media` (`application/json`) followed by `*( OWS ";" OWS [ token "=" ( token / quoted-string ) ] )`
/// (RFC 9110 §8.3.1), with at most one `charset`, which must be `utf-8`.
fn check_media_type(value: &[u8], media: &[u8]) -> Result<(), HttpError> {
    let v = trim_ows(value);
    let end = v.iter().position(|&b| b == b';').unwrap_or(v.len());
    if !trim_ows(&v[..end]).eq_ignore_ascii_case(media) {
        return Err(HttpError::ContentType);
    }
    let mut i = end;
    let mut charset_seen = false;
    let ows = |i: &mut usize| {
        while let Some(b' ' | b'\t') = v.get(*i) {
            *i += 1;
        }
    };
    while i < v.len() {
        // At a ';' (after the previous element and its OWS).
        if v.get(i) != Some(&b';') {
            return Err(HttpError::ContentType);
        }
        i += 1;
        ows(&mut i);
        if matches!(v.get(i), None | Some(b';')) {
            continue; // an empty parameter
        }
        let name_start = i;
        while v.get(i).copied().is_some_and(is_tchar) {
            i += 1;
        }
        let name = &v[name_start..i];
        if name.is_empty() || v.get(i) != Some(&b'=') {
            return Err(HttpError::ContentType);
        }
        i += 1;
        let mut unquoted = Vec::new();
        if v.get(i) == Some(&b'"') {
            i += 1;
            loop {
                match v.get(i) {
                    None => return Err(HttpError::ContentType),
                    Some(b'"') => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') => {
                        match v.get(i + 1) {
                            Some(&c) if c == b'\t' || c >= 0x20 && c != 0x7f => unquoted.push(c),
                            _ => return Err(HttpError::ContentType),
                        }
                        i += 2;
                    }
                    Some(&c) if c == b'\t' || c >= 0x20 && c != 0x7f => {
                        unquoted.push(c);
                        i += 1;
                    }
                    Some(_) => return Err(HttpError::ContentType),
                }
            }
        } else {
            let value_start = i;
            while v.get(i).copied().is_some_and(is_tchar) {
                i += 1;
            }
            if i == value_start {
                return Err(HttpError::ContentType);
            }
            unquoted.extend_from_slice(&v[value_start..i]);
        }
        if name.eq_ignore_ascii_case(b"charset") {
            if charset_seen || !unquoted.eq_ignore_ascii_case(b"utf-8") {
                return Err(HttpError::Charset);
            }
            charset_seen = true;
        }
        ows(&mut i);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_must_be_origin_form() {
        assert_eq!(parse_target("/mcp?x=1&y=%2F").unwrap().path, "/mcp");
        assert_eq!(parse_target("/").unwrap().path, "/");
        // `//h/mcp` is a path with an empty first segment: origin-form (and not the endpoint).
        assert_eq!(parse_target("//h/mcp").unwrap().path, "//h/mcp");
        for bad in ["mcp", "*", "http://h/mcp", ""] {
            assert_eq!(parse_target(bad), Err(HttpError::NotOriginForm), "{bad}");
        }
        for bad in [
            "/m cp", "/mcp#x", "/mcp\\x", "/m\u{e9}", "/mcp\r\n", "/a\"b", "/a|b",
        ] {
            assert_eq!(
                parse_target(bad),
                Err(HttpError::TargetCharacter),
                "{bad:?}"
            );
        }
        for bad in ["/mcp%", "/mcp%2", "/mcp%zz", "/mcp?%g0"] {
            assert_eq!(parse_target(bad), Err(HttpError::BadPercentEscape), "{bad}");
        }
    }

    #[test]
    fn endpoint_is_byte_equal_or_a_plain_subpath() {
        let exact = EndpointPath::Exact("/mcp".into());
        assert!(is_endpoint(&exact, "/mcp"));
        for other in [
            "/MCP",
            "/mcp/",
            "/mcp;x",
            "/mcp%2f..",
            "/mcp/../admin",
            "/mc",
            "/mcpx",
            "//mcp",
        ] {
            assert!(!is_endpoint(&exact, other), "{other}");
        }
        assert!(is_endpoint(&EndpointPath::Exact("".into()), "/"));
        assert!(is_endpoint(&EndpointPath::Exact("/mcp?k=v".into()), "/mcp"));
        let prefix = EndpointPath::Prefix("/v1/mcp/".into());
        for ok in [
            "/v1/mcp/",
            "/v1/mcp",
            "/v1/mcp/srv_01",
            "/v1/mcp/a/b",
            "/v1/mcp/a/",
        ] {
            assert!(is_endpoint(&prefix, ok), "{ok}");
        }
        for bad in [
            "/v1/mcp/../admin",
            "/v1/mcp/./x",
            "/v1/mcp/a/..",
            "/v1/mcp//x",
            "/v1/mcp/%2e%2e",
            "/v1/mcp/x;y",
            "/v1/mcpx",
            "/V1/mcp/x",
            "/v1/mcp/a//",
        ] {
            assert!(!is_endpoint(&prefix, bad), "{bad}");
        }
        let bare = EndpointPath::Prefix("/v1/mcp".into());
        assert!(is_endpoint(&bare, "/v1/mcp/x"));
        assert!(!is_endpoint(&bare, "/v1/mcpx"));
    }

    #[test]
    fn oauth_metadata_paths() {
        let endpoint = EndpointPath::Exact("/mcp".into());
        for ok in [
            "/.well-known/oauth-protected-resource",
            "/.well-known/oauth-protected-resource/mcp",
            "/.well-known/oauth-authorization-server",
            "/.well-known/oauth-authorization-server/tenant/a",
            "/.well-known/openid-configuration",
            "/mcp/.well-known/oauth-protected-resource",
            "/mcp/.well-known/openid-configuration",
        ] {
            assert!(oauth_metadata(&endpoint, ok).is_some(), "{ok}");
        }
        for bad in [
            "/.well-known/",
            "/.well-known",
            "/.well-known/../admin",
            "/.well-known/oauth-protected-resource/%2e%2e/y",
            "/.well-known/oauth-protected-resource/../../admin",
            "/.well-known/acme-challenge/x",
            "/.well-known/mcp",
            "/.WELL-KNOWN/openid-configuration",
            "/x/.well-known/openid-configuration",
            "/mcpx/.well-known/openid-configuration",
            "/.well-known/openid-configurationx",
            "/mcp/.well-known/openid-configuration/x",
        ] {
            assert_eq!(oauth_metadata(&endpoint, bad), None, "{bad}");
        }
        let connectors = EndpointPath::Prefix("/v1/mcp".into());
        assert_eq!(
            oauth_metadata(
                &connectors,
                "/v1/mcp/abc/.well-known/oauth-protected-resource"
            ),
            Some("oauth-protected-resource")
        );
    }

    #[test]
    fn media_types() {
        for ok in [
            &b"application/json"[..],
            b"Application/JSON",
            b"application/json; charset=utf-8",
            b"application/json;charset=UTF-8",
            b"application/json ; charset=\"utf-8\"",
            b"application/json;",
            b"application/json; foo=bar; baz=\"q;\\\"x\"",
            b" application/json ",
        ] {
            assert_eq!(
                check_media_type(ok, b"application/json"),
                Ok(()),
                "{}",
                String::from_utf8_lossy(ok)
            );
        }
        for bad in [
            &b"text/json"[..],
            b"application/json-seq",
            b"application/jsonx",
            b"application/*",
            b"application/json, text/plain",
            b"application/json; charset",
            b"application/json; =x",
            b"application/json; a=\"unterminated",
            b"application/json charset=utf-8",
            b"application/x-www-form-urlencoded",
            b"",
        ] {
            assert_eq!(
                check_media_type(bad, b"application/json"),
                Err(HttpError::ContentType),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        for bad in [
            &b"application/json; charset=utf-16"[..],
            b"application/json; charset=latin1",
            b"application/json; charset=utf-8; charset=utf-8",
            b"application/json; charset=utf8",
        ] {
            assert_eq!(
                check_media_type(bad, b"application/json"),
                Err(HttpError::Charset)
            );
        }
    }

    #[test]
    fn ows_trimming() {
        assert_eq!(trim_ows(b"  a b\t"), b"a b");
        assert_eq!(trim_ows(b" \t "), b"");
        assert_eq!(trim_ows(b""), b"");
    }
}
