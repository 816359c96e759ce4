//! Lock files on disk (`fenzi.lock` beside `fenzi.yaml`, `mcp.lock` beside the machine file): where
//! they are, reading one strictly ([`fenzi_policy::pins::Lock::parse`]) together with whether fenzi
//! vouches for it ([`crate::lock_file::trust`]), and writing one.
//!
//! A lock is opened without following a link (a lock that is one is refused) and must be a
//! regular file.
//!
//! A write never replaces the lock by a rename: while `fenzi run` runs, the sandbox holds the lock
//! bind-mounted read-only onto itself, and a rename over it on the host would detach that mount
//! inside the sandbox, leaving the agent a new lock it could write. So the lock is written in place
//! (opened `O_WRONLY|O_NOFOLLOW`, or created `O_CREAT|O_EXCL|O_NOFOLLOW` when missing; written, cut
//! to the new length, synced), and only then is its trust record updated. A crash or a concurrent
//! writer in between leaves a lock whose hash no record names: the next reader finds it
//! unreviewed (every entry hidden and denied) until `fenzi mcp pin` accepts it. It fails closed.
//!
//! May use: `host_files`.

pub mod trust;

use crate::host_files::{self, HostDir, Opening};
use crate::lock_file::trust::TrustRecords;
use fenzi_policy::pins::{Lock, LockError, MAX_LOCK_BYTES};
use rustix::fs::{Mode, OFlags};
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// Why a lock file cannot be used. Names the file; never quotes its contents.
#[derive(Debug, thiserror::Error)]
pub enum LockFileError {
    #[error("{path}: cannot read the lock file: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error(
        "{path}: the lock file is a symbolic link; fenzi reads and writes only the file itself \
         (put the lock there, not a link to it)"
    )]
    Symlink { path: PathBuf },
    #[error("{path}: the lock file is not a regular file")]
    NotAFile { path: PathBuf },
    #[error("{path}: the lock file is larger than {MAX_LOCK_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("{path}: {source}")]
    Invalid { path: PathBuf, source: LockError },
    #[error("{path}: cannot write the lock file: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error(
        "{path}: wrote the lock file but cannot record it as reviewed in {records}: {source}; \
         it stays unreviewed until `fenzi mcp pin` accepts it"
    )]
    Record {
        path: PathBuf,
        records: PathBuf,
        source: io::Error,
    },
}

/// A lock as read, and whether fenzi vouches for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadLock {
    pub lock: Lock,
    pub review: Review,
}

/// Whether a lock's entries may be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Review {
    /// No lock file: nothing to trust, nothing planted (an empty lock).
    Absent,
    /// fenzi wrote these exact bytes at this path, or a person accepted them.
    Reviewed,
    /// Nobody vouches for these bytes at this path (planted, edited, copied, half-written, or from
    /// a fenzi that kept no records): every entry is unreviewed.
    Unreviewed,
}

impl ReadLock {
    /// The lock's entries may be used as pins (a missing lock has none to use).
    pub fn trusted(&self) -> bool {
        self.review != Review::Unreviewed
    }
}

/// The lock file beside a policy file: the same name with the extension `lock` (`fenzi.yaml` →
/// `fenzi.lock`, `mcp.yaml` → `mcp.lock`).
pub fn lock_path_for(policy_file: &Path) -> PathBuf {
    policy_file.with_extension("lock")
}

/// Reads the lock at `path`, whoever wrote it; a missing file is an empty lock. For reports
/// (`fenzi check`); what a session enforces comes from [`read_reviewed`].
pub fn read_lock(path: &Path) -> Result<Lock, LockFileError> {
    Ok(read_reviewed(path, None)?.lock)
}

/// Reads the lock at `path` and asks `records` whether fenzi vouches for exactly these bytes
/// (without records, an existing lock is unreviewed). A missing file is an empty lock.
pub fn read_reviewed(
    path: &Path,
    records: Option<&TrustRecords>,
) -> Result<ReadLock, LockFileError> {
    let Some(bytes) = read_bytes(path)? else {
        return Ok(ReadLock {
            lock: Lock::default(),
            review: Review::Absent,
        });
    };
    let lock = Lock::parse(&bytes).map_err(|source| LockFileError::Invalid {
        path: path.to_path_buf(),
        source,
    })?;
    let review = match records {
        Some(records) if records.vouches_for(path, &bytes) => Review::Reviewed,
        _ => Review::Unreviewed,
    };
    Ok(ReadLock { lock, review })
}

