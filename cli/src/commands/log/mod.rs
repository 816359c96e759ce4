//! `fenzi log`: shows, filters, follows and verifies the audit log (README, `fenzi log`).
//!
//! This module owns the arguments and the dispatch; the work is in one file per concept: `locate`
//! (finding the log: `--file`, `--session`, or the newest in the state directory), `filter` (which
//! records are shown), `render` (a record as a line for a person), `show` (printing and `--follow`),
//! and `verify` (`--verify`: the hash chain and the head file, through `fenzi_policy::audit::verify`),
//! `export_status` (`--export-status`: how far the `--otlp` export has got), and `ship` (`--otlp`:
//! ship what a finished log's cursor lacks).
//! It never writes to the log.
//!
//! Times are shown in UTC, the zone the log stores, so a line can be matched with its record; the date is
//! added when the records shown span more than one day. Every field taken from a record is rendered so
//! that a hostile host, path or tool name cannot forge or hide text on the reader's terminal.

mod export_status;
mod filter;
mod locate;
mod ocsf;
pub(crate) mod render;
mod ship;
mod show;
#[cfg(test)]
mod test_records;
mod verify;

pub(crate) use locate::{find_log, parse_session_id};

use fenzi_policy::tool_pattern::ToolPattern;
use filter::{Filter, ProgramFilter, Since, now_ms, parse_program, parse_since, parse_tool};
use locate::{locate, session_logs_since};
use show::{Format, show};
use std::io;
use std::path::PathBuf;
use std::process::ExitCode;
use verify::verify_file;

const EXAMPLES: &str = "\
Examples:
  fenzi log                          the newest session's log, one line per decision
  fenzi log --denied --since 1h      what was refused in the last hour, in every session
  fenzi log --server deepwiki --tool 'read_*'
  fenzi log --program /usr/bin/curl --denied     what curl inside the sandbox was refused
  fenzi log --session a1b2c3 --follow
  fenzi log --file audit.jsonl --json | jq .reason
  fenzi log --file audit.jsonl --verify
  fenzi log --session a1b2c3 --denied --ocsf     OCSF 1.8.0 events for a SIEM, one per line
  fenzi log --export-status          how far each exported log's --otlp export has got
  fenzi log --session a1b2c3 --otlp http://127.0.0.1:4318/v1/logs
                                     ship what that finished log's export left behind

Output:
  13:33:38 allowed POST mcp.deepwiki.com/mcp tools/call read_wiki_structure
  13:33:50 denied  POST mcp.deepwiki.com/mcp tools/call read_wiki_contents  policy_denied
    fenzi approve --yes deepwiki/read_wiki_contents
  13:34:02 allowed CONNECT github.com:443 by /usr/bin/git
  Times are UTC; the date is shown when the records span days. Text that is not plain ASCII is
  quoted, with control and invisible characters escaped. Under a tool call the policy refused, an
  indented line says what to do: the `fenzi approve` line that allows it, or the deny rule.
  Under `fenzi run`, `by` names the program inside the sandbox that made the connection when it
  is not the agent (`+N`: N more processes held the socket); the agent's own lines have none.

Logs live in $XDG_STATE_HOME/fenzi/audit/<session>.jsonl (default ~/.local/state/fenzi/audit).
--verify exits 0 when every record's hash chain is intact and the head file (<log>.head) matches,
1 naming the first broken record otherwise (a record edited, dropped or reordered, or the log cut
short). Exit 2: usage error, or no log found.
--export-status prints, per log, the last seq written and the last seq the OTLP receiver
acknowledged (<log>.otlp-cursor), e.g.
  /var/log/fenzi/audit.jsonl: written up to seq 50, acknowledged up to seq 43: 7 behind";

