//! Signing in through fenzi to an MCP server that is its own authorization server (MCP
//! authorization 2025-06-18, and the 2025-03-26 defaults), over HTTPS with a test CA: a scripted
//! client makes the requests an SDK's OAuth client makes, with their real content types (the 401,
//! the metadata the server names, registration as JSON, the authorization GET, the token request
//! as a form, then the call with the token). The whole flow passes, each request with its own
//! `allowed` record naming its step, and no code, verifier, secret or token in any record or log
//! line; the abuses are refused: JSON-RPC to the sign-in endpoints, bodies on metadata GETs, a
//! `resource_metadata` or an authorization server on another host, and malformed or oversized
//! metadata (after which the endpoints it names stay refused).

mod common;

use bytes::Bytes;
use common::tracing_capture::{capture, captured};
use common::*;
use fenzi_policy::Reason;
use fenzi_policy::audit::Outcome;
use fenzi_proxy::audit::writer::AuditEntry;
use http::Request;
use http::request::Parts;
use http_body_util::Full;
use std::sync::{Arc, OnceLock};

const CODE: &str = "c0de-Sh0uldNeverBeLogged";
const VERIFIER: &str = "v3rifier-Sh0uldNeverBeLogged";
const CHALLENGE: &str = "ch4llenge-Sh0uldNeverBeLogged";
const STATE: &str = "st4te-Sh0uldNeverBeLogged";
const SECRET: &str = "cl1ent-secret-Sh0uldNeverBeLogged";
const TOKEN: &str = "acc3ss-token-Sh0uldNeverBeLogged";

/// How the test server behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Behaviour {
    /// 2025-06-18: a 401 naming protected-resource metadata at a path of its own, which names the
    /// server itself as authorization server, whose metadata names `/oauth/...` endpoints.
    OwnAuthorizationServer,
    /// 2025-03-26: a bare `Bearer` challenge, no metadata at all (404), the default endpoints.
    NoMetadata,
    /// Its authorization-server metadata is not strict JSON (a duplicate member).
    MalformedMetadata,
    /// Its authorization-server metadata is larger than fenzi reads.
    OversizedMetadata,
    /// Its 401 names protected-resource metadata on another host.
    ForeignResourceMetadata,
    /// Its protected-resource metadata names an authorization server on a host the policy does
    /// not name, whose endpoints it also names in its own metadata.
    ForeignAuthorizationServer,
}

