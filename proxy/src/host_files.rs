//! How fenzi creates, writes and removes files on the host while a session runs, so that nothing
//! the agent can write steers where those writes land (SECURITY.md, "The deputy").
//!
//! fenzi runs with the person's authority (often root); the agent runs in a sandbox that may write
//! the project directory and `/tmp`, where a person may also put an audit log (`--audit
//! ./audit.jsonl`). A path is looked up again at every use, so a path fenzi follows after the agent
//! started is a path the agent may have re-pointed (a symbolic link planted where fenzi writes a
//! temporary file, an ancestor renamed and rebuilt). So every directory fenzi writes in is opened
//! once, at start, before the agent runs ([`HostDir`]), and every later operation is relative to
//! that descriptor: files are created exclusively without following links (`O_CREAT|O_EXCL|
//! O_NOFOLLOW`), opened without following links, removed with `unlinkat`.
//!
//! Small files fenzi keeps up to date during a session (the audit head, the export cursor) are
//! [`SmallFile`]s: opened at start and rewritten in place through that descriptor, never replaced
//! by a rename. Two reasons. A temporary file in a directory the agent can write can be swapped
//! between its write and its rename. And a rename on the host over a file that the sandbox mounts
//! read-only removes that mount inside the sandbox (Linux ≥ 3.18 detaches mounts on a dentry that
//! is unlinked or renamed in another mount namespace), after which the agent could write the file.
//! In place, the file keeps its inode and its mount. Crash safety comes from size: each such file
//! is under 512 bytes, its text never gets shorter (its numbers only grow), and it is written with
//! one `pwrite` at offset 0 followed by `fdatasync`, so a crash leaves the old text or the new one
//! (a single-sector overwrite, which PostgreSQL's `pg_control` also relies on). A reader that
//! races a rewrite may read a mix, which parses as nothing valid: fail closed, read again.
//!
//! Runtime directories are per user and private ([`private_dir`]): created 0700, and refused when
//! they are a link, another user's, or writable by group or others.
//!
//! May use: nothing of this crate.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

/// A directory fenzi writes in, held by a descriptor opened before the agent started.
#[derive(Debug)]
pub struct HostDir {
    fd: OwnedFd,
    /// The path it was opened at, for messages only: nothing is looked up through it again.
    path: PathBuf,
}

/// How a file is opened through a [`HostDir`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// Created; an existing entry of that name (a link included) is an error.
    New,
    /// Opened if it exists (never through a link), else created.
    Existing,
}

