//! The rules that span entries, checked on the merged set (README, "Configuration" and "Secrets"):
//! - every server has its own token name `MCP_<SERVER>` (`a-b` and `a_b` clash, so do `X` and `x`);
//! - one MCP server per url: entries may share a host:port only as `url` entries of one scheme
//!   whose paths differ in more than spelling (`same_server`); an account entry has its host to
//!   itself. No `hosts` entry (top-level or a local server's) overlaps an MCP server's host:port
//!   — such a host would be reachable without the per-tool check;
//! - a secret name is declared in one place: at the top level or by local servers, never both,
//!   and never a server's token name;
//! - a host carries at most one secret: no two bindings of different secrets overlap, counting a
//!   `token: true` server's own host:port (as `MCP_<SERVER>`), each local server's secrets times
//!   its hosts, and each top-level secret times its hosts. The tokens of two entries on one host
//!   (at different paths) do not clash: each is used only on its own entry's requests.
//!
//! The same variable listed by two local servers is one secret (one stored value that
//! every server listing the variable uses); it is bound to the union of their hosts.
//!
//! Pairwise checks are quadratic in the number of entries; the YAML reader caps a file at
//! `yaml::MAX_NODES` nodes, which keeps that small.
//!
//! Uses the model only.

use super::ConfigError;
use super::model::*;
use crate::host::{Host, HostMatcher, HostPattern};
use crate::secret_name::server_token_name;

fn error(at: &Location, message: String, hint: &str) -> ConfigError {
    ConfigError {
        at: Some(at.clone()),
        message,
        hint: Some(hint.to_string()),
    }
}

/// The host:port an MCP server is reached at: a local server's is the address fenzi serves it at
/// (`<name>.stdio.fenzi.internal:80`).
pub fn endpoint(server: &McpServerConfig) -> Option<HostPattern> {
    match &server.kind {
        ServerKind::Remote { url, .. } => Some(HostPattern::for_host(url.host.clone(), url.port)),
        ServerKind::Account { provider, .. } => Some(HostPattern::for_host(
            Host::Name(provider.host().to_string()),
            443,
        )),
        ServerKind::Local { .. } => Some(HostPattern::for_host(
            Host::Name(stdio_host(&server.name)),
            80,
        )),
    }
}

/// `host:port` of an exact pattern (an MCP endpoint), the pattern as written otherwise.
fn address(p: &HostPattern) -> String {
    match &p.matcher {
        HostMatcher::Exact(h) => h.authority(p.port),
        HostMatcher::Suffix(_) => p.to_string(),
    }
}

/// One secret bound to one host pattern.
struct Binding<'c> {
    name: String,
    pattern: HostPattern,
    at: &'c Location,
    /// Who binds it, for messages.
    by: String,
    /// A server's token: used only on that entry's requests, not on its host's other entries.
    entry: Option<&'c str>,
}

/// Every cross-entry problem in `config`, in entry order.
pub fn check(config: &Config) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    token_names(config, &mut errors);
    reserved_domain(config, &mut errors);
    endpoints(config, &mut errors);
    secret_names(config, &mut errors);
    one_secret_per_host(config, &mut errors);
    errors
}

fn token_names(config: &Config, errors: &mut Vec<ConfigError>) {
    for (j, b) in config.mcp.iter().enumerate() {
        let tb = server_token_name(&b.name);
        if let Some(a) = config.mcp[..j]
            .iter()
            .find(|a| server_token_name(&a.name) == tb)
        {
            errors.push(error(
                &b.at,
                format!(
                    "servers `{}` ({}) and `{}` have the same token name `{tb}`",
                    a.name,
                    place(&a.at),
                    b.name
                ),
                "rename one of them: a server's token is stored as MCP_<NAME>, upper-cased, with \
                 every character outside A-Z 0-9 turned into `_`",
            ));
        }
    }
}

