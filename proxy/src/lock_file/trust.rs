//! Which lock file contents fenzi vouches for: the trust records in its own state directory
//! (`$XDG_STATE_HOME/fenzi/lock-trust/`, else `~/.local/state/fenzi/lock-trust/`), which the
//! sandbox keeps read-only.
//!
//! A lock file sits in the project, where the agent can write between sessions or before a
//! server is pinned, so what it says is only trusted when fenzi wrote those exact bytes there (a
//! session pinning at first sight, `fenzi run` creating it empty) or a person accepted them with
//! `fenzi mcp pin`. Each of those writes records the SHA-256 of the content, keyed by the lock's
//! canonical path: one record per lock, the latest content only, so a copy of a trusted lock
//! elsewhere, an older trusted content put back, or any byte changed is unreviewed. So is a lock
//! with no record at all (one written by a fenzi from before the records existed): `fenzi mcp
//! pin` shows its entries and accepting it records it.
//!
//! A record is written whole: a fresh file created exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`, an
//! unpredictable name) in the records directory, synced, renamed over the old record relative to
//! the directory's descriptor, and the directory synced. The directory is opened without
//! following a link and must be the user's own and writable by no one else. Anything unexpected
//! when reading a record (missing, unreadable, malformed, another lock's) means "not vouched for":
//! the lock is unreviewed, never trusted.

use crate::host_files::{self, HostDir};
use sha2::{Digest, Sha256};
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A record is a few hundred bytes; anything larger is not one.
const MAX_RECORD_BYTES: u64 = 8 * 1024;
const RECORD_VERSION: u64 = 1;

/// The directory of trust records, and how to read and write them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustRecords {
    dir: PathBuf,
}

impl TrustRecords {
    /// The records kept in `dir` (tests; fenzi itself uses [`TrustRecords::in_state_dir`]).
    pub fn at(dir: impl Into<PathBuf>) -> TrustRecords {
        TrustRecords { dir: dir.into() }
    }

    /// The records beneath fenzi's state directory (`…/fenzi`, the parent of its audit logs).
    pub fn in_state_dir(state_dir: &Path) -> TrustRecords {
        TrustRecords::at(state_dir.join("lock-trust"))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the latest record for the lock at `lock` names exactly `content`.
    pub fn vouches_for(&self, lock: &Path, content: &[u8]) -> bool {
        match self.recorded(lock) {
            Ok(Some(sha256)) => sha256 == hex::encode(Sha256::digest(content)),
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(
                    lock = %lock.display(),
                    "cannot read the lock's trust record in {}: {e}; the lock is unreviewed",
                    self.dir.display()
                );
                false
            }
        }
    }

    /// Records `content` as the trusted content of the lock at `lock` (which must exist: its
    /// canonical path is the key), replacing any earlier record for it.
    pub fn record(&self, lock: &Path, content: &[u8]) -> io::Result<()> {
        let key = canonical_key(lock)?;
        let dir = self.open_dir(true)?;
        let name = record_name(&key);
        let text = format!(
            "{}\n",
            serde_json::json!({
                "version": RECORD_VERSION,
                "lock": key.to_string_lossy(),
                "sha256": hex::encode(Sha256::digest(content)),
            })
        );
        dir.replace_file(name.as_ref(), text.as_bytes(), 0o600)?;
        dir.sync()
    }