impl HostDir {
    /// Opens the directory at `path`, creating missing components (0700). Links in `path` are
    /// followed now, once, before the agent runs; everything later is relative to the descriptor.
    pub fn open(path: &Path) -> io::Result<HostDir> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)?;
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(HostDir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The directory holding `file`: `.` when it names none.
    pub fn of_file(file: &Path) -> io::Result<HostDir> {
        match file.parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(dir) => HostDir::open(dir),
            None => HostDir::open(Path::new(".")),
        }
    }

    /// The path it was opened at (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name` beneath it (for messages and for the sandbox's list of paths, made before it starts).
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }

    /// Opens the file `name` for reading and appending (`O_APPEND`), private (0600) when created.
    /// A link, or anything but a regular file, is refused.
    pub fn open_append(&self, name: &OsStr, opening: Opening) -> io::Result<File> {
        self.open_file(name, OFlags::RDWR | OFlags::APPEND, opening)
    }

    /// Opens the file `name` for reading and writing, private (0600) when created. A link, or
    /// anything but a regular file, is refused.
    pub fn open_rw(&self, name: &OsStr, opening: Opening) -> io::Result<File> {
        self.open_file(name, OFlags::RDWR, opening)
    }

    /// [`HostDir::open_rw`] for a file others may read (0644 when created): one that belongs with
    /// the project, such as its `fenzi.lock`.
    pub fn open_rw_shared(&self, name: &OsStr, opening: Opening) -> io::Result<File> {
        self.open_at(name, OFlags::RDWR | creating(opening), 0o644)
    }

    fn open_file(&self, name: &OsStr, access: OFlags, opening: Opening) -> io::Result<File> {
        self.open_at(name, access | creating(opening), 0o600)
    }

    /// Opens the existing file `name` for reading (never through a link; a regular file only).
    pub fn open_read(&self, name: &OsStr) -> io::Result<File> {
        self.open_at(name, OFlags::RDONLY, 0)
    }

    /// `openat` with `flags`, never through a link, `mode` when it creates; anything but a regular
    /// file is refused.
    fn open_at(&self, name: &OsStr, flags: OFlags, mode: u32) -> io::Result<File> {
        check_name(name)?;
        // O_NONBLOCK: a FIFO planted under the name is refused below instead of blocking the
        // open; on a regular file it changes nothing.
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(mode))
            .map_err(|e| link_refused(e, &self.join(name)))?;
        let file = File::from(fd);
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", self.join(name).display()),
            ));
        }
        Ok(file)
    }

    /// Writes `contents` to a new file `name` (0600); an existing entry of that name is an error.
    pub fn write_new(&self, name: &OsStr, contents: &[u8]) -> io::Result<()> {
        use std::io::Write;
        let mut file = self.open_file(name, OFlags::WRONLY, Opening::New)?;
        file.write_all(contents)?;
        file.sync_all()
    }

    /// Replaces (or creates) `name` with `contents` so that a reader sees the old file or the new
    /// one, whole: a temporary file with an unpredictable name, created exclusively, synced, then
    /// renamed over `name` relative to the descriptor. Only for directories the agent cannot write
    /// (a session's runtime directory, `fenzi proxy --ca-dir`): a file the sandbox mounts read-only
    /// is rewritten in place instead ([`SmallFile`]).
    ///
    /// `mode` is the file's: 0600 for what only this user reads, 0644 for what is public (a CA
    /// certificate that another user's agent must trust, `fenzi proxy --ca-dir`).
    pub fn replace_file(&self, name: &OsStr, contents: &[u8], mode: u32) -> io::Result<()> {
        use std::io::Write;
        check_name(name)?;
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).map_err(|e| io::Error::other(e.to_string()))?;
        let mut temp = OsString::from(".");
        temp.push(name);
        temp.push(format!(".{}.tmp", u64::from_le_bytes(nonce)));
        let mut file = self.open_file(&temp, OFlags::WRONLY, Opening::New)?;
        // Set explicitly: the umask applies at creation.
        let written = rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))
            .map_err(io::Error::from)
            .and_then(|()| file.write_all(contents))
            .and_then(|()| file.sync_all());
        let renamed = written.and_then(|()| {
            rustix::fs::renameat(&self.fd, &temp, &self.fd, name).map_err(io::Error::from)
        });
        if renamed.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, &temp, AtFlags::empty());
        }
        renamed
    }

    /// Creates the directory `name` (0700) and opens it; an existing entry of that name is an error.
    pub fn create_dir(&self, name: &OsStr) -> io::Result<HostDir> {
        check_name(name)?;
        rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(0o700))?;
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(HostDir {
            fd,
            path: self.join(name),
        })
    }

    /// Removes the file `name` (never what a link points to). A missing file is not an error.
    pub fn remove_file(&self, name: &OsStr) -> io::Result<()> {
        check_name(name)?;
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Err(rustix::io::Errno::NOENT) => Ok(()),
            other => other.map_err(io::Error::from),
        }
    }

    /// Removes the directory `name` and everything beneath it, through descriptors (links are
    /// removed, never followed). A missing directory is not an error.
    pub fn remove_tree(&self, name: &OsStr) -> io::Result<()> {
        check_name(name)?;
        let dir = match rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => HostDir {
                fd,
                path: self.join(name),
            },
            Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        for entry in dir.entries()? {
            match rustix::fs::unlinkat(&dir.fd, &entry, AtFlags::empty()) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                Err(rustix::io::Errno::ISDIR) => dir.remove_tree(&entry)?,
                Err(e) => return Err(e.into()),
            }
        }
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR) {
            Err(rustix::io::Errno::NOENT) => Ok(()),
            other => other.map_err(io::Error::from),
        }
    }

    /// The names in it, `.` and `..` left out.
    fn entries(&self) -> io::Result<Vec<OsString>> {
        let mut dir = rustix::fs::Dir::read_from(&self.fd)?;
        let mut names = Vec::new();
        while let Some(entry) = dir.read() {
            let name = entry?.file_name().to_bytes().to_vec();
            if name != b"." && name != b".." {
                names.push(OsString::from(std::ffi::OsStr::from_bytes(&name)));
            }
        }
        Ok(names)
    }

    /// Makes its entries (a file created or removed) durable.
    pub fn sync(&self) -> io::Result<()> {
        rustix::fs::fsync(&self.fd).map_err(io::Error::from)
    }

    /// The path of `name` through this descriptor (`/proc/self/fd/N/name`), for the calls that take
    /// only a path (binding a Unix socket): resolving it walks the descriptor, not the path.
    pub fn fd_path(&self, name: &OsStr) -> io::Result<PathBuf> {
        check_name(name)?;
        use std::os::fd::AsRawFd;
        Ok(PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd())).join(name))
    }
}