/// Names at or below `stdio.fenzi.internal` are fenzi's own (the addresses of local servers):
/// no `url`, `hosts` entry or secret's host may name one, nor a wildcard covering them
/// (`*.fenzi.internal`; a wildcard over a whole top-level domain is refused anyway), so nothing but
/// the bridge answers there and no secret of the agent's is swapped into a local server's traffic.
fn reserved_domain(config: &Config, errors: &mut Vec<ConfigError>) {
    let under = |name: &str| {
        name.eq_ignore_ascii_case(STDIO_DOMAIN)
            || name
                .to_ascii_lowercase()
                .ends_with(&format!(".{STDIO_DOMAIN}"))
    };
    let covers =
        |suffix: &str| STDIO_DOMAIN.ends_with(&format!(".{}", suffix.to_ascii_lowercase()));
    let reserved = |p: &HostPattern| match &p.matcher {
        HostMatcher::Exact(Host::Name(n)) => under(n),
        HostMatcher::Suffix(n) => under(n) || covers(n),
        HostMatcher::Exact(Host::Ip(_)) => false,
    };
    let mut refuse = |at: &Location, what: String| {
        errors.push(error(
            at,
            format!(
                "{what} is or covers a name under {STDIO_DOMAIN}, which fenzi keeps for local \
                 servers"
            ),
            "a local server's address comes from its `command` entry's name; name another host",
        ));
    };
    for h in &config.hosts {
        if reserved(&h.value) {
            refuse(&h.at, format!("host `{}`", h.value));
        }
    }
    for s in &config.mcp {
        match &s.kind {
            ServerKind::Remote { url, .. } => {
                if let Host::Name(n) = &url.host
                    && under(n)
                {
                    refuse(&s.at, format!("the url of server `{}`", s.name));
                }
            }
            ServerKind::Local { hosts, .. } => {
                for h in hosts.iter().filter(|h| reserved(&h.value)) {
                    refuse(&h.at, format!("host `{}` of server `{}`", h.value, s.name));
                }
            }
            ServerKind::Account { .. } => {}
        }
    }
    for sec in &config.secrets {
        for h in sec.hosts.iter().filter(|h| reserved(&h.value)) {
            refuse(
                &h.at,
                format!("host `{}` of secret `{}`", h.value, sec.name),
            );
        }
    }
}

fn endpoints(config: &Config, errors: &mut Vec<ConfigError>) {
    let servers: Vec<(&McpServerConfig, HostPattern)> = config
        .mcp
        .iter()
        .filter_map(|s| endpoint(s).map(|e| (s, e)))
        .collect();
    for (j, (b, eb)) in servers.iter().enumerate() {
        for (a, _) in servers[..j].iter().filter(|(_, ea)| ea == eb) {
            if let Some((why, hint)) = same_server(a, b) {
                errors.push(error(
                    &b.at,
                    format!(
                        "servers `{}` ({}) and `{}` both use {}: {why}",
                        a.name,
                        place(&a.at),
                        b.name,
                        address(eb),
                    ),
                    hint,
                ));
                break;
            }
        }
    }
    // Every `hosts` entry, top-level or a local server's: plain egress that must not reach an MCP
    // server's host:port around its per-tool rule.
    let mut hosts: Vec<&Located<HostPattern>> = config.hosts.iter().collect();
    for s in &config.mcp {
        if let ServerKind::Local { hosts: h, .. } = &s.kind {
            hosts.extend(h.iter());
        }
    }
    for h in hosts {
        for (s, e) in &servers {
            if h.value.overlaps(e) {
                errors.push(error(
                    &h.at,
                    format!(
                        "host `{}` overlaps {}, the address of MCP server `{}` ({})",
                        h.value,
                        address(e),
                        s.name,
                        place(&s.at)
                    ),
                    "remove it: requests to an MCP server's host are checked per tool, so the \
                     host cannot also be a plain `hosts` entry",
                ));
            }
        }
    }
}

/// Why two entries on one host:port cannot be told apart by path, if they cannot (README,
/// "Servers by path"; the matching itself is `crate::engine::by_path`): the same path, paths a
/// server may route alike, an account entry (which covers every path under its prefix), or two
/// schemes on one port.
fn same_server(a: &McpServerConfig, b: &McpServerConfig) -> Option<(String, &'static str)> {
    if matches!(a.kind, ServerKind::Local { .. }) || matches!(b.kind, ServerKind::Local { .. }) {
        return Some((
            "a local server's address is its own (its name, whatever the case)".into(),
            "give the local server another name",
        ));
    }
    let (ServerKind::Remote { url: ua, .. }, ServerKind::Remote { url: ub, .. }) =
        (&a.kind, &b.kind)
    else {
        return Some((
            "an account entry has its host to itself".into(),
            "keep one entry for this server; list all its tools there",
        ));
    };
    if ua.tls != ub.tls {
        return Some((
            "one with https and one with http; a port speaks one of them".into(),
            "write the scheme the server uses in both urls",
        ));
    }
    // Messages do not repeat the paths: some servers put a credential in theirs.
    if ua.path == ub.path {
        return Some((
            "the same path; one entry per MCP server url".into(),
            "keep one entry for this server; list all its tools there",
        ));
    }
    if route_key(&ua.path) == route_key(&ub.path) {
        return Some((
            "paths a server may route to the same endpoint (they differ only in case, a \
             trailing `/`, `//`, percent-escapes or `;` parameters)"
                .into(),
            "write each entry's path as its server serves it; entries on one host must differ \
             in more than spelling",
        ));
    }
    None
}

