//! The team policy end to end: the real binary fetches a policy and its minisign signature from a
//! loopback HTTPS server (a CA made here, trusted with `--upstream-ca`), signed with a key pair
//! made here (the `minisign` crate). Covers a good copy, a bad or missing signature, a rollback,
//! the same serial with other bytes, an unreachable server with and without a kept copy, a
//! tampered kept copy, the machine file's `team:`, the merge under the team policy, and
//! `fenzi proxy` refusing to start without a good copy.

mod mcp_support;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

type Files = Arc<Mutex<HashMap<String, (u16, Vec<u8>)>>>;

struct Server {
    port: u16,
    ca_pem: String,
    files: Files,
    _runtime: tokio::runtime::Runtime,
}

impl Server {
    fn url(&self) -> String {
        format!("https://127.0.0.1:{}/team/fenzi.yaml", self.port)
    }
    fn serve(&self, path: &str, status: u16, body: &[u8]) {
        self.files
            .lock()
            .unwrap()
            .insert(path.to_string(), (status, body.to_vec()));
    }
    /// Serves `policy` signed by `signer`.
    fn publish(&self, signer: &Signer, policy: &str) {
        self.serve("/team/fenzi.yaml", 200, policy.as_bytes());
        self.serve(
            "/team/fenzi.yaml.minisig",
            200,
            &signer.sign(policy.as_bytes()),
        );
    }
}

fn server() -> Server {
    let files: Files = Arc::default();
    let shared = files.clone();
    let (port, ca_pem, runtime) = mcp_support::https_server(move |req: Request<Incoming>| {
        let (status, body) = shared
            .lock()
            .unwrap()
            .get(req.uri().path())
            .cloned()
            .unwrap_or((404, b"not found".to_vec()));
        async move {
            Response::builder()
                .status(status)
                .body(Full::new(Bytes::from(body)))
                .unwrap()
        }
    });
    Server {
        port,
        ca_pem,
        files,
        _runtime: runtime,
    }
}

struct Signer(minisign::KeyPair);

impl Signer {
    fn new() -> Signer {
        Signer(minisign::KeyPair::generate_unencrypted_keypair().unwrap())
    }
    fn public(&self) -> String {
        self.0.pk.to_box().unwrap().to_string()
    }
    fn sign(&self, bytes: &[u8]) -> Vec<u8> {
        minisign::sign(
            Some(&self.0.pk),
            &self.0.sk,
            std::io::Cursor::new(bytes),
            None,
            None,
        )
        .unwrap()
        .to_string()
        .into_bytes()
    }
}

fn team_policy(serial: u64, extra_host: &str) -> String {
    format!(
        "version: 1\nserial: {serial}\nhosts: [github.com, \"*.corp.example\", {extra_host}]\nmcp:\n  \
         linear:\n    url: https://mcp.linear.app/mcp\n    tools: {{allow: [get_issue, list_issues], \
         deny: [delete_issue]}}\n"
    )
}

/// A working directory: the project file, the key, the CA, an empty state directory.
struct Place {
    dir: tempfile::TempDir,
}

impl Place {
    fn new(server: &Server, signer: &Signer, project: &str) -> Place {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("fenzi.yaml"), project).unwrap();
        std::fs::write(dir.path().join("team.pub"), signer.public()).unwrap();
        std::fs::write(dir.path().join("ca.pem"), &server.ca_pem).unwrap();
        Place { dir }
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
    fn state(&self) -> PathBuf {
        self.path().join("state/fenzi/team")
    }
    /// The one kept copy.
    fn kept(&self) -> PathBuf {
        let files: Vec<_> = std::fs::read_dir(self.state())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "copy"))
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        files[0].clone()
    }
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fenzi"));
        cmd.args(args)
            .current_dir(self.path())
            .env("XDG_CONFIG_HOME", self.path().join("xdg"))
            .env("XDG_STATE_HOME", self.path().join("state"))
            .env("HOME", self.path().join("home"))
            .env("FENZI_CREDSTORE", "memory")
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }
    fn check(&self, url: &str, extra: &[&str]) -> Output {
        let mut args = vec![
            "check",
            "--team-policy",
            url,
            "--team-key",
            "team.pub",
            "--upstream-ca",
            "ca.pem",
        ];
        args.extend_from_slice(extra);
        self.command(&args).output().unwrap()
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[track_caller]
fn expect(out: &Output, code: i32, stdout: &[&str], stderr: &[&str]) {
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(code), "stdout:\n{o}\nstderr:\n{e}");
    for s in stdout {
        assert!(o.contains(s), "stdout lacks {s:?}:\n{o}\nstderr:\n{e}");
    }
    for s in stderr {
        assert!(e.contains(s), "stderr lacks {s:?}:\n{e}\nstdout:\n{o}");
    }
}

