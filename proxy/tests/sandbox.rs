//! The sandbox of `fenzi run`, with real processes: identity, network isolation, the handed-back
//! listener, host Unix sockets, keyrings, refused system calls, the private `/proc`, the exact
//! environment, errors, signals and exit codes.
//!
//! When the kernel refuses user namespaces, each test prints a loud SKIPPED line to the real
//! stderr (not the captured one) and returns; set `FENZI_REQUIRE_SANDBOX=1` to make that a failure.
//! The commands used inside are `sh`, `id`, `env`, `sleep`, `cat`, `curl` and `python3` (its
//! `ctypes` makes raw system calls, so no compiler or extra package is needed).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fenzi_proxy::sandbox::{
    SandboxChild, SandboxError, SandboxSpec, Session, exit_code, make_process_undumpable,
};

/// How long any single sandboxed command may run before the test kills it.
const WATCHDOG: Duration = Duration::from_secs(60);

fn host_path() -> String {
    std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into())
}

/// The real python3 binary (not a pyenv shim, which needs the user's shell setup).
fn python() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let out = Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3 is required by the sandbox tests");
        assert!(out.status.success(), "python3 does not run");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    })
}

/// A spec for `program args` with only `PATH` and `LANG` in its environment.
fn spec(program: &str, args: &[&str]) -> SandboxSpec {
    SandboxSpec::new(program)
        .args(args.iter().copied())
        .envs([("PATH", host_path().as_str()), ("LANG", "C.UTF-8")])
        .cwd("/")
}

fn python_spec(script: &str) -> SandboxSpec {
    spec(python(), &["-c", script])
}

/// Captured output of a sandboxed command.
struct Output {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

struct Capture {
    out: File,
    err: File,
}

impl Capture {
    fn attach(spec: &mut SandboxSpec) -> Capture {
        let out = tempfile::tempfile().unwrap();
        let err = tempfile::tempfile().unwrap();
        spec.stdout = Some(OwnedFd::from(out.try_clone().unwrap()));
        spec.stderr = Some(OwnedFd::from(err.try_clone().unwrap()));
        Capture { out, err }
    }

    fn read(file: &mut File) -> String {
        let mut text = String::new();
        file.seek(SeekFrom::Start(0)).unwrap();
        file.read_to_string(&mut text).unwrap();
        text
    }

    fn finish(mut self, status: ExitStatus) -> Output {
        Output {
            status,
            stdout: Self::read(&mut self.out),
            stderr: Self::read(&mut self.err),
        }
    }
}

/// Says loudly, on the real stderr, that a test did not run because the sandbox cannot run here
/// (`why`); under `FENZI_REQUIRE_SANDBOX=1` that is a failure instead.
fn skip(test: &str, why: &dyn std::fmt::Display) {
    if std::env::var_os("FENZI_REQUIRE_SANDBOX").is_some_and(|v| v == "1") {
        panic!("{test}: the sandbox is required (FENZI_REQUIRE_SANDBOX=1) but cannot run: {why}");
    }
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED sandbox test `{test}`: {why}\n"
    );
}

/// The reason [`skip`] gives when [`Session::start`] finds user namespaces refused.
fn namespaces_refused(err: &SandboxError) -> String {
    format!("this kernel refuses user namespaces: {err}")
}

/// Starts `spec`, or returns `None` (after a loud skip notice) when namespaces are unavailable.
fn start(test: &str, spec: SandboxSpec) -> Option<Session> {
    match Session::start(spec) {
        Ok(session) => Some(session),
        Err(err) if err.namespaces_unavailable() => {
            skip(test, &namespaces_refused(&err));
            None
        }
        Err(err) => panic!("{test}: the sandbox did not start: {err}"),
    }
}

/// Waits for the command, killing the sandbox if it outlives the watchdog; also says whether the
/// watchdog had to.
fn wait(child: &mut SandboxChild) -> (ExitStatus, bool) {
    let handle = child.handle();
    let (done, timer) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        let fired = timer.recv_timeout(WATCHDOG).is_err();
        if fired {
            let _ = handle.kill();
        }
        fired
    });
    let status = child.wait().expect("waiting for the sandbox");
    let _ = done.send(());
    (status, watchdog.join().unwrap())
}

/// Runs `spec` to completion and captures its output.
fn run(test: &str, mut spec: SandboxSpec) -> Option<Output> {
    let capture = Capture::attach(&mut spec);
    let mut session = start(test, spec)?;
    let (status, _) = wait(&mut session.child);
    Some(capture.finish(status))
}

