//! Writing [`Value`]s back out as JSON text: compact in member order (a filtered message keeps its
//! order and every field it had), canonical (members sorted, for hashing pinned definitions), and
//! pretty-printed canonical (the lock file people review in diffs). Strings are written by
//! [`write_string`] in pure ASCII and numbers exactly as they were parsed, so a value written and
//! parsed again is the same value.

use crate::json::{Value, write_string};

/// `value` as compact JSON, members in their order.
pub fn compact(value: &Value) -> String {
    let mut out = String::new();
    write(&mut out, value, Style::Compact, 0);
    out
}

/// `value` as compact JSON with every object's members sorted by key (byte order of the UTF-8
/// key): the same definition always gives the same text, whatever order a server sent it in.
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write(&mut out, value, Style::Canonical, 0);
    out
}

/// [`canonical`] of the object these members would make, without building it.
pub fn canonical_object<'a>(members: impl IntoIterator<Item = &'a (String, Value)>) -> String {
    let mut refs: Vec<&(String, Value)> = members.into_iter().collect();
    refs.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut out = String::from("{");
    for (i, (key, member)) in refs.iter().map(|m| (&m.0, &m.1)).enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(&mut out, key);
        out.push(':');
        write(&mut out, member, Style::Canonical, 1);
    }
    out.push('}');
    out
}

/// Like [`canonical`], indented by two spaces per level, for files people read.
pub fn pretty(value: &Value) -> String {
    let mut out = String::new();
    write(&mut out, value, Style::Pretty, 0);
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Style {
    Compact,
    Canonical,
    Pretty,
}

fn write(out: &mut String, value: &Value, style: Style, level: usize) {
    match value {
        Value::Null | Value::Elided => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, style, level + 1);
                write(out, item, style, level + 1);
            }
            if !items.is_empty() {
                newline(out, style, level);
            }
            out.push(']');
        }
        Value::Object(members) => {
            let mut refs: Vec<&(String, Value)> = members.iter().collect();
            if style != Style::Compact {
                refs.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            }
            out.push('{');
            for (i, (key, member)) in refs.iter().map(|m| (&m.0, &m.1)).enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, style, level + 1);
                write_string(out, key);
                out.push(':');
                if style == Style::Pretty {
                    out.push(' ');
                }
                write(out, member, style, level + 1);
            }
            if !members.is_empty() {
                newline(out, style, level);
            }
            out.push('}');
        }
    }
}

fn newline(out: &mut String, style: Style, level: usize) {
    if style == Style::Pretty {
        out.push('\n');
        for _ in 0..level {
            out.push_str("  ");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{JsonLimits, parse};

    fn v(text: &str) -> Value {
        parse(text.as_bytes(), &JsonLimits::default()).unwrap()
    }

    #[test]
    fn a_canonical_object_of_members_is_the_canonical_text_of_that_object() {
        let whole = v(r#"{"z":{"b":[1,{"d":2,"c":3}],"a":"\u00e9"},"a":null,"m":true}"#);
        let Value::Object(members) = &whole else {
            panic!()
        };
        assert_eq!(canonical_object(members), canonical(&whole));
        let picked: Vec<_> = members.iter().filter(|(k, _)| k != "m").cloned().collect();
        assert_eq!(
            canonical_object(members.iter().filter(|(k, _)| k != "m")),
            canonical(&Value::Object(picked))
        );
        assert_eq!(canonical_object([]), "{}");
    }

    #[test]
    fn compact_keeps_order_and_numbers_as_written() {
        let text = r#"{"b":1.50,"a":[true,null,"x\u00e9"],"c":{}}"#;
        assert_eq!(
            compact(&v(text)),
            r#"{"b":1.50,"a":[true,null,"x\u00e9"],"c":{}}"#
        );
        assert_eq!(v(&compact(&v(text))), v(text));
    }

    #[test]
    fn canonical_sorts_members_at_every_depth() {
        let a = v(r#"{"b":{"y":1,"x":2},"a":[{"d":0,"c":0}]}"#);
        let b = v(r#"{"a":[{"c":0,"d":0}],"b":{"x":2,"y":1}}"#);
        assert_eq!(canonical(&a), canonical(&b));
        assert_eq!(canonical(&a), r#"{"a":[{"c":0,"d":0}],"b":{"x":2,"y":1}}"#);
        // Numbers are kept as text: 1 and 1.0 are different definitions.
        assert_ne!(canonical(&v("[1]")), canonical(&v("[1.0]")));
    }

    #[test]
    fn pretty_is_canonical_indented() {
        let p = pretty(&v(r#"{"b":[1,2],"a":{}}"#));
        assert_eq!(p, "{\n  \"a\": {},\n  \"b\": [\n    1,\n    2\n  ]\n}");
        assert_eq!(canonical(&v(&p)), canonical(&v(r#"{"a":{},"b":[1,2]}"#)));
    }
}
