//! Carrying out a granted [`SecretUse`] on a request: each granted secret's literal placeholder is
//! replaced by its value in header values (inside `Basic` credentials too: decoded, replaced,
//! re-encoded), in the query string (the value percent-encoded), and in the body when the grant
//! covers it. A grant with positions (`in:`, a `token: true` server's `header:Authorization`) is
//! written only in the headers and query parameters they name, whatever else the request holds:
//! the decision already refused a placeholder anywhere else, and this keeps that true here too (the value written in the body's own spelling: JSON-escaped in a JSON body,
//! percent-encoded in a form body, raw otherwise). A `token: true` server's value is added as
//! `Authorization: Bearer <value>` when the decision says so.
//!
//! Only the exact placeholder is replaced. An escaped or case-changed spelling (which the scanner
//! also recognises) is left as it is: it goes only to the secret's own host, which learns nothing.
//! Placeholders of secrets that are not granted are never touched.
//!
//! Bodies: the request path buffers inspected bodies anyway (the decision needs the whole body before
//! a byte goes upstream), so it uses [`Substituter::apply_body`] and then [`set_content_length`]. For
//! a caller that must stream, [`Substituter::body_stream`] replaces across chunk boundaries; the
//! body's length is then unknown in advance, so the caller removes `Content-Length` with
//! [`reframe_chunked`] and lets HTTP/1.1 chunked framing carry it.
//!
//! Headers that receive a value are marked sensitive (HPACK never indexes them). A request a value
//! goes into loses its `Range`, `Request-Range` and `If-Range`: its answer must come whole, since
//! pieces could cut an echoed value where no piece holds it and the scrubber sees it whole in none
//! (the response phase refuses a `206` to it). Nothing here logs.

use super::SecretsError;
use super::placeholders::SecretSet;
use super::replace::{Patterns, StreamReplacer};
use super::scan::{BASIC_B64, basic_payload};
use super::spelling::{json_escape, percent_encode};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use fenzi_policy::secret_position::query_params;
use fenzi_policy::secret_use::{Grant, SecretUse};
use http::header::{
    AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, IF_RANGE, RANGE, TRANSFER_ENCODING,
};
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Uri};
use std::fmt;
use zeroize::Zeroizing;

/// How a body spells the text in it, decided from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// `application/json` or `*/*+json`: a value goes in JSON-escaped.
    Json,
    /// `application/x-www-form-urlencoded`: a value goes in percent-encoded.
    Form,
    /// Anything else: a value goes in as its bytes.
    Raw,
}

impl BodyKind {
    pub fn of(content_type: Option<&HeaderValue>) -> BodyKind {
        let Some(ct) = content_type.and_then(|v| v.to_str().ok()) else {
            return BodyKind::Raw;
        };
        let media = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if media == "application/json" || media.ends_with("+json") {
            BodyKind::Json
        } else if media == "application/x-www-form-urlencoded" {
            BodyKind::Form
        } else {
            BodyKind::Raw
        }
    }
}

/// One session's substitution tables: placeholder `i` is secret `i`'s.
pub struct Substituter {
    names: Vec<String>,
    values: Vec<Zeroizing<Vec<u8>>>,
    placeholders: Patterns,
}

/// Per-request replacement table: `Some(spelled value)` for granted secrets.
type Table = Vec<Option<Zeroizing<Vec<u8>>>>;

impl Substituter {
    pub fn new(set: &SecretSet) -> Result<Substituter, SecretsError> {
        let mut names = vec![];
        let mut values = vec![];
        let mut patterns = vec![];
        for (name, placeholder, value) in set.iter() {
            names.push(name.to_string());
            values.push(Zeroizing::new(value.as_bytes().to_vec()));
            patterns.push(Zeroizing::new(placeholder.as_bytes().to_vec()));
        }
        Ok(Substituter {
            names,
            values,
            placeholders: Patterns::new(patterns, true)?,
        })
    }

    /// The replacement table for the secrets `granted` admits, each value spelled by `spell`.
    fn table(
        &self,
        granted: impl Fn(&str) -> bool,
        spell: impl Fn(&str, &[u8]) -> Result<Vec<u8>, SecretsError>,
    ) -> Result<Table, SecretsError> {
        self.names
            .iter()
            .zip(&self.values)
            .map(|(name, value)| {
                if granted(name) {
                    spell(name, value).map(|v| Some(Zeroizing::new(v)))
                } else {
                    Ok(None)
                }
            })
            .collect()
    }

