//! `fenzi mcp add`: writes one server into the `mcp:` section of `./fenzi.yaml` (or the machine
//! file with `--machine`), in one of three forms:
//!
//! ```text
//! fenzi mcp add NAME URL --tool T... | --all-tools [--deny T]... [--token]
//! fenzi mcp add NAME --tool T... | --all-tools [--deny T]... [--secret VAR]... [--host H]...
//!     [--machine --run host] -- CMD ARGS...
//! fenzi mcp add NAME --claude-account --tool T... | --all-tools [--deny T]...
//! ```
//!
//! Every form lists its tools: a command server is checked per tool behind fenzi's bridge
//! (DESIGN §18) like a remote one.
//!
//! The rest of the file is kept byte for byte ([`super::yaml_edit`]); the result is checked by the
//! policy loader, together with the other file, before it is written. A server that is already
//! there is an error unless `--replace` is given (which keeps its leading comment).

use super::entry::{Body, NewEntry};
use super::files::{FileArgs, Files, check_edit, parse_before, write_atomic};
use super::yaml_edit;
use anyhow::{Result, anyhow, bail};
use fenzi_policy::config::{stdio_host, stdio_url};
use fenzi_policy::secret_name::{is_valid_secret_name, reserved_reason, server_token_name};
use fenzi_policy::server_name::is_valid_server_name;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  fenzi mcp add deepwiki https://mcp.deepwiki.com/mcp --tool read_wiki_structure --tool read_wiki_contents
  fenzi mcp add linear https://mcp.linear.app/mcp --tool list_issues --deny delete_issue --token
  fenzi mcp add anything https://example.com/mcp --all-tools --deny drop_database
  fenzi mcp add files --tool read_text_file --tool list_directory -- npx -y @modelcontextprotocol/server-filesystem /sandbox
  fenzi mcp add droplets --tool droplet-list --secret DIGITALOCEAN_API_TOKEN --host api.digitalocean.com -- npx -y @digitalocean/mcp
  fenzi mcp add --machine keychain --all-tools --run host -- keychain-mcp
  fenzi mcp add claude-ai --claude-account --tool list_teams --tool list_issues

The entry goes into ./fenzi.yaml (--machine: $XDG_CONFIG_HOME/fenzi/mcp.yaml); the rest of the file is
kept as it is, comments included. Nothing is written unless the result is a valid policy.

A command server (after `--`) is started by fenzi in a sandbox of its own under `fenzi run` and
offered to the agent at http://NAME.stdio.fenzi.internal/mcp, checked per tool like a remote one;
its secrets exist only in its own sandbox and go to its --host list only. `--run host` runs it on
this machine outside any sandbox (still checked per tool); only the machine file may ask for that.")]
pub struct Args {
    /// The server's name (letters, digits, `_`, `.`, `-`; a command server's: letters, digits
    /// and `-`, as it becomes its address NAME.stdio.fenzi.internal).
    name: String,
    /// A remote server's URL (Streamable HTTP), checked per tool.
    url: Option<String>,
    /// A tool agents may call (repeat); globs with `*` are allowed.
    #[arg(long = "tool", value_name = "T")]
    tools: Vec<String>,
    /// Allow every tool the server has (`--deny` still wins).
    #[arg(long)]
    all_tools: bool,
    /// A tool agents may not call (repeat).
    #[arg(long = "deny", value_name = "T")]
    deny: Vec<String>,
    /// Put the stored token MCP_<NAME> on requests to this server (store it with `fenzi mcp token`).
    #[arg(long, conflicts_with = "oauth")]
    token: bool,
    /// The server signs in with OAuth: fenzi signs in on the host (`fenzi mcp login NAME`), keeps
    /// the tokens in the credential store and renews them; the agent gets a placeholder.
    #[arg(long)]
    oauth: bool,
    /// A command server: a variable it reads that holds a secret (repeat). It is set in the
    /// server's own sandbox only.
    #[arg(long = "secret", value_name = "VAR")]
    secrets: Vec<String>,
    /// A command server: a host it calls, and where its secrets may go (repeat).
    #[arg(long = "host", value_name = "H")]
    hosts: Vec<String>,
    /// A command server: where it runs. `sandbox` (the default) is a sandbox of its own; `host`
    /// runs it on this machine outside any sandbox, and only the machine file (--machine) may ask
    /// for it.
    #[arg(long, value_enum, value_name = "WHERE")]
    run: Option<Run>,
    /// Claude's account connectors (claude.ai), reached through one Anthropic host.
    #[arg(long)]
    claude_account: bool,
    /// Write to the machine file instead of ./fenzi.yaml.
    #[arg(long)]
    machine: bool,
    /// Replace the server if the file already has it.
    #[arg(long)]
    replace: bool,
    #[command(flatten)]
    files: FileArgs,
    /// A local server's command and arguments, after `--`.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Run {
    Sandbox,
    Host,
}

