//! Text-level edits of the `mcp:` section of a policy file that keep every other byte as it was,
//! comments, blank lines, quoting and line endings included. A YAML library would re-emit the
//! whole file; this finds the section and its entries by indentation instead, the way a person
//! editing the file would, and touches only the lines of the one entry.
//!
//! What counts as an entry's lines: its key line, then every following line that is indented
//! deeper than the key (content or comment), up to the last such line; blank lines and comments
//! at the key's own indentation after it are not part of it. `remove` also takes the entry's
//! *leading comment*: the comment lines directly above the key, at the key's indentation, with no
//! blank line between (`# Linear: token in the keyring`). A comment separated by a blank line, or
//! indented differently, stays.
//!
//! The edit is a proposal: the caller re-reads the result with the policy loader and checks that
//! it means exactly what was asked (the new entry as written, every other entry unchanged) before
//! anything is written. Shapes this module does not edit (a flow-style `mcp: {a: …}`, tabs) are
//! refused with a message saying so.

use super::entry::NewEntry;

/// Why an edit cannot be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EditError {
    #[error("server `{name}` is already in {file} (line {line})")]
    Exists {
        name: String,
        file: String,
        line: usize,
    },
    #[error("there is no server `{name}` in {file}")]
    NotFound { name: String, file: String },
    #[error(
        "the `mcp:` section of {file} is written in flow style (`mcp: {{...}}`); fenzi edits \
         block style only: rewrite it as one entry per line, or edit it by hand"
    )]
    FlowStyle { file: String },
    #[error("{file} line {line}: {problem}; fenzi cannot edit it safely, edit it by hand")]
    Shape {
        file: String,
        line: usize,
        problem: &'static str,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Blank,
    Comment(usize),
    Content(usize),
}

struct Line<'a> {
    /// The line with its terminator.
    full: &'a str,
    kind: Kind,
}

/// One entry of the `mcp:` section, by line index.
#[derive(Debug, Clone)]
struct Entry {
    name: Option<String>,
    /// First leading comment line, or `key`.
    lead: usize,
    key: usize,
    /// Last line of the entry (inclusive).
    end: usize,
}

enum Header {
    /// `mcp:` followed by a block (or nothing yet).
    Block,
    /// `mcp: {}` (or `null`/`~`): an empty section to be turned into a block.
    Empty {
        value_start: usize,
        value_end: usize,
    },
}

struct Section {
    header: usize,
    header_kind: Header,
    /// Index of the first line after the section.
    end: usize,
    /// Indentation of the entry keys (None when there are no entries).
    indent: Option<usize>,
    entries: Vec<Entry>,
}

struct Doc<'a> {
    file: &'a str,
    lines: Vec<Line<'a>>,
    newline: &'static str,
}

fn classify(body: &str) -> Kind {
    let trimmed = body.trim_start_matches(' ');
    let indent = body.len() - trimmed.len();
    if trimmed.trim().is_empty() {
        Kind::Blank
    } else if trimmed.starts_with('#') {
        Kind::Comment(indent)
    } else {
        Kind::Content(indent)
    }
}

