//! A running session's watch on its policy files (README, "Reloading the policy"): the project
//! file and the machine file the session loaded. A change is read, loaded and validated with the
//! same loader as at start, then offered to the proxy ([`fenzi_proxy::Proxy::reload`]), which swaps
//! it in when only MCP tool rules changed; anything else keeps the policy in force and writes a
//! `reload_refused` record.
//!
//! The files are polled, not watched through inotify: every [`POLL`] each path's `lstat` (type,
//! device, inode, size, modification and change times) is compared with the last one seen. That
//! cannot miss an atomic rename (a new inode) or an edit in place (times, size), works the same
//! for a file behind a symbolic link and on any file system, and needs no thread of the kernel's
//! to be kept in step. Four looks a second cost nothing beside the proxy's work. A change is
//! acted on once the signature has held still for [`SETTLE`] more, so a file being written is read
//! when its writer pauses, not mid-write; one that is still half-written then does not load and
//! is refused, and its completion is the next change.
//!
//! Refused, with the last good policy kept: a file that cannot be read (gone, no permission, a
//! directory or device or FIFO, larger than the bound), one replaced by a symbolic link, text that
//! does not load (invalid YAML, a truncated file, a project widening a machine server). The same
//! bytes again (or the same failure again) are not offered twice: no record when nothing changed.
//! Lock files are not watched: `pin` and the pins are set up for the session at its start. Nor is
//! the team policy: the files are merged under the copy the session started with.

use crate::config_files::{MAX_CONFIG_BYTES, PolicyArgs};
use fenzi_policy::engine::Policy;
use fenzi_proxy::{Proxy, Reload};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often the files are looked at. A change takes effect within a poll and a settle of the
/// last write (about 350 ms): well within 2 s.
pub const POLL: Duration = Duration::from_millis(250);

/// How long a changed signature must hold still before the files are read.
pub const SETTLE: Duration = Duration::from_millis(100);

/// What `lstat` says of a path: a change in any of these is a change of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Signature {
    Missing,
    /// The error kind of an `lstat` that failed otherwise.
    Unreadable(io::ErrorKind),
    Present {
        symlink: bool,
        dev: u64,
        ino: u64,
        size: u64,
        mtime: (i64, i64),
        ctime: (i64, i64),
        mode: u32,
        /// For a symbolic link, the same of what it points to.
        target: Option<Box<Signature>>,
    },
}

fn signature(path: &Path) -> Signature {
    let of = |m: &std::fs::Metadata, target| Signature::Present {
        symlink: m.file_type().is_symlink(),
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime: (m.ctime(), m.ctime_nsec()),
        mode: m.mode(),
        target,
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            let target = match std::fs::metadata(path) {
                Ok(t) => of(&t, None),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Signature::Missing,
                Err(e) => Signature::Unreadable(e.kind()),
            };
            of(&m, Some(Box::new(target)))
        }
        Ok(m) => of(&m, None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Signature::Missing,
        Err(e) => Signature::Unreadable(e.kind()),
    }
}

/// One watched file.
#[derive(Debug)]
struct Watched {
    path: PathBuf,
    /// It was a symbolic link when the session started (then it may stay one).
    was_symlink: bool,
    machine: bool,
}

/// What the last attempt read, so the same input is not offered twice.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    Read(Vec<Vec<u8>>),
    Failed(String),
}

/// The policy files of a session and what was last seen of them.
pub struct Watch {
    files: Vec<Watched>,
    seen: Vec<Signature>,
    /// Signatures seen changed once, waiting for one more poll to hold still.
    pending: Option<Vec<Signature>>,
    last: Option<Attempt>,
    /// The team policy the session started under: a reload merges the files under the same copy
    /// (a new team release takes effect at the next session).
    team: Option<fenzi_policy::config::Config>,
}

/// What one look at the files found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Look {
    /// Nothing to say: no change, or nothing that changes what is enforced.
    Quiet,
    /// A change, to be read once it holds still for [`SETTLE`].
    Settling,
    /// The files (their names) were read and offered: what came of it.
    Offered(String, Outcome),
}

