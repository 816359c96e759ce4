//! A secret value inside a binary-to-text encoding, as an upstream may reflect it: base64 (an echoed
//! `Basic` header, a JWT's claims, a Kubernetes secret, a debug dump) and hex. This module knows
//! what such an encoding of a value looks like wherever the value sits in a longer encoded run, and
//! what replaces it; [`super::scrub`] finds and replaces it in responses.
//!
//! # Base64: a core and two edge characters
//!
//! Base64 writes each group of 3 bytes as 4 characters of 6 bits. A value inside a longer run
//! starts at byte 0, 1 or 2 of a group (its *alignment*), so it is written in one of three ways. Each
//! has a **core**: the characters made only of the value's bits, the same whatever surrounds the
//! value. The cores are what is looked for, in the standard and the URL-safe alphabet. Padding lies
//! outside every core, so a run with or without `=` is found alike.
//!
//! At alignment 1 or 2 the character just before the core holds the value's first 4 or 2 bits next
//! to its neighbour's bits; at the end, the character just after holds the value's last 2 or 4 bits.
//! An **edge** character that holds exactly the value's bits there is taken into the match, so no
//! bit of the value is left behind. An edge may be written escaped, as base64 inside JSON or a URL
//! often is (`\/`, `%2B`, `%2F`). Those same escapes are cores' spellings too: PHP writes `/` as
//! `\/` in JSON, and a query string holds `%2B` and `%2F`. When two values follow each other with
//! nothing between them in one run, the character they share is masked for both.
//!
//! # Hex
//!
//! Two characters per byte, so one core per case (lower and upper) and no edges.
//!
//! # What replaces it: a mask of the same length
//!
//! The matched characters become the encoding of `*` bytes in the value's place. The edge
//! characters keep their neighbours' bits. The run keeps its length, alignment and padding and still
//! decodes to the original bytes, with the value masked (`Basic YWdlbnQ6c2st…` becomes `Basic
//! YWdlbnQ6KioqKioq…`, which decodes to `agent:******…`). The mask depends only on the value's
//! length, so it cannot leak the value. It shows the value's length and where it was.
//!
//! The placeholder was the other candidate, as for a value written as text, but it does not fit. It
//! is not the value's length, and base64 packs 3 bytes into 4 characters. Written in place, it would
//! shift every later byte of the run (a JWT's claims after the token would decode to garbage) and
//! change the padding. Fixing that would mean re-encoding the rest of a run of any length. A marker
//! outside the alphabet would make the whole run fail to decode. So the agent can still read
//! everything around the value, and it sees that the value was withheld. An encoded credential
//! cannot be reused; its placeholder can.
//!
//! Every mask character is a letter or a digit: base64 of `*` at any alignment, with any neighbour
//! bits in an edge, never reaches `+`, `/`, `-` or `_`. So a mask is the same in both alphabets and
//! needs no escaping wherever the core stood: in JSON, a URL or a header value.
//!
//! # How short a core may be
//!
//! A form is looked for only when its core has at least [`MIN_CORE`] characters. Values are at least
//! 8 bytes (shorter ones are refused at load), and the cores of 8 bytes are 10 base64 characters (60
//! of the value's 64 bits at every alignment) or 16 hex digits. So every accepted value is looked for
//! in every form. A chance match of 60 bits in unrelated text does not happen. A value with little
//! entropy matches only where its own bytes are encoded.
//!
//! # Not covered
//!
//! - a line break inside the core (base64 wrapped at 64 or 76 columns, as in MIME and PEM);
//! - hex with separators (`de:ad:be:ef`, spaces), in mixed case, or as `\x` escapes;
//! - other escapes inside a core (`\u002B` from .NET's JSON, `+` decoded to a space by a form
//!   parser), or escapes of escapes;
//! - other encodings (base32, base85, quoted-printable), or a value escaped before it was encoded
//!   (base64 of JSON text that escaped the value): only the value's own bytes are encoded here;
//! - values that overlap (one ending in the bytes another begins with): as for text, the first one
//!   found is replaced and the rest of the other stays.

use zeroize::Zeroizing;

