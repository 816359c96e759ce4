//! How Grok gets the policy's MCP servers. Grok reads its servers only from its own settings file
//! (`$GROK_HOME/config.toml`, default `~/.grok/config.toml`) and a project's; the overlay file it
//! takes from `GROK_CONFIG_PATH` may set models and features but not servers. So `fenzi run --agent
//! grok` writes the session's version of that file (the user's settings, byte for byte, with its
//! `mcp_servers` replaced by the policy's) into the session directory, and the sandbox shows it in
//! place of the user's file, read-only. The user's file is never written; when there is none, an
//! empty one is created first, because a mount needs a file to cover.
//!
//! The user's own `mcp_servers` are left out for the session, as `--strict-mcp-config` leaves
//! Claude Code's out: the servers an agent sees under fenzi are the policy's.

use crate::commands::run::protect;
use crate::config_files;
use crate::session;
use anyhow::{Context, Result, bail};
use fenzi_proxy::host_files::HostDir;
use std::path::{Path, PathBuf};

/// The session's settings file for Grok and what it replaces.
pub struct SessionConfig {
    /// The file in the session directory.
    pub file: PathBuf,
    /// Grok's own settings file, which the sandbox shows as `file`.
    pub covers: PathBuf,
    /// The servers of the user's file left out for the session.
    pub hidden: Vec<String>,
}

/// Grok's settings file for `home` (`$GROK_HOME/config.toml` or `HOME/.grok/config.toml`).
pub fn settings_file(home: &Path) -> PathBuf {
    protect::grok_home(home).join("config.toml")
}

