//! The compiled policy: the one object the proxy asks. It answers, for a destination, whether and how it
//! may be reached ([`Policy::route`]), whether a resolved address may be dialled
//! ([`Policy::check_address`]), over which transport ([`Route::check_transport`],
//! [`Route::upstream_tls`]: an MCP server's own scheme, never the client's downgrade), and what to do
//! with a request to an MCP server ([`Policy::decide_mcp`]). It also lists what needs TLS interception
//! and which secrets are bound where.

use crate::cidr::Cidr;
use crate::config::{
    AccountProvider, Annotation, Config, ListMode, LocalRun, McpServerConfig, Origin, ServerKind,
    ToolLimit, ToolRules, stdio_host,
};
use crate::decision::{Decision, Reason};
use crate::host::{Host, HostPattern};
use crate::ip::{InternalRange, internal_range};
use crate::mcp::inventory::Inventory;
use crate::mcp::{self, EndpointPath, JsonLimits, McpDecision, RequestView, ServerRule};
use crate::programs::ProgramRules;
use crate::secret_name::server_token_name;
use crate::secret_position::SecretPosition;
use std::net::IpAddr;

pub mod by_path;
pub mod reload;

pub use by_path::PathOwner;

/// How fenzi reaches an MCP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Over the network, at the url's host (a `url` or `account` entry).
    Http,
    /// A local server fenzi runs and speaks stdio to, behind its bridge (DESIGN §18); the agent
    /// reaches it at `<name>.stdio.fenzi.internal:80`, which is never resolved or dialled.
    Stdio(LocalRun),
}

impl Transport {
    /// As records name it (`transport: stdio`).
    pub fn name(self) -> &'static str {
        match self {
            Transport::Http => "http",
            Transport::Stdio(_) => "stdio",
        }
    }
}

/// An MCP server as the proxy enforces it: a remote one, the account-connector host, or a local
/// server behind its bridge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServer {
    pub name: String,
    pub transport: Transport,
    pub origin: Origin,
    /// The one host:port this server lives on.
    pub pattern: HostPattern,
    /// Whether the policy's url is https (an http server is inspected as plain HTTP).
    pub tls: bool,
    pub rule: ServerRule,
    /// The secret name of its token when `token: true` (`MCP_<SERVER>`).
    pub token_secret: Option<String>,
    /// `limits`, the machine file's entries first; the proxy counts them
    /// ([`crate::config::model::limits::applicable`] says which apply to a call).
    pub limits: Vec<ToolLimit>,
    /// `tools.confirm` and `confirm_timeout`: the allowed calls the proxy holds for a person.
    pub confirm: crate::config::Confirm,
    /// `programs:` (DESIGN §17): `[agent]` by default under an agent.
    pub programs: ProgramRules,
    /// A local server's command and own egress (`hosts`, `secrets`), as the session started it:
    /// compared by a reload (a change waits for the next session) and hashed with the policy.
    /// `None` for a server reached over the network.
    pub launch: Option<String>,
}

impl McpServer {
    /// Whether a request that reached the proxy over TLS (`client_tls`) or in clear text may be
    /// carried to this server. The transport to an MCP server follows the policy's scheme, not the
    /// client's: an `https` server is only ever reached over verified TLS, so a request for it that
    /// arrived in clear text (plain HTTP inside a CONNECT tunnel, or an absolute-form `http://` URL
    /// naming its host:port) is refused before anything is dialled. `None` means it may go on, over
    /// [`McpServer::upstream_tls`].
    pub fn check_transport(&self, client_tls: bool) -> Option<Decision> {
        if self.tls && !client_tls {
            return Some(Decision::deny(
                Reason::BadRequest,
                format!("mcp.{} transport", self.name),
                format!(
                    "{} is an https MCP server; fenzi does not carry its traffic in clear text",
                    self.name
                ),
            ));
        }
        None
    }

    /// Whether the proxy talks TLS to this server: exactly when the policy's url is `https`, whatever
    /// the client spoke to the proxy.
    pub fn upstream_tls(&self) -> bool {
        self.tls
    }
}

