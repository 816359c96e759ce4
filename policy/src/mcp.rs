//! The MCP JSON-RPC classifier (README, "What the proxy decides"): from an HTTP request to an MCP server's host:port to one
//! decision per JSON-RPC message and one overall decision, which is the one enforced.
//!
//! - `POST` carries JSON-RPC only to the server's endpoint path, or to a message path the server
//!   announced in a legacy HTTP+SSE `endpoint` event this session ([`legacy`]); both compared byte for
//!   byte, query aside. A POST to any other path of the server's host:port is `policy_denied` before
//!   its body is read: the agent does not choose where on the server its messages land. A POST there
//!   is inspected: framing headers ([`http`]), strict JSON ([`crate::json`]), JSON-RPC shape
//!   ([`shape`]), what each message may do ([`methods`]), and the `Mcp-*` headers against the body
//!   ([`headers`]).
//! - `GET` (event stream) and `DELETE` (session end) on the server's endpoint path, without a body,
//!   are allowed, and so are the steps of the OAuth sign-in flow ([`oauth`]): `GET` of OAuth
//!   metadata (protected-resource, authorization-server and OpenID discovery, under `/.well-known/`
//!   or under the endpoint, or where the server named it), and the endpoints the server's metadata
//!   names (or the 2025-03-26 defaults), each with its own method and body rules. Every other
//!   method or path is `policy_denied` (`HEAD`, `OPTIONS`, `PUT`, `PATCH`, `TRACE`, `CONNECT`,
//!   lower-case methods...).
//! - A request target that is not origin-form, or has characters URIs do not allow, is
//!   `bad_request` whatever the method.
//! - A batch (a JSON array) is allowed only if every element is; an empty batch is `bad_request`,
//!   nested arrays are elements that are not messages. The overall decision of a denied batch is the
//!   first denied element's. Batching left MCP in 2025-06-18; we still decide batches strictly
//!   rather than pass them on.
//! - `tools/call` without a string `params.name` is `policy_denied`: it is well-formed JSON-RPC that
//!   names no tool the policy allows (the server would refuse it anyway).
//! - A request with a `null` id is `bad_request` (MCP forbids it), as is any other shape error.
//!
//! Rule names in decisions: `mcp.<server>.tools.allow "<pattern>"`, `mcp.<server>.tools.deny
//! "<pattern>"`, `mcp.<server>.prompts.allow "<pattern>"`, `mcp.<server>.resources.allow
//! "<pattern>"` (also for `completion/complete` by its ref), `mcp.<server> connect-and-list`,
//! `mcp.<server> utility`, `mcp.<server> client-response`, `mcp.<server> get-stream`,
//! `mcp.<server> session-end`, `mcp.<server> oauth <step>` ([`oauth::Step::name`]),
//! `mcp.<server> oauth: true` (the agent's own sign-in step on a server fenzi signs in to),
//! `mcp.<server> batch`,
//! `mcp.<server> default deny`, and for requests that cannot be decided: `strict http`,
//! `body size limit`, `strict json`, `strict json-rpc`, `mcp headers`. Messages name methods and
//! tools only, escaped (they are hostile input, `crate::untrusted_text`), never other body
//! content.
//!
//! What one session knows of each server (pins, `x-mcp-header` declarations, announced message
//! paths) is its [`inventory::Inventory`]: the classifier decides with it, and the response side
//! (`crate::response`) fills it from what the server lists.

mod denial;
mod headers;
pub(crate) mod http;
pub mod inventory;
pub mod legacy;
pub(crate) mod methods;
pub mod oauth;
pub mod oauth_client;
mod shape;
pub mod teach;

pub use crate::json::JsonLimits;
pub use denial::{ERROR_CODES, denial_body, error_code};
pub use methods::{CONNECT_AND_LIST, TOOLS_CALL};

use crate::args::ArgRule;
use crate::decision::{Decision, Reason};
use crate::json::{self, JsonErrorKind, Value};
use crate::tool_pattern::ToolPattern;
use crate::untrusted_text::shown;
use crate::uri_pattern::UriPattern;
use inventory::Inventory;

/// Which request paths are the server's MCP endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointPath {
    /// A remote server's own path (`/mcp`).
    Exact(String),
    /// Account connectors: every path under this prefix (`/v1/mcp/`).
    Prefix(String),
}

