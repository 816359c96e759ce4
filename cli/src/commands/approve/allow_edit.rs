//! Adding one tool name to one server's `tools.allow` in a policy file's text, every other byte
//! kept: comments, blank lines, quoting, indentation and line endings. It extends
//! [`crate::commands::mcp::yaml_edit`] (which finds the server's entry by indentation) one level
//! down: the entry's `tools:` key, its `allow:` key, and the list there, in either style:
//!
//! - block (`- a` lines, at the key's indentation or deeper): a new `- TOOL` line after the last
//!   item, at the items' indentation and with their spacing after the dash;
//! - flow (`allow: [a, b]`, possibly over several lines, with comments): `, TOOL` after the last
//!   item; when items stand one per line and `]` has a line of its own, a new line in their
//!   indentation instead (with the comma moved or kept as the items have it); `[]` becomes
//!   `[TOOL]`.
//!
//! The name is written plain when YAML can read it only as that string, else double-quoted
//! ([`crate::commands::mcp::entry::scalar`]): `yes`, `1.5` or `a: b` stay strings. Shapes it does
//! not edit are refused with a message saying so: an entry, `tools` or `allow` in flow-mapping
//! style, a list holding anything but scalars, a tab anywhere in the entry, a missing `tools` or
//! `allow`. Like every fenzi edit, the result is a proposal: the caller re-reads it with the policy
//! loader and checks that exactly this one name was added before anything is written.

use crate::commands::mcp::entry::scalar;
use crate::commands::mcp::yaml_edit::{self, EditError, key_of};

/// Why the name could not be added.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ListEditError {
    #[error(transparent)]
    Section(#[from] EditError),
    #[error("there is no server `{server}` in {file}")]
    NoServer { server: String, file: String },
    #[error(
        "server `{server}` in {file} has no `tools:` (every url or account server has \
         `tools.allow`)"
    )]
    NoTools { server: String, file: String },
    #[error(
        "server `{server}` in {file} has no `tools.allow` (every url or account server has one: \
         write `allow: []` under its `tools:`)"
    )]
    NoAllow { server: String, file: String },
    #[error("{file} line {line}: {problem}; fenzi cannot edit it safely, edit it by hand")]
    Shape {
        file: String,
        line: usize,
        problem: &'static str,
    },
}

/// One line of the text: with its terminator, and without.
struct Line<'a> {
    full: &'a str,
    body: &'a str,
}

impl Line<'_> {
    fn indent(&self) -> usize {
        self.body.len() - self.body.trim_start_matches(' ').len()
    }

    /// A line with something on it other than a comment.
    fn is_content(&self) -> bool {
        let t = self.body.trim_start_matches(' ');
        !t.is_empty() && !t.starts_with('#')
    }

    fn terminator(&self) -> &str {
        &self.full[self.body.len()..]
    }
}

/// What follows a key's colon, without a trailing comment or surrounding spaces.
fn value_of(after: &str) -> &str {
    let mut prev_space = true;
    for (i, c) in after.char_indices() {
        if c == '#' && prev_space {
            return after[..i].trim();
        }
        prev_space = c == ' ';
    }
    after.trim()
}

struct Edit<'a> {
    file: &'a str,
    lines: Vec<Line<'a>>,
    /// The file's own line ending, for a line added after one that has none.
    newline: &'static str,
}

impl<'a> Edit<'a> {
    fn shape(&self, line: usize, problem: &'static str) -> ListEditError {
        ListEditError::Shape {
            file: self.file.to_string(),
            line: line + 1,
            problem,
        }
    }

    /// The `key:` lines in `from..=to` whose indentation is exactly `indent`, as (index, key,
    /// what follows the colon).
    fn keys_at(&self, from: usize, to: usize, indent: usize) -> Vec<(usize, String, &'a str)> {
        let mut out = Vec::new();
        for i in from..=to {
            let l = &self.lines[i];
            let rest = &l.body[l.indent()..];
            let item = rest == "-" || rest.starts_with("- ");
            // Lines that are not keys (a flow list's `]` on a line of its own) are not keys.
            if l.is_content()
                && l.indent() == indent
                && !item
                && let Some((key, after)) = key_of(&l.body[indent..])
            {
                out.push((i, key, after));
            }
        }
        out
    }

