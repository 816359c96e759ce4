//! Finding the log `fenzi log` reads: `--file`, `--session ID` (`<state dir>/fenzi/audit/<ID>.jsonl`),
//! or the newest log in the state directory. The directory is
//! [`crate::session::audit_dir`], where `fenzi proxy` and `fenzi run` put a new session's log;
//! `fenzi approve` finds its log with [`find_log`].

use super::Args;
use crate::session::audit_dir;
use anyhow::{Context, bail};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

pub(crate) fn parse_session_id(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 128
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(s.to_string())
    } else {
        Err("a session id is letters, digits, `_`, `-` and `.` (not leading)".into())
    }
}

pub(super) fn locate(args: &Args) -> anyhow::Result<PathBuf> {
    find_log(args.file.as_deref(), args.session.as_deref())
}

/// The log `file` names, else session `session`'s, else the newest (also `fenzi approve`'s).
pub(crate) fn find_log(file: Option<&Path>, session: Option<&str>) -> anyhow::Result<PathBuf> {
    if let Some(file) = file {
        return Ok(file.to_path_buf());
    }
    let dir = audit_dir(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME")).context(
        "cannot find the audit log directory: neither XDG_STATE_HOME nor HOME is set; pass --file",
    )?;
    if let Some(id) = session {
        let path = dir.join(format!("{id}.jsonl"));
        if !path.is_file() {
            bail!(
                "no audit log for session {id}: {} does not exist",
                path.display()
            );
        }
        return Ok(path);
    }
    newest_log(&dir)?.with_context(|| {
        format!(
            "no audit logs in {} yet (`fenzi proxy` and `fenzi run` write them there); pass --file FILE or --session ID",
            dir.display()
        )
    })
}

/// Every session's log in the audit directory that may hold records from `since_ms` (Unix ms) on:
/// those modified since then (all of them without a bound), oldest first (name breaks ties).
pub(super) fn session_logs_since(since_ms: Option<i64>) -> anyhow::Result<Vec<PathBuf>> {
    let dir = audit_dir(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME")).context(
        "cannot find the audit log directory: neither XDG_STATE_HOME nor HOME is set; pass --file",
    )?;
    let cutoff = since_ms.map(|ms| UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64));
    let mut logs = logs_in(&dir)?;
    logs.retain(|(mtime, _)| cutoff.is_none_or(|c| *mtime >= c));
    logs.sort();
    if logs.is_empty() && !dir.exists() {
        bail!(
            "no audit logs in {} yet (`fenzi proxy` and `fenzi run` write them there); pass --file FILE or --session ID",
            dir.display()
        );
    }
    Ok(logs.into_iter().map(|(_, p)| p).collect())
}

/// The `*.jsonl` files in `dir` and when each was last modified; none when `dir` does not exist.
fn logs_in(dir: &Path) -> anyhow::Result<Vec<(SystemTime, PathBuf)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_file() {
            out.push((meta.modified().unwrap_or(UNIX_EPOCH), path));
        }
    }
    Ok(out)
}

/// The most recently modified `*.jsonl` in `dir` (name breaks ties). `None` if there is none.
pub fn newest_log(dir: &Path) -> anyhow::Result<Option<PathBuf>> {
    Ok(logs_in(dir)?.into_iter().max().map(|(_, p)| p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::time::Duration;

    #[test]
    fn the_newest_log_is_found() {
        assert!(parse_session_id("a1b2-c3_d.e").is_ok());
        for bad in ["", "../x", "a/b", ".hidden", "a b"] {
            assert!(parse_session_id(bad).is_err(), "{bad:?}");
        }

        let dir = std::env::temp_dir().join(format!("fenzi-log-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(newest_log(&dir).unwrap(), None);
        assert_eq!(newest_log(&dir.join("missing")).unwrap(), None);
        let old = dir.join("old.jsonl");
        std::fs::write(&old, "").unwrap();
        std::fs::write(dir.join("notes.txt"), "").unwrap();
        let t = SystemTime::now() - Duration::from_secs(60);
        File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(t)
            .unwrap();
        let new = dir.join("new.jsonl");
        std::fs::write(&new, "").unwrap();
        assert_eq!(newest_log(&dir).unwrap(), Some(new.clone()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
