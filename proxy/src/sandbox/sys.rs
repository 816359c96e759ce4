//! Thin wrappers over the raw Linux system calls the sandbox needs: the only `unsafe` code of the
//! project. Every wrapper is one system call (or a short fixed sequence) on memory the caller owns,
//! returns the `errno` on failure, and never allocates, locks or touches global state other than
//! `errno`: the functions used between `clone` and `execve` (see `child.rs`) must be
//! async-signal-safe, because the parent may be multi-threaded and the child is a copy of one
//! thread of it.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

use libc::{c_int, c_long, c_void};

/// A failed system call: the `errno` it set.
pub(crate) type Errno = i32;
pub(crate) type SysResult<T> = Result<T, Errno>;

/// The calling thread's `errno`. `io::Error::last_os_error` reads it without allocating.
fn errno() -> Errno {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Maps a `-1`-on-error return value to `Err(errno)`.
fn check<T: Copy + PartialEq + From<i8>>(rc: T) -> SysResult<T> {
    if rc == T::from(-1) {
        Err(errno())
    } else {
        Ok(rc)
    }
}

/// Retries a call that failed with `EINTR`.
fn retry<T>(mut f: impl FnMut() -> SysResult<T>) -> SysResult<T> {
    loop {
        match f() {
            Err(libc::EINTR) => continue,
            other => return other,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Process creation and ending
// ---------------------------------------------------------------------------------------------

/// `clone(flags)` with no new stack: fork semantics (the child runs on a copy of the caller's
/// stack and returns 0 here). With `CLONE_PIDFD` the parent receives a pid file descriptor.
///
/// Returns `Ok(0)` in the child and `Ok((pid, pidfd))` in the parent.
pub(crate) fn clone_process(flags: u64) -> SysResult<(libc::pid_t, Option<OwnedFd>)> {
    let mut pidfd: c_int = -1;
    // SAFETY: a raw `clone` with a null stack behaves like `fork`: the child gets a copy-on-write
    // copy of the address space and continues on its own copy of this stack. `pidfd` is a valid
    // `int` the kernel writes when CLONE_PIDFD is set (the argument order is the same on x86_64,
    // aarch64 and riscv64 for the first three arguments; the last two are zero).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags as c_long,
            0 as c_long,
            &mut pidfd as *mut c_int,
            0 as c_long,
            0 as c_long,
        )
    };
    let pid = check(rc)? as libc::pid_t;
    if pid == 0 {
        return Ok((0, None));
    }
    Ok((pid, (pidfd >= 0).then(|| owned(pidfd))))
}

/// `_exit(code)`: ends the process without running atexit handlers or flushing stdio buffers that
/// belong to the parent's copy of the program.
pub(crate) fn exit_now(code: c_int) -> ! {
    // SAFETY: `_exit` is async-signal-safe and takes no pointers.
    unsafe { libc::_exit(code) }
}

/// `waitpid(pid, &status, flags)`, retrying on `EINTR`. Returns `(pid, raw status)`; pid 0 with
/// `WNOHANG` means nothing has exited yet.
pub(crate) fn wait_pid(pid: libc::pid_t, flags: c_int) -> SysResult<(libc::pid_t, c_int)> {
    let mut status: c_int = 0;
    let got = retry(|| {
        // SAFETY: `status` is a valid `int` for the kernel to write.
        check(unsafe { libc::waitpid(pid, &mut status, flags) })
    })?;
    Ok((got, status))
}

/// `kill(pid, sig)`.
pub(crate) fn kill(pid: libc::pid_t, sig: c_int) -> SysResult<()> {
    // SAFETY: no pointers; the kernel checks permissions.
    check(unsafe { libc::kill(pid, sig) }).map(drop)
}

/// `pidfd_send_signal(pidfd, sig, NULL, 0)`: signals exactly the process the descriptor names,
/// even if its pid number has been reused.
pub(crate) fn pidfd_send_signal(pidfd: &OwnedFd, sig: c_int) -> SysResult<()> {
    // SAFETY: a valid descriptor, a null siginfo (the kernel fills a default one), no flags.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0 as libc::c_uint,
        )
    };
    check(rc).map(drop)
}

// ---------------------------------------------------------------------------------------------
// Signals
// ---------------------------------------------------------------------------------------------

/// Highest signal number on Linux (`SIGRTMAX`).
const NSIG: c_int = 64;

/// Sets every catchable signal back to its default action, so the command starts in the state a
/// freshly exec'd program expects (Rust ignores SIGPIPE; a tokio parent may have handlers).
pub(crate) fn reset_signal_dispositions() {
    for sig in 1..=NSIG {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        let action = signal_action(libc::SIG_DFL, 0);
        // SAFETY: a fully initialised action and a null old-action pointer. Errors (the C
        // library's reserved signals) are deliberately ignored.
        unsafe { libc::sigaction(sig, &action, std::ptr::null_mut()) };
    }
}

