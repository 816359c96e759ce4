//! The audit writer against real files in a temp dir: ordering under concurrency, the hash chain and
//! head, continuing a log, refusing a tampered one, escaping, and failures: a record that cannot be
//! written (a full tmpfs, a file size limit) is refused without leaving a partial line and the chain
//! goes on once there is room, a head that cannot be rewritten lags and catches up, and a partial line
//! that cannot be cut off stops the writer for good. Staged records: written together in seq order by
//! the first of them (or any append), never before, never named by the head before, written when
//! dropped, and refused whole when their batch cannot be written.

use fenzi_policy::Reason;
use fenzi_policy::audit::{self, AuditRecord, Head, Outcome};
use fenzi_proxy::audit::writer::{AuditEntry, AuditError, AuditWriter, Staged, head_path};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn entry(tool: &str) -> AuditEntry {
    AuditEntry {
        path: Some("/mcp".into()),
        server: Some("deepwiki".into()),
        rpc: Some("tools/call".into()),
        tool: Some(tool.into()),
        rpc_id: Some("7".into()),
        ..AuditEntry::new(
            Outcome::Denied,
            Some(Reason::PolicyDenied),
            "POST",
            "mcp.deepwiki.com",
            443,
        )
    }
}

fn read_lines(path: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(path).unwrap();
    assert!(
        bytes.is_empty() || bytes.ends_with(b"\n"),
        "log ends mid-line"
    );
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// The head file's text, read under the writer's lock (it is rewritten in place); empty when no
/// head was written yet.
fn head_text(path: &Path) -> String {
    String::from_utf8(fenzi_proxy::host_files::read_small_file(&head_path(path)).unwrap()).unwrap()
}

fn read_head(path: &Path) -> Head {
    Head::parse(&head_text(path)).unwrap()
}

/// Makes `path` append-only (`chattr +a`; undone with `false`): it can still be appended to, but
/// not truncated. `false` when this process may not (not root, or a file system without the flag);
/// then the caller says why it skips.
fn append_only(path: &Path, on: bool) -> bool {
    set_flag(path, rustix::fs::IFlags::APPEND, on)
}

/// `chattr +i`: no write at all.
const IMMUTABLE: rustix::fs::IFlags = rustix::fs::IFlags::IMMUTABLE;

/// Sets (or, `false`, clears) an inode flag on `path` (see [`append_only`]).
fn set_flag(path: &Path, flag: rustix::fs::IFlags, on: bool) -> bool {
    use rustix::fs::{ioctl_getflags, ioctl_setflags};
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let Ok(flags) = ioctl_getflags(&file) else {
        return false;
    };
    let flags = if on { flags | flag } else { flags - flag };
    ioctl_setflags(&file, flags).is_ok()
}

/// Skips a test that needs [`set_flag`] where it cannot be had, unless this process is root,
/// where it always can (CI runs as root): there it is a failure.
fn need_inode_flags(ok: bool) -> bool {
    if !ok {
        assert!(
            !rustix::process::getuid().is_root(),
            "root cannot set an inode flag (chattr) here"
        );
        eprintln!("skipped: this process cannot set an inode flag (chattr needs root)");
    }
    ok
}

fn verify(path: &Path) -> Result<audit::Verified, audit::ChainError> {
    let head = read_head(path);
    let lines = read_lines(path);
    audit::verify(lines.iter().map(Vec::as_slice), Some(&head))
}

fn records(path: &Path) -> Vec<AuditRecord> {
    read_lines(path)
        .iter()
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

/// The writer thread releases its lock just after the last handle is dropped; wait for that.
fn reopen(path: &Path, session: &str) -> Result<AuditWriter, AuditError> {
    let start = Instant::now();
    loop {
        match AuditWriter::open(path, session) {
            Err(AuditError::Locked { .. }) if start.elapsed() < Duration::from_secs(30) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            other => return other,
        }
    }
}

async fn record_concurrently(w: &AuditWriter, tasks: usize, each: usize) -> Vec<u64> {
    let mut handles = Vec::new();
    for t in 0..tasks {
        let w = w.clone();
        handles.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..each {
                seqs.push(w.append(entry(&format!("tool_{t}_{i}"))).unwrap());
            }
            seqs
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_records_get_consecutive_seqs_and_the_log_verifies_with_its_head() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/audit/s1.jsonl");
    let w = AuditWriter::open(&path, "s1").unwrap();
    let mut seqs = record_concurrently(&w, 16, 25).await;
    w.flush().await.unwrap();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=400).collect::<Vec<u64>>());

    let recs = records(&path);
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r.seq, i as u64 + 1, "file order is seq order");
        assert_eq!(r.session, "s1");
        assert_eq!(r.decision, Outcome::Denied);
        assert_eq!(r.reason.as_deref(), Some("policy_denied"));
        assert!(audit::parse_timestamp(&r.ts).is_some(), "{}", r.ts);
    }
    let v = verify(&path).unwrap();
    assert_eq!(v.records, 400);
    assert_eq!(read_head(&path), v.head.unwrap());
    assert_eq!(read_head(&path).seq, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_id_that_needs_escaping_is_written_as_json_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("odd.jsonl");
    // Quote, backslash, a control character and a bidi override: each escaped in the line.
    let session = "s\"1\\\u{1}\u{202e}";
    let w = AuditWriter::open(&path, session).unwrap();
    record_concurrently(&w, 2, 3).await;
    w.flush().await.unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(r#""session":"s\"1\\\u0001\u202e""#), "{text}");
    assert!(records(&path).iter().all(|r| r.session == session));
    assert_eq!(verify(&path).unwrap().records, 6);
}

#[tokio::test]
async fn the_head_follows_without_an_explicit_flush() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let w = AuditWriter::open(&path, "s").unwrap();
    assert_eq!(w.append(entry("echo")).unwrap(), 1);
    assert_eq!(w.append(entry("echo")).unwrap(), 2);
    // The record is in the file as soon as record() returns.
    assert_eq!(read_lines(&path).len(), 2);
    let start = Instant::now();
    while Head::parse(&head_text(&path)).map(|h| h.seq) != Some(2) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "head never written"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    verify(&path).unwrap();
}

