//! Fuzzes what the proxy reads back from an MCP server, the classifier's response-side sibling: the
//! strict SSE reader and writer (`response::sse`), message reading and list filtering
//! (`read_message`, `filter_lists`, `read_and_filter`, `unreadable_reply`), the session inventory
//! (pinning) and the lock file (`pins::Lock`).
//!
//! Input: byte 0 picks the server rule (bit 0: `list: all`, bit 1: `pin`, bit 2:
//! `allow_annotated: [read_only]`, bit 3: small JSON limits, bits 4-5: the SSE event limit); byte 1
//! mod 8 is a number of cuts, the next that many bytes place them (fractions of the stream's
//! length); the rest is the stream. It is read as an event stream, as one JSON body and as a lock.
//!
//! Invariants (not just "no panic"):
//! - SSE: the items (up to the first error, and that error or `finish`'s verdict) are the same fed
//!   whole, in the chosen chunks and byte by byte; an error repeats on every later call; every
//!   event written back with `write_event` (and the whole stream in canonical form) reads back to
//!   the same items; without an error the items are the events and comments a plain line-by-line
//!   reading finds, and `finish` fails (`Truncated`) exactly when the stream ended inside an event;
//! - messages (each event's data as one session, the whole stream as a JSON body): the shallow read
//!   refuses as non-JSON exactly what the strict parser refuses; a read message's `answered` are its
//!   responses' ids; list filtering matches an independent model of the policy (deny wins, tool /
//!   prompt / resource patterns, annotations on pinned tools, pinning at first sight and against a
//!   lock), with the same `filtered` counts, the same `lock_changed` and the same pin state the
//!   inventory reports; a `rewritten` text parses strictly, holds only entries of the original (in
//!   order, everything else unchanged) and reading it again hides nothing more; `list: all` never
//!   rewrites; a second session holding the lock the first one made reads every message the same;
//!   `unreadable_reply` for an error is a strict JSON-RPC error response for the id;
//! - lock: a lock that parses round-trips through `to_text` (and so does the one a session made).
#![no_main]

use fenzi_policy::mcp::inventory::{CallPin, Inventory, MAX_TOOLS};
use fenzi_policy::json::{self, JsonLimits, Value};
use fenzi_policy::json_text;
use fenzi_policy::mcp::{EndpointPath, RpcId, ServerRule};
use fenzi_policy::pins::{Lock, PinnedTool, ServerPins};
use fenzi_policy::response::sse::{SseError, SseItem, SseReader, write_comment, write_event};
use fenzi_policy::response::{
    Filtered, LISTS, ReadMessage, ResponseError, read_and_filter, read_message, response_limits,
    unreadable_reply,
};
use fenzi_policy::tool_pattern::ToolPattern;
use fenzi_policy::uri_pattern::UriPattern;
use libfuzzer_sys::fuzz_target;
use std::collections::{BTreeSet, HashSet};

/// Large enough for anything written back from a 64 KiB input.
const BIG: usize = 1 << 24;

fn rule(sel: u8) -> ServerRule {
    let limits = if sel & 8 != 0 {
        JsonLimits {
            max_bytes: 256,
            max_depth: 8,
        }
    } else {
        JsonLimits {
            max_bytes: 4096,
            max_depth: 32,
        }
    };
    let mut s = ServerRule::with_tools(
        "fuzz",
        EndpointPath::Exact("/mcp".into()),
        ["get_*", "read_*", "echo"]
            .map(|p| ToolPattern::parse(p).unwrap())
            .to_vec(),
        vec![ToolPattern::parse("read_secret").unwrap()],
        limits,
    );
    s.prompts = ["summary", "p_*"]
        .map(|p| ToolPattern::parse(p).unwrap())
        .to_vec();
    s.resources = ["file:///docs/*", "db://?/t"]
        .map(|p| UriPattern::parse(p).unwrap())
        .to_vec();
    s.filter_lists = sel & 1 == 0;
    s.pin = sel & 2 != 0;
    // Only ever set on a pinned server (the config refuses it otherwise).
    s.allow_read_only = s.pin && sel & 4 != 0;
    s
}