/// A check that ran on the kept copy of serial `serial` (exit 0), its stderr saying each of `why`.
fn keeps_copy(out: &Output, serial: u32, why: &[&str]) {
    expect(out, 0, &[&format!("serial {serial} (the kept copy)")], why);
}

const PROJECT: &str = "version: 1\nhosts: [api.corp.example]\nmcp:\n  linear:\n    url: https://mcp.linear.app/mcp\n    tools: {allow: [get_issue]}\n";

/// A port nothing listens on.
fn closed_port_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    format!("https://127.0.0.1:{port}/team/fenzi.yaml")
}

#[test]
fn a_good_copy_is_used_kept_and_merged_under() {
    let (server, signer) = (server(), Signer::new());
    server.publish(&signer, &team_policy(3, "a.example"));
    let place = Place::new(&server, &signer, PROJECT);
    let url = server.url();
    let out = place.check(&url, &["--show-policy"]);
    expect(
        &out,
        0,
        &[
            &format!("team policy {url}, serial 3 (fetched)"),
            "policy is valid",
            &format!("effective policy: team {url} (serial 3) → project fenzi.yaml"),
            "api.corp.example",
            "linear (team, narrowed by project; https mcp.linear.app:443)",
            "allow [get_issue]  deny [delete_issue]",
        ],
        &[],
    );
    let kept = place.kept();
    let mode = std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the kept copy is private");
    let bytes = std::fs::read(&kept).unwrap();
    assert!(text(&bytes).contains("serial: 3"));

    // JSON: the team layer and the effective policy, each element with its layer.
    let out = place.check(&url, &["--show-policy", "--format", "json"]);
    expect(&out, 0, &[], &[]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["team"]["serial"], 3);
    assert_eq!(doc["team"]["source"], "fetched");
    let hosts = doc["policy"]["hosts"].as_array().unwrap();
    let layer_of = |h: &str| {
        hosts
            .iter()
            .find(|x| x["host"] == h)
            .map(|x| x["layer"].clone())
    };
    assert_eq!(layer_of("github.com"), Some("team".into()));
    assert_eq!(layer_of("api.corp.example"), Some("project".into()));
    assert_eq!(
        doc["policy"]["mcp"][0]["allow"],
        serde_json::json!(["get_issue"])
    );
}

#[test]
fn a_layer_below_that_widens_is_an_error_naming_what_it_tried() {
    let (server, signer) = (server(), Signer::new());
    server.publish(&signer, &team_policy(1, "a.example"));
    let project = "version: 1\nhosts: [evil.example]\nmcp:\n  linear:\n    url: https://mcp.linear.app/mcp\n    tools: {allow: [delete_issue]}\n";
    let place = Place::new(&server, &signer, project);
    let out = place.check(&server.url(), &[]);
    expect(
        &out,
        1,
        &[
            "fenzi.yaml:2:9: hosts[0]: the project allows host evil.example, which the team policy does not allow",
            "project allows `delete_issue` on team server `linear`, which the team policy denies",
        ],
        &[],
    );
}

