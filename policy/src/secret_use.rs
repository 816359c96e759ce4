//! The secret-use decision (README, "Secrets"): given where this session's minted placeholders were seen in
//! one request, and where that request goes, may the proxy swap them for the real values, and which?
//! Pure: the proxy's scanner finds the placeholders and its substituter carries the answer out.
//!
//! The rule, for every placeholder seen (by secret name and position):
//!
//! - **Not bound to this host:port** (including a name no binding knows): the whole request is denied
//!   with `credential_endpoint_mismatch`, whatever the position, and nothing is substituted.
//! - **Bound, but the request is plain HTTP**: denied the same way. A value is never sent in clear
//!   text, and a placeholder on a clear-text hop is refused rather than forwarded.
//! - **Bound, over TLS, in a substitution position** (a header value, the query string, the body when
//!   the secret says `body: true`): granted; the proxy replaces the literal placeholder by the value.
//! - **Bound, over TLS, elsewhere** (the path, the method, the host name, a header name, the body of
//!   a secret without `body: true`): forwarded as the placeholder, unsubstituted, and reported in
//!   [`SecretUse::left_as_is`]. Why not refuse: the only party that learns the placeholder is the host
//!   the secret is bound to, which is trusted with the real value anyway, and a placeholder is a
//!   random string that means nothing outside this session's proxy. Refusing would instead wedge an
//!   agent whose conversation history merely mentions its own key (every later request to the model
//!   host would carry it in the body and be refused). The position rule stays strict in the one
//!   direction that matters: a value is only ever written where the policy says.
//!
//! A `token: true` server's secret is added as `Authorization: Bearer <value>` to a request over TLS
//! that carries no `Authorization` header at all, unless the request is denied.
//!
//! The answer names secrets only (for the audit record and the denial message); it never sees values
//! or placeholders.

use crate::decision::{Decision, Reason};
use crate::engine::SecretBinding;
use crate::host::Host;
use std::collections::BTreeSet;
use std::fmt;

/// Where in a request a placeholder was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Position {
    Method,
    /// The host name: a CONNECT target, SNI, or an absolute-form request's authority.
    Authority,
    Path,
    Query,
    HeaderName,
    HeaderValue,
    Body,
}

impl Position {
    pub const ALL: [Position; 7] = [
        Position::Method,
        Position::Authority,
        Position::Path,
        Position::Query,
        Position::HeaderName,
        Position::HeaderValue,
        Position::Body,
    ];

    /// The snake_case label used in tables and messages.
    pub fn label(self) -> &'static str {
        match self {
            Position::Method => "method",
            Position::Authority => "authority",
            Position::Path => "path",
            Position::Query => "query",
            Position::HeaderName => "header_name",
            Position::HeaderValue => "header_value",
            Position::Body => "body",
        }
    }

    pub fn from_label(label: &str) -> Option<Position> {
        Position::ALL.into_iter().find(|p| p.label() == label)
    }

    /// Words for people: "a header value", "the path".
    fn words(self) -> &'static str {
        match self {
            Position::Method => "the method",
            Position::Authority => "the host name",
            Position::Path => "the path",
            Position::Query => "the query string",
            Position::HeaderName => "a header name",
            Position::HeaderValue => "a header value",
            Position::Body => "the body",
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One minted placeholder seen in a request: the secret's name and where.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sighting {
    pub secret: String,
    pub position: Position,
}

impl Sighting {
    pub fn new(secret: impl Into<String>, position: Position) -> Sighting {
        Sighting {
            secret: secret.into(),
            position,
        }
    }
}

/// What the decision needs to know about one request.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts<'a> {
    /// The destination, as admitted (the CONNECT target or the plain-HTTP request's host).
    pub host: &'a Host,
    pub port: u16,
    /// True when the request reached the proxy inside TLS and goes upstream over TLS.
    pub tls: bool,
    /// True when the request carries any `Authorization` header (whatever its value).
    pub has_authorization: bool,
    /// Every placeholder seen; duplicates are harmless.
    pub sightings: &'a [Sighting],
}

/// Permission to replace one secret's placeholder by its value in this request: always in header
/// values (Basic credentials included) and the query string, and in the body when `body` is true.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub secret: String,
    pub body: bool,
}

