//! Strict YAML for policy files: text in, one bounded tree of located nodes out, or one located
//! error. This module owns every YAML-level rule: a single document, no anchors, aliases, merge
//! keys, tags or directives, no duplicate keys, YAML 1.2 booleans only, and hard limits on size
//! and nesting so a hostile file is refused in microseconds. What the nodes mean is `schema`'s job.
//!
//! serde-saphyr does the parsing under a tight [`Budget`] (its breaches are our size and shape
//! limits) and gives each node its position through [`Spanned`]. Its errors carry a position but
//! no key path, so [`path_at`] replays the parser's events up to that position to name the key.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::budget::BudgetBreach;
use serde_saphyr::granit_parser::{self, ErrorKind, Event};
use serde_saphyr::{
    Budget, DuplicateKeyPolicy, Error as YamlLibError, ExternalMessageSource, MergeKeyPolicy,
    Spanned,
};
use std::fmt;

/// Largest policy file accepted, in bytes. Real ones are a few hundred bytes.
pub const MAX_FILE_BYTES: usize = 1 << 20;
/// Deepest nesting of mappings and sequences. The schema needs 9 for an argument rule's list
/// (`mcp.NAME.tools.rules[i].args./p.one_of[j]`), and `equals` may hold a small JSON value.
pub const MAX_DEPTH: usize = 16;
/// Most nodes (mappings, sequences, scalars) in one file. Also bounds the pairwise checks of the
/// cross-entry rules.
pub const MAX_NODES: usize = 10_000;

/// A YAML node and where it starts (1-based line and character column).
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    pub line: u32,
    pub column: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Entries in file order.
    Map(Vec<(Node, Node)>),
}

impl Value {
    /// What kind of value this is, for "expected X, found Y" messages. Never the value itself:
    /// whatever was pasted into a config file stays out of error output.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "nothing (null)",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a decimal number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

/// A YAML-level problem: where, the key path there, what and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    pub line: u32,
    pub column: u32,
    pub key: String,
    pub message: String,
    pub hint: String,
}

/// Parses `text` (already without a byte-order mark) into its one document's root node; `None`
/// for a document with no content (empty, only comments, `---`, or `null`).
pub fn read(text: &str) -> Result<Option<Node>, Vec<YamlError>> {
    if text.len() > MAX_FILE_BYTES {
        return Err(vec![YamlError {
            line: 1,
            column: 1,
            key: String::new(),
            message: format!(
                "the file is {} bytes; a policy file may be at most {MAX_FILE_BYTES} bytes",
                text.len()
            ),
            hint:
                "a policy lists servers, hosts and secret names; check that this is the right file"
                    .into(),
        }]);
    }
    let root: Option<Node> = match serde_saphyr::from_str_with_options(text, options()) {
        Ok(root) => root,
        Err(e) => return Err(vec![translate(text, &e)]),
    };
    // serde-saphyr has no switch for tags and directives; the document is known to be small and
    // shallow now, so one more pass over the parser's events is cheap.
    let problems = presentation_problems(text);
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(root.filter(|n| n.value != Value::Null))
}

fn options() -> serde_saphyr::Options {
    let mut budget = Budget::default();
    budget.max_reader_input_bytes = Some(MAX_FILE_BYTES);
    budget.max_depth = MAX_DEPTH;
    // One above the depth budget, so that a flow bomb reports the depth, not a parser error.
    budget.flow_nesting_limit = MAX_DEPTH + 1;
    budget.max_documents = 1;
    budget.max_nodes = MAX_NODES;
    budget.max_events = 4 * MAX_NODES;
    budget.max_total_scalar_bytes = MAX_FILE_BYTES;
    // A policy file has no use for anchors, aliases or merge keys: refuse the first one.
    budget.max_anchors = 0;
    budget.max_aliases = 0;
    budget.max_merge_keys = 0;
    budget.max_recorded_anchor_events = 0;
    budget.max_recorded_anchor_bytes = 0;
    budget.max_inclusion_depth = 0;

    let mut o = serde_saphyr::Options::default();
    o.budget = Some(budget);
    o.duplicate_keys = DuplicateKeyPolicy::Error;
    o.merge_keys = MergeKeyPolicy::Error;
    // YAML 1.1 `yes`/`no`/`on`/`off` stay strings, so `token: yes` is a type error, not `true`.
    o.strict_booleans = true;
    o.reject_unsupported_tags = true;
    o.legacy_octal_numbers = false;
    o.emit_comments = false;
    o.with_snippet = false;
    o.alias_limits.max_total_replayed_events = 0;
    o.alias_limits.max_replay_stack_depth = 0;
    o.alias_limits.max_alias_expansions_per_anchor = 0;
    o
}

