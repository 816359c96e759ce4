//! The audit record (README, `fenzi log`) and its hash chain.
//!
//! The log is JSON Lines. Each record's `prev` is the SHA-256 (hex) of the previous line's exact bytes
//! (without its newline); the first record of a log has `prev` = [`GENESIS`]. Verification hashes the
//! raw lines, so it never depends on how a record would be re-serialised. A head file beside the log holds
//! the sequence number and hash of the last line written, which catches a log cut short.
//!
//! Records never carry secret values or placeholders: `secrets` lists secret *names* only.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// `prev` of the first record in a log.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What happened to a request. `Failed` follows an `Allowed` record when the upstream then failed;
/// `Filtered` follows it when the server's answer reached the client with list entries hidden.
/// `Held` is not a decision: it says a `tools/call` waits for a person (`tools.confirm`), and the
/// request's decision (`allowed` or `denied` `not_confirmed`) follows it.
/// `Reloaded` and `ReloadRefused` are about the session's policy, not a request: a policy file
/// changed and the new policy was swapped in (its hash in `policy`), or was not (why in `rule`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Allowed,
    Denied,
    Failed,
    Filtered,
    Held,
    Reloaded,
    ReloadRefused,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::Failed => "failed",
            Outcome::Filtered => "filtered",
            Outcome::Held => "held",
            Outcome::Reloaded => "reloaded",
            Outcome::ReloadRefused => "reload_refused",
        }
    }
}

/// One line of the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditRecord {
    /// RFC 3339 UTC with milliseconds.
    pub ts: String,
    pub seq: u64,
    pub session: String,
    pub decision: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// HTTP method (`CONNECT` for a tunnel).
    pub method: String,
    pub host: String,
    pub port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpc: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpc_id: Option<String>,
    /// Names of the secrets substituted into (or refused in) this request.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// The policy rule that decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Where the request failed, for `failed` records: `client`, `upstream`, `policy` or `proxy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// For `filtered` records: how many list entries the client did not see.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden: Option<u64>,
    /// For a call held by `tools.confirm`: on its `held` record, how long it may wait; on its
    /// decision, the answer (`yes by uid U pid P`, `no by ...`, `no answer in 2m`, `client gone`,
    /// `session ended`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm: Option<String>,
    /// The SHA-256 of the policy the decision was made under (`Policy::sha256`); on a `reloaded`
    /// record the policy now in force, on `reload_refused` the one that stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// The peer address (`IP:port`) of the TCP connection the request came on, as the proxy saw
    /// it. Absent on records about the session rather than a connection (`reloaded`,
    /// `reload_refused`) and on records written before fenzi recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The prompt a `prompts/get` names (`params.name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The resource a `resources/read`, `resources/subscribe` or `resources/unsubscribe` names
    /// (`params.uri`), without its query or fragment, which may hold credentials (as `path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// The program the connection was attributed to (DESIGN §17): its first holder, and all of
    /// them when several processes hold the socket. Absent under `fenzi proxy` (no sandbox to
    /// look into), on session records, and when attribution failed (the record is then a
    /// `program_not_allowed` refusal whose message says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<ProgramRecord>,
    /// `stdio` on the agent's requests to a local server behind its bridge (DESIGN §18); absent
    /// for a server reached over the network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    /// On a local server's own egress (its sandbox's requests, under its `hosts`): the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_server: Option<String>,
    pub prev: String,
}

/// One process holding a connection's socket: its executable as seen inside the sandbox, the
/// SHA-256 of its content, its pid inside the sandbox, and whether it is the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Holder {
    pub exe: String,
    pub sha256: String,
    pub pid: u32,
    pub agent: bool,
}

/// A record's `program`: `{"exe","sha256","pid","agent"}` of the first holder, with `holders`
/// (every holder, the first included) when there are several. Shared by every record of one
/// connection, so cloning it per record costs a reference count, not a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramRecord(pub std::sync::Arc<ProgramFields>);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgramFields {
    pub exe: String,
    pub sha256: String,
    pub pid: u32,
    pub agent: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<Holder>,
}

impl ProgramRecord {
    /// The record of a connection held by `holders` (at least one).
    pub fn new(holders: Vec<Holder>) -> Option<ProgramRecord> {
        let first = holders.first()?.clone();
        Some(ProgramRecord(std::sync::Arc::new(ProgramFields {
            exe: first.exe,
            sha256: first.sha256,
            pid: first.pid,
            agent: first.agent,
            holders: if holders.len() > 1 {
                holders
            } else {
                Vec::new()
            },
        })))
    }

