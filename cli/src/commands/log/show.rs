//! Printing the log: each complete line read, filtered, and printed as stored (`--json`) or rendered;
//! with `--follow`, polling for new lines and starting over when the log is replaced or truncated.
//! Dates are shown when the records span more than one UTC day.

use super::filter::Filter;
use super::ocsf;
use super::render::{hint, render};
use anyhow::{Context, bail};
use fenzi_policy::audit::AuditRecord;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

const POLL: Duration = Duration::from_millis(200);

/// Reads complete lines from a log, remembering where it stopped so a growing file can be followed.
struct LineReader {
    path: PathBuf,
    reader: BufReader<File>,
    ino: (u64, u64),
    offset: u64,
    partial: Vec<u8>,
    line_no: usize,
}

impl LineReader {
    fn open(path: &Path) -> anyhow::Result<LineReader> {
        let file = File::open(path)
            .with_context(|| format!("cannot read the audit log {}", path.display()))?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            bail!("{} is not a regular file", path.display());
        }
        Ok(LineReader {
            path: path.to_path_buf(),
            reader: BufReader::new(file),
            ino: (meta.dev(), meta.ino()),
            offset: 0,
            partial: Vec::new(),
            line_no: 0,
        })
    }

    /// Calls `each(line_no, line)` for every complete line not seen yet.
    fn read_new(
        &mut self,
        each: &mut dyn FnMut(usize, &[u8]) -> io::Result<()>,
    ) -> anyhow::Result<()> {
        loop {
            let n = self
                .reader
                .read_until(b'\n', &mut self.partial)
                .with_context(|| format!("cannot read the audit log {}", self.path.display()))?;
            if n == 0 {
                return Ok(());
            }
            self.offset += n as u64;
            if self.partial.ends_with(b"\n") {
                self.line_no += 1;
                let line = std::mem::take(&mut self.partial);
                each(self.line_no, &line[..line.len() - 1])?;
            }
        }
    }

    /// Notices a log replaced (new file at the path) or truncated, and starts over from its beginning.
    fn check_replaced(&mut self) -> anyhow::Result<bool> {
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(_) => return Ok(false), // gone for now (being rotated): keep the old one
        };
        let replaced = (meta.dev(), meta.ino()) != self.ino;
        if replaced || meta.len() < self.offset {
            *self = LineReader::open(&self.path)?;
            return Ok(true);
        }
        Ok(false)
    }
}

/// How `fenzi log` prints a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    /// One line for a person.
    Lines,
    /// The stored line (`--json`).
    Json,
    /// An OCSF event (`--ocsf`).
    Ocsf,
}

impl Format {
    pub fn of(args: &super::Args) -> Format {
        if args.ocsf {
            Format::Ocsf
        } else if args.json {
            Format::Json
        } else {
            Format::Lines
        }
    }
}

pub(super) fn show(
    path: &Path,
    filter: &Filter,
    format: Format,
    colour: bool,
    follow: bool,
    dates: bool,
) -> anyhow::Result<()> {
    let mut reader = LineReader::open(path)?;
    let stdout = io::stdout();
    let mut printer = Printer {
        path,
        filter,
        format,
        colour,
        show_date: dates || spans_days(path),
        first_date: None,
        out: io::BufWriter::new(stdout.lock()),
    };
    reader.read_new(&mut |n, line| printer.line(n, line))?;
    printer.out.flush()?;
    if !follow {
        return Ok(());
    }
    loop {
        std::thread::sleep(POLL);
        if reader.check_replaced()? {
            eprintln!(
                "fenzi: {} was replaced or truncated; reading it from the start",
                path.display()
            );
        }
        reader.read_new(&mut |n, line| printer.line(n, line))?;
        printer.out.flush()?;
    }
}

/// Prints the records that pass the filter, as stored (`--json`) or rendered.
struct Printer<'a, W: Write> {
    path: &'a Path,
    filter: &'a Filter,
    format: Format,
    colour: bool,
    show_date: bool,
    /// The first record's date; a later record on another day turns dates on (for `--follow`).
    first_date: Option<String>,
    out: W,
}

