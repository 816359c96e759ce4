//! `limits:` on a `url` or `account` server (README, "Limits"): reading the entries, the checks
//! that each entry can apply at all, the machine + project rule for them, and which entries a
//! `tools/call` meets. Counting is the proxy's (`proxy/src/limits.rs`); nothing here reads a clock.
//!
//! Decisions the README does not spell out (each tested here or under `testdata/config/`):
//! - `rate` is `N/s`, `N/min` or `N/h` with 1 ≤ N ≤ [`MAX_RATE_COUNT`]. A rate of N per period
//!   allows a burst of N, and a token comes back every period / N.
//! - `concurrency` is an integer from 1 to [`MAX_CONCURRENCY`].
//! - `timeout` is one number and a unit: `ms`, `s`, `m` or `h` (`500ms`, `30s`, `2m`), from 1 ms
//!   to [`MAX_TIMEOUT`]. A bare number is refused: `30` could mean seconds or milliseconds.
//! - `max_response` is a byte count (`1000000`) or a number with `B`, `KB`, `MB`, `GB` (powers of
//!   1000) or `KiB`, `MiB`, `GiB` (powers of 1024), from [`MIN_RESPONSE_CAP`] (a smaller cap
//!   would cut even a short answer, or fenzi's own JSON-RPC error) to [`MAX_RESPONSE_CAP`].
//! - An entry has a `tool` and at least one limit.
//! - An entry that can never apply is an error: one whose `tool` no `tools.allow` pattern can
//!   match (unless `allow_annotated` may allow any name), one all of whose tools `tools.deny`
//!   denies, and one an earlier entry of the same list covers (the first match applies, so it
//!   would never be reached).
//! - Machine and project: the entries of both files apply, the first match of each file, each with
//!   its own counters. So a project can add limits and tighten, never loosen or remove the
//!   machine's. A project entry that is looser than the machine entry which counts the same tools
//!   (the machine's first entry overlapping it, when that one covers it) would never be reached:
//!   it is an error naming both values.

use super::ConfigError;
use super::model::{Location, Origin, Rate, RatePeriod, ToolLimit, ToolRules};
use super::rules::place;
use super::yaml::{Node, Value, push_key};
use crate::tool_pattern::ToolPattern;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Largest `N` of a `rate`.
pub const MAX_RATE_COUNT: u32 = 1_000_000;
/// Largest `concurrency`.
pub const MAX_CONCURRENCY: u32 = 10_000;
/// Longest `timeout`.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60 * 60);
/// Smallest `max_response`.
pub const MIN_RESPONSE_CAP: u64 = 1024;
/// Largest `max_response`.
pub const MAX_RESPONSE_CAP: u64 = 1 << 30;

const KEYS: &[&str] = &["tool", "rate", "concurrency", "timeout", "max_response"];
const LIMITS_HINT: &str = "write a list of entries, e.g. `limits: [{tool: \"*\", rate: 60/min, \
     concurrency: 4, timeout: 30s, max_response: 1MiB}]`";
const TOOL_HINT: &str = "name the tools the entry counts, as in `tools.allow`: an exact name, a \
     glob like `get_*`, or `\"*\"` for every tool";
const RATE_HINT: &str = "write calls per second, minute or hour: `10/s`, `60/min`, `1000/h`";
const CONCURRENCY_HINT: &str = "write how many calls may be in flight at once, e.g. `4`";
const TIMEOUT_HINT: &str = "write a number and a unit, ms, s, m or h: `500ms`, `30s`, `2m`";
const SIZE_HINT: &str = "write a byte count or a number and a unit, B, KB, MB, GB, KiB, MiB or \
     GiB: `1MiB`, `512KiB`, `1000000`";

impl RatePeriod {
    pub fn seconds(self) -> u64 {
        match self {
            RatePeriod::Second => 1,
            RatePeriod::Minute => 60,
            RatePeriod::Hour => 3600,
        }
    }

    /// As a config file writes it.
    pub fn name(self) -> &'static str {
        match self {
            RatePeriod::Second => "s",
            RatePeriod::Minute => "min",
            RatePeriod::Hour => "h",
        }
    }
}

impl Rate {
    /// The time one token takes to come back: the period over the count.
    pub fn interval(self) -> Duration {
        Duration::from_secs(self.period.seconds()) / self.count.max(1)
    }