/// Where a secret came from in the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// `token: true` on a remote server.
    ServerToken { server: String },
    /// `secrets:` of a local (`command`) server.
    LocalServer { server: String },
    /// A top-level `secrets:` entry.
    TopLevel,
}

/// One secret and the hosts it may be sent to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretBinding {
    pub name: String,
    pub hosts: Vec<HostPattern>,
    /// Substitute in request bodies too.
    pub body: bool,
    pub sources: Vec<SecretSource>,
    /// For `token: true` servers: add `Authorization: Bearer <token>` when the request has none.
    pub default_bearer: bool,
    /// Where the placeholder may be swapped (`in:`; `[header:Authorization]` for a `token: true`
    /// server). `None`: any header value and the query, the body when `body`, and the placeholder
    /// left as is elsewhere (see `secret_use`).
    pub positions: Option<Vec<SecretPosition>>,
    /// For a `token: true` server's token: that entry's name. Its host may carry other entries
    /// (at other paths); the token goes only to requests [`by_path`] gives to this one.
    pub entry: Option<String>,
    /// A top-level secret's `programs:`: the programs whose requests may carry it.
    pub programs: ProgramRules,
}

impl SecretBinding {
    /// Whether `host:port` is among the secret's hosts. An entry's token is bound to its host this
    /// way too, but used only on that entry's requests ([`SecretBinding::is_bound_for`]).
    pub fn is_bound_to(&self, host: &Host, port: u16) -> bool {
        self.hosts.iter().any(|p| p.matches(host, port))
    }

    /// Whether a request to `host:port` that [`by_path`] gave to the entry named `entry` (`None`:
    /// a plain host, or a path of an MCP host that is no entry's) may use this secret.
    pub fn is_bound_for(&self, host: &Host, port: u16, entry: Option<&str>) -> bool {
        self.is_bound_to(host, port)
            && self
                .entry
                .as_deref()
                .is_none_or(|own| entry.is_some_and(|e| e == own))
    }

    /// The host patterns this binding sends the secret to that are not among `approved` (patterns
    /// as written, e.g. the hosts a stored value was stored for), in the binding's order. A value
    /// approved for fewer hosts than its binding names must not be used.
    pub fn hosts_beyond(&self, approved: &[String]) -> Vec<String> {
        self.hosts
            .iter()
            .map(|h| h.to_string())
            .filter(|h| !approved.contains(h))
            .collect()
    }
}

/// How a destination that the policy admits is to be handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route<'p> {
    /// An MCP server: intercept (if TLS) and classify every request.
    Mcp(&'p McpServer),
    /// A plain allowed host. `secrets` are the secrets bound to it; when there are any the connection
    /// is intercepted so they can be substituted.
    Plain {
        rule: String,
        secrets: Vec<&'p SecretBinding>,
    },
}

impl Route<'_> {
    /// True when the proxy must terminate TLS to carry out this route.
    pub fn needs_inspection(&self) -> bool {
        match self {
            Route::Mcp(_) => true,
            Route::Plain { secrets, .. } => !secrets.is_empty(),
        }
    }

    pub fn rule(&self) -> String {
        match self {
            Route::Mcp(s) => format!("mcp.{}", s.name),
            Route::Plain { rule, .. } => rule.clone(),
        }
    }

    /// See [`McpServer::check_transport`]. A plain host's policy entry names no scheme, so any
    /// transport the client chose is carried as it is.
    pub fn check_transport(&self, client_tls: bool) -> Option<Decision> {
        match self {
            Route::Mcp(server) => server.check_transport(client_tls),
            Route::Plain { .. } => None,
        }
    }

    /// Whether the connection to the destination uses TLS: the policy's scheme for an MCP server,
    /// the client's choice (mirrored) for a plain host.
    pub fn upstream_tls(&self, client_tls: bool) -> bool {
        match self {
            Route::Mcp(server) => server.upstream_tls(),
            Route::Plain { .. } => client_tls,
        }
    }
}

