//! `fenzi run` end to end: the real binary starts a command in the sandbox with the proxy in-process.
//! A plain HTTP server on the host's loopback plays the allowed destination; curl inside the sandbox
//! reaches it only through the proxy, and nothing at all without it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

mod run_support;
use run_support::*;

#[test]
fn the_only_way_out_is_the_proxy() {
    if !sandbox_available() || !have("curl") {
        return;
    }
    let (port, hits) = http_server();
    let env = Env::new(
        "way-out",
        &format!("version: 1\nhosts:\n  - \"127.0.0.1:{port}\"\n  - \"localhost:{port}\"\n"),
    );
    let script = format!(
        "curl -s -o /dev/null -w 'allowed=%{{http_code}}\\n' http://127.0.0.1:{port}/a; \
         curl -s -o /dev/null -w 'named=%{{http_code}}\\n' http://localhost:{port}/b; \
         curl -s -o /dev/null -w 'unlisted=%{{http_code}}\\n' http://example.org/; \
         curl --noproxy '*' -s -m 3 -o /dev/null http://127.0.0.1:{port}/direct; echo direct=$?; \
         echo uid=$(id -u); echo https_proxy=$HTTPS_PROXY; \
         env | grep -c FENZI_SECRET_ || true; \
         exit 7"
    );
    let out = env.run(&["--", "sh", "-c", &script]);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(7),
        "the command's exit code\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("allowed=200"), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("named=403"),
        "a name resolving to loopback is refused\n{stdout}"
    );
    assert!(stdout.contains("unlisted=403"), "{stdout}");
    assert!(
        stdout.contains("direct=0"),
        "a direct connection to an allowed literal is caught and admitted\n{stdout}"
    );
    assert!(stdout.contains("uid=1000"), "{stdout}");
    assert!(
        stdout.contains("https_proxy=http://127.0.0.1:3128"),
        "the caller's proxy is replaced\n{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l == "0"),
        "no FENZI_SECRET_ variable inside\n{stdout}"
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        2,
        "the server saw exactly the allowed request and the caught direct one"
    );
    for line in ["proxy", "mcp", "secrets", "audit"] {
        assert!(
            stderr.lines().any(|l| l.trim_start().starts_with(line)),
            "status line {line}\n{stderr}"
        );
    }
    let log = env.audit_log();
    assert!(
        log.contains("\"decision\":\"allowed\"") && log.contains("\"path\":\"/a\""),
        "{log}"
    );
    assert!(log.contains("\"reason\":\"private_address\""), "{log}");
    assert!(log.contains("\"reason\":\"host_not_allowed\""), "{log}");
    // The direct connection was a tunnel through fenzi's admission: one CONNECT record, no path.
    assert!(
        log.contains(&format!(
            "\"method\":\"CONNECT\",\"host\":\"127.0.0.1\",\"port\":{port}"
        )),
        "{log}"
    );
    assert!(!log.contains("/direct"), "{log}");
    assert!(
        !log.contains("this-value-must-stay-outside")
            && !stdout.contains("this-value-must-stay-outside")
    );
}

