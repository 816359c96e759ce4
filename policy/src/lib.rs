//! `fenzi-policy`: every decision fenzi makes, as pure functions over text and values it is given.
//!
//! - [`config`]: `fenzi.yaml` and the machine file, parsed strictly, validated and merged.
//! - [`engine`]: the compiled [`engine::Policy`] the proxy asks about destinations, addresses and requests.
//! - [`mcp`]: the MCP JSON-RPC classifier (strict JSON in [`json`]).
//! - [`host`] and [`ip`]: host matching and the internal-address classifier.
//! - [`tool_pattern`]: tool names and globs; [`args`]: the argument rules of `tools.rules`;
//!   [`server_name`]: the syntax of an MCP server's name.
//! - [`audit`]: the audit record and its hash chain.
//! - [`programs`]: which programs inside the sandbox may use a server, a host or a secret.
//! - [`decision`]: the verdicts and reason codes everything returns.
//! - [`ecosystems`]: the package ecosystems `fenzi init` recognises and their registries' hosts.
//!
//! No sockets, no async, no file I/O: callers pass text in and get decisions out.

pub mod args;
pub mod audit;
pub mod cases;
pub mod cidr;
pub mod config;
pub mod decision;
pub mod ecosystems;
pub mod engine;
pub mod host;
pub mod ip;
pub mod json;
pub mod json_text;
pub mod mcp;
pub mod pins;
pub mod programs;
pub mod response;
pub mod secret_name;
pub mod secret_position;
pub mod secret_use;
pub mod server_name;
pub mod team;
pub mod tool_pattern;
mod untrusted_text;
pub mod uri_pattern;

pub use decision::{Decision, Reason, ToolDenial, Verdict};
