//! The lines on a session's control socket: one JSON object per line, UTF-8, `\n`-terminated, at
//! most [`MAX_LINE`] bytes.
//!
//! From fenzi to the watcher:
//!
//! ```text
//! {"held":{"id":"3","session":"a1b2c3","server":"linear","tool":"delete_issue",
//!          "arguments":"{\"id\":\"ENG-1\"}","rule":"mcp.linear.tools.confirm \"delete_*\"",
//!          "deadline":"2026-11-29T13:35:48.123Z","timeout_ms":119874}}
//! {"gone":{"id":"3","why":"no answer in 2m"}}
//! {"answered":{"id":"3","allow":true}}
//! {"error":"no call 9 is held (it was answered, timed out or withdrawn)"}
//! ```
//!
//! - `held`: a call waits for an answer. Every call held when the watcher connects is sent first,
//!   oldest first, then each new one. `arguments` is the call's `params.arguments` as JSON text,
//!   cut at [`MAX_ARGUMENTS`] bytes (then ending in `…`), with the session's placeholders shown as
//!   `[placeholder:NAME]`: it is what the agent sent, never a secret value. `timeout_ms` is the
//!   time left when the line was written; `deadline` the same as a UTC time.
//! - `gone`: the call is no longer held (answered here or by another watcher, timed out, the
//!   client hung up, the session ended); `why` says which. Nothing more is sent about it.
//! - `answered`: the watcher's answer was taken. `error`: a line fenzi could not use.
//!
//! From the watcher to fenzi: `{"answer":{"id":"3","allow":true}}` (or `false`). The first answer
//! to a call decides it; a later one gets an `error`.
//!
//! A peer whose uid is not fenzi's gets one `error` line and the connection is closed.

use serde::{Deserialize, Serialize};

/// Longest line either side writes.
pub const MAX_LINE: usize = 16 * 1024;
/// Longest `arguments` text shown, in bytes.
pub const MAX_ARGUMENTS: usize = 2048;

/// A held call as watchers see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    pub id: String,
    pub session: String,
    pub server: String,
    pub tool: String,
    pub arguments: String,
    pub rule: String,
    pub deadline: String,
    /// Milliseconds left when the line was written.
    #[serde(default)]
    pub timeout_ms: u64,
    /// When it times out, on this process's clock.
    #[serde(skip)]
    pub deadline_at: Option<tokio::time::Instant>,
}

impl Offer {
    /// The offer as sent now: with the time it has left.
    pub fn now(&self) -> Offer {
        let mut offer = self.clone();
        offer.timeout_ms = self.deadline_at.map_or(0, |d| {
            u64::try_from(
                d.saturating_duration_since(tokio::time::Instant::now())
                    .as_millis(),
            )
            .unwrap_or(u64::MAX)
        });
        offer
    }
}

/// What the session tells its watchers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Held(Offer),
    Gone { id: String, why: String },
}

/// A line from fenzi.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ServerLine {
    Held(Offer),
    Gone { id: String, why: String },
    Answered { id: String, allow: bool },
    Error(String),
}

/// A line from a watcher.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum WatcherLine {
    Answer { id: String, allow: bool },
}

impl ServerLine {
    /// The line, with its `\n`.
    pub fn to_line(&self) -> String {
        let mut line = serde_json::to_string(self).expect("control lines always serialise");
        line.push('\n');
        line
    }
}

impl WatcherLine {
    pub fn to_line(&self) -> String {
        let mut line = serde_json::to_string(self).expect("control lines always serialise");
        line.push('\n');
        line
    }
}

/// `text` cut to at most [`MAX_ARGUMENTS`] bytes on a character boundary, with `…` when cut.
pub fn cut_arguments(text: &str) -> String {
    if text.len() <= MAX_ARGUMENTS {
        return text.to_string();
    }
    let mut end = MAX_ARGUMENTS - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_the_documented_json() {
        let held = ServerLine::Held(Offer {
            id: "3".into(),
            session: "a1".into(),
            server: "linear".into(),
            tool: "delete_issue".into(),
            arguments: "{\"id\":1}".into(),
            rule: "r".into(),
            deadline: "2026-11-29T13:35:48.123Z".into(),
            timeout_ms: 5,
            deadline_at: None,
        });
        assert_eq!(
            held.to_line(),
            "{\"held\":{\"id\":\"3\",\"session\":\"a1\",\"server\":\"linear\",\"tool\":\
             \"delete_issue\",\"arguments\":\"{\\\"id\\\":1}\",\"rule\":\"r\",\"deadline\":\
             \"2026-11-29T13:35:48.123Z\",\"timeout_ms\":5}}\n"
        );
        let answer: WatcherLine =
            serde_json::from_str("{\"answer\":{\"id\":\"3\",\"allow\":true}}").unwrap();
        assert_eq!(
            answer,
            WatcherLine::Answer {
                id: "3".into(),
                allow: true
            }
        );
        assert!(
            serde_json::from_str::<WatcherLine>("{\"answer\":{\"id\":\"3\",\"allow\":\"yes\"}}")
                .is_err()
        );
        assert_eq!(
            ServerLine::Gone {
                id: "3".into(),
                why: "client gone".into()
            }
            .to_line(),
            "{\"gone\":{\"id\":\"3\",\"why\":\"client gone\"}}\n"
        );
    }

    #[test]
    fn arguments_are_cut_at_2_kib_on_a_character() {
        assert_eq!(cut_arguments("{}"), "{}");
        let long = "é".repeat(2000);
        let cut = cut_arguments(&long);
        assert!(cut.len() <= MAX_ARGUMENTS);
        assert!(cut.ends_with('…'));
        assert!(cut.starts_with("éé"));
    }
}
