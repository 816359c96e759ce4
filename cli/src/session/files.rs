//! The session's files: its audit log (`--audit`, or `<state dir>/fenzi/audit/<session>.jsonl`), its
//! runtime directory ([`SessionDir`]: the session CA certificate, the CA bundle, the agent's
//! rendered config, the sandbox's resolver file) and the files written there.
//!
//! Every runtime file is created through descriptors taken before the agent starts
//! (`fenzi_proxy::host_files`): the per-user runtime base (`$XDG_RUNTIME_DIR/fenzi`, else
//! `/tmp/fenzi-<uid>`) is checked private (0700, owned by this user, not a link), the session's
//! own directory is created in it exclusively, and each file exclusively without following links.
//! `fenzi run` keeps the whole base read-only inside the sandbox, so no session's agent can write
//! its own or another session's runtime files.

use anyhow::{Context, Result};
use fenzi_proxy::audit::writer::AuditWriter;
use fenzi_proxy::host_files::{self, HostDir};
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// `$XDG_STATE_HOME/fenzi/audit`, or `~/.local/state/fenzi/audit`. A relative XDG path is ignored, as
/// the XDG spec says.
pub fn audit_dir(xdg_state_home: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    let base = match xdg_state_home.map(PathBuf::from) {
        Some(p) if p.is_absolute() => p,
        _ => PathBuf::from(home.filter(|h| !h.is_empty())?).join(".local/state"),
    };
    Some(base.join("fenzi").join("audit"))
}

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

/// Writes `contents` to `dir/name` (0600) whole, through the directory's descriptor (a temporary
/// file created exclusively, renamed over the name; a link there is replaced, never followed), and
/// returns its path.
pub fn write_file(dir: &HostDir, name: &str, contents: &[u8]) -> Result<PathBuf> {
    write_with_mode(dir, name, contents, 0o600)
}

/// Writes the session CA certificate (never its key) to `dir/ca.pem`, 0644: a certificate is
/// public, and under `fenzi proxy --ca-dir` an agent running as another user must read it.
pub fn write_ca(dir: &HostDir, pem: &str) -> Result<PathBuf> {
    write_with_mode(dir, "ca.pem", pem.as_bytes(), 0o644)
}

fn write_with_mode(dir: &HostDir, name: &str, contents: &[u8], mode: u32) -> Result<PathBuf> {
    let path = dir.join(name);
    dir.replace_file(OsStr::new(name), contents, mode)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// A session's runtime directory, `<runtime base>/<session>`: created exclusively, private, and
/// removed (through descriptors, never following a link) when dropped, whichever way the session
/// ends.
pub struct SessionDir {
    base: HostDir,
    name: OsString,
    dir: HostDir,
}

impl SessionDir {
    /// Creates the directory of `session` in the per-user runtime base (checked private first).
    pub fn create(session: &str) -> Result<SessionDir> {
        let base_path = host_files::runtime_base();
        let base = host_files::private_dir(&base_path)
            .with_context(|| "cannot use fenzi's runtime directory".to_string())?;
        let name = OsString::from(session);
        let dir = base
            .create_dir(&name)
            .with_context(|| format!("cannot create {}", base.join(&name).display()))?;
        Ok(SessionDir { base, name, dir })
    }

    /// The session's own directory.
    pub fn dir(&self) -> &HostDir {
        &self.dir
    }

    /// The runtime base every session of this user shares (kept read-only in the sandbox).
    pub fn base(&self) -> &Path {
        self.base.path()
    }
}

impl Drop for SessionDir {
    fn drop(&mut self) {
        let _ = self.base.remove_tree(&self.name);
    }
}

/// The system's root certificates (PEM), so tools that replace their trust store with
/// `SSL_CERT_FILE` still trust hosts that are tunnelled, not intercepted.
pub fn system_roots() -> String {
    fenzi_proxy::sandbox::env::SYSTEM_CA_BUNDLES
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_directory_follows_xdg() {
        let p = |s: &str| Some(OsString::from(s));
        assert_eq!(
            audit_dir(p("/state"), p("/home/u")),
            Some(PathBuf::from("/state/fenzi/audit"))
        );
        assert_eq!(
            audit_dir(p("relative"), p("/home/u")),
            Some(PathBuf::from("/home/u/.local/state/fenzi/audit"))
        );
        assert_eq!(
            audit_dir(None, p("/home/u")),
            Some(PathBuf::from("/home/u/.local/state/fenzi/audit"))
        );
        assert_eq!(audit_dir(None, None), None);
    }
}
