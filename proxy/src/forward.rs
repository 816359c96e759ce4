//! Forwarding one request to an admitted destination, shared by plain-HTTP proxy requests and requests
//! inside intercepted tunnels (pingora's phases in order): hop-by-hop headers removed, the request body
//! phase (buffered when anything must be decided about it), the secrets phase (placeholders refused
//! off their hosts, substituted on them), MCP enforcement (or one allowed record for a plain host),
//! the upstream phase (origin-form, the checked Host, a pooled connection), and the response phase
//! (hop-by-hop removed, secret values scrubbed, body streamed, never buffered). Redirects are answers
//! like any other: passed back, never followed.
//!
//! Also the handler for absolute-form `http://` requests to the proxy.

use crate::admit::{Admission, Destination, Handling, admit};
use crate::audit_sink::{Subject, logged_authority};
use crate::error::ProxyError;
use crate::failure_body::RecordsFailure;
use crate::mcp_enforce;
use crate::respond::{self, Body, BoxError};
use crate::secrets::scrub;
use crate::server::malformed;
use crate::server::{ConnGuard, Shared};
use crate::upstream::Upstream;
use bytes::Bytes;
use fenzi_policy::host::split_authority;
use fenzi_policy::{Decision, Reason};
use http::header::{CONNECTION, CONTENT_LENGTH, HOST};
use http::request::Parts;
use http::{
    HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri, Version,
};
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
///
/// The phases, in order: the head is made forwardable (hop-by-hop headers out, the checked Host
/// in; with secrets in the session, `Accept-Encoding: identity` so the response can be scrubbed);
/// the body is buffered whenever anything must be decided about it (an MCP server, or a session
/// with secrets), else it streams; [`decide`] runs the secrets and MCP decisions and writes the
/// records; the request goes upstream; the response comes back with hop-by-hop headers removed
/// and, with secrets in the session, every value in it replaced by its placeholder as it streams.
/// `guard` is the client connection's: a response body that breaks off holds it until its `failed`
/// record is written, so a shutdown's drain waits for that record.
pub(crate) async fn exchange(
    shared: &Arc<Shared>,
    guard: &ConnGuard,
    dest: &Destination,
    upstream: &Upstream,
    req: Request<Incoming>,
    host: HeaderValue,
) -> Response<Body> {
    let (mut parts, body) = req.into_parts();
    let client_version = parts.version;
    // The decisions see exactly the headers that will be forwarded.
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.insert(HOST, host);
    let secrets = &shared.secrets;
    if !secrets.is_empty() {
        scrub::request_identity(&mut parts.headers);
    }
    let subject = dest.subject(parts.method.as_str(), Some(parts.uri.path()));

    let body: Body = if secrets.is_empty() && matches!(dest.handling, Handling::Plain) {
        // Nothing to decide about the body: one record for the route, then it streams.
        if !shared.record(subject.decided(&dest.decision)).await {
            return respond::audit_unavailable();
        }
        body.map_err(BoxError::from).boxed_unsync()
    } else {
        let bytes = match mcp_enforce::read_body(shared, &subject, &parts, body).await {
            Ok(bytes) => bytes,
            Err(answer) => return answer,
        };
        match decide(shared, dest, upstream.secure(), &subject, &mut parts, bytes).await {
            Ok(bytes) => respond::full(bytes),
            Err(answer) => return answer,
        }
    };

    let is_head = parts.method == Method::HEAD;
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

    let response = match upstream
        .send(shared, Request::from_parts(parts, body))
        .await
    {
        Ok(response) => response,
        Err(error) => return upstream_failed(shared, &subject, error).await,
    };
    let (mut head, body) = response.into_parts();
    strip_hop_by_hop(&mut head.headers);
    head.version = client_version;
    if secrets.is_empty() {
        let body = RecordsFailure::new(body, shared.clone(), subject, guard.clone());
        return Response::from_parts(head, body.boxed_unsync());
    }
    // A HEAD or 304 response has no body to scrub; its length describes another response.
    let length = (is_head || head.status == StatusCode::NOT_MODIFIED)
        .then(|| head.headers.get(CONTENT_LENGTH).cloned())
        .flatten();
    if let Err(refused) = secrets.scrubber().check_response_head(&mut head.headers) {
        return upstream_failed(shared, &subject, refused.into()).await;
    }
    if let Some(length) = length {
        head.headers.insert(CONTENT_LENGTH, length);
    }
    let body = secrets.scrubber().body(body);
    let body = RecordsFailure::new(body, shared.clone(), subject, guard.clone());
    Response::from_parts(head, body.boxed_unsync())
}

/// Records an allowed request's failure upstream and answers it (502, or 400 for the client's).
async fn upstream_failed(shared: &Shared, subject: &Subject, error: ProxyError) -> Response<Body> {
    if !shared.record_failure(subject, &error).await {
        return respond::audit_unavailable();
    }
    respond::failure(&error)
}

