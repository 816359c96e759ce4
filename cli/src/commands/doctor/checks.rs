//! The checks `fenzi doctor` runs, each a [`Finding`]: what was found and, when it is not fine,
//! what to change. The sandbox check starts a real sandbox; the others read the machine and
//! explain a failure (or, for the keyring and the directories, what will not work).

use fenzi_proxy::sandbox::probe::{self, KernelReadings};
use fenzi_proxy::sandbox::{SandboxError, SandboxSpec, Session, SetupStep, exit_code};
use serde::Serialize;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// How a finding bears on `fenzi run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Works.
    Ok,
    /// `fenzi run` isolates, but something it offers will not work (stored secrets, say).
    Warn,
    /// `fenzi run` cannot isolate a command here until this is changed.
    Fail,
    /// Neither good nor bad: what was found (the agents on `PATH`).
    Info,
}

/// One check's result.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub check: &'static str,
    pub status: Status,
    /// What was found, in a sentence.
    pub found: String,
    /// What to change, when `status` is `warn` or `fail`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    fn new(check: &'static str, status: Status, found: impl Into<String>) -> Finding {
        Finding {
            check,
            status,
            found: found.into(),
            fix: None,
        }
    }

    fn fix(mut self, fix: impl Into<String>) -> Finding {
        self.fix = Some(fix.into());
        self
    }
}

/// How the trial sandbox ended.
pub enum Trial {
    Ran,
    Refused(SandboxError),
    /// Isolation worked but the program inside did not run to a clean exit.
    ProgramFailed(String),
}

/// Starts a sandbox as `fenzi run` does (namespaces, private `/proc`, Landlock write list,
/// seccomp, dropped capabilities) and runs `fenzi --version` in it. Transparent listeners are
/// not part of the trial: they need a policy, and they use only what the namespaces already gave.
pub fn trial_sandbox() -> Trial {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return Trial::ProgramFailed(format!("cannot find fenzi's own executable: {e}")),
    };
    let devnull = |write: bool| -> Option<OwnedFd> {
        std::fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .open("/dev/null")
            .ok()
            .map(OwnedFd::from)
    };
    let mut spec = SandboxSpec::new(exe.as_os_str())
        .args(["--version"])
        .envs([("PATH", "/usr/local/bin:/usr/bin:/bin")])
        .cwd("/")
        .writable([std::env::temp_dir()]);
    spec.stdin = devnull(false);
    spec.stdout = devnull(true);
    spec.stderr = devnull(true);
    match Session::start(spec) {
        Ok(mut session) => match session.child.wait() {
            Ok(status) if status.success() => Trial::Ran,
            Ok(status) => Trial::ProgramFailed(format!(
                "`fenzi --version` exited {} inside the sandbox",
                exit_code(status)
            )),
            Err(e) => Trial::Refused(e),
        },
        Err(SandboxError::Command {
            program, source, ..
        }) => Trial::ProgramFailed(format!(
            "cannot start `{program}` inside the sandbox: {source}"
        )),
        Err(e) => Trial::Refused(e),
    }
}

/// The step a refused trial stopped at.
fn refused_step(trial: &Trial) -> Option<SetupStep> {
    match trial {
        Trial::Refused(SandboxError::Isolation { step, .. }) => Some(*step),
        _ => None,
    }
}

pub fn sandbox(trial: &Trial) -> Finding {
    match trial {
        Trial::Ran => Finding::new(
            "sandbox",
            Status::Ok,
            "a trial sandbox started and ran fenzi in it: user, PID, network, mount and IPC \
             namespaces, a private /proc, the Landlock write list and the seccomp filter",
        ),
        Trial::Refused(e) => {
            let fix = match e {
                SandboxError::Isolation { hint: Some(h), .. } => h.clone(),
                _ => "see the checks below for the setting that refuses it".to_owned(),
            };
            Finding::new(
                "sandbox",
                Status::Fail,
                format!("a trial sandbox did not start: {e}"),
            )
            .fix(fix)
        }
        Trial::ProgramFailed(why) => Finding::new("sandbox", Status::Fail, why.clone()).fix(
            "isolation worked but fenzi could not run inside it; install fenzi where every user \
             can read it (/usr/bin, /usr/local/bin) rather than in a private directory",
        ),
    }
}

