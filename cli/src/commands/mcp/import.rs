//! `fenzi mcp import [--from F] [--dry-run] [--json]`: brings the servers of a Claude Code
//! `.mcp.json` or a Cursor `.cursor/mcp.json` (`{"mcpServers": {NAME: {...}}}`) into
//! `./fenzi.yaml`, and says what it left out and why.
//!
//! - Remote servers (`"type": "http"`, or a `url` without a type) come in with every tool allowed
//!   and a warning to narrow them. Header values are never copied: an `Authorization` header
//!   becomes `token: true` and the `fenzi mcp token NAME` line to run; other headers are named in
//!   a warning.
//! - SSE servers (`"type": "sse"`, or an untyped url ending in `/sse`) are left out: only
//!   Streamable HTTP gets per-tool rules.
//! - Local servers (`"type": "stdio"`, or a `command`) come in as `command: [...]` with every tool
//!   allowed and a warning to narrow them (fenzi checks them per tool behind its bridge, DESIGN
//!   §18); a name that cannot be a DNS label is left out by the loader. Their `env` values are
//!   never copied. A server whose variables are all secrets fenzi knows the hosts of
//!   (today `DIGITALOCEAN_API_TOKEN` → `api.digitalocean.com`) comes in with `secrets` and
//!   `hosts`; one with any other variable is left out with the `fenzi mcp add` line to write.
//!   One whose arguments look like they carry a credential (`--api-key=…`, `--token X`) is left
//!   out rather than have it copied into the policy file.
//! - Servers the policy already has (machine or project file) are left out ("already present").
//! - Every server that comes in goes through the same checked edit as `fenzi mcp add`; one the
//!   policy refuses (a url it does not accept, a host clash) is left out with the loader's reason.
//!
//! `--dry-run` computes the same plan and writes nothing; `--json` prints it as one document.
//! Values from `env` and `headers` are never read into the output.

use super::entry::{Body, NewEntry};
use super::files::{
    FileArgs, Files, PolicyFile, check_edit, parse_before, parse_one, write_atomic,
};
use super::yaml_edit;
use anyhow::{Context, Result, bail};
use fenzi_policy::config::Config;
use fenzi_policy::server_name::is_valid_server_name;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Secrets whose hosts fenzi knows: variable → hosts it is sent to.
pub const KNOWN_SECRETS: &[(&str, &[&str])] =
    &[("DIGITALOCEAN_API_TOKEN", &["api.digitalocean.com"])];

const DEFAULT_SOURCES: &[&str] = &[".mcp.json", ".cursor/mcp.json"];

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Without --from, reads ./.mcp.json and ./.cursor/mcp.json (those that exist).
Examples:
  fenzi mcp import --dry-run          what would be added and left out, and why
  fenzi mcp import --json --dry-run   the same as one JSON document
  fenzi mcp import --from ~/.cursor/mcp.json")]
pub struct Args {
    /// The file to read (Claude Code or Cursor format).
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
    /// Show the plan; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the plan as one JSON document.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    files: FileArgs,
}

pub struct Added {
    pub source: String,
    pub entry: NewEntry,
    pub warnings: Vec<String>,
    pub next: Vec<String>,
}

pub struct LeftOut {
    pub name: String,
    pub source: String,
    pub reason: String,
    pub instead: Option<String>,
}

/// What one server of the source file turns into.
enum Outcome {
    Add {
        entry: NewEntry,
        warnings: Vec<String>,
        next: Vec<String>,
    },
    Leave {
        reason: String,
        instead: Option<String>,
    },
}

fn leave(reason: impl Into<String>) -> Outcome {
    Outcome::Leave {
        reason: reason.into(),
        instead: None,
    }
}

/// A word as a POSIX shell reads it back.
fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// A server name or JSON key as it may be shown (control characters escaped).
fn shown(s: &str) -> String {
    s.chars().flat_map(char::escape_debug).take(80).collect()
}