/// What offering the files led to, for the person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Reloaded {
        policy: String,
        servers: Vec<String>,
    },
    NextSession {
        what: Vec<String>,
    },
    Refused {
        why: String,
    },
    /// The record could not be written, so nothing changed.
    NotRecorded {
        error: String,
    },
}

impl Outcome {
    /// The line the person sees (stderr, or the session log under `fenzi run`).
    pub fn line(&self, files: &str) -> String {
        match self {
            Outcome::Reloaded { policy, servers } => {
                let servers: Vec<String> = servers.iter().map(|s| format!("mcp.{s}")).collect();
                format!(
                    "policy reloaded from {files}: new tool rules for {} (policy {}), from the next request on",
                    servers.join(", "),
                    &policy[..12.min(policy.len())]
                )
            }
            Outcome::NextSession { what } => format!(
                "the change to {files} takes effect in the next session ({}); nothing changed now, \
                 the policy in force stays",
                what.join(", ")
            ),
            Outcome::Refused { why } => format!(
                "policy reload refused, the policy in force stays: {}",
                why.replace('\n', "\n  ")
            ),
            Outcome::NotRecorded { error } => format!(
                "policy change in {files} not applied: its audit record could not be written ({error})"
            ),
        }
    }
}

impl Watch {
    /// The files `args` loaded: the project file and the machine file if the session read one.
    pub fn new(args: &PolicyArgs) -> Watch {
        let mut files = vec![Watched {
            was_symlink: is_symlink(&args.config),
            path: args.config.clone(),
            machine: false,
        }];
        if let Some(machine) = args.machine_path() {
            files.push(Watched {
                was_symlink: is_symlink(&machine),
                path: machine,
                machine: true,
            });
        }
        Watch::of(files)
    }

    fn of(files: Vec<Watched>) -> Watch {
        let seen = files.iter().map(|f| signature(&f.path)).collect();
        Watch {
            files,
            seen,
            pending: None,
            last: None,
            team: None,
        }
    }

    /// Looks at the files once; when they changed and have held still since the last look, reads
    /// and offers them to `proxy`.
    pub async fn poll(&mut self, proxy: &Proxy) -> Look {
        let now: Vec<Signature> = self.files.iter().map(|f| signature(&f.path)).collect();
        if now == self.seen {
            self.pending = None;
            return Look::Quiet;
        }
        if self.pending.as_ref() != Some(&now) {
            self.pending = Some(now);
            return Look::Settling;
        }
        let changed = self.names_changed(&now);
        self.seen = now;
        self.pending = None;
        match self.offer(proxy, &changed).await {
            Some(outcome) => Look::Offered(changed, outcome),
            None => Look::Quiet,
        }
    }

    /// Reads, loads and offers the files as they are now (also at the start of the watch, for a
    /// change made between the session's load and the watch).
    pub async fn offer(&mut self, proxy: &Proxy, files: &str) -> Option<Outcome> {
        let read = self.read_all();
        let attempt = match &read {
            Ok(texts) => Attempt::Read(texts.clone()),
            Err(why) => Attempt::Failed(why.clone()),
        };
        if self.last.as_ref() == Some(&attempt) {
            return None;
        }
        self.last = Some(attempt);
        let loaded = read.and_then(|texts| self.load(&texts));
        let outcome = match loaded {
            Ok(policy) => match proxy.reload(policy, files).await {
                Ok(Reload::Unchanged) => return None,
                Ok(Reload::Reloaded { policy, servers }) => Outcome::Reloaded { policy, servers },
                Ok(Reload::NextSession { what }) => Outcome::NextSession { what },
                Err(e) => Outcome::NotRecorded {
                    error: e.to_string(),
                },
            },
            Err(why) => match proxy.refuse_reload(files, &why).await {
                Ok(()) => Outcome::Refused { why },
                Err(e) => Outcome::NotRecorded {
                    error: e.to_string(),
                },
            },
        };
        if matches!(outcome, Outcome::NotRecorded { .. }) {
            // Offer the same input again at the next change: it was never recorded.
            self.last = None;
        }
        Some(outcome)
    }

