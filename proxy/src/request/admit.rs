//! Admission of a destination, the first phase of every connection and plain-HTTP request: the policy's
//! route for host:port, one resolution of the name, and the internal-address check of EVERY resolved
//! address (an internal one only when the policy names that IP literal, or the name's `private:`
//! ranges hold it). The result is a [`Destination`] that carries only checked addresses; the proxy dials nothing
//! else, so a name cannot resolve to one address for the check and another for the connection. A
//! destination that is not admitted is a [`Refusal`]: `host_not_allowed` or `private_address`, or a
//! `failed` record when the name cannot be resolved.
//!
//! A local server's address (`<name>.stdio.fenzi.internal`, DESIGN §18) is not resolved: it is
//! fenzi's own name, served by the server's bridge ([`crate::request::upstream`]), never dialled.

use crate::attribution::Attributed;
use crate::audit::sink::Subject;
use crate::error::ProxyError;
use crate::request::refusal::Refusal;
use crate::session::context::SessionContext;
use fenzi_policy::engine::{McpServer, Route, Transport};
use fenzi_policy::host::Host;
use fenzi_policy::programs::{ProgramFacts, ProgramRules};
use fenzi_policy::{Decision, Reason};
use std::net::SocketAddr;
use std::sync::Arc;

/// How requests to an admitted destination are handled.
#[derive(Debug, Clone)]
pub(crate) enum Handling {
    /// An MCP host: every request is given to one of its entries by its path, and classified by
    /// that entry's rules, before a byte goes upstream. The server is the one the host was
    /// admitted as (its first entry); its siblings share its host, port and scheme.
    Mcp(Box<McpServer>),
    /// A plain allowed host: requests are forwarded as they are.
    Plain,
}

/// A destination the policy admits, with its checked addresses.
#[derive(Debug, Clone)]
pub(crate) struct Destination {
    pub host: Host,
    /// `host` as records name it, made once for every request's subject.
    pub host_text: String,
    pub port: u16,
    pub handling: Handling,
    /// The admitting decision (its rule names the policy entry).
    pub decision: Decision,
    /// Whether a CONNECT to it must be intercepted rather than passed through.
    pub inspect: bool,
    /// An MCP host that several entries share, at different paths.
    pub shared: bool,
    /// Every address the name resolved to; each one passed `check_address`.
    pub addrs: Vec<SocketAddr>,
    /// The hash of the policy that admitted it. A connection stays what it was admitted as under
    /// later policies too (a reload never changes routes); its requests are decided under the
    /// policy in force when each begins.
    pub policy: Arc<str>,
    /// The peer address of the client connection it was admitted for.
    pub client: SocketAddr,
    /// The program of that connection: every record about the destination names it.
    pub program: Attributed,
}

impl Destination {
    /// The server a record about the destination itself names (a CONNECT, a refused handshake):
    /// an MCP host's only entry, and none for a host several entries share (each request names
    /// the entry its path belongs to instead).
    pub fn server_name(&self) -> Option<&str> {
        match &self.handling {
            Handling::Mcp(server) if !self.shared => Some(&server.name),
            Handling::Mcp(_) | Handling::Plain => None,
        }
    }

    /// A local server behind its bridge (DESIGN §18): never resolved or dialled.
    pub fn bridged(&self) -> bool {
        matches!(&self.handling, Handling::Mcp(server) if matches!(server.transport, Transport::Stdio(_)))
    }

    /// The refusal of a request that reached the proxy in clear text (`client_tls` false) for a
    /// destination the policy only reaches over TLS (an `https` MCP server), if it is one.
    pub fn check_transport(&self, client_tls: bool) -> Option<Decision> {
        match &self.handling {
            Handling::Mcp(server) => server.check_transport(client_tls),
            Handling::Plain => None,
        }
    }

