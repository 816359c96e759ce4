//! The audit log writer: appends hash-chained records (README, `fenzi log`) to one JSON Lines file and keeps
//! the head file beside it.
//!
//! Writing happens in the caller. [`AuditWriter::append`] serialises the record's own fields
//! ([`LineFields`]), then takes one lock, assigns the sequence number, splices in the timestamp, seq,
//! session and `prev` hash and writes the line with write(2) before it returns. So a
//! request is never forwarded before its record is in the file, sequence numbers follow file order, and
//! a failed write is seen by exactly the caller that must deny. The write is done inline, not through
//! `spawn_blocking` or another thread: one write(2) of one line into the page cache takes microseconds,
//! and handing it to a thread and back cost more than the write itself (two cross-thread wake-ups per
//! record, see docs/benchmarks.md). So [`AuditWriter::append`] is a plain call, not a future.
//!
//! Records of requests decided together are written together. [`AuditWriter::stage`] assigns a
//! record's seq and `prev` and builds its line onto the open batch, under the lock, but does not
//! write it; the first of the batch's records to be [`Staged::write`]n (or any append, or a flush)
//! writes the whole batch with one write(2), and the others find it written. A request that has
//! other requests in flight stages its record and yields once, so the records of requests decided
//! in the same turn of its thread's loop share one write(2) (see
//! [`crate::session::context::SessionContext::record_all_together`]); alone, it appends. Nothing changes in
//! what a crash can lose: no request is forwarded before its `write` returns, so its line is in the
//! file (the page cache) first, exactly as with an append. A staged line that was never written
//! belongs to a request that was not forwarded. A batch that cannot be written is refused whole:
//! every record in it is refused (each request denied), the file is cut back to its last whole
//! line, and the staged tail goes back to the last line written. A staged record that is dropped
//! unwritten (its request cancelled) writes its batch, so every seq handed out ends up in the file
//! or in a refused batch, and the chain has no gap.
//!
//! Durability is batched and off the acknowledgement path: a background thread (`fenzi-audit`,
//! a plain thread because every step is blocking file I/O and `open` may run before any runtime
//! exists) calls fdatasync on a duplicate of the log's descriptor at most [`SYNC_INTERVAL`] after the
//! first unsynced record, or as soon as [`SYNC_RECORDS`] are unsynced, and then rewrites `<log>.head`
//! in place (one write at offset 0, fdatasync; see [`crate::host_files::SmallFile`] for why never
//! by a rename and why a crash still leaves a whole head). Before each fdatasync it takes the (seq, hash) of the last
//! line written (not the last staged), under the same lock as the writers, and that is what the head
//! names: every line up to it was written before the fdatasync began, so the head never names a
//! record that is not durable. The head may lag the log by one batch, which
//! `fenzi_policy::audit::verify` allows.
//!
//! Failures are of one record, of the head, or of the log; only the last stops the writer:
//!
//! - A record that cannot be written (ENOSPC, EDQUOT, EFBIG, EIO) is refused: its caller denies the
//!   request (`audit_unavailable`), and the chain's tail (`prev`, the next seq) stays as it was.
//!   write(2) may have stored part of the line before failing (a short write, then the error on the
//!   rest), so the file is cut back (ftruncate) to the end of the last whole line, a length the
//!   writer keeps track of under the lock (so nothing of ours appends meanwhile). The descriptor is
//!   O_APPEND, so every write starts at the end of the file whatever the file offset says: after a
//!   cut the next line lands right after the last whole one, with no hole where the cut part was.
//!   The next background sync makes the cut durable (the partial line may have been written back
//!   already). The next record simply tries again, so service resumes by itself once there is
//!   room. Only if the cut fails does the file end mid-line, with nothing allowed to follow: then
//!   the writer stops for good, saying how to repair the file.
//! - A head file that cannot be rewritten (ENOSPC, EROFS on its directory) is left behind: the records
//!   are durable and only the head lags, which verify allows. It is tried again after every batch,
//!   logged when it starts failing and when it catches up (not on every try), and a flush reports it,
//!   because the head is what shows a log cut short: a stop with a stale head is not a clean stop.
//! - A failed fdatasync stops the writer for good. After a failed fsync the page cache no longer
//!   tells what is on disk: Linux reports a writeback error once, then may mark the pages that failed
//!   clean or drop them, so a later fsync can succeed although the data never reached the disk
//!   (PostgreSQL's "fsyncgate", 2018). Records acknowledged since the last good sync may be lost, no
//!   head can be named truthfully, and any later record would chain onto a predecessor that may not
//!   exist. So every later record and flush fails, naming that failure and the last record known to
//!   be durable. Lines already written are still made durable if a write fails for good (a failed
//!   cut), so their head stays true.
//!
//! Nothing is dropped silently: a refused record is an error for the caller that must deny, and a
//! failure of the head or of the log is logged (tracing) when it happens.
//!
//! The log and its head are opened once, through a descriptor of their directory taken when the
//! log is opened (before the agent runs), and never through a link ([`crate::host_files`]): an agent
//! that can write that directory cannot redirect a write. The head is created (empty: no head yet)
//! when the log is, so that `fenzi run` can protect it from the start.
//!
//! An existing log is continued only when it verifies against its head; the file is locked (flock) so
//! two processes cannot interleave records in one chain. The lock is held until the last handle is
//! dropped and the sync thread has made the log durable one last time.