#[test]
fn an_invalid_policy_starts_nothing() {
    let env = Env::new("invalid", "version: 1\nhosts: [\"*\"]\n");
    let marker = env.dir.join("started");
    let out = env.run(&["--", "touch", marker.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("fenzi.yaml:2:"),
        "{}",
        text(&out.stderr)
    );
    assert!(!Path::new(&marker).exists());
}

#[test]
fn a_command_that_does_not_exist_is_reported_as_a_shell_does() {
    let env = Env::new("no-such-command", "version: 1\nhosts: []\n");
    let mut modes: Vec<&[&str]> = vec![&["--no-isolation"]];
    if sandbox_available() {
        modes.push(&[]);
    } else {
        sandbox_unavailable("a_command_that_does_not_exist", "no user namespaces");
    }
    for mode in modes {
        let mut args = mode.to_vec();
        args.extend(["--", "/no/such/command", "--flag"]);
        let out = env.run(&args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(127), "{mode:?}: {err}");
        assert!(
            err.contains("fenzi run: /no/such/command: command not found"),
            "{mode:?}: {err}"
        );
        assert!(!err.contains("cannot isolate"), "{mode:?}: {err}");
        // The session's directory (its CA certificate) is gone.
        let left: Vec<_> = std::fs::read_dir(env.dir.join("runtime/fenzi"))
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{mode:?}: left behind {left:?}");
    }
}

#[test]
fn the_session_ends_with_a_summary_of_its_denials() {
    if !have("curl") {
        return;
    }
    let env = Env::new("denial-summary", "version: 1\nhosts: []\n");
    let out = env.run(&[
        "--no-isolation",
        "--",
        "sh",
        "-c",
        "for h in a b c d; do curl -s -o /dev/null http://$h.blocked.example/; done; echo ran",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(text(&out.stdout).trim(), "ran");
    assert!(
        err.contains("fenzi run: 4 requests were denied in this session (host_not_allowed 4):"),
        "{err}"
    );
    assert!(
        err.contains("denied  GET a.blocked.example:80/  host_not_allowed"),
        "{err}"
    );
    assert!(err.contains("  … and 1 more"), "{err}");
    assert!(err.contains("--denied"), "{err}");
    // The summary comes after the command's own output: nothing of fenzi's in between.
    let summary_at = err.find("requests were denied").unwrap();
    assert!(!err[..summary_at].contains("denied  GET"), "{err}");
}

#[test]
fn fenzis_warnings_go_to_the_session_log_not_the_agents_terminal() {
    if !have("curl") {
        return;
    }
    // A port nothing listens on: the upstream failure is a warning of fenzi's.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let env = Env::new(
        "quiet-terminal",
        &format!("version: 1\nhosts: [\"127.0.0.1:{closed}\"]\n"),
    );
    let out = env.run(&[
        "--no-isolation",
        "--",
        "sh",
        "-c",
        &format!("curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{closed}/"),
    ]);
    let err = text(&out.stderr);
    assert_eq!(text(&out.stdout), "502", "{err}");
    assert!(
        !err.contains(" WARN "),
        "a warning reached the terminal: {err}"
    );
    let pointer = err
        .lines()
        .find_map(|l| l.strip_prefix("fenzi run: fenzi's warnings during the session are in "))
        .unwrap_or_else(|| panic!("no pointer to the session log: {err}"));
    let log = std::fs::read_to_string(pointer).unwrap();
    assert!(log.contains("WARN") && log.contains("upstream"), "{log}");
    assert!(!log.contains('\u{1b}'), "colour codes in a file: {log}");
}

#[test]
fn no_isolation_says_so_loudly_and_still_uses_the_proxy() {
    if !have("curl") {
        return;
    }
    let (port, _) = http_server();
    let env = Env::new(
        "no-isolation",
        &format!("version: 1\nhosts: [\"127.0.0.1:{port}\"]\n"),
    );
    let out = env.run(&[
        "--no-isolation",
        "--",
        "sh",
        "-c",
        &format!("curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/x"),
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "200");
    assert!(
        text(&out.stderr).contains("WARNING: --no-isolation"),
        "{}",
        text(&out.stderr)
    );
    assert!(env.audit_log().contains("\"path\":\"/x\""));
}

#[test]
fn the_sandbox_holds_a_placeholder_that_works_nowhere_else() {
    if !sandbox_available() || !have("curl") {
        return;
    }
    let (port, hits) = http_server();
    let env = Env::new(
        "secret",
        &format!(
            "version: 1\nhosts: [\"127.0.0.1:{port}\"]\nsecrets:\n  DEMO_TOKEN:\n    hosts: [api.example.com]\n"
        ),
    );
    let real = "real-demo-token-0123456789";
    let script = format!(
        "case \"$DEMO_TOKEN\" in fenzi_ph_*) echo placeholder=yes;; *) echo placeholder=no;; esac; \
         env | grep -c {real} || true; \
         curl -s -w ' %{{http_code}}' -H \"Authorization: Bearer $DEMO_TOKEN\" http://127.0.0.1:{port}/leak"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_fenzi"))
        .args(["run", "--", "sh", "-c", &script])
        .current_dir(&env.dir)
        .env("XDG_CONFIG_HOME", env.dir.join("xdg"))
        .env("XDG_STATE_HOME", env.dir.join("state"))
        .env("XDG_CACHE_HOME", env.dir.join("cache"))
        .env("XDG_RUNTIME_DIR", env.dir.join("runtime"))
        .env("FENZI_CREDSTORE", "memory")
        .env("NO_COLOR", "1")
        .env("FENZI_SECRET_DEMO_TOKEN", real)
        .output()
        .expect("fenzi runs");
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(stdout.contains("placeholder=yes"), "{stdout}\n{stderr}");
    assert!(
        stdout.lines().any(|l| l == "0"),
        "the real value is not in the sandbox\n{stdout}"
    );
    assert!(
        stdout.contains("credential_endpoint_mismatch") && stdout.ends_with(" 403"),
        "{stdout}"
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the server received nothing"
    );
    let log = env.audit_log();
    assert!(log.contains("\"secrets\":[\"DEMO_TOKEN\"]"), "{log}");
    assert!(!log.contains(real) && !log.contains("fenzi_ph_") && !stderr.contains(real));
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

/// The uid and gid `a_non_root_user_can_run_a_session` switches to (nobody).
const NOBODY: u32 = 65534;

#[test]
fn a_non_root_user_can_run_a_session() {
    const TEST: &str = "a_non_root_user_can_run_a_session";
    if !rustix::process::geteuid().is_root() || !have("curl") {
        // Not a shortcoming of the sandbox: only root can become another user.
        skip(TEST, "needs root (to become uid 65534) and curl");
        return;
    }
    if !have("setpriv") {
        sandbox_unavailable(TEST, "needs setpriv (util-linux) to become uid 65534");
        return;
    }
    let as_nobody = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    let probe = Command::new(as_nobody[0])
        .args(&as_nobody[1..])
        .args(["unshare", "--user", "--net", "true"])
        .output()
        .expect("setpriv runs");
    if !probe.status.success() {
        sandbox_unavailable(
            TEST,
            &format!(
                "this kernel refuses user namespaces to unprivileged users: {}",
                text(&probe.stderr).trim()
            ),
        );
        return;
    }
    let (port, hits) = http_server();
    let mut env = Env::new(
        "non-root",
        &format!("version: 1\nhosts: [\"127.0.0.1:{port}\"]\n"),
    );
    let (_copy_dir, fenzi) = runnable_by_anyone(&env.fenzi);
    env.fenzi = fenzi;
    for dir in ["state", "runtime"] {
        let dir = env.dir.join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    let script = format!(
        "curl -s -o /dev/null -w 'allowed=%{{http_code}}\\n' http://127.0.0.1:{port}/as-nobody; \
         curl --noproxy '*' -s -m 3 -o /dev/null http://127.0.0.1:{port}/direct; echo direct=$?; \
         echo uid=$(id -u); echo map=$(cat /proc/self/uid_map); \
         exit 7"
    );
    let out = env
        .command(&as_nobody, &["--", "sh", "-c", &script])
        .env("HOME", &env.dir)
        .output()
        .expect("fenzi runs");
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(7),
        "the command's exit code, as uid {NOBODY}\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("allowed=200"), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("direct=0"),
        "a direct connection to an allowed literal is caught and admitted\n{stdout}"
    );
    assert!(stdout.contains("uid=1000"), "{stdout}");
    let map: Vec<&str> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("map="))
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        map,
        ["1000", &NOBODY.to_string(), "1"],
        "1000 inside is {NOBODY} outside\n{stdout}"
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        2,
        "the server saw the proxied request and the caught direct one"
    );
    let log = env.audit_log();
    assert!(
        log.contains("\"path\":\"/as-nobody\"") && !log.contains("/direct"),
        "{log}"
    );
    // The log was written by fenzi itself running as nobody, not by root.
    let audit_dir = env.dir.join("state/fenzi/audit");
    for entry in std::fs::read_dir(&audit_dir).unwrap() {
        let meta = entry.unwrap().metadata().unwrap();
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), NOBODY);
    }
}

/// Host pids of the processes whose argv is exactly `argv`.
fn pids_with_argv(argv: &[&str]) -> Vec<u32> {
    let mut want = Vec::new();
    for arg in argv {
        want.extend_from_slice(arg.as_bytes());
        want.push(0);
    }
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

/// Host pids of the children of `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // "pid (comm) state ppid ...": the comm may hold spaces and parentheses.
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(parent)
            })
        })
        .collect()
}

