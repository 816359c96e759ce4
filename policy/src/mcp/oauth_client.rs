//! What fenzi reads and writes when it signs in to an MCP server itself, on the host (`fenzi mcp
//! login`, and the session's refresh; DESIGN §19, last point): pure rules, no I/O.
//!
//! - [`read_token_response`]: a token endpoint's `200` (RFC 6749 §5.1), strict JSON; a bearer
//!   `access_token`, a positive integer `expires_in` (required here: a token whose end fenzi cannot
//!   know cannot be renewed in time, so it is refused and nothing is stored), an optional
//!   `refresh_token` and `scope`. [`read_token_error`] reads its error answer (§5.2) to the one
//!   registered code, never the server's free text.
//! - [`read_registration`]: a dynamic client registration's answer (RFC 7591 §3.2.1).
//! - [`read_redirect`]: the request the browser brings to the loopback redirect, checked against
//!   the `state` fenzi sent (RFC 6749 §4.1.2, §10.12): the code, or why there is none.
//! - [`refresh_after`]: when a token of a given lifetime is renewed.
//! - [`form`] and [`query_param`]: `application/x-www-form-urlencoded` writing and reading.
//!
//! Error messages never carry a token, a code, a verifier or a client secret, and never repeat
//! what an authorization server wrote (it may hold anything): fenzi's own words, and for a
//! token-endpoint error the registered code only.

use crate::json::{self, JsonLimits, Value};

/// Bounds for every document read here: small JSON objects.
pub const TOKEN_LIMITS: JsonLimits = JsonLimits {
    max_bytes: 64 * 1024,
    max_depth: 8,
};

/// A token endpoint's successful answer.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenResponse {
    pub access_token: String,
    /// Seconds from the answer.
    pub expires_in: u64,
    pub refresh_token: Option<String>,
    /// The scopes granted, space-separated, when the server said.
    pub scope: Option<String>,
}

impl std::fmt::Debug for TokenResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenResponse")
            .field("expires_in", &self.expires_in)
            .field("refresh_token", &self.refresh_token.is_some())
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// Why an answer cannot be used. Fenzi's own words only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("it is not a strict JSON object of at most {} bytes", TOKEN_LIMITS.max_bytes)]
    NotObject,
    #[error("it has no `{0}`")]
    Missing(&'static str),
    #[error("its `{0}` is not a {1}")]
    WrongType(&'static str, &'static str),
    #[error("its `token_type` is not `Bearer`: fenzi places bearer tokens only")]
    NotBearer,
    #[error(
        "it has no `expires_in`: fenzi cannot tell when the token ends, so it could not renew it \
         in time"
    )]
    NoExpiry,
    #[error("its `expires_in` is not a whole number of seconds from 1 to 10 years")]
    BadExpiry,
    #[error(
        "its `{0}` is not a usable token (8 to 16384 bytes of printable ASCII, as RFC 6750 and 6749 allow)"
    )]
    BadToken(&'static str),
}

fn object(text: &[u8]) -> Result<Value, AnswerError> {
    let value = json::parse(text, &TOKEN_LIMITS).map_err(|_| AnswerError::NotObject)?;
    value
        .as_object()
        .is_some()
        .then_some(value)
        .ok_or(AnswerError::NotObject)
}

fn string(doc: &Value, member: &'static str) -> Result<Option<String>, AnswerError> {
    match doc.get(member) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(AnswerError::WrongType(member, "string")),
    }
}

/// A token fenzi will hold and place: printable ASCII without spaces (RFC 6750's b64token and RFC
/// 6749's VSCHAR), within the credential store's bounds.
fn token(doc: &Value, member: &'static str) -> Result<Option<String>, AnswerError> {
    let Some(t) = string(doc, member)? else {
        return Ok(None);
    };
    if t.len() < 8 || t.len() > 16 * 1024 || !t.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(AnswerError::BadToken(member));
    }
    Ok(Some(t))
}

