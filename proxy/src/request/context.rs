//! [`RequestContext`]: what every phase of one request to an admitted destination shares, so that a
//! phase takes one parameter for its surroundings instead of six: the session, the client
//! connection's guard, the way upstream (which carries the admitted [`Destination`]), the policy
//! in force when the request began (it decides the whole request, whatever a reload does
//! meanwhile), and the audit subject every record of this request is about, which names it.

use crate::audit::sink::Subject;
use crate::request::admit::Destination;
use crate::request::upstream::Upstream;
use crate::session::context::{ConnGuard, SessionContext};
use crate::session::live::Live;
use http::Request;
use std::sync::Arc;

pub(crate) struct RequestContext<'a> {
    pub session: &'a Arc<SessionContext>,
    pub guard: &'a ConnGuard,
    pub upstream: &'a Upstream,
    /// The policy this request is decided under.
    pub live: Arc<Live>,
    /// The request's method and path (no query) on its destination.
    pub subject: Subject,
}

impl<'a> RequestContext<'a> {
    pub fn new<B>(
        session: &'a Arc<SessionContext>,
        guard: &'a ConnGuard,
        upstream: &'a Upstream,
        req: &Request<B>,
    ) -> RequestContext<'a> {
        let live = session.live.current();
        let subject = upstream
            .destination()
            .subject(req.method().as_str(), Some(req.uri().path()))
            .under(&live.hash);
        RequestContext {
            session,
            guard,
            upstream,
            live,
            subject,
        }
    }

    pub fn dest(&self) -> &Destination {
        self.upstream.destination()
    }
}
