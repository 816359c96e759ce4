//! `fenzi mcp token`: which secret a name means, how the value is read (one line of stdin, or the
//! terminal without echo), what is refused (CR, LF, NUL, empty), that the value is never printed,
//! and a real round trip through the kernel keyring where this machine has one.

mod mcp_support;

use mcp_support::{fenzi, kernel_keyring_or_skip, random_hex, text};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

const POLICY: &str = "\
version: 1
mcp:
  linear:
    url: https://mcp.linear.app/mcp
    token: true
    tools:
      allow: [list_issues]
  deepwiki:
    url: https://mcp.deepwiki.com/mcp
    tools:
      allow: [read_wiki_structure]
  droplets:
    command: [npx, -y, \"@digitalocean/mcp\"]
    secrets: [DIGITALOCEAN_API_TOKEN]
    hosts: [api.digitalocean.com]
    tools:
      allow: [droplet-list]
  claude-ai:
    account: claude
    tools:
      allow: [list_teams]
";

fn folder() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("fenzi.yaml"), POLICY).unwrap();
    tmp
}

#[test]
fn stores_one_line_of_stdin_and_prints_only_the_name() {
    let tmp = folder();
    let out = fenzi(
        tmp.path(),
        &["mcp", "token", "linear"],
        Some(b"s3cr3t-VALUE-42\n"),
        &[],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("stored MCP_LINEAR (the token of server `linear`)"),
        "{stdout}"
    );
    assert!(
        stderr.contains("nothing was saved"),
        "memory store must say so: {stderr}"
    );
    assert!(!stdout.contains("s3cr3t") && !stderr.contains("s3cr3t"));
}

