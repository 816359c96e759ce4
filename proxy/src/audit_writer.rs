//! The audit log writer: appends hash-chained records (DESIGN.md §5) to one JSON Lines file and keeps
//! the head file beside it.
//!
//! Writing happens in the caller. [`AuditWriter::record`] takes one lock, assigns the sequence number,
//! serialises the record with its `prev` hash and writes the line with write(2) before it returns. So a
//! request is never forwarded before its record is in the file, sequence numbers follow file order, and
//! a failed write is seen by exactly the caller that must deny. The write is done inline, not through
//! `spawn_blocking` or another thread: one write(2) of one line into the page cache takes microseconds,
//! and handing it to a thread and back cost more than the write itself (two cross-thread wake-ups per
//! record, see docs/benchmarks.md). `record` stays `async` for its callers; it never yields.
//!
//! Durability is batched and off the acknowledgement path: a background thread (`fenzi-audit-sync`,
//! a plain thread because every step is blocking file I/O and `open` may run before any runtime
//! exists) calls fdatasync on a duplicate of the log's descriptor at most [`SYNC_INTERVAL`] after the
//! first unsynced record, or as soon as [`SYNC_RECORDS`] are unsynced, and then rewrites `<log>.head`
//! atomically (temp file, fsync, rename). Before each fdatasync it takes the (seq, hash) of the last
//! line written, under the same lock as the writers, and that is what the head names: every line up
//! to it was written before the fdatasync began, so the head never names a record that is not
//! durable. The head may lag the log by one batch, which `fenzi_policy::audit::verify` allows.
//!
//! Fail closed: after any write, sync or head failure every later record and flush fails too, naming the
//! first failure. Nothing is dropped silently.
//!
//! An existing log is continued only when it verifies against its head; the file is locked (flock) so
//! two processes cannot interleave records in one chain. The lock is held until the last handle is
//! dropped and the sync thread has made the log durable one last time.

use fenzi_policy::Reason;
use fenzi_policy::audit::{self, AuditRecord, GENESIS, Head, Outcome};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

/// Longest time a written record waits for its fdatasync.
pub const SYNC_INTERVAL: Duration = Duration::from_millis(20);
/// Number of unsynced records that triggers an fdatasync at once.
pub const SYNC_RECORDS: usize = 256;

/// Everything a record says except `ts`, `seq`, `session` and `prev`, which the writer assigns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    pub outcome: Outcome,
    pub reason: Option<Reason>,
    pub method: String,
    pub host: String,
    pub port: u16,
    pub path: Option<String>,
    pub server: Option<String>,
    pub rpc: Option<String>,
    pub tool: Option<String>,
    pub rpc_id: Option<String>,
    pub secrets: Vec<String>,
    pub rule: Option<String>,
    pub source: Option<String>,
}

impl AuditEntry {
    /// An entry with only the required fields set; fill the optional ones with struct update syntax.
    pub fn new(
        outcome: Outcome,
        reason: Option<Reason>,
        method: impl Into<String>,
        host: impl Into<String>,
        port: u16,
    ) -> AuditEntry {
        AuditEntry {
            outcome,
            reason,
            method: method.into(),
            host: host.into(),
            port,
            path: None,
            server: None,
            rpc: None,
            tool: None,
            rpc_id: None,
            secrets: Vec::new(),
            rule: None,
            source: None,
        }
    }

    fn into_record(self, ts: String, seq: u64, session: &str, prev: String) -> AuditRecord {
        AuditRecord {
            ts,
            seq,
            session: session.to_string(),
            decision: self.outcome,
            reason: self.reason.map(|r| r.code().to_string()),
            method: self.method,
            host: self.host,
            port: self.port,
            path: self.path,
            server: self.server,
            rpc: self.rpc,
            tool: self.tool,
            rpc_id: self.rpc_id,
            secrets: self.secrets,
            rule: self.rule,
            source: self.source,
            prev,
        }
    }
}

