//! Terminal conventions shared by every command: tracing to stderr (`RUST_LOG`, `-v`), and whether to
//! use colour (`NO_COLOR`, TTY detection).

use std::io::IsTerminal;

/// Sets up tracing on stderr. `RUST_LOG` wins; otherwise `-v` raises the level from `warn`.
pub fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour_enabled_for_stderr())
        .try_init();
}

fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// Colour on stdout only on a terminal and without `NO_COLOR`.
pub fn colour_enabled_for_stdout() -> bool {
    !no_color() && std::io::stdout().is_terminal()
}

pub fn colour_enabled_for_stderr() -> bool {
    !no_color() && std::io::stderr().is_terminal()
}
