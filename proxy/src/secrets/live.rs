//! The session's secrets as the request path reads them: one compiled [`SessionSecrets`], swapped
//! whole when a value fenzi keeps current changes (an OAuth access token renewed by
//! `crate::oauth`) or can no longer be used (its renewal failed). A request takes the set in force
//! when it starts (one atomic load) and keeps it to its end: a renewal never changes a request
//! already decided, and nothing is replayed.
//!
//! The placeholders never change, so the sandbox's copies stay valid; only the value behind one
//! does. A swap compiles the substitution and scrubbing tables again, off the request path.

use super::{SecretSet, SecretValue, SecretsError, SessionSecrets};
use arc_swap::ArcSwap;
use std::sync::Arc;
use tokio::sync::Mutex;

/// The secrets in force, and the one writer at a time that changes them.
pub struct LiveSecrets {
    current: ArcSwap<SessionSecrets>,
    /// Known at start and never changed by a swap (no name is added or removed).
    empty: bool,
    /// Serialises swaps: two renewals never build from the same old set and lose one.
    writer: Mutex<()>,
}

impl LiveSecrets {
    pub fn new(secrets: SessionSecrets) -> LiveSecrets {
        LiveSecrets {
            empty: secrets.is_empty(),
            current: ArcSwap::from_pointee(secrets),
            writer: Mutex::new(()),
        }
    }

    /// No secrets this session: every request passes unchanged (no load needed).
    pub fn is_empty(&self) -> bool {
        self.empty
    }

    /// The set in force now, for a request that awaits while it holds it (one reference count).
    pub fn load(&self) -> Arc<SessionSecrets> {
        self.current.load_full()
    }

    /// The set in force now, for a short use that does not await (a record's redaction, a
    /// response head): no reference count in the common case.
    pub fn get(&self) -> arc_swap::Guard<Arc<SessionSecrets>> {
        self.current.load()
    }

    /// Puts `value` behind `name`'s placeholder from the next request on, and lifts a withholding
    /// of `name`. `Ok(false)`: the session has no such secret.
    pub async fn renew(&self, name: &str, value: SecretValue) -> Result<bool, SecretsError> {
        let _one = self.writer.lock().await;
        let old = self.current.load_full();
        let Some(set) = old.set().with_value(name, value) else {
            return Ok(false);
        };
        let withheld = old
            .withheld
            .iter()
            .filter(|(n, _)| n != name)
            .cloned()
            .collect();
        self.swap(&old, set, withheld)?;
        Ok(true)
    }

    /// From the next request on, a request that would carry `name`'s value is refused with `why`
    /// (which says what to do), until [`LiveSecrets::renew`] gives it a value again.
    pub async fn withhold(&self, name: &str, why: String) -> Result<(), SecretsError> {
        let _one = self.writer.lock().await;
        let old = self.current.load_full();
        let mut withheld: Vec<(String, String)> = old
            .withheld
            .iter()
            .filter(|(n, _)| n != name)
            .cloned()
            .collect();
        withheld.push((name.to_string(), why));
        let value = old.set().value(name).cloned();
        let Some(set) = value.and_then(|v| old.set().with_value(name, v)) else {
            return Err(SecretsError::Unbound(name.to_string()));
        };
        self.swap(&old, set, withheld)
    }

    fn swap(
        &self,
        old: &SessionSecrets,
        set: SecretSet,
        withheld: Vec<(String, String)>,
    ) -> Result<(), SecretsError> {
        let mut new = SessionSecrets::new(&old.bindings, set)?;
        new.withheld = withheld;
        self.current.store(Arc::new(new));
        Ok(())
    }
}

impl std::fmt::Debug for LiveSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LiveSecrets")
            .field(&self.current.load())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use fenzi_policy::Reason;
    use fenzi_policy::engine::{SecretBinding, SecretSource};
    use fenzi_policy::host::{Host, HostPattern};
    use fenzi_policy::secret_position::SecretPosition;
    use http::Request;
    use zeroize::Zeroizing;

    fn live() -> LiveSecrets {
        let binding = SecretBinding {
            name: "MCP_NOTION".into(),
            hosts: vec![HostPattern::parse("mcp.notion.com").unwrap()],
            body: false,
            sources: vec![SecretSource::ServerToken {
                server: "notion".into(),
            }],
            default_bearer: true,
            positions: Some(vec![SecretPosition::Header("Authorization".into())]),
            entry: None,
            programs: Default::default(),
        };
        let set =
            SecretSet::mint([("MCP_NOTION".to_string(), b"access-token-one".to_vec())]).unwrap();
        LiveSecrets::new(SessionSecrets::new(&[binding], set).unwrap())
    }

    /// The Authorization a request with the placeholder leaves with, or the refusal's message.
    fn send(live: &LiveSecrets) -> Result<String, String> {
        let secrets = live.load();
        let placeholder = secrets
            .set()
            .placeholder("MCP_NOTION")
            .unwrap()
            .as_str()
            .to_string();
        let mut parts = Request::builder()
            .method("POST")
            .uri("/mcp")
            .header("authorization", format!("Bearer {placeholder}"))
            .body(())
            .unwrap()
            .into_parts()
            .0;
        let host = Host::parse("mcp.notion.com").unwrap();
        let use_ = secrets.check_request(&host, 443, None, true, &parts, b"");
        if !use_.is_allowed() {
            assert_eq!(use_.decision.reason(), Some(Reason::UpstreamError));
            assert_eq!(use_.secrets, ["MCP_NOTION"]);
            return Err(use_.decision.message);
        }
        secrets.apply(&use_, &mut parts, Bytes::new()).unwrap();
        Ok(parts.headers["authorization"].to_str().unwrap().to_string())
    }

    fn value(text: &str) -> SecretValue {
        SecretValue::new("MCP_NOTION", Zeroizing::new(text.to_string())).unwrap()
    }

    #[tokio::test]
    async fn a_renewed_value_goes_behind_the_same_placeholder_and_a_withheld_one_nowhere() {
        let live = live();
        let before = live.load().set().placeholder("MCP_NOTION").unwrap().clone();
        assert_eq!(send(&live).unwrap(), "Bearer access-token-one");

        // A request that began before the renewal keeps its set.
        let held = live.load();
        assert!(
            live.renew("MCP_NOTION", value("access-token-two"))
                .await
                .unwrap()
        );
        assert_eq!(send(&live).unwrap(), "Bearer access-token-two");
        assert_eq!(live.load().set().placeholder("MCP_NOTION"), Some(&before));
        assert_eq!(
            held.set().value("MCP_NOTION").unwrap().expose(),
            "access-token-one"
        );
        // The new value is scrubbed from answers; so the old one was by the old set.
        let scrubbed = live
            .load()
            .scrubber()
            .scrub(b"echo access-token-two")
            .unwrap();
        assert!(!String::from_utf8_lossy(&scrubbed).contains("access-token-two"));

        live.withhold(
            "MCP_NOTION",
            "sign in again with `fenzi mcp login notion`".into(),
        )
        .await
        .unwrap();
        let refused = send(&live).unwrap_err();
        assert!(refused.contains("fenzi mcp login notion"), "{refused}");
        assert!(!refused.contains("access-token"));

        // A new sign-in lifts it.
        assert!(
            live.renew("MCP_NOTION", value("access-token-three"))
                .await
                .unwrap()
        );
        assert_eq!(send(&live).unwrap(), "Bearer access-token-three");
        assert!(!live.renew("OTHER", value("whatever-value")).await.unwrap());
        assert!(!format!("{live:?}").contains("access-token"));
    }
}
