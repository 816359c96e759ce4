//! A session's control socket: where it lives, the checks on its directory and on every peer,
//! and serving the [`super::protocol`] lines to watchers (`fenzi approve --watch`).
//!
//! - The directory is [`control_dir`]: `$XDG_RUNTIME_DIR/fenzi/`, or, without `XDG_RUNTIME_DIR`,
//!   `$XDG_STATE_HOME/fenzi/run/` (`~/.local/state/fenzi/run/`), which `fenzi run` keeps
//!   read-only inside its sandbox. It is created 0700; an existing one that is not a directory
//!   owned by this user, or that is group- or world-writable, is refused ([`check_private_dir`]).
//! - The socket is `<dir>/<session>.sock`, mode 0600, removed when the session ends.
//! - Every connection's peer uid (`SO_PEERCRED`) must be this process's uid ([`check_peer`]);
//!   any other peer gets one `error` line and is closed. The sandbox of `fenzi run` cannot connect
//!   at all: its seccomp filter refuses Unix sockets (SECURITY.md).

use super::protocol::{Event, MAX_LINE, ServerLine, WatcherLine};
use super::{Confirmations, Peer};
use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::broadcast::error::RecvError;

/// The directory of every session's control socket (see the module documentation). `None` when
/// neither `XDG_RUNTIME_DIR`, `XDG_STATE_HOME` nor `HOME` names one.
pub fn control_dir() -> Option<PathBuf> {
    let absolute = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if let Some(run) = absolute("XDG_RUNTIME_DIR") {
        return Some(run.join("fenzi"));
    }
    let state =
        absolute("XDG_STATE_HOME").or_else(|| absolute("HOME").map(|h| h.join(".local/state")))?;
    Some(state.join("fenzi").join("run"))
}

/// `<dir>/<session>.sock`.
pub fn socket_path(dir: &Path, session: &str) -> PathBuf {
    dir.join(format!("{session}.sock"))
}

/// This process's real uid.
pub fn own_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// Refuses `dir` unless it is a directory (not a symlink) owned by `uid` that neither group nor
/// others may write.
pub fn check_private_dir(dir: &Path, uid: u32) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(dir)?;
    let refuse = |why: String| {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: {why}; fenzi keeps its control sockets only in a directory private to you",
                dir.display()
            ),
        ))
    };
    if !meta.is_dir() {
        return refuse("not a directory".into());
    }
    if let Some(why) = crate::host_files::not_private(&meta, uid) {
        return refuse(why);
    }
    Ok(())
}

/// The peer of a control connection, if it is this user: `ours` is this process's uid.
pub fn check_peer(ours: u32, uid: u32, pid: Option<i32>) -> Result<Peer, String> {
    if uid == ours {
        Ok(Peer { uid, pid })
    } else {
        Err(format!(
            "refused: this control socket answers only uid {ours}, not uid {uid}"
        ))
    }
}

/// A session's bound control socket, not yet served. The socket file is removed when dropped.
#[derive(Debug)]
pub struct ControlSocket {
    listener: std::os::unix::net::UnixListener,
    path: PathBuf,
    /// Its directory, held since the check, and its name there (removed through them).
    dir: crate::host_files::HostDir,
    name: std::ffi::OsString,
    session: String,
}