// ---- the tree, built through serde so the budget and duplicate-key checks apply ----

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        let s = Spanned::<Value>::deserialize(d)?;
        Ok(Node {
            value: s.value,
            line: u32::try_from(s.referenced.line()).unwrap_or(u32::MAX),
            column: u32::try_from(s.referenced.column()).unwrap_or(u32::MAX),
        })
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Value, E> {
        Ok(Value::Int(v))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        i128::try_from(v)
            .map(Value::Int)
            .map_err(|_| E::custom("integer out of range"))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }
    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Value, E> {
        Err(E::custom("binary values are not allowed in a policy file"))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Value::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Node>()? {
            let value = map.next_value::<Node>()?;
            entries.push((key, value));
        }
        Ok(Value::Map(entries))
    }
}

// ---- serde-saphyr errors, in our words ----

fn translate(text: &str, e: &YamlLibError) -> YamlError {
    let e = innermost(e);
    let (line, column) = match e.location() {
        Some(l) if l.line() > 0 => (
            u32::try_from(l.line()).unwrap_or(u32::MAX),
            u32::try_from(l.column()).unwrap_or(u32::MAX).max(1),
        ),
        _ => (1, 1),
    };
    let (message, hint) = describe(e);
    YamlError {
        line,
        column,
        key: path_at(text, line, column),
        message,
        hint,
    }
}

/// Unwraps the snippet and alias wrappers serde-saphyr puts around the error that happened.
fn innermost(e: &YamlLibError) -> &YamlLibError {
    match e.without_snippet() {
        YamlLibError::AliasError { error, .. } => innermost(error),
        other => other,
    }
}

const ANCHOR_HINT: &str = "write each value out in full; a policy file has no use for anchors";

fn describe(e: &YamlLibError) -> (String, String) {
    let s = |a: &str, b: &str| (a.to_string(), b.to_string());
    match e {
        YamlLibError::Budget { breach, .. } => match breach {
            BudgetBreach::Anchors { .. }
            | BudgetBreach::Aliases { .. }
            | BudgetBreach::AliasAnchorRatio { .. } => s(
                "YAML anchors and aliases (`&name`, `*name`) are not allowed in a policy file",
                ANCHOR_HINT,
            ),
            BudgetBreach::MergeKeys { .. } => merge_key(),
            BudgetBreach::Depth { .. } => too_deep(),
            BudgetBreach::Documents { .. } => multiple_documents(),
            BudgetBreach::Nodes { .. } | BudgetBreach::Events { .. } => (
                format!("more than {MAX_NODES} values; a policy file is small"),
                "check that this is the right file".into(),
            ),
            BudgetBreach::ScalarBytes { .. } | BudgetBreach::InputBytes { .. } => s(
                "the file's text is larger than a policy file may be",
                "check that this is the right file",
            ),
            _ => s(
                "the file exceeds a limit of the YAML reader",
                "a policy file is small and flat; check that this is the right file",
            ),
        },
        YamlLibError::MergeKeyNotAllowed { .. }
        | YamlLibError::MergeValueNotMapOrSeqOfMaps { .. } => merge_key(),
        YamlLibError::AliasReplayCounterOverflow { .. }
        | YamlLibError::AliasReplayLimitExceeded { .. }
        | YamlLibError::AliasExpansionLimitExceeded { .. }
        | YamlLibError::AliasReplayStackDepthExceeded { .. }
        | YamlLibError::UnknownAnchor { .. } => s(
            "YAML anchors and aliases (`&name`, `*name`) are not allowed in a policy file",
            ANCHOR_HINT,
        ),
        YamlLibError::MultipleDocuments { .. } => multiple_documents(),
        YamlLibError::DuplicateMappingKey { key, .. } => (
            match key {
                Some(k) => format!("duplicate key `{k}`"),
                None => "duplicate key".to_string(),
            },
            "a key may appear only once in a mapping; remove one of them or merge them".into(),
        ),
        YamlLibError::UnsupportedTag { .. } | YamlLibError::TaggedStructFieldName { .. } => tag(),
        YamlLibError::NonFiniteFloat { .. } => s(
            "`.inf` and `.nan` are not values a policy file uses",
            "quote it if you meant a string",
        ),
        YamlLibError::InvalidBinaryBase64 { .. } | YamlLibError::BinaryNotUtf8 { .. } => tag(),
        YamlLibError::ExternalMessage { source, .. }
            if matches!(
                source.as_ref(),
                ExternalMessageSource::Parser(scan)
                    if matches!(scan.kind(), ErrorKind::RecursionLimitExceeded)
            ) =>
        {
            too_deep()
        }
        other => {
            let text = other.to_string();
            // serde-saphyr appends " at line L, column C"; we print the position ourselves.
            let msg = match text.rfind(" at line ") {
                Some(i) => text[..i].to_string(),
                None => text,
            };
            let hint = if msg.contains("tab") {
                "indent with spaces; YAML does not allow tabs for indentation"
            } else {
                "check the YAML syntax at this point (indentation, quotes, `:` after keys)"
            };
            (format!("invalid YAML: {msg}"), hint.into())
        }
    }
}

