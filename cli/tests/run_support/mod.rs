//! What the `fenzi run` end-to-end tests share (run.rs, programs.rs): a session's directory and
//! environment (`Env`: policy, XDG directories, an in-memory credential store, caches of its own),
//! a small counting HTTP server on loopback, and the sandbox-availability skip.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A tiny HTTP server on 127.0.0.1 that answers `200 hello` and counts requests.
pub fn http_server() -> (u16, Arc<AtomicUsize>) {
    http_server_on(TcpListener::bind("127.0.0.1:0").unwrap())
}

/// [`http_server`] on `listener`.
pub fn http_server_on(listener: TcpListener) -> (u16, Arc<AtomicUsize>) {
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            counter.fetch_add(1, Ordering::SeqCst);
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                line.clear();
            }
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
            );
        }
    });
    (port, hits)
}

pub struct Env {
    pub dir: PathBuf,
    /// The `fenzi` binary to run: the one cargo built, unless a test needs a copy of it.
    pub fenzi: PathBuf,
}

impl Env {
    pub fn new(name: &str, policy: &str) -> Env {
        let dir =
            std::env::temp_dir().join(format!("fenzi-run-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("xdg")).unwrap();
        std::fs::write(dir.join("fenzi.yaml"), policy).unwrap();
        Env {
            dir,
            fenzi: PathBuf::from(env!("CARGO_BIN_EXE_fenzi")),
        }
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(&[], args).output().expect("fenzi runs")
    }

    /// `fenzi run ARGS`, started through `wrapper` (e.g. `setpriv ...`) when it is not empty.
    pub fn command(&self, wrapper: &[&str], args: &[&str]) -> Command {
        let mut command = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(&self.fenzi);
                c
            }
            None => Command::new(&self.fenzi),
        };
        command
            .arg("run")
            .args(args)
            .current_dir(&self.dir)
            .env("XDG_CONFIG_HOME", self.dir.join("xdg"))
            .env("XDG_STATE_HOME", self.dir.join("state"))
            .env("XDG_CACHE_HOME", self.dir.join("cache"))
            .env("XDG_RUNTIME_DIR", self.dir.join("runtime"))
            .env("FENZI_CREDSTORE", "memory")
            .env("NO_COLOR", "1")
            .env(
                "FENZI_SECRET_SHOULD_NOT_LEAK",
                "this-value-must-stay-outside",
            )
            .env("HTTPS_PROXY", "http://192.0.2.1:9");
        command
    }

    pub fn audit_log(&self) -> String {
        let dir = self.dir.join("state/fenzi/audit");
        let mut text = String::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "jsonl") {
                std::fs::File::open(path)
                    .unwrap()
                    .read_to_string(&mut text)
                    .unwrap();
            }
        }
        text
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Says loudly, on the real stderr (not the captured one), that a test did not run.
pub fn skip(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "\n*** SKIPPED `{test}`: {why}\n");
}

/// [`skip`] for a test the sandbox cannot run here (`why`); a failure instead under
/// `FENZI_REQUIRE_SANDBOX`, which says it can.
pub fn sandbox_unavailable(test: &str, why: &str) {
    assert!(
        std::env::var_os("FENZI_REQUIRE_SANDBOX").is_none(),
        "{test}: the sandbox cannot run here ({why}) but FENZI_REQUIRE_SANDBOX is set"
    );
    skip(test, why);
}

pub fn sandbox_available() -> bool {
    let ok = Command::new("unshare")
        .args(["--user", "--net", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        sandbox_unavailable(
            "a `fenzi run` test",
            "user namespaces are unavailable on this machine",
        );
    }
    ok
}

pub fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

pub fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}
