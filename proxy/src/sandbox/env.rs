//! The sandboxed command's environment, as a pure function of the caller's environment and the
//! session: every proxy variable points at the proxy, the session CA is trusted through the
//! variables common clients read, secrets appear only as placeholders, and nothing that could
//! route around the proxy or carry a real secret is inherited.
//!
//! What is removed from the inherited environment:
//! - every variable whose name ends in `_proxy` or `noproxy` (any case: `HTTP_PROXY`, `no_proxy`,
//!   `ALL_PROXY`, `FTP_PROXY`, `npm_config_https_proxy`, `npm_config_noproxy`, `YARN_HTTPS_PROXY`,
//!   ...) and `GIT_PROXY_COMMAND`. `NO_PROXY` is not set again: inside the sandbox every
//!   destination, loopback included, goes through the proxy (loopback *inside* the namespace
//!   reaches only the sandbox's own listeners, so a tool that needs a local server it started
//!   itself must not use the proxy variables for it). `GOPROXY` and `GONOPROXY` are kept: they
//!   name Go module mirrors, which Go reaches through `HTTPS_PROXY`.
//! - every `FENZI_SECRET_*` variable (any case) and every name the caller lists as a secret.
//! - the CA and proxy variables set below, so the caller's values cannot override ours.
//!
//! What is set:
//! - `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` and their lower-case forms: the proxy URL.
//! - `NODE_USE_ENV_PROXY=1`: Node 24+ then routes `fetch` and `http(s)` through the proxy
//!   variables. Older Node ignores them; it can be made to honour them with
//!   `NODE_OPTIONS=--require <a global-agent / undici EnvHttpProxyAgent bootstrap>`, which this
//!   function does not add (it would need a file in the sandbox).
//! - The CA: variables that *replace* a client's trust store get the bundle (system roots plus
//!   the session CA, because hosts the proxy only tunnels present their real certificates):
//!   `SSL_CERT_FILE` (OpenSSL, Python `ssl`/httpx, Go, Rust native roots, uv), `REQUESTS_CA_BUNDLE`,
//!   `CURL_CA_BUNDLE`, `GIT_SSL_CAINFO`, `PIP_CERT`, `AWS_CA_BUNDLE`, `CARGO_HTTP_CAINFO`,
//!   `GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`, `CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE`, `NIX_SSL_CERT_FILE`,
//!   `HTTPLIB2_CA_CERTS` (Python's httplib2, under the Google API clients).
//!   Variables that *add* to the built-in roots get the session CA alone: `NODE_EXTRA_CA_CERTS`
//!   (Node, Bun, npm) and `DENO_CERT`.
//! - With a sandbox cache directory ([`EnvInputs::cache_dir`]), every package manager's cache
//!   inside it ([`CACHE_VARS`]): `XDG_CACHE_HOME`, npm's, pnpm's home and store, Yarn's, pip's, uv's,
//!   `CARGO_HOME`, Go's module and build caches and `GOPATH`, Gradle's home, and Maven's local
//!   repository (appended to an inherited `MAVEN_OPTS`). The person's own caches stay out of the
//!   agent's reach, so what a hostile agent puts in a cache is trusted by no tool outside the
//!   sandbox (the reasoning is in `fenzi run`'s `caches` module).
//! - One variable per placeholder, `NAME=placeholder`. A placeholder whose name collides with a
//!   variable set above is dropped: the proxy, CA and cache settings always win.
//!
//! Set variables come after the inherited ones, in a fixed order, each name exactly once.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Variables that replace a client's trust store: they get the bundle.
pub const CA_BUNDLE_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
    "AWS_CA_BUNDLE",
    "CARGO_HTTP_CAINFO",
    "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
    "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE",
    "NIX_SSL_CERT_FILE",
    "HTTPLIB2_CA_CERTS",
];

/// Variables that add certificates to a client's built-in roots: they get the session CA alone.
pub const CA_EXTRA_VARS: &[&str] = &["NODE_EXTRA_CA_CERTS", "DENO_CERT"];

