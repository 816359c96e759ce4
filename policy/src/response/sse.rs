//! A strict, incremental reader of `text/event-stream` bodies (the WHATWG server-sent events
//! format) as MCP servers send them: bytes go in as they arrive ([`SseReader::push`]), whole
//! events and comments come out ([`SseReader::next_item`]), and only the event being read is held,
//! so a stream open for hours costs what its largest event costs.
//!
//! Stricter than the format, so that fenzi and the client cannot read one stream two ways:
//! - UTF-8 only, no byte order mark; lines end in LF or CRLF (a bare CR, which some readers take
//!   as a line end and others do not, is refused);
//! - fields are `data`, `event`, `id` and `retry`; any other is refused (a reader ignores it, a
//!   lenient one might not); `event`, `id` and `retry` at most once per event; `retry` digits only;
//!   `id` without NUL;
//! - an event or line longer than the limit is refused rather than buffered without end;
//! - a stream that ends inside an event is refused ([`SseReader::finish`]).
//!
//! Writing an event back ([`write_event`]) is canonical: `event`, `id`, `retry`, then one `data:`
//! line per line of data, LF line ends, comments reduced to a bare `:` (a keep-alive carries no
//! text fenzi has not read).

use std::fmt;

/// One event as read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    pub event: Option<String>,
    pub id: Option<String>,
    pub retry: Option<String>,
    /// The data lines joined by LF, or `None` when the event had no `data` field.
    pub data: Option<String>,
}

/// What the reader yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseItem {
    Event(SseEvent),
    /// A comment line (its text is dropped).
    Comment,
}

/// Why a stream cannot be read strictly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("an event larger than {0} bytes")]
    TooLarge(usize),
    #[error("invalid UTF-8 in line {0}")]
    InvalidUtf8(u64),
    #[error("a byte order mark at the start of the stream")]
    ByteOrderMark,
    #[error("a bare CR in line {0} (lines end in LF or CRLF)")]
    BareCr(u64),
    #[error("an unknown field in line {0}")]
    UnknownField(u64),
    #[error("a repeated event, id or retry field in line {0}")]
    RepeatedField(u64),
    #[error("an invalid id or retry field in line {0}")]
    InvalidField(u64),
    #[error("the stream ended inside an event")]
    Truncated,
}

/// Reads one stream. Feed it with [`push`](SseReader::push), drain it with
/// [`next_item`](SseReader::next_item) until `Ok(None)`, repeat; call
/// [`finish`](SseReader::finish) at the end.
#[derive(Debug)]
pub struct SseReader {
    /// Bytes not yet consumed as whole lines.
    buf: Vec<u8>,
    /// How far into `buf` no LF was found.
    scanned: usize,
    max_event: usize,
    /// Bytes in the event being read so far (its lines).
    event_bytes: usize,
    line: u64,
    started: bool,
    pending: Option<SseEvent>,
    failed: Option<SseError>,
}

impl SseReader {
    /// A reader refusing events (and lines) over `max_event` bytes.
    pub fn new(max_event: usize) -> SseReader {
        SseReader {
            buf: Vec::new(),
            scanned: 0,
            max_event,
            event_bytes: 0,
            line: 0,
            started: false,
            pending: None,
            failed: None,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole event or comment, `Ok(None)` when more bytes are needed. After an error,
    /// every call returns it again.
    pub fn next_item(&mut self) -> Result<Option<SseItem>, SseError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let result = self.read_item();
        if let Err(e) = result {
            self.failed = Some(e);
            self.buf = Vec::new();
        }
        result
    }

    /// At the end of the stream: `Ok` when it ended between events.
    pub fn finish(&self) -> Result<(), SseError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        if self.pending.is_some() || !self.buf.is_empty() {
            return Err(SseError::Truncated);
        }
        Ok(())
    }

