//! Argument rules (`tools.rules`): what an allowed `tools/call` may carry in `params.arguments`.
//!
//! A rule names a tool pattern and two sets of conditions. Every rule whose pattern matches the
//! called tool applies, in order: each `args` condition must hold, and any `deny_args` condition
//! that holds denies. A condition is a JSON Pointer ([`pointer`]) and one or more matchers
//! ([`matcher`]), all of which must hold for it to hold. Where the pointer takes several paths
//! (`*`), an `args` condition must hold on every one of them (none: it holds), and a `deny_args`
//! condition denies if it holds on any. A value that cannot be judged exactly (a number beyond
//! range) counts against the call either way.
//!
//! The rules only ever narrow: they are asked after the tool itself was allowed, and can only
//! turn that into a denial. Denials name the rule, the condition's pointer and the matcher, never
//! the argument's value (it is hostile input, and may hold anything).

pub mod matcher;
pub mod number;
pub mod pointer;

use crate::json::Value;
use crate::tool_pattern::ToolPattern;
use crate::untrusted_text::shown;
use matcher::{Matcher, Outcome};
use pointer::Pointer;

/// One `tools.rules` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgRule {
    /// Its key (`mcp.linear.tools.rules[0]`): the start of every rule path it gives.
    pub path: String,
    /// The file and line it was written at (`fenzi.yaml:12`), for messages: a project's rules on a
    /// machine server have keys like the machine's own.
    pub written_at: String,
    pub tool: ToolPattern,
    /// Conditions that must all hold.
    pub args: Vec<Condition>,
    /// Conditions any of which denies.
    pub deny_args: Vec<Condition>,
}

/// A pointer and the matchers the value(s) it finds must satisfy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub pointer: Pointer,
    pub matchers: Vec<Matcher>,
}

/// Why a call's arguments were refused: the rule path (`mcp.linear.tools.rules[0].args./issueId`)
/// and a message for the person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: String,
    pub message: String,
}

impl ArgRule {
    /// The rule as JSON (`{"tool", "args": {POINTER: {MATCHER: OPERAND}}, "deny_args", "written_at"}`),
    /// for `fenzi mcp list --json`.
    pub fn describe(&self) -> serde_json::Value {
        let conditions = |cs: &[Condition]| {
            let mut map = serde_json::Map::new();
            for c in cs {
                let mut matchers = serde_json::Map::new();
                for m in &c.matchers {
                    if let serde_json::Value::Object(one) = m.describe() {
                        matchers.extend(one);
                    }
                }
                map.insert(c.pointer.as_str().to_string(), matchers.into());
            }
            serde_json::Value::Object(map)
        };
        serde_json::json!({
            "tool": self.tool.as_str(),
            "args": conditions(&self.args),
            "deny_args": conditions(&self.deny_args),
            "rule": self.path,
            "written_at": self.written_at,
        })
    }

    /// One line per condition, for people: `create_comment: /issueId prefix "ENG-", max_length 10`
    /// and `... deny_args /state equals`.
    pub fn lines(&self) -> Vec<String> {
        let line = |kind: &str, c: &Condition| {
            let ms: Vec<String> = c.matchers.iter().map(ToString::to_string).collect();
            format!("{} {kind}{} {}", self.tool, c.pointer, ms.join(", "))
        };
        self.args
            .iter()
            .map(|c| line("args ", c))
            .chain(self.deny_args.iter().map(|c| line("deny_args ", c)))
            .collect()
    }
}

impl Condition {
    /// For `args`: the first matcher that does not hold on every path, and what it said.
    fn first_unmet(&self, arguments: Option<&Value>) -> Option<(&Matcher, Outcome)> {
        let branches = self.pointer.resolve(arguments);
        self.matchers.iter().find_map(|m| {
            let worst = branches
                .iter()
                .fold(Outcome::Holds, |acc, b| match (acc, m.judge(*b)) {
                    (Outcome::Fails, _) | (_, Outcome::Fails) => Outcome::Fails,
                    (Outcome::Unknown, _) | (_, Outcome::Unknown) => Outcome::Unknown,
                    _ => Outcome::Holds,
                });
            (worst != Outcome::Holds).then_some((m, worst))
        })
    }

    /// For `deny_args`: whether every matcher holds (or might) on some path.
    fn may_hold(&self, arguments: Option<&Value>) -> bool {
        self.pointer
            .resolve(arguments)
            .into_iter()
            .any(|b| self.matchers.iter().all(|m| m.judge(b) != Outcome::Fails))
    }

