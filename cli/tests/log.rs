//! `fenzi log` across sessions: with a filter and no `--file` or `--session`, every session's log in
//! the state directory that may hold matching records is read, oldest first.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

fn record(ts: &str, session: &str, decision: &str, reason: Option<&str>, tool: &str) -> String {
    let reason = reason.map_or("null".to_string(), |r| format!("\"{r}\""));
    format!(
        r#"{{"ts":"{ts}","seq":1,"session":"{session}","decision":"{decision}","reason":{reason},"method":"POST","host":"mcp.example.com","port":443,"path":"/mcp","server":"tracker","rpc":"tools/call","tool":"{tool}","rpc_id":"1","secrets":[],"rule":"r","prev":"0000000000000000000000000000000000000000000000000000000000000000"}}"#
    )
}

fn write_log(dir: &Path, session: &str, lines: &[String], age: Duration) {
    let path = dir.join(format!("{session}.jsonl"));
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let file = std::fs::File::options().write(true).open(&path).unwrap();
    file.set_modified(SystemTime::now() - age).unwrap();
}

fn utc(ago: Duration) -> String {
    let ms = (SystemTime::now() - ago)
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    fenzi_policy::audit::format_timestamp(ms as i64)
}

fn fenzi_log(state: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_fenzi"))
        .arg("log")
        .args(args)
        .env("XDG_STATE_HOME", state)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn filters_read_every_session_in_range_and_the_bare_log_the_newest() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().join("fenzi/audit");
    std::fs::create_dir_all(&dir).unwrap();
    let hour = Duration::from_secs(3600);
    // Three days ago: outside --since 1h. Half an hour ago and now: inside.
    write_log(
        &dir,
        "aaaa000000000001",
        &[record(
            &utc(hour * 72),
            "a",
            "denied",
            Some("policy_denied"),
            "old_tool",
        )],
        hour * 72,
    );
    write_log(
        &dir,
        "bbbb000000000002",
        &[
            record(
                &utc(hour / 2),
                "b",
                "denied",
                Some("policy_denied"),
                "delete_b",
            ),
            record(&utc(hour / 2), "b", "allowed", None, "get_b"),
        ],
        hour / 2,
    );
    write_log(
        &dir,
        "cccc000000000003",
        &[record(
            &utc(Duration::ZERO),
            "c",
            "denied",
            Some("tool_changed"),
            "get_c",
        )],
        Duration::ZERO,
    );

    let denied = fenzi_log(state.path(), &["--denied", "--since", "1h"]);
    let lines: Vec<&str> = denied.lines().collect();
    assert_eq!(lines.len(), 2, "{denied}");
    assert!(
        lines[0].contains("tools/call delete_b  policy_denied"),
        "{denied}"
    );
    assert!(
        lines[1].contains("tools/call get_c  tool_changed"),
        "{denied}"
    );

    // Without --since, every session; --tool narrows across them.
    let tools = fenzi_log(state.path(), &["--tool", "*_tool"]);
    assert!(
        tools.contains("old_tool") && tools.lines().count() == 1,
        "{tools}"
    );
    let all_denied = fenzi_log(state.path(), &["--denied"]);
    assert_eq!(all_denied.lines().count(), 3, "{all_denied}");

    // With no filter, the newest session alone, as before.
    let newest = fenzi_log(state.path(), &[]);
    assert_eq!(newest.lines().count(), 1, "{newest}");
    assert!(newest.contains("get_c"), "{newest}");
}

/// `--ocsf` prints one OCSF event per selected record, after the same filters as the other
/// formats, each carrying its stored line in `raw_data`.
#[test]
fn ocsf_prints_one_event_per_selected_record() {
    let state = tempfile::tempdir().unwrap();
    let log = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/ocsf/records.jsonl");
    let log = log.to_str().unwrap();
    let stored = std::fs::read_to_string(log).unwrap();
    let out = fenzi_log(state.path(), &["--file", log, "--ocsf", "--denied"]);
    let events: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let seen: Vec<(u64, &str, &str)> = events
        .iter()
        .map(|e| {
            (
                e["class_uid"].as_u64().unwrap(),
                e["metadata"]["uid"].as_str().unwrap(),
                e["action"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (6003, "a1b2c3d4e5f60718:43", "Denied"),
            (4002, "a1b2c3d4e5f60718:45", "Denied"),
            (6003, "a1b2c3d4e5f60718:50", "Denied"),
        ]
    );
    for e in &events {
        assert_eq!(e["metadata"]["version"], "1.8.0");
        let raw = e["raw_data"].as_str().unwrap();
        assert!(stored.lines().any(|l| l == raw), "{raw}");
    }
    let all = fenzi_log(state.path(), &["--file", log, "--ocsf"]);
    assert_eq!(all.lines().count(), stored.lines().count());

    let both = Command::new(env!("CARGO_BIN_EXE_fenzi"))
        .args(["log", "--file", log, "--ocsf", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        both.status.code(),
        Some(2),
        "--ocsf and --json are one or the other"
    );
}
