//! `fenzi run`: a session. Starts the proxy in this process and the command in a Linux sandbox (user,
//! PID, network, mount and IPC namespaces, seccomp) whose only reachable endpoint is the proxy's
//! listener, created inside the sandbox and handed back. Prints one status line per concern, waits
//! for the command, shuts the proxy down, and exits with the command's exit code.
//!
//! Ctrl-C reaches the command (it shares the terminal's process group); fenzi itself keeps running
//! until the command has ended, so the command never loses its network first.

mod agent;
mod caches;
mod grok_config;
pub(crate) mod hidden;
pub(crate) mod protect;
mod summary;

use crate::commands::mcp::render::Agent;
use crate::config_files::PolicyArgs;
use crate::output;
use crate::session::{self, ProxyFlags};
use anyhow::{Context, Result};
use fenzi_policy::config::{Config, ServerKind};
use fenzi_policy::engine::Policy;
use fenzi_proxy::Proxy;
use fenzi_proxy::sandbox::{self, SandboxSpec, Session, env as sandbox_env};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  fenzi run -- bash                       a shell whose only way out is the proxy
  fenzi run -- curl https://github.com    one command
  fenzi run --agent claude                Claude Code with the policy's MCP servers
  fenzi run --agent codex -- exec \"fix the tests\"
  fenzi run --no-isolation -- npm test    proxy variables only, no sandbox (not a security boundary)
  fenzi run --otlp http://127.0.0.1:4318/v1/logs --agent claude
                                          every audit record also to an OpenTelemetry collector
  fenzi run --metrics 127.0.0.1:9464 --agent claude
                                          Prometheus metrics on the host, out of the sandbox's reach

Inside, the command may write only in the current directory, the temporary directories, /dev, the
project's sandbox cache and the agent's own state (--allow-write adds more). npm, pnpm, Yarn, pip, uv,
cargo, Go, Gradle and Maven keep their caches in that sandbox cache ($XDG_CACHE_HOME/fenzi/sandbox/
<project>-<hash>), never in the person's own, which no sandbox can write. fenzi.yaml, fenzi.lock, the machine config
directory and every audit log are read-only there, and their directories cannot be renamed.
HTTP(S)_PROXY points at the proxy, the session CA is trusted through SSL_CERT_FILE,
NODE_EXTRA_CA_CERTS and friends, and each secret the policy lists is a placeholder that the proxy swaps
for the real value on that secret's hosts only. `fenzi log --session ID` shows the session's decisions.
The exit status is the command's.")]
pub struct Args {
    #[command(flatten)]
    policy: PolicyArgs,
    /// The audit log [default: $XDG_STATE_HOME/fenzi/audit/<session>.jsonl].
    #[arg(long, value_name = "FILE")]
    audit: Option<PathBuf>,
    /// Start this agent with the policy's MCP servers in its own config format; words after `--` are
    /// extra arguments for it.
    #[arg(long, value_enum, value_name = "AGENT")]
    agent: Option<Agent>,
    /// Run without the sandbox: the command only gets the proxy variables and can bypass the proxy.
    #[arg(long)]
    no_isolation: bool,
    /// Also let the command write beneath PATH (repeatable). By default it may write only in the
    /// current directory, the temporary directories, /dev, the project's sandbox cache and the
    /// agent's own state; the policy, the machine config and the audit logs stay read-only whatever is added.
    #[arg(long, value_name = "PATH")]
    allow_write: Vec<PathBuf>,
    #[command(flatten)]
    team: crate::team::TeamArgs,
    #[command(flatten)]
    tuning: ProxyFlags,
    /// The command and its arguments [default: $SHELL].
    #[arg(last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    // Defence in depth: other processes of this user cannot read the CA key or secrets from us.
    // First thing, before any secret is read: a process is dumpable from its exec until this. The
    // sandbox's init inherits it and handles it (see the `sandbox` module's doc).
    sandbox::make_process_undumpable().context("cannot make fenzi's own process non-dumpable")?;
    // An invalid policy is a config error: main prints every problem and exits 2.
    let options = args.tuning.options(Some(1))?;
    // No good copy of a team policy is an error too: the command does not start (exit 2).
    let (loaded, team) = crate::team::load(&args.policy, &args.team, &options.upstream_roots)?;
    // The policy files as they are now, pinned before anything else can touch them: a running
    // session reloads only these (see `reload`).
    let watch = crate::reload::Watch::new(&args.policy).context("cannot watch the policy files")?;
    let config = loaded.result?;
    let policy = Policy::from_config(&config);
    let metrics = args.tuning.metrics_listener()?;
    // Before the runtime: the credential store's calls block.
    let mut secrets = session::load_secrets(&policy)?;
    let sign_ins = session::load_sign_ins(&config, &mut secrets)?;
    // DESIGN §18: each local server's own secrets, for its own sandbox's environment only.
    let local_servers = session::local_servers::LocalServers::plan(&config)?;
    // No real value of any secret the policy names (the agent's or a local server's) reaches the
    // sandbox through the inherited environment.
    let mut all_secret_names = secret_names(&policy);
    all_secret_names.extend(local_servers.secret_names());
    let local_secrets = local_servers.secrets_summary();
    // The sandbox gets the placeholders, never the values.
    let placeholders: Vec<(String, String)> = secrets
        .set
        .iter()
        .map(|(name, placeholder, _)| (name.to_string(), placeholder.as_str().to_string()))
        .collect();

