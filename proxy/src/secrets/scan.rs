//! Finding this session's minted placeholders in a request: the method, the target's authority, path
//! and query, header names and values (including the user:password inside `Basic` credentials), and
//! the body, fed in chunks as it arrives. The answer is a list of [`Sighting`]s (secret name and
//! position, with the header's or query parameter's name) for the decision in
//! `fenzi_policy::secret_use`, which compares them against a secret's positions.
//!
//! Every part is scanned as it is and after [`spelling::normalize`](super::spelling::normalize), so
//! percent-encoded and JSON-`\u`-escaped spellings are found too, and so is a literal placeholder
//! whose first bytes an escape in front of it would swallow when decoded (`%5` + `fenzi_ph_…` reads
//! as `%5f` + `enzi_ph_…`: whoever reads the raw text still sees the placeholder). ASCII case is
//! ignored (hyper lower-cases header
//! names, DNS lower-cases host names; a case-folded copy of a 256-bit token is still that token).
//! Only the exact minted tokens match: the shared prefix alone, or a token from another session,
//! is ordinary text.
//!
//! Matching uses the `aho-corasick` crate: one automaton for all placeholders, a single pass that is
//! linear in the input whatever the number of secrets, no regex syntax to escape, well kept (it is
//! the literal engine under `regex`). Overlapping matches are reported, so no placeholder can hide
//! another.
//!
//! A body split at any point is found the same: [`BodyScan`] keeps the last `longest − 1` bytes of
//! each view (raw and normalised; one tail while no escape has been seen, when the two are the same)
//! and searches them joined to the next chunk, and its normaliser holds back at most an escape's
//! first five bytes. The fuzz target `placeholder_scanner` checks that a streamed scan
//! finds exactly what [`Scanner::find_in`] finds.

use super::SecretsError;
use super::placeholders::{MIN_RANDOM_CHARS, PREFIX, SecretSet, is_placeholder_byte};
use super::spelling::{Normalizer, is_plain, normalize};
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use fenzi_policy::secret_position::query_params;
use fenzi_policy::secret_use::{Position, Sighting};
use http::{HeaderMap, Method, Uri};
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;

/// Base64 as `Basic` credentials are written, accepting missing padding.
pub(crate) const BASIC_B64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// The base64 payload of a `Basic` credential header value, if it is one.
pub(crate) fn basic_payload(value: &[u8]) -> Option<&[u8]> {
    let value = value.trim_ascii();
    let (scheme, rest) = value.split_at_checked(5)?;
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let rest = rest.strip_prefix(b" ")?.trim_ascii();
    (!rest.is_empty()).then_some(rest)
}

/// The placeholders of one session, compiled for searching.
pub struct Scanner {
    /// Pattern id → secret name.
    names: Vec<String>,
    automaton: AhoCorasick,
    longest: usize,
}

impl Scanner {
    /// A scanner for every placeholder of `set`.
    pub fn new(set: &SecretSet) -> Result<Scanner, SecretsError> {
        Scanner::from_tokens(set.iter().map(|(name, p, _)| (name, p.as_str())))
    }

