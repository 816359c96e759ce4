//! `fenzi mcp login SERVER [--no-browser]`: signs in to an `oauth: true` server on the host, as MCP
//! authorization specifies (`fenzi_proxy::oauth::flow`), and keeps the tokens in the credential
//! store (`fenzi_proxy::oauth::record`): the access token as the server's token `MCP_<SERVER>`,
//! for the server's host; the refresh token, the client and the endpoints as `FENZI_OAUTH_<SERVER>`,
//! for the token endpoint's host. Nothing goes to a file; nothing is stored unless every step
//! succeeded. One record in the audit log says it happened (`fenzi log` shows it), naming no
//! token.
//!
//! The person signs in in a browser: the URL is always printed, and opened with `$BROWSER` or
//! `xdg-open` when there is a display (not with `--no-browser`). The authorization server sends
//! the browser back to a loopback listener on this machine (`oauth::redirect`).

use crate::config_files::PolicyArgs;
use crate::session::{self, upstream_roots};
use anyhow::{Context, Result, anyhow, bail};
use fenzi_policy::Reason;
use fenzi_policy::audit::Outcome;
use fenzi_policy::config::{Config, McpServerConfig, RemoteUrl, ServerKind};
use fenzi_policy::engine::Policy;
use fenzi_policy::host::HostPattern;
use fenzi_proxy::audit::writer::AuditEntry;
use fenzi_proxy::credstore;
use fenzi_proxy::oauth::flow::{self, TokenError};
use fenzi_proxy::oauth::http::HttpClient;
use fenzi_proxy::oauth::record::{SignInRecord, now};
use fenzi_proxy::oauth::redirect::Redirect;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::Duration;
use zeroize::Zeroizing;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  fenzi mcp login linear                  open the browser to sign in to server linear
  fenzi mcp login linear --no-browser     print the URL only (a remote shell, a headless machine)
  fenzi mcp login linear --scope read     ask for these scopes

The server needs `oauth: true` (fenzi mcp add NAME URL --oauth). fenzi finds its authorization server
(RFC 9728, RFC 8414), registers itself (RFC 7591) unless --client-id is given, and signs in with the
code flow, PKCE and the resource parameter. The tokens go to the OS credential store, never to a file;
sessions (fenzi run, fenzi proxy) renew the access token before it expires and give the agent only a
placeholder. The authorization server's host must be allowed by the policy (`hosts:`).")]
pub struct Args {
    /// The server's name in the policy.
    server: String,
    /// Print the sign-in URL without opening a browser.
    #[arg(long)]
    no_browser: bool,
    /// The scopes to ask for, space-separated [default: those the server's metadata lists].
    #[arg(long, value_name = "SCOPES")]
    scope: Option<String>,
    /// A client ID registered with the authorization server (or the https URL of a client ID
    /// metadata document), instead of dynamic registration.
    #[arg(long, value_name = "ID")]
    client_id: Option<String>,
    #[command(flatten)]
    policy: PolicyArgs,
    /// Extra root certificates (PEM) trusted for the servers' TLS, beside the public roots.
    /// Repeatable.
    #[arg(long, value_name = "PEM")]
    upstream_ca: Vec<PathBuf>,
    /// How long to wait for the sign-in in the browser.
    #[arg(long, value_name = "DUR", default_value = "5m", value_parser = session::parse_duration)]
    timeout: Duration,
}

/// The `oauth: true` server named `name`, or an error saying what to do.
pub fn oauth_server<'c>(
    config: &'c Config,
    name: &str,
) -> Result<(&'c McpServerConfig, &'c RemoteUrl)> {
    let Some(entry) = config.mcp.iter().find(|s| s.name == name) else {
        let names: Vec<&str> = config.mcp.iter().map(|s| s.name.as_str()).collect();
        bail!(
            "the policy has no MCP server named {name:?} (servers: {})",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        );
    };
    match &entry.kind {
        ServerKind::Remote {
            oauth: true, url, ..
        } => Ok((entry, url)),
        ServerKind::Remote { .. } => bail!(
            "server `{name}` does not sign in with OAuth (its entry has no `oauth: true`); add it \
             with `fenzi mcp add {name} URL ... --oauth --replace`, or set `oauth: true`"
        ),
        _ => bail!("server `{name}` is not a `url:` server; only those sign in with OAuth"),
    }
}

/// Appends one record to a log of its own in the state directory (`fenzi log` shows the newest).
pub fn audit(
    outcome: Outcome,
    reason: Option<Reason>,
    server: &str,
    host: &HostPattern,
    path: &str,
    rule: String,
) {
    let write = || -> Result<()> {
        let id = fenzi_proxy::new_session_id()?;
        let (_, writer) = session::open_audit(None, &id)?;
        let (host, port) = match host.to_string().rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().unwrap_or(443)),
            None => (host.to_string(), 443),
        };
        let mut entry = AuditEntry::new(outcome, reason, "OAUTH", host, port);
        entry.path = Some(path.to_string());
        entry.server = Some(server.to_string());
        entry.secrets = vec![fenzi_policy::secret_name::server_token_name(server)];
        entry.rule = Some(rule);
        writer.append(entry)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(writer.flush())?;
        Ok(())
    };
    if let Err(e) = write() {
        eprintln!("warning: the sign-in could not be recorded in the audit log: {e:#}");
    }
}

