//! Strict JSON for inspected bodies: our own parser, because a body the proxy decides on must mean one
//! thing to us and to the server behind us. `serde_json` keeps the last of two duplicate keys (a server
//! in another language may keep the first), so it cannot be used for inspected bodies.
//!
//! What is refused, with the byte offset where it was found:
//! - input over [`JsonLimits::max_bytes`], containers nested deeper than [`JsonLimits::max_depth`];
//! - anything but UTF-8 (overlong forms, UTF-8-encoded surrogates, UTF-16/32), a byte order mark;
//! - leading or trailing data other than JSON whitespace (space, tab, CR, LF);
//! - duplicate object keys at any depth, compared after unescaping (`"a"` and `"\u0061"` collide);
//! - unescaped control characters in strings, unknown escapes, lone or mis-paired surrogate escapes;
//! - `NaN`, `Infinity`, leading zeros, `+1`, `.5`, `1.`, and numbers out of range: an integer part over
//!   [`MAX_INT_DIGITS`] digits, a fraction over [`MAX_FRAC_DIGITS`] digits, or an exponent that makes
//!   the value overflow an IEEE-754 double (or underflow a non-zero value to zero). What a peer
//!   would read as infinity or zero is not a number we can reason about.
//!
//! Numbers are kept as their JSON text. The parser is iterative (an explicit stack, no recursion),
//! linear in the input, and never panics.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::ops::Range;

/// Longest integer part of a number, in digits (before any exponent). 10^100 is far beyond any id,
/// count or size a JSON-RPC peer sends and still exactly representable as text everywhere.
pub const MAX_INT_DIGITS: usize = 100;
/// Longest fraction part of a number, in digits.
pub const MAX_FRAC_DIGITS: usize = 100;

/// The deepest nesting any caller gets, whatever [`JsonLimits::max_depth`] says: values are dropped,
/// compared and printed recursively, so the depth must stay far from what a thread's stack holds.
pub const MAX_DEPTH_CAP: usize = 1024;

/// Size and depth limits for inspected bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonLimits {
    /// Largest body, in bytes.
    pub max_bytes: usize,
    /// Deepest nesting of arrays and objects: `[]` is depth 1, `[[]]` depth 2. Capped at
    /// [`MAX_DEPTH_CAP`].
    pub max_depth: usize,
}

impl Default for JsonLimits {
    fn default() -> Self {
        JsonLimits {
            max_bytes: 4 * 1024 * 1024,
            max_depth: 64,
        }
    }
}

/// A parsed JSON value. Object members keep their order; keys are unique (duplicates are refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    Bool(bool),
    /// The number's JSON text, exactly as written.
    Number(String),
    String(String),
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
    /// An array or object below the depth [`parse_to_depth`] was asked to keep: checked as strictly
    /// as the rest, not kept. [`parse`] never produces it.
    Elided,
}

impl Value {
    /// The member `key` of an object (`None` for other values or a missing key).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_object()?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&[(String, Value)]> {
        match self {
            Value::Object(m) => Some(m),
            _ => None,
        }
    }

    /// `"object"`, `"array"`, `"string"`, `"number"`, `"boolean"` or `"null"`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
            Value::Elided => "container",
        }
    }
}

/// What was wrong. The texts never quote the input: an error message may end up in a log or a
/// response, and the body is not ours to repeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonErrorKind {
    /// The input is longer than `max_bytes` (the offset is the limit).
    TooLarge,
    /// Arrays and objects nested deeper than `max_depth`.
    TooDeep,
    /// Not UTF-8 (includes overlong encodings and encoded surrogates).
    InvalidUtf8,
    /// A byte order mark (UTF-8, UTF-16 or UTF-32).
    ByteOrderMark,
    /// NUL bytes where JSON text starts: UTF-16 or UTF-32 input.
    WideEncoding,
    /// Nothing but whitespace.
    Empty,
    /// Something after the value other than whitespace.
    TrailingData,
    /// The input ends inside a value.
    UnexpectedEnd,
    /// A character that cannot start or continue what was expected here.
    Expected(&'static str),
    /// A raw control character (U+0000..U+001F) inside a string.
    ControlCharacter,
    /// A backslash escape JSON does not define, or a malformed `\u`.
    InvalidEscape,
    /// A `\u` surrogate escape that is not a high surrogate followed by a low one.
    LoneSurrogate,
    /// Not a JSON number (leading zero, `+`, `.5`, `1.`, missing digits...).
    InvalidNumber,
    /// A number too long or too large/small in magnitude to be represented.
    NumberOutOfRange,
    /// A key that already appears in the same object (compared after unescaping).
    DuplicateKey,
}

impl fmt::Display for JsonErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonErrorKind::TooLarge => f.write_str("body larger than the limit"),
            JsonErrorKind::TooDeep => f.write_str("nesting deeper than the limit"),
            JsonErrorKind::InvalidUtf8 => f.write_str("invalid UTF-8"),
            JsonErrorKind::ByteOrderMark => f.write_str("byte order mark"),
            JsonErrorKind::WideEncoding => f.write_str("UTF-16 or UTF-32 text"),
            JsonErrorKind::Empty => f.write_str("no JSON value"),
            JsonErrorKind::TrailingData => f.write_str("data after the JSON value"),
            JsonErrorKind::UnexpectedEnd => f.write_str("unexpected end of input"),
            JsonErrorKind::Expected(what) => write!(f, "expected {what}"),
            JsonErrorKind::ControlCharacter => f.write_str("unescaped control character in string"),
            JsonErrorKind::InvalidEscape => f.write_str("invalid escape"),
            JsonErrorKind::LoneSurrogate => f.write_str("unpaired surrogate escape"),
            JsonErrorKind::InvalidNumber => f.write_str("invalid number"),
            JsonErrorKind::NumberOutOfRange => f.write_str("number out of range"),
            JsonErrorKind::DuplicateKey => f.write_str("duplicate key"),
        }
    }
}

/// Why a body is not strict JSON, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{kind} at byte {offset}")]
pub struct JsonError {
    pub offset: usize,
    pub kind: JsonErrorKind,
}

/// Parses `input` strictly (see the module documentation for what is refused).
pub fn parse(input: &[u8], limits: &JsonLimits) -> Result<Value, JsonError> {
    parse_to_depth(input, limits, usize::MAX)
}

/// Like [`parse`], and checks the whole input just as strictly, but keeps only the values inside
/// containers nested at most `keep_depth` deep (the top-level container is depth 1): a container
/// deeper than that becomes [`Value::Elided`]. A caller that reads only the first levels of a
/// large document saves building (and freeing) the rest.
pub fn parse_to_depth(
    input: &[u8],
    limits: &JsonLimits,
    keep_depth: usize,
) -> Result<Value, JsonError> {
    parse_inner(input, limits, keep_depth, false, &[]).map(|(value, _)| value)
}

