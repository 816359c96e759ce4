//! The `/proc` reads of an attribution: the connection table, the processes' descriptors, their
//! executables, start times and parents. Every read names what failed.

use super::AttributionError;
use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn failed(what: impl Into<String>, error: std::io::Error) -> AttributionError {
    AttributionError::Proc {
        what: what.into(),
        error: error.to_string(),
    }
}

/// The host pid of the command the sandbox's init (host pid `init`) started: its only child.
pub fn command_of_init(init: u32) -> Result<u32, AttributionError> {
    let children = format!("/proc/{init}/task/{init}/children");
    if let Ok(text) = std::fs::read_to_string(&children)
        && let Some(pid) = text.split_whitespace().next().and_then(|p| p.parse().ok())
    {
        return Ok(pid);
    }
    // Without CONFIG_PROC_CHILDREN (or access to the init): the host's processes, by parent.
    let dir = std::fs::read_dir("/proc").map_err(|e| failed("/proc", e))?;
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status"))
            && field(&status, "PPid:").and_then(|p| p.parse::<u32>().ok()) == Some(init)
        {
            return Ok(pid);
        }
    }
    Err(AttributionError::NoHolder)
}

fn field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(str::trim)
}

/// The pid inside its own PID namespace of host pid `pid` (the last of `NSpid`).
pub fn pid_inside(pid: u32) -> Result<u32, AttributionError> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(|e| failed(&path, e))?;
    field(&status, "NSpid:")
        .and_then(|v| v.split_whitespace().last())
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| AttributionError::Proc {
            what: path,
            error: "no NSpid".into(),
        })
}

/// The sandbox's `/proc` (its own PID namespace's), seen from the host through the command.
fn sandbox_proc(command_host: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{command_host}/root/proc"))
}

/// One holder: its pid inside the sandbox, and the path of one of its descriptors on the socket
/// (read again once its program is known, to prove it still holds it).
pub struct Holding {
    pub pid: u32,
    pub fd: PathBuf,
}

/// The sandbox's processes with a descriptor on socket `inode`, by pid ascending. The sandbox's
/// init (pid 1) is fenzi's own and runs nothing of the agent's: it is not looked at.
pub fn holders(command_host: u32, inode: u64) -> Result<Vec<Holding>, AttributionError> {
    let root = sandbox_proc(command_host);
    let target = format!("socket:[{inode}]");
    let dir = std::fs::read_dir(&root).map_err(|e| failed(root.display().to_string(), e))?;
    let mut out = Vec::new();
    let mut link = PathBuf::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == 1 {
            continue;
        }
        let fds = root.join(pid.to_string()).join("fd");
        let list = match std::fs::read_dir(&fds) {
            Ok(list) => list,
            // Gone since the listing: it holds nothing now.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            // A process whose descriptors cannot be read might hold it: fail closed.
            Err(e) => return Err(failed(fds.display().to_string(), e)),
        };
        for fd in list.flatten() {
            link.clear();
            link.push(fd.path());
            if let Ok(to) = std::fs::read_link(&link)
                && to.as_os_str().as_bytes() == target.as_bytes()
            {
                out.push(Holding {
                    pid,
                    fd: link.clone(),
                });
                break;
            }
        }
    }
    out.sort_unstable_by_key(|h| h.pid);
    Ok(out)
}

/// Whether `holding` still has its descriptor on socket `inode`: false when the process exited,
/// or its pid now names another process (which cannot have inherited the descriptor).
pub fn still_holds(holding: &Holding, inode: u64) -> bool {
    std::fs::read_link(&holding.fd)
        .is_ok_and(|to| to.as_os_str().as_bytes() == format!("socket:[{inode}]").as_bytes())
}

/// The parent (inside) of process `pid` (inside), from its `stat`.
pub fn parent(command_host: u32, pid: u32) -> Result<u32, AttributionError> {
    start_and_parent(&sandbox_proc(command_host).join(pid.to_string())).map(|(_, ppid)| ppid)
}

/// What a holder runs.
pub struct Seen {
    pub exe: String,
    pub sha256: Arc<str>,
}

/// The start time (field 22 of `stat`) and parent (field 4) of `dir`'s process.
fn start_and_parent(dir: &Path) -> Result<(u64, u32), AttributionError> {
    let path = dir.join("stat");
    let text = std::fs::read_to_string(&path).map_err(|e| failed(path.display().to_string(), e))?;
    // The command name, in parentheses, may hold anything: fields are counted after its end.
    let rest = text.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After `)`: state is field 3, so field N is fields[N - 3].
    let parent = fields.get(1).and_then(|p| p.parse().ok());
    let start = fields.get(19).and_then(|s| s.parse().ok());
    match (start, parent) {
        (Some(s), Some(p)) => Ok((s, p)),
        _ => Err(AttributionError::Proc {
            what: path.display().to_string(),
            error: "unexpected format".into(),
        }),
    }
}

/// The program process `pid` (inside) runs, hashed by `hash`, checked not to have exec'd another
/// while it was looked at (the `exe` link read before and after). Whether it is still the process
/// that holds the socket is [`still_holds`], asked after this.
pub fn program(
    command_host: u32,
    pid: u32,
    hash: impl FnOnce(&mut File, &std::fs::Metadata) -> std::io::Result<Arc<str>>,
) -> Result<Seen, AttributionError> {
    let dir = sandbox_proc(command_host).join(pid.to_string());
    let exe_link = dir.join("exe");
    let exe =
        std::fs::read_link(&exe_link).map_err(|e| failed(exe_link.display().to_string(), e))?;
    let mut file = File::open(&exe_link).map_err(|e| failed(exe_link.display().to_string(), e))?;
    let meta = file
        .metadata()
        .map_err(|e| failed(exe_link.display().to_string(), e))?;
    let sha256 = hash(&mut file, &meta).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => AttributionError::NotHashed,
        _ => failed(exe_link.display().to_string(), e),
    })?;
    let again = std::fs::read_link(&exe_link).ok();
    if again.as_deref() != Some(exe.as_path()) {
        return Err(AttributionError::Changed { pid });
    }
    Ok(Seen {
        exe: text_of(exe.as_os_str()),
        sha256,
    })
}

/// A path as records name it (not UTF-8: lossily; such a path cannot match a policy's).
fn text_of(path: &OsStr) -> String {
    path.to_string_lossy().into_owned()
}

/// The SHA-256 (hex) of `file` from its start, checked unchanged by the end of the read.
pub fn sha256_of(file: &mut File) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::MetadataExt;
    let before = file.metadata()?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let after = file.metadata()?;
    if (before.ctime(), before.ctime_nsec(), before.size())
        != (after.ctime(), after.ctime_nsec(), after.size())
    {
        return Err(std::io::Error::other(
            "the executable changed while it was hashed",
        ));
    }
    Ok(hex::encode(hasher.finalize()))
}
