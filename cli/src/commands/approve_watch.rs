//! `fenzi approve --watch`: the person's side of `tools.confirm`. It connects to the control socket of every
//! session in the control directory (`$XDG_RUNTIME_DIR/fenzi/`, see `fenzi_proxy::confirm`), or
//! of the one `--session` names, picks up sessions that start while it watches, shows each held
//! call (session, server, tool, arguments cut at 2 KiB, the rule, the seconds left) and sends the
//! person's answer.
//!
//! - On a terminal it asks `allow? [y/n]` for each held call in turn; a call that is withdrawn
//!   meanwhile (it timed out, another watcher answered, its client went away) is said to be gone.
//! - When standard input is not a terminal it reads one `y` or `n` line per held call, in the
//!   order the calls are shown, so scripts and tests can answer; it ends once those lines are
//!   used up (calls still held then time out). Any other line is an error (exit 2).
//!
//! Nothing secret is shown: the arguments are what the agent sent, with its placeholders as
//! `[placeholder:NAME]` (fenzi masks them; anything shaped like a placeholder is masked here
//! again), and every name is shown with control characters escaped.
//!
//! Only sockets that are this user's, in a directory private to this user, are connected to.

use anyhow::{Context, Result, anyhow, bail};
use fenzi_proxy::confirm::protocol::{Offer, ServerLine, WatcherLine};
use fenzi_proxy::confirm::{check_private_dir, control_dir};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How often the control directory is looked at for new sessions.
const SCAN_EVERY: Duration = Duration::from_millis(250);

/// What `fenzi approve --watch` was given.
pub struct WatchArgs {
    /// Watch only this session (its id, as `fenzi run` and `fenzi proxy` print it).
    pub session: Option<String>,
}

enum Msg {
    Connected {
        conn: usize,
        session: String,
        stream: UnixStream,
    },
    Line {
        conn: usize,
        line: ServerLine,
    },
    Closed {
        conn: usize,
    },
    Input(Option<String>),
}

/// A held call as shown: the connection it came on, the offer, when it arrived.
struct Shown {
    conn: usize,
    offer: Offer,
    at: Instant,
}