impl AsFd for HostDir {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The creation flags of `opening`.
fn creating(opening: Opening) -> OFlags {
    match opening {
        Opening::New => OFlags::CREATE | OFlags::EXCL,
        Opening::Existing => OFlags::CREATE,
    }
}

/// A name directly in a directory: one component, not `.`/`..`, no `/`.
fn check_name(name: &OsStr) -> io::Result<()> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{:?} is not a file name", name),
        ));
    }
    Ok(())
}

/// A link found where fenzi expected a file (`ELOOP` from `O_NOFOLLOW`).
#[derive(Debug, thiserror::Error)]
#[error(
    "{} is a symbolic link; fenzi does not write through links (something may have planted it to \
     redirect fenzi's writes): remove it",
    path.display()
)]
pub struct LinkRefused {
    pub path: PathBuf,
}

/// Whether `error` is a [`LinkRefused`].
pub fn is_link_refused(error: &io::Error) -> bool {
    error.get_ref().is_some_and(|e| e.is::<LinkRefused>())
}

fn link_refused(e: rustix::io::Errno, path: &Path) -> io::Error {
    if e == rustix::io::Errno::LOOP {
        io::Error::other(LinkRefused {
            path: path.to_path_buf(),
        })
    } else {
        e.into()
    }
}

/// A small file kept up to date in place (see the module doc): the audit head, the export cursor.
#[derive(Debug)]
pub struct SmallFile {
    file: File,
    path: PathBuf,
}

/// Longest text a [`SmallFile`] holds: one disk sector, written at once.
pub const SMALL_FILE_MAX: usize = 512;

impl SmallFile {
    /// Opens `name` in `dir` (created empty, 0600, when missing; never through a link).
    pub fn open(dir: &HostDir, name: &OsStr) -> io::Result<SmallFile> {
        let file = dir.open_rw(name, Opening::Existing)?;
        Ok(SmallFile {
            file,
            path: dir.join(name),
        })
    }

    /// Its path (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its current text (empty when nothing was written yet).
    pub fn read(&self) -> io::Result<Vec<u8>> {
        let len = self.file.metadata()?.len();
        if len > SMALL_FILE_MAX as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is {len} bytes, more than it can be",
                    self.path.display()
                ),
            ));
        }
        let mut buf = vec![0; len as usize];
        self.file.read_exact_at(&mut buf, 0)?;
        Ok(buf)
    }

    /// Replaces its text with `text` in place and makes it durable. Readers that take the shared
    /// lock ([`read_small_file`]) see the old text or the new one, never a mix.
    pub fn rewrite(&self, text: &[u8]) -> io::Result<()> {
        if text.len() > SMALL_FILE_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} bytes do not fit in {}", text.len(), self.path.display()),
            ));
        }
        let _locked = lock(
            &self.file,
            rustix::fs::FlockOperation::NonBlockingLockExclusive,
        );
        self.file.write_all_at(text, 0)?;
        if self.file.metadata()?.len() != text.len() as u64 {
            self.file.set_len(text.len() as u64)?;
        }
        self.file.sync_data()
    }
}

