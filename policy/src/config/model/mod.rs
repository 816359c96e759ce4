//! The validated configuration: what a `fenzi.yaml` (and the machine file) mean once parsed, checked
//! and merged. Every element remembers where it was written so errors and `fenzi check` can point at it.
//!
//! The types only, with what they say about themselves; reading them from a file is `schema`'s,
//! joining files `merge`'s. The parts with more to them have a module each: [`confirm`],
//! [`limits`], [`private`], [`programs`]. Of `config`, uses only `units` (the values limits are written in) and
//! `yaml`'s key paths.

pub mod confirm;
pub mod limits;
pub mod private;
pub mod programs;

pub use confirm::Confirm;
pub use limits::ToolLimit;
pub use private::PrivateName;

use crate::args::ArgRule;
use crate::host::{Host, HostPattern};
use crate::secret_position::SecretPosition;
use crate::tool_pattern::ToolPattern;
use crate::uri_pattern::UriPattern;
use std::sync::Arc;

/// Which file an element came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The team policy (`--team-policy URL` or the machine file's `team:`), signed and fetched;
    /// the layer above the machine file.
    Team,
    /// `~/.config/fenzi/mcp.yaml` (or `$XDG_CONFIG_HOME/fenzi/mcp.yaml`).
    Machine,
    /// `./fenzi.yaml`.
    Project,
}

/// Where something was written: file, 1-based line and column, and the key path
/// (`mcp.deepwiki.tools.allow[1]`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Location {
    pub file: Arc<str>,
    pub line: u32,
    pub column: u32,
    pub key: String,
}

/// `file:line:column` of a location, for naming the other party of a clash in a message.
pub fn place(at: &Location) -> String {
    format!("{}:{}:{}", at.file, at.line, at.column)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located<T> {
    pub value: T,
    pub at: Location,
}

/// The merged, validated policy configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Config {
    /// `hosts:` entries, project and machine.
    pub hosts: Vec<Located<HostPattern>>,
    /// `mcp:` entries in file order (machine servers first).
    pub mcp: Vec<McpServerConfig>,
    /// Top-level `secrets:` entries.
    pub secrets: Vec<SecretConfig>,
    /// The names that may resolve to internal addresses (`private:` on a `hosts` entry or a
    /// `url` server), each with its ranges.
    pub private: Vec<PrivateName>,
    /// The `programs:` of top-level `hosts` entries written as mappings: every one matching a
    /// destination applies to it (see the crate's `programs`).
    pub host_programs: Vec<programs::HostPrograms>,
    /// The machine file's `team: {url, key}`: where the team policy comes from (only the machine
    /// file may name one).
    pub team: Option<TeamSource>,
}

/// `team: {url, key}` in the machine file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamSource {
    /// An `https` url (checked as a server `url` is, and https only).
    pub url: RemoteUrl,
    /// The minisign public key file, as written (a relative path is the machine file's
    /// directory's).
    pub key: String,
    pub at: Location,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    pub name: String,
    pub origin: Origin,
    /// True when a project entry narrowed a machine server.
    pub narrowed_by_project: bool,
    pub kind: ServerKind,
    /// What of a `url` or `account` server the agent may see and use beyond its tools (the default
    /// for a local server, which is not inspected).
    pub surface: ServerSurface,
    /// `programs:` of a `url` or `account` server, one list per layer that wrote one (all apply;
    /// see the crate's `programs`).
    pub programs: Vec<programs::ProgramList>,
    pub at: Location,
}

/// `list`, `pin`, `resources` and `prompts` on a `url` or `account` entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerSurface {
    /// How the server's list results reach the agent.
    pub list: ListMode,
    /// `pin: true`: tool definitions are pinned in the lock file beside the declaring file.
    pub pin: bool,
    /// `resources.allow`: URI globs for `resources/read` and `resources/subscribe` (default deny).
    pub resources: Vec<Located<UriPattern>>,
    /// `prompts.allow`: prompt names or globs for `prompts/get` (default deny).
    pub prompts: Vec<Located<ToolPattern>>,
    /// `limits`: per-tool rate, concurrency, timeout and response cap, the machine file's entries
    /// first (see [`limits`]).
    pub limits: Vec<ToolLimit>,
    /// Where each of these keys was written; all `None` when the entry leaves them to their
    /// defaults (and always for a local server). The merge needs it: a key a project entry omits
    /// keeps the machine's value, one it writes must narrow it. After a merge, the place is the
    /// project's for a key the project wrote, the machine's otherwise.
    pub written: SurfaceKeys,
    /// `token_in` of a `token: true` url server: where its token's placeholder is swapped; `None`
    /// for the default, `[header:Authorization]`. The key's place is `written.token_in`.
    pub token_in: Option<Vec<Located<crate::secret_position::SecretPosition>>>,
}

/// Where `list`, `pin`, `resources` and `prompts` were written (the key, not its value).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SurfaceKeys {
    pub list: Option<Location>,
    pub pin: Option<Location>,
    pub resources: Option<Location>,
    pub prompts: Option<Location>,
    pub token_in: Option<Location>,
    /// A local server's `run`: a lower file that writes it must say what the upper file says.
    pub run: Option<Location>,
}

/// `list: filter` (the default) or `list: all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListMode {
    /// Lists show only the tools, prompts and resources the policy allows.
    #[default]
    Filter,
    /// Lists pass unchanged (they are still read strictly).
    All,
}