use crate::host_files::{HostDir, Opening, SmallFile};
use fenzi_policy::Reason;
use fenzi_policy::audit::{self, AuditRecord, GENESIS, Head, LineFields, Outcome};
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
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
    pub hidden: Option<u64>,
    pub confirm: Option<String>,
    /// The hash of the policy the decision was made under ([`fenzi_policy::engine::Policy::sha256`]).
    /// Left `None`, [`crate::session::context::SessionContext::record`] fills in the policy in force.
    pub policy: Option<std::sync::Arc<str>>,
    /// The peer address of the client connection the record is about; `None` for a record about
    /// the session (a reload).
    pub client: Option<std::net::SocketAddr>,
    /// The prompt a `prompts/get` names.
    pub prompt: Option<String>,
    /// The resource URI a `resources/*` message names, without query or fragment.
    pub resource: Option<String>,
    /// The program the connection was attributed to (DESIGN §17), shared by its records.
    pub program: Option<fenzi_policy::audit::ProgramRecord>,
    /// `stdio`: a request to a local server behind its bridge.
    pub transport: Option<&'static str>,
    /// A local server's own egress: which server's sandbox made the request.
    pub local_server: Option<std::sync::Arc<str>>,
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
            hidden: None,
            confirm: None,
            policy: None,
            client: None,
            prompt: None,
            resource: None,
            program: None,
            transport: None,
            local_server: None,
        }
    }

    /// The record's line without the writer's fields (`ts`, `seq`, `session`, `prev`).
    fn into_fields(self) -> LineFields {
        LineFields::new(AuditRecord {
            ts: String::new(),
            seq: 0,
            session: String::new(),
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
            hidden: self.hidden,
            confirm: self.confirm,
            policy: self.policy.map(|p| p.to_string()),
            client: self.client.map(client_text),
            prompt: self.prompt,
            resource: self.resource,
            program: self.program,
            transport: self.transport.map(str::to_string),
            local_server: self.local_server.map(|s| s.to_string()),
            prev: String::new(),
        })
    }
}

/// `addr` as `Display` writes it. An IPv4 peer (nearly every record's) is written with `itoa`:
/// the formatting machinery costs several times the few bytes it produces, on every record.
fn client_text(addr: std::net::SocketAddr) -> String {
    let std::net::SocketAddr::V4(v4) = addr else {
        return addr.to_string();
    };
    let mut digits = itoa::Buffer::new();
    let mut text = String::with_capacity(21);
    for (i, octet) in v4.ip().octets().into_iter().enumerate() {
        if i > 0 {
            text.push('.');
        }
        text.push_str(digits.format(octet));
    }
    text.push(':');
    text.push_str(digits.format(v4.port()));
    text
}