/// The same rule with limits nothing written back from the input can reach (an ASCII-escaped
/// rewrite may be several times longer than the original).
fn roomy(rule: &ServerRule) -> ServerRule {
    let mut r = rule.clone();
    r.limits.max_bytes = BIG;
    r
}

fn big_limits(rule: &ServerRule) -> JsonLimits {
    JsonLimits {
        max_bytes: BIG,
        ..response_limits(rule.limits)
    }
}

// ---------------------------------------------------------------- SSE

/// The items read and how the stream ended (the first error, or `finish`'s verdict).
type Run = (Vec<SseItem>, Result<(), SseError>);

fn read_chunks<'a>(max_event: usize, chunks: impl IntoIterator<Item = &'a [u8]>) -> Run {
    let mut r = SseReader::new(max_event);
    let mut items = vec![];
    for chunk in chunks {
        r.push(chunk);
        loop {
            match r.next_item() {
                Ok(Some(item)) => items.push(item),
                Ok(None) => break,
                Err(e) => {
                    assert_eq!(r.next_item(), Err(e), "an error does not repeat");
                    r.push(b"\n\n");
                    assert_eq!(r.next_item(), Err(e), "an error does not stick");
                    assert_eq!(r.finish(), Err(e), "finish forgets the error");
                    return (items, Err(e));
                }
            }
        }
    }
    (items, r.finish())
}

/// A plain line-by-line reading that checks nothing: `true` for an event, `false` for a comment,
/// and whether the stream ended inside an event (a partial line or fields not yet dispatched).
fn reference_kinds(stream: &[u8]) -> (Vec<bool>, bool) {
    let mut pieces: Vec<&[u8]> = stream.split(|&b| b == b'\n').collect();
    let partial = !pieces.pop().unwrap_or_default().is_empty();
    let mut kinds = vec![];
    let mut pending = false;
    for line in pieces {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if pending {
                kinds.push(true);
            }
            pending = false;
        } else if line[0] == b':' {
            kinds.push(false);
        } else {
            pending = true;
        }
    }
    (kinds, partial || pending)
}

fn check_sse(stream: &[u8], cuts: &[usize], max_event: usize) -> Run {
    let whole = read_chunks(max_event, [stream]);
    let mut chunks = vec![];
    let mut at = 0;
    for &cut in cuts {
        chunks.push(&stream[at..cut]);
        at = cut;
    }
    chunks.push(&stream[at..]);
    assert_eq!(
        read_chunks(max_event, chunks.iter().copied()),
        whole,
        "cut at {cuts:?}, the stream reads differently"
    );
    assert_eq!(
        read_chunks(max_event, stream.chunks(1)),
        whole,
        "byte by byte, the stream reads differently"
    );

    let (items, end) = &whole;
    let (kinds, inside) = reference_kinds(stream);
    let got: Vec<bool> = items
        .iter()
        .map(|i| matches!(i, SseItem::Event(_)))
        .collect();
    match end {
        Ok(()) | Err(SseError::Truncated) => {
            assert_eq!(got, kinds, "not the events and comments the lines hold");
            assert_eq!(
                end.is_err(),
                inside,
                "finish must fail exactly when the stream ends inside an event"
            );
        }
        Err(_) => assert!(
            kinds.starts_with(&got),
            "items before an error are not the lines' events and comments"
        ),
    }

    // Written back canonically, each event and the whole stream read back the same.
    let mut canonical = vec![];
    for item in items {
        match item {
            SseItem::Event(e) => {
                let mut one = vec![];
                write_event(&mut one, e, e.data.as_deref());
                assert_eq!(
                    read_chunks(BIG, [one.as_slice()]),
                    (vec![item.clone()], Ok(())),
                    "a written event reads back differently"
                );
                canonical.extend_from_slice(&one);
            }
            SseItem::Comment => write_comment(&mut canonical),
        }
    }
    assert_eq!(
        read_chunks(BIG, [canonical.as_slice()]),
        (items.clone(), Ok(())),
        "the canonical stream reads back differently"
    );
    whole
}

