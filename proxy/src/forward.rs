//! Forwarding one request to an admitted destination, shared by plain-HTTP proxy requests and requests
//! inside intercepted tunnels (pingora's phases in order): hop-by-hop headers removed, the request body
//! phase (MCP enforcement, or one allowed record for a plain host), the upstream phase (origin-form,
//! the checked Host, a pooled connection), and the response phase (hop-by-hop removed, body streamed,
//! never buffered). Redirects are answers like any other: passed back, never followed.
//!
//! Also the handler for absolute-form `http://` requests to the proxy.

use crate::admit::{Admission, Destination, Handling, admit};
use crate::audit_sink::{Subject, logged_authority};
use crate::mcp_enforce;
use crate::respond::{self, Body, BoxError};
use crate::server::Shared;
use crate::upstream::Upstream;
use fenzi_policy::host::split_authority;
use fenzi_policy::{Decision, Reason};
use http::header::{CONNECTION, HOST};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::sync::Arc;

/// Headers that describe one hop, never forwarded (RFC 9110 §7.6.1), plus `Expect`, which the proxy's
/// own server has already answered.
const HOP_BY_HOP: [&str; 10] = [
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

/// Removes hop-by-hop headers, including those the `Connection` header names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
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
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Decides, records and forwards one request to `dest`; `host` is the checked Host value to send.
pub(crate) async fn exchange(
    shared: &Shared,
    dest: &Destination,
    upstream: &Upstream,
    req: Request<Incoming>,
    host: HeaderValue,
) -> Response<Body> {
    let (mut parts, body) = req.into_parts();
    let client_version = parts.version;
    // The classifier sees exactly the headers that will be forwarded.
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.insert(HOST, host);
    let subject = dest.subject(parts.method.as_str(), Some(parts.uri.path()));

    let body: Body = match &dest.handling {
        Handling::Mcp(server) => {
            match mcp_enforce::inspect(shared, server, &subject, &parts, body).await {
                Ok(bytes) => respond::full(bytes),
                Err(answer) => return answer,
            }
        }
        Handling::Plain => {
            if !shared.record(subject.decided(&dest.decision)).await {
                return respond::audit_unavailable();
            }
            body.map_err(BoxError::from).boxed_unsync()
        }
    };

    let origin_form = parts
        .uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_string();
    parts.uri = match Uri::try_from(origin_form) {
        Ok(uri) => uri,
        Err(_) => Uri::from_static("/"),
    };
    parts.version = Version::HTTP_11;

    match upstream
        .send(shared, Request::from_parts(parts, body))
        .await
    {
        Ok(response) => {
            let (mut head, body) = response.into_parts();
            strip_hop_by_hop(&mut head.headers);
            head.version = client_version;
            Response::from_parts(head, body.map_err(BoxError::from).boxed_unsync())
        }
        Err(error) => {
            tracing::warn!(host = %dest.host, port = dest.port, "upstream failed: {error}");
            if !shared.record(subject.failed(&error)).await {
                return respond::audit_unavailable();
            }
            respond::failure(&error)
        }
    }
}

/// Records and answers a request refused as malformed before it reached any destination.
pub(crate) async fn bad_request(shared: &Shared, subject: &Subject, why: &str) -> Response<Body> {
    let decision = Decision::deny(Reason::BadRequest, "malformed request", why);
    if !shared.record(subject.decided(&decision)).await {
        return respond::audit_unavailable();
    }
    respond::denied(&decision)
}

/// The port a URL with `scheme` names when it gives none.
pub(crate) fn default_port(scheme: Option<&str>) -> u16 {
    match scheme {
        Some(s) if s.eq_ignore_ascii_case("https") => 443,
        _ => 80,
    }
}

/// An absolute-form `http://` request to the proxy.
pub(crate) async fn plain_http(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().as_str().to_string();
    let uri = req.uri().clone();
    // Until the URL's authority parses, the record names only what may be logged.
    let (logged_host, logged_port) = match uri.authority() {
        Some(authority) => logged_authority(authority.as_str(), default_port(uri.scheme_str())),
        None => ("-".to_string(), 0),
    };
    let mut subject = Subject {
        method: method.clone(),
        host: logged_host,
        port: logged_port,
        path: Some(uri.path().to_string()),
        server: None,
    };
    if uri.scheme_str() != Some("http") {
        let why = "only http:// URLs can be sent to the proxy as requests; use CONNECT for https";
        return bad_request(&shared, &subject, why).await;
    }
    let Some(authority) = uri.authority() else {
        return bad_request(&shared, &subject, "the request URL has no host").await;
    };
    if authority.as_str().contains('@') {
        let why = "credentials in the request URL are not forwarded; send them in a header";
        return bad_request(&shared, &subject, why).await;
    }
    let (host, port) = match split_authority(authority.as_str()) {
        Ok((host, port)) => (host, port.unwrap_or(80)),
        Err(e) => return bad_request(&shared, &subject, &e.to_string()).await,
    };
    subject.host = host.to_string();
    subject.port = port;

    let dest: Arc<Destination> = match admit(&shared, &host, port).await {
        Admission::Admitted(dest) => Arc::from(dest),
        Admission::Denied(decision) => {
            if !shared.record(subject.decided(&decision)).await {
                return respond::audit_unavailable();
            }
            return respond::denied(&decision);
        }
        Admission::Failed(error) => {
            if !shared.record(subject.failed(&error)).await {
                return respond::audit_unavailable();
            }
            return respond::failure(&error);
        }
    };
    // An http:// URL reached the proxy in clear text: an https MCP server is not reached that way.
    if let Some(refused) = dest.check_transport(false) {
        let subject = dest.subject(&method, Some(uri.path()));
        if !shared.record(subject.decided(&refused)).await {
            return respond::audit_unavailable();
        }
        return respond::denied(&refused);
    }
    let host_value = match HeaderValue::from_str(authority.as_str()) {
        Ok(value) => value,
        Err(_) => {
            return bad_request(&shared, &subject, "the request URL's host is not valid").await;
        }
    };
    let upstream = Upstream::new(dest.clone(), false);
    exchange(&shared, &dest, &upstream, req, host_value).await
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
}