impl ControlSocket {
    /// Creates `dir` if needed (0700), checks it, and binds `<dir>/<session>.sock` (0600), through
    /// a descriptor of the checked directory (crate::host_files): nothing on the path is looked up
    /// again after the check.
    pub fn bind(dir: &Path, session: &str) -> io::Result<ControlSocket> {
        let host_dir = crate::host_files::private_dir(dir)?;
        let name = std::ffi::OsString::from(format!("{session}.sock"));
        let listener = std::os::unix::net::UnixListener::bind(host_dir.fd_path(&name)?)?;
        // The directory is private already; the socket is too, so a looser directory later
        // still does not open it.
        rustix::fs::chmodat(
            &host_dir,
            &name,
            rustix::fs::Mode::from_raw_mode(0o600),
            rustix::fs::AtFlags::empty(),
        )?;
        listener.set_nonblocking(true)?;
        Ok(ControlSocket {
            listener,
            path: socket_path(dir, session),
            name,
            dir: host_dir,
            session: session.to_string(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn session(&self) -> &str {
        &self.session
    }

    /// Accepts watchers until the returned future is dropped.
    pub(crate) fn serve(
        &self,
        confirmations: Arc<Confirmations>,
    ) -> io::Result<impl Future<Output = ()> + Send + 'static> {
        let listener = tokio::net::UnixListener::from_std(self.listener.try_clone()?)?;
        let ours = own_uid();
        Ok(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        tokio::spawn(serve_watcher(confirmations.clone(), stream, ours));
                    }
                    Err(e) => {
                        tracing::warn!("control socket accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                }
            }
        })
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = self.dir.remove_file(&self.name);
    }
}

/// One watcher: checked, sent every held call, then each new one and each one gone, and its
/// answers taken.
async fn serve_watcher(confirmations: Arc<Confirmations>, stream: UnixStream, ours: u32) {
    let cred = stream.peer_cred();
    let (read, mut write) = stream.into_split();
    let peer = match cred {
        Ok(cred) => check_peer(ours, cred.uid(), cred.pid()),
        Err(e) => Err(format!("refused: cannot read the peer's credentials: {e}")),
    };
    let peer = match peer {
        Ok(peer) => peer,
        Err(why) => {
            tracing::warn!("control socket: {why}");
            let _ = write
                .write_all(ServerLine::Error(why).to_line().as_bytes())
                .await;
            return;
        }
    };
    // Subscribed before the snapshot, so nothing held in between is missed; `shown` drops the
    // doubles.
    let mut events = confirmations.subscribe();
    let mut shown: HashSet<String> = HashSet::new();
    let mut out = String::new();
    for offer in confirmations.offers() {
        shown.insert(offer.id.clone());
        out.push_str(&ServerLine::Held(offer.now()).to_line());
    }
    if write.write_all(out.as_bytes()).await.is_err() {
        return;
    }
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    loop {
        // Not cancel safe, but what a cancelled read took stays in `line`, which is cleared only
        // once a whole line is used.
        let mut limited = (&mut reader).take(MAX_LINE as u64 + 1);
        let reply = tokio::select! {
            read = limited.read_until(b'\n', &mut line) => {
                match read {
                    Ok(0) | Err(_) => return,
                    Ok(_) if line.len() > MAX_LINE => {
                        let _ = write.write_all(ServerLine::Error("line too long".into()).to_line().as_bytes()).await;
                        return;
                    }
                    Ok(_) if !line.ends_with(b"\n") => continue,
                    Ok(_) => {
                        let reply = answer(&confirmations, &line, peer);
                        line.clear();
                        // Its own answer is not told back to it as `gone`.
                        if let ServerLine::Answered { id, .. } = &reply {
                            shown.remove(id);
                        }
                        reply
                    }
                }
            }
            event = events.recv() => match event {
                Ok(Event::Held(offer)) => {
                    if !shown.insert(offer.id.clone()) {
                        continue;
                    }
                    ServerLine::Held(offer.now())
                }
                Ok(Event::Gone { id, why }) => {
                    if !shown.remove(&id) {
                        continue;
                    }
                    ServerLine::Gone { id, why }
                }
                // Too far behind: send what is held now that it has not seen.
                Err(RecvError::Lagged(_)) => {
                    let mut out = String::new();
                    for offer in confirmations.offers() {
                        if shown.insert(offer.id.clone()) {
                            out.push_str(&ServerLine::Held(offer.now()).to_line());
                        }
                    }
                    if write.write_all(out.as_bytes()).await.is_err() {
                        return;
                    }
                    continue;
                }
                Err(RecvError::Closed) => return,
            },
        };
        if write.write_all(reply.to_line().as_bytes()).await.is_err() {
            return;
        }
    }
}

/// The reply to one line from a watcher.
fn answer(confirmations: &Confirmations, line: &[u8], peer: Peer) -> ServerLine {
    let text = String::from_utf8_lossy(line);
    match serde_json::from_str::<WatcherLine>(text.trim_end()) {
        Ok(WatcherLine::Answer { id, allow }) => {
            if confirmations.answer(&id, allow, peer) {
                tracing::info!(
                    "held call {id} answered {} by {peer}",
                    if allow { "yes" } else { "no" }
                );
                ServerLine::Answered { id, allow }
            } else {
                ServerLine::Error(format!(
                    "no call {} is held (it was answered, timed out or withdrawn)",
                    id.escape_debug()
                ))
            }
        }
        Err(_) => {
            ServerLine::Error("expected {\"answer\":{\"id\":\"ID\",\"allow\":true|false}}".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn only_this_users_peers_are_taken() {
        assert_eq!(
            check_peer(1000, 1000, Some(5)),
            Ok(Peer {
                uid: 1000,
                pid: Some(5)
            })
        );
        let refused = check_peer(1000, 0, Some(5)).unwrap_err();
        assert!(refused.contains("only uid 1000, not uid 0"), "{refused}");
        assert!(check_peer(0, 65534, None).is_err());
    }

    #[test]
    fn a_shared_or_foreign_directory_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("fenzi");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let uid = own_uid();
        assert!(check_private_dir(&dir, uid).is_ok());
        assert!(
            check_private_dir(&dir, uid + 1)
                .unwrap_err()
                .to_string()
                .contains("not by you")
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o770)).unwrap();
        let e = check_private_dir(&dir, uid).unwrap_err().to_string();
        assert!(e.contains("mode 770"), "{e}");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(
            check_private_dir(&link, uid)
                .unwrap_err()
                .to_string()
                .contains("not a directory")
        );
        // bind refuses the same directory.
        assert!(ControlSocket::bind(&dir, "s").is_err());
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let socket = ControlSocket::bind(&dir, "s").unwrap();
        let mode = std::fs::metadata(socket.path()).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let path = socket.path().to_path_buf();
        drop(socket);
        assert!(!path.exists(), "removed with the session");
    }

    #[test]
    fn the_directory_falls_back_to_the_state_directory() {
        // Read only: the environment of this test process is not changed.
        let dir = control_dir().expect("some directory");
        match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| Path::new(v).is_absolute()) {
            Some(run) => assert_eq!(dir, Path::new(&run).join("fenzi")),
            None => assert!(dir.ends_with("fenzi/run"), "{}", dir.display()),
        }
    }
}
