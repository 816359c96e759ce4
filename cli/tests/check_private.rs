//! `fenzi check` on private destinations by name: the real binary on a machine file that names
//! internal ranges, the project file that narrows them, and cases that carry resolved addresses.

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

const MACHINE: &str = "testdata/policies/private-machine.yaml";
const PROJECT: &str = "testdata/policies/private-project.yaml";
const CASES: &str = "testdata/cases/private.cases.yaml";

#[test]
fn cases_with_resolved_addresses_get_the_engines_decision() {
    let o = fenzi(&[
        "check",
        "--machine",
        MACHINE,
        "--config",
        PROJECT,
        "--cases",
        CASES,
        "--format",
        "json",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 9, "{out}");
    assert!(cases.iter().all(|c| c["passed"] == true), "{out}");
    let by_name = |name: &str| {
        cases
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no case {name:?}"))
    };
    // An allowed private address is recorded by the range that allowed it.
    assert_eq!(
        by_name("the mirror resolves inside its private range")["rule"],
        "hosts[1].private \"10.20.0.0/16\""
    );
    let outside = by_name("one address outside the ranges refuses the lot");
    assert_eq!(outside["rule"], "hosts[1].private");
    assert_eq!(
        outside["message"],
        "registry.corp.example:443 resolves to 10.30.0.5, an internal address (10.0.0.0/8), \
         outside its private ranges (10.20.0.0/16); to allow it, add 10.30.0.5/32 (or a range \
         holding it) to hosts[1].private"
    );
    // The project's narrowing is what decides the MCP server's addresses.
    let narrowed = by_name("the rest of the machine's range is closed by the project");
    assert!(
        narrowed["message"]
            .as_str()
            .unwrap()
            .contains("outside its private ranges (10.1.2.3/32)"),
        "{narrowed}"
    );
}

#[test]
fn the_machine_file_as_a_project_file_is_refused() {
    let o = fenzi(&["check", "--no-machine", "--config", MACHINE]);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    let all = format!("{out}{err}");
    assert!(
        all.contains(
            "private-machine.yaml:8:35: hosts[1].private: the project names private ranges \
             (10.20.0.0/16) for registry.corp.example; only the machine file may"
        ),
        "{all}"
    );
    assert_eq!(all.matches("only the machine file may").count(), 3, "{all}");
}
