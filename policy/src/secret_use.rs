//! The secret-use decision (README, "Secrets"): given where this session's minted placeholders were seen in
//! one request, and where that request goes, may the proxy swap them for the real values, and which?
//! Pure: the proxy's scanner finds the placeholders and its substituter carries the answer out.
//!
//! The rule, for every placeholder seen (by secret name and position):
//!
//! - **Not bound to this host:port** (including a name no binding knows), or a `token: true` entry's
//!   token in a request its host's path routing gives to another entry or to none: the whole
//!   request is denied with `credential_endpoint_mismatch`, whatever the position, and nothing is
//!   substituted.
//! - **Bound, but the request is plain HTTP**: denied the same way. A value is never sent in clear
//!   text, and a placeholder on a clear-text hop is refused rather than forwarded.
//! - **Bound, over TLS, a secret with positions** (`in:` on a top-level secret; a `token: true`
//!   server's token, whose positions are `[header:Authorization]`): in a position the list names
//!   (see `secret_position`), granted, and the proxy writes the value there and only there. In any
//!   other place (another header, the query string or a parameter not named, a parameter's name, a
//!   parameter that holds `;`, the path, a header name, the body when `body` is not listed): the
//!   whole request is denied with `credential_endpoint_mismatch`, naming the place, and nothing is
//!   substituted. This is what stops the placeholder being laundered through its own host (a
//!   search query or a `Referer` that the host shows to others would otherwise carry the value).
//! - **Bound, over TLS, a secret without positions, in a substitution position** (a header value,
//!   the query string, the body when the secret says `body: true`): granted; the proxy replaces the
//!   literal placeholder by the value.
//! - **Bound, over TLS, a secret without positions, elsewhere** (the path, the method, the host
//!   name, a header name, the body of a secret without `body: true`): forwarded as the placeholder,
//!   unsubstituted, and reported in
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
use crate::engine::{SecretBinding, SecretSource};
use crate::host::Host;
use crate::secret_position::{self, SecretPosition};
use std::collections::BTreeSet;
use std::fmt;

/// Where in a request a placeholder was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Position {
    Method,
    /// The host name: a CONNECT target, SNI, or an absolute-form request's authority.
    Authority,
    Path,
    /// A query parameter's value (its name in [`Sighting::field`]), or a stretch of the query
    /// string that cannot be attributed to one parameter (`field` is `None`).
    Query,
    /// A query parameter's name.
    QueryName,
    HeaderName,
    /// A header's value (its lower-case name in [`Sighting::field`]).
    HeaderValue,
    Body,
}

impl Position {
    pub const ALL: [Position; 8] = [
        Position::Method,
        Position::Authority,
        Position::Path,
        Position::Query,
        Position::QueryName,
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
            Position::QueryName => "query_name",
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
            Position::QueryName => "a query parameter's name",
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
    /// For [`Position::HeaderValue`], the header's name (lower case); for [`Position::Query`], the
    /// parameter's name, percent-decoded (lossily as UTF-8: a name that is not UTF-8 matches no
    /// position). `None` elsewhere, and for query text no single parameter owns.
    pub field: Option<String>,
}

impl Sighting {
    pub fn new(secret: impl Into<String>, position: Position) -> Sighting {
        Sighting {
            secret: secret.into(),
            position,
            field: None,
        }
    }

    /// A sighting in a named header or query parameter.
    pub fn in_field(
        secret: impl Into<String>,
        position: Position,
        field: impl Into<String>,
    ) -> Sighting {
        Sighting {
            secret: secret.into(),
            position,
            field: Some(field.into()),
        }
    }

    /// True when `positions` names the place of this sighting.
    pub fn is_in(&self, positions: &[SecretPosition]) -> bool {
        positions
            .iter()
            .any(|p| match (self.position, &self.field) {
                (Position::HeaderValue, Some(name)) => p.is_header(name),
                (Position::Query, Some(name)) => p.is_query(name.as_bytes()),
                (Position::Body, _) => *p == SecretPosition::Body,
                _ => false,
            })
    }