/// A `sigaction` with `handler`, `flags` and an empty mask.
fn signal_action(handler: libc::sighandler_t, flags: c_int) -> libc::sigaction {
    // SAFETY: `sigaction` is plain data (a handler word, a mask, flags); all-zero is valid.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler;
    action.sa_flags = flags;
    action
}

/// Blocks (`true`) or unblocks (`false`) every signal for the calling thread.
pub(crate) fn set_signal_mask(block_all: bool) {
    // SAFETY: `sigset_t` is a plain bit array; all-zero is the empty set.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    if block_all {
        // SAFETY: `set` is a valid `sigset_t` to fill.
        unsafe { libc::sigfillset(&mut set) };
    }
    // SAFETY: a valid set and a null old-set pointer.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) };
}

/// Blocks exactly `sig` for the calling thread; every other signal is unblocked.
pub(crate) fn block_only(sig: c_int) {
    // SAFETY: `sigset_t` is a plain bit array; all-zero is the empty set.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid `sigset_t`; `sig` is a valid signal number.
    unsafe { libc::sigaddset(&mut set, sig) };
    // SAFETY: a valid set and a null old-set pointer.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) };
}

extern "C" fn wake_only(_sig: c_int) {}

/// Installs a handler for `sig` that does nothing: its only effect is to interrupt
/// [`wait_event_or_signal`] (a signal left at its default "ignore" action would not). For
/// SIGCHLD, stopped children do not count (`SA_NOCLDSTOP`).
pub(crate) fn install_wakeup(sig: c_int) -> SysResult<()> {
    let handler = wake_only as extern "C" fn(c_int) as libc::sighandler_t;
    let action = signal_action(handler, libc::SA_RESTART | libc::SA_NOCLDSTOP);
    // SAFETY: the handler does nothing; the action is fully initialised; no old action.
    check(unsafe { libc::sigaction(sig, &action, std::ptr::null_mut()) }).map(drop)
}

/// The pid the init process forwards signals to (0 until the command is forked).
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward_signal(sig: c_int) {
    let pid = FORWARD_TO.load(Ordering::Relaxed);
    if pid > 0 {
        // `kill` may set errno; the interrupted code must find its own errno unchanged.
        let saved = errno();
        // SAFETY: `kill` is async-signal-safe and takes no pointers.
        unsafe { libc::kill(pid, sig) };
        // SAFETY: `__errno_location` returns this thread's errno slot, valid for writes.
        unsafe { *libc::__errno_location() = saved };
    }
}

/// Installs handlers that forward `signals` to [`set_forward_target`]'s pid. A PID namespace's
/// init only receives signals it has handlers for, so this is what lets `Session::terminate`
/// reach the command.
pub(crate) fn install_forwarders(signals: &[c_int]) -> SysResult<()> {
    for &sig in signals {
        let handler = forward_signal as extern "C" fn(c_int) as libc::sighandler_t;
        let action = signal_action(handler, libc::SA_RESTART);
        // SAFETY: the handler is an `extern "C" fn(c_int)` that only does async-signal-safe
        // work; the action is fully initialised; no old action is requested.
        check(unsafe { libc::sigaction(sig, &action, std::ptr::null_mut()) })?;
    }
    Ok(())
}

pub(crate) fn set_forward_target(pid: libc::pid_t) {
    FORWARD_TO.store(pid, Ordering::Relaxed);
}

// ---------------------------------------------------------------------------------------------
// File descriptors and files
// ---------------------------------------------------------------------------------------------

/// `close(fd)`, ignoring errors (the descriptor is gone either way).
pub(crate) fn close(fd: RawFd) {
    // SAFETY: closing a descriptor number; the caller no longer uses it.
    unsafe {
        libc::close(fd);
    }
}

/// Closes every descriptor except those in `keep` (which must be sorted ascending).
pub(crate) fn close_all_except(keep: &[RawFd]) {
    let mut next: u32 = 0;
    for &fd in keep {
        let fd = fd as u32;
        if fd > next {
            close_range(next, fd - 1);
        }
        next = fd + 1;
    }
    close_range(next, u32::MAX);
}

