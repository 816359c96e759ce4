//! What one session knows about one MCP server's tools beyond the policy file: the definitions
//! pinned in the lock file, the tools whose listed definition differed from them, and the
//! `x-mcp-header` declarations read from the server's lists, the message paths a legacy
//! HTTP+SSE server announced ([`crate::mcp::legacy`]), and what it said about signing in
//! ([`crate::mcp::oauth`]). The proxy keeps one [`Inventory`] per
//! server per session, updates it from every list result it reads ([`Inventory::observe`]) and
//! hands it to the classifier, which decides calls and list entries with it. `fenzi check` builds
//! one from the lock file alone.
//!
//! Pinning (a `pin: true` server):
//! - With a lock entry for the server, a listed tool is accepted only if its definition hashes to
//!   the pinned one. A tool that differs, or is not in the lock, is hidden and its calls denied
//!   (`tool_changed`) for the rest of the session, even if a later list shows the pinned
//!   definition again: a server that changed a definition once is not trusted to have changed it
//!   back.
//! - Without one (first sight), the session that creates the entry pins every tool it lists,
//!   across pages; the first definition seen of each wins, and a later different one is changed.
//! - A call to a tool the session has not seen in a list is decided by the lock alone.

use super::legacy::{AnnounceError, Authority, MessagePaths};
use super::oauth::SignIn;
use crate::json::Value;
use crate::pins::{PinnedTool, ServerPins, ToolHints, listed_hash};
use std::collections::{HashMap, HashSet};

/// Most tools one inventory records per server. A server listing more gets the rest hidden (when
/// pinned) and their mirrored headers unchecked, so a hostile server cannot grow a session's
/// memory without bound.
pub const MAX_TOOLS: usize = 10_000;

/// A tool's `x-mcp-header` declarations: header name (lower case, `mcp-param-` included) to the
/// top-level argument it mirrors. `None`: the declarations are invalid, so no header can be checked.
pub type MirroredHeaders = Option<HashMap<String, String>>;

#[derive(Debug, Clone, Default)]
pub struct Inventory {
    pin: bool,
    /// The lock's entry for the server, or the one this session is creating.
    pinned: Option<ServerPins>,
    /// This session created the entry (first sight) and pins what it lists.
    first_sight: bool,
    /// Pinned tools whose listed definition differed from the pinned one this session.
    changed: HashSet<String>,
    mirrored: HashMap<String, MirroredHeaders>,
    message_paths: MessagePaths,
    sign_in: SignIn,
}

/// What pinning says about calling a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallPin {
    /// The server is not pinned.
    NotPinned,
    /// Pinned, and nothing this session saw differs; with the pinned definition's hints.
    Pinned(ToolHints),
    /// Listed this session with a definition other than the pinned one.
    Changed,
    /// Not in the lock.
    NotInLock,
}

/// What observing one listed tool did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sighting {
    /// The lock entry changed (a tool pinned at first sight): the lock file needs writing.
    pub lock_changed: bool,
}

impl Inventory {
    /// `pin`: the policy's `pin: true`; `entry`: the lock file's entry for the server, if any.
    pub fn new(pin: bool, entry: Option<ServerPins>) -> Inventory {
        Inventory {
            pin,
            pinned: entry,
            ..Inventory::default()
        }
    }

    /// An inventory for a server that is not pinned and has shown nothing yet.
    pub fn unpinned() -> Inventory {
        Inventory::default()
    }

    pub fn is_pinned(&self) -> bool {
        self.pin
    }

    /// The lock entry as it stands (what a lock file should hold for this server).
    pub fn lock_entry(&self) -> Option<&ServerPins> {
        self.pinned.as_ref()
    }

    /// Whether the lock file has (or this session has created) an entry for the server.
    pub fn has_lock_entry(&self) -> bool {
        self.pinned.is_some()
    }

    /// Records one `tools/list` entry named `name` (an object whose `name` is that string).
    pub fn observe(&mut self, name: &str, entry: &Value) -> Sighting {
        let mut sighting = Sighting {
            lock_changed: false,
        };
        // Only tools within the cap have their headers recorded; a header for any other is refused.
        if self.mirrored.len() < MAX_TOOLS && !self.mirrored.contains_key(name) {
            self.mirrored
                .insert(name.to_string(), mirrored_headers(entry));
        }
        if !self.pin {
            return sighting;
        }
        let hash = listed_hash(entry);
        if self.pinned.is_none() {
            self.pinned = Some(ServerPins::new());
            self.first_sight = true;
        }
        let pins = self.pinned.as_mut().expect("set above");
        match pins.get(name) {
            Some(p) if p.sha256 == hash => {}
            // Only names in the lock are recorded as changed (bounded by the lock): any other name
            // is refused as not in the lock without being remembered.
            Some(_) => {
                self.changed.insert(name.to_string());
            }
            None if self.first_sight && pins.len() < MAX_TOOLS => {
                pins.insert(name.to_string(), PinnedTool::from_listed(entry));
                sighting.lock_changed = true;
            }
            None => {}
        }
        sighting
    }

    /// What pinning says about calling `tool`.
    pub fn call(&self, tool: &str) -> CallPin {
        if !self.pin {
            return CallPin::NotPinned;
        }
        if self.changed.contains(tool) {
            return CallPin::Changed;
        }
        match self.pinned.as_ref().and_then(|p| p.get(tool)) {
            Some(p) => CallPin::Pinned(p.hints()),
            None => CallPin::NotInLock,
        }
    }

    /// The `x-mcp-header` declarations of `tool` from the lists this session read: `None` when no
    /// list showed the tool, `Some(None)` when its declarations are invalid.
    pub fn mirrored(&self, tool: &str) -> Option<&MirroredHeaders> {
        self.mirrored.get(tool)
    }