/// Why the audit log could not be opened or written. Every variant names the file concerned.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuditError {
    #[error("cannot create the audit log directory {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    #[error("cannot open the audit log {}: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    #[error("the audit log {} is not a regular file", path.display())]
    NotAFile { path: PathBuf },
    #[error("the audit log {} is locked by another process writing to it", path.display())]
    Locked { path: PathBuf },
    #[error("cannot read the audit log {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    #[error(
        "the existing audit log {} does not verify ({problem}); refusing to append to it: check it with `fenzi log --verify --file {}`, then move it aside to start a new log",
        path.display(), path.display()
    )]
    Corrupt { path: PathBuf, problem: String },
    #[error("cannot start the audit writer thread: {source}")]
    Spawn {
        #[source]
        source: Arc<io::Error>,
    },
    #[error("cannot write to the audit log {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    #[error("cannot fsync the audit log {}: {source}", path.display())]
    Sync {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    #[error("cannot update the audit head file {}: {source}", path.display())]
    Head {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    #[error("the audit log {} is unavailable since an earlier failure: {first}", path.display())]
    Unavailable {
        path: PathBuf,
        #[source]
        first: Arc<AuditError>,
    },
    #[error("the audit writer for {} has stopped", path.display())]
    Closed { path: PathBuf },
}

/// The head file of a log: `<log path>.head`.
pub fn head_path(log: &Path) -> PathBuf {
    let mut s = log.as_os_str().to_owned();
    s.push(".head");
    PathBuf::from(s)
}

/// Handle to the audit log. Cheap to clone; when the last handle is dropped the sync thread makes the
/// log durable one last time, rewrites the head and closes the file (releasing its lock).
#[derive(Clone)]
pub struct AuditWriter {
    inner: Arc<Handles>,
}

/// Shared by the handles only (not by the sync thread), so that dropping it means the last handle is
/// gone.
struct Handles {
    shared: Arc<Shared>,
}

impl Drop for Handles {
    fn drop(&mut self) {
        self.shared.lock_anyway().closed = true;
        self.shared.wake.notify_one();
    }
}

/// Shared by the handles and the sync thread.
struct Shared {
    path: PathBuf,
    state: Mutex<State>,
    /// Wakes the sync thread: the first unsynced record of a batch, a full batch, a flush, or the last
    /// handle gone. Not signalled for every record, so recording wakes no other thread.
    wake: Condvar,
}

/// The chain's tail and the sync bookkeeping, all under one lock so that seq order is file order and
/// the sync thread's snapshot is always of a line already written.
struct State {
    /// Opened with O_APPEND; the sync thread has a duplicate of this descriptor.
    file: File,
    session: String,
    next_seq: u64,
    /// Hash of the last line written (`prev` of the next record).
    prev: String,
    /// Records written since the sync thread's last snapshot.
    unsynced: usize,
    first_unsynced: Option<Instant>,
    /// Callers of `flush` waiting for the next sync.
    flushes: Vec<oneshot::Sender<Result<(), AuditError>>>,
    /// The last handle is gone: sync once more and stop.
    closed: bool,
    /// The first failure; once set, everything fails.
    failed: Option<Arc<AuditError>>,
}

impl std::fmt::Debug for AuditWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditWriter")
            .field("path", &self.inner.shared.path)
            .finish()
    }
}

impl AuditWriter {
    /// Opens the log at `path` (creating missing parent directories, mode 0700, and the file, mode
    /// 0600), or continues an existing one after verifying it against `<path>.head`. Records written
    /// through this handle carry `session`.
    pub fn open(path: &Path, session: &str) -> Result<AuditWriter, AuditError> {
        let path = path.to_path_buf();
        let created = !path.exists();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| AuditError::CreateDir {
                    path: dir.to_path_buf(),
                    source: Arc::new(e),
                })?;
        }
        let open_error = |e: io::Error| AuditError::Open {
            path: path.clone(),
            source: Arc::new(e),
        };
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path)
            .map_err(open_error)?;
        let meta = file.metadata().map_err(open_error)?;
        if !meta.is_file() {
            return Err(AuditError::NotAFile { path });
        }
        rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(
            |e| {
                if e == rustix::io::Errno::WOULDBLOCK {
                    AuditError::Locked { path: path.clone() }
                } else {
                    open_error(e.into())
                }
            },
        )?;
        // Read under the lock, so no other writer can be mid-append.
        let mut existing = Vec::new();
        file.read_to_end(&mut existing)
            .map_err(|e| AuditError::Read {
                path: path.clone(),
                source: Arc::new(e),
            })?;
        let (next_seq, prev) = continue_chain(&path, &existing)?;
        if created {
            // Make the new directory entry durable, so a crash cannot lose a log that has a head.
            sync_parent(&path).map_err(|e| AuditError::Sync {
                path: path.clone(),
                source: Arc::new(e),
            })?;
        }
        // Same open file description (and so the same lock): fdatasync through it syncs the log.
        let sync_file = file.try_clone().map_err(open_error)?;

        let head = head_path(&path);
        let mut head_tmp = head.clone().into_os_string();
        head_tmp.push(".tmp");
        let shared = Arc::new(Shared {
            path,
            state: Mutex::new(State {
                file,
                session: session.to_string(),
                next_seq,
                prev,
                unsynced: 0,
                first_unsynced: None,
                flushes: Vec::new(),
                closed: false,
                failed: None,
            }),
            wake: Condvar::new(),
        });
        let syncer = Syncer {
            shared: shared.clone(),
            file: sync_file,
            head_exists: head.exists(),
            head,
            head_tmp: PathBuf::from(head_tmp),
            synced_seq: next_seq - 1,
        };
        std::thread::Builder::new()
            .name("fenzi-audit".into())
            .spawn(move || syncer.run())
            .map_err(|e| AuditError::Spawn {
                source: Arc::new(e),
            })?;
        Ok(AuditWriter {
            inner: Arc::new(Handles { shared }),
        })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.inner.shared.path
    }

    /// Appends one record and returns its sequence number once its line has been written (write(2)
    /// completed; fdatasync follows within [`SYNC_INTERVAL`]). On `Err` the caller must deny the
    /// request with `audit_unavailable` and forward nothing.
    ///
    /// Runs to completion without yielding: the write is done inline under the log's lock (see the
    /// module documentation for why).
    pub async fn record(&self, entry: AuditEntry) -> Result<u64, AuditError> {
        self.inner.shared.append(entry)
    }

    /// Makes every record written so far durable and rewrites the head file now (used at shutdown).
    pub async fn flush(&self) -> Result<(), AuditError> {
        let done = self.inner.shared.request_flush()?;
        done.await.map_err(|_| self.inner.shared.closed())?
    }
}

