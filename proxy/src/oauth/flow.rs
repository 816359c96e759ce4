//! The requests of a sign-in and of a renewal, as MCP authorization (2025-06-18) gives them, made
//! by fenzi on the host:
//!
//! 1. [`discover`]: the server's protected-resource metadata (RFC 9728) — from the
//!    `resource_metadata` of the `WWW-Authenticate` challenge its `401` carries, else its
//!    well-known paths — then its authorization server's metadata (RFC 8414, then OpenID
//!    discovery). A server that publishes neither is an error: fenzi does not guess endpoints.
//!    PKCE with `S256` must be offered (MCP requires it).
//! 2. [`register`]: dynamic client registration (RFC 7591) for the loopback redirect, unless a
//!    client ID was given (a pre-registered client, or a client ID metadata document's https URL
//!    where the server supports those).
//! 3. [`authorization_url`]: the URL the person opens: code flow, PKCE `S256`, `state`, and the
//!    RFC 8707 `resource`.
//! 4. [`exchange_code`] and [`refresh`]: token requests with `resource`, read strictly
//!    (`oauth_client::read_token_response`: a bearer token with `expires_in`).
//! 5. [`revoke`]: RFC 7009, where the server names a revocation endpoint.
//!
//! Every request goes through [`HttpClient::send`] (https only, on a host the policy admits).
//! Errors are fenzi's words and the registered error codes; no token, code, verifier or secret.

use super::http::{Answer, Body, Endpoint, HttpClient};
use super::record::{ClientAuth, SignInRecord};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use fenzi_policy::config::RemoteUrl;
use fenzi_policy::engine::Policy;
use fenzi_policy::mcp::oauth::{
    ServerMetadata, Step, challenged_resource_metadata, read_resource_metadata,
    read_server_metadata,
};
use fenzi_policy::mcp::oauth_client::{
    Registration, TokenResponse, form, form_component, read_registration, read_token_error,
    read_token_response,
};
use http::header::AUTHORIZATION;
use http::{HeaderName, HeaderValue, Method, StatusCode};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// What discovery found: where to sign in, and for what.
#[derive(Debug, Clone)]
pub struct Discovered {
    /// The RFC 8707 resource: the protected-resource metadata's `resource`, else the server's url.
    pub resource: String,
    pub issuer: Option<String>,
    pub authorization: Endpoint,
    pub token: Endpoint,
    pub registration: Option<Endpoint>,
    pub revocation: Option<Endpoint>,
    /// Scopes the protected resource names (asked for when the person names none).
    pub scopes: Vec<String>,
    pub client_id_metadata_documents: bool,
    pub token_auth_methods: Vec<String>,
}

const JSON: &str = "application/json";
const FORM: &str = "application/x-www-form-urlencoded";

fn server_origin(url: &RemoteUrl) -> String {
    if url.port == 443 {
        format!("https://{}", url.host)
    } else {
        format!("https://{}", url.host.authority(url.port))
    }
}

/// The MCP server's url without a trailing `/` on a bare origin.
fn server_url(url: &RemoteUrl) -> String {
    let origin = server_origin(url);
    if url.path == "/" {
        origin
    } else {
        format!("{origin}{}", url.path)
    }
}

async fn get_json(
    client: &HttpClient,
    policy: &Policy,
    endpoint: &Endpoint,
    what: &str,
) -> Result<Option<Answer>, String> {
    let answer = client
        .send(policy, Method::GET, endpoint, &[], None, what)
        .await?;
    if answer.status == StatusCode::OK {
        if !answer.is_json() {
            return Err(format!(
                "{what} at {}: the answer is not application/json",
                endpoint.url_without_query()
            ));
        }
        return Ok(Some(answer));
    }
    Ok(None)
}