    /// The place for the rule (`header:referer`, `query:q`, `path`); a name that could hide
    /// anything (long, or outside the name characters) is not repeated.
    fn place_label(&self) -> String {
        match (self.position, self.field.as_deref()) {
            (Position::HeaderValue, Some(n)) if quotable(n) => format!("header:{n}"),
            (Position::HeaderValue, _) => "header:?".into(),
            (Position::Query, Some(n)) if quotable(n) => format!("query:{n}"),
            (Position::Query, Some(_)) => "query:?".into(),
            (p, _) => p.label().into(),
        }
    }

    /// The place in words, for the message.
    fn place_words(&self) -> String {
        match (self.position, self.field.as_deref()) {
            (Position::HeaderValue, Some(n)) if quotable(n) => format!("header `{n}`"),
            (Position::HeaderValue, _) => "a header whose name is not shown".into(),
            (Position::Query, Some(n)) if quotable(n) => format!("query parameter `{n}`"),
            (Position::Query, Some(_)) => "a query parameter whose name is not shown".into(),
            (Position::Query, None) => {
                "the query string, in a parameter that holds `;` (which parameter it is depends \
                 on the server)"
                    .into()
            }
            (p, _) => p.words().into(),
        }
    }
}

/// A header or parameter name short and plain enough to repeat in a message: it cannot hold a
/// placeholder (at least 32 characters) or a value worth hiding.
fn quotable(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 32
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~[]".contains(&b))
}

impl fmt::Display for Sighting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{}@{}:{field}", self.secret, self.position),
            None => write!(f, "{}@{}", self.secret, self.position),
        }
    }
}

/// What the decision needs to know about one request.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts<'a> {
    /// The destination, as admitted (the CONNECT target or the plain-HTTP request's host).
    pub host: &'a Host,
    pub port: u16,
    /// The MCP entry the request belongs to by its path (`crate::engine::by_path`): a `token:
    /// true` entry's token is bound to it alone, not to the other entries of its host. `None` for
    /// a plain host, a path of an MCP host that is no entry's, or a name (a CONNECT target).
    pub entry: Option<&'a str>,
    /// True when the request reached the proxy inside TLS and goes upstream over TLS.
    pub tls: bool,
    /// True when the request carries any `Authorization` header (whatever its value).
    pub has_authorization: bool,
    /// Every placeholder seen; duplicates are harmless.
    pub sightings: &'a [Sighting],
}

/// Permission to replace one secret's placeholder by its value in this request: without
/// `positions`, in every header value (Basic credentials included) and the query string, and in the
/// body when `body` is true; with `positions`, only in those places (`body` is then true exactly
/// when they include the body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub secret: String,
    pub body: bool,
    pub positions: Option<Vec<SecretPosition>>,
}

impl Grant {
    /// May the value be written into the header `name`?
    pub fn in_header(&self, name: &str) -> bool {
        match &self.positions {
            None => true,
            Some(list) => list.iter().any(|p| p.is_header(name)),
        }
    }

    /// May the value be written into the value of a query parameter with this decoded name? An
    /// ambiguous parameter (holding `;`) counts only without positions.
    pub fn in_query_value(&self, decoded_name: &[u8], ambiguous: bool) -> bool {
        match &self.positions {
            None => true,
            Some(list) => !ambiguous && list.iter().any(|p| p.is_query(decoded_name)),
        }
    }