/// Runs a python script in the sandbox and requires it to exit 0.
fn run_python_ok(test: &str, script: &str) -> Option<String> {
    let out = run(test, python_spec(script))?;
    assert!(
        out.status.success(),
        "{test}: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    Some(out.stdout)
}

/// Runs a python script on the host (outside any sandbox): the control half of a test.
fn host_python(script: &str) -> String {
    let out = Command::new(python())
        .args(["-c", script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "host python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

/// Python prelude: `sys(name, *args)` makes a raw system call and returns "OK" or the errno name.
fn syscall_prelude() -> String {
    let numbers = [
        ("keyctl", libc::SYS_keyctl),
        ("add_key", libc::SYS_add_key),
        ("request_key", libc::SYS_request_key),
        ("ptrace", libc::SYS_ptrace),
        ("process_vm_readv", libc::SYS_process_vm_readv),
        ("process_vm_writev", libc::SYS_process_vm_writev),
        ("unshare", libc::SYS_unshare),
        ("setns", libc::SYS_setns),
        ("mount", libc::SYS_mount),
        ("umount2", libc::SYS_umount2),
        ("pivot_root", libc::SYS_pivot_root),
        ("chroot", libc::SYS_chroot),
        ("fsopen", libc::SYS_fsopen),
        ("io_uring_setup", libc::SYS_io_uring_setup),
        ("bpf", libc::SYS_bpf),
        ("perf_event_open", libc::SYS_perf_event_open),
        ("userfaultfd", libc::SYS_userfaultfd),
        ("clone3", libc::SYS_clone3),
        ("ioctl", libc::SYS_ioctl),
        ("socket", libc::SYS_socket),
        ("socketpair", libc::SYS_socketpair),
    ];
    let table: Vec<String> = numbers
        .iter()
        .map(|(name, nr)| format!("'{name}': {nr}"))
        .collect();
    format!(
        r#"
import ctypes, errno, os
NR = {{{table}}}
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
def sys(name, *args):
    ctypes.set_errno(0)
    r = _libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if r == -1:
        return errno.errorcode[ctypes.get_errno()]
    return "OK"
"#,
        table = table.join(", ")
    )
}

// ---------------------------------------------------------------------------------------------

#[test]
fn runs_as_a_mapped_non_root_user_with_no_privileges() {
    let Some(out) = run(
        "identity",
        spec(
            "sh",
            &[
                "-c",
                "id -u; id -g; cat /proc/self/uid_map; grep -E '^(NoNewPrivs|Seccomp|CapEff|CapPrm|CapBnd):' /proc/self/status",
            ],
        ),
    ) else {
        return;
    };
    assert!(out.status.success(), "{}", out.stderr);
    let lines = lines(&out.stdout);
    assert_eq!(lines[0], "1000", "uid inside");
    assert_eq!(lines[1], "1000", "gid inside");
    // The owner of /proc/self is this test's effective uid: the id the map must point to.
    let euid =
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()).to_string();
    let map: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        map,
        ["1000", euid.as_str(), "1"],
        "exactly one id mapped: 1000 inside, ours outside"
    );
    let field = |name: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    assert_eq!(field("NoNewPrivs:"), "1");
    assert_eq!(field("Seccomp:"), "2", "a seccomp filter is installed");
    assert_eq!(field("CapEff:"), "0000000000000000");
    assert_eq!(field("CapPrm:"), "0000000000000000");
}

#[test]
fn the_sandbox_holds_none_of_the_parents_descriptors() {
    // A listening socket of the parent: if the sandbox's init (a fork of this process) kept a
    // copy, the port would stay bound after the parent closes it.
    let parent_socket = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = parent_socket.local_addr().unwrap();
    let mut spec = spec(
        "sh",
        &["-c", "ls /proc/self/fd; echo listed; exec sleep 1000"],
    );
    spec.stdin = Some(File::open("/dev/null").unwrap().into());
    let mut capture = Capture::attach(&mut spec);
    let Some(mut session) = start("descriptors", spec) else {
        return;
    };
    let deadline = Instant::now() + WATCHDOG;
    while !Capture::read(&mut capture.out).contains("listed") {
        assert!(Instant::now() < deadline, "the command never got going");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(parent_socket);
    // Another test's sandbox or subprocess may hold a copy for the instant between its fork and
    // its closing of inherited descriptors; the sandbox under test must not hold one at all.
    let mut rebound = TcpListener::bind(addr);
    let deadline = Instant::now() + Duration::from_secs(5);
    while rebound.is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        rebound = TcpListener::bind(addr);
    }
    session.child.kill().unwrap();
    wait(&mut session.child);
    assert!(
        rebound.is_ok(),
        "the sandbox still holds the parent's socket: {:?}",
        rebound.err()
    );
    let out = Capture::read(&mut capture.out);
    // 0, 1, 2 and the directory `ls` is reading: nothing else reached the command.
    assert_eq!(lines(&out), ["0", "1", "2", "3", "listed"], "{out}");
}

#[test]
fn exit_code_and_signal_are_the_commands() {
    let Some(out) = run("exit code", spec("sh", &["-c", "exit 7"])) else {
        return;
    };
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(exit_code(out.status), 7);

    let Some(out) = run("exit signal", spec("sh", &["-c", "kill -KILL $$"])) else {
        return;
    };
    assert_eq!(out.status.signal(), Some(libc::SIGKILL));
    assert_eq!(exit_code(out.status), 137);
}

#[test]
fn the_sandbox_ends_with_the_command_even_when_it_leaves_background_processes() {
    let start = Instant::now();
    let Some(out) = run("background", spec("sh", &["-c", "sleep 1000 & exit 3"])) else {
        return;
    };
    assert_eq!(
        out.status.code(),
        Some(3),
        "the command's code, not a watchdog kill"
    );
    assert!(start.elapsed() < WATCHDOG);
}

#[test]
fn environment_is_exactly_the_specs() {
    let spec = SandboxSpec::new("env")
        .envs([("PATH", host_path().as_str()), ("ONLY_THIS", "1")])
        .cwd("/");
    let Some(out) = run("environment", spec) else {
        return;
    };
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(
        lines(&out.stdout),
        [format!("PATH={}", host_path()).as_str(), "ONLY_THIS=1"]
    );
}

#[test]
fn an_overlay_shows_its_source_read_only_and_leaves_the_target_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("settings.toml");
    let source = dir.path().join("session-settings.toml");
    std::fs::write(&target, "the user's own\n").unwrap();
    std::fs::write(&source, "the session's\n").unwrap();
    let script = format!(
        "import errno, os\n\
         t = {target:?}\n\
         print(open(t).read().strip())\n\
         for what, act in [('write', lambda: open(t, 'w').write('x')),\n\
                           ('unlink', lambda: os.unlink(t)),\n\
                           ('rename', lambda: os.rename(t, t + '.moved')),\n\
                           ('replace', lambda: (open(t + '.new', 'w').write('x'), os.replace(t + '.new', t)))]:\n\
         \x20   try:\n\
         \x20       act(); print(what, 'OK')\n\
         \x20   except OSError as e:\n\
         \x20       print(what, errno.errorcode[e.errno])\n",
        target = target.to_str().unwrap()
    );
    let Some(out) = run("overlay", python_spec(&script).overlay(&source, &target)) else {
        return;
    };
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(
        lines(&out.stdout),
        [
            "the session's",
            "write EROFS",
            "unlink EBUSY",
            "rename EBUSY",
            "replace EBUSY"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "the user's own\n"
    );
    assert_eq!(std::fs::read_to_string(&source).unwrap(), "the session's\n");
}

#[test]
fn an_overlay_onto_a_missing_file_is_refused_before_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source");
    std::fs::write(&source, "x").unwrap();
    let missing = dir.path().join("missing");
    match Session::start(spec("true", &[]).overlay(&source, &missing)) {
        Err(err) if err.namespaces_unavailable() => skip("overlay-missing", &err),
        Err(err) => assert!(err.to_string().contains("missing"), "{err}"),
        Ok(_) => panic!("an overlay onto a missing file started"),
    }
}

#[test]
fn working_directory_is_the_specs() {
    let dir = tempfile::tempdir().unwrap();
    let Some(out) = run("cwd", spec("pwd", &[]).cwd(dir.path())) else {
        return;
    };
    assert_eq!(out.stdout.trim(), dir.path().to_str().unwrap());
}

#[test]
fn a_missing_program_or_directory_is_an_error_not_a_status() {
    match Session::start(spec("fenzi-no-such-program-here", &[])) {
        Err(SandboxError::Command { action, source, .. }) => {
            assert_eq!(action, "execve");
            assert_eq!(source.raw_os_error(), Some(libc::ENOENT));
        }
        Err(err) if err.namespaces_unavailable() => {
            skip("missing program", &namespaces_refused(&err))
        }
        other => panic!("expected a command error, got {other:?}"),
    }
    match Session::start(spec("true", &[]).cwd("/fenzi/no/such/dir")) {
        Err(SandboxError::Command { action, source, .. }) => {
            assert_eq!(action, "chdir");
            assert_eq!(source.raw_os_error(), Some(libc::ENOENT));
        }
        Err(err) if err.namespaces_unavailable() => skip("missing cwd", &namespaces_refused(&err)),
        other => panic!("expected a command error, got {other:?}"),
    }
}

#[test]
fn a_loopback_service_of_the_host_is_unreachable() {
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let port = host.local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}/");
    let Some(out) = run(
        "host loopback",
        spec("curl", &["--noproxy", "*", "-sS", "--max-time", "5", &url]),
    ) else {
        return;
    };
    // curl: 7 = could not connect (refused: nothing listens on that port in the sandbox's lo).
    assert_eq!(
        out.status.code(),
        Some(7),
        "curl reached the host? stdout={} stderr={}",
        out.stdout,
        out.stderr
    );
    let script = format!(
        "import socket\ntry:\n socket.create_connection(('127.0.0.1', {port}), timeout=5)\n print('CONNECTED')\nexcept OSError as e:\n print(type(e).__name__)"
    );
    let Some(stdout) = run_python_ok("host loopback (python)", &script) else {
        return;
    };
    assert_eq!(stdout.trim(), "ConnectionRefusedError");
    assert!(
        matches!(host.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the host service was reached"
    );
}

#[test]
fn ip_literals_are_unreachable() {
    let script = r#"
import socket, errno
for family, addr in ((socket.AF_INET, ('1.1.1.1', 443)), (socket.AF_INET6, ('2606:4700:4700::1111', 443))):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(addr)
        print('CONNECTED')
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e)))
"#;
    let Some(stdout) = run_python_ok("ip literals", script) else {
        return;
    };
    let got = lines(&stdout);
    assert_eq!(got[0], "ENETUNREACH", "IPv4 literal");
    assert!(
        ["ENETUNREACH", "EADDRNOTAVAIL", "EAFNOSUPPORT"].contains(&got[1]),
        "IPv6 literal: {}",
        got[1]
    );
}

