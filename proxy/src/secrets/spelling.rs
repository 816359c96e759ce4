//! How a token may be spelled in HTTP text, both ways: the normaliser that undoes the spellings a
//! placeholder realistically takes on its way out (so the scanner sees through them), and the
//! encoders that write a value in the spelling of the place it goes (or that an upstream may echo it
//! in).
//!
//! A placeholder is made only of `[A-Za-z0-9_-]`, so the only realistic re-spellings of it are
//! per-character escapes of those bytes: percent-encoding (`%66enzi_ph_…`, either hex case) and JSON
//! `\u` escapes (`\u0066enzi_ph_…`). The normaliser decodes exactly those escapes when they stand for
//! a placeholder byte and leaves every other byte alone, one level deep. Out of scope, by design:
//! base64 or hex of a whole body or value, double encoding (`%2566`), HTML entities, or a token
//! split across fields. A placeholder is worthless outside this session's proxy, so the scanner's
//! job is to catch the leaks that happen by accident or by a naive prompt, not to out-think an
//! encoder; the guarantee that matters (a value is only ever sent to its bound host) does not depend
//! on it.
//!
//! Escape bytes (`%`, `\`) never occur inside an escape, so decoding is context-free: every `%` or
//! `\` starts a fresh attempt. That is what lets [`Normalizer`] work on a stream, holding back at most
//! five bytes, and produce exactly what [`normalize`] produces on the whole input.

use super::placeholders::is_placeholder_byte;

/// The longest raw spelling of one placeholder byte (`\u0066`).
pub const MAX_ESCAPE_LEN: usize = 6;

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decodes the escape at the start of `input` when it stands for a placeholder byte: `%HH` or
/// `\uHHHH`. `None` when `input` does not start with such an escape (whatever follows).
fn decode_escape(input: &[u8]) -> Option<(u8, usize)> {
    match input {
        [b'%', h, l, ..] => {
            let byte = hex_value(*h)? << 4 | hex_value(*l)?;
            is_placeholder_byte(byte).then_some((byte, 3))
        }
        [b'\\', b'u', a, b, c, d, ..] => {
            let mut code: u32 = 0;
            for &digit in [a, b, c, d] {
                code = code << 4 | u32::from(hex_value(digit)?);
            }
            let byte = u8::try_from(code).ok()?;
            is_placeholder_byte(byte).then_some((byte, 6))
        }
        _ => None,
    }
}

/// Could `partial` still grow into an escape that [`decode_escape`] accepts?
fn may_become_escape(partial: &[u8]) -> bool {
    match partial {
        [b'%'] | [b'\\'] | [b'\\', b'u'] => true,
        [b'%', h] => hex_value(*h).is_some(),
        [b'\\', b'u', rest @ ..] if rest.len() < 4 => rest.iter().all(|&b| hex_value(b).is_some()),
        _ => false,
    }
}

/// The whole of `input` with every escape of a placeholder byte decoded. The reference the streaming
/// [`Normalizer`] is tested against: a plain left-to-right loop.
pub fn normalize(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        match decode_escape(&input[i..]) {
            Some((byte, used)) => {
                out.push(byte);
                i += used;
            }
            None => {
                out.push(input[i]);
                i += 1;
            }
        }
    }
    out
}

/// True when `input` has no byte that could start an escape, so it is its own normal form.
pub fn is_plain(input: &[u8]) -> bool {
    memchr::memchr2(b'%', b'\\', input).is_none()
}

/// [`normalize`] over a stream: feed chunks with [`Normalizer::push`], then [`Normalizer::finish`].
/// The concatenated output equals `normalize` of the concatenated input, however it was chunked.
#[derive(Debug, Default, Clone)]
pub struct Normalizer {
    /// An escape under way: starts with `%` or `\`, at most five bytes.
    pending: Vec<u8>,
}

impl Normalizer {
    pub fn new() -> Normalizer {
        Normalizer::default()
    }

