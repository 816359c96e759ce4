//! [`RequestContext`]: what every phase of one request to an admitted destination shares, so that a
//! phase takes one parameter for its surroundings instead of six: the session, the client
//! connection's guard, the way upstream (which carries the admitted [`Destination`]), the policy
//! in force when the request began (it decides the whole request, whatever a reload does
//! meanwhile), the entry of an MCP host the request's path belongs to
//! ([`fenzi_policy::engine::by_path`], decided once here), and the audit subject every record of
//! this request is about, which names it and that entry.

use crate::audit::sink::Subject;
use crate::request::admit::{Destination, Handling};
use crate::request::upstream::Upstream;
use crate::session::context::{ConnGuard, SessionContext};
use crate::session::live::Live;
use fenzi_policy::engine::{McpServer, PathOwner};
use http::Request;
use std::sync::Arc;

pub(crate) struct RequestContext<'a> {
    pub session: &'a Arc<SessionContext>,
    pub guard: &'a ConnGuard,
    pub upstream: &'a Upstream,
    /// The policy this request is decided under.
    pub live: Arc<Live>,
    /// On an MCP host: which of its entries the request's path belongs to (`None` on a plain host).
    pub owner: Option<PathOwner>,
    /// The request's method and path (no query) on its destination, and the entry that decides it.
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
        let dest = upstream.destination();
        let method = req.method().as_str();
        let owner = match &dest.handling {
            Handling::Mcp(admitted) => {
                let target = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
                Some(
                    live.policy
                        .owner_of_path(admitted, method, target, |s, path| {
                            session.inventories.read(&s.name, |inventory| {
                                inventory.message_paths().contains(path)
                            })
                        }),
                )
            }
            Handling::Plain => None,
        };
        let server = owner
            .as_ref()
            .and_then(PathOwner::decided_by)
            .map(|i| live.policy.servers()[i].name.as_str());
        let subject = dest
            .subject_of(method, Some(req.uri().path()), server)
            .under(&live.hash);
        RequestContext {
            session,
            guard,
            upstream,
            live,
            owner,
            subject,
        }
    }

    /// The MCP server whose rules decide this request, as the request's policy has it: the
    /// entry its path belongs to, or the host's first for a path of the host itself. `None` on a
    /// plain host and for a path no entry has.
    pub fn server(&self) -> Option<&McpServer> {
        self.live.policy.servers().get(self.server_index()?)
    }

    /// [`Self::server`]'s index in the request's policy (the same in every policy of a session).
    pub fn server_index(&self) -> Option<usize> {
        self.owner.as_ref()?.decided_by()
    }

    /// The entry whose token this request may carry (see `SecretBinding::is_bound_for`).
    pub fn entry_name(&self) -> Option<&str> {
        let index = self.owner.as_ref()?.entry()?;
        Some(self.live.policy.servers().get(index)?.name.as_str())
    }

    pub fn dest(&self) -> &Destination {
        self.upstream.destination()
    }
}
