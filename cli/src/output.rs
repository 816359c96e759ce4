//! Terminal conventions shared by every command: tracing to stderr (`RUST_LOG`, `-v`), and whether to
//! use colour (`NO_COLOR`, TTY detection). While `fenzi run`'s command runs, tracing goes to the
//! session's own log file instead ([`tracing_to_file`]): the terminal is the agent's.

use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Where tracing goes while a session has the terminal, and how much went there.
static SESSION_LOG: Mutex<Option<(File, PathBuf, u64)>> = Mutex::new(None);

/// Tracing's writer: the session log when one is set, else stderr.
struct TracingWriter;

impl Write for TracingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut log = SESSION_LOG.lock().unwrap_or_else(|e| e.into_inner());
        match log.as_mut() {
            Some((file, _, written)) => {
                let n = file.write(buf)?;
                *written += n as u64;
                Ok(n)
            }
            None => io::stderr().write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match SESSION_LOG
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            Some((file, _, _)) => file.flush(),
            None => io::stderr().flush(),
        }
    }
}

/// Opens the session's log file `path` (created private, appended to, never through a link: it may
/// lie where the agent can write, beside an `--audit` log), before the agent starts.
pub fn open_session_log(path: &Path) -> io::Result<std::fs::File> {
    let dir = fenzi_proxy::host_files::HostDir::of_file(path)?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    dir.open_append(name, fenzi_proxy::host_files::Opening::Existing)
}

/// Sends tracing to `file`, the session log at `path` ([`open_session_log`]), until
/// [`tracing_back_to_stderr`].
pub fn tracing_to_file(file: std::fs::File, path: &Path) {
    *SESSION_LOG.lock().unwrap_or_else(|e| e.into_inner()) = Some((file, path.to_path_buf(), 0));
}

/// A line for the person: in the session log while a session has the terminal (as tracing), else
/// on stderr.
pub fn note(line: &str) {
    let mut log = SESSION_LOG.lock().unwrap_or_else(|e| e.into_inner());
    match log.as_mut() {
        Some((file, _, written)) => {
            if writeln!(file, "{line}").is_ok() {
                *written += line.len() as u64 + 1;
            }
        }
        None => eprintln!("{line}"),
    }
}

/// Tracing goes to stderr again; returns the session log and how many bytes went there.
pub fn tracing_back_to_stderr() -> Option<(PathBuf, u64)> {
    SESSION_LOG
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .map(|(_, path, written)| (path, written))
}

/// Sets up tracing on stderr. `RUST_LOG` wins; otherwise `-v` raises the level from `warn` (with
/// local servers' stderr lines at `info`).
/// Colour only when stderr is a terminal, and never for `fenzi run`, whose tracing may go to a file.
pub fn init_tracing(verbose: u8, may_go_to_a_file: bool) {
    let default = match verbose {
        // Local servers' stderr (`fenzi::bridge`) is kept: it is what says why a server failed.
        0 => "warn,fenzi::bridge=info",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| TracingWriter)
        .with_ansi(colour_enabled_for_stderr() && !may_go_to_a_file)
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

/// Asks `question` on stderr and reads one line of stdin: true for `y` or `yes` (any case).
pub fn ask_yes(question: &str) -> io::Result<bool> {
    use std::io::BufRead;
    let mut err = io::stderr().lock();
    write!(err, "{question}")?;
    err.flush()?;
    let mut line = String::new();
    io::stdin().lock().read_line(&mut line)?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
}
