//! The session's files: its audit log (`--audit`, or `<state dir>/fenzi/audit/<session>.jsonl`), the
//! private directory beside it, files written there atomically, and the session CA certificate.

use crate::commands::log::audit_dir;
use anyhow::{Context, Result};
use fenzi_proxy::audit_writer::AuditWriter;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// The audit log of a session: `explicit`, or `$XDG_STATE_HOME/fenzi/audit/<session>.jsonl`.
pub fn open_audit(explicit: Option<&Path>, session: &str) -> Result<(PathBuf, AuditWriter)> {
    let path = match explicit {
        Some(path) => path.to_path_buf(),
        None => audit_dir(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME"))
            .context(
                "cannot choose an audit log: neither XDG_STATE_HOME nor HOME is set; pass --audit",
            )?
            .join(format!("{session}.jsonl")),
    };
    // Every `AuditError` names the file and its cause already: no context on top, or it says it twice.
    let writer = AuditWriter::open(&path, session)?;
    Ok((path, writer))
}

/// Creates `dir` (private to the user when new).
pub fn create_private_dir(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))
}

/// Writes `contents` to `dir/name` atomically (temporary file, then rename).
pub fn write_file(dir: &Path, name: &str, contents: &[u8]) -> Result<PathBuf> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, contents).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Creates `dir` if needed and writes the session CA certificate (never its key) to `dir/ca.pem`.
pub fn write_ca(dir: &Path, pem: &str) -> Result<PathBuf> {
    create_private_dir(dir)?;
    write_file(dir, "ca.pem", pem.as_bytes())
}
