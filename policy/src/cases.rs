//! Expected-decision cases for `fenzi check --cases FILE`: a YAML file of requests and the decision the
//! policy must give them. Parsing and running live here (pure) so the CLI stays thin and the policy's
//! own tests can run the same files.
//!
//! ```yaml
//! cases:
//!   - name: structure is allowed          # optional; defaults to "case <n>"
//!     server: deepwiki                    # an mcp entry by name ...
//!     body: {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "read_wiki_structure"}}
//!     expect: allowed
//!   - server: deepwiki
//!     body: '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}'   # or raw text
//!     expect: denied
//!     reason: policy_denied
//!   - host: github.com                    # ... or a destination host[:port] (port defaults to 443)
//!     expect: allowed
//!   - host: internal.example.com
//!     resolves_to: [10.0.0.7]             # what DNS would answer; each address is checked
//!     expect: denied
//!     reason: private_address
//! ```
//!
//! MCP cases may also set `method` (default `POST`), `path` (default the server's endpoint) and `headers`
//! (default `Content-Type: application/json`). A `host` case with a `body` on an MCP server's host is
//! classified as a request to that host. The path picks the entry, as in the proxy: on a host with
//! several entries (one per path) a case is decided by the entry whose path it names, whichever
//! entry of that host the case names, and a path no entry has is `policy_denied` (rule
//! `mcp.<host> no server at this path`).
//!
//! Instead of a `body`, a case may name what it calls, and the JSON-RPC request is written for it:
//!
//! ```yaml
//!   - server: linear
//!     tool: create_comment                # tools/call, with `arguments` as params.arguments
//!     arguments: {issueId: ENG-1, body: hi}
//!     expect: allowed
//!   - server: linear
//!     resource: linear://issues/ENG-1     # resources/read of this URI
//!     expect: allowed
//!   - server: linear
//!     prompt: summarize_issue             # prompts/get, `arguments` allowed too
//!     expect: denied
//!     rule: mcp.linear default deny       # optional: the decision's rule, exactly
//! ```
//!
//! A case may name the program that sends it (DESIGN §17): `program: agent` (the agent's own
//! process) or an absolute path, with `sha256` when the policy pins that path's content. It is
//! then decided as under `fenzi run --agent`: an MCP server without `programs:` admits only the
//! agent, and every `programs:` list that applies must admit the program
//! (`program_not_allowed` otherwise, before anything else is looked at). A case without
//! `program` is decided without looking at programs.
//!
//! A case may also say which secrets the proxy would swap into the request, by name:
//! `secrets: [MCP_LINEAR]` (exactly these, in any order), or `secrets: []` (none: e.g. a local
//! server's secret, which lives in that server's own sandbox only, is never swapped for the
//! agent). A denied request swaps none.

use crate::decision::{Decision, Reason};
use crate::engine::{PathOwner, Policy, Route};
use crate::host::{Host, split_authority};
use crate::mcp::inventory::Inventory;
use crate::mcp::{EndpointPath, RequestView};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::IpAddr;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    cases: Vec<serde_saphyr::Spanned<RawCase>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    name: Option<String>,
    server: Option<String>,
    host: Option<String>,
    method: Option<String>,
    path: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    body: Option<serde_json::Value>,
    tool: Option<String>,
    arguments: Option<serde_json::Value>,
    resource: Option<String>,
    prompt: Option<String>,
    resolves_to: Option<Vec<String>>,
    program: Option<String>,
    sha256: Option<String>,
    secrets: Option<Vec<String>>,
    expect: Expect,
    reason: Option<String>,
    rule: Option<String>,
}

/// The verdict a case expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    Allowed,
    Denied,
}

/// What a case sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Server(String),
    Host(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    pub name: String,
    pub line: u32,
    pub column: u32,
    pub target: Target,
    pub method: String,
    pub path: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
    pub resolves_to: Vec<IpAddr>,
    /// The program sending it (`agent`, or an absolute path with its content's hash).
    pub program: Option<CaseProgram>,
    /// The secrets (by name, sorted) the request must have swapped in, when the case says.
    pub secrets: Option<Vec<String>>,
    pub expect: Expect,
    pub reason: Option<Reason>,
    /// The rule the decision must name, exactly.
    pub rule: Option<String>,
}