/// The test server, at `base` (`https://127.0.0.1:PORT`).
fn handler(kind: Behaviour, base: Arc<OnceLock<String>>) -> Handler {
    Arc::new(move |parts: Parts, body: Bytes| {
        let base = base.get().expect("base set").clone();
        let path = parts.uri.path();
        let method = parts.method.as_str();
        let json =
            |status, v: serde_json::Value| respond(status, "application/json", v.to_string());
        let content_type = parts
            .headers
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        match (method, path) {
            ("POST", "/mcp") => {
                let bearer = format!("Bearer {TOKEN}");
                if parts.headers.get("authorization").map(|v| v.as_bytes())
                    == Some(bearer.as_bytes())
                {
                    let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    return json(
                        200,
                        serde_json::json!({"jsonrpc": "2.0", "id": value["id"],
                        "result": {"content": [{"type": "text", "text": "signed in"}]}}),
                    );
                }
                let challenge = match kind {
                    Behaviour::NoMetadata => "Bearer".to_string(),
                    Behaviour::ForeignResourceMetadata => {
                        r#"Bearer resource_metadata="https://elsewhere.test/custom/prm.json""#
                            .into()
                    }
                    _ => format!(
                        r#"Bearer error="invalid_token", resource_metadata="{base}/custom/prm.json""#
                    ),
                };
                let mut response = json(401, serde_json::json!({"error": "invalid_token"}));
                response
                    .headers_mut()
                    .insert("www-authenticate", challenge.parse().unwrap());
                response
            }
            ("GET", "/custom/prm.json") if kind != Behaviour::NoMetadata => {
                let authorization_server = match kind {
                    Behaviour::ForeignAuthorizationServer => {
                        "https://auth.elsewhere.test".to_string()
                    }
                    _ => base.clone(),
                };
                json(
                    200,
                    serde_json::json!({"resource": format!("{base}/mcp"),
                    "authorization_servers": [authorization_server],
                    "bearer_methods_supported": ["header"]}),
                )
            }
            ("GET", "/.well-known/oauth-authorization-server") => match kind {
                Behaviour::NoMetadata => respond(404, "text/plain", "not found"),
                Behaviour::MalformedMetadata => respond(
                    200,
                    "application/json",
                    format!(
                        r#"{{"issuer":"{base}","token_endpoint":"{base}/oauth/token","token_endpoint":"{base}/x"}}"#
                    ),
                ),
                Behaviour::OversizedMetadata => json(
                    200,
                    serde_json::json!({"issuer": base,
                    "token_endpoint": format!("{base}/oauth/token"),
                    "service_documentation": "x".repeat(70 * 1024)}),
                ),
                _ => {
                    let at = match kind {
                        Behaviour::ForeignAuthorizationServer => {
                            "https://auth.elsewhere.test".to_string()
                        }
                        _ => base.clone(),
                    };
                    json(
                        200,
                        serde_json::json!({"issuer": base,
                        "authorization_endpoint": format!("{at}/oauth/authorize"),
                        "token_endpoint": format!("{at}/oauth/token"),
                        "registration_endpoint": format!("{at}/oauth/register"),
                        "revocation_endpoint": format!("{at}/oauth/revoke"),
                        "response_types_supported": ["code"],
                        "grant_types_supported": ["authorization_code", "refresh_token"],
                        "code_challenge_methods_supported": ["S256"],
                        "token_endpoint_auth_methods_supported": ["client_secret_post"]}),
                    )
                }
            },
            (
                "GET",
                "/.well-known/oauth-protected-resource/mcp"
                | "/.well-known/oauth-protected-resource"
                | "/.well-known/openid-configuration",
            ) => respond(404, "text/plain", "not found"),
            ("POST", "/oauth/register" | "/register") => {
                assert_eq!(content_type, "application/json");
                let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
                json(
                    201,
                    serde_json::json!({"client_id": "c1", "client_secret": SECRET,
                    "redirect_uris": value["redirect_uris"]}),
                )
            }
            ("GET", "/oauth/authorize" | "/authorize") => {
                let query = parts.uri.query().unwrap_or_default();
                assert!(
                    query.contains(CHALLENGE) && query.contains(STATE),
                    "{query}"
                );
                Response::builder()
                    .status(302)
                    .header(
                        "location",
                        format!("http://127.0.0.1:9/callback?code={CODE}&state={STATE}"),
                    )
                    .body(full_body(""))
                    .unwrap()
            }
            ("POST", "/oauth/token" | "/token") => {
                assert_eq!(content_type, "application/x-www-form-urlencoded");
                let form = String::from_utf8(body.to_vec()).unwrap();
                assert!(form.contains(CODE) && form.contains(VERIFIER), "{form}");
                json(
                    200,
                    serde_json::json!({"access_token": TOKEN, "token_type": "Bearer",
                    "expires_in": 3600, "refresh_token": "r3fresh"}),
                )
            }
            ("POST", "/oauth/revoke") => respond(200, "application/json", "{}"),
            _ => respond(418, "text/plain", "the test server has no such route"),
        }
    })
}

use http::Response;

struct Setup {
    proxy: TestProxy,
    upstream: Upstream,
    target: String,
    base: String,
}

async fn setup(kind: Behaviour) -> Setup {
    let pki = TestPki::new();
    let base = Arc::new(OnceLock::new());
    let upstream = http_upstream(
        Some(pki.server_config(&["127.0.0.1"])),
        handler(kind, base.clone()),
    )
    .await;
    let target = format!("127.0.0.1:{}", upstream.port());
    base.set(format!("https://{target}")).unwrap();
    let yaml = format!(
        "version: 1\nmcp:\n  own:\n    url: https://{target}/mcp\n    tools:\n      allow: [echo]\n"
    );
    let proxy = start_proxy(
        policy(&yaml, None),
        options(&pki),
        Arc::new(FakeNetwork::default()),
        Arc::new(MemorySink::default()),
    )
    .await;
    Setup {
        proxy,
        upstream,
        base: format!("https://{target}"),
        target,
    }
}

fn request(
    target: &str,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> Request<Full<Bytes>> {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header("host", target);
    if let Some(content_type) = content_type {
        builder = builder.header("content-type", content_type);
    }
    builder
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

const FORM: Option<&str> = Some("application/x-www-form-urlencoded");
const JSON: Option<&str> = Some("application/json");

fn rpc(id: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{}}}}}}"#
    )
}