/// Like [`parse_to_depth`], and also returns the byte range of every container in the value (every
/// `Array`, `Object` and `Elided` in it), in the order they open: the order of a pre-order walk of
/// the value ([`containers_in`] counts what a subtree holds). A caller that rewrites part of a
/// document copies the rest from the input as it was, checked, without writing it out again.
///
/// An array elided as the value of one of `list_keys` in a built object is a list: the span of
/// each of its elements is returned too, so that a caller can read or drop them one by one from
/// the checked text without parsing it again.
pub fn parse_to_depth_with_spans(
    input: &[u8],
    limits: &JsonLimits,
    keep_depth: usize,
    list_keys: &[&str],
) -> Result<Spanned, JsonError> {
    let (value, parser) = parse_inner(input, limits, keep_depth, true, list_keys)?;
    Ok(Spanned {
        value,
        spans: parser.spans.unwrap_or_default(),
        elements: parser.elements,
    })
}

/// What [`parse_to_depth_with_spans`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spanned {
    pub value: Value,
    /// The containers in `value`, in pre-order.
    pub spans: Vec<Range<usize>>,
    /// The elements of every list, in document order.
    pub elements: Vec<ElementSpan>,
}

/// One element of a list array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElementSpan {
    /// The list's index in [`Spanned::spans`].
    pub list: usize,
    pub range: Range<usize>,
}

/// How many containers `value` holds, itself included: how far a pre-order walk of the spans
/// [`parse_to_depth_with_spans`] returned moves past it.
pub fn containers_in(value: &Value) -> usize {
    match value {
        Value::Elided => 1,
        Value::Array(items) => 1 + items.iter().map(containers_in).sum::<usize>(),
        Value::Object(members) => 1 + members.iter().map(|(_, v)| containers_in(v)).sum::<usize>(),
        _ => 0,
    }
}

/// The string value of member `key` (compared after unescaping) of the JSON object `text`, or
/// `None` when `text` is not an object, has no such member, or its value is not a string. Reads
/// only as far as that member: for text already checked whole (a span of a checked document).
pub fn object_member_str<'a>(text: &'a str, key: &str) -> Option<Cow<'a, str>> {
    let mut p = Parser {
        text,
        bytes: text.as_bytes(),
        pos: 0,
        max_depth: MAX_DEPTH_CAP,
        keep_depth: 0,
        keys: Vec::new(),
        spans: None,
        list_keys: &[],
        elements: Vec::new(),
    };
    p.skip_ws();
    if p.peek() != Some(b'{') {
        return None;
    }
    p.pos += 1;
    p.skip_ws();
    loop {
        if !p.keys.is_empty() {
            // After the first member: `,` then the next key, or the end.
            p.skip_ws();
            if p.peek() != Some(b',') {
                return None;
            }
            p.pos += 1;
            p.skip_ws();
        }
        let member = p.key(0).ok()?;
        if member == key {
            return match p.peek() {
                Some(b'"') => p.string().ok(),
                _ => None,
            };
        }
        // Skip the value without building it.
        match p.peek() {
            Some(b'"') => p.skip_string().ok()?,
            _ => drop(p.document().ok()?),
        }
    }
}

fn parse_inner<'a>(
    input: &'a [u8],
    limits: &JsonLimits,
    keep_depth: usize,
    spans: bool,
    list_keys: &'a [&'a str],
) -> Result<(Value, Parser<'a>), JsonError> {
    if input.len() > limits.max_bytes {
        return Err(err(limits.max_bytes, JsonErrorKind::TooLarge));
    }
    check_encoding(input)?;
    let text =
        std::str::from_utf8(input).map_err(|e| err(e.valid_up_to(), JsonErrorKind::InvalidUtf8))?;
    let mut parser = Parser {
        text,
        bytes: input,
        pos: 0,
        max_depth: limits.max_depth.min(MAX_DEPTH_CAP),
        keep_depth,
        keys: Vec::with_capacity(16),
        spans: spans.then(Vec::new),
        list_keys,
        elements: Vec::new(),
    };
    parser.skip_ws();
    if parser.pos == input.len() {
        return Err(err(parser.pos, JsonErrorKind::Empty));
    }
    let value = parser.document()?;
    parser.skip_ws();
    if parser.pos != input.len() {
        return Err(err(parser.pos, JsonErrorKind::TrailingData));
    }
    Ok((value, parser))
}

/// Appends `s` as a JSON string literal in pure ASCII: quotes, backslashes and everything outside
/// printable ASCII are escaped (`\uXXXX`, surrogate pairs above the BMP), so the output survives any
/// log, header or terminal unchanged.
pub fn write_string(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    let mut at = 0;
    while at < s.len() {
        // Printable ASCII other than `"` and `\\` is copied a run at a time.
        let end = find_unprintable(s.as_bytes(), at);
        out.push_str(s.get(at..end).unwrap_or_default());
        // An escaped byte is ASCII and an unprintable one starts a char: `end` is a boundary.
        let Some(c) = s.get(end..).and_then(|rest| rest.chars().next()) else {
            break;
        };
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    push_unicode_escape(out, *unit);
                }
            }
        }
        at = end + c.len_utf8();
    }
    out.push('"');
}

/// `\uXXXX` in lower-case hex, without a `format!` per character.
fn push_unicode_escape(out: &mut String, unit: u16) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push_str("\\u");
    for shift in [12, 8, 4, 0] {
        out.push(char::from(HEX[usize::from((unit >> shift) & 0xf)]));
    }
}

fn err(offset: usize, kind: JsonErrorKind) -> JsonError {
    JsonError { offset, kind }
}

/// Names the encoding mistakes people actually make before the generic UTF-8 check runs.
fn check_encoding(input: &[u8]) -> Result<(), JsonError> {
    const BOMS: [&[u8]; 4] = [
        &[0xEF, 0xBB, 0xBF],
        &[0x00, 0x00, 0xFE, 0xFF],
        &[0xFE, 0xFF],
        &[0xFF, 0xFE],
    ];
    if BOMS.iter().any(|bom| input.starts_with(bom)) {
        return Err(err(0, JsonErrorKind::ByteOrderMark));
    }
    // JSON text starts with ASCII, so a NUL among the first bytes means a wide encoding
    // (`{\0` is UTF-16LE, `\0{` UTF-16BE, `\0\0\0{` UTF-32BE).
    if let Some(i) = input.iter().take(4).position(|&b| b == 0) {
        return Err(err(i, JsonErrorKind::WideEncoding));
    }
    Ok(())
}

/// One open container on the explicit stack. `None` contents: a container below the keep depth,
/// checked but not kept.
enum Frame {
    Array {
        items: Option<Vec<Value>>,
        /// Its index in [`Parser::spans`], when spans are recorded and it is in the value.
        span: Option<usize>,
        /// Its elements' spans are recorded ([`Parser::list_keys`]).
        list: bool,
        /// Its index in [`Parser::elements`], when it is an element of such a list.
        element: Option<usize>,
    },
    Object {
        members: Option<Vec<(String, Value)>>,
        span: Option<usize>,
        element: Option<usize>,
        /// Where this object's keys start on [`Parser::keys`].
        keys_start: usize,
        /// The key whose value is being parsed (empty when not kept).
        pending: String,
    },
}

