//! `tools.confirm` and `tools.confirm_timeout` in a policy file (README, "Confirm"), read into
//! [`Confirm`] and checked like the rest of the file: every problem with its file:line:col, key
//! path and a hint.
//!
//! ```yaml
//! tools:
//!   allow: [get_issue, create_issue, delete_issue]
//!   confirm: [delete_issue, "create_*"]   # held until a person answers
//!   confirm_timeout: 60s                   # default 120s, at most 1h
//! ```
//!
//! A pattern no allowed tool can match (or that `deny` covers) is refused: it would never hold a
//! call, and a confirmation that silently never happens reads as protection that is not there.

use super::arg_rules::unreachable_reason;
use super::{Fields, Reader, child};
use crate::config::model::ToolRules;
use crate::config::model::confirm::{Confirm, MAX_CONFIRM_TIMEOUT};
use crate::config::units::{parse_duration, show_duration};
use crate::config::yaml::Value;

const TIMEOUT_HINT: &str = "write how long a held call waits for a person, a number and a unit \
     (ms, s, m or h): `60s`, `2m`; the default is 120s, the longest 1h";

impl Reader {
    /// `confirm` and `confirm_timeout` of the `tools` mapping `f` at `path`, given the entry's
    /// other tool rules. `None` when anything in them is wrong.
    pub(super) fn confirm(
        &mut self,
        f: &Fields<'_>,
        path: &str,
        tools: &ToolRules,
    ) -> Option<Confirm> {
        let mut out = Confirm::default();
        let mut ok = true;
        if let Some((_, node)) = f.get("confirm") {
            let key = child(path, "confirm");
            match self.patterns(node, &key, "tool") {
                Some(patterns) => {
                    for p in &patterns {
                        if let Some(why) = unreachable_reason(&p.value, tools) {
                            ok = false;
                            self.errors.push(crate::config::ConfigError {
                                at: Some(p.at.clone()),
                                message: format!("`confirm` holds calls of `{}`, {why}", p.value),
                                hint: Some(
                                    "only calls the server allows are held for a person: allow \
                                     the tool, or remove the pattern"
                                        .into(),
                                ),
                            });
                        }
                    }
                    out.tools = patterns;
                }
                None => ok = false,
            }
        }
        if let Some((_, v)) = f.get("confirm_timeout") {
            let key = child(path, "confirm_timeout");
            out.timeout_at = Some(self.at(v, &key));
            let read = match &v.value {
                Value::Str(s) => parse_duration(s).and_then(|d| {
                    if d > MAX_CONFIRM_TIMEOUT {
                        Err(format!(
                            "`{s}` is longer than the longest confirm_timeout, {}",
                            show_duration(MAX_CONFIRM_TIMEOUT)
                        ))
                    } else {
                        Ok(d)
                    }
                }),
                Value::Int(n) => Err(format!("`{n}` needs a unit: ms, s, m or h")),
                _ => {
                    self.wrong_type(v, &key, "a duration like 60s", TIMEOUT_HINT);
                    return None;
                }
            };
            match read {
                Ok(d) => out.timeout = d,
                Err(message) => {
                    self.error(v, &key, message, TIMEOUT_HINT);
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }
}
