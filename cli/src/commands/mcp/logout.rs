//! `fenzi mcp logout SERVER`: ends an `oauth: true` server's sign-in. The refresh token (or else
//! the access token) is revoked where the authorization server names a revocation endpoint (RFC
//! 7009); the tokens are removed from the credential store either way. A running session keeps
//! the access token it holds until it would renew it, and then finds no sign-in. One audit record
//! says what was done.

use super::login::{audit, oauth_server};
use crate::config_files::PolicyArgs;
use crate::session::upstream_roots;
use anyhow::{Context, Result, anyhow};
use fenzi_policy::Reason;
use fenzi_policy::audit::Outcome;
use fenzi_policy::engine::Policy;
use fenzi_policy::host::HostPattern;
use fenzi_policy::secret_name::server_token_name;
use fenzi_proxy::credstore;
use fenzi_proxy::oauth::flow;
use fenzi_proxy::oauth::http::HttpClient;
use fenzi_proxy::oauth::record::SignInRecord;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  fenzi mcp logout linear      revoke server linear's tokens where it can, and remove them

The tokens are removed from the credential store even when revocation fails or is not offered.")]
pub struct Args {
    /// The server's name in the policy.
    server: String,
    #[command(flatten)]
    policy: PolicyArgs,
    /// Extra root certificates (PEM) trusted for the servers' TLS, beside the public roots.
    /// Repeatable.
    #[arg(long, value_name = "PEM")]
    upstream_ca: Vec<PathBuf>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let config = args.policy.load()?.result?;
    let (entry, url) = oauth_server(&config, &args.server)?;
    let server = entry.name.clone();
    let policy = Policy::from_config(&config);
    let store = credstore::open().map_err(|e| anyhow!("{e}"))?;
    let server_host = HostPattern::for_host(url.host.clone(), url.port);
    let record = SignInRecord::load(store.as_ref(), &server).map_err(anyhow::Error::msg);
    let access = store
        .get(&server_token_name(&server))
        .ok()
        .flatten()
        .map(|s| s.value);
    let revoked = match &record {
        Ok(Some(record)) => {
            let roots = upstream_roots(&args.upstream_ca)?;
            let client =
                HttpClient::new(&roots, Duration::from_secs(30)).map_err(anyhow::Error::msg)?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            runtime.block_on(flow::revoke(
                &client,
                &policy,
                record,
                access.as_ref().map(|a| a.expose()),
            ))
        }
        _ => Ok(false),
    };
    let removed = SignInRecord::delete(store.as_ref(), &server)?;
    let said = match (&revoked, removed) {
        (Ok(true), _) => "revoked at the authorization server and removed".to_string(),
        (Ok(false), true) => "removed (the authorization server offers no revocation)".to_string(),
        (Ok(false), false) => "was not signed in".to_string(),
        (Err(why), _) => format!("removed; revocation failed: {why}"),
    };
    let outcome = if revoked.is_err() {
        Outcome::Failed
    } else {
        Outcome::Allowed
    };
    audit(
        outcome,
        revoked.is_err().then_some(Reason::UpstreamError),
        &server,
        &server_host,
        &url.path,
        format!("oauth sign-out of `{server}`: {said}"),
    );
    if let Err(e) = record {
        eprintln!("note: {e}");
    }
    println!("`{server}`: {said} (in the {})", store.backend());
    Ok(ExitCode::SUCCESS)
}
