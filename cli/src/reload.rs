//! A running session's watch on its policy files (README, "Reloading the policy"): the project
//! file and the machine file the session loaded, exactly as the session protected them at its
//! start ([`pinned`]). A change is read, loaded and validated with the same loader as at start,
//! then offered to the proxy ([`fenzi_proxy::Proxy::reload`]), which puts new MCP tool rules in
//! force at once and reports the rest for the next session; what does not load keeps the policy in
//! force and writes a `reload_refused` record.
//!
//! The files are polled, not watched through inotify: every [`POLL`] each file's [`State`] (does
//! the path the person gave still lead to the pinned file; its size, times and mode) is compared
//! with the last one seen. That cannot miss a rename (another inode) or an edit in place (times,
//! size), works the same through symbolic links and on any file system, and needs no thread of
//! the kernel's to be kept in step. Four looks a second cost nothing beside the proxy's work. A
//! change is acted on once the state has held still for [`SETTLE`] more, so a file being written
//! is read when its writer pauses, not mid-write; one that is still half-written then does not
//! load and is refused, and its completion is the next change.
//!
//! Refused, with the last good policy kept: under `fenzi run`, a path that no longer leads to the
//! file the session protected (replaced by a rename, removed, a link on its way re-pointed, a
//! second name: never loaded, whatever is there now; `fenzi proxy` protects nothing and follows the
//! path instead, [`Watch::following`]), a file grown past the bound, text that does not load (invalid
//! YAML, a truncated file, a project widening a machine server). The same bytes again (or the same
//! failure again) are not offered twice: one record per change, none when nothing changed, and
//! while a file stays lost nothing done at its path makes another. Lock files are not watched:
//! `pin` and the pins are set up for the session at its start. Nor is the team policy: the files
//! are merged under the copy the session started with.

pub(crate) mod pinned;

use crate::config_files::PolicyArgs;
use fenzi_policy::engine::Policy;
use fenzi_proxy::{Proxy, Reload};
use pinned::{Pinned, State};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often the files are looked at. A change takes effect within a poll and a settle of the
/// last write (about 350 ms): well within 2 s.
pub const POLL: Duration = Duration::from_millis(250);

/// How long a changed state must hold still before the files are read.
pub const SETTLE: Duration = Duration::from_millis(100);

