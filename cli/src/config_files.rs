//! Where fenzi's config files live and how they are read: `./fenzi.yaml` for the project and
//! `$XDG_CONFIG_HOME/fenzi/mcp.yaml` (default `~/.config/fenzi/mcp.yaml`) for the machine.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The project file used when `--config` is not given.
pub const DEFAULT_PROJECT_FILE: &str = "fenzi.yaml";

/// The machine file's path (it may not exist).
pub fn default_machine_file() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".config"),
    };
    Some(base.join("fenzi").join("mcp.yaml"))
}

/// A config file's text and the name errors should use for it.
pub struct ConfigText {
    pub text: String,
    pub name: String,
}

/// Reads a config file; a missing file is an error naming it. Text that is not UTF-8 comes back as the
/// loader's located error so it is reported like any other config problem.
pub fn read(path: &Path) -> Result<ConfigText> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let name = path.display().to_string();
    let text = fenzi_policy::config::decode(&bytes, &name)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .to_string();
    Ok(ConfigText { text, name })
}

/// The machine file: the one asked for (must exist), else the default one if it exists.
pub fn read_machine(explicit: Option<&Path>) -> Result<Option<ConfigText>> {
    match explicit {
        Some(p) => read(p).map(Some),
        None => match default_machine_file() {
            Some(p) if p.exists() => read(&p).map(Some),
            _ => Ok(None),
        },
    }
}
