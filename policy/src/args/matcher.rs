//! The matchers of an argument rule and how each judges one value the pointer found (or did not).
//!
//! Strings are compared after JSON unescaping, byte for byte: no case folding, no Unicode
//! normalisation, so a look-alike is a different string. Numbers are compared by exact value
//! ([`super::number`]); a value of another type never equals a number (`"1"` is not `1`). Objects
//! are equal when they have the same members with equal values, in any order; arrays when they
//! have equal elements in the same order.
//!
//! A judgement has three outcomes: holds, fails, or cannot be judged (a number beyond exact range).
//! The rule treats the third as the outcome that denies: an `args` condition must hold, and a
//! `deny_args` condition that might hold denies.

use super::number::Number;
use super::pointer::Branch;
use crate::json::Value;
use std::fmt;

/// Longest `regex` pattern, in bytes.
pub const MAX_REGEX_BYTES: usize = 1024;
/// The compiled size limit of a `regex` (the `regex` crate's `size_limit`).
pub const REGEX_SIZE_LIMIT: usize = 1 << 16;

/// One matcher of a condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Matcher {
    /// Equal to this JSON value.
    Equals(Value),
    /// Equal to one of these.
    OneOf(Vec<Value>),
    /// A string starting with this.
    Prefix(String),
    /// A string ending with this.
    Suffix(String),
    /// A string matching this whole-string glob.
    Glob(Glob),
    /// A string matching this regex as a whole.
    Regex(Regex),
    /// A string of at most this many Unicode scalar values.
    MaxLength(usize),
    /// A number at least this.
    Min(Number),
    /// A number at most this.
    Max(Number),
    /// A value of this JSON type.
    Type(JsonType),
    /// `absent: true`: the pointer does not resolve; `absent: false`: it does.
    Absent(bool),
}

/// What a matcher said about one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Holds,
    Fails,
    /// A number fenzi cannot compare exactly.
    Unknown,
}

impl Outcome {
    fn from_bool(b: bool) -> Outcome {
        if b { Outcome::Holds } else { Outcome::Fails }
    }

    /// Both must hold: a failure wins over not knowing.
    fn and(self, other: Outcome) -> Outcome {
        match (self, other) {
            (Outcome::Fails, _) | (_, Outcome::Fails) => Outcome::Fails,
            (Outcome::Unknown, _) | (_, Outcome::Unknown) => Outcome::Unknown,
            _ => Outcome::Holds,
        }
    }

    /// Either may hold: holding wins over not knowing.
    fn or(self, other: Outcome) -> Outcome {
        match (self, other) {
            (Outcome::Holds, _) | (_, Outcome::Holds) => Outcome::Holds,
            (Outcome::Unknown, _) | (_, Outcome::Unknown) => Outcome::Unknown,
            _ => Outcome::Fails,
        }
    }
}

/// The JSON types `type` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonType {
    String,
    Number,
    /// A number with no fractional part (`1.0` included, as JSON Schema says).
    Integer,
    Boolean,
    Object,
    Array,
    Null,
}

impl JsonType {
    pub const ALL: [(&'static str, JsonType); 7] = [
        ("string", JsonType::String),
        ("number", JsonType::Number),
        ("integer", JsonType::Integer),
        ("boolean", JsonType::Boolean),
        ("object", JsonType::Object),
        ("array", JsonType::Array),
        ("null", JsonType::Null),
    ];

    pub fn name(self) -> &'static str {
        JsonType::ALL
            .iter()
            .find(|(_, t)| *t == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }
}

/// A whole-string glob: `*` is any run of characters (none included), `?` exactly one; every other
/// character stands for itself. There is no escape: match a literal `*` with `equals` or `regex`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    text: String,
    chars: Vec<char>,
}

