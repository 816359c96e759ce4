//! `fenzi proxy --group-readable`, through the real binary: without it `--ca-dir/placeholders.env`
//! is 0600 (only the proxy's user reads it); with it 0640, so that an agent running as another
//! user in the proxy's group (the Kubernetes sidecar of deploy/k8s) can read its placeholders.
//! Either way the file holds the placeholder and never the value.

mod mcp_support;

use mcp_support::{command, random_hex};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// Starts `fenzi proxy` (plus `extra` flags) in `dir` with the secret's value in its environment,
/// waits for it to listen, stops it, and returns the mode and text of placeholders.env.
fn session(dir: &Path, value: &str, extra: &[&str]) -> (u32, String) {
    std::fs::write(
        dir.join("fenzi.yaml"),
        "version: 1\nsecrets:\n  MODEL_KEY:\n    hosts: [api.example.com]\n",
    )
    .unwrap();
    let ca_dir = dir.join("ca");
    let audit = dir.join("audit.jsonl");
    let mut args = vec![
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--audit",
        audit.to_str().unwrap(),
        "--ca-dir",
        ca_dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let mut child = command(dir, &args)
        .env("FENZI_SECRET_MODEL_KEY", value)
        .spawn()
        .unwrap();
    mcp_support::listening_addr(&mut child);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let placeholders = ca_dir.join("placeholders.env");
    let out = (
        mode(&placeholders),
        std::fs::read_to_string(&placeholders).unwrap(),
    );
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(child.wait().unwrap().success());
    out
}

#[test]
fn placeholders_are_private_unless_group_readable_is_asked_for() {
    let value = format!("sk-{}", random_hex());
    for (extra, want) in [(&[][..], 0o600), (&["--group-readable"][..], 0o640)] {
        let tmp = tempfile::tempdir().unwrap();
        let (mode, text) = session(tmp.path(), &value, extra);
        assert_eq!(mode, want, "placeholders.env mode with {extra:?}");
        assert!(text.starts_with("MODEL_KEY="), "{text:?}");
        assert!(
            !text.contains(&value),
            "the value leaked into placeholders.env"
        );
    }
}
