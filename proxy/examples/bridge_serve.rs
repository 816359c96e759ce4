//! Serves one local (stdio) MCP server through fenzi's bridge on a loopback port, for tests that
//! drive the bridge with peers nobody here wrote (scripts/conformance's bridge leg):
//!
//!     bridge_serve [--sandbox STATE_DIR] -- COMMAND [ARGS...]
//!
//! Prints `listening on 127.0.0.1:PORT` once bound; serves `/mcp` (and `/sse`, `/messages`) over
//! plain HTTP/1.1 until killed. The server runs on the host as a plain child, or with `--sandbox`
//! in a sandbox of its own whose only writable place is STATE_DIR. Its stderr goes to ours.

use fenzi_proxy::bridge::{
    Bridge, BridgeLog, HostCommand, Launch, SandboxLauncher, SandboxedCommand,
};
use std::ffi::OsString;
use std::sync::Arc;

/// The server's stderr and the bridge's notes, on our stderr.
struct StderrLog;

impl BridgeLog for StderrLog {
    fn stderr_line(&self, server: &str, line: &str) {
        eprintln!("{server}: {line}");
    }
    fn note(&self, server: &str, what: &str) {
        eprintln!("{server} (bridge): {what}");
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let mut sandbox = None;
    if args.first().is_some_and(|a| a == "--sandbox") {
        sandbox = Some(std::path::PathBuf::from(args.remove(1)));
        args.remove(0);
    }
    if args.first().is_some_and(|a| a == "--") {
        args.remove(0);
    }
    assert!(
        !args.is_empty(),
        "usage: bridge_serve [--sandbox STATE_DIR] -- COMMAND [ARGS...]"
    );
    let program = args.remove(0);
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    let launch: Box<dyn Launch> = match sandbox {
        Some(state_dir) => Box::new(
            SandboxLauncher::new(SandboxedCommand {
                program,
                args,
                env: vec![("LANG".into(), "C.UTF-8".into())],
                path,
                state_dir,
                cwd: None,
                overlays: vec![],
                transparent: None,
            })
            .expect("the launcher thread starts"),
        ),
        None => Box::new(HostCommand {
            program,
            args,
            env: vec![("PATH".into(), path), ("LANG".into(), "C.UTF-8".into())],
            cwd: std::env::current_dir().expect("a current directory"),
        }),
    };
    let bridge = Arc::new(Bridge::new("bridged", launch, Arc::new(StderrLog)));
    bridge.prepare().expect("the server starts");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    println!("listening on {}", listener.local_addr().expect("bound"));
    bridge.serve_on(listener).await;
}