    fn matchers_text(&self) -> String {
        self.matchers
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// How many levels below `arguments` the rules read: the longest pointer, or `None` when a rule
/// compares with a container (`equals` or `one_of` an object or array), which needs the whole
/// value. The classifier keeps that much of the body and elides the rest; a rule that reaches an
/// elided value cannot judge it, which denies, so a wrong depth fails closed.
pub fn depth_below_arguments(rules: &[ArgRule]) -> Option<usize> {
    let mut deepest = 0;
    for c in rules.iter().flat_map(|r| r.args.iter().chain(&r.deny_args)) {
        let whole = c.matchers.iter().any(|m| match m {
            Matcher::Equals(v) => matches!(v, Value::Array(_) | Value::Object(_)),
            Matcher::OneOf(vs) => vs
                .iter()
                .any(|v| matches!(v, Value::Array(_) | Value::Object(_))),
            _ => false,
        });
        if whole {
            return None;
        }
        deepest = deepest.max(c.pointer.len());
    }
    Some(deepest)
}

/// The first violation of `rules` by a call of `tool` with `arguments` (`None`: the call has no
/// `arguments` member); `None` when every matching rule holds.
pub fn check(rules: &[ArgRule], tool: &str, arguments: Option<&Value>) -> Option<Violation> {
    for rule in rules.iter().filter(|r| r.tool.matches(tool)) {
        for c in &rule.args {
            if let Some((m, outcome)) = c.first_unmet(arguments) {
                let why = match outcome {
                    Outcome::Unknown => "holds a number too large to compare exactly with",
                    _ => "does not satisfy",
                };
                return Some(Violation {
                    rule: format!("{}.args.{}", rule.path, c.pointer.as_str()),
                    message: format!(
                        "tools/call {}: argument {} {why} {m} (rule at {})",
                        shown(tool),
                        c.pointer,
                        rule.written_at
                    ),
                });
            }
        }
        for c in &rule.deny_args {
            if c.may_hold(arguments) {
                return Some(Violation {
                    rule: format!("{}.deny_args.{}", rule.path, c.pointer.as_str()),
                    message: format!(
                        "tools/call {}: argument {} matches a denied pattern ({}) (rule at {})",
                        shown(tool),
                        c.pointer,
                        c.matchers_text(),
                        rule.written_at
                    ),
                });
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{self, JsonLimits};
    use matcher::{Glob, JsonType};
    use number::Number;

    fn v(text: &str) -> Value {
        json::parse(text.as_bytes(), &JsonLimits::default()).unwrap()
    }

    fn cond(pointer: &str, matchers: Vec<Matcher>) -> Condition {
        Condition {
            pointer: Pointer::parse(pointer).unwrap(),
            matchers,
        }
    }

    fn rules() -> Vec<ArgRule> {
        vec![
            ArgRule {
                path: "mcp.linear.tools.rules[0]".into(),
                written_at: "fenzi.yaml:7".into(),
                tool: ToolPattern::parse("create_comment").unwrap(),
                args: vec![
                    cond("/issueId", vec![Matcher::Prefix("ENG-".into())]),
                    cond("/body", vec![Matcher::MaxLength(10)]),
                ],
                deny_args: vec![],
            },
            ArgRule {
                path: "mcp.linear.tools.rules[1]".into(),
                written_at: "fenzi.yaml:12".into(),
                tool: ToolPattern::parse("update_*").unwrap(),
                args: vec![cond("/labels/*", vec![Matcher::Glob(Glob::new("area-*"))])],
                deny_args: vec![
                    cond("/state", vec![Matcher::Equals(v(r#""canceled""#))]),
                    cond("/priority", vec![Matcher::Min(Number::parse("4").unwrap())]),
                ],
            },
        ]
    }

    fn verdict(tool: &str, args: &str) -> Option<String> {
        let args = v(args);
        check(&rules(), tool, Some(&args)).map(|v| v.rule)
    }

    #[test]
    fn every_matching_rule_must_hold() {
        assert_eq!(
            verdict("create_comment", r#"{"issueId":"ENG-1","body":"short"}"#),
            None
        );
        assert_eq!(
            verdict("create_comment", r#"{"issueId":"OPS-1","body":"short"}"#).as_deref(),
            Some("mcp.linear.tools.rules[0].args./issueId")
        );
        assert_eq!(
            verdict(
                "create_comment",
                r#"{"issueId":"ENG-1","body":"far too long"}"#
            )
            .as_deref(),
            Some("mcp.linear.tools.rules[0].args./body")
        );
        assert_eq!(
            verdict("create_comment", r#"{"body":"short"}"#).as_deref(),
            Some("mcp.linear.tools.rules[0].args./issueId"),
            "a missing argument fails"
        );
        assert_eq!(
            verdict("get_issue", r#"{"anything":1}"#),
            None,
            "no rule applies"
        );
    }

    #[test]
    fn deny_args_deny_whatever_args_say() {
        assert_eq!(verdict("update_issue", r#"{"labels":["area-ui"]}"#), None);
        assert_eq!(verdict("update_issue", r#"{"labels":[]}"#), None);
        assert_eq!(
            verdict("update_issue", r#"{"labels":["area-ui","oops"]}"#).as_deref(),
            Some("mcp.linear.tools.rules[1].args./labels/*")
        );
        assert_eq!(
            verdict(
                "update_issue",
                r#"{"labels":["area-ui"],"state":"canceled"}"#
            )
            .as_deref(),
            Some("mcp.linear.tools.rules[1].deny_args./state")
        );
        assert_eq!(
            verdict("update_issue", r#"{"labels":[],"priority":4.0}"#).as_deref(),
            Some("mcp.linear.tools.rules[1].deny_args./priority")
        );
        assert_eq!(
            verdict("update_issue", r#"{"labels":[],"priority":3.999}"#),
            None
        );
        // The strict parser refuses such a number before any rule sees it; if one came through,
        // not being able to compare it still denies.
        let huge = Value::Object(vec![
            ("labels".into(), Value::Array(vec![])),
            (
                "priority".into(),
                Value::Number(format!("1e{}", "9".repeat(40))),
            ),
        ]);
        assert_eq!(
            check(&rules(), "update_issue", Some(&huge))
                .map(|v| v.rule)
                .as_deref(),
            Some("mcp.linear.tools.rules[1].deny_args./priority"),
            "a number that cannot be compared denies"
        );
    }

    #[test]
    fn no_arguments_member_is_missing_everywhere() {
        assert_eq!(
            check(&rules(), "create_comment", None)
                .map(|v| v.rule)
                .as_deref(),
            Some("mcp.linear.tools.rules[0].args./issueId")
        );
        let absent_ok = vec![ArgRule {
            path: "r".into(),
            written_at: "f:1".into(),
            tool: ToolPattern::parse("t").unwrap(),
            args: vec![cond("/force", vec![Matcher::Absent(true)])],
            deny_args: vec![cond("/x", vec![Matcher::Type(JsonType::String)])],
        }];
        assert_eq!(check(&absent_ok, "t", None), None);
        assert!(check(&absent_ok, "t", Some(&v(r#"{"force":false}"#))).is_some());
    }

    #[test]
    fn a_value_the_parser_did_not_keep_is_never_judged_allowed() {
        let elided = Value::Object(vec![("a".into(), Value::Elided)]);
        let rule = |args: Vec<Condition>, deny_args: Vec<Condition>| ArgRule {
            path: "r".into(),
            written_at: "f:1".into(),
            tool: ToolPattern::parse("t").unwrap(),
            args,
            deny_args,
        };
        let denies = |r: ArgRule| check(&[r], "t", Some(&elided)).is_some();
        for m in [
            Matcher::Type(JsonType::Object),
            Matcher::Equals(Value::Null),
            Matcher::Absent(true),
            Matcher::Absent(false),
        ] {
            let below = |p: &str| cond(p, vec![m.clone()]);
            assert!(denies(rule(vec![], vec![below("/a/*")])), "deny * {m}");
            assert!(denies(rule(vec![], vec![below("/a/x/y")])), "deny x {m}");
            assert!(denies(rule(vec![below("/a/x")], vec![])), "args {m}");
        }
        // The elided value itself is there: `absent` can say so; nothing else can judge it.
        let at_a = |m: Matcher| cond("/a", vec![m]);
        assert!(denies(rule(
            vec![],
            vec![at_a(Matcher::Type(JsonType::Object))]
        )));
        assert!(denies(rule(
            vec![at_a(Matcher::Type(JsonType::Object))],
            vec![]
        )));
        assert!(!denies(rule(vec![], vec![at_a(Matcher::Absent(true))])));
        assert!(!denies(rule(vec![at_a(Matcher::Absent(false))], vec![])));
    }

    #[test]
    fn the_depth_read_is_the_longest_pointer_or_everything_for_containers() {
        let r = |c: Vec<Condition>| ArgRule {
            path: "r".into(),
            written_at: "f:1".into(),
            tool: ToolPattern::parse("t").unwrap(),
            args: c,
            deny_args: vec![],
        };
        assert_eq!(depth_below_arguments(&[]), Some(0));
        assert_eq!(
            depth_below_arguments(&[r(vec![
                cond("/a/*/b", vec![Matcher::Type(JsonType::Object)]),
                cond("", vec![Matcher::Type(JsonType::Object)]),
            ])]),
            Some(3)
        );
        assert_eq!(
            depth_below_arguments(&[r(vec![cond("/a", vec![Matcher::Equals(v("[1]"))])])]),
            None
        );
        assert_eq!(
            depth_below_arguments(&[r(vec![cond("/a", vec![Matcher::Equals(v("1"))])])]),
            Some(1)
        );
    }

    #[test]
    fn messages_name_the_pointer_and_matcher_never_the_value() {
        let args = v(r#"{"issueId":"SECRET-VALUE-123","body":"x"}"#);
        let violation = check(&rules(), "create_comment", Some(&args)).unwrap();
        assert_eq!(
            violation.message,
            "tools/call create_comment: argument /issueId does not satisfy prefix \"ENG-\" (rule at fenzi.yaml:7)"
        );
        assert!(!violation.message.contains("SECRET"));
    }
}
