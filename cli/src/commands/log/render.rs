//! A record as one line for a person: `[date ]HH:MM:SS decision METHOD target [rpc [tool]] [by
//! PROGRAM]  [reason]` (under `fenzi run`, the program when it is not the agent alone: the
//! executable's path, `agent` when the agent shared the socket, `+N` when N more processes held it),
//! the decision coloured on a terminal, and every field taken from the record quoted and escaped
//! when it is not plain ASCII, so a hostile host, path or tool name cannot forge or hide text. A
//! tool call the tool rules denied gets a second, indented line: its [`hint`].

use fenzi_policy::audit::{self, AuditRecord, Outcome};

const GREEN: &str = "\x1b[32m";
const RED: &str = "\x1b[31m";
const YELLOW: &str = "\x1b[33m";
const RESET: &str = "\x1b[0m";

/// A field as shown: plain printable ASCII as is; anything else in double quotes, with `"` and `\`
/// backslash-escaped and control or invisible characters as `\u{..}`. So a space, a look-alike letter or
/// a hidden character always shows.
pub fn field(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\');
    if plain {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if audit::needs_escape(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One record as a line: `[date ]HH:MM:SS decision METHOD target [rpc [tool]]  [reason]`.
pub fn render(r: &AuditRecord, show_date: bool, colour: bool) -> String {
    let mut line = String::new();
    match (
        audit::parse_timestamp(&r.ts),
        r.ts.get(0..10),
        r.ts.get(11..19),
    ) {
        (Some(_), Some(date), Some(time)) => {
            if show_date {
                line.push_str(date);
                line.push(' ');
            }
            line.push_str(time);
        }
        _ => line.push_str(&field(&r.ts)),
    }
    line.push(' ');
    let (label, tint) = match r.decision {
        Outcome::Allowed => ("allowed", GREEN),
        Outcome::Denied => ("denied", RED),
        Outcome::Failed => ("failed", YELLOW),
        Outcome::Filtered => ("filtered", YELLOW),
        Outcome::Held => ("held", YELLOW),
        Outcome::Reloaded => ("reloaded", GREEN),
        Outcome::ReloadRefused => ("reload_refused", RED),
    };
    if colour {
        line.push_str(tint);
        line.push_str(label);
        line.push_str(RESET);
    } else {
        line.push_str(label);
    }
    line.push_str(&" ".repeat(8usize.saturating_sub(label.len()).max(1)));
    if matches!(r.decision, Outcome::Reloaded | Outcome::ReloadRefused) {
        policy_change(&mut line, r);
        return line;
    }
    line.push_str(&field(&r.method));
    line.push(' ');
    line.push_str(&target(r));
    if let Some(rpc) = &r.rpc {
        line.push(' ');
        line.push_str(&field(rpc));
    }
    // The one thing a JSON-RPC message names: its tool, prompt or resource.
    if let Some(named) = r
        .tool
        .as_ref()
        .or(r.prompt.as_ref())
        .or(r.resource.as_ref())
    {
        line.push(' ');
        line.push_str(&field(named));
    }
    // DESIGN §17: who made the connection (`fenzi run` only), when it is not the agent alone:
    // the agent's own traffic reads as it always did, anyone else's stands out.
    if let Some(program) = &r.program
        && (!program.0.agent || !program.0.holders.is_empty())
    {
        line.push_str(" by ");
        if program.0.agent {
            line.push_str("agent");
        } else {
            line.push_str(&field(&program.0.exe));
        }
        if program.0.holders.len() > 1 {
            line.push_str(&format!("+{}", program.0.holders.len() - 1));
        }
    }
    // DESIGN §18: a local server's own requests out, made in its sandbox, not the agent's.
    if let Some(server) = &r.local_server {
        line.push_str(" by local server ");
        line.push_str(&field(server));
    }
    if !r.secrets.is_empty() {
        let names: Vec<String> = r.secrets.iter().map(|s| field(s)).collect();
        line.push_str(" secrets:");
        line.push_str(&names.join(","));
    }
    if let Some(hidden) = r.hidden {
        line.push_str(&format!(" hidden:{hidden}"));
    }
    // A held call's wait, or who answered it.
    if let Some(confirm) = &r.confirm {
        line.push_str(" confirm: ");
        line.push_str(&field(confirm));
    }
    // A filtered answer that hid nothing pinned has no reason to show (`-` would read as one).
    if matches!(r.decision, Outcome::Denied | Outcome::Failed) || r.reason.is_some() {
        line.push_str("  ");
        line.push_str(&r.reason.as_deref().map_or("-".to_string(), field));
        if let Some(source) = &r.source {
            line.push_str(" (");
            line.push_str(&field(source));
            line.push(')');
        }
        // A failure's rule says what failed (a client's TLS alert, why an answer was unreadable).
        if r.decision == Outcome::Failed
            && let Some(rule) = &r.rule
        {
            line.push_str(": ");
            line.push_str(&field(rule));
        }
    }
    // A sign-in record's rule is what happened (signed in, renewed, signed out: `fenzi mcp login`).
    if r.method == "OAUTH"
        && r.decision == Outcome::Allowed
        && let Some(rule) = &r.rule
    {
        line.push_str("  ");
        line.push_str(&field(rule));
    }
    line
}

/// What a person can do about a `tools/call` the tool rules denied: the `fenzi approve` line (or
/// why approve will not help), shown indented under the record's line; the same text as the
/// denial's JSON-RPC `data.hint` ([`fenzi_policy::mcp::teach`]). A record keeps only the rule's
/// text, so which tool rule it was is read back from that text
/// ([`fenzi_policy::mcp::teach::recorded_tool_denial`]). `None` for every other record, and for a
/// rule that names another server than the record.
pub fn hint(r: &AuditRecord) -> Option<String> {
    use fenzi_policy::mcp::teach::{recorded_tool_denial, tool_hint};
    if r.decision != Outcome::Denied
        || r.reason.as_deref() != Some("policy_denied")
        || r.rpc.as_deref() != Some(fenzi_policy::mcp::TOOLS_CALL)
    {
        return None;
    }
    let (rule, tool, server) = (r.rule.as_deref()?, r.tool.as_deref()?, r.server.as_deref()?);
    let denial = recorded_tool_denial(rule)?;
    if denial.server() != server {
        return None;
    }
    // The hint holds only policy names and a plain tool name; escape anyway, as for every field.
    let text = tool_hint(&denial, rule, tool)?;
    Some(
        text.chars()
            .map(|c| {
                if audit::needs_escape(c) {
                    format!("\\u{{{:x}}}", c as u32)
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

/// The rest of a `policy` record's line: `policy HASH12 FILES: what changed, or why not`.
fn policy_change(line: &mut String, r: &AuditRecord) {
    line.push_str("policy");
    if let Some(hash) = &r.policy {
        line.push(' ');
        line.push_str(&field(hash.get(..12).unwrap_or(hash)));
    }
    if let Some(files) = &r.path {
        line.push(' ');
        line.push_str(&field(files));
    }
    if let Some(rule) = &r.rule {
        // fenzi's own sentence (it may quote the policy file): shown unquoted, anything invisible
        // escaped.
        line.push_str(": ");
        for c in rule.chars() {
            match c {
                c if audit::needs_escape(c) => line.push_str(&format!("\\u{{{:x}}}", c as u32)),
                c => line.push(c),
            }
        }
    }
}

/// `host:port` for a CONNECT; otherwise host, `:port` unless 443, and the path.
fn target(r: &AuditRecord) -> String {
    let host = if r.host.contains(':') && !r.host.starts_with('[') {
        format!("[{}]", r.host)
    } else {
        r.host.clone()
    };
    let mut t = host;
    if r.method == "CONNECT" || r.port != 443 {
        t.push_str(&format!(":{}", r.port));
    }
    if r.method != "CONNECT"
        && let Some(p) = &r.path
    {
        t.push_str(p);
    }
    field(&t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::log::test_records::{by, mcp, rec};

    /// A local server's own request out names the server.
    #[test]
    fn renders_a_local_servers_own_requests() {
        let mut egress = rec(Outcome::Allowed, "GET", "api.notes.example", 443);
        egress.local_server = Some("notes".into());
        egress.secrets = vec!["NOTES_TOKEN".into()];
        let line = render(&egress, false, false);
        assert!(
            line.contains(" by local server notes secrets:NOTES_TOKEN"),
            "{line}"
        );
        let agent = mcp(Outcome::Allowed, "echo", None);
        assert!(!render(&agent, false, false).contains("local server"));
    }

    /// The program shows where the agent did not make the connection alone.
    #[test]
    fn renders_the_program_unless_it_is_the_agent_alone() {
        let agent = by(
            mcp(Outcome::Allowed, "echo", None),
            &[("/usr/bin/node", 2, true)],
        );
        assert!(!render(&agent, false, false).contains(" by "));
        let curl = by(
            mcp(Outcome::Denied, "echo", Some("program_not_allowed")),
            &[("/usr/bin/curl", 7, false)],
        );
        assert_eq!(
            render(&curl, false, false),
            "13:33:50 denied  POST mcp.deepwiki.com/mcp tools/call echo by /usr/bin/curl  \
             program_not_allowed"
        );
        let shared = by(
            rec(Outcome::Denied, "CONNECT", "h.example", 443),
            &[("/usr/bin/node", 2, true), ("/usr/bin/node", 9, false)],
        );
        assert!(render(&shared, false, false).contains(" by agent+1 "));
        let odd = by(
            rec(Outcome::Allowed, "CONNECT", "h.example", 443),
            &[("/tmp/a b", 3, false)],
        );
        assert!(render(&odd, false, false).contains(r#" by "/tmp/a b""#));
    }

    #[test]
    fn renders_policy_records() {
        let hash = "ab".repeat(32);
        let reloaded = AuditRecord {
            path: Some("fenzi.yaml".into()),
            rule: Some("mcp.echo tool rules".into()),
            policy: Some(hash.clone()),
            ..rec(Outcome::Reloaded, "POLICY", "", 0)
        };
        assert_eq!(
            render(&reloaded, false, false),
            "13:33:50 reloaded policy abababababab fenzi.yaml: mcp.echo tool rules"
        );
        let refused = AuditRecord {
            rule: Some("fenzi.yaml:3:1: bad indentation".into()),
            ..AuditRecord {
                decision: Outcome::ReloadRefused,
                ..reloaded
            }
        };
        let hidden = AuditRecord {
            rule: Some("bad\u{202e}txt\n".into()),
            ..refused.clone()
        };
        assert!(render(&hidden, false, false).ends_with(": bad\\u{202e}txt\\u{a}"));
        assert_eq!(
            render(&refused, false, false),
            "13:33:50 reload_refused policy abababababab fenzi.yaml: fenzi.yaml:3:1: bad indentation"
        );
    }

    #[test]
    fn a_prompt_or_resource_is_named_like_a_tool() {
        let prompt = AuditRecord {
            rpc: Some("prompts/get".into()),
            tool: None,
            prompt: Some("review".into()),
            ..mcp(Outcome::Allowed, "-", None)
        };
        assert_eq!(
            render(&prompt, false, false),
            "13:33:50 allowed POST mcp.deepwiki.com/mcp prompts/get review"
        );
        let resource = AuditRecord {
            rpc: Some("resources/read".into()),
            prompt: None,
            resource: Some("file:///etc/shadow".into()),
            ..prompt
        };
        assert_eq!(
            render(&resource, false, false),
            "13:33:50 allowed POST mcp.deepwiki.com/mcp resources/read file:///etc/shadow"
        );
    }

    #[test]
    fn renders_the_design_examples() {
        assert_eq!(
            render(
                &mcp(Outcome::Allowed, "read_wiki_structure", None),
                false,
                false
            ),
            "13:33:50 allowed POST mcp.deepwiki.com/mcp tools/call read_wiki_structure"
        );
        assert_eq!(
            render(
                &mcp(Outcome::Denied, "read_wiki_contents", Some("policy_denied")),
                false,
                false
            ),
            "13:33:50 denied  POST mcp.deepwiki.com/mcp tools/call read_wiki_contents  policy_denied"
        );
        assert_eq!(
            render(
                &rec(Outcome::Allowed, "CONNECT", "github.com", 443),
                false,
                false
            ),
            "13:33:50 allowed CONNECT github.com:443"
        );
        let plain = AuditRecord {
            path: Some("/path?q=1".into()),
            ..rec(Outcome::Allowed, "GET", "example.com", 80)
        };
        assert_eq!(
            render(&plain, false, false),
            "13:33:50 allowed GET example.com:80/path?q=1"
        );
        let denied_host = AuditRecord {
            reason: Some("host_not_allowed".into()),
            ..rec(Outcome::Denied, "CONNECT", "evil.example", 443)
        };
        assert_eq!(
            render(&denied_host, true, false),
            "2026-11-29 13:33:50 denied  CONNECT evil.example:443  host_not_allowed"
        );
        let failed = AuditRecord {
            source: Some("upstream".into()),
            ..mcp(Outcome::Failed, "echo", Some("upstream_error"))
        };
        assert_eq!(
            render(&failed, false, false),
            "13:33:50 failed  POST mcp.deepwiki.com/mcp tools/call echo  upstream_error (upstream)"
        );
        let tls = AuditRecord {
            reason: Some("bad_request".into()),
            source: Some("client".into()),
            rule: Some("client TLS handshake: received fatal alert: UnknownCA".into()),
            ..rec(Outcome::Failed, "CONNECT", "127.0.0.1", 8443)
        };
        assert_eq!(
            render(&tls, false, false),
            "13:33:50 failed  CONNECT 127.0.0.1:8443  bad_request (client): \"client TLS handshake: received fatal alert: UnknownCA\""
        );
        let v6 = rec(Outcome::Allowed, "CONNECT", "::1", 8443);
        assert_eq!(
            render(&v6, false, false),
            "13:33:50 allowed CONNECT [::1]:8443"
        );
        let with_secret = AuditRecord {
            secrets: vec!["MCP_LINEAR".into()],
            ..mcp(Outcome::Allowed, "list_issues", None)
        };
        assert!(render(&with_secret, false, false).ends_with("list_issues secrets:MCP_LINEAR"));
    }

    #[test]
    fn a_tool_denial_teaches_on_a_second_line() {
        let denied = |tool: &str, rule: &str| AuditRecord {
            rule: Some(rule.into()),
            ..mcp(Outcome::Denied, tool, Some("policy_denied"))
        };
        assert_eq!(
            hint(&denied("read_wiki_contents", "mcp.deepwiki default deny")).as_deref(),
            Some("fenzi approve --yes deepwiki/read_wiki_contents")
        );
        assert_eq!(
            hint(&denied("drop", "mcp.deepwiki.tools.deny \"dr*\"")).as_deref(),
            Some(
                "denied by the policy's deny list (mcp.deepwiki.tools.deny \"dr*\"); fenzi \
                 approve does not undo a deny"
            )
        );
        // Not a plain name, another server's rule, an argument rule, not denied: no hint.
        assert_eq!(hint(&denied("a b", "mcp.deepwiki default deny")), None);
        assert_eq!(hint(&denied("x", "mcp.other default deny")), None);
        assert_eq!(
            hint(&denied("x", "mcp.deepwiki.tools.rules[0].args./q")),
            None
        );
        let allowed = AuditRecord {
            rule: Some("mcp.deepwiki default deny".into()),
            ..mcp(Outcome::Allowed, "x", None)
        };
        assert_eq!(hint(&allowed), None);
        let limited = AuditRecord {
            rule: Some("mcp.deepwiki default deny".into()),
            ..mcp(Outcome::Denied, "x", Some("rate_limited"))
        };
        assert_eq!(hint(&limited), None);
    }

    #[test]
    fn colour_wraps_only_the_decision_word() {
        let line = render(
            &mcp(Outcome::Denied, "x", Some("policy_denied")),
            false,
            true,
        );
        assert!(
            line.starts_with("13:33:50 \x1b[31mdenied\x1b[0m  POST "),
            "{line:?}"
        );
        let line = render(&mcp(Outcome::Allowed, "x", None), false, true);
        assert!(line.contains("\x1b[32mallowed\x1b[0m POST"), "{line:?}");
        let line = render(
            &mcp(Outcome::Failed, "x", Some("upstream_error")),
            false,
            true,
        );
        assert!(line.contains("\x1b[33mfailed\x1b[0m  POST"), "{line:?}");
        assert!(!render(&mcp(Outcome::Denied, "x", None), false, false).contains('\x1b'));
    }

    #[test]
    fn hostile_fields_cannot_forge_or_hide_text() {
        let r = mcp(
            Outcome::Denied,
            "x\n13:33:51 allowed \u{1b}[32m\u{202e}\u{200b}",
            Some("policy_denied"),
        );
        let line = render(&r, false, false);
        assert!(!line.contains('\n') && !line.contains('\u{1b}'), "{line:?}");
        assert!(!line.chars().any(audit::needs_escape), "{line:?}");
        assert!(
            line.contains(r#""x\u{a}13:33:51 allowed \u{1b}[32m\u{202e}\u{200b}""#),
            "{line}"
        );
        // Look-alike letters and spaces are quoted, so `еcho` (Cyrillic е) stands out from `echo`.
        assert_eq!(field("\u{435}cho"), "\"\u{435}cho\"");
        assert_eq!(field("echo"), "echo");
        assert_eq!(field("a b"), "\"a b\"");
        assert_eq!(field(r#"q"\"#), r#""q\"\\""#);
        assert_eq!(field(""), "\"\"");
        let path = AuditRecord {
            path: Some("/a\u{85}b".into()),
            ..rec(Outcome::Allowed, "GET", "example.com", 80)
        };
        assert!(render(&path, false, false).ends_with(r#""example.com:80/a\u{85}b""#));
    }
}
