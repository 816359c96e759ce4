//! Sandbox errors: which step of the isolation failed, the kernel's answer, and what setting
//! enables it. A sandbox that cannot be set up completely does not start; there is no fallback.

use std::fmt;
use std::io;

/// A step of setting up the sandbox, in the order the child performs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SetupStep {
    /// `clone` with new user, PID, network, mount and IPC namespaces (done by the parent).
    CreateNamespaces,
    /// Asking for SIGKILL when the parent thread ends (`PR_SET_PDEATHSIG`).
    ParentDeathSignal,
    /// Writing `deny` to `/proc/self/setgroups`.
    SetGroups,
    /// Writing `/proc/self/uid_map`.
    UidMap,
    /// Writing `/proc/self/gid_map`.
    GidMap,
    /// Switching the init's dumpable flag: on only while it opens its id-map files, then off
    /// for good (it holds a copy of the parent's memory).
    NonDumpable,
    /// Making every mount private to the new mount namespace.
    PrivateMounts,
    /// Mounting a `/proc` that shows only the sandbox's processes.
    MountProc,
    /// Bringing up `lo` in the new network namespace.
    LoopbackUp,
    /// Creating the proxy listener inside the network namespace.
    Listener,
    /// Joining a fresh anonymous session keyring.
    SessionKeyring,
    /// Setting `PR_SET_NO_NEW_PRIVS`.
    NoNewPrivs,
    /// Dropping capabilities held inside the user namespace.
    DropCapabilities,
    /// Installing the seccomp filter.
    Seccomp,
    /// Installing the init's signal forwarders.
    Signals,
    /// Forking the command from the sandbox's init.
    ForkCommand,
    /// Handing the listener to the parent.
    SendListener,
    /// Building the seccomp filter (done by the parent).
    BuildFilter,
    /// Waiting for the child to finish setting up.
    Handshake,
    /// Mounting the governing files and directories read-only inside the sandbox.
    ProtectFiles,
    /// Building (parent) or applying (init) the Landlock write allowlist.
    Landlock,
    /// Setting up the transparent path: loopback addresses, listeners, the DNS stub's socket.
    Transparent,
    /// Opening the socket-diagnostics socket through which fenzi finds a connection's socket
    /// (DESIGN §17, `crate::attribution`).
    SockDiag,
}

impl SetupStep {
    /// Wire code for the child → parent report.
    pub(crate) fn code(self) -> u32 {
        self as u32
    }

    pub(crate) fn from_code(code: u32) -> Option<Self> {
        const ALL: [SetupStep; 23] = [
            SetupStep::CreateNamespaces,
            SetupStep::ParentDeathSignal,
            SetupStep::SetGroups,
            SetupStep::UidMap,
            SetupStep::GidMap,
            SetupStep::NonDumpable,
            SetupStep::PrivateMounts,
            SetupStep::MountProc,
            SetupStep::LoopbackUp,
            SetupStep::Listener,
            SetupStep::SessionKeyring,
            SetupStep::NoNewPrivs,
            SetupStep::DropCapabilities,
            SetupStep::Seccomp,
            SetupStep::Signals,
            SetupStep::ForkCommand,
            SetupStep::SendListener,
            SetupStep::BuildFilter,
            SetupStep::Handshake,
            SetupStep::ProtectFiles,
            SetupStep::Landlock,
            SetupStep::Transparent,
            SetupStep::SockDiag,
        ];
        ALL.into_iter().find(|s| s.code() == code)
    }
}

