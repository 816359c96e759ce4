//! `fenzi doctor` on this machine: a real trial sandbox, real directories with the modes the test
//! gives them, and a doctor run inside a sandbox, where a nested sandbox is refused, for the
//! failing path.

use fenzi_proxy::sandbox::{SandboxSpec, Session};
use serde_json::Value;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const FENZI: &str = env!("CARGO_BIN_EXE_fenzi");

fn sandbox_required() -> bool {
    std::env::var_os("FENZI_REQUIRE_SANDBOX").is_some_and(|v| v == "1")
}

/// A home with private XDG directories, and `claude` on PATH.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["config", "state", "run", "bin"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
            std::fs::set_permissions(dir.path().join(sub), std::fs::Permissions::from_mode(0o700))
                .unwrap();
        }
        let claude = dir.path().join("bin/claude");
        std::fs::write(&claude, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
        Home { dir }
    }

    fn path(&self, sub: &str) -> std::path::PathBuf {
        self.dir.path().join(sub)
    }

    fn doctor(&self, args: &[&str]) -> (i32, String) {
        let out = Command::new(FENZI)
            .arg("doctor")
            .args(args)
            .env_clear()
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.path("config"))
            .env("XDG_STATE_HOME", self.path("state"))
            .env("XDG_RUNTIME_DIR", self.path("run"))
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", self.path("bin").display()),
            )
            .env("FENZI_CREDSTORE", "memory")
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8(out.stdout).unwrap(),
        )
    }
}

fn finding<'a>(doc: &'a Value, check: &str) -> &'a Value {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == check)
        .unwrap_or_else(|| panic!("no `{check}` in {doc}"))
}

#[test]
fn on_this_machine_fenzi_run_can_isolate() {
    let home = Home::new();
    let (code, out) = home.doctor(&["--json"]);
    let doc: Value = serde_json::from_str(&out).unwrap();
    if code != 0 && !sandbox_required() {
        eprintln!("*** SKIPPED: this machine cannot isolate: {out}");
        return;
    }
    assert_eq!(code, 0, "{out}");
    assert_eq!(doc["can_isolate"], true);
    for check in [
        "sandbox",
        "user namespaces",
        "landlock",
        "seccomp",
        "runtime directory",
    ] {
        assert_eq!(finding(&doc, check)["status"], "ok", "{check}: {out}");
    }
    assert!(
        finding(&doc, "landlock")["found"]
            .as_str()
            .unwrap()
            .starts_with("ABI "),
        "{out}"
    );
    // The memory store works but keeps nothing: reported as working, and says so.
    assert!(
        finding(&doc, "keyring")["found"]
            .as_str()
            .unwrap()
            .contains("not kept")
    );
    let agents: Vec<&str> = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["check"] == "agent")
        .map(|c| c["found"].as_str().unwrap())
        .collect();
    let claude = format!("claude: {}", home.path("bin/claude").display());
    assert!(agents.contains(&claude.as_str()), "{agents:?}");
    assert!(agents.contains(&"codex: not on PATH"), "{agents:?}");
}

#[test]
fn a_shared_runtime_directory_fails_and_a_shared_state_directory_warns() {
    let home = Home::new();
    std::fs::create_dir(home.path("run/fenzi")).unwrap();
    std::fs::set_permissions(
        home.path("run/fenzi"),
        std::fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    std::fs::create_dir_all(home.path("state/fenzi/audit")).unwrap();
    std::fs::set_permissions(
        home.path("state/fenzi/audit"),
        std::fs::Permissions::from_mode(0o775),
    )
    .unwrap();
    let (code, out) = home.doctor(&["--json"]);
    assert_eq!(code, 1, "{out}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["can_isolate"], false);
    let run = finding(&doc, "runtime directory");
    assert_eq!(run["status"], "fail", "{out}");
    assert!(run["found"].as_str().unwrap().contains("mode 777"), "{out}");
    assert!(run["fix"].as_str().unwrap().contains("chmod go-w"), "{out}");
    assert_eq!(finding(&doc, "state directory")["status"], "warn", "{out}");

    // The same as text: a FAIL line, its fix, and the verdict.
    let (code, text) = home.doctor(&[]);
    assert_eq!(code, 1);
    assert!(text.contains("FAIL  runtime directory"), "{text}");
    assert!(text.contains("fix: chown"), "{text}");
    assert!(
        text.contains("cannot isolate a command on this machine"),
        "{text}"
    );
}

#[test]
fn inside_a_sandbox_a_nested_one_is_refused_and_doctor_says_which_step() {
    let out = tempfile::tempfile().unwrap();
    let mut spec = SandboxSpec::new(FENZI)
        .args(["doctor", "--json"])
        .envs([
            ("PATH", "/usr/bin:/bin"),
            ("HOME", "/nonexistent"),
            ("FENZI_CREDSTORE", "memory"),
        ])
        .cwd("/")
        .writable([Path::new("/tmp")]);
    spec.stdout = Some(OwnedFd::from(out.try_clone().unwrap()));
    let mut session = match Session::start(spec) {
        Ok(s) => s,
        Err(e) if e.namespaces_unavailable() && !sandbox_required() => {
            eprintln!("*** SKIPPED: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let status = session.child.wait().unwrap();
    let mut out = out;
    let mut text = String::new();
    out.seek(SeekFrom::Start(0)).unwrap();
    out.read_to_string(&mut text).unwrap();
    assert_eq!(fenzi_proxy::sandbox::exit_code(status), 1, "{text}");
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["can_isolate"], false);
    let sandbox = finding(&doc, "sandbox");
    assert_eq!(sandbox["status"], "fail", "{text}");
    assert!(
        sandbox["found"].as_str().unwrap().contains("failed"),
        "the refusal names the step: {text}"
    );
    assert!(sandbox["fix"].is_string(), "{text}");
}

#[test]
fn version_names_the_commit_and_the_build() {
    let out = Command::new(FENZI).arg("--version").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8(o.stdout).unwrap().trim().to_owned());
    let commit = head.unwrap_or_else(|| "unknown".to_owned());
    assert_eq!(
        text.trim(),
        format!(
            "fenzi {} (commit {commit}, debug build, not profile-guided)",
            env!("CARGO_PKG_VERSION")
        )
    );
}
