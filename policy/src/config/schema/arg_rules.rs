//! `tools.rules` in a policy file: the argument rules of a `url` or `account` server (README,
//! "Argument rules"), read into [`crate::args::ArgRule`]s and checked like the rest of the file:
//! every problem with its file:line:col, key path and a hint.
//!
//! ```yaml
//! rules:
//!   - tool: create_comment
//!     args:                      # JSON Pointers into params.arguments
//!       /issueId: {prefix: "ENG-"}
//!     deny_args:
//!       /state: {equals: canceled}
//! ```
//!
//! A rule whose `tool` no allowed tool can match is refused: it would never apply, and a rule that
//! silently never applies reads as protection that is not there.

use super::{Reader, child, index};
use crate::args::matcher::{Glob, JsonType, Matcher, Regex};
use crate::args::number::Number;
use crate::args::pointer::Pointer;
use crate::args::{ArgRule, Condition};
use crate::config::model::{Located, ToolRules};
use crate::config::yaml::{Node, Value as Yaml};
use crate::json::Value;
use crate::tool_pattern::ToolPattern;

const RULE_KEYS: &[&str] = &["tool", "args", "deny_args"];
const MATCHER_KEYS: &[&str] = &[
    "equals",
    "one_of",
    "prefix",
    "suffix",
    "glob",
    "regex",
    "max_length",
    "min",
    "max",
    "type",
    "absent",
];

const RULES_HINT: &str = "write a list of rules, e.g. `rules: [{tool: create_comment, args: \
     {/issueId: {prefix: \"ENG-\"}}}]`";
const CONDITIONS_HINT: &str = "map JSON Pointers into the call's arguments to matchers, e.g. \
     `{/issueId: {prefix: \"ENG-\"}, /body: {max_length: 4000}}`";
const POINTER_HINT: &str = "a JSON Pointer (RFC 6901) starts with `/` and names members by path \
     (`/labels/0`); `~0` is `~`, `~1` is `/`, and a `*` segment means every element";

