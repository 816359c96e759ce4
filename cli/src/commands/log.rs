//! `fenzi log`: shows, filters, follows and verifies the audit log (DESIGN.md §5, §6).
//!
//! This module owns finding the log (`--file`, `--session`, or the newest in the state directory), the
//! filters, the human rendering of a record, `--follow`, and `--verify` (the hash chain and the head file,
//! through `fenzi_policy::audit::verify`). It never writes to the log.
//!
//! Times are shown in UTC, the zone the log stores, so a line can be matched with its record; the date is
//! added when the records shown span more than one day. Every field taken from a record is rendered so
//! that a hostile host, path or tool name cannot forge or hide text on the reader's terminal.

use anyhow::{Context, bail};
use fenzi_policy::audit::{self, AuditRecord, Head, Outcome};
use fenzi_policy::tool_pattern::ToolPattern;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const POLL: Duration = Duration::from_millis(200);

const EXAMPLES: &str = "\
Examples:
  fenzi log                          the newest session's log, one line per decision
  fenzi log --denied --since 1h      what was refused in the last hour
  fenzi log --server deepwiki --tool 'read_*'
  fenzi log --session a1b2c3 --follow
  fenzi log --file audit.jsonl --json | jq .reason
  fenzi log --file audit.jsonl --verify

Output:
  13:33:38 allowed POST mcp.deepwiki.com/mcp tools/call read_wiki_structure
  13:33:50 denied  POST mcp.deepwiki.com/mcp tools/call read_wiki_contents  policy_denied
  13:34:02 allowed CONNECT github.com:443
  Times are UTC; the date is shown when the records span days. Text that is not plain ASCII is
  quoted, with control and invisible characters escaped.

Logs live in $XDG_STATE_HOME/fenzi/audit/<session>.jsonl (default ~/.local/state/fenzi/audit).
--verify exits 0 when every record's hash chain is intact and the head file (<log>.head) matches,
1 naming the first broken record otherwise (a record edited, dropped or reordered, or the log cut
short). Exit 2: usage error, or no log found.";