    let session = fenzi_proxy::new_session_id()?;
    let (audit_path, writer) = session::open_audit(args.audit.as_deref(), &session)?;
    let exporter = session::start_export(&args.tuning, &audit_path, |line| {
        output::note(&format!("fenzi run: {line}"))
    })?;
    if let Some(note) = args.tuning.otlp_note(&audit_path) {
        eprintln!("fenzi run: {note}");
    }
    // The CA certificate and agent configs are for this session only, whichever way it ends.
    let runtime_files = session::SessionDir::create(&session)?;
    let session_dir = runtime_files.dir();

    let control = session::control_socket(&policy, &session)?;
    let control_dir = control
        .as_ref()
        .and_then(|c| c.path().parent().map(Path::to_path_buf));
    if let Some(socket) = &control {
        eprintln!("fenzi run: {}", session::control_note(socket));
    }
    let runtime = args.tuning.runtime()?;
    let secrets_status = secrets.summary();
    if let Some(missing) = secrets.missing_line() {
        eprintln!("fenzi run: {missing}");
    }
    let roots = options.upstream_roots.clone();
    let server_options = options.clone();
    let builder = Proxy::builder(policy.clone(), Arc::new(writer.clone()))
        .options(options)
        .secrets(secrets.set)
        .lock_files(args.policy.lock_files());
    let proxy = session::build_proxy(&runtime, builder, &args.tuning, control)?;
    // Sign-ins due now are renewed before the agent starts.
    sign_ins.keep(&runtime, &proxy, &roots)?;
    let ca_path = session::write_ca(session_dir, proxy.ca_pem())?;
    session::report_export_lag(&proxy, exporter.as_ref());
    if let Some(listener) = metrics {
        // On the host: the sandbox's network namespace has no route to it.
        let _enter = runtime.enter();
        eprintln!("fenzi run: {}", session::serve_metrics(&proxy, listener)?);
    }
    let bundle = sandbox_env::ca_bundle(&session::system_roots(), proxy.ca_pem());
    let bundle_path = session::write_file(session_dir, "ca-bundle.pem", bundle.as_bytes())?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    // The person's registry credentials stay outside, as every other real secret does: shown
    // empty to the agent's sandbox and to every local server's.
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let covered = home.as_deref().map(hidden::present).unwrap_or_default();
    let mut hidden_files: Vec<(PathBuf, PathBuf)> = Vec::new();
    if !covered.is_empty() {
        let empty = session::write_file(session_dir, "empty", b"")?;
        hidden_files.extend(covered.iter().map(|file| (empty.clone(), file.clone())));
    }
    // Before the agent: a server that cannot start is known now, and the agent's first request
    // finds its bridge ready.
    let local_servers = local_servers.start(
        &runtime,
        Arc::new(writer.clone()),
        &server_options,
        session_dir,
        &cwd,
        &session::system_roots(),
        &all_secret_names,
        &hidden_files,
    )?;
    for note in &local_servers.notes {
        eprintln!("fenzi run: local server {note}");
    }
    proxy.serve_local_servers(local_servers.bridges.clone());

