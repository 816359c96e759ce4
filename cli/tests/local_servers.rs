//! Local (`command`) servers under `fenzi run` (DESIGN §18), with the real binary, the real sandbox
//! and the official Python SDK's stdio server (testdata/e2e/mcp_stdio_server.py): fenzi starts the
//! server in a sandbox of its own before the command, the command reaches it at
//! `http://<name>.stdio.fenzi.internal/mcp` (curl inside the sandbox speaks MCP to it), every
//! message is decided per tool, and the server's secret exists only in its own sandbox, swapped on
//! its own host by its own egress.
//!
//! Needs the e2e venv (`scripts/e2e/setup.sh`); skipped without it, required under
//! `FENZI_REQUIRE_SDK` (scripts/e2e/run.sh).

mod mcp_support;
mod run_support;

use run_support::{Env, have, sandbox_available, skip, text};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn sdk_python(test: &str) -> Option<PathBuf> {
    let python = std::env::var_os("FENZI_E2E_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv/bin/python"));
    if python.exists() {
        return Some(python);
    }
    assert!(
        std::env::var_os("FENZI_REQUIRE_SDK").is_none(),
        "{} is missing: run scripts/e2e/setup.sh",
        python.display()
    );
    skip(
        test,
        "the e2e venv is missing (scripts/e2e/setup.sh makes it)",
    );
    None
}

/// A policy whose one local server `local` is the SDK's stdio server run by `python`; `rest` is
/// the entry's other keys, each line indented as the entry's keys are (four spaces).
fn local_policy(python: &Path, rest: &str) -> String {
    format!(
        "version: 1\nmcp:\n  local:\n    command: [{}, {}]\n{rest}",
        python.display(),
        repo().join("testdata/e2e/mcp_stdio_server.py").display(),
    )
}

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// testdata/e2e/http_server.py over TLS with a CA made now; returns it, its port and the CA.
fn https_server(python: &Path, dir: &Path, auth_log: &Path) -> (Killed, u16, PathBuf) {
    let certs = dir.join("certs");
    let made = Command::new(python)
        .arg(repo().join("testdata/e2e/gen_certs.py"))
        .arg(&certs)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", text(&made.stderr));
    let mut child = Command::new(python)
        .arg(repo().join("testdata/e2e/http_server.py"))
        .arg("--cert")
        .arg(certs.join("server.pem"))
        .arg("--key")
        .arg(certs.join("server-key.pem"))
        .arg("--auth-log")
        .arg(auth_log)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = mcp_support::listening_addr(&mut child);
    let port = addr
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("http_server.py listens on {addr:?}"));
    (Killed(child), port, certs.join("test-ca.pem"))
}

/// A shell script for inside the sandbox: an MCP session with the local server `local` over curl,
/// each answer on a line after `NAME:`.
const SESSION: &str = r#"
U=http://local.stdio.fenzi.internal/mcp
H='-H Content-Type:application/json -H Accept:application/json,text/event-stream'
post() { curl -s --max-time 20 $H ${S:+-H "Mcp-Session-Id: $S"} --data "$1" $U; echo; }
S=$(curl -s -D - -o /dev/null $H --data '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}' $U | tr -d '\r' | awk 'tolower($1)=="mcp-session-id:"{print $2}')
echo "session:$S"
post '{"jsonrpc":"2.0","method":"notifications/initialized"}' >/dev/null
echo "echo:$(post '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"through the bridge"}}}')"
echo "denied:$(post '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"delete_everything","arguments":{}}}')"
echo "whoami:$(post '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"whoami","arguments":{}}}')"
echo "fetch:$(post '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"fetch","arguments":{"url":"https://127.0.0.1:UPSTREAM/","token_var":"LOCAL_TOKEN"}}}')"
echo "fetch-direct:$(post '{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"fetch","arguments":{"url":"https://127.0.0.1:UPSTREAM/direct","token_var":"LOCAL_TOKEN","direct":true}}}')"
echo "write:$(post '{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"write","arguments":{"path":"PROJECT/planted-by-server"}}}')"
echo "crash:$(post '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"crash","arguments":{}}}')"
echo "after-crash:$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 $H -H "Mcp-Session-Id: $S" --data '{"jsonrpc":"2.0","id":8,"method":"tools/list"}' $U)"
first=$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 $H --data '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}' $U)
echo "first-initialize:$first"
for i in 1 2 3 4 5 6 7 8; do
  S2=$(curl -s -D - -o /dev/null --max-time 20 $H --data '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}' $U | tr -d '\r' | awk 'tolower($1)=="mcp-session-id:"{print $2}')
  [ -n "$S2" ] && break
  sleep 0.5