/// The byte a value's bytes become.
pub const MASK_BYTE: u8 = b'*';
/// The fewest characters a core may have to be looked for.
pub const MIN_CORE: usize = 10;

const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Which encoding a [`Form`] is, and where the value sits in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// The value starts at byte `alignment` (0, 1 or 2) of a 3-byte group.
    Base64 {
        alignment: u8,
    },
    Hex {
        upper: bool,
    },
}

/// An edge character: the value's bits in it sit where `bits` has ones.
#[derive(Clone, Copy)]
pub struct Edge {
    bits: u8,
    value: u8,
    masked: u8,
}

impl Edge {
    /// Does this 6-bit character hold exactly the value's bits?
    pub fn accepts(&self, sextet: u8) -> bool {
        sextet & self.bits == self.value
    }

    /// The character with the value's bits masked and its neighbour's bits kept.
    pub fn mask(&self, sextet: u8) -> u8 {
        (sextet & !self.bits & 0x3F) | self.masked
    }
}

/// One encoding of one value: the spellings of its core, the mask that replaces the core, and its
/// edge characters.
pub struct Form {
    pub encoding: Encoding,
    spellings: Vec<Zeroizing<Vec<u8>>>,
    mask: Vec<u8>,
    lead: Option<Edge>,
    trail: Option<Edge>,
}

impl Form {
    /// The texts to look for: the core in each alphabet and escaping it may be written in.
    pub fn spellings(&self) -> &[Zeroizing<Vec<u8>>] {
        &self.spellings
    }

    /// The character before the core that holds the value's first bits (alignment 1 and 2).
    pub fn lead(&self) -> Option<&Edge> {
        self.lead.as_ref()
    }

    /// The character after the core that holds the value's last bits.
    pub fn trail(&self) -> Option<&Edge> {
        self.trail.as_ref()
    }

    /// Writes the replacement of a match: the edge characters taken into it (as 6-bit values, the
    /// neighbour's bits already kept or masked by the caller) around the masked core.
    pub fn write_mask(&self, lead: Option<u8>, trail: Option<u8>, out: &mut Vec<u8>) {
        if let Some(sextet) = lead {
            out.push(STANDARD[usize::from(sextet & 0x3F)]);
        }
        out.extend_from_slice(&self.mask);
        if let Some(sextet) = trail {
            out.push(STANDARD[usize::from(sextet & 0x3F)]);
        }
    }
}

/// Every form of `value` whose core is long enough: base64 at three alignments, hex in two cases.
pub fn forms(value: &[u8]) -> Vec<Form> {
    let mut out: Vec<Form> = (0..3).filter_map(|a| base64_form(value, a)).collect();
    for upper in [false, true] {
        let core = Zeroizing::new(hex_text(value, upper));
        let mask = hex_text(&vec![MASK_BYTE; value.len()], upper);
        if core.len() >= MIN_CORE && !out.iter().any(|f| f.spellings.contains(&core)) {
            out.push(Form {
                encoding: Encoding::Hex { upper },
                spellings: vec![core],
                mask,
                lead: None,
                trail: None,
            });
        }
    }
    out
}

fn hex_text(bytes: &[u8], upper: bool) -> Vec<u8> {
    if upper {
        hex::encode_upper(bytes).into_bytes()
    } else {
        hex::encode(bytes).into_bytes()
    }
}

/// The 6-bit values base64 makes of `bytes` (a multiple of 3 long).
fn sextets(bytes: &[u8]) -> Zeroizing<Vec<u8>> {
    let mut out = Zeroizing::new(Vec::with_capacity(bytes.len() / 3 * 4));
    for g in bytes.chunks_exact(3) {
        out.extend_from_slice(&[
            g[0] >> 2,
            (g[0] & 3) << 4 | g[1] >> 4,
            (g[1] & 15) << 2 | g[2] >> 6,
            g[2] & 63,
        ]);
    }
    out
}

