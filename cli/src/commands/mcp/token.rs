//! `fenzi mcp token NAME [--secret VAR] [--delete]`: stores a secret value in the credential store
//! (README, Secrets), or deletes it.
//!
//! NAME is a server or a secret name:
//! - a `token: true` server: its token, kept as `MCP_<SERVER>`;
//! - a local server: the one secret it reads, or the one `--secret VAR` picks when it reads
//!   several;
//! - otherwise a variable name (`DIGITALOCEAN_API_TOKEN`, `ANTHROPIC_API_KEY`), stored as given.
//!
//! The value is read without echo from the terminal when stdin is one (`rpassword`: it restores
//! the terminal on Ctrl-C and handles backspace, which a hand-rolled termios loop would have to
//! redo), else as one line from stdin: the line's final `\n` is dropped. The value must pass the
//! checks of [`SecretValue`] that the proxy applies when it starts (UTF-8, 8 bytes to 16 KiB, no
//! CR, LF, NUL or other control character but TAB; a second line is refused), so a stored value
//! never stops a session later. The value goes to the store only: never to a file, never to the
//! output, which names the secret.
//!
//! The value is stored with the hosts this folder's policy binds it to, and they are shown, each with
//! the file and line that binds it, before the value is asked for; on a terminal, when this folder's
//! own file binds any of them, the user must say yes first. A session uses a stored value only for those hosts (see
//! `session::load_secrets`): a project file that later binds the name elsewhere gets nothing.

use super::files::{FileArgs, Files};
use anyhow::{Context, Result, anyhow, bail};
use fenzi_policy::config::{Config, Location, ServerKind};
use fenzi_policy::engine::Policy;
use fenzi_policy::secret_name::{is_valid_secret_name, reserved_reason, server_token_name};
use fenzi_proxy::credstore::{self, CredentialStore, MAX_SECRET_BYTES, SecretValue, StoredSecret};
use std::io::{IsTerminal, Read};
use std::process::ExitCode;
use zeroize::Zeroizing;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  fenzi mcp token linear                      the token of `token: true` server linear (MCP_LINEAR)
  fenzi mcp token droplets                    the secret local server droplets reads
  fenzi mcp token ANTHROPIC_API_KEY           a secret by its variable name
  printf '%s\\n' \"$TOKEN\" | fenzi mcp token linear    from stdin (one line)
  fenzi mcp token linear --delete

Values go to the OS credential store (the kernel keyring, or the Secret Service in a desktop session;
FENZI_CREDSTORE=keyutils|secret-service picks one), never to a file. Each is stored with the hosts this
folder's policy binds it to, printed before the value is asked for; a session sends it nowhere else.
Run the command again to store it for the hosts of a changed policy.")]
pub struct Args {
    /// A server name, or a secret's variable name.
    name: String,
    /// For a local server that reads several secrets: which one.
    #[arg(long, value_name = "VAR")]
    secret: Option<String>,
    /// Delete the stored value instead.
    #[arg(long)]
    delete: bool,
    #[command(flatten)]
    files: FileArgs,
}

/// The secret to store and, when it was named through a server, what it is for.
struct Target {
    secret: String,
    purpose: Option<String>,
}

impl Target {
    /// `MCP_LINEAR (the token of server `linear`)`, or just the name.
    fn label(&self) -> String {
        match &self.purpose {
            Some(p) => format!("{} ({p})", self.secret),
            None => self.secret.clone(),
        }
    }
}