/// Why the audit log could not be opened, or a record or the head not written. Every variant names the
/// file concerned, and its message says the cause once (the I/O error is part of the message, not a
/// separate `source`, so a chain printer does not repeat it).
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuditError {
    #[error("cannot create the audit log directory {}: {error}", path.display())]
    CreateDir {
        path: PathBuf,
        error: Arc<io::Error>,
    },
    #[error("cannot open the audit log {}: {error}", path.display())]
    Open {
        path: PathBuf,
        error: Arc<io::Error>,
    },
    #[error("the audit log {} is not a regular file", path.display())]
    NotAFile { path: PathBuf },
    #[error("the audit log {} is locked by another process writing to it", path.display())]
    Locked { path: PathBuf },
    #[error("cannot read the audit log {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: Arc<io::Error>,
    },
    #[error(
        "the existing audit log {} does not verify ({problem}); refusing to append to it: check it with `fenzi log --verify --file {}`, then move it aside to start a new log",
        path.display(), path.display()
    )]
    Corrupt { path: PathBuf, problem: String },
    #[error("cannot make the new audit log {} durable (fsync of its directory): {error}", path.display())]
    CreateSync {
        path: PathBuf,
        error: Arc<io::Error>,
    },
    #[error("cannot start the audit writer thread: {error}")]
    Spawn { error: Arc<io::Error> },
    /// One record could not be written; the log still ends with its last whole record, and the next
    /// record tries again.
    #[error("cannot write to the audit log {}: {error}", path.display())]
    Write {
        path: PathBuf,
        error: Arc<io::Error>,
    },
    /// A record was written in part and the part could not be cut off: the writer has stopped.
    #[error(
        "cannot write to the audit log {}: {error}, and cannot cut the partial record off again: {cut}; the file ends mid-line after seq {last}, so no further record is written (to repair it once fenzi has stopped: `truncate -s {len} {}`)",
        path.display(), path.display()
    )]
    Torn {
        path: PathBuf,
        error: Arc<io::Error>,
        cut: Arc<io::Error>,
        /// The last whole record.
        last: u64,
        /// The file's length up to the end of that record.
        len: u64,
    },
    /// fdatasync failed: the writer has stopped (see the module documentation for why).
    #[error(
        "cannot fsync the audit log {}: {error}; records after seq {durable} may not be on disk, so no further record is written",
        path.display()
    )]
    Sync {
        path: PathBuf,
        error: Arc<io::Error>,
        /// The last record known to be durable.
        durable: u64,
    },
    /// The head file could not be rewritten; every record is durable, only the head lags.
    #[error("cannot update the audit head file {}: {error}; {}", path.display(), head_lag(*named, *last))]
    Head {
        path: PathBuf,
        error: Arc<io::Error>,
        /// The seq the head file still names (0: there is none yet).
        named: u64,
        /// The last record in the log.
        last: u64,
    },
    #[error("the audit log {} stopped after an earlier failure: {first}", path.display())]
    Unavailable {
        path: PathBuf,
        first: Arc<AuditError>,
    },
    #[error("the audit writer for {} has stopped", path.display())]
    Closed { path: PathBuf },
}

/// What a head that could not be rewritten leaves unprotected.
fn head_lag(named: u64, last: u64) -> String {
    if named == 0 {
        format!(
            "the records (up to seq {last}) are on disk, but there is no head file yet, and a log without one is not continued"
        )
    } else {
        format!(
            "the records are on disk, but the head still names seq {named} while the log ends at seq {last}, so a cut after seq {named} would go unnoticed"
        )
    }
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

/// Held by the handles only (not by the sync thread), so that dropping it means the last handle is
/// gone.
struct Handles {
    log: Arc<LogFile>,
}

impl Drop for Handles {
    fn drop(&mut self) {
        self.log.lock_anyway().closed = true;
        self.log.wake.notify_one();
    }
}

/// The log file and its bookkeeping, held by the handles and the sync thread.
struct LogFile {
    path: PathBuf,
    state: Mutex<State>,
    /// Wakes the sync thread: the first unsynced record (or cut) of a batch, a full batch, a flush, or
    /// the last handle gone. Not signalled for every record, so recording wakes no other thread.
    wake: Condvar,
}

/// The chain's tail and the sync bookkeeping, all under one lock so that seq order is file order and
/// the sync thread's snapshot is always of a line already written.
struct State {
    /// Opened with O_APPEND; the sync thread has a duplicate of this descriptor.
    file: File,
    /// The file's length up to the end of the last whole line: what a failed write is cut back to.
    len: u64,
    /// The session id as a line holds it ([`LineFields::session_text`]), ready to be spliced in.
    session: String,
    /// The seq the next record staged gets.
    next_seq: u64,
    /// Hash of the last line staged (`prev` of the next record).
    prev: String,
    /// Lines staged and not yet written, in seq order, each ending in a newline: the open batch.
    staged: String,
    /// How many records `staged` holds.
    staged_records: usize,
    /// The open batch's outcome, shared with every [`Staged`] record in it; `None` while no
    /// [`Staged`] record waits (an append writes its line at once, with whatever is staged).
    batch: Option<Arc<Batch>>,
    /// The chain's tail in the file: the seq after the last line written, and that line's hash. What
    /// the sync thread syncs to and the head names, and what a failed batch rolls the staged tail
    /// back to.
    written_next_seq: u64,
    written_prev: String,
    /// Records written since the sync thread's last snapshot.
    unsynced: usize,
    first_unsynced: Option<Instant>,
    /// A partial line was cut off since the last snapshot: the next sync must make the cut durable.
    cut: bool,
    /// Callers of `flush` waiting for the next sync.
    flushes: Vec<oneshot::Sender<Result<(), AuditError>>>,
    /// The last handle is gone: sync once more and stop.
    closed: bool,
    /// The sync thread has ended: no flush would be answered.
    syncer_gone: bool,
    /// Records refused so far (their requests were denied).
    refused: u64,
    /// The failure that stopped the writer for good; once set, every record and flush fails.
    failed: Option<Arc<AuditError>>,
    /// The last millisecond a record was stamped with, and its text: records come many to a
    /// millisecond under load, and formatting the date is a good part of a record's own cost.
    stamp: (i64, String),
}

/// The outcome of one batch of staged records, settled when the batch is written.
#[derive(Default)]
struct Batch {
    outcome: OnceLock<Result<(), AuditError>>,
}

/// A record staged by [`AuditWriter::stage`], in a batch that is written at the latest when this is
/// written or dropped.
#[must_use = "a staged record must be written before what depends on it is forwarded"]
pub struct Staged {
    log: Arc<LogFile>,
    batch: Arc<Batch>,
    seq: u64,
}

impl Staged {
    /// Writes the record's batch unless another record's writer already has, and returns the
    /// record's seq once its line is in the file. On `Err` the whole batch was refused (see
    /// [`AuditWriter::append`]).
    pub fn write(self) -> Result<u64, AuditError> {
        self.settle().map(|()| self.seq)
    }

    fn settle(&self) -> Result<(), AuditError> {
        if let Some(outcome) = self.batch.outcome.get() {
            return outcome.clone();
        }
        // Unsettled, so the batch is still the open one: writing the open batch writes this
        // record's (batches are settled in order, under the lock).
        let mut st = self.log.lock()?;
        match self.batch.outcome.get() {
            Some(outcome) => outcome.clone(),
            None => self.log.write_batch(&mut st),
        }
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        // Unwritten, its request is not forwarded, but the record was assigned a seq and lines
        // after it chain onto it: it is written like any other. Written, this finds the outcome.
        let _ = self.settle();
    }
}

impl std::fmt::Debug for Staged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staged").field("seq", &self.seq).finish()
    }
}