/// The 6-bit values of `value` at `alignment`, the bytes around it zero.
fn aligned_sextets(value: &[u8], alignment: usize) -> Zeroizing<Vec<u8>> {
    let mut bytes = Zeroizing::new(vec![0u8; alignment]);
    bytes.extend_from_slice(value);
    let groups = bytes.len().div_ceil(3);
    bytes.resize(groups * 3, 0);
    sextets(&bytes)
}

fn base64_form(value: &[u8], alignment: usize) -> Option<Form> {
    let (start, end) = (8 * alignment, 8 * (alignment + value.len()));
    let (first_full, end_full) = (start.div_ceil(6), end / 6);
    if end_full < first_full + MIN_CORE {
        return None;
    }
    let real = aligned_sextets(value, alignment);
    let masked = aligned_sextets(&vec![MASK_BYTE; value.len()], alignment);
    // The value's bits in character `i`: the low `start - 6i`.. bits of the lead, the high ones of
    // the trail.
    let edge = |i: usize, bits: u8| Edge {
        bits,
        value: real[i] & bits,
        masked: masked[i] & bits,
    };
    let lead = (start % 6 != 0).then(|| {
        let i = start / 6;
        let k = 6 * (i + 1) - start;
        edge(i, (1u8 << k) - 1)
    });
    let trail = (end % 6 != 0).then(|| {
        let i = end / 6;
        let k = end - 6 * i;
        edge(i, ((1u8 << k) - 1) << (6 - k))
    });
    let core = &real[first_full..end_full];
    let in_alphabet = |alphabet: &[u8; 64]| -> Zeroizing<Vec<u8>> {
        Zeroizing::new(core.iter().map(|&s| alphabet[usize::from(s)]).collect())
    };
    let standard = in_alphabet(STANDARD);
    let mut spellings = vec![];
    let mut add = |s: Vec<u8>| {
        let s = Zeroizing::new(s);
        if !spellings.contains(&s) {
            spellings.push(s);
        }
    };
    add(standard.to_vec());
    add(in_alphabet(URL_SAFE).to_vec());
    // The standard alphabet's `/` and `+` escaped as JSON and URLs write them.
    add(escaped(&standard, |c| (c == b'/').then_some(&b"\\/"[..])));
    for (plus, slash) in [(&b"%2B"[..], &b"%2F"[..]), (b"%2b", b"%2f")] {
        add(escaped(&standard, |c| match c {
            b'+' => Some(plus),
            b'/' => Some(slash),
            _ => None,
        }));
    }
    Some(Form {
        encoding: Encoding::Base64 {
            alignment: alignment as u8,
        },
        spellings,
        mask: masked[first_full..end_full]
            .iter()
            .map(|&s| STANDARD[usize::from(s)])
            .collect(),
        lead,
        trail,
    })
}

fn escaped(text: &[u8], escape: impl Fn(u8) -> Option<&'static [u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for &c in text {
        match escape(c) {
            Some(e) => out.extend_from_slice(e),
            None => out.push(c),
        }
    }
    out
}

/// The 6-bit value of a base64 character, in either alphabet.
fn sextet_of(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' | b'-' => Some(62),
        b'/' | b'_' => Some(63),
        _ => None,
    }
}

/// Could `b` be part of an edge character's spelling (a base64 character, or the start of `\/`,
/// `%2B`, `%2F`)?
pub fn is_edge_byte(b: u8) -> bool {
    sextet_of(b).is_some() || b == b'%' || b == b'\\'
}

/// The base64 character that ends `text`: its 6-bit value and how many bytes it is spelled with.
pub fn char_before(text: &[u8]) -> Option<(u8, usize)> {
    match text {
        [.., b'%', b'2', b'B' | b'b'] => Some((62, 3)),
        [.., b'%', b'2', b'F' | b'f'] => Some((63, 3)),
        [.., b'\\', b'/'] => Some((63, 2)),
        [.., c] => sextet_of(*c).map(|s| (s, 1)),
        [] => None,
    }
}

/// What starts a text, as an edge character.
#[derive(Debug, PartialEq, Eq)]
pub enum After {
    /// A base64 character: its 6-bit value and how many bytes it is spelled with.
    Char(u8, usize),
    /// Not a base64 character.
    None,
    /// Cannot tell yet: the text ends before the character does.
    NeedMore,
}

