//! One policy file as the session protected it at its start, and whether the path the person gave
//! still leads to it (README, "Reloading the policy"; SECURITY.md, "A policy change never opens a gap").
//!
//! At start the path is resolved once (every symbolic link followed), the file opened there
//! (`O_RDONLY|O_NOFOLLOW|O_CLOEXEC`, without blocking) and its device and inode kept with the
//! descriptor. The sandbox protects that file by mounting it read-only onto itself, which holds
//! only as long as the name keeps that inode: a rename over it on the host (an editor saving
//! through a temporary file, `sed -i`) drops the mount inside the sandbox, and the new file may be
//! the agent's to write; a link on the way re-pointed leads to a file the agent chose. So every
//! look re-resolves the path and compares: another place, another inode, no file, a second name
//! (a hard link the sandbox does not cover) are [`Lost`], which the watch refuses with the reason
//! and never loads. The bytes are only ever read through the kept descriptor ([`Pinned::read`],
//! from offset 0), never by path, so even a look that raced a change cannot read another file.

use crate::config_files::MAX_CONFIG_BYTES;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A policy file pinned at the session's start.
#[derive(Debug)]
pub struct Pinned {
    /// The path as the person gave it, for messages.
    shown: String,
    /// The same, made absolute at start (what a relative path names does not follow a later
    /// change of directory).
    given: PathBuf,
    /// Where it led at start, every link followed.
    resolved: PathBuf,
    file: File,
    dev: u64,
    ino: u64,
}

/// What one look at a pinned file found. A change from one look to the next is a change of the
/// file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// The path still leads to the pinned file; its metadata as the descriptor tells it (an edit
    /// in place changes the size or the times).
    Protected(Stamp),
    /// It no longer does.
    Lost(Lost),
}

/// A pinned file's metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Which file: the same for a pinned file, another once `fenzi proxy` follows its path.
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    mode: u32,
}

/// How the path the person gave no longer leads to the file the session protected. Deliberately
/// coarse: while a file stays lost, what the agent may then do at the path (write, remove, link)
/// changes nothing here, so it cannot make one record after another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// Nothing is at the place it led to.
    Removed,
    /// Another file is there: one renamed over it, or one deleted and made again.
    Replaced,
    /// The path leads somewhere else: a symbolic link or folder on its way changed.
    Elsewhere,
    /// The file has another name (a hard link), which the sandbox does not protect.
    Linked,
    /// The path cannot be followed any more (a folder on its way cannot be searched).
    Unreachable,
}

