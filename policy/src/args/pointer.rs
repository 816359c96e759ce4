//! JSON Pointers (RFC 6901) into a tool call's `params.arguments`, with one addition: a segment that
//! is exactly `*` stands for every element of an array and every member of an object. `~0` is `~`
//! and `~1` is `/`; any other `~` is an error. Segments are compared with member names exactly,
//! byte for byte after JSON unescaping (no case folding, no Unicode normalisation), and an array
//! index is decimal digits without a leading zero (`-`, past the end, never resolves).
//!
//! Resolving gives one [`Branch`] per path the pointer can take through the value: the value found,
//! or `Missing` where a segment did not resolve. A wildcard over an empty container gives no
//! branches. The branches are distinct paths through the document, so there are never more of them
//! than the document has values.

use crate::json::Value;
use std::fmt;

/// Most segments in one pointer.
pub const MAX_SEGMENTS: usize = 32;

/// A parsed pointer, and its text as written (for rule paths and messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    text: String,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// A member name or an array index, unescaped.
    Key(String),
    /// `*`: every element or member.
    Every,
}

/// Where one path through the arguments ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Branch<'v> {
    Found(&'v Value),
    Missing,
    /// Below a container the parser did not keep ([`Value::Elided`]): whether anything is there
    /// is not known.
    Unknown,
}

/// Why a pointer was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PointerError {
    #[error("a JSON Pointer is empty (the whole arguments) or starts with `/`")]
    NoLeadingSlash,
    #[error("`~` must be followed by 0 (for `~`) or 1 (for `/`)")]
    BadEscape,
    #[error("a pointer may have at most {MAX_SEGMENTS} segments")]
    TooLong,
}

impl Pointer {
    pub fn parse(text: &str) -> Result<Pointer, PointerError> {
        if text.is_empty() {
            return Ok(Pointer {
                text: String::new(),
                segments: vec![],
            });
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err(PointerError::NoLeadingSlash);
        };
        let mut segments = Vec::new();
        for raw in rest.split('/') {
            if segments.len() == MAX_SEGMENTS {
                return Err(PointerError::TooLong);
            }
            if raw == "*" {
                segments.push(Segment::Every);
                continue;
            }
            let mut key = String::with_capacity(raw.len());
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                if c == '~' {
                    match chars.next() {
                        Some('0') => key.push('~'),
                        Some('1') => key.push('/'),
                        _ => return Err(PointerError::BadEscape),
                    }
                } else {
                    key.push(c);
                }
            }
            segments.push(Segment::Key(key));
        }
        Ok(Pointer {
            text: text.to_string(),
            segments,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// How many segments it has: how many levels below the arguments it reads.
    pub fn len(&self) -> usize {
        self.segments.len()
    }

    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// Every path from `root` (`None`: the call has no `arguments`).
    pub fn resolve<'v>(&self, root: Option<&'v Value>) -> Vec<Branch<'v>> {
        let mut branches = vec![match root {
            Some(v) => Branch::Found(v),
            None => Branch::Missing,
        }];
        for segment in &self.segments {
            let mut next = Vec::with_capacity(branches.len());
            for branch in branches {
                let value = match branch {
                    Branch::Found(value) => value,
                    other => {
                        next.push(other);
                        continue;
                    }
                };
                // A container the parser did not keep: what lies below it is unknown (the
                // matchers cannot judge it, which denies), never `Missing`.
                if *value == Value::Elided {
                    next.push(Branch::Unknown);
                    continue;
                }
                match segment {
                    Segment::Every => match value {
                        Value::Array(items) => next.extend(items.iter().map(Branch::Found)),
                        Value::Object(members) => {
                            next.extend(members.iter().map(|(_, v)| Branch::Found(v)))
                        }
                        _ => next.push(Branch::Missing),
                    },
                    Segment::Key(key) => next.push(match child(value, key) {
                        Some(v) => Branch::Found(v),
                        None => Branch::Missing,
                    }),
                }
            }
            branches = next;
        }
        branches
    }
}

impl fmt::Display for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.text.is_empty() {
            "\"\" (the whole arguments)"
        } else {
            &self.text
        })
    }
}

