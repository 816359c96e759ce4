//! The parent's side of a sandbox: [`Session::start`] clones the sandbox's init into new
//! namespaces, waits for it to report that isolation is complete, and receives the proxy listener
//! it created inside the network namespace; [`SandboxChild`] waits for and signals the command.

use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::child;
use super::error::{SandboxError, SetupStep};
use super::protocol::{self, Message};
use super::spec::{Prepared, SandboxSpec};
use super::sys;

/// How long the sandbox may take to set up and exec the command.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Namespaces every sandbox gets. The user namespace is always new, even for root, so the command
/// holds no capability over the host; the PID namespace makes our init PID 1 (it reaps, and when
/// it exits the kernel kills everything left); the mount namespace carries the private `/proc`;
/// the network namespace has only `lo`; the IPC namespace hides the host's System V IPC objects.
const NAMESPACES: libc::c_int = libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWIPC;

/// A running sandbox: the command, and the listener the proxy must serve.
#[derive(Debug)]
pub struct Session {
    /// Listens on [`SandboxSpec::proxy_addr`] *inside* the sandbox's network namespace. It is the
    /// only endpoint the command can reach; connections accepted here come from the sandbox.
    /// Blocking; call `set_nonblocking(true)` before handing it to tokio.
    pub listener: TcpListener,
    /// With [`SandboxSpec::transparent`]: one listener per port of the spec, in its order, each
    /// on `0.0.0.0:<port>` inside the sandbox, then (when the spec asks for IPv6) one per port on
    /// `[::]:<port>`. A connection's local address is where the program
    /// inside wanted to go. Blocking, like `listener`.
    pub transparent: Vec<TcpListener>,
    /// With [`SandboxSpec::transparent`]: the DNS stub's UDP socket inside the sandbox. Blocking.
    pub dns: Option<UdpSocket>,
    /// The sandbox network namespace's socket diagnostics: which socket a connection is
    /// ([`SockDiag::inode`], DESIGN §17).
    pub sock_diag: SockDiag,
    /// The command.
    pub child: SandboxChild,
}

/// What the init hands over during its setup.
struct Handed {
    listener: TcpListener,
    transparent: Vec<TcpListener>,
    dns: Option<UdpSocket>,
    sock_diag: SockDiag,
}

/// A `NETLINK_SOCK_DIAG` socket created inside the sandbox's network namespace: it answers about
/// that namespace's sockets only. One question at a time (a lock keeps answers with questions).
#[derive(Debug)]
pub struct SockDiag(std::sync::Mutex<OwnedFd>);

impl SockDiag {
    /// One in the caller's own network namespace (what the sandbox's init does inside it; tests
    /// use it on the host).
    pub fn here() -> io::Result<SockDiag> {
        let fd = sys::sock_diag_socket_owned().map_err(io::Error::from_raw_os_error)?;
        Ok(SockDiag(std::sync::Mutex::new(fd)))
    }

    /// The inode of the TCP socket whose local address is `local` and remote `remote`, or `None`
    /// when there is none (closed, never was). One exact lookup by the kernel, not a walk of the
    /// connection table (`/proc/net/tcp` takes milliseconds on a busy host: its hash table is
    /// shared by every namespace).
    pub fn inode(&self, local: SocketAddr, remote: SocketAddr) -> io::Result<Option<u64>> {
        let fd = self
            .0
            .lock()
            .map_err(|_| io::Error::other("the socket-diagnostics lock is poisoned"))?;
        sys::sock_diag_inode(&fd, local, remote)
    }
}

