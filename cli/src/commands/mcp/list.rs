//! `fenzi mcp list [--json]`: the servers agents get in this folder (machine file, then project
//! file), where each comes from, what it is, its tools, and whether the secrets it needs are in
//! the credential store, stored for the hosts this policy sends them to. A session withholds a
//! stored value from a policy that binds it to a host it was not stored for (`session`), and the
//! list says so: for that it reads the entry, keeps only its hosts, and wipes the value at once; the
//! value is never printed. When the store cannot be used, each answer is "unknown" with the reason.
//! An `oauth: true` server also shows its sign-in (`fenzi mcp login`): the scopes granted, when the
//! access token expires, and whether a session can renew it; never a token. A command server shows
//! the address agents reach it at (`stdio_url`), its tools like a url server's, and `run: host`
//! when it runs outside a sandbox; its secrets are checked against its own hosts (its own policy,
//! [`Policy::for_local_server`]), as they are never the agent's.

use super::files::{FileArgs, Files};
use crate::session::hosts_not_stored_for;
use anyhow::Result;
use fenzi_policy::config::{
    AccountProvider, Config, LocalRun, McpServerConfig, Origin, SecretConfig, ServerKind,
    ToolRules, stdio_url,
};
use fenzi_policy::engine::{Policy, SecretBinding};
use fenzi_policy::secret_name::server_token_name;
use fenzi_proxy::credstore::{self, CredentialStore};
use fenzi_proxy::oauth::record::{SignInRecord, now as record_now};
use serde_json::{Value, json};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    files: FileArgs,
}

/// Whether a secret is stored, and for this policy's hosts, as far as the store can say.
enum Stored {
    Yes,
    No,
    /// Stored, but a session here withholds it; why, naming the hosts.
    Withheld(String),
    Unknown(String),
}

impl Stored {
    fn text(&self) -> String {
        match self {
            Stored::Yes => "stored".into(),
            Stored::No => "not stored".into(),
            Stored::Withheld(why) => format!("stored, not used here: {why}"),
            Stored::Unknown(why) => format!("unknown ({why})"),
        }
    }
    fn json(&self) -> Value {
        match self {
            Stored::Yes | Stored::Withheld(_) => json!(true),
            Stored::No => json!(false),
            Stored::Unknown(_) => Value::Null,
        }
    }
    fn withheld_json(&self) -> Value {
        match self {
            Stored::Withheld(why) => json!(why),
            _ => Value::Null,
        }
    }
    /// Whether storing it (again) is the fix.
    fn needs_token(&self) -> bool {
        matches!(self, Stored::No | Stored::Withheld(_))
    }
}

struct Store {
    store: Result<Box<dyn CredentialStore>, String>,
    /// Every secret's binding: the agent's policy's, then each command server's own.
    bindings: Vec<SecretBinding>,
}

impl Store {
    fn check(&self, name: &str) -> Stored {
        let store = match &self.store {
            Err(why) => return Stored::Unknown(format!("store unavailable: {why}")),
            Ok(store) => store,
        };
        // Every name listed comes from this policy, so it has a binding.
        let binding = self.bindings.iter().find(|b| b.name == name);
        match store.get(name) {
            Ok(None) => Stored::No,
            Ok(Some(stored)) => {
                match binding.and_then(|b| hosts_not_stored_for(b, stored.hosts.as_deref())) {
                    None => Stored::Yes,
                    Some(why) => Stored::Withheld(why),
                }
            }
            Err(e) => Stored::Unknown(e.to_string()),
        }
    }
}

impl Store {
    /// The sign-in `fenzi mcp login` stored for `server`, as `fenzi mcp list` shows it.
    fn sign_in(&self, server: &str) -> SignIn {
        match &self.store {
            Err(why) => SignIn::Unknown(format!("store unavailable: {why}")),
            Ok(store) => match SignInRecord::load(store.as_ref(), server) {
                Ok(Some(record)) => SignIn::Yes(Box::new(record)),
                Ok(None) => SignIn::No,
                Err(why) => SignIn::Unknown(why),
            },
        }
    }
}

enum SignIn {
    Yes(Box<SignInRecord>),
    No,
    Unknown(String),
}

/// `47m 12s`, `3h 5m`, `2d 4h`.
fn span(secs: u64) -> String {
    match secs {
        s if s < 3600 => format!("{}m {}s", s / 60, s % 60),
        s if s < 86400 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        s => format!("{}d {}h", s / 86400, (s % 86400) / 3600),
    }
}

impl SignIn {
    fn text(&self, server: &str) -> String {
        match self {
            SignIn::Yes(r) => {
                let now = record_now();
                let scopes = r
                    .scope
                    .as_deref()
                    .filter(|s| !s.is_empty())
                    .unwrap_or("(none named)");
                let expiry = if r.expires_at > now {
                    format!("access token expires in {}", span(r.expires_at - now))
                } else {
                    format!("access token expired {} ago", span(now - r.expires_at))
                };
                let renewal = if r.refresh_token.is_some() {
                    "a session renews it before it expires"
                } else {
                    "no refresh token: sign in again when it ends"
                };
                format!("signed in; scopes {scopes}; {expiry}; {renewal}")
            }
            SignIn::No => format!("not signed in (fenzi mcp login {server})"),
            SignIn::Unknown(why) => format!("unknown: {why}"),
        }
    }