#[tokio::test]
async fn reopening_continues_the_chain_and_a_second_writer_is_locked_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let w = AuditWriter::open(&path, "first").unwrap();
    for _ in 0..3 {
        w.append(entry("echo")).unwrap();
    }
    assert!(matches!(
        AuditWriter::open(&path, "other"),
        Err(AuditError::Locked { .. })
    ));
    w.flush().await.unwrap();
    drop(w);

    let w = reopen(&path, "second").unwrap();
    assert_eq!(w.append(entry("add")).unwrap(), 4);
    assert_eq!(w.append(entry("add")).unwrap(), 5);
    w.flush().await.unwrap();
    let recs = records(&path);
    let sessions: Vec<&str> = recs.iter().map(|r| r.session.as_str()).collect();
    assert_eq!(
        sessions,
        ["first", "first", "first", "second", "second"],
        "one chain across both sessions"
    );
    assert_eq!(verify(&path).unwrap().records, 5);
    assert_eq!(read_head(&path).seq, 5);
}

async fn log_with_three(path: &Path) {
    let w = AuditWriter::open(path, "s").unwrap();
    for t in ["echo", "add", "echo"] {
        w.append(entry(t)).unwrap();
    }
    w.flush().await.unwrap();
    drop(w);
    // Wait until the writer let go of the file.
    drop(reopen(path, "s").unwrap());
}

fn corrupt_problem(path: &Path) -> String {
    match reopen(path, "s") {
        Err(e @ AuditError::Corrupt { .. }) => e.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_log_that_does_not_verify_is_not_continued() {
    let dir = tempfile::tempdir().unwrap();

    let edited = dir.path().join("edited.jsonl");
    log_with_three(&edited).await;
    let text = std::fs::read_to_string(&edited).unwrap();
    std::fs::write(&edited, text.replacen("\"add\"", "\"del\"", 1)).unwrap();
    let msg = corrupt_problem(&edited);
    assert!(
        msg.contains("does not verify") && msg.contains("line 3"),
        "{msg}"
    );
    assert!(msg.contains(&edited.display().to_string()), "{msg}");

    let cut = dir.path().join("cut.jsonl");
    log_with_three(&cut).await;
    let text = std::fs::read_to_string(&cut).unwrap();
    let keep: String = text.split_inclusive('\n').take(2).collect();
    std::fs::write(&cut, keep).unwrap();
    assert!(corrupt_problem(&cut).contains("cut short"));

    let no_head = dir.path().join("nohead.jsonl");
    log_with_three(&no_head).await;
    std::fs::remove_file(head_path(&no_head)).unwrap();
    assert!(corrupt_problem(&no_head).contains("no head file"));

    let partial = dir.path().join("partial.jsonl");
    log_with_three(&partial).await;
    let text = std::fs::read_to_string(&partial).unwrap();
    std::fs::write(&partial, &text[..text.len() - 5]).unwrap();
    assert!(corrupt_problem(&partial).contains("incomplete"));

    // The refused files are left exactly as they were.
    assert_eq!(
        std::fs::read_to_string(&partial).unwrap(),
        text[..text.len() - 5]
    );
}

#[test]
fn a_directory_that_cannot_exist_fails_open() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, "x").unwrap();
    let err = AuditWriter::open(&file.join("audit/s.jsonl"), "s").unwrap_err();
    assert!(matches!(err, AuditError::CreateDir { .. }), "{err}");
    assert!(err.to_string().contains("plain-file"), "{err}");

    let err = AuditWriter::open(dir.path(), "s").unwrap_err();
    assert!(
        matches!(err, AuditError::Open { .. } | AuditError::NotAFile { .. }),
        "{err}"
    );
}

