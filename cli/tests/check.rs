//! `fenzi check` end to end: the real binary on the bundled policy and case files.

use std::path::PathBuf;
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fenzi(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fenzi"))
        .args(args)
        .current_dir(repo())
        .env(
            "XDG_CONFIG_HOME",
            repo().join("testdata/no-such-config-home"),
        )
        .env("NO_COLOR", "1")
        .output()
        .expect("fenzi runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_demo_policy_passes_its_cases() {
    let o = fenzi(&[
        "check",
        "--config",
        "testdata/policies/demo.yaml",
        "--cases",
        "testdata/cases/demo.cases.yaml",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        stdout(&o),
        String::from_utf8_lossy(&o.stderr)
    );
    let out = stdout(&o);
    assert!(out.contains("policy is valid"), "{out}");
    assert!(out.contains(" 0 failed"), "{out}");
    assert!(!out.contains("FAIL"), "{out}");
}

#[test]
fn wrong_expectations_fail_with_file_and_line() {
    let o = fenzi(&[
        "check",
        "--config",
        "testdata/policies/demo.yaml",
        "--cases",
        "testdata/cases/wrong-expectations.cases.yaml",
        "--format",
        "github",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let errors: Vec<&str> = out.lines().filter(|l| l.starts_with("::error")).collect();
    assert_eq!(errors.len(), 2, "{out}");
    assert!(
        errors[0].contains("file=testdata/cases/wrong-expectations.cases.yaml,line=4,"),
        "{out}"
    );
    assert!(
        errors[0].contains("expected allowed, got denied policy_denied"),
        "{out}"
    );
    assert!(errors[1].contains(",line=8,"), "{out}");
    assert!(
        errors[1].contains("expected denied private_address, got denied host_not_allowed"),
        "{out}"
    );
}

#[test]
fn json_output_is_one_document() {
    let o = fenzi(&[
        "check",
        "--config",
        "testdata/policies/demo.yaml",
        "--cases",
        "testdata/cases/wrong-expectations.cases.yaml",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    assert_eq!(doc["config"]["valid"], true);
    assert_eq!(doc["passed"], 1);
    assert_eq!(doc["failed"], 2);
    assert_eq!(doc["cases"][0]["reason"], "policy_denied");
    assert_eq!(doc["cases"][0]["tool"], "ask_question");
}

#[test]
fn an_invalid_policy_names_file_line_and_key() {
    let dir = std::env::temp_dir().join(format!("fenzi-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("fenzi.yaml");
    std::fs::write(&bad, "version: 1\nmcp:\n  x:\n    url: https://a.example/mcp\n    tools:\n      allow: [a]\n      deny: [a]\n").unwrap();
    let o = fenzi(&["check", "--config", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("fenzi.yaml:6:"), "{out}");
    assert!(out.contains("mcp.x.tools.allow[0]"), "{out}");
    assert!(out.contains("hint:"), "{out}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn usage_errors_exit_2() {
    let missing = fenzi(&["check", "--config", "testdata/policies/no-such-file.yaml"]);
    assert_eq!(missing.status.code(), Some(2));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("no-such-file.yaml") && err.contains("fenzi mcp add"),
        "{err}"
    );
    // With --format json, a usage error is a JSON document too.
    let json = fenzi(&[
        "check",
        "--config",
        "testdata/policies/no-such-file.yaml",
        "--format",
        "json",
    ]);
    assert_eq!(json.status.code(), Some(2));
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no-such-file.yaml")
    );

    let malformed = fenzi(&[
        "check",
        "--config",
        "testdata/policies/demo.yaml",
        "--cases",
        "testdata/cases/malformed.cases.yaml",
    ]);
    assert_eq!(malformed.status.code(), Some(2));
    let err = String::from_utf8_lossy(&malformed.stderr);
    assert!(err.contains("malformed.cases.yaml:2:"), "{err}");
    assert!(err.contains("exactly one of `server` or `host`"), "{err}");

    let bad_flag = fenzi(&["check", "--format", "xml"]);
    assert_eq!(bad_flag.status.code(), Some(2));
}

/// A project with one pinned server and, when `lock` is given, that text as its `fenzi.lock`.
fn pinned_project(lock: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("fenzi.yaml"),
        "version: 1\nmcp:\n  tracker:\n    url: https://tracker.example.com/mcp\n    pin: true\n    tools:\n      allow: [get_issue]\n      allow_annotated: [read_only]\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("cases.yaml"),
        r#"cases:
  - name: a pinned read-only tool is allowed by its annotation
    server: tracker
    body: {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_issues"}}
    expect: allowed
  - name: a tool the lock does not hold is refused as changed
    server: tracker
    body: {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "get_issue"}}
    expect: denied
    reason: tool_changed
"#,
    )
    .unwrap();
    if let Some(lock) = lock {
        std::fs::write(dir.path().join("fenzi.lock"), lock).unwrap();
    }
    dir
}

fn check_in(dir: &std::path::Path, format: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fenzi"))
        .args([
            "check",
            "--no-machine",
            "--cases",
            "cases.yaml",
            "--format",
            format,
        ])
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .expect("fenzi runs")
}

#[test]
fn a_pinned_server_without_a_lock_entry_fails_with_the_pin_command() {
    let dir = pinned_project(None);
    let o = check_in(dir.path(), "text");
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.contains("server tracker is pinned") && out.contains("fenzi mcp pin tracker"),
        "{out}"
    );
    let o = check_in(dir.path(), "github");
    let out = stdout(&o);
    assert!(
        out.contains("::error file=fenzi.yaml,line=3") && out.contains("fenzi mcp pin tracker"),
        "{out}"
    );
    // A lock that is not a lock is named, not ignored.
    let dir = pinned_project(Some("{\"version\": 1}"));
    let o = check_in(dir.path(), "json");
    assert_eq!(o.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let message = doc["config"]["errors"][0]["message"].as_str().unwrap();
    assert!(message.contains("fenzi.lock"), "{message}");
}

#[test]
fn cases_run_against_the_pinned_definitions() {
    use fenzi_policy::json::{JsonLimits, parse};
    use fenzi_policy::pins::{Lock, PinnedTool, ServerPins};
    let tool = parse(
        br#"{"name":"list_issues","description":"Lists issues","annotations":{"readOnlyHint":true}}"#,
        &JsonLimits::default(),
    )
    .unwrap();
    let mut pins = ServerPins::new();
    pins.insert("list_issues".into(), PinnedTool::from_listed(&tool));
    let mut lock = Lock::default();
    lock.servers.insert("tracker".into(), pins);
    let dir = pinned_project(Some(&lock.to_text()));
    let o = check_in(dir.path(), "text");
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("2 passed, 0 failed"), "{out}");
}

#[test]
fn endless_or_huge_inputs_are_refused_by_size_before_they_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let huge = dir.path().join("huge.yaml");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(50 * 1024 * 1024)
        .unwrap();
    let fifo = dir.path().join("fifo.yaml");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    // A writer that never stops: the reader must stop by itself.
    let writer_path = fifo.clone();
    std::thread::spawn(move || {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(writer_path)
            .unwrap();
        let chunk = vec![b'#'; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
    });
    for (path, what) in [
        ("/dev/zero".to_string(), "/dev/zero"),
        (huge.display().to_string(), "a 50 MB file"),
        (fifo.display().to_string(), "a FIFO"),
    ] {
        let started = std::time::Instant::now();
        let o = fenzi(&["check", "--no-machine", "--config", &path]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{what}: {err}");
        assert!(err.contains("larger than 4 MiB"), "{what}: {err}");
        assert!(started.elapsed().as_secs() < 10, "{what} took too long");
    }
    // The cases file is bounded the same way.
    let o = fenzi(&[
        "check",
        "--config",
        "testdata/policies/demo.yaml",
        "--no-machine",
        "--cases",
        "/dev/zero",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("larger than 4 MiB"));
}

/// Servers by path: `fenzi check` decides each case by the entry whose path it names, on a host
/// with two servers, and a path no entry has is denied (`testdata/cases/paths.cases.yaml`).
#[test]
fn two_servers_on_one_host_are_checked_by_path() {
    let o = fenzi(&[
        "check",
        "--config",
        "testdata/policies/paths.yaml",
        "--cases",
        "testdata/cases/paths.cases.yaml",
    ]);
    let out = stdout(&o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains(" 0 failed"), "{out}");
    // A wrong expectation about which entry decides fails.
    let tmp = tempfile::tempdir().unwrap();
    let cases = tmp.path().join("cases.yaml");
    std::fs::write(
        &cases,
        "cases:\n  - {server: full, path: /mcp/readonly, tool: create_issue, expect: allowed}\n",
    )
    .unwrap();
    let o = fenzi(&[
        "check",
        "--config",
        "testdata/policies/paths.yaml",
        "--cases",
        cases.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("mcp.readonly default deny"),
        "{}",
        stdout(&o)
    );
}

/// `secrets:` on a case is checked: a command server's secret is never swapped into the agent's
/// requests (DESIGN §18), and a case claiming it would be fails, naming what was swapped.
#[test]
fn a_wrong_secrets_expectation_fails_and_says_what_was_swapped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        repo().join("testdata/policies/demo.yaml"),
        dir.path().join("fenzi.yaml"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("cases.yaml"),
        r#"cases:
  - name: claims the command server's secret reaches it through the agent
    server: droplets
    tool: droplet-list
    secrets: [DIGITALOCEAN_API_TOKEN]
    expect: allowed
  - name: claims no secret on a secret's host
    host: api.anthropic.com
    secrets: []
    expect: allowed
  - name: right about the token
    server: linear
    tool: get_issue
    secrets: [MCP_LINEAR]
    expect: allowed
"#,
    )
    .unwrap();
    let o = check_in(dir.path(), "text");
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.contains(
            "FAIL  cases.yaml:2  claims the command server's secret reaches it through the agent: \
             allowed, swapping none (expected allowed, swapping DIGITALOCEAN_API_TOKEN;"
        ),
        "{out}"
    );
    assert!(
        out.contains("allowed, swapping ANTHROPIC_API_KEY (expected allowed, swapping none;"),
        "{out}"
    );
    assert!(out.contains("1 passed, 2 failed"), "{out}");
    let o = check_in(dir.path(), "json");
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    assert_eq!(doc["cases"][0]["secrets"], serde_json::json!([]));
    assert_eq!(
        doc["cases"][0]["expected_secrets"],
        serde_json::json!(["DIGITALOCEAN_API_TOKEN"])
    );
    assert_eq!(
        doc["cases"][2]["secrets"],
        serde_json::json!(["MCP_LINEAR"])
    );
}