fn strip_terminator(full: &str) -> &str {
    full.strip_suffix('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .unwrap_or(full)
}

/// A mapping key at the start of `s` (already without indentation) and what follows its colon.
pub(crate) fn key_of(s: &str) -> Option<(String, &str)> {
    let (name, rest) = if let Some(q) = s.strip_prefix('"') {
        let close = q.find('"')?;
        let name = &q[..close];
        if name.contains('\\') {
            return None;
        }
        (name.to_string(), &q[close + 1..])
    } else if let Some(q) = s.strip_prefix('\'') {
        let close = q.find('\'')?;
        (q[..close].to_string(), &q[close + 1..])
    } else {
        let colon = s.find(':')?;
        (s[..colon].trim_end().to_string(), &s[colon..])
    };
    let rest = rest.trim_start_matches(' ');
    let after = rest.strip_prefix(':')?;
    if after.is_empty() || after.starts_with([' ', '\t', '\r', '\n']) {
        Some((name, after))
    } else {
        None
    }
}

impl<'a> Doc<'a> {
    fn new(text: &'a str, file: &'a str) -> Doc<'a> {
        let lines = text
            .split_inclusive('\n')
            .map(|full| Line {
                full,
                kind: classify(strip_terminator(full)),
            })
            .collect::<Vec<_>>();
        let newline = match text.find('\n') {
            Some(i) if i > 0 && text.as_bytes()[i - 1] == b'\r' => "\r\n",
            _ => "\n",
        };
        Doc {
            file,
            lines,
            newline,
        }
    }

    fn body(&self, i: usize) -> &'a str {
        strip_terminator(self.lines[i].full)
    }

    fn shape(&self, line: usize, problem: &'static str) -> EditError {
        EditError::Shape {
            file: self.file.to_string(),
            line: line + 1,
            problem,
        }
    }

    /// Finds the `mcp:` section, if the file has one.
    fn section(&self) -> Result<Option<Section>, EditError> {
        let mut header = None;
        for (i, l) in self.lines.iter().enumerate() {
            if l.kind != Kind::Content(0) {
                continue;
            }
            let body = self.body(i);
            if body.starts_with('\t') {
                return Err(self.shape(i, "a tab in the indentation"));
            }
            if let Some((name, _)) = key_of(body)
                && name == "mcp"
            {
                if header.is_some() {
                    return Err(self.shape(i, "a second `mcp:` key"));
                }
                header = Some(i);
            }
        }
        let Some(h) = header else {
            return Ok(None);
        };
        let (_, after) = key_of(self.body(h)).ok_or_else(|| self.shape(h, "unreadable key"))?;
        let value_offset = self.body(h).len() - after.len();
        let value = strip_comment(after);
        let header_kind = match value.trim() {
            "" => Header::Block,
            "{}" | "null" | "~" => {
                let lead = value.len() - value.trim_start().len();
                Header::Empty {
                    value_start: value_offset + lead,
                    value_end: value_offset + value.trim_end().len(),
                }
            }
            _ => {
                return Err(EditError::FlowStyle {
                    file: self.file.to_string(),
                });
            }
        };
        let end = (h + 1..self.lines.len())
            .find(|&i| self.lines[i].kind == Kind::Content(0))
            .unwrap_or(self.lines.len());
        let mut indent = None;
        let mut keys = Vec::new();
        for i in h + 1..end {
            if self.body(i).starts_with([' ', '\t'])
                && self.body(i).trim_start_matches(' ').starts_with('\t')
            {
                return Err(self.shape(i, "a tab in the indentation"));
            }
            if let Kind::Content(n) = self.lines[i].kind {
                match indent {
                    None => {
                        indent = Some(n);
                        keys.push(i);
                    }
                    Some(k) if n == k => keys.push(i),
                    Some(k) if n < k => {
                        return Err(self.shape(i, "an entry indented less than the first one"));
                    }
                    Some(_) => {}
                }
            }
        }
        if matches!(header_kind, Header::Empty { .. }) && indent.is_some() {
            return Err(EditError::FlowStyle {
                file: self.file.to_string(),
            });
        }
        let entries = match indent {
            None => Vec::new(),
            Some(n) => keys
                .iter()
                .enumerate()
                .map(|(k, &key)| {
                    let limit = keys.get(k + 1).copied().unwrap_or(end);
                    let mut last = key;
                    for i in key + 1..limit {
                        match self.lines[i].kind {
                            Kind::Content(m) | Kind::Comment(m) if m > n => last = i,
                            _ => {}
                        }
                    }
                    let mut lead = key;
                    while lead > h + 1 && self.lines[lead - 1].kind == Kind::Comment(n) {
                        lead -= 1;
                    }
                    Entry {
                        name: key_of(&self.body(key)[n..]).map(|(name, _)| name),
                        lead,
                        key,
                        end: last,
                    }
                })
                .collect(),
        };
        Ok(Some(Section {
            header: h,
            header_kind,
            end,
            indent,
            entries,
        }))
    }

    /// Indentation of entries and the step inside one, from the file (2 and 2 by default).
    fn style(&self, section: &Section) -> (usize, usize) {
        let indent = section.indent.unwrap_or(2);
        let step = section
            .entries
            .iter()
            .find_map(|e| {
                (e.key + 1..=e.end).find_map(|i| match self.lines[i].kind {
                    Kind::Content(m) if m > indent => Some(m - indent),
                    _ => None,
                })
            })
            .unwrap_or(if indent > 0 { indent } else { 2 });
        (indent, step)
    }

    fn join(&self, lines: &[String]) -> String {
        let mut s = String::new();
        for l in lines {
            s.push_str(l);
            s.push_str(self.newline);
        }
        s
    }
}