    let launch = match args.agent {
        Some(agent) => {
            let home = std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(PathBuf::from);
            if let (false, Some(home)) = (args.no_isolation, home.as_deref()) {
                protect::refuse_linked_agent_state(agent, home)?;
            }
            let project = std::env::current_dir().ok();
            let place = agent::Place {
                session_dir,
                home: home.as_deref(),
                isolated: !args.no_isolation,
                project: project.as_deref(),
            };
            agent::launch(agent, &config, &place, &args.command)?
        }
        None => command_line(&args.command),
    };
    for note in &launch.notes {
        eprintln!("fenzi run: {note}");
    }
    // The sandbox's package caches (none without the sandbox: the command writes where it likes).
    let sandbox_cache = if args.no_isolation {
        None
    } else {
        match caches::prepare(&cwd)? {
            caches::Cache::Dir(dir) => Some(dir),
            caches::Cache::None(why) => {
                eprintln!("fenzi run: {why}");
                None
            }
        }
    };
    let inputs = |proxy_url: &str| -> Vec<(OsString, OsString)> {
        let mut env = sandbox_env::sandbox_env(
            &sandbox_env::EnvInputs {
                proxy_url,
                ca_cert_path: &ca_path,
                ca_bundle_path: &bundle_path,
                placeholders: &placeholders,
                secret_names: &all_secret_names,
                cache_dir: sandbox_cache.as_deref(),
            },
            std::env::vars_os(),
        );
        env.extend(launch.env.iter().cloned());
        env
    };

