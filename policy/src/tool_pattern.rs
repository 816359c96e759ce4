//! Tool patterns from `tools.allow` / `tools.deny`: exact names or `*` globs. Matching is exact and
//! case-sensitive on the unescaped name, never normalised. A glob only ever matches names in the MCP
//! tool-name charset `[A-Za-z0-9_.-]{1,128}`, so `*` cannot be stretched over a name with spaces,
//! slashes, control characters or look-alike Unicode.

use std::fmt;

/// Longest tool name a glob may match.
pub const MAX_TOOL_NAME: usize = 128;

/// True when `name` is in the charset globs are allowed to match.
pub fn is_plain_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TOOL_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolPattern {
    Exact(String),
    /// A pattern containing at least one `*`; every other character is in the plain charset.
    Glob(String),
}

/// Why a pattern from the config was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("a tool pattern cannot be empty")]
    Empty,
    #[error(
        "glob {0:?} has a character outside [A-Za-z0-9_.-*]; globs may only use the tool-name charset and `*`"
    )]
    GlobCharset(String),
    #[error("tool name {0:?} contains a control character")]
    Control(String),
    #[error(
        "tool name {0:?} has `[`, `]`, `{{`, `}}` or `?`, which no tool name uses; fenzi's globs have only `*` (e.g. `get_*`)"
    )]
    GlobLike(String),
    #[error("tool pattern {0:?} is longer than {MAX_TOOL_NAME} characters")]
    TooLong(String),
}

impl ToolPattern {
    /// Parses a pattern as written in `fenzi.yaml`.
    pub fn parse(text: &str) -> Result<ToolPattern, PatternError> {
        if text.is_empty() {
            return Err(PatternError::Empty);
        }
        if text.chars().count() > MAX_TOOL_NAME {
            return Err(PatternError::TooLong(text.to_string()));
        }
        if text.contains('*') {
            let ok = text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'*'));
            if !ok {
                return Err(PatternError::GlobCharset(text.to_string()));
            }
            Ok(ToolPattern::Glob(text.to_string()))
        } else {
            if text.chars().any(char::is_control) {
                return Err(PatternError::Control(text.to_string()));
            }
            // Glob syntax from other tools, which would be matched literally and never match.
            if text.contains(['[', ']', '{', '}', '?']) {
                return Err(PatternError::GlobLike(text.to_string()));
            }
            Ok(ToolPattern::Exact(text.to_string()))
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            ToolPattern::Exact(s) | ToolPattern::Glob(s) => s,
        }
    }

    /// Does this pattern match the tool `name` (already JSON-unescaped)?
    pub fn matches(&self, name: &str) -> bool {
        match self {
            ToolPattern::Exact(p) => p == name,
            ToolPattern::Glob(p) => {
                is_plain_tool_name(name) && glob_match(p.as_bytes(), name.as_bytes())
            }
        }
    }

    /// True when every name this pattern matches is also matched by `wider` (used by the merge to
    /// tell narrowing from widening). Conservative: answers false when unsure.
    pub fn is_covered_by(&self, wider: &ToolPattern) -> bool {
        match (self, wider) {
            (_, ToolPattern::Glob(w)) if w.bytes().all(|b| b == b'*') => true,
            (ToolPattern::Exact(n), w) => w.matches(n),
            (ToolPattern::Glob(a), ToolPattern::Glob(b)) => {
                a == b || glob_covers(b.as_bytes(), a.as_bytes())
            }
            (ToolPattern::Glob(_), ToolPattern::Exact(_)) => false,
        }
    }

    /// True when some tool name matches both patterns (an argument rule for this pattern can apply
    /// to a tool `other` allows). Two globs share a name exactly when their literal starts agree
    /// (one is a prefix of the other) and so do their literal ends: a name made of the longer start,
    /// every middle literal of both, and the longer end matches both, since each has a `*` to
    /// absorb what the other adds.
    pub fn overlaps(&self, other: &ToolPattern) -> bool {
        match (self, other) {
            (ToolPattern::Exact(a), b) | (b, ToolPattern::Exact(a)) => b.matches(a),
            (ToolPattern::Glob(a), ToolPattern::Glob(b)) => {
                let start = |g: &str| g.split('*').next().unwrap_or("").to_string();
                let end = |g: &str| g.rsplit('*').next().unwrap_or("").to_string();
                let agree = |x: &str, y: &str, f: fn(&str, &str) -> bool| f(x, y) || f(y, x);
                agree(&start(a), &start(b), |x, y| x.starts_with(y))
                    && agree(&end(a), &end(b), |x, y| x.ends_with(y))
            }
        }
    }
}