/// Writes the session's settings file for Grok into `session_dir`: the text of `settings` (if it
/// exists) without its `mcp_servers`, then `servers` (the policy's, as `fenzi mcp render --agent
/// grok` prints them). Creates `settings` empty (mode 0600) when it does not exist.
pub fn write(session_dir: &HostDir, settings: &Path, servers: &str) -> Result<SessionConfig> {
    let user = match config_files::read_bounded(settings) {
        Ok(bytes) => String::from_utf8(bytes)
            .map_err(|_| anyhow::anyhow!("{} is not UTF-8 text", settings.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            create_empty(settings)?;
            String::new()
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", settings.display())),
    };
    let (text, hidden) = merge(&user, servers).with_context(|| {
        format!(
            "cannot give Grok the policy's MCP servers alongside {}",
            settings.display()
        )
    })?;
    let file = session::write_file(session_dir, "grok-config.toml", text.as_bytes())?;
    Ok(SessionConfig {
        file,
        covers: settings.to_path_buf(),
        hidden,
    })
}

/// `user` (Grok's settings, TOML) with its `mcp_servers` removed and `servers` appended, and the
/// names removed. Every other byte of `user`, comments included, is kept.
fn merge(user: &str, servers: &str) -> Result<(String, Vec<String>)> {
    let mut doc: toml_edit::DocumentMut = user
        .parse()
        .map_err(|e: toml_edit::TomlError| anyhow::anyhow!("it is not valid TOML: {e}"))?;
    let hidden = match doc.remove("mcp_servers") {
        None => vec![],
        Some(item) => match item.as_table_like() {
            Some(table) => table.iter().map(|(name, _)| name.to_string()).collect(),
            None => bail!("its `mcp_servers` is not a table"),
        },
    };
    let mut text = doc.to_string();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    if !servers.is_empty() {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str("# fenzi run: the policy's MCP servers, in place of the file's own\n");
        text.push_str(servers);
    }
    // What Grok will read must parse; a failure here is fenzi's, not the user's.
    text.parse::<toml_edit::DocumentMut>()
        .map_err(|e| anyhow::anyhow!("the merged file does not parse (a fenzi bug): {e}"))?;
    Ok((text, hidden))
}

/// Creates `path` empty with mode 0600, and its directory (0700) when missing. Never follows or
/// replaces anything already there (a dangling symlink included).
fn create_empty(path: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        session::create_private_dir(dir)?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create an empty {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVERS: &str = "[mcp_servers.e2e]\nurl = \"https://mcp.example.com/mcp\"\n";

    #[test]
    fn the_users_settings_stay_and_their_servers_give_way_to_the_policys() {
        let user = "# my settings\n[models]\ndefault = \"fake\" # chosen\n\n\
                    [mcp_servers.mine]\nurl = \"https://mine.example/mcp\"\n\n\
                    [mcp_servers.other]\ncommand = \"x\"\n\n[ui]\ntheme = \"dark\"\n";
        let (text, hidden) = merge(user, SERVERS).unwrap();
        assert_eq!(hidden, ["mine", "other"]);
        assert!(
            text.starts_with("# my settings\n[models]\ndefault = \"fake\" # chosen\n"),
            "{text}"
        );
        assert!(text.contains("[ui]\ntheme = \"dark\"\n"), "{text}");
        assert!(!text.contains("mine.example"), "{text}");
        assert!(text.ends_with(SERVERS), "{text}");
        let doc: toml_edit::DocumentMut = text.parse().unwrap();
        let names: Vec<_> = doc["mcp_servers"]
            .as_table_like()
            .unwrap()
            .iter()
            .map(|(k, _)| k.to_string())
            .collect();
        assert_eq!(names, ["e2e"]);
    }

    #[test]
    fn dotted_and_inline_server_tables_are_removed_too() {
        for user in [
            "mcp_servers.mine.url = \"https://mine.example/mcp\"\n",
            "mcp_servers = { mine = { url = \"https://mine.example/mcp\" } }",
        ] {
            let (text, hidden) = merge(user, SERVERS).unwrap();
            assert_eq!(hidden, ["mine"], "{user}");
            assert!(!text.contains("mine"), "{text}");
            assert!(text.ends_with(SERVERS));
        }
    }

    #[test]
    fn an_empty_file_gets_only_the_servers_and_no_servers_leave_the_file_alone() {
        let (text, hidden) = merge("", SERVERS).unwrap();
        assert!(hidden.is_empty());
        assert!(text.ends_with(SERVERS) && text.starts_with('#'), "{text}");
        let user = "[models]\ndefault = \"fake\"";
        assert_eq!(merge(user, "").unwrap().0, format!("{user}\n"));
    }

    #[test]
    fn invalid_settings_are_an_error_naming_where() {
        let err = merge("[models\n", SERVERS).unwrap_err().to_string();
        assert!(
            err.contains("not valid TOML") && err.contains("line 1"),
            "{err}"
        );
        let err = merge("mcp_servers = 3\n", SERVERS).unwrap_err().to_string();
        assert!(err.contains("not a table"), "{err}");
    }

    #[test]
    fn a_missing_file_is_created_empty_and_private_and_an_existing_one_is_not_written() {
        let dir = std::env::temp_dir().join(format!("fenzi-grok-config-{}", std::process::id()));
        let session_dir = HostDir::open(&dir.join("session")).unwrap();
        let settings = dir.join("home/.grok/config.toml");
        let s = write(&session_dir, &settings, SERVERS).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(&settings).unwrap();
        assert_eq!((meta.len(), meta.permissions().mode() & 0o777), (0, 0o600));
        assert_eq!(s.covers, settings);
        assert!(std::fs::read_to_string(&s.file).unwrap().ends_with(SERVERS));

        std::fs::write(&settings, "[mcp_servers.mine]\nurl = \"u\"\n").unwrap();
        let s = write(&session_dir, &settings, SERVERS).unwrap();
        assert_eq!(s.hidden, ["mine"]);
        assert_eq!(
            std::fs::read_to_string(&settings).unwrap(),
            "[mcp_servers.mine]\nurl = \"u\"\n"
        );

        std::fs::remove_file(&settings).unwrap();
        std::os::unix::fs::symlink(dir.join("nowhere"), &settings).unwrap();
        assert!(write(&session_dir, &settings, SERVERS).is_err());
        assert!(!dir.join("nowhere").exists());
        std::fs::remove_dir_all(dir).ok();
    }
}