/// What the classifier needs to know about one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerRule {
    pub name: String,
    pub endpoint: EndpointPath,
    pub allow: Vec<ToolPattern>,
    pub deny: Vec<ToolPattern>,
    /// `tools.allow_annotated: [read_only]` (only ever set on a pinned server).
    pub allow_read_only: bool,
    /// `pin: true`.
    pub pin: bool,
    /// `list: filter` (true, the default) or `list: all`.
    pub filter_lists: bool,
    /// `prompts.allow`.
    pub prompts: Vec<ToolPattern>,
    /// `resources.allow`.
    pub resources: Vec<UriPattern>,
    /// `tools.rules`: what an allowed call's arguments must satisfy.
    pub rules: Vec<ArgRule>,
    pub limits: JsonLimits,
    /// `oauth: true`: fenzi signs in itself (`fenzi mcp login`) and puts the token on each
    /// request, so the agent's own sign-in steps (authorization, registration, token, revocation)
    /// are refused: the agent never holds an OAuth token of this server.
    pub fenzi_signs_in: bool,
}

impl ServerRule {
    /// A server rule with only tool patterns (everything else at its default).
    pub fn with_tools(
        name: &str,
        endpoint: EndpointPath,
        allow: Vec<ToolPattern>,
        deny: Vec<ToolPattern>,
        limits: JsonLimits,
    ) -> ServerRule {
        ServerRule {
            name: name.to_string(),
            endpoint,
            allow,
            deny,
            allow_read_only: false,
            pin: false,
            filter_lists: true,
            prompts: Vec::new(),
            resources: Vec::new(),
            rules: Vec::new(),
            limits,
            fenzi_signs_in: false,
        }
    }
}

/// An HTTP request as the classifier sees it. `path` is the origin-form request target (path and query).
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub headers: &'a [(&'a str, &'a [u8])],
    pub body: &'a [u8],
}

/// A JSON-RPC id as it appeared (numbers kept as their JSON text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RpcId {
    Number(String),
    String(String),
    Null,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    Request,
    Notification,
    Response,
}

/// The decision for one JSON-RPC message: what that message alone gets. The request as a whole gets
/// [`McpDecision::overall`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageDecision {
    pub decision: Decision,
    /// `None` when the element is not a well-formed message.
    pub kind: Option<MessageKind>,
    /// The JSON-RPC method as sent (unescaped, not normalised; may be hostile).
    pub rpc_method: Option<String>,
    /// `params.name` of a `tools/call`, as sent.
    pub tool: Option<String>,
    /// `params.name` of a `prompts/get`, as sent.
    pub prompt: Option<String>,
    /// `params.uri` of a `resources/read`, `resources/subscribe` or `resources/unsubscribe`, as sent.
    pub resource: Option<String>,
    pub rpc_id: Option<RpcId>,
}

/// Most messages in one batch. MCP clients stopped batching in 2025-06-18; earlier ones send a few.
pub const MAX_BATCH: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpDecision {
    /// What the proxy enforces: allowed only if the request is forwarded as a whole.
    pub overall: Decision,
    /// One per JSON-RPC message (empty for GET/DELETE/metadata requests and unparseable bodies).
    pub messages: Vec<MessageDecision>,
    pub batch: bool,
    /// The request is a step of the OAuth sign-in flow: its answer is not MCP messages, so the
    /// response phase does not read it as JSON-RPC (a metadata document it reads as one, and
    /// learns from: [`oauth::Step::is_metadata`]).
    pub sign_in: Option<oauth::Step>,
}

impl McpDecision {
    /// A decision about the HTTP request itself, with no JSON-RPC messages (e.g. a path no entry
    /// of the host has, `crate::engine::by_path`).
    pub fn request(overall: Decision) -> McpDecision {
        McpDecision {
            overall,
            messages: Vec::new(),
            batch: false,
            sign_in: None,
        }
    }
}

/// Reads one message from a server by the JSON-RPC shape rules; `Ok(Some(id))` for a response
/// (the id of the request it answers), `Ok(None)` for a request or notification.
pub(crate) fn read_shape(v: &Value) -> Result<Option<RpcId>, impl std::fmt::Display> {
    shape::read(v).map(|m| match m.kind {
        MessageKind::Response => m.id,
        _ => None,
    })
}

const RULE_STRICT_HTTP: &str = "strict http";
const RULE_BODY_LIMIT: &str = "body size limit";
const RULE_STRICT_JSON: &str = "strict json";
const RULE_MCP_HEADERS: &str = "mcp headers";

