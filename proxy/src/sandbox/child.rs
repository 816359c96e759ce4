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
//! execs, so it makes itself non-dumpable first thing after the id maps: the command, which runs as
//! the same user, then cannot read the init's `/proc/1/{mem,environ}` or attach to it. The private
//! `/proc` hides the parent itself.

use std::os::fd::RawFd;

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
    // Nothing of the parent's may run here: block every signal, then drop inherited handlers.
    sys::set_signal_mask(true);
    sys::reset_signal_dispositions();
    // Only the control socket and the command's stdio survive; the parent's sockets, log files
    // and pipes must neither reach the command nor be held open by us.
    sys::close_all_except(&p.keep_fds);

    // Identity: the caller's uid/gid outside become the (non-root) spec ids inside.
    step(
        ctl,
        SetupStep::SetGroups,
        sys::write_file(c"/proc/self/setgroups", b"deny"),
    );
    step(
        ctl,
        SetupStep::UidMap,
        sys::write_file(c"/proc/self/uid_map", &p.uid_map),
    );
    step(
        ctl,
        SetupStep::GidMap,
        sys::write_file(c"/proc/self/gid_map", &p.gid_map),
    );
    step(
        ctl,
        SetupStep::NonDumpable,
        sys::prctl(libc::PR_SET_DUMPABLE, 0),
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

    // The network: only loopback, and on it only the proxy's listener.
    step(ctl, SetupStep::LoopbackUp, sys::loopback_up());
    let listener = step(
        ctl,
        SetupStep::Listener,
        sys::tcp_listen(&p.listen_addr, 1024),
    );

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
    // Installed here so it binds the init too; the command inherits it across fork and exec.
    step(ctl, SetupStep::Seccomp, sys::install_seccomp(&p.filter));
    step(ctl, SetupStep::Signals, sys::install_forwarders(FORWARDED));

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
    sys::set_signal_mask(false);

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
    // and exit, which makes the kernel kill whatever is left in the namespace.
    loop {
        match sys::wait_pid(-1, 0) {
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
