//! What `fenzi proxy` and `fenzi run` both set up for a session: its id, the audit log, the private
//! directory holding the session CA certificate, the session's secrets (values gathered, placeholders
//! minted, `placeholders.env`), and the proxy options derived from flags.

use crate::commands::log::audit_dir;
use anyhow::{Context, Result, anyhow, bail};
use fenzi_policy::engine::{Policy, SecretBinding, SecretSource};
use fenzi_proxy::audit_writer::{AuditError, AuditWriter};
use fenzi_proxy::credstore::{self, CredentialStore, StoreError};
use fenzi_proxy::secrets::placeholders::ENV_PREFIX;
use fenzi_proxy::secrets::{SecretSet, values_from_env};
use fenzi_proxy::tls::upstream::parse_pem_certs;
use fenzi_proxy::{Proxy, ProxyOptions};
use std::ffi::OsString;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The audit log of a session: `explicit`, or `$XDG_STATE_HOME/fenzi/audit/<session>.jsonl`.
pub fn open_audit(explicit: Option<&Path>, session: &str) -> Result<(PathBuf, AuditWriter)> {
    let path = match explicit {
        Some(path) => path.to_path_buf(),
        None => audit_dir(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME"))
            .context(
                "cannot choose an audit log: neither XDG_STATE_HOME nor HOME is set; pass --audit",
            )?
            .join(format!("{session}.jsonl")),
    };
    // Every `AuditError` names the file and its cause already: no context on top, or it says it twice.
    let writer = AuditWriter::open(&path, session)?;
    Ok((path, writer))
}

/// Creates `dir` (private to the user when new).
pub fn create_private_dir(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))
}

/// Writes `contents` to `dir/name` atomically (temporary file, then rename).
pub fn write_file(dir: &Path, name: &str, contents: &[u8]) -> Result<PathBuf> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, contents).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Creates `dir` if needed and writes the session CA certificate (never its key) to `dir/ca.pem`.
pub fn write_ca(dir: &Path, pem: &str) -> Result<PathBuf> {
    create_private_dir(dir)?;
    write_file(dir, "ca.pem", pem.as_bytes())
}

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

/// How a session's serving ended: what `fenzi proxy` and `fenzi run` report at exit.
pub struct Served {
    /// Connections that did not finish within the drain time and were cut.
    pub cut: usize,
    /// What refused records cost (see [`refused_records`]).
    pub refused: Option<String>,
    /// Whether the log is whole now. Records refused earlier lost nothing (their requests were
    /// denied); an error here is the writer stopped for good (it says what that may have cost) or
    /// a head that still lags its records, and fails the exit.
    pub flushed: Result<(), AuditError>,
}

/// Serves `proxy` on `listener` until `stop`, then flushes the log. Serving runs on a worker task,
/// not the calling thread, so accepted connections start where they were accepted.
pub async fn serve_until(
    proxy: &Proxy,
    listener: tokio::net::TcpListener,
    stop: impl Future<Output = ()> + Send + 'static,
    writer: &AuditWriter,
) -> Result<Served> {
    let serving = tokio::spawn({
        let proxy = proxy.clone();
        async move { proxy.serve(listener, stop).await }
    });
    let cut = serving.await.context("the proxy task failed")??;
    Ok(Served {
        cut,
        refused: refused_records(writer),
        flushed: writer.flush().await,
    })
}

/// What the session's refused records cost, for the line printed at exit; `None` when none was
/// refused. A refused record lost nothing: its request was denied.
pub fn refused_records(writer: &AuditWriter) -> Option<String> {
    let refused = writer.refused();
    (refused > 0).then(|| {
        format!(
            "{refused} audit records could not be written, and their requests were refused (503 audit_unavailable)"
        )
    })
}

/// Flags that tune the proxy, shared by `fenzi proxy` and `fenzi run`.
#[derive(Debug, Clone, clap::Args)]
pub struct ProxyFlags {
    /// Extra root certificates (PEM) trusted for upstream TLS, beside the public roots. Repeatable.
    #[arg(long, value_name = "PEM")]
    upstream_ca: Vec<PathBuf>,
    /// Client connections served at once, tunnels included. When all are taken, the one idle longest
    /// (at least a second) is closed to make room. The default is what this machine's descriptor
    /// limit allows, at most 16384.
    #[arg(long, value_name = "N", default_value_t = ProxyOptions::default().max_connections)]
    max_connections: usize,
    /// Time a client has to send a request head (also the idle keep-alive limit).
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    header_timeout: Option<Duration>,
    /// A tunnel with no traffic either way for this long is closed.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    idle_timeout: Option<Duration>,
    /// Dialling one upstream address.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    connect_timeout: Option<Duration>,
    /// A TLS handshake with the client or the upstream.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    tls_timeout: Option<Duration>,
    /// From a request sent upstream to its response head.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    response_timeout: Option<Duration>,
    /// At shutdown, how long in-flight requests get to finish.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    drain_timeout: Option<Duration>,
    /// Worker threads serving connections [default: one per CPU for `fenzi proxy`, 1 for `fenzi
    /// run`, whose one agent makes few calls at once: one thread saves the cross-thread wake-ups].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
}

impl ProxyFlags {
    /// The async runtime that serves the proxy: `--threads` workers, else `default_threads` (`None`:
    /// one per CPU).
    /// Also lifts the soft descriptor limit to the hard one first: each connection holds up to two.
    pub fn runtime(&self, default_threads: Option<usize>) -> Result<tokio::runtime::Runtime> {
        match fenzi_proxy::capacity::raise_fd_limit() {
            Ok(limit) => tracing::debug!("descriptor limit {limit}"),
            Err(e) => tracing::warn!("cannot raise the descriptor limit: {e}"),
        }
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.enable_all();
        if let Some(n) = self.threads.map(usize::from).or(default_threads) {
            builder.worker_threads(n);
        }
        builder.build().context("cannot start the async runtime")
    }

    /// The proxy options these flags ask for, on top of the defaults.
    pub fn options(&self) -> Result<ProxyOptions> {
        let mut options = ProxyOptions {
            max_connections: self.max_connections.max(1),
            ..ProxyOptions::default()
        };
        let set = |slot: &mut Duration, value: Option<Duration>| {
            if let Some(value) = value {
                *slot = value;
            }
        };
        set(&mut options.header_read_timeout, self.header_timeout);
        set(&mut options.idle_timeout, self.idle_timeout);
        set(&mut options.connect_timeout, self.connect_timeout);
        set(&mut options.tls_handshake_timeout, self.tls_timeout);
        set(&mut options.response_header_timeout, self.response_timeout);
        set(&mut options.drain_timeout, self.drain_timeout);
        for path in &self.upstream_ca {
            let pem =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            let certs = parse_pem_certs(&pem).map_err(|e| anyhow!("{}: {e}", path.display()))?;
            options.upstream_roots.extend(certs);
        }
        Ok(options)
    }
}

/// `500ms`, `30s`, `5m`, `1h`, or a bare number of seconds; more than zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 30s, 5m, 500ms)"))?;
    let duration = match unit {
        "" | "s" => Duration::from_secs(n),
        "ms" => Duration::from_millis(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        _ => {
            return Err(format!(
                "unknown unit {unit:?} in {text:?} (use ms, s, m or h)"
            ));
        }
    };
    if duration.is_zero() {
        return Err("a timeout must be more than zero".to_string());
    }
    Ok(duration)
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

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("-1").is_err());
    }
}