impl fmt::Display for SetupStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SetupStep::CreateNamespaces => {
                "creating the user, PID, network, mount and IPC namespaces"
            }
            SetupStep::ParentDeathSignal => "asking to die with the parent (PR_SET_PDEATHSIG)",
            SetupStep::SetGroups => "writing /proc/self/setgroups",
            SetupStep::UidMap => "writing /proc/self/uid_map",
            SetupStep::GidMap => "writing /proc/self/gid_map",
            SetupStep::NonDumpable => "setting the sandbox init's dumpable flag",
            SetupStep::PrivateMounts => "making mounts private to the sandbox",
            SetupStep::MountProc => "mounting a private /proc",
            SetupStep::LoopbackUp => "bringing up the loopback interface",
            SetupStep::Listener => "creating the proxy listener inside the sandbox",
            SetupStep::SessionKeyring => "joining a fresh session keyring",
            SetupStep::NoNewPrivs => "setting no_new_privs",
            SetupStep::DropCapabilities => "dropping capabilities",
            SetupStep::Seccomp => "installing the seccomp filter",
            SetupStep::Signals => "installing signal forwarding",
            SetupStep::ForkCommand => "starting the command inside the sandbox",
            SetupStep::SendListener => "handing the listener to the proxy",
            SetupStep::BuildFilter => "building the seccomp filter",
            SetupStep::Handshake => "waiting for the sandbox to start",
            SetupStep::ProtectFiles => {
                "mounting the policy, the machine config and the audit directory read-only"
            }
            SetupStep::Landlock => "restricting where the sandbox may write (Landlock)",
            SetupStep::Transparent => {
                "setting up the listeners for programs that ignore the proxy variables"
            }
            SetupStep::SockDiag => {
                "opening the socket-diagnostics socket that tells connections' programs apart"
            }
        })
    }
}

/// What went wrong starting or running a sandbox.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The spec cannot be run (a NUL byte in an argument, uid 0 inside, port 0, ...).
    #[error("invalid sandbox spec: {0}")]
    InvalidSpec(String),
    /// Isolation could not be set up; the command was not started.
    #[error("cannot isolate the command: {step} failed: {source}{}", hint_suffix(.hint))]
    Isolation {
        step: SetupStep,
        #[source]
        source: io::Error,
        /// What to change on this machine to make the step work, when we can tell.
        hint: Option<String>,
    },
    /// The sandbox was set up but the command could not be started in it.
    #[error("cannot start `{program}` in the sandbox: {action} failed: {source}")]
    Command {
        program: String,
        /// `chdir` or `execve`.
        action: &'static str,
        #[source]
        source: io::Error,
    },
    /// The parent could not talk to or wait for the sandbox.
    #[error("sandbox control: {context}: {source}")]
    Control {
        context: &'static str,
        #[source]
        source: io::Error,
    },
}

fn hint_suffix(hint: &Option<String>) -> String {
    hint.as_ref().map(|h| format!(" ({h})")).unwrap_or_default()
}

impl SandboxError {
    /// True when the kernel (or its configuration) refused to create the namespaces: the one
    /// case where a test suite may skip sandbox tests instead of failing them.
    pub fn namespaces_unavailable(&self) -> bool {
        matches!(
            self,
            SandboxError::Isolation {
                step: SetupStep::CreateNamespaces
                    | SetupStep::UidMap
                    | SetupStep::GidMap
                    | SetupStep::SetGroups,
                ..
            }
        )
    }

    pub(crate) fn isolation(step: SetupStep, errno: i32) -> Self {
        SandboxError::Isolation {
            step,
            source: io::Error::from_raw_os_error(errno),
            hint: hint_for(step, errno),
        }
    }

    pub(crate) fn control(context: &'static str, errno: i32) -> Self {
        SandboxError::Control {
            context,
            source: io::Error::from_raw_os_error(errno),
        }
    }
}

