//! The audit log writer: appends hash-chained records (DESIGN.md §5) to one JSON Lines file and keeps
//! the head file beside it.
//!
//! One dedicated thread owns the file; callers hand it entries over a channel and wait for a per-record
//! acknowledgement, which comes only after the record's line has been written with write(2). So a
//! request is never forwarded before its record is in the file, sequence numbers follow file order, and
//! a failed write is seen by exactly the caller that must deny. A plain thread (not a tokio task) because
//! every step is blocking file I/O and `open` may run before any runtime exists.
//!
//! Durability is batched: the thread calls fdatasync at most [`SYNC_INTERVAL`] after the first unsynced
//! record, or as soon as [`SYNC_RECORDS`] are unsynced, and after each fdatasync rewrites
//! `<log>.head` atomically (temp file, fsync, rename). The head therefore never names a record that is
//! not durable, and may lag the log by one batch, which `fenzi_policy::audit::verify` allows.
//!
//! Fail closed: after any write, sync or head failure every later record and flush fails too, naming the
//! first failure. Nothing is dropped silently.
//!
//! An existing log is continued only when it verifies against its head; the file is locked (flock) so
//! two processes cannot interleave records in one chain.

use fenzi_policy::Reason;
use fenzi_policy::audit::{self, AuditRecord, GENESIS, Head, Outcome};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
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

enum Msg {
    Record(Box<AuditEntry>, oneshot::Sender<Result<u64, AuditError>>),
    Flush(oneshot::Sender<Result<(), AuditError>>),
}

/// Handle to the audit log. Cheap to clone; the writer thread stops (after a final sync) when the last
/// handle is dropped.
#[derive(Clone)]
pub struct AuditWriter {
    inner: Arc<Inner>,
}

struct Inner {
    tx: mpsc::Sender<Msg>,
    path: PathBuf,
}