    /// The SHA-256 (hex) the record for `lock` names, `None` when there is none.
    fn recorded(&self, lock: &Path) -> io::Result<Option<String>> {
        let key = match canonical_key(lock) {
            Ok(key) => key,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let dir = match self.open_dir(false) {
            Ok(dir) => dir,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let file = match dir.open_read(record_name(&key).as_ref()) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut bytes = Vec::new();
        file.take(MAX_RECORD_BYTES + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > MAX_RECORD_BYTES {
            return Err(invalid("the record is too large"));
        }
        let value: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|_| invalid("the record is not JSON"))?;
        if value.get("version").and_then(|v| v.as_u64()) != Some(RECORD_VERSION) {
            return Err(invalid("the record has an unknown version"));
        }
        // The name already binds the record to this path; the field is checked as well so that a
        // record copied under another name vouches for nothing.
        if value.get("lock").and_then(|v| v.as_str()) != Some(&*key.to_string_lossy()) {
            return Err(invalid("the record is for another lock"));
        }
        match value.get("sha256").and_then(|v| v.as_str()) {
            Some(h) if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
                Ok(Some(h.to_ascii_lowercase()))
            }
            _ => Err(invalid("the record names no SHA-256")),
        }
    }

    /// Opens the records directory without following a link (created 0700 when `create`),
    /// refusing one another user owns or others can write ([`host_files::private_dir`]).
    fn open_dir(&self, create: bool) -> io::Result<HostDir> {
        if create {
            host_files::private_dir(&self.dir)
        } else {
            host_files::existing_private_dir(&self.dir)
        }
    }
}

/// The lock's canonical path: its directory resolved, its own name kept (a lock that is a link is
/// refused before it gets here).
fn canonical_key(lock: &Path) -> io::Result<PathBuf> {
    let name = lock
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the lock has no file name"))?;
    let parent = match lock.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok(fs::canonicalize(parent)?.join(name))
}

/// A record's file name: the SHA-256 of the canonical path (any path fits, none escapes).
fn record_name(key: &Path) -> String {
    hex::encode(Sha256::digest(key.as_os_str().as_bytes()))
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, TrustRecords, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let records = TrustRecords::in_state_dir(&dir.path().join("state/fenzi"));
        let project = dir.path().join("project");
        fs::create_dir(&project).unwrap();
        let lock = project.join("fenzi.lock");
        fs::write(&lock, b"{}").unwrap();
        (dir, records, lock)
    }

    #[test]
    fn a_recorded_content_is_vouched_for_and_nothing_else() {
        let (dir, records, lock) = setup();
        // No record: not vouched for.
        assert!(!records.vouches_for(&lock, b"{}"));
        records.record(&lock, b"{}").unwrap();
        assert!(records.vouches_for(&lock, b"{}"));
        // The same lock reached through another spelling of its path is the same lock.
        let other_spelling = dir.path().join("project/../project/fenzi.lock");
        assert!(records.vouches_for(&other_spelling, b"{}"));
        // One byte changed.
        assert!(!records.vouches_for(&lock, b"{ }"));
        // The same bytes at another path (a trusted lock copied elsewhere).
        let copy = dir.path().join("fenzi.lock");
        fs::write(&copy, b"{}").unwrap();
        assert!(!records.vouches_for(&copy, b"{}"));
        // A newer record replaces the older: the old content is no longer vouched for.
        records.record(&lock, b"{\"v\":2}").unwrap();
        assert!(records.vouches_for(&lock, b"{\"v\":2}"));
        assert!(!records.vouches_for(&lock, b"{}"));
        // One record per lock, no temporaries left, private to the user.
        let entries: Vec<_> = fs::read_dir(records.dir()).unwrap().collect();
        assert_eq!(entries.len(), 1);
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(records.dir()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn a_record_that_is_odd_in_any_way_vouches_for_nothing() {
        let (dir, records, lock) = setup();
        records.record(&lock, b"{}").unwrap();
        let name = record_name(&canonical_key(&lock).unwrap());
        let path = records.dir().join(&name);
        let good = fs::read(&path).unwrap();
        // Another lock's record copied under this lock's name.
        let other = dir.path().join("other.lock");
        fs::write(&other, b"{}").unwrap();
        records.record(&other, b"{}").unwrap();
        let other_name = record_name(&canonical_key(&other).unwrap());
        fs::copy(records.dir().join(other_name), &path).unwrap();
        assert!(!records.vouches_for(&lock, b"{}"));
        // Not JSON; a link to a good record; a records directory others can write.
        fs::write(&path, b"sha256 of {}").unwrap();
        assert!(!records.vouches_for(&lock, b"{}"));
        fs::remove_file(&path).unwrap();
        let elsewhere = dir.path().join("elsewhere");
        fs::write(&elsewhere, &good).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert!(!records.vouches_for(&lock, b"{}"));
        fs::remove_file(&path).unwrap();
        fs::write(&path, &good).unwrap();
        assert!(records.vouches_for(&lock, b"{}"));
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(records.dir(), fs::Permissions::from_mode(0o777)).unwrap();
        assert!(!records.vouches_for(&lock, b"{}"));
        assert!(records.record(&lock, b"{}").is_err());
    }

    #[test]
    fn a_records_directory_that_is_a_link_is_not_followed() {
        let (dir, _, lock) = setup();
        let real = dir.path().join("real");
        let real_records = TrustRecords::at(&real);
        real_records.record(&lock, b"{}").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let linked = TrustRecords::at(&link);
        assert!(!linked.vouches_for(&lock, b"{}"));
        assert!(linked.record(&lock, b"{}").is_err());
    }
}