pub fn run(args: WatchArgs) -> Result<ExitCode> {
    let dir = control_dir().ok_or_else(|| {
        anyhow!("no control directory: set XDG_RUNTIME_DIR (or XDG_STATE_HOME or HOME)")
    })?;
    if let Some(session) = &args.session
        && (session.is_empty() || session.contains('/'))
    {
        bail!("--session {session:?} is not a session id");
    }
    let uid = rustix::process::getuid().as_raw();
    let tty = std::io::stdin().is_terminal();
    let (tx, rx) = mpsc::channel::<Msg>();
    {
        let tx = tx.clone();
        let dir = dir.clone();
        let only = args.session.clone();
        std::thread::spawn(move || scan(&dir, only.as_deref(), uid, &tx));
    }
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let stdin = std::io::stdin();
            for line in stdin.lock().lines() {
                match line {
                    Ok(line) => {
                        if tx.send(Msg::Input(Some(line))).is_err() {
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
            let _ = tx.send(Msg::Input(None));
        });
    }
    drop(tx);
    let mut out = std::io::stdout().lock();
    let what = args
        .session
        .as_deref()
        .map_or_else(|| "every session".to_string(), |s| format!("session {s}"));
    writeln!(
        out,
        "watching {what} for held calls ({}); {}",
        dir.display(),
        if tty {
            "answer y or n, Ctrl-C to stop"
        } else {
            "answers are read from standard input, one y or n line per held call"
        }
    )?;
    out.flush()?;

    let mut writers: HashMap<usize, (String, UnixStream)> = HashMap::new();
    let mut queue: VecDeque<Shown> = VecDeque::new();
    let mut current: Option<Shown> = None;
    let mut lines: VecDeque<String> = VecDeque::new();
    let mut input_done = false;
    let mut unacknowledged = 0usize;
    loop {
        // Once standard input (not a terminal) is used up, only the last answers' replies are
        // waited for, briefly.
        let msg = if !tty && input_done && lines.is_empty() {
            if unacknowledged == 0 {
                break;
            }
            match rx.recv_timeout(Duration::from_secs(2)) {
                Ok(m) => m,
                Err(_) => break,
            }
        } else {
            match rx.recv() {
                Ok(m) => m,
                Err(_) => break,
            }
        };
        match msg {
            Msg::Connected {
                conn,
                session,
                stream,
            } => {
                writeln!(out, "session {} connected", shown(&session))?;
                writers.insert(conn, (session, stream));
            }
            Msg::Closed { conn } => {
                if let Some((session, _)) = writers.remove(&conn) {
                    writeln!(out, "session {} ended", shown(&session))?;
                }
                queue.retain(|s| s.conn != conn);
                if current.as_ref().is_some_and(|c| c.conn == conn) {
                    current = None;
                    writeln!(out, "  gone: its session ended")?;
                }
            }
            Msg::Line { conn, line } => match line {
                ServerLine::Held(offer) => queue.push_back(Shown {
                    conn,
                    offer,
                    at: Instant::now(),
                }),
                ServerLine::Gone { id, why } => {
                    queue.retain(|s| !(s.conn == conn && s.offer.id == id));
                    if current
                        .as_ref()
                        .is_some_and(|c| c.conn == conn && c.offer.id == id)
                    {
                        current = None;
                        writeln!(out, "\n  gone: {}", shown(&why))?;
                    }
                }
                ServerLine::Answered { allow, .. } => {
                    unacknowledged = unacknowledged.saturating_sub(1);
                    writeln!(out, "  sent: {}", if allow { "yes" } else { "no" })?;
                }
                ServerLine::Error(e) => {
                    unacknowledged = unacknowledged.saturating_sub(1);
                    writeln!(out, "  fenzi says: {}", shown(&e))?;
                }
            },
            Msg::Input(Some(line)) => {
                if tty && current.is_none() {
                    writeln!(out, "nothing is waiting for an answer")?;
                } else {
                    lines.push_back(line);
                }
            }
            Msg::Input(None) => {
                input_done = true;
                if tty {
                    break;
                }
            }
        }
        // Show the next held call, and answer it when an answer is there.
        loop {
            if current.is_none() {
                let Some(next) = queue.pop_front() else {
                    break;
                };
                show_offer(&mut out, &next, tty)?;
                current = Some(next);
            }
            let Some(line) = lines.pop_front() else {
                break;
            };
            let allow = match line.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => true,
                "n" | "no" => false,
                other => {
                    if tty {
                        write!(out, "  please answer y or n: ")?;
                        out.flush()?;
                        continue;
                    }
                    bail!(
                        "expected a line `y` or `n` on standard input, found {:?}",
                        other
                    );
                }
            };
            let held = current.take().expect("a call is shown");
            if !tty {
                writeln!(out, "  answer: {}", if allow { "y" } else { "n" })?;
            }
            let answer = WatcherLine::Answer {
                id: held.offer.id.clone(),
                allow,
            };
            match writers.get_mut(&held.conn) {
                Some((_, stream)) => {
                    if stream.write_all(answer.to_line().as_bytes()).is_ok() {
                        unacknowledged += 1;
                    } else {
                        writeln!(out, "  not sent: its session is gone")?;
                    }
                }
                None => writeln!(out, "  not sent: its session is gone")?,
            }
        }
        out.flush()?;
    }
    let left = queue.len() + usize::from(current.is_some());
    if left > 0 {
        writeln!(
            out,
            "no more answers on standard input; {left} held call(s) left unanswered (they are \
             denied when their time runs out)"
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

fn show_offer(out: &mut impl Write, s: &Shown, tty: bool) -> std::io::Result<()> {
    let left = Duration::from_millis(s.offer.timeout_ms).saturating_sub(s.at.elapsed());
    let o = &s.offer;
    writeln!(
        out,
        "\nheld call  session {}  server {}  tool {}  ({}s left)",
        shown(&o.session),
        shown(&o.server),
        shown(&o.tool),
        left.as_secs()
    )?;
    writeln!(out, "  rule       {}", shown(&o.rule))?;
    writeln!(
        out,
        "  arguments  {}",
        shown(&fenzi_proxy::secrets::placeholders::mask_placeholder_like(
            &o.arguments
        ))
    )?;
    if tty {
        write!(out, "allow? [y/n] ")?;
    }
    out.flush()
}

/// `text` with control characters escaped, so that nothing the agent chose can move the cursor
/// or rewrite what the person reads.
fn shown(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if c.is_control() || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') {
                c.escape_unicode().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// Connects to each session socket that appears in `dir` (only `only`'s when given), forever.
fn scan(dir: &Path, only: Option<&str>, uid: u32, tx: &mpsc::Sender<Msg>) {
    let mut connected: HashSet<PathBuf> = HashSet::new();
    let (closed_tx, closed_rx) = mpsc::channel::<PathBuf>();
    let mut next = 0usize;
    let mut warned = false;
    loop {
        while let Ok(path) = closed_rx.try_recv() {
            connected.remove(&path);
        }
        match sockets(dir, only, uid) {
            Ok(paths) => {
                warned = false;
                for (path, session) in paths {
                    if connected.contains(&path) {
                        continue;
                    }
                    let Ok(stream) = UnixStream::connect(&path) else {
                        continue;
                    };
                    let Ok(reader) = stream.try_clone() else {
                        continue;
                    };
                    connected.insert(path.clone());
                    let conn = next;
                    next += 1;
                    if tx
                        .send(Msg::Connected {
                            conn,
                            session,
                            stream,
                        })
                        .is_err()
                    {
                        return;
                    }
                    let (tx, closed) = (tx.clone(), closed_tx.clone());
                    std::thread::spawn(move || {
                        read_lines(conn, reader, &tx);
                        let _ = tx.send(Msg::Closed { conn });
                        let _ = closed.send(path);
                    });
                }
            }
            Err(e) if !warned => {
                warned = true;
                eprintln!("fenzi approve: {e:#}");
            }
            Err(_) => {}
        }
        std::thread::sleep(SCAN_EVERY);
    }
}

fn read_lines(conn: usize, stream: UnixStream, tx: &mpsc::Sender<Msg>) {
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else {
            return;
        };
        let line = match serde_json::from_str::<ServerLine>(&line) {
            Ok(l) => l,
            Err(_) => ServerLine::Error(format!("an unreadable line from fenzi: {line}")),
        };
        if tx.send(Msg::Line { conn, line }).is_err() {
            return;
        }
    }
}

/// The session sockets in `dir`: this user's sockets named `<session>.sock`, in a directory
/// private to this user. A directory not there yet has none.
fn sockets(dir: &Path, only: Option<&str>, uid: u32) -> Result<Vec<(PathBuf, String)>> {
    if std::fs::symlink_metadata(dir).is_err() {
        return Ok(Vec::new());
    }
    check_private_dir(dir, uid)?;
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let Ok(entry) = entry else { continue };
        let path = entry.path();
        let Some(session) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".sock"))
        else {
            continue;
        };
        if only.is_some_and(|o| o != session) {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.file_type().is_socket() && meta.uid() == uid {
            out.push((path.clone(), session.to_string()));
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_agent_chose_is_shown_escaped_and_masked() {
        assert_eq!(shown("a\u{1b}[2Jb\u{202e}"), "a\\u{1b}[2Jb\\u{202e}");
        let ph = format!("fenzi_ph_{}", "x".repeat(43));
        assert_eq!(
            fenzi_proxy::secrets::placeholders::mask_placeholder_like(&format!(
                "{{\"k\":\"{ph}\"}}"
            )),
            "{\"k\":\"[placeholder]\"}"
        );
    }

    #[test]
    fn only_this_users_session_sockets_are_watched() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("fenzi");
        assert!(sockets(&dir, None, 0).unwrap().is_empty(), "not there yet");
        std::fs::create_dir(&dir).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let uid = rustix::process::getuid().as_raw();
        let _a = std::os::unix::net::UnixListener::bind(dir.join("a1.sock")).unwrap();
        let _b = std::os::unix::net::UnixListener::bind(dir.join("b2.sock")).unwrap();
        std::fs::write(dir.join("c3.sock"), "not a socket").unwrap();
        std::fs::create_dir(dir.join("a1")).unwrap();
        let names = |only| {
            sockets(&dir, only, uid)
                .unwrap()
                .into_iter()
                .map(|(_, s)| s)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(None), ["a1", "b2"]);
        assert_eq!(names(Some("b2")), ["b2"]);
        assert!(
            sockets(&dir, None, uid + 1).is_err(),
            "another user's directory"
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(
            sockets(&dir, None, uid).is_err(),
            "a directory others may write"
        );
    }
}
