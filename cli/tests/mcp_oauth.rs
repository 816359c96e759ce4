//! Sign-in that keeps the token outside (`oauth: true`, `fenzi mcp login`), through the real binary,
//! the real kernel keyring and real TLS on loopback: an authorization server and an MCP server
//! written for this test (short-lived tokens, so the session renews within the test), and a
//! scripted person who follows the printed URL with curl (the authorization server approves at
//! once).
//!
//! - `a_sign_in_is_kept_outside_renewed_and_ended`: login stores the tokens in the keyring only;
//!   `fenzi mcp list` shows the sign-in; in `fenzi proxy` the client holds a placeholder, the MCP
//!   server gets the real access token, and after renewal (rotated refresh token stored) the new
//!   one, without a request replayed; a refused
//!   refresh makes the next request a refusal naming `fenzi mcp login`, and the log says why; a
//!   new login is taken up by the running session; logout revokes and removes. No token appears in
//!   any log, and `fenzi log` shows the sign-in records.
//! - `bad_sign_ins_store_nothing`: a server without metadata, an authorization server the policy
//!   does not allow, a state mismatch, a redirect to another port, a token answer without
//!   `expires_in`: each a clear error, nothing stored.

mod mcp_support;

use bytes::Bytes;
use fenzi_policy::mcp::oauth_client::parse_form;
use fenzi_proxy::credstore::{CredentialStore, KernelKeyring};
use fenzi_proxy::oauth::flow::pkce_challenge;
use fenzi_proxy::oauth::record::{SignInRecord, record_name};
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use mcp_support::{
    command, https_server, kernel_keyring_or_skip, listening_addr, random_hex, text,
};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How the test authorization server misbehaves, if at all.
#[derive(Default, Clone)]
struct Mode {
    /// Access token lifetime in seconds.
    lifetime: u64,
    omit_expires_in: bool,
    tamper_state: bool,
    redirect_port: Option<u16>,
    /// The MCP server publishes no metadata and its challenge names none.
    no_metadata: bool,
}

#[derive(Default)]
struct State {
    mode: Mode,
    as_port: u16,
    mcp_port: u16,
    /// code -> (challenge, redirect_uri, resource)
    codes: Vec<(String, String, String, String)>,
    /// Valid access tokens and their expiry (unix secs).
    access: Vec<(String, u64)>,
    refresh: Option<String>,
    refresh_refused: bool,
    issued: Vec<String>,
    refreshes: usize,
    revoked: Vec<String>,
    /// Access tokens the MCP server was given (accepted or not).
    seen: Vec<String>,
    serial: u64,
}

type Shared = Arc<Mutex<State>>;

