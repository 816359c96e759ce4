//! The export cursor, `<log>.otlp-cursor`: how far a receiver has acknowledged the log. One line,
//! `<seq> <offset> <sha256> <rejected>`: the seq of the last acknowledged record, the byte offset
//! just past its line (where the next batch starts), the SHA-256 of that line (so a log replaced
//! or cut under the cursor is noticed instead of shipping from the middle of another file), and
//! how many records the receiver rejected in partial successes so far. It is opened when the
//! export starts, through the log's directory descriptor, and rewritten in place only after an
//! acknowledgement ([`crate::host_files::SmallFile`]), so after a crash it names a batch the
//! receiver has, or an earlier one: records may be sent twice, never skipped.
//!
//! Also here, for `fenzi log --export-status`: the seq of the last record written to a log
//! ([`last_written`]) and both figures together ([`status`]).

use crate::host_files::{HostDir, SmallFile};
use fenzi_policy::audit::{GENESIS, line_hash};
use serde::Deserialize;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Longest line looked for when reading a log backwards (records are a few KiB at most: their
/// request-derived fields are cut to 512 characters).
pub(crate) const MAX_LINE: u64 = 256 * 1024;

/// How far a log has been acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The last acknowledged record (0: none yet).
    pub seq: u64,
    /// The byte offset just past that record's line.
    pub offset: u64,
    /// SHA-256 (hex) of that line; [`GENESIS`] when nothing is acknowledged.
    pub hash: String,
    /// Records the receiver rejected (partial success) among those acknowledged.
    pub rejected: u64,
}

impl Cursor {
    /// Nothing acknowledged: ship from the log's first byte.
    pub fn start() -> Cursor {
        Cursor {
            seq: 0,
            offset: 0,
            hash: GENESIS.to_string(),
            rejected: 0,
        }
    }

    pub fn to_text(&self) -> String {
        format!(
            "{} {} {} {}\n",
            self.seq, self.offset, self.hash, self.rejected
        )
    }

    pub fn parse(text: &str) -> Option<Cursor> {
        let mut it = text.split_whitespace();
        let seq = it.next()?.parse().ok()?;
        let offset = it.next()?.parse().ok()?;
        let hash = it.next()?.to_string();
        let rejected = it.next()?.parse().ok()?;
        let hex = hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit());
        if it.next().is_some() || !hex || (offset == 0) != (seq == 0) {
            return None;
        }
        Some(Cursor {
            seq,
            offset,
            hash,
            rejected,
        })
    }
}

/// The cursor file of a log: `<log path>.otlp-cursor`.
pub fn cursor_path(log: &Path) -> PathBuf {
    let mut s = log.as_os_str().to_owned();
    s.push(".otlp-cursor");
    PathBuf::from(s)
}

/// Why a cursor file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CursorError {
    #[error("cannot read {}: {error}", path.display())]
    Read { path: PathBuf, error: io::Error },
    #[error("{} is not `<seq> <offset> <sha256> <rejected>`", path.display())]
    Malformed { path: PathBuf },
}

/// The log's cursor, `None` when it has none (nothing was ever acknowledged; an empty file is
/// a cursor created before anything was).
pub fn read(log: &Path) -> Result<Option<Cursor>, CursorError> {
    let path = cursor_path(log);
    match fs::read_to_string(&path) {
        Ok(text) if text.is_empty() => Ok(None),
        Ok(text) => Cursor::parse(&text)
            .map(Some)
            .ok_or(CursorError::Malformed { path }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(CursorError::Read { path, error }),
    }
}

/// Opens (creating it empty when missing) the cursor file beside `log`, through `dir`, the log's
/// directory: it is rewritten in place from then on ([`write`]), never replaced.
pub fn open(dir: &HostDir, log: &Path) -> io::Result<SmallFile> {
    let name = log
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the log path names no file"))?;
    SmallFile::open(dir, cursor_path(Path::new(name)).as_os_str())
}

/// The cursor in `file`, `None` when it names none yet.
pub fn read_open(file: &SmallFile) -> Result<Option<Cursor>, CursorError> {
    let text = file.read().map_err(|error| CursorError::Read {
        path: file.path().to_path_buf(),
        error,
    })?;
    if text.is_empty() {
        return Ok(None);
    }
    std::str::from_utf8(&text)
        .ok()
        .and_then(Cursor::parse)
        .map(Some)
        .ok_or_else(|| CursorError::Malformed {
            path: file.path().to_path_buf(),
        })
}

/// Rewrites the cursor in place and makes it durable (see [`crate::host_files::SmallFile`] for why
/// in place, and why a crash leaves the old cursor or the new one).
pub fn write(file: &SmallFile, cursor: &Cursor) -> io::Result<()> {
    file.rewrite(cursor.to_text().as_bytes())
}

/// Opens the cursor beside `log` and writes `cursor` into it (outside a running export: before
/// a session starts, or in tests).
pub fn store(log: &Path, cursor: &Cursor) -> io::Result<()> {
    let dir = HostDir::of_file(log)?;
    write(&open(&dir, log)?, cursor)
}

/// Why a cursor does not fit the log beside it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    #[error("the log is {len} bytes, shorter than the cursor's offset {offset}")]
    Shorter { len: u64, offset: u64 },
    #[error("no record ends at the cursor's offset {offset}")]
    NotALineEnd { offset: u64 },
    #[error("the record ending at offset {offset} is not seq {seq} with the hash the cursor names")]
    Different { offset: u64, seq: u64 },
}