    // fenzi's own warnings go to the session's log file while the command has the terminal.
    let mut quiet = QuietTerminal::open(&audit_path);
    // The governing files as the sandbox protects them (none without the sandbox).
    let mut protected = protect::Protected::default();
    let (listener, transparent, dns, child) = if args.no_isolation {
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").context("cannot listen on 127.0.0.1")?;
        let addr = listener.local_addr()?;
        eprintln!(
            "fenzi run: WARNING: --no-isolation: the command runs WITHOUT the sandbox. It is only asked to use \
             the proxy (HTTP(S)_PROXY); any program can ignore that and reach the network directly, read the \
             kernel keyring and talk to local daemons. This is not a security boundary."
        );
        print_status(
            &config,
            &policy,
            &local_secrets,
            &secrets_status,
            &session,
            &audit_path,
            &format!("{addr} (NO ISOLATION)"),
            false,
        );
        quiet.start();
        let child = match std::process::Command::new(&launch.program)
            .args(&launch.args)
            .env_clear()
            .envs(inputs(&format!("http://{addr}")))
            .current_dir(&cwd)
            .spawn()
        {
            Ok(child) => child,
            Err(e) => {
                return Ok(command_failed(
                    &launch.program.to_string_lossy(),
                    "execve",
                    &e,
                ));
            }
        };
        (listener, Vec::new(), None, Child::Plain(child))
    } else {
        let mut read_only = protect::read_only_paths(&protect::Governing {
            project_policy: &args.policy.config,
            machine_file: args.policy.machine.as_deref(),
            audit_log: &audit_path,
            explicit_audit: args.audit.is_some(),
            session_dir: session_dir.path(),
            runtime_base: runtime_files.base(),
            session_log: quiet.path(),
        })?;
        // The control sockets' directory: the sandbox cannot reach a socket (seccomp), nor
        // change what lies beside it.
        read_only.extend(control_dir);
        // The team key: a key the agent could replace would let a later session trust its copy.
        read_only.extend(team.as_ref().map(|t| t.key.clone()));
        let writable = protect::writable_paths(
            &cwd,
            args.agent,
            &args.allow_write,
            sandbox_cache.as_deref(),
        )?;
        // DESIGN §17: a `programs:` path the agent can write must be pinned by its content
        // (`--allow-write` makes more of the disk the agent's).
        let roots = protect::sandbox_writable_roots(&args.policy.config, &writable);
        let unpinned = protect::unpinned_programs(&config, &roots);
        if !unpinned.is_empty() {
            return Err(fenzi_policy::config::ConfigErrors(unpinned).into());
        }
        protect::refuse_changeable_links(&read_only, &writable)?;
        protected = protect::Protected::record(&read_only);
        let transparent = session::transparent::spec(&policy, session_dir, "resolv.conf")?;
        let mut spec = SandboxSpec::new(launch.program.clone()).args(launch.args.clone());
        for (source, target) in &launch.overlays {
            spec = spec.overlay(source, target);
        }
        if !covered.is_empty() {
            let names: Vec<String> = covered.iter().map(|p| p.display().to_string()).collect();
            eprintln!(
                "fenzi run: shown empty inside the sandbox (they hold credentials; give a token as a \
                 secret instead): {}",
                names.join(", ")
            );
        }
        for (source, target) in &hidden_files {
            spec = spec.overlay(source, target);
        }
        // The local servers' state (tokens a server keeps, say) is theirs, not the agent's.
        if let Some((empty, servers)) = &local_servers.hide_from_agent {
            spec = spec.overlay(empty, servers);
        }
        let env = inputs(&spec.proxy_url());
        let spec = spec
            .envs(env)
            .cwd(cwd)
            .read_only(read_only)
            .writable(writable)
            .transparent(transparent);
        print_status(
            &config,
            &policy,
            &local_secrets,
            &secrets_status,
            &session,
            &audit_path,
            &format!(
                "{} inside the sandbox (user, network, PID, mount namespaces; seccomp; Landlock); \
                 programs that ignore the proxy variables are caught on ports {}",
                spec.proxy_addr(),
                spec.transparent
                    .as_ref()
                    .map(|t| t
                        .ports
                        .iter()
                        .map(u16::to_string)
                        .collect::<Vec<_>>()
                        .join(","))
                    .unwrap_or_default()
            ),
            true,
        );
        quiet.start();
        // On this (the main) thread, which lives as long as the session: the sandbox is killed
        // when the thread that started it ends, and so when fenzi dies in any way.
        let Session {
            listener,
            transparent,
            dns,
            sock_diag,
            child,
        } = match Session::start(spec) {
            Ok(session) => session,
            // Isolation worked; the command itself could not start: say so as a shell would.
            Err(sandbox::SandboxError::Command {
                program,
                action,
                source,
            }) => return Ok(command_failed(&program, action, &source)),
            Err(e) => {
                return Err(anyhow::anyhow!(
                    "{e}\nfenzi run does not start a command it cannot isolate"
                ));
            }
        };
        // DESIGN §17: every connection from now on is attributed to the programs holding it.
        // Without it the session would enforce no `programs:` rule: it does not start.
        let attributor =
            fenzi_proxy::attribution::command_of_init(child.id()).and_then(|command| {
                fenzi_proxy::attribution::Attributor::new(
                    command,
                    std::sync::Arc::new(sock_diag),
                    agent::identity(args.agent),
                    args.agent.is_some(),
                )
            });
        match attributor {
            Ok(attributor) => {
                proxy.attribute(attributor);
            }
            // The command already ended (a quick `true`), and with it every process of the
            // sandbox: the init has no child left, so no connection can come to attribute.
            Err(_)
                if matches!(
                    fenzi_proxy::attribution::command_of_init(child.id()),
                    Err(fenzi_proxy::attribution::AttributionError::NoHolder)
                ) =>
            {
                tracing::debug!("the command ended before its connections could be attributed");
            }
            Err(e) => {
                return Err(anyhow::anyhow!(
                    "cannot attribute the sandbox's connections to its programs: {e}\nfenzi run \
                     does not run a command whose connections it cannot tell apart"
                ));
            }
        }
        (listener, transparent, dns, Child::Sandboxed(child))
    };