/// Reads a token endpoint's `200` answer.
pub fn read_token_response(text: &[u8]) -> Result<TokenResponse, AnswerError> {
    let doc = object(text)?;
    let access_token = token(&doc, "access_token")?.ok_or(AnswerError::Missing("access_token"))?;
    match string(&doc, "token_type")? {
        Some(t) if t.eq_ignore_ascii_case("bearer") => {}
        Some(_) => return Err(AnswerError::NotBearer),
        None => return Err(AnswerError::Missing("token_type")),
    }
    let expires_in = match doc.get("expires_in") {
        None | Some(Value::Null) => return Err(AnswerError::NoExpiry),
        Some(Value::Number(n)) => n
            .parse::<u64>()
            .ok()
            .filter(|s| (1..=10 * 365 * 24 * 3600).contains(s))
            .ok_or(AnswerError::BadExpiry)?,
        Some(_) => return Err(AnswerError::BadExpiry),
    };
    Ok(TokenResponse {
        access_token,
        expires_in,
        refresh_token: token(&doc, "refresh_token")?,
        scope: string(&doc, "scope")?,
    })
}

/// The registered error codes of a token endpoint (RFC 6749 §5.2, RFC 8707 §2, RFC 7009 §2.2.1).
const TOKEN_ERRORS: [&str; 8] = [
    "invalid_request",
    "invalid_client",
    "invalid_grant",
    "unauthorized_client",
    "unsupported_grant_type",
    "invalid_scope",
    "invalid_target",
    "unsupported_token_type",
];

/// The registered `error` code of a token endpoint's error answer, if it has one.
pub fn read_token_error(text: &[u8]) -> Option<&'static str> {
    let doc = object(text).ok()?;
    let code = doc.get("error")?.as_str()?;
    TOKEN_ERRORS.into_iter().find(|c| *c == code)
}

/// A dynamic client registration's answer.
#[derive(Clone, PartialEq, Eq)]
pub struct Registration {
    pub client_id: String,
    pub client_secret: Option<String>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.is_some())
            .finish()
    }
}

/// Reads a registration answer (RFC 7591 §3.2.1): a non-empty `client_id`, an optional
/// `client_secret`.
pub fn read_registration(text: &[u8]) -> Result<Registration, AnswerError> {
    let doc = object(text)?;
    let client_id = string(&doc, "client_id")?
        .filter(|id| !id.is_empty() && id.len() <= 1024 && !id.chars().any(char::is_control))
        .ok_or(AnswerError::Missing("client_id"))?;
    let client_secret = string(&doc, "client_secret")?;
    if client_secret
        .as_ref()
        .is_some_and(|s| s.is_empty() || s.len() > 4096 || s.chars().any(char::is_control))
    {
        return Err(AnswerError::WrongType(
            "client_secret",
            "string of printable characters",
        ));
    }
    Ok(Registration {
        client_id,
        client_secret,
    })
}

/// Why the loopback redirect brought no code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedirectError {
    #[error("the request is not to the redirect path fenzi gave")]
    WrongPath,
    #[error("its query cannot be read strictly (a parameter twice, or a bad %-escape)")]
    Unreadable,
    #[error(
        "its `state` is missing or not the one fenzi sent: the answer is not to this sign-in \
         (a forged or stale redirect)"
    )]
    StateMismatch,
    #[error("the authorization server refused the sign-in (`{0}`)")]
    Refused(String),
    #[error("it carries no `code`")]
    NoCode,
}

/// The registered authorization-endpoint error codes (RFC 6749 §4.1.2.1).
const AUTHORIZE_ERRORS: [&str; 7] = [
    "invalid_request",
    "unauthorized_client",
    "access_denied",
    "unsupported_response_type",
    "invalid_scope",
    "server_error",
    "temporarily_unavailable",
];