/// Proxy variables that are set to the proxy URL.
pub const PROXY_VARS: &[&str] = &[
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// Each package manager's cache variable and the directory beneath the sandbox cache it names.
/// pnpm keeps its store in `PNPM_HOME/store` (npm would warn about `npm_config_store_dir` on every
/// run); Go's module cache is `GOPATH/pkg/mod`.
pub const CACHE_VARS: &[(&str, &str)] = &[
    ("XDG_CACHE_HOME", "xdg"),
    ("npm_config_cache", "npm"),
    ("PNPM_HOME", "pnpm"),
    ("YARN_CACHE_FOLDER", "yarn"),
    ("YARN_GLOBAL_FOLDER", "yarn-berry"),
    ("PIP_CACHE_DIR", "pip"),
    ("UV_CACHE_DIR", "uv"),
    ("CARGO_HOME", "cargo"),
    ("GOPATH", "go"),
    ("GOMODCACHE", "go/pkg/mod"),
    ("GOCACHE", "go-build"),
    ("GRADLE_USER_HOME", "gradle"),
];

/// Maven has no variable for its local repository: a system property in `MAVEN_OPTS` names it.
const MAVEN_OPTS: &str = "MAVEN_OPTS";
/// Maven's local repository beneath the sandbox cache.
const MAVEN_REPO: &str = "maven";

/// Prefix of the variables that carry real secret values to `fenzi proxy` (never to a sandbox).
pub const SECRET_ENV_PREFIX: &str = "FENZI_SECRET_";

/// The session facts the environment is built from.
#[derive(Clone, Copy, Debug)]
pub struct EnvInputs<'a> {
    /// The proxy as the sandbox reaches it, e.g. `http://127.0.0.1:3128`.
    pub proxy_url: &'a str,
    /// PEM file holding the session CA certificate only (never the key).
    pub ca_cert_path: &'a Path,
    /// PEM file holding the system roots followed by the session CA (see `ca_bundle`).
    pub ca_bundle_path: &'a Path,
    /// `(secret name, placeholder)` for every secret the policy lists.
    pub placeholders: &'a [(String, String)],
    /// Further names whose inherited values must not enter the sandbox (secrets the policy lists
    /// but that have no placeholder, e.g. missing from the store).
    pub secret_names: &'a [String],
    /// The directory the sandbox's package-manager caches live in (see [`CACHE_VARS`]); `None`
    /// leaves the inherited cache settings alone (no sandbox).
    pub cache_dir: Option<&'a Path>,
}

/// True when an inherited variable named `name` could send traffic around the proxy.
fn routes_around_proxy(name: &[u8]) -> bool {
    let lower = name.to_ascii_lowercase();
    if lower == b"goproxy" || lower == b"gonoproxy" {
        return false;
    }
    lower.ends_with(b"_proxy") || lower.ends_with(b"noproxy") || lower == b"git_proxy_command"
}

fn is_secret_transport(name: &[u8]) -> bool {
    name.len() >= SECRET_ENV_PREFIX.len()
        && name[..SECRET_ENV_PREFIX.len()].eq_ignore_ascii_case(SECRET_ENV_PREFIX.as_bytes())
}

/// Builds the sandbox's environment from `base` (normally the caller's environment).
pub fn sandbox_env<I, K, V>(inputs: &EnvInputs<'_>, base: I) -> Vec<(OsString, OsString)>
where
    I: IntoIterator<Item = (K, V)>,
    K: Into<OsString>,
    V: Into<OsString>,
{
    let inherited: Vec<(OsString, OsString)> = base
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
    let mut set: Vec<(OsString, OsString)> = Vec::new();
    for name in PROXY_VARS {
        set.push((name.into(), inputs.proxy_url.into()));
    }
    set.push(("NODE_USE_ENV_PROXY".into(), "1".into()));
    for name in CA_BUNDLE_VARS {
        set.push((name.into(), inputs.ca_bundle_path.as_os_str().to_owned()));
    }
    for name in CA_EXTRA_VARS {
        set.push((name.into(), inputs.ca_cert_path.as_os_str().to_owned()));
    }
    if let Some(dir) = inputs.cache_dir {
        for (name, sub) in CACHE_VARS {
            set.push((name.into(), dir.join(sub).into_os_string()));
        }
        set.push((
            MAVEN_OPTS.into(),
            maven_opts(base_value(&inherited, MAVEN_OPTS), dir),
        ));
    }
    let controlled: HashSet<OsString> = set.iter().map(|(k, _)| k.clone()).collect();
    for (name, placeholder) in inputs.placeholders {
        let name = OsString::from(name);
        if !controlled.contains(&name) && !routes_around_proxy(name.as_bytes()) {
            set.push((name, placeholder.into()));
        }
    }

    let secret: HashSet<&OsStr> = inputs
        .secret_names
        .iter()
        .chain(inputs.placeholders.iter().map(|(name, _)| name))
        .map(OsStr::new)
        .collect();
    let assigned: HashSet<&OsStr> = set.iter().map(|(k, _)| k.as_os_str()).collect();
    let mut out: Vec<(OsString, OsString)> = Vec::new();
    let mut seen: HashSet<OsString> = HashSet::new();
    // Later duplicates win, as in a process environment: walk backwards, keep the first seen.
    for (name, value) in inherited.into_iter().rev() {
        let bytes = name.as_bytes();
        let drop = bytes.is_empty()
            || bytes.contains(&b'=')
            || routes_around_proxy(bytes)
            || is_secret_transport(bytes)
            || secret.contains(name.as_os_str())
            || assigned.contains(name.as_os_str());
        if !drop && seen.insert(name.clone()) {
            out.push((name, value));
        }
    }
    out.reverse();
    out.extend(set);
    out
}

/// The value `name` has in `env` (the last one, as in a process environment).
fn base_value<'e>(env: &'e [(OsString, OsString)], name: &str) -> Option<&'e OsStr> {
    env.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_os_str())
}