    /// A scanner for given (name, token) pairs; each token must look like a placeholder (the prefix
    /// and at least 32 placeholder bytes), since the normaliser only decodes placeholder bytes.
    pub fn from_tokens<'a, I>(tokens: I) -> Result<Scanner, SecretsError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut names = vec![];
        let mut patterns: Vec<&str> = vec![];
        for (name, token) in tokens {
            let well_formed = token.strip_prefix(PREFIX).is_some_and(|rest| {
                rest.len() >= MIN_RANDOM_CHARS && rest.bytes().all(is_placeholder_byte)
            });
            if !well_formed {
                return Err(SecretsError::BadPlaceholder {
                    name: name.to_string(),
                });
            }
            names.push(name.to_string());
            patterns.push(token);
        }
        let automaton = AhoCorasickBuilder::new()
            .match_kind(MatchKind::Standard)
            .ascii_case_insensitive(true)
            .build(&patterns)
            .map_err(|e| SecretsError::Matcher(e.to_string()))?;
        let longest = patterns.iter().map(|p| p.len()).max().unwrap_or(0);
        Ok(Scanner {
            names,
            automaton,
            longest,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The secret names of the placeholders in `bytes`, in any recognised spelling, sorted.
    pub fn find_in(&self, bytes: &[u8]) -> Vec<&str> {
        let mut ids = BTreeSet::new();
        self.find_ids(bytes, &mut ids);
        self.names_of(&ids)
    }

    fn find_ids(&self, bytes: &[u8], ids: &mut BTreeSet<usize>) {
        if self.is_empty() || bytes.len() < PREFIX.len() {
            return;
        }
        self.search_normalized(bytes, ids);
        if !is_plain(bytes) {
            self.search_normalized(&normalize(bytes), ids);
        }
    }

    fn search_normalized(&self, text: &[u8], ids: &mut BTreeSet<usize>) {
        for m in self.automaton.find_overlapping_iter(text) {
            ids.insert(m.pattern().as_usize());
        }
    }

    fn names_of(&self, ids: &BTreeSet<usize>) -> Vec<&str> {
        let mut names: Vec<&str> = ids.iter().map(|&i| self.names[i].as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    fn sightings(&self, ids: &BTreeSet<usize>, position: Position, out: &mut Vec<Sighting>) {
        for name in self.names_of(ids) {
            out.push(Sighting::new(name, position));
        }
    }

    /// Placeholders in a host name or authority (a CONNECT target, SNI): [`Position::Authority`].
    pub fn scan_authority(&self, authority: &str) -> Vec<Sighting> {
        let mut ids = BTreeSet::new();
        self.find_ids(authority.as_bytes(), &mut ids);
        let mut out = vec![];
        self.sightings(&ids, Position::Authority, &mut out);
        out
    }

    /// Placeholders in a request head: method, the target's authority (absolute form), path and
    /// query, header names, header values (and the decoded payload of `Basic` credentials).
    pub fn scan_head(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Vec<Sighting> {
        let mut out = vec![];
        if self.is_empty() {
            return out;
        }
        let scan = |bytes: &[u8], position: Position, out: &mut Vec<Sighting>| {
            let mut ids = BTreeSet::new();
            self.find_ids(bytes, &mut ids);
            self.sightings(&ids, position, out);
        };
        scan(method.as_str().as_bytes(), Position::Method, &mut out);
        if let Some(authority) = uri.authority() {
            scan(authority.as_str().as_bytes(), Position::Authority, &mut out);
        }
        scan(uri.path().as_bytes(), Position::Path, &mut out);
        if let Some(query) = uri.query() {
            self.scan_query(query.as_bytes(), &mut out);
        }
        let mut names = BTreeSet::new();
        for (name, value) in headers {
            self.find_ids(name.as_str().as_bytes(), &mut names);
            // Each value on its own, so that the sighting names its header (a secret's positions
            // may allow one header and not another).
            let mut values = BTreeSet::new();
            self.find_ids(value.as_bytes(), &mut values);
            if let Some(payload) = basic_payload(value.as_bytes())
                && let Ok(decoded) = BASIC_B64.decode(payload)
            {
                let decoded = zeroize::Zeroizing::new(decoded);
                self.find_ids(&decoded, &mut values);
            }
            for secret in self.names_of(&values) {
                out.push(Sighting::in_field(
                    secret,
                    Position::HeaderValue,
                    name.as_str(),
                ));
            }
        }
        self.sightings(&names, Position::HeaderName, &mut out);
        out
    }

    /// Placeholders in a query string, each attributed to the parameter it sits in, split as
    /// [`query_params`] splits (and the substituter with it): in a parameter's value,
    /// [`Position::Query`] with the parameter's decoded name; in its name, [`Position::QueryName`];
    /// in a parameter that holds `;`, or anything the whole-string scan finds that no parameter
    /// accounts for, [`Position::Query`] with no name, which no position matches.
    fn scan_query(&self, query: &[u8], out: &mut Vec<Sighting>) {
        let mut attributed = BTreeSet::new();
        let mut unattributed = BTreeSet::new();
        for p in query_params(query) {
            if p.ambiguous {
                self.find_ids(&query[p.piece()], &mut unattributed);
                continue;
            }
            let mut names = BTreeSet::new();
            self.find_ids(&query[p.name.clone()], &mut names);
            self.sightings(&names, Position::QueryName, out);
            attributed.extend(names);
            if let Some(value) = p.value {
                let mut values = BTreeSet::new();
                self.find_ids(&query[value], &mut values);
                let field = String::from_utf8_lossy(&p.decoded_name);
                for secret in self.names_of(&values) {
                    out.push(Sighting::in_field(secret, Position::Query, field.as_ref()));
                }
                attributed.extend(values);
            }
        }
        // Belt and braces: a placeholder cannot hold `&` or `=`, so every one is inside a piece;
        // should a spelling ever straddle them, it is still seen, and counts as no parameter's.
        let mut whole = BTreeSet::new();
        self.find_ids(query, &mut whole);
        unattributed.extend(whole.difference(&attributed).copied());
        self.sightings(&unattributed, Position::Query, out);
    }

    /// `text` safe to log or audit: each placeholder (exact, any case) becomes
    /// `[placeholder:NAME]`; if an escaped spelling remains, the whole text is replaced by
    /// `[redacted: holds the placeholder of NAME]`. Borrowed when there was nothing to hide.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        if self.is_empty() || self.find_in(text.as_bytes()).is_empty() {
            return Cow::Borrowed(text);
        }
        let marks: Vec<String> = self
            .names
            .iter()
            .map(|n| format!("[placeholder:{n}]"))
            .collect();
        let replaced = self.automaton.replace_all(text, &marks);
        let left = self.find_in(replaced.as_bytes());
        if left.is_empty() {
            Cow::Owned(replaced)
        } else {
            Cow::Owned(format!(
                "[redacted: holds the placeholder of {}]",
                left.join(", ")
            ))
        }
    }

    /// A streaming scan of a body.
    pub fn body(&self) -> BodyScan<'_> {
        BodyScan {
            scanner: self,
            normalizer: Normalizer::new(),
            normalized: vec![],
            tail: vec![],
            raw_tail: None,
            found: BTreeSet::new(),
        }
    }

    /// The placeholders in a whole body: [`Position::Body`] sightings.
    pub fn scan_body(&self, body: &[u8]) -> Vec<Sighting> {
        let mut ids = BTreeSet::new();
        self.find_ids(body, &mut ids);
        let mut out = vec![];
        self.sightings(&ids, Position::Body, &mut out);
        out
    }
}

impl fmt::Debug for Scanner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scanner")
            .field("secrets", &self.names)
            .finish_non_exhaustive()
    }
}

