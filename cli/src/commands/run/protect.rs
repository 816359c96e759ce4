//! What `fenzi run` keeps out of the agent's reach, and where it lets the agent write.
//!
//! The governing paths are what a later session runs under or what an earlier session recorded:
//! the project policy and its `fenzi.lock`, the machine config directory, fenzi's state directory
//! (every session's audit log and head), an explicit `--audit` log, and this session's own
//! directory (its CA certificate and the agent's rendered config). Inside the sandbox they are
//! read-only and their ancestors cannot be renamed (see `fenzi_proxy::sandbox`'s `filesystem`).
//!
//! The write allowlist is the project directory, the temporary directories, `/dev`, the project's
//! sandbox cache (see `caches`; not the person's own cache directory), the chosen agent's own state
//! ([`agent_state`]) and whatever `--allow-write` adds.

use crate::commands::mcp::render::Agent;
use crate::config_files;
use crate::session;
use crate::session::audit_dir;
use anyhow::{Context, Result, bail};
use fenzi_policy::pins::Lock;
use fenzi_proxy::audit::writer::head_path;
use fenzi_proxy::lock_file::trust::TrustRecords;
use fenzi_proxy::lock_file::{LockFileError, lock_path_for, write_lock};
use std::path::{Path, PathBuf};

/// Where the governing files are, as `fenzi run` was asked to use them.
pub struct Governing<'a> {
    pub project_policy: &'a Path,
    pub machine_file: Option<&'a Path>,
    pub audit_log: &'a Path,
    /// The log was given with `--audit` (it may live outside the state directory).
    pub explicit_audit: bool,
    pub session_dir: &'a Path,
    /// The per-user runtime base holding every session's directory: read-only, so that no
    /// session's agent can write its own or another session's runtime files.
    pub runtime_base: &'a Path,
    /// The session's own log (fenzi's warnings while the command runs), beside the audit log.
    pub session_log: Option<&'a Path>,
}

/// The paths to make read-only inside the sandbox. Directories that must be protected but do not
/// exist yet (the machine config directory, the state directory) are created, private to the
/// user, so that the agent cannot create them with forged contents. A policy file that is a
/// symlink is refused: the link itself could be replaced.
pub fn read_only_paths(governing: &Governing<'_>) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    let policy = governing.project_policy;
    refuse_symlink(policy, "the project policy")?;
    paths.push(policy.to_path_buf());
    let trust = config_files::lock_trust();
    paths.extend(protected_lock(policy, trust.as_ref())?);
    if let Some(machine) = governing.machine_file {
        refuse_symlink(machine, "the machine file")?;
        paths.push(machine.to_path_buf());
        paths.extend(protected_lock(machine, trust.as_ref())?);
    }
    // The default machine directory is protected even when this session does not read it: the
    // next one may.
    if let Some(dir) = config_files::default_machine_file()
        .as_deref()
        .and_then(Path::parent)
    {
        paths.extend(protectable_dir(dir)?);
    }
    let state = audit_dir(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME"));
    if let Some(state) = state.as_deref().and_then(Path::parent) {
        paths.extend(protectable_dir(state)?);
    }
    if governing.explicit_audit {
        // Everything fenzi keeps beside an explicit log, which may lie where the agent can write:
        // the head (created with the log), the export cursor and the session log. fenzi writes
        // them in place through descriptors it opened already, so these mounts stay for the
        // whole session (a rename would drop them; see fenzi_proxy::host_files).
        paths.push(governing.audit_log.to_path_buf());
        paths.push(head_path(governing.audit_log));
        paths.push(protected_cursor(governing.audit_log)?);
        paths.extend(governing.session_log.map(Path::to_path_buf));
    }
    paths.push(governing.runtime_base.to_path_buf());
    paths.push(governing.session_dir.to_path_buf());
    Ok(paths)
}

/// The lock beside `policy_file`, protected in every session whether or not a server is pinned
/// yet: an agent that could write it would plant definitions a later `pin: true` trusts. A missing
/// lock is created empty first (in place, exclusively, never through a link) and recorded as
/// fenzi-written, so that the sandbox can mount it read-only; `None` when the user may not create
/// it, since then the sandbox, which runs as the same user with fewer rights, cannot either. A
/// lock that is a symlink is refused. An existing lock is kept as it is; whether its entries are
/// trusted is decided when the proxy reads it (an unreviewed one pins nothing).
fn protected_lock(policy_file: &Path, trust: Option<&TrustRecords>) -> Result<Option<PathBuf>> {
    let lock = lock_path_for(policy_file);
    if lock.symlink_metadata().is_err() {
        match write_lock(&lock, &Lock::default(), trust) {
            Ok(()) => {}
            Err(LockFileError::Write { source, .. })
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
                ) =>
            {
                return Ok(None);
            }
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "cannot create {} before the sandbox starts (the agent must not be the one to create it)",
                        lock.display()
                    )
                });
            }
        }
    }
    refuse_symlink(&lock, "the lock file")?;
    Ok(Some(lock))
}