impl Setup {
    async fn client(&self) -> Sender {
        self.proxy.intercepted_h1(&self.target).await
    }

    /// Sends one request; returns the status, the `WWW-Authenticate`/`Location` header and the body.
    async fn send(&self, client: &mut Sender, req: Request<Full<Bytes>>) -> (u16, String, String) {
        let response = client.send_request(req).await.unwrap();
        let header = ["www-authenticate", "location"]
            .iter()
            .find_map(|h| response.headers().get(*h))
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let (status, body) = text(response).await;
        (status, header, body)
    }

    /// The newest record.
    fn last(&self) -> AuditEntry {
        self.proxy.entries().last().cloned().expect("a record")
    }

    /// Sends `req` and asserts it passed with an `allowed` record whose rule is `rule`.
    async fn passes(
        &self,
        client: &mut Sender,
        req: Request<Full<Bytes>>,
        status: u16,
        rule: &str,
    ) -> (String, String) {
        let path = req.uri().path().to_string();
        let (got, header, body) = self.send(client, req).await;
        assert_eq!(got, status, "{path}: {body}");
        let last = self.last();
        assert_eq!(last.outcome, Outcome::Allowed, "{path}: {last:?}");
        assert_eq!(last.rule.as_deref(), Some(rule), "{path}");
        assert_eq!(
            last.path.as_deref(),
            Some(path.as_str()),
            "records name the path without its query"
        );
        (header, body)
    }

    /// Sends `req` and asserts fenzi refused it for `reason` with a record, and the server got
    /// nothing.
    async fn refused(&self, client: &mut Sender, req: Request<Full<Bytes>>, reason: Reason) {
        let path = req.uri().path().to_string();
        let before = self.upstream.received_len();
        let (status, _, body) = self.send(client, req).await;
        assert_eq!(status, reason.http_status(), "{path}: {body}");
        let last = self.last();
        assert_eq!(last.outcome, Outcome::Denied, "{path}: {last:?}");
        assert_eq!(last.reason, Some(reason), "{path}: {last:?}");
        assert_eq!(
            self.upstream.received_len(),
            before,
            "{path}: nothing reaches the server"
        );
    }

    /// No record and no log line holds a code, verifier, challenge, state, secret or token.
    fn assert_nothing_secret_recorded(&self) {
        let records = format!("{:?}", self.proxy.entries());
        let logs = captured();
        for secret in [CODE, VERIFIER, CHALLENGE, STATE, SECRET, TOKEN, "r3fresh"] {
            assert!(
                !records.contains(secret),
                "a record holds {secret}: {records}"
            );
            assert!(!logs.contains(secret), "a log line holds {secret}");
        }
    }
}

/// The requests of the flow after the metadata, at `prefix` (`/oauth` or the root defaults).
async fn sign_in(s: &Setup, client: &mut Sender, prefix: &str) {
    let t = &s.target;
    let registration = r#"{"redirect_uris":["http://127.0.0.1:9/callback"],"client_name":"agent","grant_types":["authorization_code","refresh_token"],"token_endpoint_auth_method":"client_secret_post"}"#;
    let (_, body) = s
        .passes(
            client,
            request(t, "POST", &format!("{prefix}/register"), JSON, registration),
            201,
            "mcp.own oauth registration endpoint",
        )
        .await;
    assert!(
        body.contains(SECRET),
        "the registration's answer reaches the client: {body}"
    );
    let authorize = format!(
        "{prefix}/authorize?response_type=code&client_id=c1&code_challenge={CHALLENGE}&code_challenge_method=S256&state={STATE}&redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcallback&resource=https%3A%2F%2F{t}%2Fmcp"
    );
    let (location, _) = s
        .passes(
            client,
            request(t, "GET", &authorize, None, ""),
            302,
            "mcp.own oauth authorization endpoint",
        )
        .await;
    assert!(
        location.contains(CODE),
        "the redirect reaches the client: {location}"
    );
    let form = format!(
        "grant_type=authorization_code&code={CODE}&code_verifier={VERIFIER}&redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcallback&client_id=c1&client_secret={SECRET}&resource=https%3A%2F%2F{t}%2Fmcp"
    );
    let (_, body) = s
        .passes(
            client,
            request(t, "POST", &format!("{prefix}/token"), FORM, &form),
            200,
            "mcp.own oauth token endpoint",
        )
        .await;
    assert!(body.contains(TOKEN), "the tokens reach the client: {body}");
    let mut call = request(t, "POST", "/mcp", JSON, &rpc(2));
    call.headers_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    let (_, body) = s
        .passes(client, call, 200, "mcp.own.tools.allow \"echo\"")
        .await;
    assert!(body.contains("signed in"), "{body}");
}

