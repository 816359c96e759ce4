//! How `fenzi run --agent X` starts an agent with the policy's MCP servers, in the agent's own
//! format, without touching the user's files: the rendered configuration goes into the session
//! directory and is handed over by a flag or a variable each agent reads.
//!
//! | agent | program | how it gets the servers |
//! |---|---|---|
//! | Claude Code | `claude` | `--mcp-config FILE` (+ `--strict-mcp-config` unless `account: claude`) |
//! | Codex | `codex` | `-c mcp_servers={...}` (Codex has no file flag) |
//! | OpenCode | `opencode` | `OPENCODE_CONFIG=FILE` |
//! | Grok | `grok` | its `~/.grok/config.toml`, shown in the sandbox as the session's copy |
//!
//! Grok is the exception: it reads servers only from its own settings files, so the sandbox shows
//! it a session copy of `~/.grok/config.toml` with the policy's servers (see [`grok_config`]); with
//! `--no-isolation` there is no sandbox to show it, and Grok gets no servers from fenzi.
//!
//! Secrets are written as `${NAME}`-style references to variables that the sandbox sets to the
//! session's placeholders, so the files hold no placeholder either.

use crate::commands::mcp::render::{self, Agent, Placeholders};
use crate::commands::run::grok_config;
use crate::session;
use anyhow::Result;
use fenzi_policy::config::Config;
use fenzi_proxy::host_files::HostDir;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// What to start: the program, its arguments, extra environment, the files the sandbox shows in
/// place of the agent's own (`(session file, agent's file)`), and what the agent was not given.
#[derive(Default)]
pub struct Launch {
    pub program: OsString,
    pub args: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    pub overlays: Vec<(PathBuf, PathBuf)>,
    pub notes: Vec<String>,
}

/// Where the agent runs: what the launch may rely on.
pub struct Place<'a> {
    pub session_dir: &'a HostDir,
    /// `HOME`, where agents keep their settings.
    pub home: Option<&'a Path>,
    /// In the sandbox (not `--no-isolation`): files can be shown in place of others.
    pub isolated: bool,
    /// The project folder (the command's working directory).
    pub project: Option<&'a Path>,
}

/// An MCP server list with no servers, shown to Grok in place of a project's `.mcp.json`.
const NO_SERVERS: &str = "{\"mcpServers\": {}}\n";

/// The launch of `agent` with `extra` arguments after fenzi's own.
pub fn launch(
    agent: Agent,
    config: &Config,
    place: &Place<'_>,
    extra: &[OsString],
) -> Result<Launch> {
    let session_dir = place.session_dir;
    let none = Placeholders::new();
    let rendered = render::render(agent, &config.mcp, &none);
    let mut notes: Vec<String> = rendered
        .skipped
        .iter()
        .map(|s| format!("{} not given to {}: {}", s.server, agent.label(), s.reason))
        .collect();
    let mut args: Vec<OsString> = vec![];
    let mut env = vec![];
    let mut overlays = vec![];
    let program = match agent {
        Agent::Claude => {
            let file =
                session::write_file(session_dir, "claude-mcp.json", rendered.text.as_bytes())?;
            args.push("--mcp-config".into());
            args.push(file.into_os_string());
            if !rendered.claude_account {
                // Only the policy's servers: not the user's own or a project's `.mcp.json`.
                args.push("--strict-mcp-config".into());
            }
            "claude"
        }
        Agent::Codex => {
            args.push("-c".into());
            args.push(render::codex_override(&config.mcp, &none).into());
            "codex"
        }
        Agent::Opencode => {
            let file = session::write_file(session_dir, "opencode.json", rendered.text.as_bytes())?;
            env.push(("OPENCODE_CONFIG".into(), file.into_os_string()));
            "opencode"
        }
        Agent::Grok => {
            match (place.isolated, place.home) {
                (true, Some(home)) => {
                    let settings = grok_config::settings_file(home);
                    let copy = grok_config::write(session_dir, &settings, &rendered.text)?;
                    if !copy.hidden.is_empty() {
                        notes.push(format!(
                            "Grok's own MCP servers in {} are left out for this session: {}",
                            settings.display(),
                            copy.hidden.join(", ")
                        ));
                    }
                    overlays.push((copy.file, copy.covers));
                    // Grok also reads the project's .mcp.json (Claude Code's format), whose servers
                    // would stand beside, or shadow by name, the policy's: hidden, as Claude Code's
                    // are by --strict-mcp-config.
                    if let Some(listed) = place
                        .project
                        .map(|p| p.join(".mcp.json"))
                        .filter(|p| p.is_file())
                    {
                        let empty = session::write_file(
                            session_dir,
                            "grok-project-mcp.json",
                            NO_SERVERS.as_bytes(),
                        )?;
                        notes.push(format!(
                            "{} is shown to Grok with no servers for this session: the servers it \
                             gets are the policy's",
                            listed.display()
                        ));
                        overlays.push((empty, listed));
                    }
                }
                (true, None) => notes.push(
                    "HOME is not set, so Grok's settings file cannot be found: Grok is given no \
                     MCP servers"
                        .into(),
                ),
                (false, _) => notes.push(
                    "with --no-isolation Grok is given no MCP servers: it reads them only from \
                     its own ~/.grok/config.toml, which fenzi shows it only inside the sandbox"
                        .into(),
                ),
            }
            "grok"
        }
    };
    args.extend(extra.iter().cloned());
    Ok(Launch {
        program: program.into(),
        args,
        env,
        overlays,
        notes,
    })
}