#[test]
fn udp_dns_fails() {
    let script = r#"
import socket, errno
query = bytes.fromhex('abcd01000001000000000000076578616d706c6503636f6d0000010001')
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(query, ('8.8.8.8', 53))
    print('SENT')
except OSError as e:
    print(errno.errorcode[e.errno])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
try:
    s.sendto(query, ('127.0.0.53', 53))
    s.recvfrom(512)
    print('ANSWERED')
except socket.timeout:
    print('NO_ANSWER')
except OSError as e:
    print(errno.errorcode[e.errno])
try:
    socket.getaddrinfo('example.com', 443)
    print('RESOLVED')
except socket.gaierror:
    print('NO_RESOLUTION')
"#;
    let Some(stdout) = run_python_ok("udp dns", script) else {
        return;
    };
    let got = lines(&stdout);
    assert_eq!(got[0], "ENETUNREACH", "UDP to a public resolver");
    assert!(
        ["ECONNREFUSED", "NO_ANSWER"].contains(&got[1]),
        "UDP to the local stub resolver: {}",
        got[1]
    );
    assert_eq!(got[2], "NO_RESOLUTION");
}

#[test]
fn the_handed_back_listener_is_the_only_endpoint_and_the_parent_accepts_on_it() {
    let mut spec = python_spec(
        r#"
import socket
lo = [l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]]
listening = [l.split()[1] for l in open('/proc/net/tcp').readlines()[1:] if l.split()[3] == '0A']
listening6 = [l.split()[1] for l in open('/proc/net/tcp6').readlines()[1:] if l.split()[3] == '0A'] if __import__('os').path.exists('/proc/net/tcp6') else []
print('IFACES', ','.join(lo))
print('LISTEN', ','.join(listening + listening6))
s = socket.create_connection(('127.0.0.1', 18080), timeout=10)
s.sendall(b'ping')
reply = b''
while chunk := s.recv(64):
    reply += chunk
print('REPLY', reply.decode())
"#,
    );
    spec.proxy_port = 18080;
    let capture = Capture::attach(&mut spec);
    let Some(mut session) = start("listener", spec) else {
        return;
    };
    assert_eq!(
        session.listener.local_addr().unwrap(),
        "127.0.0.1:18080".parse::<SocketAddr>().unwrap()
    );
    let listener = session.listener.try_clone().unwrap();
    let server = std::thread::spawn(move || {
        let (mut conn, peer): (TcpStream, SocketAddr) = listener.accept().unwrap();
        let mut buf = [0u8; 4];
        conn.read_exact(&mut buf).unwrap();
        conn.write_all(&[&b"pong:"[..], &buf].concat()).unwrap();
        drop(conn);
        peer
    });
    let (status, _) = wait(&mut session.child);
    let out = capture.finish(status);
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    let peer = server.join().unwrap();
    assert!(
        peer.ip().is_loopback(),
        "the connection came from the sandbox's loopback: {peer}"
    );
    let got = lines(&out.stdout);
    assert_eq!(got[0], "IFACES lo", "only the loopback interface exists");
    assert_eq!(
        got[1], "LISTEN 0100007F:46A0",
        "the only listening socket is 127.0.0.1:18080"
    );
    assert_eq!(got[2], "REPLY pong:ping");
}