    /// May the value be written into a query parameter's name (only without positions)?
    pub fn in_query_name(&self) -> bool {
        self.positions.is_none()
    }
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
    // Formatted only where a message names it: most requests use no secret, and this runs on each.
    let authority = || facts.host.authority(facts.port);
    let binding_of = |name: &str| bindings.iter().find(|b| b.name == name);
    let bound_here = |b: &SecretBinding| b.is_bound_for(facts.host, facts.port, facts.entry);

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
        return deny(bindings, &authority(), &elsewhere, &clear_text);
    }

    // Bound here, over TLS: a secret with positions may be seen only in them.
    let outside: Vec<(&SecretBinding, &Sighting)> = sightings
        .iter()
        .filter_map(|s| {
            let b = binding_of(&s.secret)?;
            let list = b.positions.as_ref()?;
            (!s.is_in(list)).then_some((b, *s))
        })
        .collect();
    if !outside.is_empty() {
        return deny_positions(&authority(), &outside);
    }

    let mut substitute: Vec<Grant> = vec![];
    let mut left_as_is: Vec<Sighting> = vec![];
    for s in &sightings {
        // Every sighting here is bound to this host, the request is over TLS, and a secret with
        // positions was seen only in them.
        let Some(b) = binding_of(&s.secret) else {
            continue;
        };
        let substituted = b.positions.is_some()
            || match s.position {
                Position::HeaderValue | Position::Query | Position::QueryName => true,
                Position::Body => b.body,
                Position::Method | Position::Authority | Position::Path | Position::HeaderName => {
                    false
                }
            };
        if substituted {
            if !substitute.iter().any(|g| g.secret == b.name) {
                substitute.push(Grant {
                    secret: b.name.clone(),
                    body: b.body,
                    positions: b.positions.clone(),
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
        Decision::allow("no secret used", "no secret is substituted on this request")
    } else {
        Decision::allow(
            secrets
                .iter()
                .map(|n| format!("secrets.{n} hosts"))
                .collect::<Vec<_>>()
                .join(", "),
            format!(
                "{} {} bound to {}",
                list(&secrets),
                if secrets.len() == 1 { "is" } else { "are" },
                authority()
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
            // The host:port is named (as for any secret), the url's path is not: some servers
            // carry credentials in it.
            Some(b) if b.entry.is_some() => format!(
                "bound only to {} (the token of MCP server {}, for that server's url alone)",
                b.hosts
                    .iter()
                    .map(|h| h.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                b.entry.as_deref().unwrap_or_default()
            ),
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

/// The denial of placeholders seen on their own host outside their secret's positions: each place
/// named in the message and the rule (`secrets.NAME.in query:q`, `mcp.SERVER.token header:referer`).
fn deny_positions(authority: &str, outside: &[(&SecretBinding, &Sighting)]) -> SecretUse {
    let mut parts: Vec<String> = vec![];
    let mut rules: Vec<String> = vec![];
    let mut names: BTreeSet<String> = BTreeSet::new();
    for (b, _) in outside {
        if !names.insert(b.name.clone()) {
            continue;
        }
        let places: Vec<&Sighting> = outside
            .iter()
            .filter(|(o, _)| o.name == b.name)
            .map(|(_, s)| *s)
            .collect();
        let listed = b.positions.as_deref().unwrap_or_default();
        let key = match b.sources.iter().find_map(|s| match s {
            SecretSource::ServerToken { server } => Some(server),
            _ => None,
        }) {
            Some(server) => format!("mcp.{server}.token"),
            None => format!("secrets.{}.in", b.name),
        };
        let origin = if key.starts_with("mcp.") {
            ", the positions of a `token: true` server's token"
        } else {
            ""
        };
        let mut words: Vec<String> = places.iter().map(|s| s.place_words()).collect();
        words.dedup();
        parts.push(format!(
            "the placeholder of {} in {}, which its positions do not include ({}{origin})",
            b.name,
            words.join(" and "),
            secret_position::list(listed)
        ));
        for s in places {
            let rule = format!("{key} {}", s.place_label());
            if !rules.contains(&rule) {
                rules.push(rule);
            }
        }
    }
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
    use crate::host::HostPattern;

    fn binding(name: &str, hosts: &[&str], body: bool, bearer: bool) -> SecretBinding {
        SecretBinding {
            programs: Default::default(),
            name: name.to_string(),
            hosts: hosts
                .iter()
                .map(|h| HostPattern::parse(h).unwrap())
                .collect(),
            body,
            sources: vec![SecretSource::TopLevel],
            default_bearer: bearer,
            positions: None,
            entry: None,
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
            entry: None,
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
            entry: None,
            tls: true,
            has_authorization: true,
            sightings: &sightings,
        };
        let answer = decide(&bindings, &facts);
        assert_eq!(
            answer.substitute,
            vec![Grant {
                secret: "KEY".into(),
                body: true,
                positions: None,
            }]
        );
        assert_eq!(answer.secrets, vec!["KEY".to_string()]);
        assert!(answer.changes_request());
    }

    fn with_positions(name: &str, host: &str, positions: &[&str]) -> SecretBinding {
        let list: Vec<SecretPosition> = positions
            .iter()
            .map(|p| SecretPosition::parse(p).unwrap())
            .collect();
        SecretBinding {
            body: list.contains(&SecretPosition::Body),
            positions: Some(list),
            ..binding(name, &[host], false, false)
        }
    }

    fn decide_on(bindings: &[SecretBinding], host: &str, sightings: &[Sighting]) -> SecretUse {
        let host = Host::parse(host).unwrap();
        decide(
            bindings,
            &RequestFacts {
                host: &host,
                port: 443,
                entry: None,
                tls: true,
                has_authorization: true,
                sightings,
            },
        )
    }

    #[test]
    fn a_placeholder_outside_its_positions_is_refused_naming_the_place() {
        let bindings = [with_positions(
            "GITHUB_TOKEN",
            "api.github.com",
            &["header:Authorization"],
        )];
        let answer = decide_on(
            &bindings,
            "api.github.com",
            &[
                Sighting::in_field("GITHUB_TOKEN", Position::Query, "q"),
                Sighting::in_field("GITHUB_TOKEN", Position::HeaderValue, "authorization"),
            ],
        );
        assert_eq!(
            answer.decision.reason(),
            Some(Reason::CredentialEndpointMismatch)
        );
        assert_eq!(answer.decision.rule, "secrets.GITHUB_TOKEN.in query:q");
        assert_eq!(
            answer.decision.message,
            "request to api.github.com:443 refused: the placeholder of GITHUB_TOKEN in query \
             parameter `q`, which its positions do not include (header:Authorization)"
        );
        assert!(answer.substitute.is_empty() && !answer.changes_request());
        assert_eq!(answer.secrets, ["GITHUB_TOKEN"]);
    }

    #[test]
    fn a_token_servers_refusal_names_its_server_key() {
        let mut token =
            with_positions("MCP_TRACKER", "mcp.tracker.test", &["header:Authorization"]);
        token.sources = vec![SecretSource::ServerToken {
            server: "tracker".into(),
        }];
        token.default_bearer = true;
        let answer = decide_on(
            &[token],
            "mcp.tracker.test",
            &[
                Sighting::in_field("MCP_TRACKER", Position::HeaderValue, "referer"),
                Sighting::new("MCP_TRACKER", Position::Body),
            ],
        );
        assert_eq!(
            answer.decision.rule,
            "mcp.tracker.token header:referer, mcp.tracker.token body"
        );
        assert_eq!(
            answer.decision.message,
            "request to mcp.tracker.test:443 refused: the placeholder of MCP_TRACKER in header \
             `referer` and the body, which its positions do not include (header:Authorization, \
             the positions of a `token: true` server's token)"
        );
        assert_eq!(answer.add_bearer, None);
    }

    #[test]
    fn a_name_that_could_hold_a_placeholder_is_never_repeated() {
        let placeholder = "fenzi_ph_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_xyzAB";
        let bindings = [with_positions("KEY", "api.example.com", &["query:key"])];
        for position in [Position::Query, Position::HeaderValue] {
            let answer = decide_on(
                &bindings,
                "api.example.com",
                &[Sighting::in_field("KEY", position, placeholder)],
            );
            assert!(!answer.is_allowed());
            let printed = format!("{} {}", answer.decision.rule, answer.decision.message);
            assert!(!printed.contains(placeholder), "{printed}");
            assert!(!printed.contains("fenzi_ph"), "{printed}");
        }
    }

    #[test]
    fn a_grant_with_positions_writes_only_there() {
        let bindings = [with_positions(
            "KEY",
            "api.example.com",
            &["query:key", "header:X-Api-Key"],
        )];
        let answer = decide_on(
            &bindings,
            "api.example.com",
            &[Sighting::in_field("KEY", Position::Query, "key")],
        );
        let [grant] = answer.substitute.as_slice() else {
            panic!("{answer:?}");
        };
        assert!(grant.in_header("x-api-key") && grant.in_header("X-API-KEY"));
        assert!(!grant.in_header("authorization") && !grant.in_header("referer"));
        assert!(grant.in_query_value(b"key", false));
        assert!(!grant.in_query_value(b"key", true) && !grant.in_query_value(b"q", false));
        assert!(!grant.in_query_name() && !grant.body);
        // Without positions: everywhere a header value or the query can hold it.
        let open = Grant {
            secret: "KEY".into(),
            body: false,
            positions: None,
        };
        assert!(
            open.in_header("referer") && open.in_query_value(b"q", true) && open.in_query_name()
        );
    }
}