impl Reader {
    /// `tools.rules` at `node` (`path` is its key), given the entry's `allow`/`deny` so that a rule
    /// for a tool that can never be allowed is refused. `None` when anything in it is wrong.
    pub(super) fn arg_rules(
        &mut self,
        node: &Node,
        path: &str,
        tools: &ToolRules,
    ) -> Option<Vec<Located<ArgRule>>> {
        let items = self.seq(node, path, "a list of rules", RULES_HINT)?;
        let mut out = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match self.arg_rule(item, &index(path, i), tools) {
                Some(rule) => out.push(rule),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn arg_rule(&mut self, node: &Node, path: &str, tools: &ToolRules) -> Option<Located<ArgRule>> {
        let f = self.fields(
            node,
            path,
            RULE_KEYS,
            "a mapping with `tool` and `args`",
            RULES_HINT,
        )?;
        let tool = match f.get("tool") {
            None => {
                self.error(node, path, "the rule names no `tool`", RULES_HINT);
                None
            }
            Some((_, t)) => {
                let key = child(path, "tool");
                let text = self.string(t, &key, "a tool name or glob", RULES_HINT)?;
                match ToolPattern::parse(text) {
                    Err(e) => {
                        self.error(t, &key, e.to_string(), "a tool's exact name or a `*` glob");
                        None
                    }
                    Ok(p) => match unreachable_reason(&p, tools) {
                        Some(why) => {
                            self.error(
                                t,
                                &key,
                                format!("the rule is for `{p}`, {why}"),
                                "a rule applies only to tools the server allows: allow the tool, \
                                 or remove the rule",
                            );
                            None
                        }
                        None => Some(p),
                    },
                }
            }
        };
        let args = match f.get("args") {
            None => Some(vec![]),
            Some((_, a)) => self.conditions(a, &child(path, "args")),
        };
        let deny_args = match f.get("deny_args") {
            None => Some(vec![]),
            Some((_, d)) => self.conditions(d, &child(path, "deny_args")),
        };
        let (tool, args, deny_args) = (tool?, args?, deny_args?);
        if args.is_empty() && deny_args.is_empty() {
            self.error(
                node,
                path,
                "the rule has no conditions",
                "give it `args` (conditions that must hold) or `deny_args` (conditions that deny)",
            );
            return None;
        }
        Some(Located {
            value: ArgRule {
                path: path.to_string(),
                written_at: format!("{}:{}", self.file, node.line),
                tool,
                args,
                deny_args,
            },
            at: self.at(node, path),
        })
    }

    fn conditions(&mut self, node: &Node, path: &str) -> Option<Vec<Condition>> {
        let Yaml::Map(entries) = &node.value else {
            self.wrong_type(
                node,
                path,
                "a mapping of JSON Pointers to matchers",
                CONDITIONS_HINT,
            );
            return None;
        };
        let mut out: Vec<Condition> = Vec::new();
        let mut ok = true;
        for (k, v) in entries {
            let Some(text) = self.key_str(k, path) else {
                ok = false;
                continue;
            };
            let key = format!("{path}.{text}");
            let pointer = match Pointer::parse(text) {
                Ok(p) => p,
                Err(e) => {
                    self.error(
                        k,
                        &key,
                        format!("`{text}` is not a JSON Pointer: {e}"),
                        POINTER_HINT,
                    );
                    ok = false;
                    continue;
                }
            };
            // YAML refuses duplicate keys; two spellings of one pointer (`/a~1b` and an escaped
            // twin) cannot happen, since each pointer has one text.
            match self.matchers(v, &key) {
                Some(matchers) => out.push(Condition { pointer, matchers }),
                None => ok = false,
            }
        }
        if ok && out.is_empty() {
            self.error(node, path, "no conditions", CONDITIONS_HINT);
            return None;
        }
        ok.then_some(out)
    }

    fn matchers(&mut self, node: &Node, path: &str) -> Option<Vec<Matcher>> {
        let hint = format!("matchers: {}", MATCHER_KEYS.join(", "));
        let before = self.errors.len();
        let f = self.fields(node, path, MATCHER_KEYS, "a mapping of matchers", &hint)?;
        if self.errors.len() > before {
            return None; // an unknown or repeated matcher, already reported
        }
        let mut out = Vec::new();
        let mut ok = true;
        for (name, _, value) in &f.entries {
            let key = child(path, name);
            match self.matcher(name, value, &key) {
                Some(m) => out.push(m),
                None => ok = false,
            }
        }
        if !ok {
            return None;
        }
        if out.is_empty() {
            self.error(node, path, "the condition has no matcher", hint);
            return None;
        }
        if out.len() > 1 && out.iter().any(|m| matches!(m, Matcher::Absent(true))) {
            self.error(
                node,
                path,
                "`absent: true` cannot be combined with other matchers",
                "an absent argument has no value to match; write the other matchers in a \
                 condition of their own",
            );
            return None;
        }
        Some(out)
    }

    fn matcher(&mut self, name: &str, node: &Node, key: &str) -> Option<Matcher> {
        let string = |r: &mut Reader, what: &str| {
            r.string(
                node,
                key,
                what,
                "quote it if it looks like a number or boolean",
            )
            .map(str::to_string)
        };
        match name {
            "equals" => self.json_value(node, key).map(Matcher::Equals),
            "one_of" => {
                let items = self.seq(
                    node,
                    key,
                    "a list of values",
                    "e.g. `one_of: [team-a, team-b]`",
                )?;
                if items.is_empty() {
                    self.error(
                        node,
                        key,
                        "`one_of` is empty, so nothing could match",
                        "list the values allowed",
                    );
                    return None;
                }
                let mut values = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    values.push(self.json_value(item, &index(key, i))?);
                }
                Some(Matcher::OneOf(values))
            }
            "prefix" => string(self, "a string").map(Matcher::Prefix),
            "suffix" => string(self, "a string").map(Matcher::Suffix),
            "glob" => string(self, "a glob").map(|g| Matcher::Glob(Glob::new(&g))),
            "regex" => {
                let text = string(self, "a regular expression")?;
                match Regex::new(&text) {
                    Ok(r) => Some(Matcher::Regex(r)),
                    Err(e) => {
                        self.error(
                            node,
                            key,
                            e,
                            "fenzi uses the Rust `regex` syntax, matched against the whole string",
                        );
                        None
                    }
                }
            }
            "max_length" => match &node.value {
                Yaml::Int(n) if (0..=i128::from(u32::MAX)).contains(n) => {
                    Some(Matcher::MaxLength(*n as usize))
                }
                _ => {
                    self.error(
                        node,
                        key,
                        format!(
                            "`max_length` is a whole number of characters from 0 to {}",
                            u32::MAX
                        ),
                        "e.g. `max_length: 4000`",
                    );
                    None
                }
            },
            "min" | "max" => {
                let n = self.number(node, key)?;
                Some(if name == "min" {
                    Matcher::Min(n)
                } else {
                    Matcher::Max(n)
                })
            }
            "type" => {
                let names: Vec<_> = JsonType::ALL.iter().map(|(n, _)| *n).collect();
                let hint = format!("one of {}", names.join(", "));
                let text = self.string(node, key, "a JSON type name", &hint)?;
                match JsonType::ALL.iter().find(|(n, _)| *n == text) {
                    Some((_, t)) => Some(Matcher::Type(*t)),
                    None => {
                        self.error(node, key, format!("unknown type `{text}`"), hint);
                        None
                    }
                }
            }
            "absent" => self.boolean(node, key).map(Matcher::Absent),
            _ => unreachable!("fields() keeps only MATCHER_KEYS"),
        }
    }

    fn number(&mut self, node: &Node, key: &str) -> Option<Number> {
        let text = match &node.value {
            Yaml::Int(n) => n.to_string(),
            Yaml::Float(f) if f.is_finite() => f.to_string(),
            _ => {
                self.wrong_type(
                    node,
                    key,
                    "a number",
                    "write a number without quotes, e.g. `max: 100`",
                );
                return None;
            }
        };
        Number::parse(&text).or_else(|| {
            self.error(
                node,
                key,
                "the number is out of range",
                "write a smaller number",
            );
            None
        })
    }

    /// A YAML value as the JSON value it stands for. Numbers keep their exact value: integers as
    /// written, decimals by the shortest text that reads back as the same float.
    fn json_value(&mut self, node: &Node, key: &str) -> Option<Value> {
        Some(match &node.value {
            Yaml::Null => Value::Null,
            Yaml::Bool(b) => Value::Bool(*b),
            Yaml::Int(n) => Value::Number(n.to_string()),
            Yaml::Float(f) if f.is_finite() => Value::Number(f.to_string()),
            Yaml::Float(_) => {
                self.error(
                    node,
                    key,
                    "JSON has no infinity or NaN",
                    "write a finite number",
                );
                return None;
            }
            Yaml::Str(s) => Value::String(s.clone()),
            Yaml::Seq(items) => {
                let mut out = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    out.push(self.json_value(item, &index(key, i))?);
                }
                Value::Array(out)
            }
            Yaml::Map(entries) => {
                let mut out = Vec::new();
                for (k, v) in entries {
                    let Yaml::Str(name) = &k.value else {
                        self.wrong_type(
                            k,
                            key,
                            "a string key",
                            "JSON object keys are strings; quote it",
                        );
                        return None;
                    };
                    out.push((name.clone(), self.json_value(v, &child(key, name))?));
                }
                Value::Object(out)
            }
        })
    }
}

/// Why a rule for `pattern` could never apply on a server with these tool rules, if it could not.
/// A server that allows tools by annotation may allow any name, so every rule may apply there.
pub(super) fn unreachable_reason(pattern: &ToolPattern, tools: &ToolRules) -> Option<String> {
    if !tools.allow_annotated.is_empty() {
        return None;
    }
    if let Some(d) = tools.deny.iter().find(|d| pattern.is_covered_by(&d.value)) {
        return Some(format!("which the server denies (`{}`)", d.value));
    }
    if tools.allow.iter().any(|a| pattern.overlaps(&a.value)) {
        return None;
    }
    let allowed: Vec<_> = tools
        .allow
        .iter()
        .map(|a| format!("`{}`", a.value))
        .collect();
    Some(format!(
        "which no allowed tool can be (allowed: {})",
        if allowed.is_empty() {
            "none".into()
        } else {
            allowed.join(", ")
        }
    ))
}