/// The program a case is sent by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseProgram {
    /// The executable's path (empty for the agent, which is matched as `agent` only).
    pub exe: String,
    pub sha256: String,
    pub agent: bool,
}

/// A cases file that could not be read, with where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct CasesError {
    pub file: String,
    pub line: u32,
    pub column: u32,
    pub message: String,
}

/// Parses a cases file.
pub fn parse(text: &str, file: &str) -> Result<Vec<Case>, CasesError> {
    let raw: RawFile = serde_saphyr::from_str(text).map_err(|e| {
        let (line, column) = e
            .location()
            .map_or((0, 0), |l| (l.line() as u32, l.column() as u32));
        CasesError {
            file: file.into(),
            line,
            column,
            message: first_line(&e.to_string()),
        }
    })?;
    let mut out = vec![];
    for (i, spanned) in raw.cases.into_iter().enumerate() {
        let (line, column) = (
            spanned.referenced.line() as u32,
            spanned.referenced.column() as u32,
        );
        let err = |message: String| CasesError {
            file: file.into(),
            line,
            column,
            message,
        };
        let c = spanned.value;
        let name = c.name.unwrap_or_else(|| format!("case {}", i + 1));
        let target = match (c.server, c.host) {
            (Some(s), None) => Target::Server(s),
            (None, Some(h)) => Target::Host(h),
            _ => {
                return Err(err(format!(
                    "case {name:?}: give exactly one of `server` or `host`"
                )));
            }
        };
        let reason = match c.reason {
            None => None,
            Some(code) => Some(Reason::from_code(&code).ok_or_else(|| {
                err(format!(
                    "case {name:?}: unknown reason {code:?}; use one of {}",
                    Reason::ALL.map(|r| r.code()).join(", ")
                ))
            })?),
        };
        if c.expect == Expect::Allowed && reason.is_some() {
            return Err(err(format!(
                "case {name:?}: `reason` only goes with `expect: denied`"
            )));
        }
        let request = |method: &str, params: serde_json::Value| {
            let body = serde_json::json!({"jsonrpc": "2.0", "id": i + 1, "method": method, "params": params});
            serde_json::to_vec(&body).expect("JSON values serialise")
        };
        let with_arguments = |mut params: serde_json::Value| {
            if let Some(a) = &c.arguments {
                params["arguments"] = a.clone();
            }
            params
        };
        let body = match (c.body, c.tool, c.resource, c.prompt) {
            (None, None, None, None) => None,
            (Some(b), None, None, None) => Some(match b {
                serde_json::Value::String(s) => s.into_bytes(),
                other => serde_json::to_vec(&other).expect("JSON values serialise"),
            }),
            (None, Some(tool), None, None) => Some(request(
                "tools/call",
                with_arguments(serde_json::json!({"name": tool})),
            )),
            (None, None, Some(uri), None) if c.arguments.is_none() => {
                Some(request("resources/read", serde_json::json!({"uri": uri})))
            }
            (None, None, None, Some(prompt)) => Some(request(
                "prompts/get",
                with_arguments(serde_json::json!({"name": prompt})),
            )),
            _ => {
                return Err(err(format!(
                    "case {name:?}: give at most one of `body`, `tool`, `resource` or `prompt` \
                     (`arguments` goes with `tool` or `prompt`)"
                )));
            }
        };
        if c.arguments.is_some() && body.is_none() {
            return Err(err(format!(
                "case {name:?}: `arguments` goes with `tool` or `prompt`"
            )));
        }
        let mut resolves_to = vec![];
        for a in c.resolves_to.unwrap_or_default() {
            resolves_to.push(a.parse::<IpAddr>().map_err(|_| {
                err(format!(
                    "case {name:?}: resolves_to entry {a:?} is not an IP address"
                ))
            })?);
        }
        let program = match (c.program, c.sha256) {
            (None, None) => None,
            (None, Some(_)) => {
                return Err(err(format!("case {name:?}: `sha256` goes with `program`")));
            }
            (Some(p), sha) if p == "agent" => {
                if sha.is_some() {
                    return Err(err(format!(
                        "case {name:?}: `sha256` goes with a program's path, not `agent`"
                    )));
                }
                Some(CaseProgram {
                    exe: String::new(),
                    sha256: String::new(),
                    agent: true,
                })
            }
            (Some(p), sha) if p.starts_with('/') => Some(CaseProgram {
                exe: p,
                sha256: sha.unwrap_or_default().to_ascii_lowercase(),
                agent: false,
            }),
            (Some(p), _) => {
                return Err(err(format!(
                    "case {name:?}: program {p:?} is neither `agent` nor an absolute path"
                )));
            }
        };
        let headers = match c.headers {
            Some(h) => h.into_iter().collect(),
            None => vec![("Content-Type".to_string(), "application/json".to_string())],
        };
        out.push(Case {
            name,
            line,
            column,
            target,
            method: c.method.unwrap_or_else(|| "POST".into()),
            path: c.path,
            headers,
            body,
            resolves_to,
            program,
            secrets: c.secrets.map(|mut names| {
                names.sort();
                names
            }),
            expect: c.expect,
            reason,
            rule: c.rule,
        });
    }
    Ok(out)
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_string()
}

