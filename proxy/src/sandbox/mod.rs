//! Linux sandbox plumbing for `fenzi run`: runs a command whose only way out to the network is
//! the proxy. The one module of the project that talks to the kernel directly, so the one place
//! `unsafe` is allowed (all of it in `sys`, one system call per block).
//!
//! [`Session::start`] clones an init process into new user, PID, network, mount and IPC
//! namespaces. The init asks to be killed when its parent thread ends, maps the caller's uid/gid
//! to a non-root id inside (a user namespace always, even for root), mounts a `/proc` of the new
//! PID namespace, makes the governing files read-only and their ancestors immovable (`filesystem`),
//! brings up `lo` (with the synthetic range and the policy's IP literals when the spec asks for the
//! transparent path), creates the proxy listener on `127.0.0.1:<port>` inside the network
//! namespace (and the transparent listeners, the DNS stub's socket and a `NETLINK_SOCK_DIAG`
//! socket through which fenzi finds a connection's socket ([`SockDiag`]), each handed over as it
//! is made), joins a fresh session keyring, sets `no_new_privs`, drops its capabilities, applies the
//! Landlock write allowlist, installs the seccomp filter ([`seccomp`] says what it refuses and
//! why), forks the command and, once the command is exec'd, hands the listener to the parent over
//! `SCM_RIGHTS`. The
//! proxy, in the parent and the host's namespaces, accepts on that listener; nothing else is
//! reachable from inside: no other interface, no route, no host Unix socket, no abstract socket
//! of the host.
//!
//! Process model: a raw `clone` (fork semantics) from the caller, which may be multi-threaded;
//! the child runs only raw system calls on memory prepared before the fork, as
//! `std::process::Command`'s `pre_exec` does. No helper binary and no re-exec of the current
//! executable are needed, so the same code works from `fenzi` and from test binaries.
//!
//! Any failure to isolate is an error naming the step and the setting that enables it; there is
//! no fallback. The environment is exactly the spec's ([`env::sandbox_env`] builds it).
//!
//! Dumpability. The caller holding secrets makes itself non-dumpable first
//! ([`make_process_undumpable`]), and the init inherits that. The kernel then gives the init's
//! `/proc/<pid>` files, `setgroups`, `uid_map` and `gid_map` among them, to root, so an
//! unprivileged user could not write its own id maps. The init is therefore dumpable for exactly
//! the three `open`s of those files and non-dumpable again before anything else; the writes check
//! the opener's credentials, not the flag. In those microseconds a process of the same user could
//! attach to the init (a copy of the caller's memory) or open its `/proc/<pid>/mem`, and keep that
//! access. With Yama's `ptrace_scope` at 1 or more, only the caller's ancestors (the user's shell,
//! say) can, and they could as well have attached to the caller as it started. Same-user processes
//! are largely inside the trust boundary anyway: they can read the user's credential store.
//! The alternatives were worse or did not work: the parent cannot write the child's maps (the same
//! root-owned files, and it has no capability over them), so that would need a longer dumpable
//! window spanning a round trip between the two; starting the init before the secrets and the CA
//! exist needs the whole spec (placeholders, CA paths) sent after the clone, and still exposes a
//! copy of the caller's environment; `newuidmap` is a set-uid helper not installed everywhere.
//! The command is dumpable after its `execve` (the kernel's rule for a readable, non-set-id
//! program), as the design intends: it is the user's agent, holds placeholders and no secret
//! value, and its own `/proc` files and core dumps work as for any program.
//!
//! Lifetime. The sandbox dies with the caller: the init asks for SIGKILL when its parent *thread*
//! ends (`PR_SET_PDEATHSIG`; so the thread that calls [`Session::start`] must outlive the
//! session), exits at once if the parent was already gone before it could ask (the parent's end
//! of the control socket is closed then), and keeps watching that socket afterwards. When the
//! init, PID 1 of the namespace, dies, the kernel kills every process in it.
//!
//! May use: nothing of this crate.

#![allow(unsafe_code)]

mod child;
pub mod env;
mod error;
mod filesystem;
pub mod probe;
mod protocol;
pub mod seccomp;
mod session;
mod spec;
mod sys;

pub use error::{SandboxError, SetupStep};
pub use session::{SandboxChild, SandboxHandle, Session, SockDiag, exit_code};
pub use spec::{DEFAULT_PROXY_PORT, DEFAULT_SANDBOX_ID, SandboxSpec, TransparentSpec};

/// Makes the calling process non-dumpable: other processes of the same user can then no longer
/// read its memory or environment through `/proc/<pid>/{mem,environ}` or attach to it. The
/// sandbox cannot see the parent anyway (private `/proc`); this is defence in depth for the
/// process that holds the CA key and the secret values. Also stops core dumps of it. Call it
/// before any secret is loaded: a process is dumpable from its `execve` until then. Sandboxes
/// started afterwards work for every user (see "Dumpability" above).
pub fn make_process_undumpable() -> std::io::Result<()> {
    sys::prctl(libc::PR_SET_DUMPABLE, 0).map_err(std::io::Error::from_raw_os_error)
}