impl Session {
    /// Starts `spec.program` in a new sandbox and returns once the isolation is complete and the
    /// program has been exec'd. Fails, without running anything, when any part of the isolation
    /// cannot be set up; the error names the step and, when known, the setting that enables it.
    ///
    /// Blocking (a few milliseconds). May be called from a multi-threaded program: the child only
    /// makes raw system calls on memory prepared here before the fork.
    ///
    /// The sandbox is killed when the *thread* that called `start` ends (the kernel's parent-death
    /// signal follows the thread that cloned, not the process), and when this process dies, even
    /// by SIGKILL. Call it from a thread that lives as long as the session, such as the main
    /// thread; the [`SandboxChild`] itself may be moved to and waited on from any thread.
    pub fn start(mut spec: SandboxSpec) -> Result<Session, SandboxError> {
        let (parent_low, child_low) = sys::seqpacket_pair()
            .map_err(|e| SandboxError::control("creating the control socket", e))?;
        // Numbered 3 or above so they cannot collide with the command's 0, 1, 2.
        let lift = |fd: &OwnedFd| {
            sys::dup_at_least(fd, 3)
                .map_err(|e| SandboxError::control("duplicating a descriptor", e))
        };
        let parent_end = lift(&parent_low)?;
        let child_end = lift(&child_low)?;
        // Closed before the clone: with a closed stdin, say, the pair may have taken 0, which the
        // init keeps; it must hold no copy of the parent's end (whose closing tells it fenzi is
        // gone) and the command must not get one as its stdin.
        drop((parent_low, child_low));
        let mut stdio_fds: [Option<OwnedFd>; 3] = [None, None, None];
        for (slot, fd) in
            stdio_fds
                .iter_mut()
                .zip([spec.stdin.take(), spec.stdout.take(), spec.stderr.take()])
        {
            if let Some(fd) = fd {
                *slot = Some(lift(&fd)?);
            }
        }
        let stdio_raw = [0, 1, 2].map(|i| stdio_fds[i].as_ref().map(AsRawFd::as_raw_fd));
        let prepared = Prepared::new(&spec, child_end.as_raw_fd(), stdio_raw)?;

        let flags = (NAMESPACES | libc::CLONE_PIDFD | libc::SIGCHLD) as u64;
        let (pid, pidfd) = match sys::clone_process(flags) {
            Ok((0, _)) => child::run_init(&prepared),
            Ok(parent) => parent,
            Err(errno) => return Err(SandboxError::isolation(SetupStep::CreateNamespaces, errno)),
        };
        // The child has its own copies now.
        drop(child_end);
        drop(stdio_fds);
        drop(prepared);

        let mut child = SandboxChild {
            pid,
            handle: SandboxHandle {
                pid,
                pidfd: pidfd.map(Arc::new),
            },
            control: parent_end,
            status: None,
        };
        match child.handshake(&spec) {
            Ok(handed) => Ok(Session {
                listener: handed.listener,
                transparent: handed.transparent,
                dns: handed.dns,
                sock_diag: handed.sock_diag,
                child,
            }),
            Err(err) => {
                // The init exits on its own after reporting; make sure, then reap it.
                let _ = child.handle.kill();
                let _ = child.reap();
                Err(err)
            }
        }
    }
}

/// The command running in a sandbox (more exactly: the sandbox's init, which forwards signals to
/// the command and exits with it). Dropping it without [`SandboxChild::wait`] kills the sandbox.
#[derive(Debug)]
pub struct SandboxChild {
    pid: libc::pid_t,
    handle: SandboxHandle,
    control: OwnedFd,
    status: Option<ExitStatus>,
}

impl SandboxChild {
    /// Host pid of the sandbox's init (PID 1 inside).
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    /// A handle that can signal the sandbox from other threads while this one waits.
    pub fn handle(&self) -> SandboxHandle {
        self.handle.clone()
    }

    /// Asks the command to stop (SIGTERM, forwarded by the init).
    pub fn terminate(&self) -> io::Result<()> {
        self.handle.terminate()
    }

    /// Kills the sandbox: the init and, with it, every process in the sandbox.
    pub fn kill(&self) -> io::Result<()> {
        self.handle.kill()
    }

