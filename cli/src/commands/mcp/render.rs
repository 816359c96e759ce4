//! The MCP configuration each agent is given, in its own format (`fenzi mcp render --agent X`
//! prints it; `fenzi run --agent X` hands it over without touching the user's files). Pure:
//! [`render`] maps the policy's servers and the session's placeholders to text.
//!
//! Formats (checked against each agent's documentation, November 2026):
//! - **Claude Code**: the JSON `--mcp-config` takes: `{"mcpServers": {NAME: {"type": "http",
//!   "url", "headers"}}}`. Claude Code expands `${VAR}` in it.
//! - **Codex**: `config.toml` tables `[mcp_servers.NAME]` with `url` and
//!   `bearer_token_env_var` (or `http_headers`). Codex has no file flag: `fenzi run` passes
//!   [`codex_override`] as `-c`.
//! - **OpenCode**: `opencode.json`'s `"mcp": {NAME: {"type": "remote", "url", "headers",
//!   "enabled"}}`, with `{env:VAR}` references; `"oauth": false` on token servers so OpenCode does
//!   not start its own sign-in. (V1 shape, which OpenCode 2 still reads.) `OPENCODE_CONFIG` points
//!   at the file.
//! - **Grok** (Grok Build): `config.toml` tables `[mcp_servers.NAME]` with `url` and `headers`;
//!   `${VAR}` expanded. Grok reads servers only from its own settings file, so `fenzi run` shows it
//!   a session copy of that file with these tables (see `run::grok_config`).
//!
//! A command (stdio) server is written for every agent as a remote Streamable HTTP server at its
//! bridge address, [`stdio_url`] (`http://NAME.stdio.fenzi.internal/mcp`, DESIGN §18), with no
//! header and no variable: fenzi starts the server itself, and its secrets live in its own sandbox
//! only, so the agent's config names none of them. The address is the same in every session, so
//! `fenzi mcp render` prints the same text outside one.
//!
//! A remote server's token is written as the session's placeholder when the caller passes one,
//! else as a reference to the environment variable of the secret's name (which `fenzi run` sets to
//! the placeholder): so `fenzi mcp render` prints no placeholder.
//!
//! What an agent does not get, with the reason ([`Rendered::skipped`]): `account: claude` goes to
//! Claude Code only (and as no entry: Claude Code finds the connectors with its sign-in,
//! [`Rendered::claude_account`] tells `fenzi run` to let it). Server names with `.` are written
//! with `_` (Codex and Claude Code accept `[A-Za-z0-9_-]`); the loader keeps that unambiguous,
//! since `a.b` and `a_b` are refused together.

use fenzi_policy::config::{McpServerConfig, ServerKind, stdio_url};
use fenzi_policy::secret_name::server_token_name;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// An agent fenzi can start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Agent {
    Claude,
    Codex,
    Opencode,
    Grok,
}

impl Agent {
    pub fn label(self) -> &'static str {
        match self {
            Agent::Claude => "Claude Code",
            Agent::Codex => "Codex",
            Agent::Opencode => "OpenCode",
            Agent::Grok => "Grok",
        }
    }
}

/// Secret name → the placeholder to write literally. A secret not in the map is written as a
/// reference to the environment variable of its name.
pub type Placeholders = BTreeMap<String, String>;

/// A server an agent does not get, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub server: String,
    pub reason: String,
}

/// An agent's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The file's text (JSON for Claude Code and OpenCode, TOML for Codex and Grok), ending in a
    /// newline.
    pub text: String,
    pub skipped: Vec<Skipped>,
    /// Claude Code only: the policy has `account: claude`, so Claude Code should load its account
    /// connectors (no `--strict-mcp-config`).
    pub claude_account: bool,
}

/// The name an agent sees for a server.
pub fn agent_server_name(name: &str) -> String {
    name.replace('.', "_")
}