    /// True when `self` lets through at least as much as `other` in refill and in burst, and more
    /// in one of them.
    pub fn is_looser_than(self, other: Rate) -> bool {
        let (a, b) = (u64::from(self.count), u64::from(other.count));
        let (pa, pb) = (self.period.seconds(), other.period.seconds());
        // a / pa against b / pb, in integers.
        let refill = (a * pb).cmp(&(b * pa));
        refill.is_ge() && a >= b && (refill.is_gt() || a > b)
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.count, self.period.name())
    }
}

/// `30s`, `2m`, `500ms`: the largest unit that divides the duration.
pub fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [("h", 3_600_000), ("m", 60_000), ("s", 1000)] {
        if ms > 0 && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// `1MiB`, `512KiB`, or the byte count.
pub fn show_size(bytes: u64) -> String {
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes > 0 && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    bytes.to_string()
}

impl fmt::Display for ToolLimit {
    /// `* rate=60/min concurrency=4 timeout=30s max_response=1MiB`, each limit only when set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.tool)?;
        if let Some(r) = self.rate {
            write!(f, " rate={r}")?;
        }
        if let Some(c) = self.concurrency {
            write!(f, " concurrency={c}")?;
        }
        if let Some(t) = self.timeout {
            write!(f, " timeout={}", show_duration(t))?;
        }
        if let Some(m) = self.max_response {
            write!(f, " max_response={}", show_size(m))?;
        }
        Ok(())
    }
}

impl ToolLimit {
    /// The rule a record names for this entry's `kind` (`rate`, `concurrency`, `timeout`,
    /// `max_response`): `mcp.linear.limits[0].rate`, with ` (project)` for a project entry on a
    /// machine server, whose key path the machine's own entries share.
    pub fn rule(&self, kind: &str) -> String {
        let mut rule = self.at.key.clone();
        push_key(&mut rule, kind);
        if self.project_on_machine {
            rule.push_str(" (project)");
        }
        rule
    }
}

/// The entries that apply to a call of `tool`, with their positions in `limits`: the first match
/// among the team policy's entries, the first among the machine file's and the first among the
/// project file's.
pub fn applicable<'l>(
    limits: &'l [ToolLimit],
    tool: &str,
) -> impl Iterator<Item = (usize, &'l ToolLimit)> {
    let first = move |origin: Origin| {
        limits
            .iter()
            .enumerate()
            .find(|(_, l)| l.origin == origin && l.tool.matches(tool))
    };
    first(Origin::Team)
        .into_iter()
        .chain(first(Origin::Machine))
        .chain(first(Origin::Project))
}

/// Parses `N/s`, `N/min` or `N/h`.
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let bad = || format!("`{text}` is not a rate like 60/min");
    let (count, unit) = text.split_once('/').ok_or_else(bad)?;
    let period = match unit {
        "s" => RatePeriod::Second,
        "min" => RatePeriod::Minute,
        "h" => RatePeriod::Hour,
        _ => {
            return Err(format!(
                "`{text}`: the period is `s`, `min` or `h`, not `{unit}`"
            ));
        }
    };
    let count = digits(count).ok_or_else(bad)?;
    if count == 0 {
        return Err(format!(
            "`{text}` allows no call at all; a rate is at least 1 per period"
        ));
    }
    match u32::try_from(count) {
        Ok(count) if count <= MAX_RATE_COUNT => Ok(Rate { count, period }),
        _ => Err(format!(
            "`{text}`: a rate counts at most {MAX_RATE_COUNT} calls per period"
        )),
    }
}

/// Parses `500ms`, `30s`, `2m`, `1h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let ms_per: u64 = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "" => return Err(format!("`{text}` needs a unit: ms, s, m or h")),
        _ => return Err(format!("`{text}` is not a duration like 30s")),
    };
    let n = digits(number).ok_or_else(|| format!("`{text}` is not a duration like 30s"))?;
    let ms = n.checked_mul(ms_per);
    match ms {
        Some(0) => Err(format!(
            "`{text}` is no time at all; a timeout is at least 1ms"
        )),
        Some(ms) if ms <= MAX_TIMEOUT.as_millis() as u64 => Ok(Duration::from_millis(ms)),
        _ => Err(format!(
            "`{text}` is longer than the longest timeout, {}",
            show_duration(MAX_TIMEOUT)
        )),
    }
}