    // Changes to the policy files while the command runs (see `reload`): only the person can make
    // them, the sandbox has the files read-only. What happened goes to the session log.
    let watcher = crate::reload::Watcher::start(
        watch,
        team.map(|t| t.config),
        proxy.clone(),
        runtime.handle().clone(),
        |line| output::note(&format!("fenzi run: {line}")),
    )
    .context("cannot watch the policy files")?;
    let result = runtime.block_on(async move {
        listener.set_nonblocking(true)?;
        let listener = fenzi_proxy::listener_from_std(listener)?;
        let transparent = transparent
            .into_iter()
            .map(fenzi_proxy::listener_from_std)
            .collect::<std::io::Result<Vec<_>>>()?;
        // The DNS stub ends with the runtime.
        if let Some(dns) = dns {
            tokio::spawn(proxy.serve_dns(dns)?);
        }
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let stop = async {
            let _ = stop_rx.await;
        };
        let (served, status) = tokio::join!(
            session::serve_until(&proxy, listener, transparent, stop, &writer),
            async {
                let status = child.wait_forwarding_signals().await;
                let _ = stop_tx.send(());
                status
            }
        );
        let (served, status) = (served?, status?);
        if let Some(refused) = &served.refused {
            eprintln!("fenzi run: {refused}");
        }
        served.flushed?;
        anyhow::Ok(status)
    });
    // The local servers end with the session.
    local_servers.stop();
    // After the log's last record: the export ships what is left within --drain-timeout.
    let exported = runtime.block_on(session::finish_export(exporter, &args.tuning));
    drop(watcher);
    runtime.shutdown_timeout(Duration::from_secs(1));
    let warnings = quiet.finish();
    if let Some(line) = exported {
        eprintln!("fenzi run: {line}");
    }
    for path in protected.replaced() {
        eprintln!("fenzi run: {}", protect::Protected::warning(path));
    }
    for line in summary::Denials::read(&audit_path).lines(&session) {
        eprintln!("{line}");
    }
    if let Some((path, written)) = warnings
        && written > 0
    {
        eprintln!(
            "fenzi run: fenzi's warnings during the session are in {}",
            path.display()
        );
    }
    let status = result?;
    let code = sandbox::exit_code(status);
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// Tracing to the session's log file while the command runs (see `output::tracing_to_file`);
/// back on stderr when the session ends, however it ends.
struct QuietTerminal(Option<(std::fs::File, PathBuf)>);

impl QuietTerminal {
    /// Opens the session log beside the audit log now, before the agent starts (it is protected
    /// with the log); when it cannot be opened, fenzi's warnings stay on the terminal.
    fn open(audit_path: &Path) -> QuietTerminal {
        let path = audit_path.with_extension("log");
        match output::open_session_log(&path) {
            Ok(file) => QuietTerminal(Some((file, path))),
            Err(e) => {
                eprintln!(
                    "fenzi run: cannot open {} for fenzi's own warnings ({e}); they go to this terminal",
                    path.display()
                );
                QuietTerminal(None)
            }
        }
    }

    /// The session log's path, when it is open.
    fn path(&self) -> Option<&Path> {
        self.0.as_ref().map(|(_, path)| path.as_path())
    }

    fn start(&mut self) {
        if let Some((file, path)) = self.0.take() {
            output::tracing_to_file(file, &path);
        }
    }

    /// The log and how much went into it.
    fn finish(&self) -> Option<(PathBuf, u64)> {
        output::tracing_back_to_stderr()
    }
}

impl Drop for QuietTerminal {
    fn drop(&mut self) {
        let _ = output::tracing_back_to_stderr();
    }
}

/// A command that could not be started (`action` failed: `execve` or `chdir`), reported as a
/// shell reports it: 127 when there is no such command, 126 when it cannot be run.
fn command_failed(program: &str, action: &str, error: &std::io::Error) -> ExitCode {
    let (code, what) = match (action, error.kind()) {
        ("execve", std::io::ErrorKind::NotFound) => (127, "command not found".to_string()),
        ("execve", std::io::ErrorKind::PermissionDenied) => (126, "permission denied".to_string()),
        ("execve", _) => (126, format!("cannot run it: {error}")),
        (_, _) => (126, format!("{action} failed: {error}")),
    };
    eprintln!("fenzi run: {program}: {what}");
    ExitCode::from(code)
}

/// The command: in the sandbox, or (with `--no-isolation`) a plain child process.
enum Child {
    Sandboxed(sandbox::SandboxChild),
    Plain(std::process::Child),
}

impl Child {
    /// Waits for the command. SIGINT is left to the command (the terminal sends it there too);
    /// SIGTERM and SIGHUP sent to fenzi are passed on so the command can end cleanly.
    async fn wait_forwarding_signals(self) -> Result<std::process::ExitStatus> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
        let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
        let mut hangup = signal(SignalKind::hangup()).context("cannot handle SIGHUP")?;
        let (stop, waiting): (Box<dyn Fn() + Send>, _) = match self {
            Child::Sandboxed(mut child) => {
                let handle = child.handle();
                (
                    Box::new(move || {
                        let _ = handle.terminate();
                    }),
                    tokio::task::spawn_blocking(move || child.wait().map_err(anyhow::Error::from)),
                )
            }
            Child::Plain(mut child) => {
                let pid = rustix::process::Pid::from_raw(child.id() as i32);
                (
                    Box::new(move || {
                        if let Some(pid) = pid {
                            let _ =
                                rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                        }
                    }),
                    tokio::task::spawn_blocking(move || child.wait().map_err(anyhow::Error::from)),
                )
            }
        };
        tokio::pin!(waiting);
        loop {
            tokio::select! {
                done = &mut waiting => {
                    return done.context("waiting for the command failed")?;
                }
                _ = interrupt.recv() => {}
                _ = terminate.recv() => stop(),
                _ = hangup.recv() => stop(),
            }
        }
    }
}

