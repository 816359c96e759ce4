//! A running `fenzi proxy` reloads its policy files (README, "Reloading the policy"): the real
//! binary in front of a plain-HTTP MCP server on loopback, its project file (narrowing a machine
//! server) edited while it serves. A denied call is allowed within 2 s of the edit that allows
//! it, and the audit log's `reloaded` record carries the new policy's hash, as do the decisions
//! after it. Invalid YAML, a half-written file (completed later), a truncated file, a widening the
//! merge refuses, a file replaced by a symbolic link or a directory, an unreadable file, and a
//! host change each keep the policy in force with a `reload_refused` record; the same text
//! written again writes nothing. The log verifies, and `fenzi log` shows the policy records.

mod mcp_support;

use fenzi_policy::engine::Policy;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Session {
    dir: PathBuf,
    child: Child,
    proxy: String,
    upstream: u16,
    next_id: u64,
}

const MACHINE: &str = "version: 1
mcp:
  local:
    url: http://127.0.0.1:PORT/mcp
    tools:
      allow: [read, echo, add]
      deny: [drop]
";

fn project(port: u16, allow: &str, hosts: &str) -> String {
    format!(
        "version: 1\nhosts: [{hosts}]\nmcp:\n  local:\n    url: http://127.0.0.1:{port}/mcp\n    \
         tools:\n      allow: [{allow}]\n"
    )
}