// ---------------------------------------------------------------- messages

/// An independent model of what the policy keeps in a list, and of pinning.
#[derive(Debug, Clone)]
struct Model {
    pin: bool,
    pins: Option<ServerPins>,
    first_sight: bool,
    changed: HashSet<String>,
}

impl Model {
    fn new(pin: bool, entry: Option<ServerPins>) -> Model {
        Model {
            pin,
            pins: entry,
            first_sight: false,
            changed: HashSet::new(),
        }
    }

    /// Shows a listed tool; `true` when it was pinned now.
    fn observe(&mut self, name: &str, entry: &Value) -> bool {
        if !self.pin {
            return false;
        }
        let listed = PinnedTool::from_listed(entry);
        if self.pins.is_none() {
            self.pins = Some(ServerPins::new());
            self.first_sight = true;
        }
        let pins = self.pins.as_mut().unwrap();
        match pins.get(name) {
            Some(p) if p.sha256 == listed.sha256 => false,
            Some(_) => {
                self.changed.insert(name.to_string());
                false
            }
            None if self.first_sight => {
                pins.insert(name.to_string(), listed);
                true
            }
            None => false,
        }
    }

    fn call(&self, name: &str) -> CallPin {
        if !self.pin {
            return CallPin::NotPinned;
        }
        if self.changed.contains(name) {
            return CallPin::Changed;
        }
        match self.pins.as_ref().and_then(|p| p.get(name)) {
            Some(p) => CallPin::Pinned(p.hints()),
            None => CallPin::NotInLock,
        }
    }

    /// Whether an entry of `list` is kept, and whether it was hidden for its pin.
    fn keep(&self, rule: &ServerRule, list: &str, name: &str) -> (bool, bool) {
        match list {
            "tools" => {
                if rule.deny.iter().any(|p| p.matches(name)) {
                    return (false, false);
                }
                let pin = self.call(name);
                let allowed = rule.allow.iter().any(|p| p.matches(name))
                    || matches!(pin, CallPin::Pinned(h) if rule.allow_read_only && h.is_read_only());
                match (allowed, pin) {
                    (false, _) => (false, false),
                    (true, CallPin::NotPinned | CallPin::Pinned(_)) => (true, false),
                    (true, _) => (false, true),
                }
            }
            "prompts" => (rule.prompts.iter().any(|p| p.matches(name)), false),
            _ => (rule.resources.iter().any(|p| p.matches(name)), false),
        }
    }
}

fn rpc_id(v: &Value) -> RpcId {
    match v {
        Value::Number(n) => RpcId::Number(n.clone()),
        Value::String(s) => RpcId::String(s.clone()),
        _ => RpcId::Null,
    }
}

fn messages(whole: &mut Value) -> Vec<&mut Value> {
    match whole {
        Value::Array(items) => items.iter_mut().collect(),
        single => vec![single],
    }
}