/// The secret-use decision for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretUse {
    /// Allowed, or denied with `credential_endpoint_mismatch`.
    pub decision: Decision,
    /// On allow: the secrets to substitute, sorted by name. Empty on deny.
    pub substitute: Vec<Grant>,
    /// On allow: the secret to add as `Authorization: Bearer <value>`. `None` on deny.
    pub add_bearer: Option<String>,
    /// On allow: placeholders forwarded unsubstituted to their own bound host (see the module doc).
    pub left_as_is: Vec<Sighting>,
    /// The names for the audit record's `secrets`, sorted: on allow the secrets substituted or added,
    /// on deny the secrets whose placeholders caused the denial.
    pub secrets: Vec<String>,
}

impl SecretUse {
    pub fn is_allowed(&self) -> bool {
        self.decision.is_allowed()
    }

    /// True when the request's bytes must change before they go upstream.
    pub fn changes_request(&self) -> bool {
        !self.substitute.is_empty() || self.add_bearer.is_some()
    }
}

/// Decides what may happen to the placeholders seen in one request. `bindings` may be the policy's
/// whole list or only those bound to this host: a secret absent from it counts as bound nowhere.
pub fn decide(bindings: &[SecretBinding], facts: &RequestFacts<'_>) -> SecretUse {
    let authority = facts.host.authority(facts.port);
    let binding_of = |name: &str| bindings.iter().find(|b| b.name == name);
    let bound_here = |b: &SecretBinding| b.is_bound_to(facts.host, facts.port);

    // Deduplicated and ordered, so the answer does not depend on the scanner's order.
    let sightings: BTreeSet<&Sighting> = facts.sightings.iter().collect();

    let mut elsewhere: Vec<&Sighting> = vec![];
    let mut clear_text: Vec<&Sighting> = vec![];
    for s in &sightings {
        match binding_of(&s.secret) {
            Some(b) if bound_here(b) => {
                if !facts.tls {
                    clear_text.push(s);
                }
            }
            _ => elsewhere.push(s),
        }
    }

    if !elsewhere.is_empty() || !clear_text.is_empty() {
        return deny(bindings, &authority, &elsewhere, &clear_text);
    }

    let mut substitute: Vec<Grant> = vec![];
    let mut left_as_is: Vec<Sighting> = vec![];
    for s in &sightings {
        // Every sighting here is bound to this host and the request is over TLS.
        let Some(b) = binding_of(&s.secret) else {
            continue;
        };
        let substituted = match s.position {
            Position::HeaderValue | Position::Query => true,
            Position::Body => b.body,
            Position::Method | Position::Authority | Position::Path | Position::HeaderName => false,
        };
        if substituted {
            if !substitute.iter().any(|g| g.secret == b.name) {
                substitute.push(Grant {
                    secret: b.name.clone(),
                    body: b.body,
                });
            }
        } else {
            left_as_is.push((*s).clone());
        }
    }
    substitute.sort_by(|a, c| a.secret.cmp(&c.secret));

    // The loader allows one secret per host; if two bearer secrets ever matched, the first by name
    // wins, so the answer is still deterministic.
    let add_bearer = if facts.tls && !facts.has_authorization {
        bindings
            .iter()
            .filter(|b| b.default_bearer && bound_here(b))
            .map(|b| b.name.clone())
            .min()
    } else {
        None
    };

    let mut secrets: BTreeSet<String> = substitute.iter().map(|g| g.secret.clone()).collect();
    secrets.extend(add_bearer.iter().cloned());
    let secrets: Vec<String> = secrets.into_iter().collect();

    let decision = if secrets.is_empty() {
        Decision::allow(
            "no secret used",
            format!("no secret is substituted on this request to {authority}"),
        )
    } else {
        Decision::allow(
            secrets
                .iter()
                .map(|n| format!("secrets.{n} hosts"))
                .collect::<Vec<_>>()
                .join(", "),
            format!(
                "{} {} bound to {authority}",
                list(&secrets),
                if secrets.len() == 1 { "is" } else { "are" }
            ),
        )
    };
    SecretUse {
        decision,
        substitute,
        add_bearer,
        left_as_is,
        secrets,
    }
}

