//! A running `fenzi proxy` reloads its policy files (README, "Reloading the policy"): the real
//! binary in front of a plain-HTTP MCP server on loopback, its project file (narrowing a machine
//! server) edited in place while it serves. A denied call is allowed within 2 s of the edit that
//! allows it, and the audit log's `reloaded` record carries the new policy's hash, as do the
//! decisions after it. Invalid YAML, a half-written file (completed later), a truncated file and a
//! widening the merge refuses each keep the policy in force with a `reload_refused` record; an
//! edit that narrows the tools and adds a host narrows at once, the host waiting; the same text
//! written again writes nothing. A file replaced by a rename (as editors that save through a
//! temporary file do) is refused once with the reason and never read again, whatever is written
//! there; a folder link on the way re-pointed is refused, and re-pointed back, edits reload again.
//! The log verifies, and `fenzi log` shows the policy records.

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
        Session::start_with(name, |dir, port| {
            std::fs::write(dir.join("fenzi.yaml"), project(port, "read", "github.com")).unwrap()
        })
    }

    /// A session whose `fenzi.yaml` `place` puts in the directory (the upstream's port given).
    fn start_with(name: &str, place: impl FnOnce(&Path, u16)) -> Session {
        let dir = std::env::temp_dir().join(format!("fenzi-reload-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let upstream = mcp_support::plain_mcp_server();
        std::fs::write(
            dir.join("mcp.yaml"),
            MACHINE.replace("PORT", &upstream.to_string()),
        )
        .unwrap();
        place(&dir, upstream);
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

    /// Writes `text` in place (the same file, truncated and written).
    fn edit(&self, text: &str) {
        std::fs::write(self.path(), text).unwrap();
    }

    /// Writes `text` as an editor that saves through a temporary file does.
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

    /// Expects no policy record beyond the first `seen` for a while (four polls and more).
    fn expect_no_record(&self, seen: usize) {
        std::thread::sleep(Duration::from_millis(1200));
        let records = self.policy_records();
        assert_eq!(
            records.len(),
            seen,
            "{:#?}",
            &records[seen.min(records.len())..]
        );
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
    s.edit(&b);
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

    // Invalid YAML.
    s.edit(&format!("{b}  - [unclosed\n"));
    s.expect_refused(&mut seen, "fenzi.yaml:", &hash_b);
    assert_eq!(s.call("echo"), 200);

    // Half a file, a pause, then the rest: refused, then reloaded.
    let c = project(port, "read, echo, add", "github.com");
    let hash_c = s.hash_of(&c);
    let cut = c.find("allow:").unwrap() + 3;
    s.edit(&c[..cut]);
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
    s.edit(&c[..c.len() - 12]);
    s.expect_refused(&mut seen, "fenzi.yaml:", &hash_c);
    // A widening the merge refuses: the machine file denies `drop`.
    s.edit(&project(port, "read, echo, add, drop", "github.com"));
    s.expect_refused(&mut seen, "which the machine file denies", &hash_c);
    // One edit narrowing the tools and adding a host: the tools now, the host next session.
    s.edit(&project(port, "read, echo", "github.com, gitlab.com"));
    let d = project(port, "read, echo", "github.com");
    let hash_d = s.hash_of(&d);
    let r = s.next_policy_record(seen);
    seen += 1;
    assert_eq!(r["decision"], "reloaded", "{r}");
    assert_eq!(
        r["rule"],
        "tool rules of mcp.local; takes effect in the next session: hosts"
    );
    assert_eq!(r["policy"], hash_d.as_str(), "the hosts in force stay");
    assert_eq!(s.call("add"), 403, "the narrowing applies at once");
    assert_eq!(s.call("echo"), 200);
    // What is in force, written again: nothing to record. A mode change alone: the descriptor
    // opened at start still reads the same text, so nothing either.
    s.edit(&d);
    s.expect_no_record(seen);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(s.path(), std::fs::Permissions::from_mode(0o000)).unwrap();
    s.expect_no_record(seen);
    std::fs::set_permissions(s.path(), std::fs::Permissions::from_mode(0o644)).unwrap();

    // Replaced by a rename, as editors that save through a temporary file do. `fenzi proxy`
    // protects nothing, so it follows the path and reads the new file (under `fenzi run`, whose
    // sandbox protected the old file, that is refused: cli/src/reload.rs, cli/tests/run.rs).
    s.replace(&c);
    let r = s.next_policy_record(seen);
    seen += 1;
    assert_eq!(r["decision"], "reloaded", "{r}");
    assert_eq!(r["policy"], hash_c.as_str());
    assert_eq!(s.call("add"), 200);
    // The new file is the one watched from now on: an edit in place is read.
    s.edit(&d);
    let r = s.next_policy_record(seen);
    assert_eq!(r["decision"], "reloaded", "{r}");
    assert_eq!(r["policy"], hash_d.as_str());
    assert_eq!(s.call("add"), 403);
    assert_eq!(s.call("drop"), 403);

    let stderr = s.stderr();
    assert!(
        stderr
            .contains("fenzi proxy: policy reloaded from fenzi.yaml: new tool rules for mcp.local"),
        "{stderr}"
    );
    assert!(
        stderr.contains("; the rest of the change takes effect in the next session (hosts)"),
        "{stderr}"
    );
    assert!(
        stderr
            .contains("fenzi proxy: policy reload refused, the policy in force stays: fenzi.yaml"),
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
    assert!(
        shown.contains(&format!(
            "reloaded policy {} fenzi.yaml: tool rules of mcp.local; takes effect in the next \
             session: hosts",
            &hash_d[..12]
        )),
        "{shown}"
    );
    assert!(shown.contains("reload_refused policy"), "{shown}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `fenzi proxy` follows a link re-pointed on the way to its policy, as the kubelet updates a
/// mounted ConfigMap (a link to a new copy of the files). `fenzi run` refuses the same (its sandbox
/// protected the file the link led to at start): cli/src/reload.rs's tests.
#[test]
fn fenzi_proxy_follows_a_policy_file_reached_through_a_relinked_folder() {
    // fenzi.yaml -> conf/fenzi.yaml, conf -> real.
    let mut s = Session::start_with("relinked", |dir, port| {
        for (folder, allow) in [("real", "read"), ("other", "read, echo")] {
            std::fs::create_dir(dir.join(folder)).unwrap();
            std::fs::write(
                dir.join(folder).join("fenzi.yaml"),
                project(port, allow, "github.com"),
            )
            .unwrap();
        }
        std::os::unix::fs::symlink("real", dir.join("conf")).unwrap();
        std::os::unix::fs::symlink("conf/fenzi.yaml", dir.join("fenzi.yaml")).unwrap();
    });
    let port = s.upstream;
    let hash_a = s.hash_of(&project(port, "read", "github.com"));
    let hash_other = s.hash_of(&project(port, "read, echo", "github.com"));
    assert_eq!(s.call("echo"), 403);
    let dir = s.dir.clone();
    let point = |to: &str| {
        let new = dir.join("conf.new");
        std::os::unix::fs::symlink(to, &new).unwrap();
        std::fs::rename(&new, dir.join("conf")).unwrap();
    };
    // Re-pointed to a folder whose file allows echo: that file is loaded.
    point("other");
    let mut seen = 0;
    let r = s.next_policy_record(seen);
    seen += 1;
    assert_eq!(r["decision"], "reloaded", "{r}");
    assert_eq!(r["policy"], hash_other.as_str());
    assert_eq!(s.call("echo"), 200);
    // Pointed back: the first file again.
    point("real");
    let r = s.next_policy_record(seen);
    assert_eq!(r["decision"], "reloaded", "{r}");
    assert_eq!(r["policy"], hash_a.as_str());
    assert_eq!(s.call("echo"), 403);
    let dir = s.stop();
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
    // Edited in place (a rename over it would be refused: see above).
    std::fs::write(dir.join("fenzi.yaml"), policy("a, b")).unwrap();
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

/// Whether `fenzi run` can sandbox here (user namespaces); says so loudly when it cannot, and
/// fails under `FENZI_REQUIRE_SANDBOX`.
fn sandbox_available(test: &str) -> bool {
    let ok = Command::new("unshare")
        .args(["--user", "--net", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("FENZI_REQUIRE_SANDBOX").is_none(),
            "{test}: user namespaces are unavailable but FENZI_REQUIRE_SANDBOX is set"
        );
        eprintln!("\n*** SKIPPED `{test}`: user namespaces are unavailable on this machine\n");
    }
    ok
}

fn agent_policy(allow: &str) -> String {
    format!(
        "version: 1\nmcp:\n  s:\n    url: https://s.example/mcp\n    tools:\n      allow: [{allow}]\n"
    )
}

/// What came of a sandboxed session (`fenzi run`, the real sandbox) in which `person` edits
/// `fenzi.yaml` once the agent runs, after which the agent tries to write a wider policy there:
/// the agent's output, the session's `policy` records, and its session log.
struct AgentSession {
    agent: String,
    records: Vec<Value>,
    session_log: String,
}

fn agent_session(name: &str, person: impl FnOnce(&Path)) -> AgentSession {
    let dir = std::env::temp_dir().join(format!("fenzi-reload-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fenzi.yaml"), agent_policy("a")).unwrap();
    // The agent says it runs, waits for the person's edit, then writes the policy it wants
    // (`printf` into the file works only where the read-only mount is gone).
    let agent = format!(
        "touch ready; while [ ! -e go ]; do sleep 0.05; done; \
         if printf '{}' > fenzi.yaml 2>/dev/null; then echo agent-wrote; \
         else echo agent-blocked; fi; sleep 2",
        agent_policy("a, b, c").replace('\n', "\\n")
    );
    let child = Command::new(env!("CARGO_BIN_EXE_fenzi"))
        .args(["run", "--", "sh", "-c", &agent])
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
    let start = Instant::now();
    while !dir.join("ready").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the agent never ran"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    person(&dir);
    std::fs::write(dir.join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let audit = std::fs::read_dir(dir.join("state/fenzi/audit"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .expect("the session's audit log");
    let records = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|r: &Value| r["method"] == "POLICY")
        .collect();
    let session = AgentSession {
        agent: String::from_utf8_lossy(&out.stdout).into_owned(),
        records,
        session_log: std::fs::read_to_string(audit.with_extension("log")).unwrap_or_default(),
    };
    let _ = std::fs::remove_dir_all(&dir);
    session
}

#[test]
fn an_agent_writing_a_policy_file_its_owner_replaced_by_a_rename_is_never_reloaded() {
    let test = "an_agent_writing_a_policy_file_its_owner_replaced_by_a_rename_is_never_reloaded";
    if !sandbox_available(test) {
        return;
    }
    // The person saves the same policy as an editor that writes a new file and renames it does.
    let s = agent_session("agent-rename", |dir| {
        let temp = dir.join(".fenzi.yaml.swp");
        std::fs::write(&temp, agent_policy("a")).unwrap();
        std::fs::rename(&temp, dir.join("fenzi.yaml")).unwrap();
    });
    // On kernels that drop the mount with the rename (Linux 3.18 and later) the agent's write
    // succeeds; the session must not take it either way.
    eprintln!("agent: {:?}", s.agent);
    assert_eq!(s.records.len(), 1, "{:#?}", s.records);
    assert_eq!(s.records[0]["decision"], "reload_refused");
    let rule = s.records[0]["rule"].as_str().unwrap();
    assert!(
        rule.starts_with("fenzi.yaml was replaced by another file"),
        "{rule}"
    );
    assert!(
        s.session_log
            .contains("policy reload refused, the policy in force stays: fenzi.yaml was replaced"),
        "{}",
        s.session_log
    );
}

#[test]
fn fenzi_mcp_editing_a_running_sessions_policy_keeps_it_protected_and_reloads() {
    let test = "fenzi_mcp_editing_a_running_sessions_policy_keeps_it_protected_and_reloads";
    if !sandbox_available(test) {
        return;
    }
    let s = agent_session("agent-mcp-edit", |dir| {
        let out = mcp_support::command(
            dir,
            &[
                "mcp",
                "add",
                "s",
                "https://s.example/mcp",
                "--tool",
                "a",
                "--tool",
                "b",
                "--replace",
            ],
        )
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .output()
        .unwrap();
        assert!(out.status.success(), "{out:?}");
        // Taken before the agent is let go.
        let start = Instant::now();
        while std::fs::read_dir(dir.join("state/fenzi/audit"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
            .all(|e| {
                !std::fs::read_to_string(e.path())
                    .unwrap_or_default()
                    .contains("\"reloaded\"")
            })
        {
            assert!(start.elapsed() < Duration::from_secs(5), "no reload");
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    assert_eq!(
        s.agent, "agent-blocked\n",
        "the file is still read-only inside"
    );
    assert_eq!(s.records.len(), 1, "{:#?}", s.records);
    assert_eq!(s.records[0]["decision"], "reloaded");
    assert_eq!(s.records[0]["rule"], "tool rules of mcp.s");
}
