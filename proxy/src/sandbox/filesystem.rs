//! What the sandbox may write, prepared in the parent before the fork. Two mechanisms:
//!
//! - **Governing paths, read-only.** Each path that governs a session (the project policy and its
//!   lock, the machine config directory, fenzi's state directory with every audit log and head) is
//!   bind-mounted onto itself read-only in the sandbox's mount namespace. A write, append,
//!   truncation or chmod fails with `EROFS`; an unlink, rename or replace-by-rename of the mount
//!   point fails with `EBUSY`, because the kernel refuses to move or remove a mount point of the
//!   caller's namespace.
//! - **Their ancestors, immovable.** Renaming an ancestor directory and recreating the path with
//!   forged files is the indirect route. Every ancestor of a governing path (except `/`) is
//!   bind-mounted onto itself, writable, so it too is a mount point of the sandbox's namespace and
//!   cannot be renamed or removed there; its contents stay as writable as before.
//! - **A write allowlist (Landlock).** The command may create, write, truncate, remove and rename
//!   only beneath the allowed paths (the project directory, the temporary directories, the agent's
//!   own state). Reading and executing are not restricted. A governing path inside an allowed one
//!   stays read-only: the mount wins.
//!
//! The init applies them in this order: the ancestor binds (outermost first), the read-only mounts,
//! and, after `no_new_privs`, the Landlock ruleset built here. Any failure stops the session.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::fs::OpenOptions;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::error::{SandboxError, SetupStep};
use super::sys;

/// The oldest Landlock ABI used: 2 (Linux 5.19) controls renames and links across directories
/// (`REFER`); without it every rename between directories would be refused.
pub(crate) const LANDLOCK_MIN_ABI: u32 = 2;

// Landlock filesystem access rights (include/uapi/linux/landlock.h).
const WRITE_FILE: u64 = 1 << 1;
const REMOVE_DIR: u64 = 1 << 4;
const REMOVE_FILE: u64 = 1 << 5;
const MAKE_CHAR: u64 = 1 << 6;
const MAKE_DIR: u64 = 1 << 7;
const MAKE_REG: u64 = 1 << 8;
const MAKE_SOCK: u64 = 1 << 9;
const MAKE_FIFO: u64 = 1 << 10;
const MAKE_BLOCK: u64 = 1 << 11;
const MAKE_SYM: u64 = 1 << 12;
const REFER: u64 = 1 << 13;
/// ABI 3.
const TRUNCATE: u64 = 1 << 14;

/// Every right that changes the filesystem, for `abi`: what the allowlist governs.
fn write_rights(abi: u32) -> u64 {
    let mut rights = WRITE_FILE
        | REMOVE_DIR
        | REMOVE_FILE
        | MAKE_CHAR
        | MAKE_DIR
        | MAKE_REG
        | MAKE_SOCK
        | MAKE_FIFO
        | MAKE_BLOCK
        | MAKE_SYM
        | REFER;
    if abi >= 3 {
        rights |= TRUNCATE;
    }
    rights
}

/// The rights a rule on a regular file may carry (the rest only make sense on directories).
fn file_rights(rights: u64) -> u64 {
    rights & (WRITE_FILE | TRUNCATE)
}

/// One mount the init makes: `path` bound onto itself with `bind_flags`, then remounted with
/// `remount_flags`.
#[derive(Debug)]
pub(crate) struct BindMount {
    /// What is mounted: the path itself, or (for a file overlay such as `/etc/resolv.conf`)
    /// another file.
    pub source: CString,
    pub path: CString,
    /// `MS_BIND`, recursive for an ancestor (the mounts beneath it stay visible) and not for a
    /// governing path (a writable mount beneath it must not stay writable inside the sandbox).
    pub bind_flags: libc::c_ulong,
    /// `MS_REMOUNT | MS_BIND` plus `MS_RDONLY` for a governing path, and the flags the original
    /// mount locks (a user namespace may not clear `nosuid`, `nodev`, `noexec` or the atime mode).
    pub remount_flags: libc::c_ulong,
}