fn read_bytes(path: &Path) -> Result<Option<Vec<u8>>, LockFileError> {
    let read_error = |source| LockFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    // NONBLOCK: a FIFO planted under the lock's name must not hang the reader.
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(rustix::io::Errno::LOOP) => {
            return Err(LockFileError::Symlink {
                path: path.to_path_buf(),
            });
        }
        Err(e) => return Err(read_error(e.into())),
    };
    let file = fs::File::from(fd);
    if !file.metadata().map_err(read_error)?.is_file() {
        return Err(LockFileError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_LOCK_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() > MAX_LOCK_BYTES {
        return Err(LockFileError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    Ok(Some(bytes))
}

/// Writes `lock` to `path` in place (see the module doc), then records it in `records` as content
/// fenzi vouches for. Without records the lock is written but stays unreviewed.
pub fn write_lock(
    path: &Path,
    lock: &Lock,
    records: Option<&TrustRecords>,
) -> Result<(), LockFileError> {
    let text = lock.to_text();
    write_in_place(path, text.as_bytes()).map_err(|e| {
        if host_files::is_link_refused(&e) {
            LockFileError::Symlink {
                path: path.to_path_buf(),
            }
        } else {
            LockFileError::Write {
                path: path.to_path_buf(),
                source: e,
            }
        }
    })?;
    if let Some(records) = records {
        records
            .record(path, text.as_bytes())
            .map_err(|source| LockFileError::Record {
                path: path.to_path_buf(),
                records: records.dir().to_path_buf(),
                source,
            })?;
    }
    Ok(())
}

/// Through the lock's directory (crate::host_files): opened in place, never through a link, a
/// FIFO refused; created 0644 when missing (the lock belongs with the project).
fn write_in_place(path: &Path, text: &[u8]) -> io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let mut file = HostDir::of_file(path)?.open_rw_shared(name, Opening::Existing)?;
    file.write_all(text)?;
    file.set_len(text.len() as u64)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fenzi_policy::json::{JsonLimits, parse};
    use fenzi_policy::pins::{PinnedTool, ServerPins};
    use std::os::unix::fs::MetadataExt;

    fn one_tool_lock(description: &str) -> Lock {
        let mut lock = Lock::default();
        let text = format!(r#"{{"name":"t","description":"{description}"}}"#);
        let tool = parse(text.as_bytes(), &JsonLimits::default()).unwrap();
        let mut pins = ServerPins::new();
        pins.insert("t".into(), PinnedTool::from_listed(&tool));
        lock.servers.insert("s".into(), pins);
        lock
    }

    /// A project directory, and trust records outside it (as the state directory is).
    fn setup() -> (tempfile::TempDir, PathBuf, TrustRecords) {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("project");
        fs::create_dir(&project).unwrap();
        let records = TrustRecords::in_state_dir(&dir.path().join("state/fenzi"));
        (dir, project, records)
    }

    #[test]
    fn locks_are_written_whole_and_read_back() {
        let (_dir, project, records) = setup();
        let path = lock_path_for(&project.join("fenzi.yaml"));
        assert_eq!(path.file_name().unwrap(), "fenzi.lock");
        let absent = read_reviewed(&path, Some(&records)).unwrap();
        assert_eq!(
            (absent.lock, absent.review),
            (Lock::default(), Review::Absent)
        );
        let lock = one_tool_lock("d");
        write_lock(&path, &lock, Some(&records)).unwrap();
        assert_eq!(read_lock(&path).unwrap(), lock);
        // No temporary file is left behind.
        assert_eq!(fs::read_dir(&project).unwrap().count(), 1);
        fs::write(&path, b"{\"version\":1,\"servers\":[]}").unwrap();
        let e = read_lock(&path).unwrap_err().to_string();
        assert!(e.contains("fenzi.lock") && e.contains("servers"), "{e}");
    }

    #[test]
    fn only_a_lock_fenzi_wrote_at_that_path_is_trusted() {
        let (dir, project, records) = setup();
        let path = project.join("fenzi.lock");
        let lock = one_tool_lock("d");
        write_lock(&path, &lock, Some(&records)).unwrap();
        let read = read_reviewed(&path, Some(&records)).unwrap();
        assert_eq!((&read.lock, read.review), (&lock, Review::Reviewed));
        assert!(read.trusted());
        // Without records nothing is vouched for.
        assert_eq!(
            read_reviewed(&path, None).unwrap().review,
            Review::Unreviewed
        );

        // Another valid lock (a forged description, hashed to match), and one byte added.
        let text = fs::read_to_string(&path).unwrap();
        for forged in [one_tool_lock("e").to_text(), format!("{text}\n")] {
            assert_ne!(text, forged);
            fs::write(&path, &forged).unwrap();
            let read = read_reviewed(&path, Some(&records)).unwrap();
            assert_eq!(read.review, Review::Unreviewed);
            assert!(!read.trusted());
        }
        // Put back byte for byte, it is the content fenzi recorded again.
        fs::write(&path, &text).unwrap();
        assert!(read_reviewed(&path, Some(&records)).unwrap().trusted());

        // The trusted bytes copied to another project.
        let elsewhere = dir.path().join("other");
        fs::create_dir(&elsewhere).unwrap();
        let copy = elsewhere.join("fenzi.lock");
        fs::copy(&path, &copy).unwrap();
        assert_eq!(
            read_reviewed(&copy, Some(&records)).unwrap().review,
            Review::Unreviewed
        );

        // A lock with no record at all (written before records existed, or by anyone else).
        let planted = elsewhere.join("mcp.lock");
        fs::write(&planted, one_tool_lock("d").to_text()).unwrap();
        assert_eq!(
            read_reviewed(&planted, Some(&records)).unwrap().review,
            Review::Unreviewed
        );
        // Accepting it (what `fenzi mcp pin` does) records it.
        write_lock(&planted, &one_tool_lock("d"), Some(&records)).unwrap();
        assert!(read_reviewed(&planted, Some(&records)).unwrap().trusted());
    }

    #[test]
    fn a_lock_that_is_a_link_or_no_file_is_refused() {
        let (dir, project, records) = setup();
        let real = dir.path().join("real.lock");
        write_lock(&real, &one_tool_lock("d"), Some(&records)).unwrap();
        let link = project.join("fenzi.lock");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = read_reviewed(&link, Some(&records)).unwrap_err();
        assert!(matches!(e, LockFileError::Symlink { .. }), "{e}");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let before = fs::read(&real).unwrap();
        let e = write_lock(&link, &Lock::default(), Some(&records)).unwrap_err();
        assert!(matches!(e, LockFileError::Symlink { .. }), "{e}");
        assert_eq!(fs::read(&real).unwrap(), before, "the link was followed");
        // A dangling link is not followed to create its target either.
        let dangling = project.join("mcp.lock");
        std::os::unix::fs::symlink(dir.path().join("nowhere.lock"), &dangling).unwrap();
        assert!(write_lock(&dangling, &Lock::default(), Some(&records)).is_err());
        assert!(!dir.path().join("nowhere.lock").exists());
        // A FIFO under the lock's name neither hangs the reader nor the writer.
        let fifo = project.join("team.lock");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        assert!(matches!(
            read_reviewed(&fifo, Some(&records)).unwrap_err(),
            LockFileError::NotAFile { .. }
        ));
        assert!(write_lock(&fifo, &Lock::default(), Some(&records)).is_err());
    }

    /// The sandbox protects the lock by mounting it read-only onto itself: a write that replaced
    /// the file (a new inode) would leave the agent a lock of its own. Shorter and longer contents
    /// are both written whole into the same inode.
    #[test]
    fn a_lock_write_keeps_the_file() {
        let (_dir, project, records) = setup();
        let path = project.join("fenzi.lock");
        write_lock(&path, &Lock::default(), Some(&records)).unwrap();
        let inode = fs::metadata(&path).unwrap().ino();
        let long = one_tool_lock(&"long ".repeat(100));
        write_lock(&path, &long, Some(&records)).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().ino(), inode);
        assert_eq!(read_reviewed(&path, Some(&records)).unwrap().lock, long);
        let short = one_tool_lock("s");
        write_lock(&path, &short, Some(&records)).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().ino(), inode);
        assert_eq!(fs::read_to_string(&path).unwrap(), short.to_text());
        assert!(read_reviewed(&path, Some(&records)).unwrap().trusted());
        assert_eq!(fs::read_dir(&project).unwrap().count(), 1);
    }
}