/// True when permission bits do not stop us (root, CAP_DAC_OVERRIDE): then read-only cases cannot fail.
fn permissions_ignored(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let probe = dir.join("probe");
    std::fs::write(&probe, "").unwrap();
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o400)).unwrap();
    let writable = std::fs::OpenOptions::new()
        .append(true)
        .open(&probe)
        .is_ok();
    std::fs::remove_file(&probe).unwrap();
    writable
}

#[tokio::test]
async fn read_only_files_and_directories_fail() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    if permissions_ignored(dir.path()) {
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED read_only_files_and_directories_fail: permission bits are not enforced for this user (root)\n"
        );
        return;
    }
    let ro_file: PathBuf = dir.path().join("ro.jsonl");
    std::fs::write(&ro_file, "").unwrap();
    std::fs::set_permissions(&ro_file, std::fs::Permissions::from_mode(0o400)).unwrap();
    assert!(matches!(
        AuditWriter::open(&ro_file, "s"),
        Err(AuditError::Open { .. })
    ));

    // A directory that turns read-only after opening: the head cannot be created, but the records
    // still go through the open file; the head follows once the directory is writable again.
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let path = sub.join("a.jsonl");
    let w = AuditWriter::open(&path, "s").unwrap();
    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o500)).unwrap();
    assert_eq!(w.append(entry("echo")).unwrap(), 1);
    let err = w.flush().await.unwrap_err();
    assert!(
        matches!(
            err,
            AuditError::Head {
                named: 0,
                last: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("no head file yet"), "{err}");
    assert_eq!(w.append(entry("echo")).unwrap(), 2);
    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700)).unwrap();
    w.flush().await.unwrap();
    assert_eq!(read_head(&path).seq, 2);
    assert_eq!(verify(&path).unwrap().records, 2);
}

#[tokio::test]
async fn control_and_invisible_characters_in_fields_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let w = AuditWriter::open(&path, "s").unwrap();
    let hostile = "x\n{\"seq\":99}\r\u{1b}[31m\u{202e}\u{85}\u{2028}\u{0}";
    let e = AuditEntry {
        path: Some(format!("/mcp?{hostile}")),
        ..entry(hostile)
    };
    w.append(e).unwrap();
    w.append(entry("echo")).unwrap();
    w.flush().await.unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    assert_eq!(text.matches('\n').count(), 2, "one line per record");
    for line in text.lines() {
        assert!(!line.chars().any(audit::needs_escape), "{line}");
    }
    let recs = records(&path);
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0].tool.as_deref(), Some(hostile));
    assert_eq!(recs[0].path.as_deref(), Some(&*format!("/mcp?{hostile}")));
    verify(&path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_records_verify() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.jsonl");
    let w = AuditWriter::open(&path, "s").unwrap();
    let mut seqs = record_concurrently(&w, 100, 100).await;
    w.flush().await.unwrap();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), 10_000);
    let v = verify(&path).unwrap();
    assert_eq!(v.records, 10_000);
    assert_eq!(read_head(&path).seq, 10_000);

    // Continuing a big log still verifies it first, and the chain goes on.
    drop(w);
    let w = reopen(&path, "s2").unwrap();
    assert_eq!(w.append(entry("echo")).unwrap(), 10_001);
    w.flush().await.unwrap();
    assert_eq!(verify(&path).unwrap().records, 10_001);
}