    fn read_item(&mut self) -> Result<Option<SseItem>, SseError> {
        if !self.started {
            if self.buf.len() < 3 && b"\xEF\xBB\xBF".starts_with(&self.buf) {
                return Ok(None);
            }
            if self.buf.starts_with(b"\xEF\xBB\xBF") {
                return Err(SseError::ByteOrderMark);
            }
            self.started = true;
        }
        let mut consumed = 0;
        let result = loop {
            let rest = &self.buf[consumed..];
            let from = self.scanned.saturating_sub(consumed);
            let Some(at) = rest[from..].iter().position(|&b| b == b'\n') else {
                self.scanned = self.buf.len();
                if self.event_bytes + rest.len() > self.max_event {
                    break Err(SseError::TooLarge(self.max_event));
                }
                break Ok(None);
            };
            let end = from + at;
            let line_start = consumed;
            consumed += end + 1;
            self.scanned = consumed;
            self.line += 1;
            let mut line = &self.buf[line_start..line_start + end];
            if let Some(stripped) = line.strip_suffix(b"\r") {
                line = stripped;
            }
            self.event_bytes += end + 1;
            if self.event_bytes > self.max_event {
                break Err(SseError::TooLarge(self.max_event));
            }
            if line.contains(&b'\r') {
                break Err(SseError::BareCr(self.line));
            }
            let line = match std::str::from_utf8(line) {
                Ok(line) => line.to_owned(),
                Err(_) => break Err(SseError::InvalidUtf8(self.line)),
            };
            match self.line_item(&line) {
                Ok(Some(item)) => break Ok(Some(item)),
                Ok(None) => continue,
                Err(e) => break Err(e),
            }
        };
        self.buf.drain(..consumed);
        self.scanned = self.scanned.saturating_sub(consumed);
        result
    }

    /// One line (without its end): a dispatched event, a comment, or nothing yet.
    fn line_item(&mut self, line: &str) -> Result<Option<SseItem>, SseError> {
        if line.is_empty() {
            self.event_bytes = 0;
            return Ok(self.pending.take().map(SseItem::Event));
        }
        if line.starts_with(':') {
            if self.pending.is_none() {
                self.event_bytes = 0;
            }
            return Ok(Some(SseItem::Comment));
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        let n = self.line;
        let event = self.pending.get_or_insert_with(SseEvent::default);
        let once = |slot: &mut Option<String>| {
            if slot.is_some() {
                return Err(SseError::RepeatedField(n));
            }
            *slot = Some(value.to_string());
            Ok(())
        };
        match field {
            "data" => match &mut event.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => event.data = Some(value.to_string()),
            },
            "event" => once(&mut event.event)?,
            "id" if value.contains('\0') => return Err(SseError::InvalidField(n)),
            "id" => once(&mut event.id)?,
            "retry" if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) => {
                return Err(SseError::InvalidField(n));
            }
            "retry" => once(&mut event.retry)?,
            _ => return Err(SseError::UnknownField(n)),
        }
        Ok(None)
    }
}

/// Appends `event` in canonical form, with `data` (LF-separated lines) in place of its own.
pub fn write_event(out: &mut Vec<u8>, event: &SseEvent, data: Option<&str>) {
    for (name, value) in [
        ("event", &event.event),
        ("id", &event.id),
        ("retry", &event.retry),
    ] {
        if let Some(value) = value {
            field(out, name, value);
        }
    }
    if let Some(data) = data {
        for line in data.split('\n') {
            field(out, "data", line);
        }
    }
    out.push(b'\n');
}

/// Appends a comment that carries no text.
pub fn write_comment(out: &mut Vec<u8>) {
    out.extend_from_slice(b":\n");
}

fn field(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.push(b'\n');
}

