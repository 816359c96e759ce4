//! The session's secrets: each value the policy lists, from `FENZI_SECRET_<NAME>` or the credential
//! store (withheld when the policy binds it to hosts it was not stored for), a placeholder minted for
//! each, `placeholders.env`, and the lines that say what was loaded and what is missing.

use super::files::create_private_dir;
use anyhow::{Result, anyhow, bail};
use fenzi_policy::engine::{Policy, SecretBinding, SecretSource};
use fenzi_proxy::credstore::{self, CredentialStore, StoreError};
use fenzi_proxy::secrets::placeholders::ENV_PREFIX;
use fenzi_proxy::secrets::{SecretSet, values_from_env};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// A secret the policy lists that this session has no value for: it gets no placeholder, and nothing
/// is substituted for it (requests carrying its name's variable simply go without it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingSecret {
    pub name: String,
    /// Why there is no value, in one line.
    pub why: String,
    /// How to give it one (a command or a variable), in a few words.
    pub fix: String,
}

/// The session's secrets as [`load_secrets`] gathered them. Never holds a value in anything it
/// prints: `Debug` of the set shows names only.
#[derive(Debug)]
pub struct LoadedSecrets {
    /// Each value found, with its freshly minted placeholder: give it to the proxy
    /// (`Proxy::builder(..).secrets(set)`) after writing the placeholders out.
    pub set: SecretSet,
    /// The secrets the policy lists without a value, in the policy's order.
    pub missing: Vec<MissingSecret>,
    /// Names whose value came from `FENZI_SECRET_<NAME>`.
    pub from_env: Vec<String>,
    /// Names whose value came from the credential store, and the store's name.
    pub from_store: Vec<String>,
    pub store: Option<&'static str>,
}

impl LoadedSecrets {
    /// Writes `dir/placeholders.env` (`NAME=placeholder` lines, mode 0600; `dir` created private
    /// when missing). Returns its path.
    pub fn write_placeholders(&self, dir: &Path) -> Result<PathBuf> {
        create_private_dir(dir)?;
        let path = dir.join("placeholders.env");
        self.set.write_env_file(&path)?;
        Ok(path)
    }

    /// One stderr line naming the secrets without a value, why, and how to fix it; `None` when
    /// every secret has one.
    pub fn missing_line(&self) -> Option<String> {
        if self.missing.is_empty() {
            return None;
        }
        let names: Vec<&str> = self.missing.iter().map(|m| m.name.as_str()).collect();
        let mut whys: Vec<&str> = Vec::new();
        for m in &self.missing {
            if !whys.contains(&m.why.as_str()) {
                whys.push(&m.why);
            }
        }
        let fixes: Vec<&str> = self.missing.iter().map(|m| m.fix.as_str()).collect();
        let one = names.len() == 1;
        Some(format!(
            "no value for {} {}, so {} not substituted: {}; to give {} one: {}",
            if one { "secret" } else { "secrets" },
            names.join(", "),
            if one { "it is" } else { "they are" },
            whys.join("; "),
            if one { "it" } else { "them" },
            fixes.join(", ")
        ))
    }

    /// A short status: `2 (MCP_LINEAR from FENZI_SECRET_MCP_LINEAR, ANTHROPIC_API_KEY from the
    /// kernel keyring)`, `none in the policy`, and the missing ones.
    pub fn summary(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        for name in &self.from_env {
            parts.push(format!("{name} from {ENV_PREFIX}{name}"));
        }
        for name in &self.from_store {
            parts.push(format!("{name} from the {}", self.store.unwrap_or("store")));
        }
        let mut out = if parts.is_empty() && self.missing.is_empty() {
            "none in the policy".to_string()
        } else {
            format!("{} loaded", self.set.len())
        };
        if !parts.is_empty() {
            out.push_str(&format!(" ({})", parts.join(", ")));
        }
        if !self.missing.is_empty() {
            let names: Vec<&str> = self.missing.iter().map(|m| m.name.as_str()).collect();
            out.push_str(&format!(", missing: {}", names.join(", ")));
        }
        out
    }
}

/// Gathers the value of every secret the policy lists: `FENZI_SECRET_<NAME>` from this process's
/// environment first, else the credential store (`FENZI_CREDSTORE` picks it; opened only when some
/// secret has no variable). Then mints a placeholder for each value found.
///
/// A secret with no value is reported in [`LoadedSecrets::missing`], not an error: it gets no
/// placeholder and nothing is substituted for it. A store that cannot be used makes every secret
/// still without a value missing, with the store's reason and fix. A value that is not a valid
/// secret (see `fenzi_proxy::credstore::SecretValue`), from the environment or the store, is an
/// error: the session does not start with it. Blocks on the store (D-Bus, keyctl): call it before
/// starting an async runtime, or from `spawn_blocking`.
pub fn load_secrets(policy: &Policy) -> Result<LoadedSecrets> {
    load_secrets_from(policy, std::env::vars_os(), credstore::open)
}