/// Objects up to this many members are checked for duplicates as each key is read; larger ones are
/// checked once more, in O(n log n), when they close.
const LINEAR_DUP_CHECK: usize = 16;

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    max_depth: usize,
    keep_depth: usize,
    /// The keys of every open object, innermost last, with their offsets: duplicates are found here
    /// whether or not the object is kept, borrowing the input unless a key has escapes.
    keys: Vec<(Cow<'a, str>, usize)>,
    /// When asked for ([`parse_to_depth_with_spans`]): the byte range of every container in the
    /// value (built or elided), in the order they open.
    spans: Option<Vec<Range<usize>>>,
    /// Arrays elided under one of these keys of a built object have their elements' spans
    /// recorded in `elements`.
    list_keys: &'a [&'a str],
    elements: Vec<ElementSpan>,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn fail<T>(&self, kind: JsonErrorKind) -> Result<T, JsonError> {
        Err(err(self.pos, kind))
    }

    /// Expected `what` at the current position: the end of input or a wrong character.
    fn expected<T>(&self, what: &'static str) -> Result<T, JsonError> {
        if self.pos >= self.bytes.len() {
            self.fail(JsonErrorKind::UnexpectedEnd)
        } else {
            self.fail(JsonErrorKind::Expected(what))
        }
    }

    /// The value at `pos` (whitespace already skipped), containers included, without recursion.
    fn document(&mut self) -> Result<Value, JsonError> {
        // Room for the nesting of a typical JSON-RPC message, so the stacks are not regrown per call.
        let mut stack: Vec<Frame> = Vec::with_capacity(8);
        'value: loop {
            // Values directly inside the innermost open container are kept if that container is.
            let keep = stack.len() <= self.keep_depth;
            // The list (by span) this value is an element of, if its elements are recorded.
            let in_list = match stack.last() {
                Some(Frame::Array {
                    list: true,
                    span: Some(list),
                    ..
                }) => Some(*list),
                _ => None,
            };
            let value_start = self.pos;
            // Parse one value, or open a container and go round for its first element.
            let mut value: Option<Value> = match self.peek() {
                Some(b'{') => {
                    let start = self.pos;
                    self.open(stack.len())?;
                    let build = stack.len() < self.keep_depth;
                    let span = self.span_open(keep, start);
                    let element = self.element_open(in_list, start);
                    self.skip_ws();
                    if self.peek() == Some(b'}') {
                        self.pos += 1;
                        self.span_close(span);
                        self.element_close(element);
                        self.container(build, keep, || Value::Object(Vec::new()))
                    } else {
                        let keys_start = self.keys.len();
                        let key = self.key(keys_start)?;
                        stack.push(Frame::Object {
                            members: build.then(|| Vec::with_capacity(4)),
                            span,
                            element,
                            keys_start,
                            pending: if build {
                                key.into_owned()
                            } else {
                                String::new()
                            },
                        });
                        continue 'value;
                    }
                }
                Some(b'[') => {
                    let start = self.pos;
                    self.open(stack.len())?;
                    let build = stack.len() < self.keep_depth;
                    let span = self.span_open(keep, start);
                    let element = self.element_open(in_list, start);
                    let list = span.is_some() && !build && self.under_list_key(&stack);
                    self.skip_ws();
                    if self.peek() == Some(b']') {
                        self.pos += 1;
                        self.span_close(span);
                        self.element_close(element);
                        self.container(build, keep, || Value::Array(Vec::new()))
                    } else {
                        stack.push(Frame::Array {
                            items: build.then(Vec::new),
                            span,
                            list,
                            element,
                        });
                        continue 'value;
                    }
                }
                Some(b'"') if keep => Some(Value::String(self.string()?.into_owned())),
                Some(b'"') => {
                    self.skip_string()?;
                    None
                }
                Some(b'-' | b'0'..=b'9') => {
                    let n = self.number()?;
                    keep.then(|| Value::Number(n.to_owned()))
                }
                Some(b't') => self.literal("true", keep.then_some(Value::Bool(true)))?,
                Some(b'f') => self.literal("false", keep.then_some(Value::Bool(false)))?,
                Some(b'n') => self.literal("null", keep.then_some(Value::Null))?,
                _ => return self.expected("a value"),
            };
            // A scalar element of a recorded list (containers were recorded as they opened).
            if let Some(list) = in_list
                && !matches!(self.bytes.get(value_start), Some(b'{' | b'['))
            {
                self.elements.push(ElementSpan {
                    list,
                    range: value_start..self.pos,
                });
            }
            // Hand the value to its container; close containers as long as they end here.
            loop {
                match stack.last_mut() {
                    None => return Ok(value.unwrap_or(Value::Elided)),
                    Some(Frame::Array { items, .. }) => {
                        if let Some(items) = items {
                            items.push(value.take().unwrap_or(Value::Elided));
                        }
                        self.skip_ws();
                        match self.peek() {
                            Some(b',') => {
                                self.pos += 1;
                                self.skip_ws();
                                continue 'value;
                            }
                            Some(b']') => {
                                self.pos += 1;
                                let items = match stack.pop() {
                                    Some(Frame::Array {
                                        items,
                                        span,
                                        element,
                                        ..
                                    }) => {
                                        self.span_close(span);
                                        self.element_close(element);
                                        items
                                    }
                                    _ => return self.expected("']'"),
                                };
                                let keep = stack.len() <= self.keep_depth;
                                value = match items {
                                    Some(items) => Some(Value::Array(items)),
                                    None => keep.then_some(Value::Elided),
                                };
                            }
                            _ => return self.expected("',' or ']'"),
                        }
                    }
                    Some(Frame::Object {
                        members,
                        keys_start,
                        pending,
                        ..
                    }) => {
                        if let Some(members) = members {
                            let v = value.take().unwrap_or(Value::Elided);
                            members.push((std::mem::take(pending), v));
                        }
                        let keys_start = *keys_start;
                        let build = members.is_some();
                        self.skip_ws();
                        match self.peek() {
                            Some(b',') => {
                                self.pos += 1;
                                self.skip_ws();
                                let key = self.key(keys_start)?;
                                if build
                                    && let Some(Frame::Object { pending, .. }) = stack.last_mut()
                                {
                                    *pending = key.into_owned();
                                }
                                continue 'value;
                            }
                            Some(b'}') => {
                                self.pos += 1;
                                self.close_keys(keys_start)?;
                                let members = match stack.pop() {
                                    Some(Frame::Object {
                                        members,
                                        span,
                                        element,
                                        ..
                                    }) => {
                                        self.span_close(span);
                                        self.element_close(element);
                                        members
                                    }
                                    _ => return self.expected("'}'"),
                                };
                                let keep = stack.len() <= self.keep_depth;
                                value = match members {
                                    Some(members) => Some(Value::Object(members)),
                                    None => keep.then_some(Value::Elided),
                                };
                            }
                            _ => return self.expected("',' or '}'"),
                        }
                    }
                }
            }
        }
    }

    /// Starts the span of a container opened at `start`, when spans are recorded and it is in the
    /// value (built, or elided in a built container).
    fn span_open(&mut self, kept: bool, start: usize) -> Option<usize> {
        let spans = self.spans.as_mut().filter(|_| kept)?;
        spans.push(start..start);
        Some(spans.len() - 1)
    }

    /// Ends span `span` (if any) at the current position, just past the closing bracket.
    fn span_close(&mut self, span: Option<usize>) {
        if let (Some(i), Some(spans)) = (span, self.spans.as_mut())
            && let Some(range) = spans.get_mut(i)
        {
            range.end = self.pos;
        }
    }

    /// Starts the span of a container opened at `start` that is an element of list `in_list`.
    fn element_open(&mut self, in_list: Option<usize>, start: usize) -> Option<usize> {
        let list = in_list?;
        self.elements.push(ElementSpan {
            list,
            range: start..start,
        });
        Some(self.elements.len() - 1)
    }

    fn element_close(&mut self, element: Option<usize>) {
        if let Some(e) = element.and_then(|i| self.elements.get_mut(i)) {
            e.range.end = self.pos;
        }
    }

    /// The container being opened is the value of one of [`Parser::list_keys`] in a built object.
    fn under_list_key(&self, stack: &[Frame]) -> bool {
        matches!(
            stack.last(),
            Some(Frame::Object { members: Some(_), pending, .. })
                if self.list_keys.contains(&pending.as_str())
        )
    }

    /// An empty container: kept, elided in a kept parent, or dropped.
    fn container(&self, build: bool, keep: bool, empty: impl FnOnce() -> Value) -> Option<Value> {
        if build {
            Some(empty())
        } else {
            keep.then_some(Value::Elided)
        }
    }

    /// Consumes `{` or `[` at nesting `open` (the containers already open), enforcing the limit.
    fn open(&mut self, open: usize) -> Result<(), JsonError> {
        if open >= self.max_depth {
            return self.fail(JsonErrorKind::TooDeep);
        }
        self.pos += 1;
        Ok(())
    }

    /// Reads `"key" :` (whitespace skipped before the key) for the object whose keys start at
    /// `keys_start`, checks it against them while the object is small, and records it. Leaves `pos`
    /// at the value.
    fn key(&mut self, keys_start: usize) -> Result<Cow<'a, str>, JsonError> {
        let offset = self.pos;
        if self.peek() != Some(b'"') {
            return self.expected("a string key");
        }
        let key = self.string()?;
        let siblings = self.keys.get(keys_start..).unwrap_or_default();
        if siblings.len() < LINEAR_DUP_CHECK && siblings.iter().any(|(k, _)| same_key(k, &key)) {
            return Err(err(offset, JsonErrorKind::DuplicateKey));
        }
        self.keys.push((key.clone(), offset));
        self.skip_ws();
        if self.peek() != Some(b':') {
            return self.expected("':'");
        }
        self.pos += 1;
        self.skip_ws();
        Ok(key)
    }

    /// Closes the object whose keys start at `keys_start`: a large one gets its full duplicate check
    /// here (small ones were checked key by key), reporting the duplicate that comes first in the
    /// text. Its keys then leave the stack.
    fn close_keys(&mut self, keys_start: usize) -> Result<(), JsonError> {
        let keys = self.keys.get(keys_start..).unwrap_or_default();
        if keys.len() > LINEAR_DUP_CHECK {
            // std's hasher is randomly keyed, so colliding keys cannot be chosen in advance.
            let mut seen = HashSet::with_capacity(keys.len());
            if let Some((_, offset)) = keys.iter().find(|(k, _)| !seen.insert(k.as_ref())) {
                return Err(err(*offset, JsonErrorKind::DuplicateKey));
            }
        }
        self.keys.truncate(keys_start);
        Ok(())
    }

    fn literal(
        &mut self,
        word: &'static str,
        value: Option<Value>,
    ) -> Result<Option<Value>, JsonError> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(value)
        } else {
            self.fail(JsonErrorKind::Expected("a value"))
        }
    }

    /// A string starting at the opening quote; borrowed from the input unless it has escapes.
    fn string(&mut self) -> Result<Cow<'a, str>, JsonError> {
        self.scan_string(true)
    }

    /// A string whose value is not kept: checked just as strictly, not decoded.
    fn skip_string(&mut self) -> Result<(), JsonError> {
        self.scan_string(false).map(drop)
    }

    fn scan_string(&mut self, decode: bool) -> Result<Cow<'a, str>, JsonError> {
        self.pos += 1; // the opening quote
        let start = self.pos;
        let end = find_special(self.bytes, self.pos);
        self.pos = end;
        // Boundaries at ASCII bytes are always char boundaries, so these slices cannot fail.
        let text: &'a str = self.text;
        let run = text.get(start..end).unwrap_or_default();
        if self.peek() == Some(b'"') {
            self.pos += 1;
            return Ok(Cow::Borrowed(run));
        }
        let mut out = if decode {
            String::from(run)
        } else {
            String::new()
        };
        loop {
            match self.peek() {
                None => return self.fail(JsonErrorKind::UnexpectedEnd),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(Cow::Owned(out));
                }
                Some(b'\\') => {
                    let c = self.escape()?;
                    if decode {
                        out.push(c);
                    }
                }
                Some(_) => return self.fail(JsonErrorKind::ControlCharacter),
            }
            let run = self.pos;
            self.pos = find_special(self.bytes, run);
            if decode {
                out.push_str(text.get(run..self.pos).unwrap_or_default());
            }
        }
    }

    /// One escape sequence at the backslash: moves past it and returns the character it stands for.
    fn escape(&mut self) -> Result<char, JsonError> {
        let at = self.pos;
        let c = match self.bytes.get(at + 1) {
            None => return self.fail(JsonErrorKind::UnexpectedEnd),
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                let unit = self.hex4(at + 2)?;
                match unit {
                    0xD800..=0xDBFF => {
                        // A high surrogate must be followed at once by an escaped low surrogate.
                        let low = if self.bytes.get(at + 6) == Some(&b'\\')
                            && self.bytes.get(at + 7) == Some(&b'u')
                        {
                            self.hex4(at + 8)?
                        } else {
                            return Err(err(at, JsonErrorKind::LoneSurrogate));
                        };
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return Err(err(at, JsonErrorKind::LoneSurrogate));
                        }
                        let code = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                        let c =
                            char::from_u32(code).ok_or(err(at, JsonErrorKind::LoneSurrogate))?;
                        self.pos = at + 12;
                        return Ok(c);
                    }
                    0xDC00..=0xDFFF => return Err(err(at, JsonErrorKind::LoneSurrogate)),
                    _ => {
                        let c =
                            char::from_u32(unit).ok_or(err(at, JsonErrorKind::InvalidEscape))?;
                        self.pos = at + 6;
                        return Ok(c);
                    }
                }
            }
            Some(_) => return Err(err(at, JsonErrorKind::InvalidEscape)),
        };
        self.pos = at + 2;
        Ok(c)
    }

    /// Four hex digits at `at`.
    fn hex4(&self, at: usize) -> Result<u32, JsonError> {
        let mut unit = 0u32;
        for i in at..at + 4 {
            let d = match self.bytes.get(i) {
                Some(&d) => d,
                None => return Err(err(self.bytes.len(), JsonErrorKind::UnexpectedEnd)),
            };
            let v = match d {
                b'0'..=b'9' => d - b'0',
                b'a'..=b'f' => d - b'a' + 10,
                b'A'..=b'F' => d - b'A' + 10,
                _ => return Err(err(i, JsonErrorKind::InvalidEscape)),
            };
            unit = unit << 4 | u32::from(v);
        }
        Ok(unit)
    }

    /// A number at `pos`; returns its text.
    fn number(&mut self) -> Result<&'a str, JsonError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        let int_start = self.pos;
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if let Some(b'0'..=b'9') = self.peek() {
                    return self.fail(JsonErrorKind::InvalidNumber);
                }
            }
            Some(b'1'..=b'9') => self.digits(),
            _ => return self.number_error(),
        }
        let int_digits = self.pos - int_start;
        let mut frac_digits = 0;
        let mut nonzero = self.bytes[int_start..self.pos].iter().any(|&b| b != b'0');
        if self.peek() == Some(b'.') {
            self.pos += 1;
            let frac_start = self.pos;
            self.digits();
            frac_digits = self.pos - frac_start;
            if frac_digits == 0 {
                return self.number_error();
            }
            nonzero |= self.bytes[frac_start..self.pos].iter().any(|&b| b != b'0');
        }
        let mut has_exponent = false;
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            let exp_start = self.pos;
            self.digits();
            if self.pos == exp_start {
                return self.number_error();
            }
            has_exponent = true;
        }
        if int_digits > MAX_INT_DIGITS || frac_digits > MAX_FRAC_DIGITS {
            return Err(err(start, JsonErrorKind::NumberOutOfRange));
        }
        let all: &'a str = self.text;
        let text = all.get(start..self.pos).unwrap_or_default();
        // Without an exponent the magnitude is bounded by the digit limits. With one, ask what a
        // double makes of it: an overflow to infinity, or a non-zero value that becomes zero, is
        // a number the peer would not see as written.
        if has_exponent {
            let representable = match text.parse::<f64>() {
                Ok(v) => v.is_finite() && (v != 0.0 || !nonzero),
                Err(_) => false,
            };
            if !representable {
                return Err(err(start, JsonErrorKind::NumberOutOfRange));
            }
        }
        Ok(text)
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }

    fn number_error<T>(&self) -> Result<T, JsonError> {
        if self.pos >= self.bytes.len() {
            self.fail(JsonErrorKind::UnexpectedEnd)
        } else {
            self.fail(JsonErrorKind::InvalidNumber)
        }
    }
}

