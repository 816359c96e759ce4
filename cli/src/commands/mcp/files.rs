//! The two policy files the `mcp` commands read and edit, how they are loaded together, and how an
//! edit reaches the disk: only after the loader has read the new text, found it valid together
//! with the other file, and found that it means exactly what was asked; then atomically (a
//! temporary file in the same directory, renamed over the old one), keeping the file's mode and
//! writing through a symlink to its target.

use super::entry::describe_config;
use crate::config_files;
use anyhow::{Context, Result, anyhow, bail};
use fenzi_policy::config::{self, Config, Origin};
use std::io::Write;
use std::path::{Path, PathBuf};

/// `--config FILE`, shared by the `mcp` subcommands.
#[derive(Debug, Clone, clap::Args)]
pub struct FileArgs {
    /// The project policy.
    #[arg(long, value_name = "FILE", default_value = config_files::DEFAULT_PROJECT_FILE)]
    pub config: PathBuf,
}

/// One policy file: where it is and, if it exists, its text.
#[derive(Debug, Clone)]
pub struct PolicyFile {
    pub path: PathBuf,
    pub origin: Origin,
    /// The bytes as read (for the changed-meanwhile check); `None` when the file does not exist.
    pub bytes: Option<Vec<u8>>,
    pub text: Option<String>,
}

impl PolicyFile {
    pub fn name(&self) -> String {
        self.path.display().to_string()
    }