/// A name that may resolve to internal addresses inside `ranges` (a `private:` list).
#[derive(Debug, Clone, PartialEq, Eq)]
struct PrivateRule {
    pattern: HostPattern,
    /// The key of the list, e.g. `hosts[2].private`.
    key: String,
    ranges: Vec<Cidr>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct HostRule {
    pattern: HostPattern,
    rule: String,
}

/// The policy, compiled from a validated [`Config`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    servers: Vec<McpServer>,
    hosts: Vec<HostRule>,
    secrets: Vec<SecretBinding>,
    limits: JsonLimits,
    private: Vec<PrivateRule>,
    /// `programs:` of `hosts` mappings, each applying to every destination its pattern matches.
    host_programs: Vec<(HostPattern, ProgramRules)>,
}

impl Policy {
    /// Compiles a validated config. The config loader has already refused clashes (two servers at one
    /// url, a server on a `hosts` entry, two secrets on one host), so compiling cannot fail.
    pub fn from_config(config: &Config) -> Policy {
        Policy::with_limits(config, JsonLimits::default())
    }

    pub fn with_limits(config: &Config, limits: JsonLimits) -> Policy {
        let mut servers = vec![];
        let mut hosts = vec![];
        let mut secrets: Vec<SecretBinding> = vec![];

        for h in &config.hosts {
            hosts.push(HostRule {
                pattern: h.value.clone(),
                rule: format!("hosts[{}] {}", hosts.len(), h.value),
            });
        }
        for entry in &config.mcp {
            match &entry.kind {
                ServerKind::Remote {
                    url, token, tools, ..
                } => {
                    let pattern = HostPattern::for_host(url.host.clone(), url.port);
                    let token_secret = token.then(|| server_token_name(&entry.name));
                    if let Some(name) = &token_secret {
                        add_secret(
                            &mut secrets,
                            name,
                            std::slice::from_ref(&pattern),
                            false,
                            SecretSource::ServerToken {
                                server: entry.name.clone(),
                            },
                            // The bearer is added only where the token goes in Authorization.
                            entry.surface.token_in.as_ref().is_none_or(|list| {
                                list.iter().any(|p| {
                                    p.value
                                        .same_place(&SecretPosition::Header("Authorization".into()))
                                })
                            }),
                            Some(match &entry.surface.token_in {
                                Some(list) => list.iter().map(|p| p.value.clone()).collect(),
                                None => vec![SecretPosition::Header("Authorization".into())],
                            }),
                        );
                    }
                    servers.push(McpServer {
                        name: entry.name.clone(),
                        transport: Transport::Http,
                        origin: entry.origin,
                        pattern,
                        tls: url.tls,
                        rule: server_rule(
                            entry,
                            EndpointPath::Exact(url.path.clone()),
                            tools,
                            limits,
                        ),
                        token_secret,
                        limits: entry.surface.limits.clone(),
                        confirm: tools.confirm.clone(),
                        programs: ProgramRules::new(&entry.programs, entry.origin, true),
                        launch: None,
                    });
                }
                ServerKind::Account { provider, tools } => {
                    let host = Host::Name(provider.host().to_string());
                    servers.push(McpServer {
                        name: entry.name.clone(),
                        transport: Transport::Http,
                        origin: entry.origin,
                        pattern: HostPattern::for_host(host, 443),
                        tls: true,
                        rule: server_rule(
                            entry,
                            EndpointPath::Prefix(account_prefix(*provider).to_string()),
                            tools,
                            limits,
                        ),
                        token_secret: None,
                        limits: entry.surface.limits.clone(),
                        confirm: tools.confirm.clone(),
                        programs: ProgramRules::new(&entry.programs, entry.origin, true),
                        launch: None,
                    });
                }
                // DESIGN §18: the agent reaches a local server only through its bridge, checked
                // per tool. The server's own `hosts` and `secrets` are its egress alone
                // ([`Policy::for_local_server`]): neither is the agent's.
                ServerKind::Local {
                    tools,
                    run,
                    command,
                    secrets: names,
                    hosts: server_hosts,
                } => {
                    let launch = format!(
                        "command={command:?} hosts={:?} secrets={:?}",
                        server_hosts
                            .iter()
                            .map(|h| h.value.to_string())
                            .collect::<Vec<_>>(),
                        names.iter().map(|n| n.value.as_str()).collect::<Vec<_>>()
                    );
                    servers.push(McpServer {
                        name: entry.name.clone(),
                        transport: Transport::Stdio(*run),
                        origin: entry.origin,
                        pattern: HostPattern::for_host(Host::Name(stdio_host(&entry.name)), 80),
                        tls: false,
                        rule: server_rule(entry, EndpointPath::Exact("/mcp".into()), tools, limits),
                        token_secret: None,
                        limits: entry.surface.limits.clone(),
                        confirm: tools.confirm.clone(),
                        programs: ProgramRules::new(&entry.programs, entry.origin, true),
                        launch: Some(launch),
                    });
                }
            }
        }
        for s in &config.secrets {
            let patterns: Vec<HostPattern> = s.hosts.iter().map(|h| h.value.clone()).collect();
            let positions: Option<Vec<SecretPosition>> = s
                .positions
                .as_ref()
                .map(|list| list.iter().map(|p| p.value.clone()).collect());
            // With `in:`, the list alone says whether bodies are a position.
            let body = match &positions {
                Some(list) => list.contains(&SecretPosition::Body),
                None => s.body,
            };
            add_secret(
                &mut secrets,
                &s.name,
                &patterns,
                body,
                SecretSource::TopLevel,
                false,
                positions,
            );
            if let Some(binding) = secrets.iter_mut().find(|b| b.name == s.name) {
                binding
                    .programs
                    .and(&ProgramRules::new(&s.programs, Origin::Team, false));
            }
        }
        let host_programs = config
            .host_programs
            .iter()
            .map(|h| {
                (
                    h.pattern.clone(),
                    ProgramRules::new(std::slice::from_ref(&h.list), h.list.origin, false),
                )
            })
            .collect();
        let private = config
            .private
            .iter()
            .map(|p| PrivateRule {
                pattern: p.pattern.clone(),
                key: p.at.key.clone(),
                ranges: p.ranges.iter().map(|r| r.value).collect(),
            })
            .collect();
        Policy {
            servers,
            hosts,
            secrets,
            limits,
            private,
            host_programs,
        }
    }

