//! `fenzi approve`: turns a session's denied tool calls into policy, one tool on one server per
//! answer (README, `fenzi approve`). It reads the session's audit log (`denials`), lists the
//! distinct (server, tool) pairs denied as `policy_denied`, decides for each what approving it
//! would mean under the current policy (`plan`: refused, nothing to do, or which file's `allow`
//! gets the name), asks y/N on a terminal or takes `--yes SERVER/TOOL`, and adds exactly the
//! accepted name with a checked, byte-preserving edit (`allow_edit`).
//!
//! Exit codes: 0 when every pair asked for is allowed now (added, or already there) or the person
//! declined; 1 when a pair was refused, or when there is something to accept but no terminal and
//! no `--yes`; 2 for usage and config errors.

mod allow_edit;
mod denials;
mod plan;

use crate::commands::log::{find_log, parse_session_id, render::field};
use crate::commands::mcp::files::{Files, PolicyFile};
use crate::config_files::PolicyArgs;
use anyhow::{Result, bail};
use fenzi_policy::config::Origin;
use fenzi_policy::server_name::is_valid_server_name;
use plan::Plan;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
#[command(
    about = "Allow a tool a session was denied: exactly that tool, on exactly that server",
    after_help = "\
Examples:
  fenzi approve                                  list the newest session's denied tools, ask y/N for each
  fenzi approve --json                           the list as JSON, nothing written
  fenzi approve --yes linear/list_issues         allow list_issues on linear (scripts; repeatable)
  fenzi approve --session a1b2c3 --yes deepwiki/read_wiki_contents
  fenzi approve --file audit.jsonl --config ci/fenzi.yaml --no-machine --yes tracker/get_issue
  fenzi approve --watch                          answer the calls `confirm:` holds, as they come
  printf 'y\\nn\\n' | fenzi approve --watch       scripts: one y or n line per held call, in order

Reads the session's audit log, lists each tool the policy refused, by server, and for each one you
accept adds exactly that tool name to that server's tools.allow, in the file that declares the
server; comments and layout are kept, and the result is re-read by the policy loader before it is
written. Never a glob, never a whole server. Refused: a tool the server lists under `deny` (that was
a choice), a name that is not a plain tool name, a pair the session was not denied, an edit that
would not load, and widening a machine server from a project file.
A denied call's JSON-RPC error (data.hint) and `fenzi log` show the exact `fenzi approve --yes` line.

Where the name goes: a server declared in ./fenzi.yaml gets it there; a machine server
($XDG_CONFIG_HOME/fenzi/mcp.yaml) gets it in the machine file, unless the project file narrows that
server: then the project's allow is the one in force, and the name goes there only if the machine
file allows it already.
Exit: 0 done (or nothing to do, or declined); 1 a pair was refused, or no terminal and no --yes;
2 usage or config error."
)]
pub struct Args {
    /// Read this audit log.
    #[arg(long, value_name = "FILE", conflicts_with = "session")]
    file: Option<PathBuf>,
    /// Read the log of this session (<state dir>/fenzi/audit/<ID>.jsonl). Default: the newest.
    #[arg(long, value_name = "ID", value_parser = parse_session_id)]
    session: Option<String>,
    /// Print the denied (server, tool) pairs as a JSON array and write nothing.
    #[arg(long, conflicts_with = "yes")]
    json: bool,
    /// Answer the calls a `confirm:` policy holds, in every running session (or --session's),
    /// as they come: y or n on a terminal, one `y`/`n` line per held call from a pipe.
    #[arg(long, conflicts_with_all = ["json", "yes", "file"])]
    watch: bool,
    /// Allow TOOL on SERVER without asking (repeat for more). The pair must be one the session
    /// was denied.
    #[arg(long, short = 'y', value_name = "SERVER/TOOL", value_parser = parse_pair)]
    yes: Vec<(String, String)>,
    #[command(flatten)]
    policy: PolicyArgs,
}

fn parse_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((server, tool)) if is_valid_server_name(server) && !tool.is_empty() => {
            Ok((server.to_string(), tool.to_string()))
        }
        _ => Err(
            "write SERVER/TOOL, e.g. linear/list_issues (the server's name in the policy, \
                  then the tool's name)"
                .into(),
        ),
    }
}

/// The two policy files, as `--config`, `--machine` and `--no-machine` name them.
fn read_files(p: &PolicyArgs) -> Result<Files> {
    let project = PolicyFile::read(&p.config, Origin::Project)?;
    if project.text.is_none() {
        bail!(
            "{} does not exist; pass --config FILE for the policy the session used",
            p.config.display()
        );
    }
    let machine = match p.machine_path() {
        Some(path) => {
            let f = PolicyFile::read(&path, Origin::Machine)?;
            if f.text.is_none() && p.machine.is_some() {
                bail!("cannot read {}: no such file", path.display());
            }
            Some(f)
        }
        None => None,
    };
    Ok(Files { project, machine })
}

fn ask(question: &str) -> Result<bool> {
    Ok(crate::output::ask_yes(question)?)
}