/// Show, filter, follow or verify the audit log.
#[derive(Debug, clap::Args)]
#[command(
    about = "Show, filter, follow or verify the audit log",
    long_about = "Show, filter, follow or verify the audit log: one line per decision the proxy made \
                  (each CONNECT, each plain HTTP request, each request inside an intercepted tunnel). \
                  Filters combine: a record is shown only when it matches all of them.",
    after_help = EXAMPLES
)]
pub struct Args {
    /// Read this log file.
    #[arg(long, value_name = "FILE", conflicts_with = "session")]
    pub file: Option<PathBuf>,
    /// Read the log of this session (<state dir>/fenzi/audit/<ID>.jsonl). Default: the newest log.
    #[arg(long, value_name = "ID", value_parser = parse_session_id)]
    pub session: Option<String>,
    /// Only denied requests.
    #[arg(long)]
    pub denied: bool,
    /// Only requests to this MCP server (its name in the policy).
    #[arg(long, value_name = "S")]
    pub server: Option<String>,
    /// Only tool calls of this tool: an exact name, or a glob with `*`.
    #[arg(long, value_name = "T", value_parser = parse_tool)]
    pub tool: Option<ToolPattern>,
    /// Only records from the last DUR (`90s`, `10m`, `2h`, `1d`, `1h30m`), or since a UTC time
    /// (`2026-11-29T13:00:00Z`).
    #[arg(long, value_name = "DUR", value_parser = parse_since)]
    pub since: Option<Since>,
    /// Keep printing records as they are written (Ctrl-C stops).
    #[arg(long, short = 'f', conflicts_with = "verify")]
    pub follow: bool,
    /// Print the matching records as JSON Lines, exactly as stored.
    #[arg(long, conflicts_with = "verify")]
    pub json: bool,
    /// Check the hash chain and the head file; exit 1 naming the first broken record.
    #[arg(long, conflicts_with_all = ["denied", "server", "tool", "since"])]
    pub verify: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let path = locate(&args)?;
    if args.verify {
        let outcome = verify_file(&path)?;
        println!("{}", outcome.message);
        return Ok(if outcome.ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    let filter = Filter::new(&args, now_ms());
    let colour = !args.json && crate::output::colour_enabled_for_stdout();
    match show(&path, &filter, args.json, colour, args.follow) {
        Err(e) if is_broken_pipe(&e) => Ok(ExitCode::SUCCESS),
        other => other.map(|()| ExitCode::SUCCESS),
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<io::Error>()
        .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
}

// ---------------------------------------------------------------------------------------------------
// Finding the log

fn parse_session_id(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 128
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(s.to_string())
    } else {
        Err("a session id is letters, digits, `_`, `-` and `.` (not leading)".into())
    }
}

/// `$XDG_STATE_HOME/fenzi/audit`, or `~/.local/state/fenzi/audit`. A relative XDG path is ignored, as
/// the XDG spec says.
pub fn audit_dir(xdg_state_home: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    let base = match xdg_state_home.map(PathBuf::from) {
        Some(p) if p.is_absolute() => p,
        _ => PathBuf::from(home.filter(|h| !h.is_empty())?).join(".local/state"),
    };
    Some(base.join("fenzi").join("audit"))
}

fn locate(args: &Args) -> anyhow::Result<PathBuf> {
    if let Some(file) = &args.file {
        return Ok(file.clone());
    }
    let dir = audit_dir(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME")).context(
        "cannot find the audit log directory: neither XDG_STATE_HOME nor HOME is set; pass --file",
    )?;
    if let Some(id) = &args.session {
        let path = dir.join(format!("{id}.jsonl"));
        if !path.is_file() {
            bail!(
                "no audit log for session {id}: {} does not exist",
                path.display()
            );
        }
        return Ok(path);
    }
    newest_log(&dir)?.with_context(|| {
        format!(
            "no audit logs in {} yet (`fenzi proxy` and `fenzi run` write them there); pass --file FILE or --session ID",
            dir.display()
        )
    })
}

/// The most recently modified `*.jsonl` in `dir` (name breaks ties). `None` if there is none.
pub fn newest_log(dir: &Path) -> anyhow::Result<Option<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    let mut best: Option<(SystemTime, PathBuf)> = None;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let mtime = meta.modified().unwrap_or(UNIX_EPOCH);
        if best.as_ref().is_none_or(|(t, p)| (mtime, &path) > (*t, p)) {
            best = Some((mtime, path));
        }
    }
    Ok(best.map(|(_, p)| p))
}

// ---------------------------------------------------------------------------------------------------
// Filters

/// `--since`: a span back from now, or a UTC instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    Ago(Duration),
    At(i64),
}

/// Parses `90s`, `10m`, `2h`, `1d`, `1w`, compounds like `1h30m`, or an RFC 3339 UTC time
/// (`2026-11-29T13:00:00Z`, milliseconds optional).
pub fn parse_since(text: &str) -> Result<Since, String> {
    let text = text.trim();
    if text.contains('T') {
        let with_ms = match text.strip_suffix('Z') {
            Some(body) if body.len() == 19 => format!("{body}.000Z"),
            _ => text.to_string(),
        };
        return audit::parse_timestamp(&with_ms)
            .map(Since::At)
            .ok_or_else(|| format!("{text:?} is not a UTC time like 2026-11-29T13:00:00Z"));
    }
    let bad = || format!("{text:?} is not a duration like 90s, 10m, 2h, 1d or 1h30m");
    if text.is_empty() {
        return Err(bad());
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit: u64 = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 7 * 86_400,
            _ => return Err(bad()),
        };
        if digits.is_empty() {
            return Err(bad());
        }
        let n: u64 = digits.parse().map_err(|_| bad())?;
        total = n
            .checked_mul(unit)
            .and_then(|s| total.checked_add(s))
            .ok_or_else(|| format!("{text:?} is too long a duration"))?;
        digits.clear();
    }
    if !digits.is_empty() {
        return Err(format!(
            "{text:?} needs a unit: s, m, h, d or w (for example 10m)"
        ));
    }
    // Keep the cutoff within what milliseconds since 1970 can express.
    if total > 100 * 365 * 86_400 {
        return Err(format!("{text:?} is too long a duration"));
    }
    Ok(Since::Ago(Duration::from_secs(total)))
}

fn parse_tool(text: &str) -> Result<ToolPattern, String> {
    ToolPattern::parse(text).map_err(|e| e.to_string())
}

