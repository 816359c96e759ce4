//! Audit export over OTLP/HTTP (`--otlp URL`): every record of the local hash-chained log shipped
//! as an OpenTelemetry log record, at least once and in order.
//!
//! The exporter reads the log file; it never sits between a request and its record. It runs on its
//! own thread (`fenzi-export`, with its own single-threaded runtime), so its file reads, cursor
//! fsyncs and network waits take nothing from the workers that serve requests, and nothing it does
//! can make a request slower, fail it or let it through.
//!
//! - **Tailing**: every [`ExportConfig::poll`] it looks for whole lines past the cursor and ships
//!   them in batches of up to [`ExportConfig::batch_records`] lines (and
//!   [`ExportConfig::batch_bytes`]). A line still being appended (no newline yet) waits. Each line is
//!   checked to continue the hash chain (`prev`, `seq`) of the one before it, back to the cursor: a
//!   log changed under the exporter stops the export instead of shipping it.
//! - **Acknowledgement** (`cursor`): `<log>.otlp-cursor` advances, atomically, only after a 2xx
//!   for the whole batch. One batch is in flight at a time, so batch k+1 is never sent before batch
//!   k is acknowledged: in order, per session and per log.
//! - **Retries** (`retry`): 429, 5xx, connection errors and timeouts send the same batch again after
//!   a capped exponential backoff with jitter, or after `Retry-After`. Any other status stops the
//!   export for good (said once through [`ExportConfig::note`]); the log keeps everything and the
//!   cursor stays where it was.
//! - **Partial success**: the receiver took the batch but rejected some records. The OTLP
//!   specification forbids sending that request again, and a receiver that rejected records for what
//!   they are would only reject them again (stopping the export would halt the whole trail on one
//!   record it will never take). So the cursor moves past the batch, the rejected count is added to
//!   the cursor file (`fenzi log --export-status` shows it) and the receiver's message is noted,
//!   naming the batch's seq range. The records stay in the local log, and the receiver sees the gap
//!   in `fenzi.seq`.
//! - **Drain** ([`Exporter::drain`]): at exit it keeps shipping until it has caught up with the log
//!   or the time is up, and [`DrainReport`] says how far it got.
//! - **Resume**: a log continued by a later run (`--audit` naming the same file) is shipped from its
//!   cursor. A cursor that does not fit the log (a different file at that path) is noted and the log
//!   is shipped from its start; receivers deduplicate on (`fenzi.session`, `fenzi.seq`).
//!
//! [`ExportProgress`] is the live count (records written, acknowledged, lag) for metrics.
//!
//! May use: `error`, `host_files`, `tls`.

pub mod cursor;
mod endpoint;
mod otlp;
mod retry;

pub use cursor::{Cursor, Status, cursor_path, status};
pub use endpoint::Endpoint;
pub use retry::MAX_RETRY_AFTER;

use crate::host_files::{HostDir, SmallFile};
use bytes::Bytes;
use cursor::{CursorError, Fields};
use endpoint::Client;
use fenzi_policy::audit::line_hash;
use otlp::Shipped;
use retry::{Backoff, Verdict};
use rustls::pki_types::CertificateDer;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{oneshot, watch};

/// The name of the exporter's thread.
pub const EXPORT_THREAD: &str = "fenzi-export";
/// Below this much drain time left, no further try is started.
const LAST_TRY: Duration = Duration::from_millis(50);

/// Where a line of what the export has to say goes (stderr, or the session's log file).
pub type Note = Arc<dyn Fn(&str) + Send + Sync>;

/// What to export and how.
pub struct ExportConfig {
    pub endpoint: Endpoint,
    /// The audit log (it must exist: the writer has opened it).
    pub log: PathBuf,
    /// Trusted beside the public roots for an `https` endpoint (`--upstream-ca`).
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// Most records in one request.
    pub batch_records: usize,
    /// Most bytes of log lines read for one request.
    pub batch_bytes: usize,
    /// How often the log is looked at for new records.
    pub poll: Duration,
    /// One request: connecting, sending, the answer.
    pub request_timeout: Duration,
    /// The first retry's wait, doubled on each failure up to `backoff_max`.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    pub note: Note,
}