/// What the model expects of one message that passed the shallow read.
fn model_read(
    rule: &ServerRule,
    model: &mut Model,
    text: &[u8],
) -> Result<ReadMessage, ResponseError> {
    let mut whole = json::parse(text, &response_limits(rule.limits))
        .expect("the shallow read passed, the strict parse must");
    let mut out = ReadMessage::default();
    let mut hid_any = false;
    for message in messages(&mut whole) {
        let response = message.get("method").is_none();
        let id = if response {
            message.get("id").map(rpc_id)
        } else {
            None
        };
        out.answered.extend(id.clone());
        let Value::Object(members) = message else {
            continue;
        };
        let Some((_, Value::Object(result))) = members.iter_mut().find(|(k, _)| k == "result")
        else {
            continue;
        };
        for (key, value) in result.iter_mut() {
            let Some(&(list, name_key)) = LISTS.iter().find(|(l, _)| l == key) else {
                continue;
            };
            let Value::Array(entries) = value else {
                return Err(ResponseError::ListNotArray(list));
            };
            let names: Vec<Option<String>> = entries
                .iter()
                .map(|e| e.get(name_key).and_then(Value::as_str).map(str::to_owned))
                .collect();
            let mut seen = HashSet::new();
            if names.iter().flatten().any(|n| !seen.insert(n.clone())) {
                return Err(ResponseError::DuplicateName(list));
            }
            if list == "tools" {
                for (entry, name) in entries.iter().zip(&names) {
                    if let Some(name) = name {
                        out.lock_changed |= model.observe(name, entry);
                    }
                }
            }
            if !rule.filter_lists {
                continue;
            }
            let mut kept = vec![];
            let mut changed = 0;
            for (entry, name) in entries.drain(..).zip(&names) {
                let Some(name) = name else { continue };
                let (keep, for_pin) = model.keep(rule, list, name);
                changed += usize::from(for_pin);
                if keep {
                    kept.push(entry);
                }
            }
            let hidden = names.len() - kept.len();
            *entries = kept;
            if hidden > 0 {
                hid_any = true;
                out.filtered.push(Filtered {
                    rpc_id: id.clone(),
                    list,
                    hidden,
                    changed,
                });
            }
        }
    }
    if hid_any {
        out.rewritten = Some(json_text::compact(&whole));
    }
    Ok(out)
}

/// `rewritten` is `original` with only list entries taken out, in order, and everything else kept.
fn only_removed(original: &Value, rewritten: &Value, in_result: bool, list_key: Option<&str>) {
    match (original, rewritten) {
        (Value::Array(a), Value::Array(b)) if list_key.is_some() => {
            let mut rest = a.iter();
            for entry in b {
                assert!(
                    rest.any(|e| e == entry),
                    "result.{} has an entry the original did not have (or out of order)",
                    list_key.unwrap()
                );
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len(), "an array changed length");
            for (x, y) in a.iter().zip(b) {
                only_removed(x, y, false, None);
            }
        }
        (Value::Object(a), Value::Object(b)) => {
            assert_eq!(
                a.iter().map(|m| &m.0).collect::<Vec<_>>(),
                b.iter().map(|m| &m.0).collect::<Vec<_>>(),
                "members changed"
            );
            for ((k, x), (_, y)) in a.iter().zip(b) {
                if in_result && LISTS.iter().any(|(l, _)| l == k) {
                    only_removed(x, y, false, Some(k));
                } else if k == "result" && list_key.is_none() {
                    // `result` of a message (top level or a batch element): the lists are in it.
                    only_removed(x, y, true, None);
                } else {
                    assert_eq!(x, y, "member {k:?} changed");
                }
            }
        }
        (a, b) => assert_eq!(a, b, "a value changed"),
    }
}

fn check_reply(id: &RpcId, why: &ResponseError) {
    let reply = unreadable_reply(id, why);
    let v = json::parse(reply.as_bytes(), &JsonLimits::default())
        .expect("an unreadable reply is not strict JSON");
    assert_eq!(
        v.get("id").map(rpc_id).as_ref(),
        Some(id),
        "reply for another id"
    );
    let error = v.get("error").expect("a reply without error");
    assert!(error.get("message").and_then(Value::as_str).is_some());
    assert_eq!(
        error.get("data").and_then(|d| d.get("reason")),
        Some(&Value::String("upstream_error".into()))
    );
    let rule = roomy(&rule(0));
    let shape = read_message(&rule, reply.as_bytes()).expect("a reply is not a JSON-RPC message");
    assert_eq!(shape.answered, vec![id.clone()]);
    assert!(!shape.has_list);
}