/// [`load_secrets`] with the environment and the store given (tests).
pub fn load_secrets_from<E, S>(policy: &Policy, env: E, open_store: S) -> Result<LoadedSecrets>
where
    E: IntoIterator<Item = (OsString, OsString)>,
    S: FnOnce() -> Result<Box<dyn CredentialStore>, StoreError>,
{
    let bindings = policy.secrets();
    let mut loaded = LoadedSecrets {
        set: SecretSet::new(),
        missing: Vec::new(),
        from_env: Vec::new(),
        from_store: Vec::new(),
        store: None,
    };
    let mut from_env = values_from_env(bindings.iter().map(|b| b.name.as_str()), env);
    let mut rest = Vec::new();
    for binding in bindings {
        match from_env.remove(&binding.name) {
            Some(bytes) => {
                loaded
                    .set
                    .insert(&binding.name, bytes)
                    .map_err(|e| anyhow!("{ENV_PREFIX}{}: {e}", binding.name))?;
                loaded.from_env.push(binding.name.clone());
            }
            None => rest.push(binding),
        }
    }
    if rest.is_empty() {
        return Ok(loaded);
    }
    let store = match open_store() {
        Ok(store) => store,
        Err(e) => {
            let why = one_line(&e.to_string());
            for binding in rest {
                loaded.missing.push(MissingSecret {
                    name: binding.name.clone(),
                    why: why.clone(),
                    fix: format!("{ENV_PREFIX}{} in fenzi's environment", binding.name),
                });
            }
            return Ok(loaded);
        }
    };
    loaded.store = Some(store.backend());
    for binding in rest {
        let name = &binding.name;
        match store.get(name) {
            Ok(Some(stored)) => match hosts_not_stored_for(binding, stored.hosts.as_deref()) {
                None => {
                    loaded.set.insert_value(name, stored.value)?;
                    loaded.from_store.push(name.clone());
                }
                Some(why) => loaded.missing.push(MissingSecret {
                    name: name.clone(),
                    why,
                    fix: format!(
                        "`fenzi mcp token {}` once you have checked those hosts",
                        token_command_name(binding.sources.as_slice(), name)
                    ),
                }),
            },
            Ok(None) => loaded.missing.push(MissingSecret {
                name: name.clone(),
                why: format!(
                    "not in the {} and no {ENV_PREFIX}<NAME> variable",
                    store.backend()
                ),
                fix: format!(
                    "`fenzi mcp token {}`",
                    token_command_name(binding.sources.as_slice(), name)
                ),
            }),
            Err(e @ StoreError::InvalidValue(_)) => bail!(
                "{e}\n  fix: store it again with `fenzi mcp token {}`",
                token_command_name(binding.sources.as_slice(), name)
            ),
            // The store works but the entry does not read: storing it again is the fix.
            Err(e @ StoreError::Damaged { .. }) => loaded.missing.push(MissingSecret {
                name: name.clone(),
                why: one_line(&e.to_string()),
                fix: format!(
                    "`fenzi mcp token {}`",
                    token_command_name(binding.sources.as_slice(), name)
                ),
            }),
            Err(e) => loaded.missing.push(MissingSecret {
                name: name.clone(),
                why: one_line(&e.to_string()),
                fix: format!("{ENV_PREFIX}{name} in fenzi's environment"),
            }),
        }
    }
    Ok(loaded)
}

/// Why a stored value must not be used for `binding`, or `None` when it may: every host pattern
/// the policy binds the secret to must be one the value was stored for. The policy is partly the
/// project's file; the stored hosts are what the user saw when storing the value, so this is what
/// keeps a cloned repository from sending a stored token to a host of its own.
pub fn hosts_not_stored_for(binding: &SecretBinding, stored: Option<&[String]>) -> Option<String> {
    let Some(stored) = stored else {
        return Some(
            "it was stored without the hosts it may be sent to (by an older fenzi), so it is \
             withheld"
                .to_string(),
        );
    };
    let extra = binding.hosts_beyond(stored);
    if extra.is_empty() {
        return None;
    }
    let was = if stored.is_empty() {
        "no host".to_string()
    } else {
        stored.join(", ")
    };
    Some(format!(
        "it was stored for {was}, and this policy would also send it to {}, so it is withheld",
        extra.join(", ")
    ))
}

