//! Starting a local (stdio) MCP server and owning its pipes: [`Launch`] says how (on the host as a
//! plain child, or in a sandbox of its own), [`ServerProcess`] is one running server: its stdin,
//! its stdout, its stderr, and a way to stop it and to learn that it ended.

use crate::connection::body::BoxFuture;
use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;

/// One running server process.
pub struct ServerProcess {
    pub stdin: Pin<Box<dyn AsyncWrite + Send>>,
    pub stdout: Pin<Box<dyn AsyncRead + Send>>,
    pub stderr: Pin<Box<dyn AsyncRead + Send>>,
    /// Resolves when the process has ended (whatever ended it).
    pub exited: BoxFuture<'static, ()>,
    /// Sending (or dropping) this stops the process.
    pub stop: oneshot::Sender<()>,
}

/// How a bridge starts its server; called once per MCP session, and again after a crash.
pub trait Launch: Send + Sync + 'static {
    fn start(&self) -> io::Result<ServerProcess>;
}

/// A command run on the host as a plain child process, with exactly the environment given.
/// For `run: host` servers (the person's machine file only) and for tests.
#[derive(Debug, Clone)]
pub struct HostCommand {
    pub program: OsString,
    pub args: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    pub cwd: PathBuf,
}

impl Launch for HostCommand {
    fn start(&self) -> io::Result<ServerProcess> {
        let mut child = tokio::process::Command::new(&self.program)
            .args(&self.args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(io::Error::other("the server's pipes were not created"));
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let exited = Box::pin(async move {
            tokio::select! {
                _ = child.wait() => {}
                _ = stopped => {
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                }
            }
        });
        Ok(ServerProcess {
            stdin: Box::pin(stdin),
            stdout: Box::pin(stdout),
            stderr: Box::pin(stderr),
            exited,
            stop,
        })
    }
}