    fn head_granted<'u>(grant: &'u SecretUse) -> impl Fn(&str) -> bool + 'u {
        move |name| grant.substitute.iter().any(|g| g.secret == name)
    }

    fn body_granted<'u>(grant: &'u SecretUse) -> impl Fn(&str) -> bool + 'u {
        move |name| grant.substitute.iter().any(|g| g.secret == name && g.body)
    }

    /// Applies the head part of an allowed decision: header values, query string, added bearer.
    /// Does nothing for a denial.
    pub fn apply_head(
        &self,
        grant: &SecretUse,
        uri: &mut Uri,
        headers: &mut HeaderMap,
    ) -> Result<(), SecretsError> {
        if !grant.is_allowed() {
            return Ok(());
        }
        if grant.changes_request() {
            headers.remove(RANGE);
            headers.remove(IF_RANGE);
            // Netscape's name for `Range`, which some servers still honour.
            headers.remove("request-range");
        }
        if !grant.substitute.is_empty() {
            for (header, value) in headers.iter_mut() {
                // Only the secrets whose positions include this header (all, without positions).
                let raw = self.raw(|g| g.in_header(header.as_str()), grant);
                if raw.iter().all(Option::is_none) {
                    continue;
                }
                let Some(new) = self.header_value(value.as_bytes(), &raw) else {
                    continue;
                };
                let mut new =
                    HeaderValue::from_bytes(&new).map_err(|_| SecretsError::Unplaceable {
                        name: self.first_granted(grant),
                        place: "a header value",
                    })?;
                new.set_sensitive(true);
                *value = new;
            }
            if let Some(query) = uri.query() {
                let encoded = self.table(Self::head_granted(grant), |_, v| {
                    Ok(percent_encode(v, true))
                })?;
                if let Some(new_query) = self.query(grant, query.as_bytes(), &encoded) {
                    *uri =
                        with_query(uri, &new_query).ok_or_else(|| SecretsError::Unplaceable {
                            name: self.first_granted(grant),
                            place: "the query string",
                        })?;
                }
            }
        }
        if let Some(name) = &grant.add_bearer
            && !headers.contains_key(AUTHORIZATION)
            && let Some(i) = self.names.iter().position(|n| n == name)
        {
            let mut text = Zeroizing::new(b"Bearer ".to_vec());
            text.extend_from_slice(&self.values[i]);
            let mut value =
                HeaderValue::from_bytes(&text).map_err(|_| SecretsError::Unplaceable {
                    name: name.clone(),
                    place: "an Authorization header",
                })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        Ok(())
    }

    /// The raw values of the secrets granted by `grant` whose grant `admits`.
    fn raw(&self, admits: impl Fn(&Grant) -> bool, grant: &SecretUse) -> Vec<Option<&[u8]>> {
        self.names
            .iter()
            .zip(&self.values)
            .map(|(name, value)| {
                grant
                    .substitute
                    .iter()
                    .any(|g| g.secret == *name && admits(g))
                    .then_some(value.as_slice())
            })
            .collect()
    }

    /// The query with granted placeholders replaced, parameter by parameter as the scanner split
    /// it (`query_params`): a secret with positions only in the values of the parameters they
    /// name, one without anywhere in the query. `None` when nothing changed.
    fn query(&self, grant: &SecretUse, query: &[u8], encoded: &Table) -> Option<Vec<u8>> {
        let pick = |admits: &dyn Fn(&Grant) -> bool| -> Vec<Option<&[u8]>> {
            self.names
                .iter()
                .zip(encoded)
                .map(|(name, e)| match e {
                    Some(e)
                        if grant
                            .substitute
                            .iter()
                            .any(|g| g.secret == *name && admits(g)) =>
                    {
                        Some(e.as_slice())
                    }
                    _ => None,
                })
                .collect()
        };
        let mut out = Vec::with_capacity(query.len());
        let mut cursor = 0;
        let mut changed = false;
        let mut splice = |range: std::ops::Range<usize>, table: &[Option<&[u8]>]| {
            out.extend_from_slice(&query[cursor..range.start]);
            match self.placeholders.replace_all(&query[range.clone()], table) {
                Some(new) => {
                    out.extend_from_slice(&new);
                    changed = true;
                }
                None => out.extend_from_slice(&query[range.clone()]),
            }
            cursor = range.end;
        };
        for p in query_params(query) {
            if p.ambiguous {
                splice(
                    p.piece(),
                    &pick(&|g| g.in_query_value(&p.decoded_name, true)),
                );
                continue;
            }
            splice(p.name.clone(), &pick(&|g| g.in_query_name()));
            if let Some(value) = p.value.clone() {
                splice(value, &pick(&|g| g.in_query_value(&p.decoded_name, false)));
            }
        }
        out.extend_from_slice(&query[cursor..]);
        changed.then_some(out)
    }

    /// The new bytes of one header value, or `None` when it holds no granted placeholder.
    fn header_value(&self, value: &[u8], raw: &[Option<&[u8]>]) -> Option<Vec<u8>> {
        if let Some(payload) = basic_payload(value)
            && let Ok(decoded) = BASIC_B64.decode(payload)
        {
            let decoded = Zeroizing::new(decoded);
            if let Some(replaced) = self.placeholders.replace_all(&decoded, raw) {
                let replaced = Zeroizing::new(replaced);
                let mut out = b"Basic ".to_vec();
                out.extend_from_slice(STANDARD.encode(&*replaced).as_bytes());
                return Some(out);
            }
        }
        self.placeholders.replace_all(value, raw)
    }

    fn first_granted(&self, grant: &SecretUse) -> String {
        grant
            .substitute
            .first()
            .map(|g| g.secret.clone())
            .unwrap_or_default()
    }

    /// The value of secret `name` spelled for a body of `kind`.
    fn spell_for_body(kind: BodyKind, name: &str, value: &[u8]) -> Result<Vec<u8>, SecretsError> {
        match kind {
            BodyKind::Raw => Ok(value.to_vec()),
            BodyKind::Form => Ok(percent_encode(value, true)),
            BodyKind::Json => json_escape(value).ok_or_else(|| SecretsError::Unplaceable {
                name: name.to_string(),
                place: "a JSON body",
            }),
        }
    }

    /// The body with granted placeholders replaced, when the grant covers bodies; `None` when
    /// nothing changed. After a change, call [`set_content_length`] with the new length.
    pub fn apply_body(
        &self,
        grant: &SecretUse,
        content_type: Option<&HeaderValue>,
        body: &[u8],
    ) -> Result<Option<Vec<u8>>, SecretsError> {
        if !grant.is_allowed() || !grant.substitute.iter().any(|g| g.body) {
            return Ok(None);
        }
        let kind = BodyKind::of(content_type);
        let table = self.table(Self::body_granted(grant), |n, v| {
            Self::spell_for_body(kind, n, v)
        })?;
        Ok(self.placeholders.replace_all(body, &table))
    }

    /// A streaming body substitution for `grant`; see the module doc for the framing it needs.
    pub fn body_stream(
        &self,
        grant: &SecretUse,
        content_type: Option<&HeaderValue>,
    ) -> Result<BodySubstitution<'_>, SecretsError> {
        let kind = BodyKind::of(content_type);
        let table = if grant.is_allowed() {
            self.table(Self::body_granted(grant), |n, v| {
                Self::spell_for_body(kind, n, v)
            })?
        } else {
            self.names.iter().map(|_| None).collect()
        };
        Ok(BodySubstitution {
            substituter: self,
            table,
            replacer: StreamReplacer::default(),
        })
    }
}

