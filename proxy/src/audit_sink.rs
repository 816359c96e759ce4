//! Where the proxy's decisions go. [`AuditSink`] is what the proxy calls, once per decision and before
//! anything is forwarded; the [`AuditWriter`] is the production sink (tests may pass a failing one to
//! check that the proxy fails closed). [`Subject`] turns a decision about one connection or request into
//! its [`AuditEntry`], so every call site writes the same fields.

use crate::audit_writer::{AuditEntry, AuditWriter};
use crate::error::ProxyError;
use fenzi_policy::Decision;
use fenzi_policy::audit::Outcome;
use fenzi_policy::host::split_authority;
use fenzi_policy::mcp::{MessageDecision, RpcId};
use std::future::Future;
use std::pin::Pin;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Something that durably records audit entries. `record` must have written the entry when it returns
/// `Ok`; an `Err` makes the proxy deny the request with `audit_unavailable`.
pub trait AuditSink: Send + Sync + 'static {
    fn record(&self, entry: AuditEntry) -> BoxFuture<'_, Result<u64, String>>;
    /// Makes everything recorded so far durable (called at shutdown).
    fn flush(&self) -> BoxFuture<'_, Result<(), String>>;
}

impl AuditSink for AuditWriter {
    fn record(&self, entry: AuditEntry) -> BoxFuture<'_, Result<u64, String>> {
        Box::pin(async move {
            AuditWriter::record(self, entry)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { AuditWriter::flush(self).await.map_err(|e| e.to_string()) })
    }
}

/// The host an audit record names for a request target that does not parse as `host[:port]`: the
/// client's text is not copied into the log.
pub(crate) const INVALID_TARGET: &str = "<invalid target>";

/// The host and port an audit record may name for a client's `authority` (`host[:port]`, perhaps with
/// userinfo): the canonical host and port (`default_port` when none is given) of what follows the last
/// `@` when that parses, else [`INVALID_TARGET`] and 0. Userinfo and unparsed text, which may be
/// credentials, never reach the log.
pub(crate) fn logged_authority(authority: &str, default_port: u16) -> (String, u16) {
    let after_userinfo = authority.rsplit('@').next().unwrap_or_default();
    match split_authority(after_userinfo) {
        Ok((host, port)) => (host.to_string(), port.unwrap_or(default_port)),
        Err(_) => (INVALID_TARGET.to_string(), 0),
    }
}

/// What a decision is about: one CONNECT, one plain-HTTP request or one request inside a tunnel.
/// `path` never carries the query string, which may hold credentials.
#[derive(Debug, Clone)]
pub(crate) struct Subject {
    pub method: String,
    pub host: String,
    pub port: u16,
    pub path: Option<String>,
    pub server: Option<String>,
}

impl Subject {
    fn entry(
        &self,
        outcome: Outcome,
        reason: Option<fenzi_policy::Reason>,
        rule: Option<String>,
    ) -> AuditEntry {
        AuditEntry {
            outcome,
            reason,
            method: self.method.clone(),
            host: self.host.clone(),
            port: self.port,
            path: self.path.clone(),
            server: self.server.clone(),
            rpc: None,
            tool: None,
            rpc_id: None,
            secrets: Vec::new(),
            rule,
            source: None,
        }
    }

    /// The entry for a decision (allowed or denied).
    pub fn decided(&self, decision: &Decision) -> AuditEntry {
        let outcome = if decision.is_allowed() {
            Outcome::Allowed
        } else {
            Outcome::Denied
        };
        self.entry(outcome, decision.reason(), Some(decision.rule.clone()))
    }

    /// The `failed` entry for an error after (or instead of) an allowed decision.
    pub fn failed(&self, error: &ProxyError) -> AuditEntry {
        let mut entry = self.entry(Outcome::Failed, Some(error.reason()), None);
        entry.source = Some(error.source_kind().label().to_string());
        entry
    }

    /// The entry for one JSON-RPC message of a request whose overall decision is `overall`. A message
    /// that was fine on its own but sits in a denied batch is recorded as denied: it was not forwarded.
    pub fn message(&self, message: &MessageDecision, overall: &Decision) -> AuditEntry {
        let mut entry = self.decided(recorded_decision(message, overall));
        entry.rpc = message.rpc_method.clone();
        entry.tool = message.tool.clone();
        entry.rpc_id = message.rpc_id.as_ref().map(rpc_id_text);
        entry
    }
}

/// The decision recorded for one JSON-RPC message of a request decided `overall`: the message's own,
/// unless it was fine on its own but the request as a whole was refused, which it then shares.
pub(crate) fn recorded_decision<'a>(
    message: &'a MessageDecision,
    overall: &'a Decision,
) -> &'a Decision {
    if overall.is_allowed() || !message.decision.is_allowed() {
        &message.decision
    } else {
        overall
    }
}

/// A JSON-RPC id as the log shows it: numbers as their JSON text, strings as they are.
fn rpc_id_text(id: &RpcId) -> String {
    match id {
        RpcId::Number(n) => n.clone(),
        RpcId::String(s) => s.clone(),
        RpcId::Null => "null".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logged_authorities_carry_no_userinfo_and_no_unparsed_text() {
        let logged = |text| logged_authority(text, 443);
        assert_eq!(logged("MCP.test:8443"), ("mcp.test".to_string(), 8443));
        assert_eq!(logged("mcp.test"), ("mcp.test".to_string(), 443));
        assert_eq!(
            logged("agent:hunter2@mcp.test:443"),
            ("mcp.test".to_string(), 443)
        );
        assert_eq!(logged("a@b:c@mcp.test"), ("mcp.test".to_string(), 443));
        for bad in [
            "",
            "a..b:443",
            "mcp.test:99999",
            "mcp.test:",
            "hunter2@",
            "mcp.test:443@hunter2 x",
            "[::1",
        ] {
            assert_eq!(logged(bad), (INVALID_TARGET.to_string(), 0), "{bad:?}");
        }
    }
}
