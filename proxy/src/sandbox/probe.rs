//! What this machine's kernel offers the sandbox, read without starting one: the settings that
//! govern user namespaces, the Landlock ABI, and seccomp. `fenzi doctor` shows these beside a
//! real trial ([`super::Session::start`]), which is the only proof that isolation works; the
//! readings explain a failed trial and say what to change.

use super::filesystem::LANDLOCK_MIN_ABI;
use super::sys;

/// The kernel's readings, each `None` where the setting does not exist on this kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelReadings {
    /// `kernel.unprivileged_userns_clone` (Debian, Ubuntu): 0 refuses user namespaces to users.
    pub unprivileged_userns_clone: Option<String>,
    /// `user.max_user_namespaces`: 0 refuses them to everyone.
    pub max_user_namespaces: Option<String>,
    /// `kernel.apparmor_restrict_unprivileged_userns` (Ubuntu 23.10+): 1 refuses them to
    /// programs without an AppArmor profile that grants `userns`.
    pub apparmor_restrict_unprivileged_userns: Option<String>,
    /// The Landlock ABI version, or the errno of asking (`EOPNOTSUPP`: built but disabled at
    /// boot; `ENOSYS`: not built).
    pub landlock_abi: Result<u32, i32>,
    /// The `Seccomp:` line of `/proc/self/status` exists: the kernel has seccomp.
    pub seccomp: bool,
}

/// The oldest Landlock ABI `fenzi run` accepts (it refuses to start below it).
pub const MIN_LANDLOCK_ABI: u32 = LANDLOCK_MIN_ABI;

/// Reads the settings; never fails (an unreadable setting reads as absent).
pub fn read_kernel() -> KernelReadings {
    KernelReadings {
        unprivileged_userns_clone: sysctl("kernel/unprivileged_userns_clone"),
        max_user_namespaces: sysctl("user/max_user_namespaces"),
        apparmor_restrict_unprivileged_userns: sysctl(
            "kernel/apparmor_restrict_unprivileged_userns",
        ),
        landlock_abi: sys::landlock_abi(),
        seccomp: std::fs::read_to_string("/proc/self/status")
            .map(|s| s.lines().any(|l| l.starts_with("Seccomp:")))
            .unwrap_or(false),
    }
}

fn sysctl(path: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/sys/{path}"))
        .ok()
        .map(|s| s.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readings_agree_with_the_kernel_files() {
        let r = read_kernel();
        assert_eq!(
            r.max_user_namespaces.is_some(),
            std::path::Path::new("/proc/sys/user/max_user_namespaces").exists()
        );
        // Every Linux that runs these tests has seccomp (the sandbox's own tests need it).
        assert!(r.seccomp);
        if let Ok(abi) = r.landlock_abi {
            assert!(abi >= 1, "Landlock ABI versions start at 1");
        }
    }
}