/// `close_range(first, last, 0)`, falling back to closing one by one up to `RLIMIT_NOFILE` on
/// kernels older than 5.9.
fn close_range(first: u32, last: u32) {
    // SAFETY: no pointers; closes descriptors the caller asked to drop.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0 as libc::c_uint) };
    if rc == 0 {
        return;
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid struct for the kernel to fill.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    let max = if got == 0 {
        limit.rlim_cur.min(1 << 20) as u32
    } else {
        65536
    };
    let mut fd = first;
    while fd <= last && fd < max {
        close(fd as RawFd);
        fd += 1;
    }
}

/// `dup2(from, to)`; when `from == to` it clears close-on-exec instead (dup2 would do nothing).
pub(crate) fn dup_onto(from: RawFd, to: RawFd) -> SysResult<()> {
    if from == to {
        // SAFETY: fcntl on a descriptor number with an integer argument.
        return check(unsafe { libc::fcntl(from, libc::F_SETFD, 0) }).map(drop);
    }
    // SAFETY: no pointers.
    retry(|| check(unsafe { libc::dup2(from, to) })).map(drop)
}

/// `fcntl(fd, F_DUPFD_CLOEXEC, min)`: a close-on-exec copy numbered `min` or above.
pub(crate) fn dup_at_least(fd: &OwnedFd, min: RawFd) -> SysResult<OwnedFd> {
    // SAFETY: no pointers.
    let new = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) })?;
    Ok(owned(new))
}

/// Opens `path` write-only, close-on-exec. Split from the write for `/proc/self/{uid,gid}_map`
/// and `setgroups`: the kernel checks the file's owner when it is opened (which needs the process
/// dumpable, see `child.rs`) and the opener's credentials when it is written.
pub(crate) fn open_write_only(path: &CStr) -> SysResult<RawFd> {
    // SAFETY: `path` is NUL-terminated.
    retry(|| check(unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) }))
}

/// Writes all of `data` to `fd` in one `write` (an id map must be written in one call), then
/// closes `fd` whatever happened.
pub(crate) fn write_once_and_close(fd: RawFd, data: &[u8]) -> SysResult<()> {
    // SAFETY: `data` is valid for `data.len()` bytes.
    let written = retry(|| check(unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) }));
    close(fd);
    match written {
        Ok(n) if n as usize == data.len() => Ok(()),
        Ok(_) => Err(libc::EIO),
        Err(e) => Err(e),
    }
}

/// `write(fd, bytes)`, ignoring the result (used for best-effort error reports).
pub(crate) fn write_best_effort(fd: RawFd, data: &[u8]) {
    // SAFETY: `data` is valid for `data.len()` bytes.
    let _ = retry(|| check(unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) }));
}

/// `read(fd, buf)`, retrying on `EINTR`.
pub(crate) fn read(fd: RawFd, buf: &mut [u8]) -> SysResult<usize> {
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
    retry(|| check(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) }))
        .map(|n| n as usize)
}

/// `pipe2(O_CLOEXEC)` as raw descriptors (read end, write end); used in the child only.
pub(crate) fn pipe_cloexec() -> SysResult<(RawFd, RawFd)> {
    let mut fds = [-1 as c_int; 2];
    // SAFETY: `fds` has room for the two descriptors.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    Ok((fds[0], fds[1]))
}

/// `chdir(path)`.
pub(crate) fn chdir(path: &CStr) -> SysResult<()> {
    // SAFETY: `path` is NUL-terminated.
    check(unsafe { libc::chdir(path.as_ptr()) }).map(drop)
}

/// `execve(path, argv, envp)`; only returns on failure.
pub(crate) fn execve(
    path: &CStr,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
) -> Errno {
    debug_assert!(argv.last().is_some_and(|p| p.is_null()));
    debug_assert!(envp.last().is_some_and(|p| p.is_null()));
    // SAFETY: `path` is NUL-terminated; `argv` and `envp` are NULL-terminated arrays of pointers
    // to NUL-terminated strings that outlive the call (they are owned by the prepared spec).
    unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    errno()
}

// ---------------------------------------------------------------------------------------------
// Namespaces, mounts, privileges
// ---------------------------------------------------------------------------------------------

/// `mount(source, target, fstype, flags, NULL)`; `None` passes a null pointer.
pub(crate) fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
) -> SysResult<()> {
    let ptr = |s: Option<&CStr>| s.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: every non-null pointer is a NUL-terminated string; the data argument is null.
    check(unsafe {
        libc::mount(
            ptr(source),
            target.as_ptr(),
            ptr(fstype),
            flags,
            std::ptr::null(),
        )
    })
    .map(drop)
}

/// The mount flags of the filesystem holding `path` (`statvfs`'s `f_flag`), as the `MS_*` flags a
/// bind remount must repeat: inside a user namespace the kernel refuses to clear `nosuid`,
/// `nodev`, `noexec` or change the atime mode of a mount it inherited. Called in the parent.
pub(crate) fn locked_mount_flags(path: &CStr) -> SysResult<libc::c_ulong> {
    // SAFETY: `path` is NUL-terminated and `st` is a properly sized, writable statvfs.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    check(unsafe { libc::statvfs(path.as_ptr(), &mut st) })?;
    let f = st.f_flag;
    let mut flags = 0;
    for (st_flag, ms_flag) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if f & st_flag != 0 {
            flags |= ms_flag;
        }
    }
    if f & (libc::ST_NOATIME | libc::ST_RELATIME) == 0 {
        flags |= libc::MS_STRICTATIME;
    }
    Ok(flags)
}

