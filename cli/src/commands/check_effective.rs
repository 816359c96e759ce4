//! `fenzi check --show-policy`: the effective policy after the merge, each element with the layer
//! it comes from (team, machine, project) and where it was written, as text or as JSON. It is
//! what the proxy enforces, not what any one file says: a server narrowed by a lower layer shows
//! its narrowed lists, with the layer that declared it.
//!
//! Urls are shown as host:port only (a url's path may hold a credential; see the config
//! loader's rule on messages).

use crate::team::TeamLayer;
use fenzi_policy::config::{
    Config, LocalRun, Location, McpServerConfig, Origin, ServerKind, ToolRules, stdio_url,
};
use serde_json::{Value, json};

/// The names of the layers, to tell which one wrote an element.
pub struct Layers<'a> {
    pub team: Option<&'a TeamLayer>,
    pub machine: Option<&'a str>,
    pub project: &'a str,
}

impl Layers<'_> {
    fn of(&self, at: &Location) -> &'static str {
        if self.team.is_some_and(|t| *at.file == *t.url) {
            "team"
        } else if self.machine.is_some_and(|m| *at.file == *m) {
            "machine"
        } else {
            "project"
        }
    }

    /// The chain, top first: `team URL (serial N) → machine FILE → project FILE`.
    fn chain(&self) -> String {
        let mut parts = Vec::new();
        if let Some(t) = self.team {
            parts.push(format!("team {} (serial {})", t.url, t.serial));
        }
        if let Some(m) = self.machine {
            parts.push(format!("machine {m}"));
        }
        parts.push(format!("project {}", self.project));
        parts.join(" → ")
    }
}

fn place(at: &Location) -> String {
    format!("{}:{}:{}", at.file, at.line, at.column)
}

fn origin(o: Origin, narrowed: bool) -> String {
    let name = match o {
        Origin::Team => "team",
        Origin::Machine => "machine",
        Origin::Project => "project",
    };
    if narrowed {
        format!("{name}, narrowed by project")
    } else {
        name.to_string()
    }
}

fn list<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> Vec<String> {
    items.into_iter().map(|i| i.to_string()).collect()
}

/// A server's allow and deny lists, as written.
type Lists = (Vec<String>, Vec<String>);

fn tools(t: &ToolRules) -> Lists {
    (
        list(t.allow.iter().map(|p| &p.value)),
        list(t.deny.iter().map(|p| &p.value)),
    )
}

fn server_kind(s: &McpServerConfig) -> (String, Option<Lists>) {
    match &s.kind {
        ServerKind::Remote { url, tools: t, .. } => (
            format!(
                "{} {}",
                if url.tls { "https" } else { "http" },
                url.host.authority(url.port)
            ),
            Some(tools(t)),
        ),
        ServerKind::Account { provider, tools: t } => {
            (format!("account {}", provider.host()), Some(tools(t)))
        }
        // Checked per tool behind the bridge (DESIGN §18); its hosts are its own egress.
        ServerKind::Local {
            hosts,
            tools: t,
            run,
            ..
        } => (
            format!(
                "command at {}{}, hosts [{}]",
                stdio_url(&s.name),
                if *run == LocalRun::Host {
                    ", run: host"
                } else {
                    ""
                },
                list(hosts.iter().map(|h| &h.value)).join(", ")
            ),
            Some(tools(t)),
        ),
    }
}

/// The effective policy as text, one element a line.
pub fn text(cfg: &Config, layers: &Layers<'_>) -> String {
    let mut out = format!("effective policy: {}\n", layers.chain());
    out.push_str("hosts:\n");
    if cfg.hosts.is_empty() {
        out.push_str("  (none)\n");
    }
    for h in &cfg.hosts {
        out.push_str(&format!(
            "  {:<32} {:<8} {}\n",
            h.value.to_string(),
            layers.of(&h.at),
            place(&h.at)
        ));
    }
    out.push_str("mcp:\n");
    if cfg.mcp.is_empty() {
        out.push_str("  (none)\n");
    }
    for s in &cfg.mcp {
        let (kind, tools) = server_kind(s);
        out.push_str(&format!(
            "  {} ({}; {kind}) {}\n",
            s.name,
            origin(s.origin, s.narrowed_by_project),
            place(&s.at)
        ));
        if let Some((allow, deny)) = tools {
            out.push_str(&format!(
                "    allow [{}]  deny [{}]\n",
                allow.join(", "),
                deny.join(", ")
            ));
        }
    }
    out.push_str("secrets:\n");
    if cfg.secrets.is_empty() {
        out.push_str("  (none)\n");
    }
    for s in &cfg.secrets {
        out.push_str(&format!(
            "  {} → [{}] {} {}\n",
            s.name,
            list(s.hosts.iter().map(|h| &h.value)).join(", "),
            layers.of(&s.at),
            place(&s.at)
        ));
    }
    out
}

/// The effective policy as one JSON value.
pub fn json(cfg: &Config, layers: &Layers<'_>) -> Value {
    let hosts: Vec<Value> = cfg
        .hosts
        .iter()
        .map(|h| json!({ "host": h.value.to_string(), "layer": layers.of(&h.at), "at": place(&h.at) }))
        .collect();
    let servers: Vec<Value> = cfg
        .mcp
        .iter()
        .map(|s| {
            let (kind, tools) = server_kind(s);
            let mut v = json!({
                "name": s.name,
                "layer": origin(s.origin, false),
                "narrowed_by_project": s.narrowed_by_project,
                "kind": kind,
                "at": place(&s.at),
            });
            if let Some((allow, deny)) = tools {
                v["allow"] = json!(allow);
                v["deny"] = json!(deny);
            }
            v
        })
        .collect();
    let secrets: Vec<Value> = cfg
        .secrets
        .iter()
        .map(|s| {
            json!({
                "name": s.name,
                "hosts": list(s.hosts.iter().map(|h| &h.value)),
                "layer": layers.of(&s.at),
                "at": place(&s.at),
            })
        })
        .collect();
    json!({ "layers": layers.chain(), "hosts": hosts, "mcp": servers, "secrets": secrets })
}