impl Glob {
    pub fn new(text: &str) -> Glob {
        Glob {
            text: text.to_string(),
            chars: text.chars().collect(),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn matches(&self, s: &str) -> bool {
        let p = &self.chars;
        let t: Vec<char> = s.chars().collect();
        let (mut pi, mut ti) = (0, 0);
        // The last `*` seen and the text position it was tried at: on a mismatch, let it take one
        // more character. Linear in practice, at most |p|·|t|.
        let mut star: Option<(usize, usize)> = None;
        while ti < t.len() {
            if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == t[ti])) {
                pi += 1;
                ti += 1;
            } else if pi < p.len() && p[pi] == '*' {
                star = Some((pi, ti));
                pi += 1;
            } else if let Some((sp, st)) = star {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|c| *c == '*')
    }
}

/// A compiled whole-string regex; equal when written the same.
#[derive(Debug, Clone)]
pub struct Regex {
    text: String,
    compiled: regex::Regex,
}

impl PartialEq for Regex {
    fn eq(&self, other: &Regex) -> bool {
        self.text == other.text
    }
}

impl Eq for Regex {}

impl Regex {
    /// Compiles `text` to match whole strings, within [`MAX_REGEX_BYTES`] and
    /// [`REGEX_SIZE_LIMIT`]; the error says what was wrong.
    pub fn new(text: &str) -> Result<Regex, String> {
        if text.len() > MAX_REGEX_BYTES {
            return Err(format!(
                "the regex is {} bytes; at most {MAX_REGEX_BYTES} are allowed",
                text.len()
            ));
        }
        let compiled = regex::RegexBuilder::new(&format!(r"\A(?:{text})\z"))
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(REGEX_SIZE_LIMIT * 16)
            .build()
            .map_err(|e| match e {
                regex::Error::CompiledTooBig(limit) => format!(
                    "the regex compiles to more than {limit} bytes; simplify it (bounded repetitions \
                     like {{1000}} and large Unicode classes are the usual cause)"
                ),
                // The crate's message quotes the wrapped pattern over several lines; keep its last
                // line, which says what is wrong.
                other => {
                    let text = other.to_string();
                    let why = text
                        .lines()
                        .rev()
                        .find_map(|l| l.strip_prefix("error: "))
                        .unwrap_or(text.lines().next().unwrap_or("invalid"));
                    format!("the regex does not compile: {why}")
                }
            })?;
        Ok(Regex {
            text: text.to_string(),
            compiled,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl Matcher {
    /// The key a config file writes it with.
    pub fn name(&self) -> &'static str {
        match self {
            Matcher::Equals(_) => "equals",
            Matcher::OneOf(_) => "one_of",
            Matcher::Prefix(_) => "prefix",
            Matcher::Suffix(_) => "suffix",
            Matcher::Glob(_) => "glob",
            Matcher::Regex(_) => "regex",
            Matcher::MaxLength(_) => "max_length",
            Matcher::Min(_) => "min",
            Matcher::Max(_) => "max",
            Matcher::Type(_) => "type",
            Matcher::Absent(_) => "absent",
        }
    }

    /// What this matcher says about one branch the pointer took.
    pub fn judge(&self, branch: Branch<'_>) -> Outcome {
        let value = match (self, branch) {
            (_, Branch::Unknown) => return Outcome::Unknown,
            (Matcher::Absent(absent), b) => {
                return Outcome::from_bool(*absent == (b == Branch::Missing));
            }
            (_, Branch::Missing) => return Outcome::Fails,
            // Not kept by the parser (see `super::depth_below_arguments`): never judged as
            // anything, so never allowed by `args` nor let through by `deny_args`.
            (_, Branch::Found(Value::Elided)) => return Outcome::Unknown,
            (_, Branch::Found(v)) => v,
        };
        let string = || match value {
            Value::String(s) => Some(s.as_str()),
            _ => None,
        };
        match self {
            Matcher::Absent(_) => unreachable!("judged above"),
            Matcher::Equals(expected) => equal(expected, value),
            Matcher::OneOf(options) => options
                .iter()
                .fold(Outcome::Fails, |acc, o| acc.or(equal(o, value))),
            Matcher::Prefix(p) => Outcome::from_bool(string().is_some_and(|s| s.starts_with(p))),
            Matcher::Suffix(p) => Outcome::from_bool(string().is_some_and(|s| s.ends_with(p))),
            Matcher::Glob(g) => Outcome::from_bool(string().is_some_and(|s| g.matches(s))),
            Matcher::Regex(r) => {
                Outcome::from_bool(string().is_some_and(|s| r.compiled.is_match(s)))
            }
            Matcher::MaxLength(n) => {
                Outcome::from_bool(string().is_some_and(|s| s.chars().count() <= *n))
            }
            Matcher::Min(bound) => compare(value, |n| n >= bound),
            Matcher::Max(bound) => compare(value, |n| n <= bound),
            Matcher::Type(t) => match (t, value) {
                (JsonType::String, Value::String(_))
                | (JsonType::Number, Value::Number(_))
                | (JsonType::Boolean, Value::Bool(_))
                | (JsonType::Object, Value::Object(_))
                | (JsonType::Array, Value::Array(_))
                | (JsonType::Null, Value::Null) => Outcome::Holds,
                (JsonType::Integer, Value::Number(text)) => match Number::parse(text) {
                    Some(n) => Outcome::from_bool(n.is_integer()),
                    None => Outcome::Unknown,
                },
                _ => Outcome::Fails,
            },
        }
    }
}

impl Matcher {
    /// The matcher as a config file writes it, as JSON (`{"prefix": "ENG-"}`): for listings.
    pub fn describe(&self) -> serde_json::Value {
        let value = |v: &Value| {
            serde_json::from_str(&crate::json_text::canonical(v)).unwrap_or(serde_json::Value::Null)
        };
        let number =
            |n: &Number| serde_json::from_str(&n.to_string()).unwrap_or(serde_json::Value::Null);
        let operand = match self {
            Matcher::Equals(v) => value(v),
            Matcher::OneOf(vs) => serde_json::Value::Array(vs.iter().map(value).collect()),
            Matcher::Prefix(s) | Matcher::Suffix(s) => s.as_str().into(),
            Matcher::Glob(g) => g.as_str().into(),
            Matcher::Regex(r) => r.as_str().into(),
            Matcher::MaxLength(n) => (*n).into(),
            Matcher::Min(n) | Matcher::Max(n) => number(n),
            Matcher::Type(t) => t.name().into(),
            Matcher::Absent(b) => (*b).into(),
        };
        serde_json::json!({ self.name(): operand })
    }
}

impl fmt::Display for Matcher {
    /// The matcher as written, its operand shortened: for messages and rule paths. Operands are
    /// policy text, never request content.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = |s: &str| {
            let mut t: String = s.chars().take(40).collect();
            if t.len() < s.len() {
                t.push('…');
            }
            format!("{t:?}")
        };
        match self {
            Matcher::Prefix(s) | Matcher::Suffix(s) => write!(f, "{} {}", self.name(), short(s)),
            Matcher::Glob(g) => write!(f, "glob {}", short(g.as_str())),
            Matcher::Regex(r) => write!(f, "regex {}", short(r.as_str())),
            Matcher::MaxLength(n) => write!(f, "max_length {n}"),
            Matcher::Type(t) => write!(f, "type {}", t.name()),
            Matcher::Absent(b) => write!(f, "absent {b}"),
            Matcher::Min(n) | Matcher::Max(n) => write!(f, "{} {n}", self.name()),
            Matcher::Equals(v) => write!(f, "equals {}", clip(&crate::json_text::canonical(v))),
            Matcher::OneOf(vs) => {
                let all: Vec<String> = vs.iter().map(crate::json_text::canonical).collect();
                write!(f, "one_of [{}]", clip(&all.join(",")))
            }
        }
    }
}

/// `s` cut to 40 characters, for showing an operand.
fn clip(s: &str) -> String {
    let mut t: String = s.chars().take(40).collect();
    if t.len() < s.len() {
        t.push('…');
    }
    t
}

/// A number compared with `test`; another type fails, a number beyond exact range is unknown.
fn compare(value: &Value, test: impl Fn(&Number) -> bool) -> Outcome {
    match value {
        Value::Number(text) => match Number::parse(text) {
            Some(n) => Outcome::from_bool(test(&n)),
            None => Outcome::Unknown,
        },
        _ => Outcome::Fails,
    }
}

/// JSON equality as parsed (see the module doc).
pub fn equal(a: &Value, b: &Value) -> Outcome {
    match (a, b) {
        (Value::Null, Value::Null) => Outcome::Holds,
        (Value::Bool(x), Value::Bool(y)) => Outcome::from_bool(x == y),
        (Value::String(x), Value::String(y)) => Outcome::from_bool(x == y),
        (Value::Number(x), Value::Number(y)) => match (Number::parse(x), Number::parse(y)) {
            (Some(x), Some(y)) => Outcome::from_bool(x == y),
            _ => Outcome::Unknown,
        },
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                return Outcome::Fails;
            }
            x.iter()
                .zip(y)
                .fold(Outcome::Holds, |acc, (x, y)| acc.and(equal(x, y)))
        }
        (Value::Object(x), Value::Object(y)) => {
            if x.len() != y.len() {
                return Outcome::Fails;
            }
            // Member names are unique (the strict parser refuses duplicates, and so does the
            // config loader), so equal counts and every member of one in the other is equality.
            x.iter().fold(Outcome::Holds, |acc, (k, xv)| {
                acc.and(match y.iter().find(|(yk, _)| yk == k) {
                    Some((_, yv)) => equal(xv, yv),
                    None => Outcome::Fails,
                })
            })
        }
        (Value::Elided, _) | (_, Value::Elided) => Outcome::Unknown,
        _ => Outcome::Fails,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{self, JsonLimits};

