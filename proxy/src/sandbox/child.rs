//! What runs inside the sandbox between `clone` and `execve`: the init process (PID 1 of the new
//! PID namespace) that finishes the isolation, hands the proxy listener to the parent, starts the
//! command and reaps, and the command's last steps before `execve`.
//!
//! The parent may be multi-threaded (tokio), and this code runs in a copy of one of its threads:
//! it may only make system calls through `sys` on memory prepared before the fork (`Prepared`).
//! No allocation, no locks, no `println!`, no panics that unwind (every failure is reported over
//! the control socket and ends the process with `_exit`).
//!
//! The init is a copy of the parent's memory (which holds the CA key and secret values) and never
//! execs, so it stays non-dumpable, as fenzi made itself, except for the three `open`s of its
//! id-map files (`open_id_maps`; the module doc of `sandbox` says why): the command, which runs as
//! the same user, cannot read the init's `/proc/1/{mem,environ}` or attach to it. The private
//! `/proc` hides the parent itself. The command's process is non-dumpable until its `execve`,
//! which drops the copied memory and, the program being readable and not set-id, makes it dumpable:
//! it is the user's agent and holds placeholders, never a secret value.
//!
//! The init dies with the parent thread that cloned it (`PR_SET_PDEATHSIG`, checked against a
//! parent that died before it was set) and with the parent's end of the control socket; as PID 1
//! of its namespace, its death kills every process in the sandbox.

use std::os::fd::{AsRawFd, RawFd};

use super::error::SetupStep;
use super::protocol::{self, Message};
use super::spec::Prepared;
use super::sys::{self, Errno};

/// Exit code of a sandbox process that failed before running the command.
const SETUP_EXIT: i32 = 125;
/// Exit code of the command process when `execve` failed (as shells use).
const EXEC_EXIT: i32 = 127;

/// Signals the init forwards to the command. SIGINT, SIGQUIT and SIGTSTP are left alone: the
/// terminal sends them to the whole foreground process group, the command included.
const FORWARDED: &[libc::c_int] = &[
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGCONT,
];

fn send(control: RawFd, message: Message, fd: Option<RawFd>) -> Result<(), Errno> {
    sys::send_message(control, &message.encode(), fd)
}

/// Reports a failed step to the parent and ends the init.
fn fail(control: RawFd, step: SetupStep, errno: Errno) -> ! {
    let _ = send(
        control,
        Message {
            kind: protocol::SETUP_FAILED,
            a: step.code(),
            b: errno,
        },
        None,
    );
    sys::exit_now(SETUP_EXIT)
}

/// Runs `result`, or reports `step` as failed.
fn step<T>(control: RawFd, step: SetupStep, result: Result<T, Errno>) -> T {
    match result {
        Ok(value) => value,
        Err(errno) => fail(control, step, errno),
    }
}

/// Ends the process if a panic ever unwinds out of the child's code: unwinding further would run
/// the parent's stack frames (its destructors, its caller's loop) in the child.
struct ExitOnUnwind;

impl Drop for ExitOnUnwind {
    fn drop(&mut self) {
        sys::exit_now(SETUP_EXIT);
    }
}