fn too_deep() -> (String, String) {
    (
        format!("nested deeper than {MAX_DEPTH} levels"),
        "a policy nests at most `mcp.NAME.tools.allow`; check the indentation".into(),
    )
}

fn merge_key() -> (String, String) {
    (
        "YAML merge keys (`<<`) are not allowed in a policy file".into(),
        ANCHOR_HINT.into(),
    )
}

fn multiple_documents() -> (String, String) {
    (
        "more than one YAML document (`---`) in one file".into(),
        "a policy file holds exactly one document; remove the extra `---` and what follows".into(),
    )
}

fn tag() -> (String, String) {
    (
        "YAML tags (`!!str`, `!!binary`, `!custom`) are not allowed in a policy file".into(),
        "remove the tag and write the value as plain text".into(),
    )
}

// ---- the parser's event stream: key paths and presentation checks ----

fn parser(text: &str) -> granit_parser::Parser<'_, granit_parser::StrInput<'_>> {
    let mut o = granit_parser::Options::default();
    o.flow_nesting_limit = MAX_DEPTH + 1;
    o.block_nesting_limit = MAX_DEPTH + 1;
    o.disallow_directives = true;
    o.emit_comments = false;
    granit_parser::Parser::new_from_str_with_options(text, o)
}

#[derive(Debug)]
struct Frame {
    seq: bool,
    /// Map: the key whose value is being read.
    key: String,
    /// Map: the next node is a key.
    in_key: bool,
    /// Seq: index of the element being read.
    index: usize,
}

/// Follows the event stream and knows the key path of the node about to be read.
#[derive(Default)]
struct PathTracker {
    frames: Vec<Frame>,
}

impl PathTracker {
    /// Path of the next node; `scalar` is its text when it is a scalar (a key names itself).
    fn next_path(&self, scalar: Option<&str>) -> String {
        let mut p = String::new();
        let last = self.frames.len().saturating_sub(1);
        for (i, f) in self.frames.iter().enumerate() {
            if f.seq {
                p.push_str(&format!("[{}]", f.index));
            } else if i == last && f.in_key {
                if let Some(k) = scalar {
                    push_key(&mut p, k);
                }
            } else {
                push_key(&mut p, &f.key);
            }
        }
        p
    }

    fn on_event(&mut self, ev: &Event<'_>) {
        match ev {
            Event::Scalar(text, ..) => match self.frames.last_mut() {
                Some(f) if !f.seq && f.in_key => {
                    f.key = text.to_string();
                    f.in_key = false;
                }
                _ => self.child_done(),
            },
            Event::Alias(_) => self.child_done(),
            Event::SequenceStart(..) | Event::MappingStart(..) => self.frames.push(Frame {
                seq: matches!(ev, Event::SequenceStart(..)),
                key: String::new(),
                in_key: true,
                index: 0,
            }),
            Event::SequenceEnd | Event::MappingEnd => {
                self.frames.pop();
                match self.frames.last_mut() {
                    // A collection used as a key: the schema refuses it anyway.
                    Some(f) if !f.seq && f.in_key => {
                        f.key = "?".into();
                        f.in_key = false;
                    }
                    _ => self.child_done(),
                }
            }
            _ => {}
        }
    }

    fn child_done(&mut self) {
        match self.frames.last_mut() {
            Some(f) if f.seq => f.index += 1,
            Some(f) => f.in_key = true,
            None => {}
        }
    }
}

/// Appends a key to a dotted path.
pub fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
}

fn is_node(ev: &Event<'_>) -> bool {
    matches!(
        ev,
        Event::Scalar(..) | Event::Alias(_) | Event::SequenceStart(..) | Event::MappingStart(..)
    )
}