    fn v(text: &str) -> Value {
        json::parse(text.as_bytes(), &JsonLimits::default()).unwrap()
    }

    fn judge(m: &Matcher, text: &str) -> Outcome {
        m.judge(Branch::Found(&v(text)))
    }

    /// A number as text the strict parser would refuse (it refuses what a float cannot hold),
    /// to show what the matchers do if one ever reaches them.
    fn judge_raw_number(m: &Matcher, text: &str) -> Outcome {
        m.judge(Branch::Found(&Value::Number(text.into())))
    }

    fn num(text: &str) -> Number {
        Number::parse(text).unwrap()
    }

    use Outcome::{Fails, Holds, Unknown};

    #[test]
    fn equals_compares_as_parsed() {
        let one = Matcher::Equals(v("1"));
        for (text, want) in [
            ("1", Holds),
            ("1.0", Holds),
            ("1e0", Holds),
            ("10e-1", Holds),
            ("1.0000000000000000001", Fails),
            ("\"1\"", Fails),
            ("true", Fails),
            ("[1]", Fails),
        ] {
            assert_eq!(judge(&one, text), want, "{text}");
        }
        let huge = format!("1e{}", "9".repeat(40));
        assert_eq!(judge_raw_number(&one, &huge), Unknown);
        let obj = Matcher::Equals(v(r#"{"a":[1,"x"],"b":null}"#));
        assert_eq!(judge(&obj, r#"{"b":null,"a":[1.0,"x"]}"#), Holds);
        assert_eq!(judge(&obj, r#"{"a":["x",1],"b":null}"#), Fails);
        assert_eq!(judge(&obj, r#"{"a":[1,"x"],"b":null,"c":1}"#), Fails);
        let s = Matcher::Equals(v(r#""caf\u00e9""#));
        assert_eq!(judge(&s, "\"café\""), Holds);
        assert_eq!(judge(&s, "\"cafe\\u0301\""), Fails);
        assert_eq!(judge(&s, "\"CAFÉ\""), Fails);
    }

    #[test]
    fn one_of_holds_for_any_option() {
        let m = Matcher::OneOf(vec![v(r#""team-a""#), v(r#""team-b""#), v("3")]);
        assert_eq!(judge(&m, r#""team-b""#), Holds);
        assert_eq!(judge(&m, "3.0"), Holds);
        assert_eq!(judge(&m, r#""team-c""#), Fails);
        assert_eq!(judge(&m, r#""Team-a""#), Fails);
        assert_eq!(Matcher::OneOf(vec![]).judge(Branch::Found(&v("1"))), Fails);
    }

    #[test]
    fn string_matchers_see_the_unescaped_string_only() {
        let p = Matcher::Prefix("ENG-".into());
        assert_eq!(judge(&p, r#""ENG-12""#), Holds);
        assert_eq!(judge(&p, r#""\u0045NG-12""#), Holds, "escapes are undone");
        assert_eq!(judge(&p, r#""eng-12""#), Fails);
        assert_eq!(
            judge(&p, r#""ＥNG-12""#),
            Fails,
            "fullwidth E is another letter"
        );
        assert_eq!(judge(&p, "12"), Fails);
        let s = Matcher::Suffix(".md".into());
        assert_eq!(judge(&s, r#""a.md""#), Holds);
        assert_eq!(judge(&s, r#""a.md\u0000""#), Fails);
        let m = Matcher::MaxLength(3);
        assert_eq!(judge(&m, r#""héé""#), Holds, "scalar values, not bytes");
        assert_eq!(judge(&m, r#""👍👍👍""#), Holds);
        assert_eq!(judge(&m, r#""abcd""#), Fails);
        assert_eq!(judge(&m, "[1]"), Fails);
    }

    #[test]
    fn globs_match_whole_strings() {
        let g = |p: &str, s: &str| Glob::new(p).matches(s);
        assert!(g("area-*", "area-ui"));
        assert!(g("area-*", "area-"));
        assert!(!g("area-*", "xarea-ui"));
        assert!(g("a?c", "abc") && g("a?c", "aéc") && !g("a?c", "ac"));
        assert!(g("*.md", "docs/a.md") && !g("*.md", "a.md.txt"));
        assert!(g("a*b*c", "aXbYbZc") && !g("a*b*c", "aXbYbZ"));
        assert!(g("*", "") && g("**", "x") && !g("", "x"));
        // A pathological pattern stays fast enough.
        let long = "a".repeat(10_000);
        assert!(!g("*a*a*a*a*a*b", &long));
    }

    #[test]
    fn regexes_match_whole_strings_and_are_bounded() {
        let r = Matcher::Regex(Regex::new("[a-z]+-[0-9]+").unwrap());
        assert_eq!(judge(&r, r#""eng-1""#), Holds);
        assert_eq!(judge(&r, r#""eng-1 extra""#), Fails);
        assert_eq!(judge(&r, r#""x eng-1""#), Fails);
        let alt = Regex::new("a|b").unwrap();
        assert!(!alt.compiled.is_match("ab"), "alternation is wrapped whole");
        assert!(Regex::new("(").unwrap_err().contains("does not compile"));
        assert!(
            Regex::new(r"\w{1000}{1000}")
                .unwrap_err()
                .contains("more than")
        );
        assert!(
            Regex::new(&"a".repeat(MAX_REGEX_BYTES + 1))
                .unwrap_err()
                .contains("bytes")
        );
    }

    #[test]
    fn min_and_max_are_exact_and_inclusive() {
        let max = Matcher::Max(num("10"));
        for (text, want) in [
            ("10", Holds),
            ("1e1", Holds),
            ("10.0000000000000000000001", Fails),
            ("-1e300", Holds),
            ("1e300", Fails),
            ("\"5\"", Fails),
        ] {
            assert_eq!(judge(&max, text), want, "{text}");
        }
        assert_eq!(judge_raw_number(&max, "1e400"), Fails);
        let min = Matcher::Min(num("0.1"));
        assert_eq!(judge(&min, "0.1"), Holds);
        assert_eq!(judge(&min, "0.09999999999999999999"), Fails);
        assert_eq!(
            judge_raw_number(&min, &format!("1e{}", "9".repeat(40))),
            Unknown
        );
    }

    #[test]
    fn types_follow_json_and_integer_is_no_fraction() {
        let t = |ty: JsonType, text: &str| judge(&Matcher::Type(ty), text);
        assert_eq!(t(JsonType::Integer, "3"), Holds);
        assert_eq!(t(JsonType::Integer, "3.0"), Holds);
        assert_eq!(t(JsonType::Integer, "3.5"), Fails);
        assert_eq!(t(JsonType::Integer, "\"3\""), Fails);
        assert_eq!(t(JsonType::Number, "3.5"), Holds);
        assert_eq!(t(JsonType::String, "\"\""), Holds);
        assert_eq!(t(JsonType::Null, "null"), Holds);
        assert_eq!(t(JsonType::Object, "[]"), Fails);
        assert_eq!(t(JsonType::Array, "[]"), Holds);
        assert_eq!(t(JsonType::Boolean, "false"), Holds);
    }

    #[test]
    fn a_missing_value_fails_everything_but_absent() {
        for m in [
            Matcher::Equals(Value::Null),
            Matcher::Type(JsonType::Null),
            Matcher::MaxLength(10),
            Matcher::Max(num("1")),
            Matcher::Absent(false),
        ] {
            assert_eq!(m.judge(Branch::Missing), Fails, "{m}");
        }
        assert_eq!(Matcher::Absent(true).judge(Branch::Missing), Holds);
        assert_eq!(
            judge(&Matcher::Absent(true), "null"),
            Fails,
            "null is present"
        );
        assert_eq!(judge(&Matcher::Absent(false), "null"), Holds);
    }
}
