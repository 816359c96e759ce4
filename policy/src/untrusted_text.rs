//! How names taken from a request (JSON-RPC methods, tool names, paths) are shown in decision
//! messages: they are hostile input, so control characters, invisible and bidirectional formatting
//! characters are escaped and the length is bounded.
//!
//! At the crate root because both the MCP classifier (`mcp`) and the argument rules (`args`) show
//! such names; it uses only `json`.

use crate::json;

/// Most characters of one request-supplied name shown in a message.
pub(crate) const SHOWN_CHARS: usize = 128;

/// `s` made safe to print: ASCII controls and `\` escaped, non-ASCII characters that Rust would not
/// print as themselves (bidi overrides, zero-width and other format characters, combining marks)
/// written as `\u{...}`, and cut at [`SHOWN_CHARS`] characters with a trailing `…`.
pub(crate) fn shown(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(SHOWN_CHARS * 2));
    push_shown(&mut out, s);
    out
}

/// [`shown`], appended to `out`.
pub(crate) fn push_shown(out: &mut String, s: &str) {
    // Nearly every name is short printable ASCII without a backslash: copied as it is.
    if s.len() <= SHOWN_CHARS && s.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b'\\') {
        out.push_str(s);
        return;
    }
    push_escaped(out, s);
}

/// [`shown`]'s escape, one character at a time.
fn push_escaped(out: &mut String, s: &str) {
    for (i, c) in s.chars().enumerate() {
        if i == SHOWN_CHARS {
            out.push('…');
            break;
        }
        match c {
            '\\' => out.push_str("\\\\"),
            c if c.is_ascii_control() => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c if c.is_ascii() => out.push(c),
            c if c.escape_debug().count() == 1 => out.push(c),
            c => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
        }
    }
}

/// `s` cut at `max` characters (on a character boundary).
pub(crate) fn clip(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((at, _)) => &s[..at],
        None => s,
    }
}

/// A pattern or name as a JSON string literal (pure ASCII), as rule names show them:
/// `mcp.deepwiki.tools.allow "read_*"`.
pub(crate) fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    json::write_string(&mut out, s);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The plain-ASCII shortcut shows a name exactly as the character-by-character escape does.
        #[test]
        fn the_shortcut_agrees_with_the_escape(s in "[ -~]{0,140}|[a-z_]{126,131}|\\PC{0,140}") {
            let mut slow = String::new();
            push_escaped(&mut slow, &s);
            proptest::prop_assert_eq!(shown(&s), slow);
        }
    }

    #[test]
    fn hostile_names_are_escaped_and_bounded() {
        assert_eq!(shown("read_wiki"), "read_wiki");
        assert_eq!(shown("a\nb\u{1b}[31m"), "a\\u{a}b\\u{1b}[31m");
        assert_eq!(shown("evil\u{202e}txt"), "evil\\u{202e}txt");
        assert_eq!(shown("zero\u{200b}width"), "zero\\u{200b}width");
        assert_eq!(shown("back\\slash"), "back\\\\slash");
        assert_eq!(shown("café"), "café");
        let long = "x".repeat(1000);
        assert_eq!(shown(&long).chars().count(), SHOWN_CHARS + 1);
        assert!(shown(&long).ends_with('…'));
        assert_eq!(clip("héllo", 2), "hé");
        assert_eq!(clip("hi", 5), "hi");
        assert_eq!(quoted("read_*"), "\"read_*\"");
        assert_eq!(quoted("a\"b"), "\"a\\\"b\"");
    }
}
