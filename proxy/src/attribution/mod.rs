//! Which programs inside the sandbox hold a connection's socket (DESIGN §17), found once per
//! connection before it is admitted, from the host, through the sandbox's own `/proc`:
//!
//! 1. The socket: the connection's 4-tuple (the client's address, the listener's) is looked up,
//!    exactly, through a `NETLINK_SOCK_DIAG` socket the sandbox's init opened inside its network
//!    namespace and handed over ([`crate::sandbox::SockDiag`]), for the inode of the client's end.
//!    Not found, or inode 0, is a failure. (`/proc/<pid>/net/tcp` gives the same answer, but it
//!    walks a hash table every namespace shares: milliseconds on a busy host.)
//! 2. The holders: every process of the sandbox is listed from the `/proc` the sandbox mounted for
//!    its own PID namespace (`/proc/<command>/root/proc`, so only the sandbox's processes, named
//!    by their pids inside), and each one's `fd/` is read for `socket:[inode]`. None is a failure.
//! 3. Each holder's program: its `exe` link, then `exe` opened and hashed (SHA-256, cached by
//!    device, inode, change time, size and modification time of the opened file, so a swapped or
//!    rewritten file is hashed again), then the link read again (a process that exec'd another
//!    program meanwhile fails the attribution), and last the descriptor found in step 2 read
//!    again: a process that exited, or whose pid now names another process (which cannot have
//!    inherited the socket), fails it too. The sandbox's init (pid 1, fenzi's own) is not
//!    looked at.
//! 4. `agent`: the holder whose pid inside is the command's (the process `fenzi run` started;
//!    its pid survives the exec of a `#!` interpreter), or, for an agent whose launcher runs the
//!    real program as its child (Codex's npm launcher), that launcher's direct child whose
//!    executable has the known name.
//!
//! Every failure refuses the connection (fail closed): the proxy records `program_not_allowed`
//! with the reason wherever the policy restricts programs. This module only reads; the policy
//! decides (`fenzi_policy::programs`).
//!
//! May use: `sandbox`.

mod proc;

use fenzi_policy::audit::{Holder, ProgramRecord};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};

pub use proc::command_of_init;

/// What attribution said about one connection (DESIGN §17), kept for all of its records and
/// decisions so that none of them needs a system call.
#[derive(Debug, Clone, Default)]
pub enum Attributed {
    /// The session does not attribute (`fenzi proxy`, `--no-isolation`): any program.
    #[default]
    Unknown,
    /// The processes holding the connection's socket.
    Found(ProgramRecord),
    /// The lookup failed (why, for the refusal's message): refused wherever programs matter.
    Failed(Arc<str>),
}

impl Attributed {
    /// The record's `program`.
    pub fn record(&self) -> Option<ProgramRecord> {
        match self {
            Attributed::Found(p) => Some(p.clone()),
            Attributed::Unknown | Attributed::Failed(_) => None,
        }
    }
}

/// How the agent is recognised among a connection's holders.
#[derive(Debug, Clone, Default)]
pub struct AgentIdentity {
    /// The file name of the program the agent's launcher starts as its direct child, if it does
    /// (`codex` for Codex's npm launcher).
    pub launcher_child: Option<String>,
}

/// Why a connection's program could not be told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttributionError {
    #[error("no socket {0} in the sandbox's connection table")]
    NoSocket(String),
    #[error("no process in the sandbox holds the connection's socket")]
    NoHolder,
    #[error(
        "process {pid} changed while it was being looked at (it exited or ran another program)"
    )]
    Changed { pid: u32 },
    #[error("cannot read {what}: {error}")]
    Proc { what: String, error: String },
    /// [`Attributor::attribute_cached`] met an executable it has not hashed yet.
    #[error("an executable not hashed yet")]
    NotHashed,
}

/// An IPv4 address mapped into IPv6 as the IPv4 address it is (an IPv4 client of a dual-stack
/// listener is an IPv4 socket in the kernel's tables).
fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        std::net::IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(std::net::IpAddr::V4(v4), addr.port()),
            None => addr,
        },
        std::net::IpAddr::V4(_) => addr,
    }
}