enum SecretRef<'a> {
    Value(&'a str),
    Env(&'a str),
}

fn secret_ref<'a>(name: &'a str, placeholders: &'a Placeholders) -> SecretRef<'a> {
    match placeholders.get(name) {
        Some(v) => SecretRef::Value(v),
        None => SecretRef::Env(name),
    }
}

/// `${VAR}` / `{env:VAR}` / the placeholder.
fn inline(agent: Agent, r: &SecretRef<'_>) -> String {
    match (agent, r) {
        (_, SecretRef::Value(v)) => v.to_string(),
        (Agent::Opencode, SecretRef::Env(n)) => format!("{{env:{n}}}"),
        (_, SecretRef::Env(n)) => format!("${{{n}}}"),
    }
}

/// One server as the agent gets it: every server is remote to the agent (a command server at its
/// bridge address).
enum Plan {
    Remote {
        url: String,
        /// The token secret and the header it goes in.
        token: Option<TokenPlace>,
    },
}

/// Where a `token: true` server's token goes: `Authorization: Bearer <token>` by default, or the
/// first header its `token_in` names, with the token as the whole value.
struct TokenPlace {
    secret: String,
    header: String,
}

impl TokenPlace {
    /// The header's value around `reference` (the agent's spelling of the secret).
    fn value(&self, reference: &str) -> String {
        if self.header.eq_ignore_ascii_case("authorization") {
            format!("Bearer {reference}")
        } else {
            reference.to_string()
        }
    }
}

/// The place of server `s`'s token, or why it cannot be given in a header.
fn token_place(s: &McpServerConfig) -> Result<TokenPlace, String> {
    let secret = server_token_name(&s.name);
    let header = match &s.surface.token_in {
        None => Some("Authorization".to_string()),
        Some(list) => list.iter().find_map(|p| match &p.value {
            fenzi_policy::secret_position::SecretPosition::Header(h) => Some(h.clone()),
            _ => None,
        }),
    };
    match header {
        Some(header) => Ok(TokenPlace { secret, header }),
        None => Err(format!(
            "its `token_in` names no header, so the agent's config carries no token; add              {secret}'s placeholder to the url yourself"
        )),
    }
}

/// Which servers the agent gets, in policy order, and which it does not.
fn plan(agent: Agent, servers: &[McpServerConfig]) -> (Vec<(String, Plan)>, Vec<Skipped>, bool) {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    let mut account = false;
    for s in servers {
        match &s.kind {
            ServerKind::Remote { url, token, .. } => {
                let token = match token.then(|| token_place(s)) {
                    None => None,
                    Some(Ok(place)) => Some(place),
                    Some(Err(why)) => {
                        skipped.push(Skipped {
                            server: s.name.clone(),
                            reason: why,
                        });
                        None
                    }
                };
                out.push((
                    agent_server_name(&s.name),
                    Plan::Remote {
                        url: url.text.clone(),
                        token,
                    },
                ))
            }
            // DESIGN §18: the agent reaches a command server only through fenzi's bridge, with
            // nothing of the server's (no command, no secret, no placeholder) in its config.
            ServerKind::Local { .. } => out.push((
                agent_server_name(&s.name),
                Plan::Remote {
                    url: stdio_url(&s.name),
                    token: None,
                },
            )),
            ServerKind::Account { .. } => {
                if agent == Agent::Claude {
                    account = true;
                } else {
                    skipped.push(Skipped {
                        server: s.name.clone(),
                        reason: "Claude's account connectors are for Claude Code only".into(),
                    });
                }
            }
        }
    }
    (out, skipped, account)
}

/// The agent's MCP configuration for `servers`.
pub fn render(agent: Agent, servers: &[McpServerConfig], placeholders: &Placeholders) -> Rendered {
    let (plans, skipped, account) = plan(agent, servers);
    let text = match agent {
        Agent::Claude => claude(&plans, placeholders),
        Agent::Opencode => opencode(&plans, placeholders),
        Agent::Codex => codex(&plans, placeholders),
        Agent::Grok => grok(&plans, placeholders),
    };
    Rendered {
        text,
        skipped,
        claude_account: account,
    }
}

/// The value for Codex's `-c mcp_servers=...` (one TOML inline table replacing the user's list).
pub fn codex_override(servers: &[McpServerConfig], placeholders: &Placeholders) -> String {
    let (plans, _, _) = plan(Agent::Codex, servers);
    let tables = plans
        .iter()
        .map(|(name, p)| {
            let fields = codex_fields(p, placeholders)
                .into_iter()
                .map(|(k, v)| format!("{k} = {v}"))
                .collect::<Vec<_>>()
                .join(", ");
            format!("{} = {{ {fields} }}", toml_key(name))
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!("mcp_servers={{ {tables} }}")
}

fn pretty(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

fn claude(plans: &[(String, Plan)], ph: &Placeholders) -> String {
    let mut servers = Map::new();
    for (name, p) in plans {
        let v = match p {
            Plan::Remote { url, token } => {
                let mut o = json!({"type": "http", "url": url});
                if let Some(t) = token {
                    let value = t.value(&inline(Agent::Claude, &secret_ref(&t.secret, ph)));
                    o["headers"] = json!({ t.header.as_str(): value });
                }
                o
            }
        };
        servers.insert(name.clone(), v);
    }
    pretty(&json!({"mcpServers": servers}))
}

fn opencode(plans: &[(String, Plan)], ph: &Placeholders) -> String {
    let mut servers = Map::new();
    for (name, p) in plans {
        let v = match p {
            Plan::Remote { url, token } => {
                let mut o = json!({"type": "remote", "url": url, "enabled": true});
                if let Some(t) = token {
                    let value = t.value(&inline(Agent::Opencode, &secret_ref(&t.secret, ph)));
                    o["headers"] = json!({ t.header.as_str(): value });
                    o["oauth"] = json!(false);
                }
                o
            }
        };
        servers.insert(name.clone(), v);
    }
    pretty(&json!({"$schema": "https://opencode.ai/config.json", "mcp": servers}))
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn toml_key(k: &str) -> String {
    if !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        k.to_string()
    } else {
        toml_str(k)
    }
}

fn toml_inline(pairs: &[(String, String)]) -> String {
    let inner = pairs
        .iter()
        .map(|(k, v)| format!("{} = {}", toml_key(k), toml_str(v)))
        .collect::<Vec<_>>()
        .join(", ");
    format!("{{ {inner} }}")
}

/// Codex's keys for one server, values already TOML.
fn codex_fields(p: &Plan, ph: &Placeholders) -> Vec<(&'static str, String)> {
    let mut f = Vec::new();
    match p {
        Plan::Remote { url, token } => {
            f.push(("url", toml_str(url)));
            if let Some(t) = token {
                let bearer = t.header.eq_ignore_ascii_case("authorization");
                match secret_ref(&t.secret, ph) {
                    SecretRef::Env(n) if bearer => f.push(("bearer_token_env_var", toml_str(n))),
                    // Codex reads a header's whole value from a variable.
                    SecretRef::Env(n) => f.push((
                        "env_http_headers",
                        toml_inline(&[(t.header.clone(), n.to_string())]),
                    )),
                    SecretRef::Value(v) => f.push((
                        "http_headers",
                        toml_inline(&[(t.header.clone(), t.value(v))]),
                    )),
                }
            }
        }
    }
    f
}

fn codex(plans: &[(String, Plan)], ph: &Placeholders) -> String {
    let mut out = String::new();
    for (i, (name, p)) in plans.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "[mcp_servers.{}]", toml_key(name));
        for (k, v) in codex_fields(p, ph) {
            let _ = writeln!(out, "{k} = {v}");
        }
    }
    out
}

fn grok(plans: &[(String, Plan)], ph: &Placeholders) -> String {
    let mut out = String::new();
    for (i, (name, p)) in plans.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "[mcp_servers.{}]", toml_key(name));
        match p {
            Plan::Remote { url, token } => {
                let _ = writeln!(out, "url = {}", toml_str(url));
                if let Some(t) = token {
                    let value = t.value(&inline(Agent::Grok, &secret_ref(&t.secret, ph)));
                    let _ = writeln!(
                        out,
                        "headers = {}",
                        toml_inline(&[(t.header.clone(), value)])
                    );
                }
            }
        }
    }
    out
}