#[tokio::test]
async fn a_server_that_is_its_own_authorization_server() {
    capture();
    let s = setup(Behaviour::OwnAuthorizationServer).await;
    let t = &s.target.clone();
    let mut client = s.client().await;
    // Before the server said anything, its sign-in endpoints are refused like any other path.
    s.refused(
        &mut client,
        request(
            t,
            "POST",
            "/oauth/token",
            FORM,
            "grant_type=refresh_token&refresh_token=x",
        ),
        Reason::PolicyDenied,
    )
    .await;
    s.refused(
        &mut client,
        request(t, "GET", "/custom/prm.json", None, ""),
        Reason::PolicyDenied,
    )
    .await;

    let (challenge, _) = s
        .passes(
            &mut client,
            request(t, "POST", "/mcp", JSON, &rpc(1)),
            401,
            "mcp.own.tools.allow \"echo\"",
        )
        .await;
    assert!(challenge.contains("/custom/prm.json"), "{challenge}");
    // A body on the named metadata GET, and on a well-known one.
    s.refused(
        &mut client,
        request(t, "GET", "/custom/prm.json", JSON, &rpc(3)),
        Reason::PolicyDenied,
    )
    .await;
    s.refused(
        &mut client,
        request(
            t,
            "GET",
            "/.well-known/oauth-authorization-server",
            JSON,
            &rpc(4),
        ),
        Reason::PolicyDenied,
    )
    .await;
    let (_, prm) = s
        .passes(
            &mut client,
            request(t, "GET", "/custom/prm.json", None, ""),
            200,
            "mcp.own oauth protected-resource metadata",
        )
        .await;
    assert!(prm.contains(&s.base), "{prm}");
    s.passes(
        &mut client,
        request(
            t,
            "GET",
            "/.well-known/oauth-authorization-server",
            None,
            "",
        ),
        200,
        "mcp.own oauth authorization-server metadata",
    )
    .await;
    // The endpoints it names are now open, each for its own method and media type only.
    s.refused(
        &mut client,
        request(t, "POST", "/oauth/token", FORM, &rpc(5)),
        Reason::PolicyDenied,
    )
    .await;
    s.refused(
        &mut client,
        request(t, "POST", "/oauth/token", JSON, &rpc(6)),
        Reason::BadRequest,
    )
    .await;
    s.refused(
        &mut client,
        request(t, "POST", "/oauth/register", JSON, &rpc(7)),
        Reason::PolicyDenied,
    )
    .await;
    s.refused(
        &mut client,
        request(t, "POST", "/oauth/authorize", FORM, "grant_type=x"),
        Reason::PolicyDenied,
    )
    .await;
    s.refused(
        &mut client,
        request(t, "GET", "/oauth/token", None, ""),
        Reason::PolicyDenied,
    )
    .await;
    // The 2025-03-26 defaults stay closed: this server publishes metadata.
    s.refused(
        &mut client,
        request(
            t,
            "POST",
            "/token",
            FORM,
            "grant_type=refresh_token&refresh_token=x",
        ),
        Reason::PolicyDenied,
    )
    .await;

    sign_in(&s, &mut client, "/oauth").await;
    s.passes(
        &mut client,
        request(
            t,
            "POST",
            "/oauth/revoke",
            FORM,
            &format!("token={TOKEN}&token_type_hint=access_token"),
        ),
        200,
        "mcp.own oauth revocation endpoint",
    )
    .await;
    s.assert_nothing_secret_recorded();
}

