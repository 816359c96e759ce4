//! The values a `limits` entry and `confirm_timeout` are written in (README, "Limits"): rates
//! (`60/min`), durations (`30s`) and byte sizes (`1MiB`). Each is parsed strictly within its bounds
//! and shown back the way a file writes it, so messages and records quote what a person would write.
//!
//! - `rate` is `N/s`, `N/min` or `N/h` with 1 ≤ N ≤ [`MAX_RATE_COUNT`]. A rate of N per period
//!   allows a burst of N, and a token comes back every period / N.
//! - `concurrency` is an integer from 1 to [`MAX_CONCURRENCY`].
//! - A duration is one number and a unit: `ms`, `s`, `m` or `h` (`500ms`, `30s`, `2m`), from 1 ms
//!   to [`MAX_TIMEOUT`]. A bare number is refused: `30` could mean seconds or milliseconds.
//! - A size is a byte count (`1000000`) or a number with `B`, `KB`, `MB`, `GB` (powers of 1000)
//!   or `KiB`, `MiB`, `GiB` (powers of 1024), from [`MIN_RESPONSE_CAP`] (a smaller cap would cut
//!   even a short answer, or fenzi's own JSON-RPC error) to [`MAX_RESPONSE_CAP`].
//!
//! The bottom of `config`: it uses nothing else of it. The model (`model`) holds these values, the
//! schema (`schema`) reads them from a file, the merge (`merge`) compares them.

use std::fmt;
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

/// `N/s`, `N/min` or `N/h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub count: u32,
    pub period: RatePeriod,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RatePeriod {
    Second,
    Minute,
    Hour,
}

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
pub(super) fn check_size(bytes: Option<u64>, written: &str) -> Result<u64, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
