//! Which records `fenzi log` shows: `--denied`, `--server`, `--tool` and `--since`, parsed from the
//! command line and combined into a [`Filter`] that every shown record matches.

use super::Args;
use fenzi_policy::audit::{self, AuditRecord, Outcome};
use fenzi_policy::tool_pattern::ToolPattern;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// `--program`: the agent, or an executable by its absolute path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgramFilter {
    Agent,
    Exe(String),
}

pub(super) fn parse_program(text: &str) -> Result<ProgramFilter, String> {
    match text {
        "agent" => Ok(ProgramFilter::Agent),
        p if p.starts_with('/') => Ok(ProgramFilter::Exe(p.to_string())),
        _ => Err(format!(
            "{text:?} is neither `agent` nor an absolute path (e.g. /usr/bin/curl)"
        )),
    }
}

impl ProgramFilter {
    fn matches(&self, r: &AuditRecord) -> bool {
        let Some(program) = &r.program else {
            return false;
        };
        program.holders().iter().any(|h| match self {
            ProgramFilter::Agent => h.agent,
            ProgramFilter::Exe(exe) => &h.exe == exe,
        })
    }
}

pub(super) fn parse_tool(text: &str) -> Result<ToolPattern, String> {
    ToolPattern::parse(text).map_err(|e| e.to_string())
}

/// What a record must match to be shown. Every set filter must match.
#[derive(Debug, Default)]
pub struct Filter {
    pub denied: bool,
    pub server: Option<String>,
    pub tool: Option<ToolPattern>,
    pub program: Option<ProgramFilter>,
    /// Unix milliseconds; records before this are hidden.
    pub since_ms: Option<i64>,
}

impl Filter {
    pub(super) fn new(args: &Args, now_ms: i64) -> Filter {
        Filter {
            denied: args.denied,
            server: args.server.clone(),
            tool: args.tool.clone(),
            program: args.program.clone(),
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
        if let Some(p) = &self.program
            && !p.matches(r)
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

pub(super) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::log::test_records::{mcp, rec};

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
    fn program_filters_by_any_holder() {
        use crate::commands::log::test_records::by;
        let agent = by(
            rec(Outcome::Allowed, "CONNECT", "a", 443),
            &[("/usr/bin/node", 2, true)],
        );
        let curl = by(
            rec(Outcome::Denied, "CONNECT", "a", 443),
            &[("/usr/bin/curl", 5, false)],
        );
        let shared = by(
            rec(Outcome::Denied, "CONNECT", "a", 443),
            &[("/usr/bin/node", 2, true), ("/usr/bin/curl", 6, false)],
        );
        let none = rec(Outcome::Allowed, "CONNECT", "a", 443);
        let f = |p: &str| Filter {
            program: Some(parse_program(p).unwrap()),
            ..Filter::default()
        };
        let shown = |f: &Filter| [&agent, &curl, &shared, &none].map(|r| f.matches(r));
        assert_eq!(shown(&f("agent")), [true, false, true, false]);
        assert_eq!(shown(&f("/usr/bin/curl")), [false, true, true, false]);
        assert_eq!(shown(&f("/usr/bin/git")), [false; 4]);
        assert!(parse_program("curl").unwrap_err().contains("absolute path"));
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
            program: None,
            follow: false,
            json: false,
            ocsf: false,
            verify: false,
            export_status: false,
            ship: Default::default(),
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
}
