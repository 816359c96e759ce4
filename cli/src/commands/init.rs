//! `fenzi init [--agent X] [--dry-run]`: a first, commented `fenzi.yaml` for the folder it runs in.
//!
//! - The registries of the ecosystems the folder uses, found by their files
//!   (`fenzi_policy::ecosystems`, the one table of those hosts): `package.json`, `yarn.lock`,
//!   `pyproject.toml` or `requirements.txt`, `Cargo.toml`, `go.mod`, `pom.xml`, `build.gradle`...
//! - With `--agent`, the agent's model API key as a secret bound to its API host ([`MODELS`]):
//!   the agent holds a placeholder and fenzi puts the real key on that host only.
//! - The servers of `.mcp.json` and `.cursor/mcp.json`, brought in as `fenzi mcp import` does
//!   (the same plan, with its warnings and what it leaves out).
//!
//! The text is loaded with the machine file before it is written, so what `fenzi init` writes
//! passes `fenzi check`. It never overwrites: the file is created exclusively, and an existing
//! `fenzi.yaml` (or anything at that name, a link included) is left as it is (exit 1).
//! `--dry-run` prints the file and writes nothing.

use super::mcp::files::{FileArgs, Files, PolicyFile};
use super::mcp::import;
use super::mcp::render::Agent;
use crate::config_files;
use anyhow::{Context, Result, anyhow};
use fenzi_policy::config::Origin;
use fenzi_policy::ecosystems::{self, Found};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Each agent's model API: the host it sends the key to, the variable it reads the key from, and
/// what the comment says about it.
pub const MODELS: &[(Agent, &str, &str, &str)] = &[
    (
        Agent::Claude,
        "api.anthropic.com",
        "ANTHROPIC_API_KEY",
        "Claude Code's model API key",
    ),
    (
        Agent::Codex,
        "api.openai.com",
        "OPENAI_API_KEY",
        "Codex's OpenAI API key (signing in with ChatGPT instead needs chatgpt.com and auth.openai.com)",
    ),
    (
        Agent::Opencode,
        "api.anthropic.com",
        "ANTHROPIC_API_KEY",
        "OpenCode's model key, for Anthropic (another provider: its host and key variable instead)",
    ),
    (Agent::Grok, "api.x.ai", "XAI_API_KEY", "Grok's xAI API key"),
];

const MCP_SOURCES: &[&str] = &[".mcp.json", ".cursor/mcp.json"];

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Writes ./fenzi.yaml, commented, for the folder you are in:
  - the registry hosts of the package ecosystems it finds (package.json, yarn.lock, pyproject.toml
    or requirements.txt, Cargo.toml, go.mod, pom.xml, build.gradle, ...);
  - with --agent, the agent's model API key as a secret bound to its API host;
  - the MCP servers of .mcp.json and .cursor/mcp.json (as `fenzi mcp import` brings them in).
It never overwrites: when fenzi.yaml exists, nothing is written and the exit status is 1.

Examples:
  fenzi init --agent claude --dry-run    print what it would write
  fenzi init --agent claude              write it, then: fenzi mcp token ANTHROPIC_API_KEY
  fenzi init                             hosts and servers only")]
pub struct Args {
    /// The agent whose model API key the policy names (its host and variable).
    #[arg(long, value_enum, value_name = "AGENT")]
    agent: Option<Agent>,
    /// Print the file on stdout; write nothing.
    #[arg(long)]
    dry_run: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let path = PathBuf::from(config_files::DEFAULT_PROJECT_FILE);
    if path.symlink_metadata().is_ok() {
        eprintln!(
            "fenzi init: {} exists here; fenzi init never overwrites a policy. Edit it, or add \
             servers with `fenzi mcp add` and `fenzi mcp import`; `fenzi init --dry-run` prints \
             what init would have written",
            path.display()
        );
        return Ok(ExitCode::from(1));
    }
    let folder = std::env::current_dir().context("cannot read the current directory")?;
    let names = file_names(&folder)?;
    let found = ecosystems::detect(names.iter().map(String::as_str));
    let base = base_text(&folder, &found, args.agent);