fn resolve(args: &Args, config: Option<&Config>) -> Result<Target> {
    let server = config.and_then(|c| c.mcp.iter().find(|s| s.name == args.name));
    if let Some(s) = server {
        let name = &s.name;
        return match &s.kind {
            ServerKind::Remote { oauth: true, .. } if !args.delete => bail!(
                "server `{name}` signs in with OAuth (`oauth: true`): sign in with `fenzi mcp \
                 login {name}`, which stores its tokens and lets sessions renew them"
            ),
            ServerKind::Remote { token: true, .. } => {
                if args.secret.is_some() {
                    bail!("--secret is for local servers; `{name}` takes one token");
                }
                Ok(Target {
                    secret: server_token_name(name),
                    purpose: Some(format!("the token of server `{name}`")),
                })
            }
            ServerKind::Remote { token: false, .. } => bail!(
                "server `{name}` does not use a token (its entry has no `token: true`); add it \
                 with `fenzi mcp add {name} URL ... --token --replace`, or set `token: true`"
            ),
            ServerKind::Account { .. } => bail!(
                "server `{name}` is Claude's account connectors: they come with your Claude \
                 sign-in, there is no token to store"
            ),
            ServerKind::Local { secrets, .. } => {
                let names: Vec<&str> = secrets.iter().map(|s| s.value.as_str()).collect();
                let secret = match (&args.secret, names.as_slice()) {
                    (_, []) => {
                        bail!("local server `{name}` reads no secret (its entry has no `secrets:`)")
                    }
                    (Some(v), _) if names.contains(&v.as_str()) => v.clone(),
                    (Some(v), _) => bail!(
                        "local server `{name}` does not read `{v}`; it reads {}",
                        names.join(", ")
                    ),
                    (None, [one]) => one.to_string(),
                    (None, many) => bail!(
                        "local server `{name}` reads several secrets ({}); choose one with --secret VAR",
                        many.join(", ")
                    ),
                };
                Ok(Target {
                    purpose: Some(format!("the secret of server `{name}`")),
                    secret,
                })
            }
        };
    }
    if args.secret.is_some() {
        bail!(
            "there is no server `{}` in this folder's policy; --secret picks one of a local \
             server's secrets",
            args.name
        );
    }
    if !is_valid_secret_name(&args.name) {
        bail!(
            "there is no server `{}` in this folder's policy, and it is not a secret name \
             (upper-case letters, digits and `_`, as in DIGITALOCEAN_API_TOKEN)",
            args.name
        );
    }
    if let Some(why) = reserved_reason(&args.name) {
        bail!("`{}` cannot be a secret: {why}", args.name);
    }
    // A name this folder's policy does not bind is said so by `approve_hosts`.
    Ok(Target {
        secret: args.name.clone(),
        purpose: None,
    })
}

/// A host the value will be sent to, and where the policy says so.
struct BoundHost {
    /// As the policy writes it, and as it is stored.
    pattern: String,
    /// `fenzi.yaml:4`, or empty when no entry names it.
    place: String,
    /// Written in this folder's file (which came with the folder), not the machine file.
    from_project: bool,
}

