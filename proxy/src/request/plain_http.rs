//! An absolute-form `http://` request to the proxy: the URL is checked (scheme, no userinfo, no
//! placeholder in its host, which is refused before it is parsed or resolved), the destination
//! admitted, and the request handed to [`crate::request::exchange`]. An `https` MCP server is not reached this
//! way: the request came in clear text.

use crate::attribution::Attributed;
use crate::audit::sink::Subject;
use crate::connection::body::Body;
use crate::request::admit::{Destination, admit};
use crate::request::authority::{check_no_placeholder, default_port, logged_authority};
use crate::request::context::RequestContext;
use crate::request::exchange::exchange;
use crate::request::refusal::Refusal;
use crate::request::upstream::Upstream;
use crate::session::context::{ConnGuard, SessionContext};
use fenzi_policy::host::split_authority;
use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;
use std::net::SocketAddr;
use std::sync::Arc;

pub(crate) async fn plain_http(
    session: Arc<SessionContext>,
    guard: &ConnGuard,
    req: Request<Incoming>,
) -> Response<Body> {
    let (dest, host) = match check_url(&session, guard.peer(), guard.program(), &req).await {
        Ok(admitted) => admitted,
        Err(refusal) => return refusal.answer(&session),
    };
    let upstream = Upstream::new(Arc::new(dest), false);
    let cx = RequestContext::new(&session, guard, &upstream, &req);
    exchange(cx, req, host).await
}

/// The admitted destination of the request's URL and the Host value to send, or the refusal.
async fn check_url<B>(
    session: &SessionContext,
    client: SocketAddr,
    program: &Attributed,
    req: &Request<B>,
) -> Result<(Destination, HeaderValue), Refusal> {
    let (method, uri) = (req.method().as_str(), req.uri());
    // Until the URL's authority parses, the record names only what may be logged.
    let (logged_host, logged_port) = match uri.authority() {
        Some(authority) => logged_authority(authority.as_str(), default_port(uri.scheme_str())),
        None => ("-".to_string(), 0),
    };
    let mut subject =
        Subject::new(client, method, logged_host, logged_port, Some(uri.path())).by(program);
    if uri.scheme_str() != Some("http") {
        let why = "only http:// URLs can be sent to the proxy as requests; use CONNECT for https";
        return Err(Refusal::bad_request(&subject, why));
    }
    let Some(authority) = uri.authority() else {
        return Err(Refusal::bad_request(
            &subject,
            "the request URL has no host",
        ));
    };
    check_no_placeholder(
        session,
        authority.as_str(),
        "the request URL's host",
        &subject,
    )?;
    if authority.as_str().contains('@') {
        let why = "credentials in the request URL are not forwarded; send them in a header";
        return Err(Refusal::bad_request(&subject, why));
    }
    let (host, port) = split_authority(authority.as_str())
        .map(|(host, port)| (host, port.unwrap_or(80)))
        .map_err(|e| Refusal::bad_request(&subject, &e.to_string()))?;
    subject.host = host.to_string();
    subject.port = port;

    let dest = admit(session, &host, port, &subject).await?;
    // An http:// URL reached the proxy in clear text: an https MCP server is not reached that way.
    if let Some(refused) = dest.check_transport(false) {
        let subject = dest.subject(method, Some(uri.path()));
        return Err(Refusal::denied(&subject, &refused));
    }
    let host_value = HeaderValue::from_str(authority.as_str())
        .map_err(|_| Refusal::bad_request(&subject, "the request URL's host is not valid"))?;
    Ok((dest, host_value))
}
