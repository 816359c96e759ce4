//! The deputy (SECURITY.md): fenzi writes on the host with the person's authority, so nothing the
//! agent writes may steer where fenzi's own writes land. A hostile agent inside `fenzi run`, with
//! its audit log in the project (`--audit ./audit.jsonl`, the case the README allows), plants
//! symbolic links wherever fenzi ever wrote a temporary or companion file, tries to replace the
//! companions, writes into another session's runtime directory, and makes requests all the while
//! so that fenzi keeps rewriting its head. The session runs under `strace`, which records fenzi's
//! own file operations from outside; the test asserts that every file fenzi created, wrote,
//! renamed or removed was one of its own, that every governing file and the earlier records are
//! byte-identical, and that the log verifies.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A tiny HTTP server on 127.0.0.1 that answers `200 hello`.
fn http_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                line.clear();
            }
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
            );
        }
    });
    port
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Says loudly that a test did not run; a failure instead under `FENZI_REQUIRE_SANDBOX`, which
/// says this machine can run it (CI installs strace and curl).
fn unavailable(test: &str, why: &str) {
    assert!(
        std::env::var_os("FENZI_REQUIRE_SANDBOX").is_none(),
        "{test}: cannot run here ({why}) but FENZI_REQUIRE_SANDBOX is set"
    );
    let _ = writeln!(std::io::stderr(), "\n*** SKIPPED `{test}`: {why}\n");
}

fn sandbox_available() -> bool {
    Command::new("unshare")
        .args(["--user", "--net", "true"])
        .status()
        .is_ok_and(|s| s.success())
}

struct Env {
    dir: PathBuf,
}

