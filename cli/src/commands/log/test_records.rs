//! Audit records for the unit tests of `fenzi log`: a plain record, an MCP tool call, and a log of
//! chained records with its head file.

use fenzi_policy::audit::{
    AuditRecord, GENESIS, Head, Outcome, format_timestamp, line_hash, to_line,
};

/// A record of `method` to `host:port`, at 13:33:50 UTC on 2026-11-29, first in its log.
pub(super) fn rec(decision: Outcome, method: &str, host: &str, port: u16) -> AuditRecord {
    AuditRecord {
        program: None,
        ts: "2026-11-29T13:33:50.123Z".into(),
        seq: 1,
        session: "a1b2c3".into(),
        decision,
        reason: None,
        method: method.into(),
        host: host.into(),
        port,
        path: None,
        server: None,
        rpc: None,
        tool: None,
        rpc_id: None,
        secrets: vec![],
        rule: None,
        source: None,
        hidden: None,
        confirm: None,
        policy: None,
        client: None,
        prompt: None,
        resource: None,
        transport: None,
        local_server: None,
        prev: GENESIS.into(),
    }
}

/// A `tools/call` of `tool` on the `deepwiki` server.
pub(super) fn mcp(decision: Outcome, tool: &str, reason: Option<&str>) -> AuditRecord {
    AuditRecord {
        path: Some("/mcp".into()),
        server: Some("deepwiki".into()),
        rpc: Some("tools/call".into()),
        tool: Some(tool.into()),
        reason: reason.map(Into::into),
        ..rec(decision, "POST", "mcp.deepwiki.com", 443)
    }
}

/// `record` as a connection of `holders` (`(exe, pid, agent)`) made it (DESIGN §17).
pub(super) fn by(record: AuditRecord, holders: &[(&str, u32, bool)]) -> AuditRecord {
    let holders = holders
        .iter()
        .map(|(exe, pid, agent)| fenzi_policy::audit::Holder {
            exe: exe.to_string(),
            sha256: "ab".repeat(32),
            pid: *pid,
            agent: *agent,
        })
        .collect();
    AuditRecord {
        program: fenzi_policy::audit::ProgramRecord::new(holders),
        ..record
    }
}

/// A log of `n` chained tool calls, one millisecond apart, and the text of its head file.
pub(super) fn chain(n: u64) -> (Vec<u8>, String) {
    let mut prev = GENESIS.to_string();
    let mut log = Vec::new();
    for seq in 1..=n {
        let r = AuditRecord {
            seq,
            ts: format_timestamp(1_796_045_628_123 + seq as i64),
            transport: None,
            local_server: None,
            prev: prev.clone(),
            ..mcp(Outcome::Allowed, "echo", None)
        };
        let line = to_line(&r);
        prev = line_hash(line.as_bytes());
        log.extend_from_slice(line.as_bytes());
        log.push(b'\n');
    }
    (log, Head { seq: n, hash: prev }.to_text())
}
