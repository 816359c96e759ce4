//! `fenzi log --export-status`: how far the OTLP export (`--otlp`) has got, per log: the last seq
//! written against the last seq the receiver acknowledged (`<log>.otlp-cursor`), the records
//! behind, and those the receiver rejected in partial successes. With `--file` or `--session`, that
//! one log; else every log in the state directory that has a cursor. It only reads.

use super::locate::{find_log, session_logs_since};
use anyhow::Result;
use fenzi_proxy::export::{self, Status, cursor_path};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub fn run(file: Option<&Path>, session: Option<&str>, json: bool) -> Result<ExitCode> {
    let logs: Vec<PathBuf> = if file.is_some() || session.is_some() {
        vec![find_log(file, session)?]
    } else {
        session_logs_since(None)?
            .into_iter()
            .filter(|log| cursor_path(log).exists())
            .collect()
    };
    if logs.is_empty() && !json {
        println!(
            "no log has been exported yet (none has a <log>.otlp-cursor; `fenzi proxy --otlp URL` writes one)"
        );
    }
    for log in logs {
        let status = export::status(&log)?;
        if json {
            println!("{}", json_line(&log, &status));
        } else {
            println!("{}", text_line(&log, &status));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn acknowledged(status: &Status) -> u64 {
    status.cursor.as_ref().map_or(0, |c| c.seq)
}

fn text_line(log: &Path, status: &Status) -> String {
    let log = log.display();
    let written = status.written.unwrap_or(0);
    let rejected = match status.cursor.as_ref().map_or(0, |c| c.rejected) {
        0 => String::new(),
        n => format!("; {n} rejected by the receiver"),
    };
    if let Some(mismatch) = &status.mismatch {
        return format!(
            "{log}: written up to seq {written}; the cursor does not fit this log ({mismatch}), so \
             the next export ships it from the start"
        );
    }
    match &status.cursor {
        None => format!("{log}: written up to seq {written}; nothing acknowledged yet"),
        Some(_) if status.lag() == 0 => {
            format!("{log}: caught up: written and acknowledged up to seq {written}{rejected}")
        }
        Some(c) => format!(
            "{log}: written up to seq {written}, acknowledged up to seq {}: {} behind{rejected}",
            c.seq,
            status.lag()
        ),
    }
}

fn json_line(log: &Path, status: &Status) -> serde_json::Value {
    serde_json::json!({
        "log": log.display().to_string(),
        "cursor": cursor_path(log).display().to_string(),
        "written": status.written.unwrap_or(0),
        "acknowledged": if status.mismatch.is_some() { 0 } else { acknowledged(status) },
        "behind": status.lag(),
        "rejected": status.cursor.as_ref().map_or(0, |c| c.rejected),
        "cursor_mismatch": status.mismatch.as_ref().map(ToString::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use export::Cursor;

    #[test]
    fn lines_say_how_far() {
        let log = Path::new("/s/a.jsonl");
        let cursor = |seq, rejected| {
            Some(Cursor {
                seq,
                offset: 100,
                hash: "ab".repeat(32),
                rejected,
            })
        };
        let s = |written, cursor, mismatch| Status {
            written,
            cursor,
            mismatch,
        };
        assert_eq!(
            text_line(log, &s(Some(9), cursor(4, 0), None)),
            "/s/a.jsonl: written up to seq 9, acknowledged up to seq 4: 5 behind"
        );
        assert_eq!(
            text_line(log, &s(Some(9), cursor(9, 2), None)),
            "/s/a.jsonl: caught up: written and acknowledged up to seq 9; 2 rejected by the receiver"
        );
        assert_eq!(
            text_line(log, &s(Some(3), None, None)),
            "/s/a.jsonl: written up to seq 3; nothing acknowledged yet"
        );
        let m = export::cursor::Mismatch::NotALineEnd { offset: 100 };
        let mismatched = s(Some(3), cursor(2, 0), Some(m));
        assert!(text_line(log, &mismatched).contains("ships it from the start"));
        let j = json_line(log, &mismatched);
        assert_eq!(
            (j["acknowledged"].as_u64(), j["behind"].as_u64()),
            (Some(0), Some(3))
        );
        let j = json_line(log, &s(Some(9), cursor(4, 1), None));
        assert_eq!(j["cursor"], "/s/a.jsonl.otlp-cursor");
        assert_eq!(
            (
                j["written"].as_u64(),
                j["acknowledged"].as_u64(),
                j["behind"].as_u64(),
                j["rejected"].as_u64()
            ),
            (Some(9), Some(4), Some(5), Some(1))
        );
        assert!(j["cursor_mismatch"].is_null());
    }
}