/// The key of a hashed executable: a rewrite or a replacement changes one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FileKey {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
    mtime: (i64, i64),
    size: u64,
}

/// At most this many executables' hashes are kept; past it the cache starts over.
const MAX_HASHES: usize = 4096;

/// The attribution of one sandbox's connections.
#[derive(Debug)]
pub struct Attributor {
    /// The command's pid on the host (its `/proc` shows the sandbox's network and mounts).
    command_host: u32,
    /// The command's pid inside the sandbox.
    command_inside: u32,
    identity: AgentIdentity,
    /// True for `fenzi run --agent`: an MCP server's default `programs` is `[agent]`.
    pub agent_mode: bool,
    /// The sandbox network namespace's socket diagnostics.
    sock_diag: Arc<crate::sandbox::SockDiag>,
    /// Each executable's hash, by its key; computed once even when several connections of a new
    /// program arrive together (the others wait for the first).
    hashes: Mutex<HashMap<FileKey, Arc<HashCell>>>,
}

/// One executable's hash, computed by the first connection that needs it (or why it could not be).
type HashCell = OnceLock<Result<Arc<str>, String>>;

impl Attributor {
    /// The attribution of the sandbox whose command is `command_host` (a pid on the host).
    pub fn new(
        command_host: u32,
        sock_diag: Arc<crate::sandbox::SockDiag>,
        identity: AgentIdentity,
        agent_mode: bool,
    ) -> Result<Attributor, AttributionError> {
        let command_inside = proc::pid_inside(command_host)?;
        Ok(Attributor {
            command_host,
            command_inside,
            identity,
            agent_mode,
            sock_diag,
            hashes: Mutex::default(),
        })
    }

    /// The processes holding the client's end of the connection from `client` to `server` (the
    /// listener's address inside the sandbox), first holder first (by pid).
    pub fn attribute(
        &self,
        client: SocketAddr,
        server: SocketAddr,
    ) -> Result<ProgramRecord, AttributionError> {
        self.lookup(client, server, true)
    }

    /// [`Attributor::attribute`] where every holder's executable is already hashed: a few reads
    /// of `/proc` and one netlink exchange, quick enough for the connection's own thread.
    /// [`AttributionError::NotHashed`] when one is not (hashing may take a while: do that off the
    /// connection's thread, with [`Attributor::attribute`]).
    pub fn attribute_cached(
        &self,
        client: SocketAddr,
        server: SocketAddr,
    ) -> Result<ProgramRecord, AttributionError> {
        self.lookup(client, server, false)
    }

    fn lookup(
        &self,
        client: SocketAddr,
        server: SocketAddr,
        may_hash: bool,
    ) -> Result<ProgramRecord, AttributionError> {
        let (client, server) = (canonical(client), canonical(server));
        let inode = self
            .sock_diag
            .inode(client, server)
            .map_err(|e| AttributionError::Proc {
                what: "the sandbox's socket diagnostics".into(),
                error: e.to_string(),
            })?
            .ok_or_else(|| AttributionError::NoSocket(format!("{client} -> {server}")))?;
        let pids = proc::holders(self.command_host, inode)?;
        if pids.is_empty() {
            return Err(AttributionError::NoHolder);
        }
        let mut holders = Vec::with_capacity(pids.len());
        for holding in pids {
            let pid = holding.pid;
            let seen = proc::program(self.command_host, pid, |file, meta| {
                self.hash(file, meta, may_hash)
            })?;
            // The launcher's child: the known name, and the command as its parent.
            let launched = || {
                self.identity.launcher_child.as_deref().is_some_and(|name| {
                    seen.exe.rsplit('/').next() == Some(name)
                        && proc::parent(self.command_host, pid).ok() == Some(self.command_inside)
                })
            };
            let agent = pid == self.command_inside || launched();
            // Last: the pid still names the process that holds the socket (it did not exit and
            // was not replaced by another process given its pid while it was looked at).
            if !proc::still_holds(&holding, inode) {
                return Err(AttributionError::Changed { pid });
            }
            holders.push(Holder {
                exe: seen.exe,
                sha256: seen.sha256.to_string(),
                pid,
                agent,
            });
        }
        ProgramRecord::new(holders).ok_or(AttributionError::NoHolder)
    }