/// The OTLP export cursor beside an explicit `--audit` log (its directory may be one the agent can
/// write). An agent that wrote it could make this session's or a later export skip records (a
/// cursor past them) or resend them, so it is read-only inside the sandbox like the log. It is
/// created first, naming nothing acknowledged (what an absent cursor means too), so that the agent
/// cannot create one of its own. A cursor that is a symlink is refused.
fn protected_cursor(log: &Path) -> Result<PathBuf> {
    let cursor = fenzi_proxy::export::cursor_path(log);
    if cursor.symlink_metadata().is_err() {
        fenzi_proxy::export::cursor::store(log, &fenzi_proxy::export::Cursor::start())
            .with_context(|| {
                format!(
                    "cannot create {} before the sandbox starts",
                    cursor.display()
                )
            })?;
    }
    refuse_symlink(&cursor, "the export cursor")?;
    Ok(cursor)
}

/// Refuses to start when a governing path is reached through a symbolic link that lies in a
/// directory the command may write (beneath one of `writable`): the agent could re-point that link,
/// and fenzi (this session's reload, or the next session) would follow it to files the agent
/// chose. The read-only mounts protect what a path resolves to now, not the link on the way.
pub fn refuse_changeable_links(governing: &[PathBuf], writable: &[PathBuf]) -> Result<()> {
    let roots: Vec<PathBuf> = writable
        .iter()
        .filter_map(|w| std::fs::canonicalize(w).ok())
        .collect();
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    for path in governing {
        if let Some(link) = changeable_link(&cwd.join(path), &roots) {
            bail!(
                "{} is reached through the symbolic link {}, which lies where the command may \
                 write: it could re-point the link, and fenzi would then read or write files of \
                 its choosing. Give the path without the link (its target: {}), or move the link \
                 out of the command's reach",
                path.display(),
                link.display(),
                std::fs::canonicalize(&link)
                    .map(|t| t.display().to_string())
                    .unwrap_or_else(|_| "missing".into())
            );
        }
    }
    Ok(())
}