/// What a record must match to be shown. Every set filter must match.
#[derive(Debug, Default)]
pub struct Filter {
    pub denied: bool,
    pub server: Option<String>,
    pub tool: Option<ToolPattern>,
    /// Unix milliseconds; records before this are hidden.
    pub since_ms: Option<i64>,
}

impl Filter {
    fn new(args: &Args, now_ms: i64) -> Filter {
        Filter {
            denied: args.denied,
            server: args.server.clone(),
            tool: args.tool.clone(),
            since_ms: args.since.map(|s| match s {
                Since::At(ms) => ms,
                Since::Ago(d) => now_ms - d.as_millis() as i64,
            }),
        }
    }

    pub fn matches(&self, r: &AuditRecord) -> bool {
        if self.denied && r.decision != Outcome::Denied {
            return false;
        }
        if let Some(s) = &self.server
            && r.server.as_deref() != Some(s.as_str())
        {
            return false;
        }
        if let Some(t) = &self.tool
            && !r.tool.as_deref().is_some_and(|tool| t.matches(tool))
        {
            return false;
        }
        if let Some(cutoff) = self.since_ms {
            // A record whose time cannot be read is shown: hiding it would hide tampering.
            if audit::parse_timestamp(&r.ts).is_some_and(|ts| ts < cutoff) {
                return false;
            }
        }
        true
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------------
// Rendering

const GREEN: &str = "\x1b[32m";
const RED: &str = "\x1b[31m";
const YELLOW: &str = "\x1b[33m";
const RESET: &str = "\x1b[0m";

/// A field as shown: plain printable ASCII as is; anything else in double quotes, with `"` and `\`
/// backslash-escaped and control or invisible characters as `\u{..}`. So a space, a look-alike letter or
/// a hidden character always shows.
pub fn field(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\');
    if plain {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if audit::needs_escape(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One record as a line: `[date ]HH:MM:SS decision METHOD target [rpc [tool]]  [reason]`.
pub fn render(r: &AuditRecord, show_date: bool, colour: bool) -> String {
    let mut line = String::new();
    match (
        audit::parse_timestamp(&r.ts),
        r.ts.get(0..10),
        r.ts.get(11..19),
    ) {
        (Some(_), Some(date), Some(time)) => {
            if show_date {
                line.push_str(date);
                line.push(' ');
            }
            line.push_str(time);
        }
        _ => line.push_str(&field(&r.ts)),
    }
    line.push(' ');
    let (label, tint) = match r.decision {
        Outcome::Allowed => ("allowed", GREEN),
        Outcome::Denied => ("denied", RED),
        Outcome::Failed => ("failed", YELLOW),
    };
    if colour {
        line.push_str(tint);
        line.push_str(label);
        line.push_str(RESET);
    } else {
        line.push_str(label);
    }
    line.push_str(&" ".repeat(8 - label.len()));
    line.push_str(&field(&r.method));
    line.push(' ');
    line.push_str(&target(r));
    if let Some(rpc) = &r.rpc {
        line.push(' ');
        line.push_str(&field(rpc));
    }
    if let Some(tool) = &r.tool {
        line.push(' ');
        line.push_str(&field(tool));
    }
    if !r.secrets.is_empty() {
        let names: Vec<String> = r.secrets.iter().map(|s| field(s)).collect();
        line.push_str(" secrets:");
        line.push_str(&names.join(","));
    }
    if r.decision != Outcome::Allowed || r.reason.is_some() {
        line.push_str("  ");
        line.push_str(&r.reason.as_deref().map_or("-".to_string(), field));
        if let Some(source) = &r.source {
            line.push_str(" (");
            line.push_str(&field(source));
            line.push(')');
        }
    }
    line
}

/// `host:port` for a CONNECT; otherwise host, `:port` unless 443, and the path.
fn target(r: &AuditRecord) -> String {
    let host = if r.host.contains(':') && !r.host.starts_with('[') {
        format!("[{}]", r.host)
    } else {
        r.host.clone()
    };
    let mut t = host;
    if r.method == "CONNECT" || r.port != 443 {
        t.push_str(&format!(":{}", r.port));
    }
    if r.method != "CONNECT"
        && let Some(p) = &r.path
    {
        t.push_str(p);
    }
    field(&t)
}

// ---------------------------------------------------------------------------------------------------
// Showing and following

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

fn show(
    path: &Path,
    filter: &Filter,
    json: bool,
    colour: bool,
    follow: bool,
) -> anyhow::Result<()> {
    let mut reader = LineReader::open(path)?;
    let stdout = io::stdout();
    let mut printer = Printer {
        path,
        filter,
        json,
        colour,
        show_date: spans_days(path),
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
    json: bool,
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
        if self.json {
            self.out.write_all(line)?;
            self.out.write_all(b"\n")
        } else {
            writeln!(self.out, "{}", render(&record, self.show_date, self.colour))
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

// ---------------------------------------------------------------------------------------------------
// Verifying

/// What `--verify` prints, and whether the log passed.
#[derive(Debug, PartialEq, Eq)]
pub struct VerifyOutcome {
    pub ok: bool,
    pub message: String,
}

fn verify_file(path: &Path) -> anyhow::Result<VerifyOutcome> {
    let head_path = {
        let mut s = path.as_os_str().to_owned();
        s.push(".head");
        PathBuf::from(s)
    };
    // The head first: the writer only names records already in the log, so reading the log after it
    // cannot see a head that runs ahead of a live log.
    let head = match std::fs::read_to_string(&head_path) {
        Ok(t) => Some(t),
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
    use fenzi_policy::audit::{GENESIS, format_timestamp, line_hash, to_line};

    fn rec(decision: Outcome, method: &str, host: &str, port: u16) -> AuditRecord {
        AuditRecord {
            ts: "2026-11-29T13:33:50.123Z".into(),
            seq: 1,
            session: "a1b2c3".into(),
            decision,
            reason: None,
            method: method.into(),
            host: host.into(),
            port,
            path: None,
            server: None,
            rpc: None,
            tool: None,
            rpc_id: None,
            secrets: vec![],
            rule: None,
            source: None,
            prev: GENESIS.into(),
        }
    }

    fn mcp(decision: Outcome, tool: &str, reason: Option<&str>) -> AuditRecord {
        AuditRecord {
            path: Some("/mcp".into()),
            server: Some("deepwiki".into()),
            rpc: Some("tools/call".into()),
            tool: Some(tool.into()),
            reason: reason.map(Into::into),
            ..rec(decision, "POST", "mcp.deepwiki.com", 443)
        }
    }

    #[test]
    fn renders_the_design_examples() {
        assert_eq!(
            render(
                &mcp(Outcome::Allowed, "read_wiki_structure", None),
                false,
                false
            ),
            "13:33:50 allowed POST mcp.deepwiki.com/mcp tools/call read_wiki_structure"
        );
        assert_eq!(
            render(
                &mcp(Outcome::Denied, "read_wiki_contents", Some("policy_denied")),
                false,
                false
            ),
            "13:33:50 denied  POST mcp.deepwiki.com/mcp tools/call read_wiki_contents  policy_denied"
        );
        assert_eq!(
            render(
                &rec(Outcome::Allowed, "CONNECT", "github.com", 443),
                false,
                false
            ),
            "13:33:50 allowed CONNECT github.com:443"
        );
        let plain = AuditRecord {
            path: Some("/path?q=1".into()),
            ..rec(Outcome::Allowed, "GET", "example.com", 80)
        };
        assert_eq!(
            render(&plain, false, false),
            "13:33:50 allowed GET example.com:80/path?q=1"
        );
        let denied_host = AuditRecord {
            reason: Some("host_not_allowed".into()),
            ..rec(Outcome::Denied, "CONNECT", "evil.example", 443)
        };
        assert_eq!(
            render(&denied_host, true, false),
            "2026-11-29 13:33:50 denied  CONNECT evil.example:443  host_not_allowed"
        );
        let failed = AuditRecord {
            source: Some("upstream".into()),
            ..mcp(Outcome::Failed, "echo", Some("upstream_error"))
        };
        assert_eq!(
            render(&failed, false, false),
            "13:33:50 failed  POST mcp.deepwiki.com/mcp tools/call echo  upstream_error (upstream)"
        );
        let v6 = rec(Outcome::Allowed, "CONNECT", "::1", 8443);
        assert_eq!(
            render(&v6, false, false),
            "13:33:50 allowed CONNECT [::1]:8443"
        );
        let with_secret = AuditRecord {
            secrets: vec!["MCP_LINEAR".into()],
            ..mcp(Outcome::Allowed, "list_issues", None)
        };
        assert!(render(&with_secret, false, false).ends_with("list_issues secrets:MCP_LINEAR"));
    }

    #[test]
    fn colour_wraps_only_the_decision_word() {
        let line = render(
            &mcp(Outcome::Denied, "x", Some("policy_denied")),
            false,
            true,
        );
        assert!(
            line.starts_with("13:33:50 \x1b[31mdenied\x1b[0m  POST "),
            "{line:?}"
        );
        let line = render(&mcp(Outcome::Allowed, "x", None), false, true);
        assert!(line.contains("\x1b[32mallowed\x1b[0m POST"), "{line:?}");
        let line = render(
            &mcp(Outcome::Failed, "x", Some("upstream_error")),
            false,
            true,
        );
        assert!(line.contains("\x1b[33mfailed\x1b[0m  POST"), "{line:?}");
        assert!(!render(&mcp(Outcome::Denied, "x", None), false, false).contains('\x1b'));
    }

    #[test]
    fn hostile_fields_cannot_forge_or_hide_text() {
        let r = mcp(
            Outcome::Denied,
            "x\n13:33:51 allowed \u{1b}[32m\u{202e}\u{200b}",
            Some("policy_denied"),
        );
        let line = render(&r, false, false);
        assert!(!line.contains('\n') && !line.contains('\u{1b}'), "{line:?}");
        assert!(!line.chars().any(audit::needs_escape), "{line:?}");
        assert!(
            line.contains(r#""x\u{a}13:33:51 allowed \u{1b}[32m\u{202e}\u{200b}""#),
            "{line}"
        );
        // Look-alike letters and spaces are quoted, so `еcho` (Cyrillic е) stands out from `echo`.
        assert_eq!(field("\u{435}cho"), "\"\u{435}cho\"");
        assert_eq!(field("echo"), "echo");
        assert_eq!(field("a b"), "\"a b\"");
        assert_eq!(field(r#"q"\"#), r#""q\"\\""#);
        assert_eq!(field(""), "\"\"");
        let path = AuditRecord {
            path: Some("/a\u{85}b".into()),
            ..rec(Outcome::Allowed, "GET", "example.com", 80)
        };
        assert!(render(&path, false, false).ends_with(r#""example.com:80/a\u{85}b""#));
    }

    #[test]
    fn since_accepts_durations_and_utc_times() {
        let secs = |s: u64| Ok(Since::Ago(Duration::from_secs(s)));
        assert_eq!(parse_since("90s"), secs(90));
        assert_eq!(parse_since("10m"), secs(600));
        assert_eq!(parse_since("2h"), secs(7200));
        assert_eq!(parse_since("1d"), secs(86_400));
        assert_eq!(parse_since("1w"), secs(604_800));
        assert_eq!(parse_since("1h30m"), secs(5400));
        assert_eq!(parse_since("0m"), secs(0));
        assert_eq!(
            parse_since("2026-11-29T13:00:00Z"),
            Ok(Since::At(
                audit::parse_timestamp("2026-11-29T13:00:00.000Z").unwrap()
            ))
        );
        assert_eq!(
            parse_since("2026-11-29T13:00:00.250Z"),
            Ok(Since::At(
                audit::parse_timestamp("2026-11-29T13:00:00.250Z").unwrap()
            ))
        );
        for bad in [
            "",
            "10",
            "m",
            "10x",
            "-5m",
            "1.5h",
            "10 m",
            "h1",
            "99999999999999999999w",
            "2026-11-29T25:00:00Z",
            "2026-11-29T13:00Z",
        ] {
            assert!(parse_since(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_since("10").unwrap_err().contains("needs a unit"));
    }

    #[test]
    fn filters_combine() {
        let now = audit::parse_timestamp("2026-11-29T14:00:00.000Z").unwrap();
        let args = |denied, server: Option<&str>, tool: Option<&str>, since: Option<&str>| Args {
            file: None,
            session: None,
            denied,
            server: server.map(Into::into),
            tool: tool.map(|t| ToolPattern::parse(t).unwrap()),
            since: since.map(|s| parse_since(s).unwrap()),
            follow: false,
            json: false,
            verify: false,
        };
        let denied = mcp(Outcome::Denied, "read_wiki_contents", Some("policy_denied"));
        let allowed = mcp(Outcome::Allowed, "read_wiki_structure", None);
        let connect = rec(Outcome::Denied, "CONNECT", "evil.example", 443);

        let f = Filter::new(&args(true, None, None, None), now);
        assert!(f.matches(&denied) && f.matches(&connect) && !f.matches(&allowed));

        let f = Filter::new(&args(true, Some("deepwiki"), None, None), now);
        assert!(f.matches(&denied) && !f.matches(&connect) && !f.matches(&allowed));

        let f = Filter::new(&args(false, Some("deepwiki"), Some("read_*"), None), now);
        assert!(f.matches(&denied) && f.matches(&allowed) && !f.matches(&connect));
        let f = Filter::new(&args(false, None, Some("read_wiki_structure"), None), now);
        assert!(!f.matches(&denied) && f.matches(&allowed));

        // The records are at 13:33:50; now is 14:00.
        let f = Filter::new(&args(false, None, None, Some("30m")), now);
        assert!(f.matches(&denied));
        let f = Filter::new(&args(false, None, None, Some("20m")), now);
        assert!(!f.matches(&denied));
        let f = Filter::new(&args(true, None, None, Some("1h")), now);
        assert!(f.matches(&denied) && !f.matches(&allowed));
        let bad_ts = AuditRecord {
            ts: "yesterday".into(),
            ..denied.clone()
        };
        assert!(
            f.matches(&bad_ts),
            "a record with an unreadable time is never hidden"
        );
    }

    fn chain(n: u64) -> (Vec<u8>, String) {
        let mut prev = GENESIS.to_string();
        let mut log = Vec::new();
        for seq in 1..=n {
            let r = AuditRecord {
                seq,
                ts: format_timestamp(1_796_045_628_123 + seq as i64),
                prev: prev.clone(),
                ..mcp(Outcome::Allowed, "echo", None)
            };
            let line = to_line(&r);
            prev = line_hash(line.as_bytes());
            log.extend_from_slice(line.as_bytes());
            log.push(b'\n');
        }
        (log, Head { seq: n, hash: prev }.to_text())
    }

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

    #[test]
    fn the_log_directory_follows_xdg() {
        let p = |s: &str| Some(OsString::from(s));
        assert_eq!(
            audit_dir(p("/state"), p("/home/u")),
            Some(PathBuf::from("/state/fenzi/audit"))
        );
        assert_eq!(
            audit_dir(p("relative"), p("/home/u")),
            Some(PathBuf::from("/home/u/.local/state/fenzi/audit"))
        );
        assert_eq!(
            audit_dir(None, p("/home/u")),
            Some(PathBuf::from("/home/u/.local/state/fenzi/audit"))
        );
        assert_eq!(audit_dir(None, None), None);
        assert!(parse_session_id("a1b2-c3_d.e").is_ok());
        for bad in ["", "../x", "a/b", ".hidden", "a b"] {
            assert!(parse_session_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_newest_log_is_found_and_reading_follows_growth() {
        let dir = std::env::temp_dir().join(format!("fenzi-log-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(newest_log(&dir).unwrap(), None);
        assert_eq!(newest_log(&dir.join("missing")).unwrap(), None);
        let old = dir.join("old.jsonl");
        std::fs::write(&old, "").unwrap();
        std::fs::write(dir.join("notes.txt"), "").unwrap();
        let t = SystemTime::now() - Duration::from_secs(60);
        File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(t)
            .unwrap();
        let new = dir.join("new.jsonl");
        std::fs::write(&new, "").unwrap();
        assert_eq!(newest_log(&dir).unwrap(), Some(new.clone()));

        // A partial line is held back until its newline arrives.
        std::fs::write(&new, "one\ntw").unwrap();
        let mut r = LineReader::open(&new).unwrap();
        let mut seen = Vec::new();
        r.read_new(&mut |n, l| {
            seen.push((n, String::from_utf8(l.to_vec()).unwrap()));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, [(1, "one".to_string())]);
        File::options()
            .append(true)
            .open(&new)
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
        std::fs::write(&new, "x\n").unwrap();
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
