//! A credential store that lives in this process only: values are kept in memory, wiped on drop,
//! and gone when the process exits. For tests and for `FENZI_CREDSTORE=memory`, which stores
//! nothing across commands; it never writes anywhere.

use super::{CredentialStore, StoreError, check_name};
use std::collections::HashMap;
use std::sync::Mutex;
use zeroize::Zeroizing;

/// The in-process store.
#[derive(Default)]
pub struct MemoryStore {
    values: Mutex<HashMap<String, Zeroizing<Vec<u8>>>>,
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Zeroizing<Vec<u8>>>> {
        // A panic while holding the lock cannot leave the map half-updated (each operation is
        // a single insert/remove), so a poisoned lock is still usable.
        self.values.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("entries", &self.map().len())
            .finish()
    }
}

impl CredentialStore for MemoryStore {
    fn backend(&self) -> &'static str {
        "in-process memory store"
    }

    fn persistent(&self) -> bool {
        false
    }

    fn read_entry(&self, name: &str) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError> {
        check_name(name)?;
        Ok(self.map().get(name).cloned())
    }

    fn write_entry(&self, name: &str, entry: &[u8]) -> Result<(), StoreError> {
        check_name(name)?;
        self.map()
            .insert(name.to_string(), Zeroizing::new(entry.to_vec()));
        Ok(())
    }

    fn delete(&self, name: &str) -> Result<bool, StoreError> {
        check_name(name)?;
        Ok(self.map().remove(name).is_some())
    }
}
