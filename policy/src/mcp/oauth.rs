//! Sign-in on an MCP server's host (MCP authorization, 2025-03-26 and 2025-06-18; DESIGN §19): which
//! requests there are steps of the OAuth flow a client runs itself, and what the server said that
//! opens them.
//!
//! - What the server says is read strictly before fenzi learns anything from it: its
//!   `WWW-Authenticate` challenge ([`SignIn::learn_challenge`], RFC 9110 §11.6.1, one `Bearer`
//!   challenge with at most one `resource_metadata`), its protected-resource metadata (RFC 9728,
//!   [`read_resource_metadata`]) and its authorization-server metadata (RFC 8414 and OpenID
//!   discovery, [`read_server_metadata`]): strict JSON under [`METADATA_LIMITS`] (duplicates,
//!   oversize and depth refused), a top-level object, and each member fenzi reads of the type its
//!   RFC gives. A document that fails teaches nothing.
//! - What is learned is a path on the entry's own origin (scheme, host and port exactly), recorded
//!   per session and per entry ([`SignIn`], kept in the entry's [`super::inventory::Inventory`]),
//!   at most [`MAX_NAMED`] of each kind. A URL naming another origin, or a path fenzi cannot match
//!   byte for byte (`..`, `%`, `;`, a fragment), is not recorded: an upstream can only narrow what
//!   is already allowed (its own host, which the policy names) to particular paths and methods,
//!   never name another host. An authorization server elsewhere is reached under that host's own
//!   policy entry, or not at all (`host_not_allowed`).
//! - The steps ([`Step`]), decided by [`step`] from the entry's endpoint and what was learned:
//!   metadata GETs (the well-known forms of [`super::http::oauth_metadata`], the
//!   `resource_metadata` the server named, and `{issuer}/.well-known/openid-configuration` for an
//!   issuer on this origin that protected-resource metadata named); the endpoints the
//!   authorization-server metadata names (authorization: GET; registration: POST JSON; token and
//!   revocation: POST form); and, for a server that answered `404` to
//!   `/.well-known/oauth-authorization-server` and published no metadata this session, the
//!   2025-03-26 defaults `/authorize`, `/token`, `/register` at its root.
//! - Each step's request is checked by its own rules ([`check_post`]): GETs without a body (by the
//!   classifier); a registration is one strict JSON object that is not a JSON-RPC message; a token
//!   or revocation request is a strict `application/x-www-form-urlencoded` body, no parameter
//!   given twice (RFC 6749 §3.1), with `grant_type` (token) or `token` (revocation). So a JSON-RPC
//!   body never passes on a path the server named. Messages never quote a body: it carries codes,
//!   verifiers and client secrets.

use super::RequestView;
use super::http::{self, is_plain_subpath, parse_target};
use super::legacy::{Authority, same_server};
use crate::decision::{Decision, Reason};
use crate::json::{self, JsonError, JsonErrorKind, JsonLimits, Value};
use crate::untrusted_text::shown;

/// Most paths of each kind (named metadata, issuers, endpoints) one entry learns in one session.
/// Real servers name one or two; the bound keeps a hostile server from growing memory or the
/// per-request comparison.
pub const MAX_NAMED: usize = 8;

/// Most `authorization_servers` one protected-resource metadata document may list.
pub const MAX_AUTHORIZATION_SERVERS: usize = 16;

/// The limits a metadata document is read under: real ones are a few kilobytes.
pub const METADATA_LIMITS: JsonLimits = JsonLimits {
    max_bytes: 64 * 1024,
    max_depth: 16,
};

/// The root path of RFC 8414 metadata: a `404` there (and no document read) is a server that
/// publishes none, the 2025-03-26 rule for the default endpoints.
const SERVER_METADATA_ROOT: &str = "/.well-known/oauth-authorization-server";

/// The 2025-03-26 default endpoints at the server's root.
const DEFAULTS: [(Step, &str); 3] = [
    (Step::Authorization, "/authorize"),
    (Step::Token, "/token"),
    (Step::Registration, "/register"),
];

/// One request of the sign-in flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// GET of protected-resource metadata (RFC 9728).
    ResourceMetadata,
    /// GET of authorization-server metadata (RFC 8414, OpenID discovery).
    ServerMetadata,
    /// GET of the authorization endpoint (a browser's navigation).
    Authorization,
    /// POST of a client registration (RFC 7591), JSON.
    Registration,
    /// POST to the token endpoint, a form.
    Token,
    /// POST to the revocation endpoint (RFC 7009), a form.
    Revocation,
}

impl Step {
    /// What the step is, as its rule names it (`mcp.<server> oauth token endpoint`).
    pub fn name(self) -> &'static str {
        match self {
            Step::ResourceMetadata => "oauth protected-resource metadata",
            Step::ServerMetadata => "oauth authorization-server metadata",
            Step::Authorization => "oauth authorization endpoint",
            Step::Registration => "oauth registration endpoint",
            Step::Token => "oauth token endpoint",
            Step::Revocation => "oauth revocation endpoint",
        }
    }

    /// Its answer is a metadata document fenzi reads and learns from.
    pub fn is_metadata(self) -> bool {
        matches!(self, Step::ResourceMetadata | Step::ServerMetadata)
    }

    fn is_post(self) -> bool {
        matches!(self, Step::Registration | Step::Token | Step::Revocation)
    }
}

/// Why a step is allowed here: the well-known paths every MCP host has, what the server named this
/// session, or the 2025-03-26 defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    WellKnown,
    Named,
    Default,
}

/// The entry's own origin: its scheme (`https` when `tls`), host (as the policy names it) and port.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    pub tls: bool,
    pub host: &'a str,
    pub port: u16,
}

