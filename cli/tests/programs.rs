//! DESIGN §17 end to end: `fenzi run` attributes each connection from the sandbox to the programs
//! holding its socket, records it, and enforces `programs:`. A plain HTTP server on the host's
//! loopback plays the destination; git, curl and python inside the sandbox are the programs.

use std::process::Command;
use std::sync::atomic::Ordering;

mod run_support;
use run_support::*;

/// The records of the log about `host:port`, parsed.
fn records_about(log: &str, port: u16) -> Vec<serde_json::Value> {
    log.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["port"] == port)
        .collect()
}

const GIT_REMOTE_HTTP: &str = "/usr/lib/git-core/git-remote-http";

/// A `hosts` entry written as a mapping with `programs:` lets git reach its host, and curl (through
/// the proxy, and around it on the transparent path) cannot; each record names the program.
/// Git's HTTP transport is its helper `git-remote-http`, the process that holds the socket: the
/// entry names that executable.
#[test]
fn a_programs_host_entry_lets_git_reach_a_host_curl_cannot() {
    if !sandbox_available() || !have("curl") || !std::path::Path::new("/usr/bin/git").exists() {
        return;
    }
    if !std::path::Path::new(GIT_REMOTE_HTTP).exists() {
        skip(
            "a_programs_host_entry...",
            "no /usr/lib/git-core/git-remote-http here",
        );
        return;
    }
    let (port, hits) = http_server();
    let env = Env::new(
        "git",
        &format!(
            "version: 1\nhosts:\n  - {{host: \"127.0.0.1:{port}\", programs: [{GIT_REMOTE_HTTP}]}}\n"
        ),
    );
    let script = format!(
        "/usr/bin/git ls-remote http://127.0.0.1:{port}/repo.git >/dev/null 2>&1; \
         curl -s -m 5 -o /dev/null -w 'curl=%{{http_code}}\\n' http://127.0.0.1:{port}/x; \
         curl --noproxy '*' -s -m 5 -o /dev/null http://127.0.0.1:{port}/y; echo direct=$?"
    );
    let out = env.run(&["--", "sh", "-c", &script]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("curl=403"), "{stdout}");
    assert!(!stdout.contains("direct=0"), "{stdout}");
    let log = env.audit_log();
    let records = records_about(&log, port);
    let git: Vec<_> = records
        .iter()
        .filter(|r| r["program"]["exe"] == GIT_REMOTE_HTTP)
        .collect();
    assert!(!git.is_empty(), "{log}");
    assert!(git.iter().all(|r| r["decision"] == "allowed"), "{log}");
    assert!(git.iter().all(|r| r["program"]["agent"] == false), "{log}");
    let curl: Vec<_> = records
        .iter()
        .filter(|r| r["program"]["exe"] == "/usr/bin/curl")
        .collect();
    assert_eq!(curl.len(), 2, "curl through the proxy and around it: {log}");
    for r in &curl {
        assert_eq!(r["decision"], "denied", "{log}");
        assert_eq!(r["reason"], "program_not_allowed", "{log}");
        assert_eq!(r["rule"], "hosts[0].programs", "{log}");
        // The pid is the one inside the sandbox (the agent, sh, is 2; the init is 1).
        assert!(r["program"]["pid"].as_u64().unwrap() > 2, "{log}");
        assert_eq!(r["program"]["sha256"].as_str().unwrap().len(), 64, "{log}");
    }
    assert!(
        curl.iter().any(|r| r["method"] == "CONNECT"),
        "the transparent path: {log}"
    );
    // Only git's requests reached the server.
    assert_eq!(hits.load(Ordering::SeqCst), git.len(), "{log}");
    // `fenzi log --program` picks them out.
    let shown = Command::new(&env.fenzi)
        .args(["log", "--program", "/usr/bin/curl"])
        .env("XDG_STATE_HOME", env.dir.join("state"))
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let shown = text(&shown.stdout);
    assert_eq!(shown.lines().count(), 2, "{shown}");
    assert!(
        shown
            .lines()
            .all(|l| l.contains("by /usr/bin/curl") && l.contains("program_not_allowed")),
        "{shown}"
    );
}