/// Finds where and how to sign in to the server at `url`.
pub async fn discover(
    client: &HttpClient,
    policy: &Policy,
    server: &str,
    url: &RemoteUrl,
) -> Result<Discovered, String> {
    let mcp = Endpoint::parse(&server_url(url), "the server's url")?;
    // An unauthenticated `initialize`: its 401 names the resource metadata (RFC 9728 §5.1).
    let probe = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "fenzi", "version": env!("CARGO_PKG_VERSION")}}
    });
    let accept = [(
        HeaderName::from_static("accept"),
        HeaderValue::from_static("application/json, text/event-stream"),
    )];
    let answer = client
        .send(
            policy,
            Method::POST,
            &mcp,
            &accept,
            Some(Body {
                content_type: JSON,
                bytes: probe.to_string().into_bytes(),
            }),
            "the first request to the server",
        )
        .await?;
    let named = if answer.status == StatusCode::UNAUTHORIZED {
        challenged_resource_metadata(answer.www_authenticate.iter().map(Vec::as_slice))
            .map_err(|e| format!("the server's 401 challenge cannot be used: {e}"))?
    } else {
        None
    };
    let origin = server_origin(url);
    let mut candidates = Vec::new();
    if let Some(named) = named {
        candidates.push(named);
    } else {
        if url.path != "/" {
            candidates.push(format!(
                "{origin}/.well-known/oauth-protected-resource{}",
                url.path.trim_end_matches('/')
            ));
        }
        candidates.push(format!("{origin}/.well-known/oauth-protected-resource"));
    }
    let mut resource_metadata = None;
    for candidate in &candidates {
        let endpoint = Endpoint::parse(candidate, "the protected-resource metadata url")?;
        if let Some(answer) = get_json(
            client,
            policy,
            &endpoint,
            "the protected-resource metadata request",
        )
        .await?
        {
            let doc = read_resource_metadata(&answer.body).map_err(|e| {
                format!(
                    "the protected-resource metadata at {} cannot be read: {e}",
                    endpoint.url_without_query()
                )
            })?;
            resource_metadata = Some(doc);
            break;
        }
    }
    let own_url = server_url(url);
    let (resource, issuer_url, scopes) = match resource_metadata {
        Some(doc) => {
            let resource = match doc.resource {
                Some(r) => {
                    let r_trim = r.trim_end_matches('/');
                    if r_trim != own_url.trim_end_matches('/')
                        && r_trim != origin
                        && !own_url.starts_with(&format!("{r_trim}/"))
                    {
                        return Err(format!(
                            "the protected-resource metadata of `{server}` is for another \
                             resource than {own_url}; fenzi does not sign in with it"
                        ));
                    }
                    r
                }
                None => own_url.clone(),
            };
            let Some(issuer) = doc.authorization_servers.first().cloned() else {
                return Err(format!(
                    "the protected-resource metadata of `{server}` names no authorization server"
                ));
            };
            (resource, Some(issuer), doc.scopes_supported)
        }
        None => (own_url.clone(), None, Vec::new()),
    };
    // RFC 8414 §3.1 and OpenID discovery, in MCP's order; without resource metadata, the
    // server's own origin (2025-03-26).
    let issuer_text = issuer_url.clone().unwrap_or_else(|| origin.clone());
    let issuer = Endpoint::parse(&issuer_text, "the authorization server's issuer")?;
    let issuer_origin = issuer.origin();
    let path = issuer.path().trim_end_matches('/').to_string();
    let docs: Vec<String> = if path.is_empty() {
        vec![
            format!("{issuer_origin}/.well-known/oauth-authorization-server"),
            format!("{issuer_origin}/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            format!("{issuer_origin}/.well-known/oauth-authorization-server{path}"),
            format!("{issuer_origin}/.well-known/openid-configuration{path}"),
            format!("{issuer_origin}{path}/.well-known/openid-configuration"),
        ]
    };
    let mut metadata: Option<ServerMetadata> = None;
    for doc_url in &docs {
        let endpoint = Endpoint::parse(doc_url, "the authorization-server metadata url")?;
        if let Some(answer) = get_json(
            client,
            policy,
            &endpoint,
            "the authorization-server metadata request",
        )
        .await?
        {
            metadata = Some(read_server_metadata(&answer.body).map_err(|e| {
                format!(
                    "the authorization-server metadata at {} cannot be read: {e}",
                    endpoint.url_without_query()
                )
            })?);
            break;
        }
    }
    let Some(metadata) = metadata else {
        return Err(if issuer_url.is_some() {
            format!(
                "the authorization server of `{server}` ({issuer_origin}) publishes no metadata \
                 (RFC 8414 or OpenID discovery); fenzi cannot sign in to it"
            )
        } else {
            format!(
                "`{server}` publishes no OAuth metadata: no protected-resource metadata (RFC \
                 9728) and no authorization-server metadata at {origin}; it may not use OAuth \
                 (try `fenzi mcp token {server}` with a token it gives you)"
            )
        });
    };
    if let (Some(named), Some(said)) = (&issuer_url, &metadata.issuer)
        && named.trim_end_matches('/') != said.trim_end_matches('/')
    {
        return Err(format!(
            "the authorization-server metadata at {issuer_origin} names another issuer than the \
             one `{server}` named (RFC 8414 §3.3); fenzi does not sign in with it"
        ));
    }
    if !metadata
        .code_challenge_methods_supported
        .iter()
        .any(|m| m == "S256")
    {
        return Err(format!(
            "the authorization server of `{server}` does not list PKCE `S256` in \
             code_challenge_methods_supported; MCP requires it, so fenzi does not sign in"
        ));
    }
    let endpoint = |step: Step, what: &str| -> Result<Option<Endpoint>, String> {
        metadata
            .endpoints
            .iter()
            .find(|(s, _)| *s == step)
            .map(|(_, u)| Endpoint::parse(u, what))
            .transpose()
    };
    let authorization = endpoint(Step::Authorization, "the authorization endpoint")?
        .ok_or("the authorization-server metadata names no authorization_endpoint")?;
    let token = endpoint(Step::Token, "the token endpoint")?
        .ok_or("the authorization-server metadata names no token_endpoint")?;
    Ok(Discovered {
        resource,
        issuer: metadata.issuer.clone(),
        authorization,
        token,
        registration: endpoint(Step::Registration, "the registration endpoint")?,
        revocation: endpoint(Step::Revocation, "the revocation endpoint")?,
        scopes,
        client_id_metadata_documents: metadata.client_id_metadata_documents,
        token_auth_methods: metadata.token_endpoint_auth_methods_supported.clone(),
    })
}