/// Decides one HTTP request to the host:port of `server` (see the module documentation).
pub fn classify(server: &ServerRule, inventory: &Inventory, req: &RequestView<'_>) -> McpDecision {
    let target = match http::parse_target(req.path) {
        Ok(target) => target,
        Err(e) => {
            return McpDecision::request(Decision::deny(
                Reason::BadRequest,
                RULE_STRICT_HTTP,
                e.to_string(),
            ));
        }
    };
    match req.method {
        "POST" if !is_message_path(server, inventory, target.path) => {
            if let Some((step, basis)) =
                oauth::step(&server.endpoint, inventory.sign_in(), "POST", target.path)
            {
                if server.fenzi_signs_in {
                    return McpDecision {
                        sign_in: Some(step),
                        ..McpDecision::request(agent_sign_in_refused(server, step))
                    };
                }
                return McpDecision {
                    sign_in: Some(step),
                    ..McpDecision::request(oauth::check_post(
                        &server.name,
                        step,
                        basis,
                        req,
                        server.limits.max_bytes,
                    ))
                };
            }
            McpDecision::request(Decision::deny(
                Reason::PolicyDenied,
                methods::default_deny(server),
                format!(
                    "POST {} is neither the server's MCP endpoint nor a message path it announced",
                    shown(target.path)
                ),
            ))
        }
        "POST" => McpDecision::post(server, inventory, req),
        "GET" | "DELETE" => {
            let step = (!http::is_endpoint(&server.endpoint, target.path))
                .then(|| {
                    oauth::step(
                        &server.endpoint,
                        inventory.sign_in(),
                        req.method,
                        target.path,
                    )
                })
                .flatten();
            if let Some((step, _)) = step
                && server.fenzi_signs_in
                && !step.is_metadata()
            {
                return McpDecision {
                    sign_in: Some(step),
                    ..McpDecision::request(agent_sign_in_refused(server, step))
                };
            }
            McpDecision {
                sign_in: step.map(|(step, _)| step),
                ..McpDecision::request(bodyless(server, req, target.path, step))
            }
        }
        other => McpDecision::request(Decision::deny(
            Reason::PolicyDenied,
            methods::default_deny(server),
            format!(
                "{} is not allowed on an MCP server: only POST, and GET or DELETE of its endpoint",
                shown(other)
            ),
        )),
    }
}

/// A sign-in step of the agent's own on an `oauth: true` server: fenzi holds the sign-in, so the
/// agent gets none (its metadata GETs still pass: they carry nothing).
fn agent_sign_in_refused(server: &ServerRule, step: oauth::Step) -> Decision {
    Decision::deny(
        Reason::PolicyDenied,
        format!("mcp.{} oauth: true", server.name),
        format!(
            "fenzi signs in to `{0}` itself (`oauth: true`) and puts the token on each request, so \
             the agent's own sign-in ({1}) is refused; if the server asks for a sign-in, run `fenzi \
             mcp login {0}` on the host",
            server.name,
            step.name()
        ),
    )
}

/// Is the request target `target` (path and query) the server's own endpoint, rather than a message
/// path it announced for the legacy HTTP+SSE transport? The response side answers the two
/// transports' `202 Accepted` differently.
pub fn is_endpoint_target(server: &ServerRule, target: &str) -> bool {
    http::is_endpoint(&server.endpoint, http::path_of(target))
}

/// May JSON-RPC be POSTed to `path` (without its query)? The endpoint, or a path the server
/// announced for the legacy transport.
fn is_message_path(server: &ServerRule, inventory: &Inventory, path: &str) -> bool {
    http::is_endpoint(&server.endpoint, path) || inventory.message_paths().contains(path)
}

/// GET and DELETE: the endpoint (and a GET step of the sign-in flow, `step`), without a body.
fn bodyless(
    server: &ServerRule,
    req: &RequestView<'_>,
    path: &str,
    step: Option<(oauth::Step, oauth::Basis)>,
) -> Decision {
    let deny =
        |why: String| Decision::deny(Reason::PolicyDenied, methods::default_deny(server), why);
    let what = format!("{} {}", req.method, shown(path));
    match http::has_body(req) {
        Err(e) => return Decision::deny(Reason::BadRequest, RULE_STRICT_HTTP, e.to_string()),
        Ok(true) => return deny(format!("{what} has a body; only POST carries messages")),
        Ok(false) => {}
    }
    let get = req.method == "GET";
    if http::is_endpoint(&server.endpoint, path) {
        let (rule, why) = if get {
            ("get-stream", "the server's event stream")
        } else {
            ("session-end", "ends the session")
        };
        return Decision::allow(
            format!("mcp.{} {rule}", server.name),
            format!("{what}: {why}"),
        );
    }
    if let Some((step, basis)) = step {
        return oauth::allow_get(&server.name, step, basis, path);
    }
    deny(format!("{what} is not the server's MCP endpoint"))
}

