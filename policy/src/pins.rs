//! Pinned tool definitions: the lock file (`fenzi.lock` beside `fenzi.yaml`, `mcp.lock` beside the
//! machine file) and what one pinned definition is.
//!
//! A definition is the part of a `tools/list` entry that tells the model what a tool does and how
//! it is called, or that changes how it runs: `name`, `title`, `description`, `inputSchema`,
//! `outputSchema`, `annotations` and `execution`, whichever are present. `icons` and `_meta` are
//! left out (presentation and server bookkeeping that may change from one listing to the next).
//! Its hash is the SHA-256 of its canonical JSON ([`crate::json_text::canonical`]): members sorted,
//! strings escaped to ASCII, numbers as the server wrote them.
//!
//! The lock file is JSON, sorted, two-space indented, meant to be committed:
//!
//! ```json
//! {
//!   "servers": {
//!     "linear": {
//!       "tools": {
//!         "get_issue": {"definition": {...}, "sha256": "…"}
//!       }
//!     }
//!   },
//!   "version": 1
//! }
//! ```
//!
//! It is read with the strict parser, and each entry's hash is checked against its definition: a
//! hand-edited definition with a stale hash is an error, not a silent re-pin.

use crate::json::{self, JsonLimits, Value};
use crate::json_text;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;

/// The only lock format so far.
pub const LOCK_VERSION: u32 = 1;

/// The members of a `tools/list` entry that make up its pinned definition.
pub const DEFINITION_FIELDS: [&str; 7] = [
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
    "execution",
];

/// Largest lock file read, in bytes.
pub const MAX_LOCK_BYTES: usize = 16 * 1024 * 1024;

/// One tool's pinned definition and its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedTool {
    /// An object with only [`DEFINITION_FIELDS`] members.
    pub definition: Value,
    /// SHA-256 (hex) of the definition's canonical text.
    pub sha256: String,
}

/// A listed entry's definition ([`DEFINITION_FIELDS`] only) and its canonical text.
fn listed_definition(entry: &Value) -> (Value, String) {
    let members = entry.as_object().unwrap_or_default();
    let picked = Value::Object(
        members
            .iter()
            .filter(|(k, _)| DEFINITION_FIELDS.contains(&k.as_str()))
            .cloned()
            .collect(),
    );
    let text = json_text::canonical(&picked);
    (picked, text)
}

/// The hash [`PinnedTool::from_listed`] would give `entry`, without building the definition: what
/// a listing that only compares against the lock needs.
pub fn listed_hash(entry: &Value) -> String {
    let members = entry.as_object().unwrap_or_default();
    let text = json_text::canonical_object(
        members
            .iter()
            .filter(|(k, _)| DEFINITION_FIELDS.contains(&k.as_str())),
    );
    hex::encode(Sha256::digest(text.as_bytes()))
}

impl PinnedTool {
    /// The pinned form of a `tools/list` entry (an object with a string `name`).
    pub fn from_listed(entry: &Value) -> PinnedTool {
        // Kept in canonical order, so a definition compares equal to itself read back from a lock.
        let (picked, text) = listed_definition(entry);
        let unbounded = JsonLimits {
            max_bytes: usize::MAX,
            max_depth: json::MAX_DEPTH_CAP,
        };
        let definition = json::parse(text.as_bytes(), &unbounded).unwrap_or(picked);
        let sha256 = hex::encode(Sha256::digest(text.as_bytes()));
        PinnedTool { definition, sha256 }
    }

    /// What the definition's `annotations` say about side effects.
    pub fn hints(&self) -> ToolHints {
        let hint = |key: &str| {
            self.definition
                .get("annotations")
                .and_then(|a| a.get(key))
                .map(|v| matches!(v, Value::Bool(true)))
                .unwrap_or(false)
        };
        ToolHints {
            read_only: hint("readOnlyHint"),
            destructive: hint("destructiveHint"),
        }
    }
}

/// The annotations `allow_annotated` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ToolHints {
    pub read_only: bool,
    pub destructive: bool,
}

impl ToolHints {
    /// `readOnlyHint: true` and not `destructiveHint: true`.
    pub fn is_read_only(self) -> bool {
        self.read_only && !self.destructive
    }
}

/// SHA-256 (hex) of a definition's canonical JSON.
pub fn definition_hash(definition: &Value) -> String {
    hex::encode(Sha256::digest(json_text::canonical(definition).as_bytes()))
}

/// One server's pinned tools, by name.
pub type ServerPins = BTreeMap<String, PinnedTool>;

/// A whole lock file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Lock {
    pub servers: BTreeMap<String, ServerPins>,
}

/// Why a lock file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    #[error("not strict JSON: {0}")]
    Json(#[from] json::JsonError),
    #[error("{0}")]
    Shape(String),
    #[error("unsupported lock version (this fenzi reads version {LOCK_VERSION})")]
    Version,
    #[error(
        "servers.{server}.tools.{tool}: the definition does not match its sha256 (edited by hand?)"
    )]
    HashMismatch { server: String, tool: String },
}