// ---------------------------------------------------------------------------------------------
// Landlock
// ---------------------------------------------------------------------------------------------

/// The kernel's Landlock ABI version (`landlock_create_ruleset(NULL, 0, VERSION)`).
pub(crate) fn landlock_abi() -> SysResult<u32> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer and size 0 the call only returns the version.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    check(rc).map(|v| v as u32)
}

/// A new Landlock ruleset handling the filesystem `handled` rights (close-on-exec).
pub(crate) fn landlock_create_ruleset(handled: u64) -> SysResult<OwnedFd> {
    // The first field of `struct landlock_ruleset_attr`; the kernel accepts the short size.
    let attr: u64 = handled;
    // SAFETY: `attr` is a readable u64 of the size passed; flags 0.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const u64,
            std::mem::size_of::<u64>(),
            0 as libc::c_uint,
        )
    };
    // SAFETY: on success the return value is a new descriptor we own.
    check(rc).map(|fd| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Grants `allowed` beneath the file or directory `parent` (an `O_PATH` descriptor).
pub(crate) fn landlock_add_path_rule(
    ruleset: &OwnedFd,
    parent: &OwnedFd,
    allowed: u64,
) -> SysResult<()> {
    const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
    /// `struct landlock_path_beneath_attr`, packed as the kernel declares it.
    #[repr(C, packed)]
    struct PathBeneath {
        allowed_access: u64,
        parent_fd: i32,
    }
    let attr = PathBeneath {
        allowed_access: allowed,
        parent_fd: parent.as_raw_fd(),
    };
    // SAFETY: `attr` is a readable struct of the layout the kernel expects; flags 0.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneath,
            0 as libc::c_uint,
        )
    };
    check(rc).map(drop)
}

/// Restricts the calling thread (and what it forks and executes) to `ruleset`. Needs
/// `no_new_privs`. Async-signal-safe: one system call.
pub(crate) fn landlock_restrict_self(ruleset: RawFd) -> SysResult<()> {
    // SAFETY: plain integer arguments.
    let rc = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0 as libc::c_uint) };
    check(rc).map(drop)
}

/// `prctl(option, arg2, 0, 0, 0)`.
pub(crate) fn prctl(option: c_int, arg2: libc::c_ulong) -> SysResult<()> {
    // SAFETY: the options used here (NO_NEW_PRIVS, SET_DUMPABLE, SET_PDEATHSIG) take integers,
    // not pointers.
    check(unsafe {
        libc::prctl(
            option,
            arg2,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    })
    .map(drop)
}

/// Drops every capability (effective, permitted, inheritable; ambient follows) of the caller.
pub(crate) fn drop_capabilities() -> SysResult<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: `header` and `data` have the kernel's `__user_cap_header_struct` and
    // `__user_cap_data_struct[2]` layouts for version 3.
    check(unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) })
        .map(drop)
}

/// `keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)`: the caller gets a new, empty, anonymous session
/// keyring instead of the one it inherited.
pub(crate) fn join_fresh_session_keyring() -> SysResult<()> {
    const KEYCTL_JOIN_SESSION_KEYRING: c_long = 1;
    // SAFETY: a null name asks for an anonymous keyring; no other pointers.
    check(unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_JOIN_SESSION_KEYRING,
            std::ptr::null::<libc::c_char>(),
        )
    })
    .map(drop)
}

/// Installs a seccomp BPF program on the calling thread (`no_new_privs` must already be set).
pub(crate) fn install_seccomp(program: &[seccompiler::sock_filter]) -> SysResult<()> {
    #[repr(C)]
    struct SockFprog {
        len: libc::c_ushort,
        filter: *const seccompiler::sock_filter,
    }
    let len = libc::c_ushort::try_from(program.len()).map_err(|_| libc::EINVAL)?;
    let prog = SockFprog {
        len,
        filter: program.as_ptr(),
    };
    // SAFETY: `prog` points at `len` valid, `repr(C)` BPF instructions; the kernel copies them.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER as c_long,
            0 as c_long,
            &prog as *const SockFprog,
        )
    };
    check(rc).map(drop)
}

// ---------------------------------------------------------------------------------------------
// Sockets
// ---------------------------------------------------------------------------------------------

/// Brings the network namespace's loopback interface up (`SIOCSIFFLAGS` on `lo`).
pub(crate) fn loopback_up() -> SysResult<()> {
    // SAFETY: no pointers.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `ifreq` is plain data; zeroed is a valid value. The name is "lo\0".
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    req.ifr_name[0] = b'l' as libc::c_char;
    req.ifr_name[1] = b'o' as libc::c_char;
    // SAFETY: SIOCGIFFLAGS reads the name and writes `ifru_flags` of a valid `ifreq`.
    let result = check(unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) }).and_then(|_| {
        // SAFETY: the union member SIOCGIFFLAGS just filled.
        unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
        // SAFETY: SIOCSIFFLAGS reads the name and flags of a valid `ifreq`.
        check(unsafe { libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) })
    });
    close(fd);
    result.map(drop)
}