#[test]
fn refuses_values_that_could_split_a_header() {
    let tmp = folder();
    for (input, problem) in [
        (&b"s3cr3t\r\n"[..], "carriage return"),
        (b"s3cr3t\nsecond line\n", "line break"),
        (b"s3cr3t\0x\n", "NUL"),
        (b"\n", "empty"),
        (b"", "empty"),
    ] {
        let out = fenzi(tmp.path(), &["mcp", "token", "droplets"], Some(input), &[]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{input:?}: {stderr}");
        assert!(stderr.contains("DIGITALOCEAN_API_TOKEN"), "{stderr}");
        assert!(stderr.contains(problem), "{input:?}: {stderr}");
        assert!(!stderr.contains("s3cr3t") && !text(&out.stdout).contains("s3cr3t"));
    }
    let long = vec![b'x'; 16 * 1024 + 1];
    let out = fenzi(tmp.path(), &["mcp", "token", "droplets"], Some(&long), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("longer than 16 KiB"));
}

#[test]
fn resolves_names_to_secrets() {
    let tmp = folder();
    let run = |args: &[&str]| fenzi(tmp.path(), args, Some(b"v-12345678\n"), &[]);
    let ok = |args: &[&str], want: &str| {
        let out = run(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains(want),
            "{args:?}: {}",
            text(&out.stdout)
        );
    };
    let err = |args: &[&str], want: &str| {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            text(&out.stderr).contains(want),
            "{args:?}: {}",
            text(&out.stderr)
        );
    };
    ok(
        &["mcp", "token", "droplets"],
        "stored DIGITALOCEAN_API_TOKEN (the secret of server `droplets`)",
    );
    ok(
        &[
            "mcp",
            "token",
            "droplets",
            "--secret",
            "DIGITALOCEAN_API_TOKEN",
        ],
        "stored DIGITALOCEAN_API_TOKEN",
    );
    ok(
        &["mcp", "token", "DIGITALOCEAN_API_TOKEN"],
        "stored DIGITALOCEAN_API_TOKEN in the in-process memory store, for api.digitalocean.com",
    );
    // Not bound by this policy: stored for no host, and said so before the value is read.
    let out = run(&["mcp", "token", "ANTHROPIC_API_KEY"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("stored ANTHROPIC_API_KEY in the in-process memory store, for no host"),
        "{stdout}"
    );
    assert!(
        stderr.contains("ANTHROPIC_API_KEY is bound to no host here"),
        "{stderr}"
    );
    err(
        &["mcp", "token", "droplets", "--secret", "OTHER"],
        "does not read `OTHER`; it reads DIGITALOCEAN_API_TOKEN",
    );
    err(
        &["mcp", "token", "linear", "--secret", "OTHER"],
        "--secret is for local servers",
    );
    err(
        &["mcp", "token", "files", "--secret", "OTHER"],
        "there is no server `files`",
    );
    err(&["mcp", "token", "deepwiki"], "does not use a token");
    err(&["mcp", "token", "claude-ai"], "no token to store");
    err(&["mcp", "token", "nope"], "there is no server `nope`");
    err(&["mcp", "token", "HTTPS_PROXY"], "cannot be a secret");
    err(&["mcp", "token", "FENZI_X"], "cannot be a secret");
    // A name this folder's policy does not use is stored, and said to be bound to no host.
    let out = run(&["mcp", "token", "UNUSED_KEY"]);
    assert!(out.status.success());
    assert!(
        text(&out.stderr).contains("UNUSED_KEY is bound to no host here"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn an_unusable_store_says_what_is_missing() {
    let tmp = folder();
    let out = fenzi(
        tmp.path(),
        &["mcp", "token", "linear"],
        Some(b"v-12345678\n"),
        &[("FENZI_CREDSTORE", "secret-service")],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.contains("the Secret Service cannot be used: no D-Bus session bus"),
        "{stderr}"
    );
    assert!(stderr.contains("fix: "), "{stderr}");
    let out = fenzi(
        tmp.path(),
        &["mcp", "token", "linear"],
        Some(b"v-12345678\n"),
        &[("FENZI_CREDSTORE", "file")],
    );
    assert!(text(&out.stderr).contains("FENZI_CREDSTORE=file is not a credential store"));
}

/// On a terminal the value is read without echo: the terminal shows the prompt, not the value.
/// Runs `fenzi mcp token linear` on a terminal (`script` gives it one) in a folder whose own file
/// binds the token's host, answering the confirmation with `answer` and, when asked, typing the
/// value. Returns the exit status and everything the terminal showed; `None` without `script`.
fn token_on_a_terminal(dir: &Path, answer: &str) -> Option<(std::process::ExitStatus, String)> {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no `script` command to give fenzi a terminal");
        return None;
    }
    let cmd = format!("{} mcp token linear", env!("CARGO_BIN_EXE_fenzi"));
    let mut child = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .current_dir(dir)
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env("FENZI_CREDSTORE", "memory")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut seen = Vec::new();
    let mut wait_for = |want: &str, seen: &mut Vec<u8>| {
        let mut buf = [0u8; 256];
        while !String::from_utf8_lossy(seen).contains(want) {
            let n = stdout.read(&mut buf).unwrap();
            assert!(n > 0, "no {want:?}: {}", String::from_utf8_lossy(seen));
            seen.extend_from_slice(&buf[..n]);
        }
    };
    wait_for("[y/N]", &mut seen);
    stdin.write_all(format!("{answer}\n").as_bytes()).unwrap();
    if answer == "y" {
        // Type the value only once the prompt is there (and echo is off): rpassword prints the
        // prompt, then turns echo off; give it that moment, as a person would.
        wait_for("not shown:", &mut seen);
        std::thread::sleep(std::time::Duration::from_millis(500));
        stdin.write_all(b"typed-s3cr3t\n").unwrap();
    }
    drop(stdin);
    stdout.read_to_end(&mut seen).unwrap();
    let status = child.wait().unwrap();
    Some((status, String::from_utf8_lossy(&seen).into_owned()))
}

#[test]
fn prompts_without_echo_on_a_terminal_after_the_hosts_are_approved() {
    let tmp = folder();
    let Some((status, screen)) = token_on_a_terminal(tmp.path(), "y") else {
        return;
    };
    assert!(status.success(), "{screen}");
    assert!(
        screen.contains("MCP_LINEAR will be sent only to:")
            && screen.contains("mcp.linear.app  fenzi.yaml:3 (this folder's policy)"),
        "{screen}"
    );
    assert!(screen.contains("stored MCP_LINEAR"), "{screen}");
    assert!(
        !screen.contains("typed-s3cr3t"),
        "the value was echoed: {screen}"
    );
}

#[test]
fn a_terminal_user_who_does_not_approve_the_hosts_stores_nothing() {
    let tmp = folder();
    let Some((status, screen)) = token_on_a_terminal(tmp.path(), "n") else {
        return;
    };
    assert_eq!(status.code(), Some(1), "{screen}");
    assert!(screen.contains("nothing was stored"), "{screen}");
    assert!(
        !screen.contains("not shown:"),
        "the value was asked for: {screen}"
    );
}

/// The kernel keyring, across processes: `token` stores, `list` sees it, the value is exactly the
/// line without its newline, `--delete` removes it.
#[test]
fn kernel_keyring_round_trip() {
    let Some(store) = kernel_keyring_or_skip("kernel keyring round trip") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let server = format!("rt-{}", random_hex());
    let secret = fenzi_policy::secret_name::server_token_name(&server);
    std::fs::write(
        tmp.path().join("fenzi.yaml"),
        format!("version: 1\nmcp:\n  {server}:\n    url: https://rt.example.com/mcp\n    token: true\n    tools:\n      allow: [t]\n"),
    )
    .unwrap();
    let env = [("FENZI_CREDSTORE", "keyutils")];
    let stored = |dir: &Path| -> serde_json::Value {
        let out = fenzi(dir, &["mcp", "list", "--json"], None, &env);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["store"]["backend"], "kernel keyring");
        doc["servers"][0]["secrets"][0]["stored"].clone()
    };

    assert_eq!(stored(tmp.path()), serde_json::json!(false));
    let out = fenzi(
        tmp.path(),
        &["mcp", "token", &server],
        Some(b"kr-value \t 42\n"),
        &env,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&format!("stored {secret}")));
    assert!(text(&out.stdout).contains("kernel keyring"));
    assert_eq!(stored(tmp.path()), serde_json::json!(true));
    assert!(text(&out.stdout).contains(", for rt.example.com"));
    use fenzi_proxy::credstore::CredentialStore;
    let got = store.get(&secret).unwrap().unwrap();
    assert_eq!(got.value.expose(), "kr-value \t 42");
    assert_eq!(got.hosts, Some(vec!["rt.example.com".to_string()]));

    let out = fenzi(
        tmp.path(),
        &["mcp", "token", &server, "--delete"],
        None,
        &env,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&format!("deleted {secret}")));
    assert_eq!(stored(tmp.path()), serde_json::json!(false));
    assert!(store.get(&secret).unwrap().is_none());
}