/// Key equality, cheapest tests first (most sibling keys differ in length or first byte).
fn same_key(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.as_bytes().first() == b.as_bytes().first() && a == b
}

/// Index of the first `"`, `\` or control byte at or after `i` (or `bytes.len()`).
fn find_special(bytes: &[u8], i: usize) -> usize {
    find_first(bytes, i, is_special)
}

/// The first byte at or after `i` that [`write_string`] cannot copy as it is (or `bytes.len()`).
fn find_unprintable(bytes: &[u8], i: usize) -> usize {
    find_first(bytes, i, is_unprintable)
}

/// The first byte at or after `i` that `stops` (or `bytes.len()`). Strings are most of a body's
/// bytes, so whole 32-byte blocks are tested first: a fold with no early exit over a bitwise
/// predicate, which the compiler turns into a few vector compares per block.
#[inline(always)]
fn find_first(bytes: &[u8], mut i: usize, stops: fn(u8) -> bool) -> usize {
    let (blocks, _) = bytes.get(i..).unwrap_or_default().as_chunks::<32>();
    for block in blocks {
        if block.iter().fold(false, |any, &b| any | stops(b)) {
            break;
        }
        i += 32;
    }
    bytes
        .get(i..)
        .and_then(|rest| rest.iter().position(|&b| stops(b)))
        .map_or(bytes.len(), |at| i + at)
}