/// What follows a key's colon, without a trailing comment.
fn strip_comment(after: &str) -> &str {
    let mut prev_space = true;
    for (i, c) in after.char_indices() {
        if c == '#' && prev_space {
            return &after[..i];
        }
        prev_space = c == ' ' || c == '\t';
    }
    after.trim_end_matches(['\r', '\n'])
}

/// The line (1-based) of server `name` in the file, if it is there.
pub fn find(text: &str, file: &str, name: &str) -> Result<Option<usize>, EditError> {
    let doc = Doc::new(text, file);
    Ok(doc.section()?.and_then(|s| {
        s.entries
            .iter()
            .find(|e| e.name.as_deref() == Some(name))
            .map(|e| e.key + 1)
    }))
}

/// The lines (0-based, first and last inclusive) of server `name`'s entry: its key line and every
/// line of its body; `None` when the file has no such server. `fenzi approve` edits inside them.
pub(crate) fn entry_span(
    text: &str,
    file: &str,
    name: &str,
) -> Result<Option<(usize, usize)>, EditError> {
    let doc = Doc::new(text, file);
    Ok(doc.section()?.and_then(|s| {
        s.entries
            .iter()
            .find(|e| e.name.as_deref() == Some(name))
            .map(|e| (e.key, e.end))
    }))
}

/// The text with `entry` added at the end of the `mcp:` section (created if missing).
pub fn add(text: &str, file: &str, entry: &NewEntry) -> Result<String, EditError> {
    let doc = Doc::new(text, file);
    let Some(section) = doc.section()? else {
        // No section: append one at the end of the file.
        let mut out = text.to_string();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push_str(doc.newline);
        }
        let mut lines = vec!["mcp:".to_string()];
        lines.extend(entry.lines(2, 2));
        out.push_str(&doc.join(&lines));
        return Ok(out);
    };
    if let Some(e) = section
        .entries
        .iter()
        .find(|e| e.name.as_deref() == Some(entry.name.as_str()))
    {
        return Err(EditError::Exists {
            name: entry.name.clone(),
            file: file.to_string(),
            line: e.key + 1,
        });
    }
    let (indent, step) = doc.style(&section);
    let new_lines = doc.join(&entry.lines(indent, step));

    let mut out = String::with_capacity(text.len() + new_lines.len() + 8);
    match (&section.header_kind, section.entries.last()) {
        (
            Header::Empty {
                value_start,
                value_end,
            },
            _,
        ) => {
            // `mcp: {}  # note` -> `mcp:  # note`, then the entry under it.
            for (i, l) in doc.lines.iter().enumerate() {
                if i == section.header {
                    // Drop the value and the spaces before it; keep what follows (a comment).
                    let full = l.full;
                    let start = full[..*value_start].trim_end_matches(' ').len();
                    out.push_str(&full[..start]);
                    out.push_str(&full[*value_end..]);
                    if !full.ends_with('\n') {
                        out.push_str(doc.newline);
                    }
                    out.push_str(&new_lines);
                } else {
                    out.push_str(l.full);
                }
            }
        }
        (Header::Block, last) => {
            let after = last.map(|e| e.end).unwrap_or(section.header);
            let separated = section
                .entries
                .iter()
                .skip(1)
                .any(|e| e.lead > 0 && doc.lines[e.lead - 1].kind == Kind::Blank);
            for (i, l) in doc.lines.iter().enumerate() {
                out.push_str(l.full);
                if i == after {
                    if !l.full.ends_with('\n') {
                        out.push_str(doc.newline);
                    }
                    if separated && last.is_some() {
                        out.push_str(doc.newline);
                    }
                    out.push_str(&new_lines);
                }
            }
        }
    }
    Ok(out)
}