/// Key path of what the parser reads at (`line`, `column`): replays events up to there. A block
/// collection starts where its first key does; the innermost node at the position wins.
pub fn path_at(text: &str, line: u32, column: u32) -> String {
    let target = (line as usize, column as usize);
    let mut t = PathTracker::default();
    let mut candidate: Option<String> = None;
    for item in parser(text) {
        let Ok((ev, span)) = item else {
            break;
        };
        let at = (span.start.line(), span.start.col() + 1);
        if at > target {
            return candidate.unwrap_or_else(|| t.next_path(None));
        }
        // Block collections end where the next key starts: close them before naming that key, or a
        // repeated key after a block would be named inside the block.
        if at == target && matches!(ev, Event::MappingEnd | Event::SequenceEnd) {
            t.on_event(&ev);
            continue;
        }
        if at == target {
            let scalar = match &ev {
                Event::Scalar(s, ..) => Some(s.as_ref()),
                _ => None,
            };
            let path = t.next_path(scalar);
            if !matches!(ev, Event::SequenceStart(..) | Event::MappingStart(..)) {
                return if is_node(&ev) {
                    path
                } else {
                    candidate.unwrap_or(path)
                };
            }
            candidate = Some(path);
        }
        t.on_event(&ev);
    }
    candidate.unwrap_or_else(|| t.next_path(None))
}

/// Tags and directives: valid YAML that serde-saphyr accepts but a policy file must not use
/// (a tag can turn base64 into a string, a directive can change how scalars are read).
fn presentation_problems(text: &str) -> Vec<YamlError> {
    let mut out = Vec::new();
    let mut t = PathTracker::default();
    for item in parser(text) {
        let (ev, span) = match item {
            Ok(x) => x,
            Err(e) => {
                let m = e.marker();
                let (message, hint) = if matches!(e.kind(), ErrorKind::DirectiveDisallowed) {
                    (
                        "YAML directives (`%YAML`, `%TAG`) are not allowed in a policy file"
                            .to_string(),
                        "remove the line starting with `%`".to_string(),
                    )
                } else {
                    (
                        format!("invalid YAML: {}", e.kind()),
                        "check the YAML syntax at this point".to_string(),
                    )
                };
                out.push(YamlError {
                    line: u32::try_from(m.line()).unwrap_or(u32::MAX),
                    column: u32::try_from(m.col() + 1).unwrap_or(u32::MAX),
                    key: t.next_path(None),
                    message,
                    hint,
                });
                break;
            }
        };
        let tagged = match &ev {
            Event::Scalar(_, _, _, tag)
            | Event::SequenceStart(_, _, tag)
            | Event::MappingStart(_, _, tag) => tag.is_some(),
            _ => false,
        };
        if tagged {
            let scalar = match &ev {
                Event::Scalar(s, ..) => Some(s.as_ref()),
                _ => None,
            };
            let m = span.tag_start().unwrap_or(span.start);
            let (message, hint) = tag();
            out.push(YamlError {
                line: u32::try_from(m.line()).unwrap_or(u32::MAX),
                column: u32::try_from(m.col() + 1).unwrap_or(u32::MAX),
                key: t.next_path(scalar),
                message,
                hint,
            });
        }
        t.on_event(&ev);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_a_located_tree() {
        let root = read("version: 1\nmcp:\n  a:\n    url: x\n")
            .unwrap()
            .unwrap();
        let Value::Map(entries) = &root.value else {
            panic!("not a map")
        };
        assert_eq!(entries[0].0.value, Value::Str("version".into()));
        assert_eq!(entries[0].1.value, Value::Int(1));
        assert_eq!((entries[0].1.line, entries[0].1.column), (1, 10));
        let Value::Map(mcp) = &entries[1].1.value else {
            panic!("not a map")
        };
        assert_eq!((mcp[0].0.line, mcp[0].0.column), (3, 3));
    }

    #[test]
    fn empty_documents_have_no_root() {
        for text in ["", "\n", "# only a comment\n", "---\n", "null\n", "~\n"] {
            assert_eq!(read(text), Ok(None), "{text:?}");
        }
    }

    #[test]
    fn path_at_names_the_key_being_read() {
        let text = "mcp:\n  a:\n    tools:\n      allow: [x, y]\n      allow: []\n";
        assert_eq!(path_at(text, 5, 7), "mcp.a.tools.allow");
        assert_eq!(path_at(text, 4, 18), "mcp.a.tools.allow[1]");
        assert_eq!(path_at(text, 2, 3), "mcp.a");
        // A repeated key whose first value was a block is named where it is, not inside the block.
        let text = "mcp:\n  a:\n    tools:\n      allow: [x]\n  a:\n    url: u\nhosts: []\n";
        assert_eq!(path_at(text, 5, 3), "mcp.a");
        assert_eq!(path_at(text, 7, 1), "hosts");
    }

    #[test]
    fn yes_is_a_string_not_a_boolean() {
        let root = read("a: yes\nb: true\n").unwrap().unwrap();
        let Value::Map(e) = root.value else { panic!() };
        assert_eq!(e[0].1.value, Value::Str("yes".into()));
        assert_eq!(e[1].1.value, Value::Bool(true));
    }
}