/// Reads `texts` as one session's messages; returns each result.
fn session(
    rule: &ServerRule,
    entry: Option<ServerPins>,
    texts: &[&[u8]],
    reply_id: &str,
) -> (Vec<Result<ReadMessage, ResponseError>>, Inventory) {
    let mut inventory = Inventory::new(rule.pin, entry.clone());
    let mut model = Some(Model::new(rule.pin, entry));
    let mut known: BTreeSet<String> = BTreeSet::new();
    let mut results = vec![];
    for &text in texts {
        let mut twin = inventory.clone();
        let got = read_and_filter(rule, &mut inventory, text);
        assert_eq!(
            got,
            read_and_filter(rule, &mut twin, text),
            "reading is not deterministic"
        );

        // The shallow read is as strict as the parser.
        let shallow = read_message(rule, text);
        let strict = json::parse(text, &response_limits(rule.limits));
        assert_eq!(
            matches!(
                shallow,
                Err(ResponseError::Json(_) | ResponseError::TooLarge(_))
            ),
            strict.is_err(),
            "the shallow read and the strict parser disagree: {shallow:?} / {strict:?}"
        );
        match (&shallow, &got) {
            (Err(a), Err(b)) => assert_eq!(a, b),
            (Err(_), Ok(_)) => panic!("read_and_filter read what read_message refused"),
            (Ok(shape), Ok(m)) => {
                assert_eq!(shape.answered, m.answered);
                if !shape.has_list {
                    assert_eq!(
                        m,
                        &ReadMessage {
                            answered: m.answered.clone(),
                            ..Default::default()
                        }
                    );
                }
            }
            (Ok(_), Err(_)) => {}
        }

        if let Err(e) = &got {
            for id in [
                RpcId::Number("7".into()),
                RpcId::String(reply_id.into()),
                RpcId::Null,
            ] {
                check_reply(&id, e);
            }
        }

        // The model, while it still knows the inventory's state.
        if shallow.is_ok()
            && let Some(m) = model.as_mut()
        {
            let want = model_read(rule, m, text);
            match (&want, &got) {
                (Ok(want), Ok(got)) => {
                    // The text is the server's, checked, with entries cut out; the model writes
                    // its own: the two are compared as JSON.
                    let text_less = |r: &ReadMessage| ReadMessage {
                        rewritten: None,
                        ..r.clone()
                    };
                    assert_eq!(
                        text_less(want),
                        text_less(got),
                        "filtering differs from the model"
                    );
                    let limits = big_limits(rule);
                    let parsed = |r: &ReadMessage| {
                        r.rewritten
                            .as_ref()
                            .map(|t| json::parse(t.as_bytes(), &limits).expect("rewritten is JSON"))
                    };
                    assert_eq!(
                        parsed(want),
                        parsed(got),
                        "the filtered message differs from the model's"
                    );
                }
                (Err(_), Err(_)) => {}
                _ => panic!("model {want:?}, read {got:?}"),
            }
            if got.is_err() && rule.pin {
                // Where a refused message stopped observing is not the model's business.
                model = None;
            }
        }
        if let (Some(m), Ok(whole)) = (&model, &strict) {
            let listed = match whole {
                Value::Array(items) => items.iter().collect(),
                single => vec![single],
            };
            for msg in listed {
                if let Some(Value::Array(entries)) = msg.get("result").and_then(|r| r.get("tools"))
                {
                    for name in entries
                        .iter()
                        .filter_map(|e| e.get("name").and_then(Value::as_str))
                    {
                        if known.len() < MAX_TOOLS {
                            known.insert(name.to_string());
                        }
                    }
                }
            }
            for name in &known {
                assert_eq!(
                    inventory.call(name),
                    m.call(name),
                    "the inventory's pin state of {name:?} differs from the model"
                );
            }
        }

        if let Ok(read) = &got {
            if !rule.filter_lists {
                assert!(
                    read.rewritten.is_none() && read.filtered.is_empty(),
                    "list: all hid entries"
                );
            }
            assert_eq!(
                read.rewritten.is_some(),
                !read.filtered.is_empty(),
                "rewritten without hiding, or hiding without rewriting"
            );
            if !rule.pin {
                assert!(!read.lock_changed, "an unpinned server changed the lock");
            }
            if let Some(rewritten) = &read.rewritten {
                let limits = big_limits(rule);
                let after = json::parse(rewritten.as_bytes(), &limits)
                    .expect("a rewritten message is not strict JSON");
                let before = json::parse(text, &limits).unwrap();
                match (&before, &after) {
                    (Value::Array(a), Value::Array(b)) => {
                        assert_eq!(a.len(), b.len(), "a batch changed length");
                        for (x, y) in a.iter().zip(b) {
                            only_removed(x, y, false, None);
                        }
                    }
                    (a, b) => only_removed(a, b, false, None),
                }
                let again =
                    read_and_filter(&roomy(rule), &mut inventory.clone(), rewritten.as_bytes())
                        .expect("a rewritten message cannot be read again");
                assert_eq!(
                    again,
                    ReadMessage {
                        answered: read.answered.clone(),
                        ..Default::default()
                    },
                    "reading a rewritten message again hides more"
                );
            }
        }
        results.push(got);
    }
    (results, inventory)
}