#[tokio::test]
async fn a_head_that_is_not_a_file_refuses_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    std::fs::create_dir(head_path(&path)).unwrap();
    let err = AuditWriter::open(&path, "s").unwrap_err();
    assert!(matches!(err, AuditError::Open { .. }), "{err}");
    assert!(err.to_string().contains("a.jsonl.head"), "{err}");
}

#[tokio::test]
async fn dropping_the_last_handle_makes_the_log_durable_and_names_it_in_the_head() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let w = AuditWriter::open(&path, "s").unwrap();
    let w2 = w.clone();
    for _ in 0..3 {
        w.append(entry("echo")).unwrap();
    }
    drop(w);
    // Another handle is still alive: the writer keeps the file (and its lock).
    assert!(matches!(
        AuditWriter::open(&path, "other"),
        Err(AuditError::Locked { .. })
    ));
    assert_eq!(w2.append(entry("add")).unwrap(), 4);
    drop(w2);
    // No flush: the last drop alone syncs, writes the head and lets go of the file.
    let w = reopen(&path, "s2").unwrap();
    assert_eq!(read_head(&path).seq, 4);
    assert_eq!(verify(&path).unwrap().records, 4);
    assert_eq!(w.append(entry("echo")).unwrap(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flush_covers_every_record_written_before_it_while_others_keep_recording() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let w = AuditWriter::open(&path, "s").unwrap();
    let mut tasks = Vec::new();
    for t in 0..8 {
        let w = w.clone();
        let path = path.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..20 {
                let seq = w.append(entry(&format!("t{t}_{i}"))).unwrap();
                w.flush().await.unwrap();
                let head = read_head(&path).seq;
                assert!(
                    head >= seq,
                    "flush returned with head {head} before seq {seq}"
                );
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(read_head(&path).seq, 160);
    assert_eq!(verify(&path).unwrap().records, 160);
}

#[test]
fn the_head_never_names_a_line_that_is_not_in_the_file() {
    const PER_WRITER: usize = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let w = AuditWriter::open(&path, "s").unwrap();
    let finished = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writers: Vec<_> = (0..4)
        .map(|t| {
            let w = w.clone();
            let finished = finished.clone();
            std::thread::spawn(move || {
                for n in 0..PER_WRITER {
                    w.append(entry(&format!("t{t}_{n}"))).unwrap();
                }
                finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            })
        })
        .collect();
    // While the writers run (a fixed amount of work, however slow the machine), read the head, then
    // the log: whatever the head names must already be in the log, with that hash.
    let mut checked = 0;
    let mut highest = 0;
    while finished.load(std::sync::atomic::Ordering::SeqCst) < 4 || checked == 0 {
        let text = head_text(&path);
        if text.is_empty() {
            std::thread::yield_now();
            continue;
        }
        let head = Head::parse(&text).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        // A line still being written may be cut short; the head never names it anyway.
        let complete = &bytes[..bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)];
        let lines: Vec<&[u8]> = complete
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        if let Err(e) = audit::verify(lines, Some(&head)) {
            panic!("head {head:?} against a log of {} bytes: {e}", bytes.len());
        }
        assert!(head.seq >= highest, "the head went backwards");
        highest = head.seq;
        checked += 1;
    }
    for t in writers {
        t.join().unwrap();
    }
    assert!(highest > 0);
}

// --- Failures -------------------------------------------------------------------------------------

/// Waits (up to 30 s, for loaded machines) until `done` holds.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(30), "{what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The lines of the log, which must end with a whole line.
fn whole_lines(bytes: &[u8]) -> Vec<&[u8]> {
    assert!(
        bytes.ends_with(b"\n"),
        "the log ends mid-line: {:?}",
        String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(80)..])
    );
    bytes[..bytes.len() - 1].split(|&b| b == b'\n').collect()
}