    /// The last line of the block under the key at line `key` (indented `indent`), within `end`:
    /// every following line indented deeper, up to the last content line among them.
    fn block_end(&self, key: usize, indent: usize, end: usize) -> usize {
        let mut last = key;
        for i in key + 1..=end {
            let l = &self.lines[i];
            if l.is_content() {
                if l.indent() <= indent {
                    break;
                }
                last = i;
            }
        }
        last
    }

    /// The first content line after `key` up to `end`, and its indentation.
    fn first_content(&self, key: usize, end: usize) -> Option<(usize, usize)> {
        (key + 1..=end)
            .find(|&i| self.lines[i].is_content())
            .map(|i| (i, self.lines[i].indent()))
    }

    /// The line ending to put after line `i` when a line is added below it.
    fn newline_after(&self, i: usize) -> &str {
        match self.lines[i].terminator() {
            "" => self.newline,
            t => t,
        }
    }
}

/// `text` with `tool` added at the end of server `server`'s `tools.allow`.
pub fn add_allowed(
    text: &str,
    file: &str,
    server: &str,
    tool: &str,
) -> Result<String, ListEditError> {
    let Some((key, end)) = yaml_edit::entry_span(text, file, server)? else {
        return Err(ListEditError::NoServer {
            server: server.to_string(),
            file: file.to_string(),
        });
    };
    let lines: Vec<Line> = text
        .split_inclusive('\n')
        .map(|full| {
            let body = full.strip_suffix('\n').unwrap_or(full);
            Line {
                full,
                body: body.strip_suffix('\r').unwrap_or(body),
            }
        })
        .collect();
    let newline = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let ed = Edit {
        file,
        lines,
        newline,
    };
    if let Some(i) = (key..=end).find(|&i| ed.lines[i].body.contains('\t')) {
        return Err(ed.shape(i, "a tab in the server's entry"));
    }
    let entry_indent = ed.lines[key].indent();
    let (_, after) = key_of(&ed.lines[key].body[entry_indent..])
        .ok_or_else(|| ed.shape(key, "unreadable key"))?;
    if !value_of(after).is_empty() {
        return Err(ed.shape(key, "the server's entry is written in flow style (`{...}`)"));
    }
    let no_tools = || ListEditError::NoTools {
        server: server.to_string(),
        file: file.to_string(),
    };
    let (_, body_indent) = ed.first_content(key, end).ok_or_else(no_tools)?;
    let (tools, _, tools_after) = ed
        .keys_at(key + 1, end, body_indent)
        .into_iter()
        .find(|(_, k, _)| k == "tools")
        .ok_or_else(no_tools)?;
    if !value_of(tools_after).is_empty() {
        return Err(ed.shape(tools, "`tools` is written in flow style (`{...}`)"));
    }
    let no_allow = || ListEditError::NoAllow {
        server: server.to_string(),
        file: file.to_string(),
    };
    let tools_end = ed.block_end(tools, body_indent, end);
    let (_, child_indent) = ed.first_content(tools, tools_end).ok_or_else(no_allow)?;
    let (allow, _, allow_after) = ed
        .keys_at(tools + 1, tools_end, child_indent)
        .into_iter()
        .find(|(_, k, _)| k == "allow")
        .ok_or_else(no_allow)?;
    let value = value_of(allow_after);
    if value.is_empty() {
        block(&ed, allow, child_indent, tools_end, tool)
    } else if value.starts_with('[') {
        let at = ed.lines[allow].body.len() - allow_after.trim_start_matches(' ').len();
        flow(&ed, allow, at, tool)
    } else {
        Err(ed.shape(allow, "`allow` is not a list"))
    }
}

/// The text with each `(line, from, to, text)` applied: bytes `from..to` of that line replaced by
/// `text` (edits of one line in order, not overlapping).
fn splice(ed: &Edit, edits: &[(usize, usize, usize, &str)]) -> String {
    let mut out = String::new();
    for (i, l) in ed.lines.iter().enumerate() {
        let mut done = 0;
        for (_, from, to, text) in edits.iter().filter(|e| e.0 == i) {
            out.push_str(&l.full[done..*from]);
            out.push_str(text);
            done = *to;
        }
        out.push_str(&l.full[done..]);
    }
    out
}