/// The sandbox's init. Called in the child right after `clone` created the namespaces; never
/// returns.
pub(crate) fn run_init(p: &Prepared) -> ! {
    let _guard = ExitOnUnwind;
    let ctl = p.control;
    // First of all: die with the thread that cloned us (SIGKILL cannot be blocked or caught, and
    // the init's death ends the whole PID namespace). Checked below, once we can report.
    let parent_death = sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
    // Nothing of the parent's may run here: block every signal, then drop inherited handlers.
    sys::set_signal_mask(true);
    sys::reset_signal_dispositions();
    // Only the control socket and the command's stdio survive; the parent's sockets, log files
    // and pipes must neither reach the command nor be held open by us.
    sys::close_all_except(&p.keep_fds);
    step(ctl, SetupStep::ParentDeathSignal, parent_death);
    // The parent may have died before the prctl, when no signal could be asked for any more
    // (`getppid` is 0 in a new PID namespace either way). Its end of the control socket is then
    // closed: our inherited copy went just above, so a hang-up now means it is gone.
    if sys::peer_gone(ctl) {
        sys::exit_now(SETUP_EXIT);
    }

    // Identity: the caller's uid/gid outside become the (non-root) spec ids inside.
    let [setgroups, uid_map, gid_map] = open_id_maps(ctl);
    step(
        ctl,
        SetupStep::SetGroups,
        sys::write_once_and_close(setgroups, b"deny"),
    );
    step(
        ctl,
        SetupStep::UidMap,
        sys::write_once_and_close(uid_map, &p.uid_map),
    );
    step(
        ctl,
        SetupStep::GidMap,
        sys::write_once_and_close(gid_map, &p.gid_map),
    );

    // A /proc of our own PID namespace: the command sees only the sandbox's processes, not the
    // parent (whose memory and environment hold the secrets) nor anything else on the host.
    let private = libc::MS_REC | libc::MS_PRIVATE;
    step(
        ctl,
        SetupStep::PrivateMounts,
        sys::mount(None, c"/", None, private),
    );
    let proc_flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    step(
        ctl,
        SetupStep::MountProc,
        sys::mount(Some(c"proc"), c"/proc", Some(c"proc"), proc_flags),
    );

    // The files that govern this and later sessions: read-only, their ancestors immovable (see
    // `filesystem`). Ancestors first, so no bind hides one made before it.
    for bind in &p.mounts {
        step(
            ctl,
            SetupStep::ProtectFiles,
            sys::mount(Some(&bind.source), &bind.path, None, bind.bind_flags),
        );
        step(
            ctl,
            SetupStep::ProtectFiles,
            sys::mount(None, &bind.path, None, bind.remount_flags),
        );
    }

    // The network: only loopback, and on it only the proxy's listener.
    step(ctl, SetupStep::LoopbackUp, sys::loopback_up());
    let listener = step(
        ctl,
        SetupStep::Listener,
        sys::tcp_listen(&p.listen_addr, 1024),
    );
    // The transparent path: the synthetic range and the policy's IP literals become local, and
    // fenzi gets a listener per port and the DNS stub's socket, each sent as it is made.
    for (at, (addr, mask)) in p.loopback_aliases.iter().enumerate() {
        step(
            ctl,
            SetupStep::Transparent,
            sys::add_loopback_alias(at as u16 + 1, *addr, *mask),
        );
    }
    for addr in &p.loopback_v6 {
        step(
            ctl,
            SetupStep::Transparent,
            sys::add_loopback_address_v6(*addr, 128),
        );
    }
    for (index, addr) in p.transparent_listen.iter().enumerate() {
        let fd = step(ctl, SetupStep::Transparent, sys::tcp_listen(addr, 1024));
        hand_over(ctl, protocol::TRANSPARENT_LISTENER, index as u32, fd);
    }
    for (index, port) in p.transparent_listen_v6.iter().enumerate() {
        let fd = step(ctl, SetupStep::Transparent, sys::tcp_listen_v6(*port, 1024));
        let index = (p.transparent_listen.len() + index) as u32;
        hand_over(ctl, protocol::TRANSPARENT_LISTENER, index, fd);
    }
    if let Some(addr) = &p.dns_addr {
        let fd = step(ctl, SetupStep::Transparent, sys::udp_bind(addr));
        hand_over(ctl, protocol::DNS_SOCKET, 0, fd);
    }
    // Bound to this network namespace when created: through it fenzi, outside, looks up the
    // socket of a connection by its addresses (DESIGN §17). The command never holds it.
    let fd = step(ctl, SetupStep::SockDiag, sys::sock_diag_socket());
    hand_over(ctl, protocol::SOCK_DIAG, 0, fd);

    // A new, empty session keyring: the inherited one may hold the user's keys. A kernel without
    // keyrings (ENOSYS) has nothing to inherit.
    match sys::join_fresh_session_keyring() {
        Ok(()) | Err(libc::ENOSYS) => {}
        Err(errno) => fail(ctl, SetupStep::SessionKeyring, errno),
    }

    step(
        ctl,
        SetupStep::NoNewPrivs,
        sys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1),
    );
    step(ctl, SetupStep::DropCapabilities, sys::drop_capabilities());
    // Where the command may write; it inherits the restriction across fork and exec.
    if let Some(ruleset) = &p.landlock {
        step(
            ctl,
            SetupStep::Landlock,
            sys::landlock_restrict_self(ruleset.as_raw_fd()),
        );
    }
    // Installed here so it binds the init too; the command inherits it across fork and exec.
    step(ctl, SetupStep::Seccomp, sys::install_seccomp(&p.filter));
    step(ctl, SetupStep::Signals, sys::install_forwarders(FORWARDED));
    // SIGCHLD (blocked, but for the waits below) wakes the reaping loop.
    step(ctl, SetupStep::Signals, sys::install_wakeup(libc::SIGCHLD));

    let (exec_read, exec_write) = step(ctl, SetupStep::ForkCommand, sys::pipe_cloexec());
    let (command, _) = step(
        ctl,
        SetupStep::ForkCommand,
        sys::clone_process(libc::SIGCHLD as u64),
    );
    if command == 0 {
        run_command(p, listener, exec_write);
    }
    sys::close(exec_write);
    sys::set_forward_target(command);
    sys::block_only(libc::SIGCHLD);

    // The pipe is close-on-exec: end of file means the exec succeeded, a record means it failed.
    let mut report = [0u8; protocol::MESSAGE_LEN];
    let n = sys::read(exec_read, &mut report).unwrap_or(0);
    sys::close(exec_read);
    if n == protocol::MESSAGE_LEN {
        sys::close(listener);
        let _ = sys::wait_pid(command, 0);
        let _ = sys::send_message(ctl, &report, None);
        sys::exit_now(SETUP_EXIT);
    }
    if let Err(errno) = send(
        ctl,
        Message {
            kind: protocol::READY,
            a: 0,
            b: 0,
        },
        Some(listener),
    ) {
        let _ = sys::kill(command, libc::SIGKILL);
        fail(ctl, SetupStep::SendListener, errno);
    }
    sys::close(listener);

    // Reap everything (orphans are re-parented to us); when the command ends, report its status
    // and exit, which makes the kernel kill whatever is left in the namespace. Between reaps,
    // watch the control socket: the parent never writes to it, so a hang-up means fenzi is gone
    // (the second line behind the parent-death signal), and the sandbox ends with it.
    loop {
        loop {
            match sys::wait_pid(-1, libc::WNOHANG) {
                Ok((0, _)) => break,
                Ok((pid, status)) if pid == command => {
                    let _ = send(
                        ctl,
                        Message {
                            kind: protocol::EXITED,
                            a: 0,
                            b: status,
                        },
                        None,
                    );
                    sys::exit_now(0);
                }
                Ok(_) => {}
                Err(_) => sys::exit_now(SETUP_EXIT),
            }
        }
        // SIGCHLD is blocked except during this wait, so a child ending after the reaps above
        // interrupts it rather than being missed.
        match sys::wait_event_or_signal(ctl) {
            Ok(revents) if revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 => {
                sys::exit_now(SETUP_EXIT)
            }
            Ok(_) => {
                // Not part of the protocol: drop it. End of stream is the parent gone.
                let mut junk = [0u8; protocol::MESSAGE_LEN];
                if let Ok(0) | Err(_) = sys::read(ctl, &mut junk) {
                    sys::exit_now(SETUP_EXIT);
                }
            }
            Err(libc::EINTR) => {}
            Err(_) => sys::exit_now(SETUP_EXIT),
        }
    }
}

