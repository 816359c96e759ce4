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
//!
//! The other way, a value is written as the encoders in common use write it, so the scrubber can
//! find a value an upstream echoes: [`JSON_STYLES`] (which characters each JSON library turns into
//! `\uXXXX`, in which case, and whether it writes `\/`) and [`percent_styles`] (the safe sets of the
//! common URL encoders, either hex case, `%20` or `+` for a space). Each style is one spelling of a
//! value; a token made of letters, digits, `-` and `_` has the same spelling in all of them.

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
    percent_encode_with(
        bytes,
        PercentStyle {
            safe: UNRESERVED,
            upper,
            plus: false,
        },
    )
}

const LOWER_HEX: &[u8; 16] = b"0123456789abcdef";
const UPPER_HEX: &[u8; 16] = b"0123456789ABCDEF";

/// RFC 3986's unreserved punctuation (with letters and digits, the bytes never percent-encoded).
const UNRESERVED: &[u8] = b"-._~";

/// How one URL encoder writes a value: the bytes besides letters and digits it leaves as they are,
/// the case of its hex digits, and whether a space becomes `+`.
#[derive(Debug, Clone, Copy)]
pub struct PercentStyle {
    pub safe: &'static [u8],
    pub upper: bool,
    pub plus: bool,
}

/// Every percent-encoding style the scrubber looks for: each safe set below, in either hex case,
/// with `%20` or `+` for a space.
pub fn percent_styles() -> impl Iterator<Item = PercentStyle> {
    const SAFE_SETS: [&[u8]; 5] = [
        // RFC 3986 (Go's `url.QueryEscape`, Rust's `form_urlencoded` aside, most libraries).
        UNRESERVED,
        // Python's `urllib.parse.quote` (safe="/" by default).
        b"-._~/",
        // JavaScript's `encodeURIComponent`.
        b"-._~!'()*",
        // JavaScript's `encodeURI`, a whole URL echoed.
        b"-._~!'()*;,/?:@&=+$#",
        // WHATWG `application/x-www-form-urlencoded` (`URLSearchParams`, browsers' forms).
        b"*-._",
    ];
    SAFE_SETS.into_iter().flat_map(|safe| {
        [(true, false), (false, false), (true, true), (false, true)]
            .into_iter()
            .map(move |(upper, plus)| PercentStyle { safe, upper, plus })
    })
}

