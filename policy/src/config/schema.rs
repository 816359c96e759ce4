//! The policy file schema: turns one file's YAML tree into the [`Config`] model and checks every
//! rule that needs only that file (keys, types, entry kinds, urls, names, allow/deny). Rules that
//! span entries or files live in `rules` and `merge`.
//!
//! One [`Reader`] walks the file; each part of an entry with rules of its own has a child module
//! that adds its methods (`arg_rules`, `confirm`, `limits`, `positions`, `private`). Uses the
//! model, `yaml`, `url` and `units`; nothing of `config` uses it but the pipeline in `config`.
//!
//! It walks the tree by hand rather than through `#[derive(Deserialize)]`: the walk reports every
//! problem in the file at once, each with its key path and a hint, where derived structs stop at
//! the first. Unknown keys are still errors everywhere.

use super::ConfigError;
use super::model::*;
use super::url;
use super::yaml::{Node, Value, push_key};
use crate::host::HostPattern;
use crate::secret_name::{is_valid_secret_name, reserved_reason};
use crate::secret_position::SecretPosition;
use crate::server_name::{MAX_SERVER_NAME, is_valid_server_name};
use crate::tool_pattern::ToolPattern;
use crate::uri_pattern::UriPattern;
use std::sync::Arc;

mod arg_rules;
mod confirm;
mod limits;
mod positions;
mod private;
mod programs;

const TOP_KEYS: &[&str] = &["version", "hosts", "mcp", "secrets"];
/// The machine file may also say where the team policy comes from.
const MACHINE_TOP_KEYS: &[&str] = &["version", "hosts", "mcp", "secrets", "team"];
/// A team policy carries its `serial` (the fetcher refuses an older one).
const TEAM_TOP_KEYS: &[&str] = &["version", "serial", "hosts", "mcp", "secrets"];
const TEAM_KEYS: &[&str] = &["url", "key"];
const ENTRY_KEYS: &[&str] = &[
    "url",
    "command",
    "account",
    "token",
    "oauth",
    "tools",
    "secrets",
    "hosts",
    "list",
    "pin",
    "resources",
    "prompts",
    "private",
    "limits",
    "token_in",
    "programs",
    "run",
];
const TOOLS_KEYS: &[&str] = &[
    "allow",
    "deny",
    "allow_annotated",
    "rules",
    "confirm",
    "confirm_timeout",
];
/// The keys of `resources` and `prompts`.
const ALLOW_KEYS: &[&str] = &["allow"];
const LIST_MODES: &[(&str, ListMode)] = &[("filter", ListMode::Filter), ("all", ListMode::All)];
const SECRET_KEYS: &[&str] = &["hosts", "body", "in", "programs"];
const ACCOUNTS: &[&str] = &["claude"];

const LIST_TOOLS_HINT: &str = "list the tools agents may call, e.g. `tools: {allow: [get_issue]}`, \
     or allow every tool with `allow: [\"*\"]` (`--all-tools`)";
const LIST_HINT: &str = "write `list: filter` (the default: lists show only what the policy allows) \
     or `list: all` (lists pass unchanged)";
const RESOURCES_HINT: &str = "list the resource URIs agents may read, e.g. \
     `resources: {allow: [\"linear://issues/*\"]}`";
const PROMPTS_HINT: &str =
    "list the prompts agents may get, e.g. `prompts: {allow: [summarize, \"review_*\"]}`";
const ANNOTATIONS_HINT: &str = "the one annotation is `read_only`: tools whose pinned definition \
     says `readOnlyHint: true` and not `destructiveHint: true`";
const ANNOTATED_PIN_HINT: &str =
    "add `pin: true` to the server: annotations are read from the pinned definition only";

/// Reads one file's root node, with its `serial` (only a team policy has one, and it must).
/// `Err` holds every problem found.
pub fn read(
    root: &Node,
    file: &str,
    origin: Origin,
) -> Result<(Config, Option<u64>), Vec<ConfigError>> {
    let mut r = Reader {
        file: Arc::from(file),
        origin,
        errors: Vec::new(),
        private: Vec::new(),
        host_programs: Vec::new(),
        serial: None,
    };
    let config = r.config(root);
    match config {
        Some(c) if r.errors.is_empty() => Ok((c, r.serial)),
        _ => Err(r.errors),
    }
}

struct Reader {
    file: Arc<str>,
    origin: Origin,
    errors: Vec<ConfigError>,
    /// The file's `private:` lists, gathered where they are read.
    private: Vec<PrivateName>,
    /// The file's `programs:` on `hosts` mappings, gathered where they are read.
    host_programs: Vec<crate::config::model::programs::HostPrograms>,
    /// A team policy's `serial`.
    serial: Option<u64>,
}

/// The known keys of one mapping, looked up by name.
struct Fields<'n> {
    entries: Vec<(&'static str, &'n Node, &'n Node)>,
}

impl<'n> Fields<'n> {
    fn get(&self, key: &str) -> Option<(&'n Node, &'n Node)> {
        self.entries
            .iter()
            .find(|(k, ..)| *k == key)
            .map(|(_, k, v)| (*k, *v))
    }
}

fn child(path: &str, key: &str) -> String {
    let mut p = path.to_string();
    push_key(&mut p, key);
    p
}

fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

impl Reader {
    fn at(&self, node: &Node, key: &str) -> Location {
        Location {
            file: self.file.clone(),
            line: node.line,
            column: node.column,
            key: key.to_string(),
        }
    }