/// Reads a sysctl under `/proc/sys`, trimmed; `None` when absent.
fn sysctl(path: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/sys/{path}"))
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Best explanation of a failed step on this machine, from the errno and the sysctls that
/// usually cause it.
fn hint_for(step: SetupStep, errno: i32) -> Option<String> {
    let mut hints = Vec::new();
    let apparmor = || {
        (sysctl("kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1")).then(|| {
            "AppArmor restricts unprivileged user namespaces: `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` \
             or an AppArmor profile that grants `userns` to fenzi"
                .to_owned()
        })
    };
    match (step, errno) {
        (SetupStep::CreateNamespaces, libc::EPERM | libc::EACCES) => {
            if sysctl("kernel/unprivileged_userns_clone").as_deref() == Some("0") {
                hints.push("unprivileged user namespaces are disabled: `sysctl -w kernel.unprivileged_userns_clone=1`".to_owned());
            }
            hints.extend(apparmor());
            if hints.is_empty() {
                hints.push(
                    "user namespaces are refused by a security policy; inside a container, run it with a seccomp \
                     profile that allows clone/unshare of namespaces (Docker: --security-opt seccomp=unconfined)"
                        .to_owned(),
                );
            }
        }
        (SetupStep::CreateNamespaces, libc::ENOSPC | libc::EUSERS) => {
            for key in [
                "user.max_user_namespaces",
                "user.max_pid_namespaces",
                "user.max_net_namespaces",
                "user.max_mnt_namespaces",
                "user.max_ipc_namespaces",
            ] {
                if sysctl(&key.replace('.', "/")).as_deref() == Some("0") {
                    hints.push(format!("`{key}` is 0: `sysctl -w {key}=15000`"));
                }
            }
            if hints.is_empty() {
                hints.push(
                    "the namespace limit is reached: raise `user.max_user_namespaces` (sysctl)"
                        .to_owned(),
                );
            }
        }
        (SetupStep::CreateNamespaces, libc::EINVAL) => {
            hints.push(
                "the kernel lacks namespace support (CONFIG_USER_NS, CONFIG_PID_NS, CONFIG_NET_NS)"
                    .to_owned(),
            );
        }
        (SetupStep::SetGroups | SetupStep::UidMap | SetupStep::GidMap, _) => {
            hints.extend(apparmor());
            if hints.is_empty() {
                hints.push("the kernel refused the id mapping of the new user namespace (check LSM policy)".to_owned());
            }
        }
        (SetupStep::MountProc, libc::EPERM) => {
            hints.push(
                "the host /proc has paths masked or read-only (as in a container); a fully visible /proc is needed \
                 (Docker: --security-opt systempaths=unconfined)"
                    .to_owned(),
            );
        }
        (
            SetupStep::PrivateMounts | SetupStep::LoopbackUp | SetupStep::Listener,
            libc::EPERM | libc::EACCES,
        ) => {
            hints.extend(apparmor());
        }
        (SetupStep::Landlock, libc::ENOSYS | libc::EOPNOTSUPP) => {
            hints.push(
                "the kernel has no Landlock, or it is not enabled: Linux 5.19 or later with \
                 `landlock` in the `lsm=` boot parameter (see /sys/kernel/security/lsm)"
                    .to_owned(),
            );
        }
        (SetupStep::Seccomp, libc::EINVAL) => {
            hints
                .push("the kernel lacks seccomp filter support (CONFIG_SECCOMP_FILTER)".to_owned());
        }
        (SetupStep::NoNewPrivs, libc::EINVAL) => {
            hints.push("the kernel is too old for PR_SET_NO_NEW_PRIVS (Linux 3.5+)".to_owned());
        }
        (SetupStep::SessionKeyring, libc::EDQUOT) => {
            hints.push("the key quota is exhausted: raise `kernel.keys.maxkeys`".to_owned());
        }
        _ => {}
    }
    (!hints.is_empty()).then(|| hints.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_codes_round_trip() {
        for code in 0..32 {
            if let Some(step) = SetupStep::from_code(code) {
                assert_eq!(step.code(), code);
            }
        }
        assert_eq!(
            SetupStep::from_code(SetupStep::Seccomp.code()),
            Some(SetupStep::Seccomp)
        );
        assert_eq!(SetupStep::from_code(999), None);
    }

    #[test]
    fn isolation_error_names_the_step_and_the_setting() {
        let err = SandboxError::isolation(SetupStep::Seccomp, libc::EINVAL);
        let text = err.to_string();
        assert!(text.contains("installing the seccomp filter"), "{text}");
        assert!(text.contains("CONFIG_SECCOMP_FILTER"), "{text}");
        assert!(!err.namespaces_unavailable());
        let err = SandboxError::isolation(SetupStep::CreateNamespaces, libc::EINVAL);
        assert!(err.namespaces_unavailable());
        assert!(err.to_string().contains("CONFIG_USER_NS"), "{err}");
        let err = SandboxError::isolation(SetupStep::CreateNamespaces, libc::ENOSPC);
        assert!(err.to_string().contains("max_user_namespaces"), "{err}");
    }
}
