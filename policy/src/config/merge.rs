//! Machine file + project file → one policy (README, "Machine and project files"); and, with a
//! team policy, team → machine → project, each layer narrowing the one above (see [`merge_layers`]).
//!
//! The rules below are written for the project on the machine file. Under a team policy the same
//! function runs twice: first with the team policy in the machine's role and the machine file in
//! the project's ([`MACHINE_ON_TEAM`]), then the project on that result. The one difference a
//! team makes is its ceiling ([`check_ceiling`]): a layer below it may not add what the team
//! policy does not admit (a host it does not cover, a remote or account server it does not have,
//! a secret bound to a host it does not reach), where a project may add those to a machine file.
//!
//! - The machine file's servers come first. A project entry with a new name adds a server.
//! - A project entry with a machine server's name may only narrow it. It is a complete entry of
//!   the same kind and address (same url, compared as scheme, host, port and path; same
//!   `account`), with the same `token` (absent means false). Each pattern in its `allow` must be
//!   covered by a machine `allow` pattern and by no machine `deny` pattern; the merged `allow` is
//!   the project's, the merged `deny` is both lists. The result keeps the machine's origin and
//!   location and is marked `narrowed_by_project`.
//! - The rest of such an entry narrows too, and a key it omits keeps the machine's value:
//!   `pin` may go from false to true, never from true to false; `list` may go from `all` to
//!   `filter`, never the other way; each `resources.allow` and `prompts.allow` pattern must be
//!   one of the machine's, written the same way; `tools.allow_annotated` may be kept or emptied,
//!   never given a value the machine's does not have. The result still has `allow_annotated` only
//!   with `pin: true`. `tools.rules` are both files' (the machine's first): every matching rule
//!   must hold, so a project's rules and `deny_args` only add conditions, and it cannot remove
//!   the machine's.
//! - `tools.confirm` patterns add up and `confirm_timeout` may only get shorter ([`confirm`]).
//! - `limits` add up: the machine's entries stay and the project's follow, both applied
//!   ([`limits`]); a project entry looser than the machine's for the same tools is an error.
//! - A local (`command`) machine server cannot be changed: a project entry of that name must be
//!   identical, and then changes nothing.
//! - `hosts` are the union: the project file may add plain egress hosts.
//! - `programs:` lists (DESIGN §17) of a lower layer are kept beside the upper's: on a server
//!   or secret it narrows, every list applying; a `hosts` mapping's list applies to every
//!   destination it matches, whichever layer added the destination. None can widen.
//! - `private:` ranges come from the machine file only; a project may narrow them for a name the
//!   machine file names (see [`private`]).
//! - Top-level `secrets` are the union, except that a secret the machine file binds keeps the
//!   machine's hosts: the project may not send a machine secret (top-level, a local server's, or a
//!   server token) to a host the machine file does not bind it to, nor turn on `body` for it. A
//!   cloned repository's `fenzi.yaml` must not be a way to ship the user's stored tokens elsewhere.
//!   A project's `in` for a machine secret must list a subset of the machine's positions, and then
//!   replaces them ([`positions`]); without `in` the machine's stand.
//!
//! This file holds the servers', hosts' and secrets' rules and the [`Layers`] every step names;
//! the parts with rules of their own have a child module each. Uses the model and `units`; the
//! cross-entry `rules` run after it, on its result.

mod confirm;
mod limits;
mod positions;
mod private;

use super::ConfigError;
use super::model::*;
use crate::host::HostPattern;
use crate::secret_name::server_token_name;
use crate::secret_position::SecretPosition;
use crate::tool_pattern::ToolPattern;
use std::collections::HashMap;

/// Which two layers one merge step joins, in the words its messages use.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layers {
    /// The layer narrowed, as in "machine server": `machine` or `team`.
    pub upper: &'static str,
    /// Its file: `machine file` or `team policy`.
    pub upper_file: &'static str,
    /// The layer that narrows, as in "the project sets": `project` or `machine file`.
    pub lower: &'static str,
    /// Its file: `project file` or `machine file`.
    pub lower_file: &'static str,
    pub lower_origin: Origin,
}

/// The project file on the machine file (and on a team policy merged with one).
pub(super) const PROJECT_ON_MACHINE: Layers = Layers {
    upper: "machine",
    upper_file: "machine file",
    lower: "project",
    lower_file: "project file",
    lower_origin: Origin::Project,
};