    fn json(&self) -> Value {
        match self {
            SignIn::Yes(r) => json!({
                "signed_in": true,
                "issuer": r.issuer,
                "scope": r.scope,
                "issued_at": r.issued_at,
                "expires_at": r.expires_at,
                "renewable": r.refresh_token.is_some(),
            }),
            SignIn::No => json!({"signed_in": false}),
            SignIn::Unknown(why) => json!({"signed_in": null, "error": why}),
        }
    }
}

fn source(s: &McpServerConfig) -> &'static str {
    match (s.origin, s.narrowed_by_project) {
        (Origin::Machine, true) => "machine, narrowed by project",
        (Origin::Machine, false) => "machine",
        (Origin::Project, _) => "project",
        (Origin::Team, true) => "team, narrowed by project",
        (Origin::Team, false) => "team",
    }
}

fn tools_json(t: &ToolRules) -> Value {
    json!({
        "allow": t.allow.iter().map(|p| p.value.to_string()).collect::<Vec<_>>(),
        "deny": t.deny.iter().map(|p| p.value.to_string()).collect::<Vec<_>>(),
    })
}

fn tools_text(t: &ToolRules) -> String {
    let list = |v: &[fenzi_policy::config::Located<fenzi_policy::tool_pattern::ToolPattern>]| {
        v.iter()
            .map(|p| p.value.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut s = if t.allow.iter().any(|p| p.value.as_str() == "*") {
        "allow every tool".to_string()
    } else if t.allow.is_empty() {
        "allow no tool".to_string()
    } else {
        format!("allow {}", list(&t.allow))
    };
    if !t.deny.is_empty() {
        s.push_str(&format!("; deny {}", list(&t.deny)));
    }
    s
}

/// The secrets a server needs: (name, hosts it is sent to, positions it is swapped in when it has
/// any: a token is swapped in Authorization only).
fn server_secrets(s: &McpServerConfig) -> Vec<(String, Vec<String>, Option<Vec<String>>)> {
    match &s.kind {
        ServerKind::Remote {
            token: true, url, ..
        } => vec![(
            server_token_name(&s.name),
            vec![url.host.authority(url.port)],
            Some(vec!["header:Authorization".to_string()]),
        )],
        ServerKind::Local { secrets, hosts, .. } => secrets
            .iter()
            .map(|sec| {
                (
                    sec.value.clone(),
                    hosts.iter().map(|h| h.value.to_string()).collect(),
                    None,
                )
            })
            .collect(),
        _ => vec![],
    }
}

/// A top-level secret's `in`, as written; `None` without one.
fn secret_positions(sec: &SecretConfig) -> Option<Vec<String>> {
    sec.positions
        .as_ref()
        .map(|list| list.iter().map(|p| p.value.to_string()).collect())
}

/// ` (in header:Authorization)` for a secret with positions, nothing without.
fn positions_text(positions: &Option<Vec<String>>) -> String {
    match positions {
        Some(list) => format!(" (in {})", list.join(", ")),
        None => String::new(),
    }
}

fn server_json(config: &Config, s: &McpServerConfig, store: &Store) -> Value {
    let mut v = json!({
        "name": s.name,
        "source": match s.origin { Origin::Team => "team", Origin::Machine => "machine", Origin::Project => "project" },
        "narrowed_by_project": s.narrowed_by_project,
        "file": s.at.file.to_string(),
        "line": s.at.line,
    });
    let obj = v.as_object_mut().expect("object literal");
    match &s.kind {
        ServerKind::Remote {
            url,
            token,
            oauth,
            tools,
        } => {
            obj.insert("kind".into(), json!("remote"));
            obj.insert("url".into(), json!(url.text));
            obj.insert("token".into(), json!(token));
            obj.insert("oauth".into(), json!(oauth));
            if *oauth {
                obj.insert("sign_in".into(), store.sign_in(&s.name).json());
            }
            obj.insert("tools".into(), tools_json(tools));
        }
        ServerKind::Local {
            command,
            hosts,
            tools,
            run,
            ..
        } => {
            obj.insert("kind".into(), json!("local"));
            obj.insert("command".into(), json!(command));
            obj.insert("stdio_url".into(), json!(stdio_url(&s.name)));
            obj.insert("run".into(), json!(run.name()));
            obj.insert("tools".into(), tools_json(tools));
            obj.insert(
                "hosts".into(),
                json!(
                    hosts
                        .iter()
                        .map(|h| h.value.to_string())
                        .collect::<Vec<_>>()
                ),
            );
        }
        ServerKind::Account { provider, tools } => {
            obj.insert("kind".into(), json!("account"));
            obj.insert(
                "account".into(),
                json!(match provider {
                    AccountProvider::Claude => "claude",
                }),
            );
            obj.insert("host".into(), json!(provider.host()));
            obj.insert("tools".into(), tools_json(tools));
        }
    }
    let secrets = server_secrets(s)
        .into_iter()
        .map(|(name, hosts, positions)| {
            let stored = store.check(&name);
            json!({"name": name, "hosts": hosts, "in": positions, "stored": stored.json(),
                   "withheld": stored.withheld_json(),
                   "store_error": match &stored { Stored::Unknown(w) => json!(w), _ => Value::Null }})
        })
        .collect::<Vec<_>>();
    obj.insert("secrets".into(), json!(secrets));
    for (key, value) in super::enforced::json_members(config, s) {
        obj.insert(key.into(), value);
    }
    v
}

fn print_text(config: &Config, store: &Store) {
    let width = config.mcp.iter().map(|s| s.name.len()).max().unwrap_or(0);
    let pad = " ".repeat(width + 2);
    for s in &config.mcp {
        let what = match &s.kind {
            ServerKind::Remote { url, .. } => format!("remote  {}", url.text),
            ServerKind::Local { command, .. } => format!("local   {}", command.join(" ")),
            ServerKind::Account { provider, .. } => {
                format!("account claude (via {})", provider.host())
            }
        };
        println!("{:<width$}  {what}  [{}]", s.name, source(s));
        if let ServerKind::Local { run, .. } = &s.kind {
            println!("{pad}address: {}", stdio_url(&s.name));
            if *run == LocalRun::Host {
                println!("{pad}run: host (on this machine, outside any sandbox)");
            }
        }
        let (ServerKind::Remote { tools, .. }
        | ServerKind::Account { tools, .. }
        | ServerKind::Local { tools, .. }) = &s.kind;
        println!("{pad}tools: {}", tools_text(tools));
        if let ServerKind::Remote { oauth: true, .. } = &s.kind {
            println!("{pad}sign-in: {}", store.sign_in(&s.name).text(&s.name));
        }
        for line in super::enforced::lines(config, s) {
            println!("{pad}{line}");
        }
        if let ServerKind::Local { hosts, secrets, .. } = &s.kind
            && secrets.is_empty()
            && !hosts.is_empty()
        {
            let hosts = hosts
                .iter()
                .map(|h| h.value.to_string())
                .collect::<Vec<_>>();
            println!("{pad}hosts: {}", hosts.join(", "));
        }
        for (name, hosts, positions) in server_secrets(s) {
            let stored = store.check(&name);
            let hint = if stored.needs_token() {
                let arg = match &s.kind {
                    ServerKind::Local { secrets, .. } if secrets.len() > 1 => {
                        format!("{} --secret {name}", s.name)
                    }
                    _ => s.name.clone(),
                };
                let command = match &s.kind {
                    ServerKind::Remote { oauth: true, .. } => "login",
                    _ => "token",
                };
                format!(" (fenzi mcp {command} {arg})")
            } else {
                String::new()
            };
            println!(
                "{pad}secret {name} -> {}{}: {}{hint}",
                hosts.join(", "),
                positions_text(&positions),
                stored.text()
            );
        }
    }
    if !config.secrets.is_empty() {
        println!("secrets:");
        for sec in &config.secrets {
            let hosts = sec
                .hosts
                .iter()
                .map(|h| h.value.to_string())
                .collect::<Vec<_>>();
            let stored = store.check(&sec.name);
            let hint = if stored.needs_token() {
                format!(" (fenzi mcp token {})", sec.name)
            } else {
                String::new()
            };
            println!(
                "  {} -> {}{}: {}{hint}",
                sec.name,
                hosts.join(", "),
                positions_text(&secret_positions(sec)),
                stored.text()
            );
        }
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    let files = Files::read(&args.files)?;
    let config = files.load()?.unwrap_or_default();
    let store = Store {
        store: credstore::open().map_err(|e| e.to_string()),
        bindings: super::bindings::all(&config, &Policy::from_config(&config)),
    };
    let backend = store.store.as_ref().map(|s| s.backend()).ok();
    if args.json {
        let doc = json!({
            "store": {
                "backend": backend,
                "error": store.store.as_ref().err(),
            },
            "servers": config.mcp.iter().map(|s| server_json(&config, s, &store)).collect::<Vec<_>>(),
            "secrets": config.secrets.iter().map(|sec| {
                let stored = store.check(&sec.name);
                json!({
                    "name": sec.name,
                    "hosts": sec.hosts.iter().map(|h| h.value.to_string()).collect::<Vec<_>>(),
                    "body": sec.body,
                    "in": secret_positions(sec),
                    "stored": stored.json(),
                    "withheld": stored.withheld_json(),
                })
            }).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(ExitCode::SUCCESS);
    }
    if config.mcp.is_empty() {
        println!(
            "no MCP servers in {} or the machine file; add one with `fenzi mcp add`",
            files.project.name()
        );
    }
    // Top-level secrets are listed with or without servers.
    print_text(&config, &store);
    match &store.store {
        Ok(s) => println!("credential store: {}", s.backend()),
        Err(e) => println!("credential store: unavailable: {e}"),
    }
    Ok(ExitCode::SUCCESS)
}
