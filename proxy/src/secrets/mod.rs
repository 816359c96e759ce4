//! Secrets that never enter the sandbox (README, "Secrets"): the session's placeholders, finding them in
//! requests, swapping them for real values on the hosts each secret is bound to, and swapping real
//! values back out of responses. The decision itself is `fenzi_policy::secret_use` (pure); this
//! module finds the inputs and carries the answer out.
//!
//! - [`placeholders`]: values (checked at load), minted placeholders, `FENZI_SECRET_<NAME>`,
//!   `placeholders.env`.
//! - [`spelling`]: percent / JSON-`\u` normalisation and the encoders values are written with.
//! - [`scan`]: finding placeholders in a request head and a streamed body.
//! - [`substitute`]: placeholder → value in an allowed request.
//! - [`scrub`]: value → placeholder in responses, streamed: a value an upstream echoes as text
//!   (raw, JSON, percent-encoded, as the common encoders write it) becomes its placeholder; one
//!   echoed inside base64 or hex becomes a same-length mask that still decodes.
//! - [`encoded`]: what a value looks like inside base64 (any alignment, either alphabet) and hex,
//!   and the mask that replaces it.
//! - `replace`: the streaming multi-pattern replace under both.
//!
//! Nothing in this module logs, and no `Debug` or error message carries a value or a placeholder:
//! secret names only.
//!
//! # Integration: what the request path calls, and when
//!
//! **At start** (`fenzi proxy`): gather the values (credential store, then
//! [`placeholders::values_from_env`] for `FENZI_SECRET_<NAME>`), mint, write, build:
//!
//! ```text
//! let set = SecretSet::mint(values)?;                  // CR/LF/NUL/control/<8 bytes: refuse to start
//! set.write_env_file(&dir.join("placeholders.env"))?;  // NAME=placeholder, mode 0600
//! let secrets = Arc::new(SessionSecrets::new(policy.secrets(), set)?);   // kept in `SessionContext`
//! ```
//!
//! **CONNECT phase** (before `admit`, so a placeholder used as a DNS label is never resolved):
//! `secrets.scanner().scan_authority(target)` and, once TLS is accepted, the same on the SNI. Any
//! sighting is a denial (`credential_endpoint_mismatch`; the proxy words it as "a placeholder is
//! never a host name" rather than through `decide`, whose clear-text message would mislead): record
//! it naming the secrets, answer 403 (for SNI: abandon the handshake). Audit `host` and tracing
//! fields go through [`Scanner::redact`]. The same holds for an absolute-form URL's host.
//!
//! **Request phase** (`exchange` and `decide`, for every request the proxy sees in clear text: plain
//! HTTP and intercepted tunnels; after hop-by-hop headers are stripped and the route is admitted;
//! before any audit record of this request and before a byte goes upstream). Skip it all when
//! [`SessionSecrets::is_empty`]:
//!
//! 1. [`scrub::request_identity`] on the headers (so the response can be scrubbed).
//! 2. Buffer the body up to `policy.limits().max_bytes` (413 `body_too_large` beyond; the MCP path
//!    does this already, the plain path must now too): the answer must be known before the first
//!    body byte leaves, or "upstream receives nothing" cannot hold.
//! 3. `let use_ = secrets.check_request(&dest.host, dest.port, entry, tls, &parts, &body);`
//! 4. Denied (`credential_endpoint_mismatch`): write one record of `use_.decision` with
//!    `secrets = use_.secrets` (names only) and answer 403 (a `Refusal`; on an MCP endpoint
//!    answered with the JSON-RPC error body). Nothing is forwarded. This comes before MCP classification.
//! 5. Allowed: classify as usual (MCP), then `let body = secrets.apply(&use_, &mut parts, body)?`
//!    (header values, query, bearer, body, `Content-Length`); an error (a value that cannot be
//!    written where it goes) is recorded and answered as `bad_request`. Then write the route's or
//!    the classifier's record(s) with `secrets = use_.secrets`, then send.
//! 6. The record's `path` and every tracing field built from the request go through
//!    [`Scanner::redact`]: a placeholder left as is in the path must not reach the log.
//!
//! **Response phase** (`response`): `secrets.scrubber().check_response_head(&mut head.headers)`; on `Err`
//! record `failed`/`upstream_error` and answer 502 (an encoded body cannot be checked). Otherwise
//! wrap the body: `secrets.scrubber().body(body).boxed_unsync()`. Every response from an inspected
//! connection is scrubbed, not only the bound host's: a value must not reach the sandbox by any
//! path.
//!
//! **Where this is wired**: `ProxyBuilder::secrets` (the set, compiled into the `SessionContext`),
//! `authority::check_no_placeholder`, called by `connect`, `plain_http` and `intercept` (the
//! CONNECT target, an absolute URL's host, the SNI, a tunnel request's Host), `exchange`, `decide`
//! and `response` (the request and response phases), and `SessionContext::record`, which passes
//! every audit record's text fields through
//! [`Scanner::redact`] (after turning any value into its placeholder). `fenzi proxy` and `fenzi
//! run` gather the values with the CLI's `session::load_secrets`.
//!
//! May use: `credstore`.