/// What one session learned of one entry's sign-in. Empty, it allows only the well-known metadata
/// GETs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SignIn {
    /// Paths the server named in `resource_metadata`.
    resource_metadata: Vec<String>,
    /// Paths of issuers on this origin that protected-resource metadata named.
    issuers: Vec<String>,
    /// Endpoints authorization-server metadata on this origin named.
    endpoints: Vec<(Step, String)>,
    /// Authorization-server metadata was read from this origin: the defaults stay closed.
    server_metadata_read: bool,
    /// Protected-resource metadata was read: the server is 2025-06-18 or later, and its
    /// authorization server is where that names, so the 2025-03-26 defaults stay closed.
    resource_metadata_read: bool,
    /// The server answered `404` to [`SERVER_METADATA_ROOT`].
    no_server_metadata: bool,
}

/// Why something the server said was not learned. Fenzi's own words: the server's bytes are never
/// repeated (they may hold anything).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LearnError {
    #[error("the URL names another origin than the MCP server's own scheme, host and port")]
    OtherOrigin,
    #[error(
        "the URL is not one fenzi can match exactly (a relative reference, percent-escape, `;` \
         parameter, fragment, or empty, `.` or `..` segment)"
    )]
    Ambiguous,
    #[error("the server named more than {MAX_NAMED} paths of one kind this session")]
    Full,
    #[error("the WWW-Authenticate header cannot be read strictly")]
    Challenge,
}

/// Why a metadata document cannot be read (nothing is learned from it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    #[error("larger than {} bytes", METADATA_LIMITS.max_bytes)]
    TooLarge,
    #[error("not strict JSON: {0}")]
    Json(JsonError),
    #[error("not a JSON object")]
    NotObject,
    #[error("its member {0} is not a {1}")]
    WrongType(&'static str, &'static str),
    #[error("its member {0} lists more than {1} entries")]
    TooMany(&'static str, usize),
    #[error("sent with a content coding")]
    Encoded,
    #[error("not sent as application/json")]
    ContentType,
}

/// Protected-resource metadata, the members fenzi reads (the proxy learns from the first two; a
/// client signing in on the host needs the scopes too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceMetadata {
    pub resource: Option<String>,
    pub authorization_servers: Vec<String>,
    pub scopes_supported: Vec<String>,
}

/// Authorization-server metadata, the members fenzi reads (the proxy learns from `endpoints`; a
/// client signing in on the host needs the rest too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerMetadata {
    pub issuer: Option<String>,
    /// The endpoints it names, as given (absolute URLs).
    pub endpoints: Vec<(Step, String)>,
    pub scopes_supported: Vec<String>,
    pub grant_types_supported: Vec<String>,
    pub code_challenge_methods_supported: Vec<String>,
    pub token_endpoint_auth_methods_supported: Vec<String>,
    /// `client_id_metadata_document_supported` (client ID metadata documents, MCP 2025-11-25).
    pub client_id_metadata_documents: bool,
}

/// The endpoint members of authorization-server metadata.
const ENDPOINT_MEMBERS: [(&str, Step); 4] = [
    ("authorization_endpoint", Step::Authorization),
    ("token_endpoint", Step::Token),
    ("registration_endpoint", Step::Registration),
    ("revocation_endpoint", Step::Revocation),
];

/// Reads a metadata document's top level strictly.
fn read_object(text: &[u8]) -> Result<Value, MetadataError> {
    let value = json::parse(text, &METADATA_LIMITS).map_err(|e| match e.kind {
        JsonErrorKind::TooLarge => MetadataError::TooLarge,
        _ => MetadataError::Json(e),
    })?;
    if value.as_object().is_none() {
        return Err(MetadataError::NotObject);
    }
    Ok(value)
}

fn optional_string(doc: &Value, member: &'static str) -> Result<Option<String>, MetadataError> {
    match doc.get(member) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(MetadataError::WrongType(member, "string")),
    }
}

fn string_array(
    doc: &Value,
    member: &'static str,
    max: usize,
) -> Result<Vec<String>, MetadataError> {
    let items = match doc.get(member) {
        None => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(MetadataError::WrongType(member, "list of strings")),
    };
    if items.len() > max {
        return Err(MetadataError::TooMany(member, max));
    }
    items
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .ok_or(MetadataError::WrongType(member, "list of strings"))
        })
        .collect()
}

/// The `*_supported` and other list members both RFCs define: each, when present, a list of
/// strings (checked, not kept).
const LIST_MEMBERS: [&str; 12] = [
    "scopes_supported",
    "bearer_methods_supported",
    "resource_signing_alg_values_supported",
    "response_types_supported",
    "response_modes_supported",
    "grant_types_supported",
    "token_endpoint_auth_methods_supported",
    "token_endpoint_auth_signing_alg_values_supported",
    "revocation_endpoint_auth_methods_supported",
    "code_challenge_methods_supported",
    "ui_locales_supported",
    "authorization_details_types_supported",
];

fn check_lists(doc: &Value) -> Result<(), MetadataError> {
    for member in LIST_MEMBERS {
        string_array(doc, member, usize::MAX)?;
    }
    Ok(())
}

/// Reads protected-resource metadata (RFC 9728 §2): `resource` a string, `authorization_servers`
/// a list of at most [`MAX_AUTHORIZATION_SERVERS`] strings.
pub fn read_resource_metadata(text: &[u8]) -> Result<ResourceMetadata, MetadataError> {
    let doc = read_object(text)?;
    check_lists(&doc)?;
    Ok(ResourceMetadata {
        resource: optional_string(&doc, "resource")?,
        authorization_servers: string_array(
            &doc,
            "authorization_servers",
            MAX_AUTHORIZATION_SERVERS,
        )?,
        scopes_supported: string_array(&doc, "scopes_supported", usize::MAX)?,
    })
}

