//! Which entry of an MCP host a request belongs to, by its path (README, "Servers by path"). An MCP
//! server is its scheme, host, port and path: admission (`Policy::route`) finds the host, any of
//! its entries, and every request inside is then given to exactly one entry, or to none, by
//! [`Policy::owner_of_path`]. This is the one place that answers "which entry does this path
//! belong to"; the classifier, the secret-use decision (a `token: true` entry's token goes only to
//! requests of that entry), the limits, the inventories and the records all follow its answer.
//!
//! The rule, on the raw path of the request target (query aside), never decoded or normalised, as
//! `mcp::http` matches endpoints:
//!
//! 1. A host with one entry: every path is that entry's. Its own rules say what each path may do
//!    (JSON-RPC only at its endpoint, and so on), as they did before servers were told apart by path.
//! 2. The endpoint: the `url` entry whose path is byte-equal to the request's. The loader refuses
//!    two entries of one host whose paths a server might route alike (equal but for case, a
//!    trailing `/`, `//`, percent-escapes or `;` parameters), so at most one matches, and a path
//!    that is only a prefix of another's (`/mcp` and `/mcp/readonly`) matches only itself. An
//!    account entry (a path prefix) has its host to itself, by the same loader rule.
//! 3. OAuth metadata naming an entry's path: `/.well-known/<doc><path>` (RFC 9728 §3.1, RFC 8414
//!    §3.1) or `<path>/.well-known/<doc>`, the path byte-equal to an entry's: that entry.
//! 4. A message path the server announced this session on one entry's legacy event stream: that
//!    entry. Announced by two entries of the host, it is nobody's: which one a POST there would
//!    reach is the server's secret.
//! 5. The host itself, for what names no entry but every entry allows alike: a `GET` of an OAuth
//!    metadata document under `/.well-known/` that names no entry's path (the bare
//!    `/.well-known/<doc>`, the authorization server's documents), and a request target that is not origin-form or has characters URIs do
//!    not allow (refused as `bad_request` by the classifier). It is decided under the host's first
//!    entry (in config order) and recorded under its name, but it is no entry's request: no
//!    entry's token is put on it.
//! 6. Anything else is nobody's: `policy_denied`, rule `mcp.<host> no server at this path`.
//!    In particular a path that differs from an entry's only in spelling (`/MCP`, `/mcp/`,
//!    `//mcp`, `/m%63p`, `/mcp;x`, `/x/../mcp`) is refused, never given to the nearest entry.

use super::{McpServer, Policy};
use crate::decision::{Decision, Reason};
use crate::mcp::EndpointPath;
use crate::mcp::http::{oauth_metadata_resource, parse_target};
use crate::untrusted_text::shown;

/// The entry of an MCP host a request belongs to, by index into [`Policy::servers`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathOwner {
    /// The request is this entry's: its rules decide it, and its token may be used on it.
    Entry(usize),
    /// The request names no entry, and every entry decides it alike (see the module
    /// documentation, rule 5): decided and recorded under this entry, the host's first, but no
    /// entry's token may be used on it.
    Host(usize),
    /// No entry of the host has this path: the request is refused with this decision
    /// (`policy_denied`).
    Nobody(Decision),
}

impl PathOwner {
    /// The entry whose rules decide the request, if any.
    pub fn decided_by(&self) -> Option<usize> {
        match self {
            PathOwner::Entry(i) | PathOwner::Host(i) => Some(*i),
            PathOwner::Nobody(_) => None,
        }
    }

    /// The entry the request is for, whose token it may carry: `None` for the host's own paths
    /// and for nobody's.
    pub fn entry(&self) -> Option<usize> {
        match self {
            PathOwner::Entry(i) => Some(*i),
            PathOwner::Host(_) | PathOwner::Nobody(_) => None,
        }
    }
}

impl Policy {
    /// The entries on the host and port of `server` (itself among them), with their indices into
    /// [`Policy::servers`], in config order.
    pub fn entries_on_host<'p>(
        &'p self,
        server: &'p McpServer,
    ) -> impl Iterator<Item = (usize, &'p McpServer)> + 'p {
        self.servers
            .iter()
            .enumerate()
            .filter(move |(_, s)| s.pattern == server.pattern)
    }

    /// Whether the host and port of `server` has other entries too (at other paths).
    pub fn is_shared_host(&self, server: &McpServer) -> bool {
        self.entries_on_host(server).nth(1).is_some()
    }

    /// The rule that admits a destination, as a record names it: a route's own rule, and for an
    /// MCP host every entry on it (`mcp.full, mcp.readonly`), since admission is the host's, not
    /// one entry's.
    pub fn admission_rule(&self, route: &super::Route<'_>) -> String {
        match route {
            super::Route::Mcp(server) => self
                .entries_on_host(server)
                .map(|(_, s)| format!("mcp.{}", s.name))
                .collect::<Vec<_>>()
                .join(", "),
            other => other.rule(),
        }
    }

    /// Which entry of the host of `admitted` (the server a connection was admitted for) a request
    /// with `method` and origin-form `target` (path and query, as sent) belongs to (see the
    /// module documentation). `announced(entry, path)` says whether `entry`'s server announced
    /// `path` (without query) as a legacy message path this session.
    pub fn owner_of_path(
        &self,
        admitted: &McpServer,
        method: &str,
        target: &str,
        announced: impl Fn(&McpServer, &str) -> bool,
    ) -> PathOwner {
        let mut entries = self.entries_on_host(admitted);
        let Some((first, _)) = entries.next() else {
            // Every policy of a session has the servers it started with; were the host missing,
            // nothing on it is anyone's.
            return PathOwner::Nobody(nobody(admitted, method, target));
        };
        if entries.next().is_none() {
            return PathOwner::Entry(first);
        }
        let Ok(parsed) = parse_target(target) else {
            return PathOwner::Host(first);
        };
        let path = parsed.path;
        let exact = |wanted: &str| {
            self.entries_on_host(admitted)
                .find(|(_, s)| matches!(&s.rule.endpoint, EndpointPath::Exact(p) if p == wanted))
                .map(|(i, _)| i)
        };
        if let Some(i) = exact(path) {
            return PathOwner::Entry(i);
        }
        if let Some(resource) = oauth_metadata_resource(path) {
            if let Some(i) = resource.and_then(exact) {
                return PathOwner::Entry(i);
            }
            // Only the host's own documents, under `/.well-known/`: a document under a path no
            // entry has (`/admin/.well-known/...`) is nobody's.
            if method == "GET" && path.starts_with("/.well-known/") {
                return PathOwner::Host(first);
            }
        }
        let mut announcers = self
            .entries_on_host(admitted)
            .filter(|(_, s)| announced(s, path))
            .map(|(i, _)| i);
        if let (Some(i), None) = (announcers.next(), announcers.next()) {
            return PathOwner::Entry(i);
        }
        PathOwner::Nobody(nobody(admitted, method, path))
    }
}

/// The refusal of a request no entry of the host has a path for.
fn nobody(admitted: &McpServer, method: &str, path: &str) -> Decision {
    Decision::deny(
        Reason::PolicyDenied,
        format!("mcp.{} no server at this path", admitted.pattern),
        format!(
            "{} {} is not the path of any MCP server on {}",
            shown(method),
            shown(path),
            admitted.pattern
        ),
    )
}