/// A block list under `allow:` at line `allow` (indented `key_indent`): a new item line after the
/// last one.
fn block(
    ed: &Edit,
    allow: usize,
    key_indent: usize,
    end: usize,
    tool: &str,
) -> Result<String, ListEditError> {
    let is_item = |body: &str| {
        let t = body.trim_start_matches(' ');
        t == "-" || t.starts_with("- ")
    };
    let Some((first, seq_indent)) = ed.first_content(allow, end) else {
        return Err(ed.shape(allow, "`allow` has no value"));
    };
    if seq_indent < key_indent || !is_item(ed.lines[first].body) {
        return Err(ed.shape(allow, "`allow` has no value"));
    }
    let mut last_item = first;
    let mut last = first;
    for i in first + 1..=end {
        let l = &ed.lines[i];
        if !l.is_content() {
            continue;
        }
        let n = l.indent();
        if n > seq_indent {
            last = i;
        } else if n == seq_indent && is_item(l.body) {
            last_item = i;
            last = i;
        } else {
            break;
        }
    }
    // Every item one scalar on its own line: the shape fenzi writes the new one in.
    for i in first..=last {
        let l = &ed.lines[i];
        if l.is_content() && l.indent() > seq_indent {
            return Err(ed.shape(i, "an `allow` item spans lines"));
        }
        if l.is_content() {
            let v = value_of(&l.body[seq_indent + 1..]);
            if v.starts_with(['[', '{', '-', '&', '*', '!', '|', '>']) || key_of(v).is_some() {
                return Err(ed.shape(i, "an `allow` item is not a plain or quoted name"));
            }
        }
    }
    let item = &ed.lines[last_item].body[seq_indent + 1..];
    let gap = item.len() - item.trim_start_matches(' ').len();
    let nl = ed.newline_after(last);
    let mut new_line = String::new();
    if ed.lines[last].terminator().is_empty() {
        new_line.push_str(nl);
    }
    new_line.push_str(&" ".repeat(seq_indent));
    new_line.push('-');
    new_line.push_str(&" ".repeat(gap.max(1)));
    new_line.push_str(&scalar(tool, false));
    if !ed.lines[last].terminator().is_empty() {
        new_line.push_str(nl);
    }
    let at = ed.lines[last].full.len();
    Ok(splice(ed, &[(last, at, at, &new_line)]))
}

/// A position in the text: line index and byte offset in its body.
type Pos = (usize, usize);

/// What the scan of a flow list found.
struct Flow {
    open: Pos,
    close: Pos,
    /// Start and end (exclusive) of the last item, and whether a comma follows it.
    last: Option<(Pos, Pos, bool)>,
}

