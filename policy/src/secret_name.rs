//! Secret names (README, "Secrets"): a variable name for local-server and top-level secrets, `MCP_<SERVER>`
//! for a `token: true` server's token. The same name is used in the credential store, in
//! `FENZI_SECRET_<NAME>`, in `placeholders.env` and in the audit log.

/// The secret name of a `token: true` server: `MCP_` + the server name upper-cased with every
/// character outside `A-Z0-9` turned into `_` (`issue-tracker` → `MCP_ISSUE_TRACKER`).
pub fn server_token_name(server: &str) -> String {
    let mut out = String::with_capacity(4 + server.len());
    out.push_str("MCP_");
    for c in server.chars() {
        let c = c.to_ascii_uppercase();
        out.push(if c.is_ascii_uppercase() || c.is_ascii_digit() {
            c
        } else {
            '_'
        });
    }
    out
}

/// A valid secret (environment variable) name: `[A-Z_][A-Z0-9_]*`, at most 128 characters.
pub fn is_valid_secret_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    match bytes.next() {
        Some(b) if b.is_ascii_uppercase() || b == b'_' => {}
        _ => return false,
    }
    name.len() <= 128 && bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// Why a syntactically valid name cannot be a secret: the sandbox sets variables of these kinds itself
/// (proxy settings, CA trust, fenzi's own), and a placeholder must never shadow them; loader and shell
/// variables would let a policy file change what runs. `None` when the name is free.
pub fn reserved_reason(name: &str) -> Option<&'static str> {
    const LOADER: &[&str] = &[
        "PATH",
        "HOME",
        "SHELL",
        "NODE_OPTIONS",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "BASH_ENV",
        "ENV",
    ];
    // Mirrors `fenzi_proxy::sandbox::env::CACHE_VARS` (its tests check that every one is here).
    const CACHES: &[&str] = &[
        "XDG_CACHE_HOME",
        "NPM_CONFIG_CACHE",
        "PNPM_HOME",
        "YARN_CACHE_FOLDER",
        "YARN_GLOBAL_FOLDER",
        "PIP_CACHE_DIR",
        "UV_CACHE_DIR",
        "CARGO_HOME",
        "GOPATH",
        "GOMODCACHE",
        "GOCACHE",
        "GRADLE_USER_HOME",
        "MAVEN_OPTS",
    ];
    if name.starts_with("FENZI_") {
        Some("names starting with FENZI_ are fenzi's own")
    } else if name.ends_with("_PROXY") || name == "NO_PROXY" {
        Some("proxy variables are set by the sandbox so that all traffic goes through fenzi")
    } else if ["CERT", "CA_BUNDLE", "CAINFO", "SSL_ROOTS"]
        .iter()
        .any(|part| name.contains(part))
    {
        Some("certificate-trust variables are set by the sandbox to trust the session CA")
    } else if CACHES.contains(&name) {
        Some("package-manager cache variables are set by the sandbox to its own caches")
    } else if name.starts_with("LD_") || LOADER.contains(&name) {
        Some("loader and shell variables decide what programs run")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_names_follow_the_design() {
        assert_eq!(server_token_name("issue-tracker"), "MCP_ISSUE_TRACKER");
        assert_eq!(server_token_name("linear"), "MCP_LINEAR");
        assert_eq!(server_token_name("a.b_c9"), "MCP_A_B_C9");
    }

    #[test]
    fn secret_names_are_env_names() {
        assert!(is_valid_secret_name("DIGITALOCEAN_API_TOKEN"));
        assert!(is_valid_secret_name("_X1"));
        assert!(!is_valid_secret_name("lower"));
        assert!(!is_valid_secret_name("1ABC"));
        assert!(!is_valid_secret_name(""));
        assert!(!is_valid_secret_name("A-B"));
    }

    #[test]
    fn variables_the_sandbox_owns_are_reserved() {
        for name in [
            "HTTPS_PROXY",
            "NO_PROXY",
            "NODE_USE_ENV_PROXY",
            "SSL_CERT_FILE",
            "NODE_EXTRA_CA_CERTS",
            "GIT_SSL_CAINFO",
            "AWS_CA_BUNDLE",
            "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
            "FENZI_SECRET_X",
            "LD_PRELOAD",
            "PATH",
        ] {
            assert!(reserved_reason(name).is_some(), "{name}");
        }
        for name in [
            "GITHUB_TOKEN",
            "ANTHROPIC_API_KEY",
            "DIGITALOCEAN_API_TOKEN",
            "MCP_LINEAR",
        ] {
            assert_eq!(reserved_reason(name), None, "{name}");
        }
    }
}