/// The base64 character that starts `text`.
pub fn char_after(text: &[u8]) -> After {
    match text {
        [] | [b'%'] | [b'%', b'2'] | [b'\\'] => After::NeedMore,
        [b'%', b'2', b'B' | b'b', ..] => After::Char(62, 3),
        [b'%', b'2', b'F' | b'f', ..] => After::Char(63, 3),
        [b'\\', b'/', ..] => After::Char(63, 2),
        [c, ..] => sextet_of(*c).map_or(After::None, |s| After::Char(s, 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use base64::engine::general_purpose::{STANDARD as B64, URL_SAFE_NO_PAD};

    const VALUES: [&[u8]; 4] = [
        b"sk-adv-API-0123456789abcdef",
        b"8bytes!?",
        b"\xff\xfe\xfd?>~~~\x80value with + and / bits",
        b"lin_api_0123456789abcdefghij",
    ];

    fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).position(|w| w == needle)
    }

    /// Replaces the first match of any form's spelling in `text` as the scrubber does: the core,
    /// and the edges when they hold the value's bits.
    fn mask_in(forms: &[Form], text: &[u8]) -> Option<Vec<u8>> {
        for form in forms {
            for spelling in form.spellings() {
                let Some(at) = find(text, spelling) else {
                    continue;
                };
                let end = at + spelling.len();
                let lead = form
                    .lead()
                    .and_then(|e| char_before(&text[..at]).filter(|(s, _)| e.accepts(*s)));
                let trail = form.trail().and_then(|e| match char_after(&text[end..]) {
                    After::Char(s, n) if e.accepts(s) => Some((s, n)),
                    _ => None,
                });
                let mut out = text[..at - lead.map_or(0, |l| l.1)].to_vec();
                form.write_mask(
                    lead.map(|(s, _)| form.lead().unwrap().mask(s)),
                    trail.map(|(s, _)| form.trail().unwrap().mask(s)),
                    &mut out,
                );
                out.extend_from_slice(&text[end + trail.map_or(0, |t| t.1)..]);
                return Some(out);
            }
        }
        None
    }

    #[test]
    fn every_alignment_alphabet_and_padding_is_found_and_decodes_masked() {
        for value in VALUES {
            let forms = forms(value);
            for before in [&b""[..], b"a", b"ab", b"abc", b"user:"] {
                for after in [&b""[..], b":", b"xy", b"tail bytes"] {
                    let data = [before, value, after].concat();
                    let want = [before, &vec![MASK_BYTE; value.len()], after].concat();
                    for (encoded, padded) in [
                        (B64.encode(&data), true),
                        (URL_SAFE_NO_PAD.encode(&data), false),
                    ] {
                        let text = format!("x=\"{encoded}\"");
                        let out = mask_in(&forms, text.as_bytes())
                            .unwrap_or_else(|| panic!("not found: {text}"));
                        let inner = &out[3..out.len() - 1];
                        let decoded = if padded {
                            B64.decode(inner)
                        } else {
                            URL_SAFE_NO_PAD.decode(inner)
                        }
                        .unwrap();
                        assert_eq!(decoded, want, "{text}");
                        assert_eq!(out.len(), text.len());
                    }
                }
            }
        }
    }

    #[test]
    fn hex_in_either_case_is_found_and_masked() {
        for value in VALUES {
            let forms = forms(value);
            for upper in [false, true] {
                let data = [&b"\x01\x02"[..], value, b"\x03"].concat();
                let text = if upper {
                    hex::encode_upper(&data)
                } else {
                    hex::encode(&data)
                };
                let out = mask_in(&forms, text.as_bytes()).unwrap();
                let want = [&b"\x01\x02"[..], &vec![MASK_BYTE; value.len()], b"\x03"].concat();
                assert_eq!(hex::decode(&out).unwrap(), want);
                let letters: Vec<u8> = out
                    .iter()
                    .copied()
                    .filter(u8::is_ascii_alphabetic)
                    .collect();
                assert!(letters.iter().all(|c| c.is_ascii_uppercase() == upper));
            }
        }
    }

    #[test]
    fn escaped_spellings_and_edges_are_found() {
        // A value whose core and edges hold `/` and `+` in the standard alphabet.
        let value = b"\xfb\xff\xbf\xfb\xef\xbe\xfb\xff\xbf\xfb\xef\xbe";
        let forms = forms(value);
        for before in [&b"a"[..], b"ab", b"\xff"] {
            let data = [before, value, b"\xff"].concat();
            let plain = B64.encode(&data);
            for (text, decode) in [
                (plain.replace('/', "\\/"), "json"),
                (plain.replace('+', "%2B").replace('/', "%2F"), "pct"),
                (plain.replace('+', "%2b").replace('/', "%2f"), "pct"),
            ] {
                let out = String::from_utf8(mask_in(&forms, text.as_bytes()).unwrap()).unwrap();
                let unescaped = match decode {
                    "json" => out.replace("\\/", "/"),
                    _ => out
                        .replace("%2B", "+")
                        .replace("%2F", "/")
                        .replace("%2b", "+")
                        .replace("%2f", "/"),
                };
                let want = [before, &vec![MASK_BYTE; value.len()], b"\xff"].concat();
                assert_eq!(B64.decode(unescaped).unwrap(), want, "{text}");
            }
        }
    }

    #[test]
    fn masks_are_letters_whatever_the_neighbours() {
        for value in VALUES {
            for form in forms(value) {
                for neighbour in 0..64u8 {
                    let mut out = vec![];
                    form.write_mask(
                        form.lead().map(|e| e.mask(neighbour)),
                        form.trail().map(|e| e.mask(neighbour)),
                        &mut out,
                    );
                    assert!(
                        out.iter().all(u8::is_ascii_alphanumeric),
                        "{:?}",
                        form.encoding
                    );
                }
            }
        }
    }

    #[test]
    fn the_shortest_value_has_every_form_and_cores_hold_most_of_its_bits() {
        let value = b"12345678";
        let forms = forms(value);
        let kinds: Vec<Encoding> = forms.iter().map(|f| f.encoding).collect();
        assert_eq!(
            kinds,
            [
                Encoding::Base64 { alignment: 0 },
                Encoding::Base64 { alignment: 1 },
                Encoding::Base64 { alignment: 2 },
                // All digits: lower and upper hex are one spelling.
                Encoding::Hex { upper: false },
            ]
        );
        for form in &forms[..3] {
            assert_eq!(form.spellings()[0].len(), MIN_CORE);
        }
        // A text that holds the value with one bit changed is not matched at any alignment.
        let mut near = *value;
        near[3] ^= 1;
        for a in 0..3 {
            let text = B64.encode([&b"ab"[..a], &near[..]].concat());
            assert_eq!(mask_in(&forms, text.as_bytes()), None);
        }
    }

    #[test]
    fn edges_are_parsed_in_every_spelling_and_wait_when_cut() {
        assert_eq!(char_before(b"xyA"), Some((0, 1)));
        assert_eq!(char_before(b"x%2F"), Some((63, 3)));
        assert_eq!(char_before(b"x%2b"), Some((62, 3)));
        assert_eq!(char_before(b"x\\/"), Some((63, 2)));
        assert_eq!(char_before(b"x\""), None);
        assert_eq!(char_before(b""), None);
        assert_eq!(char_after(b"_x"), After::Char(63, 1));
        assert_eq!(char_after(b"%2Bx"), After::Char(62, 3));
        assert_eq!(char_after(b"\\/"), After::Char(63, 2));
        assert_eq!(char_after(b"\\n"), After::None);
        assert_eq!(char_after(b"%41"), After::None);
        assert_eq!(char_after(b"="), After::None);
        for cut in [&b""[..], b"%", b"%2", b"\\"] {
            assert_eq!(char_after(cut), After::NeedMore);
        }
        assert!(is_edge_byte(b'%') && is_edge_byte(b'\\') && is_edge_byte(b'q'));
        assert!(!is_edge_byte(b'\n') && !is_edge_byte(b'"') && !is_edge_byte(b'='));
    }
}