done
echo "new-session:$S2"
echo "agent-env:$(env | grep -c LOCAL_TOKEN)"
echo "servers-seen:$(ls -A SERVERS | wc -l)"
echo "agent-direct:$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 https://127.0.0.1:UPSTREAM/)"
"#;

fn line<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no `{name}:` line in\n{out}"))
}

#[test]
fn a_local_server_is_checked_per_tool_and_keeps_its_secret_to_itself() {
    let test = "a_local_server_is_checked_per_tool_and_keeps_its_secret_to_itself";
    let Some(python) = sdk_python(test) else {
        return;
    };
    if !sandbox_available() || !have("curl") {
        return;
    }
    let env = Env::new("local-servers", "");
    let auth_log = env.dir.join("auth.log");
    let (_server, port, ca) = https_server(&python, &env.dir, &auth_log);
    std::fs::write(
        env.dir.join("fenzi.yaml"),
        local_policy(&python, &format!("    secrets: [LOCAL_TOKEN]\n    \
             hosts: [\"127.0.0.1:{port}\"]\n    tools:\n      allow: [echo, whoami, fetch, write, crash]\n      \
             deny: [delete_everything]\n")),
    )
    .unwrap();
    let servers = env.dir.join("state/fenzi/servers");
    let session = SESSION
        .replace("UPSTREAM", &port.to_string())
        .replace("PROJECT", &env.dir.display().to_string())
        .replace("SERVERS", &servers.display().to_string());
    std::fs::write(env.dir.join("session.sh"), session).unwrap();
    let real = "local-real-value-4f1c9e0b7d2a";
    let out = env
        .command(
            &[],
            &[
                "--upstream-ca",
                ca.to_str().unwrap(),
                "--",
                "bash",
                "session.sh",
            ],
        )
        .env("FENZI_SECRET_LOCAL_TOKEN", real)
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(
            "local server local at http://local.stdio.fenzi.internal/mcp (in its own sandbox)"
        ),
        "{stderr}"
    );
    // An allowed call reaches the server and its answer the command.
    assert!(
        !line(&stdout, "session").is_empty(),
        "no session id: {stdout}"
    );
    assert!(
        line(&stdout, "echo").contains("through the bridge"),
        "{stdout}"
    );
    // A denied one never reaches it.
    let denied = line(&stdout, "denied");
    assert!(
        denied.contains("policy_denied") && denied.contains("-31001"),
        "{denied}"
    );
    // The server's environment has its secret (a placeholder); the command's does not.
    let whoami = line(&stdout, "whoami");
    assert!(whoami.contains("LOCAL_TOKEN"), "{whoami}");
    assert_eq!(line(&stdout, "agent-env"), "0", "{stdout}");
    // The server's egress swapped the real value in on its host; the upstream saw it, and nothing
    // the command got holds it.
    assert!(line(&stdout, "fetch").contains("200 hello"), "{stdout}");
    let seen = std::fs::read_to_string(&auth_log).unwrap();
    assert!(
        seen.lines().any(|l| l == format!("Bearer {real}")),
        "{seen:?}"
    );
    assert!(!stdout.contains(real) && !stderr.contains(real));
    // The server may not write the project (its write list is its own state directory).
    assert!(line(&stdout, "write").contains("refused"), "{stdout}");
    assert!(!env.dir.join("planted-by-server").exists());
    // A crash answers the call in flight with an error, ends its session (404), and the next
    // session gets a new process.
    assert!(line(&stdout, "crash").contains("error"), "{stdout}");
    assert_eq!(line(&stdout, "after-crash"), "404", "{stdout}");
    // Right after the crash the server is in its backoff: an immediate answer, 503 or a session.
    assert!(
        ["503", "200"].contains(&line(&stdout, "first-initialize")),
        "{stdout}"
    );
    let again = line(&stdout, "new-session");
    assert!(
        !again.is_empty() && again != line(&stdout, "session"),
        "{stdout}"
    );
    // The server's host is not the command's.
    assert_ne!(line(&stdout, "agent-direct"), "200", "{stdout}");
    // Nor its state: the servers' directory reads empty inside the command's sandbox.
    assert_eq!(line(&stdout, "servers-seen"), "0", "{stdout}");
    assert!(std::fs::read_dir(&servers).unwrap().count() > 0);

    let log = env.audit_log();
    assert!(!log.contains(real), "the real value is in the audit log");
    let records: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let find = |pred: &dyn Fn(&serde_json::Value) -> bool| records.iter().find(|r| pred(r));
    let echo = find(&|r| r["tool"] == "echo").expect("the echo call's record");
    assert_eq!(echo["decision"], "allowed");
    assert_eq!(echo["transport"], "stdio");
    assert_eq!(echo["server"], "local");
    assert_eq!(echo["host"], "local.stdio.fenzi.internal");
    let refused = find(&|r| r["tool"] == "delete_everything").expect("the denied call's record");
    assert_eq!(refused["decision"], "denied");
    assert_eq!(refused["reason"], "policy_denied");
    assert_eq!(refused["transport"], "stdio");
    // The server's own request: recorded as its egress, with the secret it carried.
    let egress = find(&|r| r["local_server"] == "local" && r["method"] == "GET")
        .expect("the server's egress record");
    assert_eq!(egress["port"], port);
    assert_eq!(egress["secrets"], serde_json::json!(["LOCAL_TOKEN"]));
    // The command's own try at that host: refused, and not as the server.
    let direct =
        find(&|r| r["port"] == port && r["local_server"].is_null() && r["decision"] == "denied")
            .expect("the command's refused request to the server's host");
    assert_eq!(direct["reason"], "host_not_allowed");
    // The server's stderr went to the session log.
    let session_log = std::fs::read_dir(env.dir.join("state/fenzi/audit"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "log"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .unwrap_or_default();
    assert!(session_log.contains("fenzi-stdio server"), "{session_log}");
    let verify = Command::new(&env.fenzi)
        .args(["log", "--verify"])
        .env("XDG_STATE_HOME", env.dir.join("state"))
        .output()
        .unwrap();
    assert!(verify.status.success(), "{}", text(&verify.stderr));
}

/// `run: host` (the machine file only): the server runs on the host, outside any sandbox, and is
/// still checked per tool. It can write where the person can; a project file cannot ask for this.
#[test]
fn run_host_in_the_machine_file_runs_on_the_host_still_checked_per_tool() {
    let test = "run_host_in_the_machine_file_runs_on_the_host_still_checked_per_tool";
    let Some(python) = sdk_python(test) else {
        return;
    };
    if !sandbox_available() || !have("curl") {
        return;
    }
    let env = Env::new("local-servers-host", "version: 1\n");
    let machine = env.dir.join("xdg/fenzi");
    std::fs::create_dir_all(&machine).unwrap();
    let machine_file = machine.join("mcp.yaml");
    std::fs::write(
        &machine_file,
        local_policy(
            &python,
            "    run: host\n    tools:\n      \
             allow: [echo, write]\n",
        ),
    )
    .unwrap();
    let session = SESSION
        .replace("UPSTREAM", "9")
        .replace("PROJECT", &env.dir.display().to_string());
    std::fs::write(env.dir.join("session.sh"), session).unwrap();
    let out = env.run(&["--", "bash", "session.sh"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("(on the host (run: host))"), "{stderr}");
    assert!(
        line(&stdout, "echo").contains("through the bridge"),
        "{stdout}"
    );
    assert!(
        line(&stdout, "denied").contains("policy_denied"),
        "{stdout}"
    );
    // Outside the sandbox it writes where the person can.
    assert!(line(&stdout, "write").contains("wrote"), "{stdout}");
    assert!(env.dir.join("planted-by-server").exists());

    // The same entry in the project file is refused before anything starts.
    std::fs::remove_file(&machine_file).unwrap();
    std::fs::write(
        env.dir.join("fenzi.yaml"),
        local_policy(
            &python,
            "    run: host\n    tools:\n      \
             allow: [echo]\n",
        ),
    )
    .unwrap();
    let out = env.run(&["--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("`run: host` is not allowed in a project file"),
        "{}",
        text(&out.stderr)
    );
}

/// `fenzi proxy` starts the policy's local servers too: a client outside any sandbox reaches one
/// through the proxy port at its bridge address, checked per tool and recorded as stdio.
#[test]
fn fenzi_proxy_serves_local_servers_through_its_port() {
    let test = "fenzi_proxy_serves_local_servers_through_its_port";
    let Some(python) = sdk_python(test) else {
        return;
    };
    if !sandbox_available() || !have("curl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("fenzi.yaml"),
        local_policy(&python, "    tools:\n      allow: [echo]\n"),
    )
    .unwrap();
    let audit = dir.path().join("audit.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_fenzi"))
        .args([
            "proxy",
            "--no-machine",
            "--listen",
            "127.0.0.1:0",
            "--audit",
        ])
        .arg(&audit)
        .arg("--ca-dir")
        .arg(dir.path().join("ca"))
        .current_dir(dir.path())
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .env("XDG_RUNTIME_DIR", dir.path().join("runtime"))
        .env("FENZI_CREDSTORE", "memory")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = mcp_support::listening_addr(&mut child);
    let proxy = Killed(child);
    let session = SESSION
        .replace("UPSTREAM", "9")
        .replace("PROJECT", &dir.path().display().to_string())
        .replace("SERVERS", "/nonexistent");
    let out = Command::new("bash")
        .arg("-c")
        .arg(&session)
        .env("HTTP_PROXY", format!("http://{addr}"))
        .env("http_proxy", format!("http://{addr}"))
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(
        line(&stdout, "echo").contains("through the bridge"),
        "{stdout}"
    );
    assert!(
        line(&stdout, "denied").contains("policy_denied"),
        "{stdout}"
    );
    drop(proxy);
    let log = std::fs::read_to_string(&audit).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains(r#""tool":"echo""#) && l.contains(r#""transport":"stdio""#)),
        "{log}"
    );
}

/// The official Python SDK's client inside `fenzi run`, against a local server through fenzi's
/// policy and the bridge (testdata/e2e/bridge_client.py): both protocol eras (the handshake and
/// the 2026-07-28 sessionless one), progress, a sampling request from the server answered, two
/// sessions as two processes, and a crash that fails promptly and recovers.
#[test]
fn the_sdk_client_works_with_a_local_server_through_fenzi() {
    let test = "the_sdk_client_works_with_a_local_server_through_fenzi";
    let Some(python) = sdk_python(test) else {
        return;
    };
    if !sandbox_available() {
        return;
    }
    let env = Env::new("local-servers-sdk", "");
    std::fs::write(
        env.dir.join("fenzi.yaml"),
        local_policy(
            &python,
            "    list: all\n    tools:\n      \
             allow: [echo, add, whoami, progress, ask, crash]\n",
        ),
    )
    .unwrap();
    let client = repo().join("testdata/e2e/bridge_client.py");
    let out = env.run(&[
        "--",
        python.to_str().unwrap(),
        client.to_str().unwrap(),
        "--url",
        "http://local.stdio.fenzi.internal/mcp",
        "--crash",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
    for check in [
        "PASS legacy: a sampling request from the server, answered",
        "PASS auto: progress notifications before the answer",
        "PASS two sessions are two server processes",
        "PASS after the crash a new session starts a new server",
    ] {
        assert!(stdout.contains(check), "{check}\n{stdout}");
    }
    let log = env.audit_log();
    assert!(
        log.lines()
            .filter(|l| l.contains(r#""rpc":"tools/call""#))
            .all(|l| l.contains(r#""transport":"stdio""#)),
        "{log}"
    );
}

/// The servers' state directories are opened the way every directory fenzi opens to a sandbox
/// is (`host_files::private_dir`): a link planted in place of `$XDG_STATE_HOME/fenzi/servers`
/// (by anyone who could write the state directory: another program of this user, an agent given
/// `--allow-write` there in an earlier session) stops the session before any server starts, and
/// nothing is created or written where the link points.
#[test]
fn a_link_in_place_of_the_servers_directory_is_refused() {
    if !sandbox_available() {
        return;
    }
    let env = Env::new(
        "local-servers-link",
        "version: 1\nmcp:\n  local:\n    command: [/bin/cat]\n    tools:\n      allow: [echo]\n",
    );
    let elsewhere = env.dir.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let fenzi_state = env.dir.join("state/fenzi");
    std::fs::create_dir_all(&fenzi_state).unwrap();
    std::os::unix::fs::symlink(&elsewhere, fenzi_state.join("servers")).unwrap();
    let out = env.run(&["--", "true"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("servers"),
        "the refusal names the path: {stderr}"
    );
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing was created through the link"
    );
}