/// A plain command (no `--agent`): the words after `--`, or the user's shell.
fn command_line(command: &[OsString]) -> agent::Launch {
    let (program, args) = match command.split_first() {
        Some((program, rest)) => (program.clone(), rest.to_vec()),
        None => (
            std::env::var_os("SHELL")
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "/bin/sh".into()),
            vec![],
        ),
    };
    agent::Launch {
        program,
        args,
        ..Default::default()
    }
}

fn secret_names(policy: &Policy) -> Vec<String> {
    policy.secrets().iter().map(|s| s.name.clone()).collect()
}

/// One line per concern, on stderr so the command's own output stays clean.
#[allow(clippy::too_many_arguments)]
fn print_status(
    config: &Config,
    policy: &Policy,
    local_secrets: &[String],
    secrets_status: &str,
    session: &str,
    audit: &Path,
    proxy_addr: &str,
    isolated: bool,
) {
    let paint = |label: &str| {
        if output::colour_enabled_for_stderr() {
            format!("\x1b[1m{label:>7}\x1b[0m")
        } else {
            format!("{label:>7}")
        }
    };
    eprintln!("{} {proxy_addr}", paint("proxy"));
    let servers: Vec<String> = config
        .mcp
        .iter()
        .map(|s| match &s.kind {
            ServerKind::Remote { tools, .. } | ServerKind::Account { tools, .. } => {
                format!(
                    "{} ({} allowed, {} denied)",
                    s.name,
                    tools.allow.len(),
                    tools.deny.len()
                )
            }
            ServerKind::Local { tools, run, .. } => format!(
                "{} (local, {}; {} allowed, {} denied)",
                s.name,
                match run {
                    fenzi_policy::config::LocalRun::Sandbox => "own sandbox",
                    fenzi_policy::config::LocalRun::Host => "on the host",
                },
                tools.allow.len(),
                tools.deny.len()
            ),
        })
        .collect();
    eprintln!(
        "{} {}",
        paint("mcp"),
        if servers.is_empty() {
            "none".into()
        } else {
            servers.join(", ")
        }
    );
    let secrets: Vec<String> = policy
        .secrets()
        .iter()
        .map(|s| {
            let hosts: Vec<String> = s.hosts.iter().map(|h| h.to_string()).collect();
            format!("{} → {}", s.name, hosts.join(" "))
        })
        .collect();
    if secrets.is_empty() {
        eprintln!("{} none", paint("secrets"));
    } else {
        // Names and hosts only; which have a value, and from where, follows.
        eprintln!(
            "{} {}; {secrets_status}",
            paint("secrets"),
            secrets.join(", ")
        );
    }
    // A local server's secrets are in its own sandbox only, never the agent's.
    if !local_secrets.is_empty() {
        eprintln!("{} {}", paint(""), local_secrets.join(", "));
    }
    let reach = if isolated {
        "read-only for the agent, as are the policy and the machine config"
    } else {
        "NOT protected from the command: no sandbox"
    };
    eprintln!(
        "{} {} (session {session}; {reach}; `fenzi log --session {session}`)",
        paint("audit"),
        audit.display()
    );
}
