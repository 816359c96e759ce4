//! What to run in a sandbox ([`SandboxSpec`]) and its validated, pre-built form (`Prepared`):
//! every string, pointer array, id map and the seccomp program the child needs, allocated before
//! the fork, because the child may not allocate (see `child.rs`).

use std::ffi::{CString, OsStr, OsString};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use seccompiler::BpfProgram;

use super::error::{SandboxError, SetupStep};
use super::filesystem::{self, BindMount};
use super::seccomp;
use super::sys;

/// Port the proxy listener has inside the sandbox's network namespace unless the spec says
/// otherwise. The namespace is private, so any port is free.
pub const DEFAULT_PROXY_PORT: u16 = 3128;
/// User and group id the command runs as inside the sandbox (never 0).
pub const DEFAULT_SANDBOX_ID: u32 = 1000;

/// Search path used when the spec's environment has no `PATH` (as `execvp` does).
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A command to run in a sandbox. The environment is exactly `env`: nothing is inherited from the
/// parent, so secrets in the parent's environment cannot leak by accident (build it with
/// [`super::env::sandbox_env`]). Its `Debug` output names the variables but never shows their
/// values, which include the secrets' placeholders.
pub struct SandboxSpec {
    /// The program: a path, or a name looked up in the `PATH` of `env`.
    pub program: OsString,
    /// Arguments after the program name.
    pub args: Vec<OsString>,
    /// The complete environment of the command.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory of the command.
    pub cwd: PathBuf,
    /// Port of the proxy listener on 127.0.0.1 inside the sandbox.
    pub proxy_port: u16,
    /// User id inside the sandbox (mapped to the caller's effective uid outside); not 0.
    pub uid: u32,
    /// Group id inside the sandbox (mapped to the caller's effective gid outside); not 0.
    pub gid: u32,
    /// Standard input; `None` inherits the parent's.
    pub stdin: Option<OwnedFd>,
    /// Standard output; `None` inherits the parent's.
    pub stdout: Option<OwnedFd>,
    /// Standard error; `None` inherits the parent's.
    pub stderr: Option<OwnedFd>,
    /// Paths that govern the session (policy, lock, machine config, audit directory): read-only
    /// inside, and their ancestors immovable (see [`super::filesystem`]). Each must exist.
    pub read_only: Vec<PathBuf>,
    /// Where the command may write (a Landlock allowlist); `None` leaves writes unrestricted.
    pub writable: Option<Vec<PathBuf>>,
    /// Files shown in place of others, `(source, target)`: inside, `target` (which must exist)
    /// reads as `source` and is read-only. How an agent that reads its settings from one fixed
    /// file gets the session's version of it while the user's file stays as it is.
    pub overlays: Vec<(PathBuf, PathBuf)>,
    /// Catching connections of programs that ignore the proxy variables; `None`: no such listeners.
    pub transparent: Option<TransparentSpec>,
}

/// The sandbox's side of the transparent path: programs that ignore the proxy variables resolve
/// names through a DNS stub and connect to the addresses it gives, which fenzi listens on.
#[derive(Debug, Clone)]
pub struct TransparentSpec {
    /// Ports listened on at every address of the sandbox's loopback (`0.0.0.0:<port>`). Each
    /// listener is handed to the parent in this order ([`super::Session::transparent`]).
    pub ports: Vec<u16>,
    /// Addresses added to the loopback, each with its prefix length: the synthetic range the DNS
    /// stub answers from, and the policy's IPv4 literals.
    pub addresses: Vec<(Ipv4Addr, u8)>,
    /// The policy's IPv6 literals (other than `::1`, which the loopback has), added as /128. When
    /// this is non-empty or `ipv6` is set, every port is also listened on at `[::]` (IPv6 only),
    /// after the IPv4 listeners.
    pub addresses_v6: Vec<Ipv6Addr>,
    /// Listen on `[::]` too (the policy names an IPv6 literal).
    pub ipv6: bool,
    /// The DNS stub's UDP address inside the sandbox (on the loopback).
    pub dns: SocketAddrV4,
    /// A file naming that stub, mounted read-only over `/etc/resolv.conf` when that exists.
    pub resolv_conf: PathBuf,
}

impl std::fmt::Debug for SandboxSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let env_names: Vec<_> = self.env.iter().map(|(k, _)| k).collect();
        f.debug_struct("SandboxSpec")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("env (names only)", &env_names)
            .field("cwd", &self.cwd)
            .field("proxy_port", &self.proxy_port)
            .field("uid", &self.uid)
            .field("gid", &self.gid)
            .field("stdin", &self.stdin)
            .field("stdout", &self.stdout)
            .field("stderr", &self.stderr)
            .field("read_only", &self.read_only)
            .field("writable", &self.writable)
            .field("overlays", &self.overlays)
            .field("transparent", &self.transparent)
            .finish()
    }
}

