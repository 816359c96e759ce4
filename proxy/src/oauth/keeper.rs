//! Keeping a session's sign-ins current: one task per `oauth: true` server whose sign-in the
//! session loaded, off the request path.
//!
//! - When: at [`SignInRecord::renew_at`] (80% of the token's lifetime, and at the latest 60 s
//!   before it ends); a token already due when the session starts is renewed before the session
//!   serves ([`start`] waits for it).
//! - One at a time per server (its own task), and across processes as far as the store lets: just
//!   before renewing, the task reads the store again and adopts a newer sign-in another session or
//!   `fenzi mcp login` left there instead of spending the refresh token.
//! - A rotated refresh token (RFC 6749 §6, OAuth 2.1 §4.3.1) is stored before the new access token
//!   is used; an answer without `refresh_token` keeps the old one.
//! - The new token applies from the next request on ([`LiveSecrets::renew`]); nothing is replayed.
//! - Failure: a refused refresh (`invalid_grant`, ...) withholds the token at once; a refresh that
//!   could not be made is retried (every 5 s, then less often) and the token withheld only once it
//!   has expired. A withheld token makes every request that would carry it a refusal naming `fenzi
//!   mcp login SERVER`; the task then watches the store and takes up a new sign-in when one
//!   appears.
//! - Each renewal, adoption and failure is one audit record (method `OAUTH`, the token endpoint's
//!   host and path, the server, the secret's name, the reason in words): never a token.

use super::flow::{self, TokenError};
use super::http::{Endpoint, HttpClient};
use super::record::{SignInRecord, now};
use crate::audit::writer::AuditEntry;
use crate::credstore::{CredentialStore, SecretValue};
use crate::session::context::SessionContext;
use fenzi_policy::Reason;
use fenzi_policy::audit::Outcome;
use fenzi_policy::secret_name::server_token_name;
use std::sync::Arc;
use std::time::Duration;
use zeroize::Zeroizing;

/// One server's sign-in as the session loaded it.
#[derive(Debug, Clone)]
pub struct KeptSignIn {
    pub record: SignInRecord,
    /// The server's `host:port`, which its access token is stored for.
    pub server_host: String,
}

/// How often a withheld sign-in looks for a new one in the store.
const WATCH: Duration = Duration::from_secs(5);
/// First wait before retrying a refresh that could not be made.
const RETRY: Duration = Duration::from_secs(5);

fn login_hint(server: &str) -> String {
    format!("sign in again on the host with `fenzi mcp login {server}`")
}

/// Renews what is due now, then leaves one task per sign-in keeping it current.
pub(crate) async fn start(
    session: Arc<SessionContext>,
    signins: Vec<KeptSignIn>,
    client: HttpClient,
    store: Arc<dyn CredentialStore>,
) {
    for signin in signins {
        let mut keeper = Keeper {
            session: session.clone(),
            client: client.clone(),
            store: store.clone(),
            record: signin.record,
            server_host: signin.server_host,
            withheld: false,
        };
        if keeper.record.renew_at() <= now() {
            keeper.renew_once().await;
        }
        tokio::spawn(keeper.run());
    }
}

struct Keeper {
    session: Arc<SessionContext>,
    client: HttpClient,
    store: Arc<dyn CredentialStore>,
    record: SignInRecord,
    server_host: String,
    withheld: bool,
}

enum Step {
    Renewed,
    /// Try again after this long.
    Retry(Duration),
    Withheld,
}

impl Keeper {
    fn secret(&self) -> String {
        server_token_name(&self.record.server)
    }

    async fn run(mut self) {
        let mut retry = RETRY;
        loop {
            if self.withheld {
                tokio::time::sleep(WATCH).await;
                // A sign-in adopted whose access token has already ended is renewed at once.
                if self.adopt_newer().await && self.withheld {
                    self.refresh_now().await;
                }
                continue;
            }
            let due = self.record.renew_at().saturating_sub(now());
            if due > 0 {
                tokio::time::sleep(Duration::from_secs(due)).await;
            }
            match self.renew_once().await {
                Step::Renewed | Step::Withheld => retry = RETRY,
                Step::Retry(after) => {
                    // Never past the token's end: a token that ends unrenewed is withheld then,
                    // so no request goes out with it (its 401 could start the agent's own sign-in).
                    let left = self.record.expires_at.saturating_sub(now()).max(1);
                    tokio::time::sleep(after.min(retry).min(Duration::from_secs(left))).await;
                    retry = (retry * 2).min(Duration::from_secs(60));
                }
            }
        }
    }

    /// Reads the store: a sign-in there that ends later than ours is adopted. `true` when adopted.
    async fn adopt_newer(&mut self) -> bool {
        let store = self.store.clone();
        let server = self.record.server.clone();
        let secret = self.secret();
        let name = secret.clone();
        let found = tokio::task::spawn_blocking(move || {
            let record = SignInRecord::load(store.as_ref(), &server).ok().flatten()?;
            let token = store.get(&name).ok().flatten()?;
            Some((record, token.value))
        })
        .await
        .ok()
        .flatten();
        let Some((record, value)) = found else {
            return false;
        };
        // Only a sign-in issued after ours (another session's renewal, a new login).
        if record.issued_at <= self.record.issued_at
            || record.refresh_token == self.record.refresh_token
        {
            return false;
        }
        let live = record.expires_at > now();
        if live && self.session.secrets.renew(&secret, value).await.is_err() {
            return false;
        }
        self.record = record;
        if live {
            self.withheld = false;
        }
        self.audit(
            Outcome::Allowed,
            None,
            format!(
                "oauth sign-in of `{}` taken up from the credential store (signed in or renewed \
                 elsewhere); {}",
                self.record.server,
                if live {
                    format!(
                        "expires in {}s",
                        self.record.expires_at.saturating_sub(now())
                    )
                } else {
                    "its access token has ended: renewing".to_string()
                }
            ),
        );
        true
    }