impl<W: Write> Printer<'_, W> {
    fn line(&mut self, n: usize, line: &[u8]) -> io::Result<()> {
        let record: AuditRecord = match serde_json::from_slice(line) {
            Ok(r) => r,
            Err(e) => {
                self.out.flush()?;
                eprintln!(
                    "fenzi: {}: line {n} is not an audit record ({e}); run `fenzi log --verify`",
                    self.path.display()
                );
                return Ok(());
            }
        };
        if let Some(date) = record.ts.get(0..10) {
            match &self.first_date {
                None => self.first_date = Some(date.to_string()),
                Some(d) if d != date => self.show_date = true,
                _ => {}
            }
        }
        if !self.filter.matches(&record) {
            return Ok(());
        }
        match self.format {
            Format::Json => {
                self.out.write_all(line)?;
                self.out.write_all(b"\n")
            }
            Format::Ocsf => {
                // A record parsed from the line is valid UTF-8 JSON text.
                let raw = String::from_utf8_lossy(line);
                match ocsf::event(&record, &raw) {
                    Ok(event) => writeln!(self.out, "{event}"),
                    Err(e) => {
                        self.out.flush()?;
                        eprintln!("fenzi: {}: line {n}: {e}; not printed", self.path.display());
                        Ok(())
                    }
                }
            }
            Format::Lines => {
                writeln!(self.out, "{}", render(&record, self.show_date, self.colour))?;
                match hint(&record) {
                    Some(h) => writeln!(self.out, "  {h}"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// True when the log's first and last records are on different UTC days.
fn spans_days(path: &Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    let mut first = String::new();
    if BufReader::new(&file).read_line(&mut first).is_err() {
        return false;
    }
    let last = last_line(&file).unwrap_or_default();
    let date = |l: &str| -> Option<String> {
        let r: AuditRecord = serde_json::from_str(l.trim_end()).ok()?;
        r.ts.get(0..10).map(str::to_string)
    };
    matches!((date(&first), date(&last)), (Some(a), Some(b)) if a != b)
}

/// The last complete line of a file, reading only its end.
fn last_line(mut file: &File) -> io::Result<String> {
    let len = file.metadata()?.len();
    let mut start = len.saturating_sub(64 * 1024);
    loop {
        file.seek(SeekFrom::Start(start))?;
        let mut buf = Vec::new();
        io::Read::read_to_end(&mut file, &mut buf)?;
        let body = buf.strip_suffix(b"\n").unwrap_or(&buf);
        if let Some(i) = body.iter().rposition(|&b| b == b'\n') {
            return Ok(String::from_utf8_lossy(&body[i + 1..]).into_owned());
        }
        if start == 0 {
            return Ok(String::from_utf8_lossy(body).into_owned());
        }
        start = start.saturating_sub(1024 * 1024);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::log::test_records::chain;

    #[test]
    fn reading_follows_growth() {
        let dir = std::env::temp_dir().join(format!("fenzi-log-follow-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("audit.jsonl");

        // A partial line is held back until its newline arrives.
        std::fs::write(&log, "one\ntw").unwrap();
        let mut r = LineReader::open(&log).unwrap();
        let mut seen = Vec::new();
        r.read_new(&mut |n, l| {
            seen.push((n, String::from_utf8(l.to_vec()).unwrap()));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, [(1, "one".to_string())]);
        File::options()
            .append(true)
            .open(&log)
            .unwrap()
            .write_all(b"o\nthree\n")
            .unwrap();
        r.read_new(&mut |n, l| {
            seen.push((n, String::from_utf8(l.to_vec()).unwrap()));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            seen,
            [
                (1, "one".to_string()),
                (2, "two".into()),
                (3, "three".into())
            ]
        );
        // Truncated and rewritten: read again from the start.
        std::fs::write(&log, "x\n").unwrap();
        assert!(r.check_replaced().unwrap());
        seen.clear();
        r.read_new(&mut |n, l| {
            seen.push((n, String::from_utf8(l.to_vec()).unwrap()));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, [(1, "x".to_string())]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_date_shows_when_the_log_spans_days() {
        let dir = std::env::temp_dir().join(format!("fenzi-log-days-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (log, _) = chain(3);
        let one_day = dir.join("one.jsonl");
        std::fs::write(&one_day, &log).unwrap();
        assert!(!spans_days(&one_day));
        let text = String::from_utf8(log).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        let last = lines.pop().unwrap();
        let ts = &last[7..31];
        lines.push(last.replacen(ts, "2026-12-02T00:00:00.000Z", 1));
        let two_days = dir.join("two.jsonl");
        std::fs::write(&two_days, lines.join("\n") + "\n").unwrap();
        assert!(spans_days(&two_days));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