/// The flag part of an argument that looks like it carries a credential.
fn credential_arg(args: &[String]) -> Option<String> {
    const WORDS: &[&str] = &[
        "token",
        "secret",
        "passw",
        "apikey",
        "api-key",
        "api_key",
        "auth",
        "credential",
        "bearer",
    ];
    for (i, a) in args.iter().enumerate() {
        let (flag, inline_value) = match a.split_once('=') {
            Some((f, _)) => (f, true),
            None => (a.as_str(), false),
        };
        let lower = flag.to_ascii_lowercase();
        let takes_next = flag.starts_with('-') && i + 1 < args.len();
        if WORDS.iter().any(|w| lower.contains(w)) && (inline_value || takes_next) {
            return Some(shown(flag));
        }
    }
    None
}

fn strings(v: Option<&Value>) -> Option<Vec<String>> {
    match v {
        None | Some(Value::Null) => Some(vec![]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| i.as_str().map(str::to_string))
            .collect(),
        _ => None,
    }
}

fn keys(v: Option<&Value>) -> Option<Vec<String>> {
    match v {
        None | Some(Value::Null) => Some(vec![]),
        Some(Value::Object(m)) => Some(m.keys().cloned().collect()),
        _ => None,
    }
}

/// Decides one server from the source file (before the policy check).
fn outcome(name: &str, server: &Value) -> Outcome {
    let Some(obj) = server.as_object() else {
        return leave("its entry is not a JSON object");
    };
    const KNOWN_FIELDS: &[&str] = &["type", "url", "headers", "command", "args", "env"];
    let mut warnings = Vec::new();
    if obj.contains_key("envFile") {
        return leave(
            "it reads variables from an env file, which fenzi does not copy; add it with \
             `fenzi mcp add` and store its secrets with `fenzi mcp token`",
        );
    }
    for k in obj.keys().filter(|k| !KNOWN_FIELDS.contains(&k.as_str())) {
        warnings.push(format!("field `{}` is not copied", shown(k)));
    }
    let url = obj.get("url");
    let command = obj.get("command");
    let kind = match obj.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(_) => return leave("its `type` is not a string"),
        None if url.is_some() => {
            if url
                .and_then(Value::as_str)
                .is_some_and(|u| u.trim_end_matches('/').ends_with("/sse"))
            {
                "sse"
            } else {
                "http"
            }
        }
        None if command.is_some() => "stdio",
        None => return leave("it has neither a `url` nor a `command`"),
    };
    match kind {
        "sse" => {
            leave("it uses the SSE transport: only servers over Streamable HTTP get per-tool rules")
        }
        "http" | "streamable-http" | "streamableHttp" => {
            remote(name, url, obj.get("headers"), warnings)
        }
        "stdio" => local(name, command, obj.get("args"), obj.get("env"), warnings),
        other => leave(format!(
            "its type `{}` is not one fenzi knows",
            shown(other)
        )),
    }
}

fn remote(
    name: &str,
    url: Option<&Value>,
    headers: Option<&Value>,
    mut warnings: Vec<String>,
) -> Outcome {
    let Some(url) = url.and_then(Value::as_str) else {
        return leave("it has no `url` string");
    };
    if url.contains("${") {
        return leave(
            "its url uses an environment variable (`${...}`), which fenzi does not expand",
        );
    }
    let Some(header_names) = keys(headers) else {
        return leave("its `headers` is not an object");
    };
    let token = header_names
        .iter()
        .any(|h| h.eq_ignore_ascii_case("authorization"));
    for h in header_names
        .iter()
        .filter(|h| !h.eq_ignore_ascii_case("authorization"))
    {
        warnings.push(format!(
            "header `{}` is not copied: fenzi puts only a stored token (Authorization) on requests \
             to this server",
            shown(h)
        ));
    }
    warnings.push(format!(
        "every tool is allowed; narrow it to the tools agents need (`fenzi mcp add {name} URL \
         --tool T ... --replace`)"
    ));
    let mut next = Vec::new();
    if token {
        next.push(format!("fenzi mcp token {name}"));
    }
    Outcome::Add {
        entry: NewEntry {
            name: name.to_string(),
            body: Body::Remote {
                url: url.to_string(),
                token,
                oauth: false,
                allow: vec!["*".into()],
                deny: vec![],
            },
        },
        warnings,
        next,
    }
}