impl ExportConfig {
    /// The defaults: batches of up to 512 records or 1 MiB, the log looked at every 200 ms, 10 s per
    /// request, backoff from 500 ms to 30 s.
    pub fn new(endpoint: Endpoint, log: PathBuf, note: Note) -> ExportConfig {
        ExportConfig {
            endpoint,
            log,
            extra_roots: Vec::new(),
            batch_records: 512,
            batch_bytes: 1024 * 1024,
            poll: Duration::from_millis(200),
            request_timeout: Duration::from_secs(10),
            backoff_initial: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            note,
        }
    }
}

/// How far the export has got, live: cheap to clone, read with atomic loads.
#[derive(Debug, Clone, Default)]
pub struct ExportProgress {
    inner: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    written: AtomicU64,
    acked: AtomicU64,
    rejected: AtomicU64,
    stopped: AtomicBool,
}

impl ExportProgress {
    /// Records written to the log and not yet acknowledged by the receiver (`fenzi_export_lag_records`).
    /// "Written" is as the exporter last looked (every poll), so it may trail the log by one poll.
    pub fn lag(&self) -> u64 {
        self.written().saturating_sub(self.acked())
    }
    /// The seq of the last record seen in the log.
    pub fn written(&self) -> u64 {
        self.inner.written.load(Ordering::Relaxed)
    }
    /// The seq of the last record acknowledged (the cursor).
    pub fn acked(&self) -> u64 {
        self.inner.acked.load(Ordering::Relaxed)
    }
    /// Records the receiver rejected in partial successes (counted as acknowledged).
    pub fn rejected(&self) -> u64 {
        self.inner.rejected.load(Ordering::Relaxed)
    }
    /// The export stopped for good (a permanent answer, or a log that does not continue its chain).
    pub fn stopped(&self) -> bool {
        self.inner.stopped.load(Ordering::Relaxed)
    }
}

/// How far the export got by the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainReport {
    pub url: String,
    pub cursor: PathBuf,
    /// The last acknowledged seq.
    pub acked: u64,
    /// The last seq in the log.
    pub written: u64,
    pub rejected: u64,
    /// Why the export stopped before the end, if it did.
    pub stopped: Option<String>,
}

impl DrainReport {
    /// Every record written was acknowledged.
    pub fn caught_up(&self) -> bool {
        self.acked >= self.written
    }
}

impl std::fmt::Display for DrainReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rejected = match self.rejected {
            0 => String::new(),
            n => format!(" ({n} of them rejected by the receiver)"),
        };
        if self.caught_up() {
            return write!(
                f,
                "export to {}: caught up, every record up to seq {} acknowledged{rejected}",
                self.url, self.acked
            );
        }
        write!(
            f,
            "export to {}: acknowledged up to seq {} of {}{rejected}; {} not shipped. They stay in \
             the log, and the next run with this log resumes from its cursor ({})",
            self.url,
            self.acked,
            self.written,
            match self.written - self.acked {
                1 => "1 record".to_string(),
                n => format!("{n} records"),
            },
            self.cursor.display()
        )?;
        if let Some(why) = &self.stopped {
            write!(f, " (the export had stopped: {why})")?;
        }
        Ok(())
    }
}

