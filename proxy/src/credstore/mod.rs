//! Where real secret values live (README, "Secrets"): the OS credential store — the Linux kernel
//! keyring ([`KernelKeyring`], through `linux-keyutils`) or the freedesktop Secret Service
//! ([`SecretService`], through the keyring family's `keyring-core` and its zbus store) — behind
//! one small trait, [`CredentialStore`], with an in-process
//! [`MemoryStore`] for tests. Never a file.
//!
//! Every entry is service `fenzi`, account = the secret name (`MCP_LINEAR`,
//! `DIGITALOCEAN_API_TOKEN`). Names are checked (`[A-Z_][A-Z0-9_]*`); values are [`SecretValue`]s
//! (the one value type fenzi has), checked when made (UTF-8, 8 bytes to 16 KiB, no control
//! characters but TAB) and never printed. Each entry keeps its value together with the hosts the
//! user stored it for ([`StoredSecret`]), so a project's policy cannot send a stored value
//! anywhere else. Errors name the secret and the store, never the value.
//!
//! [`open`] picks the store from `FENZI_CREDSTORE`:
//! - unset or `auto`: the Secret Service when a D-Bus session bus is there and the service
//!   answers, else the kernel keyring;
//! - `keyutils` (or `kernel`), `secret-service`: that store, or an error saying why it cannot be
//!   used and how to fix it;
//! - `memory`: this process only; nothing outlives the command (tests).
//!
//! The calls block (D-Bus round trips, keyctl): call them before starting an async runtime or
//! from `spawn_blocking`.
//!
//! May use: nothing of this crate.

mod keyutils;
mod memory;
mod secret_service;
mod stored;
mod value;

pub use keyutils::KernelKeyring;
pub use memory::MemoryStore;
pub use secret_service::SecretService;
pub use stored::StoredSecret;
use zeroize::Zeroizing;

pub use value::{InvalidValue, MAX_SECRET_BYTES, MIN_SECRET_BYTES, SecretValue};

/// The keyring service name every fenzi entry uses.
pub const SERVICE: &str = "fenzi";

/// The environment variable that picks the store.
pub const STORE_ENV: &str = "FENZI_CREDSTORE";

/// A place secret values are kept, by secret name. Backends keep opaque entry text
/// ([`read_entry`](CredentialStore::read_entry), [`write_entry`](CredentialStore::write_entry));
/// everyone else uses [`get`](CredentialStore::get) and [`set`](CredentialStore::set), which
/// carry a value with the hosts it was stored for ([`StoredSecret`]).
pub trait CredentialStore: Send + Sync + std::fmt::Debug {
    /// A short name for status lines and errors (`kernel keyring`).
    fn backend(&self) -> &'static str;

    /// False when values do not outlive this process ([`MemoryStore`]).
    fn persistent(&self) -> bool;

    /// The entry text stored under `name`, if any (backends only).
    fn read_entry(&self, name: &str) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError>;

    /// Stores entry text under `name`, replacing any earlier entry (backends only).
    fn write_entry(&self, name: &str, entry: &[u8]) -> Result<(), StoreError>;

    /// Removes the value; `Ok(false)` when there was none.
    fn delete(&self, name: &str) -> Result<bool, StoreError>;

    /// The value stored under `name` and the hosts it was stored for, if any. A stored value
    /// that is not valid (see [`SecretValue`]) or an entry that does not read is an error, never
    /// returned.
    fn get(&self, name: &str) -> Result<Option<StoredSecret>, StoreError> {
        match self.read_entry(name)? {
            Some(entry) => StoredSecret::decode(name, entry).map(Some),
            None => Ok(None),
        }
    }

    /// Stores `secret` under `name`, replacing any earlier value and hosts.
    fn set(&self, name: &str, secret: &StoredSecret) -> Result<(), StoreError> {
        self.write_entry(name, &secret.encode(name)?)
    }
}

/// Why a store operation failed. Never holds a secret value.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "`{name}` is not a secret name: use upper-case letters, digits and `_`, starting with a \
         letter or `_` (at most 128 characters)"
    )]
    InvalidName { name: String },

    /// The cause is in the message, not also a `source`, so a chain printer names it once.
    #[error("{0}; nothing was stored or used")]
    InvalidValue(InvalidValue),

    #[error("the {backend} cannot be used: {reason}\n  fix: {fix}")]
    Unavailable {
        backend: &'static str,
        reason: String,
        fix: String,
    },

    #[error(
        "the stored entry for {name} cannot be read: {what}\n  fix: store it again with `fenzi mcp token`"
    )]
    Damaged { name: String, what: &'static str },

    #[error("`{host}` is not a host pattern, so {name} cannot be stored for it")]
    InvalidHost { name: String, host: String },

    #[error("{backend}: {what}")]
    Backend { backend: &'static str, what: String },

    #[error(
        "{STORE_ENV}={value} is not a credential store: use auto, keyutils, secret-service or memory"
    )]
    UnknownChoice { value: String },
}

