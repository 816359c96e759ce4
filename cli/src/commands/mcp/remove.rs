//! `fenzi mcp remove NAME [--machine]`: removes one server's lines from `./fenzi.yaml` (or the
//! machine file), with the comment lines directly above it at its indentation; every other byte
//! stays. The result is checked by the policy loader before it is written. A stored token is not
//! deleted (other folders may use it): the command says how to delete it.

use super::files::{FileArgs, Files, check_edit, parse_before, write_atomic};
use super::yaml_edit;
use anyhow::{Result, bail};
use fenzi_policy::config::ServerKind;
use fenzi_policy::secret_name::server_token_name;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The server to remove.
    name: String,
    /// Remove it from the machine file instead of ./fenzi.yaml.
    #[arg(long)]
    machine: bool,
    #[command(flatten)]
    files: FileArgs,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let files = Files::read(&args.files)?;
    let target = files.target(args.machine)?;
    let name = target.name();
    let Some(text) = &target.text else {
        bail!(
            "{name} does not exist; there is no server `{}` to remove",
            args.name
        );
    };
    let before = parse_before(target)?;
    let Some(server) = before.mcp.iter().find(|s| s.name == args.name) else {
        let other = files.target(!args.machine).ok().and_then(|f| {
            f.text.as_ref().and_then(|t| {
                yaml_edit::find(t, &f.name(), &args.name)
                    .ok()
                    .flatten()
                    .map(|_| f.name())
            })
        });
        match other {
            Some(f) => bail!(
                "there is no server `{}` in {name}; it is in {f}{}",
                args.name,
                if args.machine { "" } else { " (add --machine)" }
            ),
            None => bail!("there is no server `{}` in {name}", args.name),
        }
    };
    let oauth = matches!(&server.kind, ServerKind::Remote { oauth: true, .. });
    let token = match &server.kind {
        ServerKind::Remote { token: true, .. } => Some(server_token_name(&server.name)),
        _ => None,
    };
    let new_text = yaml_edit::remove(text, &name, &args.name)?;
    check_edit(&files, target, &before, &new_text, &args.name, None)?;
    write_atomic(target, &new_text)?;
    println!("removed server `{}` from {name}", args.name);
    if oauth {
        println!(
            "its sign-in is still in the credential store; end it first with `fenzi mcp logout {}` \
             (run before removing, while the policy still names its authorization server), or \
             delete the tokens with `fenzi mcp token {} --delete`",
            args.name,
            token.as_deref().unwrap_or_default()
        );
    } else if let Some(t) = token {
        println!(
            "its token {t} is still in the credential store; delete it with `fenzi mcp token {t} --delete`"
        );
    }
    Ok(ExitCode::SUCCESS)
}