    /// Every holder (the first alone when there is one).
    pub fn holders(&self) -> Vec<Holder> {
        if self.0.holders.is_empty() {
            vec![Holder {
                exe: self.0.exe.clone(),
                sha256: self.0.sha256.clone(),
                pid: self.0.pid,
                agent: self.0.agent,
            }]
        } else {
            self.0.holders.clone()
        }
    }
}

impl Serialize for ProgramRecord {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for ProgramRecord {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ProgramRecord, D::Error> {
        ProgramFields::deserialize(d).map(|f| ProgramRecord(std::sync::Arc::new(f)))
    }
}

/// `"program":{...},` as serde writes it.
fn push_program(line: &mut String, program: &ProgramRecord) {
    let p = &*program.0;
    line.push_str(r#""program":{"#);
    push_holder_fields(line, &p.exe, &p.sha256, p.pid, p.agent);
    if !p.holders.is_empty() {
        line.push_str(r#","holders":["#);
        for (i, h) in p.holders.iter().enumerate() {
            if i > 0 {
                line.push(',');
            }
            line.push('{');
            push_holder_fields(line, &h.exe, &h.sha256, h.pid, h.agent);
            line.push('}');
        }
        line.push(']');
    }
    line.push_str("},");
}

fn push_holder_fields(line: &mut String, exe: &str, sha256: &str, pid: u32, agent: bool) {
    line.push_str(r#""exe":"#);
    push_string(line, exe);
    line.push_str(r#","sha256":"#);
    push_string(line, sha256);
    line.push_str(r#","pid":"#);
    line.push_str(itoa::Buffer::new().format(pid));
    line.push_str(r#","agent":"#);
    line.push_str(if agent { "true" } else { "false" });
}

/// SHA-256 hex of a line's bytes (without the trailing newline).
pub fn line_hash(line: &[u8]) -> String {
    // Into a buffer, not through `hex::encode`, whose char-by-char iterator cost as much as a
    // third of the hashing (every record, before its request is forwarded).
    let mut hex = [0u8; 64];
    hex::encode_to_slice(Sha256::digest(line), &mut hex).expect("32 bytes are 64 hex digits");
    std::str::from_utf8(&hex)
        .expect("hex digits are ASCII")
        .to_owned()
}

/// Serialises a record to one line (no newline). JSON already escapes C0 controls; we also escape DEL,
/// C1 controls and the Unicode line/paragraph separators and bidi overrides, so a hostile tool or host
/// name cannot forge or visually rewrite a line for someone reading the log.
///
/// Request-derived text fields (path, rpc method, tool, prompt, resource, rpc id) are cut to [`MAX_FIELD_CHARS`]
/// characters with a marker saying how much was dropped: a hostile client must not be able to write
/// megabytes into the log per request.
pub fn to_line(record: &AuditRecord) -> String {
    let mut line = String::with_capacity(LINE_CAPACITY);
    line.push_str(r#"{"ts":"#);
    push_string(&mut line, &record.ts);
    line.push_str(r#","seq":"#);
    line.push_str(itoa::Buffer::new().format(record.seq));
    line.push_str(r#","session":"#);
    push_string(&mut line, &record.session);
    line.push(',');
    push_middle(&mut line, record);
    line.push_str(r#""prev":"#);
    push_string(&mut line, &record.prev);
    line.push('}');
    line
}

/// Room for a typical line, so building one does not grow the buffer.
const LINE_CAPACITY: usize = 512;

/// The fields from `decision` to `resource`, in the struct's order and as serde would write them
/// (`secrets` always, the other optional fields only when set), each followed by a comma.
/// Written by hand: every record goes through here before its request may be forwarded, and
/// serde's generic machinery cost several times the copies (tested against it).
fn push_middle(line: &mut String, r: &AuditRecord) {
    line.push_str(r#""decision":""#);
    line.push_str(r.decision.label());
    line.push_str(r#"","#);
    push_field(line, "reason", r.reason.as_deref(), false);
    push_field(line, "method", Some(&r.method), false);
    push_field(line, "host", Some(&r.host), false);
    push_number(line, "port", u64::from(r.port));
    push_field(line, "path", r.path.as_deref(), true);
    push_field(line, "server", r.server.as_deref(), false);
    push_field(line, "rpc", r.rpc.as_deref(), true);
    push_field(line, "tool", r.tool.as_deref(), true);
    push_field(line, "rpc_id", r.rpc_id.as_deref(), true);
    line.push_str(r#""secrets":["#);
    for (i, name) in r.secrets.iter().enumerate() {
        if i > 0 {
            line.push(',');
        }
        push_string(line, name);
    }
    line.push_str("],");
    push_field(line, "rule", r.rule.as_deref(), false);
    push_field(line, "source", r.source.as_deref(), false);
    if let Some(hidden) = r.hidden {
        push_number(line, "hidden", hidden);
    }
    push_field(line, "confirm", r.confirm.as_deref(), false);
    push_field(line, "policy", r.policy.as_deref(), false);
    push_field(line, "client", r.client.as_deref(), false);
    push_field(line, "prompt", r.prompt.as_deref(), true);
    push_field(line, "resource", r.resource.as_deref(), true);
    if let Some(program) = &r.program {
        push_program(line, program);
    }
    push_field(line, "transport", r.transport.as_deref(), false);
    push_field(line, "local_server", r.local_server.as_deref(), false);
}

/// `"key":n,`.
fn push_number(line: &mut String, key: &str, n: u64) {
    line.push('"');
    line.push_str(key);
    line.push_str(r#"":"#);
    line.push_str(itoa::Buffer::new().format(n));
    line.push(',');
}

/// `"key":"value",` when there is a value; a request-derived value (`clipped`) longer than
/// [`MAX_FIELD_CHARS`] characters is cut, with a marker saying how much was dropped.
fn push_field(line: &mut String, key: &str, value: Option<&str>, clipped: bool) {
    let Some(value) = value else { return };
    line.push('"');
    line.push_str(key);
    line.push_str(r#"":"#);
    // A value of at most MAX_FIELD_CHARS bytes cannot hold more characters: no count needed.
    if clipped && value.len() > MAX_FIELD_CHARS && value.chars().count() > MAX_FIELD_CHARS {
        push_string(line, &clip(value));
    } else {
        push_string(line, value);
    }
    line.push(',');
}

/// `text` as a JSON string, quotes included. JSON already escapes C0 controls; we also escape DEL,
/// C1 controls and the Unicode line/paragraph separators and bidi overrides ([`needs_escape`]).
/// Nearly every value is printable ASCII: copied as it is, with any `"` and `\` escaped on the way.
fn push_string(line: &mut String, text: &str) {
    if is_printable_ascii(text) {
        // In printable ASCII only `"` and `\` are escaped, as serde_json escapes them: what the
        // JSON module's writer does (a rule names its tool in quotes, so this is not rare).
        crate::json::write_string(line, text);
        return;
    }
    let quoted = serde_json::to_string(text).expect("a string always serialises");
    line.push_str(&escape_invisible(&quoted));
}

/// A record's line without the four fields its writer assigns (`ts`, `seq`, `session`, `prev`),
/// serialised ahead: a writer that must assign those under a lock (the chain is one sequence) then
/// only splices them in, instead of serialising the whole record while others wait.
/// [`LineFields::push_line`] gives exactly the line [`to_line`] gives for the whole record.
#[derive(Debug, Clone)]
pub struct LineFields {
    /// The serialised fields from `decision` up to and including the comma before `prev`.
    middle: String,
}

impl LineFields {
    /// The fields of `record` other than `ts`, `seq`, `session` and `prev`, which are ignored.
    pub fn new(record: AuditRecord) -> LineFields {
        let mut middle = String::with_capacity(LINE_CAPACITY);
        push_middle(&mut middle, &record);
        LineFields { middle }
    }

    /// `session` as a line holds it between its quotes (JSON-escaped, invisible characters as
    /// `\uXXXX`, as [`to_line`] writes every string): what [`LineFields::line`] takes. Made once
    /// per writer, not per record.
    pub fn session_text(session: &str) -> String {
        let mut quoted = String::new();
        push_string(&mut quoted, session);
        quoted[1..quoted.len() - 1].to_string()
    }

    /// The whole line (no newline), given the writer's fields. `ts` (RFC 3339) and `prev` (hex) need
    /// no escaping; `session` is spliced as given: pass [`LineFields::session_text`] of the id.
    /// It is appended to `line`: a writer that batches lines builds each in place.
    pub fn push_line(&self, line: &mut String, ts: &str, seq: u64, session: &str, prev: &str) {
        let middle = self.middle.as_str();
        // Pieces pushed one by one: this runs under the writer's lock, and the formatting
        // machinery of one `write!` of the whole line costs more than the copies.
        line.push_str(r#"{"ts":""#);
        line.push_str(ts);
        line.push_str(r#"","seq":"#);
        line.push_str(itoa::Buffer::new().format(seq));
        line.push_str(r#","session":""#);
        line.push_str(session);
        line.push_str(r#"","#);
        line.push_str(middle);
        line.push_str(r#""prev":""#);
        line.push_str(prev);
        line.push_str(r#""}"#);
    }
}

/// Whether every byte is printable ASCII (space to `~`), so nothing in it [`needs_escape`]. A fold
/// with no early exit: the compiler turns it into vector compares.
fn is_printable_ascii(text: &str) -> bool {
    text.bytes()
        .fold(true, |ok, b| ok & (0x20..0x7f).contains(&b))
}

/// Longest request-derived text kept in a record field.
pub const MAX_FIELD_CHARS: usize = 512;

fn clip(value: &str) -> String {
    let kept: String = value.chars().take(MAX_FIELD_CHARS).collect();
    format!("{kept}…[{} more bytes]", value.len() - kept.len())
}

/// Replaces characters that should never appear raw in a log with `\uXXXX`. Safe on JSON text: these
/// characters can only occur inside strings, where the escape means the same character.
pub fn escape_invisible(json: &str) -> String {
    if is_printable_ascii(json) || !json.chars().any(needs_escape) {
        return json.to_string();
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if needs_escape(c) {
            push_json_escape(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out
}

/// `\\uXXXX`, with a surrogate pair for characters outside the Basic Multilingual Plane.
fn push_json_escape(out: &mut String, c: char) {
    let mut units = [0u16; 2];
    for unit in c.encode_utf16(&mut units) {
        out.push_str(&format!("\\u{unit:04x}"));
    }
}

/// Characters a reader must see escaped: controls (Cc), every format character (Cf: soft hyphen,
/// zero-width and direction marks, bidi embeddings, overrides and isolates, invisible operators,
/// interlinear annotation, tag characters, ...), the line and paragraph separators, and invisible
/// characters of other categories (variation selectors, the combining grapheme joiner, Hangul fillers).
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || INVISIBLE
            .iter()
            .any(|&(lo, hi)| (lo..=hi).contains(&(c as u32)))
}

/// Ranges of [`needs_escape`] beyond `char::is_control`: the Unicode 16 `Cf` category, `Zl`, `Zp`,
/// and invisible characters of other categories.
const INVISIBLE: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x2028, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE007F),
    (0xE0100, 0xE01EF),
];

/// The head file's content: the sequence number and hash of the last line written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub seq: u64,
    pub hash: String,
}

impl Head {
    pub fn to_text(&self) -> String {
        format!("{} {}\n", self.seq, self.hash)
    }

    pub fn parse(text: &str) -> Option<Head> {
        let mut it = text.split_whitespace();
        let seq = it.next()?.parse().ok()?;
        let hash = it.next()?.to_string();
        if it.next().is_some() || hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some(Head { seq, hash })
    }
}

/// Why a log does not verify. `line` is 1-based.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error("line {line}: not a valid audit record: {detail}")]
    Malformed { line: usize, detail: String },
    #[error(
        "line {line} (seq {seq}): `prev` does not match the hash of the line before it: a record was edited, dropped or reordered"
    )]
    BrokenLink { line: usize, seq: u64 },
    #[error(
        "line {line}: seq {found} follows seq {expected_after}: a record was dropped or reordered"
    )]
    BadSequence {
        line: usize,
        found: u64,
        expected_after: u64,
    },
    #[error(
        "the log ends at seq {last_seq} but the head file records seq {head_seq}: the log was cut short or its tail edited"
    )]
    HeadMismatch { last_seq: u64, head_seq: u64 },
    #[error(
        "line {line} (seq {seq}) does not hash to the value the head file records for seq {seq}: that record was edited after it was written"
    )]
    HeadHashMismatch { line: usize, seq: u64 },
}

/// The result of verifying a whole log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub records: usize,
    pub head: Option<Head>,
}

/// Verifies a log's lines in order, and the head file when given. Sequence numbers start at any value
/// (a log may be rotated) and then increase by one per record.
///
/// The proxy updates the head after each durable batch, so a live log may run ahead of its head: the
/// head must then name a record that exists with exactly that hash. A log that ends before the head's
/// record was cut short.
pub fn verify<'a>(
    lines: impl IntoIterator<Item = &'a [u8]>,
    head: Option<&Head>,
) -> Result<Verified, ChainError> {
    let mut prev_hash = GENESIS.to_string();
    let mut prev_seq: Option<u64> = None;
    let mut count = 0usize;
    let mut head_seen = false;
    for (i, line) in lines.into_iter().enumerate() {
        let n = i + 1;
        let record: AuditRecord =
            serde_json::from_slice(line).map_err(|e| ChainError::Malformed {
                line: n,
                detail: e.to_string(),
            })?;
        if record.prev != prev_hash {
            return Err(ChainError::BrokenLink {
                line: n,
                seq: record.seq,
            });
        }
        if let Some(p) = prev_seq
            && record.seq != p + 1
        {
            return Err(ChainError::BadSequence {
                line: n,
                found: record.seq,
                expected_after: p,
            });
        }
        prev_hash = line_hash(line);
        prev_seq = Some(record.seq);
        count += 1;
        if let Some(h) = head
            && h.seq == record.seq
        {
            if h.hash != prev_hash {
                return Err(ChainError::HeadHashMismatch {
                    line: n,
                    seq: record.seq,
                });
            }
            head_seen = true;
        }
    }
    let last = prev_seq.map(|seq| Head {
        seq,
        hash: prev_hash,
    });
    if let Some(h) = head
        && !head_seen
    {
        return Err(ChainError::HeadMismatch {
            last_seq: last.as_ref().map_or(0, |l| l.seq),
            head_seq: h.seq,
        });
    }
    Ok(Verified {
        records: count,
        head: last,
    })
}

/// RFC 3339 UTC timestamp with milliseconds from Unix milliseconds (no time crate in a pure crate).
pub fn format_timestamp(unix_ms: i64) -> String {
    let secs = unix_ms.div_euclid(1000);
    let ms = unix_ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss) = (sod / 3600, (sod % 3600) / 60, sod % 60);
    if !(0..=9999).contains(&y) {
        // A year of other than four digits: the formatting machinery's widths, as before.
        return format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{ms:03}Z");
    }
    // Digit by digit into a fixed buffer: this runs for a new record in every millisecond, on the
    // request's path, and `format!` cost more than the rest of the record's line.
    let mut out = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut value: i64| {
        for slot in out[at..at + width].iter_mut().rev() {
            *slot = b'0' + (value % 10) as u8;
            value /= 10;
        }
    };
    put(0, 4, y);
    put(5, 2, m.into());
    put(8, 2, d.into());
    put(11, 2, hh);
    put(14, 2, mm);
    put(17, 2, ss);
    put(20, 3, ms);
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses what [`format_timestamp`] writes back to Unix milliseconds.
pub fn parse_timestamp(ts: &str) -> Option<i64> {
    let b = ts.as_bytes();
    if b.len() != 24
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'.'
        || b[23] != b'Z'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = ts.get(r)?;
        if !s.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s, ms) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(y, mo as u32, d as u32);
    Some(((days * 86_400) + h * 3600 + mi * 60 + s) * 1000 + ms)
}

// Howard Hinnant's civil-calendar algorithms.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64, prev: &str, tool: &str) -> AuditRecord {
        AuditRecord {
            program: None,
            ts: format_timestamp(1_796_045_628_123 + seq as i64),
            seq,
            session: "a1b2c3".into(),
            decision: Outcome::Denied,
            reason: Some("policy_denied".into()),
            method: "POST".into(),
            host: "mcp.deepwiki.com".into(),
            port: 443,
            path: Some("/mcp".into()),
            server: Some("deepwiki".into()),
            rpc: Some("tools/call".into()),
            tool: Some(tool.into()),
            rpc_id: Some("7".into()),
            secrets: vec![],
            rule: None,
            source: None,
            hidden: None,
            confirm: None,
            policy: None,
            client: Some("127.0.0.1:40312".into()),
            prompt: None,
            resource: None,
            transport: None,
            local_server: None,
            prev: prev.into(),
        }
    }

    proptest::proptest! {
        /// Splicing the writer's fields into [`LineFields`] gives the very line [`to_line`] gives,
        /// whatever the other fields hold (clipped, escaped, absent).
        #[test]
        fn line_fields_splice_to_the_same_line(
            tool in "\\PC{0,600}",
            path in proptest::option::of("[ -~\u{80}-\u{10ffff}]{0,700}"),
            rpc_id in proptest::option::of("\\PC{0,20}"),
            hidden in proptest::option::of(0u64..1000),
            secrets in proptest::collection::vec("[A-Z_]{1,8}", 0..3),
            seq in 1u64..u64::MAX,
            session in "[ -~\u{80}-\u{10ffff}]{1,40}",
        ) {
            let mut whole = record(seq, &"ab".repeat(32), &tool);
            whole.path = path;
            whole.rpc_id = rpc_id;
            whole.hidden = hidden;
            whole.secrets = secrets;
            whole.policy = Some("cd".repeat(32));
            whole.session = session;
            let fields = LineFields::new(whole.clone());
            let session = LineFields::session_text(&whole.session);
            // Appended after what the buffer already holds, as a batch of lines is built.
            let mut batch = String::from("{}\n");
            fields.push_line(&mut batch, &whole.ts, whole.seq, &session, &whole.prev);
            proptest::prop_assert_eq!(batch, format!("{{}}\n{}", to_line(&whole)));
        }
    }

    /// What `to_line` wrote before it was written by hand: serde's serialisation of the record
    /// (long request-derived fields clipped first), then the invisible characters escaped.
    fn line_via_serde(record: &AuditRecord) -> String {
        let mut clipped = record.clone();
        for field in [
            &mut clipped.path,
            &mut clipped.rpc,
            &mut clipped.tool,
            &mut clipped.prompt,
            &mut clipped.resource,
            &mut clipped.rpc_id,
        ] {
            if field
                .as_ref()
                .is_some_and(|v| v.chars().count() > MAX_FIELD_CHARS)
            {
                *field = field.as_deref().map(clip);
            }
        }
        escape_invisible(&serde_json::to_string(&clipped).unwrap())
    }

    fn any_text() -> impl proptest::strategy::Strategy<Value = String> {
        // Mostly plain ASCII (the fast path), sometimes quotes, escapes, controls, invisible and
        // multi-byte characters, sometimes longer than a field may be.
        proptest::prop_oneof![
            "[ -~]{0,40}",
            "[\"\\\\\u{0}-\u{1f}\u{7f}-\u{9f}a\u{2028}\u{202e}\u{feff}é😀]{0,12}",
            "\\PC{0,20}",
            "[aé]{500,530}",
            "[ -~]{510,520}",
        ]
    }

    fn any_opt() -> impl proptest::strategy::Strategy<Value = Option<String>> {
        proptest::option::of(any_text())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// The hand-written line is byte for byte the one serde writes, for every field set or
        /// absent, any text in it, clipped or not.
        #[test]
        fn the_line_is_the_one_serde_writes(
            (ts, session, reason, method, host, path, server) in
                (any_text(), any_text(), any_opt(), any_text(), any_text(), any_opt(), any_opt()),
            (rpc, tool, rpc_id, rule, source, confirm, policy) in
                (any_opt(), any_opt(), any_opt(), any_opt(), any_opt(), any_opt(), any_opt()),
            (client, prompt, resource, prev) in (any_opt(), any_opt(), any_opt(), any_text()),
            secrets in proptest::collection::vec(any_text(), 0..3),
            (seq, port, hidden) in (proptest::num::u64::ANY, proptest::num::u16::ANY,
                                    proptest::option::of(proptest::num::u64::ANY)),
            decision in proptest::sample::select(vec![
                Outcome::Allowed, Outcome::Denied, Outcome::Failed, Outcome::Filtered,
                Outcome::Held, Outcome::Reloaded, Outcome::ReloadRefused,
            ]),
        ) {
            let record = AuditRecord {
                program: None,
                // Any strings: the hand-written line must match serde's for these too.
                transport: rule.clone(),
                local_server: server.clone(),
                ts, seq, session, decision, reason, method, host, port, path, server, rpc, tool,
                rpc_id, secrets, rule, source, hidden, confirm, policy, client, prompt, resource,
                prev,
            };
            proptest::prop_assert_eq!(to_line(&record), line_via_serde(&record));
        }
    }

    fn chain(n: u64) -> Vec<String> {
        let mut prev = GENESIS.to_string();
        let mut out = vec![];
        for seq in 1..=n {
            let line = to_line(&record(seq, &prev, "read_wiki_contents"));
            prev = line_hash(line.as_bytes());
            out.push(line);
        }
        out
    }

    fn verify_strs(lines: &[String], head: Option<&Head>) -> Result<Verified, ChainError> {
        verify(lines.iter().map(|l| l.as_bytes()), head)
    }

    #[test]
    fn an_intact_chain_verifies_with_its_head() {
        let lines = chain(5);
        let v = verify_strs(&lines, None).unwrap();
        assert_eq!(v.records, 5);
        let head = v.head.unwrap();
        assert_eq!(head.seq, 5);
        assert!(verify_strs(&lines, Some(&head)).is_ok());
        assert_eq!(Head::parse(&head.to_text()), Some(head));
    }

    #[test]
    fn edits_drops_reorders_and_truncation_are_caught() {
        let lines = chain(5);
        let head = verify_strs(&lines, None).unwrap().head.unwrap();

        let mut edited = lines.clone();
        edited[2] = edited[2].replace("read_wiki_contents", "read_wiki_structure");
        assert!(matches!(
            verify_strs(&edited, None),
            Err(ChainError::BrokenLink { line: 4, .. })
        ));

        let mut dropped = lines.clone();
        dropped.remove(1);
        assert!(matches!(
            verify_strs(&dropped, None),
            Err(ChainError::BrokenLink { line: 2, .. })
        ));

        let mut reordered = lines.clone();
        reordered.swap(1, 2);
        assert!(verify_strs(&reordered, None).is_err());

        let cut = lines[..4].to_vec();
        assert!(
            verify_strs(&cut, None).is_ok(),
            "without a head a clean cut cannot be seen"
        );
        assert!(matches!(
            verify_strs(&cut, Some(&head)),
            Err(ChainError::HeadMismatch {
                last_seq: 4,
                head_seq: 5
            })
        ));

        let mut last_edited = lines.clone();
        last_edited[4] = last_edited[4].replace("\"7\"", "\"8\"");
        let edited = verify_strs(&last_edited, Some(&head));
        assert!(
            matches!(
                edited,
                Err(ChainError::HeadHashMismatch { line: 5, seq: 5 })
            ),
            "{edited:?}"
        );

        let mut garbage = lines.clone();
        garbage[0] = "{not json".into();
        assert!(matches!(
            verify_strs(&garbage, None),
            Err(ChainError::Malformed { line: 1, .. })
        ));
    }

    #[test]
    fn control_and_invisible_characters_are_escaped() {
        let line = to_line(&record(
            1,
            GENESIS,
            "evil\n\u{1b}[31m\u{202e}\u{85}\u{2028}",
        ));
        assert!(!line.contains('\n'));
        assert!(!line.chars().any(needs_escape), "{line}");
        assert!(line.contains("\\u202e") && line.contains("\\u0085") && line.contains("\\u2028"));
        let back: AuditRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(
            back.tool.as_deref(),
            Some("evil\n\u{1b}[31m\u{202e}\u{85}\u{2028}")
        );
    }

    #[test]
    fn the_printable_ascii_shortcut_keeps_exactly_what_needs_no_escape() {
        for b in 0u8..0x80 {
            let text = (b as char).to_string();
            assert_eq!(
                is_printable_ascii(&text),
                !needs_escape(b as char),
                "byte {b:#04x}"
            );
        }
        // DEL passes serde_json unescaped: the shortcut must not keep it raw.
        let line = to_line(&record(1, GENESIS, "a\u{7f}b"));
        assert!(line.contains("\\u007f"), "{line}");
    }

    #[test]
    fn invisible_characters_outside_the_bmp_escape_as_surrogate_pairs() {
        let name = "read\u{200b}_wiki\u{e0041}\u{fe0f}\u{61c}\u{1d173}";
        let line = to_line(&record(1, GENESIS, name));
        assert!(
            line.contains("\\u200b")
                && line.contains("\\udb40\\udc41")
                && line.contains("\\ufe0f")
                && line.contains("\\u061c")
                && line.contains("\\ud834\\udd73"),
            "{line}"
        );
        let back: AuditRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(back.tool.as_deref(), Some(name));
    }

    #[test]
    fn huge_request_fields_are_clipped() {
        let mut r = record(1, GENESIS, &"x".repeat(100_000));
        r.path = Some("/p".into());
        let line = to_line(&r);
        assert!(line.len() < 2_000, "{}", line.len());
        let back: AuditRecord = serde_json::from_str(&line).unwrap();
        let tool = back.tool.unwrap();
        assert!(tool.starts_with(&"x".repeat(MAX_FIELD_CHARS)));
        assert!(tool.ends_with(&format!("…[{} more bytes]", 100_000 - MAX_FIELD_CHARS)));
        assert_eq!(back.path.as_deref(), Some("/p"));
    }

    #[test]
    fn a_live_log_may_run_ahead_of_its_head() {
        let lines = chain(5);
        let mid = verify_strs(&lines[..3], None).unwrap().head.unwrap();
        assert!(verify_strs(&lines, Some(&mid)).is_ok());
        let wrong = Head {
            seq: 3,
            hash: line_hash(lines[3].as_bytes()),
        };
        assert!(matches!(
            verify_strs(&lines, Some(&wrong)),
            Err(ChainError::HeadHashMismatch { line: 3, seq: 3 })
        ));
    }

    #[test]
    fn client_is_part_of_the_hashed_line_and_old_logs_without_it_verify() {
        let lines = chain(3);
        assert!(
            lines[0].contains(r#""client":"127.0.0.1:40312""#),
            "{}",
            lines[0]
        );
        // Changing the peer breaks the chain like any other field.
        let mut edited = lines.clone();
        edited[0] = edited[0].replace("127.0.0.1:40312", "127.0.0.1:40313");
        assert!(matches!(
            verify_strs(&edited, None),
            Err(ChainError::BrokenLink { line: 2, .. })
        ));
        // A log written before `client` existed: no such member at all, and it still verifies.
        let mut prev = GENESIS.to_string();
        let mut old = vec![];
        for seq in 1..=3 {
            let line = to_line(&AuditRecord {
                client: None,
                ..record(seq, &prev, "read_wiki_contents")
            });
            assert!(!line.contains("client"), "{line}");
            prev = line_hash(line.as_bytes());
            old.push(line);
        }
        assert_eq!(verify_strs(&old, None).unwrap().records, 3);
        let back: AuditRecord = serde_json::from_str(&old[0]).unwrap();
        assert_eq!(back.client, None);
    }

    #[test]
    fn timestamps_round_trip() {
        for ms in [0i64, 1_796_045_628_123, 951_782_400_000, 4_102_444_799_999] {
            let ts = format_timestamp(ms);
            assert_eq!(parse_timestamp(&ts), Some(ms), "{ts}");
        }
        assert_eq!(format_timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_timestamp(951_782_400_000),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(parse_timestamp("2026-13-01T00:00:00.000Z"), None);
        assert_eq!(parse_timestamp("garbage"), None);
    }

    /// The digit-by-digit stamp writes what the formatting machinery wrote, across the whole
    /// four-digit range and beyond it (where it falls back to `format!`).
    #[test]
    fn timestamps_are_written_as_format_wrote_them() {
        fn by_format(unix_ms: i64) -> String {
            let (secs, ms) = (unix_ms.div_euclid(1000), unix_ms.rem_euclid(1000));
            let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
            let (y, m, d) = civil_from_days(days);
            let (hh, mm, ss) = (sod / 3600, (sod % 3600) / 60, sod % 60);
            format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{ms:03}Z")
        }
        // A fixed-seed walk over ±2,000 years around 1970 and the edges of the four-digit range.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut cases = vec![
            -62_167_219_200_001,
            -62_167_219_200_000,
            253_402_300_799_999,
        ];
        cases.push(253_402_300_800_000);
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            cases.push((x % 126_230_400_000_000) as i64 - 63_115_200_000_000);
        }
        for ms in cases {
            assert_eq!(format_timestamp(ms), by_format(ms), "{ms}");
        }
    }
}