impl McpDecision {
    /// POST: a JSON-RPC message or batch, inspected in full.
    fn post(server: &ServerRule, inventory: &Inventory, req: &RequestView<'_>) -> McpDecision {
        let limit = server.limits.max_bytes;
        let declared = match http::declared_length(req) {
            Ok(declared) => declared,
            Err(e) => return Self::request(bad(RULE_STRICT_HTTP, e.to_string())),
        };
        let over = |n: u64| usize::try_from(n).map_or(true, |n| n > limit);
        if req.body.len() > limit || declared.is_some_and(over) {
            return Self::request(Decision::deny(
                Reason::BodyTooLarge,
                RULE_BODY_LIMIT,
                format!("body larger than {limit} bytes"),
            ));
        }
        if let Err(e) = http::check_post_headers(req) {
            return Self::request(bad(RULE_STRICT_HTTP, e.to_string()));
        }
        // Argument rules read into `arguments` as deep as their longest pointer (all of it when
        // one compares whole objects); without rules only the method and name are needed.
        let keep = if server.rules.is_empty() {
            keep_depth(req.body, headers::mirrors_arguments(req.headers))
        } else {
            match crate::args::depth_below_arguments(&server.rules) {
                Some(below) => keep_depth(req.body, true) + below,
                None => usize::MAX,
            }
        };
        let parse = |keep: usize| match json::parse_to_depth(req.body, &server.limits, keep) {
            Ok(body) => Ok(body),
            Err(e) if e.kind == JsonErrorKind::TooLarge => Err(Self::request(Decision::deny(
                Reason::BodyTooLarge,
                RULE_BODY_LIMIT,
                format!("body larger than {limit} bytes"),
            ))),
            Err(e) => Err(Self::request(bad(
                RULE_STRICT_JSON,
                format!("body is not strict JSON: {e}"),
            ))),
        };
        let mut body = match parse(keep) {
            Ok(body) => body,
            Err(refused) => return refused,
        };
        // `completion/complete` is decided by the members of `params.ref`, one level below what
        // is kept: such a request (rare, and small) is read again that much deeper.
        if keep != usize::MAX && methods::names_completion(&body) {
            body = match parse(keep + 1) {
                Ok(body) => body,
                Err(refused) => return refused,
            };
        }
        let (batch, mut messages) = match &body {
            Value::Array(items) if items.is_empty() => {
                return Self::request(bad(methods::RULE_STRICT_JSON_RPC, "empty batch"));
            }
            Value::Array(items) if items.len() > MAX_BATCH => {
                // Each element is audited: an unbounded batch would let one request write an
                // unbounded number of records.
                return Self::request(bad(
                    methods::RULE_STRICT_JSON_RPC,
                    format!("a batch of {} messages (at most {MAX_BATCH})", items.len()),
                ));
            }
            Value::Array(items) => (
                true,
                items
                    .iter()
                    .map(|v| methods::decide(server, inventory, v))
                    .collect(),
            ),
            single => (false, vec![methods::decide(server, inventory, single)]),
        };
        if let Err(e) = headers::check(req.headers, &body, inventory) {
            // The headers are about the request as a whole: nothing in it goes through.
            let overall = bad(RULE_MCP_HEADERS, e.to_string());
            for m in messages.iter_mut().filter(|m| m.decision.is_allowed()) {
                m.decision = overall.clone();
            }
            return McpDecision {
                overall,
                messages,
                batch,
                sign_in: None,
            };
        }
        let first_denied = messages
            .iter()
            .enumerate()
            .find(|(_, m)| !m.decision.is_allowed());
        let overall = match (batch, first_denied) {
            (false, _) => messages[0].decision.clone(),
            (true, Some((i, m))) => Decision {
                message: format!("message {} of the batch: {}", i + 1, m.decision.message),
                ..m.decision.clone()
            },
            (true, None) => Decision::allow(
                format!("mcp.{} batch", server.name),
                format!("all {} messages of the batch are allowed", messages.len()),
            ),
        };
        McpDecision {
            overall,
            messages,
            batch,
            sign_in: None,
        }
    }
}