/// Parses `1MiB`, `512KiB`, `1000000B` (a bare count comes as a YAML integer, see [`check_size`]).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale: u64 = match unit {
        "" | "B" => 1,
        "KB" => 1000,
        "MB" => 1000 * 1000,
        "GB" => 1000 * 1000 * 1000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return Err(format!("`{text}` is not a size like 1MiB")),
    };
    let n = digits(number).ok_or_else(|| format!("`{text}` is not a size like 1MiB"))?;
    check_size(n.checked_mul(scale), text)
}

/// A size in range, or why not; `written` is how the file wrote it.
fn check_size(bytes: Option<u64>, written: &str) -> Result<u64, String> {
    match bytes {
        Some(b) if (MIN_RESPONSE_CAP..=MAX_RESPONSE_CAP).contains(&b) => Ok(b),
        Some(b) if b < MIN_RESPONSE_CAP => Err(format!(
            "`{written}` is smaller than {} bytes, the smallest cap: it would cut even a short \
             answer",
            MIN_RESPONSE_CAP
        )),
        _ => Err(format!(
            "`{written}` is larger than the largest cap, {}",
            show_size(MAX_RESPONSE_CAP)
        )),
    }
}

/// A run of ASCII digits as a number (no sign, no spaces, no separators).
fn digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Errors about one file, at its nodes.
struct Errors<'e> {
    file: &'e Arc<str>,
    out: &'e mut Vec<ConfigError>,
}

impl Errors<'_> {
    fn at(&self, node: &Node, key: &str) -> Location {
        Location {
            file: self.file.clone(),
            line: node.line,
            column: node.column,
            key: key.to_string(),
        }
    }

    fn push(&mut self, at: Location, message: impl Into<String>, hint: &str) {
        self.out.push(ConfigError {
            at: Some(at),
            message: message.into(),
            hint: Some(hint.to_string()),
        });
    }

    fn error(&mut self, node: &Node, key: &str, message: impl Into<String>, hint: &str) {
        let at = self.at(node, key);
        self.push(at, message, hint);
    }

    fn wrong_type(&mut self, node: &Node, key: &str, expected: &str, hint: &str) {
        let found = node.value.kind();
        self.error(
            node,
            key,
            format!("expected {expected}, found {found}"),
            hint,
        );
    }
}

/// Reads the `limits` list at `path` of a server whose tool rules are `tools` (`None` when they
/// are themselves wrong: the entries are then read but not checked against them). `None` when
/// anything was wrong; every problem is in `errors`.
pub(super) fn read(
    node: &Node,
    file: &Arc<str>,
    origin: Origin,
    path: &str,
    tools: Option<&ToolRules>,
    errors: &mut Vec<ConfigError>,
) -> Option<Vec<ToolLimit>> {
    let before = errors.len();
    let mut e = Errors { file, out: errors };
    let Value::Seq(items) = &node.value else {
        e.wrong_type(node, path, "a list of limits entries", LIMITS_HINT);
        return None;
    };
    let mut out: Vec<(ToolLimit, Location)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if let Some(entry) = entry(&mut e, item, &format!("{path}[{i}]"), origin) {
            out.push(entry);
        }
    }
    if let Some(tools) = tools {
        check_applies(&mut e, &out, tools);
    }
    (e.out.len() == before).then(|| out.into_iter().map(|(l, _)| l).collect())
}