/// Reads authorization-server metadata (RFC 8414 §2, OpenID Connect Discovery §3): `issuer` and
/// the endpoints strings.
pub fn read_server_metadata(text: &[u8]) -> Result<ServerMetadata, MetadataError> {
    let doc = read_object(text)?;
    check_lists(&doc)?;
    let issuer = optional_string(&doc, "issuer")?;
    let mut endpoints = Vec::new();
    for (member, step) in ENDPOINT_MEMBERS {
        if let Some(url) = optional_string(&doc, member)? {
            endpoints.push((step, url));
        }
    }
    let list = |member| string_array(&doc, member, usize::MAX);
    let client_id_metadata_documents = match doc.get("client_id_metadata_document_supported") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(MetadataError::WrongType(
                "client_id_metadata_document_supported",
                "boolean",
            ));
        }
    };
    Ok(ServerMetadata {
        issuer,
        endpoints,
        scopes_supported: list("scopes_supported")?,
        grant_types_supported: list("grant_types_supported")?,
        code_challenge_methods_supported: list("code_challenge_methods_supported")?,
        token_endpoint_auth_methods_supported: list("token_endpoint_auth_methods_supported")?,
        client_id_metadata_documents,
    })
}

/// The path (without query) an absolute `url` names on `origin`: scheme, host and port exactly
/// (default ports filled in), no user info, no fragment, and a path fenzi matches byte for byte.
pub fn path_on_origin(origin: Origin<'_>, url: &str) -> Result<String, LearnError> {
    let (scheme, rest) = url.split_once("://").ok_or(LearnError::Ambiguous)?;
    let (expected, default_port) = if origin.tls {
        ("https", 443)
    } else {
        ("http", 80)
    };
    if !scheme.eq_ignore_ascii_case(expected) {
        return Err(LearnError::OtherOrigin);
    }
    if url.contains('#') {
        return Err(LearnError::Ambiguous);
    }
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = Authority {
        host: origin.host,
        port: origin.port,
    };
    if !same_server(authority, &rest[..split], default_port) {
        return Err(LearnError::OtherOrigin);
    }
    let target = match &rest[split..] {
        "" => "/".to_string(),
        q if q.starts_with('?') => format!("/{q}"),
        p => p.to_string(),
    };
    let path = parse_target(&target)
        .map_err(|_| LearnError::Ambiguous)?
        .path;
    if !is_plain_subpath(&path[1..]) {
        return Err(LearnError::Ambiguous);
    }
    Ok(path.to_string())
}

fn remember(list: &mut Vec<String>, path: String) -> Result<(), LearnError> {
    if list.contains(&path) {
        return Ok(());
    }
    if list.len() >= MAX_NAMED {
        return Err(LearnError::Full);
    }
    list.push(path);
    Ok(())
}