pub fn user_namespaces(k: &KernelReadings, trial: &Trial) -> Finding {
    let mut settings = Vec::new();
    for (name, value) in [
        (
            "kernel.unprivileged_userns_clone",
            &k.unprivileged_userns_clone,
        ),
        ("user.max_user_namespaces", &k.max_user_namespaces),
        (
            "kernel.apparmor_restrict_unprivileged_userns",
            &k.apparmor_restrict_unprivileged_userns,
        ),
    ] {
        if let Some(v) = value {
            settings.push(format!("{name}={v}"));
        }
    }
    let settings = if settings.is_empty() {
        "no setting restricts them".to_owned()
    } else {
        settings.join(", ")
    };
    let refused = matches!(
        refused_step(trial),
        Some(
            SetupStep::CreateNamespaces
                | SetupStep::SetGroups
                | SetupStep::UidMap
                | SetupStep::GidMap
        )
    );
    if !refused && !matches!(trial, Trial::Refused(_)) {
        return Finding::new(
            "user namespaces",
            Status::Ok,
            format!("created ({settings})"),
        );
    }
    let mut fixes = Vec::new();
    if k.unprivileged_userns_clone.as_deref() == Some("0") {
        fixes.push("sudo sysctl -w kernel.unprivileged_userns_clone=1");
    }
    if k.max_user_namespaces.as_deref() == Some("0") {
        fixes.push("sudo sysctl -w user.max_user_namespaces=15000");
    }
    if k.apparmor_restrict_unprivileged_userns.as_deref() == Some("1") {
        fixes.push(
            "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor \
             profile for fenzi that grants `userns`",
        );
    }
    if !refused {
        // The trial failed later: the namespaces themselves were made.
        return Finding::new(
            "user namespaces",
            Status::Ok,
            format!("created ({settings})"),
        );
    }
    let fix = if fixes.is_empty() {
        "a security policy refuses them; in a container, allow namespace creation (Docker: \
         --security-opt seccomp=unconfined --security-opt apparmor=unconfined)"
            .to_owned()
    } else {
        fixes.join("; ")
    };
    Finding::new(
        "user namespaces",
        Status::Fail,
        format!("refused ({settings})"),
    )
    .fix(fix)
}

pub fn landlock(k: &KernelReadings) -> Finding {
    let min = probe::MIN_LANDLOCK_ABI;
    match k.landlock_abi {
        Ok(abi) if abi >= min => Finding::new(
            "landlock",
            Status::Ok,
            format!("ABI {abi} (fenzi needs {min} or later)"),
        ),
        Ok(abi) => Finding::new(
            "landlock",
            Status::Fail,
            format!("ABI {abi}, older than the {min} fenzi needs to control renames"),
        )
        .fix("a kernel of Linux 5.19 or later"),
        Err(errno) if errno == libc_eopnotsupp() => Finding::new(
            "landlock",
            Status::Fail,
            "built into the kernel but not enabled at boot",
        )
        .fix("add landlock to the kernel's `lsm=` boot parameter (e.g. lsm=landlock,lockdown,yama,apparmor,bpf) and reboot"),
        Err(errno) => Finding::new(
            "landlock",
            Status::Fail,
            format!(
                "not available ({})",
                std::io::Error::from_raw_os_error(errno)
            ),
        )
        .fix("a kernel of Linux 5.19 or later built with CONFIG_SECURITY_LANDLOCK"),
    }
}

fn libc_eopnotsupp() -> i32 {
    // Not worth a libc dependency in the CLI: EOPNOTSUPP is 95 on every Linux architecture
    // fenzi builds for.
    95
}

pub fn seccomp(k: &KernelReadings, trial: &Trial) -> Finding {
    if !k.seccomp {
        return Finding::new("seccomp", Status::Fail, "this kernel has no seccomp")
            .fix("a kernel built with CONFIG_SECCOMP_FILTER");
    }
    if refused_step(trial) == Some(SetupStep::Seccomp) {
        return Finding::new("seccomp", Status::Fail, "the kernel refused fenzi's filter")
            .fix("in a container, a seccomp profile that allows seccomp(2) itself");
    }
    Finding::new("seccomp", Status::Ok, "filters can be installed")
}