/// How long a [`SmallFile`]'s writer or reader waits for the other's lock before going ahead
/// without it. Bounded, so that anyone else who can open the file (the sandboxed agent can read
/// it) cannot stall fenzi by holding a lock; the worst they get is a mixed read, which parses as
/// nothing valid.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Holds an advisory lock on a file until dropped (`None` inside: it could not be had in time).
struct Locked<'a>(Option<&'a File>);

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        if let Some(file) = self.0 {
            let _ = rustix::fs::flock(file, rustix::fs::FlockOperation::Unlock);
        }
    }
}

fn lock(file: &File, operation: rustix::fs::FlockOperation) -> Locked<'_> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match rustix::fs::flock(file, operation) {
            Ok(()) => return Locked(Some(file)),
            Err(rustix::io::Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(_) => return Locked(None),
        }
    }
}

/// Reads a [`SmallFile`] by path from outside the process that writes it (`fenzi log --verify`),
/// under the shared lock so that a rewrite under way is not seen half done.
pub fn read_small_file(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let file = File::open(path)?;
    let _locked = lock(&file, rustix::fs::FlockOperation::NonBlockingLockShared);
    let mut text = Vec::new();
    io::Read::take(&file, SMALL_FILE_MAX as u64 + 1).read_to_end(&mut text)?;
    Ok(text)
}

/// Opens the private directory `path` (created 0700 when missing, with missing parents), after
/// checking that it is a directory, not a link, owned by this user and writable by no one else.
/// The refusal names what is wrong and what to do.
pub fn private_dir(path: &Path) -> io::Result<HostDir> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)?;
    }
    match rustix::fs::mkdir(path, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => {
            return Err(io::Error::new(
                io::Error::from(e).kind(),
                format!("cannot create {}: {e}", path.display()),
            ));
        }
    }
    existing_private_dir(path)
}

/// Opens the existing private directory `path` (see [`private_dir`]), creating nothing.
pub fn existing_private_dir(path: &Path) -> io::Result<HostDir> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        let (kind, why) = if e == rustix::io::Errno::LOOP || e == rustix::io::Errno::NOTDIR {
            (
                io::ErrorKind::PermissionDenied,
                "it is a symbolic link or not a directory".to_string(),
            )
        } else {
            (io::Error::from(e).kind(), e.to_string())
        };
        io::Error::new(
            kind,
            format!(
                "{}: {why}; fenzi keeps its runtime files only in a directory private to you: \
                 remove it, or set XDG_RUNTIME_DIR",
                path.display()
            ),
        )
    })?;
    let dir = HostDir {
        fd,
        path: path.to_path_buf(),
    };
    check_private(&dir, rustix::process::getuid().as_raw())?;
    Ok(dir)
}

/// Refuses `dir` unless it is owned by `uid` and neither group nor others may write it.
pub fn check_private(dir: &HostDir, uid: u32) -> io::Result<()> {
    let meta = File::from(dir.fd.try_clone()?).metadata()?;
    match not_private(&meta, uid) {
        None => Ok(()),
        Some(why) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: {why}; fenzi keeps its runtime files only in a directory private to you: \
                 remove it (or fix its owner and mode), or set XDG_RUNTIME_DIR",
                dir.path.display()
            ),
        )),
    }
}

/// Why a directory with `meta` is not private to `uid` (another owner, or writable by group or
/// others); `None` when it is.
pub fn not_private(meta: &std::fs::Metadata, uid: u32) -> Option<String> {
    if meta.uid() != uid {
        return Some(format!(
            "owned by uid {}, not by you (uid {uid})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Some(format!(
            "group or others may write it (mode {:o})",
            meta.mode() & 0o777
        ));
    }
    None
}