/// Still running: the pid exists and runs the same program (a zombie's cmdline is empty, a
/// reused pid's differs).
fn still_running(pid: u32, cmdline: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == cmdline)
}

/// Kills the fenzi under test if the test ends early, so nothing it started lingers.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn killing_fenzi_ends_the_sandbox() {
    if !sandbox_available() {
        return;
    }
    let env = Env::new("kill", "version: 1\nhosts: []\n");
    // Arguments no other process has, to find the sandbox's processes from the host: the command
    // and a background process it leaves, both in the sandbox's PID namespace.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let tag = format!("{}{nanos:09}", std::process::id());
    let (command_arg, background_arg) = (format!("3600.{tag}"), format!("3601.{tag}"));
    let script = format!("sleep {background_arg} & exec sleep {command_arg}");
    let stderr_path = env.dir.join("fenzi.stderr");
    let mut fenzi = KillOnDrop(
        env.command(&[], &["--", "sh", "-c", &script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .expect("fenzi starts"),
    );
    let fenzi_pid = fenzi.0.id();
    let stderr = || std::fs::read_to_string(&stderr_path).unwrap_or_default();

    let deadline = Instant::now() + Duration::from_secs(60);
    let (command, background) = loop {
        let command = pids_with_argv(&["sleep", &command_arg]);
        let background = pids_with_argv(&["sleep", &background_arg]);
        if let ([command], [background]) = (&command[..], &background[..]) {
            break (*command, *background);
        }
        if let Some(status) = fenzi.0.try_wait().unwrap() {
            panic!("fenzi ended before the command ran: {status}\n{}", stderr());
        }
        assert!(
            Instant::now() < deadline,
            "the sandboxed command never started\n{}",
            stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // The sandbox's init: fenzi's only child (a clone of it, with its argv).
    let init = match children_of(fenzi_pid)[..] {
        [init] => init,
        ref other => panic!("fenzi should have one child, the sandbox's init: {other:?}"),
    };
    let our_pid_ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let mut tracked = Vec::new();
    for pid in [init, command, background] {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        assert_ne!(
            std::fs::read_link(format!("/proc/{pid}/ns/pid")).unwrap(),
            our_pid_ns,
            "pid {pid} runs in the sandbox's PID namespace"
        );
        tracked.push((pid, cmdline));
    }

    fenzi.0.kill().unwrap();
    let status = fenzi.0.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    let killed = Instant::now();
    let mut alive: Vec<u32> = tracked.iter().map(|(pid, _)| *pid).collect();
    while !alive.is_empty() && killed.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
        alive = tracked
            .iter()
            .filter(|(pid, cmdline)| still_running(*pid, cmdline))
            .map(|(pid, _)| *pid)
            .collect();
    }
    let waited = killed.elapsed();
    for &pid in &alive {
        // Do not leave them behind for the rest of the suite.
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    assert!(
        alive.is_empty(),
        "{waited:?} after fenzi was killed, these sandbox processes still run: {alive:?} \
         (init {init}, command {command}, background {background})"
    );
    eprintln!("the sandbox ended {waited:?} after fenzi was SIGKILLed");
}

/// Every file below `dir`, with its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                files.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
    }
    files.sort();
    files
}

/// Each way of changing what governs a session, tried from inside `fenzi run` as the sandbox's
/// user: the project policy and lock, the machine file, earlier sessions' logs and heads, and the
/// indirect route of renaming an ancestor directory and recreating the path. Every attempt must
/// fail and leave every byte as it was, and the earlier session's log must verify from outside.
/// Writing where an agent works (the project directory, a temporary directory) still works.
#[test]
fn the_sandbox_cannot_change_the_policy_or_any_audit_log() {
    if !sandbox_available() {
        return;
    }
    let env = Env::new("governing", "version: 1\nhosts:\n  - example.com\n");
    std::fs::write(env.dir.join("fenzi.lock"), "{}\n").unwrap();
    std::fs::create_dir_all(env.dir.join("xdg/fenzi")).unwrap();
    std::fs::write(env.dir.join("xdg/fenzi/mcp.yaml"), "version: 1\n").unwrap();
    let first = env.run(&["--", "true"]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let earlier = env.dir.join("state/fenzi/audit");
    let earlier_log = std::fs::read_dir(&earlier)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .expect("the first session's log");
    let state_before = snapshot(&env.dir.join("state"));
    let config_before = snapshot(&env.dir.join("xdg"));
    let policy_before = std::fs::read(env.dir.join("fenzi.yaml")).unwrap();
    let lock_before = std::fs::read(env.dir.join("fenzi.lock")).unwrap();

    let dir = env.dir.display().to_string();
    let log = earlier_log.display().to_string();
    let head = format!("{log}.head");
    let attacks: Vec<(&str, String)> = vec![
        (
            "append to the policy",
            "echo 'hosts: [evil.test]' >> fenzi.yaml".into(),
        ),
        ("truncate the policy", ": > fenzi.yaml".into()),
        ("unlink the policy", "rm -f fenzi.yaml".into()),
        ("rename the policy", "mv fenzi.yaml moved.yaml".into()),
        ("chmod the policy", "chmod 666 fenzi.yaml".into()),
        (
            "replace the policy by rename",
            "echo 'version: 1' > new.yaml && mv -f new.yaml fenzi.yaml".into(),
        ),
        ("write the lock", "echo '{\"x\":1}' > fenzi.lock".into()),
        (
            "replace the lock by rename",
            "echo x > l.new && mv -f l.new fenzi.lock".into(),
        ),
        (
            "write the machine file",
            format!("echo 'hosts: [evil.test]' >> {dir}/xdg/fenzi/mcp.yaml"),
        ),
        (
            "add a machine file",
            format!("echo x > {dir}/xdg/fenzi/other.yaml"),
        ),
        (
            "rewrite an earlier log",
            format!("sed -i s/denied/allowed/ {log}"),
        ),
        ("append to an earlier log", format!("echo '{{}}' >> {log}")),
        ("truncate an earlier log", format!("truncate -s 0 {log}")),
        ("unlink an earlier log", format!("rm -f {log}")),
        ("rewrite an earlier head", format!("echo forged > {head}")),
        (
            "replace an earlier head by rename",
            format!("echo forged > h.new && mv -f h.new {head}"),
        ),
        (
            "forge a newer log",
            format!("echo '{{}}' > {dir}/state/fenzi/audit/ffffffffffffffff.jsonl"),
        ),
        (
            "rename the state directory",
            format!("mv {dir}/state {dir}/state.old"),
        ),
        (
            "rename the audit directory",
            format!("mv {dir}/state/fenzi/audit {dir}/state/a"),
        ),
        (
            "rename the config directory",
            format!("mv {dir}/xdg {dir}/xdg.old"),
        ),
        (
            "rename the project directory",
            format!("mv {dir} {dir}.old"),
        ),
        ("remove the state directory", format!("rm -rf {dir}/state")),
    ];
    let mut script = String::from(
        "try() { if sh -c \"$2\" >/dev/null 2>&1; then echo \"CHANGED $1\"; else echo \"refused $1\"; fi; }\n",
    );
    for (name, command) in &attacks {
        script.push_str(&format!(
            "try '{name}' '{}'\n",
            command.replace('\'', "'\\''")
        ));
    }
    // Controls: the sandbox still writes where an agent works, so the refusals above are not just
    // a sandbox that can write nothing.
    script.push_str("try 'write in the project' 'echo ok > made-here.txt'\n");
    script.push_str("try 'work in a temporary directory' 'd=$(mktemp -d) && mkdir $d/a && echo x > $d/a/f && rm -rf $d'\n");
    let second = env.run(&["--", "sh", "-c", &script]);
    let out = text(&second.stdout);
    assert!(second.status.success(), "{out}\n{}", text(&second.stderr));
    for (name, _) in &attacks {
        assert!(out.contains(&format!("refused {name}\n")), "{name}: {out}");
    }
    assert!(out.contains("CHANGED write in the project\n"), "{out}");
    assert!(
        out.contains("CHANGED work in a temporary directory\n"),
        "{out}"
    );
    assert!(env.dir.join("made-here.txt").exists());

    assert_eq!(
        std::fs::read(env.dir.join("fenzi.yaml")).unwrap(),
        policy_before
    );
    assert_eq!(
        std::fs::read(env.dir.join("fenzi.lock")).unwrap(),
        lock_before
    );
    assert_eq!(snapshot(&env.dir.join("xdg")), config_before);
    // The second session added its own log and head; everything that was there is unchanged.
    let state_after = snapshot(&env.dir.join("state"));
    for file in &state_before {
        assert!(state_after.contains(file), "{} changed", file.0.display());
    }
    let verify = Command::new(&env.fenzi)
        .args(["log", "--verify", "--file"])
        .arg(&earlier_log)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(verify.status.success(), "{}", text(&verify.stdout));
}

/// A project policy that is a symbolic link is refused before anything starts: the link itself
/// could be replaced from inside.
#[test]
fn a_symlinked_policy_starts_nothing() {
    if !sandbox_available() {
        return;
    }
    let env = Env::new("symlinked", "version: 1\n");
    std::fs::rename(env.dir.join("fenzi.yaml"), env.dir.join("real.yaml")).unwrap();
    std::os::unix::fs::symlink("real.yaml", env.dir.join("fenzi.yaml")).unwrap();
    let out = env.run(&["--", "sh", "-c", "echo started"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("started"));
    assert!(
        text(&out.stderr).contains("symbolic link"),
        "{}",
        text(&out.stderr)
    );
}

/// Programs that ignore the proxy variables are caught: names resolve through the sandbox's DNS
/// stub to synthetic addresses, and every connection (to a name, or to an IP literal) gets the
/// decision and the one record a CONNECT to the same place would get.
#[test]
fn programs_that_ignore_the_proxy_variables_are_caught() {
    if !sandbox_available() || !have("curl") || !have("getent") {
        return;
    }
    let (port, hits) = http_server();
    let env = Env::new(
        "transparent",
        &format!("version: 1\nhosts:\n  - \"127.0.0.1:{port}\"\n  - \"allowed.invalid:{port}\"\n"),
    );
    let direct = "curl --noproxy '*' -s -m 5 -o /dev/null";
    let script = format!(
        "getent hosts refused.example; getent hosts allowed.invalid; \
         {direct} -w 'literal=%{{http_code}} from=%{{local_ip}}:%{{local_port}}\\n' http://127.0.0.1:{port}/x; \
         {direct} http://refused.example/; echo refused=$?; \
         {direct} http://127.0.0.1/; echo loopback=$?; \
         {direct} http://allowed.invalid:{port}/; echo named=$?; \
         head -c 300 /dev/urandom > /dev/null"
    );
    let out = env.run(&["--", "sh", "-c", &script]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let synthetic = |name: &str| {
        stdout
            .lines()
            .find(|l| l.ends_with(name))
            .and_then(|l| l.split_whitespace().next())
            .map(str::to_string)
            .unwrap_or_default()
    };
    assert!(
        synthetic("refused.example").starts_with("198.18."),
        "{stdout}"
    );
    assert!(
        synthetic("allowed.invalid").starts_with("198.18."),
        "{stdout}"
    );
    assert_ne!(synthetic("refused.example"), synthetic("allowed.invalid"));
    assert!(stdout.contains("literal=200"), "{stdout}");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "only the allowed literal got through"
    );
    assert!(!stdout.contains("refused=0"), "{stdout}");
    assert!(!stdout.contains("loopback=0"), "{stdout}");

    let log = env.audit_log();
    let records: Vec<&str> = log.lines().collect();
    let about = |host: &str, port: u16| -> Vec<&str> {
        let needle = format!("\"host\":\"{host}\",\"port\":{port}");
        records
            .iter()
            .copied()
            .filter(|r| r.contains(&needle))
            .collect()
    };
    let literal = about("127.0.0.1", port);
    assert_eq!(literal.len(), 1, "{log}");
    assert!(literal[0].contains("\"decision\":\"allowed\"") && literal[0].contains("CONNECT"));
    // Its `client` is the program's end of the connection, as curl saw it from inside.
    let from = stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("from="))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        literal[0].contains(&format!("\"client\":\"{from}\"")),
        "{from}: {log}"
    );
    let refused = about("refused.example", 80);
    assert_eq!(refused.len(), 1, "{log}");
    assert!(
        refused[0].contains("\"reason\":\"host_not_allowed\""),
        "{log}"
    );
    // An IP literal the policy does not name, on a port fenzi listens on: refused by the policy.
    let loopback = about("127.0.0.1", 80);
    assert_eq!(loopback.len(), 1, "{log}");
    assert!(
        loopback[0].contains("\"reason\":\"host_not_allowed\""),
        "{log}"
    );
    // The name is allowed: it is admitted by name, and resolving it (on the host, where
    // `.invalid` never resolves) is what fails, recorded as the upstream's failure.
    let named = about("allowed.invalid", port);
    assert_eq!(named.len(), 1, "{log}");
    assert!(
        named[0].contains("\"decision\":\"failed\"")
            && named[0].contains("\"source\":\"upstream\""),
        "{log}"
    );
}

/// An IPv6 literal the policy names is caught on the transparent path as well.
#[test]
fn an_ipv6_literal_is_caught_without_the_proxy_variables() {
    if !sandbox_available() || !have("curl") {
        return;
    }
    let Ok(listener) = TcpListener::bind("[::1]:0") else {
        skip(
            "an_ipv6_literal_is_caught_without_the_proxy_variables",
            "no IPv6 loopback here",
        );
        return;
    };
    let (port, hits) = http_server_on(listener);
    let env = Env::new(
        "ipv6",
        &format!("version: 1\nhosts:\n  - \"[::1]:{port}\"\n"),
    );
    let script = format!(
        "curl --noproxy '*' -s -m 5 -o /dev/null -w 'v6=%{{http_code}}\\n' 'http://[::1]:{port}/'"
    );
    let out = env.run(&["--", "sh", "-c", &script]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("v6=200"), "{stdout}\n{}", text(&out.stderr));
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    let log = env.audit_log();
    assert!(
        log.contains("\"decision\":\"allowed\",\"method\":\"CONNECT\"")
            && log.contains(&format!("\"port\":{port}")),
        "{log}"
    );
}

/// The lock's place is protected before anything is pinned: `fenzi run` creates it (empty, and
/// recorded as its own in the state directory), so the agent cannot plant one for a later
/// `pin: true` to trust. A planted lock (no record) is reported as unreviewed when the session
/// starts, naming the command that reviews it.
#[test]
fn the_lock_is_protected_before_anything_is_pinned_and_a_planted_one_is_unreviewed() {
    if !sandbox_available() {
        return;
    }
    let env = Env::new("lock-place", "version: 1\nhosts:\n  - example.com\n");
    let lock = env.dir.join("fenzi.lock");
    assert!(!lock.exists());
    let plant = "if (printf x > fenzi.lock) 2>/dev/null; then echo CHANGED; else echo refused; fi";
    let out = env.run(&["--", "sh", "-c", plant]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "refused\n");
    let created = std::fs::read_to_string(&lock).unwrap();
    assert!(created.contains("\"servers\": {}"), "{created}");
    let records: Vec<_> = std::fs::read_dir(env.dir.join("state/fenzi/lock-trust"))
        .unwrap()
        .collect();
    assert_eq!(records.len(), 1);

    // A lock written by someone else (here: from outside, as a stand-in for an agent that wrote
    // it before this protection, or a lock from before trust records) is unreviewed.
    std::fs::write(&lock, created.replace("\"servers\": {}", "\"servers\":{}")).unwrap();
    std::fs::write(
        env.dir.join("fenzi.yaml"),
        "version: 1\nmcp:\n  tracker:\n    url: https://127.0.0.1:9/mcp\n    pin: true\n    tools:\n      allow: [get_issue]\n",
    )
    .unwrap();
    let out = env.run(&["--", "true"]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("fenzi.lock is unreviewed"), "{err}");
    assert!(err.contains("`fenzi mcp pin tracker`"), "{err}");
}

/// A home directory for a test, outside every temporary directory the sandbox may write (`/tmp`,
/// `/var/tmp`, `/dev/shm`, the temp dir): cargo's test scratch directory, unless the checkout itself
/// lies under one of them (a clone in `/tmp`), then beneath the real home's `.local/share`.
fn home_outside_temporary_dirs() -> PathBuf {
    let name = format!("fenzi-caches-home-{}", std::process::id());
    let temporary = [
        PathBuf::from("/tmp"),
        PathBuf::from("/var/tmp"),
        PathBuf::from("/dev/shm"),
        std::env::temp_dir(),
    ];
    let outside = |p: &std::path::Path| {
        let p = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        !temporary
            .iter()
            .any(|t| p.starts_with(t.canonicalize().unwrap_or_else(|_| t.clone())))
    };
    let scratch = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    if outside(&scratch) {
        return scratch.join(name);
    }
    let real_home = PathBuf::from(std::env::var_os("HOME").expect("HOME is set for the tests"));
    let base = real_home.join(".local/share/fenzi-tests");
    assert!(
        outside(&base),
        "no directory outside the temporary ones for this test (HOME is {})",
        real_home.display()
    );
    base.join(name)
}

/// The package managers' caches inside the sandbox: every cache variable names a directory of this
/// project's own sandbox cache, which the command can write, while the person's cache directory
/// (and `~/.npm`) stays out of its reach, so nothing it leaves there is trusted outside.
#[test]
fn package_caches_are_the_projects_own_and_the_persons_are_out_of_reach() {
    if !sandbox_available() {
        return;
    }
    let env = Env::new("caches", "version: 1\n");
    let home = home_outside_temporary_dirs();
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(home.join(".cache")).unwrap();
    let npmrc = "//registry.npmjs.org/:_authToken=npm_realtokenvalue\n";
    std::fs::write(home.join(".npmrc"), npmrc).unwrap();
    let script = "for v in XDG_CACHE_HOME npm_config_cache PNPM_HOME YARN_CACHE_FOLDER PIP_CACHE_DIR \
                  UV_CACHE_DIR CARGO_HOME GOMODCACHE GOCACHE GRADLE_USER_HOME; do \
                    eval d=\\$$v; mkdir -p \"$d\" && echo ok > \"$d/probe\" || echo \"UNWRITABLE $v\"; \
                    echo \"$v=$d\"; \
                  done; \
                  echo poison > \"$HOME/.cache/poison\" 2>/dev/null && echo WROTE-CACHE; \
                  mkdir \"$HOME/.npm\" 2>/dev/null && echo WROTE-NPM; \
                  echo \"npmrc:$(cat \"$HOME/.npmrc\")\"; \
                  echo more >> \"$HOME/.npmrc\" 2>/dev/null && echo WROTE-NPMRC; true";
    let out = env
        .command(&[], &["--", "sh", "-c", script])
        .env("HOME", &home)
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("CARGO_HOME", home.join(".cargo"))
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}{}", stdout, text(&out.stderr));
    assert!(!stdout.contains("UNWRITABLE"), "{stdout}");
    assert!(
        !stdout.contains("WROTE"),
        "the person's cache was writable: {stdout}"
    );
    assert!(!home.join(".cache/poison").exists() && !home.join(".npm").exists());
    // The person's registry token is not readable inside, and the file is as it was.
    assert!(!stdout.contains("npm_realtokenvalue"), "{stdout}");
    assert!(stdout.lines().any(|l| l == "npmrc:"), "{stdout}");
    assert_eq!(std::fs::read_to_string(home.join(".npmrc")).unwrap(), npmrc);
    assert!(text(&out.stderr).contains("shown empty inside the sandbox"));
    let sandbox = home.join(".cache/fenzi/sandbox");
    let projects: Vec<PathBuf> = std::fs::read_dir(&sandbox)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(projects.len(), 1, "{projects:?}");
    let name = projects[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(name.starts_with("fenzi-run-test-caches-"), "{name}");
    for line in stdout.lines().filter(|l| !l.starts_with("npmrc:")) {
        let (var, dir) = line.split_once('=').unwrap();
        assert!(Path::new(dir).starts_with(&projects[0]), "{var} is {dir}");
        assert!(Path::new(dir).join("probe").is_file(), "{var}: {dir}");
    }
    assert_eq!(stdout.lines().count(), 11, "{stdout}");
    let _ = std::fs::remove_dir_all(&home);
}