/// The machine file on the team policy.
pub(super) const MACHINE_ON_TEAM: Layers = Layers {
    upper: "team",
    upper_file: "team policy",
    lower: "machine file",
    lower_file: "machine file",
    lower_origin: Origin::Machine,
};

impl Layers {
    /// These layers, with the upper one named for a server declared in `origin`: a team server
    /// the project narrows (through the machine file's merge) is the team's, not the machine's.
    fn over(&self, origin: Origin) -> Layers {
        match origin {
            Origin::Team => Layers {
                upper: MACHINE_ON_TEAM.upper,
                upper_file: MACHINE_ON_TEAM.upper_file,
                ..*self
            },
            _ => *self,
        }
    }
}

/// The hint of every widening of a server's `pin`, `list`, `resources`, `prompts` and
/// `allow_annotated`.
fn widen_hint(l: &Layers) -> String {
    format!(
        "a {} can only narrow a {} server; remove the key to keep the {}'s setting, or change \
         the {} if you mean it",
        l.lower_file, l.upper, l.upper, l.upper_file
    )
}

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

/// Team → machine → project; `Err` holds every merge problem (cross-entry rules are checked by the
/// caller). Without a team policy this is the machine + project merge; with
/// one, the machine file narrows the team policy and the project narrows the result, both under
/// the team's ceiling. The errors of both steps are reported together.
pub fn merge_layers(
    team: Option<Config>,
    machine: Option<Config>,
    project: Option<Config>,
) -> Result<Config, Vec<ConfigError>> {
    let Some(team) = team else {
        return merge_step(machine, project, &PROJECT_ON_MACHINE, None);
    };
    let (upper, mut errors) =
        match merge_step(Some(team.clone()), machine, &MACHINE_ON_TEAM, Some(&team)) {
            Ok(c) => (c, Vec::new()),
            // The project is still checked against the team policy alone, so that its own
            // problems are reported beside the machine file's.
            Err(e) => (team.clone(), e),
        };
    match merge_step(Some(upper), project, &PROJECT_ON_MACHINE, Some(&team)) {
        Ok(c) if errors.is_empty() => Ok(c),
        Ok(_) => Err(errors),
        Err(e) => {
            errors.extend(e);
            Err(errors)
        }
    }
}

