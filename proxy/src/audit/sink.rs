//! Where the proxy's decisions go. [`AuditSink`] is what the proxy calls, once per decision and before
//! anything is forwarded; the [`AuditWriter`] is the production sink (tests may pass a failing one to
//! check that the proxy fails closed). [`Subject`] turns a decision about one connection or request into
//! its [`AuditEntry`], so every call site writes the same fields. What a record may name of a
//! client's authority text is [`crate::request::authority::logged_authority`]'s to say.

use crate::audit::writer::{AuditEntry, AuditWriter, Staged};
use crate::connection::body::BoxFuture;
use crate::error::ProxyError;
use fenzi_policy::Decision;
use fenzi_policy::audit::Outcome;
use fenzi_policy::mcp::{MessageDecision, RpcId};
use fenzi_policy::response::Filtered;
use std::net::SocketAddr;
use std::sync::Arc;

/// Something that durably records audit entries. `record` must have written the entry when it returns
/// `Ok`; an `Err` makes the proxy deny the request with `audit_unavailable`. It is called on the
/// connection's own thread and must not wait on anything slow: the production writer does one
/// write(2) (see [`crate::audit::writer`] for why inline, and why not a future: a boxed future per
/// record cost an allocation and moves of the entry for a call that never waits).
pub trait AuditSink: Send + Sync + 'static {
    fn record(&self, entry: AuditEntry) -> Result<u64, String>;
    /// Stages an entry to be written together with others staged before the first of them is
    /// written ([`StagedRecord::write`]): records of requests decided in the same turn of a
    /// shard's loop then cost one write(2) between them. A sink that cannot batch writes the entry
    /// now, as `record` does.
    fn stage(&self, entry: AuditEntry) -> Result<StagedRecord, String> {
        self.record(entry).map(StagedRecord::Written)
    }
    /// Makes everything recorded so far durable (called at shutdown).
    fn flush(&self) -> BoxFuture<'_, Result<(), String>>;
}

/// A record [`AuditSink::stage`] accepted: already written, or waiting in a batch.
#[derive(Debug)]
pub enum StagedRecord {
    Written(u64),
    Pending(Staged),
}

impl StagedRecord {
    /// The record's seq once it is in the log (writing its batch if no other record has); on `Err`
    /// its request must be denied, as for [`AuditSink::record`].
    pub fn write(self) -> Result<u64, String> {
        match self {
            StagedRecord::Written(seq) => Ok(seq),
            StagedRecord::Pending(staged) => staged.write().map_err(|e| e.to_string()),
        }
    }
}

impl AuditSink for AuditWriter {
    fn record(&self, entry: AuditEntry) -> Result<u64, String> {
        AuditWriter::append(self, entry).map_err(|e| e.to_string())
    }

    fn stage(&self, entry: AuditEntry) -> Result<StagedRecord, String> {
        AuditWriter::stage(self, entry)
            .map(StagedRecord::Pending)
            .map_err(|e| e.to_string())
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { AuditWriter::flush(self).await.map_err(|e| e.to_string()) })
    }
}

/// What a decision is about: one CONNECT, one plain-HTTP request or one request inside a tunnel.
/// `path` never carries the query string, which may hold credentials. `client` is the peer address
/// of the connection it came on: every record about a request or connection names it.
#[derive(Debug, Clone)]
pub(crate) struct Subject {
    pub client: SocketAddr,
    pub method: String,
    pub host: String,
    pub port: u16,
    pub path: Option<String>,
    pub server: Option<String>,
    /// The hash of the policy deciding about it (`None`: the one in force when recorded).
    pub policy: Option<Arc<str>>,
    /// The program of the connection it came on (DESIGN §17).
    pub program: crate::attribution::Attributed,
    /// `stdio` for a local server behind its bridge (DESIGN §18).
    pub transport: Option<&'static str>,
}

impl Subject {
    /// A subject on no known MCP server, from the connection of `client`.
    pub fn new(
        client: SocketAddr,
        method: &str,
        host: String,
        port: u16,
        path: Option<&str>,
    ) -> Subject {
        Subject {
            client,
            method: method.to_string(),
            host,
            port,
            path: path.map(str::to_string),
            server: None,
            policy: None,
            program: Default::default(),
            transport: None,
        }
    }