    /// Reads `path`; a missing file is `text: None`, any other failure an error.
    pub fn read(path: &Path, origin: Origin) -> Result<PolicyFile> {
        match config_files::read_bounded(path) {
            Ok(bytes) => {
                let name = path.display().to_string();
                let text = config::decode(&bytes, &name)
                    .map_err(|e| anyhow!("{e}"))?
                    .to_string();
                Ok(PolicyFile {
                    path: path.to_path_buf(),
                    origin,
                    bytes: Some(bytes),
                    text: Some(text),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(PolicyFile {
                path: path.to_path_buf(),
                origin,
                bytes: None,
                text: None,
            }),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }
}

/// The project file and the machine file.
#[derive(Debug, Clone)]
pub struct Files {
    pub project: PolicyFile,
    pub machine: Option<PolicyFile>,
}

impl Files {
    pub fn read(args: &FileArgs) -> Result<Files> {
        let project = PolicyFile::read(&args.config, Origin::Project)?;
        let machine = match config_files::default_machine_file() {
            Some(p) => Some(PolicyFile::read(&p, Origin::Machine)?),
            None => None,
        };
        Ok(Files { project, machine })
    }

    /// The file `--machine` selects (or the project file).
    pub fn target(&self, machine: bool) -> Result<&PolicyFile> {
        if machine {
            self.machine
                .as_ref()
                .ok_or_else(|| anyhow!("no machine file location: set HOME or XDG_CONFIG_HOME"))
        } else {
            Ok(&self.project)
        }
    }

    /// The merged policy of the files that exist; `None` when neither does.
    pub fn load(&self) -> Result<Option<Config>> {
        self.load_with(None)
    }

    /// Like [`Files::load`], with `replacement` standing in for the file of that origin.
    pub fn load_with(&self, replacement: Option<(Origin, &str)>) -> Result<Option<Config>> {
        self.load_with_errors(replacement)
            .map_err(|e| anyhow!("{e}"))
    }

    /// [`Files::load_with`] with the loader's own errors.
    pub fn load_with_errors(
        &self,
        replacement: Option<(Origin, &str)>,
    ) -> std::result::Result<Option<Config>, config::ConfigErrors> {
        let pick = |f: Option<&PolicyFile>, origin: Origin| -> Option<(String, String)> {
            match replacement {
                Some((o, text)) if o == origin => f.map(|f| (text.to_string(), f.name())),
                _ => f.and_then(|f| f.text.clone().map(|t| (t, f.name()))),
            }
        };
        let machine = pick(self.machine.as_ref(), Origin::Machine);
        let project = pick(Some(&self.project), Origin::Project);
        if machine.is_none() && project.is_none() {
            return Ok(None);
        }
        config::load(
            machine.as_ref().map(|(t, n)| (t.as_str(), n.as_str())),
            project.as_ref().map(|(t, n)| (t.as_str(), n.as_str())),
        )
        .map(Some)
    }
}

/// Parses one file on its own (the file-level rules; [`Files::load_with`] adds the merge).
pub fn parse_one(
    text: &str,
    file: &PolicyFile,
) -> std::result::Result<Config, config::ConfigErrors> {
    config::parse(text, &file.name(), file.origin)
}

/// The parsed target file before an edit: an empty policy when the file does not exist yet, an
/// error when it does not load on its own (an edit must not be layered on a broken file).
pub fn parse_before(target: &PolicyFile) -> Result<Config> {
    match &target.text {
        None => Ok(Config::default()),
        Some(text) => parse_one(text, target).map_err(|e| {
            anyhow!(
                "{e}\n{} has errors; fix them first, nothing was written",
                target.name()
            )
        }),
    }
}

/// The description lines of a parsed file minus one server.
fn describe_without(c: &Config, name: &str) -> Vec<String> {
    let mut c = c.clone();
    c.mcp.retain(|s| s.name != name);
    describe_config(&c)
}

/// Checks an edited text before it is written: it parses; it differs from `before` in server
/// `name` only; that server now reads as `want` (or is gone when `want` is `None`); and it loads
/// together with the other file. Returns the edited file, parsed.
pub fn check_edit(
    files: &Files,
    target: &PolicyFile,
    before: &Config,
    new_text: &str,
    name: &str,
    want: Option<&str>,
) -> Result<Config> {
    let parsed = parse_one(new_text, target).map_err(|e| {
        anyhow!(
            "{e}\nthe change would make {} invalid; nothing was written",
            target.name()
        )
    })?;
    let got = parsed
        .mcp
        .iter()
        .find(|s| s.name == name)
        .map(super::entry::describe_server);
    if describe_without(&parsed, name) != describe_without(before, name) || got.as_deref() != want {
        bail!(
            "fenzi could not edit {} safely (the result would not say exactly what was asked); \
             nothing was written: edit the file by hand",
            target.name()
        );
    }
    files
        .load_with(Some((target.origin, new_text)))
        .map_err(|e| anyhow!("{e}\nnothing was written to {}", target.name()))?;
    Ok(parsed)
}

/// Replaces the file's contents atomically, unless it changed since it was read.
pub fn write_atomic(target: &PolicyFile, text: &str) -> Result<()> {
    // Write where a symlink points, so the link stays a link.
    let path = match std::fs::canonicalize(&target.path) {
        Ok(p) => p,
        Err(_) => target.path.clone(),
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if target.bytes.is_none() {
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mode = match std::fs::metadata(&path) {
        Ok(m) => m.permissions(),
        Err(_) => {
            use std::os::unix::fs::PermissionsExt;
            std::fs::Permissions::from_mode(0o644)
        }
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".fenzi-edit-")
        .suffix(".tmp")
        .tempfile_in(&dir)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    tmp.write_all(text.as_bytes())
        .and_then(|_| tmp.as_file().sync_all())
        .with_context(|| format!("cannot write a temporary file in {}", dir.display()))?;
    std::fs::set_permissions(tmp.path(), mode)
        .with_context(|| format!("cannot set the mode of the new {}", path.display()))?;
    // Someone else's edit since we read: do not overwrite it.
    let now = match std::fs::read(&path) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    if now != target.bytes {
        bail!(
            "{} changed while fenzi was editing it; nothing was written, run the command again",
            target.name()
        );
    }
    tmp.persist(&path)
        .map_err(|e| anyhow!("cannot replace {}: {}", path.display(), e.error))?;
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