/// One entry, and where its `tool` was written.
fn entry(
    e: &mut Errors<'_>,
    node: &Node,
    key: &str,
    origin: Origin,
) -> Option<(ToolLimit, Location)> {
    let Value::Map(pairs) = &node.value else {
        e.wrong_type(
            node,
            key,
            "a mapping with `tool` and its limits",
            LIMITS_HINT,
        );
        return None;
    };
    let mut ok = true;
    // An unknown key is likely a misspelt limit: "no limit" is then not said as well.
    let mut unknown = false;
    let mut tool = None;
    let (mut rate, mut concurrency, mut timeout, mut max_response) = (None, None, None, None);
    for (k, v) in pairs {
        let Value::Str(name) = &k.value else {
            e.wrong_type(k, key, "a string key", "write keys as plain names");
            ok = false;
            continue;
        };
        let mut vkey = key.to_string();
        push_key(&mut vkey, name);
        let read: Result<(), String> = match (name.as_str(), &v.value) {
            ("tool", Value::Str(s)) => ToolPattern::parse(s)
                .map(|p| tool = Some((p, e.at(v, &vkey))))
                .map_err(|err| err.to_string()),
            ("rate", Value::Str(s)) => parse_rate(s).map(|r| rate = Some(r)),
            ("concurrency", Value::Int(n)) => match u32::try_from(*n) {
                Ok(0) => Err("a concurrency of 0 allows no call at all; it is at least 1".into()),
                Ok(n) if n <= MAX_CONCURRENCY => {
                    concurrency = Some(n);
                    Ok(())
                }
                _ => Err(format!("a concurrency is from 1 to {MAX_CONCURRENCY}")),
            },
            ("timeout", Value::Str(s)) => parse_duration(s).map(|d| timeout = Some(d)),
            ("timeout", Value::Int(n)) => Err(format!("`{n}` needs a unit: ms, s, m or h")),
            ("max_response", Value::Str(s)) => parse_size(s).map(|b| max_response = Some(b)),
            ("max_response", Value::Int(n)) => {
                check_size(u64::try_from(*n).ok(), &n.to_string()).map(|b| max_response = Some(b))
            }
            (known @ ("tool" | "rate" | "concurrency" | "timeout" | "max_response"), _) => {
                let (what, hint) = match known {
                    "tool" => ("a tool name or glob", TOOL_HINT),
                    "rate" => ("a rate like 60/min", RATE_HINT),
                    "concurrency" => ("an integer", CONCURRENCY_HINT),
                    "timeout" => ("a duration like 30s", TIMEOUT_HINT),
                    _ => ("a size like 1MiB", SIZE_HINT),
                };
                e.wrong_type(v, &vkey, what, hint);
                ok = false;
                continue;
            }
            (other, _) => {
                unknown = true;
                let hint = match KEYS.iter().find(|a| a.eq_ignore_ascii_case(other)) {
                    Some(a) => format!("keys are case-sensitive: did you mean `{a}`?"),
                    None => format!("known keys here: {}", KEYS.join(", ")),
                };
                e.error(k, &vkey, format!("unknown key `{other}`"), &hint);
                ok = false;
                continue;
            }
        };
        if let Err(message) = read {
            let hint = match name.as_str() {
                "tool" => TOOL_HINT,
                "rate" => RATE_HINT,
                "concurrency" => CONCURRENCY_HINT,
                "timeout" => TIMEOUT_HINT,
                _ => SIZE_HINT,
            };
            e.error(v, &vkey, message, hint);
            ok = false;
        }
    }
    let has_tool_key = pairs
        .iter()
        .any(|(k, _)| matches!(&k.value, Value::Str(s) if s == "tool"));
    if !has_tool_key {
        e.error(
            node,
            key,
            "the entry has no `tool`",
            "add `tool: \"*\"` to limit every tool, or the name or glob of the tools it counts",
        );
        ok = false;
    }
    let has_limit = pairs
        .iter()
        .any(|(k, _)| matches!(&k.value, Value::Str(s) if KEYS[1..].contains(&s.as_str())));
    if !has_limit && !unknown {
        e.error(
            node,
            key,
            "the entry sets no limit",
            "add at least one of `rate`, `concurrency`, `timeout`, `max_response`",
        );
        ok = false;
    }
    let (tool, tool_at) = tool?;
    ok.then(|| {
        (
            ToolLimit {
                tool,
                rate,
                concurrency,
                timeout,
                max_response,
                origin,
                project_on_machine: false,
                at: e.at(node, key),
            },
            tool_at,
        )
    })
}