/// A body scan under way: [`BodyScan::push`] each chunk as it arrives, then [`BodyScan::finish`].
pub struct BodyScan<'s> {
    scanner: &'s Scanner,
    normalizer: Normalizer,
    /// Scratch space for one chunk's normal form.
    normalized: Vec<u8>,
    /// The last `longest − 1` normalised bytes: a placeholder that ends in the next chunk starts here.
    tail: Vec<u8>,
    /// The same for the raw bytes, once an escape made the two views differ (`None` before).
    raw_tail: Option<Vec<u8>>,
    found: BTreeSet<usize>,
}

impl BodyScan<'_> {
    pub fn push(&mut self, chunk: &[u8]) {
        if self.scanner.is_empty() {
            return;
        }
        if self.raw_tail.is_none() && self.normalizer.is_idle() && is_plain(chunk) {
            // No escape so far: the raw and normalised views are the same text.
            search_joined(self.scanner, &mut self.tail, chunk, &mut self.found);
            return;
        }
        let raw_tail = self.raw_tail.get_or_insert_with(|| self.tail.clone());
        search_joined(self.scanner, raw_tail, chunk, &mut self.found);
        let mut normalized = std::mem::take(&mut self.normalized);
        normalized.clear();
        self.normalizer.push(chunk, &mut normalized);
        search_joined(self.scanner, &mut self.tail, &normalized, &mut self.found);
        self.normalized = normalized;
    }

    /// True when some placeholder has been found so far.
    pub fn found_any(&self) -> bool {
        !self.found.is_empty()
    }

    /// Ends the body: [`Position::Body`] sightings, one per secret found.
    pub fn finish(mut self) -> Vec<Sighting> {
        let mut rest = vec![];
        self.normalizer.finish(&mut rest);
        if !rest.is_empty() {
            search_joined(self.scanner, &mut self.tail, &rest, &mut self.found);
        }
        let mut out = vec![];
        self.scanner
            .sightings(&self.found, Position::Body, &mut out);
        out
    }
}

