//! The MCP JSON-RPC classifier (DESIGN.md §3): from an HTTP request to an MCP server's host:port to one
//! decision per JSON-RPC message and one overall decision.

use crate::decision::Decision;
use crate::tool_pattern::ToolPattern;

/// Which request paths are the server's MCP endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointPath {
    /// A remote server's own path (`/mcp`).
    Exact(String),
    /// Account connectors: every path under this prefix (`/v1/mcp/`).
    Prefix(String),
}

/// Size and depth limits for inspected bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonLimits {
    pub max_bytes: usize,
    pub max_depth: usize,
}

impl Default for JsonLimits {
    fn default() -> Self {
        JsonLimits {
            max_bytes: 4 * 1024 * 1024,
            max_depth: 64,
        }
    }
}

/// What the classifier needs to know about one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerRule {
    pub name: String,
    pub endpoint: EndpointPath,
    pub allow: Vec<ToolPattern>,
    pub deny: Vec<ToolPattern>,
    pub limits: JsonLimits,
}

/// An HTTP request as the classifier sees it. `path` is the origin-form request target (path and query).
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub headers: &'a [(&'a str, &'a [u8])],
    pub body: &'a [u8],
}

/// A JSON-RPC id as it appeared (numbers kept as their JSON text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RpcId {
    Number(String),
    String(String),
    Null,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    Request,
    Notification,
    Response,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageDecision {
    pub decision: Decision,
    pub kind: Option<MessageKind>,
    pub rpc_method: Option<String>,
    pub tool: Option<String>,
    pub rpc_id: Option<RpcId>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpDecision {
    pub overall: Decision,
    /// One per JSON-RPC message (empty for GET/DELETE/metadata requests and unparseable bodies).
    pub messages: Vec<MessageDecision>,
    pub batch: bool,
}

pub fn classify(_server: &ServerRule, _req: &RequestView<'_>) -> McpDecision {
    todo!("classifier helper")
}