fn unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn json(status: StatusCode, body: serde_json::Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

fn empty(status: StatusCode) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

async fn body_text(req: Request<hyper::body::Incoming>) -> (http::request::Parts, String) {
    let (parts, body) = req.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (parts, String::from_utf8_lossy(&bytes).into_owned())
}

fn form_get(form: &[(String, String)], name: &str) -> String {
    form.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

async fn authorization_server(
    state: Shared,
    req: Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    let (parts, body) = body_text(req).await;
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or("").to_string();
    let mut s = state.lock().unwrap();
    let base = format!("https://127.0.0.1:{}", s.as_port);
    match (parts.method.as_str(), path.as_str()) {
        ("GET", "/.well-known/oauth-authorization-server") => json(
            StatusCode::OK,
            serde_json::json!({
                "issuer": base,
                "authorization_endpoint": format!("{base}/authorize"),
                "token_endpoint": format!("{base}/token"),
                "registration_endpoint": format!("{base}/register"),
                "revocation_endpoint": format!("{base}/revoke"),
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["none"],
            }),
        ),
        ("POST", "/register") => {
            let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
            s.serial += 1;
            json(
                StatusCode::CREATED,
                serde_json::json!({
                    "client_id": format!("client-{}", s.serial),
                    "redirect_uris": doc["redirect_uris"],
                    "token_endpoint_auth_method": "none",
                }),
            )
        }
        ("GET", "/authorize") => {
            let q = parse_form(&query).unwrap();
            assert_eq!(form_get(&q, "response_type"), "code");
            assert_eq!(form_get(&q, "code_challenge_method"), "S256");
            let resource = form_get(&q, "resource");
            assert_eq!(resource, format!("https://127.0.0.1:{}/mcp", s.mcp_port));
            s.serial += 1;
            let code = format!("code-{}-{}", s.serial, random_hex());
            let mut redirect = form_get(&q, "redirect_uri");
            s.codes.push((
                code.clone(),
                form_get(&q, "code_challenge"),
                redirect.clone(),
                resource,
            ));
            if let Some(port) = s.mode.redirect_port {
                let rest = redirect.split_once("127.0.0.1:").unwrap().1;
                let path = &rest[rest.find('/').unwrap()..];
                redirect = format!("http://127.0.0.1:{port}{path}");
            }
            let mut state_back = form_get(&q, "state");
            if s.mode.tamper_state {
                state_back.push('x');
            }
            Response::builder()
                .status(StatusCode::FOUND)
                .header(
                    "location",
                    format!("{redirect}?code={code}&state={state_back}"),
                )
                .body(Full::new(Bytes::new()))
                .unwrap()
        }
        ("POST", "/token") => {
            let f = parse_form(&body).unwrap();
            match form_get(&f, "grant_type").as_str() {
                "authorization_code" => {
                    let code = form_get(&f, "code");
                    let Some(i) = s.codes.iter().position(|c| c.0 == code) else {
                        return json(
                            StatusCode::BAD_REQUEST,
                            serde_json::json!({"error": "invalid_grant"}),
                        );
                    };
                    let (_, challenge, redirect, resource) = s.codes.remove(i);
                    assert_eq!(pkce_challenge(&form_get(&f, "code_verifier")), challenge);
                    assert_eq!(form_get(&f, "redirect_uri"), redirect);
                    assert_eq!(form_get(&f, "resource"), resource);
                    issue(&mut s)
                }
                "refresh_token" => {
                    let given = form_get(&f, "refresh_token");
                    assert_eq!(
                        form_get(&f, "resource"),
                        format!("https://127.0.0.1:{}/mcp", s.mcp_port)
                    );
                    if s.refresh_refused || s.refresh.as_deref() != Some(given.as_str()) {
                        return json(
                            StatusCode::BAD_REQUEST,
                            serde_json::json!({"error": "invalid_grant", "error_description": "refresh token expired"}),
                        );
                    }
                    s.refreshes += 1;
                    issue(&mut s)
                }
                _ => json(
                    StatusCode::BAD_REQUEST,
                    serde_json::json!({"error": "unsupported_grant_type"}),
                ),
            }
        }
        ("POST", "/revoke") => {
            let f = parse_form(&body).unwrap();
            s.revoked.push(form_get(&f, "token"));
            empty(StatusCode::OK)
        }
        _ => empty(StatusCode::NOT_FOUND),
    }
}

/// Issues a new access token and a rotated refresh token (the old one stops working).
fn issue(s: &mut State) -> Response<Full<Bytes>> {
    s.serial += 1;
    let access = format!("at-{}-{}{}", s.serial, random_hex(), random_hex());
    let refresh = format!("rt-{}-{}{}", s.serial, random_hex(), random_hex());
    s.access.push((access.clone(), unix() + s.mode.lifetime));
    s.refresh = Some(refresh.clone());
    s.issued.push(access.clone());
    s.issued.push(refresh.clone());
    let mut doc = serde_json::json!({
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": s.mode.lifetime,
        "refresh_token": refresh,
        "scope": "echo:read",
    });
    if s.mode.omit_expires_in {
        doc.as_object_mut().unwrap().remove("expires_in");
    }
    json(StatusCode::OK, doc)
}

async fn mcp_server(state: Shared, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = body_text(req).await;
    let mut s = state.lock().unwrap();
    let path = parts.uri.path();
    let prm = "/.well-known/oauth-protected-resource/mcp";
    if parts.method == "GET" && path == prm && !s.mode.no_metadata {
        return json(
            StatusCode::OK,
            serde_json::json!({
                "resource": format!("https://127.0.0.1:{}/mcp", s.mcp_port),
                "authorization_servers": [format!("https://127.0.0.1:{}", s.as_port)],
                "scopes_supported": ["echo:read"],
            }),
        );
    }
    if parts.method != "POST" || path != "/mcp" {
        return empty(StatusCode::NOT_FOUND);
    }
    let bearer = parts
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let now = unix();
    let valid = bearer
        .as_ref()
        .is_some_and(|b| s.access.iter().any(|(t, exp)| t == b && *exp > now));
    if let Some(b) = &bearer {
        s.seen.push(b.clone());
    }
    if !valid {
        let challenge = if s.mode.no_metadata {
            "Bearer realm=\"test\"".to_string()
        } else {
            format!(
                "Bearer resource_metadata=\"https://127.0.0.1:{}{prm}\"",
                s.mcp_port
            )
        };
        return Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header("www-authenticate", challenge)
            .body(Full::new(Bytes::new()))
            .unwrap();
    }
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    json(
        StatusCode::OK,
        serde_json::json!({"jsonrpc": "2.0", "id": doc["id"], "result": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "serverInfo": {"name": "oauth-test", "version": "1"}}}),
    )
}

struct World {
    state: Shared,
    dir: tempfile::TempDir,
    server: String,
    _as: tokio::runtime::Runtime,
    _mcp: tokio::runtime::Runtime,
}

impl World {
    fn new(mode: Mode, allow_as: bool) -> World {
        let state: Shared = Arc::new(Mutex::new(State {
            mode,
            ..State::default()
        }));
        let st = state.clone();
        let (as_port, as_ca, as_rt) =
            https_server(move |req| authorization_server(st.clone(), req));
        let st = state.clone();
        let (mcp_port, mcp_ca, mcp_rt) = https_server(move |req| mcp_server(st.clone(), req));
        {
            let mut s = state.lock().unwrap();
            s.as_port = as_port;
            s.mcp_port = mcp_port;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("as.pem"), as_ca).unwrap();
        std::fs::write(dir.path().join("mcp.pem"), mcp_ca).unwrap();
        let server = format!("oauth-{}", random_hex());
        let hosts = if allow_as {
            format!("hosts: [\"127.0.0.1:{as_port}\"]\n")
        } else {
            String::new()
        };
        std::fs::write(
            dir.path().join("fenzi.yaml"),
            format!(
                "version: 1\n{hosts}mcp:\n  {server}:\n    url: https://127.0.0.1:{mcp_port}/mcp\n    oauth: true\n    tools:\n      allow: [echo]\n"
            ),
        )
        .unwrap();
        World {
            state,
            dir,
            server,
            _as: as_rt,
            _mcp: mcp_rt,
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = command(self.path(), args);
        cmd.env("FENZI_CREDSTORE", "keyutils")
            .env("XDG_STATE_HOME", self.path().join("state"))
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .env_remove("BROWSER")
            .args(["--upstream-ca", "as.pem", "--upstream-ca", "mcp.pem"]);
        cmd
    }

    /// `fenzi mcp login` with a person who follows the URL with curl. Returns (ok, stdout, stderr).
    fn login(&self, extra: &[&str]) -> (bool, String, String) {
        let mut args = vec!["mcp", "login", &self.server, "--no-browser"];
        args.extend_from_slice(extra);
        if !extra.contains(&"--timeout") {
            args.extend_from_slice(&["--timeout", "20s"]);
        }
        let mut child = self.cmd(&args).stdin(Stdio::null()).spawn().unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut stderr = String::new();
        let mut line = String::new();
        while err.read_line(&mut line).unwrap() > 0 {
            stderr.push_str(&line);
            if let Some(url) = line.trim().strip_prefix("https://") {
                // The person: opens the URL; the browser follows the redirect back.
                // (`-k`: the person's browser and the authorization server are not what is
                // tested; rcgen's CA and leaf share a name, which OpenSSL takes for self-signed.)
                let out = Command::new("curl")
                    .args(["-sS", "-k", "-L", "--max-time", "10"])
                    .arg(format!("https://{url}"))
                    .output()
                    .unwrap();
                stderr.push_str(&format!("[curl: {}]\n", text(&out.stderr)));
            }
            line.clear();
        }
        let out = child.wait_with_output().unwrap();
        (out.status.success(), text(&out.stdout), stderr)
    }

    fn issued(&self) -> Vec<String> {
        self.state.lock().unwrap().issued.clone()
    }
}

/// Deletes the test's keys however the test ends.
struct Cleanup(KernelKeyring, String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = SignInRecord::delete(&self.0, &self.1);
    }
}

fn token_name(server: &str) -> String {
    fenzi_policy::secret_name::server_token_name(server)
}

/// Every file under `dir`, as text.
fn all_text(dir: &Path) -> String {
    let mut out = String::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.push_str(&all_text(&p));
        } else if let Ok(t) = std::fs::read_to_string(&p) {
            out.push_str(&t);
        }
    }
    out
}

