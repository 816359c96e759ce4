//! fenzi writing a lock file while a sandbox holds it read-only (SECURITY.md, "the deputy"; docs/pinning.md): the sandbox protects
//! the lock by mounting it read-only onto itself, and a rename over it on the host would detach
//! that mount inside the sandbox. [`write_lock`] writes in place, so the agent sees what fenzi
//! wrote and still cannot write or replace it.
//!
//! When the kernel refuses user namespaces the test prints a loud SKIPPED line and returns; set
//! `FENZI_REQUIRE_SANDBOX=1` to make that a failure.

use fenzi_policy::json::{JsonLimits, parse};
use fenzi_policy::pins::{Lock, PinnedTool, ServerPins};
use fenzi_proxy::lock_file::trust::TrustRecords;
use fenzi_proxy::lock_file::{read_reviewed, write_lock};
use fenzi_proxy::sandbox::{SandboxSpec, Session};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

fn one_tool_lock() -> Lock {
    let tool = parse(
        br#"{"name":"get_issue","description":"Reads an issue"}"#,
        &JsonLimits::default(),
    )
    .unwrap();
    let mut pins = ServerPins::new();
    pins.insert("get_issue".into(), PinnedTool::from_listed(&tool));
    let mut lock = Lock::default();
    lock.servers.insert("tracker".into(), pins);
    lock
}

#[test]
fn fenzi_writing_the_lock_mid_session_leaves_it_read_only_for_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let lock = project.join("fenzi.lock");
    let records = TrustRecords::in_state_dir(&dir.path().join("state/fenzi"));
    // What `fenzi run` does before the sandbox starts.
    write_lock(&lock, &Lock::default(), Some(&records)).unwrap();
    let inode = std::fs::metadata(&lock).unwrap().ino();

    // The agent says it runs (its mounts are in place), waits for fenzi's write, reads the lock,
    // then tries to change it both ways.
    let script = "touch ready; i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done\n\
         cat fenzi.lock\n\
         if (echo '{}' > fenzi.lock) 2>/dev/null; then echo 'CHANGED write'; else echo 'refused write'; fi\n\
         if (echo '{}' > l.new && mv -f l.new fenzi.lock) 2>/dev/null; then echo 'CHANGED rename'; else echo 'refused rename'; fi\n";
    let mut out = tempfile::tempfile().unwrap();
    let mut spec = SandboxSpec::new("sh")
        .args(["-c", script])
        .envs([(
            "PATH",
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
        )])
        .cwd(&project)
        .read_only([lock.clone()])
        .writable([project.clone()]);
    spec.stdout = Some(OwnedFd::from(out.try_clone().unwrap()));
    let mut session = match Session::start(spec) {
        Ok(session) => session,
        Err(err) if err.namespaces_unavailable() => {
            if std::env::var_os("FENZI_REQUIRE_SANDBOX").is_some_and(|v| v == "1") {
                panic!("the sandbox is required (FENZI_REQUIRE_SANDBOX=1) but cannot run: {err}");
            }
            let _ = writeln!(
                std::io::stderr(),
                "\n*** SKIPPED sandbox test: this kernel refuses user namespaces: {err}\n"
            );
            return;
        }
        Err(err) => panic!("the sandbox did not start: {err}"),
    };

    // fenzi pins a tool mid-session (as a session's first sight or `fenzi mcp pin` would), once
    // the sandbox's mounts are in place: a write before them would prove nothing.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !project.join("ready").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the sandbox never ran"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let pinned = one_tool_lock();
    write_lock(&lock, &pinned, Some(&records)).unwrap();
    std::fs::write(project.join("go"), b"").unwrap();

    let status = session.child.wait().expect("waiting for the sandbox");
    assert!(status.success(), "{status:?}");
    let mut text = String::new();
    out.seek(SeekFrom::Start(0)).unwrap();
    out.read_to_string(&mut text).unwrap();
    // The agent saw fenzi's write (the mount covers the same file) and could change nothing.
    assert!(pinned.to_text().ends_with('\n'));
    assert_eq!(
        text,
        format!("{}refused write\nrefused rename\n", pinned.to_text())
    );
    // On the host: what fenzi wrote, in the same file, still vouched for.
    assert_eq!(std::fs::metadata(&lock).unwrap().ino(), inode);
    let read = read_reviewed(&lock, Some(&records)).unwrap();
    assert_eq!(read.lock, pinned);
    assert!(read.trusted());
}