    /// This subject, about a connection attributed to `program`.
    pub fn by(mut self, program: &crate::attribution::Attributed) -> Subject {
        self.program = program.clone();
        self
    }

    /// This subject, decided under the policy whose hash is `policy`.
    pub fn under(mut self, policy: &Arc<str>) -> Subject {
        self.policy = Some(policy.clone());
        self
    }

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
            hidden: None,
            confirm: None,
            policy: self.policy.clone(),
            client: Some(self.client),
            prompt: None,
            resource: None,
            program: self.program.record(),
            transport: self.transport,
            local_server: None,
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
        let mut entry = self.entry(Outcome::Failed, Some(error.reason()), error.record_detail());
        entry.source = Some(error.source_kind().label().to_string());
        entry
    }

    /// The `filtered` entry for a list result of `server` that reached the client with entries
    /// hidden: which list, for which response id, how many, and `tool_changed` when pins hid some.
    pub fn filtered(&self, server: &str, filtered: &Filtered) -> AuditEntry {
        let changed = filtered.changed > 0;
        let rule = if changed {
            format!("mcp.{server} pin")
        } else {
            format!("mcp.{server} list filter")
        };
        let mut entry = self.entry(
            Outcome::Filtered,
            changed.then_some(fenzi_policy::Reason::ToolChanged),
            Some(rule),
        );
        entry.rpc = Some(list_method(filtered.list).to_string());
        entry.rpc_id = filtered.rpc_id.as_ref().map(rpc_id_text);
        entry.hidden = Some(filtered.hidden as u64);
        entry
    }

    /// The `failed` entry for an answer from an MCP server that could not be read: the record's
    /// rule says why (the error names no content).
    pub fn unreadable(&self, error: &ProxyError) -> AuditEntry {
        let mut entry = self.failed(error);
        entry.rule = Some(format!("strict response: {error}"));
        entry
    }

    /// The entry for one JSON-RPC message of a request whose overall decision is `overall`. A message
    /// that was fine on its own but sits in a denied batch is recorded as denied: it was not forwarded.
    pub fn message(&self, message: &MessageDecision, overall: &Decision) -> AuditEntry {
        let mut entry = self.decided(recorded_decision(message, overall));
        entry.rpc = message.rpc_method.clone();
        entry.tool = message.tool.clone();
        entry.prompt = message.prompt.clone();
        // As for `path`: a query may hold credentials.
        entry.resource = message
            .resource
            .as_deref()
            .map(|uri| uri.split(['?', '#']).next().unwrap_or_default().to_string());
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

/// The method a list of this name answers, for the record.
fn list_method(list: &str) -> &'static str {
    match list {
        "tools" => "tools/list",
        "prompts" => "prompts/list",
        "resources" => "resources/list",
        _ => "resources/templates/list",
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
    use fenzi_policy::mcp::MessageKind;

    /// A message's record names its client and what it names: a prompt as sent, a resource URI
    /// without the query or fragment (which may hold credentials, as a path's query may).
    #[test]
    fn a_message_record_names_its_client_prompt_and_resource() {
        let client: SocketAddr = "[::1]:40999".parse().unwrap();
        let subject = Subject::new(client, "POST", "mcp.test".into(), 443, Some("/mcp"));
        let allowed = Decision::allow("r", "ok");
        let message =
            |method: &str, prompt: Option<&str>, resource: Option<&str>| MessageDecision {
                decision: allowed.clone(),
                kind: Some(MessageKind::Request),
                rpc_method: Some(method.into()),
                tool: None,
                prompt: prompt.map(Into::into),
                resource: resource.map(Into::into),
                rpc_id: Some(RpcId::Number("1".into())),
            };
        let prompt = subject.message(&message("prompts/get", Some("review"), None), &allowed);
        assert_eq!(prompt.client, Some(client));
        assert_eq!(prompt.prompt.as_deref(), Some("review"));
        assert_eq!(prompt.resource, None);
        for (uri, logged) in [
            ("file:///repo/README.md", "file:///repo/README.md"),
            (
                "https://api.test/doc?token=s3cret#top",
                "https://api.test/doc",
            ),
            ("db://t#frag?x", "db://t"),
        ] {
            let read = subject.message(&message("resources/read", None, Some(uri)), &allowed);
            assert_eq!(read.resource.as_deref(), Some(logged), "{uri}");
        }
    }
}
