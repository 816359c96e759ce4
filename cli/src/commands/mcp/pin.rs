//! `fenzi mcp pin SERVER [--yes] [--json]`: reads the server's tools as a client does
//! ([`fenzi_proxy::outbound::tool_listing`]), shows how they differ from its lock entry field by field, and
//! on acceptance replaces the entry with the whole inventory listed now (a tool no longer listed
//! leaves the lock; a renamed tool is a new tool). The lock is the one beside the file that
//! declares the server: `fenzi.lock` for the project, `mcp.lock` for the machine file.
//!
//! The comparison is with what fenzi vouches for ([`fenzi_proxy::lock_file::trust`]). A lock no trust
//! record names (planted or edited by someone else, half-written, or from a fenzi that kept no
//! records) is unreviewed: the server's tools are all shown as new, and every other server's
//! entries in it are shown as unreviewed, since accepting records the whole lock as reviewed.
//! Accepting writes the lock in place and records its hash.
//!
//! Acceptance: `--yes`, or `y` at the prompt on a terminal. Without a terminal and without `--yes`
//! nothing is written and the exit is 1 when there is something to accept. Exit 0 when the lock
//! matches the server afterwards; 1 when it does not (declined, or the server could not be read);
//! 2 for usage and config errors.

use crate::config_files::PolicyArgs;
use crate::session::{self, upstream_roots};
use anyhow::{Context, Result, anyhow, bail};
use fenzi_policy::config::ServerKind;
use fenzi_policy::engine::Policy;
use fenzi_policy::json_text;
use fenzi_policy::pins::{self, FieldDiff, PinnedTool, ServerPins, ToolDiff};
use fenzi_policy::secret_name::server_token_name;
use fenzi_proxy::lock_file::{read_reviewed, write_lock};
use fenzi_proxy::outbound::tool_listing::{self, ListingTarget};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  fenzi mcp pin linear               show what changed and ask before pinning it
  fenzi mcp pin linear --yes         accept without asking (scripts, CI)
  fenzi mcp pin linear --json        the differences as JSON (add --yes to write them)

The server must have `pin: true` in the policy. Its token (token: true) comes from FENZI_SECRET_MCP_<NAME>,
else the credential store, as for `fenzi proxy`. The lock file is meant to be reviewed and committed.")]
pub struct Args {
    /// The server's name in the policy.
    server: String,
    /// Accept the differences without asking.
    #[arg(long, short = 'y')]
    yes: bool,
    /// Print the differences as one JSON document.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    policy: PolicyArgs,
    /// Extra root certificates (PEM) trusted for the server's TLS, beside the public roots.
    /// Repeatable.
    #[arg(long, value_name = "PEM")]
    upstream_ca: Vec<PathBuf>,
    /// How long each exchange with the server may take.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = session::parse_duration)]
    timeout: Duration,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let config = args.policy.load()?.result?;
    let Some(entry) = config.mcp.iter().find(|s| s.name == args.server) else {
        let names: Vec<&str> = config.mcp.iter().map(|s| s.name.as_str()).collect();
        bail!(
            "the policy has no MCP server named {:?} (servers: {})",
            args.server,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        );
    };
    let ServerKind::Remote { url, token, .. } = &entry.kind else {
        bail!(
            "{} is not a `url:` server; only remote servers are pinned with this command \
             (account connectors are pinned at first sight in a session)",
            entry.name
        );
    };
    if !entry.surface.pin {
        bail!(
            "{} does not have `pin: true` in {}; add it first, then pin",
            entry.name,
            entry.at.file
        );
    }
    let locks = args.policy.lock_files();
    let lock_path = locks
        .for_origin(entry.origin)
        .cloned()
        .ok_or_else(|| anyhow!("no lock file for the file that declares {}", entry.name))?;
    let Some(trust) = crate::config_files::lock_trust() else {
        bail!(
            "cannot find fenzi's state directory (neither XDG_STATE_HOME nor HOME is set), where \
             it records the locks a person accepted"
        );
    };
    // Read first: a broken lock is reported before the server is asked anything.
    let read = read_reviewed(&lock_path, Some(&trust))?;
    let reviewed = read.trusted();
    let mut lock = read.lock;
    let extra_roots = upstream_roots(&args.upstream_ca)?;
    let bearer = if *token {
        Some(token_value(&config, &entry.name)?)
    } else {
        None
    };

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let target = ListingTarget {
        url,
        bearer: bearer.as_deref().map(|b| b.as_str()),
        extra_roots: &extra_roots,
        timeout: args.timeout,
    };
    let listing = match runtime.block_on(tool_listing::list_tools(&target)) {
        Ok(listing) => listing,
        Err(e) => {
            eprintln!(
                "fenzi mcp pin: cannot read the tools of {}: {e}",
                entry.name
            );
            return Ok(ExitCode::from(1));
        }
    };
    let listed: ServerPins = listing
        .tools
        .iter()
        .map(|t| {
            let name = t.get("name").and_then(|n| n.as_str()).unwrap_or_default();
            (name.to_string(), PinnedTool::from_listed(t))
        })
        .collect();
    // An unreviewed lock vouches for nothing: this server's tools are compared with no entry, and
    // the other servers' entries are shown, since accepting vouches for them as they are.
    let before = lock.servers.get(&entry.name).filter(|_| reviewed);
    let diffs = pins::diff(before, &listed);
    let unreviewed: Vec<(&String, &ServerPins)> = if reviewed {
        Vec::new()
    } else {
        lock.servers
            .iter()
            .filter(|(name, _)| **name != entry.name)
            .collect()
    };
    let up_to_date = diffs.is_empty() && before.is_some();