/// `fenzi mcp render --agent X`.
pub mod cli {
    use super::{Agent, Placeholders, codex_override, render};
    use crate::commands::mcp::files::{FileArgs, Files};
    use anyhow::Result;
    use std::process::ExitCode;

    #[derive(Debug, clap::Args)]
    #[command(after_help = "\
Prints the MCP configuration `fenzi run --agent AGENT` gives the agent, in the agent's own format.
Tokens appear as references to environment variables named after them (inside a session they hold
the placeholders); no value or placeholder is printed. A command server appears as a remote server
at http://NAME.stdio.fenzi.internal/mcp, the address fenzi serves it at in every session, with no
header and no variable: its secrets exist only in its own sandbox.")]
    pub struct Args {
        /// The agent whose format to print.
        #[arg(long, value_enum)]
        agent: Agent,
        /// With --agent codex: print the value for `codex -c` instead (Codex has no config-file
        /// flag; `-c 'mcp_servers={...}'` replaces its server list for one run).
        #[arg(long)]
        codex_arg: bool,
        #[command(flatten)]
        files: FileArgs,
    }

    pub fn run(args: Args) -> Result<ExitCode> {
        let files = Files::read(&args.files)?;
        let config = files.load()?.unwrap_or_default();
        if args.codex_arg {
            if args.agent != Agent::Codex {
                anyhow::bail!("--codex-arg goes with --agent codex");
            }
            println!("{}", codex_override(&config.mcp, &Placeholders::new()));
            return Ok(ExitCode::SUCCESS);
        }
        let rendered = render(args.agent, &config.mcp, &Placeholders::new());
        print!("{}", rendered.text);
        for s in &rendered.skipped {
            eprintln!(
                "note: {} does not get server `{}`: {}",
                args.agent.label(),
                s.server,
                s.reason
            );
        }
        for s in &config.mcp {
            for line in crate::commands::mcp::enforced::lines(&config, s) {
                eprintln!("note: fenzi enforces on `{}`: {line}", s.name);
            }
        }
        if rendered.claude_account {
            eprintln!(
                "note: Claude Code reaches your claude.ai connectors itself, with its sign-in; the \
                 sandbox checks their calls against the `account: claude` entry"
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixtures() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/render")
    }

    fn servers() -> Vec<McpServerConfig> {
        let read = |f: &str| std::fs::read_to_string(fixtures().join(f)).unwrap();
        let (machine, project) = (read("machine.yaml"), read("policy.yaml"));
        fenzi_policy::config::load(Some((&machine, "mcp.yaml")), Some((&project, "fenzi.yaml")))
            .unwrap()
            .mcp
    }

    fn placeholders() -> Placeholders {
        [
            ("MCP_LINEAR", "fzph_LINEAR_0123456789abcdefghijABCDEFGHIJ"),
            (
                "MCP_DOCS_INTERNAL",
                "fzph_DOCS_0123456789abcdefghijABCDEFGHIJ",
            ),
            (
                "DIGITALOCEAN_API_TOKEN",
                "fzph_DO_0123456789abcdefghijABCDEFGHIJ",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// Compares with `placeholders/<file>`; `FENZI_BLESS=1` rewrites the fixture instead.
    fn check(file: &str, got: &str) {
        let path = fixtures().join("placeholders").join(file);
        if std::env::var_os("FENZI_BLESS").is_some() {
            std::fs::write(&path, got).unwrap();
        }
        let want =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(got, want, "{file} differs from the fixture");
    }

    #[test]
    fn renders_session_placeholders_for_every_agent() {
        let (servers, ph) = (servers(), placeholders());
        for (agent, file) in [
            (Agent::Claude, "claude.json"),
            (Agent::Codex, "codex.toml"),
            (Agent::Opencode, "opencode.json"),
            (Agent::Grok, "grok.toml"),
        ] {
            let r = render(agent, &servers, &ph);
            check(file, &r.text);
            // No reference is left where a placeholder was given.
            assert!(!r.text.contains("${MCP_"), "{file}");
            assert!(!r.text.contains("{env:"), "{file}");
            assert_eq!(r.claude_account, agent == Agent::Claude);
        }
        check("codex_arg.txt", &(codex_override(&servers, &ph) + "\n"));
    }

    #[test]
    fn a_command_server_is_its_bridge_address_with_nothing_of_its_secrets() {
        // Even with the session's placeholders passed in, a command server's secret is not the
        // agent's (DESIGN §18): it lives in the server's own sandbox only.
        let (servers, ph) = (servers(), placeholders());
        for agent in [Agent::Claude, Agent::Codex, Agent::Opencode, Agent::Grok] {
            let r = render(agent, &servers, &ph);
            assert!(!r.text.contains("fzph_DO_"), "{agent:?}");
            assert!(!r.text.contains("DIGITALOCEAN_API_TOKEN"), "{agent:?}");
            assert!(
                !r.text.contains("npx"),
                "{agent:?}: no command reaches the agent"
            );
            for name in ["files", "droplets", "keychain"] {
                assert!(
                    r.text
                        .contains(&format!("\"http://{name}.stdio.fenzi.internal/mcp\"")),
                    "{agent:?}: {name}"
                );
            }
            let skipped: Vec<&str> = r.skipped.iter().map(|s| s.server.as_str()).collect();
            let want: &[&str] = if agent == Agent::Claude {
                &[]
            } else {
                &["claude-ai"]
            };
            assert_eq!(skipped, want, "{agent:?}");
        }
        assert!(!codex_override(&servers, &ph).contains("fzph_DO_"));
    }

    #[test]
    fn a_token_with_token_in_goes_in_that_header_for_every_agent() {
        let text = "version: 1\nmcp:\n  maps:\n    url: https://maps.example.com/mcp\n    token: true\n    token_in: [header:X-Api-Key]\n    tools: {allow: [search]}\n  q:\n    url: https://q.example.com/mcp\n    token: true\n    token_in: [query:key]\n    tools: {allow: [search]}\n";
        let servers = fenzi_policy::config::load(None, Some((text, "fenzi.yaml")))
            .unwrap()
            .mcp;
        let none = Placeholders::new();
        let claude = render(Agent::Claude, &servers, &none);
        assert!(
            claude.text.contains(r#""X-Api-Key": "${MCP_MAPS}""#),
            "{}",
            claude.text
        );
        assert!(!claude.text.contains("Bearer"), "{}", claude.text);
        assert!(
            claude
                .skipped
                .iter()
                .any(|s| s.server == "q" && s.reason.contains("names no header")),
            "a token that goes only in the query is noted"
        );
        let codex = codex_override(&servers, &none);
        assert!(
            codex.contains(r#"env_http_headers = { X-Api-Key = "MCP_MAPS" }"#),
            "{codex}"
        );
        assert!(
            !codex.contains("bearer_token_env_var = \"MCP_MAPS\""),
            "{codex}"
        );
        let grok = render(Agent::Grok, &servers, &none);
        assert!(grok.text.contains("X-Api-Key"), "{}", grok.text);
        let opencode = render(Agent::Opencode, &servers, &none);
        assert!(
            opencode.text.contains(r#""X-Api-Key": "{env:MCP_MAPS}""#),
            "{}",
            opencode.text
        );
    }

    #[test]
    fn strings_are_escaped_for_toml_and_json() {
        assert_eq!(toml_str("a\"b\\c\u{1}"), "\"a\\\"b\\\\c\\u0001\"");
        assert_eq!(toml_key("a.b"), "\"a.b\"");
        assert_eq!(toml_key("a-b_c"), "a-b_c");
        assert_eq!(agent_server_name("docs.internal"), "docs_internal");
    }
}