impl Shared {
    /// A poisoned lock means a thread panicked mid-update: the chain's tail cannot be trusted.
    fn lock(&self) -> Result<MutexGuard<'_, State>, AuditError> {
        self.state.lock().map_err(|_| self.closed())
    }

    /// For shutting down and recording failures, which must happen even after a panic.
    fn lock_anyway(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes one record's line: seq, `prev`, serialisation and write(2) all under the lock.
    fn append(&self, entry: AuditEntry) -> Result<u64, AuditError> {
        let mut st = self.lock()?;
        if let Some(first) = &st.failed {
            return Err(self.unavailable(first.clone()));
        }
        let st = &mut *st;
        let seq = st.next_seq;
        let record = entry.into_record(
            audit::format_timestamp(now_ms()),
            seq,
            &st.session,
            std::mem::take(&mut st.prev),
        );
        let mut line = audit::to_line(&record);
        let hash = audit::line_hash(line.as_bytes());
        line.push('\n');
        if let Err(e) = st.file.write_all(line.as_bytes()) {
            // `prev` is gone, and a partial line may be in the file: nothing may follow it.
            return Err(self.fail(
                st,
                AuditError::Write {
                    path: self.path.clone(),
                    source: Arc::new(e),
                },
            ));
        }
        st.prev = hash;
        st.next_seq += 1;
        st.unsynced += 1;
        let wake = if st.first_unsynced.is_none() {
            st.first_unsynced = Some(Instant::now());
            true
        } else {
            st.unsynced == SYNC_RECORDS
        };
        if wake {
            self.wake.notify_one();
        }
        Ok(seq)
    }

    /// Queues a flush for the sync thread; the receiver gets the result of the sync that covers every
    /// record written before this call.
    fn request_flush(&self) -> Result<oneshot::Receiver<Result<(), AuditError>>, AuditError> {
        let mut st = self.lock()?;
        if let Some(first) = &st.failed {
            return Err(self.unavailable(first.clone()));
        }
        let (ack, done) = oneshot::channel();
        st.flushes.push(ack);
        self.wake.notify_one();
        Ok(done)
    }

    /// Records the first failure and returns `err`; from now on everything fails.
    fn fail(&self, st: &mut State, err: AuditError) -> AuditError {
        st.failed.get_or_insert_with(|| Arc::new(err.clone()));
        // Nothing more will be synced.
        st.unsynced = 0;
        st.first_unsynced = None;
        err
    }

    fn unavailable(&self, first: Arc<AuditError>) -> AuditError {
        AuditError::Unavailable {
            path: self.path.clone(),
            first,
        }
    }

    fn closed(&self) -> AuditError {
        AuditError::Closed {
            path: self.path.clone(),
        }
    }
}

/// Verifies existing content and returns the next sequence number and `prev` to continue with.
fn continue_chain(path: &Path, existing: &[u8]) -> Result<(u64, String), AuditError> {
    let corrupt = |problem: String| AuditError::Corrupt {
        path: path.to_path_buf(),
        problem,
    };
    let head_file = head_path(path);
    let head = match fs::read_to_string(&head_file) {
        Ok(text) => Some(Head::parse(&text).ok_or_else(|| {
            corrupt(format!(
                "the head file {} is not `<seq> <sha256>`",
                head_file.display()
            ))
        })?),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(AuditError::Read {
                path: head_file,
                source: Arc::new(e),
            });
        }
    };
    if existing.is_empty() && head.is_none() {
        return Ok((1, GENESIS.to_string()));
    }
    if !existing.is_empty() && !existing.ends_with(b"\n") {
        return Err(corrupt(
            "its last line is incomplete (no newline at the end of the file)".into(),
        ));
    }
    if head.is_none() {
        return Err(corrupt(format!(
            "it has records but no head file {}, so a cut-short log cannot be ruled out",
            head_file.display()
        )));
    }
    let lines = existing[..existing.len().saturating_sub(1)].split(|&b| b == b'\n');
    let lines: Box<dyn Iterator<Item = &[u8]>> = if existing.is_empty() {
        Box::new(std::iter::empty())
    } else {
        Box::new(lines)
    };
    let verified = audit::verify(lines, head.as_ref()).map_err(|e| corrupt(e.to_string()))?;
    match verified.head {
        Some(last) => Ok((last.seq + 1, last.hash)),
        None => Ok((1, GENESIS.to_string())),
    }
}

