//! A local server in a sandbox of its own ([`SandboxedCommand`]): its own user, PID, network,
//! mount and IPC namespaces, the seccomp filter, and a Landlock write list of exactly its state
//! directory (which is also its `HOME` and, under `tmp/`, its `TMPDIR`). It shares no writable
//! place with the agent's sandbox, so the agent can neither plant a file the server reads from a
//! writable directory nor see or signal its processes. Its network is the proxy listener of its
//! own sandbox, and with a transparent path its DNS stub and listeners, handed to the launcher's
//! egress ([`SandboxLauncher::egress`]): fenzi serves them under the server's own `hosts` and
//! `secrets`. Without one, the server has no network at all.
//!
//! The state directory and its `tmp/` are opened through `host_files::private_dir`: a link the
//! server leaves in their place stops the next start instead of being followed.
//!
//! The sandbox dies with the thread that started it (`PR_SET_PDEATHSIG`), so every server of a
//! bridge is started by one long-lived launcher thread, never by a runtime's worker.

use super::server_process::{Launch, ServerProcess};
use crate::sandbox::{SandboxSpec, Session};
use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::mpsc;
use tokio::net::unix::pipe;
use tokio::sync::oneshot;

/// What to run and where it may write.
#[derive(Debug, Clone)]
pub struct SandboxedCommand {
    pub program: OsString,
    pub args: Vec<OsString>,
    /// The environment besides `HOME`, `TMPDIR` and `PATH` (which the bridge sets).
    pub env: Vec<(OsString, OsString)>,
    /// `PATH` inside.
    pub path: OsString,
    /// The server's state directory: created private if missing; its only writable place.
    pub state_dir: PathBuf,
    /// Where it starts (read-only to it, like the rest of the disk); `None`: its state directory.
    pub cwd: Option<PathBuf>,
    /// Files and directories shown in place of others, `(source, target)`, read-only (as
    /// `SandboxSpec::overlay`): what holds a credential or another server's state reads empty.
    pub overlays: Vec<(PathBuf, PathBuf)>,
    /// The transparent path (DNS stub and listeners) for programs of the server that ignore the
    /// proxy variables (Node's `fetch` before Node 24, say); its listeners go to the egress.
    pub transparent: Option<crate::sandbox::TransparentSpec>,
}

/// A started sandbox's ways out, for the egress to serve: the proxy listener, and with a
/// transparent path its listeners and DNS stub socket. All blocking, as the sandbox hands them.
pub struct EgressListeners {
    pub proxy: std::net::TcpListener,
    pub transparent: Vec<std::net::TcpListener>,
    pub dns: Option<std::net::UdpSocket>,
}

/// One start's pieces, made on the launcher thread.
struct Started {
    stdin: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
    child: crate::sandbox::SandboxChild,
    /// The sandbox's ways out.
    listeners: EgressListeners,
}

/// Serves a started sandbox's ways out (the server's egress) until the receiver fires, when the
/// sandbox has ended. Must not block.
pub type Egress = Box<dyn Fn(EgressListeners, oneshot::Receiver<()>) + Send + Sync>;

type Job = (SandboxedCommand, mpsc::Sender<io::Result<Started>>);

/// The launcher: one thread that starts every sandbox of the servers given to it.
pub struct SandboxLauncher {
    command: SandboxedCommand,
    jobs: Mutex<mpsc::Sender<Job>>,
    egress: Option<Egress>,
}

impl SandboxLauncher {
    /// Starts the launcher thread for `command`. The thread ends when the launcher is dropped; the
    /// sandboxes it started are killed then.
    pub fn new(command: SandboxedCommand) -> io::Result<SandboxLauncher> {
        let (jobs, incoming) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("fenzi-bridge-launcher".into())
            .spawn(move || {
                // Each server's sandbox lives while this thread does.
                for (command, reply) in incoming {
                    let _ = reply.send(start(&command));
                }
            })?;
        Ok(SandboxLauncher {
            command,
            jobs: Mutex::new(jobs),
            egress: None,
        })
    }