#[tokio::test]
async fn a_head_that_cannot_be_rewritten_is_left_behind_and_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let w = AuditWriter::open(&path, "s").unwrap();
    assert_eq!(w.append(entry("echo")).unwrap(), 1);
    w.flush().await.unwrap();
    assert_eq!(read_head(&path).seq, 1);
    // A head the file system refuses to rewrite (immutable), even as root.
    if !need_inode_flags(set_flag(&head_path(&path), IMMUTABLE, true)) {
        return;
    }

    for seq in 2..=4 {
        assert_eq!(w.append(entry("echo")).unwrap(), seq);
    }
    let err = w.flush().await.unwrap_err();
    assert!(
        matches!(
            err,
            AuditError::Head {
                named: 1,
                last: 4,
                ..
            }
        ),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("a.jsonl.head")
            && msg.contains("still names seq 1")
            && msg.contains("on disk"),
        "{msg}"
    );
    // Records go on, and the log verifies with its lagging head.
    assert_eq!(w.append(entry("add")).unwrap(), 5);
    assert_eq!(read_head(&path).seq, 1);
    assert_eq!(verify(&path).unwrap().records, 5);
    assert_eq!(w.refused(), 0);

    // Once the head can be written, the next batch brings it up to date, without a flush.
    assert!(set_flag(&head_path(&path), IMMUTABLE, false));
    assert_eq!(w.append(entry("add")).unwrap(), 6);
    eventually("the head never caught up", || read_head(&path).seq == 6).await;
    w.flush().await.unwrap();
    assert_eq!(verify(&path).unwrap().records, 6);
}

// The cases below need a process of their own: a file size limit applies to the whole process, and a
// tmpfs of our own needs a mount namespace. The parent test runs this test binary again as `child`
// (ignored in ordinary runs) with `FENZI_AUDIT_CHILD` naming the case; the child prints `CHILD OK`.

const CHILD_CASE: &str = "FENZI_AUDIT_CHILD";
const CHILD_DIR: &str = "FENZI_AUDIT_CHILD_DIR";
/// SIGXFSZ would kill the child when a write crosses the file size limit; ignored (inherited across
/// exec), the write fails with EFBIG instead, as a full disk fails with ENOSPC.
const IGNORING_SIGXFSZ: &[&str] = &["sh", "-c", r#"trap "" XFSZ; exec "$@""#, "sh"];
const EFBIG: i32 = 27;
const ENOSPC: i32 = 28;

#[test]
#[ignore = "helper of the failure tests below, run in a process of its own"]
fn child() {
    let Ok(case) = std::env::var(CHILD_CASE) else {
        eprintln!("child: nothing to do (run by the failure tests)");
        return;
    };
    let dir = PathBuf::from(std::env::var(CHILD_DIR).unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match case.as_str() {
            "fsize" => short_write_case(&dir).await,
            "torn" => uncuttable_case(&dir).await,
            "tmpfs" => full_disk_case(&dir).await,
            "batch" => refused_batch_case(&dir).await,
            other => panic!("unknown case {other}"),
        }
    });
    println!("CHILD OK {case}");
}