    /// The egress policy of local server `name` (DESIGN §18): its own `hosts`, its `secrets` swapped
    /// on them, and the `private:` ranges the config gives those names. No MCP server and nothing
    /// of the agent's: a server reaches exactly what its entry lists. `None` when `name` is not a
    /// local server.
    pub fn for_local_server(config: &Config, name: &str, limits: JsonLimits) -> Option<Policy> {
        let entry = config.mcp.iter().find(|s| s.name == name)?;
        let ServerKind::Local {
            secrets: names,
            hosts: server_hosts,
            ..
        } = &entry.kind
        else {
            return None;
        };
        let patterns: Vec<HostPattern> = server_hosts.iter().map(|h| h.value.clone()).collect();
        let hosts = patterns
            .iter()
            .map(|p| HostRule {
                pattern: p.clone(),
                rule: format!("mcp.{name}.hosts {p}"),
            })
            .collect();
        let mut secrets = Vec::new();
        for secret in names {
            add_secret(
                &mut secrets,
                &secret.value,
                &patterns,
                false,
                SecretSource::LocalServer {
                    server: name.to_string(),
                },
                false,
                None,
            );
        }
        let private = config
            .private
            .iter()
            .filter(|p| patterns.iter().any(|h| h.overlaps(&p.pattern)))
            .map(|p| PrivateRule {
                pattern: p.pattern.clone(),
                key: p.at.key.clone(),
                ranges: p.ranges.iter().map(|r| r.value).collect(),
            })
            .collect();
        Some(Policy {
            servers: Vec::new(),
            hosts,
            secrets,
            limits,
            private,
            host_programs: Vec::new(),
        })
    }

    /// The local servers the agent reaches through their bridges, in config order.
    pub fn local_servers(&self) -> impl Iterator<Item = &McpServer> {
        self.servers
            .iter()
            .filter(|s| matches!(s.transport, Transport::Stdio(_)))
    }