/// Reads the flow list whose `[` is at byte `at` of line `line`: items are plain or quoted
/// scalars; comments (`#` after a space or at a line's start) run to the end of their line.
fn scan_flow(ed: &Edit, line: usize, at: usize) -> Result<Flow, ListEditError> {
    let open = (line, at);
    let mut last: Option<(Pos, Pos, bool)> = None;
    // The item being read: its start and its end so far (trailing spaces excluded).
    let mut item: Option<(Pos, Pos)> = None;
    let mut i = line;
    let mut j = at + 1;
    loop {
        let Some(l) = ed.lines.get(i) else {
            return Err(ed.shape(line, "`allow`'s `[` is never closed"));
        };
        let b = l.body.as_bytes();
        if j >= b.len() {
            i += 1;
            j = 0;
            continue;
        }
        match b[j] {
            b' ' => j += 1,
            b'#' if j == 0 || b[j - 1] == b' ' => j = b.len(),
            b',' => {
                let Some((s, e)) = item.take() else {
                    return Err(ed.shape(i, "an empty item in `allow`"));
                };
                last = Some((s, e, true));
                j += 1;
            }
            b']' => {
                if let Some((s, e)) = item.take() {
                    last = Some((s, e, false));
                }
                let rest = &l.body[j + 1..];
                if !value_of(rest).is_empty() {
                    return Err(ed.shape(i, "text after `allow`'s `]`"));
                }
                return Ok(Flow {
                    open,
                    close: (i, j),
                    last,
                });
            }
            b'[' | b'{' | b'&' | b'*' | b'!' => {
                return Err(ed.shape(i, "an `allow` item is not a plain or quoted name"));
            }
            q @ (b'"' | b'\'') => {
                if item.is_some() {
                    return Err(ed.shape(i, "a quote inside an `allow` item"));
                }
                let start = (i, j);
                let mut k = j + 1;
                loop {
                    if k >= b.len() {
                        // Quoted names over several lines are not something fenzi writes.
                        return Err(ed.shape(i, "a quoted `allow` item spans lines"));
                    }
                    if q == b'"' && b[k] == b'\\' {
                        k += 2;
                        continue;
                    }
                    if b[k] == q {
                        if q == b'\'' && b.get(k + 1) == Some(&b'\'') {
                            k += 2;
                            continue;
                        }
                        break;
                    }
                    k += 1;
                }
                item = Some((start, (i, k + 1)));
                j = k + 1;
            }
            _ => {
                // A plain scalar: up to `,`, `]`, or ` #`; it may not continue on another line.
                let start = match item {
                    Some((s, e)) if e.0 == i => s,
                    Some(_) => return Err(ed.shape(i, "an `allow` item spans lines")),
                    None => (i, j),
                };
                let mut k = j;
                while k < b.len() && !matches!(b[k], b',' | b']' | b' ') {
                    // `a: b` in a flow list is a mapping, not a name.
                    if b[k] == b':' && matches!(b.get(k + 1), None | Some(b' ' | b',' | b']')) {
                        return Err(ed.shape(i, "an `allow` item is not a plain or quoted name"));
                    }
                    k += 1;
                }
                item = Some((start, (i, k)));
                j = k;
            }
        }
    }
}