/// Runs `child` for `case` under `wrapper` (a command line that ends by running what follows it).
fn run_child(case: &str, dir: &Path, wrapper: &[&str]) -> std::process::Output {
    std::process::Command::new(wrapper[0])
        .args(&wrapper[1..])
        .arg(std::env::current_exe().unwrap())
        .args([
            "child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_CASE, case)
        .env(CHILD_DIR, dir)
        .output()
        .unwrap()
}

fn assert_child_ok(case: &str, out: &std::process::Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(&format!("CHILD OK {case}")),
        "child `{case}`: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
}

/// Runs `case` in a child process of its own (the file size limit it sets must not reach the other
/// tests), with SIGXFSZ ignored, so that a write past the limit fails with EFBIG instead of killing it.
fn run_over_a_size_limit(case: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = run_child(case, dir.path(), IGNORING_SIGXFSZ);
    assert_child_ok(case, &out);
}

/// A new log at `path` with `records` records, flushed, and its bytes.
async fn flushed_log(path: &Path, records: u64) -> (AuditWriter, Vec<u8>) {
    let w = AuditWriter::open(path, "s").unwrap();
    for seq in 1..=records {
        assert_eq!(w.append(entry("echo")).unwrap(), seq);
    }
    w.flush().await.unwrap();
    let whole = std::fs::read(path).unwrap();
    (w, whole)
}

/// Sets this process's soft file size limit (`None`: back to the hard limit).
fn limit_file_size(bytes: Option<u64>) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let hard = getrlimit(Resource::Fsize).maximum;
    let current = bytes.or(hard);
    setrlimit(
        Resource::Fsize,
        Rlimit {
            current,
            maximum: hard,
        },
    )
    .unwrap();
}

/// Takes the append-only flag off again, so the test's directory can be removed.
struct UndoAppendOnly(PathBuf);

impl Drop for UndoAppendOnly {
    fn drop(&mut self) {
        append_only(&self.0, false);
    }
}

fn os_error(err: &AuditError) -> Option<i32> {
    match err {
        AuditError::Write { error, .. } | AuditError::Torn { error, .. } => error.raw_os_error(),
        _ => None,
    }
}

#[test]
fn a_short_write_is_cut_off_the_record_refused_and_the_chain_goes_on() {
    run_over_a_size_limit("fsize");
}

/// A file size limit 100 bytes past the end of the log: the next line's write(2) stores 100 bytes
/// and returns, and the write of the rest fails (EFBIG).
async fn short_write_case(dir: &Path) {
    use std::io::Write;
    let path = dir.join("a.jsonl");
    let (w, whole) = flushed_log(&path, 3).await;
    limit_file_size(Some(whole.len() as u64 + 100));

    // The premise: a write across the limit stores its first part (on a copy of the log).
    let probe = dir.join("probe");
    std::fs::write(&probe, &whole).unwrap();
    let mut copy = std::fs::OpenOptions::new()
        .append(true)
        .open(&probe)
        .unwrap();
    assert_eq!(copy.write(&[b'x'; 300]).unwrap(), 100, "a short write");
    assert_eq!(copy.write(b"x").unwrap_err().raw_os_error(), Some(EFBIG));

    for _ in 0..3 {
        let err = w.append(entry("refused")).unwrap_err();
        assert!(
            matches!(err, AuditError::Write { .. }) && os_error(&err) == Some(EFBIG),
            "{err}"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            whole,
            "the log is left as it was, without the part of the line that was written"
        );
    }
    assert_eq!(w.refused(), 3);

    // Room again: the chain goes on from the last whole record, with no gap in seq.
    limit_file_size(None);
    assert_eq!(w.append(entry("after")).unwrap(), 4);
    w.flush().await.unwrap();
    assert_eq!(verify(&path).unwrap().records, 4);
    assert_eq!(read_head(&path).seq, 4);
    let tools: Vec<String> = records(&path)
        .into_iter()
        .map(|r| r.tool.unwrap())
        .collect();
    assert_eq!(tools, ["echo", "echo", "echo", "after"]);
    drop(w);
    let w = reopen(&path, "s2").unwrap();
    assert_eq!(w.append(entry("echo")).unwrap(), 5);
    w.flush().await.unwrap();
    assert_eq!(verify(&path).unwrap().records, 5);
}

#[test]
fn a_partial_line_that_cannot_be_cut_off_stops_the_writer_for_good() {
    run_over_a_size_limit("torn");
}

/// The log is made append-only (`chattr +a`) after two records, so the cut after a short write
/// fails (EPERM).
async fn uncuttable_case(dir: &Path) {
    let path = dir.join("a.jsonl");
    let w = AuditWriter::open(&path, "s").unwrap();
    for seq in 1..=2 {
        assert_eq!(w.append(entry("echo")).unwrap(), seq);
    }
    let whole = std::fs::read(&path).unwrap();
    if !need_inode_flags(append_only(&path, true)) {
        return;
    }
    let _undo = UndoAppendOnly(path.clone());
    limit_file_size(Some(whole.len() as u64 + 100));

    let err = w.append(entry("torn")).unwrap_err();
    assert!(
        matches!(err, AuditError::Torn { last: 2, len, .. } if len == whole.len() as u64),
        "{err}"
    );
    assert_eq!(os_error(&err), Some(EFBIG), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("mid-line after seq 2")
            && msg.contains(&format!("truncate -s {} {}", whole.len(), path.display())),
        "{msg}"
    );
    // Stopped for good: even with room again nothing may follow the partial line.
    limit_file_size(None);
    for _ in 0..2 {
        let err = w.append(entry("after")).unwrap_err();
        assert!(
            matches!(&err, AuditError::Unavailable { first, .. } if matches!(**first, AuditError::Torn { .. })),
            "{err}"
        );
    }
    let err = w.flush().await.unwrap_err();
    assert!(matches!(err, AuditError::Unavailable { .. }), "{err}");
    assert_eq!(w.refused(), 3);
    let now = std::fs::read(&path).unwrap();
    assert_eq!(
        now.len(),
        whole.len() + 100,
        "only the partial line was added"
    );
    assert!(now.starts_with(&whole));
    // What the repair keeps verifies.
    assert_eq!(audit::verify(whole_lines(&whole), None).unwrap().records, 2);
}

#[test]
fn a_full_disk_refuses_records_and_service_resumes_once_there_is_room() {
    let dir = tempfile::tempdir().unwrap();
    let mount = r#"mount -t tmpfs -o size=128k,mode=0700 tmpfs "$0" && exec "$@""#;
    // Unprivileged (a user namespace) first; as root without user namespaces, a mount namespace.
    let mut tried = Vec::new();
    for unshare in [&["--user", "--map-root-user", "--mount"][..], &["--mount"]] {
        let probe = std::process::Command::new("unshare")
            .args(unshare)
            .args(["sh", "-c", mount, &dir.path().display().to_string(), "true"])
            .output();
        match probe {
            Ok(out) if out.status.success() => {
                let mut wrapper = vec!["unshare"];
                wrapper.extend_from_slice(unshare);
                wrapper.extend_from_slice(&["sh", "-c", mount]);
                let target = dir.path().display().to_string();
                wrapper.push(&target);
                let out = run_child("tmpfs", dir.path(), &wrapper);
                assert_child_ok("tmpfs", &out);
                return;
            }
            Ok(out) => tried.push(format!(
                "unshare {}: {}",
                unshare.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Err(e) => tried.push(format!("unshare: {e}")),
        }
    }
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED a_full_disk_refuses_records_and_service_resumes_once_there_is_room: no tmpfs of our own ({})\n",
        tried.join("; ")
    );
}

/// `dir` is a 128 KiB tmpfs that only this process sees.
async fn full_disk_case(dir: &Path) {
    use std::io::Write;
    let path = dir.join("audit/a.jsonl");
    let (w, _) = flushed_log(&path, 5).await;
    let mut fill = std::fs::File::create(dir.join("fill")).unwrap();
    loop {
        if let Err(e) = fill.write_all(&[0; 4096]) {
            assert_eq!(e.raw_os_error(), Some(ENOSPC), "{e}");
            break;
        }
    }
    drop(fill);

    // The log's last page still has room; records go there until one crosses its end.
    let mut written: u64 = 5;
    let err = loop {
        match w.append(entry("while_full")) {
            Ok(seq) => {
                written += 1;
                assert_eq!(seq, written);
                assert!(written < 100, "the full disk never refused a record");
            }
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, AuditError::Write { .. }) && os_error(&err) == Some(ENOSPC),
        "{err}"
    );
    let at_refusal = std::fs::read(&path).unwrap();
    assert_eq!(whole_lines(&at_refusal).len() as u64, written);
    for _ in 0..3 {
        let err = w.append(entry("refused")).unwrap_err();
        assert!(os_error(&err) == Some(ENOSPC), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), at_refusal);
    }
    // The records are durable, and the head follows them: it is rewritten in place, in the page
    // it already has, so a full disk does not hold it back.
    w.flush().await.unwrap();
    let head = read_head(&path);
    assert_eq!(head.seq, written);
    assert_eq!(
        audit::verify(whole_lines(&at_refusal), Some(&head))
            .unwrap()
            .records as u64,
        written
    );

    // Room again: the next record is written, and the chain and head go on.
    std::fs::remove_file(dir.join("fill")).unwrap();
    assert_eq!(w.append(entry("after")).unwrap(), written + 1);
    w.flush().await.unwrap();
    assert_eq!(verify(&path).unwrap().records as u64, written + 1);
    assert_eq!(read_head(&path).seq, written + 1);
    assert_eq!(w.refused(), 4);
    drop(w);
    let w = reopen(&path, "s2").unwrap();
    assert_eq!(w.append(entry("echo")).unwrap(), written + 2);
    w.flush().await.unwrap();
    assert_eq!(verify(&path).unwrap().records as u64, written + 2);
}

fn tools(path: &Path) -> Vec<String> {
    records(path).into_iter().map(|r| r.tool.unwrap()).collect()
}

#[tokio::test]
async fn staged_records_are_written_together_in_seq_order_by_the_first_to_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let w = AuditWriter::open(&path, "s").unwrap();
    assert_eq!(w.append(entry("before")).unwrap(), 1);
    let staged: Vec<Staged> = ["a", "b", "c"]
        .into_iter()
        .map(|tool| w.stage(entry(tool)).unwrap())
        .collect();
    assert_eq!(
        tools(&path),
        ["before"],
        "nothing staged is in the file yet"
    );
    let mut staged = staged.into_iter();
    let (a, b, c) = (
        staged.next().unwrap(),
        staged.next().unwrap(),
        staged.next().unwrap(),
    );
    // The second to be staged writes first: the whole batch goes, in seq order.
    assert_eq!(b.write().unwrap(), 3);
    assert_eq!(tools(&path), ["before", "a", "b", "c"]);
    assert_eq!(c.write().unwrap(), 4);
    assert_eq!(a.write().unwrap(), 2);
    assert_eq!(tools(&path), ["before", "a", "b", "c"], "written once");
    w.flush().await.unwrap();
    assert_eq!(verify(&path).unwrap().records, 4);
    assert_eq!(read_head(&path).seq, 4);
}