    fn error(
        &mut self,
        node: &Node,
        key: &str,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) {
        self.errors.push(ConfigError {
            at: Some(self.at(node, key)),
            message: message.into(),
            hint: Some(hint.into()),
        });
    }

    fn wrong_type(&mut self, node: &Node, key: &str, expected: &str, hint: &str) {
        let found = node.value.kind();
        self.error(
            node,
            key,
            format!("expected {expected}, found {found}"),
            hint,
        );
    }

    /// A mapping whose keys are all strings among `allowed`; unknown and repeated keys reported.
    fn fields<'n>(
        &mut self,
        node: &'n Node,
        path: &str,
        allowed: &[&'static str],
        what: &str,
        hint: &str,
    ) -> Option<Fields<'n>> {
        let Value::Map(entries) = &node.value else {
            self.wrong_type(node, path, what, hint);
            return None;
        };
        let mut out = Fields {
            entries: Vec::new(),
        };
        for (k, v) in entries {
            let Some(name) = self.key_str(k, path) else {
                continue;
            };
            match allowed.iter().find(|a| **a == name) {
                Some(known) => {
                    if out.get(known).is_some() {
                        self.error(
                            k,
                            &child(path, name),
                            format!("duplicate key `{name}`"),
                            "a key may appear only once in a mapping",
                        );
                        continue;
                    }
                    out.entries.push((known, k, v));
                }
                None => {
                    let hint = match allowed.iter().find(|a| a.eq_ignore_ascii_case(name)) {
                        Some(a) => format!("keys are case-sensitive: did you mean `{a}`?"),
                        None => format!("known keys here: {}", allowed.join(", ")),
                    };
                    self.error(k, &child(path, name), format!("unknown key `{name}`"), hint);
                }
            }
        }
        Some(out)
    }

    fn key_str<'n>(&mut self, k: &'n Node, path: &str) -> Option<&'n str> {
        match &k.value {
            Value::Str(s) => Some(s),
            _ => {
                self.wrong_type(k, path, "a string key", "write keys as plain names");
                None
            }
        }
    }

    fn string<'n>(&mut self, node: &'n Node, key: &str, what: &str, hint: &str) -> Option<&'n str> {
        match &node.value {
            Value::Str(s) => Some(s),
            _ => {
                self.wrong_type(node, key, what, hint);
                None
            }
        }
    }

    fn seq<'n>(&mut self, node: &'n Node, key: &str, what: &str, hint: &str) -> Option<&'n [Node]> {
        match &node.value {
            Value::Seq(items) => Some(items),
            _ => {
                self.wrong_type(node, key, what, hint);
                None
            }
        }
    }

    fn boolean(&mut self, node: &Node, key: &str) -> Option<bool> {
        match &node.value {
            Value::Bool(b) => Some(*b),
            Value::Str(s)
                if matches!(
                    s.to_ascii_lowercase().as_str(),
                    "yes" | "no" | "on" | "off" | "y" | "n"
                ) =>
            {
                self.error(
                    node,
                    key,
                    format!("expected true or false, found the string `{s}`"),
                    "YAML 1.1 spellings like yes/no/on/off are not booleans in a policy file; write true or false",
                );
                None
            }
            _ => {
                self.wrong_type(
                    node,
                    key,
                    "true or false",
                    "write true or false, without quotes",
                );
                None
            }
        }
    }

    fn config(&mut self, root: &Node) -> Option<Config> {
        // Another version's keys may mean something else: when the file declares one, that is
        // the only thing reported.
        if let Value::Map(entries) = &root.value {
            let declared = entries
                .iter()
                .find_map(|(k, v)| match (&k.value, &v.value) {
                    (Value::Str(k), Value::Int(n)) if k == "version" && *n != 1 => Some((v, *n)),
                    _ => None,
                });
            if let Some((v, n)) = declared {
                self.error(
                    v,
                    "version",
                    format!("unsupported version {n}"),
                    "this fenzi reads `version: 1`; upgrade fenzi to read a newer file",
                );
                return None;
            }
        }
        let top_keys = match self.origin {
            Origin::Team => TEAM_TOP_KEYS,
            Origin::Machine => MACHINE_TOP_KEYS,
            Origin::Project => TOP_KEYS,
        };
        let f = self.fields(
            root,
            "",
            top_keys,
            "a mapping with `version: 1` at the top",
            "a policy file is a mapping: `version: 1`, then `hosts:`, `mcp:`, `secrets:`",
        )?;
        match f.get("version") {
            None => self.error(
                root,
                "version",
                "missing `version`",
                "add `version: 1` as the first line",
            ),
            Some((_, v)) => match &v.value {
                Value::Int(_) => {}
                Value::Str(s) if s.trim() == "1" => self.error(
                    v,
                    "version",
                    "`version` must be the integer 1, not a string",
                    "write `version: 1` without quotes",
                ),
                Value::Float(_) => self.error(
                    v,
                    "version",
                    "`version` must be the integer 1, not a decimal number",
                    "write `version: 1`",
                ),
                _ => self.wrong_type(v, "version", "the integer 1", "write `version: 1`"),
            },
        }
        let mut config = Config::default();
        if let Some((_, v)) = f.get("hosts") {
            config.hosts = self.host_list(v, "hosts");
        }
        if let Some((_, v)) = f.get("mcp") {
            config.mcp = self.servers(v);
        }
        if let Some((_, v)) = f.get("secrets") {
            config.secrets = self.secrets(v);
        }
        config.private = std::mem::take(&mut self.private);
        config.host_programs = std::mem::take(&mut self.host_programs);
        if let Some((_, v)) = f.get("team") {
            config.team = self.team(v);
        }
        if self.origin == Origin::Team {
            self.serial = self.serial(root, f.get("serial").map(|(_, v)| v));
        }
        Some(config)
    }

    /// A team policy's `serial`: a positive integer, required.
    fn serial(&mut self, root: &Node, node: Option<&Node>) -> Option<u64> {
        const HINT: &str = "a team policy carries `serial: N`, a positive integer raised with each \
             release; fenzi refuses a copy older than the one it has";
        let Some(node) = node else {
            self.error(root, "serial", "missing `serial`", HINT);
            return None;
        };
        match &node.value {
            Value::Int(n) if *n > 0 => u64::try_from(*n).ok(),
            Value::Int(_) => {
                self.error(node, "serial", "`serial` must be positive", HINT);
                None
            }
            _ => {
                self.wrong_type(node, "serial", "a positive integer", HINT);
                None
            }
        }
    }

    /// The machine file's `team: {url, key}`.
    fn team(&mut self, node: &Node) -> Option<TeamSource> {
        const HINT: &str = "write `team: {url: https://policy.example.com/fenzi.yaml, key: \
             team.pub}`: the signed policy's url and its minisign public key file";
        let f = self.fields(
            node,
            "team",
            TEAM_KEYS,
            "a mapping with `url` and `key`",
            HINT,
        )?;
        let url = match f.get("url") {
            None => {
                self.error(node, "team.url", "missing `url`", HINT);
                None
            }
            Some((_, v)) => {
                let text = self.string(v, "team.url", "a url", HINT)?;
                match url::parse(text) {
                    Ok(u) if u.tls => Some(u),
                    Ok(_) => {
                        self.error(
                            v,
                            "team.url",
                            "the team policy's url is not https",
                            "a team policy is fetched over https only; write an https:// url",
                        );
                        None
                    }
                    Err(e) => {
                        self.error(v, "team.url", e.message, e.hint);
                        None
                    }
                }
            }
        };
        let key = match f.get("key") {
            None => {
                self.error(node, "team.key", "missing `key`", HINT);
                None
            }
            Some((_, v)) => match self.string(v, "team.key", "a file name", HINT) {
                Some("") => {
                    self.error(v, "team.key", "empty `key`", HINT);
                    None
                }
                other => other.map(str::to_string),
            },
        };
        Some(TeamSource {
            url: url?,
            key: key?,
            at: self.at(node, "team"),
        })
    }

    fn host_list(&mut self, node: &Node, path: &str) -> Vec<Located<HostPattern>> {
        let hint =
            "write a list of hosts: `[api.example.com, \"*.example.com\", \"10.0.0.5:8080\"]`";
        let Some(items) = self.seq(node, path, "a list of hosts", hint) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let key = index(path, i);
            if let Value::Map(_) = item.value {
                out.extend(self.host_mapping(item, &key, path == "hosts"));
                continue;
            }
            let Some(text) = self.string(item, &key, "a host", hint) else {
                continue;
            };
            match HostPattern::parse(text) {
                Ok(p) => out.push(Located {
                    value: p,
                    at: self.at(item, &key),
                }),
                Err(e) => self.error(
                    item,
                    &key,
                    e.to_string(),
                    "a host is `name`, `*.suffix` or an IP literal, with `:port` if not 443",
                ),
            }
        }
        out
    }

    fn servers(&mut self, node: &Node) -> Vec<McpServerConfig> {
        let Value::Map(entries) = &node.value else {
            self.wrong_type(
                node,
                "mcp",
                "a mapping of server names to entries",
                "write `mcp:` then one indented `NAME:` per server",
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, v) in entries {
            let Some(name) = self.key_str(k, "mcp") else {
                continue;
            };
            let path = child("mcp", name);
            if !is_valid_server_name(name) {
                self.error(
                    k,
                    &path,
                    "invalid server name",
                    format!("a server name is 1-{MAX_SERVER_NAME} characters of A-Z a-z 0-9 _ . - starting with a letter or digit"),
                );
                continue;
            }
            if let Some((kind, surface, programs)) = self.entry(k, v, &path) {
                out.push(McpServerConfig {
                    name: name.to_string(),
                    origin: self.origin,
                    narrowed_by_project: false,
                    kind,
                    surface,
                    programs: programs.into_iter().collect(),
                    at: self.at(k, &path),
                });
            }
        }
        out
    }

    fn entry(
        &mut self,
        name_node: &Node,
        node: &Node,
        path: &str,
    ) -> Option<(
        ServerKind,
        ServerSurface,
        Option<crate::config::model::programs::ProgramList>,
    )> {
        let f = self.fields(
            node,
            path,
            ENTRY_KEYS,
            "a server entry (a mapping with `url`, `command` or `account`)",
            "write the entry as a mapping, e.g. `url: https://host/mcp` and `tools: {allow: [...]}`",
        )?;
        let kinds: Vec<(&str, &Node)> = ["url", "command", "account"]
            .into_iter()
            .filter_map(|k| f.get(k).map(|(kn, _)| (k, kn)))
            .collect();
        let kind = match kinds.as_slice() {
            [] => {
                self.error(
                    name_node,
                    path,
                    "the entry has none of `url`, `command` or `account`",
                    "a remote server has `url:`, a local server `command:`, Claude's connectors `account: claude`",
                );
                return None;
            }
            [(k, _)] => *k,
            [(first, _), rest @ ..] => {
                for (k, kn) in rest {
                    self.error(
                        kn,
                        &child(path, k),
                        format!("the entry has both `{first}` and `{k}`; it must have exactly one of `url`, `command`, `account`"),
                        "split it into two entries with different names",
                    );
                }
                return None;
            }
        };
        // Keys that belong to another kind of entry.
        let foreign: &[(&str, &str)] = match kind {
            "url" => &[
                (
                    "secrets",
                    "`secrets` applies to local (`command`) servers; a remote server's token is `token: true`",
                ),
                (
                    "hosts",
                    "`hosts` applies to local (`command`) servers; a remote server's host is in its url",
                ),
                (
                    "run",
                    "`run` applies to local (`command`) servers: a remote server runs where its url is",
                ),
            ],
            "account" => &[
                (
                    "token",
                    "account connectors use Claude's own sign-in; there is no token to store",
                ),
                (
                    "oauth",
                    "account connectors use Claude's own sign-in; fenzi signs in to `url` servers only",
                ),
                (
                    "token_in",
                    "account connectors use Claude's own sign-in; there is no token to place",
                ),
                ("secrets", "`secrets` applies to local (`command`) servers"),
                (
                    "hosts",
                    "`hosts` applies to local (`command`) servers; the account host is fixed",
                ),
                ("run", "`run` applies to local (`command`) servers"),
                (
                    "private",
                    "the account host is a public Anthropic host; `private` applies to `url` \
                     servers and top-level `hosts` entries",
                ),
            ],
            _ => &[
                (
                    "token",
                    "`token` applies to `url` servers; a local server's secret goes under `secrets:` with its `hosts:`",
                ),
                (
                    "token_in",
                    "`token_in` applies to `url` servers with `token: true`",
                ),
                (
                    "oauth",
                    "`oauth` applies to `url` servers; a local server's secret goes under `secrets:` with its `hosts:`",
                ),
                (
                    "private",
                    "`private` applies to `url` servers and top-level `hosts` entries: name the \
                     ranges of a local server's host there, `hosts: [{host: NAME, private: [RANGE]}]`",
                ),
            ],
        };
        let mut ok = true;
        for (k, why) in foreign {
            if let Some((kn, _)) = f.get(k) {
                let entry = if kind == "account" {
                    "an `account`"
                } else if kind == "url" {
                    "a `url`"
                } else {
                    "a `command`"
                };
                self.error(
                    kn,
                    &child(path, k),
                    format!("`{k}` is not allowed on {entry} entry"),
                    *why,
                );
                ok = false;
            }
        }
        let mut programs_ok = true;
        let programs = match f.get("programs") {
            Some((k, v)) => {
                let list = self.programs(k, v, &child(path, "programs"));
                programs_ok = list.is_some();
                list
            }
            _ => None,
        };
        let result = match kind {
            "url" | "account" => {
                let (pin, surface) = self.surface(&f, path);
                let server = if kind == "url" {
                    self.remote(name_node, &f, path, pin)
                } else {
                    self.account(name_node, &f, path, pin)
                };
                let limits = self.limits(&f, path, server.as_ref());
                let token_in = self.token_in(&f, path, server.as_ref());
                server.zip(surface).zip(limits).zip(token_in).map(
                    |(((server, mut surface), limits), (token_in, at))| {
                        surface.limits = limits;
                        surface.token_in = token_in;
                        surface.written.token_in = at;
                        (server, surface)
                    },
                )
            }
            _ => {
                // DESIGN §18: the bridge makes a local server's messages visible, so every MCP
                // key of a remote entry applies to it.
                let (pin, surface) = self.surface(&f, path);
                let server = self.local(name_node, &f, path, pin);
                let limits = self.limits(&f, path, server.as_ref());
                let run_at = f.get("run").map(|(k, _)| self.at(k, &child(path, "run")));
                server
                    .zip(surface)
                    .zip(limits)
                    .map(|((server, mut surface), limits)| {
                        surface.limits = limits;
                        surface.written.run = run_at;
                        (server, surface)
                    })
            }
        };
        if ok && programs_ok {
            result.map(|(kind, surface)| (kind, surface, programs))
        } else {
            None
        }
    }

    /// `token_in` of a `url` entry: the positions of its token (`positions.rs` reads the list, as
    /// for a secret's `in`), only with `token: true`, headers and query parameters only. `Some((None,
    /// None))` when the key is absent.
    #[allow(clippy::type_complexity)]
    fn token_in(
        &mut self,
        f: &Fields<'_>,
        path: &str,
        server: Option<&ServerKind>,
    ) -> Option<(
        Option<Vec<Located<crate::secret_position::SecretPosition>>>,
        Option<Location>,
    )> {
        let Some((k, node)) = f.get("token_in") else {
            return Some((None, None));
        };
        let key = child(path, "token_in");
        if let Some(ServerKind::Remote { token: false, .. }) = server {
            self.error(
                k,
                &key,
                "`token_in` without `token: true`: there is no token to place",
                "add `token: true`, or remove `token_in`",
            );
            return None;
        }
        let list = positions::read(&self.file, node, &key, &mut self.errors)?;
        if let Some(body) = list
            .iter()
            .find(|p| p.value == crate::secret_position::SecretPosition::Body)
        {
            self.errors.push(ConfigError {
                at: Some(body.at.clone()),
                message: "a server's token is not swapped in request bodies".into(),
                hint: Some(
                    "list headers and query parameters, e.g. `token_in: [header:X-Api-Key]`; a \
                     key that goes in a JSON body is a top-level secret with `in: [body]`"
                        .into(),
                ),
            });
            return None;
        }
        Some((Some(list), Some(self.at(k, &key))))
    }

    /// `list`, `pin`, `resources` and `prompts` of a `url` or `account` entry. The `pin` value is
    /// also returned on its own, for the `allow_annotated` check when another key is wrong.
    fn surface(&mut self, f: &Fields<'_>, path: &str) -> (Option<bool>, Option<ServerSurface>) {
        let mut written = SurfaceKeys::default();
        let list = match f.get("list") {
            None => Some(ListMode::Filter),
            Some((k, v)) => {
                let key = child(path, "list");
                written.list = Some(self.at(k, &key));
                self.list_mode(v, &key)
            }
        };
        let pin = match f.get("pin") {
            None => Some(false),
            Some((k, v)) => {
                let key = child(path, "pin");
                written.pin = Some(self.at(k, &key));
                self.boolean(v, &key)
            }
        };
        let resources = match f.get("resources") {
            None => Some(Vec::new()),
            Some((k, v)) => {
                let key = child(path, "resources");
                written.resources = Some(self.at(k, &key));
                self.allow_only(k, v, &key, RESOURCES_HINT)
                    .and_then(|a| self.uri_patterns(a, &child(&key, "allow")))
            }
        };
        let prompts = match f.get("prompts") {
            None => Some(Vec::new()),
            Some((k, v)) => {
                let key = child(path, "prompts");
                written.prompts = Some(self.at(k, &key));
                self.allow_only(k, v, &key, PROMPTS_HINT)
                    .and_then(|a| self.patterns(a, &child(&key, "allow"), "prompt"))
            }
        };
        let surface = match (list, pin, resources, prompts) {
            (Some(list), Some(pin), Some(resources), Some(prompts)) => Some(ServerSurface {
                list,
                pin,
                resources,
                prompts,
                limits: Vec::new(),
                written,
                token_in: None,
            }),
            _ => None,
        };
        (pin, surface)
    }

    fn list_mode(&mut self, node: &Node, key: &str) -> Option<ListMode> {
        let text = self.string(node, key, "`filter` or `all`", LIST_HINT)?;
        match LIST_MODES.iter().find(|(name, _)| *name == text) {
            Some((_, mode)) => Some(*mode),
            None => {
                self.error(
                    node,
                    key,
                    format!("unknown list mode `{text}`; `list` is `filter` or `all`"),
                    LIST_HINT,
                );
                None
            }
        }
    }

    /// The `allow` list of a `resources` or `prompts` mapping (its only key, and required).
    fn allow_only<'n>(
        &mut self,
        key_node: &Node,
        node: &'n Node,
        path: &str,
        hint: &str,
    ) -> Option<&'n Node> {
        let f = self.fields(node, path, ALLOW_KEYS, "a mapping with `allow`", hint)?;
        match f.get("allow") {
            Some((_, a)) => Some(a),
            None => {
                let name = path.rsplit('.').next().unwrap_or(path);
                self.error(
                    key_node,
                    path,
                    format!("`{name}` has no `allow` list"),
                    format!("{hint}; `allow: []` allows none"),
                );
                None
            }
        }
    }

    fn uri_patterns(&mut self, node: &Node, path: &str) -> Option<Vec<Located<UriPattern>>> {
        let hint = "write a list of resource URIs or globs: `[\"linear://issues/*\"]`";
        let items = self.seq(node, path, "a list of resource URIs", hint)?;
        let mut out = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let key = index(path, i);
            let Some(text) = self.string(item, &key, "a resource URI", "quote it") else {
                ok = false;
                continue;
            };
            match UriPattern::parse(text) {
                Ok(p) => out.push(Located {
                    value: p,
                    at: self.at(item, &key),
                }),
                Err(e) => {
                    ok = false;
                    self.error(
                        item,
                        &key,
                        e.to_string(),
                        "a resource pattern is a URI as the server names it, or a glob where `*` \
                         matches any run of characters (`/` included) and `?` one character",
                    );
                }
            }
        }
        ok.then_some(out)
    }

    fn annotations(&mut self, node: &Node, path: &str) -> Option<Vec<Located<Annotation>>> {
        let items = self.seq(node, path, "a list of annotations", ANNOTATIONS_HINT)?;
        let mut out: Vec<Located<Annotation>> = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let key = index(path, i);
            let Some(text) = self.string(item, &key, "an annotation name", ANNOTATIONS_HINT) else {
                ok = false;
                continue;
            };
            match Annotation::ALL.iter().find(|(name, _)| *name == text) {
                None => {
                    ok = false;
                    self.error(
                        item,
                        &key,
                        format!("unknown annotation `{text}`"),
                        ANNOTATIONS_HINT,
                    );
                }
                Some((name, a)) => {
                    if let Some(first) = out.iter().find(|o| o.value == *a) {
                        ok = false;
                        let line = first.at.line;
                        self.error(
                            item,
                            &key,
                            format!("`{name}` is listed twice (first at line {line})"),
                            "list each annotation once",
                        );
                    } else {
                        out.push(Located {
                            value: *a,
                            at: self.at(item, &key),
                        });
                    }
                }
            }
        }
        ok.then_some(out)
    }

    fn remote(
        &mut self,
        name_node: &Node,
        f: &Fields<'_>,
        path: &str,
        pin: Option<bool>,
    ) -> Option<ServerKind> {
        let (_, url_node) = f.get("url")?;
        let url_key = child(path, "url");
        let url = self
            .string(
                url_node,
                &url_key,
                "a url string",
                "write `url: https://host/path`",
            )
            .and_then(|text| match url::parse(text) {
                Ok(u) => Some(u),
                Err(e) => {
                    self.error(url_node, &url_key, e.message, e.hint);
                    None
                }
            });
        if let Some((k, v)) = f.get("private") {
            let pattern = url
                .as_ref()
                .map(|u| HostPattern::for_host(u.host.clone(), u.port));
            self.private_list(k, v, &child(path, "private"), pattern.as_ref());
        }
        let token = match f.get("token") {
            None => Some(false),
            Some((_, t)) => self.boolean(t, &child(path, "token")),
        };
        if let (Some(u), Some(true), Some((_, t))) = (&url, token, f.get("token"))
            && !u.tls
        {
            self.error(
                t,
                &child(path, "token"),
                "`token: true` needs an https url; a token is never sent over plain http",
                "use the server's https:// url",
            );
        }
        let oauth = self.oauth(f, path, url.as_ref());
        let tools = self.tools(name_node, f, path, pin);
        let oauth = oauth?;
        Some(ServerKind::Remote {
            url: url?,
            // An OAuth sign-in's access token is the server's token (`MCP_<SERVER>`).
            token: token? || oauth,
            oauth,
            tools: tools?,
        })
    }

    /// `oauth` of a `url` entry: a boolean; `true` needs an https url, and stands alone: it is the
    /// server's token (no `token` beside it) and goes in `Authorization` (no `token_in`).
    fn oauth(&mut self, f: &Fields<'_>, path: &str, url: Option<&RemoteUrl>) -> Option<bool> {
        let Some((_, node)) = f.get("oauth") else {
            return Some(false);
        };
        let key = child(path, "oauth");
        let oauth = self.boolean(node, &key)?;
        if !oauth {
            return Some(false);
        }
        let mut ok = true;
        if url.is_some_and(|u| !u.tls) {
            self.error(
                node,
                &key,
                "`oauth: true` needs an https url; a token is never sent over plain http",
                "use the server's https:// url",
            );
            ok = false;
        }
        for (other, why) in [
            (
                "token",
                "`oauth: true` already gives the server a token (its OAuth access token, stored as MCP_<SERVER>)",
            ),
            (
                "token_in",
                "an OAuth access token goes in `Authorization` (RFC 6750), nowhere else",
            ),
        ] {
            if let Some((k, _)) = f.get(other) {
                self.error(
                    k,
                    &child(path, other),
                    format!("`{other}` is not allowed beside `oauth: true`"),
                    format!("{why}; remove `{other}`"),
                );
                ok = false;
            }
        }
        ok.then_some(true)
    }

    fn account(
        &mut self,
        name_node: &Node,
        f: &Fields<'_>,
        path: &str,
        pin: Option<bool>,
    ) -> Option<ServerKind> {
        let (_, a) = f.get("account")?;
        let key = child(path, "account");
        let hint = format!("supported accounts: {}", ACCOUNTS.join(", "));
        let provider = match self.string(a, &key, "an account name", &hint) {
            Some("claude") => Some(AccountProvider::Claude),
            Some(other) => {
                self.error(a, &key, format!("unsupported account `{other}`"), hint);
                None
            }
            None => None,
        };
        let tools = self.tools(name_node, f, path, pin);
        Some(ServerKind::Account {
            provider: provider?,
            tools: tools?,
        })
    }

    /// `pin` is the entry's `pin` value (`None` when it is itself wrong): `allow_annotated` needs
    /// `pin: true`.
    fn tools(
        &mut self,
        name_node: &Node,
        f: &Fields<'_>,
        path: &str,
        pin: Option<bool>,
    ) -> Option<ToolRules> {
        let Some((tools_key, tools)) = f.get("tools") else {
            self.error(name_node, path, "the entry lists no tools", LIST_TOOLS_HINT);
            return None;
        };
        let tpath = child(path, "tools");
        let tf = self.fields(
            tools,
            &tpath,
            TOOLS_KEYS,
            "a mapping with `allow` and `deny`",
            LIST_TOOLS_HINT,
        )?;
        let allow = match tf.get("allow") {
            None => {
                self.error(
                    tools_key,
                    &tpath,
                    "`tools` has no `allow` list",
                    LIST_TOOLS_HINT,
                );
                None
            }
            Some((_, a)) => self.patterns(a, &child(&tpath, "allow"), "tool"),
        };
        let deny = match tf.get("deny") {
            None => Some(Vec::new()),
            Some((_, d)) => self.patterns(d, &child(&tpath, "deny"), "tool"),
        };
        let mut allow_annotated_at = None;
        let allow_annotated = match tf.get("allow_annotated") {
            None => Some(Vec::new()),
            Some((k, v)) => {
                let key = child(&tpath, "allow_annotated");
                allow_annotated_at = Some(self.at(k, &key));
                match self.annotations(v, &key) {
                    Some(list) if !list.is_empty() && pin == Some(false) => {
                        self.error(
                            k,
                            &key,
                            "`allow_annotated` needs `pin: true` on this server",
                            ANNOTATED_PIN_HINT,
                        );
                        None
                    }
                    list => list,
                }
            }
        };
        let (allow, deny, allow_annotated) = (allow?, deny?, allow_annotated?);
        let mut clash = false;
        for a in &allow {
            if let Some(d) = deny.iter().find(|d| a.value.is_covered_by(&d.value)) {
                clash = true;
                let also = if d.value == a.value {
                    String::new()
                } else {
                    format!(" (by `{}`)", d.value)
                };
                self.errors.push(ConfigError {
                    at: Some(a.at.clone()),
                    message: format!(
                        "tool `{}` is both allowed and denied{also} (deny at line {})",
                        a.value, d.at.line
                    ),
                    hint: Some("remove it from one of the two lists".into()),
                });
            }
        }
        if clash {
            return None;
        }
        let mut rules = ToolRules {
            allow,
            deny,
            allow_annotated,
            allow_annotated_at,
            rules: vec![],
            confirm: Default::default(),
        };
        let confirm = self.confirm(&tf, &tpath, &rules);
        if let Some((_, r)) = tf.get("rules") {
            rules.rules = self.arg_rules(r, &child(&tpath, "rules"), &rules)?;
        }
        rules.confirm = confirm?;
        Some(rules)
    }

    /// A list of tool (or prompt: `noun`) names and globs.
    fn patterns(
        &mut self,
        node: &Node,
        path: &str,
        noun: &str,
    ) -> Option<Vec<Located<ToolPattern>>> {
        let example = if noun == "prompt" {
            "[summarize, \"review_*\"]"
        } else {
            "[get_issue, \"list_*\"]"
        };
        let hint = format!("write a list of {noun} names or globs: `{example}`");
        let items = self.seq(node, path, &format!("a list of {noun} names"), &hint)?;
        let mut out = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let key = index(path, i);
            let Some(text) = self.string(
                item,
                &key,
                &format!("a {noun} name"),
                &format!("quote it if the {noun}'s name looks like a number or boolean"),
            ) else {
                ok = false;
                continue;
            };
            match ToolPattern::parse(text) {
                Ok(p) => out.push(Located {
                    value: p,
                    at: self.at(item, &key),
                }),
                Err(e) => {
                    ok = false;
                    self.error(
                        item,
                        &key,
                        e.to_string(),
                        format!("a {noun} pattern is a {noun}'s exact name, or a glob of A-Z a-z 0-9 _ . - and `*`"),
                    );
                }
            }
        }
        ok.then_some(out)
    }

    fn local(
        &mut self,
        name_node: &Node,
        f: &Fields<'_>,
        path: &str,
        pin: Option<bool>,
    ) -> Option<ServerKind> {
        let (_, c) = f.get("command")?;
        let name_ok = self.local_name(name_node, path);
        let run = self.local_run(f, path);
        let tools = self.tools(name_node, f, path, pin);
        let ckey = child(path, "command");
        let chint = "write the program and its arguments as a list of strings: `[npx, -y, \"@scope/server\"]`";
        let mut command = Some(Vec::new());
        if let Some(items) = self.seq(c, &ckey, "a list of strings", chint) {
            if items.is_empty() {
                self.error(c, &ckey, "the command is empty", chint);
                command = None;
            }
            for (i, item) in items.iter().enumerate() {
                let key = index(&ckey, i);
                match &item.value {
                    Value::Str(s) if s.is_empty() => {
                        self.error(
                            item,
                            &key,
                            "empty command argument",
                            "remove it, or quote the text it should be",
                        );
                        command = None;
                    }
                    Value::Str(s) if s.contains('\0') => {
                        self.error(
                            item,
                            &key,
                            "command argument contains a NUL character",
                            "remove the NUL character",
                        );
                        command = None;
                    }
                    Value::Str(s) => {
                        if let Some(c) = command.as_mut() {
                            c.push(s.clone());
                        }
                    }
                    _ => {
                        self.wrong_type(item, &key, "a string", "quote it: numbers and booleans in a command are written as strings, e.g. \"8080\"");
                        command = None;
                    }
                }
            }
        } else {
            command = None;
        }

        let mut secrets = Some(Vec::new());
        if let Some((_, s)) = f.get("secrets") {
            let skey = child(path, "secrets");
            let shint = "write a list of variable names: `[DIGITALOCEAN_API_TOKEN]`";
            if let Some(items) = self.seq(s, &skey, "a list of variable names", shint) {
                for (i, item) in items.iter().enumerate() {
                    let key = index(&skey, i);
                    match self.secret_name(item, &key) {
                        Some(n) => {
                            if let Some(v) = secrets.as_mut() {
                                v.push(Located {
                                    value: n,
                                    at: self.at(item, &key),
                                });
                            }
                        }
                        None => secrets = None,
                    }
                }
            } else {
                secrets = None;
            }
        }
        let hosts = match f.get("hosts") {
            None => Vec::new(),
            Some((_, h)) => self.host_list(h, &child(path, "hosts")),
        };
        if let (Some(list), Some((sk, _))) = (&secrets, f.get("secrets")) {
            let hosts_given = f
                .get("hosts")
                .is_some_and(|(_, h)| !matches!(&h.value, Value::Seq(v) if v.is_empty()));
            if !list.is_empty() && !hosts_given {
                self.error(
                    sk,
                    &child(path, "secrets"),
                    "a secret must be bound to at least one host",
                    "list the hosts the server sends it to under `hosts:` (`--host` in `fenzi mcp add`)",
                );
                secrets = None;
            }
        }
        name_ok?;
        Some(ServerKind::Local {
            command: command?,
            secrets: secrets?,
            hosts,
            tools: tools?,
            run: run?,
        })
    }

    /// A local server's name becomes a DNS label of its address (`<name>.stdio.fenzi.internal`):
    /// letters, digits and `-`, not at either end, unique whatever the case.
    fn local_name(&mut self, name_node: &Node, path: &str) -> Option<()> {
        let name = match &name_node.value {
            Value::Str(s) => s.as_str(),
            _ => return Some(()),
        };
        let label_ok = name.len() <= 63
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !name.starts_with('-')
            && !name.ends_with('-');
        if label_ok {
            return Some(());
        }
        self.error(
            name_node,
            path,
            format!(
                "a local server's name becomes its address `{}`, so it must be a DNS label",
                crate::config::model::stdio_host(name)
            ),
            "use letters, digits and `-` (not first or last), at most 63 characters: e.g. `my-server`",
        );
        None
    }

    /// `run:` of a command entry: `sandbox` (the default) or `host`, which only the machine file
    /// may write (a project must not take a program out of the sandbox).
    fn local_run(&mut self, f: &Fields<'_>, path: &str) -> Option<LocalRun> {
        let Some((k, v)) = f.get("run") else {
            return Some(LocalRun::Sandbox);
        };
        let key = child(path, "run");
        let hint = "write `run: sandbox` (the default) or `run: host`";
        let text = self.string(v, &key, "`sandbox` or `host`", hint)?;
        let run = match text {
            "sandbox" => LocalRun::Sandbox,
            "host" => LocalRun::Host,
            _ => {
                self.error(v, &key, format!("unknown `run` value `{text}`"), hint);
                return None;
            }
        };
        if run == LocalRun::Host && self.origin != Origin::Machine {
            let whose = match self.origin {
                Origin::Team => "a team policy",
                _ => "a project file",
            };
            self.error(
                k,
                &key,
                format!("`run: host` is not allowed in {whose}"),
                "only the machine file (~/.config/fenzi/mcp.yaml) may run a server outside the \
                 sandbox; a project that could would let any repository run a program on the host",
            );
            return None;
        }
        Some(run)
    }

    /// A secret's variable name; the name (never a value) may be quoted back.
    fn secret_name(&mut self, node: &Node, key: &str) -> Option<String> {
        let name = self.string(
            node,
            key,
            "a variable name",
            "write the variable's name, e.g. MY_API_TOKEN",
        )?;
        if let (true, Some(why)) = (is_valid_secret_name(name), reserved_reason(name)) {
            self.error(
                node,
                key,
                format!("`{name}` cannot be a secret name: {why}"),
                "name the secret by the variable the program reads for its token, e.g. GITHUB_TOKEN",
            );
            None
        } else if is_valid_secret_name(name) {
            Some(name.to_string())
        } else {
            self.error(
                node,
                key,
                format!("invalid secret name `{name}`"),
                "a secret is named by its environment variable: A-Z 0-9 _, not starting with a digit, at most 128 characters; the value itself never goes in a config file",
            );
            None
        }
    }

    fn secrets(&mut self, node: &Node) -> Vec<SecretConfig> {
        let Value::Map(entries) = &node.value else {
            self.wrong_type(
                node,
                "secrets",
                "a mapping of variable names to entries",
                "write `secrets:` then one indented `NAME: {hosts: [...]}` per secret",
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, v) in entries {
            let Some(raw) = self.key_str(k, "secrets") else {
                continue;
            };
            let path = child("secrets", raw);
            let name = self.secret_name(k, &path);
            let Some(f) = self.fields(
                v,
                &path,
                SECRET_KEYS,
                "a mapping with `hosts` (and optionally `body`, `in`)",
                "write `NAME: {hosts: [api.example.com]}`",
            ) else {
                continue;
            };
            let hosts = match f.get("hosts") {
                None => {
                    self.error(
                        k,
                        &path,
                        "a secret must be bound to at least one host",
                        "add `hosts: [api.example.com]`: the hosts this secret may be sent to",
                    );
                    None
                }
                Some((hk, h)) => {
                    let list = self.host_list(h, &child(&path, "hosts"));
                    if matches!(&h.value, Value::Seq(v) if v.is_empty()) {
                        self.error(
                            hk,
                            &child(&path, "hosts"),
                            "a secret must be bound to at least one host",
                            "list the hosts this secret may be sent to",
                        );
                        None
                    } else {
                        Some(list)
                    }
                }
            };
            let mut body = match f.get("body") {
                None => Some(false),
                Some((_, b)) => self.boolean(b, &child(&path, "body")),
            };
            let positions = match f.get("in") {
                None => Some(None),
                Some((_, v)) => {
                    positions::read(&self.file, v, &child(&path, "in"), &mut self.errors).map(Some)
                }
            };
            if let (Some(Some(list)), Some(b)) = (&positions, body) {
                if let (true, Some((bk, _))) = (b, f.get("body")) {
                    positions::check_body(
                        &self.file,
                        bk,
                        &child(&path, "body"),
                        list,
                        &mut self.errors,
                    );
                }
                body = Some(list.iter().any(|p| p.value == SecretPosition::Body));
            }
            let programs = match f.get("programs") {
                None => Some(Vec::new()),
                Some((pk, pv)) => self
                    .programs(pk, pv, &child(&path, "programs"))
                    .map(|l| vec![l]),
            };
            if let (Some(name), Some(hosts), Some(body), Some(positions), Some(programs)) =
                (name, hosts, body, positions, programs)
            {
                out.push(SecretConfig {
                    name,
                    hosts,
                    body,
                    positions,
                    programs,
                    at: self.at(k, &path),
                });
            }
        }
        out
    }
}