impl SandboxSpec {
    /// A spec for `program` with no arguments, an empty environment, the current directory, and
    /// the default port and ids.
    pub fn new(program: impl Into<OsString>) -> Self {
        SandboxSpec {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            proxy_port: DEFAULT_PROXY_PORT,
            uid: DEFAULT_SANDBOX_ID,
            gid: DEFAULT_SANDBOX_ID,
            stdin: None,
            stdout: None,
            stderr: None,
            read_only: Vec::new(),
            writable: None,
            overlays: Vec::new(),
            transparent: None,
        }
    }

    /// Listens for connections that do not go through the proxy variables (see
    /// [`TransparentSpec`]).
    pub fn transparent(mut self, transparent: TransparentSpec) -> Self {
        self.transparent = Some(transparent);
        self
    }

    /// Makes these paths read-only inside the sandbox (see [`SandboxSpec::read_only`]).
    pub fn read_only<I, P>(mut self, paths: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<PathBuf>,
    {
        self.read_only.extend(paths.into_iter().map(Into::into));
        self
    }

    /// Lets the command write beneath these paths only (see [`SandboxSpec::writable`]).
    pub fn writable<I, P>(mut self, paths: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<PathBuf>,
    {
        self.writable = Some(paths.into_iter().map(Into::into).collect());
        self
    }

    /// Shows `source` in place of `target` inside the sandbox (see [`SandboxSpec::overlays`]).
    pub fn overlay(mut self, source: impl Into<PathBuf>, target: impl Into<PathBuf>) -> Self {
        self.overlays.push((source.into(), target.into()));
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Adds environment variables.
    pub fn envs<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<OsString>,
        V: Into<OsString>,
    {
        self.env
            .extend(vars.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Sets the working directory.
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = dir.into();
        self
    }

    /// The proxy's address as the sandbox sees it: `127.0.0.1:<proxy_port>`.
    pub fn proxy_addr(&self) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.proxy_port)
    }

    /// The URL to put in the sandbox's proxy variables: `http://127.0.0.1:<proxy_port>`.
    pub fn proxy_url(&self) -> String {
        format!("http://{}", self.proxy_addr())
    }

    /// The program as text, for messages.
    pub(crate) fn program_display(&self) -> String {
        self.program.to_string_lossy().into_owned()
    }
}

/// Everything the child needs, built before the fork. The raw pointer arrays point into the
/// `CString`s owned by the same struct.
pub(crate) struct Prepared {
    /// Paths to try with `execve`, in order.
    pub exec_candidates: Vec<CString>,
    _argv: Vec<CString>,
    pub argv_ptrs: Vec<*const libc::c_char>,
    _envp: Vec<CString>,
    pub envp_ptrs: Vec<*const libc::c_char>,
    pub cwd: CString,
    pub uid_map: Vec<u8>,
    pub gid_map: Vec<u8>,
    pub listen_addr: libc::sockaddr_in,
    pub filter: BpfProgram,
    /// Descriptors (numbered 3 or above) to install as the command's 0, 1, 2.
    pub stdio: [Option<RawFd>; 3],
    /// The child's end of the control socket.
    pub control: RawFd,
    /// Descriptors the init keeps open (sorted): 0, 1, 2, `control`, the `stdio` sources, the
    /// Landlock ruleset.
    pub keep_fds: Vec<RawFd>,
    /// The binds that protect the governing paths, in order.
    pub mounts: Vec<BindMount>,
    /// The write allowlist, applied by the init after `no_new_privs`.
    pub landlock: Option<OwnedFd>,
    /// Loopback aliases to add: (address, netmask).
    pub loopback_aliases: Vec<([u8; 4], [u8; 4])>,
    /// The transparent listeners' addresses, in the order they are handed over.
    pub transparent_listen: Vec<libc::sockaddr_in>,
    /// IPv6 addresses to add to the loopback (/128).
    pub loopback_v6: Vec<[u8; 16]>,
    /// Ports listened on at `[::]`, handed over after the IPv4 listeners.
    pub transparent_listen_v6: Vec<u16>,
    /// The DNS stub's socket address, handed over after the listeners.
    pub dns_addr: Option<libc::sockaddr_in>,
}

fn c_string(what: &str, bytes: &[u8]) -> Result<CString, SandboxError> {
    CString::new(bytes)
        .map_err(|_| SandboxError::InvalidSpec(format!("{what} contains a NUL byte")))
}

/// Exec candidates for `program`: itself when it contains a `/`, else each `PATH` entry joined
/// with it (an empty entry means the working directory, as in `execvp`).
fn exec_candidates(
    program: &OsStr,
    env: &[(OsString, OsString)],
) -> Result<Vec<CString>, SandboxError> {
    let name = program.as_bytes();
    if name.contains(&b'/') {
        return Ok(vec![c_string("the program", name)?]);
    }
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k.as_bytes() == b"PATH")
        .map_or(DEFAULT_PATH.as_bytes(), |(_, v)| v.as_bytes());
    path.split(|&b| b == b':')
        .map(|dir| {
            let mut full = if dir.is_empty() {
                b".".to_vec()
            } else {
                dir.to_vec()
            };
            full.push(b'/');
            full.extend_from_slice(name);
            c_string("PATH", &full)
        })
        .collect()
}

impl Prepared {
    /// Validates `spec` and builds everything the child needs. `control` and `stdio` are the
    /// descriptors the parent prepared (already numbered 3 or above).
    pub(crate) fn new(
        spec: &SandboxSpec,
        control: RawFd,
        stdio: [Option<RawFd>; 3],
    ) -> Result<Self, SandboxError> {
        if spec.program.is_empty() {
            return Err(SandboxError::InvalidSpec("the program is empty".into()));
        }
        if spec.uid == 0 || spec.gid == 0 {
            return Err(SandboxError::InvalidSpec(
                "the sandbox must not run as uid or gid 0 inside".into(),
            ));
        }
        if spec.proxy_port == 0 {
            return Err(SandboxError::InvalidSpec(
                "the proxy port must be set (the environment names it before the start)".into(),
            ));
        }
        let mut argv = vec![c_string("the program", spec.program.as_bytes())?];
        for arg in &spec.args {
            argv.push(c_string("an argument", arg.as_bytes())?);
        }
        let mut envp = Vec::with_capacity(spec.env.len());
        for (key, value) in &spec.env {
            let key = key.as_bytes();
            if key.is_empty() || key.contains(&b'=') {
                return Err(SandboxError::InvalidSpec(format!(
                    "environment name {:?} is empty or contains '='",
                    String::from_utf8_lossy(key)
                )));
            }
            let mut entry = key.to_vec();
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            envp.push(c_string("an environment variable", &entry)?);
        }
        let argv_ptrs = argv
            .iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let envp_ptrs = envp
            .iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let cwd = c_string("the working directory", spec.cwd.as_os_str().as_bytes())?;

        let (outer_uid, outer_gid) = sys::effective_ids();
        let uid_map = format!("{} {} 1\n", spec.uid, outer_uid).into_bytes();
        let gid_map = format!("{} {} 1\n", spec.gid, outer_gid).into_bytes();

        let mut listen_addr = sockaddr_in_zeroed();
        listen_addr.sin_family = libc::AF_INET as libc::sa_family_t;
        listen_addr.sin_port = spec.proxy_port.to_be();
        listen_addr.sin_addr.s_addr = u32::from(Ipv4Addr::LOCALHOST).to_be();

        let filter = seccomp::build_filter().map_err(|e| SandboxError::Isolation {
            step: SetupStep::BuildFilter,
            source: std::io::Error::other(e.to_string()),
            hint: None,
        })?;

        let mut mounts = filesystem::bind_mounts(&spec.read_only)?;
        for (source, target) in &spec.overlays {
            mounts.push(filesystem::file_overlay(source, target)?);
        }
        let (mut loopback_aliases, mut transparent_listen, mut dns_addr) =
            (Vec::new(), Vec::new(), None);
        let (mut loopback_v6, mut transparent_listen_v6) = (Vec::new(), Vec::new());
        if let Some(t) = &spec.transparent {
            for (addr, prefix) in &t.addresses {
                if *prefix > 32 {
                    return Err(SandboxError::InvalidSpec(format!(
                        "prefix /{prefix} of {addr}"
                    )));
                }
                let mask = u32::MAX.checked_shl(32 - u32::from(*prefix)).unwrap_or(0);
                loopback_aliases.push((addr.octets(), mask.to_be_bytes()));
            }
            if loopback_aliases.len() > 999 {
                return Err(SandboxError::InvalidSpec(
                    "more than 999 addresses for the sandbox's loopback".into(),
                ));
            }
            for port in &t.ports {
                if *port == spec.proxy_port || *port == 0 {
                    return Err(SandboxError::InvalidSpec(format!(
                        "port {port} cannot be a transparent listener (the proxy's own port, or 0)"
                    )));
                }
                transparent_listen.push(sockaddr_in(Ipv4Addr::UNSPECIFIED, *port));
            }
            loopback_v6 = t.addresses_v6.iter().map(|a| a.octets()).collect();
            if t.ipv6 || !t.addresses_v6.is_empty() {
                transparent_listen_v6 = t.ports.clone();
            }
            dns_addr = Some(sockaddr_in(*t.dns.ip(), t.dns.port()));
            mounts.extend(filesystem::resolv_conf_mount(&t.resolv_conf)?);
        }
        let landlock = match &spec.writable {
            Some(paths) => Some(filesystem::write_allowlist(paths)?),
            None => None,
        };

        let mut keep_fds = vec![0, 1, 2, control];
        keep_fds.extend(stdio.iter().flatten());
        keep_fds.extend(landlock.as_ref().map(|fd| fd.as_raw_fd()));
        keep_fds.sort_unstable();
        keep_fds.dedup();

        Ok(Prepared {
            exec_candidates: exec_candidates(&spec.program, &spec.env)?,
            _argv: argv,
            argv_ptrs,
            _envp: envp,
            envp_ptrs,
            cwd,
            uid_map,
            gid_map,
            listen_addr,
            filter,
            stdio,
            control,
            keep_fds,
            mounts,
            landlock,
            loopback_aliases,
            transparent_listen,
            loopback_v6,
            transparent_listen_v6,
            dns_addr,
        })
    }
}

fn sockaddr_in(ip: Ipv4Addr, port: u16) -> libc::sockaddr_in {
    let mut addr = sockaddr_in_zeroed();
    addr.sin_family = libc::AF_INET as libc::sa_family_t;
    addr.sin_port = port.to_be();
    addr.sin_addr.s_addr = u32::from(ip).to_be();
    addr
}

fn sockaddr_in_zeroed() -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: 0,
        sin_port: 0,
        sin_addr: libc::in_addr { s_addr: 0 },
        sin_zero: [0; 8],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> OsString {
        s.into()
    }