impl fmt::Debug for Substituter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Substituter")
            .field("secrets", &self.names)
            .finish_non_exhaustive()
    }
}

/// The URI with its query replaced (scheme, authority and path kept).
fn with_query(uri: &Uri, query: &[u8]) -> Option<Uri> {
    let query = std::str::from_utf8(query).ok()?;
    let mut parts = uri.clone().into_parts();
    let path = uri.path();
    parts.path_and_query = Some(PathAndQuery::try_from(format!("{path}?{query}")).ok()?);
    Uri::from_parts(parts).ok()
}

/// A body substitution under way: [`BodySubstitution::push`] each chunk, then `finish`.
pub struct BodySubstitution<'s> {
    substituter: &'s Substituter,
    table: Table,
    replacer: StreamReplacer,
}

impl BodySubstitution<'_> {
    /// The bytes of `chunk` that are final, substituted (a possible placeholder start waits).
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(chunk.len());
        self.replacer
            .push(&self.substituter.placeholders, chunk, &self.table, &mut out);
        out
    }

    /// The rest, at the end of the body.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = vec![];
        self.replacer
            .finish(&self.substituter.placeholders, &self.table, &mut out);
        out
    }
}

impl fmt::Debug for BodySubstitution<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BodySubstitution").finish_non_exhaustive()
    }
}