    /// Waits for the command to end and returns its status: its exit code, or the signal that
    /// ended it. If the sandbox itself was killed, the init's status (SIGKILL) is returned.
    /// Blocking; from async code run it on a blocking thread.
    pub fn wait(&mut self) -> Result<ExitStatus, SandboxError> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let mut command_status = None;
        loop {
            let mut buf = [0u8; protocol::MESSAGE_LEN];
            match sys::recv_message(&self.control, &mut buf) {
                Ok((0, _)) => break,
                Ok((n, _)) => {
                    if let Some(Message {
                        kind: protocol::EXITED,
                        b,
                        ..
                    }) = Message::decode(&buf[..n])
                    {
                        command_status = Some(ExitStatus::from_raw(b));
                    }
                }
                Err(errno) => return Err(SandboxError::control("reading from the sandbox", errno)),
            }
        }
        let init_status = self.reap()?;
        let status = command_status.unwrap_or(init_status);
        self.status = Some(status);
        Ok(status)
    }

    /// Reaps the init; returns its status.
    fn reap(&mut self) -> Result<ExitStatus, SandboxError> {
        let (_, raw) = sys::wait_pid(self.pid, 0)
            .map_err(|e| SandboxError::control("waiting for the sandbox", e))?;
        let status = ExitStatus::from_raw(raw);
        self.status.get_or_insert(status);
        Ok(status)
    }

    /// Reads the init's setup report: the listener, or why it could not start.
    fn handshake(&mut self, spec: &SandboxSpec) -> Result<Handed, SandboxError> {
        let deadline = Instant::now() + SETUP_TIMEOUT;
        let (mut transparent, mut dns, mut sock_diag) = (Vec::new(), None, None);
        let wanted = spec.transparent.as_ref().map_or(0, |t| {
            let v6 = t.ipv6 || !t.addresses_v6.is_empty();
            t.ports.len() * if v6 { 2 } else { 1 }
        });
        let bad_handover = || SandboxError::isolation(SetupStep::Transparent, libc::EBADMSG);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ready =
                sys::poll_readable(&self.control, left.as_millis().min(i32::MAX as u128) as i32)
                    .map_err(|e| SandboxError::control("waiting for the sandbox", e))?;
            if !ready {
                return Err(SandboxError::isolation(
                    SetupStep::Handshake,
                    libc::ETIMEDOUT,
                ));
            }
            let mut buf = [0u8; protocol::MESSAGE_LEN];
            let (n, fd) = sys::recv_message(&self.control, &mut buf)
                .map_err(|e| SandboxError::control("reading from the sandbox", e))?;
            if n == 0 {
                let status = self.reap()?;
                return Err(SandboxError::Control {
                    context: "the sandbox ended during setup",
                    source: io::Error::other(format!("init {status}")),
                });
            }
            let Some(message) = Message::decode(&buf[..n]) else {
                continue;
            };
            match message.kind {
                protocol::TRANSPARENT_LISTENER => {
                    // In order, and only as many as asked for.
                    let (Some(fd), true) = (fd, message.a as usize == transparent.len()) else {
                        return Err(bad_handover());
                    };
                    if transparent.len() == wanted {
                        return Err(bad_handover());
                    }
                    transparent.push(TcpListener::from(fd));
                }
                protocol::SOCK_DIAG => {
                    let (Some(fd), None) = (fd, &sock_diag) else {
                        return Err(bad_handover());
                    };
                    sock_diag = Some(SockDiag(std::sync::Mutex::new(fd)));
                }
                protocol::DNS_SOCKET => {
                    let (Some(fd), true, None) = (fd, spec.transparent.is_some(), &dns) else {
                        return Err(bad_handover());
                    };
                    dns = Some(UdpSocket::from(fd));
                }
                protocol::READY => {
                    let Some(fd) = fd else {
                        return Err(SandboxError::isolation(
                            SetupStep::SendListener,
                            libc::EBADMSG,
                        ));
                    };
                    let listener = TcpListener::from(fd);
                    let expected = SocketAddr::V4(spec.proxy_addr());
                    if transparent.len() != wanted || dns.is_some() != spec.transparent.is_some() {
                        return Err(bad_handover());
                    }
                    let Some(sock_diag) = sock_diag.take() else {
                        return Err(SandboxError::isolation(SetupStep::SockDiag, libc::EBADMSG));
                    };
                    match listener.local_addr() {
                        Ok(addr) if addr == expected => {
                            return Ok(Handed {
                                listener,
                                transparent,
                                dns,
                                sock_diag,
                            });
                        }
                        _ => {
                            return Err(SandboxError::isolation(
                                SetupStep::SendListener,
                                libc::EBADMSG,
                            ));
                        }
                    }
                }
                protocol::SETUP_FAILED => {
                    let step = SetupStep::from_code(message.a).unwrap_or(SetupStep::Handshake);
                    return Err(SandboxError::isolation(step, message.b));
                }
                protocol::COMMAND_FAILED => {
                    return Err(SandboxError::Command {
                        program: spec.program_display(),
                        action: if message.a == protocol::ACTION_CHDIR {
                            "chdir"
                        } else {
                            "execve"
                        },
                        source: io::Error::from_raw_os_error(message.b),
                    });
                }
                _ => continue,
            }
        }
    }
}

impl Drop for SandboxChild {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.handle.kill();
            let _ = self.reap();
        }
    }
}

/// Signals a sandbox from any thread. Uses a pid file descriptor where the kernel has them
/// (Linux 5.3+), so a handle kept after the sandbox was reaped can never signal a stranger.
#[derive(Clone, Debug)]
pub struct SandboxHandle {
    pid: libc::pid_t,
    pidfd: Option<Arc<OwnedFd>>,
}

impl SandboxHandle {
    fn signal(&self, sig: libc::c_int) -> io::Result<()> {
        let result = match &self.pidfd {
            Some(fd) => sys::pidfd_send_signal(fd, sig),
            None => sys::kill(self.pid, sig),
        };
        result.map_err(io::Error::from_raw_os_error)
    }

    /// Asks the command to stop (SIGTERM, forwarded by the init).
    pub fn terminate(&self) -> io::Result<()> {
        self.signal(libc::SIGTERM)
    }

    /// Kills every process in the sandbox (SIGKILL to its init).
    pub fn kill(&self) -> io::Result<()> {
        self.signal(libc::SIGKILL)
    }
}

/// The exit code a wrapper such as `fenzi run` should exit with for `status`: the command's own
/// code, or 128 + the signal number when a signal ended it (as shells report it).
pub fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_code_follows_shell_conventions() {
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGTERM)), 143);
    }
}