impl Env {
    fn new(name: &str, policy: &str) -> Env {
        let dir = std::env::temp_dir().join(format!("fenzi-deputy-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("xdg/fenzi")).unwrap();
        std::fs::write(dir.join("fenzi.yaml"), policy).unwrap();
        Env { dir }
    }

    /// `PREFIX fenzi run ARGS` in the project directory.
    fn run(&self, prefix: &[&str], args: &[&str]) -> Output {
        let fenzi = env!("CARGO_BIN_EXE_fenzi");
        let mut command = match prefix.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(fenzi);
                c
            }
            None => Command::new(fenzi),
        };
        command
            .arg("run")
            .args(args)
            .current_dir(&self.dir)
            .env("XDG_CONFIG_HOME", self.dir.join("xdg"))
            .env("XDG_STATE_HOME", self.dir.join("state"))
            .env("XDG_RUNTIME_DIR", self.dir.join("runtime"))
            .env("FENZI_CREDSTORE", "memory")
            .env("NO_COLOR", "1")
            .output()
            .expect("fenzi runs")
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Every regular file beneath `dir` with its bytes (links as their target's text).
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = path.symlink_metadata().unwrap();
            if meta.is_dir() {
                todo.push(path);
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                files.push((path, target.into_os_string().into_encoded_bytes()));
            } else {
                files.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
    }
    files.sort();
    files
}

/// The syscalls that change the file system, and `openat`/`open` (which do when they create,
/// write or truncate).
const TRACED: &str = "clone,clone3,fork,vfork,open,openat,creat,rename,renameat,renameat2,unlink,\
                      unlinkat,mkdir,mkdirat,rmdir,truncate,symlink,symlinkat,link,linkat,chmod,\
                      fchmodat,bind";

/// One file operation of fenzi's own process (any of its threads): the syscall and the paths it
/// names, made absolute from the descriptors strace decoded (`-y`).
#[derive(Debug)]
struct FileOp {
    line: String,
    paths: Vec<PathBuf>,
}

/// Reads an `strace -f -y` trace and returns the file-changing operations of the first process and
/// its threads only: not of the sandbox's processes (the agent's own writes are the sandbox's
/// business, checked by the byte comparisons).
fn fenzis_own_file_ops(trace: &str, cwd: &Path) -> Vec<FileOp> {
    // Join `<unfinished ...>` with its `<... resumed>` line, per pid.
    let mut pending: HashMap<u32, String> = HashMap::new();
    let mut calls: Vec<(u32, String)> = Vec::new();
    for line in trace.lines() {
        let Some((pid, rest)) = line.trim_start().split_once(char::is_whitespace) else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        let rest = rest.trim_start();
        if let Some(head) = rest.strip_suffix("<unfinished ...>") {
            pending.insert(pid, head.to_string());
        } else if rest.starts_with("<...") {
            let tail = rest.split_once("resumed>").map_or("", |(_, t)| t);
            let head = pending.remove(&pid).unwrap_or_default();
            calls.push((pid, format!("{head}{tail}")));
        } else {
            calls.push((pid, rest.to_string()));
        }
    }
    let Some(&(root, _)) = calls.first() else {
        return Vec::new();
    };
    let mut threads = BTreeSet::from([root]);
    let mut ops = Vec::new();
    for (pid, call) in calls {
        if !threads.contains(&pid) {
            continue;
        }
        let name = call.split('(').next().unwrap_or_default();
        if name.starts_with("clone") || name == "fork" || name == "vfork" {
            if call.contains("CLONE_THREAD")
                && let Some(tid) = call
                    .rsplit_once("= ")
                    .and_then(|(_, r)| r.split_whitespace().next())
                    .and_then(|r| r.parse::<u32>().ok())
            {
                threads.insert(tid);
            }
            continue;
        }
        if (name == "open" || name == "openat")
            && !["O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"]
                .iter()
                .any(|f| call.contains(f))
        {
            continue;
        }
        // A directory that was there already: nothing changed.
        if name.starts_with("mkdir") && call.contains("= -1 EEXIST") {
            continue;
        }
        ops.push(FileOp {
            paths: paths_of(&call, cwd),
            line: call,
        });
    }
    ops
}

/// The paths a traced call names: each `N</dir>` descriptor joined with the string after it, each
/// string on its own (relative to `cwd`).
fn paths_of(call: &str, cwd: &Path) -> Vec<PathBuf> {
    let args = call
        .split_once('(')
        .map_or("", |(_, a)| a)
        .rsplit_once(") =")
        .map_or(call, |(a, _)| a);
    let mut paths = Vec::new();
    let mut dir: Option<PathBuf> = None;
    let mut rest = args;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('"') {
            let end = after.find('"').unwrap_or(after.len());
            let name = &after[..end];
            let base = dir.take().unwrap_or_else(|| cwd.to_path_buf());
            paths.push(base.join(name));
            rest = after.get(end + 1..).unwrap_or("");
        } else if let Some(open) = rest.find(['<', '"']) {
            if rest.as_bytes()[open] == b'<' {
                let after = &rest[open + 1..];
                let end = after.find('>').unwrap_or(after.len());
                dir = Some(PathBuf::from(&after[..end]));
                rest = after.get(end + 1..).unwrap_or("");
            } else {
                if rest[..open].contains("AT_FDCWD") {
                    dir = None;
                }
                rest = &rest[open..];
            }
        } else {
            break;
        }
    }
    paths
}

#[test]
fn a_hostile_agent_cannot_steer_fenzis_own_file_writes() {
    const TEST: &str = "a_hostile_agent_cannot_steer_fenzis_own_file_writes";
    if !sandbox_available() {
        return unavailable(TEST, "user namespaces are unavailable");
    }
    if !have("strace") || !have("curl") {
        return unavailable(TEST, "needs strace and curl");
    }
    let port = http_server();
    let env = Env::new(
        "writes",
        &format!("version: 1\nhosts:\n  - \"127.0.0.1:{port}\"\n"),
    );
    let dir = env.dir.clone();
    std::fs::write(dir.join("fenzi.lock"), "{\"version\":1,\"servers\":[]}\n").unwrap();
    std::fs::write(dir.join("xdg/fenzi/mcp.yaml"), "version: 1\n").unwrap();
    // An earlier session, its log in the project as the README allows.
    let first = env.run(
        &[],
        &[
            "--audit",
            "audit.jsonl",
            "--",
            "curl",
            "-s",
            &format!("http://127.0.0.1:{port}/earlier"),
        ],
    );
    assert!(first.status.success(), "{}", text(&first.stderr));
    // Another session's runtime directory, which this session's agent must not write.
    let other = dir.join("runtime/fenzi/0123456789abcdef");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("ca-bundle.pem"), "the other session's bundle\n").unwrap();
    std::fs::write(other.join("resolv.conf"), "nameserver 127.0.0.53\n").unwrap();

