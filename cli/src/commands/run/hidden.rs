//! The person's package-manager credential files, shown empty inside the sandbox. Landlock keeps
//! the sandbox from writing outside its list, not from reading, and these files hold real tokens
//! (`~/.npmrc`'s `_authToken`, `~/.cargo/credentials.toml`, `~/.pypirc`, `~/.netrc`, ...): an
//! agent that read one would hold a real secret, which fenzi otherwise keeps outside. Each one
//! that exists reads as an empty, read-only file inside; a token a tool needs there is given the
//! fenzi way, as a secret whose placeholder the project's own config names (e.g. a project
//! `.npmrc` with `//registry.npmjs.org/:_authToken=${NPM_TOKEN}` and `NPM_TOKEN` under
//! `secrets:` bound to that host).

use std::path::{Path, PathBuf};

/// Files beneath `HOME` that carry package registries' (or every host's) credentials.
pub const CREDENTIAL_FILES: &[&str] = &[
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".pypirc",
    ".config/pip/pip.conf",
    ".pip/pip.conf",
    ".netrc",
    ".git-credentials",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gradle/gradle.properties",
    ".m2/settings.xml",
    ".m2/settings-security.xml",
    ".docker/config.json",
];

/// The credential files beneath `home` that exist (as files, links followed): the ones to cover.
pub fn present(home: &Path) -> Vec<PathBuf> {
    CREDENTIAL_FILES
        .iter()
        .map(|rel| home.join(rel))
        .filter(|p| p.metadata().is_ok_and(|m| m.is_file()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_existing_files_are_covered() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join(".npmrc"), "//r/:_authToken=x\n").unwrap();
        std::fs::create_dir_all(home.path().join(".cargo/credentials.toml")).unwrap();
        std::fs::create_dir_all(home.path().join(".m2")).unwrap();
        std::fs::write(home.path().join(".m2/settings.xml"), "<settings/>").unwrap();
        assert_eq!(
            present(home.path()),
            [
                home.path().join(".npmrc"),
                home.path().join(".m2/settings.xml")
            ]
        );
    }
}