    async fn renew_once(&mut self) -> Step {
        if self.adopt_newer().await && !self.withheld && self.record.renew_at() > now() {
            return Step::Renewed;
        }
        self.refresh_now().await
    }

    /// Spends the refresh token: the new tokens stored, then put in place.
    async fn refresh_now(&mut self) -> Step {
        let policy = self.session.live.current();
        match flow::refresh(&self.client, &policy.policy, &self.record).await {
            Ok(tokens) => {
                let issued = now();
                let mut record = self.record.clone();
                if tokens.refresh_token.is_some() {
                    record.refresh_token = tokens.refresh_token.clone();
                }
                if tokens.scope.is_some() {
                    record.scope = tokens.scope.clone();
                }
                record.issued_at = issued;
                record.expires_at = issued + tokens.expires_in;
                let access = Zeroizing::new(tokens.access_token.clone());
                let stored = self.persist(&record, &access).await;
                let Ok(value) = SecretValue::new(&self.secret(), access) else {
                    return self
                        .fail(true, "the renewed token cannot be used".into())
                        .await;
                };
                if self
                    .session
                    .secrets
                    .renew(&self.secret(), value)
                    .await
                    .is_err()
                {
                    return self
                        .fail(true, "the renewed token cannot be put in place".into())
                        .await;
                }
                self.record = record;
                self.withheld = false;
                let mut rule = format!(
                    "oauth refresh of `{}`: renewed, expires in {}s{}",
                    self.record.server,
                    tokens.expires_in,
                    if tokens.refresh_token.is_some() {
                        ", refresh token rotated"
                    } else {
                        ""
                    }
                );
                if let Err(why) = stored {
                    rule.push_str(&format!(
                        "; not saved to the credential store ({why}): the next session will need \
                         `fenzi mcp login {}`",
                        self.record.server
                    ));
                }
                self.audit(Outcome::Allowed, None, rule);
                Step::Renewed
            }
            Err(TokenError::Refused(why)) => {
                // Another session may have spent this refresh token a moment ago (rotation): its
                // sign-in is in the store.
                if self.adopt_newer().await && !self.withheld {
                    return Step::Renewed;
                }
                self.fail(true, why).await
            }
            Err(TokenError::Failed(why)) => {
                let expired = self.record.expires_at <= now();
                self.fail(expired, why).await
            }
        }
    }

    /// Stores the rotated record and then the access token.
    async fn persist(&self, record: &SignInRecord, access: &str) -> Result<(), String> {
        let store = self.store.clone();
        let record = record.clone();
        let access = Zeroizing::new(access.to_string());
        let server_host = self.server_host.clone();
        let token_host = Endpoint::parse(&record.token_endpoint, "the token endpoint")
            .map(|e| e.pattern().to_string())?;
        tokio::task::spawn_blocking(move || {
            record
                .store(store.as_ref(), &token_host, &access, &server_host)
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| e.to_string())?
    }

    /// Records the failure; withholds the token when `withhold`, else asks for a retry.
    async fn fail(&mut self, withhold: bool, why: String) -> Step {
        let server = self.record.server.clone();
        if withhold {
            let message = format!(
                "the sign-in to MCP server `{server}` has ended and fenzi could not renew it \
                 ({why}); {}",
                login_hint(&server)
            );
            let _ = self.session.secrets.withhold(&self.secret(), message).await;
            self.withheld = true;
        }
        self.audit(
            Outcome::Failed,
            Some(Reason::UpstreamError),
            format!(
                "oauth refresh of `{server}` failed: {why}; {}",
                if withhold {
                    format!(
                        "requests carrying its token are refused until {}",
                        login_hint(&server).replacen("sign in", "one signs in", 1)
                    )
                } else {
                    "retrying while the token is still valid".to_string()
                }
            ),
        );
        if withhold {
            Step::Withheld
        } else {
            let left = self.record.expires_at.saturating_sub(now());
            Step::Retry(Duration::from_secs((left / 2).max(1)))
        }
    }

    fn audit(&self, outcome: Outcome, reason: Option<Reason>, rule: String) {
        let (host, port, path) = match Endpoint::parse(&self.record.token_endpoint, "") {
            Ok(e) => (e.host.to_string(), e.port, e.path().to_string()),
            Err(_) => (String::new(), 0, String::new()),
        };
        let mut entry = AuditEntry::new(outcome, reason, "OAUTH", host, port);
        entry.path = Some(path);
        entry.server = Some(self.record.server.clone());
        entry.secrets = vec![self.secret()];
        entry.rule = Some(rule);
        if self.session.record(entry).is_err() {
            tracing::warn!(server = %self.record.server, "the sign-in record could not be written to the audit log");
        }
    }
}