    /// Whether the proxy talks TLS to this destination: the policy's scheme for an MCP server, the
    /// client's choice for a plain host (see `Route::upstream_tls`).
    pub fn upstream_tls(&self, client_tls: bool) -> bool {
        match &self.handling {
            Handling::Mcp(server) => server.upstream_tls(),
            Handling::Plain => client_tls,
        }
    }

    /// The audit subject of a request with `method` on `path` (no query) to this destination.
    pub fn subject(&self, method: &str, path: Option<&str>) -> Subject {
        self.subject_of(method, path, self.server_name())
    }

    /// The same, naming `server`: on an MCP host with several entries, the one the request's path
    /// belongs to ([`fenzi_policy::engine::by_path`]).
    pub fn subject_of(&self, method: &str, path: Option<&str>, server: Option<&str>) -> Subject {
        let mut subject =
            Subject::new(self.client, method, self.host_text.clone(), self.port, path)
                .by(&self.program);
        subject.server = server.map(str::to_string);
        subject.transport = self.bridged().then_some("stdio");
        subject.under(&self.policy)
    }
}

/// Routes, resolves and checks `host:port`; a refusal is recorded about `subject`.
pub(crate) async fn admit(
    session: &SessionContext,
    host: &Host,
    port: u16,
    subject: &Subject,
) -> Result<Destination, Refusal> {
    let live = session.live.current();
    let subject = &subject.clone().under(&live.hash);
    let route = live
        .policy
        .route(host, port)
        .map_err(|denied| Refusal::denied(subject, &denied))?;
    check_programs(session, &live.policy, &route, host, port, subject)?;
    let inspect = route.needs_inspection();
    let mut decision = Decision::allow(
        live.policy.admission_rule(&route),
        format!("{} is allowed by the policy", host.authority(port)),
    );
    let (handling, shared) = match route {
        Route::Mcp(server) => (
            Handling::Mcp(Box::new(server.clone())),
            live.policy.is_shared_host(server),
        ),
        Route::Plain { .. } => (Handling::Plain, false),
    };
    let bridged = matches!(&handling, Handling::Mcp(server) if matches!(server.transport, Transport::Stdio(_)));
    let addrs = if bridged {
        // fenzi's own name: nothing to resolve, nothing to check, never dialled.
        vec![crate::request::upstream::BRIDGE_ADDR]
    } else {
        let ips = resolve(session, host, port).await.map_err(|error| {
            if let Some(metrics) = &session.metrics {
                metrics.upstream_error(&error);
            }
            Refusal::failed(subject, error)
        })?;
        // One refused address refuses the lot. A name allowed into its `private:` ranges is
        // recorded by them (`hosts[2].private "10.20.0.0/16"`): the record says which entry
        // opened the door.
        match live.policy.check_addresses(host, port, &ips) {
            Err(refused) => return Err(Refusal::denied(subject, &refused)),
            Ok(Some(rule)) => {
                decision.rule = rule;
                decision.message = format!(
                    "{} is allowed by the policy, into its private ranges",
                    host.authority(port)
                );
            }
            Ok(None) => {}
        }
        ips.into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect()
    };
    Ok(Destination {
        host: host.clone(),
        host_text: host.to_string(),
        port,
        handling,
        decision,
        inspect,
        shared,
        addrs,
        policy: live.hash.clone(),
        client: subject.client,
        program: subject.program.clone(),
    })
}