/// A Unix socket listener the host serves, for the duration of a test.
struct HostUnixSocket {
    path: PathBuf,
    listener: std::os::unix::net::UnixListener,
}

impl HostUnixSocket {
    fn bind(dir: &str) -> Option<HostUnixSocket> {
        use std::os::unix::fs::PermissionsExt;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let path = PathBuf::from(format!(
            "{dir}/fenzi-sandbox-test-{}-{nanos}.sock",
            std::process::id()
        ));
        let listener = std::os::unix::net::UnixListener::bind(&path).ok()?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        listener.set_nonblocking(true).unwrap();
        Some(HostUnixSocket { path, listener })
    }

    fn accepted(&self) -> bool {
        self.listener.accept().is_ok()
    }
}

impl Drop for HostUnixSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[test]
fn host_unix_sockets_cannot_be_reached() {
    let mut sockets = vec![HostUnixSocket::bind("/tmp").expect("a Unix socket under /tmp")];
    let run_dir = std::env::var("XDG_RUNTIME_DIR")
        .ok()
        .filter(|d| d.starts_with("/run/"));
    match HostUnixSocket::bind("/run").or_else(|| run_dir.as_deref().and_then(HostUnixSocket::bind))
    {
        Some(socket) => sockets.push(socket),
        None => {
            let _ = writeln!(
                std::io::stderr(),
                "\n*** NOTE: no writable directory under /run; testing /tmp only\n"
            );
        }
    }
    let abstract_name = format!("fenzi-sandbox-test-{}", std::process::id());
    let abstract_listener = {
        use std::os::linux::net::SocketAddrExt;
        let addr =
            std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        let l = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
        l.set_nonblocking(true).unwrap();
        l
    };
    let targets: Vec<String> = sockets
        .iter()
        .map(|s| format!("'{}'", s.path.display()))
        .chain([format!("'\\0{abstract_name}'")])
        .collect();
    let script = format!(
        r#"
import socket, errno
for target in [{targets}]:
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(target)
        print('CONNECTED')
    except OSError as e:
        print(errno.errorcode[e.errno])
"#,
        targets = targets.join(", ")
    );

    // Control: the same script on the host connects, so a refusal inside means the sandbox.
    let host = host_python(&script);
    assert!(
        lines(&host).iter().all(|l| *l == "CONNECTED"),
        "control run on the host: {host}"
    );
    for socket in &sockets {
        assert!(socket.accepted(), "the control connection arrived");
    }
    assert!(abstract_listener.accept().is_ok());

    let Some(stdout) = run_python_ok("host unix sockets", &script) else {
        return;
    };
    assert_eq!(
        lines(&stdout),
        vec!["EPERM"; targets.len()],
        "every host socket refused"
    );
    for socket in &sockets {
        assert!(
            !socket.accepted(),
            "{} was reached from the sandbox",
            socket.path.display()
        );
    }
    assert!(
        abstract_listener.accept().is_err(),
        "the abstract socket was reached from the sandbox"
    );
}