    if args.json {
        // JSON mode never asks: --yes writes, otherwise it is a review.
        let write = args.yes && !up_to_date;
        let doc = json_doc(
            &entry.name,
            &lock_path,
            &listing.protocol_version,
            &listed,
            &diffs,
            (reviewed, &unreviewed),
            write,
        );
        if write {
            lock.servers.insert(entry.name.clone(), listed);
            write_lock(&lock_path, &lock, Some(&trust))?;
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("JSON values serialise")
        );
        return Ok(if up_to_date || write {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    if !reviewed {
        print_unreviewed(&lock_path, &unreviewed);
    }
    let note = if !reviewed {
        " (unreviewed: every tool is shown as new)"
    } else if before.is_none() {
        " (no entry yet)"
    } else {
        ""
    };
    print_text(
        &entry.name,
        &lock_path,
        &listed,
        &diffs,
        (before.is_some(), note),
    );
    if up_to_date {
        return Ok(ExitCode::SUCCESS);
    }
    let accepted = if args.yes {
        true
    } else if std::io::stdin().is_terminal() {
        let others = if unreviewed.is_empty() {
            String::new()
        } else {
            format!(
                " (and the unreviewed entries of {} shown above, as they are)",
                unreviewed
                    .iter()
                    .map(|(name, _)| name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        ask(&format!(
            "Pin these {} tools of {}{others} in {}? [y/N] ",
            listed.len(),
            entry.name,
            lock_path.display()
        ))?
    } else {
        eprintln!(
            "fenzi mcp pin: not a terminal, so not asking; run again with --yes to accept these differences"
        );
        false
    };
    if !accepted {
        eprintln!("fenzi mcp pin: nothing written");
        return Ok(ExitCode::from(1));
    }
    let count = listed.len();
    lock.servers.insert(entry.name.clone(), listed);
    write_lock(&lock_path, &lock, Some(&trust))?;
    println!(
        "pinned {count} tools of {} in {}",
        entry.name,
        lock_path.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The token of `server`, as `fenzi proxy` would load it; a missing one is an error naming the
/// secret and how to store it (never its value).
fn token_value(
    config: &fenzi_policy::config::Config,
    server: &str,
) -> Result<zeroize::Zeroizing<String>> {
    let name = server_token_name(server);
    let policy = Policy::from_config(config);
    let secrets = session::load_secrets(&policy)?;
    if let Some((_, _, value)) = secrets.set.iter().find(|(n, _, _)| *n == name) {
        return Ok(zeroize::Zeroizing::new(value.expose().to_string()));
    }
    let why = secrets
        .missing
        .iter()
        .find(|m| m.name == name)
        .map(|m| format!("{}; to give it one: {}", m.why, m.fix))
        .unwrap_or_else(|| format!("to give it one: fenzi mcp token {server}"));
    bail!("{server} needs its token {name}, which has no value: {why}")
}

fn ask(question: &str) -> Result<bool> {
    Ok(crate::output::ask_yes(question)?)
}

/// A field's text as shown: long texts are cut (the lock holds them whole), control characters
/// escaped so a definition cannot rewrite the terminal.
fn shown(text: &Option<String>) -> String {
    const MAX: usize = 400;
    match text {
        None => "(absent)".to_string(),
        Some(t) => {
            // Canonical JSON text is ASCII with control characters escaped; DEL is escaped here.
            let mut out: String = t
                .chars()
                .take(MAX)
                .map(|c| {
                    if c.is_control() {
                        c.escape_default().collect()
                    } else {
                        c.to_string()
                    }
                })
                .collect();
            if t.chars().count() > MAX {
                out.push_str(" …");
            }
            out
        }
    }
}

/// What an unreviewed lock says beyond the server being pinned: every other server's entries,
/// which accepting the lock vouches for as they are.
fn print_unreviewed(lock_path: &std::path::Path, others: &[(&String, &ServerPins)]) {
    println!(
        "{} is unreviewed: fenzi did not write it and no one accepted it with `fenzi mcp pin`, or \
         it changed since (a lock from before fenzi kept trust records has none). Until it is \
         accepted, sessions trust none of its entries.",
        lock_path.display()
    );
    for (server, pins) in others {
        println!("{server}: {} tools in the lock, unreviewed", pins.len());
        for (tool, pinned) in pins.iter() {
            println!("? {server}/{tool} (unreviewed; accepted as it is)");
            print_definition(pinned);
        }
    }
}

fn print_definition(tool: &PinnedTool) {
    for field in pins::DEFINITION_FIELDS {
        if let Some(v) = tool.definition.get(field) {
            println!("    {field}: {}", shown(&Some(json_text::canonical(v))));
        }
    }
}

fn print_text(
    server: &str,
    lock_path: &std::path::Path,
    listed: &ServerPins,
    diffs: &BTreeMap<String, ToolDiff>,
    (has_entry, note): (bool, &str),
) {
    println!(
        "{server}: {} tools listed; lock {}{note}",
        listed.len(),
        lock_path.display(),
    );
    if diffs.is_empty() {
        println!(
            "{}",
            if has_entry {
                "the lock matches what the server lists"
            } else {
                "the server lists no tools; pinning an empty inventory"
            }
        );
        return;
    }
    for (tool, diff) in diffs {
        match diff {
            ToolDiff::Added(now) => {
                println!("+ {tool} (new)");
                print_definition(now);
            }
            ToolDiff::Removed(_) => println!("- {tool} (no longer listed; leaves the lock)"),
            ToolDiff::Changed { fields, .. } => {
                println!("~ {tool} (changed)");
                for FieldDiff {
                    field,
                    pinned,
                    listed,
                } in fields
                {
                    println!("    {field}:");
                    println!("      pinned: {}", shown(pinned));
                    println!("      now:    {}", shown(listed));
                }
            }
        }
    }
}

fn json_doc(
    server: &str,
    lock_path: &std::path::Path,
    protocol_version: &str,
    listed: &ServerPins,
    diffs: &BTreeMap<String, ToolDiff>,
    (reviewed, unreviewed): (bool, &[(&String, &ServerPins)]),
    written: bool,
) -> serde_json::Value {
    let definition = |tool: &PinnedTool| {
        serde_json::from_str::<serde_json::Value>(&json_text::canonical(&tool.definition))
            .unwrap_or_default()
    };
    let changes: Vec<_> = diffs
        .iter()
        .map(|(tool, diff)| match diff {
            ToolDiff::Added(now) => serde_json::json!({
                "tool": tool, "change": "added", "sha256": now.sha256,
                "definition": definition(now),
            }),
            ToolDiff::Removed(before) => serde_json::json!({
                "tool": tool, "change": "removed", "pinned_sha256": before.sha256,
            }),
            ToolDiff::Changed {
                pinned,
                listed,
                fields,
            } => serde_json::json!({
                "tool": tool, "change": "changed",
                "pinned_sha256": pinned.sha256, "sha256": listed.sha256,
                "fields": fields.iter().map(|f| serde_json::json!({
                    "field": f.field, "pinned": f.pinned, "now": f.listed,
                })).collect::<Vec<_>>(),
            }),
        })
        .collect();
    serde_json::json!({
        "server": server,
        "lock": lock_path.display().to_string(),
        "protocol_version": protocol_version,
        "tools": listed.keys().collect::<Vec<_>>(),
        "changes": changes,
        "lock_reviewed": reviewed,
        "unreviewed": unreviewed
            .iter()
            .flat_map(|(server, pins)| pins.iter().map(move |(tool, p)| serde_json::json!({
                "server": server, "tool": tool, "sha256": p.sha256, "definition": definition(p),
            })))
            .collect::<Vec<_>>(),
        "written": written,
    })
}