    fn names_changed(&self, now: &[Signature]) -> String {
        let names: Vec<String> = self
            .files
            .iter()
            .zip(&self.seen)
            .zip(now)
            .filter(|((_, was), is)| was != is)
            .map(|((f, _), _)| f.path.display().to_string())
            .collect();
        names.join(", ")
    }

    /// Every file's bytes, or why one cannot be used.
    fn read_all(&self) -> Result<Vec<Vec<u8>>, String> {
        self.files
            .iter()
            .map(|f| {
                read_policy_file(&f.path, f.was_symlink)
                    .map_err(|e| format!("{}: {e}", f.path.display()))
            })
            .collect()
    }

    /// Loads the files' texts as the session did at its start.
    fn load(&self, texts: &[Vec<u8>]) -> Result<Policy, String> {
        let mut project = None;
        let mut machine = None;
        for (file, bytes) in self.files.iter().zip(texts) {
            let name = file.path.display().to_string();
            let text = fenzi_policy::config::decode(bytes, &name)
                .map_err(|e| e.to_string())?
                .to_string();
            if file.machine {
                machine = Some((text, name));
            } else {
                project = Some((text, name));
            }
        }
        let config = fenzi_policy::config::load_under(
            self.team.clone(),
            as_pair(&machine),
            as_pair(&project),
        )
        .map_err(|e| e.to_string())?;
        Ok(Policy::from_config(&config))
    }
}

fn as_pair(file: &Option<(String, String)>) -> Option<(&str, &str)> {
    file.as_ref().map(|(t, n)| (t.as_str(), n.as_str()))
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// A policy file's bytes, refusing what the session must not take a policy from: a symbolic link
/// where the session started with a file, anything but a regular file (a FIFO is opened without
/// blocking, and refused), more than [`MAX_CONFIG_BYTES`].
fn read_policy_file(path: &Path, may_be_symlink: bool) -> io::Result<Vec<u8>> {
    use io::{Error, ErrorKind};
    let mut flags = rustix::fs::OFlags::NONBLOCK.bits() as i32;
    if !may_be_symlink {
        if is_symlink(path) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "is now a symbolic link; a policy file replaced by a link is not followed \
                 (the session started with a regular file)",
            ));
        }
        flags |= rustix::fs::OFlags::NOFOLLOW.bits() as i32;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(Error::new(ErrorKind::InvalidInput, "is not a regular file"));
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("is larger than {} MiB", MAX_CONFIG_BYTES >> 20),
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("is larger than {} MiB", MAX_CONFIG_BYTES >> 20),
        ));
    }
    Ok(bytes)
}