/// A flow list under `allow:` whose `[` is at byte `at` of line `allow`.
fn flow(ed: &Edit, allow: usize, at: usize, tool: &str) -> Result<String, ListEditError> {
    let f = scan_flow(ed, allow, at)?;
    let name = scalar(tool, true);
    let Some((start, end, comma)) = f.last else {
        // `[]` (or `[ ]`) becomes `[TOOL]`; with anything between (a comment, a line break) the
        // name goes right after `[`.
        let (line, open) = f.open;
        let blank = f.close.0 == line
            && ed.lines[line].body[open + 1..f.close.1]
                .bytes()
                .all(|b| b == b' ');
        let to = if blank { f.close.1 } else { open + 1 };
        return Ok(splice(ed, &[(line, open + 1, to, &name)]));
    };
    let own_line = start.0 != f.open.0
        && ed.lines[start.0].body[..start.1].bytes().all(|b| b == b' ')
        && f.close.0 > end.0;
    if !own_line {
        let text = format!(", {name}");
        return Ok(splice(ed, &[(end.0, end.1, end.1, &text)]));
    }
    // One item per line: a new line below the last item's line, indented like it, with a comma
    // after it when the items have one (else the comma goes after the old last item).
    let indent = " ".repeat(start.1);
    let nl = ed.newline_after(end.0);
    let at_eol = ed.lines[end.0].full.len();
    if comma {
        let line = format!("{indent}{name},{nl}");
        Ok(splice(ed, &[(end.0, at_eol, at_eol, &line)]))
    } else {
        let line = format!("{indent}{name}{nl}");
        Ok(splice(
            ed,
            &[(end.0, end.1, end.1, ","), (end.0, at_eol, at_eol, &line)],
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(text: &str, tool: &str) -> Result<String, ListEditError> {
        add_allowed(text, "f.yaml", "s", tool)
    }

    const HEAD: &str = "version: 1\nmcp:\n  s:\n    url: https://x.example/mcp\n    tools:\n";

    fn with(tools: &str) -> String {
        format!("{HEAD}{tools}")
    }

    #[test]
    fn flow_lists_on_one_line() {
        for (allow, want) in [
            ("      allow: [a, b]\n", "      allow: [a, b, new]\n"),
            ("      allow: [a,b]\n", "      allow: [a,b, new]\n"),
            (
                "      allow: [ a, b ]  # two\n",
                "      allow: [ a, b, new ]  # two\n",
            ),
            (
                "      allow: [a, \"b c\", 'd''e']\n",
                "      allow: [a, \"b c\", 'd''e', new]\n",
            ),
            ("      allow: [a, b,]\n", "      allow: [a, b, new,]\n"),
            ("      allow: []\n", "      allow: [new]\n"),
            (
                "      allow: [ ]  # none yet\n",
                "      allow: [new]  # none yet\n",
            ),
            ("      allow: [a]", "      allow: [a, new]"),
        ] {
            assert_eq!(add(&with(allow), "new").unwrap(), with(want), "{allow:?}");
        }
        // Keys after it, a deny list, comments around: only the one spot changes.
        let text = with(
            "      # what agents may call\n      allow: [a] # one\n      deny: [x]\n    pin: false\n  t:\n    url: https://y.example/mcp\n    tools:\n      allow: [a]\n",
        );
        let want = with(
            "      # what agents may call\n      allow: [a, new] # one\n      deny: [x]\n    pin: false\n  t:\n    url: https://y.example/mcp\n    tools:\n      allow: [a]\n",
        );
        assert_eq!(add(&text, "new").unwrap(), want);
    }

    #[test]
    fn flow_lists_over_lines_with_comments() {
        let text = with("      allow: [\n        a,   # first\n        b,   # second\n      ]\n");
        assert_eq!(
            add(&text, "new").unwrap(),
            with(
                "      allow: [\n        a,   # first\n        b,   # second\n        new,\n      ]\n"
            )
        );
        let text = with("      allow: [\n        a,\n        b  # last, no comma\n      ]\n");
        assert_eq!(
            add(&text, "new").unwrap(),
            with(
                "      allow: [\n        a,\n        b,  # last, no comma\n        new\n      ]\n"
            )
        );
        // Items sharing lines, or `]` on the last item's line: the name goes inline.
        let text = with("      allow: [a, b,\n               c]\n");
        assert_eq!(
            add(&text, "new").unwrap(),
            with("      allow: [a, b,\n               c, new]\n")
        );
        let text = with("      allow: [  # none yet\n      ]\n");
        assert_eq!(
            add(&text, "new").unwrap(),
            with("      allow: [new  # none yet\n      ]\n")
        );
        // A `#` inside a quoted name or a plain one is not a comment.
        let text = with("      allow: [\"a #b\", c#d]\n");
        assert_eq!(
            add(&text, "new").unwrap(),
            with("      allow: [\"a #b\", c#d, new]\n")
        );
    }

    #[test]
    fn block_lists() {
        for (allow, want) in [
            (
                "      allow:\n        - a\n        - b\n",
                "      allow:\n        - a\n        - b\n        - new\n",
            ),
            // The dash at the key's own indentation, as YAML allows.
            (
                "      allow:\n      - a\n      deny: [x]\n",
                "      allow:\n      - a\n      - new\n      deny: [x]\n",
            ),
            // Comments before, after and between items; the spacing after the dash kept.
            (
                "      allow:   # tools\n        # reading\n        -   a  # one\n\n        # - b (off)\n      deny: [x]\n",
                "      allow:   # tools\n        # reading\n        -   a  # one\n        -   new\n\n        # - b (off)\n      deny: [x]\n",
            ),
            (
                "      allow:\n        - a",
                "      allow:\n        - a\n        - new",
            ),
        ] {
            assert_eq!(add(&with(allow), "new").unwrap(), with(want), "{allow:?}");
        }
    }

    #[test]
    fn crlf_is_kept() {
        let text = with("      allow: [a]\n").replace('\n', "\r\n");
        assert_eq!(
            add(&text, "new").unwrap(),
            with("      allow: [a, new]\n").replace('\n', "\r\n")
        );
        let text = with("      allow:\n        - a\n").replace('\n', "\r\n");
        assert_eq!(
            add(&text, "new").unwrap(),
            with("      allow:\n        - a\n        - new\n").replace('\n', "\r\n")
        );
        let text = with("      allow: [\n        a,\n      ]\n").replace('\n', "\r\n");
        assert_eq!(
            add(&text, "new").unwrap(),
            with("      allow: [\n        a,\n        new,\n      ]\n").replace('\n', "\r\n")
        );
    }

    #[test]
    fn names_yaml_would_read_otherwise_are_quoted() {
        for (tool, flow, block) in [
            ("yes", "\"yes\"", "\"yes\""),
            ("1.5", "\"1.5\"", "\"1.5\""),
            ("a: b", "\"a: b\"", "\"a: b\""),
            ("null", "\"null\"", "\"null\""),
            ("a,b", "\"a,b\"", "\"a,b\""),
            ("get_issue", "get_issue", "get_issue"),
        ] {
            assert_eq!(
                add(&with("      allow: [a]\n"), tool).unwrap(),
                with(&format!("      allow: [a, {flow}]\n")),
                "{tool}"
            );
            assert_eq!(
                add(&with("      allow:\n        - a\n"), tool).unwrap(),
                with(&format!("      allow:\n        - a\n        - {block}\n")),
                "{tool}"
            );
        }
    }

    #[test]
    fn shapes_it_does_not_edit_are_refused() {
        let shape = |text: &str| match add(text, "new") {
            Err(ListEditError::Shape { problem, .. }) => problem,
            other => panic!("{text:?}: {other:?}"),
        };
        assert_eq!(
            shape(&with("      allow: [a,\tb]\n")),
            "a tab in the server's entry"
        );
        assert_eq!(
            shape(&with("      allow: {a: 1}\n")),
            "`allow` is not a list"
        );
        assert_eq!(shape(&with("      allow: a\n")), "`allow` is not a list");
        assert_eq!(
            shape(&with("      allow: [[a]]\n")),
            "an `allow` item is not a plain or quoted name"
        );
        assert_eq!(
            shape(&with("      allow: [a\n")),
            "`allow`'s `[` is never closed"
        );
        assert_eq!(
            shape(&with("      allow: [a] b\n")),
            "text after `allow`'s `]`"
        );
        assert_eq!(
            shape(&with("      allow:\n      deny: [x]\n")),
            "`allow` has no value"
        );
        assert_eq!(
            shape(&with("      allow:\n        - {a: 1}\n")),
            "an `allow` item is not a plain or quoted name"
        );
        assert_eq!(
            shape("version: 1\nmcp:\n  s: {url: x, tools: {allow: [a]}}\n"),
            "the server's entry is written in flow style (`{...}`)"
        );
        assert_eq!(
            shape(&format!("{} {{allow: [a]}}\n", HEAD.trim_end())),
            "`tools` is written in flow style (`{...}`)"
        );
        // A tab in the `mcp:` section's indentation: refused by the section reader.
        assert!(matches!(
            add("version: 1\nmcp:\n\ts:\n", "new"),
            Err(ListEditError::Section(EditError::Shape { .. }))
        ));
    }

    #[test]
    fn a_missing_server_tools_or_allow_is_named() {
        assert!(matches!(
            add(&with("      allow: [a]\n").replace("  s:", "  t:"), "new"),
            Err(ListEditError::NoServer { .. })
        ));
        assert!(matches!(
            add(
                "version: 1\nmcp:\n  s:\n    url: https://x.example/mcp\n",
                "new"
            ),
            Err(ListEditError::NoTools { .. })
        ));
        let e = add(&with("      deny: [a]\n"), "new").unwrap_err();
        assert!(matches!(e, ListEditError::NoAllow { .. }));
        assert!(
            e.to_string()
                .contains("every url or account server has one"),
            "{e}"
        );
        // `allow` of another key (resources) does not count.
        let text = "version: 1\nmcp:\n  s:\n    url: https://x.example/mcp\n    resources:\n      allow: [a]\n    tools:\n      deny: [b]\n";
        assert!(matches!(
            add(text, "new"),
            Err(ListEditError::NoAllow { .. })
        ));
    }

    #[test]
    fn only_the_named_server_is_edited() {
        let text = "version: 1\nmcp:\n  t:\n    url: https://y.example/mcp\n    tools:\n      allow: [a]\n  s:\n    url: https://x.example/mcp\n    prompts:\n      allow: [p]\n    tools:\n      allow:\n        - a\n    pin: true\nhosts: []\n";
        assert_eq!(
            add(text, "new").unwrap(),
            "version: 1\nmcp:\n  t:\n    url: https://y.example/mcp\n    tools:\n      allow: [a]\n  s:\n    url: https://x.example/mcp\n    prompts:\n      allow: [p]\n    tools:\n      allow:\n        - a\n        - new\n    pin: true\nhosts: []\n"
        );
    }
}