    /// True when nothing is held back.
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }

    pub fn push(&mut self, mut input: &[u8], out: &mut Vec<u8>) {
        while !input.is_empty() {
            if self.pending.is_empty() {
                // Copy everything up to the next escape byte in one go.
                match memchr::memchr2(b'%', b'\\', input) {
                    None => {
                        out.extend_from_slice(input);
                        return;
                    }
                    Some(at) => {
                        out.extend_from_slice(&input[..at]);
                        self.pending.push(input[at]);
                        input = &input[at + 1..];
                    }
                }
                continue;
            }
            self.pending.push(input[0]);
            input = &input[1..];
            self.settle(out);
        }
    }

    /// Resolves `pending` as far as it can: a complete escape is decoded, a dead end gives up its
    /// first byte and the rest is tried again (it may hold the next escape's start).
    fn settle(&mut self, out: &mut Vec<u8>) {
        loop {
            if let Some((byte, used)) = decode_escape(&self.pending) {
                debug_assert_eq!(used, self.pending.len());
                out.push(byte);
                self.pending.clear();
                return;
            }
            if self.pending.is_empty() || may_become_escape(&self.pending) {
                return;
            }
            out.push(self.pending[0]);
            let rest = self.pending.split_off(1);
            self.pending.clear();
            // Bytes up to the next escape byte are plain; the rest waits as the new escape.
            let at = memchr::memchr2(b'%', b'\\', &rest).unwrap_or(rest.len());
            out.extend_from_slice(&rest[..at]);
            self.pending.extend_from_slice(&rest[at..]);
        }
    }

    /// Ends the stream: whatever is held back was not an escape and is emitted as is.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.pending);
    }
}

/// Percent-encodes every byte outside RFC 3986's unreserved set (`A-Za-z0-9-._~`), as a value must be
/// before it goes into a query string or a form body.
pub fn percent_encode(bytes: &[u8], upper: bool) -> Vec<u8> {
    let digits: &[u8; 16] = if upper {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    let mut out = Vec::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[
                b'%',
                digits[usize::from(b >> 4)],
                digits[usize::from(b & 15)],
            ]);
        }
    }
    out
}

/// The value as it appears inside a JSON string (serde_json's escaping, without the quotes).
/// `None` for a value that is not UTF-8: JSON text cannot carry it.
pub fn json_escape(bytes: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let quoted = serde_json::to_string(text).ok()?;
    Some(quoted.as_bytes()[1..quoted.len() - 1].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_of_placeholder_bytes_are_decoded_and_nothing_else() {
        let cases: [(&[u8], &[u8]); 14] = [
            (b"%66enzi", b"fenzi"),
            (b"%66%65%6E%7a%69", b"fenzi"),
            (b"\\u0066enzi", b"fenzi"),
            (b"\\u005F\\u002d", b"_-"),
            // Not a placeholder byte: left alone.
            (b"%2F%20%25", b"%2F%20%25"),
            (b"\\u002f\\u00e9", b"\\u002f\\u00e9"),
            // Incomplete or malformed escapes.
            (b"%6", b"%6"),
            (b"%%66", b"%f"),
            (b"\\\\u0066", b"\\f"),
            (b"\\u006", b"\\u006"),
            (b"\\U0066", b"\\U0066"),
            (b"\\u00\\u0066", b"\\u00f"),
            // One level only.
            (b"%2566", b"%2566"),
            (b"\\u0025\x36\x36", b"\\u002566"),
        ];
        for (input, want) in cases {
            assert_eq!(normalize(input), want, "{}", String::from_utf8_lossy(input));
            let mut n = Normalizer::new();
            let mut out = vec![];
            for b in input {
                n.push(std::slice::from_ref(b), &mut out);
            }
            n.finish(&mut out);
            assert_eq!(
                out,
                want,
                "byte by byte: {}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn streaming_equals_one_shot_at_every_split() {
        let input: &[u8] =
            b"a%66b\\u0066c%%6F%6\\u00%2F\\u005fd%41\\\\u0041%4\\u00411%zz\\u12345%41%";
        let want = normalize(input);
        for i in 0..=input.len() {
            for j in i..=input.len() {
                let mut n = Normalizer::new();
                let mut out = vec![];
                n.push(&input[..i], &mut out);
                n.push(&input[i..j], &mut out);
                n.push(&input[j..], &mut out);
                n.finish(&mut out);
                assert_eq!(out, want, "split at {i},{j}");
            }
        }
    }

    #[test]
    fn encoders() {
        assert_eq!(
            percent_encode(b"a b&c=d/\xff~", true),
            b"a%20b%26c%3Dd%2F%FF~"
        );
        assert_eq!(percent_encode(b"a b", false), b"a%20b");
        assert_eq!(json_escape(b"a\"b\\c/d\te").unwrap(), b"a\\\"b\\\\c/d\\te");
        assert_eq!(json_escape("é".as_bytes()).unwrap(), "é".as_bytes());
        assert_eq!(json_escape(b"\xff"), None);
        assert!(is_plain(b"abc"));
        assert!(!is_plain(b"a%c"));
        assert!(!is_plain(b"a\\c"));
    }
}