/// `bytes` percent-encoded in `style`.
pub fn percent_encode_with(bytes: &[u8], style: PercentStyle) -> Vec<u8> {
    let digits = if style.upper { UPPER_HEX } else { LOWER_HEX };
    let mut out = Vec::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || style.safe.contains(&b) {
            out.push(b);
        } else if b == b' ' && style.plus {
            out.push(b'+');
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

/// How one JSON encoder writes a string: beyond what JSON requires (`\"`, `\\`, control
/// characters), which characters it writes as `\uXXXX`, in which hex case, whether it writes `/` as
/// `\/`, and whether `"` becomes `\u0022`.
#[derive(Debug, Clone, Copy)]
pub struct JsonStyle {
    pub escape: fn(char) -> bool,
    pub upper: bool,
    pub slash: bool,
    pub quote_as_u: bool,
}

fn escape_none(_: char) -> bool {
    false
}

fn escape_non_ascii(c: char) -> bool {
    !c.is_ascii()
}

/// Go's `encoding/json`: HTML-safe, and the two JavaScript line separators.
fn escape_go(c: char) -> bool {
    matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}')
}

/// Gson's default HTML-safe writer.
fn escape_gson(c: char) -> bool {
    matches!(c, '<' | '>' | '&' | '=' | '\'' | '\u{2028}' | '\u{2029}')
}

/// .NET's `System.Text.Json` default encoder: everything outside printable ASCII and the
/// HTML-sensitive characters.
fn escape_dotnet(c: char) -> bool {
    !c.is_ascii() || matches!(c, '<' | '>' | '&' | '\'' | '+' | '`' | '\u{7f}')
}

/// The JSON encoders in common use, as [`JsonStyle`]s.
pub const JSON_STYLES: [JsonStyle; 8] = {
    const fn style(escape: fn(char) -> bool, upper: bool, slash: bool) -> JsonStyle {
        JsonStyle {
            escape,
            upper,
            slash,
            quote_as_u: false,
        }
    }
    [
        // serde_json, JavaScript's `JSON.stringify`, Jackson, Python with `ensure_ascii=False`.
        style(escape_none, false, false),
        // The same with `\/` (PHP with `JSON_UNESCAPED_UNICODE`, some JavaScript libraries).
        style(escape_none, false, true),
        // Python's `json.dumps`.
        style(escape_non_ascii, false, false),
        // PHP's `json_encode`.
        style(escape_non_ascii, false, true),
        // Jackson with `ESCAPE_NON_ASCII`.
        style(escape_non_ascii, true, false),
        style(escape_go, false, false),
        style(escape_gson, false, false),
        JsonStyle {
            escape: escape_dotnet,
            upper: true,
            slash: false,
            quote_as_u: true,
        },
    ]
};

/// The value as `style` writes it inside a JSON string (without the quotes). `None` for a value that
/// is not UTF-8: JSON text cannot carry it.
pub fn json_escape_with(bytes: &[u8], style: JsonStyle) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let digits = if style.upper { UPPER_HEX } else { LOWER_HEX };
    let mut out = Vec::with_capacity(bytes.len());
    let unit = |out: &mut Vec<u8>, unit: u16| {
        out.extend_from_slice(b"\\u");
        for shift in [12, 8, 4, 0] {
            out.push(digits[usize::from(unit >> shift & 15)]);
        }
    };
    for c in text.chars() {
        match c {
            '"' if style.quote_as_u => unit(&mut out, 0x22),
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '/' if style.slash => out.extend_from_slice(b"\\/"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if c < ' ' || (style.escape)(c) => {
                for &u in c.encode_utf16(&mut [0; 2]).iter() {
                    unit(&mut out, u);
                }
            }
            c => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    Some(out)
}

/// The value as it appears inside a JSON string (serde_json's escaping, without the quotes).
/// `None` for a value that is not UTF-8: JSON text cannot carry it.
pub fn json_escape(bytes: &[u8]) -> Option<Vec<u8>> {
    json_escape_with(bytes, JSON_STYLES[0])
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

    #[test]
    fn json_styles_write_what_their_libraries_write() {
        let value = "k\"\\/<&>='+`é😀";
        let spelled = |i: usize| {
            String::from_utf8(json_escape_with(value.as_bytes(), JSON_STYLES[i]).unwrap()).unwrap()
        };
        // The first style is serde_json's own, and what `json_escape` writes.
        let serde = serde_json::to_string(value).unwrap();
        assert_eq!(spelled(0), serde[1..serde.len() - 1]);
        assert_eq!(
            spelled(0).as_bytes(),
            json_escape(value.as_bytes()).unwrap()
        );
        assert_eq!(spelled(0), r#"k\"\\/<&>='+`é😀"#);
        assert_eq!(spelled(1), r#"k\"\\\/<&>='+`é😀"#);
        assert_eq!(spelled(2), r#"k\"\\/<&>='+`\u00e9\ud83d\ude00"#);
        assert_eq!(spelled(3), r#"k\"\\\/<&>='+`\u00e9\ud83d\ude00"#);
        assert_eq!(spelled(4), r#"k\"\\/<&>='+`\u00E9\uD83D\uDE00"#);
        assert_eq!(spelled(5), r#"k\"\\/\u003c\u0026\u003e='+`é😀"#);
        assert_eq!(spelled(6), r#"k\"\\/\u003c\u0026\u003e\u003d\u0027+`é😀"#);
        assert_eq!(
            spelled(7),
            r#"k\u0022\\/\u003C\u0026\u003E=\u0027\u002B\u0060\u00E9\uD83D\uDE00"#
        );
        // Every style is JSON that reads back as the value.
        for style in JSON_STYLES {
            let text = format!(
                "\"{}\"",
                String::from_utf8(json_escape_with(value.as_bytes(), style).unwrap()).unwrap()
            );
            assert_eq!(serde_json::from_str::<String>(&text).unwrap(), value);
        }
        assert_eq!(json_escape_with(b"\xff", JSON_STYLES[0]), None);
    }

    #[test]
    fn percent_styles_cover_the_common_safe_sets() {
        let value = b"a b/c~d*e!f+g";
        let spellings: Vec<String> = percent_styles()
            .map(|s| String::from_utf8(percent_encode_with(value, s)).unwrap())
            .collect();
        for want in [
            "a%20b%2Fc~d%2Ae%21f%2Bg",
            "a%20b%2fc~d%2ae%21f%2bg",
            "a+b%2Fc~d%2Ae%21f%2Bg",
            "a%20b/c~d%2Ae%21f%2Bg",
            "a%20b%2Fc~d*e!f%2Bg",
            "a%20b/c~d*e!f+g",
            "a+b%2Fc%7Ed*e%21f%2Bg",
        ] {
            assert!(spellings.iter().any(|s| s == want), "{want}");
        }
        assert_eq!(percent_styles().count(), 20);
        assert_eq!(percent_encode(value, true), spellings[0].as_bytes());
    }
}