fn local(
    name: &str,
    command: Option<&Value>,
    args: Option<&Value>,
    env: Option<&Value>,
    mut warnings: Vec<String>,
) -> Outcome {
    let Some(program) = command.and_then(Value::as_str).filter(|c| !c.is_empty()) else {
        return leave("it has no `command` string");
    };
    let Some(args) = strings(args) else {
        return leave("its `args` is not a list of strings");
    };
    let Some(vars) = keys(env) else {
        return leave("its `env` is not an object");
    };
    let mut command = vec![program.to_string()];
    command.extend(args);
    if command.iter().any(|a| a.contains("${")) {
        return leave(
            "its command uses an environment variable (`${...}`), which fenzi does not expand",
        );
    }
    if let Some(flag) = credential_arg(&command[1..]) {
        return leave(format!(
            "its argument `{flag}` looks like it carries a credential, which fenzi does not copy \
             into a policy file; if the server can read it from a variable, add it with \
             `fenzi mcp add {name} --tool T --secret VAR --host HOST -- CMD ...`"
        ));
    }
    let known = |v: &str| KNOWN_SECRETS.iter().find(|(k, _)| *k == v);
    let unknown: Vec<&String> = vars.iter().filter(|v| known(v).is_none()).collect();
    if !unknown.is_empty() {
        let mut line = format!("fenzi mcp add {} --tool T", shell_word(name));
        for v in &unknown {
            line.push_str(&format!(" --secret {}", shell_word(v)));
        }
        line.push_str(" --host HOST --");
        for a in &command {
            line.push(' ');
            line.push_str(&shell_word(a));
        }
        let names = unknown
            .iter()
            .map(|v| shown(v))
            .collect::<Vec<_>>()
            .join(", ");
        return Outcome::Leave {
            reason: format!(
                "it reads {names} from its environment, and fenzi does not know which hosts \
                 {} be sent to: write the entry yourself, with the hosts, then store the values \
                 with `fenzi mcp token`",
                if unknown.len() == 1 {
                    "that may"
                } else {
                    "those may"
                }
            ),
            instead: Some(line),
        };
    }
    let mut hosts: Vec<String> = Vec::new();
    for v in &vars {
        if let Some((_, hs)) = known(v) {
            for h in *hs {
                if !hosts.iter().any(|x| x == h) {
                    hosts.push(h.to_string());
                }
            }
        }
    }
    let next = vars
        .iter()
        .map(|v| format!("fenzi mcp token {v}"))
        .collect();
    warnings.push(format!(
        "every tool is allowed; narrow it to the tools agents need (`fenzi mcp add {name} --tool \
         T ... --replace -- CMD ...`)"
    ));
    Outcome::Add {
        entry: NewEntry {
            name: name.to_string(),
            body: Body::Local {
                command,
                secrets: vars,
                hosts,
                run_host: false,
                allow: vec!["*".into()],
                deny: vec![],
            },
        },
        warnings,
        next,
    }
}

fn sources(args: &Args) -> Result<Vec<PathBuf>> {
    if let Some(f) = &args.from {
        return Ok(vec![f.clone()]);
    }
    let found: Vec<PathBuf> = DEFAULT_SOURCES
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect();
    if found.is_empty() {
        bail!("no .mcp.json or .cursor/mcp.json here; name a file with --from FILE");
    }
    Ok(found)
}

/// The servers of a source file, in the file's order (the import adds them in that order, and
/// the first of two at one url wins).
struct Ordered(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Ordered {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of servers")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Ordered, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    out.push(entry);
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(Visit)
    }
}

#[derive(serde::Deserialize)]
struct SourceFile {
    #[serde(rename = "mcpServers")]
    mcp_servers: Option<Ordered>,
}

