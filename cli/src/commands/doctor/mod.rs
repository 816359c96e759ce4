//! `fenzi doctor`: can `fenzi run` isolate a command on this machine, and if not, what to change.
//! It starts one real sandbox (the only proof), then reads the settings that explain a failure,
//! the credential store, the directories fenzi keeps files in, and the agents on `PATH`.
//! Exit 0 when `fenzi run` can isolate here, 1 when it cannot.

mod checks;

use anyhow::Result;
use checks::{Finding, Status};
use clap::Parser;
use std::process::ExitCode;

/// Check that `fenzi run` can isolate a command here, and say what to change when it cannot.
///
/// Starts a trial sandbox exactly as `fenzi run` would (user, PID, network, mount and IPC
/// namespaces; Landlock; seccomp) and runs `fenzi --version` inside it, then reports the kernel
/// settings behind each part, the credential store for secrets, the directories fenzi keeps its
/// policy, audit logs and session files in, and the agents found on PATH.
///
/// Exit status: 0 when `fenzi run` can isolate a command here (warnings allowed), 1 when it
/// cannot.
#[derive(Debug, Parser)]
#[command(
    after_help = "Examples:\n  fenzi doctor\n  fenzi doctor --json | jq '.checks[] | select(.status != \"ok\")'"
)]
pub struct Args {
    /// Print the findings as one JSON object: {"can_isolate": BOOL, "checks": [{check, status, found, fix}]}.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let findings = gather();
    let can_isolate = !findings.iter().any(|f| f.status == Status::Fail);
    if args.json {
        let doc = serde_json::json!({ "can_isolate": can_isolate, "checks": findings });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print_text(&findings, can_isolate);
    }
    Ok(if can_isolate {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn gather() -> Vec<Finding> {
    let kernel = fenzi_proxy::sandbox::probe::read_kernel();
    let trial = checks::trial_sandbox();
    let mut findings = vec![
        checks::sandbox(&trial),
        checks::user_namespaces(&kernel, &trial),
        checks::landlock(&kernel),
        checks::seccomp(&kernel, &trial),
        checks::keyring(),
    ];
    findings.extend(checks::directories());
    findings.extend(checks::agents());
    findings
}

fn print_text(findings: &[Finding], can_isolate: bool) {
    let colour = crate::output::colour_enabled_for_stdout();
    let paint = |code: &str, text: &str| {
        if colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    };
    let width = findings.iter().map(|f| f.check.len()).max().unwrap_or(0);
    for f in findings {
        let label = match f.status {
            Status::Ok => paint("32", "ok  "),
            Status::Warn => paint("33", "warn"),
            Status::Fail => paint("31;1", "FAIL"),
            Status::Info => paint("2", "info"),
        };
        println!("{label}  {:width$}  {}", f.check, f.found);
        if let Some(fix) = &f.fix {
            println!("      {:width$}  fix: {fix}", "");
        }
    }
    println!();
    if can_isolate {
        println!("fenzi run can isolate a command on this machine.");
    } else {
        println!(
            "fenzi run cannot isolate a command on this machine until the FAIL lines above are fixed."
        );
    }
}