/// How deep the classifier reads a body: down to the members of `params` (a message is depth 1, its
/// `params` depth 2; one more in a batch). Deeper values (tool arguments) are checked as strictly
/// but not kept.
/// With `Mcp-Param-*` headers to check, one level more: the arguments they mirror.
fn keep_depth(body: &[u8], arguments: bool) -> usize {
    let first = body
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'));
    let base = if first == Some(&b'[') { 3 } else { 2 };
    base + usize::from(arguments)
}

fn bad(rule: &str, message: impl Into<String>) -> Decision {
    Decision::deny(Reason::BadRequest, rule, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use legacy::Authority;

    #[test]
    fn on_an_oauth_server_the_agent_signs_in_to_nothing() {
        let mut server = ServerRule::with_tools(
            "notion",
            EndpointPath::Exact("/mcp".into()),
            Vec::new(),
            Vec::new(),
            JsonLimits::default(),
        );
        let mut inventory = Inventory::unpinned();
        let origin = oauth::Origin {
            tls: true,
            host: "mcp.notion.com",
            port: 443,
        };
        let doc = oauth::read_server_metadata(
            br#"{"authorization_endpoint":"https://mcp.notion.com/authorize","token_endpoint":"https://mcp.notion.com/token"}"#,
        )
        .unwrap();
        inventory
            .sign_in_mut()
            .learn_server_metadata(origin, &doc)
            .unwrap();
        let form: &[(&str, &[u8])] = &[("content-type", b"application/x-www-form-urlencoded")];
        let token = RequestView {
            method: "POST",
            path: "/token",
            headers: form,
            body: b"grant_type=authorization_code&code=c",
        };
        let authorize = RequestView {
            method: "GET",
            path: "/authorize?client_id=x",
            headers: &[],
            body: b"",
        };
        let metadata = RequestView {
            method: "GET",
            path: "/.well-known/oauth-protected-resource/mcp",
            headers: &[],
            body: b"",
        };
        // Without `oauth: true`, the agent's own sign-in passes (issue 36).
        assert!(classify(&server, &inventory, &token).overall.is_allowed());
        assert!(
            classify(&server, &inventory, &authorize)
                .overall
                .is_allowed()
        );
        server.fenzi_signs_in = true;
        for req in [&token, &authorize] {
            let d = classify(&server, &inventory, req).overall;
            assert_eq!(d.reason(), Some(Reason::PolicyDenied), "{d:?}");
            assert_eq!(d.rule, "mcp.notion oauth: true");
            assert!(
                d.message.contains("`fenzi mcp login notion`"),
                "{}",
                d.message
            );
        }
        // Metadata carries nothing: it still passes.
        assert!(
            classify(&server, &inventory, &metadata)
                .overall
                .is_allowed()
        );
    }

    const CALL: &[u8] =
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search"}}"#;

    fn post(server: &ServerRule, inventory: &Inventory, path: &str) -> McpDecision {
        let headers: &[(&str, &[u8])] = &[("content-type", b"application/json")];
        classify(
            server,
            inventory,
            &RequestView {
                method: "POST",
                path,
                headers,
                body: CALL,
            },
        )
    }

    #[test]
    fn json_rpc_goes_only_to_the_endpoint_or_an_announced_path() {
        let server = ServerRule::with_tools(
            "s",
            EndpointPath::Exact("/mcp".into()),
            vec![ToolPattern::parse("search").unwrap()],
            Vec::new(),
            JsonLimits::default(),
        );
        let mut inventory = Inventory::unpinned();
        assert!(post(&server, &inventory, "/mcp").overall.is_allowed());
        assert!(post(&server, &inventory, "/mcp?k=v").overall.is_allowed());
        for other in [
            "/messages",
            "/messages?sessionId=1",
            "/",
            "/mcp/",
            "/MCP",
            "//mcp",
            "/./mcp",
            "/a/../mcp",
            "/%6dcp",
            "/mcp;v=1",
            "/mcp/x",
            "/.well-known/oauth-protected-resource",
        ] {
            let d = post(&server, &inventory, other);
            assert_eq!(d.overall.reason(), Some(Reason::PolicyDenied), "{other}");
            assert_eq!(d.overall.rule, "mcp.s default deny", "{other}");
            assert!(d.messages.is_empty(), "{other}");
        }
        let authority = Authority {
            host: "h",
            port: 443,
        };
        inventory
            .announce_message_path(authority, "/mcp", "/messages?sessionId=1")
            .unwrap();
        assert!(
            post(&server, &inventory, "/messages?sessionId=1")
                .overall
                .is_allowed()
        );
        for other in ["/messages/", "/Messages", "/x/../messages", "/m%65ssages"] {
            assert!(
                !post(&server, &inventory, other).overall.is_allowed(),
                "{other}"
            );
        }
        // An announcement fenzi cannot match exactly opens nothing.
        assert!(
            inventory
                .announce_message_path(authority, "/mcp", "/admin/../run")
                .is_err()
        );
        assert!(
            !post(&server, &inventory, "/admin/../run")
                .overall
                .is_allowed()
        );
        assert!(!post(&server, &inventory, "/run").overall.is_allowed());
    }

    fn kinds() -> ServerRule {
        ServerRule {
            prompts: vec![ToolPattern::parse("summarize").unwrap()],
            resources: vec![crate::uri_pattern::UriPattern::parse("notes://public/*").unwrap()],
            ..ServerRule::with_tools(
                "kinds",
                EndpointPath::Exact("/mcp".into()),
                Vec::new(),
                Vec::new(),
                JsonLimits::default(),
            )
        }
    }

    fn post_body(server: &ServerRule, body: &str) -> (McpDecision, Vec<u8>) {
        let headers: &[(&str, &[u8])] = &[("content-type", b"application/json")];
        let view = RequestView {
            method: "POST",
            path: "/mcp",
            headers,
            body: body.as_bytes(),
        };
        let decision = classify(server, &Inventory::unpinned(), &view);
        let denial = denial_body(&decision, &view);
        (decision, denial)
    }

    /// A completion gets the decision its ref's prompt or resource gets (same verdict, same rule),
    /// and its denial says no more than that prompt's or resource's own denial: the same body with
    /// the method's name in place.
    #[test]
    fn a_completion_is_decided_as_what_its_ref_names() {
        let server = kinds();
        let names = [
            "summarize",
            "Summarize",
            "summarize ",
            "exfiltrate",
            "",
            "\\u0000",
        ];
        // The completion's decision against the plain request's: same verdict and rule, and the
        // same denial body with the method's name in place.
        let same_as = |plain: &str, method: &str, reference: &str, label: &str| {
            let complete = format!(
                r#"{{"jsonrpc":"2.0","id":3,"method":"completion/complete","params":{{"ref":{reference},"argument":{{"name":"a","value":"b"}}}}}}"#
            );
            let (by_plain, plain_denial) = post_body(&server, plain);
            let (by_completion, completion_denial) = post_body(&server, &complete);
            assert_eq!(
                by_plain.overall.verdict, by_completion.overall.verdict,
                "{label}"
            );
            assert_eq!(by_plain.overall.rule, by_completion.overall.rule, "{label}");
            assert_eq!(
                String::from_utf8(plain_denial)
                    .unwrap()
                    .replace(method, "completion/complete"),
                String::from_utf8(completion_denial).unwrap(),
                "{label}"
            );
            (by_plain, by_completion)
        };
        for name in names {
            let get = format!(
                r#"{{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{{"name":"{name}"}}}}"#
            );
            let reference = format!(r#"{{"type":"ref/prompt","name":"{name}"}}"#);
            let (by_get, by_completion) = same_as(&get, "prompts/get", &reference, name);
            assert_eq!(by_completion.messages[0].prompt, by_get.messages[0].prompt);
        }
        for uri in ["notes://public/a", "notes://private/a", "notes://public/"] {
            let read = format!(
                r#"{{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{{"uri":"{uri}"}}}}"#
            );
            let reference = format!(r#"{{"type":"ref/resource","uri":"{uri}"}}"#);
            let (_, by_completion) = same_as(&read, "resources/read", &reference, uri);
            assert_eq!(by_completion.messages[0].resource.as_deref(), Some(uri));
        }
    }

    /// The ref is read below the depth kept for other requests, in a single message and in a
    /// batch: it is never decided as an unread container.
    #[test]
    fn a_completion_ref_is_read_at_every_depth() {
        let server = kinds();
        let single = r#"{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"summarize"},"argument":{"name":"a","value":""}}}"#;
        assert!(post_body(&server, single).0.overall.is_allowed());
        let batch = format!("[{single}]");
        assert!(post_body(&server, &batch).0.overall.is_allowed());
    }
}
