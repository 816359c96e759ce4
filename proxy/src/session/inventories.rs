//! The session's tool inventories ([`fenzi_policy::mcp::inventory`]): one per remote or account server,
//! read by every classification (pins, mirrored headers, announced message paths) and updated by
//! every list result, legacy `endpoint` event and sign-in document the response phase reads, and the lock files
//! pinned servers are recorded in ([`crate::lock_file`]).
//!
//! A server's lock entry lives in the lock beside the file that declared it ([`LockFiles`]). A
//! tool pinned at first sight is written to it at once (the whole file, in place, serialised per
//! file, off the async threads) and recorded as reviewed ([`crate::lock_file::trust`]); a failed write
//! is logged and the session keeps enforcing what it pinned in memory. A pinned server whose file
//! has no lock path pins in memory only.
//!
//! A lock fenzi does not vouch for (no trust record names its bytes at its path) is unreviewed:
//! every pinned server it serves gets an empty entry, so each of its tools is hidden and its calls
//! denied (`tool_changed`; `policy_denied` for a tool only `allow_annotated` would allow, since no
//! annotation is believed) until `fenzi mcp pin` shows them to a person, and nothing is pinned at
//! first sight into it (which would record the planted entries as reviewed).

use crate::audit::sink::Subject;
use crate::lock_file::trust::TrustRecords;
use crate::lock_file::{LockFileError, read_reviewed, write_lock};
use fenzi_policy::config::Origin;
use fenzi_policy::engine::Policy;
use fenzi_policy::mcp::ServerRule;
use fenzi_policy::mcp::inventory::Inventory;
use fenzi_policy::mcp::legacy::Authority;
use fenzi_policy::mcp::oauth::SignIn;
use fenzi_policy::pins::{Lock, ServerPins};
use fenzi_policy::response::{self, ReadMessage, ResponseError, Shape};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

/// Where the lock files of a session's policy files are.
#[derive(Debug, Clone, Default)]
pub struct LockFiles {
    /// Beside the project policy (`fenzi.lock`).
    pub project: Option<PathBuf>,
    /// Beside the machine file (`mcp.lock`).
    pub machine: Option<PathBuf>,
    /// Which lock contents fenzi vouches for (fenzi's state directory). Without records every
    /// existing lock is unreviewed and nothing pinned at first sight is written.
    pub trust: Option<TrustRecords>,
}

impl LockFiles {
    /// The lock of the file a server was declared in. A team server has none (its file is
    /// fetched, not the user's to write beside): its pins are the session's, in memory.
    pub fn for_origin(&self, origin: Origin) -> Option<&PathBuf> {
        match origin {
            Origin::Project => self.project.as_ref(),
            Origin::Machine => self.machine.as_ref(),
            Origin::Team => None,
        }
    }
}

struct LockSlot {
    path: PathBuf,
    /// The whole file as this session knows it; held while it is written.
    lock: Mutex<Lock>,
    /// Where a write is recorded as reviewed. `None` when the lock is unreviewed or there are no
    /// records: then the session never writes the lock.
    records: Option<TrustRecords>,
}

struct Slot {
    inventory: RwLock<Inventory>,
    lock: Option<Arc<LockSlot>>,
}

/// Every server's inventory in one session.
pub(crate) struct Inventories {
    servers: HashMap<String, Slot>,
}

impl Inventories {
    /// Reads the lock files a pinned server of `policy` needs. A lock that cannot be read or
    /// parsed stops the session from starting: pins that cannot be checked are not enforced. An
    /// unreviewed lock starts the session with its servers' tools all unreviewed (and says so).
    pub fn load(policy: &Policy, files: &LockFiles) -> Result<Inventories, LockFileError> {
        let mut slots: HashMap<Origin, (Arc<LockSlot>, bool)> = HashMap::new();
        let mut servers = HashMap::new();
        let mut unreviewed = HashSet::new();
        for server in policy.servers() {
            let mut lock_slot = None;
            if server.rule.pin {
                let path = files.for_origin(server.origin).cloned();
                match path {
                    Some(path) => {
                        let (slot, trusted) = match slots.get(&server.origin) {
                            Some(slot) => slot.clone(),
                            None => {
                                let read = read_reviewed(&path, files.trust.as_ref())?;
                                let trusted = read.trusted();
                                let slot = Arc::new(LockSlot {
                                    path,
                                    lock: Mutex::new(read.lock),
                                    records: files.trust.clone().filter(|_| trusted),
                                });
                                slots.insert(server.origin, (slot.clone(), trusted));
                                (slot, trusted)
                            }
                        };
                        if !trusted {
                            tracing::warn!(
                                server = %server.name,
                                "{} is unreviewed: fenzi did not write it and no one accepted it \
                                 with `fenzi mcp pin`, or it changed since (a lock from before \
                                 fenzi kept trust records has none). Every tool of {} is hidden \
                                 and its calls denied until you run `fenzi mcp pin {}` and accept \
                                 what it shows",
                                slot.path.display(),
                                server.name,
                                server.name
                            );
                            unreviewed.insert(server.name.clone());
                        }
                        lock_slot = Some(slot);
                    }
                    None => tracing::warn!(
                        server = %server.name,
                        "pin: true but no lock file for its policy file; pinning in memory only"
                    ),
                }
            }
            let entry = if unreviewed.contains(&server.name) {
                // Nothing the lock says is used: every tool is "not in the lock".
                Some(ServerPins::new())
            } else {
                lock_slot.as_ref().and_then(|slot| {
                    let lock = slot.lock.lock().unwrap_or_else(|e| e.into_inner());
                    lock.servers.get(&server.name).cloned()
                })
            };
            servers.insert(
                server.name.clone(),
                Slot {
                    inventory: RwLock::new(Inventory::new(server.rule.pin, entry)),
                    lock: lock_slot,
                },
            );
        }
        Ok(Inventories { servers })
    }

