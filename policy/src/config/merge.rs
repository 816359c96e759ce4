//! Machine file + project file → one policy (README, "Machine and project files").
//!
//! - The machine file's servers come first. A project entry with a new name adds a server.
//! - A project entry with a machine server's name may only narrow it. It is a complete entry of
//!   the same kind and address (same url, compared as scheme, host, port and path; same
//!   `account`), with the same `token` (absent means false). Each pattern in its `allow` must be
//!   covered by a machine `allow` pattern and by no machine `deny` pattern; the merged `allow` is
//!   the project's, the merged `deny` is both lists. The result keeps the machine's origin and
//!   location and is marked `narrowed_by_project`.
//! - A local (`command`) machine server cannot be changed: a project entry of that name must be
//!   identical, and then changes nothing.
//! - `hosts` are the union: the project file may add plain egress hosts.
//! - Top-level `secrets` are the union, except that a secret the machine file binds keeps the
//!   machine's hosts: the project may not send a machine secret (top-level, a local server's, or a
//!   server token) to a host the machine file does not bind it to, nor turn on `body` for it. A
//!   cloned repository's `fenzi.yaml` must not be a way to ship the user's stored tokens elsewhere.

use super::ConfigError;
use super::model::*;
use super::rules::place;
use crate::host::HostPattern;
use crate::secret_name::server_token_name;
use crate::tool_pattern::ToolPattern;
use std::collections::HashMap;

fn error(at: &Location, message: String, hint: &str) -> ConfigError {
    ConfigError {
        at: Some(at.clone()),
        message,
        hint: Some(hint.to_string()),
    }
}

fn kind_name(kind: &ServerKind) -> &'static str {
    match kind {
        ServerKind::Remote { .. } => "a url server",
        ServerKind::Local { .. } => "a local (command) server",
        ServerKind::Account { .. } => "an account server",
    }
}

/// Merges; `Err` holds every merge problem (cross-entry rules are checked by the caller).
pub fn merge(machine: Option<Config>, project: Option<Config>) -> Result<Config, Vec<ConfigError>> {
    let machine = machine.unwrap_or_default();
    let project = project.unwrap_or_default();
    let mut errors = Vec::new();
    let machine_bindings = secret_bindings(&machine);

    let mut out = machine.clone();
    out.hosts.extend(project.hosts.iter().cloned());

    for ps in &project.mcp {
        match out.mcp.iter_mut().find(|ms| ms.name == ps.name) {
            Some(ms) => narrow(ms, ps, &mut errors),
            None => out.mcp.push(ps.clone()),
        }
    }
    for psec in &project.secrets {
        match out.secrets.iter().find(|m| m.name == psec.name) {
            Some(msec) if psec.body && !msec.body => errors.push(error(
                &psec.at,
                format!(
                    "the project turns on `body` for machine secret `{}` ({})",
                    psec.name,
                    place(&msec.at)
                ),
                "a project file cannot widen a machine secret; change the machine file if you mean it",
            )),
            // Same name: the machine's entry stands; its hosts are checked below.
            Some(_) => {}
            None => out.secrets.push(psec.clone()),
        }
    }

    // The project's new bindings of names the machine file binds.
    for (name, pattern, at) in project_new_bindings(&project, &machine) {
        if let Some(allowed) = machine_bindings.get(&name)
            && !allowed.contains(&pattern)
        {
            errors.push(error(
                at,
                format!(
                    "the project sends machine secret `{name}` to {pattern}, which the machine \
                         file does not bind it to"
                ),
                "a project file cannot widen a machine secret; add the host in the machine \
                     file if you mean it",
            ));
        }
    }

    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// Every secret name the config binds, with its host patterns.
fn secret_bindings(config: &Config) -> HashMap<String, Vec<HostPattern>> {
    let mut map: HashMap<String, Vec<HostPattern>> = HashMap::new();
    for s in &config.mcp {
        match &s.kind {
            ServerKind::Remote {
                token: true, url, ..
            } => map
                .entry(server_token_name(&s.name))
                .or_default()
                .push(HostPattern::for_host(url.host.clone(), url.port)),
            ServerKind::Local { secrets, hosts, .. } => {
                for sec in secrets {
                    map.entry(sec.value.clone())
                        .or_default()
                        .extend(hosts.iter().map(|h| h.value.clone()));
                }
            }
            _ => {}
        }
    }
    for sec in &config.secrets {
        map.entry(sec.name.clone())
            .or_default()
            .extend(sec.hosts.iter().map(|h| h.value.clone()));
    }
    map
}

/// Bindings the project file writes: its top-level secrets' hosts, and its local servers'
/// secrets times hosts (a local server with a machine server's name must be identical and adds
/// nothing), and its own `token: true` servers.
fn project_new_bindings<'p>(
    project: &'p Config,
    machine: &Config,
) -> Vec<(String, HostPattern, &'p Location)> {
    let mut out = Vec::new();
    for s in &project.mcp {
        if machine.mcp.iter().any(|m| m.name == s.name) {
            continue;
        }
        match &s.kind {
            ServerKind::Remote {
                token: true, url, ..
            } => out.push((
                server_token_name(&s.name),
                HostPattern::for_host(url.host.clone(), url.port),
                &s.at,
            )),
            ServerKind::Local { secrets, hosts, .. } => {
                for sec in secrets {
                    for h in hosts {
                        out.push((sec.value.clone(), h.value.clone(), &h.at));
                    }
                }
            }
            _ => {}
        }
    }
    for sec in &project.secrets {
        for h in &sec.hosts {
            out.push((sec.name.clone(), h.value.clone(), &h.at));
        }
    }
    out
}

