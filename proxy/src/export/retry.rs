//! What an answer means for the batch, and how long to wait before sending it again.
//!
//! - 2xx: accepted; its `partial_success` may reject some records (never retried: the OTLP
//!   specification forbids resending a partial success, and a receiver that rejected records for
//!   what they are would reject them again).
//! - 429 and every 5xx, a connection error, no answer in time: the same batch again, after an
//!   exponential backoff with jitter (capped), or after `Retry-After` (seconds or an HTTP date) when
//!   the receiver says. The contract says 5xx, not only OTLP's 502/503/504: a collector's 500 is
//!   most often a restart or a full queue, and a retry costs one request per backoff.
//! - any other status (a 4xx, or a 3xx: redirects are not followed): permanent. The receiver will
//!   not take this batch as it is; the export stops, and the log keeps everything.

use super::endpoint::Answer;
use http::StatusCode;
use std::time::{Duration, SystemTime};

/// Longest `Retry-After` obeyed; a longer one waits this long, then tries.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// What to do with a batch after an answer (or none).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Acknowledged; `rejected` of its records were not taken, with the receiver's `message`.
    Accepted { rejected: u64, message: String },
    /// Send it again, after `after` when the receiver said.
    Retry {
        why: String,
        after: Option<Duration>,
    },
    /// Stop exporting.
    Permanent { why: String },
}

pub(crate) fn judge(answer: Result<Answer, String>, now: SystemTime) -> Verdict {
    let answer = match answer {
        Ok(answer) => answer,
        Err(why) => return Verdict::Retry { why, after: None },
    };
    let status = answer.status;
    if status.is_success() {
        let (rejected, message) = super::otlp::partial_success(&answer.body).unwrap_or_default();
        return Verdict::Accepted { rejected, message };
    }
    let why = format!("the receiver answered {status}");
    if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        let after = answer
            .retry_after
            .as_deref()
            .and_then(|v| parse_retry_after(v, now));
        return Verdict::Retry { why, after };
    }
    Verdict::Permanent { why }
}

/// `Retry-After`: delay-seconds or an HTTP date, capped at [`MAX_RETRY_AFTER`]; a date in the past
/// is no wait. `None` when it is neither.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let wait = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        Duration::from_secs(value.parse().unwrap_or(u64::MAX))
    } else {
        let at = httpdate::parse_http_date(value).ok()?;
        at.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

/// Exponential backoff with jitter: the n-th wait is drawn from [half, all] of
/// `min(max, initial * 2^n)`, so that many fenzi processes behind one collector do not retry in
/// step.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max,
            attempt: 0,
        }
    }

    /// The wait before the next try: `retry_after` when the receiver gave one, else the backoff.
    pub fn next(&mut self, retry_after: Option<Duration>) -> Duration {
        let ceiling = self
            .initial
            .saturating_mul(1u32 << self.attempt.min(20))
            .min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        if let Some(after) = retry_after {
            return after;
        }
        let half = ceiling / 2;
        half + half.mul_f64(jitter())
    }

    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// A number in [0, 1): from the OS, or 0.5 if it has none to give.
fn jitter() -> f64 {
    let mut b = [0u8; 4];
    match getrandom::fill(&mut b) {
        Ok(()) => f64::from(u32::from_le_bytes(b)) / (f64::from(u32::MAX) + 1.0),
        Err(_) => 0.5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn answer(status: u16, retry_after: Option<&str>) -> Result<Answer, String> {
        Ok(Answer {
            status: StatusCode::from_u16(status).unwrap(),
            retry_after: retry_after.map(str::to_string),
            body: Bytes::new(),
        })
    }

    #[test]
    fn verdicts_by_status() {
        let now = SystemTime::now();
        let accepted = Verdict::Accepted {
            rejected: 0,
            message: String::new(),
        };
        assert_eq!(judge(answer(200, None), now), accepted);
        assert_eq!(judge(answer(204, None), now), accepted);
        for retried in [429, 500, 502, 503, 504] {
            assert!(
                matches!(
                    judge(answer(retried, None), now),
                    Verdict::Retry { after: None, .. }
                ),
                "{retried}"
            );
        }
        for permanent in [301, 400, 401, 403, 404, 413] {
            assert!(
                matches!(
                    judge(answer(permanent, None), now),
                    Verdict::Permanent { .. }
                ),
                "{permanent}"
            );
        }
        assert!(matches!(
            judge(Err("cannot connect".into()), now),
            Verdict::Retry { after: None, .. }
        ));
        assert_eq!(
            judge(answer(429, Some("3")), now),
            Verdict::Retry {
                why: "the receiver answered 429 Too Many Requests".into(),
                after: Some(Duration::from_secs(3))
            }
        );
    }

    #[test]
    fn retry_after_forms() {
        let now = httpdate::parse_http_date("Thu, 03 Dec 2026 10:00:00 GMT").unwrap();
        let p = |v| parse_retry_after(v, now);
        assert_eq!(p("0"), Some(Duration::ZERO));
        assert_eq!(p(" 7 "), Some(Duration::from_secs(7)));
        assert_eq!(p("99999999999999999999"), Some(MAX_RETRY_AFTER));
        assert_eq!(
            p("Thu, 03 Dec 2026 10:00:30 GMT"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(p("Thu, 03 Dec 2026 09:00:00 GMT"), Some(Duration::ZERO));
        assert_eq!(p("Fri, 04 Dec 2026 10:00:00 GMT"), Some(MAX_RETRY_AFTER));
        assert_eq!(p("soon"), None);
        assert_eq!(p("-1"), None);
        assert_eq!(p(""), None);
    }

    #[test]
    fn backoff_grows_jitters_and_caps() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let ceilings = [100, 200, 400, 800, 1000, 1000, 1000];
        for ceiling in ceilings {
            let wait = b.next(None);
            let ceiling = Duration::from_millis(ceiling);
            assert!(
                wait >= ceiling / 2 && wait <= ceiling,
                "{wait:?} vs {ceiling:?}"
            );
        }
        assert_eq!(b.next(Some(Duration::from_secs(9))), Duration::from_secs(9));
        b.reset();
        assert!(b.next(None) <= Duration::from_millis(100));
    }
}