/// Adds `addr`/`netmask` to the loopback device as the alias `lo:<alias>` (`SIOCSIFADDR`, then
/// `SIOCSIFNETMASK`). On a loopback device the kernel makes the whole prefix local, so one alias
/// makes a range of addresses connectable. `alias` is 1 to 999.
pub(crate) fn add_loopback_alias(alias: u16, addr: [u8; 4], netmask: [u8; 4]) -> SysResult<()> {
    if !(1..=999).contains(&alias) {
        return Err(libc::EINVAL);
    }
    // SAFETY: no pointers.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `ifreq` is plain data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let mut name = [0u8; 8];
    name[..3].copy_from_slice(b"lo:");
    let mut at = 3;
    let mut started = false;
    for divisor in [100, 10, 1] {
        let digit = (alias / divisor) % 10;
        if digit != 0 || started || divisor == 1 {
            name[at] = b'0' + digit as u8;
            at += 1;
            started = true;
        }
    }
    for (slot, byte) in req.ifr_name.iter_mut().zip(&name[..at]) {
        *slot = *byte as libc::c_char;
    }
    let set = |req: &mut libc::ifreq, request: libc::c_ulong, value: [u8; 4]| {
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(value),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: `sockaddr_in` fits in the `ifru_addr` member of the union (a `sockaddr`).
        unsafe {
            std::ptr::write(
                (&mut req.ifr_ifru.ifru_addr as *mut libc::sockaddr).cast::<libc::sockaddr_in>(),
                sin,
            )
        };
        // SAFETY: the request reads the name and the address of a valid `ifreq`.
        check(unsafe { libc::ioctl(fd, request, req as *mut libc::ifreq) }).map(drop)
    };
    let result = set(&mut req, libc::SIOCSIFADDR, addr)
        .and_then(|_| set(&mut req, libc::SIOCSIFNETMASK, netmask));
    close(fd);
    result
}

/// Adds `addr`/`prefix` to the loopback device (`SIOCSIFADDR` on an IPv6 socket).
pub(crate) fn add_loopback_address_v6(addr: [u8; 16], prefix: u32) -> SysResult<()> {
    /// `struct in6_ifreq` (linux/ipv6.h).
    #[repr(C)]
    struct In6Ifreq {
        addr: libc::in6_addr,
        prefixlen: u32,
        ifindex: c_int,
    }
    // SAFETY: no pointers.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET6, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `ifreq` is plain data; zeroed is a valid value. The name is "lo\0".
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    req.ifr_name[0] = b'l' as libc::c_char;
    req.ifr_name[1] = b'o' as libc::c_char;
    // SAFETY: SIOCGIFINDEX reads the name and writes `ifru_ifindex` of a valid `ifreq`.
    let result = check(unsafe { libc::ioctl(fd, libc::SIOCGIFINDEX, &mut req) }).and_then(|_| {
        let request = In6Ifreq {
            addr: libc::in6_addr { s6_addr: addr },
            prefixlen: prefix,
            // SAFETY: the union member SIOCGIFINDEX just filled.
            ifindex: unsafe { req.ifr_ifru.ifru_ifindex },
        };
        // SAFETY: SIOCSIFADDR on an IPv6 socket reads a valid `in6_ifreq`.
        check(unsafe { libc::ioctl(fd, libc::SIOCSIFADDR, &request) })
    });
    close(fd);
    result.map(drop)
}

/// A listening IPv6-only TCP socket on `[::]:port`, close-on-exec.
pub(crate) fn tcp_listen_v6(port: u16, backlog: c_int) -> SysResult<RawFd> {
    // SAFETY: no pointers.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET6, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) })?;
    let on: c_int = 1;
    // SAFETY: `on` is a readable c_int of the size passed.
    let v6only = check(unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_V6ONLY,
            (&on as *const c_int).cast(),
            std::mem::size_of::<c_int>() as libc::socklen_t,
        )
    });
    // SAFETY: `sockaddr_in6` is plain data; zeroed is the unspecified address.
    let mut addr: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    addr.sin6_family = libc::AF_INET6 as libc::sa_family_t;
    addr.sin6_port = port.to_be();
    let len = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
    let bound = v6only.and_then(|_| {
        // SAFETY: `addr` is a valid `sockaddr_in6` of `len` bytes.
        check(unsafe { libc::bind(fd, (&addr as *const libc::sockaddr_in6).cast(), len) })
    });
    listen_or_close(fd, bound.map(drop), backlog)
}

