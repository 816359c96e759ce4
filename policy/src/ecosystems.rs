//! The package ecosystems `fenzi init` recognises in a folder, and the registry hosts each one's
//! package manager needs to install dependencies: the one table of them in fenzi.
//!
//! Each row was checked against what the package manager really requests where a test can do so
//! (scripts/e2e/package_managers.sh serves the registries under these names on loopback, runs the
//! tool inside `fenzi run` with a policy `fenzi init` wrote, and compares the hosts in the audit
//! log with this table): npm and pnpm, Yarn 1, pip and uv, cargo, Go. Maven and Gradle rows
//! follow their documented defaults and are not exercised by a test.

/// One ecosystem: how `fenzi init` spots it, and the hosts its default registry needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ecosystem {
    /// What the comment above its hosts calls it.
    pub label: &'static str,
    /// File names in the project folder that say the ecosystem is used (any one is enough).
    pub markers: &'static [&'static str],
    /// The hosts an install reaches, in the order they are written.
    pub hosts: &'static [&'static str],
    /// What each host is for, written as the comment (one line).
    pub why: &'static str,
}

/// Every ecosystem, in the order `fenzi init` writes them.
pub const ECOSYSTEMS: &[Ecosystem] = &[
    Ecosystem {
        label: "npm",
        markers: &[
            "package.json",
            "package-lock.json",
            "npm-shrinkwrap.json",
            "pnpm-lock.yaml",
            "pnpm-workspace.yaml",
        ],
        hosts: &["registry.npmjs.org"],
        why: "the npm registry (npm, pnpm; packuments and tarballs alike)",
    },
    Ecosystem {
        label: "Yarn",
        markers: &["yarn.lock", ".yarnrc.yml", ".yarnrc"],
        hosts: &["registry.yarnpkg.com"],
        why: "Yarn's default registry, a front of npm's",
    },
    Ecosystem {
        label: "Python",
        markers: &[
            "pyproject.toml",
            "requirements.txt",
            "setup.py",
            "setup.cfg",
            "Pipfile",
            "uv.lock",
            "poetry.lock",
        ],
        hosts: &["pypi.org", "files.pythonhosted.org"],
        why: "PyPI: the index (pip, uv) and the host its files are served from",
    },
    Ecosystem {
        label: "Rust",
        markers: &["Cargo.toml", "Cargo.lock"],
        hosts: &["index.crates.io", "static.crates.io"],
        why: "crates.io: the sparse index and the crate downloads",
    },
    Ecosystem {
        label: "Go",
        markers: &["go.mod", "go.work"],
        hosts: &["proxy.golang.org", "sum.golang.org"],
        why: "the Go module mirror and the checksum database",
    },
    Ecosystem {
        label: "Maven",
        markers: &["pom.xml", "mvnw"],
        hosts: &["repo.maven.apache.org"],
        why: "Maven Central",
    },
    Ecosystem {
        label: "Gradle",
        markers: &[
            "build.gradle",
            "build.gradle.kts",
            "settings.gradle",
            "settings.gradle.kts",
            "gradlew",
        ],
        hosts: &[
            "repo.maven.apache.org",
            "plugins.gradle.org",
            "plugins-artifacts.gradle.org",
            "services.gradle.org",
            "downloads.gradle.org",
        ],
        why: "Maven Central, the plugin portal and its artifacts, and the wrapper's distributions",
    },
];

/// One ecosystem found in a folder, with the markers that showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub ecosystem: &'static Ecosystem,
    pub markers: Vec<&'static str>,
}

/// The ecosystems whose markers are among `names` (the file names in a folder), in table order.
pub fn detect<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<Found> {
    let names: Vec<&str> = names.into_iter().collect();
    ECOSYSTEMS
        .iter()
        .filter_map(|ecosystem| {
            let markers: Vec<&'static str> = ecosystem
                .markers
                .iter()
                .copied()
                .filter(|m| names.contains(m))
                .collect();
            (!markers.is_empty()).then_some(Found { ecosystem, markers })
        })
        .collect()
}

/// The hosts of `found`, each once, in order.
pub fn hosts(found: &[Found]) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for f in found {
        for h in f.ecosystem.hosts {
            if !out.contains(h) {
                out.push(h);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::HostPattern;

    fn labels(found: &[Found]) -> Vec<&str> {
        found.iter().map(|f| f.ecosystem.label).collect()
    }

    #[test]
    fn each_marker_finds_its_ecosystem() {
        let cases: &[(&[&str], &[&str])] = &[
            (&["package.json"], &["npm"]),
            (&["package.json", "yarn.lock"], &["npm", "Yarn"]),
            (&["requirements.txt"], &["Python"]),
            (&["pyproject.toml", "uv.lock"], &["Python"]),
            (&["Cargo.toml"], &["Rust"]),
            (&["go.mod"], &["Go"]),
            (&["pom.xml"], &["Maven"]),
            (&["build.gradle.kts"], &["Gradle"]),
            (&["README.md", "src", "Makefile"], &[]),
            (
                &["go.mod", "package.json", "Cargo.toml"],
                &["npm", "Rust", "Go"],
            ),
        ];
        for (names, want) in cases {
            assert_eq!(labels(&detect(names.iter().copied())), *want, "{names:?}");
        }
    }

    #[test]
    fn hosts_are_each_once_and_valid_policy_hosts() {
        let all = detect(ECOSYSTEMS.iter().flat_map(|e| e.markers.iter().copied()));
        assert_eq!(all.len(), ECOSYSTEMS.len());
        let hosts = hosts(&all);
        // Maven Central appears in two rows, once in the list.
        assert_eq!(
            hosts
                .iter()
                .filter(|h| **h == "repo.maven.apache.org")
                .count(),
            1
        );
        for h in hosts {
            let p = HostPattern::parse(h).unwrap_or_else(|e| panic!("{h}: {e}"));
            assert!(!h.contains('*') && !h.contains(':'), "{p:?}");
        }
        for e in ECOSYSTEMS {
            assert!(!e.why.contains('\n') && !e.hosts.is_empty(), "{}", e.label);
        }
    }
}
