//! The audit writer against real files in a temp dir: ordering under concurrency, the hash chain and
//! head, continuing a log, refusing a tampered one, failing closed, and escaping.

use fenzi_policy::Reason;
use fenzi_policy::audit::{self, AuditRecord, Head, Outcome};
use fenzi_proxy::audit_writer::{AuditEntry, AuditError, AuditWriter, head_path};
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

fn read_head(path: &Path) -> Head {
    Head::parse(&std::fs::read_to_string(head_path(path)).unwrap()).unwrap()
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
                seqs.push(w.record(entry(&format!("tool_{t}_{i}"))).await.unwrap());
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

#[tokio::test]
async fn the_head_follows_without_an_explicit_flush() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let w = AuditWriter::open(&path, "s").unwrap();
    assert_eq!(w.record(entry("echo")).await.unwrap(), 1);
    assert_eq!(w.record(entry("echo")).await.unwrap(), 2);
    // The record is in the file as soon as record() returns.
    assert_eq!(read_lines(&path).len(), 2);
    let start = Instant::now();
    while !head_path(&path).exists() || read_head(&path).seq != 2 {
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
        w.record(entry("echo")).await.unwrap();
    }
    assert!(matches!(
        AuditWriter::open(&path, "other"),
        Err(AuditError::Locked { .. })
    ));
    w.flush().await.unwrap();
    drop(w);

    let w = reopen(&path, "second").unwrap();
    assert_eq!(w.record(entry("add")).await.unwrap(), 4);
    assert_eq!(w.record(entry("add")).await.unwrap(), 5);
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
        w.record(entry(t)).await.unwrap();
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

#[tokio::test]
async fn a_failure_to_keep_the_head_fails_every_later_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let w = AuditWriter::open(&path, "s").unwrap();
    // A directory where the head file must go: the rename after the first fsync fails, even as root.
    std::fs::create_dir(head_path(&path)).unwrap();
    std::fs::write(head_path(&path).join("x"), "occupied").unwrap();
    assert_eq!(w.record(entry("echo")).await.unwrap(), 1);
    let err = w.flush().await.unwrap_err();
    assert!(matches!(err, AuditError::Head { .. }), "{err}");
    assert!(err.to_string().contains(".head"), "{err}");
    for _ in 0..3 {
        let err = w.record(entry("echo")).await.unwrap_err();
        assert!(matches!(err, AuditError::Unavailable { .. }), "{err}");
        assert!(err.to_string().contains("earlier failure"), "{err}");
    }
    assert!(w.flush().await.is_err());
    assert_eq!(
        read_lines(&path).len(),
        1,
        "nothing written after the failure"
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
        eprintln!("skipped: permission bits are not enforced for this user (root)");
        return;
    }
    let ro_file: PathBuf = dir.path().join("ro.jsonl");
    std::fs::write(&ro_file, "").unwrap();
    std::fs::set_permissions(&ro_file, std::fs::Permissions::from_mode(0o400)).unwrap();
    assert!(matches!(
        AuditWriter::open(&ro_file, "s"),
        Err(AuditError::Open { .. })
    ));

    // A directory that turns read-only after opening: the head cannot be replaced, so records fail.
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let path = sub.join("a.jsonl");
    let w = AuditWriter::open(&path, "s").unwrap();
    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o500)).unwrap();
    w.record(entry("echo")).await.unwrap();
    assert!(w.flush().await.is_err());
    assert!(w.record(entry("echo")).await.is_err());
    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700)).unwrap();
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
    w.record(e).await.unwrap();
    w.record(entry("echo")).await.unwrap();
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
    assert_eq!(w.record(entry("echo")).await.unwrap(), 10_001);
    w.flush().await.unwrap();
    assert_eq!(verify(&path).unwrap().records, 10_001);
}

#[tokio::test]
async fn a_head_that_is_not_a_file_refuses_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    std::fs::create_dir(head_path(&path)).unwrap();
    let err = AuditWriter::open(&path, "s").unwrap_err();
    assert!(matches!(err, AuditError::Read { .. }), "{err}");
    assert!(err.to_string().contains("a.jsonl.head"), "{err}");
}

#[tokio::test]
async fn dropping_the_last_handle_makes_the_log_durable_and_names_it_in_the_head() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let w = AuditWriter::open(&path, "s").unwrap();
    let w2 = w.clone();
    for _ in 0..3 {
        w.record(entry("echo")).await.unwrap();
    }
    drop(w);
    // Another handle is still alive: the writer keeps the file (and its lock).
    assert!(matches!(
        AuditWriter::open(&path, "other"),
        Err(AuditError::Locked { .. })
    ));
    assert_eq!(w2.record(entry("add")).await.unwrap(), 4);
    drop(w2);
    // No flush: the last drop alone syncs, writes the head and lets go of the file.
    let w = reopen(&path, "s2").unwrap();
    assert_eq!(read_head(&path).seq, 4);
    assert_eq!(verify(&path).unwrap().records, 4);
    assert_eq!(w.record(entry("echo")).await.unwrap(), 5);
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
                let seq = w.record(entry(&format!("t{t}_{i}"))).await.unwrap();
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
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                for n in 0..PER_WRITER {
                    rt.block_on(w.record(entry(&format!("t{t}_{n}")))).unwrap();
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
        let Ok(text) = std::fs::read_to_string(head_path(&path)) else {
            std::thread::yield_now();
            continue;
        };
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

#[tokio::test]
async fn a_failed_background_sync_fails_later_records_without_a_flush() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let w = AuditWriter::open(&path, "s").unwrap();
    std::fs::create_dir(head_path(&path)).unwrap();
    std::fs::write(head_path(&path).join("x"), "occupied").unwrap();
    // Records succeed until the background sync has failed to replace the head; then they all fail.
    let start = Instant::now();
    let mut written = 0;
    let err = loop {
        match w.record(entry("echo")).await {
            Ok(seq) => {
                written += 1;
                assert_eq!(seq, written);
            }
            Err(e) => break e,
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the sync failure never reached the writers"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    match &err {
        AuditError::Unavailable { first, .. } => {
            assert!(matches!(**first, AuditError::Head { .. }), "{err}")
        }
        other => panic!("expected Unavailable, got {other}"),
    }
    assert!(w.record(entry("echo")).await.is_err());
    let flush = w.flush().await.unwrap_err();
    assert!(flush.to_string().contains(".head"), "{flush}");
    assert_eq!(read_lines(&path).len() as u64, written);
}