/// An IPv4 UDP socket bound to `addr`, close-on-exec.
pub(crate) fn udp_bind(addr: &libc::sockaddr_in) -> SysResult<RawFd> {
    // SAFETY: no pointers.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `addr` is a valid `sockaddr_in` of `len` bytes.
    match check(unsafe { libc::bind(fd, (addr as *const libc::sockaddr_in).cast(), len) }) {
        Ok(_) => Ok(fd),
        Err(e) => {
            close(fd);
            Err(e)
        }
    }
}

/// A listening IPv4 TCP socket bound to `addr`, close-on-exec.
pub(crate) fn tcp_listen(addr: &libc::sockaddr_in, backlog: c_int) -> SysResult<RawFd> {
    // SAFETY: no pointers.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) })?;
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `addr` is a valid `sockaddr_in` of `len` bytes.
    let bound = check(unsafe { libc::bind(fd, (addr as *const libc::sockaddr_in).cast(), len) });
    listen_or_close(fd, bound.map(drop), backlog)
}

/// `listen(fd, backlog)` once `bound` succeeded; closes `fd` on any failure.
fn listen_or_close(fd: RawFd, bound: SysResult<()>, backlog: c_int) -> SysResult<RawFd> {
    // SAFETY: no pointers.
    match bound.and_then(|_| check(unsafe { libc::listen(fd, backlog) })) {
        Ok(_) => Ok(fd),
        Err(e) => {
            close(fd);
            Err(e)
        }
    }
}

/// A pair of connected, close-on-exec `SOCK_SEQPACKET` Unix sockets (message boundaries kept).
pub(crate) fn seqpacket_pair() -> SysResult<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as c_int; 2];
    // SAFETY: `fds` has room for the two descriptors.
    check(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    Ok((owned(fds[0]), owned(fds[1])))
}

/// Takes ownership of a descriptor the kernel just handed us.
fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: callers pass descriptors that were just created or received and that nothing else
    // owns.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Most descriptors one control message may carry here; more is a protocol error.
const MAX_FDS: usize = 4;

/// One `SCM_RIGHTS` control message, laid out as `CMSG_FIRSTHDR`/`CMSG_DATA` expect: the header,
/// then the descriptors at `CMSG_ALIGN(sizeof(struct cmsghdr))`.
#[repr(C)]
struct FdCmsg {
    header: libc::cmsghdr,
    fds: [c_int; MAX_FDS],
}

/// `CMSG_ALIGN(sizeof(struct cmsghdr))`: where the payload starts.
const CMSG_DATA_OFFSET: usize =
    std::mem::size_of::<libc::cmsghdr>().next_multiple_of(std::mem::size_of::<usize>());
// The struct's layout must be the kernel's.
const _: () = assert!(std::mem::offset_of!(FdCmsg, fds) == CMSG_DATA_OFFSET);

impl FdCmsg {
    fn new(level: c_int, kind: c_int, len: usize) -> Self {
        // `cmsghdr` has private padding on some targets; start from all-zero and set the fields.
        FdCmsg {
            header: cmsghdr(len, level, kind),
            fds: [-1; MAX_FDS],
        }
    }
}

fn cmsghdr(len: usize, level: c_int, kind: c_int) -> libc::cmsghdr {
    // SAFETY: `cmsghdr` is plain data (a length and two ints); all-zero is valid.
    let mut header: libc::cmsghdr = unsafe { std::mem::zeroed() };
    header.cmsg_len = len as _;
    header.cmsg_level = level;
    header.cmsg_type = kind;
    header
}

fn empty_msghdr() -> libc::msghdr {
    // SAFETY: `msghdr` is plain data (pointers and lengths); all-zero means no name, no control.
    unsafe { std::mem::zeroed() }
}

/// Sends `data` on `sock`, with `fd` attached as `SCM_RIGHTS` when given.
pub(crate) fn send_message(sock: RawFd, data: &[u8], fd: Option<RawFd>) -> SysResult<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut c_void,
        iov_len: data.len(),
    };
    let mut control = FdCmsg::new(libc::SOL_SOCKET, libc::SCM_RIGHTS, CMSG_DATA_OFFSET + 4);
    let mut msg = empty_msghdr();
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        control.fds[0] = fd;
        msg.msg_control = (&mut control as *mut FdCmsg).cast();
        // CMSG_SPACE(sizeof(int)).
        msg.msg_controllen =
            (CMSG_DATA_OFFSET + 4).next_multiple_of(std::mem::size_of::<usize>()) as _;
    }
    // SAFETY: `msg` points at `iov` and `control`, both alive for the duration of the call.
    let sent = retry(|| check(unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) }))?;
    if sent as usize == data.len() {
        Ok(())
    } else {
        Err(libc::EMSGSIZE)
    }
}

