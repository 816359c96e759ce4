//! Linux sandbox plumbing for `fenzi run`: runs a command whose only way out to the network is
//! the proxy. The one module of the project that talks to the kernel directly, so the one place
//! `unsafe` is allowed (all of it in `sys`, one system call per block).
//!
//! [`Session::start`] clones an init process into new user, PID, network, mount and IPC
//! namespaces. The init maps the caller's uid/gid to a non-root id inside (a user namespace
//! always, even for root), makes itself non-dumpable, mounts a `/proc` of the new PID namespace,
//! brings up `lo`, creates the proxy listener on `127.0.0.1:<port>` inside the network namespace,
//! joins a fresh session keyring, sets `no_new_privs`, drops its capabilities, installs the
//! seccomp filter ([`seccomp`] says what it refuses and why), forks the command and, once the
//! command is exec'd, hands the listener to the parent over `SCM_RIGHTS`. The proxy, in the
//! parent and the host's namespaces, accepts on that listener; nothing else is reachable from
//! inside: no other interface, no route, no host Unix socket, no abstract socket of the host.
//!
//! Process model: a raw `clone` (fork semantics) from the caller, which may be multi-threaded;
//! the child runs only raw system calls on memory prepared before the fork, as
//! `std::process::Command`'s `pre_exec` does. No helper binary and no re-exec of the current
//! executable are needed, so the same code works from `fenzi` and from test binaries.
//!
//! Any failure to isolate is an error naming the step and the setting that enables it; there is
//! no fallback. The environment is exactly the spec's ([`env::sandbox_env`] builds it).

#![allow(unsafe_code)]

mod child;
pub mod env;
mod error;
mod protocol;
pub mod seccomp;
mod session;
mod spec;
mod sys;

pub use error::{SandboxError, SetupStep};
pub use session::{SandboxChild, SandboxHandle, Session, exit_code};
pub use spec::{DEFAULT_PROXY_PORT, DEFAULT_SANDBOX_ID, SandboxSpec};

/// Makes the calling process non-dumpable: other processes of the same user can then no longer
/// read its memory or environment through `/proc/<pid>/{mem,environ}` or attach to it. The
/// sandbox cannot see the parent anyway (private `/proc`); this is defence in depth for the
/// process that holds the CA key and the secret values. Also stops core dumps of it.
pub fn make_process_undumpable() -> std::io::Result<()> {
    sys::prctl(libc::PR_SET_DUMPABLE, 0).map_err(std::io::Error::from_raw_os_error)
}
