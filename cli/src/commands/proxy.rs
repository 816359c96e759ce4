//! `fenzi proxy`: the standalone egress proxy (CI, containers, a sidecar). It loads and validates the
//! policy (exit 2 with every problem when it is not valid), gathers the value of every secret the
//! policy lists (`FENZI_SECRET_<NAME>` in its own environment first, else the credential store; a
//! secret without a value is named on stderr and simply not substituted; an invalid value stops it,
//! exit 2), mints their placeholders and writes them to `--ca-dir/placeholders.env`, opens the audit
//! log, makes the session CA and writes its certificate to `--ca-dir/ca.pem`, binds `--listen`,
//! prints exactly `listening on HOST:PORT` as its first stdout line, and serves until SIGINT or
//! SIGTERM. Then it stops accepting, lets in-flight requests finish within the drain time, flushes the
//! log and exits 0; 2 when the log is not whole (its writer stopped for good, or its head file could
//! not be brought up to date), saying what that cost. Records refused earlier and written again since
//! (a disk full for a while) do not fail the exit: their requests were denied, nothing was lost.
//! Values and placeholders are never printed: names only. While it serves, a change to the policy
//! files is reloaded (`crate::reload`): new MCP tool rules apply from the next request, anything
//! else waits for the next session; each outcome is a line on stderr and a `policy` record.
//! Under a team policy (`--team-policy`, or the machine file's `team:`; `crate::team`) the policy
//! files narrow the signed team copy; with no good copy of it the proxy does not start (exit 2).
//! With `--otlp URL` the log is also shipped to an OTLP/HTTP receiver (`session::start_export`), and at
//! exit, after the log's last flush, the export drains and says how far it got.

use crate::config_files::PolicyArgs;
use crate::session::{self, ProxyFlags};
use anyhow::{Context, Result};
use fenzi_policy::engine::Policy;
use fenzi_proxy::Proxy;
use fenzi_proxy::audit::writer::AuditWriter;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  fenzi proxy --config fenzi.yaml --listen 127.0.0.1:0
  fenzi proxy --config fenzi.yaml --listen 127.0.0.1:8080 --ca-dir ./ca --upstream-ca corp-root.pem
  fenzi proxy --config /etc/fenzi/fenzi.yaml --listen 127.0.0.1:3128 --ca-dir /var/run/fenzi --group-readable
      (a Kubernetes sidecar whose agent runs as another user in its group: deploy/k8s)
  fenzi proxy --listen 127.0.0.1:8080 --team-policy https://policy.example.com/fenzi.yaml \\
      --team-key ~/.config/fenzi/team.pub     narrow a signed team policy (see fenzi check --help)
  fenzi proxy --config fenzi.yaml --listen 127.0.0.1:8080 --audit /var/log/fenzi/audit.jsonl \\
      --otlp http://127.0.0.1:4318/v1/logs --drain-timeout 10s
  fenzi proxy --config fenzi.yaml --listen 127.0.0.1:8080 --metrics 127.0.0.1:9464

Clients use it as HTTP(S)_PROXY and trust DIR/ca.pem for the hosts it intercepts.
Secrets: the value of each secret the policy lists comes from FENZI_SECRET_<NAME> in this command's
environment, else from the credential store (`fenzi mcp token`); clients get the placeholders from
DIR/placeholders.env (NAME=placeholder lines).
With --otlp every audit record is also shipped, from the log file, as an OpenTelemetry log record
(body: the line as stored; attributes fenzi.session, fenzi.seq). Give --audit a fixed file so that
a restart continues the same log and its export resumes from <log>.otlp-cursor.
Durations take a unit: 500ms, 30s, 5m, 1h (a bare number is seconds).")]
pub struct Args {
    #[command(flatten)]
    policy: PolicyArgs,
    /// Address to listen on, e.g. 127.0.0.1:8080 (port 0 picks a free port).
    #[arg(long, value_name = "ADDR")]
    listen: String,
    /// The audit log [default: $XDG_STATE_HOME/fenzi/audit/<session>.jsonl].
    #[arg(long, value_name = "FILE")]
    audit: Option<PathBuf>,
    /// Directory for the session CA certificate (ca.pem) and the secret placeholders
    /// (placeholders.env) [default: a new temporary directory].
    #[arg(long, value_name = "DIR")]
    ca_dir: Option<PathBuf>,
    /// Make DIR/placeholders.env readable by the proxy's group (mode 0640 instead of 0600), for a
    /// sidecar whose agent runs as another user in that group (deploy/k8s).
    #[arg(long)]
    group_readable: bool,
    #[command(flatten)]
    team: crate::team::TeamArgs,
    #[command(flatten)]
    tuning: ProxyFlags,
}