/// The result of running one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseResult {
    pub passed: bool,
    /// The decision the policy gave (the first denial, or the last allow).
    pub got: Decision,
    /// Tool and rpc method when the case was an MCP request with one message.
    pub rpc: Option<String>,
    pub tool: Option<String>,
    /// The secrets (by name, sorted) the proxy would swap into the request: those bound to its
    /// host:port when it is allowed, none when it is denied.
    pub swapped: Vec<String>,
}

/// What is known of each pinned server's tools, by server name (built from the lock files). A
/// server missing here is decided as a session that has read nothing would decide it.
pub type Inventories = BTreeMap<String, Inventory>;

/// Runs one case against the policy.
pub fn run(policy: &Policy, inventories: &Inventories, case: &Case) -> CaseResult {
    let (got, rpc, tool) = decide(policy, inventories, case);
    let swapped = if got.is_allowed() {
        swapped(policy, case)
    } else {
        Vec::new()
    };
    let passed = match case.expect {
        Expect::Allowed => got.is_allowed(),
        Expect::Denied => !got.is_allowed() && case.reason.is_none_or(|r| got.reason() == Some(r)),
    } && case.rule.as_ref().is_none_or(|r| *r == got.rule)
        && case.secrets.as_ref().is_none_or(|s| *s == swapped);
    CaseResult {
        passed,
        got,
        rpc,
        tool,
        swapped,
    }
}

/// The names of the secrets bound to the host:port an allowed case goes to: a named server's
/// address, or the case's host.
fn swapped(policy: &Policy, case: &Case) -> Vec<String> {
    let (host, port) = match &case.target {
        Target::Server(name) => {
            let Some(server) = policy.servers().iter().find(|s| &s.name == name) else {
                return Vec::new();
            };
            match &server.pattern.matcher {
                crate::host::HostMatcher::Exact(h) => (h.clone(), server.pattern.port),
                crate::host::HostMatcher::Suffix(_) => return Vec::new(),
            }
        }
        Target::Host(text) => match split_authority(text) {
            Ok((h, p)) => (h, p.unwrap_or(crate::host::DEFAULT_PORT)),
            Err(_) => return Vec::new(),
        },
    };
    let mut names: Vec<String> = policy
        .secrets_for(&host, port)
        .into_iter()
        .map(|s| s.name.clone())
        .collect();
    names.sort();
    names
}