    /// The programs that may be admitted to `host:port` by `route` (DESIGN §17): an MCP server's
    /// `programs` (with its default), and the lists of every `hosts` mapping matching it, all of
    /// which must admit a connection's holders.
    pub fn program_rules(&self, route: &Route<'_>, host: &Host, port: u16) -> ProgramRules {
        let mut rules = match route {
            Route::Mcp(server) => server.programs.clone(),
            Route::Plain { .. } => ProgramRules::default(),
        };
        rules.and(&self.host_program_rules(host, port));
        rules
    }

    /// Whether [`Policy::program_rules`] would restrict anything under `agent_mode`, without
    /// building them (asked on every admission).
    pub fn programs_restrict(
        &self,
        route: &Route<'_>,
        host: &Host,
        port: u16,
        agent_mode: bool,
    ) -> bool {
        let server = match route {
            Route::Mcp(server) if !self.is_shared_host(server) => {
                server.programs.restricts(agent_mode)
            }
            Route::Mcp(_) | Route::Plain { .. } => false,
        };
        server
            || self
                .host_programs
                .iter()
                .any(|(pattern, _)| pattern.matches(host, port))
    }

    /// The `programs:` of every `hosts` mapping matching `host:port`, all applying.
    pub fn host_program_rules(&self, host: &Host, port: u16) -> ProgramRules {
        let mut rules = ProgramRules::default();
        for (pattern, more) in &self.host_programs {
            if pattern.matches(host, port) {
                rules.and(more);
            }
        }
        rules
    }

    /// Whether any entry names programs (so a session must attribute connections even without
    /// an agent's default).
    pub fn names_programs(&self) -> bool {
        !self.host_programs.is_empty()
            || self
                .servers
                .iter()
                .any(|s| s.programs.lists().next().is_some())
            || self
                .secrets
                .iter()
                .any(|s| s.programs.lists().next().is_some())
    }

    pub fn servers(&self) -> &[McpServer] {
        &self.servers
    }

    pub fn secrets(&self) -> &[SecretBinding] {
        &self.secrets
    }

    pub fn limits(&self) -> JsonLimits {
        self.limits
    }

    /// The secrets bound to `host:port`.
    pub fn secrets_for(&self, host: &Host, port: u16) -> Vec<&SecretBinding> {
        self.secrets
            .iter()
            .filter(|s| s.is_bound_to(host, port))
            .collect()
    }

    /// Every destination a connection may be allowed to: the MCP servers, the `hosts` entries (a
    /// local server's among them) and the secrets' hosts. The sandbox listens on their ports and
    /// IP literals for programs that ignore the proxy variables.
    pub fn destination_patterns(&self) -> Vec<HostPattern> {
        let mut out: Vec<HostPattern> = self.servers.iter().map(|s| s.pattern.clone()).collect();
        out.extend(self.hosts.iter().map(|h| h.pattern.clone()));
        for s in &self.secrets {
            out.extend(s.hosts.iter().cloned());
        }
        out
    }

    /// Every pattern whose traffic may be intercepted (MCP servers and secret-bound hosts): the CA's name
    /// constraints are built from these.
    pub fn inspected_patterns(&self) -> Vec<HostPattern> {
        let mut out: Vec<HostPattern> = Vec::new();
        // Several servers may share a host (at different paths): each pattern once.
        let servers = self.servers.iter().map(|s| &s.pattern);
        for h in servers.chain(self.secrets.iter().flat_map(|s| &s.hosts)) {
            if !out.contains(h) {
                out.push(h.clone());
            }
        }
        out
    }