/// Receives one message into `buf`; returns its length (0 at end of stream) and the descriptor
/// passed with it, if any (received close-on-exec). Extra descriptors are closed.
pub(crate) fn recv_message(sock: &OwnedFd, buf: &mut [u8]) -> SysResult<(usize, Option<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = FdCmsg::new(0, 0, 0);
    let mut msg = empty_msghdr();
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = (&mut control as *mut FdCmsg).cast();
    msg.msg_controllen = std::mem::size_of::<FdCmsg>() as _;
    // SAFETY: `msg` points at `iov` (over `buf`) and `control`, alive for the call; the kernel
    // writes at most `msg_controllen` bytes of control data.
    let n = retry(|| {
        check(unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) })
    })?;
    // Only one control message fits in `control`, and the sender sends at most one. (The casts
    // are no-ops on glibc; the fields are 32-bit on musl.)
    #[allow(clippy::unnecessary_cast)]
    let (controllen, cmsg_len) = (
        msg.msg_controllen as usize,
        control.header.cmsg_len as usize,
    );
    let mut received: Option<OwnedFd> = None;
    let got_rights = controllen >= CMSG_DATA_OFFSET
        && control.header.cmsg_level == libc::SOL_SOCKET
        && control.header.cmsg_type == libc::SCM_RIGHTS;
    if got_rights {
        let count = (cmsg_len.saturating_sub(CMSG_DATA_OFFSET) / 4).min(MAX_FDS);
        for &fd in &control.fds[..count] {
            let fd = owned(fd);
            if received.is_none() {
                received = Some(fd);
            }
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(libc::EMSGSIZE);
    }
    Ok((n as usize, received))
}

/// Waits until `fd` is readable or `timeout_ms` passes; `Ok(false)` on timeout.
pub(crate) fn poll_readable(fd: &OwnedFd, timeout_ms: c_int) -> SysResult<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid `pollfd`.
    let n = retry(|| check(unsafe { libc::poll(&mut pfd, 1, timeout_ms) }))?;
    Ok(n > 0)
}

/// True when the peer of the connected socket `fd` is gone (hang-up or error), checked without
/// waiting.
pub(crate) fn peer_gone(fd: RawFd) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid `pollfd`.
    match retry(|| check(unsafe { libc::poll(&mut pfd, 1, 0) })) {
        Ok(_) => pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0,
        // Fail closed: a peer we cannot check is treated as gone, so nothing runs unsupervised.
        Err(_) => true,
    }
}

/// Waits, with every signal unblocked for the duration (`ppoll`, so a signal blocked before the
/// call and pending is delivered atomically, never lost), until `fd` is readable, hung up or in
/// error; returns its `revents`. A caught signal ends the wait with `Err(EINTR)`.
pub(crate) fn wait_event_or_signal(fd: RawFd) -> SysResult<libc::c_short> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `sigset_t` is a plain bit array; all-zero is the empty set.
    let none: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: one valid `pollfd`, no timeout (null), a valid signal set.
    check(unsafe { libc::ppoll(&mut pfd, 1, std::ptr::null(), &none) })?;
    Ok(pfd.revents)
}

/// The calling process's effective uid and gid (in its own user namespace).
pub(crate) fn effective_ids() -> (u32, u32) {
    // SAFETY: no arguments; cannot fail.
    let uid = unsafe { libc::geteuid() };
    // SAFETY: as above.
    let gid = unsafe { libc::getegid() };
    (uid, gid)
}

// ---------------------------------------------------------------------------------------------
// Socket diagnostics (DESIGN §17: which socket a connection from the sandbox is)

/// A `NETLINK_SOCK_DIAG` socket, close-on-exec, in the caller's network namespace.
pub(crate) fn sock_diag_socket() -> SysResult<RawFd> {
    // SAFETY: no pointers.
    check(unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    })
}

/// [`sock_diag_socket`], owned.
pub(crate) fn sock_diag_socket_owned() -> SysResult<OwnedFd> {
    sock_diag_socket().map(owned)
}

/// `SOCK_DIAG_BY_FAMILY` (linux/sock_diag.h).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// The request: `nlmsghdr` (16 bytes) and `inet_diag_req_v2` (56 bytes).
const DIAG_REQUEST_LEN: usize = 16 + 56;
/// Where `inet_diag_msg.idiag_inode` is in an answer: after `nlmsghdr` (16), the family, state,
/// timer and retransmits (4), the socket id (48), and expires, rqueue, wqueue and uid (16).
const DIAG_INODE_AT: usize = 16 + 4 + 48 + 16;

