//! Lock files on disk (`fenzi.lock` beside `fenzi.yaml`, `mcp.lock` beside the machine file): where
//! they are, reading one strictly ([`fenzi_policy::pins::Lock::parse`]) and replacing one whole.
//!
//! A write never leaves a half-written lock: the new text goes to a fresh file in the same
//! directory (created exclusively under a random name, so nothing planted there can be followed),
//! is synced, and is renamed over the old one; then the directory is synced.

use fenzi_policy::pins::{Lock, LockError, MAX_LOCK_BYTES};
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// Why a lock file cannot be used. Names the file; never quotes its contents.
#[derive(Debug, thiserror::Error)]
pub enum LockFileError {
    #[error("{path}: cannot read the lock file: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path}: the lock file is larger than {MAX_LOCK_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("{path}: {source}")]
    Invalid { path: PathBuf, source: LockError },
    #[error("{path}: cannot write the lock file: {source}")]
    Write { path: PathBuf, source: io::Error },
}

/// The lock file beside a policy file: the same name with the extension `lock` (`fenzi.yaml` →
/// `fenzi.lock`, `mcp.yaml` → `mcp.lock`).
pub fn lock_path_for(policy_file: &Path) -> PathBuf {
    policy_file.with_extension("lock")
}

/// Reads the lock at `path`; a missing file is an empty lock.
pub fn read_lock(path: &Path) -> Result<Lock, LockFileError> {
    let read_error = |source| LockFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = match fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Lock::default()),
        Err(e) => return Err(read_error(e)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_LOCK_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() > MAX_LOCK_BYTES {
        return Err(LockFileError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    Lock::parse(&bytes).map_err(|source| LockFileError::Invalid {
        path: path.to_path_buf(),
        source,
    })
}

/// Replaces the lock at `path` with `lock`, atomically.
pub fn write_lock(path: &Path, lock: &Lock) -> Result<(), LockFileError> {
    write_atomically(path, lock.to_text().as_bytes()).map_err(|source| LockFileError::Write {
        path: path.to_path_buf(),
        source,
    })
}

fn write_atomically(path: &Path, text: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|e| io::Error::other(e.to_string()))?;
    let temp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        hex::encode(random)
    ));
    let result = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        file.write_all(text)?;
        file.sync_all()?;
        fs::rename(&temp, path)?;
        fs::File::open(&dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use fenzi_policy::json::{JsonLimits, parse};
    use fenzi_policy::pins::{PinnedTool, ServerPins};

    #[test]
    fn locks_are_written_whole_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path_for(&dir.path().join("fenzi.yaml"));
        assert_eq!(path.file_name().unwrap(), "fenzi.lock");
        assert_eq!(read_lock(&path).unwrap(), Lock::default());
        let mut lock = Lock::default();
        let tool = parse(br#"{"name":"t","description":"d"}"#, &JsonLimits::default()).unwrap();
        let mut pins = ServerPins::new();
        pins.insert("t".into(), PinnedTool::from_listed(&tool));
        lock.servers.insert("s".into(), pins);
        write_lock(&path, &lock).unwrap();
        assert_eq!(read_lock(&path).unwrap(), lock);
        // No temporary file is left behind.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        fs::write(&path, b"{\"version\":1,\"servers\":[]}").unwrap();
        let e = read_lock(&path).unwrap_err().to_string();
        assert!(e.contains("fenzi.lock") && e.contains("servers"), "{e}");
    }
}