/// The first symbolic link on the way to `path` whose own directory lies beneath one of `roots`.
fn changeable_link(path: &Path, roots: &[PathBuf]) -> Option<PathBuf> {
    use std::path::Component;
    let mut resolved = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::Normal(name) => {
                let candidate = resolved.join(name);
                let Ok(meta) = candidate.symlink_metadata() else {
                    // Not there yet: fenzi creates it, so nothing on the way is a link.
                    return None;
                };
                if meta.file_type().is_symlink() {
                    if roots.iter().any(|root| resolved.starts_with(root)) {
                        return Some(candidate);
                    }
                    resolved = std::fs::canonicalize(&candidate).ok()?;
                } else {
                    resolved = candidate;
                }
            }
            Component::ParentDir => {
                resolved.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    None
}

/// The governing files of a session as they were when its sandbox started (device and inode).
/// The sandbox protects a file by mounting it read-only over itself; when something on the host
/// replaces that file by a rename (an editor that saves that way, `sed -i`) or removes it, the
/// kernel drops the mount inside the sandbox with the old file, and the new file at that path is
/// as writable to the agent as its directory. fenzi's own writes never do that (they are in
/// place); the person's may. The session cannot mount the new file, so it says so at the end.
#[derive(Debug, Default)]
pub struct Protected(Vec<(PathBuf, u64, u64)>);

impl Protected {
    /// The regular files among `paths`, as they are now.
    pub fn record(paths: &[PathBuf]) -> Protected {
        use std::os::unix::fs::MetadataExt;
        Protected(
            paths
                .iter()
                .filter_map(|p| {
                    let meta = p.symlink_metadata().ok()?;
                    meta.is_file().then(|| (p.clone(), meta.dev(), meta.ino()))
                })
                .collect(),
        )
    }

    /// The files whose path now leads to another file, or to none.
    pub fn replaced(&self) -> Vec<&Path> {
        use std::os::unix::fs::MetadataExt;
        self.0
            .iter()
            .filter(|(path, dev, ino)| {
                path.symlink_metadata()
                    .map_or(true, |m| (m.dev(), m.ino()) != (*dev, *ino))
            })
            .map(|(path, _, _)| path.as_path())
            .collect()
    }

    /// What the person is told about a replaced file.
    pub fn warning(path: &Path) -> String {
        format!(
            "WARNING: {} was replaced or removed during the session (an editor that saves by \
             renaming a new file over the old one does this). The sandbox protected the file that \
             was there when the session started, not the new one, so the agent could have written \
             the new one: check it before the next session. Editing in place, and fenzi's own \
             commands, keep the protection",
            path.display()
        )
    }
}

/// Where the command may write.
pub fn writable_paths(
    cwd: &Path,
    agent: Option<Agent>,
    extra: &[PathBuf],
    sandbox_cache: Option<&Path>,
) -> Result<Vec<PathBuf>> {
    let mut paths = vec![cwd.to_path_buf(), std::env::temp_dir()];
    paths.extend(["/tmp", "/var/tmp", "/dev/shm", "/dev"].map(PathBuf::from));
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    // The project's sandbox cache, never the person's own caches (see `caches`).
    paths.extend(sandbox_cache.map(Path::to_path_buf));
    if let (Some(agent), Some(home)) = (agent, &home) {
        refuse_linked_agent_state(agent, home)?;
        for dir in agent_state(agent, home) {
            // The agent would create them itself on its first run; it cannot once it is inside.
            session::create_private_dir(&dir)?;
            paths.push(dir);
        }
    }
    for path in extra {
        let absolute = if path.is_absolute() {
            path.clone()
        } else {
            cwd.join(path)
        };
        if !absolute.exists() {
            bail!(
                "--allow-write {}: no such file or directory (create it first)",
                path.display()
            );
        }
        paths.push(absolute);
    }
    Ok(paths)
}

/// Refuses an agent state directory that is a symbolic link (left by an earlier session's agent,
/// say): the sandbox resolves the paths it lets the agent write, so the link's target would become
/// writable, and fenzi writes there itself before the agent starts (Grok's settings file).
pub fn refuse_linked_agent_state(agent: Agent, home: &Path) -> Result<()> {
    for dir in agent_state(agent, home) {
        if dir
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        {
            bail!(
                "{} is a symbolic link; fenzi run lets the agent write its own state there, and \
                 would so let it write wherever the link points. Replace the link with the \
                 directory itself",
                dir.display()
            );
        }
    }
    Ok(())
}

/// The directories an agent keeps its own state, settings and sessions in, beneath `home`.
pub fn agent_state(agent: Agent, home: &Path) -> Vec<PathBuf> {
    let under = |rel: &[&str]| rel.iter().map(|r| home.join(r)).collect();
    match agent {
        Agent::Claude => under(&[".claude"]),
        Agent::Codex => match std::env::var_os("CODEX_HOME").filter(|v| !v.is_empty()) {
            Some(dir) => vec![PathBuf::from(dir)],
            None => under(&[".codex"]),
        },
        Agent::Opencode => under(&[
            ".config/opencode",
            ".local/share/opencode",
            ".local/state/opencode",
        ]),
        Agent::Grok => vec![grok_home(home)],
    }
}

/// Grok's home: `$GROK_HOME` when set, else `home/.grok`.
pub fn grok_home(home: &Path) -> PathBuf {
    match std::env::var_os("GROK_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => home.join(".grok"),
    }
}

fn refuse_symlink(path: &Path, what: &str) -> Result<()> {
    let meta = path
        .symlink_metadata()
        .with_context(|| format!("cannot read {what} {}", path.display()))?;
    if meta.file_type().is_symlink() {
        bail!(
            "{what} {} is a symbolic link; fenzi run keeps it read-only for the agent by mounting \
             it, which a link defeats (the agent could replace the link). Put the file itself there, \
             or run with --config pointing at the real file",
            path.display()
        );
    }
    Ok(())
}

/// `dir`, created first when missing; `None` when the user may not create it, since then the
/// sandbox, which runs as the same user with fewer rights, cannot create it either.
fn protectable_dir(dir: &Path) -> Result<Option<PathBuf>> {
    match session::create_private_dir(dir) {
        Ok(()) => Ok(Some(dir.to_path_buf())),
        Err(e) => match e
            .root_cause()
            .downcast_ref::<std::io::Error>()
            .map(|e| e.kind())
        {
            Some(std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem) => {
                Ok(None)
            }
            _ => Err(e),
        },
    }
}

/// Where a sandbox may write, as `fenzi check` and `fenzi run` judge a `programs:` path
/// (DESIGN §17): the temporary directories, the project's directory, the cache, every agent's
/// state directories, and `extra` (`fenzi run --allow-write`). A program there is whatever the
/// agent last wrote, so naming it by path alone would let the agent choose it.
pub fn sandbox_writable_roots(project_file: &Path, extra: &[PathBuf]) -> Vec<PathBuf> {
    use crate::commands::mcp::render::Agent;
    let mut roots: Vec<PathBuf> = fenzi_policy::programs::ALWAYS_WRITABLE
        .iter()
        .map(PathBuf::from)
        .collect();
    roots.push(std::env::temp_dir());
    let project = std::path::absolute(project_file).unwrap_or_else(|_| project_file.to_path_buf());
    roots.extend(project.parent().map(Path::to_path_buf));
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| home.as_ref().map(|h| h.join(".cache")));
    roots.extend(cache);
    if let Some(home) = &home {
        for agent in [Agent::Claude, Agent::Codex, Agent::Opencode, Agent::Grok] {
            roots.extend(agent_state(agent, home));
        }
    }
    roots.extend(extra.iter().cloned());
    // The executable's path is the resolved one: compare with resolved roots too.
    let resolved: Vec<PathBuf> = roots.iter().filter_map(|r| r.canonicalize().ok()).collect();
    roots.extend(resolved);
    roots
}