fn decide(
    policy: &Policy,
    inventories: &Inventories,
    case: &Case,
) -> (Decision, Option<String>, Option<String>) {
    match &case.target {
        Target::Server(name) => match policy.servers().iter().find(|s| &s.name == name) {
            Some(server) => {
                if let Some(denied) = program_denied(policy, server, case) {
                    return (denied, None, None);
                }
                classify(policy, inventories, server, case)
            }
            None => (
                Decision::deny(
                    Reason::PolicyDenied,
                    "fenzi check",
                    format!("the policy has no MCP server named {name:?}"),
                ),
                None,
                None,
            ),
        },
        Target::Host(text) => {
            let (host, port) = match split_authority(text) {
                Ok((h, p)) => (h, p.unwrap_or(crate::host::DEFAULT_PORT)),
                Err(e) => {
                    return (
                        Decision::deny(Reason::BadRequest, "host syntax", e.to_string()),
                        None,
                        None,
                    );
                }
            };
            let route = match policy.route(&host, port) {
                Ok(r) => r,
                Err(denied) => return (denied, None, None),
            };
            if let Some(program) = &case.program {
                let rules = policy.program_rules(&route, &host, port);
                let entry = match &route {
                    Route::Mcp(server) => format!("mcp.{}", server.name),
                    Route::Plain { rule, .. } => rule.clone(),
                };
                if let Some(denied) = check_program(&rules, &entry, program) {
                    return (denied, None, None);
                }
            }
            let addresses: Vec<IpAddr> = match (&host, case.resolves_to.is_empty()) {
                (Host::Ip(ip), _) => vec![*ip],
                (_, false) => case.resolves_to.clone(),
                (_, true) => vec![],
            };
            // As the proxy records it: a name allowed into its private ranges is recorded by them.
            let by_name = match policy.check_addresses(&host, port, &addresses) {
                Ok(by_name) => by_name,
                Err(d) => return (d, None, None),
            };
            match (route, &case.body) {
                (Route::Mcp(server), Some(_)) => classify(policy, inventories, server, case),
                (route, _) => (
                    Decision::allow(
                        by_name.unwrap_or_else(|| policy.admission_rule(&route)),
                        format!("{} is allowed", host.authority(port)),
                    ),
                    None,
                    None,
                ),
            }
        }
    }
}

/// The `program_not_allowed` denial of a case naming a program, on MCP server `server`: its own
/// `programs` (with its default) and those of every `hosts` mapping of its host.
fn program_denied(
    policy: &Policy,
    server: &crate::engine::McpServer,
    case: &Case,
) -> Option<Decision> {
    let program = case.program.as_ref()?;
    let mut rules = server.programs.clone();
    if let crate::host::HostMatcher::Exact(host) = &server.pattern.matcher {
        rules.and(&policy.host_program_rules(host, server.pattern.port));
    }
    check_program(&rules, &format!("mcp.{}", server.name), program)
}

fn check_program(
    rules: &crate::programs::ProgramRules,
    entry: &str,
    program: &CaseProgram,
) -> Option<Decision> {
    let facts = crate::programs::ProgramFacts {
        exe: &program.exe,
        sha256: &program.sha256,
        agent: program.agent,
    };
    let refused = rules.check(entry, &[facts], true).err()?;
    let who = if program.agent {
        "the agent"
    } else {
        program.exe.as_str()
    };
    Some(Decision::deny(
        Reason::ProgramNotAllowed,
        refused.rule.clone(),
        format!(
            "{who} may not use {entry}: {} does not list it",
            refused.rule
        ),
    ))
}

fn classify(
    policy: &Policy,
    inventories: &Inventories,
    server: &crate::engine::McpServer,
    case: &Case,
) -> (Decision, Option<String>, Option<String>) {
    let default_path = match &server.rule.endpoint {
        EndpointPath::Exact(p) => p.clone(),
        EndpointPath::Prefix(p) => format!("{p}connector"),
    };
    let path = case.path.clone().unwrap_or(default_path);
    let headers: Vec<(&str, &[u8])> = case
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_bytes()))
        .collect();
    let body = case.body.as_deref().unwrap_or_default();
    let view = RequestView {
        method: &case.method,
        path: &path,
        headers: &headers,
        body,
    };
    let inventory_of = |server: &crate::engine::McpServer| {
        inventories
            .get(&server.name)
            .cloned()
            .unwrap_or_else(|| Inventory::new(server.rule.pin, None))
    };
    // The path picks the entry of the host, as in the proxy: a case may name any entry of the host
    // and the path of another (`crate::engine::by_path`).
    let owner = policy.owner_of_path(server, &case.method, &path, |s, p| {
        inventory_of(s).message_paths().contains(p)
    });
    let server = match owner {
        PathOwner::Entry(i) | PathOwner::Host(i) => &policy.servers()[i],
        PathOwner::Nobody(denied) => return (denied, None, None),
    };
    let decision = policy.decide_mcp(server, &inventory_of(server), &view);
    let (rpc, tool) = match decision.messages.as_slice() {
        [one] => (one.rpc_method.clone(), one.tool.clone()),
        _ => (None, None),
    };
    (decision.overall, rpc, tool)
}