#[test]
fn socketpairs_for_own_ipc_still_work() {
    let script = r#"
import socket, errno, subprocess
a, b = socket.socketpair()
a.sendall(b'x'); print('STREAM', b.recv(1).decode())
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
a.sendall(b'y'); print('SEQPACKET', b.recv(1).decode())
try:
    socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    print('DGRAM OK')
except OSError as e:
    print('DGRAM', errno.errorcode[e.errno])
print('CHILD', subprocess.run(['sh', '-c', 'exit 5']).returncode)
"#;
    let Some(stdout) = run_python_ok("socketpairs", script) else {
        return;
    };
    assert_eq!(
        lines(&stdout),
        ["STREAM x", "SEQPACKET y", "DGRAM EPERM", "CHILD 5"]
    );
}

#[test]
fn keyring_process_and_namespace_system_calls_are_refused_with_eperm() {
    let script = format!(
        r#"{prelude}
KEY_SPEC_SESSION_KEYRING = -3
checks = [
    ('keyctl', sys('keyctl', 0, KEY_SPEC_SESSION_KEYRING, 0)),
    ('add_key', sys('add_key', b'user', b'fenzi-test', b'v', 1, KEY_SPEC_SESSION_KEYRING)),
    ('request_key', sys('request_key', b'user', b'fenzi-test', None, 0)),
    ('ptrace', sys('ptrace', 0, 0, 0, 0)),
    ('process_vm_readv', sys('process_vm_readv', os.getppid(), 0, 0, 0, 0, 0)),
    ('process_vm_writev', sys('process_vm_writev', os.getppid(), 0, 0, 0, 0, 0)),
    ('unshare', sys('unshare', 0x10000000)),
    ('setns', sys('setns', 0, 0)),
    ('mount', sys('mount', b'none', b'/tmp', b'tmpfs', 0, None)),
    ('umount2', sys('umount2', b'/proc', 0)),
    ('pivot_root', sys('pivot_root', b'/', b'/')),
    ('chroot', sys('chroot', b'/')),
    ('fsopen', sys('fsopen', b'tmpfs', 0)),
    ('io_uring_setup', sys('io_uring_setup', 1, 0)),
    ('bpf', sys('bpf', 0, 0, 0)),
    ('perf_event_open', sys('perf_event_open', 0, 0, -1, -1, 0)),
    ('userfaultfd', sys('userfaultfd', 0)),
    ('ioctl_TIOCSTI', sys('ioctl', 0, 0x5412, ctypes.c_char_p(b'x'))),
    ('socket_vsock', sys('socket', 40, 1, 0)),
    ('socket_packet', sys('socket', 17, 3, 0)),
]
for name, result in checks:
    print(name, result)
print('clone3', sys('clone3', 0, 0))
import subprocess
print('spawn', subprocess.run(['true']).returncode)
print('unshare_cmd', subprocess.run(['unshare', '-U', 'true'], stderr=subprocess.DEVNULL).returncode != 0)
"#,
        prelude = syscall_prelude()
    );
    let Some(stdout) = run_python_ok("refused syscalls", &script) else {
        return;
    };
    let got = lines(&stdout);
    let (checked, rest) = got.split_at(got.len() - 2);
    for line in checked {
        let (name, result) = line.split_once(' ').unwrap();
        if name == "clone3" {
            assert_eq!(
                result, "ENOSYS",
                "clone3 answers ENOSYS so the C library falls back to clone"
            );
        } else {
            assert_eq!(result, "EPERM", "{name}");
        }
    }
    assert_eq!(
        rest,
        ["spawn 0", "unshare_cmd True"],
        "ordinary process creation still works"
    );

    // Control: on the host the keyring call succeeds, so EPERM inside is the filter's doing.
    let host = host_python(&format!(
        "{}\nprint(sys('keyctl', 0, -3, 1))",
        syscall_prelude()
    ));
    assert_eq!(host.trim(), "OK", "keyctl works outside the sandbox");
}