fn times(n: u64) -> String {
    if n == 1 {
        "once".into()
    } else {
        format!("{n} times")
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    if args.watch {
        return crate::commands::approve_watch::run(crate::commands::approve_watch::WatchArgs {
            session: args.session,
        });
    }
    let log = find_log(args.file.as_deref(), args.session.as_deref())?;
    let session = denials::read(&log)?;
    if session.unreadable > 0 {
        eprintln!(
            "fenzi approve: {} line(s) of {} are not audit records and were skipped; check it \
             with `fenzi log --file {} --verify`",
            session.unreadable,
            log.display(),
            log.display()
        );
    }
    if args.json {
        let list: Vec<_> = session
            .denied
            .iter()
            .map(|d| {
                serde_json::json!({
                    "server": d.server, "tool": d.tool, "count": d.count,
                    "first_seen": d.first_seen,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&list).expect("JSON values serialise")
        );
        return Ok(ExitCode::SUCCESS);
    }

    let mut files = read_files(&args.policy)?;
    let id = session
        .id
        .as_deref()
        .map(field)
        .unwrap_or_else(|| "?".into());
    let mut refused = false;

    // The pairs to act on: those named with --yes (each must be one the session was denied), or
    // every denied pair, asked about one by one.
    let scripted = !args.yes.is_empty();
    let mut todo: Vec<(String, String, bool)> = Vec::new();
    if scripted {
        for (server, tool) in &args.yes {
            if session
                .denied
                .iter()
                .any(|d| &d.server == server && &d.tool == tool)
            {
                todo.push((server.clone(), tool.clone(), true));
            } else {
                eprintln!(
                    "fenzi approve: {}/{}: refused: session {id} ({}) has no denied call of it; \
                     approve adds only tools a session was refused (see `fenzi approve` for the \
                     list, or --session ID for another session)",
                    field(server),
                    field(tool),
                    log.display()
                );
                refused = true;
            }
        }
    } else {
        if session.denied.is_empty() {
            println!(
                "session {id}: no tool calls were denied by the policy (log {})",
                log.display()
            );
            return Ok(ExitCode::SUCCESS);
        }
        let config = files.load()?.expect("the project file exists");
        println!(
            "session {id}: {} tool(s) denied by the policy (log {})",
            session.denied.len(),
            log.display()
        );
        let mut open = 0;
        for d in &session.denied {
            println!(
                "  {}/{}: denied {}, first at {}",
                field(&d.server),
                field(&d.tool),
                times(d.count),
                field(&d.first_seen)
            );
            match plan::plan(&files, &config, &d.server, &d.tool, &d.rules)? {
                Plan::Add { file, note, .. } => {
                    open += 1;
                    println!("    not allowed; approving adds it to its tools.allow in {file}");
                    if let Some(n) = note {
                        println!("    note: {n}");
                    }
                    println!("    fenzi approve --yes {}/{}", d.server, d.tool);
                }
                Plan::Nothing(why) => println!("    {why}"),
                Plan::Refused(why) => println!("    approve will not: {why}"),
            }
        }
        if open == 0 {
            return Ok(ExitCode::SUCCESS);
        }
        if !std::io::stdin().is_terminal() {
            eprintln!(
                "fenzi approve: not a terminal, so not asking; nothing written: run again with \
                 --yes SERVER/TOOL for each tool to allow"
            );
            return Ok(ExitCode::from(1));
        }
        for d in &session.denied {
            if let Plan::Add { file, .. } =
                plan::plan(&files, &config, &d.server, &d.tool, &d.rules)?
            {
                let yes = ask(&format!(
                    "Allow {} on {} (adds it to {}'s tools.allow in {file})? [y/N] ",
                    d.tool, d.server, d.server
                ))?;
                todo.push((d.server.clone(), d.tool.clone(), yes));
            }
        }
    }

    for (server, tool, accepted) in todo {
        if !accepted {
            println!("not approved: {server}/{tool}");
            continue;
        }
        // The files as they are now: an earlier answer may have edited one of them.
        files = read_files(&args.policy)?;
        let config = files.load()?.expect("the project file exists");
        let rules = session
            .denied
            .iter()
            .find(|d| d.server == server && d.tool == tool)
            .map(|d| d.rules.clone())
            .unwrap_or_default();
        let pair = format!("{}/{}", field(&server), field(&tool));
        match plan::plan(&files, &config, &server, &tool, &rules)? {
            Plan::Refused(why) => {
                eprintln!("fenzi approve: {pair}: refused: {why}");
                refused = true;
            }
            Plan::Nothing(why) => println!("{pair}: {why}"),
            Plan::Add { origin, note, .. } => match plan::apply(&files, origin, &server, &tool) {
                Ok(file) => {
                    println!("added {tool} to {server}'s tools.allow in {file}");
                    if let Some(n) = note {
                        println!("note: {n}");
                    }
                }
                Err(e) => {
                    eprintln!("fenzi approve: {pair}: refused: {e:#}");
                    refused = true;
                }
            },
        }
    }
    Ok(if refused {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