/// Opens `url` in the person's browser when there is a display; quietly does nothing otherwise.
fn open_browser(url: &str) -> bool {
    let display = ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
    let browser = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.trim().is_empty());
    let program = match (browser, display) {
        (Some(b), _) => b,
        (None, true) => "xdg-open".to_string(),
        (None, false) => return false,
    };
    std::process::Command::new(program)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .is_ok()
}

pub fn run(args: Args) -> Result<ExitCode> {
    let config = args.policy.load()?.result?;
    let (entry, url) = oauth_server(&config, &args.server)?;
    let server = entry.name.clone();
    let policy = Policy::from_config(&config);
    let roots = upstream_roots(&args.upstream_ca)?;
    let client = HttpClient::new(&roots, Duration::from_secs(30)).map_err(anyhow::Error::msg)?;
    // Open the store first: a store that cannot be used must stop the sign-in before it starts.
    let store = credstore::open().map_err(|e| anyhow!("{e}"))?;
    let server_host = HostPattern::for_host(url.host.clone(), url.port);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let signed = runtime.block_on(sign_in(&args, &client, &policy, &server, url));
    let (record, access) = match signed {
        Ok(done) => done,
        Err(why) => {
            audit(
                Outcome::Failed,
                Some(Reason::UpstreamError),
                &server,
                &server_host,
                &url.path,
                format!("oauth sign-in to `{server}` failed: {why}"),
            );
            eprintln!("fenzi mcp login: cannot sign in to `{server}`: {why}");
            return Ok(ExitCode::from(1));
        }
    };
    let token_endpoint =
        fenzi_proxy::oauth::http::Endpoint::parse(&record.token_endpoint, "the token endpoint")
            .map_err(anyhow::Error::msg)?;
    let token_host = token_endpoint.pattern();
    record
        .store(
            store.as_ref(),
            &token_host.to_string(),
            &access,
            &server_host.to_string(),
        )
        .map_err(|e| {
            let _ = SignInRecord::delete(store.as_ref(), &server);
            anyhow!("{e}; nothing was kept")
        })?;
    let lifetime = record.lifetime();
    let scopes = record
        .scope
        .clone()
        .unwrap_or_else(|| "(none named)".into());
    audit(
        Outcome::Allowed,
        None,
        &server,
        &token_host,
        token_endpoint.path(),
        format!(
            "oauth sign-in to `{server}`: signed in, scopes {scopes}, access token for {lifetime}s{}",
            if record.refresh_token.is_some() {
                ", renewable"
            } else {
                ", no refresh token"
            }
        ),
    );
    println!(
        "signed in to `{server}`: tokens stored in the {} (the access token as {}, for {}), \
         scopes {scopes}, access token valid for {lifetime}s{}",
        store.backend(),
        fenzi_policy::secret_name::server_token_name(&server),
        server_host,
        if record.refresh_token.is_some() {
            "; sessions renew it before it expires"
        } else {
            "; the server gave no refresh token: sign in again when it ends"
        }
    );
    super::token::warn_if_not_kept(store.as_ref());
    Ok(ExitCode::SUCCESS)
}

async fn sign_in(
    args: &Args,
    client: &HttpClient,
    policy: &Policy,
    server: &str,
    url: &RemoteUrl,
) -> Result<(SignInRecord, Zeroizing<String>), String> {
    let found = flow::discover(client, policy, server, url).await?;
    let redirect = Redirect::bind().await?;
    let registered = flow::register(
        client,
        policy,
        &found,
        &redirect.uri,
        args.client_id.as_deref(),
    )
    .await?;
    let state = flow::random_text()?;
    let verifier = flow::random_text()?;
    let challenge = flow::pkce_challenge(&verifier);
    let scope = args
        .scope
        .clone()
        .or_else(|| (!found.scopes.is_empty()).then(|| found.scopes.join(" ")));
    let link = flow::authorization_url(
        &found,
        &registered.id,
        &redirect.uri,
        &state,
        &challenge,
        scope.as_deref(),
    );
    eprintln!(
        "Sign in to `{server}` at its authorization server; open this URL in a browser:\n\n  {link}\n"
    );
    if !args.no_browser && open_browser(&link) {
        eprintln!("(opened in your browser)");
    }
    eprintln!(
        "Waiting up to {}s for the sign-in to come back to {} ...",
        args.timeout.as_secs(),
        redirect.uri
    );
    let uri = redirect.uri.clone();
    let code = Zeroizing::new(redirect.wait(&state, args.timeout).await?);
    let tokens = flow::exchange_code(client, policy, &found, &registered, &code, &verifier, &uri)
        .await
        .map_err(|e| match e {
            TokenError::Refused(why) | TokenError::Failed(why) => {
                format!("{why}; nothing was stored")
            }
        })?;
    let issued = now();
    let record = SignInRecord {
        v: SignInRecord::VERSION,
        server: server.to_string(),
        issuer: found.issuer.clone(),
        token_endpoint: found.token.url_without_query(),
        revocation_endpoint: found.revocation.as_ref().map(|e| e.url_without_query()),
        client_id: registered.id.clone(),
        client_secret: registered.secret.clone(),
        client_auth: registered.auth,
        resource: found.resource.clone(),
        scope: tokens.scope.clone().or(scope),
        refresh_token: tokens.refresh_token.clone(),
        issued_at: issued,
        expires_at: issued + tokens.expires_in,
    };
    Ok((record, Zeroizing::new(tokens.access_token.clone())))
}