impl std::fmt::Debug for AuditWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditWriter")
            .field("path", &self.inner.log.path)
            .finish()
    }
}

impl AuditWriter {
    /// Opens the log at `path` (creating missing parent directories, mode 0700, and the file, mode
    /// 0600), or continues an existing one after verifying it against `<path>.head`. Records written
    /// through this handle carry `session`.
    pub fn open(path: &Path, session: &str) -> Result<AuditWriter, AuditError> {
        let path = path.to_path_buf();
        let open_error = |e: io::Error| AuditError::Open {
            path: path.clone(),
            error: Arc::new(e),
        };
        let Some(name) = path.file_name() else {
            return Err(open_error(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the path names no file",
            )));
        };
        // Every file of the log is reached through this descriptor from now on (host_files).
        let dir = HostDir::of_file(&path).map_err(|e| AuditError::CreateDir {
            path: path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf(),
            error: Arc::new(e),
        })?;
        let (mut file, created) = match dir.open_append(name, Opening::New) {
            Ok(file) => (file, true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => (
                dir.open_append(name, Opening::Existing)
                    .map_err(|e| not_a_file(e, &path))?,
                false,
            ),
            Err(e) => return Err(not_a_file(e, &path)),
        };
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
                error: Arc::new(e),
            })?;
        let head_name = head_path(Path::new(name));
        let head_error = |e: io::Error| AuditError::Read {
            path: head_path(&path),
            error: Arc::new(e),
        };
        // Read first and created only once the log verifies, so a refused log is left as it was.
        let head_text = match dir.open_read(head_name.as_os_str()) {
            Ok(mut f) => {
                let mut text = Vec::new();
                f.read_to_end(&mut text).map_err(head_error)?;
                text
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                return Err(AuditError::Open {
                    path: head_path(&path),
                    error: Arc::new(e),
                });
            }
        };
        let tail = continue_chain(&path, &existing, &head_text)?;
        let head_created = !dir_has(&dir, head_name.as_os_str());
        let head = SmallFile::open(&dir, head_name.as_os_str()).map_err(|e| AuditError::Open {
            path: head_path(&path),
            error: Arc::new(e),
        })?;
        if created || head_created {
            // Make the new directory entries durable, so a crash cannot lose a log that has a head.
            dir.sync().map_err(|e| AuditError::CreateSync {
                path: path.clone(),
                error: Arc::new(e),
            })?;
        }
        // Same open file description (and so the same lock): fdatasync through it syncs the log.
        let sync_file = file.try_clone().map_err(open_error)?;

        let log = Arc::new(LogFile {
            path,
            state: Mutex::new(State {
                file,
                len: existing.len() as u64,
                session: LineFields::session_text(session),
                next_seq: tail.next_seq,
                prev: tail.prev.clone(),
                staged: String::new(),
                staged_records: 0,
                batch: None,
                written_next_seq: tail.next_seq,
                written_prev: tail.prev,
                unsynced: 0,
                first_unsynced: None,
                cut: false,
                flushes: Vec::new(),
                closed: false,
                syncer_gone: false,
                refused: 0,
                failed: None,
                stamp: (i64::MIN, String::new()),
            }),
            wake: Condvar::new(),
        });
        let syncer = Syncer {
            log: log.clone(),
            file: sync_file,
            head,
            // Lines after the head may not have been synced by the writer before us: the first
            // sync covers them before the head names them.
            synced: tail.head_seq,
            head_seq: tail.head_seq,
            head_failing: false,
            broken: false,
        };
        std::thread::Builder::new()
            .name("fenzi-audit".into())
            .spawn(move || syncer.run())
            .map_err(|e| AuditError::Spawn { error: Arc::new(e) })?;
        Ok(AuditWriter {
            inner: Arc::new(Handles { log }),
        })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.inner.log.path
    }

    /// Appends one record and returns its sequence number once its line has been written (write(2)
    /// completed; fdatasync follows within [`SYNC_INTERVAL`]). On `Err` the caller must deny the
    /// request with `audit_unavailable` and forward nothing. A refused record leaves the log as it
    /// was, and the next call tries again, unless the error is [`AuditError::Unavailable`] (or the
    /// first failure it names): then the writer has stopped for good.
    ///
    /// A plain call: the write is done inline under the log's lock (see the module documentation
    /// for why), on the caller's thread. Records staged before it (by [`AuditWriter::stage`]) are
    /// written with it, in one write(2), so the file stays in seq order.
    pub fn append(&self, entry: AuditEntry) -> Result<u64, AuditError> {
        self.inner.log.append(entry)
    }

    /// Stages one record: its seq and `prev` are assigned and its line is built now, but it is
    /// written together with every other record staged before [`Staged::write`] (or any
    /// [`AuditWriter::append`]) next writes the batch, in one write(2). Until its `write` returns
    /// `Ok`, nothing that depends on the record may be forwarded. A staged record is never lost:
    /// dropped unwritten, it writes its batch.
    pub fn stage(&self, entry: AuditEntry) -> Result<Staged, AuditError> {
        self.inner.log.stage(entry)
    }

    /// Makes every record written so far durable and rewrites the head file now (used at shutdown).
    /// `Err(Head)`: the records are durable but the head could not be brought up to date (the error
    /// says how far it lags); any other error: the writer has stopped for good, and the error names
    /// the failure and what it may have cost.
    pub async fn flush(&self) -> Result<(), AuditError> {
        let done = self.inner.log.request_flush()?;
        done.await.map_err(|_| self.inner.log.closed())?
    }

    /// How many records were refused so far (each one's request was denied), including those refused
    /// after the writer stopped.
    pub fn refused(&self) -> u64 {
        self.inner.log.lock_anyway().refused
    }
}