/// Searches one stretch of a view joined to that view's `tail` (the previous stretches' last
/// `longest − 1` bytes), then keeps the new tail.
fn search_joined(scanner: &Scanner, tail: &mut Vec<u8>, text: &[u8], found: &mut BTreeSet<usize>) {
    let keep = scanner.longest.saturating_sub(1);
    if !tail.is_empty() {
        // Only a placeholder that starts in the tail and ends in the first `keep` bytes of `text`
        // is not wholly inside one of the two; search the joint for those.
        let mut joint = tail.clone();
        joint.extend_from_slice(&text[..text.len().min(keep)]);
        scanner.search_normalized(&joint, found);
    }
    scanner.search_normalized(text, found);
    if text.len() >= keep {
        tail.clear();
        tail.extend_from_slice(&text[text.len() - keep..]);
    } else {
        tail.extend_from_slice(text);
        let excess = tail.len().saturating_sub(keep);
        tail.drain(..excess);
    }
}

impl fmt::Debug for BodyScan<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BodyScan")
            .field("found", &self.scanner.names_of(&self.found))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::spelling::percent_encode;
    use http::{HeaderName, HeaderValue};

    const A: &str = "fenzi_ph_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_xyzAB";
    const B: &str = "fenzi_ph_zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz1";

    fn scanner() -> Scanner {
        Scanner::from_tokens([("A_KEY", A), ("B_KEY", B)]).unwrap()
    }

    #[test]
    fn a_literal_placeholder_whose_first_bytes_an_escape_would_swallow_is_found() {
        // Decoded, `%5f` + `enzi_ph_…` no longer holds the token; the raw text does. Found by the
        // request_head fuzz target.
        let s = scanner();
        for lead in ["%5", "%", "\\u006", "\\u00", "%%5"] {
            let text = format!("avi{lead}{A}.example");
            assert_eq!(s.find_in(text.as_bytes()), ["A_KEY"], "{text}");
            assert_eq!(sighted(&s.scan_authority(&text)), ["A_KEY@authority"]);
            assert!(s.find_in(s.redact(&text).as_bytes()).is_empty());
            for cut in 0..=text.len() {
                let mut scan = s.body();
                scan.push(&text.as_bytes()[..cut]);
                scan.push(&text.as_bytes()[cut..]);
                assert_eq!(
                    sighted(&scan.finish()),
                    ["A_KEY@body"],
                    "{text} cut at {cut}"
                );
            }
        }
        // An escape earlier in the stream than the placeholder, in another chunk.
        let mut scan = s.body();
        scan.push(b"x%41y");
        scan.push(format!("%5{}", &A[..20]).as_bytes());
        scan.push(&A.as_bytes()[20..]);
        assert_eq!(sighted(&scan.finish()), ["A_KEY@body"]);
    }

    fn sighted(list: &[Sighting]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    /// Every spelling of `token` the scanner must see through.
    fn spellings(token: &str) -> Vec<Vec<u8>> {
        let bytes = token.as_bytes();
        let mut out = vec![bytes.to_vec()];
        // Every byte percent-encoded, upper and lower case.
        out.push(
            bytes
                .iter()
                .flat_map(|b| format!("%{b:02X}").into_bytes())
                .collect(),
        );
        out.push(
            bytes
                .iter()
                .flat_map(|b| format!("%{b:02x}").into_bytes())
                .collect(),
        );
        // Every byte as a JSON \u escape.
        out.push(
            bytes
                .iter()
                .flat_map(|b| format!("\\u{:04x}", b).into_bytes())
                .collect(),
        );
        // Mixed: every third byte escaped, alternating styles.
        out.push(
            bytes
                .iter()
                .enumerate()
                .flat_map(|(i, b)| match i % 3 {
                    0 => format!("%{b:02X}").into_bytes(),
                    1 => format!("\\u00{b:02X}").into_bytes(),
                    _ => vec![*b],
                })
                .collect(),
        );
        // Case-folded.
        out.push(token.to_ascii_lowercase().into_bytes());
        out
    }

    #[test]
    fn finds_every_spelling_and_nothing_that_only_looks_alike() {
        let s = scanner();
        for spelled in spellings(A) {
            let mut text = b"{\"x\":\"".to_vec();
            text.extend_from_slice(&spelled);
            text.extend_from_slice(b"\"}");
            assert_eq!(
                s.find_in(&text),
                ["A_KEY"],
                "{}",
                String::from_utf8_lossy(&text)
            );
        }
        // Lookalikes: the prefix alone, one character changed, one missing, another session's token.
        let mut changed = A.to_string().into_bytes();
        changed[20] = b'!';
        for text in [
            PREFIX.to_string(),
            String::from_utf8(changed).unwrap(),
            A[..A.len() - 1].to_string(),
            "fenzi_ph_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_xyzAC".to_string(),
            format!("{PREFIX}{}", "q".repeat(43)),
        ] {
            assert!(s.find_in(text.as_bytes()).is_empty(), "{text}");
        }
        // Double encoding is out of scope (documented): one level is decoded, not two.
        let double: Vec<u8> = A
            .bytes()
            .flat_map(|b| format!("%25{b:02X}").into_bytes())
            .collect();
        assert!(s.find_in(&double).is_empty());
        // A value-style percent-encoding of a token is the token itself (its bytes are unreserved).
        assert_eq!(percent_encode(A.as_bytes(), true), A.as_bytes());
    }

    #[test]
    fn both_secrets_and_overlaps_are_reported() {
        let s = scanner();
        let text = format!("{B}{A}{B}");
        assert_eq!(s.find_in(text.as_bytes()), ["A_KEY", "B_KEY"]);
        // A token nested so that a leftmost match would swallow the other's start.
        let text = format!("{}{}", &A[..20], A);
        assert_eq!(s.find_in(text.as_bytes()), ["A_KEY"]);
    }

    #[test]
    fn scans_every_part_of_the_head() {
        let s = scanner();
        let basic = BASIC_B64.encode(format!("user:{A}"));
        let mut headers = HeaderMap::new();
        headers.insert(
            "authorization",
            HeaderValue::from_str(&format!("Basic {basic}")).unwrap(),
        );
        headers.insert(
            HeaderName::from_bytes(B.to_ascii_lowercase().as_bytes()).unwrap(),
            HeaderValue::from_static("1"),
        );
        let uri: Uri = format!("/p/{B}?q=%66{}", &A[1..]).parse().unwrap();
        let got = sighted(&s.scan_head(&Method::GET, &uri, &headers));
        assert_eq!(
            got,
            [
                "B_KEY@path",
                "A_KEY@query:q",
                "A_KEY@header_value:authorization",
                "B_KEY@header_name",
            ]
        );

        // Method and absolute-form authority.
        let method = Method::from_bytes(A.as_bytes()).unwrap();
        let uri: Uri = format!("http://{}.example.com/", B.to_ascii_lowercase())
            .parse()
            .unwrap();
        let got = sighted(&s.scan_head(&method, &uri, &HeaderMap::new()));
        assert_eq!(got, ["A_KEY@method", "B_KEY@authority"]);
        assert_eq!(
            sighted(&s.scan_authority(&format!("{}.evil.example:443", A.to_ascii_lowercase()))),
            ["A_KEY@authority"]
        );
    }

    #[test]
    fn query_sightings_name_their_parameter_and_header_sightings_their_header() {
        let s = scanner();
        let spelled = format!("%66{}", &A[1..]);
        let uri: Uri = format!(
            "/p?key={A}&q={spelled}&k%65y={}&{B}=1&a=x;b={A}&flag&=&%6b%65%79=a={A}",
            A.to_ascii_lowercase()
        )
        .parse()
        .unwrap();
        let mut headers = HeaderMap::new();
        headers.append("x-api-key", HeaderValue::from_static("none"));
        headers.append("X-Api-Key", HeaderValue::from_str(A).unwrap());
        headers.append(
            "referer",
            HeaderValue::from_str(&format!("https://x.test/?k={spelled}")).unwrap(),
        );
        headers.append(
            "x-creds",
            HeaderValue::from_str(&format!("basic {}", BASIC_B64.encode(format!("u:{B}"))))
                .unwrap(),
        );
        let got = sighted(&s.scan_head(&Method::GET, &uri, &headers));
        assert_eq!(
            got,
            [
                "A_KEY@query:key",
                "A_KEY@query:q",
                "A_KEY@query:key",
                "B_KEY@query_name",
                "A_KEY@query:key",
                "A_KEY@query",
                "A_KEY@header_value:x-api-key",
                "A_KEY@header_value:referer",
                "B_KEY@header_value:x-creds",
            ]
        );
        // A name that is not UTF-8 once decoded is kept (lossily), never dropped.
        let uri: Uri = format!("/p?%ff%fe={A}").parse().unwrap();
        let got = s.scan_head(&Method::GET, &uri, &HeaderMap::new());
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].position, Position::Query);
        assert_eq!(got[0].field.as_deref(), Some("\u{fffd}\u{fffd}"));
    }

    #[test]
    fn basic_credentials_in_every_form() {
        let s = scanner();
        for (scheme, payload) in [
            ("Basic", format!("{A}:")),
            ("basic", format!("user:{A}")),
            ("BASIC", A.to_string()),
        ] {
            for padded in [true, false] {
                let mut encoded = BASIC_B64.encode(&payload);
                if !padded {
                    encoded = encoded.trim_end_matches('=').to_string();
                }
                let mut headers = HeaderMap::new();
                headers.insert(
                    "authorization",
                    HeaderValue::from_str(&format!("{scheme} {encoded}")).unwrap(),
                );
                let got = sighted(&s.scan_head(&Method::GET, &Uri::from_static("/"), &headers));
                assert_eq!(
                    got,
                    ["A_KEY@header_value:authorization"],
                    "{scheme} {payload}"
                );
            }
        }
        // Percent-encoded inside the Basic payload.
        let payload = format!("u:%66{}", &A[1..]);
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-creds",
            HeaderValue::from_str(&format!("Basic {}", BASIC_B64.encode(payload))).unwrap(),
        );
        let got = sighted(&s.scan_head(&Method::GET, &Uri::from_static("/"), &headers));
        assert_eq!(got, ["A_KEY@header_value:x-creds"]);
        // Not Basic: base64 elsewhere is not decoded (documented scope).
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-data",
            HeaderValue::from_str(&BASIC_B64.encode(A)).unwrap(),
        );
        assert!(
            s.scan_head(&Method::GET, &Uri::from_static("/"), &headers)
                .is_empty()
        );
        assert_eq!(basic_payload(b"Basicx"), None);
        assert_eq!(basic_payload(b"Basic "), None);
        assert_eq!(basic_payload(b"  Basic  YQ==  "), Some(&b"YQ=="[..]));
    }

    /// Streams `body` split at `cuts` and returns the names found.
    fn streamed(s: &Scanner, body: &[u8], cuts: &[usize]) -> Vec<String> {
        let mut scan = s.body();
        let mut at = 0;
        for &cut in cuts {
            scan.push(&body[at..cut]);
            at = cut;
        }
        scan.push(&body[at..]);
        scan.finish().into_iter().map(|s| s.secret).collect()
    }

    #[test]
    fn a_placeholder_split_at_every_chunk_boundary_is_found_in_every_spelling() {
        let s = scanner();
        for spelled in spellings(A) {
            let mut body = b"data: {\"k\": \"".to_vec();
            body.extend_from_slice(&spelled);
            body.extend_from_slice(b"\"}\n\n");
            for cut in 0..=body.len() {
                assert_eq!(streamed(&s, &body, &[cut]), ["A_KEY"], "cut at {cut}");
            }
            // Two cuts, a few bytes apart, all through the token.
            for cut in 0..body.len().saturating_sub(3) {
                assert_eq!(streamed(&s, &body, &[cut, cut + 3]), ["A_KEY"]);
            }
            // One byte at a time.
            let cuts: Vec<usize> = (1..body.len()).collect();
            assert_eq!(streamed(&s, &body, &cuts), ["A_KEY"]);
        }
    }

    #[test]
    fn a_placeholder_at_the_end_of_a_mebibyte_body_is_found() {
        let s = scanner();
        let mut body = vec![b'x'; 1 << 20];
        let at = body.len() - A.len();
        body[at..].copy_from_slice(A.as_bytes());
        assert_eq!(s.scan_body(&body).len(), 1);
        // In 16 KiB chunks, and with the token split over the last boundary.
        let cuts: Vec<usize> = (1..64).map(|i| i * 16384).chain([body.len() - 7]).collect();
        assert_eq!(streamed(&s, &body, &cuts), ["A_KEY"]);
        // Without it: nothing.
        body[at..].fill(b'x');
        assert!(s.scan_body(&body).is_empty());
        assert!(streamed(&s, &body, &cuts).is_empty());
    }

    #[test]
    fn tokens_that_are_not_placeholders_are_refused_and_debug_is_names_only() {
        assert!(Scanner::from_tokens([("X", "short")]).is_err());
        assert!(
            Scanner::from_tokens([("X", "fenzi_ph_has a space and is long enough ok")]).is_err()
        );
        let s = scanner();
        let text = format!("{s:?}");
        assert!(
            text.contains("A_KEY") && !text.contains(&A[PREFIX.len()..]),
            "{text}"
        );
        let mut scan = s.body();
        scan.push(A.as_bytes());
        assert!(scan.found_any());
        let text = format!("{scan:?}");
        assert!(
            text.contains("A_KEY") && !text.contains(&A[PREFIX.len()..]),
            "{text}"
        );
    }

    #[test]
    fn redaction_hides_every_spelling() {
        let s = scanner();
        assert!(matches!(s.redact("/v1/plain"), Cow::Borrowed("/v1/plain")));
        assert_eq!(s.redact(&format!("/v1/{A}/x")), "/v1/[placeholder:A_KEY]/x");
        assert_eq!(
            s.redact(&format!("{}.evil.example", A.to_ascii_lowercase())),
            "[placeholder:A_KEY].evil.example"
        );
        let escaped = format!("/v1/%66{}", &A[1..]);
        assert_eq!(
            s.redact(&escaped),
            "[redacted: holds the placeholder of A_KEY]"
        );
    }

    #[test]
    fn an_empty_scanner_finds_nothing() {
        let s = Scanner::from_tokens([]).unwrap();
        assert!(s.is_empty());
        assert!(s.find_in(A.as_bytes()).is_empty());
        let mut scan = s.body();
        scan.push(A.as_bytes());
        assert!(scan.finish().is_empty());
    }
}
