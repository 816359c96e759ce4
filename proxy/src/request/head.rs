//! Heads as they are forwarded, both ways: hop-by-hop headers removed (and those `Connection` names),
//! the checked Host set, `Accept-Encoding: identity` when the response may need scrubbing, and the
//! origin-form target an upstream expects.

use crate::secrets::scrub;
use fenzi_policy::secret_position::HOP_BY_HOP_HEADERS;
use http::header::{CONNECTION, HOST};
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderName, HeaderValue, Uri, Version};

/// Removes hop-by-hop headers, including those the `Connection` header names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most heads carry none: one pass over the names present (header names are lowercase) is
    // cheaper than ten removals by name, each parsing and hashing it. Without a `Connection`
    // header no other name can be listed for removal, and `Connection` is itself on the list.
    if !headers
        .keys()
        .any(|name| HOP_BY_HOP_HEADERS.contains(&name.as_str()))
    {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for &name in HOP_BY_HOP_HEADERS {
        headers.remove(name);
    }
}

/// Makes a request head forwardable before anything is decided about it, so the decisions see exactly
/// the headers that will be sent: hop-by-hop headers out, `host` (the checked Host value) in, and with
/// secrets in the session (`scrubbed`) identity encoding asked for, so the response can be scrubbed.
pub(crate) fn prepare_request(parts: &mut Parts, host: HeaderValue, scrubbed: bool) {
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.insert(HOST, host);
    if scrubbed {
        scrub::request_identity(&mut parts.headers);
    }
}

/// The request head as it goes upstream: the origin-form target (path and query only) over HTTP/1.1.
pub(crate) fn to_origin_form(parts: &mut Parts) {
    // The path and query as they were parsed (a cheap clone of shared bytes), not parsed again.
    let mut origin_form = http::uri::Parts::default();
    origin_form.path_and_query = Some(
        parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/")),
    );
    parts.uri = Uri::from_parts(origin_form).unwrap_or_else(|_| Uri::from_static("/"));
    parts.version = Version::HTTP_11;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_removed() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, X-Secret-Hop"),
            ("connection", "x-other"),
            ("x-secret-hop", "1"),
            ("x-other", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "Basic x"),
            ("transfer-encoding", "chunked"),
            ("te", "trailers"),
            ("upgrade", "websocket"),
            ("expect", "100-continue"),
            ("authorization", "Bearer kept"),
            ("content-type", "application/json"),
        ] {
            headers.append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        strip_hop_by_hop(&mut headers);
        let mut left: Vec<&str> = headers.keys().map(|k| k.as_str()).collect();
        left.sort();
        assert_eq!(left, ["authorization", "content-type"]);
    }

    #[test]
    fn a_hop_by_hop_header_without_connection_is_removed_too() {
        let mut headers = HeaderMap::new();
        headers.insert("te", HeaderValue::from_static("trailers"));
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        strip_hop_by_hop(&mut headers);
        let left: Vec<&str> = headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["content-type"]);
    }

    #[test]
    fn origin_form_keeps_path_and_query_only() {
        let (mut parts, ()) = http::Request::builder()
            .uri("https://web.test:8443/a/b?x=1&y=%20")
            .version(Version::HTTP_2)
            .body(())
            .unwrap()
            .into_parts();
        to_origin_form(&mut parts);
        assert_eq!(parts.uri.to_string(), "/a/b?x=1&y=%20");
        assert_eq!(parts.uri.authority(), None);
        assert_eq!(parts.version, Version::HTTP_11);
        let (mut parts, ()) = http::Request::builder()
            .uri("https://web.test")
            .body(())
            .unwrap()
            .into_parts();
        to_origin_form(&mut parts);
        assert_eq!(parts.uri.to_string(), "/");
    }
}
