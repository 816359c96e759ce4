//! The two policy files the `mcp` commands read and edit, how they are loaded together, and how an
//! edit reaches the disk: only after the loader has read the new text, found it valid together
//! with the other file, and found that it means exactly what was asked.
//!
//! An edit is written in place ([`write_atomic`]): the existing file is opened
//! (`O_NOFOLLOW`, through a symbolic link's target, so a link stays a link) and rewritten, keeping
//! its inode and its mode; a new file is created exclusively. Never a temporary file renamed over
//! the old one: a running `fenzi run` protects its policy files by mounting each read-only onto
//! itself inside the sandbox, and a rename over the file on the host silently removes that mount
//! (the agent could then write the new file), and the session would no longer reload it (it
//! reloads only the file it protected at its start). The price is that a crash mid-write can leave
//! a partial file. So the first byte is written last: until the rest is on disk, the file starts
//! with a byte that is not UTF-8, and a file cut short anywhere fails to load with a located error
//! (fail closed: neither a running session nor the next one takes a policy from it, and the person
//! sees which file to fix) instead of possibly loading as a shorter, wider policy.

use super::entry::describe_config;
use crate::config_files;
use anyhow::{Context, Result, anyhow, bail};
use fenzi_policy::config::{self, Config, Origin};
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

/// The first byte of a file while fenzi rewrites it: never valid UTF-8, so a file left half
/// written fails to load.
const UNFINISHED: u8 = 0xFF;

/// Replaces the file's contents in place (see the module doc), unless it changed since it was
/// read; a file that did not exist is created exclusively (mode 0644 less the umask).
pub fn write_atomic(target: &PolicyFile, text: &str) -> Result<()> {
    use std::io::Read;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    // Write where a symlink points, so the link stays a link.
    let path = match std::fs::canonicalize(&target.path) {
        Ok(p) => p,
        Err(_) => target.path.clone(),
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let changed = || {
        anyhow!(
            "{} changed while fenzi was editing it; nothing was written, run the command again",
            target.name()
        )
    };
    // O_NONBLOCK: a FIFO put in its place is refused below, not waited on.
    let flags = (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32;
    let file = match &target.bytes {
        Some(read) => {
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(flags)
                .open(&path)
                .with_context(|| format!("cannot open {} to write it", path.display()))?;
            if !file.metadata()?.is_file() {
                bail!(
                    "{} is not a regular file; nothing was written",
                    path.display()
                );
            }
            // Someone else's edit since we read: do not overwrite it. Read through the
            // descriptor that will be written, so it is the same file.
            let mut now = Vec::new();
            (&mut file)
                .take(config_files::MAX_CONFIG_BYTES + 1)
                .read_to_end(&mut now)
                .with_context(|| format!("cannot read {}", path.display()))?;
            if &now != read {
                return Err(changed());
            }
            file
        }
        None => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .custom_flags(flags)
                .open(&path)
            {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(changed()),
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot create {}", path.display()));
                }
            }
        }
    };
    let bytes = text.as_bytes();
    let write = || -> std::io::Result<()> {
        let Some((&first, rest)) = bytes.split_first() else {
            file.set_len(0)?;
            return file.sync_all();
        };
        // Unfinished until the first byte is in: the rest, the length, then the first byte.
        file.write_all_at(&[UNFINISHED], 0)?;
        file.write_all_at(rest, 1)?;
        file.set_len(bytes.len() as u64)?;
        file.sync_data()?;
        file.write_all_at(&[first], 0)?;
        file.sync_all()
    };
    write().with_context(|| {
        format!(
            "cannot write {}; if it is left unfinished it will not load: run the command again",
            path.display()
        )
    })?;
    if target.bytes.is_none()
        && let Ok(d) = std::fs::File::open(&dir)
    {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn read(path: &Path) -> PolicyFile {
        PolicyFile::read(path, Origin::Project).unwrap()
    }

    #[test]
    fn an_edit_keeps_the_inode_and_mode_and_a_new_file_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fenzi.yaml");
        std::fs::write(&path, "version: 1\nhosts: [a.example, b.example]\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let before = std::fs::metadata(&path).unwrap();
        // Shorter, then longer: the same inode each time, the text exactly as given.
        for text in [
            "version: 1\n",
            "version: 1\nhosts: [a.example, b.example, c.example]\n",
        ] {
            write_atomic(&read(&path), text).unwrap();
            let after = std::fs::metadata(&path).unwrap();
            assert_eq!((after.dev(), after.ino()), (before.dev(), before.ino()));
            assert_eq!(after.mode() & 0o777, 0o640);
            assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        }
        // A running session's pinned file is still the one at the path, and reads the edit.
        let pinned = crate::reload::pinned::Pinned::open(&path).unwrap();
        write_atomic(&read(&path), "version: 1\nhosts: [z.example]\n").unwrap();
        assert!(matches!(
            pinned.look(),
            crate::reload::pinned::State::Protected(_)
        ));
        assert_eq!(pinned.read().unwrap(), b"version: 1\nhosts: [z.example]\n");
        // No temporary file beside it.
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
        // A new file, in a folder made for it.
        let new = dir.path().join("conf").join("fenzi.yaml");
        let target = read(&new);
        assert!(target.bytes.is_none());
        write_atomic(&target, "version: 1\n").unwrap();
        assert_eq!(std::fs::read_to_string(&new).unwrap(), "version: 1\n");
        // Made meanwhile by someone else: not overwritten.
        let e = write_atomic(&target, "version: 2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("changed while fenzi was editing it"), "{e}");
        assert_eq!(std::fs::read_to_string(&new).unwrap(), "version: 1\n");
    }

    #[test]
    fn an_edit_refuses_a_file_changed_meanwhile_or_replaced_by_something_else() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fenzi.yaml");
        std::fs::write(&path, "version: 1\n").unwrap();
        let target = read(&path);
        std::fs::write(&path, "version: 1\n# mine\n").unwrap();
        let e = write_atomic(&target, "version: 2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("changed while fenzi was editing it"), "{e}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "version: 1\n# mine\n"
        );
        // A FIFO in its place is refused without blocking.
        std::fs::remove_file(&path).unwrap();
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&path)
                .status()
                .unwrap()
                .success()
        );
        let e = write_atomic(&target, "version: 2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }

    #[test]
    fn a_file_left_unfinished_does_not_load() {
        // What a crash between the rest and the first byte leaves behind.
        let text = "version: 1\nhosts: [a.example]\n";
        let mut unfinished = text.as_bytes().to_vec();
        unfinished[0] = UNFINISHED;
        for cut in [1, 5, unfinished.len()] {
            let e = config::decode(&unfinished[..cut], "fenzi.yaml").unwrap_err();
            assert!(e.to_string().contains("fenzi.yaml:1:1"), "{e}");
        }
    }
}
