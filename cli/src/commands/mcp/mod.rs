//! `fenzi mcp`: the MCP servers in the policy (README, `fenzi mcp`) and the secrets they need.
//! One module per subcommand (`add`, `token`, `login`, `logout`, `list`, `remove`, `import`,
//! `render`, `pin`), with the
//! shared pieces beside them: `enforced` (what the proxy enforces beyond tool names, for listings),
//! `bindings` (every secret's hosts, a command server's own included),
//! `entry` (an entry to write), `yaml_edit` (byte-preserving edits of
//! the `mcp:` section), `files` (the two policy files, checked edits, atomic writes).

pub mod add;
pub mod bindings;
pub mod enforced;
pub mod entry;
pub mod files;
pub mod import;
pub mod list;
pub mod login;
pub mod logout;
pub mod pin;
pub mod remove;
pub mod render;
pub mod token;
pub mod yaml_edit;

use anyhow::Result;
use clap::Subcommand;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Add a server to ./fenzi.yaml (or the machine file with --machine).
    Add(add::Args),
    /// Store a server's token or a secret in the OS credential store (or delete it).
    Token(token::Args),
    /// Sign in to an `oauth: true` server on this machine; the tokens stay in the credential store.
    Login(login::Args),
    /// End an `oauth: true` server's sign-in: revoke where supported, remove the tokens.
    Logout(logout::Args),
    /// List the servers agents get here, where each comes from, and whether its secrets are stored.
    List(list::Args),
    /// Remove a server from ./fenzi.yaml (or the machine file with --machine).
    Remove(remove::Args),
    /// Import the servers of .mcp.json or .cursor/mcp.json.
    Import(import::Args),
    /// Print the MCP configuration an agent is given, in its own format.
    Render(render::cli::Args),
    /// Read a pinned server's tools, show how they differ from its lock entry, and pin them.
    Pin(pin::Args),
}

pub fn run(args: Args) -> Result<ExitCode> {
    match args.command {
        Command::Add(a) => add::run(a),
        Command::Token(a) => token::run(a),
        Command::List(a) => list::run(a),
        Command::Login(a) => login::run(a),
        Command::Logout(a) => logout::run(a),
        Command::Remove(a) => remove::run(a),
        Command::Import(a) => import::run(a),
        Command::Render(a) => render::cli::run(a),
        Command::Pin(a) => pin::run(a),
    }
}