/// Checks that the line ending at `cursor.offset` is the record the cursor names.
pub fn check(file: &File, cursor: &Cursor) -> io::Result<Result<(), Mismatch>> {
    if cursor.offset == 0 {
        return Ok(Ok(()));
    }
    let len = file.metadata()?.len();
    if len < cursor.offset {
        return Ok(Err(Mismatch::Shorter {
            len,
            offset: cursor.offset,
        }));
    }
    match line_before(file, cursor.offset)? {
        None => Ok(Err(Mismatch::NotALineEnd {
            offset: cursor.offset,
        })),
        Some(line) if line_hash(&line) == cursor.hash && seq_of(&line) == Some(cursor.seq) => {
            Ok(Ok(()))
        }
        Some(_) => Ok(Err(Mismatch::Different {
            offset: cursor.offset,
            seq: cursor.seq,
        })),
    }
}

/// The whole line that ends (with its newline) at `end`, or `None` when `end` is not just past a
/// newline or the line is longer than [`MAX_LINE`].
pub(crate) fn line_before(file: &File, end: u64) -> io::Result<Option<Vec<u8>>> {
    let start = end.saturating_sub(MAX_LINE);
    let mut buf = vec![0u8; (end - start) as usize];
    file.read_exact_at(&mut buf, start)?;
    if buf.last() != Some(&b'\n') {
        return Ok(None);
    }
    buf.pop();
    match memchr_last_newline(&buf) {
        Some(i) => Ok(Some(buf[i + 1..].to_vec())),
        None if start == 0 => Ok(Some(buf)),
        None => Ok(None),
    }
}

fn memchr_last_newline(buf: &[u8]) -> Option<usize> {
    buf.iter().rposition(|&b| b == b'\n')
}

/// The fields of a record the export reads. Unknown fields are ignored (a record may gain some), so
/// this is not the strict [`fenzi_policy::audit::AuditRecord`].
#[derive(Debug, Deserialize)]
pub(crate) struct Fields {
    pub ts: String,
    pub seq: u64,
    pub session: String,
    pub decision: String,
    pub prev: String,
}

pub(crate) fn seq_of(line: &[u8]) -> Option<u64> {
    serde_json::from_slice::<Fields>(line).ok().map(|f| f.seq)
}

/// The seq of the last whole record in the log (`None`: no record yet, or the last line is not a
/// record). Reads a few KiB from the end, more only when the last line is longer.
pub fn last_written(file: &File) -> io::Result<Option<u64>> {
    let len = file.metadata()?.len();
    for window in [8 * 1024, MAX_LINE] {
        let start = len.saturating_sub(window);
        let mut buf = vec![0u8; (len - start) as usize];
        file.read_exact_at(&mut buf, start)?;
        // A line still being appended has no newline yet: the last whole one ends before it.
        let Some(end) = memchr_last_newline(&buf) else {
            if start == 0 {
                return Ok(None);
            }
            continue;
        };
        let begin = match memchr_last_newline(&buf[..end]) {
            Some(i) => i + 1,
            None if start == 0 => 0,
            None => continue,
        };
        return Ok(seq_of(&buf[begin..end]));
    }
    Ok(None)
}

/// How far a log's export has got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The last record written (`None`: none).
    pub written: Option<u64>,
    /// The cursor (`None`: nothing acknowledged yet, or never exported).
    pub cursor: Option<Cursor>,
    /// The cursor does not fit the log (an exporter would ship the log again from the start).
    pub mismatch: Option<Mismatch>,
}