#[test]
fn a_bad_or_missing_signature_is_refused_and_the_kept_copy_stays() {
    let (server, signer) = (server(), Signer::new());
    let place = Place::new(&server, &signer, PROJECT);
    let url = server.url();
    // Signed by someone else, nothing kept: no good copy.
    let policy = team_policy(5, "a.example");
    server.serve("/team/fenzi.yaml", 200, policy.as_bytes());
    server.serve(
        "/team/fenzi.yaml.minisig",
        200,
        &Signer::new().sign(policy.as_bytes()),
    );
    let out = place.check(&url, &[]);
    expect(
        &out,
        2,
        &[],
        &[
            "no good copy of the team policy",
            "another key than the team key",
            "does not start",
        ],
    );
    assert!(!place.state().exists() || std::fs::read_dir(place.state()).unwrap().count() == 0);

    // A good copy, then a forged newer one: the kept copy stays in use.
    server.publish(&signer, &team_policy(5, "a.example"));
    expect(&place.check(&url, &[]), 0, &["serial 5 (fetched)"], &[]);
    let forged = team_policy(6, "evil.example");
    server.serve("/team/fenzi.yaml", 200, forged.as_bytes());
    server.serve(
        "/team/fenzi.yaml.minisig",
        200,
        &signer.sign(team_policy(6, "a.example").as_bytes()),
    );
    keeps_copy(
        &place.check(&url, &[]),
        5,
        &[
            "does not match the policy's bytes",
            "using the kept copy, serial 5",
        ],
    );
    // No signature at all (404).
    server.serve("/team/fenzi.yaml.minisig", 404, b"");
    keeps_copy(
        &place.check(&url, &[]),
        5,
        &["404", "using the kept copy, serial 5"],
    );
}

#[test]
fn rollback_and_reused_serials_are_refused() {
    let (server, signer) = (server(), Signer::new());
    let place = Place::new(&server, &signer, PROJECT);
    let url = server.url();
    server.publish(&signer, &team_policy(4, "a.example"));
    expect(&place.check(&url, &[]), 0, &["serial 4 (fetched)"], &[]);
    let kept = std::fs::read(place.kept()).unwrap();

    server.publish(&signer, &team_policy(3, "b.example"));
    keeps_copy(
        &place.check(&url, &[]),
        4,
        &[
            "(serial 3) is older than the kept copy (serial 4)",
            "using serial 4",
        ],
    );
    server.publish(&signer, &team_policy(4, "b.example"));
    keeps_copy(
        &place.check(&url, &[]),
        4,
        &["a changed policy must raise its serial"],
    );
    assert_eq!(
        std::fs::read(place.kept()).unwrap(),
        kept,
        "the kept copy is untouched"
    );

    server.publish(&signer, &team_policy(9, "b.example"));
    expect(&place.check(&url, &[]), 0, &["serial 9 (fetched)"], &[]);
    assert!(text(&std::fs::read(place.kept()).unwrap()).contains("serial: 9"));
}

#[test]
fn an_unreachable_server_keeps_the_last_good_copy_and_without_one_fails_closed() {
    let (server, signer) = (server(), Signer::new());
    let place = Place::new(&server, &signer, PROJECT);
    let down = closed_port_url();
    // Nothing kept: no session.
    expect(
        &place.check(&down, &[]),
        2,
        &[],
        &[
            "no good copy",
            "cannot be fetched",
            "cannot connect",
            "no copy is kept",
        ],
    );
    // With a copy kept from an earlier fetch, a server that fails leaves it in use.
    let url = server.url();
    server.publish(&signer, &team_policy(2, "a.example"));
    expect(&place.check(&url, &[]), 0, &["serial 2 (fetched)"], &[]);
    // Too large is no answer either: the bound holds whatever the server sends.
    server.serve("/team/fenzi.yaml", 200, &vec![b'#'; 2 << 20]);
    keeps_copy(
        &place.check(&url, &[]),
        2,
        &[
            "larger than the 1048576-byte bound",
            "using the kept copy, serial 2",
        ],
    );
    server.serve("/team/fenzi.yaml", 503, b"down for maintenance");
    keeps_copy(
        &place.check(&url, &[]),
        2,
        &["503 Service Unavailable", "using the kept copy, serial 2"],
    );
}