pub mod encoded;
pub mod live;
pub mod placeholders;
pub mod scan;
pub mod scrub;
pub mod spelling;
pub mod substitute;

mod error;
mod replace;

pub use error::SecretsError;
pub use live::LiveSecrets;
pub use placeholders::{Placeholder, SecretSet, SecretValue, values_from_env};
pub use scan::{BodyScan, Scanner};
pub use scrub::{ScrubBody, ScrubStream, Scrubber, Unscrubbable};
pub use substitute::{BodySubstitution, Substituter};

use bytes::Bytes;
use fenzi_policy::engine::SecretBinding;
use fenzi_policy::host::Host;
use fenzi_policy::secret_use::{RequestFacts, SecretUse, Sighting, decide};
use fenzi_policy::{Decision, Reason};
use http::header::AUTHORIZATION;
use http::request::Parts;
use std::fmt;

/// Everything one proxy session knows about secrets, compiled once at start.
pub struct SessionSecrets {
    set: SecretSet,
    /// The policy's bindings whose secret has a value in this session.
    bindings: Vec<SecretBinding>,
    scanner: Scanner,
    substituter: Substituter,
    scrubber: Scrubber,
    /// Secrets whose value must not be used now, each with why and what to do (an OAuth sign-in
    /// that could not be renewed; [`LiveSecrets::withhold`]). Empty but for such a session.
    withheld: Vec<(String, String)>,
}

impl SessionSecrets {
    /// `bindings` is `policy.secrets()`. A binding without a value is dropped (no placeholder was
    /// minted, so none can be sighted, and no bearer is added for it); a value without a binding is
    /// an error, since its placeholder could never be used.
    pub fn new(bindings: &[SecretBinding], set: SecretSet) -> Result<SessionSecrets, SecretsError> {
        if let Some(unbound) = set.names().find(|n| !bindings.iter().any(|b| b.name == *n)) {
            return Err(SecretsError::Unbound(unbound.to_string()));
        }
        let bindings = bindings
            .iter()
            .filter(|b| set.contains(&b.name))
            .cloned()
            .collect();
        Ok(SessionSecrets {
            scanner: Scanner::new(&set)?,
            substituter: Substituter::new(&set)?,
            scrubber: Scrubber::new(&set)?,
            bindings,
            set,
            withheld: Vec::new(),
        })
    }