/// Reads the request target the browser brought to the redirect (`/callback?code=…&state=…`):
/// the path must be `path`, the query strict, `state` the one sent (compared in constant time).
/// The state is checked before anything else is believed, an error answer included.
pub fn read_redirect(target: &str, path: &str, state: &str) -> Result<String, RedirectError> {
    let (p, query) = target.split_once('?').unwrap_or((target, ""));
    if p != path {
        return Err(RedirectError::WrongPath);
    }
    let params = parse_form(query).ok_or(RedirectError::Unreadable)?;
    let get = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    match get("state") {
        Some(s) if constant_time_eq(s.as_bytes(), state.as_bytes()) => {}
        _ => return Err(RedirectError::StateMismatch),
    }
    if let Some(error) = get("error") {
        let code = AUTHORIZE_ERRORS
            .into_iter()
            .find(|c| *c == error)
            .unwrap_or("an unregistered error code");
        return Err(RedirectError::Refused(code.to_string()));
    }
    match get("code") {
        Some(code) if !code.is_empty() => Ok(code.to_string()),
        _ => Err(RedirectError::NoCode),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Seconds after a token was issued at which it is renewed: at 80% of its lifetime, and at the
/// latest 60 s before it ends when it lives 2 minutes or more (a refresh has a minute to succeed
/// or be retried before any request would carry an expired token).
pub fn refresh_after(lifetime: u64) -> u64 {
    let at = lifetime * 4 / 5;
    if lifetime >= 120 {
        at.min(lifetime - 60)
    } else {
        at
    }
}

/// `application/x-www-form-urlencoded` text of `pairs` (every byte but the unreserved ones
/// percent-encoded, so the text reads the same to every parser).
pub fn form<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut out = String::new();
    for (k, v) in pairs {
        if !out.is_empty() {
            out.push('&');
        }
        encode_into(&mut out, k);
        out.push('=');
        encode_into(&mut out, v);
    }
    out
}

/// `text` percent-encoded as one form component (RFC 6749 §2.3.1 encodes a client's ID and secret
/// so before they go into Basic credentials).
pub fn form_component(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    encode_into(&mut out, text);
    out
}

fn encode_into(out: &mut String, text: &str) {
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

/// Reads form text strictly: each parameter once, `+` as a space, %-escapes that decode to UTF-8.
/// `None` when it cannot be read so.
pub fn parse_form(text: &str) -> Option<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    if text.is_empty() {
        return Some(out);
    }
    for pair in text.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (decode(k)?, decode(v)?);
        if k.is_empty() || out.iter().any(|(seen, _)| *seen == k) {
            return None;
        }
        out.push((k, v));
    }
    Some(out)
}