    /// Each started server's proxy listener goes to `serve` (which must not block): its egress.
    pub fn egress(mut self, serve: Egress) -> SandboxLauncher {
        self.egress = Some(serve);
        self
    }
}

fn start(command: &SandboxedCommand) -> io::Result<Started> {
    // Both made (or found) private, never through a link: the server writes its state directory,
    // and a link it left there (say `tmp` -> the person's home) must not become a place fenzi
    // creates, chmods or lets a later start write.
    crate::host_files::private_dir(&command.state_dir)?;
    let tmp = command.state_dir.join("tmp");
    crate::host_files::private_dir(&tmp)?;
    let (stdin_read, stdin_write) = std::io::pipe()?;
    let (stdout_read, stdout_write) = std::io::pipe()?;
    let (stderr_read, stderr_write) = std::io::pipe()?;
    let mut env = command.env.clone();
    env.retain(|(k, _)| !matches!(k.to_str(), Some("HOME" | "TMPDIR" | "PATH")));
    env.push(("HOME".into(), command.state_dir.clone().into()));
    env.push(("TMPDIR".into(), tmp.into()));
    env.push(("PATH".into(), command.path.clone()));
    let mut spec = SandboxSpec::new(command.program.clone())
        .args(command.args.clone())
        .envs(env)
        .cwd(
            command
                .cwd
                .clone()
                .unwrap_or_else(|| command.state_dir.clone()),
        )
        .writable([command.state_dir.clone()]);
    for (source, target) in &command.overlays {
        spec = spec.overlay(source, target);
    }
    spec.stdin = Some(stdin_read.into());
    spec.stdout = Some(stdout_write.into());
    spec.stderr = Some(stderr_write.into());
    if let Some(transparent) = &command.transparent {
        spec = spec.transparent(transparent.clone());
    }
    let session = Session::start(spec).map_err(io::Error::other)?;
    Ok(Started {
        stdin: stdin_write.into(),
        stdout: stdout_read.into(),
        stderr: stderr_read.into(),
        child: session.child,
        listeners: EgressListeners {
            proxy: session.listener,
            transparent: session.transparent,
            dns: session.dns,
        },
    })
}

impl Launch for SandboxLauncher {
    fn start(&self) -> io::Result<ServerProcess> {
        let (reply, answer) = mpsc::channel();
        self.jobs
            .lock()
            .expect("launcher jobs")
            .send((self.command.clone(), reply))
            .map_err(|_| io::Error::other("the bridge's launcher thread has ended"))?;
        let started = answer
            .recv()
            .map_err(|_| io::Error::other("the bridge's launcher thread has ended"))??;
        let (gone_tx, gone_rx) = oneshot::channel::<()>();
        match &self.egress {
            Some(serve) => serve(started.listeners, gone_rx),
            // Closed: every connection the server tries is refused.
            None => drop(started.listeners),
        }
        let mut child = started.child;
        let handle = child.handle();
        let (exited_tx, exited_rx) = oneshot::channel::<()>();
        // The init's status arrives on a blocking read of its control socket.
        std::thread::Builder::new()
            .name("fenzi-bridge-wait".into())
            .spawn(move || {
                let _ = child.wait();
                let _ = exited_tx.send(());
                // The egress of a sandbox that is gone stops serving it.
                let _ = gone_tx.send(());
            })?;
        let (stop, stopped) = oneshot::channel::<()>();
        let killer = handle.clone();
        tokio::spawn(async move {
            // Sent or dropped: either way the server is to stop.
            let _ = stopped.await;
            let _ = killer.kill();
        });
        Ok(ServerProcess {
            stdin: Box::pin(pipe::Sender::from_owned_fd(started.stdin)?),
            stdout: Box::pin(pipe::Receiver::from_owned_fd(started.stdout)?),
            stderr: Box::pin(pipe::Receiver::from_owned_fd(started.stderr)?),
            exited: Box::pin(async move {
                let _ = exited_rx.await;
            }),
            stop,
        })
    }
}
