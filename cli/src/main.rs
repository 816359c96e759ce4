//! The `fenzi` command line: parses arguments (clap), sets up tracing, and hands each subcommand to its
//! module under `commands/`. Exit codes: 0 success, 1 a policy failure or denial the user asked about,
//! 2 a usage or config error.

mod commands;
mod config_files;
mod output;
mod reload;
mod session;
mod team;

/// mimalloc's thread-local free lists suit the proxy's many short-lived small allocations better
/// than glibc malloc (docs/benchmarks.md has the numbers).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

/// `fenzi --version`: the version, the commit and how it was built (see build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("FENZI_COMMIT"),
    ", ",
    env!("FENZI_BUILD"),
    ")"
);

/// fenzi: an egress proxy and sandbox for AI coding agents, with per-tool MCP policy.
#[derive(Debug, Parser)]
#[command(name = "fenzi", version = VERSION, about, long_about = None, propagate_version = true, term_width = 0)]
struct Cli {
    /// More tracing on stderr (-v info, -vv debug, -vvv trace). `RUST_LOG` overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write a first, commented fenzi.yaml for this folder (its registries, agent key, MCP servers).
    Init(commands::init::Args),
    /// Validate the policy and run expected-decision cases against it (for CI).
    Check(commands::check::Args),
    /// Run the standalone egress proxy.
    Proxy(commands::proxy::Args),
    /// Run a command (an agent) in a sandbox whose only way out is the proxy.
    Run(commands::run::Args),
    /// Show, filter, follow or verify the audit log.
    Log(commands::log::Args),
    /// Manage the MCP servers in the policy and the secrets they need.
    Mcp(commands::mcp::Args),
    /// Allow a tool a session was denied: exactly that tool, on exactly that server.
    Approve(commands::approve::Args),
    // Their help is their `Args`' doc comment (a variant's would replace the long help).
    Doctor(commands::doctor::Args),
    Completions(commands::completions::Args),
    #[command(hide = true)]
    Man(commands::manual::Args),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout with exit 0, usage errors to stderr with exit 2.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    output::init_tracing(cli.verbose, matches!(cli.command, Command::Run(_)));
    if !matches!(cli.command, Command::Proxy(_) | Command::Run(_)) {
        // Commands that print listings end quietly when the reader goes away (`fenzi log | head`).
        // Not for the proxy: a peer closing a socket must never kill it.
        sigpipe::reset();
    }
    let result = match cli.command {
        Command::Init(args) => commands::init::run(args),
        Command::Check(args) => commands::check::run(args),
        Command::Proxy(args) => commands::proxy::run(args),
        Command::Log(args) => commands::log::run(args),
        Command::Mcp(args) => commands::mcp::run(args),
        Command::Run(args) => commands::run::run(args),
        Command::Approve(args) => commands::approve::run(args),
        Command::Doctor(args) => commands::doctor::run(args),
        Command::Completions(args) => commands::completions::run(args, Cli::command()),
        Command::Man(args) => commands::manual::run(args, Cli::command()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fenzi: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
