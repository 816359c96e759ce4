//! Replacing a fixed set of byte patterns in text that may arrive in chunks, without buffering it:
//! the engine under both substitution (placeholder → value) and scrubbing (value → placeholder;
//! the scrubber drives [`Patterns`] itself, for its encoded forms' edges).
//!
//! Matches are leftmost-longest and never overlap, as a one-shot replace of the whole text would
//! find them. Streaming holds back only the longest suffix of what has arrived that is a proper
//! prefix of some pattern (never more than the longest pattern less one byte), so a chunk that ends
//! in ordinary text (an SSE event's blank line, say) is passed on whole and at once. Everything
//! before that suffix is final: a match starting there would already be complete in the buffer.
//!
//! Patterns are secret material: they are zeroed on drop and never printed.

use super::SecretsError;
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use std::fmt;
use zeroize::Zeroizing;

pub(crate) struct Patterns {
    automaton: AhoCorasick,
    patterns: Vec<Zeroizing<Vec<u8>>>,
    longest: usize,
    /// A bit per (first byte, second byte) pair some pattern starts with: most tails of ordinary
    /// text start no pattern, and this rules them out without comparing against every pattern.
    starts: Vec<u64>,
}

impl Patterns {
    /// `prefilter`: let the automaton skip ahead on the patterns' rare bytes. Right for placeholders
    /// (`fenzi_ph_…`); wrong for values, which start with common bytes, so the prefilter fires on
    /// ordinary text and halves throughput (measured with benches/secrets.rs).
    pub(crate) fn new(
        patterns: Vec<Zeroizing<Vec<u8>>>,
        prefilter: bool,
    ) -> Result<Patterns, SecretsError> {
        let automaton = AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .prefilter(prefilter)
            .build(patterns.iter().map(|p| p.as_slice()))
            .map_err(|e| SecretsError::Matcher(e.to_string()))?;
        let longest = patterns.iter().map(|p| p.len()).max().unwrap_or(0);
        let mut starts = vec![0u64; 1 << 10];
        for p in &patterns {
            // A 1-byte pattern (none is that short in practice) would start every pair.
            let seconds = match p.get(1) {
                Some(&b) => b..=b,
                None => 0..=255,
            };
            if let Some(&first) = p.first() {
                for second in seconds {
                    let pair = pair(first, second);
                    starts[pair >> 6] |= 1 << (pair & 63);
                }
            }
        }
        Ok(Patterns {
            automaton,
            patterns,
            longest,
            starts,
        })
    }

    pub(crate) fn automaton(&self) -> &AhoCorasick {
        &self.automaton
    }

    /// The longest pattern's length.
    pub(crate) fn longest(&self) -> usize {
        self.longest
    }

    /// `hay` with every match of pattern `i` replaced by `with[i]` (a `None` leaves that match as is).
    /// `None` when nothing was replaced.
    pub(crate) fn replace_all<R: AsRef<[u8]>>(
        &self,
        hay: &[u8],
        with: &[Option<R>],
    ) -> Option<Vec<u8>> {
        let mut out: Option<Vec<u8>> = None;
        let mut cursor = 0;
        for m in self.automaton.find_iter(hay) {
            if let Some(replacement) = &with[m.pattern().as_usize()] {
                let buf = out.get_or_insert_with(|| Vec::with_capacity(hay.len()));
                buf.extend_from_slice(&hay[cursor..m.start()]);
                buf.extend_from_slice(replacement.as_ref());
                cursor = m.end();
            }
        }
        let mut buf = out?;
        buf.extend_from_slice(&hay[cursor..]);
        Some(buf)
    }

    /// The length of the longest suffix of `buf` that is a proper prefix of some pattern: the bytes
    /// that must wait for the next chunk.
    pub(crate) fn held_back(&self, buf: &[u8]) -> usize {
        let most = self.longest.saturating_sub(1).min(buf.len());
        (1..=most)
            .rev()
            .find(|&k| {
                let suffix = &buf[buf.len() - k..];
                let may_start = match suffix {
                    // The pairs that start with `first` are the 256 bits of 4 words.
                    [first] => self.starts[usize::from(*first) * 4..][..4]
                        .iter()
                        .any(|&w| w != 0),
                    [a, b, ..] => {
                        let pair = pair(*a, *b);
                        self.starts[pair >> 6] & 1 << (pair & 63) != 0
                    }
                    [] => false,
                };
                may_start
                    && self
                        .patterns
                        .iter()
                        .any(|p| p.len() > k && p.starts_with(suffix))
            })
            .unwrap_or(0)
    }
}

fn pair(a: u8, b: u8) -> usize {
    usize::from(a) << 8 | usize::from(b)
}

impl fmt::Debug for Patterns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Patterns")
            .field("count", &self.patterns.len())
            .finish_non_exhaustive()
    }
}

/// A replace over a stream: [`StreamReplacer::push`] each chunk, then [`StreamReplacer::finish`]. The
/// concatenated output equals [`Patterns::replace_all`] of the concatenated input.
#[derive(Default)]
pub(crate) struct StreamReplacer {
    /// Held-back bytes: a possible start of a match. May hold part of a secret: zeroed on drop.
    carry: Zeroizing<Vec<u8>>,
}