fn check_lock_round_trip(lock: &Lock) {
    let text = lock.to_text();
    let back = Lock::parse(text.as_bytes()).expect("a lock's text does not parse");
    assert_eq!(&back, lock, "the lock does not round-trip");
    assert_eq!(back.to_text(), text, "the lock's text is not canonical");
}

fn check_messages(rule: &ServerRule, texts: &[&[u8]], reply_id: &str) {
    let (first, inventory) = session(rule, None, texts, reply_id);
    if !rule.pin {
        assert!(inventory.lock_entry().is_none());
        return;
    }
    let entry = inventory.lock_entry().cloned();
    if let Some(pins) = &entry {
        let mut lock = Lock::default();
        lock.servers.insert("fuzz".into(), pins.clone());
        check_lock_round_trip(&lock);
    }
    // The next session, holding the lock the first one made, reads every message the same.
    let (second, next) = session(rule, entry.clone(), texts, reply_id);
    let expected: Vec<_> = first
        .into_iter()
        .map(|r| {
            r.map(|mut m| {
                m.lock_changed = false;
                m
            })
        })
        .collect();
    assert_eq!(
        second, expected,
        "a session with the lock reads differently"
    );
    assert_eq!(
        next.lock_entry(),
        entry.as_ref(),
        "a session with a lock changed it"
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let (ncuts, rest) = match rest.split_first() {
        Some((&n, rest)) => ((n % 8) as usize, rest),
        None => (0, rest),
    };
    let (cut_bytes, stream) = rest.split_at(ncuts.min(rest.len()));
    let mut cuts: Vec<usize> = cut_bytes
        .iter()
        .map(|&b| b as usize * stream.len() / 255)
        .collect();
    cuts.sort_unstable();

    let rule = rule(sel);
    let max_event = [64, 512, 1 << 16, 1 << 16][((sel >> 4) & 3) as usize];

    let (items, _) = check_sse(stream, &cuts, max_event);
    let events: Vec<_> = items
        .iter()
        .filter_map(|i| match i {
            SseItem::Event(e) => e.data.as_deref().map(|d| (d, e.id.as_deref())),
            SseItem::Comment => None,
        })
        .collect();
    if !events.is_empty() {
        let texts: Vec<&[u8]> = events.iter().map(|(d, _)| d.as_bytes()).collect();
        let reply_id = events
            .iter()
            .find_map(|(_, id)| *id)
            .unwrap_or("a\"\\\u{1}é");
        check_messages(&rule, &texts, reply_id);
    }
    check_messages(&rule, &[stream], "body");

    if let Ok(lock) = Lock::parse(stream) {
        check_lock_round_trip(&lock);
    }
});