/// The Secret Service, with a real gnome-keyring on a private D-Bus session bus, where the machine
/// has them (`apt-get install gnome-keyring dbus`): `auto` picks it, and a value goes in and out.
#[test]
fn secret_service_round_trip() {
    let have = |p: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {p}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !have("dbus-run-session") || !have("gnome-keyring-daemon") {
        eprintln!("SKIPPED Secret Service round trip: no dbus-run-session or gnome-keyring-daemon");
        return;
    }
    let tmp = folder();
    let dir = tmp.path();
    let run = dir.join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::set_permissions(&run, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let script = format!(
        "set -e
printf pw | gnome-keyring-daemon --unlock --components=secrets >/dev/null
printf 'ss-s3cr3t\\n' | {fenzi} mcp token linear
{fenzi} mcp list --json > list1.json
{fenzi} mcp token linear --delete
{fenzi} mcp list --json > list2.json",
        fenzi = env!("CARGO_BIN_EXE_fenzi")
    );
    let out = Command::new("dbus-run-session")
        .args(["--", "sh", "-c", &script])
        .current_dir(dir)
        .env("HOME", dir.join("home"))
        .env("XDG_RUNTIME_DIR", &run)
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env("XDG_DATA_HOME", dir.join("data"))
        .env_remove("FENZI_CREDSTORE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("stored MCP_LINEAR (the token of server `linear`) in the Secret Service"),
        "{stdout}"
    );
    assert!(!stdout.contains("s3cr3t") && !stderr.contains("s3cr3t"));
    let list = |f: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join(f)).unwrap()).unwrap()
    };
    let (before, after) = (list("list1.json"), list("list2.json"));
    assert_eq!(before["store"]["backend"], "Secret Service");
    assert_eq!(before["servers"][0]["secrets"][0]["stored"], true);
    assert_eq!(after["servers"][0]["secrets"][0]["stored"], false);
}

/// A value is stored for the hosts the policy binds, so a policy that does not load stops storing
/// (a value stored for no host would replace a good entry), but not deleting.
#[test]
fn a_broken_policy_stops_storing_but_not_deleting() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("fenzi.yaml"),
        "version: 1\nsecrets:\n  API_KEY:\n    hosts: [api.example.com]\n    colour: blue\n",
    )
    .unwrap();
    let out = fenzi(
        tmp.path(),
        &["mcp", "token", "API_KEY"],
        Some(b"v-12345678\n"),
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("nothing was stored") && stderr.contains("colour"),
        "{stderr}"
    );
    assert!(!text(&out.stdout).contains("stored API_KEY"));
    let out = fenzi(
        tmp.path(),
        &["mcp", "token", "API_KEY", "--delete"],
        None,
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("API_KEY was not stored"),
        "{}",
        text(&out.stdout)
    );
}