    /// Runs `f` on the inventory of `server` (a server of this session's policy).
    pub fn read<T>(&self, server: &str, f: impl FnOnce(&Inventory) -> T) -> T {
        match self.servers.get(server) {
            Some(slot) => f(&slot.inventory.read().unwrap_or_else(|e| e.into_inner())),
            None => f(&Inventory::unpinned()),
        }
    }

    /// Records the message path `data`, a legacy `endpoint` event from `server`, names: on the
    /// event stream a `GET` of `stream` opened, whose subject names the host and port the server
    /// was reached on. One fenzi cannot match exactly, or on another kind of answer, is not
    /// recorded: POSTs there are refused. The warning is in fenzi's words; the URI is the server's
    /// and is not repeated.
    pub fn announce(&self, server: &str, stream: &Subject, data: &str) {
        let (Some(slot), "GET", Some(path)) = (
            self.servers.get(server),
            stream.method.as_str(),
            stream.path.as_deref(),
        ) else {
            tracing::warn!(%server, "an endpoint event outside a GET event stream; not recorded");
            return;
        };
        let authority = Authority {
            host: &stream.host,
            port: stream.port,
        };
        let mut inventory = slot.inventory.write().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = inventory.announce_message_path(authority, path, data) {
            tracing::warn!(%server, "{e}; POSTs there are refused");
        }
    }

    /// Runs `f` on what the session learned of signing in to `server` ([`fenzi_policy::mcp::oauth`]),
    /// to learn more from what the server said; `None` for a server not in the session.
    pub fn sign_in<T>(&self, server: &str, f: impl FnOnce(&mut SignIn) -> T) -> Option<T> {
        let slot = self.servers.get(server)?;
        let mut inventory = slot.inventory.write().unwrap_or_else(|e| e.into_inner());
        Some(f(inventory.sign_in_mut()))
    }

    /// Filters a list-carrying message from `server` that the shallow read found `shape` in,
    /// updating the inventory;
    /// when a tool was pinned at first sight, writes the lock file in the background.
    pub fn filter(
        &self,
        server: &ServerRule,
        text: &[u8],
        shape: &Shape,
    ) -> Result<ReadMessage, ResponseError> {
        let Some(slot) = self.servers.get(&server.name) else {
            return response::filter_lists(server, &mut Inventory::unpinned(), text, shape);
        };
        let (read, entry) = {
            let mut inventory = slot.inventory.write().unwrap_or_else(|e| e.into_inner());
            let read = response::filter_lists(server, &mut inventory, text, shape)?;
            let entry = read
                .lock_changed
                .then(|| inventory.lock_entry().cloned())
                .flatten();
            (read, entry)
        };
        if let (Some(entry), Some(lock)) = (entry, &slot.lock) {
            let lock = lock.clone();
            let name = server.name.clone();
            tokio::task::spawn_blocking(move || {
                let Some(records) = &lock.records else {
                    tracing::warn!(
                        server = %name,
                        "no trust records for {}; the pins hold for this session only",
                        lock.path.display()
                    );
                    return;
                };
                let mut whole = lock.lock.lock().unwrap_or_else(|e| e.into_inner());
                whole.servers.insert(name.clone(), entry);
                match write_lock(&lock.path, &whole, Some(records)) {
                    Ok(()) => {
                        tracing::info!(server = %name, path = %lock.path.display(), "pinned tool definitions")
                    }
                    Err(e) => {
                        tracing::warn!(server = %name, "{e}; the pins hold for this session only")
                    }
                }
            });
        }
        Ok(read)
    }
}