impl Status {
    /// Records written and not acknowledged.
    pub fn lag(&self) -> u64 {
        let acked = match (&self.cursor, &self.mismatch) {
            (Some(c), None) => c.seq,
            _ => 0,
        };
        self.written.unwrap_or(0).saturating_sub(acked)
    }
}

/// The export status of the log at `log`.
pub fn status(log: &Path) -> Result<Status, CursorError> {
    let read_error = |error| CursorError::Read {
        path: log.to_path_buf(),
        error,
    };
    let file = File::open(log).map_err(read_error)?;
    let written = last_written(&file).map_err(read_error)?;
    let cursor = read(log)?;
    let mismatch = match &cursor {
        Some(c) => check(&file, c).map_err(read_error)?.err(),
        None => None,
    };
    Ok(Status {
        written,
        cursor,
        mismatch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn line(seq: u64, prev: &str) -> String {
        format!(
            r#"{{"ts":"2026-12-03T10:00:00.000Z","seq":{seq},"session":"s1","decision":"allowed","method":"GET","host":"a","port":80,"secrets":[],"prev":"{prev}"}}"#
        )
    }

    fn log_with(n: u64) -> (tempfile::TempDir, PathBuf, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        let mut lines = Vec::new();
        let mut prev = GENESIS.to_string();
        for seq in 1..=n {
            let l = line(seq, &prev);
            prev = line_hash(l.as_bytes());
            lines.push(l);
        }
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        fs::write(&path, text).unwrap();
        (dir, path, lines)
    }

    #[test]
    fn text_round_trip_and_rejects() {
        let c = Cursor {
            seq: 17,
            offset: 4096,
            hash: "ab".repeat(32),
            rejected: 2,
        };
        assert_eq!(Cursor::parse(&c.to_text()), Some(c.clone()));
        assert_eq!(
            Cursor::parse(&Cursor::start().to_text()),
            Some(Cursor::start())
        );
        for bad in [
            "",
            "17 4096",
            "17 4096 abc 0",
            &format!("17 4096 {} 0 extra", "ab".repeat(32)),
            &format!("-1 4096 {} 0", "ab".repeat(32)),
            &format!("17 0 {} 0", "ab".repeat(32)),
            &format!("0 5 {} 0", "ab".repeat(32)),
            &format!("17 4096 {} x", "zz".repeat(32)),
        ] {
            assert_eq!(Cursor::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn write_then_read_and_check() {
        let (_dir, path, lines) = log_with(3);
        assert_eq!(read(&path).unwrap(), None);
        let offset = (lines[0].len() + lines[1].len() + 2) as u64;
        let c = Cursor {
            seq: 2,
            offset,
            hash: line_hash(lines[1].as_bytes()),
            rejected: 0,
        };
        store(&path, &c).unwrap();
        assert_eq!(read(&path).unwrap(), Some(c.clone()));
        let file = File::open(&path).unwrap();
        assert_eq!(check(&file, &c).unwrap(), Ok(()));
        assert_eq!(last_written(&file).unwrap(), Some(3));
        let s = status(&path).unwrap();
        assert_eq!((s.written, s.lag(), s.mismatch), (Some(3), 1, None));

        // Not at a line end, a different record, a log cut short.
        let off = Cursor {
            offset: offset - 1,
            ..c.clone()
        };
        assert!(matches!(
            check(&file, &off).unwrap(),
            Err(Mismatch::NotALineEnd { .. })
        ));
        let other = Cursor {
            hash: line_hash(lines[0].as_bytes()),
            ..c.clone()
        };
        assert!(matches!(
            check(&file, &other).unwrap(),
            Err(Mismatch::Different { .. })
        ));
        let beyond = Cursor {
            offset: 1 << 20,
            ..c.clone()
        };
        assert!(matches!(
            check(&file, &beyond).unwrap(),
            Err(Mismatch::Shorter { .. })
        ));
    }

    #[test]
    fn last_written_ignores_a_line_being_appended() {
        let (_dir, path, _) = log_with(2);
        let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(br#"{"ts":"2026-12-03T10:00:00.000Z","seq":3"#)
            .unwrap();
        let file = File::open(&path).unwrap();
        assert_eq!(last_written(&file).unwrap(), Some(2));
        let empty = path.with_extension("empty");
        fs::write(&empty, "").unwrap();
        assert_eq!(last_written(&File::open(&empty).unwrap()).unwrap(), None);
    }

    #[test]
    fn malformed_cursor_file_names_itself() {
        let (_dir, path, _) = log_with(1);
        fs::write(cursor_path(&path), "nonsense\n").unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains("a.jsonl.otlp-cursor"), "{e}");
    }
}
