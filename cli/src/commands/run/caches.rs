//! Where the sandbox's package managers keep their caches: one directory per project,
//! `$XDG_CACHE_HOME/fenzi/sandbox/<folder name>-<hash of its path>`, that only sandboxes started
//! in that project write. The sandbox's environment points every package manager there
//! (`fenzi_proxy::sandbox::env::CACHE_VARS`: npm, pnpm, Yarn, pip, uv, cargo, Go, Gradle, Maven,
//! and `XDG_CACHE_HOME` itself).
//!
//! Why: a package cache is trusted. `npm`, `pip`, `uv`, `cargo` and `go` reuse what their cache
//! holds without fetching it again (Go and cargo check the hashes a lock file names, but a tarball
//! or wheel cache, a built-wheel cache or Go's build cache are taken as they are). An agent that
//! could write the person's own caches (`~/.npm`, `~/.cache/pip`, `~/.cargo/registry`,
//! `~/go/pkg/mod`, `~/.cache/go-build`) could leave a poisoned package there for the person's next
//! unsandboxed install, in any project. So the person's caches, `~/.cache` included, are not on
//! the write list; the sandbox gets its own. Keyed by project, so that an agent in one project
//! cannot poison what another project's sandbox later installs: what the agent can reach is its own
//! project's cache, and it can write that project's files (lock files, `node_modules`, `.venv`)
//! anyway, so the cache gives it nothing more. Nothing outside a sandbox is pointed at these
//! directories.

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// The person's cache directory: `$XDG_CACHE_HOME` when absolute, else `$HOME/.cache`.
pub fn cache_home() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })
}

/// The sandbox cache of the project in `project` (an absolute, resolved path) beneath
/// `cache_home`. Pure.
pub fn dir_for(cache_home: &Path, project: &Path) -> PathBuf {
    let name: String = project
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    let name = name.trim_start_matches('.');
    let hash = Sha256::digest(project.as_os_str().as_bytes());
    cache_home
        .join("fenzi/sandbox")
        .join(format!("{name}-{}", hex::encode(&hash[..8])))
}

/// The sandbox cache of a session, or why there is none.
pub enum Cache {
    Dir(PathBuf),
    /// What the person is told: package managers inside cannot keep a cache (they fail as they
    /// would on a read-only home), and why.
    None(String),
}

/// Creates the sandbox cache of the project in `cwd` (private to the user) and returns it. There
/// is none when there is no cache directory to put it in (neither `XDG_CACHE_HOME` nor `HOME`) or
/// the user may not create it there. A link on the way beneath the cache home is refused: the
/// sandbox would be let write where it points.
pub fn prepare(cwd: &Path) -> Result<Cache> {
    const WITHOUT: &str = "package managers inside the sandbox have no cache to write";
    let Some(home) = cache_home() else {
        return Ok(Cache::None(format!(
            "neither XDG_CACHE_HOME nor HOME is set: {WITHOUT}"
        )));
    };
    let project = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    let dir = dir_for(&home, &project);
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
    {
        if matches!(
            e.kind(),
            std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
        ) {
            return Ok(Cache::None(format!(
                "cannot create {} ({e}): {WITHOUT}",
                dir.display()
            )));
        }
        return Err(e).with_context(|| format!("cannot create {}", dir.display()));
    }
    for path in [home.join("fenzi"), home.join("fenzi/sandbox"), dir.clone()] {
        if path
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        {
            bail!(
                "{} is a symbolic link; fenzi run lets the sandbox write its package caches \
                 beneath it, and would so let it write wherever the link points. Replace the link \
                 with a directory",
                path.display()
            );
        }
    }
    // Owned by this user and writable by no one else, as every directory fenzi opens to the
    // sandbox: another user who could write here could swap what the sandbox writes into.
    fenzi_proxy::host_files::existing_private_dir(&dir)
        .with_context(|| format!("the sandbox cache {} is not private", dir.display()))?;
    Ok(Cache::Dir(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cache_per_project_named_for_people_and_keyed_by_path() {
        let home = Path::new("/home/u/.cache");
        let a = dir_for(home, Path::new("/home/u/src/app"));
        let b = dir_for(home, Path::new("/home/u/work/app"));
        assert!(a.starts_with("/home/u/.cache/fenzi/sandbox"), "{a:?}");
        let name = a.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("app-") && name.len() == 4 + 16, "{name}");
        // Same folder name elsewhere: another project, another cache.
        assert_ne!(a, b);
        assert_eq!(a, dir_for(home, Path::new("/home/u/src/app")));
        // Odd names stay one path component.
        let odd = dir_for(home, Path::new("/x/../a b\n"));
        assert_eq!(
            odd.parent().unwrap(),
            Path::new("/home/u/.cache/fenzi/sandbox")
        );
        assert!(!odd.file_name().unwrap().to_str().unwrap().contains(' '));
        let root = dir_for(home, Path::new("/"));
        assert!(
            root.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("root-")
        );
    }
}
