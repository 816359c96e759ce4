//! The harness for the `fenzi mcp` table tests: runs the real binary in a temporary directory
//! (XDG_CONFIG_HOME and HOME inside it, no D-Bus, `FENZI_CREDSTORE=memory` unless a case says
//! otherwise) from `*.case` files under `testdata/`.
//!
//! Case format (lines starting with `#` before the first section are comments):
//!
//! ```text
//! === args                     one argument per line (`fenzi` itself is implied)
//! === stdin                    bytes fed to stdin (default: none)
//! === env                      KEY=VALUE lines
//! === file PATH [noeol|crlf]   a file to create (machine file: xdg/fenzi/mcp.yaml)
//! === file PATH from SRC       a file to create with the content of SRC (beside the case)
//! === expect file PATH [noeol|crlf]   its exact content afterwards
//! === expect missing PATH      the file must not exist afterwards
//! === expect stdout            lines that must each appear in stdout
//! === expect stdout json       stdout is this JSON document ($TMP = the temporary directory)
//! === expect stdout exact      stdout is exactly this
//! === expect stderr            lines that must each appear in stderr
//! === expect absent            strings that must appear in neither stdout nor stderr
//! === expect exit N            the exit code (default 0)
//! ```
//!
//! Every `file` without an `expect file` must be byte-identical afterwards: an edit touches only
//! the file it means to, and a refused edit touches nothing.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// `fenzi ARGS` to run in `dir` with a clean, deterministic environment (stdout and stderr piped).
pub fn command(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fenzi"));
    cmd.args(args)
        .current_dir(dir)
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env("HOME", dir.join("home"))
        .env("NO_COLOR", "1")
        .env("FENZI_CREDSTORE", "memory")
        .env_remove("DBUS_SESSION_BUS_ADDRESS")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// [`command`] for `fenzi proxy` in `dir` with the files a test session uses there (`fenzi.yaml`,
/// `audit.jsonl`, `ca/`), listening on a port the kernel picks, then `extra`.
pub fn proxy_command(dir: &Path, extra: &[&str]) -> Command {
    let mut cmd = command(
        dir,
        &[
            "proxy",
            "--config",
            "fenzi.yaml",
            "--listen",
            "127.0.0.1:0",
            "--audit",
            "audit.jsonl",
            "--ca-dir",
            "ca",
        ],
    );
    cmd.args(extra);
    cmd
}

/// The kernel keyring, or `None` (having said so) where this machine has none to use;
/// `FENZI_REQUIRE_KEYRING=1` makes its absence a failure (CI machines have one).
pub fn kernel_keyring_or_skip(test: &str) -> Option<fenzi_proxy::credstore::KernelKeyring> {
    match fenzi_proxy::credstore::KernelKeyring::open() {
        Ok(store) => Some(store),
        Err(e) => {
            assert!(
                std::env::var_os("FENZI_REQUIRE_KEYRING").is_none(),
                "kernel keyring required but unavailable: {e}"
            );
            eprintln!("SKIPPED {test} (no kernel keyring): {e}");
            None
        }
    }
}

/// Captured output as text (invalid UTF-8 replaced), for assertions.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Eight random hex digits, for names that must not meet another run's.
pub fn random_hex() -> String {
    use std::io::Read;
    let mut b = [0u8; 4];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("read /dev/urandom");
    format!("{:08x}", u32::from_le_bytes(b))
}

/// Runs `fenzi ARGS` in `dir` with a clean, deterministic environment.
pub fn fenzi(dir: &Path, args: &[&str], stdin: Option<&[u8]>, env: &[(&str, &str)]) -> Output {
    let mut cmd = command(dir, args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd.spawn().expect("run fenzi");
    if let Some(bytes) = stdin {
        use std::io::Write;
        let mut pipe = child.stdin.take().expect("stdin");
        // fenzi may exit without reading its input (a refused command): that is not our error.
        if let Err(e) = pipe.write_all(bytes) {
            assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
        }
    }
    child.wait_with_output().expect("fenzi output")
}

#[derive(Debug, Default)]
pub struct Case {
    pub args: Vec<String>,
    pub stdin: Option<Vec<u8>>,
    pub env: Vec<(String, String)>,
    pub files: Vec<(String, String)>,
    pub expect_files: BTreeMap<String, String>,
    pub expect_missing: Vec<String>,
    pub stdout_lines: Vec<String>,
    pub stdout_json: Option<String>,
    pub stdout_exact: Option<String>,
    pub stderr_lines: Vec<String>,
    pub absent: Vec<String>,
    pub exit: i32,
}

fn apply_options(body: String, options: &[&str]) -> String {
    let mut body = body;
    if options.contains(&"noeol") && body.ends_with('\n') {
        body.pop();
    }
    if options.contains(&"crlf") {
        body = body.replace('\n', "\r\n");
    }
    body
}

fn lines(body: &str) -> Vec<String> {
    body.lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

pub fn parse(text: &str, name: &str, base: &Path) -> Case {
    let mut case = Case::default();
    let mut sections: Vec<(String, String)> = Vec::new();
    for line in text.split_inclusive('\n') {
        if let Some(header) = line.strip_prefix("=== ") {
            sections.push((header.trim_end().to_string(), String::new()));
        } else if let Some((_, body)) = sections.last_mut() {
            body.push_str(line);
        } else {
            assert!(
                line.starts_with('#') || line.trim().is_empty(),
                "{name}: text before the first section: {line:?}"
            );
        }
    }
    for (header, body) in sections {
        let words: Vec<&str> = header.split_whitespace().collect();
        match words.as_slice() {
            ["args"] => case.args = lines(&body),
            ["stdin", opts @ ..] => case.stdin = Some(apply_options(body, opts).into_bytes()),
            ["env"] => {
                case.env = lines(&body)
                    .into_iter()
                    .map(|l| {
                        let (k, v) = l.split_once('=').expect("KEY=VALUE");
                        (k.to_string(), v.to_string())
                    })
                    .collect()
            }
            ["file", path, "from", src] => {
                let content = std::fs::read_to_string(base.join(src))
                    .unwrap_or_else(|e| panic!("{name}: {src}: {e}"));
                case.files.push((path.to_string(), content));
            }
            ["file", path, opts @ ..] => case
                .files
                .push((path.to_string(), apply_options(body, opts))),
            ["expect", "file", path, opts @ ..] => {
                case.expect_files
                    .insert(path.to_string(), apply_options(body, opts));
            }
            ["expect", "missing", path] => case.expect_missing.push(path.to_string()),
            ["expect", "stdout"] => case.stdout_lines = lines(&body),
            ["expect", "stdout", "json"] => case.stdout_json = Some(body),
            ["expect", "stdout", "exact"] => case.stdout_exact = Some(body),
            ["expect", "stderr"] => case.stderr_lines = lines(&body),
            ["expect", "absent"] => case.absent = lines(&body),
            ["expect", "exit", n] => case.exit = n.parse().expect("exit code"),
            _ => panic!("{name}: unknown section `=== {header}`"),
        }
    }
    assert!(!case.args.is_empty(), "{name}: no `=== args`");
    case
}

/// Runs one case; returns the problems found (empty when it passed).
pub fn run_case(path: &Path) -> Vec<String> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).expect("read case");
    let case = parse(&text, &name, path.parent().expect("case directory"));
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    for (rel, content) in &case.files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, content).expect("write file");
    }
    let args: Vec<&str> = case.args.iter().map(String::as_str).collect();
    let env: Vec<(&str, &str)> = case
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let out = fenzi(dir, &args, case.stdin.as_deref(), &env);
    let tmp_text = dir.display().to_string();
    let stdout = String::from_utf8_lossy(&out.stdout).replace(&tmp_text, "$TMP");
    let stderr = String::from_utf8_lossy(&out.stderr).replace(&tmp_text, "$TMP");
    let mut problems = Vec::new();
    let code = out.status.code().unwrap_or(-1);
    if code != case.exit {
        problems.push(format!("exit code {code}, expected {}", case.exit));
    }
    for l in &case.stdout_lines {
        if !stdout.contains(l.as_str()) {
            problems.push(format!("stdout lacks {l:?}"));
        }
    }
    for l in &case.stderr_lines {
        if !stderr.contains(l.as_str()) {
            problems.push(format!("stderr lacks {l:?}"));
        }
    }
    for s in &case.absent {
        if stdout.contains(s.as_str()) || stderr.contains(s.as_str()) {
            problems.push(format!(
                "output contains {s:?}, which must never be printed"
            ));
        }
    }
    if let Some(exact) = &case.stdout_exact
        && &stdout != exact
    {
        problems.push(format!("stdout is\n{stdout}\nexpected\n{exact}"));
    }
    if let Some(json) = &case.stdout_json {
        let want: serde_json::Value = serde_json::from_str(json).expect("expected JSON parses");
        match serde_json::from_str::<serde_json::Value>(&stdout) {
            Ok(got) if got == want => {}
            Ok(got) => problems.push(format!(
                "stdout JSON is\n{}\nexpected\n{}",
                serde_json::to_string_pretty(&got).unwrap(),
                serde_json::to_string_pretty(&want).unwrap()
            )),
            Err(e) => problems.push(format!("stdout is not JSON ({e}):\n{stdout}")),
        }
    }
    for (rel, want) in &case.expect_files {
        match std::fs::read(dir.join(rel)) {
            Ok(got) if got == want.as_bytes() => {}
            Ok(got) => problems.push(format!(
                "{rel} is\n{}\nexpected\n{want}",
                String::from_utf8_lossy(&got)
            )),
            Err(e) => problems.push(format!("{rel}: {e}")),
        }
    }
    for (rel, before) in &case.files {
        if case.expect_files.contains_key(rel) {
            continue;
        }
        match std::fs::read(dir.join(rel)) {
            Ok(got) if got == before.as_bytes() => {}
            Ok(_) => problems.push(format!("{rel} changed, but the case expects it untouched")),
            Err(e) => problems.push(format!("{rel}: {e}")),
        }
    }
    for rel in &case.expect_missing {
        if dir.join(rel).exists() {
            problems.push(format!("{rel} exists, expected it missing"));
        }
    }
    // No temporary file may be left behind by an atomic write.
    for entry in walk(dir) {
        let n = entry.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if n.starts_with(".fenzi-edit-") {
            problems.push(format!("temporary file left behind: {}", entry.display()));
        }
    }
    if !problems.is_empty() {
        problems.insert(0, format!("--- stdout:\n{stdout}--- stderr:\n{stderr}---"));
    }
    problems
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Runs every `*.case` under `testdata/<sub>`; fails listing each failing case.
pub fn run_dir(sub: &str) {
    let dir = repo_root().join("testdata").join(sub);
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "case"))
        .collect();
    cases.sort();
    assert!(!cases.is_empty(), "no cases in {}", dir.display());
    let mut failed = Vec::new();
    for c in &cases {
        let problems = run_case(c);
        if !problems.is_empty() {
            failed.push(format!("{}:\n  {}", c.display(), problems.join("\n  ")));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} cases failed:\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
    eprintln!("{} cases passed in testdata/{sub}", cases.len());
}