/// A byte that ends a run of a string's plain text: its closing quote, an escape, or a control byte
/// (which JSON forbids raw). Bitwise `|`, not `||`: with `||` the compiler keeps a branch per byte
/// and the block fold above does not vectorise (16 instructions a byte, docs/benchmarks.md).
fn is_special(b: u8) -> bool {
    (b == b'"') | (b == b'\\') | (b < 0x20)
}

/// A byte [`write_string`] escapes: a special one, or anything outside printable ASCII.
fn is_unprintable(b: u8) -> bool {
    is_special(b) | (b >= 0x7f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Value, JsonError> {
        parse(text.as_bytes(), &JsonLimits::default())
    }

    fn kind(bytes: &[u8]) -> JsonErrorKind {
        parse(bytes, &JsonLimits::default())
            .expect_err("should be refused")
            .kind
    }

    fn fails(text: &str, expected: JsonErrorKind, offset: usize) {
        assert_eq!(
            p(text),
            Err(JsonError {
                offset,
                kind: expected
            }),
            "{text:?}"
        );
    }

    #[test]
    fn parses_every_kind_of_value() {
        let v =
            p(r#" {"a":[1,-0.5e+3,true,false,null,"x\ty\u00e9\ud83d\ude00"],"b":{}} "#).unwrap();
        assert_eq!(
            v,
            Value::Object(vec![
                (
                    "a".into(),
                    Value::Array(vec![
                        Value::Number("1".into()),
                        Value::Number("-0.5e+3".into()),
                        Value::Bool(true),
                        Value::Bool(false),
                        Value::Null,
                        Value::String("x\ty\u{e9}\u{1F600}".into()),
                    ])
                ),
                ("b".into(), Value::Object(vec![])),
            ])
        );
        assert_eq!(v.get("b"), Some(&Value::Object(vec![])));
        assert_eq!(v.get("c"), None);
        assert_eq!(
            p("\"\\/\\\\\\\"\\b\\f\\n\\r\"").unwrap().as_str(),
            Some("/\\\"\u{8}\u{c}\n\r")
        );
        assert_eq!(p("[]").unwrap(), Value::Array(vec![]));
        assert_eq!(p("0").unwrap(), Value::Number("0".into()));
        assert_eq!(p("-0").unwrap(), Value::Number("-0".into()));
        assert_eq!(p("1E5").unwrap(), Value::Number("1E5".into()));
        assert_eq!(p("\"\\u0000\"").unwrap().as_str(), Some("\0"));
        assert_eq!(p("\"caf\u{e9}\"").unwrap().as_str(), Some("caf\u{e9}"));
    }

    #[test]
    fn refuses_duplicate_keys_at_any_depth_after_unescaping() {
        fails(r#"{"a":1,"a":2}"#, JsonErrorKind::DuplicateKey, 7);
        fails(r#"{"a":1,"\u0061":2}"#, JsonErrorKind::DuplicateKey, 7);
        fails(
            r#"[{"x":{"y":[{"k":1,"k":1}]}}]"#,
            JsonErrorKind::DuplicateKey,
            19,
        );
        // Distinct after unescaping: not duplicates.
        assert!(p(r#"{"a":1,"A":2,"a ":3}"#).is_ok());
        // A large object is checked in full when it closes; the first duplicate in the text wins.
        let mut big = String::from("{");
        for i in 0..40 {
            big.push_str(&format!("\"k{i}\":0,"));
        }
        let dup_at = big.len();
        big.push_str("\"k3\":1,\"k1\":1}");
        fails(&big, JsonErrorKind::DuplicateKey, dup_at);
        let ok: String = format!(
            "{{{}}}",
            (0..1000)
                .map(|i| format!("\"k{i}\":{i}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert!(p(&ok).is_ok());
    }

    #[test]
    fn refuses_bad_encodings() {
        assert_eq!(kind(b"\xEF\xBB\xBF{}"), JsonErrorKind::ByteOrderMark);
        assert_eq!(kind(b"\xFF\xFE{\0}\0"), JsonErrorKind::ByteOrderMark);
        assert_eq!(kind(b"\xFE\xFF\0{\0}"), JsonErrorKind::ByteOrderMark);
        assert_eq!(kind(b"{\0}\0"), JsonErrorKind::WideEncoding);
        assert_eq!(kind(b"\0{\0}"), JsonErrorKind::WideEncoding);
        assert_eq!(kind(b"\0\0\0{"), JsonErrorKind::WideEncoding);
        // Overlong '/', an encoded surrogate, a stray continuation byte, a truncated sequence.
        for bad in [
            &b"\"\xC0\xAF\""[..],
            b"\"\xED\xA0\x80\"",
            b"\"\x80\"",
            b"\"\xE2\x82\"",
            b"\"\xF4\x90\x80\x80\"",
        ] {
            let e = parse(bad, &JsonLimits::default()).unwrap_err();
            assert_eq!(
                (e.kind, e.offset),
                (JsonErrorKind::InvalidUtf8, 1),
                "{bad:?}"
            );
        }
        // A BOM in the middle is just a character: fine inside a string, refused outside.
        assert!(p("\"\u{feff}\"").is_ok());
        fails("{} \u{feff}", JsonErrorKind::TrailingData, 3);
    }

    #[test]
    fn refuses_leading_and_trailing_data() {
        fails("", JsonErrorKind::Empty, 0);
        fails(" \n\t\r", JsonErrorKind::Empty, 4);
        fails("{} x", JsonErrorKind::TrailingData, 3);
        fails("{}{}", JsonErrorKind::TrailingData, 2);
        fails("1 2", JsonErrorKind::TrailingData, 2);
        fails("{}\u{c}", JsonErrorKind::TrailingData, 2);
        fails("\u{a0}{}", JsonErrorKind::Expected("a value"), 0);
        fails("{}\u{2028}", JsonErrorKind::TrailingData, 2);
        assert!(p("\r\n\t {} \r\n\t").is_ok());
    }

    #[test]
    fn refuses_bad_strings() {
        fails("\"a\u{1}\"", JsonErrorKind::ControlCharacter, 2);
        fails("\"a\nb\"", JsonErrorKind::ControlCharacter, 2);
        fails("\"\\x\"", JsonErrorKind::InvalidEscape, 1);
        fails("\"\\'\"", JsonErrorKind::InvalidEscape, 1);
        fails("\"\\u12G4\"", JsonErrorKind::InvalidEscape, 5);
        fails("\"\\ud800\"", JsonErrorKind::LoneSurrogate, 1);
        fails("\"\\udc00\"", JsonErrorKind::LoneSurrogate, 1);
        fails("\"\\ud800\\u0041\"", JsonErrorKind::LoneSurrogate, 1);
        fails("\"\\ud800\\ud800\"", JsonErrorKind::LoneSurrogate, 1);
        fails("\"x\\udbff\\n\"", JsonErrorKind::LoneSurrogate, 2);
        fails("\"abc", JsonErrorKind::UnexpectedEnd, 4);
        fails("\"\\u12", JsonErrorKind::UnexpectedEnd, 5);
        fails("\"\\", JsonErrorKind::UnexpectedEnd, 1);
        assert_eq!(
            p("\"\\uDBFF\\uDFFF\"").unwrap().as_str(),
            Some("\u{10FFFF}")
        );
        assert_eq!(p("\"\u{7f}\"").unwrap().as_str(), Some("\u{7f}"));
    }

    #[test]
    fn refuses_bad_numbers() {
        for bad in [
            "01", "-01", "+1", ".5", "1.", "-", "1e", "1e+", "1.e5", "--1", "0x10", "1_0",
        ] {
            let e = p(bad).unwrap_err();
            assert!(
                matches!(
                    e.kind,
                    JsonErrorKind::InvalidNumber
                        | JsonErrorKind::UnexpectedEnd
                        | JsonErrorKind::TrailingData
                        | JsonErrorKind::Expected(_)
                ),
                "{bad}: {e}"
            );
        }
        for bad in ["NaN", "Infinity", "-Infinity", "nan", "tru", "nul", "True"] {
            assert!(p(bad).is_err(), "{bad}");
        }
        fails("[-Infinity]", JsonErrorKind::InvalidNumber, 2);
        fails("[1e309]", JsonErrorKind::NumberOutOfRange, 1);
        fails("9e308", JsonErrorKind::NumberOutOfRange, 0);
        fails(
            "-1e99999999999999999999",
            JsonErrorKind::NumberOutOfRange,
            0,
        );
        fails("1e-400", JsonErrorKind::NumberOutOfRange, 0);
        assert!(p("1e308").is_ok());
        assert!(p("1.7976931348623157e308").is_ok());
        assert!(p("0e-99999").is_ok());
        assert!(p("5e-324").is_ok());
        let digits = |n: usize| "9".repeat(n);
        assert!(p(&digits(MAX_INT_DIGITS)).is_ok());
        fails(
            &digits(MAX_INT_DIGITS + 1),
            JsonErrorKind::NumberOutOfRange,
            0,
        );
        assert!(p(&format!("0.{}", digits(MAX_FRAC_DIGITS))).is_ok());
        fails(
            &format!("0.{}", digits(MAX_FRAC_DIGITS + 1)),
            JsonErrorKind::NumberOutOfRange,
            0,
        );
    }

    #[test]
    fn enforces_limits() {
        let limits = JsonLimits {
            max_bytes: 10,
            max_depth: 3,
        };
        assert!(parse(b"[[[]]]", &limits).is_ok());
        assert_eq!(
            parse(b"[[[[]]]]", &limits),
            Err(err(3, JsonErrorKind::TooDeep))
        );
        assert_eq!(
            parse(
                br#"{"a":{"b":{"c":1}}}"#,
                &JsonLimits {
                    max_bytes: 100,
                    max_depth: 2
                }
            ),
            Err(err(10, JsonErrorKind::TooDeep))
        );
        assert_eq!(
            parse(b"[1,2,3,4,5,6]", &limits),
            Err(err(10, JsonErrorKind::TooLarge))
        );
        let scalar_only = JsonLimits {
            max_bytes: 10,
            max_depth: 0,
        };
        assert!(parse(b"1", &scalar_only).is_ok());
        assert!(parse(b"[]", &scalar_only).is_err());
        // Deep nesting is refused without recursion, however deep the input.
        let deep = "[".repeat(1_000_000);
        let big = JsonLimits {
            max_bytes: 2_000_000,
            max_depth: 64,
        };
        assert_eq!(
            parse(deep.as_bytes(), &big).unwrap_err().kind,
            JsonErrorKind::TooDeep
        );
        let limit_64 = format!("{}{}", "[".repeat(64), "]".repeat(64));
        assert!(parse(limit_64.as_bytes(), &big).is_ok());
        // However high the configured limit, nesting stops at the cap.
        let uncapped = JsonLimits {
            max_bytes: 3_000_000,
            max_depth: usize::MAX,
        };
        let at_cap = format!("{}{}", "[".repeat(MAX_DEPTH_CAP), "]".repeat(MAX_DEPTH_CAP));
        assert!(parse(at_cap.as_bytes(), &uncapped).is_ok());
        let past_cap = "[".repeat(1_000_000);
        assert_eq!(
            parse(past_cap.as_bytes(), &uncapped),
            Err(err(MAX_DEPTH_CAP, JsonErrorKind::TooDeep))
        );
    }

    #[test]
    fn spans_are_the_kept_containers_in_pre_order() {
        let text = br#"{"a": [1, {"b": {}}], "c": {"d": [2, [3]]}}"#;
        let limits = JsonLimits::default();
        let Spanned { value, spans, .. } =
            parse_to_depth_with_spans(text, &limits, usize::MAX, &[]).unwrap();
        let texts: Vec<&str> = spans
            .iter()
            .map(|r| std::str::from_utf8(&text[r.clone()]).unwrap())
            .collect();
        assert_eq!(
            texts,
            [
                std::str::from_utf8(text).unwrap(),
                r#"[1, {"b": {}}]"#,
                r#"{"b": {}}"#,
                "{}",
                r#"{"d": [2, [3]]}"#,
                "[2, [3]]",
                "[3]",
            ]
        );
        assert_eq!(containers_in(&value), spans.len());
        // An elided container has a span; what is inside it has none.
        let Spanned {
            value,
            spans,
            elements,
        } = parse_to_depth_with_spans(text, &limits, 2, &["c", "a"]).unwrap();
        let texts: Vec<&[u8]> = spans.iter().map(|r| &text[r.clone()]).collect();
        assert_eq!(
            texts,
            [
                &text[..],
                br#"[1, {"b": {}}]"#,
                br#"{"b": {}}"#,
                br#"{"d": [2, [3]]}"#,
                b"[2, [3]]",
            ]
        );
        assert_eq!(containers_in(&value), 5);
        // `a` is built (depth 2 is kept), so it is not a list; `d` is no key of a built object.
        assert!(elements.is_empty());
        let text = br#"{"r": {"tools": [1, {"n": [2]}, "x" , []], "other": [3]}}"#;
        let got = parse_to_depth_with_spans(text, &limits, 2, &["tools"]).unwrap();
        let lists: Vec<(&[u8], &[u8])> = got
            .elements
            .iter()
            .map(|e| (&text[got.spans[e.list].clone()], &text[e.range.clone()]))
            .collect();
        let list: &[u8] = br#"[1, {"n": [2]}, "x" , []]"#;
        assert_eq!(
            lists,
            [
                (list, &b"1"[..]),
                (list, &br#"{"n": [2]}"#[..]),
                (list, &br#""x""#[..]),
                (list, &b"[]"[..])
            ]
        );
        assert_eq!(
            object_member_str(
                r#" {"x": {"name": 1}, "y": "a\u0062", "name" : "n\u0031"} "#,
                "name"
            ),
            Some("n1".into())
        );
        assert_eq!(object_member_str(r#"{"y": "ab"}"#, "y"), Some("ab".into()));
        assert_eq!(object_member_str(r#"{"name": 7}"#, "name"), None);
        assert_eq!(object_member_str(r#"["name"]"#, "name"), None);
        assert_eq!(object_member_str("{}", "name"), None);
        // The same strictness as ever.
        assert!(parse_to_depth_with_spans(br#"{"a":1,"a":2}"#, &limits, 1, &[]).is_err());
    }

    #[test]
    fn parse_to_depth_keeps_the_first_levels_and_checks_everything() {
        let limits = JsonLimits::default();
        let text = br#"{"a":{"b":[1,{"c":2}],"s":"x"},"n":1,"e":[]}"#;
        let v = parse_to_depth(text, &limits, 2).unwrap();
        assert_eq!(
            v,
            Value::Object(vec![
                (
                    "a".into(),
                    Value::Object(vec![
                        ("b".into(), Value::Elided),
                        ("s".into(), Value::String("x".into()))
                    ])
                ),
                ("n".into(), Value::Number("1".into())),
                ("e".into(), Value::Array(vec![])),
            ])
        );
        assert_eq!(parse_to_depth(text, &limits, 0).unwrap(), Value::Elided);
        assert_eq!(
            parse_to_depth(b"7", &limits, 0).unwrap(),
            Value::Number("7".into())
        );
        assert_eq!(
            parse_to_depth(text, &limits, 9).unwrap(),
            parse(text, &limits).unwrap()
        );
        // What is not kept is still checked: duplicates (small and large objects), escapes, numbers.
        let deep_dup = br#"{"a":{"b":[{"k":1,"\u006b":2}]}}"#;
        assert_eq!(
            parse_to_depth(deep_dup, &limits, 1).unwrap_err(),
            parse(deep_dup, &limits).unwrap_err()
        );
        let mut wide = String::from(r#"{"a":[{"#);
        for i in 0..40 {
            wide.push_str(&format!("\"k{i}\":0,"));
        }
        wide.push_str(r#""k5":1}]}"#);
        assert_eq!(
            parse_to_depth(wide.as_bytes(), &limits, 1)
                .unwrap_err()
                .kind,
            JsonErrorKind::DuplicateKey
        );
        for bad in [
            &br#"{"a":[["\ud800"]]}"#[..],
            br#"{"a":[[1e999]]}"#,
            br#"{"a":[[01]]}"#,
        ] {
            assert_eq!(parse_to_depth(bad, &limits, 1), parse(bad, &limits));
            assert!(parse(bad, &limits).is_err());
        }
        // Sibling objects may reuse each other's keys.
        assert!(parse_to_depth(br#"[{"a":1},{"a":2},{"b":{"a":3}}]"#, &limits, 1).is_ok());
    }

    #[test]
    fn structural_errors_name_what_was_expected() {
        fails("{\"a\" 1}", JsonErrorKind::Expected("':'"), 5);
        fails("{1:2}", JsonErrorKind::Expected("a string key"), 1);
        fails("{\"a\":1,}", JsonErrorKind::Expected("a string key"), 7);
        fails("[1,]", JsonErrorKind::Expected("a value"), 3);
        fails("[1 2]", JsonErrorKind::Expected("',' or ']'"), 3);
        fails(
            "{\"a\":1 \"b\":2}",
            JsonErrorKind::Expected("',' or '}'"),
            7,
        );
        fails("[1,", JsonErrorKind::UnexpectedEnd, 3);
        fails("{\"a\":", JsonErrorKind::UnexpectedEnd, 5);
        fails("[", JsonErrorKind::UnexpectedEnd, 1);
        fails("]", JsonErrorKind::Expected("a value"), 0);
    }

    #[test]
    fn error_messages_do_not_quote_the_input() {
        let e = p("{\"secret-ish\":1,\"secret-ish\":2}").unwrap_err();
        assert_eq!(e.to_string(), "duplicate key at byte 16");
        assert!(!p("[sk-abc]").unwrap_err().to_string().contains("sk"));
    }

    #[test]
    fn write_string_is_ascii_and_round_trips() {
        let samples = [
            "plain",
            "q\"b\\s/",
            "ctl\u{0}\u{1f}\u{7f}",
            "é\u{202e}😀",
            "\u{2028}",
        ];
        for s in samples {
            let mut out = String::new();
            write_string(&mut out, s);
            assert!(out.bytes().all(|b| (0x20..0x7f).contains(&b)), "{out}");
            assert_eq!(p(&out).unwrap().as_str(), Some(s));
        }
    }

    #[test]
    fn a_large_body_parses() {
        let body = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{{\"name\":\"t\",\"arguments\":{{\"s\":\"{}\"}}}}}}",
            "x".repeat(1 << 20)
        );
        let v = p(&body).unwrap();
        let s = v
            .get("params")
            .and_then(|p| p.get("arguments"))
            .and_then(|a| a.get("s"))
            .and_then(Value::as_str)
            .unwrap();
        assert_eq!(s.len(), 1 << 20);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Bytes drawn mostly from JSON's own alphabet, so that many inputs get deep into the parser.
        fn jsonish() -> impl Strategy<Value = Vec<u8>> {
            let alphabet: Vec<u8> =
                b"{}[]:,\"\\ \t\n0123456789-+.eEtrufalsn/bu dDcC\x01\xc3\xa9\xed\xa0\x80".to_vec();
            proptest::collection::vec(
                prop_oneof![
                    8 => proptest::sample::select(alphabet),
                    1 => any::<u8>(),
                ],
                0..64,
            )
        }

        fn same(ours: &Value, theirs: &serde_json::Value) -> bool {
            match (ours, theirs) {
                (Value::Null, serde_json::Value::Null) => true,
                (Value::Bool(a), serde_json::Value::Bool(b)) => a == b,
                // serde_json's default float parsing may be off by an ulp: compare loosely.
                (Value::Number(a), serde_json::Value::Number(b)) => {
                    match (a.parse::<f64>(), b.as_f64()) {
                        (Ok(x), Some(y)) => x == y || (x - y).abs() <= x.abs() * 1e-15,
                        _ => false,
                    }
                }
                (Value::String(a), serde_json::Value::String(b)) => a == b,
                (Value::Array(a), serde_json::Value::Array(b)) => {
                    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y))
                }
                (Value::Object(a), serde_json::Value::Object(b)) => {
                    a.len() == b.len()
                        && a.iter().all(|(k, v)| b.get(k).is_some_and(|w| same(v, w)))
                }
                _ => false,
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(4000))]

            /// Never panics, and whatever we accept serde_json accepts with the same meaning
            /// (we are a strict subset of RFC 8259).
            #[test]
            fn strict_subset_of_serde_json(bytes in jsonish()) {
                if let Ok(ours) = parse(&bytes, &JsonLimits::default()) {
                    let theirs: serde_json::Value = serde_json::from_slice(&bytes)
                        .expect("serde_json refused what we accepted");
                    prop_assert!(same(&ours, &theirs));
                }
            }

            /// Keeping fewer levels never changes what is accepted or the error reported.
            #[test]
            fn depth_does_not_change_the_verdict(bytes in jsonish(), keep in 0usize..4) {
                let limits = JsonLimits::default();
                let full = parse(&bytes, &limits);
                let shallow = parse_to_depth(&bytes, &limits, keep);
                prop_assert_eq!(full.as_ref().err(), shallow.as_ref().err());
            }

            /// The block scan finds the same first special byte as a byte-by-byte search, wherever
            /// it lies against the 32-byte blocks (long runs of plain bytes, specials rare).
            #[test]
            fn find_special_agrees_with_a_byte_search(
                bytes in proptest::collection::vec(
                    prop_oneof![
                        60 => proptest::sample::select(b"ax ~\x7f\xc3\xa9".to_vec()),
                        1 => proptest::sample::select(b"\"\\\x00\x1f\n".to_vec()),
                    ],
                    0..300,
                ),
                from in 0usize..300,
            ) {
                let from = from.min(bytes.len());
                let naive = bytes[from..]
                    .iter()
                    .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                    .map_or(bytes.len(), |at| from + at);
                prop_assert_eq!(find_special(&bytes, from), naive);
            }

            /// The block scans agree with a byte search, for every byte value.
            #[test]
            fn block_scans_agree_with_byte_searches_over_every_byte(
                bytes in proptest::collection::vec(
                    prop_oneof![
                        30 => proptest::sample::select(b"ax ~!#[]".to_vec()),
                        1 => any::<u8>(),
                    ],
                    0..100,
                ),
                from in 0usize..100,
            ) {
                let from = from.min(bytes.len());
                let first = |special: &dyn Fn(u8) -> bool| bytes[from..]
                    .iter()
                    .position(|&b| special(b))
                    .map_or(bytes.len(), |at| from + at);
                prop_assert_eq!(find_special(&bytes, from), first(&is_special));
                prop_assert_eq!(
                    find_unprintable(&bytes, from),
                    first(&|b| is_special(b) || b >= 0x7f)
                );
            }

            /// The run-at-a-time writer writes what a character-at-a-time one does.
            #[test]
            fn write_string_agrees_with_a_char_by_char_writer(s in any::<String>(), plain in "[ -~]{0,40}") {
                for text in [s.as_str(), plain.as_str(), &format!("{plain}{s}{plain}")] {
                    let mut expected = String::from('"');
                    for c in text.chars() {
                        match c {
                            '"' => expected.push_str("\\\""),
                            '\\' => expected.push_str("\\\\"),
                            '\n' => expected.push_str("\\n"),
                            '\r' => expected.push_str("\\r"),
                            '\t' => expected.push_str("\\t"),
                            ' '..='~' => expected.push(c),
                            _ => {
                                let mut units = [0u16; 2];
                                for unit in c.encode_utf16(&mut units) {
                                    expected.push_str(&format!("\\u{unit:04x}"));
                                }
                            }
                        }
                    }
                    expected.push('"');
                    let mut out = String::new();
                    write_string(&mut out, text);
                    prop_assert_eq!(out, expected);
                }
            }

            /// Any string survives write_string and parse unchanged.
            #[test]
            fn strings_round_trip(s in any::<String>()) {
                let mut out = String::new();
                write_string(&mut out, &s);
                prop_assert_eq!(p(&out).unwrap(), Value::String(s));
            }
        }
    }
}