fn proxy(world: &World) -> (Child, String, String) {
    let mut child = world
        .cmd(&[
            "proxy",
            "--config",
            "fenzi.yaml",
            "--listen",
            "127.0.0.1:0",
            "--audit",
            "audit.jsonl",
            "--ca-dir",
            "ca",
        ])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let addr = listening_addr(&mut child);
    let env = std::fs::read_to_string(world.path().join("ca/placeholders.env")).unwrap();
    let name = token_name(&world.server);
    let placeholder = env
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no placeholder for {name} in {env:?}"))
        .to_string();
    (child, addr, placeholder)
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

/// Whether `fenzi run`'s sandbox can run here; under `FENZI_REQUIRE_SANDBOX` it must.
fn sandbox_available() -> bool {
    let ok = Command::new("unshare")
        .args(["--user", "--net", "true"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok || std::env::var_os("FENZI_REQUIRE_SANDBOX").is_none(),
        "the sandbox cannot run here but FENZI_REQUIRE_SANDBOX is set"
    );
    if !ok {
        eprintln!("SKIPPED the `fenzi run` part: user namespaces are unavailable");
    }
    ok
}

/// An MCP initialize through the proxy with `bearer`: (HTTP status, body).
fn call(world: &World, proxy: &str, host: &str, bearer: &str) -> (String, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10", "-w", "\n%{http_code}", "-x"])
        .arg(format!("http://{proxy}"))
        .arg("--cacert")
        .arg(world.path().join("ca/ca.pem"))
        .args(["-H", &format!("Authorization: Bearer {bearer}")])
        .args(["-H", "content-type: application/json"])
        .args(["-H", "accept: application/json, text/event-stream"])
        .args(["-d", INIT])
        .arg(format!("https://{host}/mcp"))
        .output()
        .unwrap();
    let all = text(&out.stdout);
    let (body, status) = all.rsplit_once('\n').unwrap_or(("", &all));
    (status.to_string(), body.to_string())
}

fn stop(child: Child) -> String {
    mcp_support::terminate(child)
}

#[test]
fn a_sign_in_is_kept_outside_renewed_and_ended() {
    let Some(store) = kernel_keyring_or_skip("oauth sign-in test") else {
        return;
    };
    let world = World::new(
        Mode {
            lifetime: 4,
            ..Mode::default()
        },
        true,
    );
    let _cleanup = Cleanup(KernelKeyring::open().unwrap(), world.server.clone());
    let server = world.server.clone();

    // Sign in: the URL is printed; the tokens go to the keyring only.
    let (ok, stdout, stderr) = world.login(&[]);
    assert!(ok, "login failed: {stderr}");
    assert!(
        stdout.contains(&format!("signed in to `{server}`")),
        "{stdout}"
    );
    assert!(stderr.contains("/authorize?response_type=code"), "{stderr}");
    assert!(stderr.contains("code_challenge_method=S256"), "{stderr}");
    let first_access = store.get(&token_name(&server)).unwrap().unwrap();
    let mcp_port = world.state.lock().unwrap().mcp_port;
    assert_eq!(
        first_access.hosts.as_deref(),
        Some(&[format!("127.0.0.1:{mcp_port}")][..])
    );
    let record = SignInRecord::load(&store, &server).unwrap().unwrap();
    let first_refresh = record.refresh_token.clone().unwrap();
    assert_eq!(
        world.state.lock().unwrap().refresh.as_deref(),
        Some(first_refresh.as_str())
    );
    assert_eq!(record.scope.as_deref(), Some("echo:read"));

    // `fenzi mcp list` shows the sign-in, its scopes and expiry.
    let list = command(world.path(), &["mcp", "list"])
        .env("FENZI_CREDSTORE", "keyutils")
        .output()
        .unwrap();
    let listed = text(&list.stdout);
    assert!(
        listed.contains("sign-in: signed in; scopes echo:read; access token expires in 0m"),
        "{listed}"
    );

    // `fenzi run`: the command in the sandbox holds only the placeholder (in $MCP_<SERVER>), and
    // the server gets the real token.
    if sandbox_available() {
        let name = token_name(&server);
        let script = format!(
            "curl -s -o /dev/null -w 'status=%{{http_code}}\\n' -H \"Authorization: Bearer ${name}\" \
             -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
             -d '{INIT}' https://127.0.0.1:{mcp_port}/mcp; \
             case \"${name}\" in fenzi_ph_*) echo placeholder-only;; esac"
        );
        let out = world
            .cmd(&["run", "--config", "fenzi.yaml"])
            .env("XDG_RUNTIME_DIR", world.path().join("runtime"))
            .args(["--", "sh", "-c", &script])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(stdout.contains("status=200"), "{stdout}\n{stderr}");
        assert!(stdout.contains("placeholder-only"), "{stdout}\n{stderr}");
        // The token the sign-in stored, or its renewal if the session started when it was due.
        let s = world.state.lock().unwrap();
        let used = s.seen.last().unwrap();
        assert!(
            s.access.iter().any(|(t, _)| t == used),
            "not an issued token"
        );
    }

    // A session: the client holds the placeholder, the server gets the real token.
    let (child, addr, placeholder) = proxy(&world);
    let host = format!("127.0.0.1:{mcp_port}");
    let (status, body) = call(&world, &addr, &host, &placeholder);
    assert_eq!(status, "200", "{body}");
    let seen_first = world.state.lock().unwrap().seen.last().cloned().unwrap();
    // The real token (the one stored at sign-in, or its renewal had the session started when it
    // was due), never the placeholder.
    assert_ne!(seen_first, placeholder);
    assert!(world.issued().contains(&seen_first), "not an issued token");

    // Renewal at 80% of 4 s: the next request carries the new token; nothing was replayed.
    std::thread::sleep(Duration::from_millis(5500));
    let calls_before = world.state.lock().unwrap().seen.len();
    let (status, body) = call(&world, &addr, &host, &placeholder);
    assert_eq!(status, "200", "{body}");
    {
        let s = world.state.lock().unwrap();
        assert!(s.refreshes >= 1, "no refresh happened");
        assert_eq!(s.seen.len(), calls_before + 1, "a request was replayed");
        let used = s.seen.last().unwrap();
        assert_ne!(used, &seen_first);
        assert!(s.access.iter().any(|(t, exp)| t == used && *exp > unix()));
    }
    // The rotated refresh token was stored.
    let record = SignInRecord::load(&store, &server).unwrap().unwrap();
    assert_ne!(
        record.refresh_token.as_deref(),
        Some(first_refresh.as_str())
    );
    assert_eq!(
        record.refresh_token,
        world.state.lock().unwrap().refresh.clone()
    );

    // The refresh token is refused from now on: once due, requests are refused naming the fix.
    world.state.lock().unwrap().refresh_refused = true;
    let deadline = Instant::now() + Duration::from_secs(15);
    let (status, body) = loop {
        std::thread::sleep(Duration::from_millis(500));
        let (status, body) = call(&world, &addr, &host, &placeholder);
        if status != "200" || Instant::now() > deadline {
            break (status, body);
        }
    };
    assert_ne!(status, "200", "{body}");
    assert!(
        body.contains(&format!("fenzi mcp login {server}")),
        "{status} {body}"
    );

    // Signing in again on the host while the session runs: the session takes the new sign-in up
    // from the store (it looks every 5 s) and the same placeholder works again.
    world.state.lock().unwrap().refresh_refused = false;
    let (ok, _, login_err) = world.login(&[]);
    assert!(ok, "second login failed: {login_err}");
    let deadline = Instant::now() + Duration::from_secs(15);
    let (status, body) = loop {
        std::thread::sleep(Duration::from_millis(500));
        let (status, body) = call(&world, &addr, &host, &placeholder);
        if status == "200" || Instant::now() > deadline {
            break (status, body);
        }
    };
    assert_eq!(status, "200", "{body}");
    let stored = store.get(&token_name(&server)).unwrap().unwrap();
    assert_eq!(
        world.state.lock().unwrap().seen.last().map(String::as_str),
        Some(stored.value.expose())
    );
    let stderr = stop(child);

    let audit = std::fs::read_to_string(world.path().join("audit.jsonl")).unwrap();
    assert!(
        audit.contains(&format!("oauth refresh of `{server}`: renewed")),
        "{audit}"
    );
    assert!(
        audit.contains(&format!("oauth refresh of `{server}` failed"))
            && audit.contains("invalid_grant"),
        "{audit}"
    );
    assert!(
        audit.contains("taken up from the credential store"),
        "{audit}"
    );

    // Logout revokes the refresh token and removes both entries.
    let record = SignInRecord::load(&store, &server).unwrap().unwrap();
    let out = world.cmd(&["mcp", "logout", &server]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("revoked"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        world
            .state
            .lock()
            .unwrap()
            .revoked
            .contains(record.refresh_token.as_ref().unwrap())
    );
    assert!(store.get(&token_name(&server)).unwrap().is_none());
    assert!(store.get(&record_name(&server)).unwrap().is_none());

    // `fenzi log` shows them: the newest log in the state directory is the sign-out's, and the
    // session's log has the renewal and the failure.
    let log = |args: &[&str]| {
        let out = command(world.path(), args)
            .env("XDG_STATE_HOME", world.path().join("state"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let newest = log(&["log"]);
    assert!(newest.contains("oauth sign-out of"), "{newest}");
    let session_log = log(&["log", "--file", "audit.jsonl"]);
    assert!(session_log.contains("OAUTH"), "{session_log}");
    assert!(
        session_log.contains("renewed, expires in 4s, refresh token rotated"),
        "{session_log}"
    );
    assert!(session_log.contains("`invalid_grant`"), "{session_log}");

    // No token in any log: the session's, the sign-in's, or what the commands printed.
    let logs = format!(
        "{audit}{}{stderr}{stdout}{listed}{newest}{session_log}",
        all_text(&world.path().join("state"))
    );
    assert!(logs.contains("oauth sign-in to"), "{logs}");
    assert!(logs.contains("oauth sign-out of"), "{logs}");
    for token in world.issued() {
        assert!(!logs.contains(&token), "a token reached a log");
    }
}

#[test]
fn bad_sign_ins_store_nothing() {
    let Some(store) = kernel_keyring_or_skip("oauth bad sign-in test") else {
        return;
    };
    let cases: Vec<(&str, Mode, bool, &[&str], &str)> = vec![
        (
            "a server without metadata",
            Mode {
                lifetime: 60,
                no_metadata: true,
                ..Mode::default()
            },
            true,
            &[],
            "publishes no OAuth metadata",
        ),
        (
            "an authorization server the policy does not allow",
            Mode {
                lifetime: 60,
                ..Mode::default()
            },
            false,
            &[],
            "is not a host the policy allows",
        ),
        (
            "a state mismatch",
            Mode {
                lifetime: 60,
                tamper_state: true,
                ..Mode::default()
            },
            true,
            &[],
            "`state` is missing or not the one fenzi sent",
        ),
        (
            "a redirect to another port",
            Mode {
                lifetime: 60,
                redirect_port: Some(9),
                ..Mode::default()
            },
            true,
            &["--timeout", "3s"],
            "no sign-in came back",
        ),
        (
            "a token answer without expires_in",
            Mode {
                lifetime: 60,
                omit_expires_in: true,
                ..Mode::default()
            },
            true,
            &[],
            "no `expires_in`",
        ),
    ];
    for (what, mode, allow_as, extra, expect) in cases {
        let world = World::new(mode, allow_as);
        let _cleanup = Cleanup(KernelKeyring::open().unwrap(), world.server.clone());
        let (ok, stdout, stderr) = world.login(extra);
        assert!(!ok, "{what}: login succeeded: {stdout}");
        assert!(stderr.contains(expect), "{what}: {stderr}");
        assert!(stderr.contains("cannot sign in to"), "{what}: {stderr}");
        assert!(
            store.get(&token_name(&world.server)).unwrap().is_none(),
            "{what}: a token was stored"
        );
        assert!(
            store.get(&record_name(&world.server)).unwrap().is_none(),
            "{what}: a record was stored"
        );
        let log = all_text(&world.path().join("state"));
        assert!(log.contains("oauth sign-in to"), "{what}: {log}");
        for token in world.issued() {
            assert!(
                !log.contains(&token) && !stderr.contains(&token),
                "{what}: token leaked"
            );
        }
    }
}