/// The mounts that make `governing` read-only and their ancestors immovable, in the order the
/// init makes them. Every path must exist; it is resolved (symlinks followed) first.
pub(crate) fn bind_mounts(governing: &[PathBuf]) -> Result<Vec<BindMount>, SandboxError> {
    let mut resolved = BTreeSet::new();
    for path in governing {
        resolved.insert(resolve(path)?);
    }
    let mut mounts = Vec::new();
    for (path, read_only) in mount_plan(&resolved) {
        let path = c_path(&path)?;
        let locked = sys::locked_mount_flags(&path).map_err(|errno| {
            protect_error(format!("cannot read the mount flags of {path:?}"), errno)
        })?;
        let (bind_flags, read_only) = if read_only {
            (libc::MS_BIND, libc::MS_RDONLY)
        } else {
            (libc::MS_BIND | libc::MS_REC, 0)
        };
        mounts.push(BindMount {
            source: path.clone(),
            path,
            bind_flags,
            remount_flags: libc::MS_REMOUNT | libc::MS_BIND | read_only | locked,
        });
    }
    Ok(mounts)
}

/// The read-only mount of `resolv_conf` over `/etc/resolv.conf`, so that names resolve through the
/// sandbox's DNS stub; none when the system has no `/etc/resolv.conf` (nothing would read it).
pub(crate) fn resolv_conf_mount(resolv_conf: &Path) -> Result<Option<BindMount>, SandboxError> {
    if std::fs::canonicalize("/etc/resolv.conf").is_err() {
        return Ok(None);
    }
    file_overlay(resolv_conf, Path::new("/etc/resolv.conf")).map(Some)
}

/// The read-only mount of the file `source` over the file `target`, which must exist: inside the
/// sandbox `target` reads as `source`, cannot be written, and (a mount point) cannot be removed or
/// replaced by a rename. Both are resolved (symlinks followed) first.
pub(crate) fn file_overlay(source: &Path, target: &Path) -> Result<BindMount, SandboxError> {
    let source = c_path(&resolve(source)?)?;
    let target = c_path(&resolve(target)?)?;
    // The new mount is a bind of the source's mount, so it carries that mount's locked flags.
    let locked = sys::locked_mount_flags(&source).map_err(|errno| {
        protect_error(format!("cannot read the mount flags of {source:?}"), errno)
    })?;
    Ok(BindMount {
        source,
        path: target,
        bind_flags: libc::MS_BIND,
        remount_flags: libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | locked,
    })
}

/// Which paths to bind, writable ancestors first (shortest first, so an outer bind never hides an
/// inner one), then the governing paths read-only. `/` is never bound: it cannot be renamed. An
/// ancestor inside a governing path is left out: the read-only mount already covers it.
fn mount_plan(governing: &BTreeSet<PathBuf>) -> Vec<(PathBuf, bool)> {
    let mut ancestors = BTreeSet::new();
    for path in governing {
        for ancestor in path.ancestors().skip(1) {
            let covered = governing.iter().any(|g| ancestor.starts_with(g));
            if ancestor.parent().is_some() && !covered {
                ancestors.insert(ancestor.to_path_buf());
            }
        }
    }
    let mut plan: Vec<(PathBuf, bool)> = ancestors.into_iter().map(|p| (p, false)).collect();
    plan.sort_by_key(|(p, _)| p.components().count());
    let mut governing: Vec<&PathBuf> = governing.iter().collect();
    governing.sort_by_key(|p| p.components().count());
    plan.extend(governing.into_iter().map(|p| (p.clone(), true)));
    plan
}