/// The one value of `name` in form text, when it reads strictly.
pub fn query_param(text: &str, name: &str) -> Option<String> {
    parse_form(text)?
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_answer_needs_a_bearer_token_and_its_lifetime() {
        let ok = read_token_response(
            br#"{"access_token":"at-0123456789","token_type":"bearer","expires_in":3600,"refresh_token":"rt-0123456789","scope":"read write"}"#,
        )
        .unwrap();
        assert_eq!(ok.expires_in, 3600);
        assert_eq!(ok.refresh_token.as_deref(), Some("rt-0123456789"));
        assert_eq!(ok.scope.as_deref(), Some("read write"));
        assert!(!format!("{ok:?}").contains("0123456789"));

        let no_expiry =
            read_token_response(br#"{"access_token":"at-0123456789","token_type":"Bearer"}"#);
        assert_eq!(no_expiry, Err(AnswerError::NoExpiry));
        let mac = read_token_response(
            br#"{"access_token":"at-0123456789","token_type":"mac","expires_in":60}"#,
        );
        assert_eq!(mac, Err(AnswerError::NotBearer));
        for bad in [
            &br#"{"access_token":"at-0123456789","token_type":"Bearer","expires_in":"60"}"#[..],
            br#"{"access_token":"at-0123456789","token_type":"Bearer","expires_in":0}"#,
            br#"{"access_token":"at-0123456789","token_type":"Bearer","expires_in":1.5}"#,
            br#"{"access_token":"at-0123456789","token_type":"Bearer","expires_in":-5}"#,
        ] {
            assert_eq!(read_token_response(bad), Err(AnswerError::BadExpiry));
        }
        let spaced = read_token_response(
            br#"{"access_token":"a b c d e f g","token_type":"Bearer","expires_in":60}"#,
        );
        assert_eq!(spaced, Err(AnswerError::BadToken("access_token")));
        let dup = read_token_response(
            br#"{"access_token":"at-0123456789","access_token":"x","token_type":"Bearer","expires_in":60}"#,
        );
        assert_eq!(dup, Err(AnswerError::NotObject));
    }

    #[test]
    fn a_token_error_is_read_to_its_registered_code() {
        assert_eq!(
            read_token_error(br#"{"error":"invalid_grant","error_description":"x"}"#),
            Some("invalid_grant")
        );
        assert_eq!(read_token_error(br#"{"error":"<script>"}"#), None);
        assert_eq!(read_token_error(b"not json"), None);
    }

    #[test]
    fn the_redirect_must_carry_the_state_sent() {
        let state = "s-123";
        assert_eq!(
            read_redirect("/callback?code=abc&state=s-123", "/callback", state),
            Ok("abc".into())
        );
        assert_eq!(
            read_redirect("/callback?code=abc&state=s-124", "/callback", state),
            Err(RedirectError::StateMismatch)
        );
        assert_eq!(
            read_redirect("/callback?code=abc", "/callback", state),
            Err(RedirectError::StateMismatch)
        );
        // An error answer without the state is not believed either.
        assert_eq!(
            read_redirect("/callback?error=access_denied", "/callback", state),
            Err(RedirectError::StateMismatch)
        );
        assert_eq!(
            read_redirect(
                "/callback?error=access_denied&state=s-123",
                "/callback",
                state
            ),
            Err(RedirectError::Refused("access_denied".into()))
        );
        assert_eq!(
            read_redirect(
                "/callback?state=s-123&state=s-123&code=a",
                "/callback",
                state
            ),
            Err(RedirectError::Unreadable)
        );
        assert_eq!(
            read_redirect("/other?code=abc&state=s-123", "/callback", state),
            Err(RedirectError::WrongPath)
        );
        assert_eq!(
            read_redirect("/callback?state=s-123", "/callback", state),
            Err(RedirectError::NoCode)
        );
    }

    #[test]
    fn tokens_are_renewed_at_four_fifths_and_a_minute_before_the_end() {
        assert_eq!(refresh_after(3600), 2880);
        assert_eq!(refresh_after(200), 140);
        assert_eq!(refresh_after(120), 60);
        assert_eq!(refresh_after(10), 8);
        assert_eq!(refresh_after(1), 0);
    }

    #[test]
    fn forms_round_trip() {
        let text = form([("redirect_uri", "http://127.0.0.1:5/cb"), ("scope", "a b")]);
        assert_eq!(
            text,
            "redirect_uri=http%3A%2F%2F127.0.0.1%3A5%2Fcb&scope=a%20b"
        );
        assert_eq!(
            query_param(&text, "redirect_uri").as_deref(),
            Some("http://127.0.0.1:5/cb")
        );
        assert_eq!(parse_form("a=%zz"), None);
        assert_eq!(parse_form("a=1&a=2"), None);
    }

    #[test]
    fn a_registration_needs_a_client_id() {
        let r =
            read_registration(br#"{"client_id":"abc","client_secret":"s3cret-value"}"#).unwrap();
        assert_eq!(r.client_id, "abc");
        assert!(!format!("{r:?}").contains("s3cret"));
        assert_eq!(
            read_registration(br#"{"client_secret":"x"}"#),
            Err(AnswerError::Missing("client_id"))
        );
    }
}