impl LogFile {
    /// A poisoned lock means a thread panicked mid-update: the chain's tail cannot be trusted.
    fn lock(&self) -> Result<MutexGuard<'_, State>, AuditError> {
        self.state.lock().map_err(|_| self.closed())
    }

    /// For shutting down and recording failures, which must happen even after a panic.
    fn lock_anyway(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes one record's line, and any staged before it: its fields serialised first, then the
    /// timestamp, seq and `prev` spliced in and the batch written with write(2), under the lock.
    fn append(&self, entry: AuditEntry) -> Result<u64, AuditError> {
        // Everything but the writer's own fields is serialised before the lock is taken: the lock
        // is what every other request's record waits for.
        let fields = entry.into_fields();
        let mut st = self.lock()?;
        let seq = self.stage_locked(&mut st, &fields)?;
        self.write_batch(&mut st)?;
        Ok(seq)
    }

    fn stage(self: &Arc<Self>, entry: AuditEntry) -> Result<Staged, AuditError> {
        let fields = entry.into_fields();
        let mut st = self.lock()?;
        let seq = self.stage_locked(&mut st, &fields)?;
        Ok(Staged {
            log: self.clone(),
            batch: st.batch.get_or_insert_with(Default::default).clone(),
            seq,
        })
    }

    /// Builds the record's line onto the open batch, advancing the staged tail; returns its seq. A
    /// record refused here (the writer has stopped) is counted.
    fn stage_locked(&self, st: &mut State, fields: &LineFields) -> Result<u64, AuditError> {
        if let Some(first) = &st.failed {
            st.refused += 1;
            return Err(self.unavailable(first.clone()));
        }
        let seq = st.next_seq;
        let now = now_ms();
        if st.stamp.0 != now {
            st.stamp = (now, audit::format_timestamp(now));
        }
        let start = st.staged.len();
        fields.push_line(&mut st.staged, &st.stamp.1, seq, &st.session, &st.prev);
        st.prev = audit::line_hash(&st.staged.as_bytes()[start..]);
        st.staged.push('\n');
        st.next_seq += 1;
        st.staged_records += 1;
        Ok(seq)
    }

    /// Writes the open batch (if any) with one write(2) and settles its outcome for every record
    /// in it. A batch that cannot be written is refused whole: each of its records' requests is
    /// denied, the file is cut back to its last whole line, and the staged tail goes back to the
    /// written one, so the next record chains onto the last line in the file.
    fn write_batch(&self, st: &mut State) -> Result<(), AuditError> {
        if st.staged_records == 0 {
            return Ok(());
        }
        let batch = st.batch.take();
        let records = std::mem::take(&mut st.staged_records);
        let outcome = if let Some(first) = st.failed.clone() {
            // The writer stopped since the batch was staged: nothing written after its failure
            // would ever be made durable.
            Self::roll_back(st, records);
            Err(self.unavailable(first))
        } else if let Err((error, stored)) = write_line(&st.file, st.staged.as_bytes()) {
            Self::roll_back(st, records);
            Err(self.refuse(st, error, stored))
        } else {
            st.len += st.staged.len() as u64;
            st.written_next_seq = st.next_seq;
            st.written_prev.clone_from(&st.prev);
            st.unsynced += records;
            let wake = if st.first_unsynced.is_none() {
                st.first_unsynced = Some(Instant::now());
                true
            } else {
                // Once, as the count reaches the batch size.
                st.unsynced >= SYNC_RECORDS && st.unsynced - records < SYNC_RECORDS
            };
            if wake {
                self.wake.notify_one();
            }
            Ok(())
        };
        st.staged.clear();
        if let Some(batch) = batch {
            // Settled once, by the lock's holder: the batch was taken out of the state above.
            let _ = batch.outcome.set(outcome.clone());
        }
        outcome
    }

    /// A batch of `records` was refused: the staged tail goes back to the last line in the file.
    fn roll_back(st: &mut State, records: usize) {
        st.next_seq = st.written_next_seq;
        st.prev.clone_from(&st.written_prev);
        st.refused += records as u64;
    }

    /// A line could not be written, `stored` of its bytes are in the file: cuts them off, so the file
    /// ends with the last whole line again, and returns the error the caller denies with. Only a cut
    /// that fails stops the writer.
    fn refuse(&self, st: &mut State, error: io::Error, stored: usize) -> AuditError {
        let error = Arc::new(error);
        // A failed write(2) stores nothing: only a short write before it leaves part of the line.
        if stored > 0 {
            if let Err(cut) = st.file.set_len(st.len) {
                let err = AuditError::Torn {
                    path: self.path.clone(),
                    error,
                    cut: Arc::new(cut),
                    last: st.next_seq - 1,
                    len: st.len,
                };
                tracing::error!("{err}");
                return self.fail(st, err);
            }
            st.cut = true;
            if st.first_unsynced.is_none() {
                st.first_unsynced = Some(Instant::now());
                self.wake.notify_one();
            }
        }
        AuditError::Write {
            path: self.path.clone(),
            error,
        }
    }

    /// Queues a flush for the sync thread; the receiver gets the result of the sync that covers every
    /// record written before this call (an error if the writer has stopped, after that sync).
    fn request_flush(&self) -> Result<oneshot::Receiver<Result<(), AuditError>>, AuditError> {
        let mut st = self.lock()?;
        if st.syncer_gone {
            return Err(match &st.failed {
                Some(first) => self.unavailable(first.clone()),
                None => self.closed(),
            });
        }
        // Staged records belong to requests not yet forwarded; a flush makes them durable too.
        // A batch that cannot be written is its records' failure, reported to them.
        let _ = self.write_batch(&mut st);
        let (ack, done) = oneshot::channel();
        st.flushes.push(ack);
        self.wake.notify_one();
        Ok(done)
    }

    /// Records the failure that stops the writer (the first one stays) and returns `err`.
    fn fail(&self, st: &mut State, err: AuditError) -> AuditError {
        st.failed.get_or_insert_with(|| Arc::new(err.clone()));
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

/// write(2) until all of `line` is in the file. On failure also returns how many of its bytes were
/// stored before it (a short write followed by an error), which the caller must cut off.
fn write_line(mut file: &File, line: &[u8]) -> Result<(), (io::Error, usize)> {
    let mut stored = 0;
    while stored < line.len() {
        match file.write(&line[stored..]) {
            Ok(0) => return Err((io::ErrorKind::WriteZero.into(), stored)),
            Ok(n) => stored += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err((e, stored)),
        }
    }
    Ok(())
}

/// Where an existing log's chain continues.
struct Tail {
    next_seq: u64,
    prev: String,
    /// The seq its head file names (0: no head).
    head_seq: u64,
}

/// Verifies existing content against the head file's text (empty: no head written yet) and returns
/// where the chain continues.
fn continue_chain(path: &Path, existing: &[u8], head_text: &[u8]) -> Result<Tail, AuditError> {
    let corrupt = |problem: String| AuditError::Corrupt {
        path: path.to_path_buf(),
        problem,
    };
    let head_file = head_path(path);
    let head = if head_text.is_empty() {
        None
    } else {
        let parsed = std::str::from_utf8(head_text).ok().and_then(Head::parse);
        Some(parsed.ok_or_else(|| {
            corrupt(format!(
                "the head file {} is not `<seq> <sha256>`",
                head_file.display()
            ))
        })?)
    };
    if existing.is_empty() && head.is_none() {
        return Ok(Tail {
            next_seq: 1,
            prev: GENESIS.to_string(),
            head_seq: 0,
        });
    }
    if !existing.is_empty() && !existing.ends_with(b"\n") {
        return Err(corrupt(
            "its last line is incomplete (no newline at the end of the file)".into(),
        ));
    }
    let Some(head) = head else {
        return Err(corrupt(format!(
            "it has records but no head file {}, so a cut-short log cannot be ruled out",
            head_file.display()
        )));
    };
    let lines = existing[..existing.len().saturating_sub(1)].split(|&b| b == b'\n');
    let lines: Box<dyn Iterator<Item = &[u8]>> = if existing.is_empty() {
        Box::new(std::iter::empty())
    } else {
        Box::new(lines)
    };
    let verified = audit::verify(lines, Some(&head)).map_err(|e| corrupt(e.to_string()))?;
    Ok(match verified.head {
        Some(last) => Tail {
            next_seq: last.seq + 1,
            prev: last.hash,
            head_seq: head.seq,
        },
        None => Tail {
            next_seq: 1,
            prev: GENESIS.to_string(),
            head_seq: 0,
        },
    })
}

/// Whether `name` exists in `dir` (as anything, a link included).
fn dir_has(dir: &HostDir, name: &std::ffi::OsStr) -> bool {
    rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok()
}

/// An error opening the log, with a link or a directory in its place said as such.
fn not_a_file(e: io::Error, path: &Path) -> AuditError {
    if e.kind() == io::ErrorKind::InvalidInput {
        AuditError::NotAFile {
            path: path.to_path_buf(),
        }
    } else {
        AuditError::Open {
            path: path.to_path_buf(),
            error: Arc::new(e),
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The background thread that makes written lines durable and keeps the head file.
struct Syncer {
    log: Arc<LogFile>,
    /// A duplicate of the writers' descriptor.
    file: File,
    /// The head file, opened beside the log at start and rewritten in place (host_files).
    head: SmallFile,
    /// The last seq known durable: made so by this thread's fdatasync, or named by the head found.
    synced: u64,
    /// The seq the head file names (0: none yet).
    head_seq: u64,
    /// The last head rewrite failed: said once, and again only when it succeeds.
    head_failing: bool,
    /// An fdatasync failed: nothing is synced or named by the head any more.
    broken: bool,
}

/// What one wake-up of the sync thread must do.
struct Job {
    /// The last line written when the job was taken: what the sync makes durable and the head names.
    tail: Head,
    /// A partial line was cut off since the last job.
    cut: bool,
    /// The writer has stopped for good: flushes get this after the sync.
    failed: Option<Arc<AuditError>>,
    flushes: Vec<oneshot::Sender<Result<(), AuditError>>>,
    last: bool,
}

/// Runs when the sync thread ends, however it ends: later records and flushes must fail rather than
/// go unsynced, and no flush may wait forever.
struct Stopped(Arc<LogFile>);

impl Drop for Stopped {
    fn drop(&mut self) {
        let mut st = self.0.lock_anyway();
        let closed = self.0.closed();
        st.failed.get_or_insert_with(|| Arc::new(closed));
        st.syncer_gone = true;
        st.flushes.clear();
    }
}

impl Syncer {
    fn run(mut self) {
        let _stopped = Stopped(self.log.clone());
        loop {
            let job = self.next_job();
            // Lines written before a failure are still made durable; a flush then reports the
            // failure that stopped the writer, which matters more than any head problem.
            let synced = self.sync(&job);
            let result = match &job.failed {
                Some(first) => Err(self.log.unavailable(first.clone())),
                None => synced,
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
        let log = &*self.log;
        let mut st = log.lock_anyway();
        loop {
            if st.closed || !st.flushes.is_empty() {
                break;
            }
            match st.first_unsynced {
                Some(t0) if !self.broken => {
                    let due = t0 + SYNC_INTERVAL;
                    let now = Instant::now();
                    if st.unsynced >= SYNC_RECORDS || now >= due {
                        break;
                    }
                    st = log
                        .wake
                        .wait_timeout(st, due - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                _ => st = log.wake.wait(st).unwrap_or_else(|p| p.into_inner()),
            }
        }
        // Every line up to this one has been written: the fdatasync that follows covers it.
        st.unsynced = 0;
        st.first_unsynced = None;
        Job {
            tail: Head {
                seq: st.written_next_seq - 1,
                hash: st.written_prev.clone(),
            },
            cut: std::mem::take(&mut st.cut),
            failed: st.failed.clone(),
            flushes: std::mem::take(&mut st.flushes),
            last: st.closed,
        }
    }

    /// fdatasync (when anything was written or cut since the last one), then rewrite the head to
    /// name the job's tail, the last line written before the fdatasync (when it does not already).
    fn sync(&mut self, job: &Job) -> Result<(), AuditError> {
        let log = &*self.log;
        if self.broken {
            // Nothing is synced after a failed fdatasync. The failure that broke it is the
            // writer's `failed` from then on, so every later job carries it and `run` answers
            // with that.
            debug_assert!(job.failed.is_some());
            return Ok(());
        }
        let tail = &job.tail;
        if tail.seq != self.synced || job.cut {
            if let Err(e) = self.file.sync_data() {
                // Permanent: see the module documentation ("fsyncgate").
                self.broken = true;
                let err = AuditError::Sync {
                    path: log.path.clone(),
                    error: Arc::new(e),
                    durable: self.synced,
                };
                tracing::error!("{err}");
                return Err(log.fail(&mut log.lock_anyway(), err));
            }
            self.synced = tail.seq;
        }
        if tail.seq == 0 || tail.seq == self.head_seq {
            return Ok(());
        }
        match self.write_head(tail) {
            Ok(()) => {
                if self.head_failing {
                    self.head_failing = false;
                    tracing::info!(
                        "the audit head file {} is up to date again (seq {})",
                        self.head.path().display(),
                        tail.seq
                    );
                }
                self.head_seq = tail.seq;
                Ok(())
            }
            Err(e) => {
                let err = AuditError::Head {
                    path: self.head.path().to_path_buf(),
                    error: Arc::new(e),
                    named: self.head_seq,
                    last: tail.seq,
                };
                if !self.head_failing {
                    self.head_failing = true;
                    tracing::warn!(
                        "{err}; records are still written, and the head is tried again after every batch"
                    );
                }
                Err(err)
            }
        }
    }

    /// Rewrites the head in place: one write at offset 0 and an fdatasync (host_files::SmallFile
    /// says why in place, and why that is as safe against a crash as a rename was).
    fn write_head(&mut self, head: &Head) -> io::Result<()> {
        self.head.rewrite(head.to_text().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::client_text;
    use std::net::SocketAddr;

    #[test]
    fn a_client_address_reads_as_display_writes_it() {
        for addr in [
            "0.0.0.0:0",
            "127.0.0.1:54321",
            "10.200.3.4:80",
            "255.255.255.255:65535",
            "[::1]:8080",
            "[fe80::1%2]:1",
        ] {
            let addr: SocketAddr = addr.parse().unwrap();
            assert_eq!(client_text(addr), addr.to_string(), "{addr}");
        }
    }
}
