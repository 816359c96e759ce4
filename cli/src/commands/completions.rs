//! `fenzi completions SHELL`: the shell completion script, generated from the same clap
//! definition that parses the command line.

use anyhow::Result;
use clap::Parser;
use clap_complete::Shell;
use std::process::ExitCode;

/// Print the completion script for a shell.
///
/// The script completes subcommands, flags and their fixed values. Install it where your shell
/// looks (the .deb does this for bash, zsh and fish):
///
///   bash:  fenzi completions bash > ~/.local/share/bash-completion/completions/fenzi
///   zsh:   fenzi completions zsh > ~/.zfunc/_fenzi   (with `fpath+=~/.zfunc` before compinit)
///   fish:  fenzi completions fish > ~/.config/fish/completions/fenzi.fish
#[derive(Debug, Parser)]
pub struct Args {
    /// The shell: bash, zsh, fish, elvish or powershell.
    shell: Shell,
}

pub fn run(args: Args, mut command: clap::Command) -> Result<ExitCode> {
    clap_complete::generate(args.shell, &mut command, "fenzi", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}