/// The Landlock ruleset that lets the command write beneath `writable` only. Paths that do not
/// exist are skipped (nothing can be written beneath them anyway, and the command may not create
/// them). Fails when the kernel's Landlock is older than [`LANDLOCK_MIN_ABI`] or absent.
pub(crate) fn write_allowlist(writable: &[PathBuf]) -> Result<OwnedFd, SandboxError> {
    let abi =
        sys::landlock_abi().map_err(|errno| SandboxError::isolation(SetupStep::Landlock, errno))?;
    if abi < LANDLOCK_MIN_ABI {
        return Err(SandboxError::Isolation {
            step: SetupStep::Landlock,
            source: std::io::Error::other(format!(
                "the kernel's Landlock ABI is {abi}, and fenzi needs {LANDLOCK_MIN_ABI} (Linux 5.19 or later)"
            )),
            hint: None,
        });
    }
    let rights = write_rights(abi);
    let ruleset = sys::landlock_create_ruleset(rights)
        .map_err(|errno| SandboxError::isolation(SetupStep::Landlock, errno))?;
    for path in writable {
        let opened = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
            .open(path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(SandboxError::Isolation {
                    step: SetupStep::Landlock,
                    source: std::io::Error::new(
                        e.kind(),
                        format!(
                            "cannot open {} for the write allowlist: {e}",
                            path.display()
                        ),
                    ),
                    hint: None,
                });
            }
        };
        let is_dir = opened.metadata().map(|m| m.is_dir()).unwrap_or(false);
        let allowed = if is_dir { rights } else { file_rights(rights) };
        let fd = OwnedFd::from(opened);
        sys::landlock_add_path_rule(&ruleset, &fd, allowed)
            .map_err(|errno| SandboxError::isolation(SetupStep::Landlock, errno))?;
    }
    Ok(ruleset)
}

/// `path` with symlinks resolved; a missing path is an error naming it.
fn resolve(path: &Path) -> Result<PathBuf, SandboxError> {
    std::fs::canonicalize(path).map_err(|e| SandboxError::Isolation {
        step: SetupStep::ProtectFiles,
        source: std::io::Error::new(e.kind(), format!("cannot protect {}: {e}", path.display())),
        hint: None,
    })
}

fn c_path(path: &Path) -> Result<CString, SandboxError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        SandboxError::InvalidSpec(format!("the path {} contains a NUL byte", path.display()))
    })
}

fn protect_error(what: String, errno: i32) -> SandboxError {
    SandboxError::Isolation {
        step: SetupStep::ProtectFiles,
        source: std::io::Error::new(std::io::Error::from_raw_os_error(errno).kind(), what),
        hint: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(paths: &[&str]) -> BTreeSet<PathBuf> {
        paths.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn ancestors_come_first_writable_and_outermost_first_then_the_governing_paths_read_only() {
        let plan = mount_plan(&set(&[
            "/home/u/proj/fenzi.yaml",
            "/home/u/.local/state/fenzi",
            "/home/u/.config/fenzi",
        ]));
        let shown: Vec<(String, bool)> = plan
            .iter()
            .map(|(p, ro)| (p.display().to_string(), *ro))
            .collect();
        let expect = [
            ("/home", false),
            ("/home/u", false),
            ("/home/u/.config", false),
            ("/home/u/.local", false),
            ("/home/u/proj", false),
            ("/home/u/.local/state", false),
            ("/home/u/.config/fenzi", true),
            ("/home/u/proj/fenzi.yaml", true),
            ("/home/u/.local/state/fenzi", true),
        ];
        let expect: Vec<(String, bool)> = expect.iter().map(|(p, r)| (p.to_string(), *r)).collect();
        assert_eq!(shown, expect);
    }

    #[test]
    fn nothing_inside_a_governing_path_is_bound_writable() {
        let plan = mount_plan(&set(&["/s/fenzi", "/s/fenzi/audit/x.jsonl"]));
        let ro: Vec<_> = plan
            .iter()
            .filter(|(_, ro)| *ro)
            .map(|(p, _)| p.clone())
            .collect();
        assert_eq!(
            ro,
            [
                PathBuf::from("/s/fenzi"),
                PathBuf::from("/s/fenzi/audit/x.jsonl")
            ]
        );
        // Inside a read-only path nothing is bound writable: that would be a writable hole in it.
        let writable: Vec<_> = plan
            .iter()
            .filter(|(_, ro)| !*ro)
            .map(|(p, _)| p.clone())
            .collect();
        assert_eq!(writable, [PathBuf::from("/s")]);
    }

    #[test]
    fn files_get_only_file_rights() {
        let all = write_rights(3);
        assert_eq!(file_rights(all), WRITE_FILE | TRUNCATE);
        assert_eq!(write_rights(2) & TRUNCATE, 0, "TRUNCATE is ABI 3");
    }
}