#[test]
fn a_tampered_kept_copy_is_refused() {
    let (server, signer) = (server(), Signer::new());
    let place = Place::new(&server, &signer, PROJECT);
    let url = server.url();
    server.publish(&signer, &team_policy(2, "a.example"));
    expect(&place.check(&url, &[]), 0, &["serial 2 (fetched)"], &[]);
    let kept = place.kept();
    let bytes = text(&std::fs::read(&kept).unwrap()).replace("a.example", "e.example");
    std::fs::write(&kept, bytes).unwrap();
    server.serve("/team/fenzi.yaml", 500, b"");
    expect(
        &place.check(&url, &[]),
        2,
        &[],
        &[
            "the kept copy of the team policy is refused",
            "does not match the policy's bytes",
        ],
    );
    // A garbled file is no copy either.
    std::fs::write(&kept, b"junk").unwrap();
    expect(&place.check(&url, &[]), 2, &[], &["garbled or truncated"]);
}

#[test]
fn the_machine_file_names_the_team_policy_and_the_flags_win() {
    let (server, signer) = (server(), Signer::new());
    server.publish(&signer, &team_policy(7, "a.example"));
    let place = Place::new(&server, &signer, PROJECT);
    let machine_dir = place.path().join("xdg/fenzi");
    std::fs::create_dir_all(&machine_dir).unwrap();
    std::fs::write(machine_dir.join("team.pub"), signer.public()).unwrap();
    std::fs::write(
        machine_dir.join("mcp.yaml"),
        format!(
            "version: 1\nteam: {{url: \"{}\", key: team.pub}}\nhosts: [git.corp.example]\n",
            server.url()
        ),
    )
    .unwrap();
    let out = place
        .command(&["check", "--upstream-ca", "ca.pem", "--show-policy"])
        .output()
        .unwrap();
    expect(
        &out,
        0,
        &["serial 7 (fetched)", "git.corp.example", "machine"],
        &[],
    );
    // The flag wins: another url, which is down, and nothing kept for it.
    let out = place.check(&closed_port_url(), &[]);
    expect(&out, 2, &[], &["no good copy", "--team-policy"]);
    // http is refused before anything is fetched.
    let out = place.check("http://127.0.0.1:1/p.yaml", &[]);
    expect(
        &out,
        1,
        &["--team-policy: the team policy's url is not https"],
        &[],
    );
}

#[test]
fn the_proxy_does_not_start_without_a_good_copy_and_starts_with_one() {
    let (server, signer) = (server(), Signer::new());
    let place = Place::new(&server, &signer, PROJECT);
    let proxy = |url: &str| {
        place.command(&[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--ca-dir",
            "ca",
            "--audit",
            "audit.jsonl",
            "--team-policy",
            url,
            "--team-key",
            "team.pub",
            "--upstream-ca",
            "ca.pem",
        ])
    };
    let out = proxy(&closed_port_url()).output().unwrap();
    expect(&out, 2, &[], &["no good copy", "does not start"]);
    assert!(!text(&out.stdout).contains("listening on"));
    assert!(
        !place.path().join("audit.jsonl").exists(),
        "no session was opened"
    );

    server.publish(&signer, &team_policy(2, "a.example"));
    let mut child = proxy(&server.url()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening on 127.0.0.1:"), "{line:?}");
    // The session's notes follow on stderr once it listens; the team layer is one of them.
    let want = format!("team policy {}, serial 2 (fetched)", server.url());
    let mut seen = Vec::new();
    for l in BufReader::new(child.stderr.take().unwrap()).lines() {
        let l = l.unwrap();
        let found = l.contains(&want);
        seen.push(l);
        if found || seen.len() > 20 {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(seen.iter().any(|l| l.contains(&want)), "{seen:#?}");
}