/// `--group-readable`: the placeholders file 0640, so an agent under another uid in the proxy's
/// group can read it. The placeholders are useless outside this proxy; the values stay in memory.
fn share_with_group(path: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o640))
        .with_context(|| format!("--group-readable: cannot make {} 0640", path.display()))
}

pub fn run(args: Args) -> Result<ExitCode> {
    // An invalid policy is a config error: main prints every problem and exits 2.
    let options = args.tuning.options(None)?;
    // No good copy of a team policy is an error too: the session does not start (exit 2).
    let (loaded, team) = crate::team::load(&args.policy, &args.team, &options.upstream_roots)?;
    // The policy files as they are now, pinned before anything else can touch them: a running
    // session reloads only these (see `reload`).
    // Nothing here protects the files from anyone: the path is followed (crate::reload).
    let watch =
        crate::reload::Watch::following(&args.policy).context("cannot watch the policy files")?;
    let config = loaded.result?;
    let policy = Policy::from_config(&config);
    let metrics = args.tuning.metrics_listener()?;
    // Before the runtime: the credential store's calls block.
    let mut secrets = session::load_secrets(&policy)?;
    let sign_ins = session::load_sign_ins(&config, &mut secrets)?;
    // DESIGN §18: the local servers, each with its own secrets (for its own environment only).
    let local_servers = session::local_servers::LocalServers::plan(&config)?;
    let mut all_secret_names: Vec<String> =
        policy.secrets().iter().map(|s| s.name.clone()).collect();
    all_secret_names.extend(local_servers.secret_names());

    let session = fenzi_proxy::new_session_id()?;
    let (audit_path, writer) = session::open_audit(args.audit.as_deref(), &session)?;
    let exporter = session::start_export(&args.tuning, &audit_path, |line| {
        eprintln!("fenzi proxy: {line}")
    })?;
    let ca_dir = match &args.ca_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("fenzi-{session}")),
    };

    let control = session::control_socket(&policy, &session)?;
    let control_note = control.as_ref().map(session::control_note);
    let runtime = args.tuning.runtime()?;
    let placeholders = secrets.write_placeholders(&ca_dir)?;
    if args.group_readable {
        // Before ca.pem is written: a sidecar's agent waits for ca.pem, then reads this file.
        share_with_group(&placeholders)?;
    }
    let status = secrets.summary();
    let missing = secrets.missing_line();
    // Kept for the flush at exit, whose error says more than the proxy's audit-sink error would.
    let audit = writer.clone();
    let roots = options.upstream_roots.clone();
    let server_options = options.clone();
    let builder = Proxy::builder(policy, Arc::new(writer.clone()))
        .options(options)
        .secrets(secrets.set)
        .lock_files(args.policy.lock_files());
    let proxy = session::build_proxy(&runtime, builder, &args.tuning, control)?;
    // Sign-ins due now are renewed before the proxy listens.
    sign_ins.keep(&runtime, &proxy, &roots)?;
    let ca_host_dir = fenzi_proxy::host_files::HostDir::open(&ca_dir)
        .with_context(|| format!("cannot create {}", ca_dir.display()))?;
    session::write_ca(&ca_host_dir, proxy.ca_pem())?;
    // Started before the proxy listens, as under `fenzi run` (each in a sandbox of its own unless
    // the machine file says `run: host`); the agent reaches them through the proxy port. The
    // person's credential files read empty to them, as to `fenzi run`'s sandboxes.
    let covered = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| crate::commands::run::hidden::present(std::path::Path::new(&h)))
        .unwrap_or_default();
    let mut hidden_files = Vec::new();
    if !covered.is_empty() && !local_servers.is_empty() {
        let empty = session::write_file(&ca_host_dir, "empty", b"")?;
        hidden_files.extend(covered.into_iter().map(|file| (empty.clone(), file)));
    }
    let local_servers = local_servers.start(
        &runtime,
        Arc::new(writer),
        &server_options,
        &ca_host_dir,
        &std::env::current_dir().context("cannot read the current directory")?,
        &session::system_roots(),
        &all_secret_names,
        &hidden_files,
    )?;
    for note in &local_servers.notes {
        eprintln!("fenzi proxy: local server {note}");
    }
    proxy.serve_local_servers(local_servers.bridges.clone());
    session::report_export_lag(&proxy, exporter.as_ref());
    let metrics_line = match metrics {
        Some(listener) => {
            let _runtime = runtime.enter();
            Some(session::serve_metrics(&proxy, listener)?)
        }
        None => None,
    };
    // Printed once listening (stdout's first line comes first).
    let notes: Vec<String> = [
        format!(
            "session {session}, audit log {}, CA certificate {}",
            audit_path.display(),
            ca_dir.join("ca.pem").display()
        ),
        format!(
            "secrets: {status}; placeholders in {}",
            placeholders.display()
        ),
    ]
    .into_iter()
    .chain(team.as_ref().map(crate::team::TeamLayer::note))
    .chain(metrics_line)
    .chain(missing)
    .chain(control_note)
    .chain(args.tuning.otlp_note(&audit_path))
    .collect();
    // Changes to the policy files, from now on (see `reload`).
    let watcher = crate::reload::Watcher::start(
        watch,
        team.map(|t| t.config),
        proxy.clone(),
        runtime.handle().clone(),
        |line| eprintln!("fenzi proxy: {line}"),
    )
    .context("cannot watch the policy files")?;
    let result = runtime.block_on(serve(&args.listen, proxy, &audit, &notes));
    local_servers.stop();
    // After the log's last record: the export ships what is left within --drain-timeout.
    if let Some(line) = runtime.block_on(session::finish_export(exporter, &args.tuning)) {
        eprintln!("fenzi proxy: {line}");
    }
    drop(watcher);
    // Connections cut after the drain time may leave a resolver thread behind; do not wait on it.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn serve(
    listen: &str,
    proxy: Proxy,
    audit: &AuditWriter,
    notes: &[String],
) -> Result<ExitCode> {
    // Handlers first: a signal right after the listening line must shut down cleanly, not kill.
    let shutdown = shutdown_signal()?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let addr = listener.local_addr()?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {addr}")?;
        out.flush()?;
    }
    for note in notes {
        eprintln!("fenzi proxy: {note}");
    }
    let served = session::serve_until(&proxy, listener, Vec::new(), shutdown, audit).await?;
    let mut stopped = String::from("fenzi proxy: stopped");
    if served.cut > 0 {
        stopped += &format!(
            "; {} connections did not finish in time and were cut",
            served.cut
        );
    }
    if let Some(refused) = &served.refused {
        stopped += &format!("; {refused}");
    }
    if served.flushed.is_err() {
        stopped += "; the audit log was not closed cleanly";
    }
    eprintln!("{stopped}");
    served.flushed?;
    Ok(ExitCode::SUCCESS)
}

/// Resolves on SIGINT or SIGTERM.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()> + Send> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}