fn sync_parent(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The background thread that makes written lines durable and keeps the head file.
struct Syncer {
    shared: Arc<Shared>,
    /// A duplicate of the writers' descriptor.
    file: File,
    head: PathBuf,
    head_tmp: PathBuf,
    head_exists: bool,
    /// The last seq known durable (and named by the head, once there is one).
    synced_seq: u64,
}

/// What one wake-up of the sync thread must do.
struct Job {
    /// The head to make true (`None`: nothing new since the last sync), or the earlier failure.
    target: Result<Option<Head>, AuditError>,
    flushes: Vec<oneshot::Sender<Result<(), AuditError>>>,
    last: bool,
}

/// Runs when the sync thread ends, however it ends: later records and flushes must fail rather than
/// go unsynced, and no flush may wait forever.
struct Stopped(Arc<Shared>);

impl Drop for Stopped {
    fn drop(&mut self) {
        let mut st = self.0.lock_anyway();
        let closed = self.0.closed();
        st.failed.get_or_insert_with(|| Arc::new(closed));
        st.flushes.clear();
    }
}

impl Syncer {
    fn run(mut self) {
        let _stopped = Stopped(self.shared.clone());
        loop {
            let job = self.next_job();
            let result = match job.target {
                Err(e) => Err(e),
                Ok(None) => Ok(()),
                Ok(Some(head)) => self.sync(head),
            };
            for ack in job.flushes {
                // A caller that went away needs no answer.
                let _ = ack.send(result.clone());
            }
            if job.last {
                return;
            }
        }
    }

    /// Waits until a sync is due, then takes the snapshot to sync to.
    fn next_job(&self) -> Job {
        let shared = &*self.shared;
        let mut st = shared.lock_anyway();
        loop {
            if st.closed || !st.flushes.is_empty() {
                break;
            }
            match st.first_unsynced {
                Some(t0) if st.failed.is_none() => {
                    let due = t0 + SYNC_INTERVAL;
                    let now = Instant::now();
                    if st.unsynced >= SYNC_RECORDS || now >= due {
                        break;
                    }
                    st = shared
                        .wake
                        .wait_timeout(st, due - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                _ => st = shared.wake.wait(st).unwrap_or_else(|p| p.into_inner()),
            }
        }
        let flushes = std::mem::take(&mut st.flushes);
        let last = st.closed;
        let target = match &st.failed {
            Some(first) => Err(shared.unavailable(first.clone())),
            None => {
                // Every line up to this one has been written: the fdatasync that follows covers it.
                st.unsynced = 0;
                st.first_unsynced = None;
                let seq = st.next_seq - 1;
                Ok((seq != self.synced_seq).then(|| Head {
                    seq,
                    hash: st.prev.clone(),
                }))
            }
        };
        Job {
            target,
            flushes,
            last,
        }
    }

    /// fdatasync, then rewrite the head to name `head`, the last line written before the fdatasync.
    fn sync(&mut self, head: Head) -> Result<(), AuditError> {
        let result = match self.file.sync_data() {
            Err(e) => Err(AuditError::Sync {
                path: self.shared.path.clone(),
                source: Arc::new(e),
            }),
            Ok(()) => self.write_head(&head).map_err(|e| AuditError::Head {
                path: self.head.clone(),
                source: Arc::new(e),
            }),
        };
        match result {
            Ok(()) => {
                self.synced_seq = head.seq;
                Ok(())
            }
            Err(e) => Err(self.shared.fail(&mut self.shared.lock_anyway(), e)),
        }
    }

    fn write_head(&mut self, head: &Head) -> io::Result<()> {
        let mut tmp = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&self.head_tmp)?;
        tmp.write_all(head.to_text().as_bytes())?;
        tmp.sync_all()?;
        drop(tmp);
        fs::rename(&self.head_tmp, &self.head)?;
        if !self.head_exists {
            // The first head must survive a crash; later renames may lag, which verify allows.
            sync_parent(&self.head)?;
            self.head_exists = true;
        }
        Ok(())
    }
}