fn read_servers(path: &Path) -> Result<Vec<(String, Value)>> {
    let bytes = crate::config_files::read_bounded(path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    // serde_json's messages give line and column, never the text around them.
    let doc: SourceFile = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a valid MCP server list", path.display()))?;
    match doc.mcp_servers {
        Some(Ordered(servers)) => Ok(servers),
        None => bail!("{} has no `mcpServers` object", path.display()),
    }
}

/// The loader's messages without their positions (which point into a text not written).
fn messages(errs: &fenzi_policy::config::ConfigErrors) -> String {
    errs.0
        .iter()
        .map(|e| e.message.clone())
        .collect::<Vec<_>>()
        .join("; ")
}

/// The first line of an error, for a one-line reason.
fn first_line(e: &anyhow::Error) -> String {
    e.to_string().lines().next().unwrap_or("").to_string()
}

pub struct Plan {
    pub sources: Vec<String>,
    pub added: Vec<Added>,
    pub left_out: Vec<LeftOut>,
    /// The target's text with the servers added.
    pub text: String,
}

/// What importing the servers of `sources` into `target` (its text, or `version: 1` when it has
/// none) would add and leave out, and the resulting text. `fenzi init` uses it on the text it is
/// about to write.
pub fn make_plan(
    sources: Vec<PathBuf>,
    files: &Files,
    target: &PolicyFile,
    merged: &Config,
) -> Result<Plan> {
    let mut before = parse_before(target)?;
    let mut text = target
        .text
        .clone()
        .unwrap_or_else(|| "version: 1\n".to_string());
    let mut plan = Plan {
        sources: vec![],
        added: vec![],
        left_out: vec![],
        text: String::new(),
    };
    for path in sources {
        let source = path.display().to_string();
        plan.sources.push(source.clone());
        for (name, server) in read_servers(&path)? {
            let left = |reason: String, instead: Option<String>| LeftOut {
                name: shown(&name),
                source: source.clone(),
                reason,
                instead,
            };
            if let Some(s) = merged.mcp.iter().find(|s| s.name == name) {
                plan.left_out
                    .push(left(format!("already present (in {})", s.at.file), None));
                continue;
            }
            if let Some(a) = plan.added.iter().find(|a| a.entry.name == name) {
                plan.left_out
                    .push(left(format!("already imported from {}", a.source), None));
                continue;
            }
            if !is_valid_server_name(&name) {
                plan.left_out.push(left(
                    "its name is not a fenzi server name (letters, digits, `_`, `.`, `-`, \
                     starting with a letter or digit, at most 64)"
                        .into(),
                    None,
                ));
                continue;
            }
            match outcome(&name, &server) {
                Outcome::Leave { reason, instead } => plan.left_out.push(left(reason, instead)),
                Outcome::Add {
                    entry,
                    warnings,
                    next,
                } => {
                    let tried = yaml_edit::add(&text, &target.name(), &entry)
                        .map_err(anyhow::Error::from)
                        .and_then(|new_text| {
                            if let Err(errs) = parse_one(&new_text, target) {
                                bail!("{}", messages(&errs));
                            }
                            if let Err(errs) =
                                files.load_with_errors(Some((target.origin, &new_text)))
                            {
                                bail!("{}", messages(&errs));
                            }
                            let parsed = check_edit(
                                files,
                                target,
                                &before,
                                &new_text,
                                &entry.name,
                                Some(&entry.describe()),
                            )?;
                            Ok((new_text, parsed))
                        });
                    match tried {
                        Ok((new_text, parsed)) => {
                            text = new_text;
                            before = parsed;
                            plan.added.push(Added {
                                source: source.clone(),
                                entry,
                                warnings,
                                next,
                            });
                        }
                        Err(e) => plan.left_out.push(left(
                            format!("the policy refuses it: {}", first_line(&e)),
                            None,
                        )),
                    }
                }
            }
        }
    }
    plan.text = text;
    Ok(plan)
}

fn added_json(a: &Added) -> Value {
    let mut v = json!({
        "name": a.entry.name,
        "source": a.source,
        "warnings": a.warnings,
        "next": a.next,
    });
    let o = v.as_object_mut().expect("object literal");
    match &a.entry.body {
        Body::Remote {
            url,
            token,
            oauth: _,
            allow,
            deny,
        } => {
            o.insert("kind".into(), json!("remote"));
            o.insert("url".into(), json!(url));
            o.insert("token".into(), json!(token));
            o.insert("tools".into(), json!({"allow": allow, "deny": deny}));
        }
        Body::Local {
            command,
            secrets,
            hosts,
            allow,
            deny,
            ..
        } => {
            o.insert("kind".into(), json!("local"));
            o.insert("command".into(), json!(command));
            o.insert("secrets".into(), json!(secrets));
            o.insert("hosts".into(), json!(hosts));
            o.insert("tools".into(), json!({"allow": allow, "deny": deny}));
        }
        Body::Account { .. } => {
            o.insert("kind".into(), json!("account"));
        }
    }
    v
}

pub fn run(args: Args) -> Result<ExitCode> {
    let files = Files::read(&args.files)?;
    let merged = files.load()?.unwrap_or_default();
    let target = &files.project;
    let plan = make_plan(sources(&args)?, &files, target, &merged)?;
    let write = !args.dry_run && !plan.added.is_empty();
    if write {
        write_atomic(target, &plan.text)?;
    }

    if args.json {
        let doc = json!({
            "sources": plan.sources,
            "target": target.name(),
            "dry_run": args.dry_run,
            "written": write,
            "add": plan.added.iter().map(added_json).collect::<Vec<_>>(),
            "left_out": plan.left_out.iter().map(|l| json!({
                "name": l.name,
                "source": l.source,
                "reason": l.reason,
                "instead": l.instead,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(ExitCode::SUCCESS);
    }

    for a in &plan.added {
        let what = summary(a);
        println!("add    {}  ({what}) from {}", a.entry.name, a.source);
        for w in &a.warnings {
            println!("         warning: {w}");
        }
        for n in &a.next {
            println!("         then run: {n}");
        }
    }
    for l in &plan.left_out {
        println!("leave  {}  from {}: {}", l.name, l.source, l.reason);
        if let Some(i) = &l.instead {
            println!("         instead: {i}");
        }
    }
    let n = plan.added.len();
    if args.dry_run {
        println!(
            "dry run: would add {n} server(s) to {}; nothing was written",
            target.name()
        );
    } else if write {
        println!("added {n} server(s) to {}", target.name());
    } else {
        println!("nothing to add to {}", target.name());
    }
    Ok(ExitCode::SUCCESS)
}

/// One added server in a few words: its kind, url or command, token or secrets.
pub fn summary(a: &Added) -> String {
    match &a.entry.body {
        Body::Remote { url, token, .. } => format!(
            "remote {url}{}, every tool allowed",
            if *token { ", token: true" } else { "" }
        ),
        Body::Local {
            command, secrets, ..
        } => format!(
            "local {}{}, every tool allowed",
            command.join(" "),
            if secrets.is_empty() {
                String::new()
            } else {
                format!(", secrets: {}", secrets.join(", "))
            }
        ),
        Body::Account { .. } => "account".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_arguments_are_spotted_without_their_value() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            credential_arg(&a(&["--api-key=abc123"])).as_deref(),
            Some("--api-key")
        );
        assert_eq!(
            credential_arg(&a(&["--token", "abc123"])).as_deref(),
            Some("--token")
        );
        assert_eq!(credential_arg(&a(&["-y", "@x/server", "/sandbox"])), None);
        // A flag with nothing after it carries nothing.
        assert_eq!(credential_arg(&a(&["--no-auth"])), None);
    }

    #[test]
    fn shell_words_round_trip() {
        assert_eq!(shell_word("@x/y"), "@x/y");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
    }
}
