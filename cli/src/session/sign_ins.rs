//! The session's OAuth sign-ins (`oauth: true` servers, `fenzi mcp login`): which servers have one
//! in the credential store, what a missing one's fix is, and handing them to the proxy, which keeps
//! each access token current (`fenzi_proxy::oauth::keeper`). The access token itself was loaded as
//! the server's ordinary token `MCP_<SERVER>` by `load_secrets`.

use super::secrets::LoadedSecrets;
use anyhow::Result;
use fenzi_policy::config::{Config, ServerKind};
use fenzi_policy::host::HostPattern;
use fenzi_policy::secret_name::server_token_name;
use fenzi_proxy::credstore::{self, CredentialStore};
use fenzi_proxy::oauth::KeptSignIn;
use fenzi_proxy::oauth::http::HttpClient;
use fenzi_proxy::oauth::record::SignInRecord;
use fenzi_proxy::server::Proxy;
use std::sync::Arc;
use std::time::Duration;

/// How long one refresh exchange may take.
const REFRESH_TIMEOUT: Duration = Duration::from_secs(30);

/// The sign-ins the session keeps, and the store they are kept in.
pub struct SignIns {
    kept: Vec<KeptSignIn>,
    store: Option<Arc<dyn CredentialStore>>,
}

impl SignIns {
    /// Hands them to the proxy, which renews what is due before this returns.
    pub fn keep(
        self,
        runtime: &tokio::runtime::Runtime,
        proxy: &Proxy,
        roots: &[fenzi_proxy::tls::upstream::CertificateDer<'static>],
    ) -> Result<()> {
        let Some(store) = self.store else {
            return Ok(());
        };
        if self.kept.is_empty() {
            return Ok(());
        }
        let client = HttpClient::new(roots, REFRESH_TIMEOUT).map_err(anyhow::Error::msg)?;
        runtime.block_on(proxy.keep_sign_ins(self.kept, client, store));
        Ok(())
    }
}

/// Finds the sign-in record of each `oauth: true` server whose token came from the store, and
/// rewrites the fix of a missing one to `fenzi mcp login SERVER`. A token given in
/// `FENZI_SECRET_MCP_<SERVER>` is the person's to keep current: fenzi does not renew it. Blocks
/// on the store: call before starting the runtime.
pub fn load_sign_ins(config: &Config, loaded: &mut LoadedSecrets) -> Result<SignIns> {
    let oauth: Vec<(&str, HostPattern)> = config
        .mcp
        .iter()
        .filter_map(|s| match &s.kind {
            ServerKind::Remote {
                oauth: true, url, ..
            } => Some((
                s.name.as_str(),
                HostPattern::for_host(url.host.clone(), url.port),
            )),
            _ => None,
        })
        .collect();
    let mut signins = SignIns {
        kept: Vec::new(),
        store: None,
    };
    for missing in &mut loaded.missing {
        if let Some((server, _)) = oauth
            .iter()
            .find(|(s, _)| server_token_name(s) == missing.name)
        {
            missing.fix = format!("`fenzi mcp login {server}`");
        }
    }
    let from_store: Vec<&(&str, HostPattern)> = oauth
        .iter()
        .filter(|(s, _)| loaded.from_store.contains(&server_token_name(s)))
        .collect();
    if from_store.is_empty() {
        return Ok(signins);
    }
    let store: Arc<dyn CredentialStore> = Arc::from(credstore::open()?);
    for (server, pattern) in from_store {
        match SignInRecord::load(store.as_ref(), server) {
            Ok(Some(record)) => signins.kept.push(KeptSignIn {
                record,
                server_host: pattern.to_string(),
            }),
            // A token stored by `fenzi mcp token` for an `oauth: true` server: used as given.
            Ok(None) => eprintln!(
                "fenzi: `{server}` has a stored token but no sign-in record, so fenzi cannot \
                 renew it; sign in with `fenzi mcp login {server}`"
            ),
            Err(why) => eprintln!("fenzi: {why}"),
        }
    }
    signins.store = Some(store);
    Ok(signins)
}