/// Every entry must be able to apply: not behind an earlier entry covering it, not on tools the
/// server denies, not on tools it does not allow.
fn check_applies(e: &mut Errors<'_>, entries: &[(ToolLimit, Location)], tools: &ToolRules) {
    let allowed = tools
        .allow
        .iter()
        .map(|a| format!("`{}`", a.value))
        .collect::<Vec<_>>()
        .join(", ");
    for (i, (limit, at)) in entries.iter().enumerate() {
        let pattern = &limit.tool;
        if let Some((earlier, _)) = entries[..i]
            .iter()
            .find(|(earlier, _)| pattern.is_covered_by(&earlier.tool))
        {
            e.push(
                at.clone(),
                format!(
                    "this entry never applies: `{}` ({}, `tool: {}`) comes first and matches \
                     every tool `{pattern}` matches",
                    earlier.at.key,
                    place(&earlier.at),
                    earlier.tool
                ),
                "the first matching entry applies: put the narrower entry first",
            );
        } else if let Some(d) = tools.deny.iter().find(|d| pattern.is_covered_by(&d.value)) {
            e.push(
                at.clone(),
                format!(
                    "every tool `{pattern}` matches is denied (`{}` at line {}), so the limit never \
                     applies",
                    d.value, d.at.line
                ),
                "limit tools the server allows, or remove the entry",
            );
        } else if tools.allow_annotated.is_empty()
            && !tools.allow.iter().any(|a| a.value.overlaps(pattern))
        {
            let hint = if allowed.is_empty() {
                "the server allows no tool (`tools.allow: []`), so no limit can apply; remove \
                 `limits`"
                    .to_string()
            } else {
                format!(
                    "limit tools the server allows ({allowed}), or write `tool: \"*\"` for all \
                     of them"
                )
            };
            e.push(
                at.clone(),
                format!(
                    "`{pattern}` matches no tool this server allows, so the limit never applies"
                ),
                &hint,
            );
        }
    }
}