/// A path as the most lenient server would route it: percent-escapes decoded, `;` parameters
/// dropped, empty segments and a trailing `/` gone, lower-cased. Two entries of one host whose
/// paths give the same key could reach one endpoint under two rule sets.
fn route_key(path: &str) -> String {
    let mut decoded = Vec::with_capacity(path.len());
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let hex = |j: usize| bytes.get(j).and_then(|b| (*b as char).to_digit(16));
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(h), Some(l)) => {
                decoded.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                decoded.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded)
        .to_lowercase()
        .split('/')
        .map(|seg| seg.split(';').next().unwrap_or_default())
        .filter(|seg| !seg.is_empty())
        .collect::<Vec<_>>()
        .join("/")
}

fn secret_names(config: &Config, errors: &mut Vec<ConfigError>) {
    let token_owner = |name: &str| {
        config
            .mcp
            .iter()
            .find(|s| server_token_name(&s.name) == name)
    };
    let reserved_hint = "rename the variable: MCP_<SERVER> names are the tokens of MCP servers";
    for sec in &config.secrets {
        if let Some(s) = token_owner(&sec.name) {
            errors.push(error(
                &sec.at,
                format!(
                    "secret `{}` has the token name of MCP server `{}` ({})",
                    sec.name,
                    s.name,
                    place(&s.at)
                ),
                reserved_hint,
            ));
        }
    }
    for server in &config.mcp {
        let ServerKind::Local { secrets, .. } = &server.kind else {
            continue;
        };
        for sec in secrets {
            if let Some(s) = token_owner(&sec.value) {
                errors.push(error(
                    &sec.at,
                    format!(
                        "secret `{}` has the token name of MCP server `{}` ({})",
                        sec.value,
                        s.name,
                        place(&s.at)
                    ),
                    reserved_hint,
                ));
            }
            if let Some(top) = config.secrets.iter().find(|t| t.name == sec.value) {
                errors.push(error(
                    &sec.at,
                    format!(
                        "secret `{}` is declared both at the top level ({}) and by local server `{}`",
                        sec.value,
                        place(&top.at),
                        server.name
                    ),
                    "declare it once: a local server's secret exists only in that server's own \
                     sandbox, a top-level one in the agent's",
                ));
            }
        }
    }
}

fn bindings(config: &Config) -> Vec<Binding<'_>> {
    let mut out = Vec::new();
    for s in &config.mcp {
        if let (ServerKind::Remote { token: true, .. }, Some(e)) = (&s.kind, endpoint(s)) {
            out.push(Binding {
                name: server_token_name(&s.name),
                pattern: e,
                at: &s.at,
                by: format!("the token of MCP server `{}`", s.name),
                entry: Some(&s.name),
            });
        }
    }
    for s in &config.mcp {
        if let ServerKind::Local { secrets, hosts, .. } = &s.kind {
            for sec in secrets {
                for h in hosts {
                    out.push(Binding {
                        name: sec.value.clone(),
                        pattern: h.value.clone(),
                        at: &h.at,
                        by: format!("local server `{}`", s.name),
                        entry: None,
                    });
                }
            }
        }
    }
    for sec in &config.secrets {
        for h in &sec.hosts {
            out.push(Binding {
                name: sec.name.clone(),
                pattern: h.value.clone(),
                at: &h.at,
                by: "the top-level `secrets`".into(),
                entry: None,
            });
        }
    }
    out
}

fn one_secret_per_host(config: &Config, errors: &mut Vec<ConfigError>) {
    let all = bindings(config);
    for (j, b) in all.iter().enumerate() {
        for a in &all[..j] {
            // Two entries' tokens never meet on one request (`crate::engine::by_path`).
            let two_entries = a.entry.is_some() && b.entry.is_some();
            if a.name != b.name && !two_entries && a.pattern.overlaps(&b.pattern) {
                errors.push(error(
                    b.at,
                    format!(
                        "a host would carry two secrets: `{}` ({}, bound to {} at {}) and `{}` \
                         ({}, bound to {})",
                        a.name,
                        a.by,
                        a.pattern,
                        place(a.at),
                        b.name,
                        b.by,
                        b.pattern
                    ),
                    "a host carries at most one secret; bind the two secrets to different hosts",
                ));
            }
        }
    }
}
