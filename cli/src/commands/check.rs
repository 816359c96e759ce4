//! `fenzi check`: validates the policy (project + machine file) and runs expected-decision cases against
//! the same engine the proxy uses, with each pinned server's definitions from its lock file (a pinned
//! server without a lock entry is a problem). Made for CI: `--format github` prints workflow
//! annotations. Under a team policy (`--team-policy URL --team-key FILE`, or the machine file's
//! `team:`) the files are checked as narrowing it, and `--show-policy` prints the merged result by
//! layer (`check_effective`).

use crate::config_files::{self, ConfigText, PolicyArgs};
use anyhow::Result;
use clap::ValueEnum;
use fenzi_policy::cases::{self, Case, CaseResult, Expect};
use fenzi_policy::config::{Config, ConfigError, Origin};
use fenzi_policy::engine::Policy;
use fenzi_policy::mcp::inventory::Inventory;
use fenzi_policy::pins::Lock;
use fenzi_proxy::lock_file::read_lock;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  fenzi check                                  validate ./fenzi.yaml (and the machine file)
  fenzi check --cases testdata/cases/demo.cases.yaml
  fenzi check --format github --cases ci.cases.yaml   annotations for GitHub Actions
  fenzi check --team-policy https://policy.example.com/fenzi.yaml --team-key team.pub --show-policy
                                               the team policy, narrowed by the machine file and the
                                               project: each host, server and secret with its layer

The team policy can also come from the machine file (`team: {url, key}`); the flags win. It is
fetched and checked as a session would (signature, serial, the kept copy); with no good copy the
check stops with exit 2.

Exit status: 0 the policy is valid and every case got its expected decision; 1 it is not; 2 usage error
(a file that cannot be read, a malformed cases file).")]
pub struct Args {
    #[command(flatten)]
    policy: PolicyArgs,
    /// A YAML file of requests and the decision each must get (see testdata/cases/).
    #[arg(long, value_name = "FILE")]
    cases: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    #[command(flatten)]
    team: crate::team::TeamArgs,
    /// Extra root certificates (PEM) trusted for fetching the team policy, beside the public
    /// roots. Repeatable.
    #[arg(long, value_name = "PEM")]
    upstream_ca: Vec<PathBuf>,
    /// Also print the effective policy (the layers merged), each element with the layer it comes
    /// from: team, machine or project. With --format json, the `policy` member.
    #[arg(long)]
    show_policy: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
    Github,
}

struct CaseRun {
    case: Case,
    result: CaseResult,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let format = args.format;
    match check(args) {
        // With --format json every outcome is one JSON document on stdout, usage errors included.
        Err(e) if format == Format::Json => {
            let doc = serde_json::json!({ "error": { "message": format!("{e:#}"), "exit": 2 } });
            println!(
                "{}",
                serde_json::to_string_pretty(&doc).expect("JSON values serialise")
            );
            Ok(ExitCode::from(2))
        }
        other => other,
    }
}