/// Show, filter, follow or verify the audit log.
#[derive(Debug, clap::Args)]
#[command(
    about = "Show, filter, follow or verify the audit log",
    long_about = "Show, filter, follow or verify the audit log: one line per decision the proxy made \
                  (each CONNECT, each plain HTTP request, each request inside an intercepted tunnel). \
                  Filters combine: a record is shown only when it matches all of them.",
    after_help = EXAMPLES
)]
pub struct Args {
    /// Read this log file.
    #[arg(long, value_name = "FILE", conflicts_with = "session")]
    pub file: Option<PathBuf>,
    /// Read the log of this session (<state dir>/fenzi/audit/<ID>.jsonl). Default: the newest log,
    /// or with --denied, --server, --tool or --since every session's log they may match.
    #[arg(long, value_name = "ID", value_parser = parse_session_id)]
    pub session: Option<String>,
    /// Only denied requests.
    #[arg(long)]
    pub denied: bool,
    /// Only requests to this MCP server (its name in the policy).
    #[arg(long, value_name = "S")]
    pub server: Option<String>,
    /// Only tool calls of this tool: an exact name, or a glob with `*`.
    #[arg(long, value_name = "T", value_parser = parse_tool)]
    pub tool: Option<ToolPattern>,
    /// Only connections of this program inside the sandbox: its executable's absolute path as
    /// the records name it (`/usr/bin/curl`), or `agent` for the agent's own process. A
    /// connection several processes held matches when any of them does.
    #[arg(long, value_name = "PATH|agent", value_parser = parse_program)]
    pub program: Option<ProgramFilter>,
    /// Only records from the last DUR (`90s`, `10m`, `2h`, `1d`, `1h30m`), or since a UTC time
    /// (`2026-11-29T13:00:00Z`).
    #[arg(long, value_name = "DUR", value_parser = parse_since)]
    pub since: Option<Since>,
    /// Keep printing records as they are written (Ctrl-C stops).
    #[arg(long, short = 'f', conflicts_with = "verify")]
    pub follow: bool,
    /// Print the matching records as JSON Lines, exactly as stored.
    #[arg(long, conflicts_with = "verify")]
    pub json: bool,
    /// Print the matching records as OCSF 1.8.0 events, one JSON object per line: 4002 HTTP
    /// Activity, 6003 API Activity for JSON-RPC decisions (docs/ocsf.md has the mapping).
    #[arg(long, conflicts_with_all = ["verify", "json"])]
    pub ocsf: bool,
    /// Check the hash chain and the head file; exit 1 naming the first broken record.
    #[arg(long, conflicts_with_all = ["denied", "server", "tool", "since", "program"])]
    pub verify: bool,
    /// How far the `--otlp` export has got: per log, the last seq written and the last seq
    /// acknowledged (every exported log in the state directory, or the one --file/--session names).
    #[arg(long, conflicts_with_all = ["denied", "server", "tool", "since", "program", "follow", "verify"])]
    pub export_status: bool,
    #[command(flatten)]
    pub ship: ship::ShipArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.export_status {
        let (file, session) = (args.file.as_deref(), args.session.as_deref());
        return export_status::run(file, session, args.json);
    }
    // Filters without a log named read every session's log they may match, oldest first.
    let filtered = args.denied
        || args.server.is_some()
        || args.tool.is_some()
        || args.since.is_some()
        || args.program.is_some();
    if filtered && args.file.is_none() && args.session.is_none() && !args.follow {
        let filter = Filter::new(&args, now_ms());
        let colour =
            Format::of(&args) == Format::Lines && crate::output::colour_enabled_for_stdout();
        let logs = session_logs_since(filter.since_ms)?;
        let dates = logs.len() > 1;
        for log in logs {
            match show(&log, &filter, Format::of(&args), colour, false, dates) {
                Err(e) if is_broken_pipe(&e) => return Ok(ExitCode::SUCCESS),
                other => other?,
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let path = locate(&args)?;
    if let Some(endpoint) = args.ship.otlp.clone() {
        return ship::run(&path, endpoint, &args.ship);
    }
    if args.verify {
        let outcome = verify_file(&path)?;
        println!("{}", outcome.message);
        return Ok(if outcome.ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    let filter = Filter::new(&args, now_ms());
    let colour = Format::of(&args) == Format::Lines && crate::output::colour_enabled_for_stdout();
    match show(
        &path,
        &filter,
        Format::of(&args),
        colour,
        args.follow,
        false,
    ) {
        Err(e) if is_broken_pipe(&e) => Ok(ExitCode::SUCCESS),
        other => other.map(|()| ExitCode::SUCCESS),
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<io::Error>()
        .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
}