impl SignIn {
    /// Learns the `resource_metadata` of `Bearer` challenges in the `WWW-Authenticate` values of a
    /// `401` or `403` from the server. `Ok(false)`: no challenge named one.
    pub fn learn_challenge<'v>(
        &mut self,
        origin: Origin<'_>,
        values: impl IntoIterator<Item = &'v [u8]>,
    ) -> Result<bool, LearnError> {
        let Some(url) = challenged_resource_metadata(values)? else {
            return Ok(false);
        };
        let path = path_on_origin(origin, &url)?;
        remember(&mut self.resource_metadata, path)?;
        Ok(true)
    }

    /// Learns from protected-resource metadata read from the server: the issuers on its own origin.
    /// Issuers elsewhere are reached under their own hosts' entries, and are not recorded here.
    pub fn learn_resource_metadata(
        &mut self,
        origin: Origin<'_>,
        doc: &ResourceMetadata,
    ) -> Result<(), LearnError> {
        self.resource_metadata_read = true;
        for issuer in &doc.authorization_servers {
            match path_on_origin(origin, issuer) {
                Ok(path) => remember(&mut self.issuers, path)?,
                Err(LearnError::OtherOrigin) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Learns from authorization-server metadata read from the server: the endpoints it names on
    /// its own origin. One naming another origin is not recorded (that host's own entry decides
    /// requests there); one fenzi cannot match exactly makes the whole document unlearned.
    pub fn learn_server_metadata(
        &mut self,
        origin: Origin<'_>,
        doc: &ServerMetadata,
    ) -> Result<(), LearnError> {
        let mut learned = Vec::new();
        for (step, url) in &doc.endpoints {
            match path_on_origin(origin, url) {
                Ok(path) => learned.push((*step, path)),
                Err(LearnError::OtherOrigin) => {}
                Err(e) => return Err(e),
            }
        }
        self.server_metadata_read = true;
        for (step, path) in learned {
            if self.endpoints.iter().any(|(s, p)| *s == step && *p == path) {
                continue;
            }
            if self.endpoints.len() >= MAX_NAMED {
                return Err(LearnError::Full);
            }
            self.endpoints.push((step, path));
        }
        Ok(())
    }

    /// Notes the server's answer to a GET of `path` (without query) with `status`: a `404` at
    /// [`SERVER_METADATA_ROOT`] is a server that publishes no authorization-server metadata.
    pub fn note_metadata_status(&mut self, path: &str, status: u16) {
        if status == 404 && path == SERVER_METADATA_ROOT {
            self.no_server_metadata = true;
        }
    }

    /// Whether the 2025-03-26 default endpoints are open: the server said it publishes no
    /// authorization-server metadata, and published no metadata this session.
    pub fn defaults_open(&self) -> bool {
        self.no_server_metadata && !self.server_metadata_read && !self.resource_metadata_read
    }
}

/// The `resource_metadata` URL of the `Bearer` challenge in `WWW-Authenticate` values, read strictly
/// (RFC 9110 §11.6.1, RFC 9728 §5.1): `None` when no challenge names one; an error when a value does
/// not follow the grammar or two name one (which would fenzi believe?).
pub fn challenged_resource_metadata<'v>(
    values: impl IntoIterator<Item = &'v [u8]>,
) -> Result<Option<String>, LearnError> {
    let mut named: Option<String> = None;
    for value in values {
        let value = std::str::from_utf8(value).map_err(|_| LearnError::Challenge)?;
        for (scheme, params) in challenges(value)? {
            if !scheme.eq_ignore_ascii_case("bearer") {
                continue;
            }
            for (name, value) in params {
                if !name.eq_ignore_ascii_case("resource_metadata") {
                    continue;
                }
                if named.is_some() {
                    return Err(LearnError::Challenge);
                }
                named = Some(value);
            }
        }
    }
    Ok(named)
}

/// Which sign-in step `method` on `path` (without its query) is on a server with MCP endpoint
/// `endpoint`, given what the session learned; `None` when it is none. The MCP endpoint itself is
/// never a step (the caller decides it first).
pub fn step(
    endpoint: &super::EndpointPath,
    sign_in: &SignIn,
    method: &str,
    path: &str,
) -> Option<(Step, Basis)> {
    let post = match method {
        "GET" => false,
        "POST" => true,
        _ => return None,
    };
    if !post {
        if let Some(name) = http::oauth_metadata(endpoint, path) {
            let step = if name == "oauth-protected-resource" {
                Step::ResourceMetadata
            } else {
                Step::ServerMetadata
            };
            return Some((step, Basis::WellKnown));
        }
        if sign_in.resource_metadata.iter().any(|p| p == path) {
            return Some((Step::ResourceMetadata, Basis::Named));
        }
        // OpenID discovery's issuer-relative form, for an issuer with a path.
        let openid = path
            .strip_suffix("/.well-known/openid-configuration")
            .filter(|issuer| !issuer.is_empty());
        if let Some(issuer) = openid
            && sign_in
                .issuers
                .iter()
                .any(|i| i.trim_end_matches('/') == issuer)
        {
            return Some((Step::ServerMetadata, Basis::Named));
        }
    }
    if let Some((step, _)) = sign_in
        .endpoints
        .iter()
        .find(|(step, p)| step.is_post() == post && p == path)
    {
        return Some((*step, Basis::Named));
    }
    if sign_in.defaults_open()
        && let Some((step, _)) = DEFAULTS
            .iter()
            .find(|(step, p)| step.is_post() == post && *p == path)
    {
        return Some((*step, Basis::Default));
    }
    None
}

/// The decision allowing a bodyless GET step (the classifier has checked there is no body).
pub fn allow_get(server: &str, step: Step, basis: Basis, path: &str) -> Decision {
    Decision::allow(
        format!("mcp.{server} {}", step.name()),
        format!("GET {}: {}", shown(path), why(step, basis)),
    )
}

fn why(step: Step, basis: Basis) -> String {
    let what = match step {
        Step::ResourceMetadata => "protected-resource metadata",
        Step::ServerMetadata => "authorization-server metadata",
        Step::Authorization => "the authorization endpoint",
        Step::Registration => "the registration endpoint",
        Step::Token => "the token endpoint",
        Step::Revocation => "the revocation endpoint",
    };
    match basis {
        Basis::WellKnown => format!("{what} at its well-known path"),
        Basis::Named if step.is_metadata() => format!("{what} the server named"),
        Basis::Named => format!("{what} the server's metadata names"),
        Basis::Default => format!("{what}, a 2025-03-26 default (no metadata published)"),
    }
}

/// Decides a POST step's request: its framing, media type and body (see the module
/// documentation). `limit` is the entry's body limit.
pub fn check_post(
    server: &str,
    step: Step,
    basis: Basis,
    req: &RequestView<'_>,
    limit: usize,
) -> Decision {
    let path = http::path_of(req.path);
    let rule = format!("mcp.{server} {}", step.name());
    let refuse = |why: &str| {
        Decision::deny(
            Reason::PolicyDenied,
            rule.clone(),
            format!("POST {} ({}): {why}", shown(path), step.name()),
        )
    };
    let declared = match http::declared_length(req) {
        Ok(declared) => declared,
        Err(e) => return Decision::deny(Reason::BadRequest, "strict http", e.to_string()),
    };
    let over = |n: u64| usize::try_from(n).map_or(true, |n| n > limit);
    if req.body.len() > limit || declared.is_some_and(over) {
        return Decision::deny(
            Reason::BodyTooLarge,
            "body size limit",
            format!("body larger than {limit} bytes"),
        );
    }
    let media: &[u8] = if step == Step::Registration {
        b"application/json"
    } else {
        b"application/x-www-form-urlencoded"
    };
    if let Err(e) = http::check_body_headers(req, media) {
        return Decision::deny(Reason::BadRequest, "strict http", e.to_string());
    }
    let checked = match step {
        Step::Registration => check_registration(req.body, limit),
        Step::Token => check_form(req.body, "grant_type"),
        Step::Revocation => check_form(req.body, "token"),
        _ => Err(FormError::NotPost),
    };
    match checked {
        Ok(()) => Decision::allow(
            rule.clone(),
            format!("POST {}: {}", shown(path), why(step, basis)),
        ),
        Err(FormError::JsonRpc) => refuse("a JSON-RPC message is not a sign-in request"),
        Err(e) => Decision::deny(
            Reason::BadRequest,
            rule.clone(),
            format!("POST {} ({}): {e}", shown(path), step.name()),
        ),
    }
}

/// Why a sign-in POST's body is refused. Never quotes the body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum FormError {
    #[error("the body is not strict JSON: {0}")]
    Json(JsonError),
    #[error("a client registration is a JSON object")]
    NotObject,
    #[error("a JSON-RPC message")]
    JsonRpc,
    #[error("the body is not a strict application/x-www-form-urlencoded form")]
    Form,
    #[error("the form gives a parameter more than once")]
    Repeated,
    #[error("the form lacks its required parameter {0}")]
    Missing(&'static str),
    #[error("not a step with a body")]
    NotPost,
}

/// RFC 7591 §3.1: client metadata as one JSON object. The members JSON-RPC needs (`jsonrpc`,
/// `method`) are no client metadata: such a body is a message, whatever path it is sent to.
fn check_registration(body: &[u8], limit: usize) -> Result<(), FormError> {
    let limits = JsonLimits {
        max_bytes: limit,
        max_depth: METADATA_LIMITS.max_depth,
    };
    let value = json::parse(body, &limits).map_err(FormError::Json)?;
    if value.as_object().is_none() {
        return Err(FormError::NotObject);
    }
    if value.get("jsonrpc").is_some() || value.get("method").is_some() {
        return Err(FormError::JsonRpc);
    }
    Ok(())
}

/// A strict form body: `name=value` pairs joined by `&`, each made of the characters a URI's query
/// may hold, `+` and well-formed percent-escapes, names non-empty and each given once (compared decoded), and
/// `required` among them with a non-empty value.
fn check_form(body: &[u8], required: &'static str) -> Result<(), FormError> {
    if body.first() == Some(&b'{') || body.first() == Some(&b'[') {
        return Err(FormError::JsonRpc);
    }
    let mut names: Vec<Vec<u8>> = Vec::new();
    let mut found = false;
    if !body.is_empty() {
        for pair in body.split(|&b| b == b'&') {
            let (name, value) = match pair.iter().position(|&b| b == b'=') {
                Some(i) => (&pair[..i], &pair[i + 1..]),
                None => return Err(FormError::Form),
            };
            let name = decode(name).ok_or(FormError::Form)?;
            decode(value).ok_or(FormError::Form)?;
            if name.is_empty() {
                return Err(FormError::Form);
            }
            if names.contains(&name) {
                return Err(FormError::Repeated);
            }
            found |= name == required.as_bytes() && !value.is_empty();
            names.push(name);
        }
    }
    if !found {
        return Err(FormError::Missing(required));
    }
    Ok(())
}

/// A form name or value decoded (`+` is a space), or `None` when it has a character a URI's
/// query may not hold or a malformed escape.
fn decode(text: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while let Some(&b) = text.get(i) {
        match b {
            b'%' => {
                let hex = |j: usize| {
                    text.get(j)
                        .and_then(|c| (*c as char).to_digit(16))
                        .map(|d| d as u8)
                };
                out.push(hex(i + 1)? * 16 + hex(i + 2)?);
                i += 3;
                continue;
            }
            b'+' => out.push(b' '),
            // What RFC 3986 allows in a query, `&` and `=` aside (they split it): encoders escape
            // most of these, hand-written clients may not. JSON (`{`, `[`, `"`) never fits.
            b if b.is_ascii_alphanumeric() || b"-._~!$'()*,;:@/?".contains(&b) => out.push(b),
            _ => return None,
        }
        i += 1;
    }
    Some(out)
}

/// One challenge: its auth-scheme and its auth-params (name, unquoted value).
type Challenge = (String, Vec<(String, String)>);

/// The challenges of a `WWW-Authenticate` value (RFC 9110 §11.6.1): each auth-scheme with its
/// auth-params (names as given, values unquoted); a token68 is accepted and not kept. Anything
/// that does not follow the grammar is an error.
fn challenges(v: &str) -> Result<Vec<Challenge>, LearnError> {
    let b = v.as_bytes();
    let mut i = 0;
    let mut out: Vec<Challenge> = Vec::new();
    let ows = |i: &mut usize| {
        while matches!(b.get(*i), Some(b' ' | b'\t')) {
            *i += 1;
        }
    };
    let token = |i: &mut usize| {
        let start = *i;
        while b.get(*i).is_some_and(|c| is_tchar(*c)) {
            *i += 1;
        }
        &v[start..*i]
    };
    loop {
        // Empty list elements are allowed (RFC 9110 §5.6.1).
        while matches!(b.get(i), Some(b' ' | b'\t' | b',')) {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let name = token(&mut i);
        if name.is_empty() {
            return Err(LearnError::Challenge);
        }
        let after_name = i;
        ows(&mut i);
        if b.get(i) == Some(&b'=') && !out.is_empty() {
            // An auth-param of the current challenge.
            i += 1;
            ows(&mut i);
            let value = if b.get(i) == Some(&b'"') {
                quoted(b, &mut i)?
            } else {
                let t = token(&mut i);
                if t.is_empty() {
                    return Err(LearnError::Challenge);
                }
                t.to_string()
            };
            out.last_mut()
                .expect("checked above")
                .1
                .push((name.to_string(), value));
        } else {
            // A new challenge: its scheme, then a token68, auth-params, or nothing.
            if after_name == i && i < b.len() && b[i] != b',' {
                return Err(LearnError::Challenge);
            }
            out.push((name.to_string(), Vec::new()));
            let mut j = i;
            while b
                .get(j)
                .is_some_and(|c| c.is_ascii_alphanumeric() || b"-._~+/".contains(c))
            {
                j += 1;
            }
            if j > i {
                while b.get(j) == Some(&b'=') {
                    j += 1;
                }
                ows(&mut j);
                if matches!(b.get(j), None | Some(b',')) {
                    // A token68 (`Basic abc==`): skipped, not kept.
                    i = j;
                }
                // Otherwise the first auth-param, read as one next.
            }
            continue;
        }
        ows(&mut i);
        match b.get(i) {
            None => break,
            Some(b',') => i += 1,
            Some(_) => return Err(LearnError::Challenge),
        }
    }
    Ok(out)
}

/// A quoted-string at `*i` (its opening quote), unquoted.
fn quoted(b: &[u8], i: &mut usize) -> Result<String, LearnError> {
    *i += 1;
    let mut out = Vec::new();
    loop {
        match b.get(*i) {
            None => return Err(LearnError::Challenge),
            Some(b'"') => {
                *i += 1;
                break;
            }
            Some(b'\\') => match b.get(*i + 1) {
                Some(&c) if c == b'\t' || (c >= 0x20 && c != 0x7f) => {
                    out.push(c);
                    *i += 2;
                }
                _ => return Err(LearnError::Challenge),
            },
            Some(&c) if c == b'\t' || (c >= 0x20 && c != 0x7f) => {
                out.push(c);
                *i += 1;
            }
            Some(_) => return Err(LearnError::Challenge),
        }
    }
    String::from_utf8(out).map_err(|_| LearnError::Challenge)
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::EndpointPath;

    const ORIGIN: Origin<'static> = Origin {
        tls: true,
        host: "mcp.example.com",
        port: 443,
    };

    fn endpoint() -> EndpointPath {
        EndpointPath::Exact("/mcp".into())
    }

    fn learned() -> SignIn {
        let mut s = SignIn::default();
        let doc = read_server_metadata(
            br#"{"issuer":"https://mcp.example.com","authorization_endpoint":"https://mcp.example.com/oauth/authorize",
            "token_endpoint":"https://mcp.example.com/oauth/token?x=1","registration_endpoint":"https://mcp.example.com/oauth/register",
            "revocation_endpoint":"https://MCP.example.com:443/oauth/revoke","response_types_supported":["code"]}"#,
        )
        .unwrap();
        s.learn_server_metadata(ORIGIN, &doc).unwrap();
        s
    }

    #[test]
    fn challenges_name_resource_metadata_on_the_same_origin_only() {
        let learn = |v: &str| {
            let mut s = SignIn::default();
            let r = s.learn_challenge(ORIGIN, [v.as_bytes()]);
            (r, s)
        };
        for ok in [
            r#"Bearer resource_metadata="https://mcp.example.com/custom/prm.json""#,
            r#"Bearer realm="mcp", resource_metadata="https://mcp.example.com/custom/prm.json", error="invalid_token""#,
            r#"Basic realm="x", Bearer resource_metadata="https://mcp.example.com/custom/prm.json""#,
            r#"Basic abc==, bearer Resource_Metadata = "https://mcp.example.com:443/custom/prm.json?q=1""#,
            r#"Bearer resource_metadata=https://mcp.example.com/custom/prm.json"#
                .replace("https://", "\"https://")
                .replace(".json", ".json\"")
                .as_str(),
        ] {
            let (r, s) = learn(ok);
            assert_eq!(r, Ok(true), "{ok}");
            assert_eq!(
                step(&endpoint(), &s, "GET", "/custom/prm.json"),
                Some((Step::ResourceMetadata, Basis::Named)),
                "{ok}"
            );
            assert_eq!(step(&endpoint(), &s, "POST", "/custom/prm.json"), None);
        }
        assert_eq!(learn("Bearer").0, Ok(false));
        assert_eq!(learn(r#"Bearer realm="x""#).0, Ok(false));
        // A token68, grammatically: names nothing.
        assert_eq!(learn(r#"Bearer resource_metadata="#).0, Ok(false));
        for other in [
            r#"Bearer resource_metadata="https://evil.example/prm""#,
            r#"Bearer resource_metadata="http://mcp.example.com/prm""#,
            r#"Bearer resource_metadata="https://mcp.example.com:8443/prm""#,
            r#"Bearer resource_metadata="https://user@mcp.example.com/prm""#,
        ] {
            let (r, s) = learn(other);
            assert_eq!(r, Err(LearnError::OtherOrigin), "{other}");
            assert_eq!(s, SignIn::default());
        }
        for bad in [
            r#"Bearer resource_metadata="https://mcp.example.com/a/../admin""#,
            r#"Bearer resource_metadata="https://mcp.example.com/a%2f..""#,
            r#"Bearer resource_metadata="https://mcp.example.com/prm#x""#,
            r#"Bearer resource_metadata="/prm""#,
        ] {
            assert_eq!(learn(bad).0, Err(LearnError::Ambiguous), "{bad}");
        }
        for bad in [
            r#"Bearer resource_metadata="https://mcp.example.com/a", resource_metadata="https://mcp.example.com/b""#,
            r#"Bearer resource_metadata="unterminated"#,
            r#"Bearer resource_metadata="https://mcp.example.com/a" junk"#,
            r#"Bearer a="b" "c""#,
            "Bearer resource_metadata=\"https://mcp.example.com/\u{1}\"",
        ] {
            assert_eq!(learn(bad).0, Err(LearnError::Challenge), "{bad}");
        }
        // Two header values naming one each: neither.
        let mut s = SignIn::default();
        let two: [&[u8]; 2] = [
            br#"Bearer resource_metadata="https://mcp.example.com/a""#,
            br#"Bearer resource_metadata="https://mcp.example.com/b""#,
        ];
        assert_eq!(s.learn_challenge(ORIGIN, two), Err(LearnError::Challenge));
        // Bounded.
        let mut s = SignIn::default();
        for i in 0..MAX_NAMED {
            let v = format!(r#"Bearer resource_metadata="https://mcp.example.com/p{i}""#);
            s.learn_challenge(ORIGIN, [v.as_bytes()]).unwrap();
        }
        let v = r#"Bearer resource_metadata="https://mcp.example.com/more""#;
        assert_eq!(
            s.learn_challenge(ORIGIN, [v.as_bytes()]),
            Err(LearnError::Full)
        );
        assert_eq!(step(&endpoint(), &s, "GET", "/more"), None);
    }

    #[test]
    fn metadata_documents_are_read_strictly() {
        let ok = read_resource_metadata(
            br#"{"resource":"https://mcp.example.com/mcp","authorization_servers":["https://mcp.example.com"],"scopes_supported":["a"]}"#,
        )
        .unwrap();
        assert_eq!(ok.authorization_servers, ["https://mcp.example.com"]);
        assert_eq!(
            read_resource_metadata(br#"{"a":1,"a":2}"#),
            Err(MetadataError::Json(JsonError {
                offset: 7,
                kind: JsonErrorKind::DuplicateKey
            }))
        );
        assert_eq!(read_resource_metadata(b"[]"), Err(MetadataError::NotObject));
        assert_eq!(
            read_resource_metadata(br#"{"authorization_servers":"https://x"}"#),
            Err(MetadataError::WrongType(
                "authorization_servers",
                "list of strings"
            ))
        );
        assert_eq!(
            read_resource_metadata(br#"{"authorization_servers":[1]}"#),
            Err(MetadataError::WrongType(
                "authorization_servers",
                "list of strings"
            ))
        );
        assert_eq!(
            read_resource_metadata(br#"{"resource":1}"#),
            Err(MetadataError::WrongType("resource", "string"))
        );
        assert_eq!(
            read_resource_metadata(br#"{"scopes_supported":"a b"}"#),
            Err(MetadataError::WrongType(
                "scopes_supported",
                "list of strings"
            ))
        );
        let many = format!(
            r#"{{"authorization_servers":[{}]}}"#,
            vec!["\"https://a\""; MAX_AUTHORIZATION_SERVERS + 1].join(",")
        );
        assert_eq!(
            read_resource_metadata(many.as_bytes()),
            Err(MetadataError::TooMany(
                "authorization_servers",
                MAX_AUTHORIZATION_SERVERS
            ))
        );
        let huge = format!(r#"{{"x":"{}"}}"#, "a".repeat(METADATA_LIMITS.max_bytes));
        assert_eq!(
            read_server_metadata(huge.as_bytes()),
            Err(MetadataError::TooLarge)
        );
        assert_eq!(
            read_server_metadata(br#"{"token_endpoint":["https://x/token"]}"#),
            Err(MetadataError::WrongType("token_endpoint", "string"))
        );
        assert!(matches!(
            read_server_metadata(b"{\"issuer\":\"x\"} trailing"),
            Err(MetadataError::Json(_))
        ));
        let full = read_server_metadata(
            br#"{"issuer":"https://a","code_challenge_methods_supported":["S256"],
            "grant_types_supported":["authorization_code"],"client_id_metadata_document_supported":true}"#,
        )
        .unwrap();
        assert_eq!(full.code_challenge_methods_supported, ["S256"]);
        assert!(full.client_id_metadata_documents);
        assert_eq!(
            read_server_metadata(br#"{"client_id_metadata_document_supported":"yes"}"#),
            Err(MetadataError::WrongType(
                "client_id_metadata_document_supported",
                "boolean"
            ))
        );
    }

    #[test]
    fn endpoints_are_learned_on_the_same_origin_only() {
        let s = learned();
        let e = endpoint();
        assert_eq!(
            step(&e, &s, "GET", "/oauth/authorize"),
            Some((Step::Authorization, Basis::Named))
        );
        assert_eq!(
            step(&e, &s, "POST", "/oauth/token"),
            Some((Step::Token, Basis::Named))
        );
        assert_eq!(
            step(&e, &s, "POST", "/oauth/register"),
            Some((Step::Registration, Basis::Named))
        );
        assert_eq!(
            step(&e, &s, "POST", "/oauth/revoke"),
            Some((Step::Revocation, Basis::Named))
        );
        // Each with its own method only, and nothing else.
        assert_eq!(step(&e, &s, "POST", "/oauth/authorize"), None);
        assert_eq!(step(&e, &s, "GET", "/oauth/token"), None);
        assert_eq!(step(&e, &s, "PUT", "/oauth/token"), None);
        for other in [
            "/oauth/token/",
            "/OAUTH/token",
            "/oauth/./token",
            "/token",
            "/authorize",
        ] {
            assert_eq!(step(&e, &s, "POST", other), None, "{other}");
        }
        // Another origin's endpoints are not learned; an ambiguous one spoils the document.
        let mut s = SignIn::default();
        let doc = read_server_metadata(
            br#"{"token_endpoint":"https://auth.example.com/token","registration_endpoint":"http://mcp.example.com/register"}"#,
        )
        .unwrap();
        s.learn_server_metadata(ORIGIN, &doc).unwrap();
        assert_eq!(step(&e, &s, "POST", "/token"), None);
        assert_eq!(step(&e, &s, "POST", "/register"), None);
        let mut s = SignIn::default();
        let doc = read_server_metadata(
            br#"{"authorization_endpoint":"https://mcp.example.com/ok","token_endpoint":"https://mcp.example.com/a/../mcp"}"#,
        )
        .unwrap();
        assert_eq!(
            s.learn_server_metadata(ORIGIN, &doc),
            Err(LearnError::Ambiguous)
        );
        assert_eq!(step(&e, &s, "GET", "/ok"), None);
    }

    #[test]
    fn issuers_with_a_path_open_their_openid_form() {
        let mut s = SignIn::default();
        let e = endpoint();
        assert_eq!(
            step(&e, &s, "GET", "/tenant1/.well-known/openid-configuration"),
            None
        );
        let doc = read_resource_metadata(
            br#"{"authorization_servers":["https://mcp.example.com/tenant1","https://auth.example.com/t2"]}"#,
        )
        .unwrap();
        s.learn_resource_metadata(ORIGIN, &doc).unwrap();
        assert_eq!(
            step(&e, &s, "GET", "/tenant1/.well-known/openid-configuration"),
            Some((Step::ServerMetadata, Basis::Named))
        );
        assert_eq!(
            step(&e, &s, "GET", "/t2/.well-known/openid-configuration"),
            None
        );
        // The well-known forms every MCP host has.
        assert_eq!(
            step(
                &e,
                &s,
                "GET",
                "/.well-known/oauth-authorization-server/tenant1"
            ),
            Some((Step::ServerMetadata, Basis::WellKnown))
        );
        assert_eq!(
            step(&e, &s, "GET", "/.well-known/oauth-protected-resource/mcp"),
            Some((Step::ResourceMetadata, Basis::WellKnown))
        );
        assert_eq!(
            step(&e, &s, "POST", "/.well-known/oauth-protected-resource"),
            None
        );
    }

    #[test]
    fn defaults_open_only_for_a_server_that_publishes_no_metadata() {
        let e = endpoint();
        let mut s = SignIn::default();
        assert_eq!(step(&e, &s, "POST", "/token"), None);
        s.note_metadata_status("/.well-known/oauth-authorization-server/x", 404);
        s.note_metadata_status("/.well-known/oauth-authorization-server", 500);
        assert!(!s.defaults_open());
        s.note_metadata_status("/.well-known/oauth-authorization-server", 404);
        assert_eq!(
            step(&e, &s, "POST", "/token"),
            Some((Step::Token, Basis::Default))
        );
        assert_eq!(
            step(&e, &s, "POST", "/register"),
            Some((Step::Registration, Basis::Default))
        );
        assert_eq!(
            step(&e, &s, "GET", "/authorize"),
            Some((Step::Authorization, Basis::Default))
        );
        assert_eq!(step(&e, &s, "GET", "/token"), None);
        assert_eq!(step(&e, &s, "POST", "/revoke"), None);
        // Metadata read later closes them.
        let mut with_prm = s.clone();
        with_prm
            .learn_resource_metadata(
                ORIGIN,
                &read_resource_metadata(br#"{"authorization_servers":[]}"#).unwrap(),
            )
            .unwrap();
        assert_eq!(step(&e, &with_prm, "POST", "/token"), None);
        s.learn_server_metadata(
            ORIGIN,
            &read_server_metadata(br#"{"token_endpoint":"https://mcp.example.com/t"}"#).unwrap(),
        )
        .unwrap();
        assert_eq!(step(&e, &s, "POST", "/token"), None);
        assert_eq!(
            step(&e, &s, "POST", "/t"),
            Some((Step::Token, Basis::Named))
        );
    }

    fn post(step: Step, content_type: &str, body: &[u8]) -> Decision {
        let headers: &[(&str, &[u8])] = &[("content-type", content_type.as_bytes())];
        let req = RequestView {
            method: "POST",
            path: "/oauth/token?x=secret",
            headers,
            body,
        };
        check_post("s", step, Basis::Named, &req, 4096)
    }

    #[test]
    fn post_steps_take_their_own_media_type_and_never_json_rpc() {
        const FORM: &str = "application/x-www-form-urlencoded";
        let ok = post(
            Step::Token,
            FORM,
            b"grant_type=authorization_code&code=SECRETCODE&code_verifier=abc-._~&redirect_uri=http%3A%2F%2F127.0.0.1%3A1%2Fcb&client_id=a+b",
        );
        assert!(ok.is_allowed(), "{ok:?}");
        assert_eq!(ok.rule, "mcp.s oauth token endpoint");
        assert!(!ok.message.contains("SECRETCODE") && !ok.message.contains("secret"));
        assert!(
            post(
                Step::Token,
                "application/x-www-form-urlencoded; charset=UTF-8",
                b"grant_type=refresh_token&refresh_token=r"
            )
            .is_allowed()
        );
        assert!(
            post(
                Step::Revocation,
                FORM,
                b"token=t&token_type_hint=refresh_token"
            )
            .is_allowed()
        );
        let rpc = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#;
        for (step, ct, body, reason) in [
            (Step::Token, FORM, &rpc[..], Reason::PolicyDenied),
            (
                Step::Token,
                "application/json",
                &rpc[..],
                Reason::BadRequest,
            ),
            (Step::Token, FORM, b"code=x", Reason::BadRequest),
            (Step::Token, FORM, b"grant_type=", Reason::BadRequest),
            (
                Step::Token,
                FORM,
                b"grant_type=a&grant_type=b",
                Reason::BadRequest,
            ),
            (
                Step::Token,
                FORM,
                b"grant_type=a&grant%5Ftype=b",
                Reason::BadRequest,
            ),
            (Step::Token, FORM, b"grant_type=a&x", Reason::BadRequest),
            (Step::Token, FORM, b"grant_type=a&=x", Reason::BadRequest),
            (Step::Token, FORM, b"grant_type=a&b={}", Reason::BadRequest),
            (Step::Token, FORM, b"grant_type=a&b=%zz", Reason::BadRequest),
            (Step::Token, FORM, b"", Reason::BadRequest),
            (
                Step::Revocation,
                FORM,
                b"token_type_hint=x",
                Reason::BadRequest,
            ),
            (Step::Registration, FORM, b"a=b", Reason::BadRequest),
            (
                Step::Registration,
                "application/json",
                &rpc[..],
                Reason::PolicyDenied,
            ),
            (
                Step::Registration,
                "application/json",
                br#"{"method":"tools/call"}"#,
                Reason::PolicyDenied,
            ),
            (
                Step::Registration,
                "application/json",
                br#"[{"redirect_uris":[]}]"#,
                Reason::BadRequest,
            ),
            (
                Step::Registration,
                "application/json",
                br#"{"a":1,"a":1}"#,
                Reason::BadRequest,
            ),
        ] {
            let d = post(step, ct, body);
            assert_eq!(
                d.reason(),
                Some(reason),
                "{step:?} {}",
                String::from_utf8_lossy(body)
            );
        }
        let reg = post(
            Step::Registration,
            "application/json",
            br#"{"redirect_uris":["http://127.0.0.1:5/cb"],"client_name":"c","grant_types":["authorization_code"]}"#,
        );
        assert!(reg.is_allowed());
        assert_eq!(reg.rule, "mcp.s oauth registration endpoint");
        let big = format!("grant_type=a&x={}", "a".repeat(5000));
        assert_eq!(
            post(Step::Token, FORM, big.as_bytes()).reason(),
            Some(Reason::BodyTooLarge)
        );
    }
}