/// How `agent` is recognised among a connection's holders (DESIGN §17): the process fenzi starts,
/// and where its launcher runs the real program as a direct child, that child by its file name.
/// Codex's npm launcher (`codex.js` under node) spawns its native `codex` binary and waits.
pub fn identity(agent: Option<Agent>) -> fenzi_proxy::attribution::AgentIdentity {
    fenzi_proxy::attribution::AgentIdentity {
        launcher_child: match agent {
            Some(Agent::Codex) => Some("codex".to_string()),
            Some(Agent::Claude | Agent::Opencode | Agent::Grok) | None => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/policies/demo.yaml"
        ))
        .unwrap();
        fenzi_policy::config::load(None, Some((&text, "demo.yaml"))).unwrap()
    }

    fn place(dir: &Path) -> Place<'_> {
        // A test's directory handle lives as long as the test process.
        let session_dir: &HostDir = Box::leak(Box::new(HostDir::open(dir).unwrap()));
        Place {
            session_dir,
            home: Some(dir),
            isolated: true,
            project: Some(dir),
        }
    }

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("fenzi-agent-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn claude_gets_a_config_file_and_keeps_its_account_connectors() {
        let d = dir("claude");
        let l = launch(
            Agent::Claude,
            &config(),
            &place(&d),
            &["-p".into(), "hi".into()],
        )
        .unwrap();
        assert_eq!(l.program, "claude");
        let file = d.join("claude-mcp.json");
        assert_eq!(
            l.args,
            vec![
                OsString::from("--mcp-config"),
                file.clone().into(),
                "-p".into(),
                "hi".into()
            ]
        );
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(
            json["mcpServers"]["linear"]["headers"]["Authorization"],
            "Bearer ${MCP_LINEAR}"
        );
        std::fs::remove_dir_all(d).ok();
    }

    #[test]
    fn other_agents_skip_the_account_entry_and_use_their_own_channel() {
        let d = dir("others");
        let o = launch(Agent::Opencode, &config(), &place(&d), &[]).unwrap();
        assert_eq!(
            o.env,
            vec![(
                OsString::from("OPENCODE_CONFIG"),
                d.join("opencode.json").into()
            )]
        );
        assert!(
            o.notes
                .iter()
                .any(|n| n.starts_with("claude-ai not given to OpenCode")),
            "{:?}",
            o.notes
        );
        let g = launch(Agent::Grok, &config(), &place(&d), &[]).unwrap();
        assert!(g.env.is_empty());
        assert_eq!(
            g.overlays.len(),
            1,
            "no .mcp.json in the project, nothing more to cover"
        );
        let (copy, covers) = &g.overlays[0];
        assert_eq!(covers, &d.join(".grok/config.toml"));
        let text = std::fs::read_to_string(copy).unwrap();
        assert!(text.contains("[mcp_servers.linear]"), "{text}");
        let plain = Place {
            isolated: false,
            ..place(&d)
        };
        let g = launch(Agent::Grok, &config(), &plain, &[]).unwrap();
        assert!(g.overlays.is_empty());
        assert!(
            g.notes.iter().any(|n| n.contains("--no-isolation")),
            "{:?}",
            g.notes
        );
        // A project's .mcp.json is shown to Grok with no servers.
        std::fs::write(
            d.join(".mcp.json"),
            r#"{"mcpServers": {"e2e": {"url": "x"}}}"#,
        )
        .unwrap();
        let g = launch(Agent::Grok, &config(), &place(&d), &[]).unwrap();
        let (empty, covers) = &g.overlays[1];
        assert_eq!(covers, &d.join(".mcp.json"));
        assert_eq!(std::fs::read_to_string(empty).unwrap(), NO_SERVERS);
        assert!(
            g.notes
                .iter()
                .any(|n| n.contains("shown to Grok with no servers"))
        );
        let c = launch(Agent::Codex, &config(), &place(&d), &[]).unwrap();
        assert_eq!(c.args[0], "-c");
        assert!(c.args[1].to_string_lossy().starts_with("mcp_servers={"));
        std::fs::remove_dir_all(d).ok();
    }
}