impl From<InvalidValue> for StoreError {
    fn from(error: InvalidValue) -> StoreError {
        StoreError::InvalidValue(error)
    }
}

/// Which store [`open`] should use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// The Secret Service when it answers, else the kernel keyring.
    Auto,
    KernelKeyring,
    SecretService,
    /// In-process only (tests).
    Memory,
}

impl Choice {
    /// Reads `FENZI_CREDSTORE` (unset or empty means `auto`).
    pub fn from_env() -> Result<Choice, StoreError> {
        match std::env::var(STORE_ENV) {
            Ok(v) => Choice::parse(&v),
            Err(std::env::VarError::NotPresent) => Ok(Choice::Auto),
            Err(std::env::VarError::NotUnicode(v)) => Err(StoreError::UnknownChoice {
                value: v.to_string_lossy().into_owned(),
            }),
        }
    }

    pub fn parse(value: &str) -> Result<Choice, StoreError> {
        match value.trim() {
            "" | "auto" => Ok(Choice::Auto),
            "keyutils" | "kernel" => Ok(Choice::KernelKeyring),
            "secret-service" => Ok(Choice::SecretService),
            "memory" => Ok(Choice::Memory),
            other => Err(StoreError::UnknownChoice {
                value: other.to_string(),
            }),
        }
    }
}

/// Opens the store `FENZI_CREDSTORE` asks for (see the module doc).
pub fn open() -> Result<Box<dyn CredentialStore>, StoreError> {
    open_choice(Choice::from_env()?)
}

/// Opens the given store.
pub fn open_choice(choice: Choice) -> Result<Box<dyn CredentialStore>, StoreError> {
    match choice {
        Choice::KernelKeyring => Ok(Box::new(KernelKeyring::open()?)),
        Choice::SecretService => Ok(Box::new(SecretService::open()?)),
        Choice::Memory => Ok(Box::new(MemoryStore::new())),
        Choice::Auto => match SecretService::open() {
            Ok(s) => Ok(Box::new(s)),
            Err(ss) => match KernelKeyring::open() {
                Ok(k) => {
                    tracing::debug!(reason = %ss, "Secret Service not used; using the kernel keyring");
                    Ok(Box::new(k))
                }
                // Neither: report the kernel keyring's problem (the one store every Linux has),
                // and the Secret Service's after it.
                Err(StoreError::Unavailable {
                    backend,
                    reason,
                    fix,
                }) => Err(StoreError::Unavailable {
                    backend,
                    reason: format!("{reason} (and {ss})"),
                    fix,
                }),
                Err(other) => Err(other),
            },
        },
    }
}

/// Refuses anything but an environment-variable-style secret name: it is also the keyutils
/// description and the Secret Service attribute, so nothing else may reach them.
pub(crate) fn check_name(name: &str) -> Result<(), StoreError> {
    if fenzi_policy::secret_name::is_valid_secret_name(name) {
        Ok(())
    } else {
        Err(StoreError::InvalidName {
            name: name.chars().take(64).collect(),
        })
    }
}

/// Text for a keyring error that never includes secret bytes (two variants carry them).
pub(crate) fn keyring_error_text(e: &keyring_core::Error) -> String {
    use keyring_core::Error as E;
    match e {
        E::PlatformFailure(p) => format!("platform failure: {p}"),
        E::NoStorageAccess(p) => format!("no access to the store: {p}"),
        E::NoEntry => "no such entry".into(),
        E::BadEncoding(_) => "the stored value is not UTF-8 text".into(),
        E::BadDataFormat(_, _) => "the stored value is not in the expected format".into(),
        E::BadStoreFormat(s) => format!("the store is damaged: {s}"),
        E::TooLong(attr, limit) => format!("{attr} is longer than the store allows ({limit})"),
        E::Invalid(what, why) => format!("invalid {what}: {why}"),
        E::Ambiguous(found) => format!(
            "{} entries match; remove the extra ones in the store's own tool",
            found.len()
        ),
        E::NoDefaultStore => "no default store".into(),
        E::NotSupportedByStore(s) => format!("not supported: {s}"),
        _ => "unexpected error".into(),
    }
}

