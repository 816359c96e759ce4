//! The policy's local (`command`) servers in a session (DESIGN §18): each one started by fenzi
//! before the agent, behind its bridge (`fenzi_proxy::bridge`), which the agent's proxy reaches at
//! `<name>.stdio.fenzi.internal` after deciding every message as for a remote server.
//!
//! Each server gets its own egress: a proxy of its own under `Policy::for_local_server` (its
//! `hosts`, its `secrets` swapped there), with its own CA, and records that name the server
//! (`local_server`). Its environment holds its own placeholders only; the agent's holds none of
//! them, and no real value of any secret the policy names reaches either.
//!
//! - `run: sandbox` (the default): a sandbox of its own (`SandboxLauncher`) whose write list is its
//!   state directory, `$XDG_STATE_HOME/fenzi/servers/<name>-<hash>`, keyed by project and command
//!   so that no other project's server shares it. Its proxy listener is served by its egress.
//! - `run: host` (the machine file only): a plain child process of fenzi, pointed at its egress
//!   on a loopback port of the host. Nothing stops it ignoring that: the person asked for it.
//!
//! Stderr of every server goes to the session's log (`TracingLog`); the bridges are stopped with
//! the session.

use crate::session::{self, LoadedSecrets};
use anyhow::{Context, Result};
use fenzi_policy::config::{Config, LocalRun, ServerKind};
use fenzi_policy::engine::Policy;
use fenzi_policy::mcp::JsonLimits;
use fenzi_proxy::bridge::{
    Bridge, Bridges, EgressListeners, HostCommand, Launch, SandboxLauncher, SandboxedCommand,
    TracingLog,
};
use fenzi_proxy::host_files::HostDir;
use fenzi_proxy::sandbox::{SandboxSpec, env as sandbox_env};
use fenzi_proxy::{Proxy, ProxyOptions};
use sha2::{Digest, Sha256};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One local server, before the session's runtime exists (its secrets are read by then).
struct Planned {
    name: String,
    command: Vec<String>,
    run: LocalRun,
    policy: Policy,
    secrets: LoadedSecrets,
}

/// The session's local servers, planned: egress policies compiled and secrets loaded.
pub struct LocalServers {
    planned: Vec<Planned>,
}

/// The started servers: their bridges (given to the agent's proxy) and egress proxies.
pub struct Started {
    pub bridges: Bridges,
    /// What the agent's sandbox must show empty: the servers' state directories (`(empty
    /// directory, the servers' directory)`), when there are local servers.
    pub hide_from_agent: Option<(PathBuf, PathBuf)>,
    /// One line per server for the status (`name (sandbox, 3 allowed)`, or why it did not start).
    pub notes: Vec<String>,
}

impl LocalServers {
    /// Reads the secrets of every local server in `config` (blocks on the credential store: call
    /// it before the runtime starts).
    pub fn plan(config: &Config) -> Result<LocalServers> {
        let mut planned = Vec::new();
        for entry in &config.mcp {
            let ServerKind::Local { command, run, .. } = &entry.kind else {
                continue;
            };
            let policy = Policy::for_local_server(config, &entry.name, JsonLimits::default())
                .expect("a local server of this config");
            let secrets = session::load_secrets(&policy)
                .with_context(|| format!("local server `{}`", entry.name))?;
            planned.push(Planned {
                name: entry.name.clone(),
                command: command.clone(),
                run: *run,
                policy,
                secrets,
            });
        }
        Ok(LocalServers { planned })
    }

    /// Whether the policy has no local server.
    pub fn is_empty(&self) -> bool {
        self.planned.is_empty()
    }

    /// One line per local server secret for the status: `NAME → HOSTS (server S only)`, and
    /// whether a value was found.
    pub fn secrets_summary(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for p in &self.planned {
            for binding in p.policy.secrets() {
                let hosts: Vec<String> = binding.hosts.iter().map(|h| h.to_string()).collect();
                let found = p.secrets.set.iter().any(|(n, _, _)| n == binding.name);
                lines.push(format!(
                    "{} → {} (local server {} only{})",
                    binding.name,
                    hosts.join(" "),
                    p.name,
                    if found { "" } else { "; no value" }
                ));
            }
        }
        lines
    }

    /// The names of every local server's secrets: no real value of them may reach any sandbox.
    pub fn secret_names(&self) -> Vec<String> {
        self.planned
            .iter()
            .flat_map(|p| p.policy.secrets().iter().map(|s| s.name.clone()))
            .collect()
    }