    // The servers of .mcp.json, added to that text as `fenzi mcp import` adds them to a file.
    let files = Files::read(&FileArgs {
        config: path.clone(),
    })?;
    let target = PolicyFile {
        path: path.clone(),
        origin: Origin::Project,
        bytes: Some(base.clone().into_bytes()),
        text: Some(base.clone()),
    };
    let files = Files {
        project: target.clone(),
        machine: files.machine,
    };
    let merged = files
        .load()
        .map_err(|e| {
            anyhow!("{e}\nfenzi init would write a policy that does not load; nothing was written")
        })?
        .unwrap_or_default();
    let sources: Vec<PathBuf> = MCP_SOURCES
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect();
    let mut plan = import::make_plan(sources, &files, &target, &merged)?;
    if !plan.left_out.is_empty() {
        plan.text.push_str(&left_out_comment(&plan.left_out));
    }
    // What is written is what was checked: loaded with the machine file, as `fenzi check` does.
    files
        .load_with(Some((Origin::Project, &plan.text)))
        .map_err(|e| {
            anyhow!("{e}\nfenzi init would write a policy that does not load; nothing was written")
        })?;

    let mut notes = Vec::new();
    for f in &found {
        notes.push(format!(
            "{} ({}): {}",
            f.ecosystem.label,
            f.markers.join(", "),
            f.ecosystem.hosts.join(" ")
        ));
    }
    if found.is_empty() {
        notes.push(
            "no package ecosystem found here (package.json, pyproject.toml, Cargo.toml, go.mod, \
             ...): no registry hosts"
                .into(),
        );
    }
    for a in &plan.added {
        notes.push(format!(
            "MCP server {} from {} ({})",
            a.entry.name,
            a.source,
            import::summary(a)
        ));
        notes.extend(a.warnings.iter().map(|w| format!("  warning: {w}")));
    }
    for l in &plan.left_out {
        notes.push(format!(
            "left out MCP server {} from {}: {}",
            l.name, l.source, l.reason
        ));
        notes.extend(l.instead.iter().map(|i| format!("  instead: {i}")));
    }
    let mut next: Vec<String> = Vec::new();
    if let Some((_, _, key, _)) = args.agent.and_then(model) {
        next.push(format!("fenzi mcp token {key}"));
    }
    next.extend(plan.added.iter().flat_map(|a| a.next.iter().cloned()));

    if args.dry_run {
        print!("{}", plan.text);
        for n in &notes {
            eprintln!("fenzi init: {n}");
        }
        eprintln!("fenzi init: dry run: nothing was written");
        return Ok(ExitCode::SUCCESS);
    }
    write_new(&path, &plan.text)?;
    println!("wrote {}", path.display());
    for n in &notes {
        println!("  {n}");
    }
    for n in &next {
        println!("then run: {n}");
    }
    println!(
        "then run: fenzi run{}",
        args.agent
            .map(|a| format!(" --agent {}", agent_flag(a)))
            .unwrap_or_else(|| " -- $SHELL".into())
    );
    Ok(ExitCode::SUCCESS)
}

fn model(agent: Agent) -> Option<(Agent, &'static str, &'static str, &'static str)> {
    MODELS.iter().copied().find(|(a, ..)| *a == agent)
}

fn agent_flag(agent: Agent) -> &'static str {
    match agent {
        Agent::Claude => "claude",
        Agent::Codex => "codex",
        Agent::Opencode => "opencode",
        Agent::Grok => "grok",
    }
}

/// The names of the files in `folder` (not its subfolders).
fn file_names(folder: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in
        std::fs::read_dir(folder).with_context(|| format!("cannot list {}", folder.display()))?
    {
        let entry = entry.with_context(|| format!("cannot list {}", folder.display()))?;
        if let Some(name) = entry.file_name().to_str() {
            names.push(name.to_string());
        }
    }
    Ok(names)
}