    /// Is `host:port` a destination the policy admits, and how? `Err` is the `host_not_allowed` denial.
    pub fn route(&self, host: &Host, port: u16) -> Result<Route<'_>, Decision> {
        if let Some(server) = self.servers.iter().find(|s| s.pattern.matches(host, port)) {
            return Ok(Route::Mcp(server));
        }
        let secrets = self.secrets_for(host, port);
        if let Some(h) = self.hosts.iter().find(|h| h.pattern.matches(host, port)) {
            return Ok(Route::Plain {
                rule: h.rule.clone(),
                secrets,
            });
        }
        if let Some(first) = secrets.first() {
            return Ok(Route::Plain {
                rule: format!("secrets.{} hosts", first.name),
                secrets,
            });
        }
        Err(Decision::deny(
            Reason::HostNotAllowed,
            "default deny",
            format!("{} is not in the policy", host.authority(port)),
        ))
    }

    /// May the proxy dial `addr` for a request to `host:port`? Internal addresses are refused unless the
    /// destination was given as that exact IP literal and the policy names that literal, or the
    /// destination is a name with `private:` ranges and `addr` is inside one of them (never a
    /// metadata address).
    pub fn check_address(&self, host: &Host, port: u16, addr: IpAddr) -> Decision {
        self.address_decision(host, port, addr).0
    }

    /// Checks every address of one resolution of `host:port`: `Err` is the first refusal (one
    /// refused address refuses the lot). `Ok(Some(rule))` when internal addresses were allowed by
    /// the name's `private:` ranges: the rule (`hosts[2].private "10.20.0.0/16"`, each range used
    /// once) names the entry and is the one to record for the destination.
    pub fn check_addresses(
        &self,
        host: &Host,
        port: u16,
        addrs: &[IpAddr],
    ) -> Result<Option<String>, Decision> {
        let mut rules: Vec<String> = Vec::new();
        for addr in addrs {
            let (decision, by_name) = self.address_decision(host, port, *addr);
            if !decision.is_allowed() {
                return Err(decision);
            }
            if by_name && !rules.contains(&decision.rule) {
                rules.push(decision.rule);
            }
        }
        Ok((!rules.is_empty()).then(|| rules.join(", ")))
    }

    /// The decision for one address, and whether it was allowed by a `private:` range.
    fn address_decision(&self, host: &Host, port: u16, addr: IpAddr) -> (Decision, bool) {
        let Some(range) = internal_range(addr) else {
            let public = Decision::allow("public address", format!("{addr} is a public address"));
            return (public, false);
        };
        if let Host::Ip(literal) = host
            && *literal == addr
            && self.names_ip_literal(addr, port)
        {
            let named = Decision::allow(
                "policy names this IP literal",
                format!("{} is named by the policy", host.authority(port)),
            );
            return (named, false);
        }
        if let Some(decided) = self.private_by_name(host, port, addr, range) {
            return decided;
        }
        let denied = Decision::deny(
            Reason::PrivateAddress,
            format!("internal range {range}"),
            format!(
                "{} resolves to {addr}, an internal address ({range})",
                host.authority(port)
            ),
        );
        (denied, false)
    }

    /// The decision for internal `addr` when `host:port` is a name with `private:` ranges; `None`
    /// when it has none (the general refusal applies).
    fn private_by_name(
        &self,
        host: &Host,
        port: u16,
        addr: IpAddr,
        range: InternalRange,
    ) -> Option<(Decision, bool)> {
        let Host::Name(_) = host else {
            return None;
        };
        let rules: Vec<&PrivateRule> = self
            .private
            .iter()
            .filter(|p| p.pattern.matches(host, port))
            .collect();
        let first = rules.first()?;
        let authority = host.authority(port);
        if range == InternalRange::Metadata {
            let denied = Decision::deny(
                Reason::PrivateAddress,
                "internal range metadata",
                format!(
                    "{authority} resolves to {addr}, a cloud metadata address, which is never \
                     allowed by name"
                ),
            );
            return Some((denied, false));
        }
        for rule in &rules {
            if let Some(cidr) = rule.ranges.iter().find(|c| c.contains(addr)) {
                let allowed = Decision::allow(
                    format!("{} \"{cidr}\"", rule.key),
                    format!("{authority} resolves to {addr}, inside its private range {cidr}"),
                );
                return Some((allowed, true));
            }
        }
        let block = Cidr::host(addr)
            .block()
            .map_or_else(|| range.to_string(), |(b, _)| b.to_string());
        let ranges = rules
            .iter()
            .flat_map(|r| r.ranges.iter().map(Cidr::to_string))
            .collect::<Vec<_>>()
            .join(", ");
        // The range it would need, when one could be named.
        let needed = Cidr::host(addr.to_canonical());
        let advice = match needed.check_private() {
            Ok(_) => format!(
                "; to allow it, add {needed} (or a range holding it) to {}",
                first.key
            ),
            Err(_) => String::new(),
        };
        let denied = Decision::deny(
            Reason::PrivateAddress,
            first.key.clone(),
            format!(
                "{authority} resolves to {addr}, an internal address ({block}), outside its \
                 private ranges ({ranges}){advice}"
            ),
        );
        Some((denied, false))
    }

    fn names_ip_literal(&self, addr: IpAddr, port: u16) -> bool {
        let named = |p: &HostPattern| p.port == port && p.exact_ip() == Some(addr);
        self.servers.iter().any(|s| named(&s.pattern))
            || self.hosts.iter().any(|h| named(&h.pattern))
            || self.secrets.iter().any(|s| s.hosts.iter().any(named))
    }

    /// Classifies one request to an MCP server.
    /// `inventory` is what the session knows of the server's tools (pins, listed schemas).
    pub fn decide_mcp(
        &self,
        server: &McpServer,
        inventory: &Inventory,
        req: &RequestView<'_>,
    ) -> McpDecision {
        mcp::classify(&server.rule, inventory, req)
    }

    /// The decision for an inspected body that exceeded the limit before it was fully read.
    pub fn body_too_large(&self) -> Decision {
        Decision::deny(
            Reason::BodyTooLarge,
            "body limit",
            format!(
                "the request body is larger than the {} byte limit for inspected bodies",
                self.limits.max_bytes
            ),
        )
    }
}