/// Maps a keyring error to ours, wiping any secret bytes it carried.
pub(crate) fn map_keyring_error(
    backend: &'static str,
    name: Option<&str>,
    e: keyring_core::Error,
) -> StoreError {
    let text = keyring_error_text(&e);
    match e {
        keyring_core::Error::BadEncoding(bytes) | keyring_core::Error::BadDataFormat(bytes, _) => {
            drop(zeroize::Zeroizing::new(bytes));
        }
        _ => {}
    }
    let what = match name {
        Some(n) => format!("{n}: {text}"),
        None => text,
    };
    StoreError::Backend { backend, what }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(v: &str) -> SecretValue {
        SecretValue::new("T", Zeroizing::new(v.to_string())).unwrap()
    }

    fn for_hosts(v: &str, hosts: &[&str]) -> StoredSecret {
        StoredSecret::new(value(v), hosts.iter().map(|h| h.to_string()).collect())
    }

    /// The contract every backend meets; run on each one the machine has.
    pub(crate) fn round_trip(store: &dyn CredentialStore, name: &str) {
        assert!(
            store.read_entry(name).unwrap().is_none(),
            "{name} left over"
        );
        assert!(store.get(name).unwrap().is_none());
        store
            .set(name, &for_hosts("first-value", &["a.example.com"]))
            .unwrap();
        assert!(store.read_entry(name).unwrap().is_some());
        let got = store.get(name).unwrap().unwrap();
        assert_eq!(got.value.expose(), "first-value");
        assert_eq!(got.hosts, Some(vec!["a.example.com".to_string()]));
        // Storing again replaces the value and the hosts together.
        store
            .set(
                name,
                &for_hosts("second-value", &["b.example.com", "c.example.com:8443"]),
            )
            .unwrap();
        let got = store.get(name).unwrap().unwrap();
        assert_eq!(got.value.expose(), "second-value");
        assert_eq!(
            got.hosts,
            Some(vec![
                "b.example.com".to_string(),
                "c.example.com:8443".to_string()
            ])
        );
        // An entry written before fenzi kept hosts reads as stored for none.
        store.write_entry(name, b"legacy-value").unwrap();
        let got = store.get(name).unwrap().unwrap();
        assert_eq!((got.value.expose(), got.hosts), ("legacy-value", None));
        assert!(store.delete(name).unwrap());
        assert!(store.get(name).unwrap().is_none());
        assert!(store.read_entry(name).unwrap().is_none());
        assert!(!store.delete(name).unwrap());
        for bad in ["lower", "A-B", "", "A@fenzi", "A\nB"] {
            assert!(matches!(
                store.set(bad, &for_hosts("xxxxxxxx", &[])),
                Err(StoreError::InvalidName { .. })
            ));
            assert!(matches!(
                store.get(bad),
                Err(StoreError::InvalidName { .. })
            ));
        }
    }

    fn unique(prefix: &str) -> String {
        let mut b = [0u8; 6];
        getrandom::fill(&mut b).unwrap();
        format!("{prefix}_{}", hex::encode_upper(b))
    }

    #[test]
    fn memory_store_round_trip() {
        let store = MemoryStore::new();
        assert!(!store.persistent());
        round_trip(&store, "FENZI_TEST_MEMORY");
    }

    /// The real kernel keyring where this machine allows it; says so when it does not.
    /// `FENZI_REQUIRE_KEYRING=1` turns the skip into a failure (for CI machines known to have one).
    #[test]
    fn kernel_keyring_round_trip() {
        match KernelKeyring::open() {
            Ok(store) => {
                let name = unique("KEYUTILS_TEST");
                round_trip(&store, &name);
                // Another thread sees the same keys (key permissions are checked per thread).
                let other = unique("KEYUTILS_TEST");
                store.set(&other, &for_hosts("from-main", &[])).unwrap();
                let seen = std::thread::spawn({
                    let other = other.clone();
                    move || {
                        KernelKeyring::open()
                            .unwrap()
                            .get(&other)
                            .unwrap()
                            .map(|v| v.value.expose().to_string())
                    }
                })
                .join()
                .unwrap();
                assert_eq!(seen.as_deref(), Some("from-main"));
                assert!(store.delete(&other).unwrap());
            }
            Err(e) => {
                assert!(
                    std::env::var_os("FENZI_REQUIRE_KEYRING").is_none(),
                    "kernel keyring required but unavailable: {e}"
                );
                eprintln!(
                    "SKIPPED kernel keyring round trip (using the in-memory store only): {e}"
                );
            }
        }
    }

    #[test]
    fn choices_parse() {
        assert_eq!(Choice::parse("").unwrap(), Choice::Auto);
        assert_eq!(Choice::parse("keyutils").unwrap(), Choice::KernelKeyring);
        assert_eq!(Choice::parse("kernel").unwrap(), Choice::KernelKeyring);
        assert_eq!(
            Choice::parse("secret-service").unwrap(),
            Choice::SecretService
        );
        assert_eq!(Choice::parse("memory").unwrap(), Choice::Memory);
        let e = Choice::parse("file").unwrap_err().to_string();
        assert!(e.contains("FENZI_CREDSTORE=file"), "{e}");
    }

    #[test]
    fn bad_encoding_error_does_not_carry_the_bytes() {
        let e = map_keyring_error(
            "kernel keyring",
            Some("MCP_X"),
            keyring_core::Error::BadEncoding(b"s3cr3t\xff".to_vec()),
        );
        let text = format!("{e} {e:?}");
        assert!(!text.contains("s3cr3t"), "{text}");
        assert!(text.contains("MCP_X"));
    }
}