    /// Starts every server (inside `runtime`): its egress proxy, its CA files in `session_dir`,
    /// and its first process. A server that cannot start is said in its note; its requests get
    /// an error (the bridge retries with backoff), never a hang.
    ///
    /// `hidden` are the overlays that show the person's credential files empty (as the agent's
    /// sandbox has them); a sandboxed server also sees every other server's state directory empty.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        self,
        runtime: &tokio::runtime::Runtime,
        audit: Arc<dyn fenzi_proxy::audit::sink::AuditSink>,
        options: &ProxyOptions,
        session_dir: &HostDir,
        project: &Path,
        system_roots: &str,
        all_secret_names: &[String],
        hidden: &[(PathBuf, PathBuf)],
    ) -> Result<Started> {
        let _enter = runtime.enter();
        let mut bridges = Bridges::new();
        let mut notes = Vec::new();
        let mut hide_from_agent = None;
        let empty_dir = session_dir.join("empty-dir");
        if !self.planned.is_empty() {
            session_dir.create_dir("empty-dir".as_ref())?;
            hide_from_agent = Some((empty_dir.clone(), servers_dir()?));
        }
        for server in self.planned {
            let name = server.name.clone();
            // The server's environment gets the placeholders, never the values.
            let placeholders: Vec<(String, String)> = server
                .secrets
                .set
                .iter()
                .map(|(n, placeholder, _)| (n.to_string(), placeholder.as_str().to_string()))
                .collect();
            let egress_policy = Arc::new(server.policy.clone());
            let egress = Proxy::builder(server.policy, audit.clone())
                .options(options.clone())
                .secrets(server.secrets.set)
                .egress_of(&name)
                .build()
                .with_context(|| format!("cannot start the egress of local server `{name}`"))?;
            let ca = session::write_file(
                session_dir,
                &format!("ca-{name}.pem"),
                egress.ca_pem().as_bytes(),
            )?;
            let bundle = session::write_file(
                session_dir,
                &format!("ca-bundle-{name}.pem"),
                sandbox_env::ca_bundle(system_roots, egress.ca_pem()).as_bytes(),
            )?;
            let env_for = |proxy_url: &str| {
                sandbox_env::sandbox_env(
                    &sandbox_env::EnvInputs {
                        proxy_url,
                        ca_cert_path: &ca,
                        ca_bundle_path: &bundle,
                        placeholders: &placeholders,
                        secret_names: all_secret_names,
                        cache_dir: None,
                    },
                    std::env::vars_os(),
                )
            };
            let (program, args) = split(&server.command);
            let launch: Box<dyn Launch> = match server.run {
                LocalRun::Sandbox => {
                    let handle = runtime.handle().clone();
                    let serving = egress.clone();
                    let proxy_url = SandboxSpec::new(program.clone()).proxy_url();
                    let state_dir = state_dir(&name, &server.command, project)?;
                    // Programs that ignore the proxy variables (Node's `fetch` before Node 24)
                    // are caught as the agent's are, under the server's own policy.
                    let transparent = session::transparent::spec(
                        egress_policy.as_ref(),
                        session_dir,
                        &format!("resolv-{name}.conf"),
                    )?;
                    let mut overlays = hidden.to_vec();
                    overlays.extend(
                        other_state_dirs(&state_dir)?
                            .into_iter()
                            .map(|other| (empty_dir.clone(), other)),
                    );
                    let launcher = SandboxLauncher::new(SandboxedCommand {
                        program,
                        args,
                        env: env_for(&proxy_url),
                        path: std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
                        state_dir,
                        cwd: Some(project.to_path_buf()),
                        overlays,
                        transparent: Some(transparent),
                    })
                    .with_context(|| format!("cannot start the launcher of `{name}`"))?
                    .egress(Box::new(move |ways: EgressListeners, gone| {
                        let proxy = serving.clone();
                        handle.spawn(async move {
                            if let Err(e) = serve_egress(&proxy, ways, gone).await {
                                tracing::warn!("a local server's egress stopped: {e}");
                            }
                        });
                    }));
                    Box::new(launcher)
                }
                LocalRun::Host => {
                    let listener = std::net::TcpListener::bind("127.0.0.1:0")
                        .context("cannot listen on 127.0.0.1 for a local server's egress")?;
                    let proxy_url = format!("http://{}", listener.local_addr()?);
                    listener.set_nonblocking(true)?;
                    let listener = tokio::net::TcpListener::from_std(listener)?;
                    let serving = egress.clone();
                    runtime.spawn(async move {
                        let _ = serving.serve(listener, std::future::pending()).await;
                    });
                    Box::new(HostCommand {
                        program,
                        args,
                        env: env_for(&proxy_url),
                        cwd: project.to_path_buf(),
                    })
                }
            };
            let bridge = Arc::new(Bridge::new(name.clone(), launch, Arc::new(TracingLog)));
            let place = match server.run {
                LocalRun::Sandbox => "in its own sandbox",
                LocalRun::Host => "on the host (run: host)",
            };
            notes.push(match bridge.prepare() {
                Ok(()) => format!(
                    "{name} at {} ({place})",
                    fenzi_policy::config::stdio_url(&name)
                ),
                Err(e) => {
                    format!("{name} could not start ({e}); its requests get an error until it does")
                }
            });
            bridges.insert(name, bridge);
        }
        Ok(Started {
            bridges,
            hide_from_agent,
            notes,
        })
    }
}