fn deny(
    bindings: &[SecretBinding],
    authority: &str,
    elsewhere: &[&Sighting],
    clear_text: &[&Sighting],
) -> SecretUse {
    let mut parts: Vec<String> = vec![];
    let mut names: BTreeSet<String> = BTreeSet::new();
    let mut rules: Vec<String> = vec![];
    for name in unique_names(elsewhere) {
        let positions = positions_of(elsewhere, name);
        let bound = match bindings.iter().find(|b| b.name == name) {
            Some(b) if !b.hosts.is_empty() => format!(
                "bound only to {}",
                b.hosts
                    .iter()
                    .map(|h| h.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            _ => "bound to no host".to_string(),
        };
        parts.push(format!(
            "the placeholder of secret {name} (in {positions}) is {bound}, not {authority}"
        ));
        rules.push(format!("secrets.{name} hosts"));
        names.insert(name.to_string());
    }
    for name in unique_names(clear_text) {
        let positions = positions_of(clear_text, name);
        parts.push(format!(
            "the placeholder of secret {name} (in {positions}) is on a plain-HTTP request; \
             secrets are only sent over TLS"
        ));
        rules.push("secrets over TLS only".to_string());
        names.insert(name.to_string());
    }
    rules.dedup();
    SecretUse {
        decision: Decision::deny(
            Reason::CredentialEndpointMismatch,
            rules.join(", "),
            format!("request to {authority} refused: {}", parts.join("; ")),
        ),
        substitute: vec![],
        add_bearer: None,
        left_as_is: vec![],
        secrets: names.into_iter().collect(),
    }
}

/// The secret names of `sightings`, in order, once each (the input is sorted by name).
fn unique_names<'s>(sightings: &[&'s Sighting]) -> Vec<&'s str> {
    let mut out: Vec<&str> = sightings.iter().map(|s| s.secret.as_str()).collect();
    out.dedup();
    out
}

fn positions_of(sightings: &[&Sighting], name: &str) -> String {
    let words: Vec<&str> = sightings
        .iter()
        .filter(|s| s.secret == name)
        .map(|s| s.position.words())
        .collect();
    words.join(", ")
}

fn list(names: &[String]) -> String {
    match names {
        [one] => format!("secret {one}"),
        many => format!("secrets {}", many.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::SecretSource;
    use crate::host::HostPattern;

    fn binding(name: &str, hosts: &[&str], body: bool, bearer: bool) -> SecretBinding {
        SecretBinding {
            name: name.to_string(),
            hosts: hosts
                .iter()
                .map(|h| HostPattern::parse(h).unwrap())
                .collect(),
            body,
            sources: vec![SecretSource::TopLevel],
            default_bearer: bearer,
        }
    }

    #[test]
    fn position_labels_round_trip() {
        for p in Position::ALL {
            assert_eq!(Position::from_label(p.label()), Some(p));
        }
        assert_eq!(Position::from_label("nowhere"), None);
    }

    #[test]
    fn deny_message_names_secret_and_hosts_never_more() {
        let bindings = [binding("KEY", &["api.example.com"], false, false)];
        let host = Host::parse("evil.example").unwrap();
        let sightings = [Sighting::new("KEY", Position::Body)];
        let facts = RequestFacts {
            host: &host,
            port: 443,
            tls: true,
            has_authorization: false,
            sightings: &sightings,
        };
        let answer = decide(&bindings, &facts);
        assert_eq!(
            answer.decision.reason(),
            Some(Reason::CredentialEndpointMismatch)
        );
        assert_eq!(
            answer.decision.message,
            "request to evil.example:443 refused: the placeholder of secret KEY (in the body) is \
             bound only to api.example.com, not evil.example:443"
        );
        assert_eq!(answer.decision.rule, "secrets.KEY hosts");
    }

    #[test]
    fn duplicate_sightings_give_one_grant() {
        let bindings = [binding("KEY", &["api.example.com"], true, false)];
        let host = Host::parse("api.example.com").unwrap();
        let sightings = [
            Sighting::new("KEY", Position::Body),
            Sighting::new("KEY", Position::HeaderValue),
            Sighting::new("KEY", Position::Body),
        ];
        let facts = RequestFacts {
            host: &host,
            port: 443,
            tls: true,
            has_authorization: true,
            sightings: &sightings,
        };
        let answer = decide(&bindings, &facts);
        assert_eq!(
            answer.substitute,
            vec![Grant {
                secret: "KEY".into(),
                body: true
            }]
        );
        assert_eq!(answer.secrets, vec!["KEY".to_string()]);
        assert!(answer.changes_request());
    }
}
