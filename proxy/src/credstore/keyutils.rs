//! The Linux kernel keyring (keyutils): works on every Linux, headless CI included, with no daemon.
//! Each secret is a `user` key described `fenzi:<NAME>` in the user's keyring (`@u`), also linked
//! into the user's persistent keyring when the kernel has one, so it outlives the last logout for
//! the kernel's expiry (3 days by default). Keys live in kernel memory only: a reboot clears them.
//!
//! Permissions: the possessor may do everything; the user (same uid, not possessing) may only see
//! and find the key; reading the value (and so the hosts stored with it) needs possession, which
//! a process has when its session keyring reaches `@u` (the default user-session keyring, or a
//! login session from pam_keyinit). The sandbox has a fresh session keyring without `@u` and no
//! `keyctl` at all.
//!
//! Why not `linux-keyutils-keyring-store` (the keyring family's keyutils store): it remembers the
//! session keyring's id and then asks for the persistent keyring with the session as destination;
//! in a process without its own session keyring (CI, containers, ssh without pam_keyinit) the
//! kernel answers that by joining a new anonymous session, after which the remembered keyring is
//! no longer possessed and every later call fails with EACCES. Using `@u` and resolving keyrings on
//! each call avoids session keyrings altogether. The low-level `linux-keyutils` crate it is built
//! on does the system calls.

use super::{CredentialStore, StoreError, check_name};
use linux_keyutils::{KeyError, KeyPermissionsBuilder, KeyRing, KeyRingIdentifier, Permission};
use zeroize::Zeroizing;

const BACKEND: &str = "kernel keyring";

/// The kernel keyring store.
#[derive(Debug)]
pub struct KernelKeyring {
    _private: (),
}

fn description(name: &str) -> String {
    format!("fenzi:{name}")
}

/// A keyctl failure with what it means and the fix.
fn unavailable(e: KeyError) -> StoreError {
    let (reason, fix) = match e {
        KeyError::PermissionDenied => (
            "keyctl was refused (operation not permitted); containers often block it (Docker's \
             default seccomp profile does)"
                .to_string(),
            "run fenzi outside the container or allow keyctl and add_key in its seccomp profile; \
             for `fenzi proxy` in CI, pass the value as FENZI_SECRET_<NAME> instead",
        ),
        KeyError::AccessDenied => (
            "this process does not possess the user keyring (its session keyring does not link \
             it, as after `keyctl new_session`, or in a systemd service with KeyringMode=private)"
                .to_string(),
            "run `keyctl link @u @s`, use a login session, or set KeyringMode=shared; for \
             `fenzi proxy`, FENZI_SECRET_<NAME> also works",
        ),
        KeyError::Unknown(38) | KeyError::OperationNotSupported => (
            "this kernel has no key management (CONFIG_KEYS)".to_string(),
            "use the Secret Service (FENZI_CREDSTORE=secret-service) or, for `fenzi proxy`, \
             FENZI_SECRET_<NAME> variables",
        ),
        KeyError::QuotaExceeded => (
            "the kernel's key quota for this user is full".to_string(),
            "delete unused keys (`keyctl show @u`), or raise /proc/sys/kernel/keys/maxkeys",
        ),
        other => (
            format!("keyctl failed ({other:?})"),
            "run inside a login session, or start one with `keyctl new_session` and `keyctl link \
             @u @s`",
        ),
    };
    StoreError::Unavailable {
        backend: BACKEND,
        reason,
        fix: fix.to_string(),
    }
}

/// "No such key", in the forms the kernel reports it while keys are being invalidated.
fn is_absent(e: &KeyError) -> bool {
    matches!(
        e,
        KeyError::KeyDoesNotExist | KeyError::KeyRevoked | KeyError::KeyExpired
    )
}

impl KernelKeyring {
    /// Checks that this process can use its user keyring.
    pub fn open() -> Result<KernelKeyring, StoreError> {
        user_keyring()?;
        Ok(KernelKeyring { _private: () })
    }
}

/// The user keyring, resolved on every call (key permissions are checked per thread).
fn user_keyring() -> Result<KeyRing, StoreError> {
    KeyRing::from_special_id(KeyRingIdentifier::User, true).map_err(unavailable)
}

fn find(name: &str) -> Result<Option<linux_keyutils::Key>, StoreError> {
    match user_keyring()?.search(&description(name)) {
        Ok(k) => Ok(Some(k)),
        Err(e) if is_absent(&e) => Ok(None),
        Err(e) => Err(unavailable(e)),
    }
}

impl CredentialStore for KernelKeyring {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn persistent(&self) -> bool {
        true
    }

    fn read_entry(&self, name: &str) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError> {
        check_name(name)?;
        let Some(key) = find(name)? else {
            return Ok(None);
        };
        match key.read_to_vec() {
            Ok(bytes) => Ok(Some(Zeroizing::new(bytes))),
            Err(e) if is_absent(&e) => Ok(None),
            Err(e) => Err(unavailable(e)),
        }
    }

    fn write_entry(&self, name: &str, entry: &[u8]) -> Result<(), StoreError> {
        check_name(name)?;
        let user = user_keyring()?;
        let key = user
            .add_key(&description(name), entry)
            .map_err(unavailable)?;
        // Possessor: everything; same user without possession: see and find it, not read it.
        let perms = KeyPermissionsBuilder::builder()
            .posessor(Permission::ALL)
            .user(Permission::VIEW | Permission::SEARCH)
            .build();
        key.set_perms(perms).map_err(unavailable)?;
        // Best effort: without a persistent keyring the key lives as long as the user keyring.
        match KeyRing::get_persistent(KeyRingIdentifier::User) {
            Ok(persistent) => {
                if let Err(e) = persistent.link_key(key) {
                    tracing::debug!(error = ?e, "cannot link the key into the persistent keyring");
                }
            }
            Err(e) => tracing::debug!(error = ?e, "no persistent keyring"),
        }
        Ok(())
    }

    fn delete(&self, name: &str) -> Result<bool, StoreError> {
        check_name(name)?;
        let Some(key) = find(name)? else {
            return Ok(false);
        };
        match key.invalidate() {
            Ok(()) => Ok(true),
            Err(e) if is_absent(&e) => Ok(false),
            Err(e) => Err(unavailable(e)),
        }
    }
}