fn check(args: Args) -> Result<ExitCode> {
    let cases_text = match &args.cases {
        Some(p) => Some(config_files::read(p)?),
        None => None,
    };
    let cases = match &cases_text {
        Some(ConfigText { text, name }) => cases::parse(text, name)?,
        None => vec![],
    };

    let roots = crate::session::upstream_roots(&args.upstream_ca)?;
    let (mut loaded, team) = crate::team::load(&args.policy, &args.team, &roots)?;
    // DESIGN §17: a `programs:` path where a sandbox can write must be pinned by its content.
    if let Ok(cfg) = &loaded.result {
        let writable = super::run::protect::sandbox_writable_roots(&args.policy.config, &[]);
        let unpinned = super::run::protect::unpinned_programs(cfg, &writable);
        if !unpinned.is_empty() {
            loaded.result = Err(fenzi_policy::config::ConfigErrors(unpinned));
        }
    }
    let project = loaded.project;
    let machine = args.policy.machine_path().map(|p| p.display().to_string());
    let layers = super::check_effective::Layers {
        team: team.as_ref(),
        machine: machine.as_deref(),
        project: &project.name,
    };
    let shown = match (&loaded.result, args.show_policy) {
        (Ok(cfg), true) => Some(cfg),
        _ => None,
    };
    let effective_text = shown.map(|cfg| super::check_effective::text(cfg, &layers));
    let mut extra = serde_json::Map::new();
    if let Some(t) = &team {
        extra.insert(
            "team".into(),
            serde_json::json!({
                "url": t.url,
                "serial": t.serial,
                "source": match t.source {
                    fenzi_policy::team::Source::Fetched => "fetched",
                    fenzi_policy::team::Source::Kept => "kept",
                },
            }),
        );
    }
    if let Some(cfg) = shown {
        extra.insert("policy".into(), super::check_effective::json(cfg, &layers));
    }
    let (errors, runs) = match loaded.result {
        Err(e) => (e.0, vec![]),
        Ok(cfg) => {
            let policy = Policy::from_config(&cfg);
            let (inventories, lock_problems) = pinned_inventories(&cfg, &args.policy);
            let runs = cases
                .into_iter()
                .map(|case| CaseRun {
                    result: cases::run(&policy, &inventories, &case),
                    case,
                })
                .collect();
            (lock_problems, runs)
        }
    };
    let cases_file = cases_text.as_ref().map(|c| c.name.as_str()).unwrap_or("");
    match args.format {
        Format::Text => {
            if let Some(t) = &team {
                println!("{}", t.note());
            }
            print_text(&project.name, &errors, &runs, cases_file);
            if let Some(text) = &effective_text {
                print!("{text}");
            }
        }
        Format::Json => print_json(&project.name, &errors, &runs, cases_file, extra),
        Format::Github => print_github(&errors, &runs, cases_file),
    }
    let ok = errors.is_empty() && runs.iter().all(|r| r.result.passed);
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The inventories the cases run against: each pinned server's lock entry, from the lock beside
/// the file that declared it. A pinned server whose lock cannot be read or has no entry for it is a
/// problem: the proxy would pin it at first sight from whatever the server lists then, which is
/// not what a reviewed policy should leave to chance.
fn pinned_inventories(cfg: &Config, files: &PolicyArgs) -> (cases::Inventories, Vec<ConfigError>) {
    let locks = files.lock_files();
    let mut inventories = cases::Inventories::new();
    let mut problems = Vec::new();
    let mut read: Vec<(Origin, Result<Lock, String>)> = Vec::new();
    for server in cfg.mcp.iter().filter(|s| s.surface.pin) {
        let Some(path) = locks.for_origin(server.origin) else {
            continue;
        };
        let lock = match read.iter().find(|(o, _)| *o == server.origin) {
            Some((_, lock)) => lock.clone(),
            None => {
                let lock = read_lock(path).map_err(|e| e.to_string());
                read.push((server.origin, lock.clone()));
                lock
            }
        };
        let entry = match lock {
            Ok(lock) => lock.servers.get(&server.name).cloned(),
            Err(message) => {
                problems.push(ConfigError {
                    at: Some(server.at.clone()),
                    message,
                    hint: Some(format!(
                        "fix or delete it, then run `fenzi mcp pin {}`",
                        server.name
                    )),
                });
                continue;
            }
        };
        if entry.is_none() {
            problems.push(ConfigError {
                at: Some(server.at.clone()),
                message: format!(
                    "server {} is pinned (pin: true) but {} has no entry for it",
                    server.name,
                    path.display()
                ),
                hint: Some(format!(
                    "run `fenzi mcp pin {}` to review its tools and pin them, and commit the lock file",
                    server.name
                )),
            });
        }
        inventories.insert(server.name.clone(), Inventory::new(true, entry));
    }
    (inventories, problems)
}

fn expected_text(case: &Case) -> String {
    let verdict = match (case.expect, case.reason) {
        (Expect::Allowed, _) => "allowed".into(),
        (Expect::Denied, Some(r)) => format!("denied {r}"),
        (Expect::Denied, None) => "denied".into(),
    };
    let verdict = match &case.rule {
        Some(rule) => format!("{verdict} by rule {rule}"),
        None => verdict,
    };
    match &case.secrets {
        Some(names) => format!("{verdict}, swapping {}", names_text(names)),
        None => verdict,
    }
}

/// Secret names as a case or a failure shows them (`none` for no secret).
fn names_text(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// The decision a case got, with the secrets it swapped when the case names them.
fn got_text(case: &Case, result: &CaseResult) -> String {
    let verdict = match result.got.reason() {
        None => "allowed".into(),
        Some(r) => format!("denied {r}"),
    };
    match case.secrets {
        Some(_) => format!("{verdict}, swapping {}", names_text(&result.swapped)),
        None => verdict,
    }
}

fn print_text(project: &str, errors: &[ConfigError], runs: &[CaseRun], cases_file: &str) {
    if errors.is_empty() {
        println!("{project}: policy is valid");
    } else {
        for e in errors {
            println!("{e}");
        }
        println!(
            "{project}: {} problem(s); fix them and run `fenzi check` again",
            errors.len()
        );
    }
    for r in runs {
        let status = if r.result.passed { "PASS" } else { "FAIL" };
        print!(
            "{status}  {cases_file}:{}  {}: {}",
            r.case.line,
            r.case.name,
            got_text(&r.case, &r.result)
        );
        if !r.result.passed {
            print!(
                " (expected {}; rule: {}; {})",
                expected_text(&r.case),
                r.result.got.rule,
                r.result.got.message
            );
        }
        println!();
    }
    if !runs.is_empty() {
        let failed = runs.iter().filter(|r| !r.result.passed).count();
        println!("{} passed, {failed} failed", runs.len() - failed);
    }
}

fn print_json(
    project: &str,
    errors: &[ConfigError],
    runs: &[CaseRun],
    cases_file: &str,
    extra: serde_json::Map<String, serde_json::Value>,
) {
    let errors: Vec<_> = errors
        .iter()
        .map(|e| {
            serde_json::json!({
                "file": e.at.as_ref().map(|a| a.file.to_string()),
                "line": e.at.as_ref().map(|a| a.line),
                "column": e.at.as_ref().map(|a| a.column),
                "key": e.at.as_ref().map(|a| a.key.clone()),
                "message": e.message,
                "hint": e.hint,
            })
        })
        .collect();
    let cases: Vec<_> = runs
        .iter()
        .map(|r| {
            serde_json::json!({
                "name": r.case.name,
                "file": cases_file,
                "line": r.case.line,
                "expected": match r.case.expect { Expect::Allowed => "allowed", Expect::Denied => "denied" },
                "expected_reason": r.case.reason.map(|x| x.code()),
                "expected_rule": r.case.rule,
                "expected_secrets": r.case.secrets,
                "decision": r.result.got.verdict.label(),
                "reason": r.result.got.reason().map(|x| x.code()),
                "rule": r.result.got.rule,
                "message": r.result.got.message,
                "rpc": r.result.rpc,
                "tool": r.result.tool,
                "secrets": r.result.swapped,
                "passed": r.result.passed,
            })
        })
        .collect();
    let failed = runs.iter().filter(|r| !r.result.passed).count();
    let mut doc = serde_json::json!({
        "config": { "file": project, "valid": errors.is_empty(), "errors": errors },
        "cases": cases,
        "passed": runs.len() - failed,
        "failed": failed,
    });
    // `team` and `policy` (`--show-policy`), when there are.
    if let Some(obj) = doc.as_object_mut() {
        obj.extend(extra);
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&doc).expect("JSON values serialise")
    );
}

/// GitHub workflow commands: `::error file=F,line=L,col=C,title=T::message` (newlines as %0A).
fn print_github(errors: &[ConfigError], runs: &[CaseRun], cases_file: &str) {
    for e in errors {
        let msg = match &e.hint {
            Some(h) => format!(
                "{}: {} (hint: {h})",
                e.at.as_ref().map_or("", |a| a.key.as_str()),
                e.message
            ),
            None => format!(
                "{}: {}",
                e.at.as_ref().map_or("", |a| a.key.as_str()),
                e.message
            ),
        };
        match &e.at {
            Some(at) => println!(
                "::error file={},line={},col={},title=fenzi policy::{}",
                gh_prop(&at.file),
                at.line,
                at.column,
                gh_data(&msg)
            ),
            None => println!("::error title=fenzi policy::{}", gh_data(&msg)),
        }
    }
    for r in runs.iter().filter(|r| !r.result.passed) {
        let msg = format!(
            "case {:?}: expected {}, got {} (rule: {}; {})",
            r.case.name,
            expected_text(&r.case),
            got_text(&r.case, &r.result),
            r.result.got.rule,
            r.result.got.message
        );
        println!(
            "::error file={},line={},col={},title=fenzi case::{}",
            gh_prop(cases_file),
            r.case.line,
            r.case.column,
            gh_data(&msg)
        );
    }
    let failed = runs.iter().filter(|r| !r.result.passed).count();
    println!(
        "::notice title=fenzi check::{} config problem(s), {} case(s) passed, {failed} failed",
        errors.len(),
        runs.len() - failed
    );
}

fn gh_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

fn gh_prop(s: &str) -> String {
    gh_data(s).replace(':', "%3A").replace(',', "%2C")
}
