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

    /// The set in force now, for one request or one record.
    pub fn load(&self) -> Arc<SessionSecrets> {
        self.current.load_full()
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