/// The watch running on its own thread (file reads and YAML parsing stay off the proxy's
/// workers); it stops when dropped.
pub struct Watcher {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    /// Starts watching `args`' files for `proxy`, whose runtime `runtime` is; `say` tells the
    /// person each outcome.
    pub fn start(
        args: &PolicyArgs,
        team: Option<fenzi_policy::config::Config>,
        proxy: Proxy,
        runtime: tokio::runtime::Handle,
        say: fn(&str),
    ) -> io::Result<Watcher> {
        let mut watch = Watch::new(args);
        watch.team = team;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("fenzi-reload".into())
            .spawn(move || {
                let all = watch.names_changed(&vec![Signature::Missing; watch.files.len()]);
                if let Some(outcome) = runtime.block_on(watch.offer(&proxy, &all)) {
                    say(&outcome.line(&all));
                }
                let mut wait = POLL;
                while !stopped.load(Ordering::Relaxed) {
                    std::thread::sleep(wait);
                    wait = POLL;
                    match runtime.block_on(watch.poll(&proxy)) {
                        Look::Quiet => {}
                        Look::Settling => wait = SETTLE,
                        Look::Offered(files, outcome) => say(&outcome.line(&files)),
                    }
                }
            })?;
        Ok(Watcher {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(dir: &Path) -> (Watch, PathBuf) {
        let path = dir.join("fenzi.yaml");
        std::fs::write(&path, "version: 1\n").unwrap();
        let files = vec![Watched {
            path: path.clone(),
            was_symlink: false,
            machine: false,
        }];
        (Watch::of(files), path)
    }

    fn changed(w: &mut Watch) -> bool {
        let now: Vec<Signature> = w.files.iter().map(|f| signature(&f.path)).collect();
        let changed = now != w.seen;
        w.seen = now;
        changed
    }

    #[test]
    fn a_reload_is_merged_under_the_team_policy_the_session_started_with() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, _) = watch(dir.path());
        let (team, _) = fenzi_policy::config::parse_team(
            "version: 1\nserial: 1\nhosts: [\"*.corp.example\"]\n",
            "https://team.example/p.yaml",
        )
        .unwrap();
        w.team = Some(team);
        let inside = b"version: 1\nhosts: [git.corp.example]\n".to_vec();
        assert!(w.load(&[inside]).is_ok());
        let outside = b"version: 1\nhosts: [evil.example]\n".to_vec();
        let why = w.load(std::slice::from_ref(&outside)).unwrap_err();
        assert!(
            why.contains("which the team policy does not allow"),
            "{why}"
        );
        w.team = None;
        assert!(
            w.load(&[outside]).is_ok(),
            "without a team policy a project may add hosts"
        );
    }

    #[test]
    fn edits_renames_and_removals_change_the_signature() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, path) = watch(dir.path());
        assert!(!changed(&mut w));
        // The same size, rewritten in place.
        std::fs::write(&path, "version: 2\n").unwrap();
        assert!(changed(&mut w));
        // Replaced by a rename (a new inode), same content.
        let temp = dir.path().join(".fenzi.yaml.tmp");
        std::fs::write(&temp, "version: 2\n").unwrap();
        std::fs::rename(&temp, &path).unwrap();
        assert!(changed(&mut w));
        // Permissions (the change time and the mode).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
        assert!(changed(&mut w));
        std::fs::remove_file(&path).unwrap();
        assert!(changed(&mut w));
        assert_eq!(w.seen, vec![Signature::Missing]);
        assert!(!changed(&mut w));
    }

    #[test]
    fn files_that_must_not_be_read_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fenzi.yaml");
        std::fs::write(&path, "version: 1\n").unwrap();
        assert_eq!(read_policy_file(&path, false).unwrap(), b"version: 1\n");
        let link = dir.path().join("link.yaml");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let e = read_policy_file(&link, false).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        // A session that started with a link may keep it.
        assert_eq!(read_policy_file(&link, true).unwrap(), b"version: 1\n");
        let fifo = dir.path().join("fifo.yaml");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        // Opened without blocking, then refused.
        let e = read_policy_file(&fifo, false).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let e = read_policy_file(dir.path(), false).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let big = dir.path().join("big.yaml");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_CONFIG_BYTES + 1)
            .unwrap();
        let e = read_policy_file(&big, false).unwrap_err().to_string();
        assert!(e.contains("larger than"), "{e}");
        assert_eq!(
            read_policy_file(&dir.path().join("gone.yaml"), false)
                .unwrap_err()
                .kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn outcomes_read_as_a_person_needs_them() {
        let reloaded = Outcome::Reloaded {
            policy: "0123456789abcdef".repeat(4),
            servers: vec!["echo".into()],
        };
        assert_eq!(
            reloaded.line("fenzi.yaml"),
            "policy reloaded from fenzi.yaml: new tool rules for mcp.echo (policy 0123456789ab), \
             from the next request on"
        );
        let next = Outcome::NextSession {
            what: vec!["hosts".into()],
        };
        assert!(
            next.line("fenzi.yaml")
                .contains("takes effect in the next session (hosts)")
        );
    }
}