/// The address a spawned `fenzi proxy` (stdout piped) serves on: its first stdout line is exactly
/// `listening on HOST:PORT`. Panics with what it printed instead.
pub fn listening_addr(child: &mut Child) -> String {
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout piped"))
        .read_line(&mut first)
        .unwrap();
    first
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("not a listening line: {first:?}"))
        .to_string()
}

/// A TLS acceptor for a loopback server, with a certificate for 127.0.0.1 issued by a CA made now,
/// and that CA's PEM (what the client is told to trust, e.g. with `--upstream-ca`).
pub fn loopback_tls() -> (tokio_rustls::TlsAcceptor, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
    };
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
    leaf.subject_alt_names = vec![SanType::IpAddress("127.0.0.1".parse().unwrap())];
    let leaf_key = KeyPair::generate().unwrap();
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf_cert.der().clone()],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    (acceptor, ca_cert.pem())
}

/// An HTTPS server on 127.0.0.1 (certificate from [`loopback_tls`]) answering every request with
/// `handle`, on a runtime of its own: returns its port, the CA's PEM and the runtime (the server
/// lives as long as it does).
pub fn https_server<F, Fut>(handle: F) -> (u16, String, tokio::runtime::Runtime)
where
    F: Fn(hyper::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = hyper::Response<http_body_util::Full<bytes::Bytes>>>
        + Send
        + 'static,
{
    let (acceptor, ca_pem) = loopback_tls();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    runtime.spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, handle) = (acceptor.clone(), handle.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |req| {
                    let answer = handle(req);
                    async move { Ok::<_, std::convert::Infallible>(answer.await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (port, ca_pem, runtime)
}

/// A plain-HTTP MCP server on loopback, one thread per connection: every POST gets a JSON-RPC
/// result (`ok`) for its id, and the connection closes. Returns its port.
pub fn plain_mcp_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || answer_ok(stream));
        }
    });
    port
}

fn answer_ok(mut stream: std::net::TcpStream) {
    use std::io::{Read, Write};
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let (mut length, mut line) = (0usize, String::new());
    while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        line.clear();
    }
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let request: serde_json::Value =
        serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    let reply = serde_json::json!({"jsonrpc": "2.0", "id": request["id"],
        "result": {"content": [{"type": "text", "text": "ok"}]}})
    .to_string();
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{reply}",
        reply.len()
    );
}

/// Stops a `fenzi proxy` (or `run`) child with SIGTERM, a clean shutdown, and returns its whole
/// stderr, complete once it has exited.
pub fn terminate(mut child: std::process::Child) -> String {
    use std::io::Read;
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    child.wait().unwrap();
    stderr
}