#[test]
fn proc_shows_only_the_sandbox_and_not_the_parent() {
    let host_pid = std::process::id();
    let script = format!(
        r#"
import os
pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
print('PIDS', len(pids), pids[0])
print('HOST_PID_VISIBLE', os.path.exists('/proc/{host_pid}'))
import ctypes
print('COMMAND_DUMPABLE', ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE
for f in ('/proc/1/environ', '/proc/1/mem', '/proc/1/maps'):
    try:
        open(f, 'rb').read(1)
        print(f, 'READABLE')
    except OSError as e:
        print(f, type(e).__name__)
"#
    );
    let Some(stdout) = run_python_ok("private proc", &script) else {
        return;
    };
    let got = lines(&stdout);
    assert_eq!(
        got[0], "PIDS 2 1",
        "only the init (1) and the command are visible"
    );
    assert_eq!(got[1], "HOST_PID_VISIBLE False");
    assert_eq!(
        got[2], "COMMAND_DUMPABLE 1",
        "after its execve the command is an ordinary process of the user (it holds no secret)"
    );
    for line in &got[3..] {
        assert!(
            line.ends_with("PermissionError"),
            "the init holds a copy of the parent's memory: {line}"
        );
    }
}

#[test]
fn fresh_session_keyring_hides_the_parents_keys() {
    // The test process has no session keyring of its own, and joining one needs a raw system
    // call; so a python helper joins a named session keyring, adds a possessor-only key to it,
    // checks that it can see that key in /proc/keys (possession is what makes it visible), and
    // re-runs this test binary as `keyring_probe`, which inherits the keyring and starts the
    // sandbox.
    let exe = std::env::current_exe().unwrap();
    let desc = format!("fenzi-sandbox-test-key-{}", std::process::id());
    let script = format!(
        r#"{prelude}
import sys as _sys
KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_SETPERM, KEY_SPEC_SESSION_KEYRING = 1, 5, -3
assert sys('keyctl', KEYCTL_JOIN_SESSION_KEYRING, b'fenzi-test-session') == 'OK'
_libc.syscall.restype = ctypes.c_long
serial = _libc.syscall(ctypes.c_long(NR['add_key']), b'user', b'{desc}', b'secret-value', ctypes.c_long(12), ctypes.c_long(KEY_SPEC_SESSION_KEYRING))
assert serial > 0, ctypes.get_errno()
assert sys('keyctl', KEYCTL_SETPERM, serial, 0x3f000000) == 'OK'
assert '{desc}' in open('/proc/keys').read(), 'possessed key not listed'
_sys.stdout.flush()
os.environ['FENZI_PROBE_KEY'] = '{desc}'
os.execv('{exe}', ['{exe}', '--exact', 'keyring_probe', '--ignored', '--nocapture', '--test-threads=1'])
"#,
        prelude = syscall_prelude(),
        exe = exe.display()
    );
    let out = Command::new(python())
        .args(["-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stdout.contains("PROBE SKIPPED") {
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED `fresh_session_keyring`: {stdout}\n"
        );
        return;
    }
    assert!(
        out.status.success(),
        "probe failed:\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("PROBE OK"),
        "probe did not run:\n{stdout}\n{stderr}"
    );
}

/// Run by `fresh_session_keyring`, in a process whose session keyring holds a key. Run any other
/// way (`--include-ignored`), it has nothing to check and says so.
#[test]
#[ignore = "helper of fresh_session_keyring; needs a prepared session keyring"]
fn keyring_probe() {
    let Ok(desc) = std::env::var("FENZI_PROBE_KEY") else {
        let _ = writeln!(
            std::io::stderr(),
            "keyring_probe: nothing to do (run by fresh_session_keyring)"
        );
        return;
    };
    let keys = std::fs::read_to_string("/proc/keys").unwrap();
    assert!(
        keys.contains(&desc),
        "this process possesses the key (the control)"
    );
    let mut spec = spec("cat", &["/proc/keys"]);
    let capture = Capture::attach(&mut spec);
    let mut session = match Session::start(spec) {
        Ok(session) => session,
        Err(err) if err.namespaces_unavailable() => {
            println!("PROBE SKIPPED: {err}");
            return;
        }
        Err(err) => panic!("sandbox did not start: {err}"),
    };
    let (status, _) = wait(&mut session.child);
    let out = capture.finish(status);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        !out.stdout.contains(&desc),
        "the sandbox sees the parent's session key:\n{}",
        out.stdout
    );
    println!("PROBE OK");
}

