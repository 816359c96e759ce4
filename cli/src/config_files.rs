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

/// The largest config, cases or import file read. Policy files are a few KiB; this bound keeps
/// `/dev/zero`, a FIFO that never ends or a file pointed at by mistake from being read whole.
pub const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

/// Reads the file at `path`, refusing it by size before reading it all: a regular file larger
/// than [`MAX_CONFIG_BYTES`] by its length, anything else (a FIFO, a device) once that many bytes
/// came. A directory is refused by name. Errors keep the `io::ErrorKind` (`NotFound` included).
pub fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind, Read};
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "is a directory, not a file",
        ));
    }
    let too_large = || {
        Error::new(
            ErrorKind::InvalidData,
            format!(
                "is larger than {} MiB, too large for a policy or cases file",
                MAX_CONFIG_BYTES >> 20
            ),
        )
    };
    if meta.is_file() && meta.len() > MAX_CONFIG_BYTES {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(too_large());
    }
    Ok(bytes)
}

/// A config file's text and the name errors should use for it.
pub struct ConfigText {
    pub text: String,
    pub name: String,
}

/// Reads a config file; a missing file is an error naming it. Text that is not UTF-8 comes back as the
/// loader's located error so it is reported like any other config problem.
pub fn read(path: &Path) -> Result<ConfigText> {
    let bytes = read_bounded(path).with_context(|| format!("cannot read {}", path.display()))?;
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

/// The policy-file flags shared by every command that loads the policy.
#[derive(Debug, Clone, clap::Args)]
pub struct PolicyArgs {
    /// The project policy.
    #[arg(long, value_name = "FILE", default_value = DEFAULT_PROJECT_FILE)]
    pub config: PathBuf,
    /// The machine file [default: $XDG_CONFIG_HOME/fenzi/mcp.yaml when it exists].
    #[arg(long, value_name = "FILE")]
    pub machine: Option<PathBuf>,
    /// Ignore the machine file even if it exists.
    #[arg(long, conflicts_with = "machine")]
    pub no_machine: bool,
}

/// The policy files read from disk, and what loading them gave.
pub struct LoadedPolicy {
    pub project: ConfigText,
    pub result: Result<fenzi_policy::config::Config, fenzi_policy::config::ConfigErrors>,
}

impl PolicyArgs {
    /// Reads the files (an unreadable file is an `Err`) and loads them (problems in them are in
    /// `result`, for the caller to report its own way).
    pub fn load(&self) -> Result<LoadedPolicy> {
        let (project, machine) = self.read()?;
        let result = fenzi_policy::config::load(
            machine.as_ref().map(|m| (m.text.as_str(), m.name.as_str())),
            Some((project.text.as_str(), project.name.as_str())),
        );
        Ok(LoadedPolicy { project, result })
    }

    /// Reads the project file and the machine file (an unreadable file is an `Err`).
    pub fn read(&self) -> Result<(ConfigText, Option<ConfigText>)> {
        if !self.config.exists() && self.config.symlink_metadata().is_err() {
            anyhow::bail!(
                "{} does not exist; start one with `fenzi mcp add NAME URL --tool TOOL` (it writes \
                 ./fenzi.yaml), copy testdata/policies/demo.yaml, or pass --config FILE",
                self.config.display()
            );
        }
        let project = read(&self.config)?;
        let machine = if self.no_machine {
            None
        } else {
            read_machine(self.machine.as_deref())?
        };
        Ok((project, machine))
    }

    /// The machine file these flags read, if any (the default one only when it exists).
    pub fn machine_path(&self) -> Option<PathBuf> {
        if self.no_machine {
            return None;
        }
        match &self.machine {
            Some(p) => Some(p.clone()),
            None => default_machine_file().filter(|p| p.exists()),
        }
    }

    /// The lock files beside the policy files these flags read (`fenzi.lock`, `mcp.lock`).
    pub fn lock_files(&self) -> fenzi_proxy::LockFiles {
        fenzi_proxy::LockFiles {
            project: Some(fenzi_proxy::lock_file::lock_path_for(&self.config)),
            machine: self
                .machine_path()
                .map(|p| fenzi_proxy::lock_file::lock_path_for(&p)),
            trust: lock_trust(),
        }
    }
}

/// Where fenzi records the lock contents it wrote or a person accepted: beside the audit logs in
/// its state directory (read-only inside the sandbox). `None` without XDG_STATE_HOME or HOME.
pub fn lock_trust() -> Option<fenzi_proxy::lock_file::trust::TrustRecords> {
    let audit =
        crate::session::audit_dir(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME"))?;
    Some(fenzi_proxy::lock_file::trust::TrustRecords::in_state_dir(
        audit.parent()?,
    ))
}