impl Lock {
    /// Reads a lock file's bytes.
    pub fn parse(bytes: &[u8]) -> Result<Lock, LockError> {
        let limits = JsonLimits {
            max_bytes: MAX_LOCK_BYTES,
            max_depth: 128,
        };
        let root = json::parse(bytes, &limits)?;
        let shape = |what: &str| LockError::Shape(what.to_string());
        let top = root
            .as_object()
            .ok_or_else(|| shape("the lock is not an object"))?;
        only_keys(top, &["version", "servers"], "the lock")?;
        match root.get("version") {
            Some(Value::Number(n)) if n == &LOCK_VERSION.to_string() => {}
            Some(_) => return Err(LockError::Version),
            None => return Err(shape("the lock has no version")),
        }
        let mut lock = Lock::default();
        let Some(servers) = root.get("servers") else {
            return Ok(lock);
        };
        let servers = servers
            .as_object()
            .ok_or_else(|| shape("servers is not an object"))?;
        for (server, entry) in servers {
            let entry = entry
                .as_object()
                .ok_or_else(|| LockError::Shape(format!("servers.{server} is not an object")))?;
            only_keys(entry, &["tools"], &format!("servers.{server}"))?;
            let mut pins = ServerPins::new();
            let tools = Value::Object(entry.to_vec());
            let tools = tools
                .get("tools")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    LockError::Shape(format!(
                        "servers.{server}.tools is missing or not an object"
                    ))
                })?;
            for (tool, pinned) in tools {
                let at = format!("servers.{server}.tools.{tool}");
                let members = pinned
                    .as_object()
                    .ok_or_else(|| LockError::Shape(format!("{at} is not an object")))?;
                only_keys(members, &["definition", "sha256"], &at)?;
                let definition = pinned
                    .get("definition")
                    .filter(|d| d.as_object().is_some())
                    .ok_or_else(|| LockError::Shape(format!("{at}.definition is not an object")))?;
                let sha256 = pinned
                    .get("sha256")
                    .and_then(Value::as_str)
                    .ok_or_else(|| LockError::Shape(format!("{at}.sha256 is not a string")))?;
                if definition.get("name").and_then(Value::as_str) != Some(tool.as_str()) {
                    return Err(LockError::Shape(format!(
                        "{at}.definition.name is not the tool's name"
                    )));
                }
                if definition_hash(definition) != sha256 {
                    return Err(LockError::HashMismatch {
                        server: server.clone(),
                        tool: tool.clone(),
                    });
                }
                pins.insert(
                    tool.clone(),
                    PinnedTool {
                        definition: definition.clone(),
                        sha256: sha256.to_string(),
                    },
                );
            }
            lock.servers.insert(server.clone(), pins);
        }
        Ok(lock)
    }

    /// The lock file's text: sorted, indented, with a final newline.
    pub fn to_text(&self) -> String {
        let servers = self
            .servers
            .iter()
            .map(|(name, pins)| {
                let tools = pins
                    .iter()
                    .map(|(tool, p)| {
                        let entry = Value::Object(vec![
                            ("definition".to_string(), p.definition.clone()),
                            ("sha256".to_string(), Value::String(p.sha256.clone())),
                        ]);
                        (tool.clone(), entry)
                    })
                    .collect();
                let entry = Value::Object(vec![("tools".to_string(), Value::Object(tools))]);
                (name.clone(), entry)
            })
            .collect();
        let root = Value::Object(vec![
            ("servers".to_string(), Value::Object(servers)),
            (
                "version".to_string(),
                Value::Number(LOCK_VERSION.to_string()),
            ),
        ]);
        let mut text = json_text::pretty(&root);
        text.push('\n');
        text
    }
}

fn only_keys(members: &[(String, Value)], allowed: &[&str], at: &str) -> Result<(), LockError> {
    match members.iter().find(|(k, _)| !allowed.contains(&k.as_str())) {
        Some(_) => Err(LockError::Shape(format!(
            "{at} has a member other than {}",
            allowed.join(", ")
        ))),
        None => Ok(()),
    }
}

/// How one tool differs between the lock and what a server lists now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolDiff {
    /// Listed now, not in the lock.
    Added(PinnedTool),
    /// In the lock, not listed now (reported; nothing else happens).
    Removed(PinnedTool),
    /// Both, with different definitions: the fields that differ.
    Changed {
        pinned: PinnedTool,
        listed: PinnedTool,
        fields: Vec<FieldDiff>,
    },
}

/// One field of a definition that differs: its canonical text before and after (`None`: absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDiff {
    pub field: &'static str,
    pub pinned: Option<String>,
    pub listed: Option<String>,
}