impl fmt::Display for ToolPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Iterative `*` matcher (no backtracking blow-up: O(len(p) * len(s)) worst case).
fn glob_match(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0usize, 0usize);
    let mut star: Option<usize> = None;
    let mut mark = 0usize;
    while si < s.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            pi += 1;
            mark = si;
        } else if pi < p.len() && p[pi] == s[si] {
            pi += 1;
            si += 1;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

/// Does glob `wide` match every string glob `narrow` matches? Treat `narrow`'s `*` as a literal
/// character that only a `*` in `wide` may absorb: matching `narrow`'s text against `wide` where a
/// `*` in narrow must fall inside a `*` of wide. Implemented by matching with `*` in narrow only
/// consumable by a star in wide.
fn glob_covers(wide: &[u8], narrow: &[u8]) -> bool {
    // Dynamic programming over (wide index, narrow index).
    let (w, n) = (wide.len(), narrow.len());
    let mut dp = vec![vec![false; n + 1]; w + 1];
    dp[0][0] = true;
    for i in 1..=w {
        if wide[i - 1] == b'*' {
            dp[i][0] = dp[i - 1][0];
        }
    }
    for i in 1..=w {
        for j in 1..=n {
            dp[i][j] = if wide[i - 1] == b'*' {
                dp[i - 1][j] || dp[i][j - 1]
            } else {
                narrow[j - 1] != b'*' && wide[i - 1] == narrow[j - 1] && dp[i - 1][j - 1]
            };
        }
    }
    dp[w][n]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> ToolPattern {
        ToolPattern::parse(s).unwrap()
    }

    #[test]
    fn exact_is_case_sensitive_and_literal() {
        assert!(p("get_issue").matches("get_issue"));
        assert!(!p("get_issue").matches("Get_issue"));
        assert!(!p("get_issue").matches("get_issue "));
    }

    #[test]
    fn glob_matches_only_the_charset() {
        assert!(p("read_*").matches("read_wiki"));
        assert!(p("*").matches("anything.goes-here_1"));
        assert!(!p("*").matches(""));
        assert!(!p("*").matches("a b"));
        assert!(!p("read_*").matches("read_\u{0}x"));
        assert!(!p("read_*").matches("read_wikı"));
        assert!(!p("*").matches(&"a".repeat(129)));
        assert!(p("*").matches(&"a".repeat(128)));
        assert!(p("a*b*c").matches("aXXbYYc"));
        assert!(!p("a*b*c").matches("aXXbYY"));
    }

    #[test]
    fn bad_patterns_are_refused() {
        assert_eq!(ToolPattern::parse(""), Err(PatternError::Empty));
        assert!(matches!(
            ToolPattern::parse("read *"),
            Err(PatternError::GlobCharset(_))
        ));
        assert!(matches!(
            ToolPattern::parse("a\nb"),
            Err(PatternError::Control(_))
        ));
        for glob_like in ["a[b]", "get_?", "{a,b}"] {
            assert!(
                matches!(
                    ToolPattern::parse(glob_like),
                    Err(PatternError::GlobLike(_))
                ),
                "{glob_like}"
            );
        }
        // Other characters outside the charset are matched literally, as some servers name tools.
        assert!(ToolPattern::parse("team/get issue").is_ok());
    }

    #[test]
    fn overlap_finds_a_shared_name() {
        for (a, b, want) in [
            ("update_*", "update_issue", true),
            ("update_*", "get_issue", false),
            ("update_*", "*_issue", true),
            ("update_*", "*", true),
            ("get_*_x", "get_y_*", true),
            ("a*b", "c*", false),
            ("a*b", "*c", false),
            ("ab*", "a*", true),
            ("*ab", "*b", true),
            ("x", "x", true),
            ("x", "y", false),
            ("get_issue", "get_issues", false),
            ("get_*", "list_*", false),
            ("a*b", "ab*", true),
            ("a*z", "ab*yz", true),
            ("a*z", "b*z", false),
            ("x y", "*", false),
        ] {
            assert_eq!(p(a).overlaps(&p(b)), want, "{a} vs {b}");
            assert_eq!(p(b).overlaps(&p(a)), want, "{b} vs {a}");
        }
    }

    #[test]
    fn coverage_tells_narrowing_from_widening() {
        assert!(p("get_issue").is_covered_by(&p("get_*")));
        assert!(p("get_i*").is_covered_by(&p("get_*")));
        assert!(!p("get_*").is_covered_by(&p("get_i*")));
        assert!(!p("*").is_covered_by(&p("get_*")));
        assert!(p("get_*").is_covered_by(&p("*")));
        assert!(!p("get_*").is_covered_by(&p("get_issue")));
        assert!(p("a*").is_covered_by(&p("a*")));
    }
}