/// Sets `Content-Length` to the body's new length (and drops any `Transfer-Encoding`): for a body
/// that was buffered and substituted.
pub fn set_content_length(headers: &mut HeaderMap, len: usize) {
    headers.remove(TRANSFER_ENCODING);
    headers.insert(CONTENT_LENGTH, HeaderValue::from(len));
}

/// Removes `Content-Length`, so a body substituted while streaming goes out chunked.
pub fn reframe_chunked(headers: &mut HeaderMap) {
    headers.remove(CONTENT_LENGTH);
}

/// The `Content-Type` of a request, for [`BodyKind::of`].
pub fn content_type(headers: &HeaderMap) -> Option<&HeaderValue> {
    headers.get(CONTENT_TYPE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fenzi_policy::Decision;
    use fenzi_policy::Reason;
    use fenzi_policy::secret_position::SecretPosition;

    const PA: &str = "fenzi_ph_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    const PB: &str = "fenzi_ph_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB";
    /// Values with regex-special, JSON-special, URL-special and non-ASCII bytes.
    const VA: &[u8] = b"a.b*c+d?(e)[f]{g}|h^$\\1";
    const VB: &[u8] = b"tok \"q\" & x=y/\xc3\xa9#%";

    fn set() -> SecretSet {
        let mut set = SecretSet::new();
        set.insert_with_placeholder("A_KEY", PA, VA.to_vec())
            .unwrap();
        set.insert_with_placeholder("B_KEY", PB, VB.to_vec())
            .unwrap();
        set
    }

    fn allow(grants: &[(&str, bool)], bearer: Option<&str>) -> SecretUse {
        SecretUse {
            decision: Decision::allow("test", "test"),
            substitute: grants
                .iter()
                .map(|(s, body)| Grant {
                    secret: s.to_string(),
                    body: *body,
                    positions: None,
                })
                .collect(),
            add_bearer: bearer.map(str::to_string),
            left_as_is: vec![],
            secrets: vec![],
        }
    }

    #[test]
    fn header_values_query_and_basic_are_substituted_for_granted_secrets_only() {
        let s = Substituter::new(&set()).unwrap();
        let grant = allow(&[("A_KEY", false)], None);
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", HeaderValue::from_str(PA).unwrap());
        headers.insert(
            "authorization",
            HeaderValue::from_str(&format!("Basic {}", STANDARD.encode(format!("me:{PA}"))))
                .unwrap(),
        );
        headers.insert(
            "x-other",
            HeaderValue::from_str(&format!("{PB} {PA}")).unwrap(),
        );
        headers.insert("x-plain", HeaderValue::from_static("nothing"));
        let mut uri: Uri = format!("/v1/{PA}/x?key={PA}&b={PB}").parse().unwrap();
        s.apply_head(&grant, &mut uri, &mut headers).unwrap();

        assert_eq!(headers["x-api-key"].as_bytes(), VA);
        assert!(headers["x-api-key"].is_sensitive());
        let basic = headers["authorization"].as_bytes();
        let decoded = STANDARD.decode(&basic[6..]).unwrap();
        assert!(basic.starts_with(b"Basic "));
        assert_eq!(decoded, [&b"me:"[..], VA].concat());
        let mut other = PB.as_bytes().to_vec();
        other.push(b' ');
        other.extend_from_slice(VA);
        assert_eq!(headers["x-other"].as_bytes(), other, "B is not granted");
        assert_eq!(headers["x-plain"], "nothing");
        // The path is not a substitution position; the query gets the value percent-encoded.
        assert_eq!(uri.path(), format!("/v1/{PA}/x"));
        assert_eq!(
            uri.query().unwrap(),
            format!(
                "key={}&b={PB}",
                String::from_utf8(percent_encode(VA, true)).unwrap()
            )
        );
    }

    /// A grant of A_KEY limited to `positions`.
    fn allow_in(positions: &[&str]) -> SecretUse {
        let positions: Vec<SecretPosition> = positions
            .iter()
            .map(|p| SecretPosition::parse(p).unwrap())
            .collect();
        let mut grant = allow(
            &[("A_KEY", positions.contains(&SecretPosition::Body))],
            None,
        );
        grant.substitute[0].positions = Some(positions);
        grant
    }

    #[test]
    fn a_grant_with_positions_writes_only_in_the_headers_it_names() {
        let s = Substituter::new(&set()).unwrap();
        let grant = allow_in(&["header:Authorization", "header:X-Api-Key"]);
        let mut headers = HeaderMap::new();
        headers.append("x-api-key", HeaderValue::from_str(PA).unwrap());
        headers.append(
            "x-api-key",
            HeaderValue::from_str(&format!("2 {PA}")).unwrap(),
        );
        headers.insert(
            "authorization",
            HeaderValue::from_str(&format!("Basic {}", STANDARD.encode(format!("me:{PA}"))))
                .unwrap(),
        );
        headers.insert("referer", HeaderValue::from_str(PA).unwrap());
        let mut uri: Uri = format!("/v1?key={PA}").parse().unwrap();
        s.apply_head(&grant, &mut uri, &mut headers).unwrap();
        let keys: Vec<&[u8]> = headers
            .get_all("x-api-key")
            .iter()
            .map(|v| v.as_bytes())
            .collect();
        assert_eq!(keys, [VA, &[b"2 ", VA].concat()[..]]);
        let basic = headers["authorization"].as_bytes();
        assert_eq!(
            STANDARD.decode(&basic[6..]).unwrap(),
            [&b"me:"[..], VA].concat()
        );
        // Not named: left as they were (the decision refuses such a request before this).
        assert_eq!(headers["referer"], PA);
        assert_eq!(uri.query(), Some(format!("key={PA}").as_str()));
    }

    #[test]
    fn a_grant_with_positions_writes_only_in_the_query_values_it_names() {
        let s = Substituter::new(&set()).unwrap();
        let enc = String::from_utf8(percent_encode(VA, true)).unwrap();
        let grant = allow_in(&["query:key"]);
        for (query, want) in [
            // Every repeat of the named parameter, its name decoded.
            (
                format!("key={PA}&q=1&k%65y={PA}"),
                format!("key={enc}&q=1&k%65y={enc}"),
            ),
            // Another parameter, the name itself, a `;` piece, case: untouched.
            (format!("q={PA}&key=x"), format!("q={PA}&key=x")),
            (format!("{PA}=1"), format!("{PA}=1")),
            (format!("key={PA};q=1"), format!("key={PA};q=1")),
            (format!("KEY={PA}"), format!("KEY={PA}")),
            (format!("q=key={PA}"), format!("q=key={PA}")),
            // Mixed: only the named one changes, separators and empty pieces kept.
            (
                format!("&a={PA}&&key={PA}=x&"),
                format!("&a={PA}&&key={enc}=x&"),
            ),
        ] {
            let mut uri: Uri = format!("/p?{query}").parse().unwrap();
            s.apply_head(&grant, &mut uri, &mut HeaderMap::new())
                .unwrap();
            assert_eq!(uri.query().unwrap(), want, "{query}");
        }
        // Without positions the whole query is swapped, a parameter's name included.
        let mut uri: Uri = format!("/p?{PA}=1&q={PA};x").parse().unwrap();
        s.apply_head(
            &allow(&[("A_KEY", false)], None),
            &mut uri,
            &mut HeaderMap::new(),
        )
        .unwrap();
        assert_eq!(uri.query().unwrap(), format!("{enc}=1&q={enc};x"));
    }

    #[test]
    fn a_grant_without_body_in_its_positions_leaves_the_body() {
        let s = Substituter::new(&set()).unwrap();
        let body = format!("{{\"k\":\"{PA}\"}}");
        let json = HeaderValue::from_static("application/json");
        assert_eq!(
            s.apply_body(
                &allow_in(&["header:X-Api-Key"]),
                Some(&json),
                body.as_bytes()
            )
            .unwrap(),
            None
        );
        assert!(
            s.apply_body(&allow_in(&["body"]), Some(&json), body.as_bytes())
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn absolute_uris_keep_their_authority() {
        let s = Substituter::new(&set()).unwrap();
        let mut uri: Uri = format!("http://api.example.com:8080/p?k={PA}")
            .parse()
            .unwrap();
        s.apply_head(
            &allow(&[("A_KEY", false)], None),
            &mut uri,
            &mut HeaderMap::new(),
        )
        .unwrap();
        assert_eq!(uri.authority().unwrap().as_str(), "api.example.com:8080");
        assert!(!uri.to_string().contains(PA));
    }

    #[test]
    fn a_bearer_is_added_only_when_there_is_no_authorization() {
        let s = Substituter::new(&set()).unwrap();
        let mut headers = HeaderMap::new();
        let mut uri = Uri::from_static("/mcp");
        s.apply_head(&allow(&[], Some("A_KEY")), &mut uri, &mut headers)
            .unwrap();
        assert_eq!(
            headers[AUTHORIZATION].as_bytes(),
            [&b"Bearer "[..], VA].concat()
        );
        assert!(headers[AUTHORIZATION].is_sensitive());

        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer mine"));
        s.apply_head(&allow(&[], Some("A_KEY")), &mut uri, &mut headers)
            .unwrap();
        assert_eq!(headers[AUTHORIZATION], "Bearer mine");
    }

    #[test]
    fn a_request_a_value_goes_into_asks_for_the_whole_answer() {
        let s = Substituter::new(&set()).unwrap();
        let ranged = || {
            let mut headers = HeaderMap::new();
            headers.insert("x", HeaderValue::from_str(PA).unwrap());
            headers.insert(RANGE, HeaderValue::from_static("bytes=0-9"));
            headers.insert(IF_RANGE, HeaderValue::from_static("\"v1\""));
            headers.insert("request-range", HeaderValue::from_static("bytes=0-9"));
            headers
        };
        for grant in [allow(&[("A_KEY", false)], None), allow(&[], Some("A_KEY"))] {
            let mut headers = ranged();
            let mut uri = Uri::from_static("/");
            s.apply_head(&grant, &mut uri, &mut headers).unwrap();
            assert!(!headers.contains_key(RANGE), "{grant:?}");
            assert!(!headers.contains_key(IF_RANGE), "{grant:?}");
            assert!(!headers.contains_key("request-range"), "{grant:?}");
        }
        // Nothing written in: the request keeps its range.
        let mut headers = ranged();
        s.apply_head(&allow(&[], None), &mut Uri::from_static("/"), &mut headers)
            .unwrap();
        assert_eq!(headers[RANGE], "bytes=0-9");
        assert_eq!(headers[IF_RANGE], "\"v1\"");
    }

    #[test]
    fn a_denial_changes_nothing() {
        let s = Substituter::new(&set()).unwrap();
        let mut denied = allow(&[("A_KEY", true)], Some("A_KEY"));
        denied.decision = Decision::deny(Reason::CredentialEndpointMismatch, "r", "m");
        let mut headers = HeaderMap::new();
        headers.insert("x", HeaderValue::from_str(PA).unwrap());
        let mut uri: Uri = format!("/?k={PA}").parse().unwrap();
        s.apply_head(&denied, &mut uri, &mut headers).unwrap();
        assert_eq!(headers["x"], PA);
        assert!(!headers.contains_key(AUTHORIZATION));
        assert_eq!(uri.query().unwrap(), format!("k={PA}"));
        assert_eq!(s.apply_body(&denied, None, PA.as_bytes()).unwrap(), None);
    }

    #[test]
    fn bodies_get_the_value_in_their_own_spelling_and_only_with_body_grants() {
        let s = Substituter::new(&set()).unwrap();
        let body = format!("{{\"key\":\"{PB}\",\"other\":\"{PA}\"}}");
        let json = HeaderValue::from_static("application/json; charset=utf-8");
        // Not granted for bodies: unchanged.
        let grant = allow(&[("B_KEY", false)], None);
        assert_eq!(
            s.apply_body(&grant, Some(&json), body.as_bytes()).unwrap(),
            None
        );

        let grant = allow(&[("B_KEY", true)], None);
        let out = s
            .apply_body(&grant, Some(&json), body.as_bytes())
            .unwrap()
            .unwrap();
        let parsed: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(parsed["key"].as_str().unwrap().as_bytes(), VB);
        assert_eq!(parsed["other"], PA);

        let form = HeaderValue::from_static("application/x-www-form-urlencoded");
        let out = s
            .apply_body(&grant, Some(&form), format!("k={PB}&z=1").as_bytes())
            .unwrap()
            .unwrap();
        assert_eq!(
            out,
            [&b"k="[..], &percent_encode(VB, true), b"&z=1"].concat()
        );

        let out = s
            .apply_body(&grant, None, format!("<{PB}>").as_bytes())
            .unwrap()
            .unwrap();
        assert_eq!(out, [&b"<"[..], VB, b">"].concat());
    }

    #[test]
    fn a_value_that_is_not_utf8_never_reaches_a_json_body() {
        // Refused when it is loaded, so a JSON body always has a spelling for every value.
        let mut set = SecretSet::new();
        let err = set
            .insert_with_placeholder("A_KEY", PA, b"\xff\xfe-not-utf8".to_vec())
            .unwrap_err();
        assert!(err.to_string().contains("A_KEY"));
        assert!(!err.to_string().contains("not-utf8"));
        assert!(set.is_empty());
    }

    #[test]
    fn streaming_body_substitution_at_every_split_equals_buffered() {
        let s = Substituter::new(&set()).unwrap();
        let grant = allow(&[("A_KEY", true), ("B_KEY", true)], None);
        let body = format!("x{PA}y{PB}{PA}z");
        let want = s
            .apply_body(&grant, None, body.as_bytes())
            .unwrap()
            .unwrap();
        for cut in 0..=body.len() {
            let mut stream = s.body_stream(&grant, None).unwrap();
            let mut out = stream.push(&body.as_bytes()[..cut]);
            out.extend(stream.push(&body.as_bytes()[cut..]));
            out.extend(stream.finish());
            assert_eq!(out, want, "cut at {cut}");
        }
    }

    #[test]
    fn a_placeholder_at_the_end_of_a_mebibyte_body_is_substituted() {
        let s = Substituter::new(&set()).unwrap();
        let grant = allow(&[("A_KEY", true)], None);
        let mut body = vec![b'x'; 1 << 20];
        body.extend_from_slice(PA.as_bytes());
        let out = s.apply_body(&grant, None, &body).unwrap().unwrap();
        assert_eq!(out.len(), (1 << 20) + VA.len());
        assert!(out.ends_with(VA));
    }

    #[test]
    fn framing_helpers() {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("10"));
        headers.insert(TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        set_content_length(&mut headers, 42);
        assert_eq!(headers[CONTENT_LENGTH], "42");
        assert!(!headers.contains_key(TRANSFER_ENCODING));
        reframe_chunked(&mut headers);
        assert!(!headers.contains_key(CONTENT_LENGTH));
        assert_eq!(
            BodyKind::of(Some(&HeaderValue::from_static("Application/JSON"))),
            BodyKind::Json
        );
        assert_eq!(
            BodyKind::of(Some(&HeaderValue::from_static("text/plain"))),
            BodyKind::Raw
        );
        assert_eq!(BodyKind::of(None), BodyKind::Raw);
    }

    #[test]
    fn debug_never_shows_values_or_placeholders() {
        let s = Substituter::new(&set()).unwrap();
        let text = format!("{s:?}");
        assert!(text.contains("A_KEY"));
        assert!(!text.contains("AAAA") && !text.contains("a.b*c"), "{text}");
        let stream = s
            .body_stream(&allow(&[("A_KEY", true)], None), None)
            .unwrap();
        assert!(!format!("{stream:?}").contains("a.b*c"));
    }
}