    /// The SHA-256 of the opened executable `file`, from the cache when its key is known.
    fn hash(
        &self,
        file: &mut std::fs::File,
        meta: &std::fs::Metadata,
        may_hash: bool,
    ) -> std::io::Result<Arc<str>> {
        use std::os::unix::fs::MetadataExt;
        let key = FileKey {
            dev: meta.dev(),
            ino: meta.ino(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            size: meta.size(),
        };
        let cell = {
            let mut cache = self
                .hashes
                .lock()
                .map_err(|_| std::io::Error::other("the hash cache is poisoned"))?;
            if cache.len() >= MAX_HASHES && !cache.contains_key(&key) {
                cache.clear();
            }
            if !may_hash {
                // Only a hash already made: `WouldBlock` says to come back off this thread.
                return match cache.get(&key).and_then(|cell| cell.get()) {
                    Some(Ok(hash)) => Ok(hash.clone()),
                    _ => Err(std::io::ErrorKind::WouldBlock.into()),
                };
            }
            cache.entry(key).or_default().clone()
        };
        let got = cell
            .get_or_init(|| {
                proc::sha256_of(file)
                    .map(Arc::from)
                    .map_err(|e| e.to_string())
            })
            .clone();
        if got.is_err() {
            // Not kept: the next connection tries again.
            if let Ok(mut cache) = self.hashes.lock() {
                cache.remove(&key);
            }
        }
        got.map_err(std::io::Error::other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// Outside a sandbox the same lookups work on the host's own `/proc` (this process as the
    /// "command"): every process's descriptors are read, which needs root.
    fn diag() -> Arc<crate::sandbox::SockDiag> {
        Arc::new(crate::sandbox::SockDiag::here().unwrap())
    }

    fn as_root() -> bool {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .map(|u| u.split_whitespace().nth(1) == Some("0"))
            })
            .unwrap_or(false)
    }

    #[test]
    fn a_connection_is_attributed_to_the_process_holding_it() {
        if !as_root() {
            eprintln!("skipped: reading every process's descriptors needs root");
            return;
        }
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        let _client = TcpStream::connect(server).unwrap();
        let (_accepted, peer) = listener.accept().unwrap();
        let me = std::process::id();
        let attributor = Attributor::new(me, diag(), AgentIdentity::default(), true).unwrap();
        let program = attributor.attribute(peer, server).unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(program.0.exe, exe.to_string_lossy());
        assert!(
            program.0.agent,
            "the process whose pid is the command's is the agent"
        );
        assert!(program.0.holders.is_empty(), "one holder");
        let mut file = std::fs::File::open(&exe).unwrap();
        assert_eq!(program.0.sha256, proc::sha256_of(&mut file).unwrap());
        // The second lookup takes the hash from the cache, keyed by the file's identity.
        let again = attributor.attribute(peer, server).unwrap();
        // Cached, the lookup runs without hashing, as the proxy does it on a connection's thread.
        assert_eq!(attributor.attribute_cached(peer, server).unwrap(), program);
        assert_eq!(again, program);
        assert_eq!(attributor.hashes.lock().unwrap().len(), 1);
        // The server's end is held too, but by the 4-tuple the client's end is the one looked up:
        // the other direction is another socket.
        let reversed = attributor.attribute(server, peer).unwrap();
        assert_eq!(reversed.0.pid, program.0.pid);
    }

    #[test]
    fn a_connection_nobody_holds_is_not_attributed() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        let client = TcpStream::connect(server).unwrap();
        let (_accepted, peer) = listener.accept().unwrap();
        drop(client);
        let attributor =
            Attributor::new(std::process::id(), diag(), AgentIdentity::default(), true).unwrap();
        let got = attributor.attribute(peer, server);
        assert!(
            matches!(
                got,
                Err(AttributionError::NoSocket(_) | AttributionError::NoHolder)
            ),
            "{got:?}"
        );
        // A 4-tuple that never existed.
        let nowhere = attributor.attribute("127.0.0.1:1".parse().unwrap(), server);
        assert!(
            matches!(nowhere, Err(AttributionError::NoSocket(_))),
            "{nowhere:?}"
        );
    }
}