/// The policy before the MCP servers: header, hosts, the agent's secret, and an empty `mcp:`
/// section last, where the servers go. Pure.
pub fn base_text(folder: &Path, found: &[Found], agent: Option<Agent>) -> String {
    let name: String = folder
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "/".into())
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    let mut t = String::new();
    t.push_str(&format!(
        "# fenzi policy for {name}, written by `fenzi init`.\n\
         # Inside `fenzi run` the agent reaches only what is listed here; everything else is refused\n\
         # and recorded (`fenzi log`). `fenzi check` validates this file.\n\
         version: 1\n\n"
    ));
    t.push_str(
        "# Hosts the agent may reach, passed through as they are: `name`, `*.suffix`, `name:port`\n\
         # (443 when no port is given).\n",
    );
    let mut written: Vec<&str> = Vec::new();
    let mut lines = String::new();
    for f in found {
        let new: Vec<&str> = f
            .ecosystem
            .hosts
            .iter()
            .copied()
            .filter(|h| !written.contains(h))
            .collect();
        if new.is_empty() {
            continue;
        }
        lines.push_str(&format!(
            "  # {} ({}): {}\n",
            f.ecosystem.label,
            f.markers.join(", "),
            f.ecosystem.why
        ));
        for h in new {
            lines.push_str(&format!("  - {h}\n"));
            written.push(h);
        }
    }
    if lines.is_empty() {
        t.push_str("hosts: []\n");
    } else {
        t.push_str("hosts:\n");
        t.push_str(&lines);
    }
    t.push('\n');
    match agent.and_then(model) {
        Some((_, host, key, what)) => {
            t.push_str(&format!(
                "# Secrets: the agent holds a placeholder in the variable of this name, and fenzi puts the\n\
                 # real value on requests to the secret's hosts only (which the agent may then reach).\n\
                 secrets:\n\
                 \x20 # {what}. Store it once: fenzi mcp token {key}\n\
                 \x20 {key}:\n\
                 \x20   hosts: [{host}]\n\n"
            ));
        }
        None => t.push_str(
            "# Secrets (e.g. the agent's model API key; `fenzi init --agent X` writes it):\n\
             # secrets:\n\
             #   ANTHROPIC_API_KEY:\n\
             #     hosts: [api.anthropic.com]\n\n",
        ),
    }
    t.push_str(
        "# MCP servers, checked tool by tool: `fenzi mcp add`, `fenzi mcp import`.\n\
         mcp: {}\n",
    );
    t
}

/// The servers of `.mcp.json` that were not brought in, as comments at the end of the file.
fn left_out_comment(left: &[import::LeftOut]) -> String {
    let one_line = |s: &str| s.replace(['\n', '\r'], " ");
    let mut t = String::from("\n# Left out of the MCP server lists here (add them yourself):\n");
    for l in left {
        t.push_str(&format!(
            "# - {} ({}): {}\n",
            one_line(&l.name),
            one_line(&l.source),
            one_line(&l.reason)
        ));
        if let Some(instead) = &l.instead {
            t.push_str(&format!("#   {}\n", one_line(instead)));
        }
    }
    t
}

/// Creates `path` with `text`, exclusively: never over an existing file or through a link.
fn write_new(path: &Path, text: &str) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> fenzi_policy::config::Config {
        fenzi_policy::config::load(None, Some((text, "fenzi.yaml")))
            .unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    #[test]
    fn the_base_text_loads_for_every_agent_and_ecosystem_mix() {
        let all = ecosystems::detect(
            ecosystems::ECOSYSTEMS
                .iter()
                .flat_map(|e| e.markers.iter().copied()),
        );
        for found in [vec![], all.clone()] {
            for agent in [
                None,
                Some(Agent::Claude),
                Some(Agent::Codex),
                Some(Agent::Opencode),
                Some(Agent::Grok),
            ] {
                let text = base_text(Path::new("/src/app"), &found, agent);
                let config = load(&text);
                assert_eq!(
                    config.hosts.len(),
                    ecosystems::hosts(&found).len(),
                    "{text}"
                );
                assert!(text.starts_with("# fenzi policy for app,"), "{text}");
            }
        }
    }

    #[test]
    fn the_agents_key_is_a_secret_bound_to_its_api_host() {
        let text = base_text(Path::new("/p"), &[], Some(Agent::Codex));
        assert!(
            text.contains("  OPENAI_API_KEY:\n    hosts: [api.openai.com]\n"),
            "{text}"
        );
        assert!(text.contains("fenzi mcp token OPENAI_API_KEY"), "{text}");
        let config = load(&text);
        assert_eq!(config.secrets.len(), 1);
        for agent in [Agent::Claude, Agent::Codex, Agent::Opencode, Agent::Grok] {
            assert!(model(agent).is_some(), "{agent:?} has no model API");
        }
    }
}