/// One layer (`project`) on the one above it (`machine`); `ceiling` is the team policy, when
/// there is one.
fn merge_step(
    machine: Option<Config>,
    project: Option<Config>,
    layers: &Layers,
    ceiling: Option<&Config>,
) -> Result<Config, Vec<ConfigError>> {
    let machine = machine.unwrap_or_default();
    let project = project.unwrap_or_default();
    let mut errors = Vec::new();
    let machine_bindings = secret_bindings(&machine);
    let Layers {
        upper,
        upper_file,
        lower,
        lower_file,
        ..
    } = *layers;
    if let Some(team) = ceiling {
        check_ceiling(team, &machine, &project, layers, &mut errors);
    }

    let mut out = machine.clone();
    // Only the machine file names a team policy (the schema refuses it elsewhere).
    out.team = project.team.clone().or(machine.team.clone());
    out.hosts.extend(project.hosts.iter().cloned());
    out.private = private::merge(&machine.private, &project.private, layers, &mut errors);
    // `programs:` on hosts entries all apply to what they match: a lower layer's only narrow.
    out.host_programs
        .extend(project.host_programs.iter().cloned());

    for ps in &project.mcp {
        match out.mcp.iter_mut().find(|ms| ms.name == ps.name) {
            Some(ms) => narrow(ms, ps, layers, &mut errors),
            None => out.mcp.push(ps.clone()),
        }
    }
    for psec in &project.secrets {
        // `in`: a project may narrow a machine secret's positions, never widen them.
        if let Some(msec) = out.secrets.iter_mut().find(|m| m.name == psec.name) {
            // `programs`: the lower layer's list applies beside the upper's (both must admit).
            msec.programs.extend(psec.programs.iter().cloned());
            let before = errors.len();
            if let Some(narrowed) = positions::narrow(msec, psec, layers, &mut errors) {
                msec.body = narrowed.iter().any(|p| p.value == SecretPosition::Body);
                msec.positions = Some(narrowed);
                continue;
            }
            if errors.len() > before {
                continue;
            }
        }
        match out.secrets.iter().find(|m| m.name == psec.name) {
            Some(msec) if psec.body && !msec.body => errors.push(error(
                &psec.at,
                format!(
                    "the {lower} turns on `body` for {upper} secret `{}` ({})",
                    psec.name,
                    place(&msec.at)
                ),
                &format!(
                    "a {lower_file} cannot widen a {upper} secret; change the {upper_file} if you \
                     mean it"
                ),
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
                    "the {lower} sends {upper} secret `{name}` to {pattern}, which the \
                     {upper_file} does not bind it to"
                ),
                &format!(
                    "a {lower_file} cannot widen a {upper} secret; add the host in the \
                     {upper_file} if you mean it"
                ),
            ));
        }
    }

    confirm::check_unused(&out, &mut errors);
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// The team policy's ceiling on what `lower` adds to `upper` (the team policy itself, or the team
/// policy merged with the machine file): every host it lists (top-level, a local server's, a
/// secret's) must be covered by a host the team policy admits, and it may not add a remote or
/// account server. Entries with an upper server's name are `narrow`ed instead.
fn check_ceiling(
    team: &Config,
    upper: &Config,
    lower: &Config,
    layers: &Layers,
    errors: &mut Vec<ConfigError>,
) {
    let lower_name = layers.lower;
    let lower_file = layers.lower_file;
    // What the team policy routes as plain egress: its hosts, its local servers' hosts and its
    // secrets' hosts (each of those is a route, see `Policy::route`).
    let mut plain: Vec<&HostPattern> = team.hosts.iter().map(|h| &h.value).collect();
    for s in &team.mcp {
        if let ServerKind::Local { hosts, .. } = &s.kind {
            plain.extend(hosts.iter().map(|h| &h.value));
        }
    }
    for sec in &team.secrets {
        plain.extend(sec.hosts.iter().map(|h| &h.value));
    }
    let servers: Vec<HostPattern> = team
        .mcp
        .iter()
        .filter_map(|s| match &s.kind {
            ServerKind::Remote { url, .. } => {
                Some(HostPattern::for_host(url.host.clone(), url.port))
            }
            ServerKind::Account { provider, .. } => crate::host::Host::parse(provider.host())
                .ok()
                .map(|h| HostPattern::for_host(h, 443)),
            ServerKind::Local { .. } => None,
        })
        .collect();
    let covered = |p: &HostPattern| plain.iter().any(|t| p.is_covered_by(t));
    let hint = format!(
        "under a team policy a {lower_file} can only narrow it: ask for this in the team policy, \
         or remove it here"
    );
    let mut refuse = |at: &Location, what: String| {
        errors.push(error(
            at,
            format!("the {lower_name} {what}, which the team policy does not allow"),
            &hint,
        ));
    };
    for h in &lower.hosts {
        if !covered(&h.value) {
            refuse(&h.at, format!("allows host {}", h.value));
        }
    }
    for s in &lower.mcp {
        if upper.mcp.iter().any(|u| u.name == s.name) {
            continue;
        }
        match &s.kind {
            ServerKind::Remote { .. } | ServerKind::Account { .. } => {
                refuse(&s.at, format!("adds server `{}`", s.name));
            }
            ServerKind::Local { hosts, .. } => {
                for h in hosts.iter().filter(|h| !covered(&h.value)) {
                    refuse(
                        &h.at,
                        format!("lets local server `{}` reach {}", s.name, h.value),
                    );
                }
            }
        }
    }
    for sec in &lower.secrets {
        for h in &sec.hosts {
            if !covered(&h.value) && !servers.contains(&h.value) {
                refuse(&h.at, format!("binds secret `{}` to {}", sec.name, h.value));
            }
        }
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

fn narrow(
    ms: &mut McpServerConfig,
    ps: &McpServerConfig,
    layers: &Layers,
    errors: &mut Vec<ConfigError>,
) {
    let name = ps.name.clone();
    let where_ = place(&ms.at);
    let layers = &layers.over(ms.origin);
    let Layers {
        upper,
        upper_file,
        lower,
        ..
    } = *layers;
    let (mtools, ptools) = match (&ms.kind, &ps.kind) {
        (
            ServerKind::Remote {
                url: mu,
                token: mt,
                oauth: mo,
                tools: mtools,
            },
            ServerKind::Remote {
                url: pu,
                token: pt,
                oauth: po,
                tools: ptools,
            },
        ) => {
            if (mu.tls, &mu.host, mu.port, &mu.path) != (pu.tls, &pu.host, pu.port, &pu.path) {
                errors.push(error(
                    &ps.at,
                    format!("cannot change the url of {upper} server `{name}` ({where_})"),
                    &format!(
                        "a {lower} entry with a {upper} server's name narrows it and must repeat \
                         its url; give the {lower}'s server another name"
                    ),
                ));
                return;
            }
            if mo != po {
                errors.push(error(
                    &ps.at,
                    format!(
                        "{upper} server `{name}` ({where_}) has `oauth: {mo}`; the {lower} entry \
                         says `oauth: {po}`"
                    ),
                    &format!(
                        "a {lower} entry that narrows a {upper} server repeats its `oauth` setting"
                    ),
                ));
                return;
            }
            if mt != pt {
                errors.push(error(
                    &ps.at,
                    format!(
                        "{upper} server `{name}` ({where_}) has `token: {mt}`; the {lower} entry \
                         says `token: {pt}`"
                    ),
                    &format!(
                        "a {lower} entry that narrows a {upper} server repeats its `token` setting"
                    ),
                ));
                return;
            }
            (mtools, ptools)
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
                    format!("cannot change the account of {upper} server `{name}` ({where_})"),
                    &format!("give the {lower}'s server another name"),
                ));
                return;
            }
            (mtools, ptools)
        }
        (
            ServerKind::Local {
                command: mc,
                secrets: msec,
                hosts: mh,
                tools: mtools,
                ..
            },
            ServerKind::Local {
                command: pc,
                secrets: psec,
                hosts: ph,
                tools: ptools,
                run: prun,
            },
        ) => {
            // A lower file that writes `run` must say what the upper one does: `sandbox` under a
            // `run: host` server would otherwise be a line that quietly means nothing.
            if let (Some(at), ServerKind::Local { run: mrun, .. }) =
                (&ps.surface.written.run, &ms.kind)
                && prun != mrun
            {
                errors.push(error(
                    at,
                    format!(
                        "{upper} server `{name}` ({where_}) has `run: {}`; the {lower} entry says \
                         `run: {}`",
                        mrun.name(),
                        prun.name()
                    ),
                    &format!(
                        "where a server runs is the {upper} file's to say: remove `run` from the \
                         {lower} entry, or change it there"
                    ),
                ));
                return;
            }
            let names =
                |v: &[Located<String>]| v.iter().map(|s| s.value.clone()).collect::<Vec<_>>();
            let pats =
                |v: &[Located<HostPattern>]| v.iter().map(|h| h.value.clone()).collect::<Vec<_>>();
            // What the server is and may reach stays the upper file's; its tools narrow as a url
            // server's do. `run` is the machine file's alone (no lower file may write `host`).
            if mc != pc || names(msec) != names(psec) || pats(mh) != pats(ph) {
                errors.push(error(
                    &ps.at,
                    format!(
                        "cannot redefine local {upper} server `{name}` ({where_}); a {lower} entry \
                         repeats its command, secrets and hosts and may only narrow its tools"
                    ),
                    &format!("give the {lower}'s server another name, or repeat them unchanged"),
                ));
                return;
            }
            (mtools, ptools)
        }
        (mk, pk) => {
            errors.push(error(
                &ps.at,
                format!(
                    "cannot change {upper} server `{name}` ({where_}) from {} into {}",
                    kind_name(mk),
                    kind_name(pk)
                ),
                &format!("give the {lower}'s server another name"),
            ));
            return;
        }
    };
    let tools = narrow_tools(&name, &where_, mtools, ptools, layers, errors);
    let surface = narrow_surface(&name, &where_, &ms.surface, &ps.surface, layers, errors);
    let (Some(tools), Some(surface)) = (tools, surface) else {
        return;
    };
    // Follows from the rules above and each file's own check; kept so that a change to either
    // cannot leave annotations trusted without a pinned definition.
    if !tools.allow_annotated.is_empty() && !surface.pin {
        errors.push(error(
            tools.allow_annotated_at.as_ref().unwrap_or(&ps.at),
            format!("`allow_annotated` on {upper} server `{name}` ({where_}) needs `pin: true`"),
            "add `pin: true` to the server: annotations are read from the pinned definition only",
        ));
        return;
    }
    ms.surface = surface;
    match &mut ms.kind {
        ServerKind::Remote { tools: t, .. }
        | ServerKind::Account { tools: t, .. }
        | ServerKind::Local { tools: t, .. } => *t = tools,
    }
    // `upper_file` is for the messages above; a team server narrowed by the machine file keeps
    // its origin and is not marked.
    let _ = upper_file;
    // `programs`: the lower layer's list applies beside the upper's (and beside the upper's
    // default when it wrote none): it can only narrow.
    ms.programs.extend(ps.programs.iter().cloned());
    ms.narrowed_by_project |= layers.lower_origin == Origin::Project;
}