fn narrow(ms: &mut McpServerConfig, ps: &McpServerConfig, errors: &mut Vec<ConfigError>) {
    let name = ps.name.clone();
    let where_ = place(&ms.at);
    let new_tools = match (&ms.kind, &ps.kind) {
        (
            ServerKind::Remote {
                url: mu,
                token: mt,
                tools: mtools,
            },
            ServerKind::Remote {
                url: pu,
                token: pt,
                tools: ptools,
            },
        ) => {
            if (mu.tls, &mu.host, mu.port, &mu.path) != (pu.tls, &pu.host, pu.port, &pu.path) {
                errors.push(error(
                    &ps.at,
                    format!("cannot change the url of machine server `{name}` ({where_})"),
                    "a project entry with a machine server's name narrows it and must repeat its \
                     url; give the project's server another name",
                ));
                return;
            }
            if mt != pt {
                errors.push(error(
                    &ps.at,
                    format!(
                        "machine server `{name}` ({where_}) has `token: {mt}`; the project entry \
                         says `token: {pt}`"
                    ),
                    "a project entry that narrows a machine server repeats its `token` setting",
                ));
                return;
            }
            narrow_tools(&name, &where_, mtools, ptools, errors)
        }
        (
            ServerKind::Account {
                provider: mp,
                tools: mtools,
            },
            ServerKind::Account {
                provider: pp,
                tools: ptools,
            },
        ) => {
            if mp != pp {
                errors.push(error(
                    &ps.at,
                    format!("cannot change the account of machine server `{name}` ({where_})"),
                    "give the project's server another name",
                ));
                return;
            }
            narrow_tools(&name, &where_, mtools, ptools, errors)
        }
        (
            ServerKind::Local {
                command: mc,
                secrets: msec,
                hosts: mh,
            },
            ServerKind::Local {
                command: pc,
                secrets: psec,
                hosts: ph,
            },
        ) => {
            let names =
                |v: &[Located<String>]| v.iter().map(|s| s.value.clone()).collect::<Vec<_>>();
            let pats =
                |v: &[Located<HostPattern>]| v.iter().map(|h| h.value.clone()).collect::<Vec<_>>();
            if mc != pc || names(msec) != names(psec) || pats(mh) != pats(ph) {
                errors.push(error(
                    &ps.at,
                    format!(
                        "cannot redefine local machine server `{name}` ({where_}); a project may \
                         only repeat it unchanged"
                    ),
                    "give the project's server another name, or remove this entry",
                ));
            }
            return;
        }
        (mk, pk) => {
            errors.push(error(
                &ps.at,
                format!(
                    "cannot change machine server `{name}` ({where_}) from {} into {}",
                    kind_name(mk),
                    kind_name(pk)
                ),
                "give the project's server another name",
            ));
            return;
        }
    };
    let Some(tools) = new_tools else {
        return;
    };
    match &mut ms.kind {
        ServerKind::Remote { tools: t, .. } | ServerKind::Account { tools: t, .. } => *t = tools,
        ServerKind::Local { .. } => return,
    }
    ms.narrowed_by_project = true;
}

/// The project's `allow` must sit inside the machine's; `deny` accumulates.
fn narrow_tools(
    name: &str,
    where_: &str,
    machine: &ToolRules,
    project: &ToolRules,
    errors: &mut Vec<ConfigError>,
) -> Option<ToolRules> {
    let before = errors.len();
    let machine_list = machine
        .allow
        .iter()
        .map(|p| format!("`{}`", p.value))
        .collect::<Vec<_>>()
        .join(", ");
    for p in &project.allow {
        if let Some(d) = machine
            .deny
            .iter()
            .find(|d| p.value.is_covered_by(&d.value))
        {
            errors.push(error(
                &p.at,
                format!(
                    "project allows `{}` on machine server `{name}`, which the machine file denies \
                     (`{}` at {})",
                    p.value,
                    d.value,
                    place(&d.at)
                ),
                "a project file can only narrow a machine server; remove it from `allow`",
            ));
        } else if !machine
            .allow
            .iter()
            .any(|m| p.value.is_covered_by(&m.value))
        {
            errors.push(error(
                &p.at,
                format!(
                    "project allows `{}` on machine server `{name}` ({where_}), which the machine \
                     file does not allow",
                    p.value
                ),
                &format!(
                    "a project file can only narrow a machine server: allow a subset of the \
                     machine's list ({machine_list}), or change the machine file"
                ),
            ));
        }
    }
    if errors.len() > before {
        return None;
    }
    let mut deny = machine.deny.clone();
    for d in &project.deny {
        if !deny
            .iter()
            .any(|m: &Located<ToolPattern>| m.value == d.value)
        {
            deny.push(d.clone());
        }
    }
    Some(ToolRules {
        allow: project.allow.clone(),
        deny,
        allow_annotated: project.allow_annotated.clone(),
    })
}
