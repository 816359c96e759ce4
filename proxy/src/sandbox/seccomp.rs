//! The sandbox's seccomp filter: which system calls the command may not make, compiled to BPF in
//! the parent (allocation is fine there) and installed in the child just before the command runs.
//!
//! It is a deny list on top of namespaces, not an allow list: an agent runs arbitrary programs
//! (compilers, package managers, browsers), so the filter closes the specific doors that would
//! undo or bypass the isolation, and answers `EPERM` so programs fail cleanly instead of dying:
//!
//! - **Host Unix sockets.** `socket()` is allowed only for `AF_INET`, `AF_INET6` (confined by the
//!   network namespace) and `AF_NETLINK` (interface queries, also per namespace). Every other
//!   family is refused: `AF_UNIX` (a daemon behind `/run/docker.sock`, `/tmp/...` or the user's
//!   D-Bus could open connections or run commands for the agent), and families the network
//!   namespace does not confine, such as `AF_VSOCK` (the hypervisor host of a VM). This is the
//!   rule Anthropic's sandbox-runtime uses; it holds for every path, including sockets in the
//!   project or home directory, which hiding `/run` and `/tmp` with a mount namespace would not.
//!   `socketpair(AF_UNIX, SOCK_STREAM | SOCK_SEQPACKET)` stays allowed: Node, Python and libuv
//!   use it for IPC with their own children, and a connected pair cannot be pointed elsewhere.
//!   `SOCK_DGRAM` pairs are refused because `sendto` on one can still address a host socket.
//! - **Keyrings:** `keyctl`, `add_key`, `request_key` (the child also gets a fresh session
//!   keyring before the filter is installed).
//! - **Other processes' memory:** `ptrace`, `process_vm_readv`, `process_vm_writev`.
//! - **Undoing the setup:** `unshare`, `setns`, `clone` with any `CLONE_NEW*` flag, `clone3`
//!   (its flags live in memory a filter cannot read, so it answers `ENOSYS` and the C library
//!   falls back to `clone`), `mount` and the new mount API, `umount2`, `pivot_root`, `chroot`.
//! - **Filter bypasses and kernel attack surface:** `io_uring_*` (its operations are not system
//!   calls and would skip this filter), `bpf`, `perf_event_open`, `userfaultfd`, and the x32
//!   system-call ABI on x86_64 (the same calls under other numbers).
//! - **Terminal injection:** `ioctl(TIOCSTI)` and `ioctl(TIOCLINUX)`, which push keystrokes into
//!   the terminal the command shares with the user's shell.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

/// `ioctl` request that pushes a byte into a terminal's input queue.
const TIOCSTI: u64 = 0x5412;
/// `ioctl` request with subcommands that can also inject input on virtual consoles.
const TIOCLINUX: u64 = 0x541C;
/// Bit that marks an x32-ABI system call number on x86_64.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// System calls refused outright (any arguments).
const DENIED: &[i64] = &[
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
];

/// Namespace flags that `clone` may not carry.
const NAMESPACE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWNS,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWCGROUP,
];

/// Socket families the command may create.
const ALLOWED_FAMILIES: &[libc::c_int] = &[libc::AF_INET, libc::AF_INET6, libc::AF_NETLINK];

/// Why the filter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error("seccomp filters are not supported by fenzi on the {0} architecture")]
    UnsupportedArch(&'static str),
    #[error("building the seccomp filter failed: {0}")]
    Build(String),
}