/// `MAVEN_OPTS` with the local repository in the sandbox cache. Maven takes the last of repeated
/// `-D` properties, so an inherited `-Dmaven.repo.local` cannot win over ours.
fn maven_opts(inherited: Option<&OsStr>, cache_dir: &Path) -> OsString {
    let mut out = OsString::new();
    if let Some(opts) = inherited.filter(|o| !o.is_empty()) {
        out.push(opts);
        out.push(" ");
    }
    out.push("-Dmaven.repo.local=");
    out.push(cache_dir.join(MAVEN_REPO));
    out
}

/// Well-known locations of the system's PEM root bundle (the list Go's crypto/x509 uses).
pub const SYSTEM_CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The bundle to write for `ca_bundle_path`: the system roots, then the session CA. Pure; the
/// caller reads the system bundle (see [`SYSTEM_CA_BUNDLES`]) and writes the result.
pub fn ca_bundle(system_roots_pem: &str, session_ca_pem: &str) -> String {
    let mut out = String::with_capacity(system_roots_pem.len() + session_ca_pem.len() + 1);
    out.push_str(system_roots_pem);
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(session_ca_pem);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs<'a>(placeholders: &'a [(String, String)], secrets: &'a [String]) -> EnvInputs<'a> {
        EnvInputs {
            proxy_url: "http://127.0.0.1:3128",
            ca_cert_path: Path::new("/s/ca.pem"),
            ca_bundle_path: Path::new("/s/bundle.pem"),
            placeholders,
            secret_names: secrets,
            cache_dir: None,
        }
    }

    fn get<'a>(env: &'a [(OsString, OsString)], name: &str) -> Vec<&'a str> {
        env.iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.to_str().unwrap())
            .collect()
    }

    fn build(
        base: &[(&str, &str)],
        placeholders: &[(String, String)],
        secrets: &[String],
    ) -> Vec<(OsString, OsString)> {
        sandbox_env(
            &inputs(placeholders, secrets),
            base.iter().map(|&(k, v)| (k, v)),
        )
    }

    #[test]
    fn proxy_variables_point_at_the_proxy_in_both_cases() {
        let env = build(
            &[
                ("HTTP_PROXY", "http://corp:8080"),
                ("https_proxy", "http://corp:8080"),
            ],
            &[],
            &[],
        );
        for name in PROXY_VARS {
            assert_eq!(get(&env, name), ["http://127.0.0.1:3128"], "{name}");
        }
        assert_eq!(get(&env, "NODE_USE_ENV_PROXY"), ["1"]);
    }

    #[test]
    fn bypass_variables_are_removed_and_not_set_again() {
        let base = [
            ("NO_PROXY", "*"),
            ("no_proxy", "localhost,.internal"),
            ("FTP_PROXY", "x"),
            ("Socks_Proxy", "x"),
            ("npm_config_noproxy", "*"),
            ("npm_config_https_proxy", "http://corp"),
            ("GIT_PROXY_COMMAND", "nc"),
            ("GOPROXY", "https://proxy.golang.org"),
            ("PATH", "/usr/bin"),
        ];
        let env = build(&base, &[], &[]);
        for name in [
            "NO_PROXY",
            "no_proxy",
            "FTP_PROXY",
            "Socks_Proxy",
            "npm_config_noproxy",
            "npm_config_https_proxy",
            "GIT_PROXY_COMMAND",
        ] {
            assert!(get(&env, name).is_empty(), "{name} survived");
        }
        assert_eq!(get(&env, "GOPROXY"), ["https://proxy.golang.org"]);
        assert_eq!(get(&env, "PATH"), ["/usr/bin"]);
    }

    #[test]
    fn ca_variables_replace_inherited_ones() {
        let env = build(
            &[
                ("SSL_CERT_FILE", "/etc/corp.pem"),
                ("NODE_EXTRA_CA_CERTS", "/corp.pem"),
            ],
            &[],
            &[],
        );
        for name in CA_BUNDLE_VARS {
            assert_eq!(get(&env, name), ["/s/bundle.pem"], "{name}");
        }
        for name in CA_EXTRA_VARS {
            assert_eq!(get(&env, name), ["/s/ca.pem"], "{name}");
        }
    }

    #[test]
    fn secrets_never_pass_and_placeholders_do() {
        let placeholders = vec![("GITHUB_TOKEN".to_owned(), "ph_abc".to_owned())];
        let secrets = vec!["DO_TOKEN".to_owned()];
        let base = [
            ("FENZI_SECRET_GITHUB_TOKEN", "real1"),
            ("fenzi_secret_other", "real2"),
            ("GITHUB_TOKEN", "real3"),
            ("DO_TOKEN", "real4"),
            ("HOME", "/home/u"),
        ];
        let env = build(&base, &placeholders, &secrets);
        assert_eq!(get(&env, "GITHUB_TOKEN"), ["ph_abc"]);
        assert!(get(&env, "DO_TOKEN").is_empty());
        assert!(get(&env, "FENZI_SECRET_GITHUB_TOKEN").is_empty());
        assert!(get(&env, "fenzi_secret_other").is_empty());
        for (_, value) in &env {
            assert!(
                !value.to_str().unwrap().starts_with("real"),
                "a real value leaked: {value:?}"
            );
        }
        assert_eq!(get(&env, "HOME"), ["/home/u"]);
    }

    #[test]
    fn placeholders_cannot_override_proxy_or_ca_settings() {
        let placeholders = vec![
            ("HTTPS_PROXY".to_owned(), "ph1".to_owned()),
            ("SSL_CERT_FILE".to_owned(), "ph2".to_owned()),
            ("no_proxy".to_owned(), "ph3".to_owned()),
        ];
        let env = build(&[], &placeholders, &[]);
        assert_eq!(get(&env, "HTTPS_PROXY"), ["http://127.0.0.1:3128"]);
        assert_eq!(get(&env, "SSL_CERT_FILE"), ["/s/bundle.pem"]);
        assert!(get(&env, "no_proxy").is_empty());
    }

    #[test]
    fn each_name_once_inherited_order_kept_later_duplicate_wins() {
        let env = build(
            &[("A", "1"), ("B", "2"), ("A", "3"), ("=bad", "x"), ("", "y")],
            &[],
            &[],
        );
        assert_eq!(get(&env, "A"), ["3"]);
        let names: Vec<_> = env.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(&names[..2], ["B", "A"]);
        let unique: HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
        assert!(!names.contains(&"=bad") && !names.contains(&""));
    }

    #[test]
    fn caches_point_into_the_sandbox_cache_whatever_was_inherited() {
        let base = [
            ("PIP_CACHE_DIR", "/home/u/.cache/pip"),
            ("CARGO_HOME", "/home/u/.cargo"),
            (
                "MAVEN_OPTS",
                "-Xmx1g -Dmaven.repo.local=/home/u/.m2/repository",
            ),
        ];
        let input = EnvInputs {
            cache_dir: Some(Path::new("/c/proj-1")),
            ..inputs(&[], &[])
        };
        let env = sandbox_env(&input, base.iter().map(|&(k, v)| (k, v)));
        for (name, sub) in CACHE_VARS {
            assert_eq!(get(&env, name), [format!("/c/proj-1/{sub}")], "{name}");
        }
        // Maven takes the last -D: ours comes after the inherited one.
        assert_eq!(
            get(&env, "MAVEN_OPTS"),
            ["-Xmx1g -Dmaven.repo.local=/home/u/.m2/repository -Dmaven.repo.local=/c/proj-1/maven"]
        );
        // Without a sandbox cache the inherited values stay.
        let env = build(&base, &[], &[]);
        assert_eq!(get(&env, "CARGO_HOME"), ["/home/u/.cargo"]);
        assert!(get(&env, "npm_config_cache").is_empty());
    }

    #[test]
    fn bundle_is_system_roots_then_session_ca() {
        assert_eq!(ca_bundle("ROOTS", "CA\n"), "ROOTS\nCA\n");
        assert_eq!(ca_bundle("ROOTS\n", "CA\n"), "ROOTS\nCA\n");
        assert_eq!(ca_bundle("", "CA\n"), "CA\n");
    }

    #[test]
    fn the_policy_refuses_every_variable_the_sandbox_sets() {
        // The config loader must refuse these as secret names, so a placeholder is never dropped here
        // silently: one rule in the policy crate, checked against this module's lists.
        let all = PROXY_VARS
            .iter()
            .chain(CA_BUNDLE_VARS)
            .chain(CA_EXTRA_VARS)
            .chain(CACHE_VARS.iter().map(|(name, _)| name))
            .chain(&["NODE_USE_ENV_PROXY", "FENZI_SECRET_X", "MAVEN_OPTS"]);
        for name in all {
            let upper = name.to_ascii_uppercase();
            assert!(
                fenzi_policy::secret_name::reserved_reason(&upper).is_some(),
                "{upper} is set by the sandbox but the policy would accept it as a secret name"
            );
        }
    }
}