/// DESIGN §17: may the programs holding the connection reach `host:port`, admitted by `route`?
/// Only when the session attributes connections; a failed attribution is refused wherever the
/// policy restricts programs (the agent's default on MCP servers included). Decided before the
/// name is resolved: a refused program learns nothing of where the name points.
fn check_programs(
    session: &SessionContext,
    policy: &fenzi_policy::engine::Policy,
    route: &Route<'_>,
    host: &Host,
    port: u16,
    subject: &Subject,
) -> Result<(), Refusal> {
    // Nothing is built unless something restricts (a plain-HTTP request is admitted each time).
    let Some(attributor) = session.attribution.get() else {
        return Ok(());
    };
    if !policy.programs_restrict(route, host, port, attributor.agent_mode) {
        return Ok(());
    }
    let rules = policy.program_rules(route, host, port);
    let entry = || match route {
        Route::Mcp(server) => format!("mcp.{}", server.name),
        Route::Plain { rule, .. } => rule.clone(),
    };
    let what = || format!("reach {}", host.authority(port));
    let Some(denied) = program_refusal(session, &rules, entry, what, &subject.program) else {
        return Ok(());
    };
    // The refusal names the server it was about, as its other records would.
    let mut subject = subject.clone();
    if let Route::Mcp(server) = route
        && !policy.is_shared_host(server)
    {
        subject.server = Some(server.name.clone());
    }
    Err(Refusal::denied(&subject, &denied))
}

/// The `program_not_allowed` denial of `program` by `rules` (of the policy entry named `entry` in
/// records), for a refusal saying it may not `what`; `None` when allowed, or when the session does
/// not attribute connections (`fenzi proxy`: any program). Pure: no system call, whatever the
/// connection's age.
pub(crate) fn program_refusal(
    session: &SessionContext,
    rules: &ProgramRules,
    entry: impl FnOnce() -> String,
    what: impl FnOnce() -> String,
    program: &Attributed,
) -> Option<Decision> {
    let attributor = session.attribution.get()?;
    if !rules.restricts(attributor.agent_mode) {
        return None;
    }
    let (entry, what) = (entry(), what());
    let holders = match program {
        Attributed::Found(program) => program.holders(),
        Attributed::Unknown | Attributed::Failed(_) => Vec::new(),
    };
    let facts: Vec<ProgramFacts<'_>> = holders
        .iter()
        .map(|h| ProgramFacts {
            exe: &h.exe,
            sha256: &h.sha256,
            agent: h.agent,
        })
        .collect();
    let refused = rules.check(&entry, &facts, attributor.agent_mode).err()?;
    let message = match (refused.holder.and_then(|i| holders.get(i)), program) {
        (Some(h), _) => format!(
            "{} (pid {}{}) may not {what}: {} does not list it",
            h.exe,
            h.pid,
            if h.agent { ", the agent" } else { "" },
            refused.rule
        ),
        (None, Attributed::Failed(why)) => format!(
            "the program of this connection could not be told ({why}), so it may not {what}: \
             only listed programs may"
        ),
        (None, _) => format!(
            "the program of this connection could not be told, so it may not {what}: only \
             listed programs may"
        ),
    };
    Some(Decision::deny(
        Reason::ProgramNotAllowed,
        refused.rule,
        message,
    ))
}

/// [`admit`] for a tunnel (a CONNECT, or a connection caught on the transparent path), with its
/// allowing decision recorded: the one record a tunnel gets.
pub(crate) async fn admit_tunnel(
    session: &SessionContext,
    host: &Host,
    port: u16,
    subject: &Subject,
) -> Result<Destination, Refusal> {
    let dest = admit(session, host, port, subject).await?;
    session.record(dest.subject("CONNECT", None).decided(&dest.decision))?;
    Ok(dest)
}

/// One resolution: an IP literal is itself; a name goes to the resolver, with a timeout.
async fn resolve(
    session: &SessionContext,
    host: &Host,
    port: u16,
) -> Result<Vec<std::net::IpAddr>, ProxyError> {
    let name = match host {
        Host::Ip(ip) => return Ok(vec![*ip]),
        Host::Name(name) => name,
    };
    let after = session.options.resolve_timeout;
    let ips = tokio::time::timeout(after, session.network.resolve(name, port))
        .await
        .map_err(|_| ProxyError::ResolveTimeout {
            host: name.clone(),
            after,
        })?
        .map_err(|error| ProxyError::Resolve {
            host: name.clone(),
            error,
        })?;
    if ips.is_empty() {
        return Err(ProxyError::NoAddress { host: name.clone() });
    }
    Ok(ips)
}