/// The `programs:` paths of `config` beneath `roots` without a `sha256`, as config errors.
pub fn unpinned_programs(
    config: &fenzi_policy::config::Config,
    roots: &[PathBuf],
) -> Vec<fenzi_policy::config::ConfigError> {
    let lists = config
        .mcp
        .iter()
        .flat_map(|s| &s.programs)
        .chain(config.secrets.iter().flat_map(|s| &s.programs))
        .chain(config.host_programs.iter().map(|h| &h.list));
    let roots: Vec<&Path> = roots.iter().map(PathBuf::as_path).collect();
    fenzi_policy::programs::unpinned_writable(lists, &roots)
        .into_iter()
        .map(|item| fenzi_policy::config::ConfigError {
            at: Some(item.at.clone()),
            message: format!(
                "`{}` is where the sandbox can write: a program there is whatever the agent last \
                 wrote",
                item.value
            ),
            hint: Some(format!(
                "pin its content: `{{path: {}, sha256: HEX}}` (`sha256sum` of the file), or name \
                 a program installed outside the project and the temporary directories",
                item.value
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_agent_writes_only_its_own_state() {
        let home = Path::new("/home/u");
        assert_eq!(
            agent_state(Agent::Claude, home),
            [PathBuf::from("/home/u/.claude")]
        );
        assert_eq!(
            agent_state(Agent::Grok, home),
            [PathBuf::from("/home/u/.grok")]
        );
        let opencode = agent_state(Agent::Opencode, home);
        assert!(opencode.iter().all(|p| p.starts_with("/home/u")));
        assert!(
            !opencode
                .iter()
                .any(|p| p.starts_with("/home/u/.config/fenzi") || p.ends_with(".local/state")),
            "{opencode:?}"
        );
    }

    #[test]
    fn the_lock_exists_before_the_agent_and_is_protected_pinned_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("team.yaml");
        std::fs::write(&policy, "version: 1\n").unwrap();
        // No lock yet (nothing pinned): the lock beside this policy file (not fenzi.lock) is
        // created, empty, protected, and recorded as fenzi's, so it is trusted.
        let trust = TrustRecords::at(dir.path().join("state/lock-trust"));
        let lock = protected_lock(&policy, Some(&trust)).unwrap().unwrap();
        assert_eq!(lock, dir.path().join("team.lock"));
        let read = fenzi_proxy::lock_file::read_reviewed(&lock, Some(&trust)).unwrap();
        assert_eq!(read.lock, Lock::default());
        assert_eq!(read.review, fenzi_proxy::lock_file::Review::Reviewed);
        // An existing lock is kept as it is (and protected).
        let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&lock).unwrap());
        std::fs::write(&lock, Lock::default().to_text() + "\n").unwrap();
        assert_eq!(
            protected_lock(&policy, Some(&trust)).unwrap(),
            Some(lock.clone())
        );
        assert!(std::fs::read_to_string(&lock).unwrap().ends_with("\n\n"));
        assert_eq!(
            std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&lock).unwrap()),
            inode
        );
        // A lock that is a symlink is refused, and its target not created.
        std::fs::remove_file(&lock).unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere.lock"), &lock).unwrap();
        assert!(protected_lock(&policy, Some(&trust)).is_err());
        assert!(!dir.path().join("elsewhere.lock").exists());
    }

    #[test]
    fn an_explicit_logs_export_cursor_exists_before_the_agent_and_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.jsonl");
        let cursor = protected_cursor(&log).unwrap();
        assert_eq!(cursor, fenzi_proxy::export::cursor_path(&log));
        let read = fenzi_proxy::export::cursor::read(&log).unwrap();
        assert_eq!(read, Some(fenzi_proxy::export::Cursor::start()));
        // One that exists (a session shipped part of this log) is protected as it is.
        let shipped = fenzi_proxy::export::Cursor {
            seq: 7,
            offset: 1_000,
            ..fenzi_proxy::export::Cursor::start()
        };
        fenzi_proxy::export::cursor::store(&log, &shipped).unwrap();
        protected_cursor(&log).unwrap();
        assert_eq!(
            fenzi_proxy::export::cursor::read(&log).unwrap(),
            Some(shipped)
        );
        std::fs::remove_file(&cursor).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", &cursor).unwrap();
        assert!(protected_cursor(&log).is_err());
    }

    #[test]
    fn a_linked_agent_state_directory_is_refused() {
        let home = tempfile::tempdir().unwrap();
        assert!(refuse_linked_agent_state(Agent::Claude, home.path()).is_ok());
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), home.path().join(".claude")).unwrap();
        let err = refuse_linked_agent_state(Agent::Claude, home.path()).unwrap_err();
        assert!(
            err.to_string().contains(".claude is a symbolic link"),
            "{err}"
        );
    }

    #[test]
    fn a_governing_path_through_a_link_in_a_writable_place_is_found() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let project = root.join("project");
        let outside = root.join("outside");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("fenzi.yaml"), "version: 1\n").unwrap();
        std::os::unix::fs::symlink(&outside, project.join("conf")).unwrap();
        let via_link = project.join("conf/fenzi.yaml");
        // The link lies in the project, which the command may write: found.
        assert_eq!(
            changeable_link(&via_link, std::slice::from_ref(&project)),
            Some(project.join("conf"))
        );
        // Where the command may not write, a link is the person's own: allowed.
        assert_eq!(changeable_link(&via_link, &[root.join("elsewhere")]), None);
        // Without a link, nothing to find.
        assert_eq!(
            changeable_link(&outside.join("fenzi.yaml"), std::slice::from_ref(&project)),
            None
        );
    }

    #[test]
    fn a_file_replaced_by_a_rename_is_noticed_and_one_edited_in_place_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let (kept, replaced) = (dir.path().join("kept.yaml"), dir.path().join("fenzi.yaml"));
        std::fs::write(&kept, "version: 1\n").unwrap();
        std::fs::write(&replaced, "version: 1\n").unwrap();
        let protected = Protected::record(&[kept.clone(), replaced.clone(), dir.path().into()]);
        assert!(protected.replaced().is_empty());
        std::fs::write(&kept, "version: 1\nhosts: [a.test]\n").unwrap();
        let new = dir.path().join("new.yaml");
        std::fs::write(&new, "version: 1\n").unwrap();
        std::fs::rename(&new, &replaced).unwrap();
        assert_eq!(protected.replaced(), [replaced.as_path()]);
        assert!(Protected::warning(&replaced).contains("check it before the next session"));
    }

    #[test]
    fn a_symlinked_policy_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.yaml");
        std::fs::write(&real, "version: 1\n").unwrap();
        let link = dir.path().join("fenzi.yaml");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = refuse_symlink(&link, "the project policy").unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(refuse_symlink(&real, "the project policy").is_ok());
    }
}
