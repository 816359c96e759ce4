//! What a sign-in leaves in the credential store, and nowhere else: two entries per server.
//!
//! - `MCP_<SERVER>`: the current access token, stored for the server's `host:port` exactly as
//!   `fenzi mcp token` stores a server token. A session loads it like any stored secret and gives
//!   the agent its placeholder; nothing else in fenzi needs to know it came from a sign-in.
//! - `FENZI_OAUTH_<SERVER>` ([`record_name`]): the [`SignInRecord`] as one line of JSON, stored for
//!   the token endpoint's `host:port`: the refresh token, the client, the endpoints, the
//!   resource, the scopes granted and the expiry. The `FENZI_` prefix is fenzi's own: no policy
//!   can name it as a secret, so no request ever carries it.

use crate::credstore::{CredentialStore, SecretValue, StoreError, StoredSecret};
use fenzi_policy::secret_name::server_token_name;
use serde::{Deserialize, Serialize};
use std::time::{SystemTime, UNIX_EPOCH};
use zeroize::Zeroizing;

/// The credential-store name of `server`'s sign-in record.
pub fn record_name(server: &str) -> String {
    let token = server_token_name(server);
    format!(
        "FENZI_OAUTH_{}",
        token.strip_prefix("MCP_").unwrap_or(&token)
    )
}

/// How the client proves itself at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuth {
    /// A public client (PKCE is its proof).
    None,
    ClientSecretBasic,
    ClientSecretPost,
}

/// One server's sign-in, as kept in the store. `Debug` names no token or secret.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SignInRecord {
    /// The record's format.
    pub v: u32,
    pub server: String,
    /// The authorization server's issuer, when its metadata named one.
    pub issuer: Option<String>,
    pub token_endpoint: String,
    pub revocation_endpoint: Option<String>,
    pub client_id: String,
    pub client_secret: Option<String>,
    pub client_auth: ClientAuth,
    /// The RFC 8707 resource the tokens are for (the MCP server).
    pub resource: String,
    /// The scopes granted, space-separated, when the server said.
    pub scope: Option<String>,
    pub refresh_token: Option<String>,
    /// Unix seconds.
    pub issued_at: u64,
    pub expires_at: u64,
}

impl std::fmt::Debug for SignInRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignInRecord")
            .field("server", &self.server)
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("scope", &self.scope)
            .field("refresh_token", &self.refresh_token.is_some())
            .field("issued_at", &self.issued_at)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// The current time in Unix seconds.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl SignInRecord {
    pub const VERSION: u32 = 1;

    /// Seconds the access token lived when issued.
    pub fn lifetime(&self) -> u64 {
        self.expires_at.saturating_sub(self.issued_at)
    }

    /// Unix seconds at which the session renews the access token
    /// (`fenzi_policy::mcp::oauth_client::refresh_after`).
    pub fn renew_at(&self) -> u64 {
        self.issued_at + fenzi_policy::mcp::oauth_client::refresh_after(self.lifetime())
    }

    /// Reads `server`'s record from `store`; `Ok(None)` when there is none.
    pub fn load(store: &dyn CredentialStore, server: &str) -> Result<Option<SignInRecord>, String> {
        let name = record_name(server);
        let Some(stored) = store.get(&name).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        serde_json::from_str::<SignInRecord>(stored.value.expose())
            .ok()
            .filter(|r| r.v == Self::VERSION && r.server == server)
            .map(Some)
            .ok_or_else(|| {
                format!(
                    "the sign-in record of `{server}` in the {} cannot be read; sign in again with \
                     `fenzi mcp login {server}`",
                    store.backend()
                )
            })
    }

    /// Stores the record (for the token endpoint's `host:port`) and then `access_token` as
    /// `MCP_<SERVER>` (for `server_host`): the refresh token is safe first, so a failure between
    /// the two leaves a token that can still be renewed, never one that cannot.
    pub fn store(
        &self,
        store: &dyn CredentialStore,
        token_host: &str,
        access_token: &str,
        server_host: &str,
    ) -> Result<(), StoreError> {
        let name = record_name(&self.server);
        let text =
            Zeroizing::new(
                serde_json::to_string(self).map_err(|e| StoreError::Backend {
                    backend: store.backend(),
                    what: format!("the sign-in record cannot be written: {e}"),
                })?,
            );
        let value = SecretValue::new(&name, text)?;
        store.set(
            &name,
            &StoredSecret::new(value, vec![token_host.to_string()]),
        )?;
        store_access_token(store, &self.server, access_token, server_host)
    }

    /// Removes both entries; `true` when either was there.
    pub fn delete(store: &dyn CredentialStore, server: &str) -> Result<bool, StoreError> {
        let a = store.delete(&record_name(server))?;
        let b = store.delete(&server_token_name(server))?;
        Ok(a || b)
    }
}

/// Stores `access_token` as `server`'s token `MCP_<SERVER>`, for `server_host`.
pub fn store_access_token(
    store: &dyn CredentialStore,
    server: &str,
    access_token: &str,
    server_host: &str,
) -> Result<(), StoreError> {
    let name = server_token_name(server);
    let value = SecretValue::new(&name, Zeroizing::new(access_token.to_string()))?;
    store.set(
        &name,
        &StoredSecret::new(value, vec![server_host.to_string()]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credstore::MemoryStore;

    #[test]
    fn a_record_round_trips_through_the_store_and_prints_no_token() {
        let store = MemoryStore::new();
        let record = SignInRecord {
            v: SignInRecord::VERSION,
            server: "linear".into(),
            issuer: Some("https://auth.example".into()),
            token_endpoint: "https://auth.example/token".into(),
            revocation_endpoint: None,
            client_id: "client-1".into(),
            client_secret: Some("client-secret-value".into()),
            client_auth: ClientAuth::ClientSecretBasic,
            resource: "https://mcp.example/mcp".into(),
            scope: Some("read".into()),
            refresh_token: Some("refresh-token-value".into()),
            issued_at: 1000,
            expires_at: 4600,
        };
        record
            .store(
                &store,
                "auth.example:443",
                "access-token-value",
                "mcp.example:443",
            )
            .unwrap();
        assert_eq!(record_name("linear"), "FENZI_OAUTH_LINEAR");
        let back = SignInRecord::load(&store, "linear").unwrap().unwrap();
        assert_eq!(back, record);
        assert_eq!(back.renew_at(), 1000 + 2880);
        let token = store.get("MCP_LINEAR").unwrap().unwrap();
        assert_eq!(token.value.expose(), "access-token-value");
        assert_eq!(
            token.hosts.as_deref(),
            Some(&["mcp.example:443".to_string()][..])
        );
        let printed = format!("{back:?}");
        assert!(!printed.contains("value"), "{printed}");
        assert!(SignInRecord::delete(&store, "linear").unwrap());
        assert!(SignInRecord::load(&store, "linear").unwrap().is_none());
        assert!(store.get("MCP_LINEAR").unwrap().is_none());
    }
}