/// Turns the flags into the entry to write; every misuse is an error saying what to write.
fn entry(a: &Args) -> Result<NewEntry> {
    if !is_valid_server_name(&a.name) {
        bail!(
            "`{}` is not a server name: use letters, digits, `_`, `.` and `-`, starting with a \
             letter or digit (at most 64 characters)",
            a.name
        );
    }
    let forms = [a.url.is_some(), !a.command.is_empty(), a.claude_account];
    if forms.iter().filter(|f| **f).count() != 1 {
        bail!(
            "give exactly one of: a URL (remote server), a command after `--` (local server), or \
             --claude-account"
        );
    }
    let tools = |a: &Args| -> Result<Vec<String>> {
        match (a.tools.is_empty(), a.all_tools) {
            (false, true) => bail!("--tool and --all-tools do not go together"),
            (true, false) => bail!(
                "list the tools agents may call: --tool T (repeat it), or --all-tools to allow \
                 every tool"
            ),
            (true, true) => Ok(vec!["*".to_string()]),
            (false, false) => Ok(a.tools.clone()),
        }
    };
    if a.command.is_empty() && a.run.is_some() {
        bail!("--run applies to command servers (a command after `--`)");
    }
    if let Some(url) = &a.url {
        if !a.secrets.is_empty() || !a.hosts.is_empty() {
            bail!(
                "--secret and --host are for local servers; a remote server's token is \
                 --token (stored with `fenzi mcp token {}`)",
                a.name
            );
        }
        return Ok(NewEntry {
            name: a.name.clone(),
            body: Body::Remote {
                url: url.clone(),
                token: a.token,
                oauth: a.oauth,
                allow: tools(a)?,
                deny: a.deny.clone(),
            },
        });
    }
    if a.claude_account {
        if a.token || a.oauth || !a.secrets.is_empty() || !a.hosts.is_empty() {
            bail!(
                "Claude's account connectors use your Claude sign-in: --token, --oauth, --secret and \
                 --host do not apply"
            );
        }
        return Ok(NewEntry {
            name: a.name.clone(),
            body: Body::Account {
                account: "claude".into(),
                allow: tools(a)?,
                deny: a.deny.clone(),
            },
        });
    }
    if a.token || a.oauth {
        bail!(
            "a command server gets no token from fenzi: name the variables it reads with --secret \
             and the hosts they go to with --host"
        );
    }
    if !is_stdio_label(&a.name) {
        bail!(
            "`{}` cannot name a command server: its name becomes its address `{}`, so use letters, \
             digits and `-` (not first or last)",
            a.name,
            stdio_host(&a.name)
        );
    }
    let run_host = a.run == Some(Run::Host);
    if run_host && !a.machine {
        bail!(
            "--run host runs the server on this machine outside any sandbox, which only the \
             machine file may ask for: add --machine (a project file that could would let any \
             repository run a program on the host)"
        );
    }
    if !a.secrets.is_empty() && a.hosts.is_empty() {
        bail!("--secret needs --host: name the hosts the server sends the secret to");
    }
    for s in &a.secrets {
        if !is_valid_secret_name(s) {
            bail!("`{s}` is not a variable name: use upper-case letters, digits and `_`");
        }
        if let Some(why) = reserved_reason(s) {
            bail!("`{s}` cannot be a secret: {why}");
        }
    }
    Ok(NewEntry {
        name: a.name.clone(),
        body: Body::Local {
            command: a.command.clone(),
            secrets: a.secrets.clone(),
            hosts: a.hosts.clone(),
            run_host,
            allow: tools(a)?,
            deny: a.deny.clone(),
        },
    })
}

/// A command server's name is the first DNS label of its address: letters, digits, `-`.
fn is_stdio_label(name: &str) -> bool {
    name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

pub fn run(args: Args) -> Result<ExitCode> {
    let entry = entry(&args)?;
    let files = Files::read(&args.files)?;
    let target = files.target(args.machine)?;
    let before = parse_before(target)?;
    let name = target.name();

    let new_text = match &target.text {
        None => yaml_edit::add("version: 1\n", &name, &entry)?,
        Some(text) => match yaml_edit::find(text, &name, &entry.name)? {
            Some(line) if !args.replace => {
                return Err(anyhow!(
                    "server `{}` is already in {name} (line {line}); add --replace to overwrite \
                     it, or remove it first with `fenzi mcp remove {}{}`",
                    entry.name,
                    entry.name,
                    if args.machine { " --machine" } else { "" }
                ));
            }
            Some(_) => yaml_edit::replace(text, &name, &entry)?,
            None => yaml_edit::add(text, &name, &entry)?,
        },
    };
    check_edit(
        &files,
        target,
        &before,
        &new_text,
        &entry.name,
        Some(&entry.describe()),
    )?;
    write_atomic(target, &new_text)?;

    let verb =
        if target.text.is_some() && args.replace && before.mcp.iter().any(|s| s.name == entry.name)
        {
            "replaced"
        } else {
            "added"
        };
    let allow = match &entry.body {
        Body::Remote { allow, .. } | Body::Account { allow, .. } | Body::Local { allow, .. } => {
            allow
        }
    };
    let tools = if allow.iter().any(|t| t == "*") {
        "every tool allowed".to_string()
    } else if allow.len() == 1 {
        "1 tool allowed".to_string()
    } else {
        format!("{} tools allowed", allow.len())
    };
    let what = match &entry.body {
        Body::Local { run_host: true, .. } => format!("command server on the host, {tools}"),
        Body::Local { .. } => format!("command server, {tools}"),
        _ => tools,
    };
    let prep = if verb == "added" { "to" } else { "in" };
    println!("{verb} server `{}` {prep} {name} ({what})", entry.name);
    match &entry.body {
        Body::Remote { oauth: true, .. } => println!(
            "next: sign in with `fenzi mcp login {}` (fenzi keeps the tokens; the agent gets a placeholder)",
            entry.name
        ),
        Body::Remote { token: true, .. } => println!(
            "next: store its token with `fenzi mcp token {}` (kept as {})",
            entry.name,
            server_token_name(&entry.name)
        ),
        Body::Local { secrets, .. } => {
            println!(
                "agents reach it at {} under `fenzi run`",
                stdio_url(&entry.name)
            );
            for s in secrets {
                println!("next: store its secret with `fenzi mcp token {s}`");
            }
        }
        _ => {}
    }
    if allow.iter().any(|t| t == "*") {
        eprintln!(
            "warning: every tool of `{}` is allowed; list the ones agents need with --tool when \
             you know them",
            entry.name
        );
    }
    Ok(ExitCode::SUCCESS)
}