impl Session {
    fn start(name: &str) -> Session {
        let dir = std::env::temp_dir().join(format!("fenzi-reload-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let upstream = mcp_support::plain_mcp_server();
        std::fs::write(
            dir.join("mcp.yaml"),
            MACHINE.replace("PORT", &upstream.to_string()),
        )
        .unwrap();
        std::fs::write(
            dir.join("fenzi.yaml"),
            project(upstream, "read", "github.com"),
        )
        .unwrap();
        let mut child = mcp_support::proxy_command(&dir, &["--machine", "mcp.yaml"])
            .stderr(std::fs::File::create(dir.join("stderr")).unwrap())
            .spawn()
            .unwrap();
        let proxy = mcp_support::listening_addr(&mut child);
        Session {
            dir,
            child,
            proxy,
            upstream,
            next_id: 0,
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.join("fenzi.yaml")
    }

    /// A `tools/call` of `tool` through the proxy: the HTTP status.
    fn call(&mut self, tool: &str) -> u16 {
        self.next_id += 1;
        let body = serde_json::json!({"jsonrpc": "2.0", "id": self.next_id,
            "method": "tools/call", "params": {"name": tool, "arguments": {}}})
        .to_string();
        let mut stream = TcpStream::connect(&self.proxy).unwrap();
        let target = format!("127.0.0.1:{}", self.upstream);
        write!(
            stream,
            "POST http://{target}/mcp HTTP/1.1\r\nHost: {target}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{answer}"))
    }

    fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.join("audit.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn policy_records(&self) -> Vec<Value> {
        self.records()
            .into_iter()
            .filter(|r| r["method"] == "POLICY")
            .collect()
    }

    /// Waits (up to 2 s) for the policy record after the first `seen`.
    fn next_policy_record(&self, seen: usize) -> Value {
        let start = Instant::now();
        loop {
            if let Some(r) = self.policy_records().get(seen) {
                return r.clone();
            }
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "no policy record within 2 s; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }

    /// The hash `fenzi` gives the policy of these files.
    fn hash_of(&self, project: &str) -> String {
        let machine = MACHINE.replace("PORT", &self.upstream.to_string());
        let config =
            fenzi_policy::config::load(Some((&machine, "mcp.yaml")), Some((project, "fenzi.yaml")))
                .unwrap();
        Policy::from_config(&config).sha256()
    }

    /// Writes `text` as an editor that saves atomically does.
    fn replace(&self, text: &str) {
        let temp = self.dir.join(".fenzi.yaml.swp");
        std::fs::write(&temp, text).unwrap();
        std::fs::rename(&temp, self.path()).unwrap();
    }

    /// Expects a `reload_refused` record whose reason contains `why`, with the policy `in_force`.
    fn expect_refused(&self, seen: &mut usize, why: &str, in_force: &str) {
        let r = self.next_policy_record(*seen);
        *seen += 1;
        assert_eq!(r["decision"], "reload_refused", "{r}");
        let rule = r["rule"].as_str().unwrap();
        assert!(rule.contains(why), "{why:?} not in {rule:?}");
        assert_eq!(r["policy"], in_force, "{r}");
    }

    fn stop(mut self) -> PathBuf {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}; stderr:\n{}", self.stderr());
        self.dir.clone()
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}

fn log(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fenzi"))
        .arg("log")
        .args(["--file", "audit.jsonl"])
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

#[test]
fn a_running_proxy_takes_new_tool_rules_within_two_seconds_and_refuses_what_does_not_load() {
    let mut s = Session::start("main");
    let port = s.upstream;
    let a = project(port, "read", "github.com");
    let hash_a = s.hash_of(&a);
    assert_eq!(s.call("echo"), 403);
    assert_eq!(s.call("read"), 200);

    // Allow echo: allowed within 2 s, under a `reloaded` record with the new hash.
    let b = project(port, "read, echo", "github.com");
    let hash_b = s.hash_of(&b);
    s.replace(&b);
    let edited = Instant::now();
    while s.call("echo") != 200 {
        assert!(
            edited.elapsed() < Duration::from_secs(2),
            "echo still denied 2 s after the edit; stderr:\n{}",
            s.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut seen = 0;
    let r = s.next_policy_record(seen);
    seen += 1;
    assert_eq!(r["decision"], "reloaded", "{r}");
    assert_eq!(r["policy"], hash_b.as_str());
    assert_eq!(r["path"], "fenzi.yaml");
    let calls: Vec<Value> = s
        .records()
        .into_iter()
        .filter(|r| r["tool"] == "echo")
        .collect();
    assert_eq!(calls[0]["decision"], "denied");
    assert_eq!(calls[0]["policy"], hash_a.as_str());
    let last = calls.last().unwrap();
    assert_eq!(last["decision"], "allowed");
    assert_eq!(last["policy"], hash_b.as_str());

    // Invalid YAML, written in place.
    std::fs::write(s.path(), format!("{b}  - [unclosed\n")).unwrap();
    s.expect_refused(&mut seen, "fenzi.yaml:", &hash_b);
    assert_eq!(s.call("echo"), 200);

    // Half a file, a pause, then the rest: refused, then reloaded.
    let c = project(port, "read, echo, add", "github.com");
    let hash_c = s.hash_of(&c);
    let cut = c.find("allow:").unwrap() + 3;
    std::fs::write(s.path(), &c[..cut]).unwrap();
    s.expect_refused(&mut seen, "fenzi.yaml:", &hash_b);
    assert_eq!(s.call("add"), 403);
    std::fs::OpenOptions::new()
        .append(true)
        .open(s.path())
        .unwrap()
        .write_all(&c.as_bytes()[cut..])
        .unwrap();
    let r = s.next_policy_record(seen);
    seen += 1;
    assert_eq!(r["decision"], "reloaded", "{r}");
    assert_eq!(r["policy"], hash_c.as_str());
    assert_eq!(s.call("add"), 200);

    // Truncated (the end of the file lost).
    std::fs::write(s.path(), &c[..c.len() - 12]).unwrap();
    s.expect_refused(&mut seen, "fenzi.yaml:", &hash_c);
    // A widening the merge refuses: the machine file denies `drop`.
    s.replace(&project(port, "read, echo, add, drop", "github.com"));
    s.expect_refused(&mut seen, "which the machine file denies", &hash_c);
    // A host: valid, but for the next session.
    s.replace(&project(port, "read, echo", "github.com, gitlab.com"));
    s.expect_refused(
        &mut seen,
        "takes effect in the next session: hosts",
        &hash_c,
    );
    assert_eq!(
        s.call("add"),
        200,
        "the tool part of that change was not applied"
    );
    // Replaced by a symbolic link to a file that would allow less.
    let elsewhere = s.dir.join("elsewhere.yaml");
    std::fs::write(&elsewhere, &a).unwrap();
    let link = s.dir.join(".link");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    std::fs::rename(&link, s.path()).unwrap();
    s.expect_refused(&mut seen, "symbolic link", &hash_c);
    // Replaced by a directory.
    std::fs::remove_file(s.path()).unwrap();
    std::fs::create_dir(s.path()).unwrap();
    s.expect_refused(&mut seen, "not a regular file", &hash_c);
    std::fs::remove_dir(s.path()).unwrap();

    // Back to C: what is in force already, so no record. Then C again, rewritten: none either.
    s.replace(&c);
    std::thread::sleep(Duration::from_millis(1200));
    // The moment without a file is too short to be read, unless this thread stalled there.
    let missing = s.policy_records()[seen..]
        .iter()
        .filter(|r| r["rule"].as_str().unwrap_or("").contains("No such file"))
        .count();
    seen += missing;
    s.replace(&c);
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(s.policy_records().len(), seen, "{:#?}", s.policy_records());

    // Unreadable (root reads it anyway: then it is the same text, and nothing is recorded).
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(s.path(), std::fs::Permissions::from_mode(0o000)).unwrap();
    if is_root() {
        std::thread::sleep(Duration::from_millis(1200));
        assert_eq!(s.policy_records().len(), seen);
    } else {
        s.expect_refused(&mut seen, "Permission denied", &hash_c);
    }
    assert_eq!(s.call("add"), 200);
    assert_eq!(s.call("drop"), 403);

    let stderr = s.stderr();
    assert!(
        stderr
            .contains("fenzi proxy: policy reloaded from fenzi.yaml: new tool rules for mcp.local"),
        "{stderr}"
    );
    assert!(
        stderr
            .contains("fenzi proxy: policy reload refused, the policy in force stays: fenzi.yaml"),
        "{stderr}"
    );
    assert!(
        stderr.contains("takes effect in the next session (hosts)"),
        "{stderr}"
    );
    let dir = s.stop();
    let verified = log(&dir, &["--verify"]);
    assert!(verified.status.success(), "{verified:?}");
    let shown = String::from_utf8(log(&dir, &[]).stdout).unwrap();
    assert!(
        shown.contains(&format!("reloaded policy {} fenzi.yaml", &hash_b[..12])),
        "{shown}"
    );
    assert!(shown.contains("reload_refused policy"), "{shown}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fenzi_run_reports_a_reload_in_the_session_log_not_on_the_agents_terminal() {
    let dir = std::env::temp_dir().join(format!("fenzi-reload-run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let policy = |allow: &str| {
        format!(
            "version: 1\nmcp:\n  s:\n    url: https://s.example/mcp\n    tools:\n      allow: [{allow}]\n"
        )
    };
    std::fs::write(dir.join("fenzi.yaml"), policy("a")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_fenzi"))
        .args(["run", "--no-isolation", "--audit", "audit.jsonl", "--"])
        .args(["sh", "-c", "sleep 3; echo command-done"])
        .current_dir(&dir)
        .env("XDG_STATE_HOME", dir.join("state"))
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env("FENZI_CREDSTORE", "memory")
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let temp = dir.join(".fenzi.yaml.new");
    std::fs::write(&temp, policy("a, b")).unwrap();
    std::fs::rename(&temp, dir.join("fenzi.yaml")).unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "command-done\n");
    assert!(!stderr.contains("policy reloaded"), "{stderr}");
    assert!(
        stderr.contains("fenzi's warnings during the session are in"),
        "{stderr}"
    );
    let log = std::fs::read_to_string(dir.join("audit.log")).unwrap();
    assert!(
        log.contains("fenzi run: policy reloaded from fenzi.yaml: new tool rules for mcp.s"),
        "{log}"
    );
    let records = std::fs::read_to_string(dir.join("audit.jsonl")).unwrap();
    assert!(records.contains("\"decision\":\"reloaded\""), "{records}");
    let _ = std::fs::remove_dir_all(&dir);
}