pub fn keyring() -> Finding {
    match fenzi_proxy::credstore::open() {
        Ok(store) => Finding::new(
            "keyring",
            Status::Ok,
            format!(
                "secrets are kept in the {}{}",
                store.backend(),
                if store.persistent() {
                    ""
                } else {
                    " (not kept after fenzi exits)"
                }
            ),
        ),
        Err(e) => Finding::new("keyring", Status::Warn, format!("no credential store: {e}")).fix(
            "`fenzi run` works, but `fenzi mcp token` cannot store secrets: give secrets in the \
             environment, or start a Secret Service (gnome-keyring, KeePassXC) or allow the \
             kernel keyring (keyutils)",
        ),
    }
}

/// The directories fenzi keeps files in: each must be owned by this user and writable by
/// nobody else, since the policy, the audit log and the session's CA live there.
pub fn directories() -> Vec<Finding> {
    let uid = rustix::process::getuid().as_raw();
    let mut out = Vec::new();
    let config =
        crate::config_files::default_machine_file().and_then(|f| f.parent().map(Path::to_path_buf));
    let state =
        crate::session::audit_dir(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME"));
    let runtime = Some(fenzi_proxy::host_files::runtime_base());
    // `fenzi run` refuses a runtime base that is not private; a shared config or state
    // directory lets another user change the machine policy or the logs, which fenzi run does
    // not refuse, so those are warnings.
    for (check, dir, what, severity) in [
        (
            "config directory",
            config,
            "the machine file (mcp.yaml)",
            Status::Warn,
        ),
        ("state directory", state, "the audit logs", Status::Warn),
        (
            "runtime directory",
            runtime,
            "each session's CA and rendered configs",
            Status::Fail,
        ),
    ] {
        out.push(directory(check, dir, what, uid, severity));
    }
    if std::env::var_os("XDG_RUNTIME_DIR").is_none()
        && let Some(last) = out.last_mut()
    {
        last.found
            .push_str(" (XDG_RUNTIME_DIR is not set, so it is under the temporary directory)");
    }
    out
}

fn directory(
    check: &'static str,
    dir: Option<PathBuf>,
    what: &str,
    uid: u32,
    severity: Status,
) -> Finding {
    let Some(dir) = dir else {
        return Finding::new(
            check,
            Status::Warn,
            format!("cannot place it: neither the XDG variable nor HOME is set ({what})"),
        )
        .fix("set HOME");
    };
    match std::fs::symlink_metadata(&dir) {
        Ok(meta) if meta.file_type().is_symlink() => Finding::new(
            check,
            severity,
            format!("{} is a symbolic link ({what})", dir.display()),
        )
        .fix(format!(
            "replace the link with a directory: rm {0} && mkdir -m 700 {0}",
            dir.display()
        )),
        Ok(meta) => match fenzi_proxy::host_files::not_private(&meta, uid) {
            None => Finding::new(
                check,
                Status::Ok,
                format!("{}, yours, private ({what})", dir.display()),
            ),
            Some(why) => Finding::new(
                check,
                severity,
                format!("{}: {why} ({what})", dir.display()),
            )
            .fix(format!("chown {uid} {0} && chmod go-w {0}", dir.display())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Finding::new(
            check,
            Status::Ok,
            format!(
                "{} does not exist yet; fenzi creates it, private, on first use ({what})",
                dir.display()
            ),
        ),
        Err(e) => Finding::new(check, severity, format!("{}: {e} ({what})", dir.display()))
            .fix("make it readable by you"),
    }
}

/// The agents `fenzi run --agent` knows, found on `PATH` (as the command `fenzi run` would start).
pub fn agents() -> Vec<Finding> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    ["claude", "codex", "opencode", "grok"]
        .into_iter()
        .map(|name| {
            let found = std::env::split_paths(&path)
                .map(|dir| dir.join(name))
                .find(|candidate| is_executable(candidate));
            match found {
                Some(at) => {
                    Finding::new("agent", Status::Info, format!("{name}: {}", at.display()))
                }
                None => Finding::new("agent", Status::Info, format!("{name}: not on PATH")),
            }
        })
        .collect()
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
