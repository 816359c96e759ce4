//! `fenzi man --out DIR` (hidden; for packagers): writes the man pages, `fenzi.1` and one page per
//! subcommand (`fenzi-run.1`, `fenzi-mcp-add.1`, ...), from the clap definition, so the pages say
//! exactly what `--help` says.

use anyhow::{Context, Result};
use clap::Parser;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Write fenzi's man pages (roff) into a directory.
#[derive(Debug, Parser)]
pub struct Args {
    /// The directory to write the pages into (created when missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

pub fn run(args: Args, command: clap::Command) -> Result<ExitCode> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let mut written = 0;
    write_pages(&command, "fenzi", &args.out, &mut written)?;
    eprintln!("fenzi man: wrote {written} pages to {}", args.out.display());
    Ok(ExitCode::SUCCESS)
}

/// Writes `name.1` for `command`, then a page for each visible subcommand, named by its path.
fn write_pages(command: &clap::Command, name: &str, dir: &Path, written: &mut usize) -> Result<()> {
    let command = command.clone().name(name.to_owned());
    let mut page = Vec::new();
    clap_mangen::Man::new(command.clone())
        .render(&mut page)
        .with_context(|| format!("cannot render the page of `{name}`"))?;
    let path = dir.join(format!("{name}.1"));
    // Never through a link left where a page goes (the directory may be one others wrote).
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
        .and_then(|mut f| f.write_all(&page))
        .with_context(|| format!("cannot write {}", path.display()))?;
    *written += 1;
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        write_pages(sub, &format!("{name}-{}", sub.get_name()), dir, written)?;
    }
    Ok(())
}