    /// A session without secrets: every request passes unchanged.
    pub fn none() -> SessionSecrets {
        // Cannot fail: nothing to check and empty automata.
        SessionSecrets::new(&[], SecretSet::new()).unwrap_or_else(|_| unreachable!())
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    pub fn set(&self) -> &SecretSet {
        &self.set
    }

    pub fn scanner(&self) -> &Scanner {
        &self.scanner
    }

    pub fn substituter(&self) -> &Substituter {
        &self.substituter
    }

    pub fn scrubber(&self) -> &Scrubber {
        &self.scrubber
    }

    /// The decision for sightings already made (e.g. a CONNECT target's).
    pub fn decide(
        &self,
        host: &Host,
        port: u16,
        entry: Option<&str>,
        tls: bool,
        has_authorization: bool,
        sightings: &[Sighting],
    ) -> SecretUse {
        decide(
            &self.bindings,
            &RequestFacts {
                host,
                port,
                entry,
                tls,
                has_authorization,
                sightings,
            },
        )
    }

    /// Scans a request (head and whole body) and decides it. `entry`: the MCP entry its path
    /// belongs to (`fenzi_policy::engine::by_path`), whose token alone it may carry. `tls`: the
    /// request arrived inside TLS and goes upstream over TLS.
    pub fn check_request(
        &self,
        host: &Host,
        port: u16,
        entry: Option<&str>,
        tls: bool,
        parts: &Parts,
        body: &[u8],
    ) -> SecretUse {
        let mut sightings = self
            .scanner
            .scan_head(&parts.method, &parts.uri, &parts.headers);
        sightings.extend(self.scanner.scan_body(body));
        let has_authorization = parts.headers.contains_key(AUTHORIZATION);
        let mut use_ = self.decide(host, port, entry, tls, has_authorization, &sightings);
        if !self.withheld.is_empty() && use_.is_allowed() {
            self.refuse_withheld(&mut use_);
        }
        use_
    }

    /// An allowed use that would carry a withheld secret becomes a refusal saying why: the request
    /// goes nowhere rather than upstream with a value that no longer works.
    fn refuse_withheld(&self, use_: &mut SecretUse) {
        let carried = |name: &str| {
            use_.add_bearer.as_deref() == Some(name)
                || use_.substitute.iter().any(|g| g.secret == name)
        };
        if let Some((name, why)) = self.withheld.iter().find(|(n, _)| carried(n)) {
            use_.decision = Decision::deny(
                Reason::UpstreamError,
                format!("secret {name} withheld: its oauth sign-in ended"),
                why.clone(),
            );
            use_.secrets = vec![name.clone()];
            use_.substitute.clear();
            use_.add_bearer = None;
        }
    }

    /// Carries out an allowed decision on a buffered request: head, body, and `Content-Length` when
    /// the body changed. A denial changes nothing.
    pub fn apply(
        &self,
        use_: &SecretUse,
        parts: &mut Parts,
        body: Bytes,
    ) -> Result<Bytes, SecretsError> {
        if !use_.is_allowed() || !use_.changes_request() {
            return Ok(body);
        }
        self.substituter
            .apply_head(use_, &mut parts.uri, &mut parts.headers)?;
        let content_type = substitute::content_type(&parts.headers);
        match self.substituter.apply_body(use_, content_type, &body)? {
            Some(new) => {
                substitute::set_content_length(&mut parts.headers, new.len());
                Ok(Bytes::from(new))
            }
            None => Ok(body),
        }
    }
}

impl fmt::Debug for SessionSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionSecrets")
            .field("secrets", &self.set)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fenzi_policy::Reason;
    use fenzi_policy::engine::SecretSource;
    use fenzi_policy::host::HostPattern;
    use http::{HeaderValue, Request};

    const TOKEN: &[u8] = b"lin_api_0123456789abcdef";
    const MODEL_KEY: &[u8] = b"sk-ant-\"quoted\"\\and/slashes";

    fn binding(name: &str, host: &str, body: bool, bearer: bool) -> SecretBinding {
        SecretBinding {
            programs: Default::default(),
            name: name.to_string(),
            hosts: vec![HostPattern::parse(host).unwrap()],
            body,
            sources: vec![SecretSource::TopLevel],
            default_bearer: bearer,
            positions: None,
            entry: None,
        }
    }

    fn session() -> SessionSecrets {
        let bindings = [
            binding("MCP_LINEAR", "mcp.linear.app", false, true),
            binding("ANTHROPIC_API_KEY", "api.anthropic.com", true, false),
            binding("UNLOADED", "other.example", false, true),
        ];
        let set = SecretSet::mint([
            ("MCP_LINEAR".to_string(), TOKEN.to_vec()),
            ("ANTHROPIC_API_KEY".to_string(), MODEL_KEY.to_vec()),
        ])
        .unwrap();
        SessionSecrets::new(&bindings, set).unwrap()
    }

    fn ph(s: &SessionSecrets, name: &str) -> String {
        s.set().placeholder(name).unwrap().as_str().to_string()
    }