/// One watched file.
#[derive(Debug)]
struct Watched {
    file: Pinned,
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
    seen: Vec<State>,
    /// States seen changed once, waiting for one more poll to hold still.
    pending: Option<Vec<State>>,
    last: Option<Attempt>,
    /// The refusals for lost files already recorded: each is recorded once in a session, so a
    /// path flipped back and forth (a link re-pointed and back) cannot fill the log.
    lost_reported: Vec<String>,
    /// The team policy the session started under: a reload merges the files under the same copy
    /// (a new team release takes effect at the next session).
    team: Option<fenzi_policy::config::Config>,
    /// Follow the paths instead of pinning (`fenzi proxy`, see [`Watch::following`]).
    follow: bool,
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
    /// New tool rules in force now; `next_session` names what else changed, which waits.
    Reloaded {
        policy: String,
        servers: Vec<String>,
        next_session: Vec<String>,
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
            Outcome::Reloaded {
                policy,
                servers,
                next_session,
            } => {
                let servers: Vec<String> = servers.iter().map(|s| format!("mcp.{s}")).collect();
                let mut line = format!(
                    "policy reloaded from {files}: new tool rules for {} (policy {}), from the next request on",
                    servers.join(", "),
                    &policy[..12.min(policy.len())]
                );
                if !next_session.is_empty() {
                    line.push_str(&format!(
                        "; the rest of the change takes effect in the next session ({})",
                        next_session.join(", ")
                    ));
                }
                line
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
    /// Pins the files `args` loaded: the project file and the machine file if the session read
    /// one. Called before the command starts (and the sandbox protects them), so the files pinned
    /// are ones the agent never had a chance to write; a file that cannot be pinned is an error.
    pub fn new(args: &PolicyArgs) -> io::Result<Watch> {
        let mut files = vec![Watched {
            file: Pinned::open(&args.config)?,
            machine: false,
        }];
        if let Some(machine) = args.machine_path() {
            files.push(Watched {
                file: Pinned::open(&machine)?,
                machine: true,
            });
        }
        Ok(Watch::of(files))
    }

    /// For `fenzi proxy`: the same watch, except that a path which leads to another file (a
    /// rename over it, a link re-pointed) is followed and that file loaded, instead of refused.
    /// Pinning is what makes a reload safe where fenzi protects the files from an agent that can
    /// write beside them (`fenzi run`'s sandbox); `fenzi proxy` protects nothing, whoever can write
    /// its files is trusted as their author, and a Kubernetes ConfigMap is updated exactly by
    /// re-pointing a link.
    pub fn following(args: &PolicyArgs) -> io::Result<Watch> {
        let mut watch = Watch::new(args)?;
        watch.follow = true;
        Ok(watch)
    }

    /// Under [`Watch::following`], pins afresh each file whose path now leads elsewhere (and that
    /// can be opened): the look that follows sees a new file, which is a change.
    fn follow_paths(&mut self) {
        if !self.follow {
            return;
        }
        for watched in &mut self.files {
            if matches!(watched.file.look(), State::Lost(_))
                && let Ok(fresh) = watched.file.reopen()
            {
                watched.file = fresh;
            }
        }
    }

    fn of(files: Vec<Watched>) -> Watch {
        let seen = files.iter().map(|f| f.file.look()).collect();
        Watch {
            files,
            seen,
            pending: None,
            last: None,
            lost_reported: Vec::new(),
            team: None,
            follow: false,
        }
    }

    /// Looks at the files once; when they changed and have held still since the last look, reads
    /// and offers them to `proxy`.
    pub async fn poll(&mut self, proxy: &Proxy) -> Look {
        self.follow_paths();
        let now = self.look();
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
        let lost = matches!(&read, Err(why) if self.lost_reported.contains(why));
        if lost {
            return None;
        }
        let loaded = read.and_then(|texts| self.load(&texts));
        let outcome = match loaded {
            Ok(policy) => match proxy.reload(policy, files).await {
                Ok(Reload::Unchanged) => return None,
                Ok(Reload::Reloaded {
                    policy,
                    servers,
                    next_session,
                }) => Outcome::Reloaded {
                    policy,
                    servers,
                    next_session,
                },
                Ok(Reload::NextSession { what }) => Outcome::NextSession { what },
                Err(e) => Outcome::NotRecorded {
                    error: e.to_string(),
                },
            },
            Err(why) => match proxy.refuse_reload(files, &why).await {
                Ok(()) => {
                    if self.seen.iter().any(|s| matches!(s, State::Lost(_))) {
                        self.lost_reported.push(why.clone());
                    }
                    Outcome::Refused { why }
                }
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

    /// Each file's state now. A file that was lost at the last look stays lost as it was: what is
    /// then done at its path (written, removed, made again) is not another change.
    fn look(&self) -> Vec<State> {
        self.files
            .iter()
            .zip(&self.seen)
            .map(|(f, was)| match (f.file.look(), was) {
                (State::Lost(_), State::Lost(_)) => was.clone(),
                (now, _) => now,
            })
            .collect()
    }

    fn names_changed(&self, now: &[State]) -> String {
        let names: Vec<&str> = self
            .files
            .iter()
            .zip(&self.seen)
            .zip(now)
            .filter(|((_, was), is)| was != is)
            .map(|((f, _), _)| f.file.name())
            .collect();
        names.join(", ")
    }

    /// Every file's name.
    fn names(&self) -> String {
        let names: Vec<&str> = self.files.iter().map(|f| f.file.name()).collect();
        names.join(", ")
    }

    /// Every file's bytes, read through the descriptors pinned at start, or why they cannot be
    /// used: while a path no longer leads to its pinned file (as last seen), nothing is loaded,
    /// whatever the other file says.
    fn read_all(&self) -> Result<Vec<Vec<u8>>, String> {
        let lost: Vec<String> = self
            .files
            .iter()
            .zip(&self.seen)
            .filter_map(|(f, state)| match state {
                State::Lost(lost) => Some(f.file.why(*lost)),
                State::Protected(_) => None,
            })
            .collect();
        if !lost.is_empty() {
            return Err(lost.join("\n"));
        }
        self.files
            .iter()
            .map(|f| f.file.read().map_err(|e| format!("{}: {e}", f.file.name())))
            .collect()
    }

    /// Loads the files' texts as the session did at its start.
    fn load(&self, texts: &[Vec<u8>]) -> Result<Policy, String> {
        let mut project = None;
        let mut machine = None;
        for (file, bytes) in self.files.iter().zip(texts) {
            let name = file.file.name().to_string();
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

/// The watch running on its own thread (file reads and YAML parsing stay off the proxy's
/// workers); it stops when dropped.
pub struct Watcher {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    /// Starts `watch` (pinned by [`Watch::new`]) for `proxy`, whose runtime `runtime` is; `say`
    /// tells the person each outcome. Called outside the runtime: the first look is made here.
    pub fn start(
        mut watch: Watch,
        team: Option<fenzi_policy::config::Config>,
        proxy: Proxy,
        runtime: tokio::runtime::Handle,
        say: fn(&str),
    ) -> io::Result<Watcher> {
        watch.team = team;
        // A change made between the session's load and now, before the session serves (on the
        // caller's thread, outside the runtime).
        let all = watch.names();
        if let Some(outcome) = runtime.block_on(watch.offer(&proxy, &all)) {
            say(&outcome.line(&all));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("fenzi-reload".into())
            .spawn(move || {
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
    use std::path::{Path, PathBuf};

    fn watch(dir: &Path) -> (Watch, PathBuf) {
        let path = dir.join("fenzi.yaml");
        std::fs::write(&path, "version: 1\n").unwrap();
        let files = vec![Watched {
            file: Pinned::open(&path).unwrap(),
            machine: false,
        }];
        (Watch::of(files), path)
    }

    fn changed(w: &mut Watch) -> bool {
        let now = w.look();
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
    fn fenzi_proxy_follows_a_link_re_pointed_as_a_configmap_is_updated() {
        let dir = tempfile::tempdir().unwrap();
        // The kubelet's layout: the file is a link through `..data`, re-pointed to a new copy.
        for (copy, text) in [("v1", "version: 1\n"), ("v2", "version: 2\n")] {
            std::fs::create_dir(dir.path().join(copy)).unwrap();
            std::fs::write(dir.path().join(copy).join("fenzi.yaml"), text).unwrap();
        }
        std::os::unix::fs::symlink("v1", dir.path().join("..data")).unwrap();
        let path = dir.path().join("fenzi.yaml");
        std::os::unix::fs::symlink("..data/fenzi.yaml", &path).unwrap();
        let files = || {
            vec![Watched {
                file: Pinned::open(&path).unwrap(),
                machine: false,
            }]
        };
        let (mut pinned, mut following) = (Watch::of(files()), Watch::of(files()));
        following.follow = true;
        let staged = dir.path().join("..data_tmp");
        std::os::unix::fs::symlink("v2", &staged).unwrap();
        std::fs::rename(&staged, dir.path().join("..data")).unwrap();
        // Pinned (fenzi run): refused. Following (fenzi proxy): the new copy is read.
        assert!(changed(&mut pinned));
        assert!(pinned.read_all().is_err());
        following.follow_paths();
        assert!(changed(&mut following));
        assert_eq!(
            following.read_all().unwrap(),
            vec![b"version: 2\n".to_vec()]
        );
    }

    #[test]
    fn an_edit_in_place_is_read_and_a_rename_over_the_file_never_is() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, path) = watch(dir.path());
        assert!(!changed(&mut w));
        // The same size, rewritten in place: a change, read.
        std::fs::write(&path, "version: 2\n").unwrap();
        assert!(changed(&mut w));
        assert_eq!(w.read_all().unwrap(), vec![b"version: 2\n".to_vec()]);
        // Permissions (the change time and the mode).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(changed(&mut w));
        // Replaced by a rename (a new inode), the same content: refused with the reason.
        let temp = dir.path().join(".fenzi.yaml.tmp");
        std::fs::write(&temp, "version: 2\n").unwrap();
        std::fs::rename(&temp, &path).unwrap();
        assert!(changed(&mut w));
        let why = w.read_all().unwrap_err();
        assert!(
            why.starts_with(&format!("{} was replaced", path.display())),
            "{why}"
        );
        // While it stays lost, nothing done at the path is another change, and nothing is read.
        for text in ["version: 1\nhosts: [evil.example]\n", "version: 1\n"] {
            std::fs::write(&path, text).unwrap();
            assert!(!changed(&mut w), "{text}");
            assert_eq!(w.read_all().unwrap_err(), why);
        }
        std::fs::remove_file(&path).unwrap();
        assert!(!changed(&mut w), "removed while lost is no other change");
        std::fs::write(&path, "version: 2\n").unwrap();
        assert!(!changed(&mut w));
        assert_eq!(w.read_all().unwrap_err(), why);
    }

    #[test]
    fn a_lost_file_keeps_the_other_from_loading_too() {
        let dir = tempfile::tempdir().unwrap();
        let (project, machine) = (dir.path().join("fenzi.yaml"), dir.path().join("mcp.yaml"));
        std::fs::write(&project, "version: 1\n").unwrap();
        std::fs::write(&machine, "version: 1\n").unwrap();
        let args = PolicyArgs {
            config: project.clone(),
            machine: Some(machine.clone()),
            no_machine: false,
        };
        let mut w = Watch::new(&args).unwrap();
        assert_eq!(
            w.names(),
            format!("{}, {}", project.display(), machine.display())
        );
        assert_eq!(w.read_all().unwrap().len(), 2);
        // The project file moved away, the machine file edited in place: nothing is read.
        let aside = dir.path().join("aside.yaml");
        std::fs::rename(&project, &aside).unwrap();
        std::fs::write(&machine, "version: 1\nhosts: [github.com]\n").unwrap();
        assert!(changed(&mut w));
        let why = w.read_all().unwrap_err();
        assert!(why.contains("fenzi.yaml was removed"), "{why}");
        // Moved back: the same file through the same path again.
        std::fs::rename(&aside, &project).unwrap();
        assert!(changed(&mut w));
        let texts = w.read_all().unwrap();
        assert_eq!(texts[1], b"version: 1\nhosts: [github.com]\n");
        // A path that cannot be pinned at start is an error naming it.
        let gone = PolicyArgs {
            config: dir.path().join("gone.yaml"),
            machine: None,
            no_machine: true,
        };
        let e = Watch::new(&gone).err().unwrap().to_string();
        assert!(e.contains("gone.yaml"), "{e}");
    }

    #[test]
    fn outcomes_read_as_a_person_needs_them() {
        let mut reloaded = Outcome::Reloaded {
            policy: "0123456789abcdef".repeat(4),
            servers: vec!["echo".into()],
            next_session: vec![],
        };
        assert_eq!(
            reloaded.line("fenzi.yaml"),
            "policy reloaded from fenzi.yaml: new tool rules for mcp.echo (policy 0123456789ab), \
             from the next request on"
        );
        if let Outcome::Reloaded { next_session, .. } = &mut reloaded {
            next_session.push("hosts".into());
        }
        assert_eq!(
            reloaded.line("fenzi.yaml"),
            "policy reloaded from fenzi.yaml: new tool rules for mcp.echo (policy 0123456789ab), \
             from the next request on; the rest of the change takes effect in the next session \
             (hosts)"
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