fn child<'v>(value: &'v Value, key: &str) -> Option<&'v Value> {
    match value {
        Value::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
        Value::Array(items) => {
            let canonical = !key.is_empty()
                && key.bytes().all(|b| b.is_ascii_digit())
                && (key == "0" || !key.starts_with('0'));
            if !canonical {
                return None;
            }
            items.get(key.parse::<usize>().ok()?)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{self, JsonLimits};

    fn doc(text: &str) -> Value {
        json::parse(text.as_bytes(), &JsonLimits::default()).unwrap()
    }

    fn found(p: &str, v: &Value) -> Vec<String> {
        Pointer::parse(p)
            .unwrap()
            .resolve(Some(v))
            .into_iter()
            .map(|b| match b {
                Branch::Found(Value::String(s)) => s.clone(),
                Branch::Found(Value::Number(n)) => n.clone(),
                Branch::Found(other) => other.type_name().to_string(),
                Branch::Missing => "MISSING".into(),
                Branch::Unknown => "UNKNOWN".into(),
            })
            .collect()
    }

    #[test]
    fn rfc_6901_examples_resolve() {
        // RFC 6901 section 5.
        let v = doc(
            r#"{"foo":["bar","baz"],"":0,"a/b":1,"c%d":2,"e^f":3,"g|h":4,"i\\j":5,"k\"l":6," ":7,"m~n":8}"#,
        );
        assert_eq!(found("", &v), ["object"]);
        assert_eq!(found("/foo", &v), ["array"]);
        assert_eq!(found("/foo/0", &v), ["bar"]);
        assert_eq!(found("/", &v), ["0"]);
        assert_eq!(found("/a~1b", &v), ["1"]);
        assert_eq!(found("/c%d", &v), ["2"]);
        assert_eq!(found("/e^f", &v), ["3"]);
        assert_eq!(found("/g|h", &v), ["4"]);
        assert_eq!(found("/i\\j", &v), ["5"]);
        assert_eq!(found("/k\"l", &v), ["6"]);
        assert_eq!(found("/ ", &v), ["7"]);
        assert_eq!(found("/m~0n", &v), ["8"]);
    }

    #[test]
    fn escapes_are_not_confused() {
        let v = doc(r#"{"~1":"tilde-one","/":"slash","~":"tilde"}"#);
        assert_eq!(found("/~01", &v), ["tilde-one"]);
        assert_eq!(found("/~1", &v), ["slash"]);
        assert_eq!(found("/~0", &v), ["tilde"]);
        for bad in ["/~", "/~2", "/a~", "foo", "*"] {
            assert!(Pointer::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wildcards_take_every_element_and_member() {
        let v = doc(r#"{"labels":["a","b"],"m":{"x":"1","y":"2"},"e":[],"s":"str"}"#);
        assert_eq!(found("/labels/*", &v), ["a", "b"]);
        assert_eq!(found("/m/*", &v), ["1", "2"]);
        assert!(found("/e/*", &v).is_empty());
        assert_eq!(found("/s/*", &v), ["MISSING"]);
        assert_eq!(found("/nope/*", &v), ["MISSING"]);
        let nested = doc(r#"{"a":[{"b":"1"},{"c":"2"},{"b":"3"}]}"#);
        assert_eq!(found("/a/*/b", &nested), ["1", "MISSING", "3"]);
    }

    #[test]
    fn array_indexes_are_canonical_decimal() {
        let v = doc(r#"{"a":["zero","one"]}"#);
        assert_eq!(found("/a/1", &v), ["one"]);
        for miss in ["/a/01", "/a/-", "/a/2", "/a/+1", "/a/ 1", "/a/", "/a/1e0"] {
            assert_eq!(found(miss, &v), ["MISSING"], "{miss}");
        }
    }

    #[test]
    fn names_are_compared_exactly() {
        // Case, look-alikes and normalisation forms stay distinct.
        let v = doc(r#"{"path":"a","Path":"b","pаth":"cyrillic","é":"nfc","e\u0301":"nfd"}"#);
        assert_eq!(found("/path", &v), ["a"]);
        assert_eq!(found("/Path", &v), ["b"]);
        assert_eq!(found("/p\u{430}th", &v), ["cyrillic"]);
        assert_eq!(found("/\u{e9}", &v), ["nfc"]);
        assert_eq!(found("/e\u{301}", &v), ["nfd"]);
        assert_eq!(found("/PATH", &v), ["MISSING"]);
    }

    #[test]
    fn no_arguments_is_missing_everywhere() {
        let p = Pointer::parse("/a").unwrap();
        assert_eq!(p.resolve(None), [Branch::Missing]);
        assert_eq!(Pointer::parse("").unwrap().resolve(None), [Branch::Missing]);
    }

    #[test]
    fn too_many_segments_are_refused() {
        let long = "/a".repeat(MAX_SEGMENTS + 1);
        assert_eq!(Pointer::parse(&long), Err(PointerError::TooLong));
        assert!(Pointer::parse(&"/a".repeat(MAX_SEGMENTS)).is_ok());
    }
}
