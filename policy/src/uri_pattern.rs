//! Resource URI patterns from `resources.allow`: an exact URI or a glob where `*` stands for any run
//! of characters (including `/`) and `?` for exactly one. Matching is on the whole string, byte for
//! byte after JSON unescaping: no case folding, no percent-decoding, no normalisation of dot
//! segments, because the server reads the URI as sent and fenzi must decide on the same text.

use std::fmt;

/// Longest pattern accepted in a config file.
pub const MAX_URI_PATTERN: usize = 2048;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriPattern(String);

/// Why a pattern from the config was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UriPatternError {
    #[error("a resource pattern cannot be empty")]
    Empty,
    #[error("a resource pattern contains a control character or whitespace")]
    Control,
    #[error("a resource pattern is longer than {MAX_URI_PATTERN} characters")]
    TooLong,
}

impl UriPattern {
    pub fn parse(text: &str) -> Result<UriPattern, UriPatternError> {
        if text.is_empty() {
            return Err(UriPatternError::Empty);
        }
        if text.chars().count() > MAX_URI_PATTERN {
            return Err(UriPatternError::TooLong);
        }
        if text.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(UriPatternError::Control);
        }
        Ok(UriPattern(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `uri` (unescaped, as the server will read it) matches the whole pattern.
    pub fn matches(&self, uri: &str) -> bool {
        glob_match(self.0.as_bytes(), uri.as_bytes())
    }
}

impl fmt::Display for UriPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Iterative glob matching with one backtrack point: linear in practice, O(n·m) at worst, never
/// exponential whatever the pattern. `?` consumes one UTF-8 character.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(b'?') => {
                p += 1;
                t += utf8_len(text[t]);
            }
            Some(&c) if c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    let next = st + utf8_len(text[st]);
                    star = Some((sp, next));
                    p = sp + 1;
                    t = next;
                }
                None => return false,
            },
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|&b| b == b'*') && t == text.len()
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, t: &str) -> bool {
        UriPattern::parse(p).unwrap().matches(t)
    }

    #[test]
    fn globs_match_whole_uris_exactly() {
        assert!(m("linear://issues/*", "linear://issues/ENG-1"));
        assert!(m("linear://issues/*", "linear://issues/a/b"));
        assert!(!m("linear://issues/*", "linear://Issues/ENG-1"));
        assert!(!m("linear://issues/*", "xlinear://issues/ENG-1"));
        assert!(m("file:///docs/?.md", "file:///docs/é.md"));
        assert!(!m("file:///docs/?.md", "file:///docs/ab.md"));
        assert!(m("a*b*c", "aXXbYYc"));
        assert!(!m("a*b*c", "aXXbYY"));
        assert!(m("*", ""));
        assert!(m("exact://x", "exact://x"));
        assert!(!m("exact://x", "exact://x/"));
        // No percent-decoding: the text is matched as the server will receive it.
        assert!(m("linear://issues/*", "linear://issues/%2e%2e/secret"));
    }

    #[test]
    fn hostile_patterns_stay_linear() {
        let p = "*a".repeat(50) + "b";
        let t = "a".repeat(5000);
        assert!(!m(&p, &t));
    }

    #[test]
    fn bad_patterns_are_refused() {
        assert_eq!(UriPattern::parse(""), Err(UriPatternError::Empty));
        assert_eq!(UriPattern::parse("a b"), Err(UriPatternError::Control));
        assert_eq!(UriPattern::parse("a\nb"), Err(UriPatternError::Control));
        assert!(UriPattern::parse(&"x".repeat(MAX_URI_PATTERN + 1)).is_err());
    }
}
