//! The freedesktop Secret Service (GNOME Keyring, KWallet, KeePassXC) over the D-Bus session bus,
//! through `zbus-secret-service-keyring-store`. Items carry the attributes `service=fenzi` and
//! `username=<NAME>` in the default (login) collection.
//!
//! Calls block the calling thread (zbus on async-io, not tokio): call from a plain thread or
//! `spawn_blocking`, never from an async task. Reaching a locked collection may show the desktop's
//! unlock prompt.

use super::{CredentialStore, SERVICE, StoreError, check_name, map_keyring_error};
use keyring_core::api::CredentialStoreApi;
use std::sync::Arc;
use zeroize::Zeroizing;

const BACKEND: &str = "Secret Service";

/// The Secret Service store.
pub struct SecretService {
    store: Arc<zbus_secret_service_keyring_store::Store>,
}

impl std::fmt::Debug for SecretService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretService")
    }
}

impl SecretService {
    /// Connects to the session bus and opens a session with the Secret Service.
    pub fn open() -> Result<SecretService, StoreError> {
        if std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_none_or(|v| v.is_empty())
            && !runtime_bus_exists()
        {
            return Err(StoreError::Unavailable {
                backend: BACKEND,
                reason: "no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is not set)".into(),
                fix: "run inside a desktop session, or use the kernel keyring \
                      (FENZI_CREDSTORE=keyutils)"
                    .into(),
            });
        }
        let store = zbus_secret_service_keyring_store::Store::new().map_err(|e| {
            let reason = match e {
                keyring_core::Error::PlatformFailure(p)
                | keyring_core::Error::NoStorageAccess(p) => {
                    format!("the Secret Service did not answer: {p}")
                }
                other => format!("the Secret Service did not answer: {}", describe(&other)),
            };
            StoreError::Unavailable {
                backend: BACKEND,
                reason,
                fix: "start a keyring daemon (gnome-keyring-daemon, KWallet, KeePassXC), or use \
                      the kernel keyring (FENZI_CREDSTORE=keyutils)"
                    .into(),
            }
        })?;
        Ok(SecretService { store })
    }

    fn entry(&self, name: &str) -> Result<keyring_core::Entry, StoreError> {
        check_name(name)?;
        self.store
            .build(SERVICE, name, None)
            .map_err(|e| map_keyring_error(BACKEND, Some(name), e))
    }
}

/// systemd user sessions put the bus at `$XDG_RUNTIME_DIR/bus` (zbus finds it there too).
fn runtime_bus_exists() -> bool {
    std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .is_some_and(|d| std::path::Path::new(&d).join("bus").exists())
}

fn describe(e: &keyring_core::Error) -> String {
    super::keyring_error_text(e)
}

impl CredentialStore for SecretService {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn persistent(&self) -> bool {
        true
    }

    fn read_entry(&self, name: &str) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError> {
        match self.entry(name)?.get_secret() {
            Ok(bytes) => Ok(Some(Zeroizing::new(bytes))),
            Err(keyring_core::Error::NoEntry) => Ok(None),
            Err(e) => Err(map_keyring_error(BACKEND, Some(name), e)),
        }
    }

    fn write_entry(&self, name: &str, entry: &[u8]) -> Result<(), StoreError> {
        self.entry(name)?
            .set_secret(entry)
            .map_err(|e| map_keyring_error(BACKEND, Some(name), e))
    }

    fn delete(&self, name: &str) -> Result<bool, StoreError> {
        match self.entry(name)?.delete_credential() {
            Ok(()) => Ok(true),
            Err(keyring_core::Error::NoEntry) => Ok(false),
            Err(e) => Err(map_keyring_error(BACKEND, Some(name), e)),
        }
    }
}