    let governing = |env: &Env| {
        let mut files = snapshot(&env.dir.join("xdg/fenzi"));
        files.extend(snapshot(&env.dir.join("runtime/fenzi/0123456789abcdef")));
        for name in ["fenzi.yaml", "fenzi.lock"] {
            files.push((
                env.dir.join(name),
                std::fs::read(env.dir.join(name)).unwrap(),
            ));
        }
        files
    };
    let before = governing(&env);
    let earlier_log = std::fs::read(dir.join("audit.jsonl")).unwrap();
    assert!(!earlier_log.is_empty());

    // Every name fenzi has ever written beside a log or in a session directory, as a link to a
    // file fenzi must never write; then the companions themselves, replaced or rewritten; then
    // the other session's files. Repeated between requests, so that fenzi's rewrites of its head
    // meet the links at every point of the session.
    let d = dir.display().to_string();
    let o = other.display().to_string();
    let plant = format!(
        "for n in audit.jsonl.head.tmp audit.jsonl.otlp-cursor.tmp .ca.pem.tmp ca.pem.tmp \
              audit.jsonl.lock; do ln -sf {d}/fenzi.yaml $n 2>/dev/null; done; \
         rm -f audit.jsonl.head audit.log audit.jsonl.otlp-cursor 2>/dev/null; \
         ln -sf {d}/fenzi.lock audit.jsonl.head 2>/dev/null; \
         echo forged > audit.jsonl.head 2>/dev/null; \
         echo forged > audit.jsonl.otlp-cursor 2>/dev/null; \
         echo forged >> audit.log 2>/dev/null; \
         mv audit.jsonl.head h.old 2>/dev/null; \
         echo x > {o}/ca-bundle.pem 2>/dev/null; ln -sf {d}/fenzi.yaml {o}/new 2>/dev/null; \
         rm -f {o}/resolv.conf 2>/dev/null; mv {o} {o}.moved 2>/dev/null; \
         for s in {d}/runtime/fenzi/*/; do echo x > $s/ca-bundle.pem 2>/dev/null; \
             ln -sf {d}/fenzi.yaml $s/.ca-bundle.pem.tmp 2>/dev/null; done; \
         for s in /tmp/fenzi-*/*/; do echo x > $s/ca-bundle.pem 2>/dev/null; done; \
         mv {d}/runtime {d}/runtime.moved 2>/dev/null; \
         mv {d}/state {d}/state.moved 2>/dev/null; true"
    );
    let script = format!(
        "{plant}; for i in 1 2 3 4 5 6 7 8; do \
           curl -s -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:{port}/r$i; \
           sleep 0.05; {plant}; \
         done"
    );
    let trace_file = dir.join("../deputy-trace.txt");
    let trace_arg = trace_file.display().to_string();
    let second = env.run(
        &[
            "strace",
            "-f",
            "-y",
            "-qq",
            "-s",
            "512",
            "-o",
            &trace_arg,
            "-e",
            &format!("trace={TRACED}"),
        ],
        &[
            "--audit",
            "audit.jsonl",
            "--otlp",
            "http://127.0.0.1:9/v1/logs",
            "--drain-timeout",
            "1s",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    let trace = std::fs::read_to_string(&trace_file).unwrap_or_default();
    let _ = std::fs::remove_file(&trace_file);
    let stdout = text(&second.stdout);
    assert!(
        second.status.success(),
        "{stdout}\n{}",
        text(&second.stderr)
    );
    assert_eq!(
        stdout.lines().filter(|l| *l == "200").count(),
        8,
        "the requests went through\n{stdout}"
    );

    // Nothing that governs a session, and nothing of another session, changed.
    assert_eq!(governing(&env), before);
    // The earlier records are still there, byte for byte, and the log verifies with its head.
    let log = std::fs::read(dir.join("audit.jsonl")).unwrap();
    assert!(log.starts_with(&earlier_log), "the earlier records changed");
    assert!(
        log.len() > earlier_log.len(),
        "the session's records are there"
    );
    let verify = Command::new(env!("CARGO_BIN_EXE_fenzi"))
        .args(["log", "--verify", "--file"])
        .arg(dir.join("audit.jsonl"))
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}{}",
        text(&verify.stdout),
        text(&verify.stderr)
    );
    // The companions are fenzi's, not the agent's.
    let head = std::fs::read_to_string(dir.join("audit.jsonl.head")).unwrap();
    assert!(!head.contains("forged") && !head.is_empty(), "{head}");
    assert!(
        !dir.join("audit.jsonl.head")
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let cursor = std::fs::read_to_string(dir.join("audit.jsonl.otlp-cursor")).unwrap();
    assert!(!cursor.contains("forged"), "{cursor}");

    // From outside: every file fenzi itself created, wrote, renamed or removed is one of its own.
    let ops = fenzis_own_file_ops(&trace, &dir);
    assert!(
        ops.iter().any(|op| op.line.contains("audit.jsonl.head")),
        "the trace saw fenzi write its head (is the trace complete?)\n{trace}"
    );
    let own = |p: &Path| {
        let name = p.to_string_lossy();
        let in_project = |n: &str| p == dir.join(n);
        in_project("audit.jsonl")
            || in_project("audit.jsonl.head")
            || in_project("audit.jsonl.otlp-cursor")
            || in_project("audit.log")
            || p.starts_with(dir.join("state"))
            || (p.starts_with(dir.join("runtime/fenzi")) && !p.starts_with(&other))
            || name.starts_with("/proc/")
            || name.starts_with("/dev/")
            || name.starts_with("/sys/fs/cgroup")
    };
    let strangers: Vec<&FileOp> = ops
        .iter()
        .filter(|op| !op.paths.iter().all(|p| own(p)))
        .collect();
    assert!(
        strangers.is_empty(),
        "fenzi touched files that are not its own:\n{}",
        strangers
            .iter()
            .map(|op| format!("  {}", op.line))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // No write of fenzi's went through a name the agent planted: every open of a name beside the
    // log refuses to follow a link.
    for op in &ops {
        if op.line.starts_with("open") && op.line.contains(&format!("{d}/audit")) {
            assert!(op.line.contains("O_NOFOLLOW"), "{}", op.line);
        }
    }
}

/// `fenzi run -- COMMAND` as `uid`, in `home`, with `tmp` as the temporary directory and no
/// `XDG_RUNTIME_DIR`.
fn run_as(uid: u32, fenzi: &Path, home: &Path, tmp: &Path, command: &[&str]) -> Output {
    Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            "--clear-groups",
        ])
        .arg(fenzi)
        .args(["run", "--"])
        .args(command)
        .current_dir(home)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("HOME", home)
        .env("TMPDIR", tmp)
        .env("FENZI_CREDSTORE", "memory")
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// Two users on one machine, without `XDG_RUNTIME_DIR`: each gets a runtime directory of their
/// own in the temporary directory, whoever ran first.
#[test]
fn two_users_both_run_sessions_without_a_runtime_dir() {
    const TEST: &str = "two_users_both_run_sessions_without_a_runtime_dir";
    if !rustix::process::geteuid().is_root() || !have("setpriv") {
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED `{TEST}`: needs root and setpriv to become two users\n"
        );
        return;
    }
    if !sandbox_available() {
        return unavailable(TEST, "user namespaces are unavailable");
    }
    let tmp = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let exe_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(exe_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let fenzi = exe_dir.path().join("fenzi");
    assert!(
        Command::new("install")
            .args(["-m", "0755", env!("CARGO_BIN_EXE_fenzi")])
            .arg(&fenzi)
            .status()
            .unwrap()
            .success()
    );
    let mut runtime_dirs = Vec::new();
    for uid in [65534u32, 65533] {
        let home = tmp.path().join(format!("home-{uid}"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("fenzi.yaml"), "version: 1\n").unwrap();
        std::os::unix::fs::chown(&home, Some(uid), Some(uid)).unwrap();
        std::os::unix::fs::chown(home.join("fenzi.yaml"), Some(uid), Some(uid)).unwrap();
        let out = run_as(uid, &fenzi, &home, tmp.path(), &["sh", "-c", "echo inside"]);
        let stderr = text(&out.stderr);
        if stderr.contains("user namespaces") && !out.status.success() {
            return unavailable(TEST, "unprivileged users cannot create user namespaces");
        }
        assert!(
            out.status.success() && text(&out.stdout).contains("inside"),
            "uid {uid}: {stderr}"
        );
        let runtime = tmp.path().join(format!("fenzi-{uid}"));
        let meta = std::fs::symlink_metadata(&runtime).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!((meta.uid(), meta.mode() & 0o777), (uid, 0o700));
        runtime_dirs.push(runtime);
    }
    assert_ne!(runtime_dirs[0], runtime_dirs[1]);
    // Another user's directory where ours goes is refused, by name, with what to do.
    let squatted = tmp.path().join("fenzi-65532");
    std::fs::create_dir(&squatted).unwrap();
    std::os::unix::fs::chown(&squatted, Some(65534), Some(65534)).unwrap();
    let home = tmp.path().join("home-65532");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("fenzi.yaml"), "version: 1\n").unwrap();
    std::os::unix::fs::chown(&home, Some(65532), Some(65532)).unwrap();
    let out = run_as(65532, &fenzi, &home, tmp.path(), &["true"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("fenzi-65532") && stderr.contains("owned by uid 65534"),
        "{stderr}"
    );
}

/// A person's editor that saves by renaming a new file over `fenzi.yaml` during a session takes the
/// file out of the sandbox's protection (the kernel drops the read-only mount with the old file);
/// the session cannot protect the new file, so it says so when it ends.
#[test]
fn a_policy_replaced_during_the_session_is_reported_at_its_end() {
    const TEST: &str = "a_policy_replaced_during_the_session_is_reported_at_its_end";
    if !sandbox_available() {
        return unavailable(TEST, "user namespaces are unavailable");
    }
    let env = Env::new("replaced", "version: 1\n");
    let dir = env.dir.clone();
    let editor = std::thread::spawn({
        let dir = dir.clone();
        move || {
            let started = std::time::Instant::now();
            while !dir.join("started").exists() {
                assert!(
                    started.elapsed().as_secs() < 60,
                    "the session never started"
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            std::fs::write(dir.join(".fenzi.yaml.new"), "version: 1\n# edited\n").unwrap();
            std::fs::rename(dir.join(".fenzi.yaml.new"), dir.join("fenzi.yaml")).unwrap();
            std::fs::write(dir.join("go"), "").unwrap();
        }
    });
    let out = env.run(
        &[],
        &[
            "--",
            "sh",
            "-c",
            "touch started; while [ ! -e go ]; do sleep 0.05; done; \
             if echo '# the agent' >> fenzi.yaml 2>/dev/null; then echo wrote; else echo refused; fi",
        ],
    );
    editor.join().unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("fenzi.yaml was replaced or removed during the session"),
        "{stderr}"
    );
    // What the kernel did, for the record: the new file was writable inside.
    eprintln!(
        "the agent's write to the replaced policy: {}",
        text(&out.stdout)
    );
}