impl Pinned {
    /// Resolves and opens `path`; it must be a regular file.
    pub fn open(path: &Path) -> io::Result<Pinned> {
        let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        let given = std::path::absolute(path).map_err(named)?;
        let resolved = std::fs::canonicalize(&given).map_err(named)?;
        // O_CLOEXEC is std's default; O_NONBLOCK so a FIFO put there is refused, not waited on.
        let flags = (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(&resolved)
            .map_err(named)?;
        let meta = file.metadata().map_err(named)?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: is not a regular file", path.display()),
            ));
        }
        Ok(Pinned {
            shown: path.display().to_string(),
            given,
            resolved,
            dev: meta.dev(),
            ino: meta.ino(),
            file,
        })
    }

    /// The path as the person gave it.
    /// The file the path leads to now, pinned afresh (for `fenzi proxy`, which protects nothing
    /// and so follows the path: a Kubernetes ConfigMap is updated by re-pointing a link).
    pub fn reopen(&self) -> io::Result<Pinned> {
        let mut fresh = Pinned::open(&self.given)?;
        fresh.shown.clone_from(&self.shown);
        Ok(fresh)
    }

    pub fn name(&self) -> &str {
        &self.shown
    }

    /// Whether the path still leads to the pinned file, and its metadata if so.
    pub fn look(&self) -> State {
        if let Some(lost) = self.lost() {
            return State::Lost(lost);
        }
        match self.file.metadata() {
            Ok(m) if m.nlink() > 1 => State::Lost(Lost::Linked),
            Ok(m) => State::Protected(Stamp {
                ino: m.ino(),
                size: m.size(),
                mtime: (m.mtime(), m.mtime_nsec()),
                ctime: (m.ctime(), m.ctime_nsec()),
                mode: m.mode(),
            }),
            Err(_) => State::Lost(Lost::Unreachable),
        }
    }

    fn lost(&self) -> Option<Lost> {
        let at_start = || match std::fs::symlink_metadata(&self.resolved) {
            Ok(m) if (m.dev(), m.ino()) == (self.dev, self.ino) => None,
            Ok(_) => Some(Lost::Replaced),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Some(Lost::Removed),
            Err(_) => Some(Lost::Unreachable),
        };
        match std::fs::canonicalize(&self.given) {
            Ok(now) if now == self.resolved => at_start(),
            Ok(_) => Some(Lost::Elsewhere),
            // Nothing where the path leads now: the file itself gone, or the way to it changed.
            Err(e) if e.kind() == io::ErrorKind::NotFound => Some(match at_start() {
                Some(Lost::Removed) => Lost::Removed,
                _ => Lost::Elsewhere,
            }),
            Err(_) => Some(Lost::Unreachable),
        }
    }

    /// Why `lost` keeps the policy in force, in the person's words.
    pub fn why(&self, lost: Lost) -> String {
        let (name, resolved) = (&self.shown, self.resolved.display());
        let what = match lost {
            Lost::Removed => format!("{name} was removed"),
            Lost::Replaced => format!(
                "{name} was replaced by another file (renamed over it, as editors that save \
                 through a temporary file and `sed -i` do, or deleted and made again)"
            ),
            Lost::Elsewhere => format!(
                "{name} no longer leads to {resolved} (a symbolic link or folder on its way changed)"
            ),
            Lost::Linked => {
                format!("{name} has another name (a hard link), which the sandbox does not protect")
            }
            Lost::Unreachable => format!("{name} can no longer be reached"),
        };
        format!(
            "{what}; this session reloads only the file it protected at its start, so the policy \
             in force stays: start a new session to use the change, and edit policy files in \
             place (as `fenzi mcp` does; vim: `set backupcopy=yes`) for a running session to \
             reload them"
        )
    }

    /// The pinned file's bytes, read through the descriptor from its start; more than
    /// [`MAX_CONFIG_BYTES`] is refused.
    pub fn read(&self) -> io::Result<Vec<u8>> {
        let too_large = || {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("is larger than {} MiB", MAX_CONFIG_BYTES >> 20),
            )
        };
        if self.file.metadata()?.len() > MAX_CONFIG_BYTES {
            return Err(too_large());
        }
        let mut bytes = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match self.file.read_at(&mut chunk, bytes.len() as u64) {
                Ok(0) => return Ok(bytes),
                Ok(n) => bytes.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            // Grown past the bound while being read.
            if bytes.len() as u64 > MAX_CONFIG_BYTES {
                return Err(too_large());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost(p: &Pinned) -> Option<Lost> {
        match p.look() {
            State::Lost(l) => Some(l),
            State::Protected(_) => None,
        }
    }

    #[test]
    fn an_edit_in_place_is_a_change_read_through_the_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fenzi.yaml");
        std::fs::write(&path, "version: 1\n").unwrap();
        let p = Pinned::open(&path).unwrap();
        let before = p.look();
        assert!(matches!(before, State::Protected(_)));
        assert_eq!(p.look(), before, "nothing changed");
        // The same size, rewritten in place (std::fs::write truncates the same inode).
        std::fs::write(&path, "version: 2\n").unwrap();
        assert_ne!(p.look(), before);
        assert!(matches!(p.look(), State::Protected(_)));
        assert_eq!(p.read().unwrap(), b"version: 2\n");
        // Longer, then shorter: read from the start each time.
        std::fs::write(&path, "version: 1\n# more\n").unwrap();
        assert_eq!(p.read().unwrap(), b"version: 1\n# more\n");
        std::fs::write(&path, "v\n").unwrap();
        assert_eq!(p.read().unwrap(), b"v\n");
        // Grown past the bound.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(MAX_CONFIG_BYTES + 1)
            .unwrap();
        let e = p.read().unwrap_err().to_string();
        assert!(e.contains("larger than"), "{e}");
    }

    #[test]
    fn a_rename_over_the_file_a_removal_and_a_recreation_lose_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fenzi.yaml");
        std::fs::write(&path, "version: 1\n").unwrap();
        let p = Pinned::open(&path).unwrap();
        // Replaced by a rename, as an editor saves: the same text, another inode.
        let temp = dir.path().join(".fenzi.yaml.tmp");
        std::fs::write(&temp, "version: 1\n").unwrap();
        std::fs::rename(&temp, &path).unwrap();
        assert_eq!(lost(&p), Some(Lost::Replaced));
        let why = p.why(Lost::Replaced);
        assert!(why.contains("was replaced by another file"), "{why}");
        assert!(why.contains("the policy in force stays"), "{why}");
        assert!(why.contains("start a new session"), "{why}");
        assert!(why.contains("in place"), "{why}");
        // Whatever is written to the new file, the descriptor still reads the protected one.
        std::fs::write(&path, "version: 1\nhosts: [evil.example]\n").unwrap();
        assert_eq!(p.read().unwrap(), b"version: 1\n");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(lost(&p), Some(Lost::Removed));
        std::fs::create_dir(&path).unwrap();
        assert_eq!(lost(&p), Some(Lost::Replaced));
    }

    #[test]
    fn a_relinked_ancestor_or_file_link_leads_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["real", "other"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
            std::fs::write(dir.path().join(d).join("fenzi.yaml"), d).unwrap();
        }
        let conf = dir.path().join("conf");
        std::os::unix::fs::symlink("real", &conf).unwrap();
        let p = Pinned::open(&conf.join("fenzi.yaml")).unwrap();
        assert_eq!(
            lost(&p),
            None,
            "a path through a link is kept while the link stays"
        );
        assert_eq!(p.read().unwrap(), b"real");
        // The link re-pointed, as `ln -sfn` does (a new link renamed over it).
        let new = dir.path().join("conf.new");
        std::os::unix::fs::symlink("other", &new).unwrap();
        std::fs::rename(&new, &conf).unwrap();
        assert_eq!(lost(&p), Some(Lost::Elsewhere));
        let why = p.why(Lost::Elsewhere);
        assert!(why.contains("no longer leads to"), "{why}");
        assert!(why.contains("real/fenzi.yaml"), "{why}");
        assert_eq!(p.read().unwrap(), b"real", "never the other file");
        // Pointing nowhere.
        std::fs::remove_file(&conf).unwrap();
        std::os::unix::fs::symlink("gone", &conf).unwrap();
        assert_eq!(lost(&p), Some(Lost::Elsewhere));
        // The file itself a link, re-pointed.
        let link = dir.path().join("fenzi.yaml");
        std::os::unix::fs::symlink("real/fenzi.yaml", &link).unwrap();
        let q = Pinned::open(&link).unwrap();
        assert_eq!(lost(&q), None);
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink("other/fenzi.yaml", &link).unwrap();
        assert_eq!(lost(&q), Some(Lost::Elsewhere));
        // Back as it was: the same file through the same place.
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink("real/fenzi.yaml", &link).unwrap();
        assert_eq!(lost(&q), None);
    }

    #[test]
    fn a_second_name_is_not_protected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fenzi.yaml");
        std::fs::write(&path, "version: 1\n").unwrap();
        let p = Pinned::open(&path).unwrap();
        let second = dir.path().join("copy.yaml");
        std::fs::hard_link(&path, &second).unwrap();
        assert_eq!(lost(&p), Some(Lost::Linked));
        assert!(p.why(Lost::Linked).contains("hard link"));
        std::fs::remove_file(&second).unwrap();
        assert_eq!(lost(&p), None);
    }

    #[test]
    fn only_a_regular_file_is_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.yaml");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        // Opened without blocking, then refused.
        let e = Pinned::open(&fifo).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let e = Pinned::open(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let e = Pinned::open(&dir.path().join("gone.yaml")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("gone.yaml"), "{e}");
    }
}
