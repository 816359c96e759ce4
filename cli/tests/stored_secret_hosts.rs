//! A stored secret goes only to the hosts it was stored for, through the real binary and the real
//! kernel keyring: `fenzi mcp token` in one folder stores a value for that folder's host; a second
//! folder whose `fenzi.yaml` binds the same name to a host of its own (a cloned repository
//! reaching for the user's token) gets a `fenzi proxy` session that withholds the value, says so,
//! and mints no placeholder for it, while the first folder's session still loads it.

mod mcp_support;

use fenzi_proxy::credstore::{CredentialStore, KernelKeyring};
use mcp_support::{command, fenzi, kernel_keyring_or_skip, random_hex, text};
use std::path::Path;

/// Deletes the test's key however the test ends.
struct Cleanup<'a>(&'a KernelKeyring, String);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let _ = self.0.delete(&self.1);
    }
}

fn folder(secret: &str, hosts: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("fenzi.yaml"),
        format!("version: 1\nsecrets:\n  {secret}:\n    hosts: [{hosts}]\n"),
    )
    .unwrap();
    tmp
}

/// Starts `fenzi proxy` in `dir`, waits for it to listen, stops it, and returns its stderr and
/// the `placeholders.env` it wrote.
fn proxy_session(dir: &Path) -> (String, String) {
    let ca_dir = dir.join("ca");
    let audit = dir.join("audit.jsonl");
    let (audit, ca) = (audit.to_str().unwrap(), ca_dir.to_str().unwrap());
    let args = [
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--audit",
        audit,
        "--ca-dir",
        ca,
    ];
    let mut child = command(dir, &args)
        .env("FENZI_CREDSTORE", "keyutils")
        .spawn()
        .unwrap();
    mcp_support::listening_addr(&mut child);
    let placeholders = std::fs::read_to_string(ca_dir.join("placeholders.env")).unwrap();
    (mcp_support::terminate(child), placeholders)
}

#[test]
fn a_project_cannot_send_a_stored_value_to_a_host_of_its_own() {
    let Some(store) = kernel_keyring_or_skip("stored-secret hosts test") else {
        return;
    };
    let secret = format!("HOSTS_TEST_{}", random_hex().to_uppercase());
    let _cleanup = Cleanup(&store, secret.clone());
    let value = "real-token-value-0042";
    let env = [("FENZI_CREDSTORE", "keyutils")];

    // The user stores the token where the policy binds it to the service it belongs to.
    let own = folder(&secret, "127.0.0.1:18443");
    let out = fenzi(
        own.path(),
        &["mcp", "token", &secret],
        Some(format!("{value}\n").as_bytes()),
        &env,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{secret} will be sent only to:\n  127.0.0.1:18443  fenzi.yaml:4 (this folder's policy)\n"
        )),
        "{stderr}"
    );
    assert!(
        stdout.contains(&format!(
            "stored {secret} in the kernel keyring, for 127.0.0.1:18443"
        )),
        "{stdout}"
    );

    // That folder's session loads it and mints its placeholder.
    let (stderr, placeholders) = proxy_session(own.path());
    assert!(
        stderr.contains(&format!("{secret} from the kernel keyring")),
        "{stderr}"
    );
    assert!(
        placeholders.contains(&format!("{secret}=")),
        "{placeholders}"
    );

    // A repository binding the same name to its own host, alone or beside the right one.
    for hosts in ["127.0.0.1:19443", "127.0.0.1:18443, 127.0.0.1:19443"] {
        let cloned = folder(&secret, hosts);
        let (stderr, placeholders) = proxy_session(cloned.path());
        assert!(
            stderr.contains(&format!(
                "no value for secret {secret}, so it is not substituted: it was stored for \
                 127.0.0.1:18443, and this policy would also send it to 127.0.0.1:19443, so it \
                 is withheld"
            )),
            "{hosts}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("missing: {secret}")),
            "{hosts}: {stderr}"
        );
        assert!(
            !placeholders.contains(&format!("{secret}=")),
            "{hosts}: a placeholder was minted: {placeholders}"
        );
        assert!(!stderr.contains(value), "{stderr}");
    }

    // `fenzi mcp list` says the same before any session is started.
    let listed = |dir: &Path| -> serde_json::Value {
        let out = fenzi(dir, &["mcp", "list", "--json"], None, &env);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["secrets"][0].clone()
    };
    let own_listed = listed(own.path());
    assert_eq!(own_listed["stored"], true);
    assert_eq!(own_listed["withheld"], serde_json::Value::Null);
    let cloned = folder(&secret, "127.0.0.1:19443");
    let cloned_listed = listed(cloned.path());
    assert_eq!(cloned_listed["stored"], true);
    assert_eq!(
        cloned_listed["withheld"],
        "it was stored for 127.0.0.1:18443, and this policy would also send it to \
         127.0.0.1:19443, so it is withheld"
    );
    let out = fenzi(cloned.path(), &["mcp", "list"], None, &env);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "{secret} -> 127.0.0.1:19443: stored, not used here: it was stored for \
             127.0.0.1:18443"
        )) && stdout.contains(&format!("(fenzi mcp token {secret})")),
        "{stdout}"
    );
    assert!(!stdout.contains(value), "{stdout}");

    // Storing it again from the second folder (after reading the hosts it names) rebinds it.
    let cloned = folder(&secret, "127.0.0.1:19443");
    let out = fenzi(
        cloned.path(),
        &["mcp", "token", &secret],
        Some(format!("{value}\n").as_bytes()),
        &env,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (_, placeholders) = proxy_session(cloned.path());
    assert!(
        placeholders.contains(&format!("{secret}=")),
        "{placeholders}"
    );
    let (stderr, placeholders) = proxy_session(own.path());
    assert!(
        !placeholders.contains(&format!("{secret}=")),
        "{placeholders}"
    );
    assert!(
        stderr.contains("it was stored for 127.0.0.1:19443"),
        "{stderr}"
    );

    // From a folder that binds it to no host, storing would leave it usable nowhere: refused, and
    // the entry keeps its hosts.
    let unbound = tempfile::tempdir().unwrap();
    std::fs::write(
        unbound.path().join("fenzi.yaml"),
        "version: 1
",
    )
    .unwrap();
    let out = fenzi(
        unbound.path(),
        &["mcp", "token", &secret],
        Some(b"another-value-0042\n"),
        &env,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains(&format!(
            "{secret} is stored for 127.0.0.1:19443, and this folder's policy binds it to no host"
        )),
        "{}",
        text(&out.stderr)
    );
    let kept = store.get(&secret).unwrap().unwrap();
    assert_eq!(kept.hosts, Some(vec!["127.0.0.1:19443".to_string()]));
    assert_eq!(kept.value.expose(), value);
}