    fn parts(uri: &str, headers: &[(&str, String)]) -> Parts {
        let mut b = Request::builder().method("POST").uri(uri);
        for (k, v) in headers {
            b = b.header(*k, v.as_str());
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn the_bound_host_gets_the_value_over_tls_and_the_audit_gets_the_name() {
        let s = session();
        let host = Host::parse("mcp.linear.app").unwrap();
        let mut p = parts(
            "/mcp",
            &[("authorization", format!("Bearer {}", ph(&s, "MCP_LINEAR")))],
        );
        let body = Bytes::from_static(b"{\"jsonrpc\":\"2.0\"}");
        let use_ = s.check_request(&host, 443, None, true, &p, &body);
        assert!(use_.is_allowed());
        assert_eq!(use_.secrets, ["MCP_LINEAR"]);
        let out = s.apply(&use_, &mut p, body.clone()).unwrap();
        assert_eq!(out, body);
        assert_eq!(
            p.headers["authorization"].as_bytes(),
            [&b"Bearer "[..], TOKEN].concat()
        );
        // Nothing the audit or a log would print holds a value or placeholder.
        let printed = format!("{use_:?} {s:?}");
        assert!(!printed.contains("lin_api") && !printed.contains(&ph(&s, "MCP_LINEAR")));
    }

    #[test]
    fn a_request_without_authorization_gets_the_bearer() {
        let s = session();
        let host = Host::parse("mcp.linear.app").unwrap();
        let mut p = parts("/mcp", &[]);
        let use_ = s.check_request(&host, 443, None, true, &p, b"");
        assert_eq!(use_.add_bearer.as_deref(), Some("MCP_LINEAR"));
        s.apply(&use_, &mut p, Bytes::new()).unwrap();
        assert_eq!(
            p.headers["authorization"].as_bytes(),
            [&b"Bearer "[..], TOKEN].concat()
        );
        // No bearer for a binding whose secret has no value.
        let other = Host::parse("other.example").unwrap();
        let use_ = s.check_request(&other, 443, None, true, &parts("/", &[]), b"");
        assert_eq!(use_.add_bearer, None);
    }

    #[test]
    fn another_host_is_refused_and_nothing_changes() {
        let s = session();
        let host = Host::parse("evil.example").unwrap();
        let placeholder = ph(&s, "MCP_LINEAR");
        let split = format!("{{\"x\":\"%66{}\"}}", &placeholder[1..]);
        let mut p = parts("/collect", &[]);
        let use_ = s.check_request(&host, 443, None, true, &p, split.as_bytes());
        assert_eq!(
            use_.decision.reason(),
            Some(Reason::CredentialEndpointMismatch)
        );
        assert_eq!(use_.secrets, ["MCP_LINEAR"]);
        assert!(!use_.decision.message.contains(&placeholder));
        let body = Bytes::from(split.clone());
        assert_eq!(s.apply(&use_, &mut p, body.clone()).unwrap(), body);
    }

    #[test]
    fn plain_http_to_the_bound_host_is_refused() {
        let s = session();
        let host = Host::parse("mcp.linear.app").unwrap();
        let p = parts(
            &format!("http://mcp.linear.app/mcp?t={}", ph(&s, "MCP_LINEAR")),
            &[],
        );
        let use_ = s.check_request(&host, 443, None, false, &p, b"");
        assert_eq!(
            use_.decision.reason(),
            Some(Reason::CredentialEndpointMismatch)
        );
    }

    #[test]
    fn a_json_body_gets_the_escaped_value_and_a_new_length() {
        let s = session();
        let host = Host::parse("api.anthropic.com").unwrap();
        let key = ph(&s, "ANTHROPIC_API_KEY");
        let body = format!("{{\"key\":\"{key}\"}}");
        let mut p = parts(
            "/v1/messages",
            &[
                ("content-type", "application/json".to_string()),
                ("content-length", body.len().to_string()),
            ],
        );
        let use_ = s.check_request(&host, 443, None, true, &p, body.as_bytes());
        let out = s.apply(&use_, &mut p, Bytes::from(body)).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["key"].as_str().unwrap().as_bytes(), MODEL_KEY);
        assert_eq!(p.headers["content-length"], HeaderValue::from(out.len()));
    }

    #[test]
    fn an_echoed_value_comes_back_as_the_placeholder() {
        let s = session();
        let echoed = serde_json::json!({ "seen": std::str::from_utf8(MODEL_KEY).unwrap() });
        let out = s.scrubber().scrub(echoed.to_string().as_bytes()).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["seen"], ph(&s, "ANTHROPIC_API_KEY"));
    }

    #[test]
    fn values_without_a_binding_are_refused_and_none_is_empty() {
        let set = SecretSet::mint([("STRAY".to_string(), TOKEN.to_vec())]).unwrap();
        let err = SessionSecrets::new(&[], set).unwrap_err();
        assert!(matches!(err, SecretsError::Unbound(ref n) if n == "STRAY"));
        let none = SessionSecrets::none();
        assert!(none.is_empty());
        let host = Host::parse("x.example").unwrap();
        let use_ = none.check_request(&host, 443, None, true, &parts("/", &[]), b"anything");
        assert!(use_.is_allowed() && !use_.changes_request());
    }
}