/// Serves one server sandbox's ways out with its egress proxy until the sandbox is `gone` (or the
/// session ends).
async fn serve_egress(
    proxy: &Proxy,
    ways: EgressListeners,
    gone: tokio::sync::oneshot::Receiver<()>,
) -> std::io::Result<()> {
    let nonblocking = |l: std::net::TcpListener| {
        l.set_nonblocking(true)?;
        tokio::net::TcpListener::from_std(l)
    };
    let listener = nonblocking(ways.proxy)?;
    let transparent = ways
        .transparent
        .into_iter()
        .map(nonblocking)
        .collect::<std::io::Result<Vec<_>>>()?;
    let (gone_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    if let Some(dns) = ways.dns {
        let stub = proxy.serve_dns(dns)?;
        let mut gone = gone_tx.subscribe();
        tokio::spawn(async move {
            tokio::select! {
                _ = stub => {}
                _ = gone.recv() => {}
            }
        });
    }
    let served = proxy
        .serve_with(listener, transparent, async move {
            let _ = gone.await;
        })
        .await;
    let _ = gone_tx.send(());
    served.map(drop).map_err(std::io::Error::other)
}

impl Started {
    /// Stops every server's processes (the session is ending).
    pub fn stop(&self) {
        for bridge in self.bridges.values() {
            bridge.stop_all();
        }
    }
}

fn split(command: &[String]) -> (OsString, Vec<OsString>) {
    let (program, args) = command
        .split_first()
        .expect("the schema refuses an empty command");
    (program.into(), args.iter().map(OsString::from).collect())
}

/// `$XDG_STATE_HOME/fenzi/servers`, created private: where every local server's state directory
/// is. Hidden from the agent's sandbox, as each server's from the others'.
fn servers_dir() -> Result<PathBuf> {
    let audit = session::audit_dir(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME"))
        .context("neither XDG_STATE_HOME nor HOME is set: a local server has no state directory")?;
    let base = audit.parent().map(Path::to_path_buf).unwrap_or(audit);
    let servers = base.join("servers");
    fenzi_proxy::host_files::private_dir(&base)?;
    fenzi_proxy::host_files::private_dir(&servers)?;
    Ok(servers)
}

/// `$XDG_STATE_HOME/fenzi/servers/<name>-<hash of project and command>`: one per server per
/// project, so that a server another project defines under the same name never shares it.
fn state_dir(name: &str, command: &[String], project: &Path) -> Result<PathBuf> {
    let mut hash = Sha256::new();
    hash.update(project.as_os_str().as_bytes());
    for word in command {
        hash.update([0]);
        hash.update(word.as_bytes());
    }
    let hash = hash.finalize();
    let dir = servers_dir()?.join(format!("{name}-{}", hex::encode(&hash[..8])));
    fenzi_proxy::host_files::private_dir(&dir)?;
    Ok(dir)
}

/// The state directories beside `own`: the other servers' (of any project), each shown empty to
/// this one.
fn other_state_dirs(own: &Path) -> Result<Vec<PathBuf>> {
    let Some(parent) = own.parent() else {
        return Ok(Vec::new());
    };
    let mut others = Vec::new();
    for entry in
        std::fs::read_dir(parent).with_context(|| format!("cannot list {}", parent.display()))?
    {
        let entry = entry?;
        if entry.path() != own && entry.file_type()?.is_dir() {
            others.push(entry.path());
        }
    }
    Ok(others)
}