/// Why the export could not start.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("cannot read the audit log {} for export: {error}", path.display())]
    Log { path: PathBuf, error: io::Error },
    #[error(transparent)]
    Cursor(#[from] CursorError),
    #[error("--otlp: {0}")]
    Client(String),
    #[error("cannot start the export thread: {0}")]
    Thread(io::Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Run,
    /// Ship what is left until this instant.
    Drain(Instant),
}

/// The running export of one log.
pub struct Exporter {
    progress: ExportProgress,
    mode: watch::Sender<Mode>,
    done: oneshot::Receiver<DrainReport>,
    url: String,
    cursor: PathBuf,
}

impl Exporter {
    /// Reads the cursor, checks it against the log and starts the `fenzi-export` thread. Errors are
    /// of the set-up only (the log or the cursor file cannot be read, TLS cannot be set up);
    /// nothing a receiver does is an error here.
    pub fn start(config: ExportConfig) -> Result<Exporter, ExportError> {
        let log_error = |error| ExportError::Log {
            path: config.log.clone(),
            error,
        };
        // The log and its cursor through the log's directory, opened now, before the agent runs:
        // never through a link, and the cursor rewritten in place (crate::host_files).
        let dir = HostDir::of_file(&config.log).map_err(log_error)?;
        let name = config.log.file_name().ok_or_else(|| {
            log_error(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the path names no file",
            ))
        })?;
        let file = dir.open_read(name).map_err(log_error)?;
        let cursor_file = cursor::open(&dir, &config.log).map_err(|error| {
            ExportError::Cursor(CursorError::Read {
                path: cursor_path(&config.log),
                error,
            })
        })?;
        let mut cursor = cursor::read_open(&cursor_file)?.unwrap_or_else(Cursor::start);
        if let Err(mismatch) = cursor::check(&file, &cursor).map_err(log_error)? {
            (config.note)(&format!(
                "export: the cursor {} does not fit the log ({mismatch}): the log was replaced or \
                 cut, so it is shipped again from its start (receivers deduplicate on fenzi.session \
                 and fenzi.seq)",
                cursor_path(&config.log).display()
            ));
            cursor = Cursor::start();
        }
        let client = Client::new(config.endpoint.clone(), &config.extra_roots)
            .map_err(ExportError::Client)?;
        let progress = ExportProgress::default();
        let written = cursor::last_written(&file).map_err(log_error)?;
        progress.inner.acked.store(cursor.seq, Ordering::Relaxed);
        progress
            .inner
            .written
            .store(written.unwrap_or(0).max(cursor.seq), Ordering::Relaxed);
        progress
            .inner
            .rejected
            .store(cursor.rejected, Ordering::Relaxed);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ExportError::Thread)?;
        let (mode_tx, mode_rx) = watch::channel(Mode::Run);
        let (done_tx, done_rx) = oneshot::channel();
        let (url, cursor_path) = (config.endpoint.url().to_string(), cursor_path(&config.log));
        let shipper = Shipper {
            cursor_file,
            backoff: Backoff::new(config.backoff_initial, config.backoff_max),
            config,
            file,
            cursor,
            client,
            progress: progress.clone(),
            mode: mode_rx,
            orphaned: false,
            failing: false,
            cursor_failing: false,
            scanned_len: 0,
            last_sent: None,
        };
        std::thread::Builder::new()
            .name(EXPORT_THREAD.into())
            .spawn(move || {
                let report = runtime.block_on(shipper.run());
                let _ = done_tx.send(report);
            })
            .map_err(ExportError::Thread)?;
        Ok(Exporter {
            progress,
            mode: mode_tx,
            done: done_rx,
            url,
            cursor: cursor_path,
        })
    }

    /// The live progress (for metrics: [`ExportProgress::lag`]).
    pub fn progress(&self) -> ExportProgress {
        self.progress.clone()
    }

    /// Ships what is left within `timeout`, then stops the export and says how far it got. Call it
    /// after the audit log's last record is written.
    pub async fn drain(self, timeout: Duration) -> DrainReport {
        let deadline = Instant::now() + timeout;
        let _ = self.mode.send(Mode::Drain(deadline));
        // The thread honours the deadline itself; the margin only guards against it hanging.
        match tokio::time::timeout(timeout + Duration::from_secs(2), self.done).await {
            Ok(Ok(report)) => report,
            _ => DrainReport {
                url: self.url,
                cursor: self.cursor,
                acked: self.progress.acked(),
                written: self.progress.written(),
                rejected: self.progress.rejected(),
                stopped: Some("the export thread did not finish".into()),
            },
        }
    }
}