    /// Records the message path a legacy server's `endpoint` event names (`data`), on the stream
    /// answering a request for `stream` on `authority` ([`MessagePaths::announce`]).
    pub fn announce_message_path(
        &mut self,
        authority: Authority<'_>,
        stream: &str,
        data: &str,
    ) -> Result<(), AnnounceError> {
        self.message_paths.announce(authority, stream, data)
    }

    /// The message paths the server announced in this session.
    pub fn message_paths(&self) -> &MessagePaths {
        &self.message_paths
    }

    /// What the server said this session about signing in to it ([`crate::mcp::oauth`]).
    pub fn sign_in(&self) -> &SignIn {
        &self.sign_in
    }

    /// [`Inventory::sign_in`], to learn from what the server says.
    pub fn sign_in_mut(&mut self) -> &mut SignIn {
        &mut self.sign_in
    }
}

/// Reads `inputSchema.properties.*.x-mcp-header` of a listed tool (SEP-2243): each names the
/// `Mcp-Param-{Name}` header that mirrors that top-level argument. Only string, integer and
/// boolean properties can be mirrored, a name is an HTTP token, and no two arguments may claim one
/// header, case and `_` for `-` aside (a gateway that folds `_` into `-` would read both as one);
/// any violation makes the whole tool's declarations invalid.
fn mirrored_headers(entry: &Value) -> MirroredHeaders {
    let mut out = HashMap::new();
    let mut folded = HashSet::new();
    let properties = entry
        .get("inputSchema")
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object);
    for (argument, schema) in properties.unwrap_or_default() {
        let Some(declared) = schema.get("x-mcp-header") else {
            continue;
        };
        let name = declared.as_str()?;
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            return None;
        }
        let scalar = matches!(
            schema.get("type").and_then(Value::as_str),
            Some("string" | "integer" | "boolean")
        );
        if !scalar {
            return None;
        }
        let header = format!("mcp-param-{}", name.to_ascii_lowercase());
        if !folded.insert(header.replace('_', "-")) {
            return None;
        }
        if out.insert(header, argument.clone()).is_some() {
            return None;
        }
    }
    Some(out)
}

/// RFC 9110 `tchar`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{JsonLimits, parse};

    fn v(text: &str) -> Value {
        parse(text.as_bytes(), &JsonLimits::default()).unwrap()
    }

    #[test]
    fn first_sight_pins_and_a_later_change_sticks() {
        let mut inv = Inventory::new(true, None);
        assert_eq!(inv.call("a"), CallPin::NotInLock);
        assert!(
            inv.observe("a", &v(r#"{"name":"a","description":"one"}"#))
                .lock_changed
        );
        assert!(inv.observe("b", &v(r#"{"name":"b"}"#)).lock_changed);
        assert!(matches!(inv.call("a"), CallPin::Pinned(_)));
        // The same session sees a different definition: changed, and it stays changed.
        assert!(
            !inv.observe("a", &v(r#"{"name":"a","description":"two"}"#))
                .lock_changed
        );
        assert_eq!(inv.call("a"), CallPin::Changed);
        inv.observe("a", &v(r#"{"name":"a","description":"one"}"#));
        assert_eq!(inv.call("a"), CallPin::Changed);
        assert_eq!(inv.lock_entry().unwrap().len(), 2);
    }

    #[test]
    fn with_a_lock_entry_new_tools_are_not_pinned() {
        let mut first = Inventory::new(true, None);
        first.observe("a", &v(r#"{"name":"a"}"#));
        let entry = first.lock_entry().cloned();
        let mut next = Inventory::new(true, entry);
        assert!(
            !next
                .observe("renamed", &v(r#"{"name":"renamed"}"#))
                .lock_changed
        );
        assert_eq!(next.call("renamed"), CallPin::NotInLock);
        assert_eq!(next.call("never_listed"), CallPin::NotInLock);
        assert!(matches!(next.call("a"), CallPin::Pinned(_)));
    }

    #[test]
    fn unpinned_servers_record_headers_only() {
        let mut inv = Inventory::unpinned();
        inv.observe(
            "q",
            &v(r#"{"name":"q","inputSchema":{"type":"object","properties":{
                "region":{"type":"string","x-mcp-header":"Region"},"n":{"type":"integer"}}}}"#),
        );
        assert_eq!(inv.call("q"), CallPin::NotPinned);
        let headers = inv.mirrored("q").unwrap().as_ref().unwrap();
        assert_eq!(
            headers.get("mcp-param-region").map(String::as_str),
            Some("region")
        );
        assert!(inv.mirrored("other").is_none());
    }

    #[test]
    fn invalid_header_declarations_make_the_tool_uncheckable() {
        for bad in [
            r#"{"a":{"type":"number","x-mcp-header":"A"}}"#,
            r#"{"a":{"type":"string","x-mcp-header":"A B"}}"#,
            r#"{"a":{"type":"string","x-mcp-header":""}}"#,
            r#"{"a":{"type":"string","x-mcp-header":1}}"#,
            r#"{"a":{"type":"string","x-mcp-header":"X"},"b":{"type":"string","x-mcp-header":"x"}}"#,
            // One header to a server that folds `_` into `-`.
            r#"{"a":{"type":"string","x-mcp-header":"Dry_Run"},"b":{"type":"string","x-mcp-header":"dry-run"}}"#,
        ] {
            let tool = v(&format!(
                r#"{{"name":"t","inputSchema":{{"properties":{bad}}}}}"#
            ));
            assert_eq!(mirrored_headers(&tool), None, "{bad}");
        }
    }
}