/// 32 random bytes, base64url: a PKCE verifier or a `state`.
pub fn random_text() -> Result<Zeroizing<String>, String> {
    let mut bytes = Zeroizing::new([0u8; 32]);
    getrandom::fill(bytes.as_mut()).map_err(|e| format!("no randomness: {e}"))?;
    Ok(Zeroizing::new(URL_SAFE_NO_PAD.encode(bytes.as_ref())))
}

/// The S256 challenge of a PKCE verifier (RFC 7636 §4.2).
pub fn pkce_challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// The client that signs in: registered now, or given.
#[derive(Clone)]
pub struct Client {
    pub id: String,
    pub secret: Option<String>,
    pub auth: ClientAuth,
}

/// Registers fenzi as a public client for `redirect_uri` (RFC 7591), or uses `given` (a
/// pre-registered client ID, or a client ID metadata document's https URL).
pub async fn register(
    client: &HttpClient,
    policy: &Policy,
    found: &Discovered,
    redirect_uri: &str,
    given: Option<&str>,
) -> Result<Client, String> {
    if let Some(id) = given {
        if id.starts_with("https://") && !found.client_id_metadata_documents {
            eprintln!(
                "note: the client ID is a URL, and the authorization server does not say it \
                 supports client ID metadata documents; using it as given"
            );
        }
        return Ok(Client {
            id: id.to_string(),
            secret: None,
            auth: ClientAuth::None,
        });
    }
    let Some(endpoint) = &found.registration else {
        return Err(
            "the authorization server offers no dynamic client registration (no \
             registration_endpoint): give a client ID registered with it, --client-id ID (or \
             the https URL of a client ID metadata document)"
                .to_string(),
        );
    };
    let request = serde_json::json!({
        "client_name": "fenzi",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    });
    let answer = client
        .send(
            policy,
            Method::POST,
            endpoint,
            &[],
            Some(Body {
                content_type: JSON,
                bytes: request.to_string().into_bytes(),
            }),
            "the client registration",
        )
        .await?;
    if !answer.status.is_success() {
        return Err(format!(
            "the client registration at {} was refused ({})",
            endpoint.url_without_query(),
            answer.status
        ));
    }
    let Registration {
        client_id,
        client_secret,
    } = read_registration(&answer.body)
        .map_err(|e| format!("the client registration's answer cannot be used: {e}"))?;
    // The redirect registered must be the one fenzi listens on (RFC 7591 §3.2.1 may change it).
    if let Ok(doc) = fenzi_policy::json::parse(&answer.body, &Default::default())
        && let Some(fenzi_policy::json::Value::Array(list)) = doc.get("redirect_uris")
        && !list.iter().any(|u| u.as_str() == Some(redirect_uri))
    {
        return Err(
            "the authorization server registered another redirect than fenzi's loopback one \
             (another host or port); fenzi does not sign in with it"
                .to_string(),
        );
    }
    let auth = match &client_secret {
        None => ClientAuth::None,
        Some(_)
            if found
                .token_auth_methods
                .iter()
                .any(|m| m == "client_secret_post")
                && !found
                    .token_auth_methods
                    .iter()
                    .any(|m| m == "client_secret_basic") =>
        {
            ClientAuth::ClientSecretPost
        }
        Some(_) => ClientAuth::ClientSecretBasic,
    };
    Ok(Client {
        id: client_id,
        secret: client_secret,
        auth,
    })
}