/// The inode of the TCP socket `local` → `remote` in the namespace of the diagnostics socket
/// `fd`: one exact lookup (`inet_diag_req_v2` with the whole 4-tuple and no cookie, not a dump).
/// `Ok(None)` when the kernel knows no such socket.
pub(crate) fn sock_diag_inode(
    fd: &OwnedFd,
    local: std::net::SocketAddr,
    remote: std::net::SocketAddr,
) -> std::io::Result<Option<u64>> {
    use std::net::{IpAddr, SocketAddr};
    let family = match (local, remote) {
        (SocketAddr::V4(_), SocketAddr::V4(_)) => libc::AF_INET,
        (SocketAddr::V6(_), SocketAddr::V6(_)) => libc::AF_INET6,
        _ => return Ok(None),
    };
    let words = |ip: IpAddr| -> [u8; 16] {
        let mut out = [0u8; 16];
        match ip {
            IpAddr::V4(v4) => out[..4].copy_from_slice(&v4.octets()),
            IpAddr::V6(v6) => out.copy_from_slice(&v6.octets()),
        }
        out
    };
    let mut req = [0u8; DIAG_REQUEST_LEN];
    req[0..4].copy_from_slice(&(DIAG_REQUEST_LEN as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    // inet_diag_req_v2: family, protocol, ext, pad, states (every state).
    req[16] = family as u8;
    req[17] = libc::IPPROTO_TCP as u8;
    req[20..24].copy_from_slice(&u32::MAX.to_ne_bytes());
    // inet_diag_sockid: ports and addresses in network order, no interface, no cookie.
    req[24..26].copy_from_slice(&local.port().to_be_bytes());
    req[26..28].copy_from_slice(&remote.port().to_be_bytes());
    req[28..44].copy_from_slice(&words(local.ip()));
    req[44..60].copy_from_slice(&words(remote.ip()));
    req[64..72].copy_from_slice(&[0xff; 8]);
    // SAFETY: a zeroed `sockaddr_nl` is valid; the kernel is its destination (pid 0).
    let mut to: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    to.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    let to_len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
    // SAFETY: `req` and `to` are valid for the lengths given.
    retry(|| {
        check(unsafe {
            libc::sendto(
                fd.as_raw_fd(),
                req.as_ptr().cast(),
                req.len(),
                0,
                (&to as *const libc::sockaddr_nl).cast(),
                to_len,
            )
        })
    })
    .map_err(std::io::Error::from_raw_os_error)?;
    let mut answer = [0u8; 512];
    // SAFETY: `answer` is valid for its length.
    let n = retry(|| {
        check(unsafe { libc::recv(fd.as_raw_fd(), answer.as_mut_ptr().cast(), answer.len(), 0) })
    })
    .map_err(std::io::Error::from_raw_os_error)? as usize;
    if n < 16 {
        return Err(std::io::Error::other("a short socket-diagnostics answer"));
    }
    let kind = u16::from_ne_bytes([answer[4], answer[5]]);
    if kind == libc::NLMSG_ERROR as u16 {
        let code = i32::from_ne_bytes([answer[16], answer[17], answer[18], answer[19]]);
        return match -code {
            libc::ENOENT => Ok(None),
            errno => Err(std::io::Error::from_raw_os_error(errno)),
        };
    }
    if kind != SOCK_DIAG_BY_FAMILY || n < DIAG_INODE_AT + 4 {
        return Err(std::io::Error::other(
            "an unexpected socket-diagnostics answer",
        ));
    }
    let inode = u32::from_ne_bytes([
        answer[DIAG_INODE_AT],
        answer[DIAG_INODE_AT + 1],
        answer[DIAG_INODE_AT + 2],
        answer[DIAG_INODE_AT + 3],
    ]);
    Ok((inode != 0).then_some(u64::from(inode)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_message_layout_matches_the_c_macros() {
        // SAFETY: CMSG_LEN and CMSG_SPACE are arithmetic on their argument.
        let (len, space) = unsafe { (libc::CMSG_LEN(4) as usize, libc::CMSG_SPACE(4) as usize) };
        assert_eq!(CMSG_DATA_OFFSET + 4, len);
        assert_eq!(
            (CMSG_DATA_OFFSET + 4).next_multiple_of(std::mem::size_of::<usize>()),
            space
        );
    }

    #[test]
    fn a_descriptor_survives_a_trip_over_a_seqpacket_pair() {
        let (a, b) = seqpacket_pair().unwrap();
        let (r, w) = pipe_cloexec().unwrap();
        send_message(a.as_raw_fd(), b"hello", Some(w)).unwrap();
        close(w);
        let mut buf = [0u8; 16];
        let (n, fd) = recv_message(&b, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hello");
        let fd = fd.expect("a descriptor arrived");
        write_best_effort(fd.as_raw_fd(), b"x");
        let mut got = [0u8; 1];
        assert_eq!(read(r, &mut got), Ok(1));
        assert_eq!(&got, b"x");
        close(r);
        send_message(a.as_raw_fd(), b"plain", None).unwrap();
        let (n, fd) = recv_message(&b, &mut buf).unwrap();
        assert_eq!((&buf[..n], fd.is_none()), (&b"plain"[..], true));
        drop(a);
        assert_eq!(recv_message(&b, &mut buf).unwrap().0, 0, "end of stream");
    }
}