/// The limits of a machine server a project entry narrows: the machine's entries, then the
/// project's (marked as such). A project entry looser than the machine entry that counts the same
/// tools is an error for each value it loosens.
pub(super) fn narrow(
    server: &str,
    machine: &[ToolLimit],
    project: &[ToolLimit],
    layers: &super::merge::Layers,
    errors: &mut Vec<ConfigError>,
) -> Vec<ToolLimit> {
    let super::merge::Layers {
        upper,
        upper_file,
        lower,
        ..
    } = *layers;
    for p in project {
        // The machine entry that applies to every tool `p` matches, when there is one.
        let Some(m) = machine.iter().find(|m| m.tool.overlaps(&p.tool)) else {
            continue;
        };
        if !p.tool.is_covered_by(&m.tool) {
            continue;
        }
        let mut looser: Vec<(&str, String, String)> = Vec::new();
        if let (Some(pr), Some(mr)) = (p.rate, m.rate)
            && pr.is_looser_than(mr)
        {
            looser.push(("rate", pr.to_string(), mr.to_string()));
        }
        if let (Some(pc), Some(mc)) = (p.concurrency, m.concurrency)
            && pc > mc
        {
            looser.push(("concurrency", pc.to_string(), mc.to_string()));
        }
        if let (Some(pt), Some(mt)) = (p.timeout, m.timeout)
            && pt > mt
        {
            looser.push(("timeout", show_duration(pt), show_duration(mt)));
        }
        if let (Some(ps), Some(ms)) = (p.max_response, m.max_response)
            && ps > ms
        {
            looser.push(("max_response", show_size(ps), show_size(ms)));
        }
        for (kind, tried, kept) in looser {
            let mut at = p.at.clone();
            push_key(&mut at.key, kind);
            errors.push(ConfigError {
                at: Some(at),
                message: format!(
                    "the {lower} sets `{kind}: {tried}` for `{}` on {upper} server `{server}`, \
                     looser than the {upper}'s `{kind}: {kept}` for `{}` ({})",
                    p.tool,
                    m.tool,
                    place(&m.at)
                ),
                hint: Some(format!(
                    "a {lower} can only tighten a {upper} server's limits: both files' limits \
                     apply, so this one would never be reached; write a tighter value, or change \
                     the {upper_file}"
                )),
            });
        }
    }
    machine
        .iter()
        .cloned()
        .chain(project.iter().cloned().map(|mut l| {
            // The mark tells the project's key paths from the machine's in a rule's name.
            l.project_on_machine = layers.lower_origin == super::model::Origin::Project;
            l
        }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> ToolPattern {
        ToolPattern::parse(text).unwrap()
    }

    #[test]
    fn rates_parse_strictly() {
        let r = parse_rate("60/min").unwrap();
        assert_eq!((r.count, r.period), (60, RatePeriod::Minute));
        assert_eq!(r.interval(), Duration::from_secs(1));
        assert_eq!(
            parse_rate("1/h").unwrap().interval(),
            Duration::from_secs(3600)
        );
        assert_eq!(parse_rate("3/s").unwrap().to_string(), "3/s");
        assert_eq!(
            parse_rate("1000000/s").unwrap().interval(),
            Duration::from_micros(1)
        );
        for bad in [
            "",
            "60",
            "/min",
            "60/",
            "60/m",
            "60/sec",
            "60 /min",
            "60/ min",
            "+6/s",
            "-1/s",
            "1.5/s",
            "6e1/s",
            "0/s",
            "1000001/s",
            "99999999999999999999/s",
            "60/MIN",
            "٣/s",
        ] {
            assert!(parse_rate(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn durations_parse_strictly() {
        for (text, ms) in [
            ("500ms", 500),
            ("30s", 30_000),
            ("2m", 120_000),
            ("1h", 3_600_000),
        ] {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_millis(ms)),
                "{text}"
            );
            assert_eq!(show_duration(Duration::from_millis(ms)), text);
        }
        assert_eq!(show_duration(Duration::from_millis(1500)), "1500ms");
        assert!(parse_duration("30").unwrap_err().contains("needs a unit"));
        for bad in [
            "",
            "0s",
            "0ms",
            "61m",
            "3601s",
            "2h",
            "1.5s",
            "30 s",
            "30S",
            "s",
            "-1s",
            "30sec",
            "1h30m",
            "99999999999999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn sizes_parse_strictly() {
        for (text, bytes) in [
            ("1MiB", 1 << 20),
            ("512KiB", 512 << 10),
            ("1GiB", 1 << 30),
            ("2KB", 2000),
            ("1MB", 1_000_000),
            ("1024B", 1024),
            ("4096", 4096),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
        assert_eq!(show_size(1 << 20), "1MiB");
        assert_eq!(show_size(1_000_000), "1000000");
        assert!(parse_size("1023B").unwrap_err().contains("smallest cap"));
        assert!(parse_size("2GiB").unwrap_err().contains("largest cap"));
        for bad in [
            "", "1mib", "1 MiB", "1.5MiB", "MiB", "1TiB", "0", "-1KiB", "1KIB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} parsed");
        }
        assert!(check_size(None, "-5").is_err());
    }

    #[test]
    fn looser_rates_let_more_through_in_refill_and_burst() {
        let r = |t| parse_rate(t).unwrap();
        assert!(r("120/min").is_looser_than(r("60/min")));
        // Same refill, bigger burst.
        assert!(r("60/min").is_looser_than(r("1/s")));
        // Same refill, smaller burst: tighter.
        assert!(!r("1/s").is_looser_than(r("60/min")));
        // Faster refill but smaller burst: tighter in one way, so it has an effect.
        assert!(!r("2/s").is_looser_than(r("60/min")));
        assert!(!r("60/min").is_looser_than(r("60/min")));
        assert!(!r("30/min").is_looser_than(r("60/min")));
        assert!(r("3600/h").is_looser_than(r("59/min")));
    }

    fn limit(tool: &str, origin: Origin) -> ToolLimit {
        ToolLimit {
            tool: pattern(tool),
            rate: None,
            concurrency: Some(1),
            timeout: None,
            max_response: None,
            origin,
            project_on_machine: false,
            at: Location {
                file: Arc::from("f.yaml"),
                line: 1,
                column: 1,
                key: "mcp.s.limits[0]".into(),
            },
        }
    }

    #[test]
    fn each_file_contributes_its_first_match() {
        let limits = vec![
            limit("get_*", Origin::Machine),
            limit("*", Origin::Machine),
            limit("get_issue", Origin::Project),
            limit("*", Origin::Project),
        ];
        let at = |tool| {
            applicable(&limits, tool)
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
        };
        assert_eq!(at("get_issue"), [0, 2]);
        assert_eq!(at("get_team"), [0, 3]);
        assert_eq!(at("save"), [1, 3]);
        assert_eq!(applicable(&limits[..1], "save").count(), 0);
        let mut p = limit("*", Origin::Project);
        assert_eq!(p.rule("rate"), "mcp.s.limits[0].rate");
        p.project_on_machine = true;
        assert_eq!(p.rule("timeout"), "mcp.s.limits[0].timeout (project)");
    }
}