/// The URL the person opens to sign in.
pub fn authorization_url(
    found: &Discovered,
    client_id: &str,
    redirect_uri: &str,
    state: &str,
    challenge: &str,
    scope: Option<&str>,
) -> String {
    let mut pairs = vec![
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", redirect_uri),
        ("state", state),
        ("code_challenge", challenge),
        ("code_challenge_method", "S256"),
        ("resource", found.resource.as_str()),
    ];
    if let Some(scope) = scope.filter(|s| !s.is_empty()) {
        pairs.push(("scope", scope));
    }
    let base = &found.authorization;
    let sep = if base.target.contains('?') { '&' } else { '?' };
    format!("{}{}{sep}{}", base.origin(), base.target, form(pairs))
}

/// Why a token request failed: `Refused` when the server said no (sign in again), `Failed` when it
/// could not be asked or answered something unusable (retry may work).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenError {
    Refused(String),
    Failed(String),
}

impl std::fmt::Display for TokenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenError::Refused(why) | TokenError::Failed(why) => f.write_str(why),
        }
    }
}

async fn token_request(
    http: &HttpClient,
    policy: &Policy,
    token: &Endpoint,
    client: &Client,
    mut pairs: Vec<(&str, &str)>,
    what: &str,
) -> Result<TokenResponse, TokenError> {
    let mut headers = Vec::new();
    match (client.auth, &client.secret) {
        (ClientAuth::ClientSecretBasic, Some(secret)) => {
            // RFC 6749 §2.3.1: each part form-encoded, then Basic.
            let pair = Zeroizing::new(format!(
                "{}:{}",
                form_component(&client.id),
                form_component(secret)
            ));
            let mut value =
                HeaderValue::from_str(&format!("Basic {}", STANDARD.encode(pair.as_bytes())))
                    .map_err(|_| TokenError::Failed("the client secret cannot be sent".into()))?;
            value.set_sensitive(true);
            headers.push((AUTHORIZATION, value));
        }
        (ClientAuth::ClientSecretPost, Some(secret)) => {
            pairs.push(("client_id", &client.id));
            pairs.push(("client_secret", secret));
        }
        _ => pairs.push(("client_id", &client.id)),
    }
    let body = Zeroizing::new(form(pairs));
    let answer = http
        .send(
            policy,
            Method::POST,
            token,
            &headers,
            Some(Body {
                content_type: FORM,
                bytes: body.as_bytes().to_vec(),
            }),
            what,
        )
        .await
        .map_err(TokenError::Failed)?;
    let at = token.url_without_query();
    if answer.status == StatusCode::OK {
        return read_token_response(&answer.body).map_err(|e| {
            TokenError::Failed(format!(
                "the token endpoint {at} answered with a token fenzi cannot use: {e}; nothing was \
                 stored"
            ))
        });
    }
    let code = read_token_error(&answer.body);
    let why = match code {
        Some(code) => format!(
            "the token endpoint {at} refused it ({}, `{code}`)",
            answer.status
        ),
        None => format!("the token endpoint {at} answered {}", answer.status),
    };
    if answer.status.is_client_error() {
        Err(TokenError::Refused(why))
    } else {
        Err(TokenError::Failed(why))
    }
}

