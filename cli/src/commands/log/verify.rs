//! `fenzi log --verify`: checks a log's hash chain and its head file (`<log>.head`) through
//! `fenzi_policy::audit::verify`, and says whether the log is intact or names the first broken record.

use anyhow::Context;
use fenzi_policy::audit::{self, Head};
use std::io;
use std::path::{Path, PathBuf};

/// What `--verify` prints, and whether the log passed.
#[derive(Debug, PartialEq, Eq)]
pub struct VerifyOutcome {
    pub ok: bool,
    pub message: String,
}

pub(super) fn verify_file(path: &Path) -> anyhow::Result<VerifyOutcome> {
    let head_path = {
        let mut s = path.as_os_str().to_owned();
        s.push(".head");
        PathBuf::from(s)
    };
    // The head first: the writer only names records already in the log, so reading the log after it
    // cannot see a head that runs ahead of a live log. The head is read under the writer's lock (it
    // is rewritten in place); an empty one is a head not written yet (the writer creates it empty
    // when it opens the log).
    let head = match fenzi_proxy::host_files::read_small_file(&head_path) {
        Ok(t) if t.is_empty() => None,
        Ok(t) => Some(String::from_utf8_lossy(&t).into_owned()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", head_path.display())),
    };
    let log = std::fs::read(path)
        .with_context(|| format!("cannot read the audit log {}", path.display()))?;
    Ok(verify_bytes(&log, head.as_deref(), &head_path))
}

/// Verifies a log's bytes against its head file's text (`None`: no head file).
pub fn verify_bytes(log: &[u8], head: Option<&str>, head_path: &Path) -> VerifyOutcome {
    let broken = |why: String| VerifyOutcome {
        ok: false,
        message: format!("broken: {why}"),
    };
    let head = match head {
        Some(text) => match Head::parse(text) {
            Some(h) => Some(h),
            None => {
                return broken(format!(
                    "the head file {} is not `<seq> <sha256>`",
                    head_path.display()
                ));
            }
        },
        None => None,
    };
    if log.is_empty() && head.is_none() {
        return VerifyOutcome {
            ok: true,
            message: "ok: 0 records (the log is empty)".into(),
        };
    }
    let body = match log.strip_suffix(b"\n") {
        Some(b) => b,
        None if log.is_empty() => log,
        None => {
            let n = log.split(|&b| b == b'\n').count();
            return broken(format!(
                "line {n} is incomplete (the file does not end with a newline): the log was cut short or edited"
            ));
        }
    };
    let lines: Vec<&[u8]> = if body.is_empty() && log.is_empty() {
        Vec::new()
    } else {
        body.split(|&b| b == b'\n').collect()
    };
    let Some(head) = head else {
        return broken(format!(
            "no head file {}: cannot tell whether the log was cut short",
            head_path.display()
        ));
    };
    match audit::verify(lines, Some(&head)) {
        Ok(v) => VerifyOutcome {
            ok: true,
            message: format!("ok: {} records, chain intact, head matches", v.records),
        },
        Err(e @ audit::ChainError::BrokenLink { line, .. }) if line > 1 => {
            broken(format!("{e} (look at lines {} and {line})", line - 1))
        }
        Err(e) => broken(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::log::test_records::chain;

    #[test]
    fn verify_reports_intact_and_broken_logs() {
        let hp = Path::new("/x/a.jsonl.head");
        let (log, head) = chain(4);
        assert_eq!(
            verify_bytes(&log, Some(&head), hp),
            VerifyOutcome {
                ok: true,
                message: "ok: 4 records, chain intact, head matches".into()
            }
        );
        let edited =
            String::from_utf8(log.clone())
                .unwrap()
                .replacen("\"seq\":2,", "\"seq\":2, ", 1);
        let out = verify_bytes(edited.as_bytes(), Some(&head), hp);
        assert!(
            !out.ok && out.message.starts_with("broken: line 3"),
            "{}",
            out.message
        );

        let lines: Vec<&str> = std::str::from_utf8(&log).unwrap().lines().collect();
        let cut = format!("{}\n{}\n", lines[0], lines[1]);
        let out = verify_bytes(cut.as_bytes(), Some(&head), hp);
        assert!(
            !out.ok && out.message.contains("cut short"),
            "{}",
            out.message
        );

        let out = verify_bytes(&log, None, hp);
        assert!(
            !out.ok && out.message.contains("no head file /x/a.jsonl.head"),
            "{}",
            out.message
        );
        let out = verify_bytes(&log[..log.len() - 1], Some(&head), hp);
        assert!(
            !out.ok && out.message.contains("line 4 is incomplete"),
            "{}",
            out.message
        );
        let out = verify_bytes(&log, Some("garbage"), hp);
        assert!(
            !out.ok && out.message.contains("not `<seq> <sha256>`"),
            "{}",
            out.message
        );
        assert!(verify_bytes(b"", None, hp).ok);
        assert!(
            !verify_bytes(b"", Some(&head), hp).ok,
            "a log emptied under its head"
        );
    }
}