/// The project's `allow` must sit inside the machine's; `deny` accumulates; `allow_annotated`, when
/// written, may only drop values.
fn narrow_tools(
    name: &str,
    where_: &str,
    machine: &ToolRules,
    project: &ToolRules,
    layers: &Layers,
    errors: &mut Vec<ConfigError>,
) -> Option<ToolRules> {
    let before = errors.len();
    let Layers {
        upper,
        upper_file,
        lower,
        lower_file,
        ..
    } = *layers;
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
                    "{lower} allows `{}` on {upper} server `{name}`, which the {upper_file} denies \
                     (`{}` at {})",
                    p.value,
                    d.value,
                    place(&d.at)
                ),
                &format!("a {lower_file} can only narrow a {upper} server; remove it from `allow`"),
            ));
        } else if !machine
            .allow
            .iter()
            .any(|m| p.value.is_covered_by(&m.value))
        {
            errors.push(error(
                &p.at,
                format!(
                    "{lower} allows `{}` on {upper} server `{name}` ({where_}), which the \
                     {upper_file} does not allow",
                    p.value
                ),
                &format!(
                    "a {lower_file} can only narrow a {upper} server: allow a subset of the \
                     {upper}'s list ({machine_list}), or change the {upper_file}"
                ),
            ));
        }
    }
    let confirm = confirm::narrow(name, &machine.confirm, &project.confirm, layers, errors);
    let (allow_annotated, allow_annotated_at) = match &project.allow_annotated_at {
        None => (
            machine.allow_annotated.clone(),
            machine.allow_annotated_at.clone(),
        ),
        Some(at) => {
            for a in &project.allow_annotated {
                if !machine.allow_annotated.iter().any(|m| m.value == a.value) {
                    errors.push(error(
                        &a.at,
                        format!(
                            "{lower} adds `allow_annotated: [{}]` to {upper} server `{name}` \
                             ({where_}), which the {upper_file} does not allow",
                            a.value.name()
                        ),
                        &format!(
                            "a {lower_file} can only narrow a {upper} server: keep the {upper}'s \
                             `allow_annotated`, remove it with `allow_annotated: []`, or change \
                             the {upper_file}"
                        ),
                    ));
                }
            }
            (project.allow_annotated.clone(), Some(at.clone()))
        }
    };
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
    // All matching rules apply, so adding the project's to the machine's only narrows.
    let mut rules = machine.rules.clone();
    rules.extend(project.rules.iter().cloned());
    Some(ToolRules {
        allow: project.allow.clone(),
        deny,
        allow_annotated,
        allow_annotated_at,
        rules,
        confirm,
    })
}