/// The base of every session's runtime directory: `$XDG_RUNTIME_DIR/fenzi` when that is set (and
/// absolute), else `<temp dir>/fenzi-<uid>`, so two users on one machine never share one.
pub fn runtime_base() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
    {
        Some(run) => run.join("fenzi"),
        None => std::env::temp_dir().join(format!("fenzi-{}", rustix::process::getuid().as_raw())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn new_files_are_exclusive_and_never_follow_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = HostDir::open(tmp.path()).unwrap();
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, tmp.path().join("planted")).unwrap();
        // A link where a new file goes: refused, the target untouched.
        assert!(dir.write_new(OsStr::new("planted"), b"x").is_err());
        // A link where an existing file is opened: refused, naming the link.
        let err = dir
            .open_append(OsStr::new("planted"), Opening::Existing)
            .unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(SmallFile::open(&dir, OsStr::new("planted")).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        // A new file is private.
        dir.write_new(OsStr::new("made"), b"x").unwrap();
        let mode = std::fs::metadata(tmp.path().join("made")).unwrap().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(dir.write_new(OsStr::new("made"), b"y").is_err());
        assert!(dir.write_new(OsStr::new("../escape"), b"y").is_err());
    }

    #[test]
    fn a_replaced_file_is_whole_and_a_link_in_its_place_is_replaced_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = HostDir::open(tmp.path()).unwrap();
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, tmp.path().join("ca.pem")).unwrap();
        dir.replace_file(OsStr::new("ca.pem"), b"new", 0o600)
            .unwrap();
        dir.replace_file(OsStr::new("ca.pem"), b"newer", 0o644)
            .unwrap();
        let mode = std::fs::metadata(tmp.path().join("ca.pem")).unwrap().mode();
        assert_eq!(mode & 0o777, 0o644);
        assert_eq!(std::fs::read(tmp.path().join("ca.pem")).unwrap(), b"newer");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        let names: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert_eq!(names.len(), 2, "no temporary file left behind");
    }

    #[test]
    fn the_directory_is_the_one_opened_whatever_its_path_leads_to_later() {
        let tmp = tempfile::tempdir().unwrap();
        let first = tmp.path().join("logs");
        std::fs::create_dir(&first).unwrap();
        let dir = HostDir::open(&first).unwrap();
        // The path is re-pointed after start: writes still land in the directory opened.
        std::fs::rename(&first, tmp.path().join("moved")).unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &first).unwrap();
        dir.write_new(OsStr::new("a"), b"1").unwrap();
        assert!(tmp.path().join("moved/a").exists());
        assert!(!elsewhere.join("a").exists());
    }

    #[test]
    fn a_small_file_is_rewritten_in_place() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = HostDir::open(tmp.path()).unwrap();
        let file = SmallFile::open(&dir, OsStr::new("head")).unwrap();
        assert_eq!(file.read().unwrap(), b"");
        let inode = std::fs::metadata(tmp.path().join("head")).unwrap().ino();
        file.rewrite(b"9 abc\n").unwrap();
        file.rewrite(b"10 abcd\n").unwrap();
        assert_eq!(file.read().unwrap(), b"10 abcd\n");
        file.rewrite(b"1\n").unwrap();
        assert_eq!(std::fs::read(tmp.path().join("head")).unwrap(), b"1\n");
        assert_eq!(
            std::fs::metadata(tmp.path().join("head")).unwrap().ino(),
            inode
        );
        assert!(file.rewrite(&[b'x'; SMALL_FILE_MAX + 1]).is_err());
    }

    #[test]
    fn a_tree_is_removed_without_following_links() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "k").unwrap();
        let base = HostDir::open(&tmp.path().join("base")).unwrap();
        let session = base.create_dir(OsStr::new("s1")).unwrap();
        session.write_new(OsStr::new("ca.pem"), b"x").unwrap();
        let nested = session.create_dir(OsStr::new("sub")).unwrap();
        nested.write_new(OsStr::new("f"), b"y").unwrap();
        std::os::unix::fs::symlink(&outside, tmp.path().join("base/s1/link")).unwrap();
        base.remove_tree(OsStr::new("s1")).unwrap();
        assert!(!tmp.path().join("base/s1").exists());
        assert_eq!(std::fs::read_to_string(outside.join("keep")).unwrap(), "k");
        base.remove_tree(OsStr::new("s1")).unwrap();
    }

    #[test]
    fn a_private_dir_is_created_0700_and_a_loose_or_linked_one_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("run/fenzi");
        private_dir(&path).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o700
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = private_dir(&path).unwrap_err();
        assert!(err.to_string().contains("mode 777"), "{err}");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let err = private_dir(&link).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        let dir = HostDir::open(tmp.path()).unwrap();
        assert!(check_private(&dir, rustix::process::getuid().as_raw() + 1).is_err());
    }
}