/// The text with the lines of server `entry.name` replaced by `entry` (leading comments kept).
pub fn replace(text: &str, file: &str, entry: &NewEntry) -> Result<String, EditError> {
    let doc = Doc::new(text, file);
    let section = doc.section()?;
    let found = section.as_ref().and_then(|s| {
        s.entries
            .iter()
            .find(|e| e.name.as_deref() == Some(entry.name.as_str()))
    });
    let (Some(section), Some(e)) = (section.as_ref(), found) else {
        return Err(EditError::NotFound {
            name: entry.name.clone(),
            file: file.to_string(),
        });
    };
    let (indent, step) = doc.style(section);
    let mut out = String::with_capacity(text.len());
    for (i, l) in doc.lines.iter().enumerate() {
        if i == e.key {
            out.push_str(&doc.join(&entry.lines(indent, step)));
        } else if i > e.key && i <= e.end {
            continue;
        } else {
            out.push_str(l.full);
        }
    }
    if !text.ends_with('\n') && e.end + 1 == doc.lines.len() {
        // The file had no final newline; keep it that way.
        let trimmed = out.trim_end_matches(['\r', '\n']).len();
        out.truncate(trimmed);
    }
    Ok(out)
}

/// The text without server `name`'s lines and its leading comment. When it was the last entry,
/// the section becomes `mcp: {}` (an empty `mcp:` would be a null value, which the loader
/// refuses).
pub fn remove(text: &str, file: &str, name: &str) -> Result<String, EditError> {
    let doc = Doc::new(text, file);
    let section = doc.section()?;
    let found = section
        .as_ref()
        .and_then(|s| s.entries.iter().find(|e| e.name.as_deref() == Some(name)));
    let (Some(section), Some(e)) = (section.as_ref(), found) else {
        return Err(EditError::NotFound {
            name: name.to_string(),
            file: file.to_string(),
        });
    };
    let mut drop_to = e.end;
    // One blank line goes with the entry when it sat between blank lines (or right under the
    // header), so entries separated by blank lines stay separated by one.
    let before_blank = e.lead == section.header + 1 || doc.lines[e.lead - 1].kind == Kind::Blank;
    if before_blank && drop_to + 1 < section.end && doc.lines[drop_to + 1].kind == Kind::Blank {
        drop_to += 1;
    }
    let last_entry = section.entries.len() == 1;
    let mut out = String::with_capacity(text.len());
    for (i, l) in doc.lines.iter().enumerate() {
        if i >= e.lead && i <= drop_to {
            continue;
        }
        if i == section.header && last_entry {
            // `mcp:` (maybe with a comment) -> `mcp: {}`.
            let body = strip_terminator(l.full);
            let (_, after) = key_of(body).ok_or_else(|| doc.shape(i, "unreadable key"))?;
            let colon_end = body.len() - after.len();
            out.push_str(&body[..colon_end]);
            out.push_str(" {}");
            out.push_str(&l.full[colon_end..]);
            continue;
        }
        out.push_str(l.full);
    }
    if !text.ends_with('\n') && drop_to + 1 == doc.lines.len() {
        let trimmed = out.trim_end_matches(['\r', '\n']).len();
        out.truncate(trimmed);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::mcp::entry::Body;

    fn local(name: &str) -> NewEntry {
        NewEntry {
            name: name.into(),
            body: Body::Local {
                command: vec!["srv".into()],
                secrets: vec![],
                hosts: vec![],
                run_host: false,
                allow: vec!["x".into()],
                deny: vec![],
            },
        }
    }

    #[test]
    fn keys_are_read_plain_and_quoted() {
        assert_eq!(key_of("mcp:").unwrap().0, "mcp");
        assert_eq!(key_of("mcp: # c").unwrap().0, "mcp");
        assert_eq!(key_of("\"a.b\": x").unwrap().0, "a.b");
        assert_eq!(key_of("'a': x").unwrap().0, "a");
        assert!(key_of("url: https://x").is_some());
        assert!(key_of("https://x").is_none());
    }

    #[test]
    fn adds_under_existing_entries_in_their_style() {
        let text = "version: 1\nmcp:\n    a:\n        command: [x]\n# tail\nhosts: []\n";
        let out = add(text, "f", &local("b")).unwrap();
        assert_eq!(
            out,
            "version: 1\nmcp:\n    a:\n        command: [x]\n    b:\n        command: [srv]\n        tools:\n            allow: [x]\n# tail\nhosts: []\n"
        );
    }

    #[test]
    fn creates_the_section_and_fills_an_empty_one() {
        let out = add("version: 1", "f", &local("b")).unwrap();
        assert_eq!(
            out,
            "version: 1\nmcp:\n  b:\n    command: [srv]\n    tools:\n      allow: [x]\n"
        );
        let out = add("version: 1\nmcp: {}  # none yet\n", "f", &local("b")).unwrap();
        assert_eq!(
            out,
            "version: 1\nmcp:  # none yet\n  b:\n    command: [srv]\n    tools:\n      allow: [x]\n"
        );
        let out = add("version: 1\nmcp: {}\n", "f", &local("b")).unwrap();
        assert_eq!(
            out,
            "version: 1\nmcp:\n  b:\n    command: [srv]\n    tools:\n      allow: [x]\n"
        );
    }

    #[test]
    fn keeps_crlf() {
        let out = add(
            "version: 1\r\nmcp:\r\n  a:\r\n    command: [x]\r\n",
            "f",
            &local("b"),
        )
        .unwrap();
        assert_eq!(
            out,
            "version: 1\r\nmcp:\r\n  a:\r\n    command: [x]\r\n  b:\r\n    command: [srv]\r\n    tools:\r\n      allow: [x]\r\n"
        );
    }

    #[test]
    fn refuses_flow_sections_and_duplicates() {
        assert!(matches!(
            add("version: 1\nmcp: {a: {command: [x]}}\n", "f", &local("b")),
            Err(EditError::FlowStyle { .. })
        ));
        assert!(matches!(
            add(
                "version: 1\nmcp:\n  b:\n    command: [x]\n",
                "f",
                &local("b")
            ),
            Err(EditError::Exists { line: 3, .. })
        ));
    }

    #[test]
    fn removes_entry_with_its_leading_comment_only() {
        let text = "mcp:\n  # about a\n  a:\n    command: [x]\n    # inside a\n\n  # about b\n  b:\n    command: [y]\n";
        assert_eq!(
            remove(text, "f", "a").unwrap(),
            "mcp:\n  # about b\n  b:\n    command: [y]\n"
        );
        assert_eq!(
            remove(text, "f", "b").unwrap(),
            "mcp:\n  # about a\n  a:\n    command: [x]\n    # inside a\n\n"
        );
        assert_eq!(
            remove("mcp:  # servers\n  a:\n    command: [x]\n", "f", "a").unwrap(),
            "mcp: {}  # servers\n"
        );
        assert!(matches!(
            remove(text, "f", "zz"),
            Err(EditError::NotFound { .. })
        ));
    }

    #[test]
    fn replace_keeps_surroundings() {
        let text = "mcp:\n  # about a\n  a:\n    command: [x]\n  b:\n    command: [y]";
        assert_eq!(
            replace(text, "f", &local("a")).unwrap(),
            "mcp:\n  # about a\n  a:\n    command: [srv]\n    tools:\n      allow: [x]\n  b:\n    command: [y]"
        );
        assert_eq!(
            replace(text, "f", &local("b")).unwrap(),
            "mcp:\n  # about a\n  a:\n    command: [x]\n  b:\n    command: [srv]\n    tools:\n      allow: [x]"
        );
    }
}