/// A value of `tools.allow_annotated`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Annotation {
    /// `read_only`: the pinned definition says `readOnlyHint: true` and not `destructiveHint: true`.
    ReadOnly,
}

impl Annotation {
    /// Every annotation, as written in a config file.
    pub const ALL: &[(&str, Annotation)] = &[("read_only", Annotation::ReadOnly)];

    /// The name a config file writes it as.
    pub fn name(self) -> &'static str {
        match self {
            Annotation::ReadOnly => "read_only",
        }
    }
}

impl ListMode {
    /// The value a config file writes it as.
    pub fn name(self) -> &'static str {
        match self {
            ListMode::Filter => "filter",
            ListMode::All => "all",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerKind {
    /// `url:` — a remote Streamable HTTP server, checked per tool.
    Remote {
        url: RemoteUrl,
        /// `token: true`: the stored token `MCP_<SERVER>` is put on requests to this server only.
        token: bool,
        /// `oauth: true`: the token is an OAuth access token `fenzi mcp login` obtained and the
        /// session keeps current (refreshing it before it expires). Implies `token`: the token is
        /// `MCP_<SERVER>` like any server token, placed in `Authorization` only.
        oauth: bool,
        tools: ToolRules,
    },
    /// `command:` — a local (stdio) server. Under `fenzi run` fenzi starts it in a sandbox of its
    /// own and offers it to the agent over Streamable HTTP at [`stdio_host`]`(name)`, checked per
    /// tool like a remote server (DESIGN §18).
    Local {
        command: Vec<String>,
        /// Variable names the server reads: placeholders in its own environment only.
        secrets: Vec<Located<String>>,
        /// The server's own egress: the hosts it may reach, and its secrets are swapped on.
        hosts: Vec<Located<HostPattern>>,
        tools: ToolRules,
        /// `run:` — where the process runs.
        run: LocalRun,
    },
    /// `account: claude` — Claude's account connectors behind one Anthropic host.
    Account {
        provider: AccountProvider,
        tools: ToolRules,
    },
}

/// Where a local server's process runs (`run:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LocalRun {
    /// In a sandbox of its own (the default).
    #[default]
    Sandbox,
    /// `run: host`: on the person's machine, outside any sandbox, for servers that need it. Only
    /// the machine file may say so: a project file cannot take a program out of the sandbox.
    Host,
}

impl LocalRun {
    /// The value a config file writes it as.
    pub fn name(self) -> &'static str {
        match self {
            LocalRun::Sandbox => "sandbox",
            LocalRun::Host => "host",
        }
    }
}

/// The domain under which fenzi serves local servers to the agent. `.internal` is reserved for
/// private use (ICANN, 2024): no public name can collide with it.
pub const STDIO_DOMAIN: &str = "stdio.fenzi.internal";

/// The host the agent reaches local server `name` at: `<name>.stdio.fenzi.internal`, port 80,
/// path `/mcp`. The same in every session, so `fenzi mcp render` can name it outside one.
pub fn stdio_host(name: &str) -> String {
    format!("{}.{STDIO_DOMAIN}", name.to_ascii_lowercase())
}

/// The URL the agent's config names for local server `name`.
pub fn stdio_url(name: &str) -> String {
    format!("http://{}/mcp", stdio_host(name))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteUrl {
    /// The url as written.
    pub text: String,
    pub tls: bool,
    pub host: Host,
    /// Explicit or the scheme's default.
    pub port: u16,
    /// Path as written (no query, no fragment); `/` when empty.
    pub path: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountProvider {
    Claude,
}

impl AccountProvider {
    /// The one host all of this provider's connectors are reached through.
    pub fn host(self) -> &'static str {
        match self {
            AccountProvider::Claude => "mcp-proxy.anthropic.com",
        }
    }

    /// Path prefix under which the connectors live (`/v1/mcp/<connector id>`).
    pub fn path_prefix(self) -> &'static str {
        match self {
            AccountProvider::Claude => "/v1/mcp/",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolRules {
    pub allow: Vec<Located<ToolPattern>>,
    pub deny: Vec<Located<ToolPattern>>,
    /// `allow_annotated`: tools allowed by what their pinned definition declares (pinned servers only).
    pub allow_annotated: Vec<Located<Annotation>>,
    /// Where the `allow_annotated` key was written; `None` when omitted. As
    /// [`ServerSurface::written`]: an omitted key keeps the machine's list in a merge, a written
    /// one (even `[]`) replaces it.
    pub allow_annotated_at: Option<Location>,
    /// `rules`: argument rules, every matching one of which an allowed call must satisfy. After a
    /// merge, the machine file's followed by the project's.
    pub rules: Vec<Located<ArgRule>>,
    /// `confirm` and `confirm_timeout`: the allowed calls held until a person answers
    /// ([`confirm`]).
    pub confirm: Confirm,
}

/// A top-level `secrets:` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretConfig {
    pub name: String,
    pub hosts: Vec<Located<HostPattern>>,
    /// Also substitute in request bodies (with `in:`: true exactly when it lists `body`).
    pub body: bool,
    /// `in:`: the only places the placeholder is swapped; `None` when not written (any header
    /// value and the query, the body when `body`).
    pub positions: Option<Vec<Located<SecretPosition>>>,
    /// `programs:`: the programs whose requests may carry it, one list per layer that wrote one.
    pub programs: Vec<programs::ProgramList>,
    pub at: Location,
}