/// The classifier's view of a `url` or `account` entry.
fn server_rule(
    entry: &McpServerConfig,
    endpoint: EndpointPath,
    tools: &ToolRules,
    limits: JsonLimits,
) -> ServerRule {
    let surface = &entry.surface;
    ServerRule {
        name: entry.name.clone(),
        endpoint,
        allow: tools.allow.iter().map(|t| t.value.clone()).collect(),
        deny: tools.deny.iter().map(|t| t.value.clone()).collect(),
        allow_read_only: tools
            .allow_annotated
            .iter()
            .any(|a| a.value == Annotation::ReadOnly),
        pin: surface.pin,
        filter_lists: surface.list == ListMode::Filter,
        prompts: surface.prompts.iter().map(|p| p.value.clone()).collect(),
        resources: surface.resources.iter().map(|r| r.value.clone()).collect(),
        rules: tools.rules.iter().map(|r| r.value.clone()).collect(),
        limits,
        fenzi_signs_in: matches!(entry.kind, ServerKind::Remote { oauth: true, .. }),
    }
}

fn account_prefix(provider: AccountProvider) -> &'static str {
    provider.path_prefix()
}

fn add_secret(
    secrets: &mut Vec<SecretBinding>,
    name: &str,
    hosts: &[HostPattern],
    body: bool,
    source: SecretSource,
    default_bearer: bool,
    positions: Option<Vec<SecretPosition>>,
) {
    // The same variable listed by several local servers is one secret bound to the union of their hosts.
    if let Some(existing) = secrets.iter_mut().find(|s| s.name == name) {
        for h in hosts {
            if !existing.hosts.contains(h) {
                existing.hosts.push(h.clone());
            }
        }
        existing.body |= body;
        existing.sources.push(source);
        existing.default_bearer |= default_bearer;
        // Only local servers share a name (the loader refuses every other pairing), and they have
        // no positions; should that change, explicit positions win, as the narrower rule.
        if existing.positions.is_none() {
            existing.positions = positions;
        }
        return;
    }
    // A server's token is that entry's alone; every other secret is its hosts'.
    let entry = match &source {
        SecretSource::ServerToken { server } => Some(server.clone()),
        SecretSource::LocalServer { .. } | SecretSource::TopLevel => None,
    };
    secrets.push(SecretBinding {
        name: name.to_string(),
        hosts: hosts.to_vec(),
        body,
        sources: vec![source],
        default_bearer,
        positions,
        entry,
        programs: ProgramRules::default(),
    });
}
