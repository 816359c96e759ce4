//! `fenzi man --out DIR` writes every page, and never through a link left where a page goes.

use std::process::Command;

#[test]
fn pages_are_written_and_a_planted_link_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man");
    std::fs::create_dir(&out).unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "keep me\n").unwrap();
    std::os::unix::fs::symlink(&victim, out.join("fenzi-doctor.1")).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_fenzi"))
        .args(["man", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("fenzi-doctor.1"),
        "the error names the page: {stderr}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");

    std::fs::remove_file(out.join("fenzi-doctor.1")).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_fenzi"))
        .args(["man", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let page = std::fs::read_to_string(out.join("fenzi-doctor.1")).unwrap();
    assert!(
        page.contains(".TH fenzi-doctor"),
        "{}",
        &page[..page.len().min(200)]
    );
    assert!(out.join("fenzi-mcp-login.1").is_file());
}