#[tokio::test]
async fn an_append_writes_what_was_staged_before_it_and_a_dropped_record_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let w = AuditWriter::open(&path, "s").unwrap();
    let first = w.stage(entry("staged")).unwrap();
    assert_eq!(w.append(entry("appended")).unwrap(), 2);
    assert_eq!(tools(&path), ["staged", "appended"]);
    assert_eq!(first.write().unwrap(), 1);
    // A request that goes away between staging and writing (its task cancelled) still leaves its
    // record, and the chain stays whole.
    drop(w.stage(entry("dropped")).unwrap());
    assert_eq!(tools(&path), ["staged", "appended", "dropped"]);
    assert_eq!(w.append(entry("after")).unwrap(), 4);
    w.flush().await.unwrap();
    assert_eq!(verify(&path).unwrap().records, 4);
}

#[tokio::test]
async fn the_head_never_names_a_staged_record_before_it_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let w = AuditWriter::open(&path, "s").unwrap();
    assert_eq!(w.append(entry("written")).unwrap(), 1);
    let staged = w.stage(entry("staged")).unwrap();
    eventually("the head names the written record", || {
        Head::parse(&head_text(&path)).is_some_and(|h| h.seq == 1)
    })
    .await;
    // Well past the sync interval: the sync thread ran, and had only the written line to name.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(read_head(&path).seq, 1);
    assert_eq!(verify(&path).unwrap().records, 1);
    assert_eq!(staged.write().unwrap(), 2);
    eventually("the head follows the batch", || read_head(&path).seq == 2).await;
    assert_eq!(verify(&path).unwrap().records, 2);
}