fn cond(
    arg: u8,
    len: SeccompCmpArgLen,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, FilterError> {
    SeccompCondition::new(arg, len, op, value).map_err(|e| FilterError::Build(e.to_string()))
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, FilterError> {
    SeccompRule::new(conditions).map_err(|e| FilterError::Build(e.to_string()))
}

/// Compiles the filter for the architecture this program was built for.
pub fn build_filter() -> Result<BpfProgram, FilterError> {
    let arch: TargetArch = std::env::consts::ARCH
        .try_into()
        .map_err(|_| FilterError::UnsupportedArch(std::env::consts::ARCH))?;

    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&nr| (nr, Vec::new())).collect();

    // socket(domain, ...): refused unless the domain is allowed (one rule: all "!=" must hold).
    let not_allowed = ALLOWED_FAMILIES
        .iter()
        .map(|&family| cond(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, family as u64))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_socket, vec![rule(not_allowed)?]);

    // socketpair(domain, type, ...): only AF_UNIX with SOCK_STREAM or SOCK_SEQPACKET.
    let mut pair_rules = vec![rule(vec![cond(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Ne,
        libc::AF_UNIX as u64,
    )?])?];
    for sock_type in 0..16u64 {
        if sock_type == libc::SOCK_STREAM as u64 || sock_type == libc::SOCK_SEQPACKET as u64 {
            continue;
        }
        // The low four bits are the type; the rest are SOCK_CLOEXEC / SOCK_NONBLOCK.
        pair_rules.push(rule(vec![cond(
            1,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(0xf),
            sock_type,
        )?])?);
    }
    rules.insert(libc::SYS_socketpair, pair_rules);

    // clone(flags, ...): refused when any namespace flag is set.
    let clone_rules = NAMESPACE_FLAGS
        .iter()
        .map(|&flag| {
            let flag = flag as u64;
            rule(vec![cond(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )?])
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);

    // ioctl(fd, request, ...): the kernel compares the request as 32 bits, so mask the rest.
    let ioctl_rules = [TIOCSTI, TIOCLINUX]
        .iter()
        .map(|&request| {
            rule(vec![cond(
                1,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(0xffff_ffff),
                request,
            )?])
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_ioctl, ioctl_rules);

    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| FilterError::Build(e.to_string()))?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| FilterError::Build(e.to_string()))?;
    Ok(with_prefix(program))
}

// Classic BPF opcodes (class | size/op | source) and `seccomp_data` offsets used by the
// hand-written prefix.
/// `BPF_LD | BPF_W | BPF_ABS` (0x00 | 0x00 | 0x20).
const BPF_LD_W_ABS: u16 = 0x20;
/// `BPF_JMP | BPF_JEQ | BPF_K`.
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
/// `BPF_JMP | BPF_JGE | BPF_K`.
#[cfg(target_arch = "x86_64")]
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
/// `BPF_RET | BPF_K`.
const BPF_RET_K: u16 = 0x06;
const SECCOMP_DATA_NR: u32 = 0;

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Splices checks seccompiler cannot express between its architecture check (the first three
/// instructions, which end by jumping to the fourth) and its rule table: `clone3` gets `ENOSYS`
/// and, on x86_64, any x32-ABI number gets `EPERM`. Every seccompiler jump is relative and none
/// crosses the splice point, so the rest of the program is unchanged.
fn with_prefix(program: BpfProgram) -> BpfProgram {
    const ARCH_CHECK_LEN: usize = 3;
    let ret_errno = |errno: i32| {
        stmt(
            BPF_RET_K,
            libc::SECCOMP_RET_ERRNO | (errno as u32 & libc::SECCOMP_RET_DATA),
        )
    };
    let mut prefix = vec![stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR)];
    #[cfg(target_arch = "x86_64")]
    {
        prefix.push(jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, 0, 1));
        prefix.push(ret_errno(libc::EPERM));
    }
    prefix.push(jump(BPF_JMP_JEQ_K, libc::SYS_clone3 as u32, 0, 1));
    prefix.push(ret_errno(libc::ENOSYS));

    let mut out = Vec::with_capacity(program.len() + prefix.len());
    out.extend_from_slice(&program[..ARCH_CHECK_LEN]);
    out.extend(prefix);
    out.extend_from_slice(&program[ARCH_CHECK_LEN..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_builds_and_starts_with_the_arch_check_then_the_prefix() {
        let program = build_filter().expect("filter builds on this architecture");
        // seccompiler's arch check: load arch, compare, kill.
        assert_eq!(program[0].code, BPF_LD_W_ABS);
        assert_eq!(program[0].k, 4);
        assert_eq!(program[2].k, libc::SECCOMP_RET_KILL_PROCESS);
        // Our prefix loads the syscall number right after it.
        assert_eq!(program[3].code, BPF_LD_W_ABS);
        assert_eq!(program[3].k, SECCOMP_DATA_NR);
        assert!(
            program
                .iter()
                .any(|i| i.code == BPF_JMP_JEQ_K && i.k == libc::SYS_clone3 as u32)
        );
        assert!(
            program.len() < 4096,
            "BPF programs are limited to 4096 instructions"
        );
    }
}