/// One batch read from the log.
struct Batch {
    records: Vec<Shipped>,
    /// Offset just past its last line, the hash and seq of that line.
    end: u64,
    last_hash: String,
    last_seq: u64,
}

impl Batch {
    fn range(&self) -> String {
        match self.records.first().map_or(0, |r| r.fields.seq) {
            first if first == self.last_seq => format!("seq {first}"),
            first => format!("seq {first}..{}", self.last_seq),
        }
    }
}

/// The exporter's state on its thread.
struct Shipper {
    config: ExportConfig,
    file: File,
    /// What the receiver has acknowledged (as in the cursor file).
    cursor: Cursor,
    /// The cursor file, opened at start.
    cursor_file: SmallFile,
    client: Client,
    backoff: Backoff,
    progress: ExportProgress,
    mode: watch::Receiver<Mode>,
    /// The [`Exporter`] was dropped without a drain: stop.
    orphaned: bool,
    /// Tries are failing (said once, until one succeeds).
    failing: bool,
    /// The cursor file cannot be written (said once, until it can).
    cursor_failing: bool,
    /// The log's length when `written` was last brought up to date.
    scanned_len: u64,
    /// When the last batch was first sent.
    last_sent: Option<Instant>,
}

impl Shipper {
    async fn run(mut self) -> DrainReport {
        let stopped = self.ship().await.err();
        if let Some(why) = &stopped {
            self.progress.inner.stopped.store(true, Ordering::Relaxed);
            (self.config.note)(&format!("export to {}: {why}", self.config.endpoint));
            // Nothing more to send until the session ends; the lag still counts what is written.
            while !self.orphaned && self.deadline().is_none() {
                let poll = self.config.poll;
                tokio::select! {
                    _ = tokio::time::sleep(poll) => self.refresh_written(),
                    changed = self.mode.changed() => if changed.is_err() { self.orphaned = true },
                }
            }
        }
        self.refresh_written();
        DrainReport {
            url: self.config.endpoint.url().to_string(),
            cursor: cursor_path(&self.config.log),
            acked: self.cursor.seq,
            written: self.progress.written(),
            rejected: self.cursor.rejected,
            stopped,
        }
    }

    fn deadline(&self) -> Option<Instant> {
        match *self.mode.borrow() {
            Mode::Run => None,
            Mode::Drain(at) => Some(at),
        }
    }

    /// Ships until drained (`Ok`: caught up, or out of drain time) or stopped for good (`Err`, why).
    async fn ship(&mut self) -> Result<(), String> {
        loop {
            if self.orphaned {
                return Ok(());
            }
            self.refresh_written();
            let batch = self.read_batch()?;
            if batch.records.is_empty() {
                if self.deadline().is_some() {
                    return Ok(());
                }
                let poll = self.config.poll;
                tokio::select! {
                    _ = tokio::time::sleep(poll) => {}
                    changed = self.mode.changed() => if changed.is_err() { self.orphaned = true },
                }
                continue;
            }
            // A batch that is not full waits out the poll interval since the last send, so a busy
            // session ships few large requests (each also costs a cursor fsync), not one per
            // handful of records; a full one goes at once, and so does everything while draining.
            let linger = self.last_sent.map(|at| at + self.config.poll);
            if let Some(until) = linger.filter(|&until| {
                batch.records.len() < self.config.batch_records
                    && batch.end - self.cursor.offset < self.config.batch_bytes as u64 / 2
                    && self.deadline().is_none()
                    && until > Instant::now()
            }) {
                tokio::select! {
                    _ = tokio::time::sleep_until(until.into()) => {}
                    changed = self.mode.changed() => if changed.is_err() { self.orphaned = true },
                }
                continue;
            }
            self.last_sent = Some(Instant::now());
            if !self.send(batch).await? {
                return Ok(());
            }
        }
    }