#[test]
fn kill_ends_the_sandbox_and_terminate_reaches_the_command() {
    let Some(mut session) = start("kill", spec("sleep", &["1000"])) else {
        return;
    };
    session.child.kill().unwrap();
    assert_eq!(wait(&mut session.child).0.signal(), Some(libc::SIGKILL));

    let mut spec = spec(
        "sh",
        &[
            "-c",
            "trap 'exit 42' TERM; echo ready; while :; do sleep 0.05; done",
        ],
    );
    let mut capture = Capture::attach(&mut spec);
    let Some(mut session) = start("terminate", spec) else {
        return;
    };
    let deadline = Instant::now() + WATCHDOG;
    while !Capture::read(&mut capture.out).contains("ready") {
        assert!(Instant::now() < deadline, "the command never became ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    session.child.terminate().unwrap();
    assert_eq!(
        wait(&mut session.child).0.code(),
        Some(42),
        "SIGTERM was forwarded to the command"
    );
}

#[test]
fn the_sandbox_ends_with_the_thread_that_started_it() {
    // The parent-death signal follows the thread that cloned the init, not the process: a
    // session started on a thread that then ends is killed, though this process lives on and
    // still holds the session's control socket.
    let starter = std::thread::spawn(|| start("starter thread", spec("sleep", &["1000"])));
    let Some(mut session) = starter.join().unwrap() else {
        return;
    };
    let (status, watchdog_fired) = wait(&mut session.child);
    assert!(
        !watchdog_fired,
        "the sandbox outlived the thread that started it"
    );
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
}

#[test]
fn a_non_root_non_dumpable_parent_can_start_a_sandbox() {
    // `fenzi run` makes itself non-dumpable, which gives its clone's /proc files to root; as any
    // other user the init must still write its id maps. Needs root to become another user: this
    // test re-runs this binary as `nondumpable_probe` under uid 65534.
    const TEST: &str = "a_non_root_non_dumpable_parent_can_start_a_sandbox";
    if !rustix::process::geteuid().is_root() {
        // Not a shortcoming of the sandbox: only root can become another user.
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED `{TEST}`: needs root (to become uid 65534)\n"
        );
        return;
    }
    let setpriv = Command::new("setpriv").arg("--version").output();
    if !setpriv.is_ok_and(|o| o.status.success()) {
        skip(TEST, &"needs setpriv (util-linux) to become uid 65534");
        return;
    }
    let as_nobody = ["--reuid=65534", "--regid=65534", "--clear-groups"];
    // Whether this kernel lets an unprivileged user create namespaces at all, asked of another
    // program: inside the probe, every failure to start is fenzi's.
    let userns = Command::new("setpriv")
        .args(as_nobody)
        .args(["unshare", "--user", "--net", "true"])
        .output()
        .unwrap();
    if !userns.status.success() {
        let why = format!(
            "this kernel refuses user namespaces to unprivileged users: {}",
            String::from_utf8_lossy(&userns.stderr).trim()
        );
        skip(TEST, &why);
        return;
    }
    let (dir, exe) = runnable_by_anyone(&std::env::current_exe().unwrap());
    let out = Command::new("setpriv")
        .args(as_nobody)
        .arg(&exe)
        .args([
            "--exact",
            "nondumpable_probe",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("FENZI_NONDUMPABLE_PROBE", "1")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("PROBE OK"),
        "probe failed:\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
}

/// A copy of the program `exe` in a fresh directory, both mode 0755, so that any user can run it:
/// the build directory may lie under a directory only its owner can enter (a clone under /root).
/// `install` writes the copy in a process of its own, so no thread here holds the file open for
/// writing when it is executed (which would fail with ETXTBSY).
fn runnable_by_anyone(exe: &Path) -> (tempfile::TempDir, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = dir.path().join(exe.file_name().unwrap());
    let status = Command::new("install")
        .args(["-m", "0755"])
        .arg(exe)
        .arg(&copy)
        .status()
        .expect("install (coreutils) runs");
    assert!(status.success(), "copying {} failed", exe.display());
    (dir, copy)
}

/// Run by `a_non_root_non_dumpable_parent_can_start_a_sandbox` as uid 65534. Run any other way,
/// it has nothing to check and says so.
#[test]
#[ignore = "helper of a_non_root_non_dumpable_parent_can_start_a_sandbox"]
fn nondumpable_probe() {
    if std::env::var_os("FENZI_NONDUMPABLE_PROBE").is_none() {
        let _ = writeln!(
            std::io::stderr(),
            "nondumpable_probe: nothing to do (run by a_non_root_non_dumpable_parent_can_start_a_sandbox)"
        );
        return;
    }
    let euid = rustix::process::geteuid().as_raw();
    assert_ne!(euid, 0, "the probe runs as an unprivileged user");
    make_process_undumpable().unwrap();
    // A non-dumpable process's /proc files belong to root: the control for what the init meets.
    let owner = |path: &str| std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(path).unwrap());
    assert_eq!(owner("/proc/self/uid_map"), 0);
    let mut spec = spec(
        "sh",
        &[
            "-c",
            "cat /proc/self/uid_map; \
             stat -c 'command_environ_owner=%u' /proc/self/environ; \
             cat /proc/1/environ >/dev/null 2>&1 && echo init=readable || echo init=private",
        ],
    );
    let capture = Capture::attach(&mut spec);
    let mut session = Session::start(spec)
        .unwrap_or_else(|err| panic!("the sandbox did not start as uid {euid}: {err}"));
    let (status, _) = wait(&mut session.child);
    let out = capture.finish(status);
    assert!(out.status.success(), "{:?}\n{}", out.status, out.stderr);
    let got = lines(&out.stdout);
    let map: Vec<&str> = got[0].split_whitespace().collect();
    assert_eq!(
        map,
        ["1000", euid.to_string().as_str(), "1"],
        "{}",
        out.stdout
    );
    // The command's own /proc files are its user's (it is dumpable after execve); the init's stay
    // unreadable to it.
    assert_eq!(got[1], "command_environ_owner=1000", "{}", out.stdout);
    assert_eq!(got[2], "init=private", "{}", out.stdout);
    println!("PROBE OK");
}