/// `programs: [agent]` on an MCP server: the process `fenzi run` started (python, through its
/// shim's `exec`) reaches it; a curl it starts with the same request is refused at the same
/// server; and a socket the agent shares with a child it forked is refused, its record naming
/// both holders.
#[test]
fn an_agents_server_refuses_the_agents_children() {
    if !sandbox_available() || !have("curl") || !have("python3") {
        return;
    }
    let (port, hits) = http_server();
    let env = Env::new(
        "agent",
        &format!(
            "version: 1\nmcp:\n  notes:\n    url: http://127.0.0.1:{port}/mcp\n    \
             tools: {{allow: [read]}}\n    programs: [agent]\n"
        ),
    );
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    std::fs::write(env.dir.join("body.json"), body).unwrap();
    let agent = format!(
        r#"
import os, socket, subprocess, urllib.request, urllib.parse
url = "http://127.0.0.1:{port}/mcp"
body = open("body.json", "rb").read()
def post():
    req = urllib.request.Request(url, data=body, headers={{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}})
    try:
        return urllib.request.urlopen(req, timeout=5).status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception as e:
        return str(e)
print("agent", post(), flush=True)
out = subprocess.run(["curl", "-s", "-m", "5", "-o", "/dev/null", "-w", "%{{http_code}}", "-H", "Content-Type: application/json", "--data-binary", "@body.json", url], capture_output=True, text=True)
print("child", out.stdout, flush=True)
# One socket, two holders: the agent forks a child holding the socket, then connects it (fenzi
# looks when it accepts the connection; a socket shared only after that is not seen, SECURITY.md).
proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
s = socket.socket()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.read(r, 1)
    os._exit(0)
s.connect((proxy.hostname, proxy.port))
s.sendall(("POST " + url + " HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body)).encode() + body)
print("shared", s.recv(12).decode().split(" ")[1], flush=True)
os.write(w, b"x")
os.waitpid(pid, 0)
"#
    );
    std::fs::write(env.dir.join("agent.py"), agent).unwrap();
    let out = env.run(&["--", "python3", "agent.py"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("child 403"), "{stdout}");
    assert!(stdout.contains("shared 403"), "{stdout}");
    let log = env.audit_log();
    let records = records_about(&log, port);
    // (The test's server is no MCP server: the answer to the allowed request is a `failed` record.)
    let posts: Vec<_> = records
        .iter()
        .filter(|r| r["method"] == "POST" && r["decision"] != "failed")
        .collect();
    assert_eq!(posts.len(), 3, "{log}");
    // The agent's own request: allowed, as the agent.
    assert_eq!(posts[0]["decision"], "allowed", "{log}");
    assert_eq!(posts[0]["program"]["agent"], true, "{log}");
    assert_eq!(posts[0]["program"]["pid"], 2, "{log}");
    assert!(
        posts[0]["program"]["exe"]
            .as_str()
            .unwrap()
            .contains("python"),
        "{log}"
    );
    // Its child curl: refused at the same server, by the rule.
    assert_eq!(posts[1]["reason"], "program_not_allowed", "{log}");
    assert_eq!(posts[1]["rule"], "mcp.notes.programs", "{log}");
    assert_eq!(posts[1]["program"]["exe"], "/usr/bin/curl", "{log}");
    assert_eq!(posts[1]["server"], "notes", "{log}");
    assert_eq!(posts[2]["server"], "notes", "{log}");
    // The shared socket: both holders named, refused because one is not the agent.
    assert_eq!(posts[2]["reason"], "program_not_allowed", "{log}");
    let holders = posts[2]["program"]["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 2, "{log}");
    assert!(holders.iter().any(|h| h["agent"] == true), "{log}");
    assert!(holders.iter().any(|h| h["agent"] == false), "{log}");
    // Only the agent's request reached the server.
    assert_eq!(hits.load(Ordering::SeqCst), 1, "{log}");
}

/// `fenzi check`: a `programs:` path where the sandbox can write (here the project's own
/// directory and /tmp) is refused without `sha256`, with its place; pinned, it passes, and a
/// cases file can name the program that sends each case.
#[test]
fn check_refuses_an_unpinned_writable_program_and_runs_program_cases() {
    let sha = "c".repeat(64);
    let env = Env::new("check", "version: 1\n");
    let project_tool = env.dir.join("bin/tool");
    std::fs::write(
        env.dir.join("fenzi.yaml"),
        format!(
            "version: 1\nhosts:\n  - {{host: a.example, programs: [/tmp/tool, {}]}}\n",
            project_tool.display()
        ),
    )
    .unwrap();
    let check = |extra: &[&str]| {
        Command::new(&env.fenzi)
            .args(["check", "--no-machine"])
            .args(extra)
            .current_dir(&env.dir)
            .env("XDG_CONFIG_HOME", env.dir.join("xdg"))
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    };
    let out = check(&[]);
    let stdout = text(&out.stdout) + &text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("fenzi.yaml:3:") && stdout.contains("hosts[0].programs[0]"),
        "{stdout}"
    );
    assert!(stdout.contains("hosts[0].programs[1]"), "{stdout}");
    assert!(
        stdout.contains("is where the sandbox can write"),
        "{stdout}"
    );
    std::fs::write(
        env.dir.join("fenzi.yaml"),
        format!(
            "version: 1\nhosts:\n  - {{host: a.example, programs: [{{path: /tmp/tool, sha256: \"{sha}\"}}, /usr/bin/git]}}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        env.dir.join("cases.yaml"),
        format!(
            "cases:\n  - {{host: a.example, program: /usr/bin/git, expect: allowed}}\n  \
             - {{host: a.example, program: /tmp/tool, sha256: \"{sha}\", expect: allowed}}\n  \
             - {{host: a.example, program: /tmp/tool, expect: denied, reason: program_not_allowed}}\n  \
             - {{host: a.example, program: agent, expect: denied, reason: program_not_allowed, rule: \"hosts[0].programs\"}}\n"
        ),
    )
    .unwrap();
    let out = check(&["--cases", "cases.yaml"]);
    let stdout = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{stdout}");
}