    fn refresh_written(&mut self) {
        let Ok(meta) = self.file.metadata() else {
            return;
        };
        if meta.len() == self.scanned_len {
            return;
        }
        if let Ok(Some(seq)) = cursor::last_written(&self.file) {
            self.progress
                .inner
                .written
                .fetch_max(seq, Ordering::Relaxed);
        }
        self.scanned_len = meta.len();
    }

    /// The whole lines after the cursor, each checked to continue the chain. `Err`: the log does not
    /// continue as shipped so far (the export stops).
    fn read_batch(&mut self) -> Result<Batch, String> {
        let log = self.config.log.display();
        let from = self.cursor.offset;
        let mut batch = Batch {
            records: Vec::new(),
            end: from,
            last_hash: self.cursor.hash.clone(),
            last_seq: self.cursor.seq,
        };
        let len = self
            .file
            .metadata()
            .map_err(|e| format!("cannot read {log}: {e}"))?
            .len();
        if len < from {
            return Err(format!(
                "{log} is now {len} bytes, shorter than the {from} bytes already shipped: it was cut \
                 or replaced; run `fenzi log --file {log} --verify`"
            ));
        }
        let want = (len - from).min(self.config.batch_bytes as u64) as usize;
        if want == 0 {
            return Ok(batch);
        }
        let mut buf = vec![0u8; want];
        self.file
            .read_exact_at(&mut buf, from)
            .map_err(|e| format!("cannot read {log}: {e}"))?;
        let mut start = 0usize;
        while batch.records.len() < self.config.batch_records {
            let Some(nl) = buf[start..].iter().position(|&b| b == b'\n') else {
                break;
            };
            let line = &buf[start..start + nl];
            let at = from + start as u64;
            let broken = |what: String| {
                format!(
                    "{log} at byte {at}: {what}; the export stops here (run `fenzi log --file {log} --verify`)"
                )
            };
            let fields: Fields = serde_json::from_slice(line)
                .map_err(|e| broken(format!("not an audit record: {e}")))?;
            let continues = fields.prev == batch.last_hash
                && (batch.last_seq == 0 || fields.seq == batch.last_seq + 1);
            if !continues {
                return Err(broken(format!(
                    "seq {} does not continue the hash chain after seq {}",
                    fields.seq, batch.last_seq
                )));
            }
            let text =
                String::from_utf8(line.to_vec()).map_err(|_| broken("not UTF-8".to_string()))?;
            batch.last_hash = line_hash(line);
            batch.last_seq = fields.seq;
            start += nl + 1;
            batch.end = from + start as u64;
            batch.records.push(Shipped { line: text, fields });
        }
        if batch.records.is_empty() && want == self.config.batch_bytes {
            return Err(format!(
                "{log} at byte {from}: a line longer than {} bytes; the export stops here",
                self.config.batch_bytes
            ));
        }
        Ok(batch)
    }