/// `pin`, `list`, `resources` and `prompts`: a key the project writes must narrow the machine's,
/// a key it omits keeps the machine's.
fn narrow_surface(
    name: &str,
    where_: &str,
    machine: &ServerSurface,
    project: &ServerSurface,
    layers: &Layers,
    errors: &mut Vec<ConfigError>,
) -> Option<ServerSurface> {
    let before = errors.len();
    let Layers {
        upper,
        upper_file,
        lower,
        lower_file,
        ..
    } = *layers;
    let widen = widen_hint(layers);
    let (mw, pw) = (&machine.written, &project.written);
    let pin = match &pw.pin {
        Some(at) if machine.pin && !project.pin => {
            errors.push(error(
                at,
                format!(
                    "{upper} server `{name}` ({where_}) has `pin: true`; the {lower} entry turns \
                     it off"
                ),
                &widen,
            ));
            machine.pin
        }
        Some(_) => project.pin,
        None => machine.pin,
    };
    let list = match &pw.list {
        Some(at) if machine.list == ListMode::Filter && project.list == ListMode::All => {
            errors.push(error(
                at,
                format!(
                    "{upper} server `{name}` ({where_}) has `list: filter`; the {lower} entry says \
                     `list: all`, which would show the agent what the policy hides"
                ),
                &widen,
            ));
            machine.list
        }
        Some(_) => project.list,
        None => machine.list,
    };
    let resources = match &pw.resources {
        None => machine.resources.clone(),
        Some(_) => {
            let hint = match &mw.resources {
                Some(at) if !machine.resources.is_empty() => format!(
                    "a {lower_file} can only narrow a {upper} server: each pattern must be one of \
                     the {upper}'s `resources.allow` patterns ({}), written the same way",
                    place(at)
                ),
                _ => format!(
                    "the {upper_file} allows no resources on this server; change the \
                     {upper_file} if you mean it"
                ),
            };
            // A URI may hold a credential, so the pattern is named by its key, not quoted.
            for p in &project.resources {
                if !machine.resources.iter().any(|m| m.value == p.value) {
                    errors.push(error(
                        &p.at,
                        format!(
                            "{lower} allows a resource pattern on {upper} server `{name}` \
                             ({where_}) that the {upper_file} does not allow"
                        ),
                        &hint,
                    ));
                }
            }
            project.resources.clone()
        }
    };
    let prompts = match &pw.prompts {
        None => machine.prompts.clone(),
        Some(_) => {
            let hint = if machine.prompts.is_empty() {
                format!(
                    "the {upper_file} allows no prompts on this server; change the {upper_file} \
                     if you mean it"
                )
            } else {
                let machine_list = machine
                    .prompts
                    .iter()
                    .map(|p| format!("`{}`", p.value))
                    .collect::<Vec<_>>()
                    .join(", ");
                format!(
                    "a {lower_file} can only narrow a {upper} server: allow a subset of the \
                     {upper}'s list ({machine_list}), each written the same way, or change the \
                     {upper_file}"
                )
            };
            for p in &project.prompts {
                if !machine.prompts.iter().any(|m| m.value == p.value) {
                    errors.push(error(
                        &p.at,
                        format!(
                            "{lower} allows prompt `{}` on {upper} server `{name}` ({where_}), \
                             which the {upper_file} does not allow",
                            p.value
                        ),
                        &hint,
                    ));
                }
            }
            project.prompts.clone()
        }
    };
    let limits = limits::narrow(name, &machine.limits, &project.limits, layers, errors);
    let token_in = match &project.token_in {
        None => machine.token_in.clone(),
        Some(wanted) => {
            let default = [crate::secret_position::SecretPosition::Header(
                "Authorization".into(),
            )];
            let machine_has: Vec<_> = match &machine.token_in {
                Some(list) => list.iter().map(|m| m.value.clone()).collect(),
                None => default.to_vec(),
            };
            for p in wanted {
                if !machine_has.iter().any(|m| m.same_place(&p.value)) {
                    errors.push(error(
                        &p.at,
                        format!(
                            "the {lower} lets {upper} server `{name}`'s token be swapped in `{}` \
                             ({where_}), where the {upper_file} does not: its token goes in {}",
                            p.value,
                            crate::secret_position::list(&machine_has)
                        ),
                        &widen,
                    ));
                }
            }
            Some(wanted.clone())
        }
    };
    if errors.len() > before {
        return None;
    }
    let pick = |p: &Option<Location>, m: &Option<Location>| p.clone().or_else(|| m.clone());
    Some(ServerSurface {
        list,
        pin,
        resources,
        prompts,
        limits,
        written: SurfaceKeys {
            list: pick(&pw.list, &mw.list),
            pin: pick(&pw.pin, &mw.pin),
            resources: pick(&pw.resources, &mw.resources),
            prompts: pick(&pw.prompts, &mw.prompts),
            token_in: pick(&pw.token_in, &mw.token_in),
            run: pick(&pw.run, &mw.run),
        },
        token_in,
    })
}