impl fmt::Display for SseItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseItem::Comment => f.write_str("comment"),
            SseItem::Event(e) => write!(f, "event {:?}", e.event.as_deref().unwrap_or("message")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(chunks: &[&[u8]]) -> Result<Vec<SseItem>, SseError> {
        let mut r = SseReader::new(1 << 16);
        let mut out = vec![];
        for c in chunks {
            r.push(c);
            while let Some(item) = r.next_item()? {
                out.push(item);
            }
        }
        r.finish()?;
        Ok(out)
    }

    fn data_event(data: &str) -> SseItem {
        SseItem::Event(SseEvent {
            event: Some("message".into()),
            data: Some(data.into()),
            ..Default::default()
        })
    }

    #[test]
    fn events_come_out_whole_however_the_bytes_are_split() {
        let stream = b"event: message\r\ndata: {\"a\":1}\r\n\r\n: ping\n\nevent: message\ndata: [1,\ndata: 2]\n\n";
        let whole = read_all(&[stream]).unwrap();
        assert_eq!(
            whole,
            vec![
                data_event("{\"a\":1}"),
                SseItem::Comment,
                data_event("[1,\n2]")
            ]
        );
        for split in 0..stream.len() {
            let (a, b) = stream.split_at(split);
            assert_eq!(read_all(&[a, b]).unwrap(), whole, "split at {split}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(read_all(&bytes).unwrap(), whole);
    }

    #[test]
    fn fields_are_read_as_the_format_says() {
        let items = read_all(&[b"id: 7\nretry: 100\ndata\ndata:x\n\n"]).unwrap();
        assert_eq!(
            items,
            vec![SseItem::Event(SseEvent {
                event: None,
                id: Some("7".into()),
                retry: Some("100".into()),
                data: Some("\nx".into()),
            })]
        );
        // Only one space after the colon is removed.
        let items = read_all(&[b"data:  two\n\n"]).unwrap();
        assert_eq!(
            items,
            vec![SseItem::Event(SseEvent {
                data: Some(" two".into()),
                ..Default::default()
            })]
        );
    }

    #[test]
    fn ambiguous_streams_are_refused() {
        assert_eq!(
            read_all(&[b"data: a\rdata: b\n\n"]),
            Err(SseError::BareCr(1))
        );
        assert_eq!(read_all(&[b"Data: a\n\n"]), Err(SseError::UnknownField(1)));
        assert_eq!(read_all(&[b"foo: a\n\n"]), Err(SseError::UnknownField(1)));
        assert_eq!(
            read_all(&[b"event: a\nevent: b\ndata: x\n\n"]),
            Err(SseError::RepeatedField(2))
        );
        assert_eq!(
            read_all(&[b"retry: 1x\n\n"]),
            Err(SseError::InvalidField(1))
        );
        assert_eq!(read_all(&[b"id: a\0b\n\n"]), Err(SseError::InvalidField(1)));
        assert_eq!(
            read_all(&[b"data: \xff\n\n"]),
            Err(SseError::InvalidUtf8(1))
        );
        assert_eq!(
            read_all(&[b"\xEF\xBB\xBFdata: x\n\n"]),
            Err(SseError::ByteOrderMark)
        );
        assert_eq!(read_all(&[b"data: x\n"]), Err(SseError::Truncated));
        assert_eq!(read_all(&[b"data: x"]), Err(SseError::Truncated));
    }

    #[test]
    fn size_is_bounded_per_event_not_per_stream() {
        let mut r = SseReader::new(64);
        for _ in 0..1000 {
            r.push(b"data: 0123456789\n\n");
            assert!(matches!(r.next_item(), Ok(Some(SseItem::Event(_)))));
        }
        r.push(&[b'a'; 65]);
        assert_eq!(r.next_item(), Err(SseError::TooLarge(64)));
        let mut r = SseReader::new(64);
        r.push(b"data: 0123456789\n".repeat(4).as_slice());
        assert_eq!(r.next_item(), Err(SseError::TooLarge(64)));
    }

    #[test]
    fn events_are_written_canonically() {
        let mut out = vec![];
        let e = SseEvent {
            event: Some("message".into()),
            id: Some("3".into()),
            retry: None,
            data: Some("ignored".into()),
        };
        write_event(&mut out, &e, Some("{\"a\":\n1}"));
        write_comment(&mut out);
        assert_eq!(
            out,
            b"event: message\nid: 3\ndata: {\"a\":\ndata: 1}\n\n:\n"
        );
    }
}
