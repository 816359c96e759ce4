//! `fenzi mcp add` and `fenzi mcp remove` on real files: the table in `testdata/edit/` (every byte
//! outside the edited entry kept, refused edits change nothing), plus what a table cannot show:
//! the file's mode and a symlinked policy file.

mod mcp_support;

use mcp_support::fenzi;
use std::os::unix::fs::PermissionsExt;

#[test]
fn edit_cases() {
    mcp_support::run_dir("edit");
}

#[test]
fn keeps_mode_and_writes_through_a_symlink() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let real = dir.join("policies").join("team.yaml");
    std::fs::create_dir_all(real.parent().unwrap()).unwrap();
    std::fs::write(&real, "version: 1\n").unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::symlink("policies/team.yaml", dir.join("fenzi.yaml")).unwrap();

    let out = fenzi(
        dir,
        &["mcp", "add", "files", "--tool", "read", "--", "srv"],
        None,
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let link = std::fs::symlink_metadata(dir.join("fenzi.yaml")).unwrap();
    assert!(link.file_type().is_symlink(), "the symlink was replaced");
    assert_eq!(
        std::fs::read_to_string(&real).unwrap(),
        "version: 1\nmcp:\n  files:\n    command: [srv]\n    tools:\n      allow: [read]\n"
    );
    let mode = std::fs::metadata(&real).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
}

#[test]
fn config_flag_names_another_project_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("other.yaml"), "version: 1\n").unwrap();
    let out = fenzi(
        dir,
        &[
            "mcp",
            "add",
            "--config",
            "other.yaml",
            "files",
            "--all-tools",
            "--",
            "srv",
        ],
        None,
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.join("fenzi.yaml").exists());
    assert!(
        std::fs::read_to_string(dir.join("other.yaml"))
            .unwrap()
            .contains("files:")
    );
}