/// Sends `fd` to the parent as a `kind` message, then closes our copy.
fn hand_over(ctl: RawFd, kind: u32, index: u32, fd: RawFd) {
    let sent = send(
        ctl,
        Message {
            kind,
            a: index,
            b: 0,
        },
        Some(fd),
    );
    sys::close(fd);
    step(ctl, SetupStep::Transparent, sent);
}

/// Opens `/proc/self/{setgroups,uid_map,gid_map}` for writing, in that order, and leaves the init
/// non-dumpable, or reports the failed step and exits.
///
/// The init inherits fenzi's non-dumpable flag, and the kernel gives a non-dumpable process's
/// `/proc/<pid>` files to root: for any other user, opening its own id maps fails with EACCES.
/// So the init is dumpable for exactly these three `open`s and non-dumpable again before
/// anything else; the writes that follow need no dumpable flag (the kernel checks the opener's
/// credentials, which the open file keeps). The module doc says why this and not the others.
fn open_id_maps(ctl: RawFd) -> [RawFd; 3] {
    let opened = sys::prctl(libc::PR_SET_DUMPABLE, 1).map(|()| {
        [
            sys::open_write_only(c"/proc/self/setgroups"),
            sys::open_write_only(c"/proc/self/uid_map"),
            sys::open_write_only(c"/proc/self/gid_map"),
        ]
    });
    // Unconditionally, before looking at what happened.
    step(
        ctl,
        SetupStep::NonDumpable,
        sys::prctl(libc::PR_SET_DUMPABLE, 0),
    );
    let [setgroups, uid_map, gid_map] = step(ctl, SetupStep::NonDumpable, opened);
    [
        step(ctl, SetupStep::SetGroups, setgroups),
        step(ctl, SetupStep::UidMap, uid_map),
        step(ctl, SetupStep::GidMap, gid_map),
    ]
}

/// The command's process, forked from the init: install stdio, restore signals, `chdir`, `execve`.
/// Failures are written to `exec_write` (close-on-exec, so a successful exec writes nothing).
fn run_command(p: &Prepared, listener: RawFd, exec_write: RawFd) -> ! {
    let report = |action: u32, errno: Errno| -> ! {
        let record = Message {
            kind: protocol::COMMAND_FAILED,
            a: action,
            b: errno,
        }
        .encode();
        sys::write_best_effort(exec_write, &record);
        sys::exit_now(EXEC_EXIT)
    };
    sys::close(listener);
    sys::close(p.control);
    for (target, source) in p.stdio.iter().enumerate() {
        if let Some(source) = *source {
            if let Err(errno) = sys::dup_onto(source, target as RawFd) {
                report(protocol::ACTION_EXEC, errno);
            }
            sys::close(source);
        }
    }
    sys::reset_signal_dispositions();
    sys::set_signal_mask(false);
    if let Err(errno) = sys::chdir(&p.cwd) {
        report(protocol::ACTION_CHDIR, errno);
    }
    // execvp's rules: keep looking after "not here", remember "not allowed", stop on anything else.
    let mut last = libc::ENOENT;
    let mut denied = false;
    for candidate in &p.exec_candidates {
        let errno = sys::execve(candidate, &p.argv_ptrs, &p.envp_ptrs);
        match errno {
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {
                last = errno
            }
            libc::EACCES => denied = true,
            other => report(protocol::ACTION_EXEC, other),
        }
    }
    report(
        protocol::ACTION_EXEC,
        if denied { libc::EACCES } else { last },
    )
}