/// The differences between `pinned` (the lock's entry, if any) and `listed` (the tools a server
/// lists now), by tool name. Unchanged tools are not reported.
pub fn diff(pinned: Option<&ServerPins>, listed: &ServerPins) -> BTreeMap<String, ToolDiff> {
    let empty = ServerPins::new();
    let pinned = pinned.unwrap_or(&empty);
    let mut out = BTreeMap::new();
    for (name, now) in listed {
        match pinned.get(name) {
            None => {
                out.insert(name.clone(), ToolDiff::Added(now.clone()));
            }
            Some(before) if before.sha256 != now.sha256 => {
                let fields = DEFINITION_FIELDS
                    .iter()
                    .filter_map(|&field| {
                        let text =
                            |p: &PinnedTool| p.definition.get(field).map(json_text::canonical);
                        let (a, b) = (text(before), text(now));
                        (a != b).then_some(FieldDiff {
                            field,
                            pinned: a,
                            listed: b,
                        })
                    })
                    .collect();
                out.insert(
                    name.clone(),
                    ToolDiff::Changed {
                        pinned: before.clone(),
                        listed: now.clone(),
                        fields,
                    },
                );
            }
            Some(_) => {}
        }
    }
    for (name, before) in pinned {
        if !listed.contains_key(name) {
            out.insert(name.clone(), ToolDiff::Removed(before.clone()));
        }
    }
    out
}

impl fmt::Display for FieldDiff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(absent)".to_string());
        write!(
            f,
            "{}: {} -> {}",
            self.field,
            show(&self.pinned),
            show(&self.listed)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(text: &str) -> PinnedTool {
        PinnedTool::from_listed(&json::parse(text.as_bytes(), &JsonLimits::default()).unwrap())
    }

    #[test]
    fn a_definition_ignores_member_order_icons_and_meta() {
        let a = tool(r#"{"name":"t","description":"d","inputSchema":{"type":"object"}}"#);
        let b = tool(
            r#"{"inputSchema":{"type":"object"},"_meta":{"x":1},"icons":[],"description":"d","name":"t"}"#,
        );
        assert_eq!(a, b);
        let c = tool(r#"{"name":"t","description":"d!","inputSchema":{"type":"object"}}"#);
        assert_ne!(a.sha256, c.sha256);
    }

    #[test]
    fn hints_need_read_only_and_not_destructive() {
        let ro = tool(r#"{"name":"t","annotations":{"readOnlyHint":true}}"#);
        assert!(ro.hints().is_read_only());
        let both =
            tool(r#"{"name":"t","annotations":{"readOnlyHint":true,"destructiveHint":true}}"#);
        assert!(!both.hints().is_read_only());
        let text = tool(r#"{"name":"t","annotations":{"readOnlyHint":"true"}}"#);
        assert!(!text.hints().is_read_only());
        assert!(!tool(r#"{"name":"t"}"#).hints().is_read_only());
    }

    #[test]
    fn the_lock_round_trips_and_catches_hand_edits() {
        let mut lock = Lock::default();
        let mut pins = ServerPins::new();
        pins.insert("b".into(), tool(r#"{"name":"b","description":"é"}"#));
        pins.insert(
            "a".into(),
            tool(r#"{"name":"a","inputSchema":{"z":1,"y":2.50}}"#),
        );
        lock.servers.insert("s".into(), pins);
        let text = lock.to_text();
        assert!(text.ends_with("}\n"));
        assert_eq!(Lock::parse(text.as_bytes()).unwrap(), lock);

        let edited = text.replace("\\u00e9", "e");
        assert!(matches!(
            Lock::parse(edited.as_bytes()),
            Err(LockError::HashMismatch { .. })
        ));
        assert!(matches!(
            Lock::parse(br#"{"version":2,"servers":{}}"#),
            Err(LockError::Version)
        ));
        assert!(Lock::parse(br#"{"version":1,"servers":{},"x":1}"#).is_err());
        assert!(Lock::parse(br#"{"version":1,"version":1}"#).is_err());
        assert_eq!(Lock::parse(br#"{"version":1}"#).unwrap(), Lock::default());
    }

    #[test]
    fn diffs_name_the_fields_that_changed() {
        let mut pinned = ServerPins::new();
        pinned.insert("keep".into(), tool(r#"{"name":"keep"}"#));
        pinned.insert("gone".into(), tool(r#"{"name":"gone"}"#));
        pinned.insert(
            "edit".into(),
            tool(r#"{"name":"edit","description":"old"}"#),
        );
        let mut listed = ServerPins::new();
        listed.insert("keep".into(), tool(r#"{"name":"keep"}"#));
        listed.insert(
            "edit".into(),
            tool(r#"{"name":"edit","description":"new"}"#),
        );
        listed.insert("new".into(), tool(r#"{"name":"new"}"#));
        let d = diff(Some(&pinned), &listed);
        assert_eq!(d.len(), 3);
        assert!(matches!(d["new"], ToolDiff::Added(_)));
        assert!(matches!(d["gone"], ToolDiff::Removed(_)));
        match &d["edit"] {
            ToolDiff::Changed { fields, .. } => {
                assert_eq!(fields.len(), 1);
                assert_eq!(fields[0].to_string(), r#"description: "old" -> "new""#);
            }
            other => panic!("{other:?}"),
        }
    }
}