impl StreamReplacer {
    pub(crate) fn push<R: AsRef<[u8]>>(
        &mut self,
        patterns: &Patterns,
        chunk: &[u8],
        with: &[Option<R>],
        out: &mut Vec<u8>,
    ) {
        if self.carry.is_empty() {
            self.step(patterns, chunk, with, out);
        } else {
            let mut buf = Zeroizing::new(std::mem::take(&mut *self.carry));
            buf.extend_from_slice(chunk);
            self.step(patterns, &buf, with, out);
        }
    }

    fn step<R: AsRef<[u8]>>(
        &mut self,
        patterns: &Patterns,
        buf: &[u8],
        with: &[Option<R>],
        out: &mut Vec<u8>,
    ) {
        let boundary = buf.len() - patterns.held_back(buf);
        let mut cursor = 0;
        for m in patterns.automaton.find_iter(buf) {
            if m.start() >= boundary {
                break;
            }
            out.extend_from_slice(&buf[cursor..m.start()]);
            match &with[m.pattern().as_usize()] {
                Some(replacement) => out.extend_from_slice(replacement.as_ref()),
                None => out.extend_from_slice(&buf[m.range()]),
            }
            cursor = m.end();
        }
        let emit_to = cursor.max(boundary);
        out.extend_from_slice(&buf[cursor..emit_to]);
        self.carry.clear();
        self.carry.extend_from_slice(&buf[emit_to..]);
    }

    /// Ends the stream: the held-back bytes are replaced as a last piece of text.
    pub(crate) fn finish<R: AsRef<[u8]>>(
        &mut self,
        patterns: &Patterns,
        with: &[Option<R>],
        out: &mut Vec<u8>,
    ) {
        let carry = Zeroizing::new(std::mem::take(&mut *self.carry));
        match patterns.replace_all(&carry, with) {
            Some(replaced) => out.extend_from_slice(&replaced),
            None => out.extend_from_slice(&carry),
        }
    }

    /// Bytes held back so far.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.carry.len()
    }
}

impl fmt::Debug for StreamReplacer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamReplacer")
            .field("held", &self.carry.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patterns(list: &[&str]) -> Patterns {
        Patterns::new(
            list.iter()
                .map(|p| Zeroizing::new(p.as_bytes().to_vec()))
                .collect(),
            true,
        )
        .unwrap()
    }

    fn streamed(p: &Patterns, with: &[Option<&str>], input: &[u8], cuts: &[usize]) -> Vec<u8> {
        let mut r = StreamReplacer::default();
        let mut out = vec![];
        let mut at = 0;
        for &cut in cuts {
            r.push(p, &input[at..cut], with, &mut out);
            at = cut;
        }
        r.push(p, &input[at..], with, &mut out);
        r.finish(p, with, &mut out);
        out
    }

    fn one_shot(p: &Patterns, with: &[Option<&str>], input: &[u8]) -> Vec<u8> {
        p.replace_all(input, with).unwrap_or_else(|| input.to_vec())
    }

    #[test]
    fn leftmost_longest_and_declined_matches() {
        let p = patterns(&["abc", "abcdef", "cd", "xyz"]);
        let with = [Some("1"), Some("2"), Some("3"), None];
        assert_eq!(one_shot(&p, &with, b"abcdef abcde xyz cd"), b"2 1de xyz 3");
        assert_eq!(p.replace_all(b"nothing here xyz", &with), None);
    }

    #[test]
    fn streaming_equals_one_shot_at_every_split() {
        let p = patterns(&["abc", "abcdef", "cd", "xyz", "aaaa"]);
        let with = [Some("[1]"), Some("[2]"), Some("[3]"), None, Some("[4]")];
        let input = b"aaaaabcdefabcdxyzabcabcdeaaaaaaacd-abcdef";
        let want = one_shot(&p, &with, input);
        for i in 0..=input.len() {
            for j in i..=input.len() {
                assert_eq!(streamed(&p, &with, input, &[i, j]), want, "cuts {i},{j}");
            }
        }
        let every: Vec<usize> = (1..input.len()).collect();
        assert_eq!(streamed(&p, &with, input, &every), want);
    }

    #[test]
    fn only_a_possible_match_start_is_held_back() {
        let p = patterns(&["secret-value-1"]);
        let with = [Some("PH")];
        let mut r = StreamReplacer::default();
        let mut out = vec![];
        r.push(&p, b"data: {\"a\":1}\n\n", &with, &mut out);
        assert_eq!(r.held(), 0);
        assert_eq!(out, b"data: {\"a\":1}\n\n");
        r.push(&p, b"data: secret-val", &with, &mut out);
        assert_eq!(r.held(), "secret-val".len());
        r.push(&p, b"ue-1\n\n", &with, &mut out);
        assert_eq!(r.held(), 0);
        assert_eq!(out, b"data: {\"a\":1}\n\ndata: PH\n\n");
        // A held-back start that turns out not to match is released.
        r.push(&p, b"secret-", &with, &mut out);
        r.push(&p, b"other", &with, &mut out);
        r.finish(&p, &with, &mut out);
        assert!(out.ends_with(b"secret-other"));
    }
}