impl std::fmt::Debug for AuditWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditWriter")
            .field("path", &self.inner.path)
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
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| AuditError::Open {
                path: path.clone(),
                source: Arc::new(e),
            })?;
        let meta = file.metadata().map_err(|e| AuditError::Open {
            path: path.clone(),
            source: Arc::new(e),
        })?;
        if !meta.is_file() {
            return Err(AuditError::NotAFile { path });
        }
        rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(
            |e| {
                if e == rustix::io::Errno::WOULDBLOCK {
                    AuditError::Locked { path: path.clone() }
                } else {
                    AuditError::Open {
                        path: path.clone(),
                        source: Arc::new(e.into()),
                    }
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

        let (tx, rx) = mpsc::channel();
        let writer = Writer {
            head: head_path(&path),
            head_tmp: {
                let mut s = head_path(&path).into_os_string();
                s.push(".tmp");
                PathBuf::from(s)
            },
            path: path.clone(),
            file,
            session: session.to_string(),
            next_seq,
            prev,
            unsynced: 0,
            first_unsynced: None,
            failed: None,
            head_exists: head_path(&path).exists(),
        };
        std::thread::Builder::new()
            .name("fenzi-audit".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| AuditError::Spawn {
                source: Arc::new(e),
            })?;
        Ok(AuditWriter {
            inner: Arc::new(Inner { tx, path }),
        })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Appends one record and returns its sequence number once its line has been written (write(2)
    /// completed; fsync follows within [`SYNC_INTERVAL`]). On `Err` the caller must deny the request
    /// with `audit_unavailable` and forward nothing.
    pub async fn record(&self, entry: AuditEntry) -> Result<u64, AuditError> {
        let (ack, done) = oneshot::channel();
        self.inner
            .tx
            .send(Msg::Record(Box::new(entry), ack))
            .map_err(|_| self.closed())?;
        done.await.map_err(|_| self.closed())?
    }

    /// Makes every record written so far durable and rewrites the head file now (used at shutdown).
    pub async fn flush(&self) -> Result<(), AuditError> {
        let (ack, done) = oneshot::channel();
        self.inner
            .tx
            .send(Msg::Flush(ack))
            .map_err(|_| self.closed())?;
        done.await.map_err(|_| self.closed())?
    }

    fn closed(&self) -> AuditError {
        AuditError::Closed {
            path: self.inner.path.clone(),
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

/// The state owned by the writer thread.
struct Writer {
    path: PathBuf,
    head: PathBuf,
    head_tmp: PathBuf,
    file: File,
    session: String,
    next_seq: u64,
    prev: String,
    unsynced: usize,
    first_unsynced: Option<Instant>,
    /// The first failure; once set, everything fails.
    failed: Option<Arc<AuditError>>,
    head_exists: bool,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Msg>) {
        loop {
            // A steady stream of records must not postpone the sync past its deadline.
            if self
                .first_unsynced
                .is_some_and(|t0| t0.elapsed() >= SYNC_INTERVAL)
            {
                let _ = self.sync();
            }
            let first = match self.first_unsynced {
                Some(t0) => {
                    let wait = (t0 + SYNC_INTERVAL).saturating_duration_since(Instant::now());
                    match rx.recv_timeout(wait) {
                        Ok(m) => m,
                        Err(RecvTimeoutError::Timeout) => {
                            let _ = self.sync();
                            continue;
                        }
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                None => match rx.recv() {
                    Ok(m) => m,
                    Err(_) => break,
                },
            };
            // Take whatever else is queued, so a burst becomes one write(2).
            let mut batch = vec![first];
            while batch.len() < SYNC_RECORDS {
                match rx.try_recv() {
                    Ok(m) => batch.push(m),
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            self.handle(batch);
        }
        // Every handle is gone: make what was written durable.
        let _ = self.sync();
    }

    fn handle(&mut self, batch: Vec<Msg>) {
        let mut buf = String::new();
        let mut acks = Vec::new();
        for msg in batch {
            match msg {
                Msg::Record(entry, ack) => {
                    let seq = self.next_seq;
                    let record = (*entry).into_record(
                        audit::format_timestamp(now_ms()),
                        seq,
                        &self.session,
                        std::mem::take(&mut self.prev),
                    );
                    let line = audit::to_line(&record);
                    self.prev = audit::line_hash(line.as_bytes());
                    self.next_seq += 1;
                    buf.push_str(&line);
                    buf.push('\n');
                    acks.push((seq, ack));
                }
                Msg::Flush(ack) => {
                    self.write(&mut buf, &mut acks);
                    let _ = ack.send(self.sync());
                }
            }
        }
        self.write(&mut buf, &mut acks);
    }

    /// Writes the pending lines in one go and answers their callers.
    fn write(
        &mut self,
        buf: &mut String,
        acks: &mut Vec<(u64, oneshot::Sender<Result<u64, AuditError>>)>,
    ) {
        if acks.is_empty() {
            return;
        }
        let result = match &self.failed {
            Some(first) => Err(self.unavailable(first.clone())),
            None => match self.file.write_all(buf.as_bytes()) {
                Ok(()) => Ok(()),
                Err(e) => Err(self.fail(AuditError::Write {
                    path: self.path.clone(),
                    source: Arc::new(e),
                })),
            },
        };
        buf.clear();
        let n = acks.len();
        for (seq, ack) in acks.drain(..) {
            // A caller that went away still has its record in the log; nothing to undo.
            let _ = ack.send(result.clone().map(|()| seq));
        }
        if result.is_ok() {
            self.unsynced += n;
            self.first_unsynced.get_or_insert_with(Instant::now);
            if self.unsynced >= SYNC_RECORDS {
                let _ = self.sync();
            }
        }
    }

    /// fdatasync, then rewrite the head to name the last durable record.
    fn sync(&mut self) -> Result<(), AuditError> {
        if let Some(first) = &self.failed {
            return Err(self.unavailable(first.clone()));
        }
        if self.unsynced == 0 {
            return Ok(());
        }
        if let Err(e) = self.file.sync_data() {
            return Err(self.fail(AuditError::Sync {
                path: self.path.clone(),
                source: Arc::new(e),
            }));
        }
        if let Err(e) = self.write_head() {
            return Err(self.fail(AuditError::Head {
                path: self.head.clone(),
                source: Arc::new(e),
            }));
        }
        self.unsynced = 0;
        self.first_unsynced = None;
        Ok(())
    }

    fn write_head(&mut self) -> io::Result<()> {
        let head = Head {
            seq: self.next_seq - 1,
            hash: self.prev.clone(),
        };
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

    /// Records the first failure and returns it; from now on everything fails.
    fn fail(&mut self, err: AuditError) -> AuditError {
        self.failed = Some(Arc::new(err.clone()));
        // Nothing more will be synced; without this the loop would wake at once, forever.
        self.unsynced = 0;
        self.first_unsynced = None;
        err
    }

    fn unavailable(&self, first: Arc<AuditError>) -> AuditError {
        AuditError::Unavailable {
            path: self.path.clone(),
            first,
        }
    }
}