    #[test]
    fn bare_names_are_searched_in_the_spec_path() {
        let env = vec![(os("PATH"), os("/opt/bin::/usr/bin"))];
        let got = exec_candidates(OsStr::new("tool"), &env).unwrap();
        let got: Vec<_> = got.iter().map(|c| c.to_str().unwrap().to_owned()).collect();
        assert_eq!(got, ["/opt/bin/tool", "./tool", "/usr/bin/tool"]);
    }

    #[test]
    fn paths_are_used_as_given_and_missing_path_uses_the_default() {
        let got = exec_candidates(OsStr::new("./run.sh"), &[]).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].to_str().unwrap(), "./run.sh");
        let got = exec_candidates(OsStr::new("sh"), &[]).unwrap();
        assert_eq!(got.last().unwrap().to_str().unwrap(), "/bin/sh");
    }

    #[test]
    fn debug_output_names_variables_but_hides_values() {
        let spec = SandboxSpec::new("agent").envs([("GITHUB_TOKEN", "placeholder-value-123")]);
        let text = format!("{spec:?}");
        assert!(text.contains("GITHUB_TOKEN"), "{text}");
        assert!(!text.contains("placeholder-value-123"), "{text}");
    }

    #[test]
    fn invalid_specs_are_refused() {
        let refuse = |spec: SandboxSpec, needle: &str| match Prepared::new(&spec, 3, [None; 3]) {
            Err(SandboxError::InvalidSpec(msg)) => assert!(msg.contains(needle), "{msg}"),
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("spec accepted"),
        };
        refuse(
            SandboxSpec {
                uid: 0,
                ..SandboxSpec::new("true")
            },
            "uid or gid 0",
        );
        refuse(
            SandboxSpec {
                gid: 0,
                ..SandboxSpec::new("true")
            },
            "uid or gid 0",
        );
        refuse(
            SandboxSpec {
                proxy_port: 0,
                ..SandboxSpec::new("true")
            },
            "port",
        );
        refuse(SandboxSpec::new(""), "empty");
        refuse(SandboxSpec::new("true").args(["a\0b"]), "NUL");
        refuse(SandboxSpec::new("true").envs([("A=B", "c")]), "'='");
        refuse(SandboxSpec::new("true").envs([("", "c")]), "empty");
    }

    #[test]
    fn prepared_pointer_arrays_are_null_terminated_and_maps_name_the_inside_ids() {
        let spec = SandboxSpec::new("echo").args(["hi"]).envs([("A", "1")]);
        let p = Prepared::new(&spec, 7, [Some(9), None, Some(5)]).unwrap();
        assert_eq!(p.argv_ptrs.len(), 3);
        assert!(p.argv_ptrs[2].is_null());
        assert_eq!(p.envp_ptrs.len(), 2);
        assert!(p.envp_ptrs[1].is_null());
        assert!(p.uid_map.starts_with(b"1000 "));
        assert!(p.gid_map.starts_with(b"1000 "));
        assert_eq!(p.keep_fds, [0, 1, 2, 5, 7, 9]);
        assert_eq!(u16::from_be(p.listen_addr.sin_port), DEFAULT_PROXY_PORT);
    }
}