#[test]
fn a_batch_that_cannot_be_written_is_refused_whole_and_the_chain_goes_on() {
    run_over_a_size_limit("batch");
}

/// A file size limit with room for about two lines: a batch of three is written in part (a short
/// write), then refused (EFBIG). Every record in it is refused, the part is cut off, and the next
/// record takes the first refused one's seq.
async fn refused_batch_case(dir: &Path) {
    let path = dir.join("a.jsonl");
    let (w, whole) = flushed_log(&path, 1).await;
    let line = whole.len() as u64;
    limit_file_size(Some(line * 3));

    let staged: Vec<Staged> = (0..3).map(|_| w.stage(entry("refused")).unwrap()).collect();
    for record in staged {
        let err = record.write().unwrap_err();
        assert!(
            matches!(err, AuditError::Write { .. }) && os_error(&err) == Some(EFBIG),
            "{err}"
        );
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        whole,
        "the log is left as it was, without the part of the batch that was written"
    );
    assert_eq!(w.refused(), 3);

    // A batch refused by a later record's append is refused with it, the append included.
    let early = w.stage(entry("refused")).unwrap();
    let _later = w.stage(entry("refused")).unwrap();
    let err = w.append(entry("refused")).unwrap_err();
    assert_eq!(os_error(&err), Some(EFBIG), "{err}");
    assert_eq!(os_error(&early.write().unwrap_err()), Some(EFBIG));
    assert_eq!(std::fs::read(&path).unwrap(), whole);

    limit_file_size(None);
    assert_eq!(w.append(entry("after")).unwrap(), 2);
    w.flush().await.unwrap();
    assert_eq!(verify(&path).unwrap().records, 2);
    assert_eq!(read_head(&path).seq, 2);
    assert_eq!(tools(&path), ["echo", "after"]);
}
