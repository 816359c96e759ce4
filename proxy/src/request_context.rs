//! [`RequestContext`]: what every phase of one request to an admitted destination shares, so that a
//! phase takes one parameter for its surroundings instead of six: the session, the client
//! connection's guard, the way upstream (which carries the admitted [`Destination`]), and the audit
//! subject every record of this request is about.

use crate::admit::Destination;
use crate::audit_sink::Subject;
use crate::context::{ConnGuard, SessionContext};
use crate::upstream::Upstream;
use http::Request;
use std::sync::Arc;

pub(crate) struct RequestContext<'a> {
    pub session: &'a Arc<SessionContext>,
    pub guard: &'a ConnGuard,
    pub upstream: &'a Upstream,
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
        let subject = upstream
            .destination()
            .subject(req.method().as_str(), Some(req.uri().path()));
        RequestContext {
            session,
            guard,
            upstream,
            subject,
        }
    }

    pub fn dest(&self) -> &Destination {
        self.upstream.destination()
    }
}