    /// Sends one batch until it is acknowledged (`Ok(true)`), the drain time is up (`Ok(false)`),
    /// or the answer is permanent (`Err`).
    async fn send(&mut self, batch: Batch) -> Result<bool, String> {
        let observed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let body = Bytes::from(otlp::encode(&batch.records, observed));
        let url = self.config.endpoint.url().to_string();
        loop {
            let mut timeout = self.config.request_timeout;
            if let Some(deadline) = self.deadline() {
                let left = deadline.saturating_duration_since(Instant::now());
                if left < LAST_TRY {
                    return Ok(false);
                }
                timeout = timeout.min(left);
            }
            // A drain that begins while a request is out cuts it at its deadline.
            let answer = {
                let post = self.client.post(body.clone(), timeout);
                tokio::pin!(post);
                loop {
                    let deadline = match *self.mode.borrow() {
                        Mode::Drain(at) => Some(at),
                        Mode::Run => None,
                    };
                    let cut = async move {
                        match deadline {
                            Some(at) => tokio::time::sleep_until(at.into()).await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        answer = &mut post => break Some(answer),
                        changed = self.mode.changed(), if !self.orphaned => {
                            if changed.is_err() {
                                self.orphaned = true;
                            }
                        }
                        _ = cut => break None,
                    }
                }
            };
            let Some(answer) = answer else {
                return Ok(false);
            };
            match retry::judge(answer, SystemTime::now()) {
                Verdict::Accepted { rejected, message } => {
                    if self.failing {
                        self.failing = false;
                        (self.config.note)(&format!(
                            "export to {url}: delivering again ({} acknowledged)",
                            batch.range()
                        ));
                    }
                    if rejected > 0 {
                        (self.config.note)(&format!(
                            "export to {url}: the receiver rejected {rejected} of the {} records \
                             of {}: {message:?}. A partial success is not sent again; the log keeps \
                             them",
                            batch.records.len(),
                            batch.range()
                        ));
                    } else if !message.is_empty() {
                        (self.config.note)(&format!(
                            "export to {url}: the receiver accepted {} with a warning: {message:?}",
                            batch.range()
                        ));
                    }
                    self.acknowledge(&batch, rejected);
                    self.backoff.reset();
                    return Ok(true);
                }
                Verdict::Retry { why, after } => {
                    if !self.failing {
                        self.failing = true;
                        (self.config.note)(&format!(
                            "export to {url}: {why}; sending {} again with backoff (requests are \
                             not affected, the log keeps everything)",
                            batch.range()
                        ));
                    }
                    let wait = self.backoff.next(after);
                    if !self.wait(wait).await {
                        return Ok(false);
                    }
                }
                Verdict::Permanent { why } => {
                    return Err(format!(
                        "{why} to {}. Only 429 and 5xx are retried, so the export stops here; the \
                         log keeps everything, and the cursor stays at seq {}",
                        batch.range(),
                        self.cursor.seq
                    ));
                }
            }
        }
    }

    fn acknowledge(&mut self, batch: &Batch, rejected: u64) {
        self.cursor = Cursor {
            seq: batch.last_seq,
            offset: batch.end,
            hash: batch.last_hash.clone(),
            rejected: self.cursor.rejected + rejected,
        };
        match cursor::write(&self.cursor_file, &self.cursor) {
            Ok(()) if self.cursor_failing => {
                self.cursor_failing = false;
                (self.config.note)(&format!(
                    "export: {} is written again",
                    cursor_path(&self.config.log).display()
                ));
            }
            Ok(()) => {}
            // At least once still holds: a restart sends again what the stale cursor lacks.
            Err(e) if !self.cursor_failing => {
                self.cursor_failing = true;
                (self.config.note)(&format!(
                    "export: cannot write {}: {e}; after a restart, records acknowledged since \
                     will be sent again",
                    cursor_path(&self.config.log).display()
                ));
            }
            Err(_) => {}
        }
        let p = &self.progress.inner;
        p.acked.store(self.cursor.seq, Ordering::Relaxed);
        p.rejected.store(self.cursor.rejected, Ordering::Relaxed);
        p.written.fetch_max(self.cursor.seq, Ordering::Relaxed);
    }

    /// Waits `wait` before the next try; `false` when there is no time for one (the drain's
    /// deadline) or the exporter is gone. In a drain, a wait that would outlast the deadline is cut
    /// to half the time left, so one more try fits.
    async fn wait(&mut self, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        loop {
            if self.orphaned {
                return false;
            }
            let now = Instant::now();
            let target = match self.deadline() {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(now);
                    if left < LAST_TRY {
                        return false;
                    }
                    if until > deadline {
                        now + left / 2
                    } else {
                        until
                    }
                }
                None => until,
            };
            tokio::select! {
                _ = tokio::time::sleep_until(target.into()) => return true,
                changed = self.mode.changed() => if changed.is_err() { self.orphaned = true },
            }
        }
    }
}