/// Exchanges the authorization code (RFC 6749 §4.1.3, with the PKCE verifier and `resource`).
pub async fn exchange_code(
    http: &HttpClient,
    policy: &Policy,
    found: &Discovered,
    client: &Client,
    code: &str,
    verifier: &str,
    redirect_uri: &str,
) -> Result<TokenResponse, TokenError> {
    token_request(
        http,
        policy,
        &found.token,
        client,
        vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect_uri),
            ("code_verifier", verifier),
            ("resource", &found.resource),
        ],
        "the token request",
    )
    .await
}

/// Renews with the record's refresh token (RFC 6749 §6, with `resource`).
pub async fn refresh(
    http: &HttpClient,
    policy: &Policy,
    record: &SignInRecord,
) -> Result<TokenResponse, TokenError> {
    let Some(refresh_token) = &record.refresh_token else {
        return Err(TokenError::Refused(
            "the authorization server gave no refresh token, so the sign-in cannot be renewed"
                .into(),
        ));
    };
    let token = Endpoint::parse(&record.token_endpoint, "the token endpoint")
        .map_err(TokenError::Failed)?;
    let client = Client {
        id: record.client_id.clone(),
        secret: record.client_secret.clone(),
        auth: record.client_auth,
    };
    token_request(
        http,
        policy,
        &token,
        &client,
        vec![
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
            ("resource", &record.resource),
        ],
        "the refresh request",
    )
    .await
}

/// Revokes the refresh token (or else the access token) where the server names a revocation
/// endpoint (RFC 7009). `Ok(false)`: there is none.
pub async fn revoke(
    http: &HttpClient,
    policy: &Policy,
    record: &SignInRecord,
    access_token: Option<&str>,
) -> Result<bool, String> {
    let Some(url) = &record.revocation_endpoint else {
        return Ok(false);
    };
    let endpoint = Endpoint::parse(url, "the revocation endpoint")?;
    let (token, hint) = match (&record.refresh_token, access_token) {
        (Some(r), _) => (r.as_str(), "refresh_token"),
        (None, Some(a)) => (a, "access_token"),
        (None, None) => return Ok(false),
    };
    let mut pairs = vec![("token", token), ("token_type_hint", hint)];
    let mut headers = Vec::new();
    match (record.client_auth, &record.client_secret) {
        (ClientAuth::ClientSecretBasic, Some(secret)) => {
            let pair = Zeroizing::new(format!(
                "{}:{}",
                form_component(&record.client_id),
                form_component(secret)
            ));
            let mut value =
                HeaderValue::from_str(&format!("Basic {}", STANDARD.encode(pair.as_bytes())))
                    .map_err(|_| "the client secret cannot be sent".to_string())?;
            value.set_sensitive(true);
            headers.push((AUTHORIZATION, value));
        }
        (ClientAuth::ClientSecretPost, Some(secret)) => {
            pairs.push(("client_id", &record.client_id));
            pairs.push(("client_secret", secret));
        }
        _ => pairs.push(("client_id", &record.client_id)),
    }
    let body = Zeroizing::new(form(pairs));
    let answer = http
        .send(
            policy,
            Method::POST,
            &endpoint,
            &headers,
            Some(Body {
                content_type: FORM,
                bytes: body.as_bytes().to_vec(),
            }),
            "the revocation request",
        )
        .await?;
    if answer.status.is_success() {
        Ok(true)
    } else {
        Err(format!(
            "the revocation endpoint {} answered {}",
            endpoint.url_without_query(),
            answer.status
        ))
    }
}