/// The name `fenzi mcp token` takes for a secret: its server for a `token: true` token, else the
/// secret's own name.
fn token_command_name<'a>(sources: &'a [SecretSource], name: &'a str) -> &'a str {
    sources
        .iter()
        .find_map(|s| match s {
            SecretSource::ServerToken { server } => Some(server.as_str()),
            _ => None,
        })
        .unwrap_or(name)
}

/// A multi-line message (`reason\n  fix: ...`) as one line.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use fenzi_proxy::credstore::{MemoryStore, SecretValue, StoredSecret};
    use zeroize::Zeroizing;

    const POLICY: &str = "version: 1
mcp:
  linear:
    url: https://mcp.linear.app/mcp
    token: true
    tools:
      allow: [list_issues]
secrets:
  ANTHROPIC_API_KEY:
    hosts: [api.anthropic.com]
";

    fn policy() -> Policy {
        let config = fenzi_policy::config::load(None, Some((POLICY, "fenzi.yaml"))).unwrap();
        Policy::from_config(&config)
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    /// A store holding each value for exactly the hosts the policy binds it to.
    fn store(pairs: &[(&str, &str)]) -> Box<dyn CredentialStore> {
        let hosts_in_policy = |name: &str| -> Vec<String> {
            let policy = policy();
            let binding = policy.secrets().iter().find(|b| b.name == name).unwrap();
            binding.hosts.iter().map(|h| h.to_string()).collect()
        };
        let triples: Vec<(&str, &str, Option<Vec<String>>)> = pairs
            .iter()
            .map(|(n, v)| (*n, *v, Some(hosts_in_policy(n))))
            .collect();
        store_for(&triples)
    }

    /// A store holding each value for the hosts given (`None`: stored before fenzi kept hosts).
    fn store_for(entries: &[(&str, &str, Option<Vec<String>>)]) -> Box<dyn CredentialStore> {
        let store = MemoryStore::new();
        for (name, value, hosts) in entries {
            let value = SecretValue::new(name, Zeroizing::new(value.to_string())).unwrap();
            match hosts.clone() {
                Some(hosts) => store.set(name, &StoredSecret::new(value, hosts)).unwrap(),
                None => store.write_entry(name, value.as_bytes()).unwrap(),
            }
        }
        Box::new(store)
    }

    fn value(loaded: &LoadedSecrets, name: &str) -> String {
        loaded.set.value(name).unwrap().expose().to_string()
    }

    #[test]
    fn the_environment_comes_first_then_the_store() {
        let loaded = load_secrets_from(
            &policy(),
            env(&[("FENZI_SECRET_MCP_LINEAR", "lin-from-env-123")]),
            || {
                Ok(store(&[
                    ("MCP_LINEAR", "lin-from-store"),
                    ("ANTHROPIC_API_KEY", "sk-ant-store-1"),
                ]))
            },
        )
        .unwrap();
        assert_eq!(value(&loaded, "MCP_LINEAR"), "lin-from-env-123");
        assert_eq!(value(&loaded, "ANTHROPIC_API_KEY"), "sk-ant-store-1");
        assert_eq!(loaded.from_env, ["MCP_LINEAR"]);
        assert_eq!(loaded.from_store, ["ANTHROPIC_API_KEY"]);
        assert!(loaded.missing.is_empty() && loaded.missing_line().is_none());
        let summary = loaded.summary();
        assert!(summary.starts_with("2 loaded (MCP_LINEAR from FENZI_SECRET_MCP_LINEAR, ANTHROPIC_API_KEY from the in-process memory store)"), "{summary}");
        for text in [summary, format!("{loaded:?}")] {
            assert!(
                !text.contains("from-env") && !text.contains("sk-ant"),
                "{text}"
            );
        }
    }

    #[test]
    fn the_store_is_not_opened_when_the_environment_has_every_value() {
        let loaded = load_secrets_from(
            &policy(),
            env(&[
                ("FENZI_SECRET_MCP_LINEAR", "lin-from-env-123"),
                ("FENZI_SECRET_ANTHROPIC_API_KEY", "sk-ant-env-1234"),
            ]),
            || panic!("the store was opened"),
        )
        .unwrap();
        assert_eq!(loaded.set.len(), 2);
        assert_eq!(loaded.store, None);
    }

    #[test]
    fn an_unusable_store_leaves_the_rest_missing_with_the_fix() {
        let loaded = load_secrets_from(
            &policy(),
            env(&[("FENZI_SECRET_ANTHROPIC_API_KEY", "sk-ant-env-1234")]),
            || {
                Err(StoreError::Unavailable {
                    backend: "kernel keyring",
                    reason: "no session keyring".into(),
                    fix: "run it under a login session".into(),
                })
            },
        )
        .unwrap();
        assert_eq!(
            loaded.set.names().collect::<Vec<_>>(),
            ["ANTHROPIC_API_KEY"]
        );
        assert_eq!(loaded.missing.len(), 1);
        let line = loaded.missing_line().unwrap();
        assert!(!line.contains('\n'), "{line}");
        for part in [
            "no value for secret MCP_LINEAR",
            "not substituted",
            "no session keyring",
            "fix: run it under a login session",
            "to give it one: FENZI_SECRET_MCP_LINEAR in fenzi's environment",
        ] {
            assert!(line.contains(part), "{part:?} not in {line}");
        }
        assert!(!line.contains("sk-ant"));
    }

    #[test]
    fn a_secret_not_stored_is_missing_and_says_which_command_stores_it() {
        let loaded = load_secrets_from(&policy(), env(&[]), || Ok(store(&[]))).unwrap();
        assert!(loaded.set.is_empty());
        let line = loaded.missing_line().unwrap();
        assert_eq!(
            line,
            "no value for secrets MCP_LINEAR, ANTHROPIC_API_KEY, so they are not substituted: not \
             in the in-process memory store and no FENZI_SECRET_<NAME> variable; to give them one: \
             `fenzi mcp token linear`, `fenzi mcp token ANTHROPIC_API_KEY`"
        );
        assert_eq!(
            loaded.summary(),
            "0 loaded, missing: MCP_LINEAR, ANTHROPIC_API_KEY"
        );
    }

    #[test]
    fn an_invalid_value_stops_the_session_naming_only_the_variable() {
        for bad in ["tiny", "has\u{1b}escape-x"] {
            let err =
                load_secrets_from(&policy(), env(&[("FENZI_SECRET_MCP_LINEAR", bad)]), || {
                    Ok(store(&[]))
                })
                .unwrap_err()
                .to_string();
            assert!(err.contains("FENZI_SECRET_MCP_LINEAR"), "{err}");
            assert!(!err.contains(bad), "{err}");
        }
    }

    /// A project can bind a secret name to a host of its own; the value stored for other hosts
    /// must not follow it there.
    #[test]
    fn a_stored_value_is_withheld_from_hosts_it_was_not_stored_for() {
        let hosts = |list: &[&str]| -> Option<Vec<String>> {
            Some(list.iter().map(|h| h.to_string()).collect())
        };
        let loaded = load_secrets_from(&policy(), env(&[]), || {
            Ok(store_for(&[
                // Stored for a subset of what the policy binds: withheld.
                ("MCP_LINEAR", "lin-from-store", hosts(&["api.linear.app"])),
                // Stored for more than the policy binds: fine.
                (
                    "ANTHROPIC_API_KEY",
                    "sk-ant-store-1",
                    hosts(&["api.anthropic.com", "console.anthropic.com"]),
                ),
            ]))
        })
        .unwrap();
        assert_eq!(loaded.from_store, ["ANTHROPIC_API_KEY"]);
        assert_eq!(value(&loaded, "ANTHROPIC_API_KEY"), "sk-ant-store-1");
        assert!(loaded.set.value("MCP_LINEAR").is_none());
        let missing = &loaded.missing[0];
        assert_eq!(missing.name, "MCP_LINEAR");
        assert_eq!(
            missing.why,
            "it was stored for api.linear.app, and this policy would also send it to \
             mcp.linear.app, so it is withheld"
        );
        assert_eq!(
            missing.fix,
            "`fenzi mcp token linear` once you have checked those hosts"
        );
        let line = loaded.missing_line().unwrap();
        assert!(!line.contains("lin-from-store"), "{line}");

        // Stored for no host, or before fenzi kept hosts: withheld too.
        let loaded = load_secrets_from(&policy(), env(&[]), || {
            Ok(store_for(&[
                ("MCP_LINEAR", "lin-from-store", hosts(&[])),
                ("ANTHROPIC_API_KEY", "sk-ant-store-1", None),
            ]))
        })
        .unwrap();
        assert!(loaded.set.is_empty() && loaded.from_store.is_empty());
        assert!(
            loaded.missing[0]
                .why
                .starts_with("it was stored for no host,")
        );
        assert!(loaded.missing[1].why.contains("by an older fenzi"));
    }

    #[test]
    fn placeholders_env_is_written_private_with_every_placeholder() {
        use std::os::unix::fs::PermissionsExt;
        let loaded = load_secrets_from(
            &policy(),
            env(&[("FENZI_SECRET_MCP_LINEAR", "lin-from-env-123")]),
            || Ok(store(&[])),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = loaded.write_placeholders(&dir.path().join("ca")).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let placeholder = loaded.set.placeholder("MCP_LINEAR").unwrap().as_str();
        assert_eq!(text, format!("MCP_LINEAR={placeholder}\n"));
        assert!(!text.contains("lin-from-env"));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