#[tokio::test]
async fn a_2025_03_26_server_without_metadata_gets_the_default_endpoints() {
    capture();
    let s = setup(Behaviour::NoMetadata).await;
    let t = &s.target.clone();
    let mut client = s.client().await;
    s.passes(
        &mut client,
        request(t, "POST", "/mcp", JSON, &rpc(1)),
        401,
        "mcp.own.tools.allow \"echo\"",
    )
    .await;
    s.passes(
        &mut client,
        request(
            t,
            "GET",
            "/.well-known/oauth-protected-resource/mcp",
            None,
            "",
        ),
        404,
        "mcp.own oauth protected-resource metadata",
    )
    .await;
    // Not yet: nothing said there is no metadata.
    s.refused(
        &mut client,
        request(t, "POST", "/register", JSON, r#"{"redirect_uris":[]}"#),
        Reason::PolicyDenied,
    )
    .await;
    s.passes(
        &mut client,
        request(
            t,
            "GET",
            "/.well-known/oauth-authorization-server",
            None,
            "",
        ),
        404,
        "mcp.own oauth authorization-server metadata",
    )
    .await;
    s.refused(
        &mut client,
        request(t, "POST", "/token", FORM, &rpc(2)),
        Reason::PolicyDenied,
    )
    .await;
    s.refused(
        &mut client,
        request(t, "POST", "/revoke", FORM, "token=x"),
        Reason::PolicyDenied,
    )
    .await;
    sign_in(&s, &mut client, "").await;
    s.assert_nothing_secret_recorded();
}

#[tokio::test]
async fn malformed_or_oversized_metadata_teaches_nothing() {
    capture();
    for kind in [Behaviour::MalformedMetadata, Behaviour::OversizedMetadata] {
        let s = setup(kind).await;
        let t = &s.target.clone();
        let mut client = s.client().await;
        let (status, _, body) = s
            .send(
                &mut client,
                request(
                    t,
                    "GET",
                    "/.well-known/oauth-authorization-server",
                    None,
                    "",
                ),
            )
            .await;
        assert_eq!(status, 502, "{kind:?}: {body}");
        assert!(
            !body.contains("oauth/token"),
            "{kind:?}: nothing of it is passed on: {body}"
        );
        let records = s.proxy.entries();
        let [.., allowed, failed] = records.as_slice() else {
            panic!("{kind:?}: {records:?}")
        };
        assert_eq!(allowed.outcome, Outcome::Allowed);
        assert_eq!(failed.outcome, Outcome::Failed, "{kind:?}: {failed:?}");
        assert!(
            failed
                .rule
                .as_deref()
                .is_some_and(|r| r.contains("sign-in metadata")),
            "{kind:?}: {failed:?}"
        );
        // What it names stays refused.
        s.refused(
            &mut client,
            request(
                t,
                "POST",
                "/oauth/token",
                FORM,
                "grant_type=refresh_token&refresh_token=x",
            ),
            Reason::PolicyDenied,
        )
        .await;
    }
}

#[tokio::test]
async fn nothing_an_upstream_names_reaches_another_host() {
    capture();
    // A `resource_metadata` on another host opens nothing on this one, and that host stays out.
    let s = setup(Behaviour::ForeignResourceMetadata).await;
    let t = &s.target.clone();
    let mut client = s.client().await;
    s.passes(
        &mut client,
        request(t, "POST", "/mcp", JSON, &rpc(1)),
        401,
        "mcp.own.tools.allow \"echo\"",
    )
    .await;
    s.refused(
        &mut client,
        request(t, "GET", "/custom/prm.json", None, ""),
        Reason::PolicyDenied,
    )
    .await;
    let (_, status, head) = connect(s.proxy.addr, "elsewhere.test:443").await;
    assert_eq!(status, 403, "{head}");
    assert_eq!(s.last().reason, Some(Reason::HostNotAllowed));

    // An authorization server on a host the policy does not name stays `host_not_allowed`, and
    // its endpoints open nothing on the MCP host.
    let s = setup(Behaviour::ForeignAuthorizationServer).await;
    let t = &s.target.clone();
    let mut client = s.client().await;
    s.passes(
        &mut client,
        request(t, "POST", "/mcp", JSON, &rpc(1)),
        401,
        "mcp.own.tools.allow \"echo\"",
    )
    .await;
    s.passes(
        &mut client,
        request(t, "GET", "/custom/prm.json", None, ""),
        200,
        "mcp.own oauth protected-resource metadata",
    )
    .await;
    s.passes(
        &mut client,
        request(
            t,
            "GET",
            "/.well-known/oauth-authorization-server",
            None,
            "",
        ),
        200,
        "mcp.own oauth authorization-server metadata",
    )
    .await;
    for path in ["/oauth/token", "/token"] {
        s.refused(
            &mut client,
            request(
                t,
                "POST",
                path,
                FORM,
                "grant_type=refresh_token&refresh_token=x",
            ),
            Reason::PolicyDenied,
        )
        .await;
    }
    let (_, status, head) = connect(s.proxy.addr, "auth.elsewhere.test:443").await;
    assert_eq!(status, 403, "{head}");
    assert_eq!(s.last().reason, Some(Reason::HostNotAllowed));
}