/// The decisions about a buffered request, each recorded before anything is forwarded (DESIGN.md
/// §3-§5, and the integration guide in [`crate::secrets`]):
///
/// 1. Secrets: where this session's placeholders appear and where the request goes. A placeholder
///    sent to a host it is not bound to, or in clear text (`secure` false), refuses the whole
///    request: one `credential_endpoint_mismatch` record naming the secrets, 403, nothing sent.
/// 2. MCP: the classifier's decision, one record per message; a denial is answered as usual.
/// 3. The granted substitutions are carried out (header values, query, body where allowed, the
///    bearer of a `token: true` server, `Content-Length`), and the records are written naming the
///    secrets used.
///
/// `Ok` is the body to forward (`parts` updated); `Err` the answer to send instead.
async fn decide(
    shared: &Shared,
    dest: &Destination,
    secure: bool,
    subject: &Subject,
    parts: &mut Parts,
    body: Bytes,
) -> Result<Bytes, Response<Body>> {
    let secrets = &shared.secrets;
    let use_ = secrets.check_request(&dest.host, dest.port, secure, parts, &body);
    if !use_.is_allowed() {
        return Err(refuse(
            shared,
            dest,
            subject,
            &use_.decision,
            &use_.secrets,
            parts,
            &body,
        )
        .await);
    }
    let entries = match &dest.handling {
        Handling::Mcp(server) => {
            let decision = mcp_enforce::classify(shared, server, parts, &body);
            let entries = mcp_enforce::entries(subject, &decision);
            if !decision.overall.is_allowed() {
                // Refused: nothing was substituted, so the records name no secret.
                for entry in entries {
                    if !shared.record(entry).await {
                        return Err(respond::audit_unavailable());
                    }
                }
                return Err(mcp_enforce::refusal(&decision, parts, &body));
            }
            entries
        }
        Handling::Plain => vec![subject.decided(&dest.decision)],
    };

    let body = match secrets.apply(&use_, parts, body.clone()) {
        Ok(new) => new,
        Err(e) => {
            let refused = Decision::deny(Reason::BadRequest, "secrets", e.to_string());
            return Err(refuse(shared, dest, subject, &refused, &use_.secrets, parts, &body).await);
        }
    };
    // A value written into an MCP body must not change what the classifier allowed.
    if let Handling::Mcp(server) = &dest.handling
        && use_.substitute.iter().any(|g| g.body)
        && !mcp_enforce::classify(shared, server, parts, &body)
            .overall
            .is_allowed()
    {
        let refused = Decision::deny(
            Reason::PolicyDenied,
            "secrets in bodies",
            "the request is no longer allowed once the secret values are written into its body",
        );
        let mut entry = subject.decided(&refused);
        entry.secrets = use_.secrets.clone();
        if !shared.record(entry).await {
            return Err(respond::audit_unavailable());
        }
        return Err(respond::denied(&refused));
    }
    for mut entry in entries {
        entry.secrets = use_.secrets.clone();
        if !shared.record(entry).await {
            return Err(respond::audit_unavailable());
        }
    }
    Ok(body)
}

/// Records one refusal of a buffered request naming `secrets`, and answers it: on an MCP server
/// with a JSON-RPC error for each of its requests, elsewhere with the plain denial body.
async fn refuse(
    shared: &Shared,
    dest: &Destination,
    subject: &Subject,
    refused: &Decision,
    secrets: &[String],
    parts: &Parts,
    body: &[u8],
) -> Response<Body> {
    let mut entry = subject.decided(refused);
    entry.secrets = secrets.to_vec();
    if !shared.record(entry).await {
        return respond::audit_unavailable();
    }
    match &dest.handling {
        Handling::Mcp(server) => mcp_enforce::refusal_for(shared, server, refused, parts, body),
        Handling::Plain => respond::denied(refused),
    }
}

/// The refusal of a destination whose name holds one of this session's placeholders (a CONNECT
/// target, an absolute URL's authority, the TLS server name), with the secrets' names; `None` when
/// it holds none. Checked before the name is resolved, so a placeholder never reaches DNS.
pub(crate) fn authority_refusal(
    shared: &Shared,
    authority: &str,
    what: &str,
) -> Option<(Decision, Vec<String>)> {
    let sightings = shared.secrets.scanner().scan_authority(authority);
    if sightings.is_empty() {
        return None;
    }
    let mut names: Vec<String> = sightings.into_iter().map(|s| s.secret).collect();
    names.sort();
    names.dedup();
    let decision = Decision::deny(
        Reason::CredentialEndpointMismatch,
        "secrets are never host names",
        format!(
            "{what} holds the placeholder of {} {}; a placeholder is only replaced in header \
             values, the query string or a body sent to its own host",
            if names.len() == 1 {
                "secret"
            } else {
                "secrets"
            },
            names.join(", ")
        ),
    );
    Some((decision, names))
}

/// Records and answers a destination refused by [`authority_refusal`].
pub(crate) async fn refuse_authority(
    shared: &Shared,
    subject: &Subject,
    refused: &Decision,
    secrets: Vec<String>,
) -> Response<Body> {
    let mut entry = subject.decided(refused);
    entry.secrets = secrets;
    if !shared.record(entry).await {
        return respond::audit_unavailable();
    }
    respond::denied(refused)
}

/// Records and answers a request refused as malformed before it reached any destination.
pub(crate) async fn bad_request(shared: &Shared, subject: &Subject, why: &str) -> Response<Body> {
    let decision = malformed::refusal(why);
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
pub(crate) async fn plain_http(
    shared: Arc<Shared>,
    guard: &ConnGuard,
    req: Request<Incoming>,
) -> Response<Body> {
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
    if let Some((refused, names)) =
        authority_refusal(&shared, authority.as_str(), "the request URL's host")
    {
        return refuse_authority(&shared, &subject, &refused, names).await;
    }
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
    exchange(&shared, guard, &dest, &upstream, req, host_value).await
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