/// The host patterns this folder's policy binds `secret` to, as the policy writes them: what the
/// value is stored for, and all a session will send it to. Each with the file and line that binds
/// it there.
fn bound_hosts(config: &Config, policy: &Policy, files: &Files, secret: &str) -> Vec<BoundHost> {
    // Where each pattern is written for this secret (a token server's host is its url's).
    let mut written: Vec<(String, &Location)> = Vec::new();
    for sec in config.secrets.iter().filter(|s| s.name == secret) {
        written.extend(sec.hosts.iter().map(|h| (h.value.to_string(), &h.at)));
    }
    let mut token_server: Option<&Location> = None;
    for server in &config.mcp {
        match &server.kind {
            ServerKind::Local { secrets, hosts, .. }
                if secrets.iter().any(|s| s.value == secret) =>
            {
                written.extend(hosts.iter().map(|h| (h.value.to_string(), &h.at)));
            }
            ServerKind::Remote { token: true, .. } if server_token_name(&server.name) == secret => {
                token_server = Some(&server.at);
            }
            _ => {}
        }
    }
    let machine = files.machine.as_ref().map(|m| m.name());
    // A command server's secret is bound in its own policy, never the agent's.
    super::bindings::all(config, policy)
        .iter()
        .find(|b| b.name == secret)
        .map(|b| {
            b.hosts
                .iter()
                .map(|h| {
                    let pattern = h.to_string();
                    let at = written
                        .iter()
                        .find(|(p, _)| *p == pattern)
                        .map(|(_, at)| *at)
                        .or(token_server);
                    BoundHost {
                        place: at
                            .map(|a| format!("{}:{}", a.file, a.line))
                            .unwrap_or_default(),
                        from_project: at.is_none_or(|a| Some(&*a.file) != machine.as_deref()),
                        pattern,
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `api.github.com, *.example.com`, or `no host`.
/// Says so when the store keeps nothing after this command (the memory store, for tests).
pub(super) fn warn_if_not_kept(store: &dyn CredentialStore) {
    if !store.persistent() {
        eprintln!(
            "warning: the {} keeps values only while this command runs: nothing was saved \
             (FENZI_CREDSTORE=memory is for tests)",
            store.backend()
        );
    }
}

fn host_list(hosts: &[String]) -> String {
    if hosts.is_empty() {
        "no host".to_string()
    } else {
        hosts.join(", ")
    }
}

/// Says where the value will go, before it is asked for, so the user can stop there. On a terminal,
/// when this folder's own file binds any of the hosts (a cloned repository's file could name a host
/// of its own), asks to go on. `Ok(false)`: the user said no.
fn approve_hosts(secret: &str, hosts: &[BoundHost]) -> Result<bool> {
    if hosts.is_empty() {
        eprintln!(
            "{secret} is bound to no host here: no session will send it anywhere until it is \
             stored again from a folder whose policy binds it to a host"
        );
        return Ok(true);
    }
    eprintln!("{secret} will be sent only to:");
    let width = hosts.iter().map(|h| h.pattern.len()).max().unwrap_or(0);
    for h in hosts {
        let whose = if h.from_project {
            "this folder's policy"
        } else {
            "your machine policy"
        };
        eprintln!("  {:<width$}  {} ({whose})", h.pattern, h.place);
    }
    if !std::io::stdin().is_terminal() || !hosts.iter().any(|h| h.from_project) {
        return Ok(true);
    }
    eprint!("Store it for these hosts? [y/N] ");
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .context("cannot read the answer from the terminal")?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
}

/// Storing a value for no host where one is stored for some would leave it usable nowhere: that
/// is refused, naming the hosts it is stored for.
fn refuse_to_unbind(store: &dyn CredentialStore, secret: &str) -> Result<()> {
    if let Some(StoredSecret {
        hosts: Some(hosts), ..
    }) = store.get(secret).ok().flatten()
        && !hosts.is_empty()
    {
        bail!(
            "{secret} is stored for {}, and this folder's policy binds it to no host: storing it \
             here would leave it usable nowhere, so nothing was stored. Store it from a folder \
             whose policy binds it, or delete it first with --delete",
            host_list(&hosts)
        );
    }
    Ok(())
}

/// Reads the value: from the terminal without echo, or one line of stdin.
fn read_value(target: &Target) -> Result<SecretValue> {
    let raw = if std::io::stdin().is_terminal() {
        let prompt = format!("Value for {}, not shown: ", target.label());
        Zeroizing::new(rpassword::prompt_password(prompt).context("cannot read from the terminal")?)
    } else {
        let mut buf = Zeroizing::new(Vec::with_capacity(256));
        std::io::stdin()
            .lock()
            .take(MAX_SECRET_BYTES as u64 + 2)
            .read_to_end(&mut buf)
            .context("cannot read the value from stdin")?;
        if buf.ends_with(b"\n") {
            buf.pop();
        }
        let bytes = std::mem::take(&mut *buf);
        match String::from_utf8(bytes) {
            Ok(s) => Zeroizing::new(s),
            Err(e) => {
                drop(Zeroizing::new(e.into_bytes()));
                bail!(
                    "the value for {} is not UTF-8 text; nothing was stored",
                    target.secret
                );
            }
        }
    };
    // The proxy's own checks: a value stored here can never later stop it from starting.
    SecretValue::new(&target.secret, raw).map_err(|e| anyhow!("{e}; nothing was stored"))
}

pub fn run(args: Args) -> Result<ExitCode> {
    let files = Files::read(&args.files)?;
    let config = match files.load() {
        Ok(c) => c,
        // A broken policy must not stop deleting a secret named directly. Storing needs the
        // policy: the value is stored for the hosts it binds (and storing it for none would
        // replace a good entry with one no session uses).
        Err(e) if args.delete && is_valid_secret_name(&args.name) && args.secret.is_none() => {
            eprintln!(
                "warning: the policy does not load, so `{}` is taken as a secret name:\n{e}",
                args.name
            );
            None
        }
        Err(e) if !args.delete => {
            return Err(e.context(
                "nothing was stored: a value is stored for the hosts the policy binds it to, so \
                 the policy must load first",
            ));
        }
        Err(e) => return Err(e),
    };
    let target = resolve(&args, config.as_ref())?;
    let store = credstore::open().map_err(|e| anyhow!("{e}"))?;

    if args.delete {
        if store.delete(&target.secret)? {
            println!("deleted {} from the {}", target.label(), store.backend());
        } else {
            println!(
                "{} was not stored in the {}",
                target.secret,
                store.backend()
            );
        }
        return Ok(ExitCode::SUCCESS);
    }

    let bound = match &config {
        Some(config) => bound_hosts(config, &Policy::from_config(config), &files, &target.secret),
        None => Vec::new(),
    };
    if bound.is_empty() {
        refuse_to_unbind(store.as_ref(), &target.secret)?;
    }
    if !approve_hosts(&target.secret, &bound)? {
        eprintln!("nothing was stored");
        return Ok(ExitCode::from(1));
    }
    let hosts: Vec<String> = bound.into_iter().map(|h| h.pattern).collect();
    let value = read_value(&target)?;
    store.set(&target.secret, &StoredSecret::new(value, hosts.clone()))?;
    println!(
        "stored {} in the {}, for {}",
        target.label(),
        store.backend(),
        host_list(&hosts)
    );
    warn_if_not_kept(store.as_ref());
    Ok(ExitCode::SUCCESS)
}
