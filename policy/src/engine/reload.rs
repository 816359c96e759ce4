//! What a running session may take from a policy loaded while it runs (README, "Reloading the
//! policy"): [`compare`] says whether a newly compiled [`Policy`] differs from the one in force, and
//! whether every difference lies in the part that may change live. [`Policy::sha256`] names a policy
//! in the audit log.
//!
//! The live part is each existing MCP server's tool rules: everything in its [`ServerRule`] (allow,
//! deny, allow_annotated, argument rules, resources, prompts, list filtering, and whatever field is
//! added there later) and its `limits`, except what identifies the server (its name and endpoint,
//! which follow its url) and `pin` (the session's inventories and lock files are set up from it).
//! Everything else — hosts, the set and order of servers, their urls, tokens and origins, secrets,
//! private ranges, body limits, and any field added to [`Policy`] or [`McpServer`] later — waits for
//! the next session. The rule is written as "take the live part from the policy in force and
//! compare the rest whole", so a new field is on the safe side (next session) unless it is added
//! to the server's rule.
//!
//! [`ServerRule`]: crate::mcp::ServerRule

use super::{McpServer, Policy};
use sha2::{Digest, Sha256};

/// What a newly loaded policy changes, compared with the one in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Nothing that is enforced differs (a comment, a reordering that compiles to the same policy,
    /// the same text written again).
    None,
    /// Only the tool rules of these servers (by name) differ: the new policy may replace the old one
    /// now.
    ToolRules(Vec<String>),
    /// Something outside the tool rules differs; what, as keys a person recognises (`hosts`,
    /// `mcp.linear url`). Nothing may change until the next session.
    NextSession(Vec<String>),
}

/// Compares `loaded` with `in_force` (see the module doc for what may change live).
pub fn compare(in_force: &Policy, loaded: &Policy) -> Change {
    if in_force == loaded {
        return Change::None;
    }
    let same_servers = in_force.servers.len() == loaded.servers.len()
        && in_force
            .servers
            .iter()
            .zip(&loaded.servers)
            .all(|(a, b)| a.name == b.name);
    if same_servers {
        let mut projected = loaded.clone();
        for (server, old) in projected.servers.iter_mut().zip(&in_force.servers) {
            adopt_live_part(server, old);
        }
        if projected == *in_force {
            let changed = in_force
                .servers
                .iter()
                .zip(&loaded.servers)
                .filter(|(a, b)| a != b)
                .map(|(_, b)| b.name.clone())
                .collect();
            return Change::ToolRules(changed);
        }
    }
    Change::NextSession(differences(in_force, loaded))
}

/// `server` with the live part of `from` in place of its own; what identifies it, and `pin`, stay.
fn adopt_live_part(server: &mut McpServer, from: &McpServer) {
    let mut rule = from.rule.clone();
    rule.name = std::mem::take(&mut server.rule.name);
    rule.endpoint = server.rule.endpoint.clone();
    rule.pin = server.rule.pin;
    server.rule = rule;
    server.limits = from.limits.clone();
    server.confirm = from.confirm.clone();
}

/// What differs outside the live part, for the "takes effect in the next session" message.
fn differences(in_force: &Policy, loaded: &Policy) -> Vec<String> {
    let mut out = Vec::new();
    if in_force.hosts != loaded.hosts {
        out.push("hosts".to_string());
    }
    let names = |p: &Policy| p.servers.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
    let (old_names, new_names) = (names(in_force), names(loaded));
    for name in new_names.iter().filter(|n| !old_names.contains(n)) {
        out.push(format!("mcp.{name} (a new server)"));
    }
    for name in old_names.iter().filter(|n| !new_names.contains(n)) {
        out.push(format!("mcp.{name} (removed)"));
    }
    let common = |names: &[String], other: &[String]| -> Vec<String> {
        names
            .iter()
            .filter(|n| other.contains(n))
            .cloned()
            .collect()
    };
    if common(&old_names, &new_names) != common(&new_names, &old_names) {
        out.push("the order of the mcp servers".to_string());
    }
    for old in &in_force.servers {
        let Some(new) = loaded.servers.iter().find(|s| s.name == old.name) else {
            continue;
        };
        let name = &old.name;
        if old.pattern != new.pattern
            || old.tls != new.tls
            || old.rule.endpoint != new.rule.endpoint
        {
            out.push(format!("mcp.{name} url"));
        }
        if old.token_secret != new.token_secret {
            out.push(format!("mcp.{name} token"));
        }
        if old.origin != new.origin {
            out.push(format!("mcp.{name} (moved to the other file)"));
        }
        if old.rule.pin != new.rule.pin {
            out.push(format!("mcp.{name} pin"));
        }
    }
    if in_force.secrets != loaded.secrets {
        out.push("secrets".to_string());
    }
    if in_force.private != loaded.private {
        out.push("private ranges".to_string());
    }
    if out.is_empty() {
        // A difference no key above names (a field added later): still not live.
        out.push("settings outside the tool rules".to_string());
    }
    out
}

impl Policy {
    /// The SHA-256 (hex) of this policy: of its canonical rendering, which names everything it
    /// enforces, in order (servers, rules, hosts, secret bindings, ranges, limits). Two loads of
    /// the same files give the same value; a change to what is enforced gives another. The value
    /// identifies a policy within one fenzi version (the rendering follows the compiled form).
    pub fn sha256(&self) -> String {
        hex::encode(Sha256::digest(format!("{self:?}").as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load;

    fn policy(project: &str) -> Policy {
        policy_with(None, project)
    }

    fn policy_with(machine: Option<&str>, project: &str) -> Policy {
        let config = load(
            machine.map(|m| (m, "mcp.yaml")),
            Some((project, "fenzi.yaml")),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        Policy::from_config(&config)
    }

    const BASE: &str = "version: 1
hosts: [github.com]
mcp:
  echo:
    url: https://127.0.0.1:8443/mcp
    tools:
      allow: [echo]
      deny: [drop]
  other:
    url: https://other.example/mcp
    tools:
      allow: [read]
";

    fn edited(from: &str, to: &str) -> Policy {
        assert!(BASE.contains(from), "{from}");
        policy(&BASE.replacen(from, to, 1))
    }

    #[test]
    fn the_same_policy_and_a_comment_are_no_change() {
        let base = policy(BASE);
        assert_eq!(compare(&base, &policy(BASE)), Change::None);
        let commented = format!("{BASE}# a comment at the end\n");
        assert_eq!(compare(&base, &policy(&commented)), Change::None);
        assert_eq!(base.sha256(), policy(BASE).sha256());
        assert_eq!(base.sha256().len(), 64);
    }

    #[test]
    fn tool_rules_change_live_and_name_their_server() {
        let base = policy(BASE);
        let cases = [
            ("allow: [echo]", "allow: [echo, add]"),
            ("deny: [drop]", "deny: []"),
            ("deny: [drop]", "deny: [drop, delete]"),
            (
                "deny: [drop]",
                "deny: [drop]\n      rules:\n        - tool: echo\n          args: {/text: {max_length: 8}}",
            ),
            (
                "deny: [drop]",
                "deny: [drop]\n    resources:\n      allow: [\"file:///docs/*\"]",
            ),
            (
                "deny: [drop]",
                "deny: [drop]\n    prompts:\n      allow: [summarise]",
            ),
            (
                "deny: [drop]",
                "deny: [drop]\n    limits:\n      - tool: echo\n        rate: 5/min",
            ),
            ("deny: [drop]", "deny: [drop]\n    list: all"),
            ("deny: [drop]", "deny: [drop]\n      confirm: [echo]"),
            (
                "deny: [drop]",
                "deny: [drop]\n      confirm: [echo]\n      confirm_timeout: 30s",
            ),
        ];
        for (from, to) in cases {
            let new = edited(from, to);
            assert_eq!(
                compare(&base, &new),
                Change::ToolRules(vec!["echo".into()]),
                "{to}"
            );
            assert_ne!(base.sha256(), new.sha256(), "{to}");
        }
    }

    #[test]
    fn everything_else_waits_for_the_next_session() {
        let base = policy(BASE);
        let cases: [(&str, &str, &str); 6] = [
            (
                "hosts: [github.com]",
                "hosts: [github.com, gitlab.com]",
                "hosts",
            ),
            (
                "url: https://other.example/mcp",
                "url: https://other.example/v2/mcp",
                "mcp.other url",
            ),
            (
                "url: https://other.example/mcp",
                "url: https://other.example/mcp\n    token: true",
                "mcp.other token",
            ),
            (
                "url: https://other.example/mcp",
                "url: https://other.example/mcp\n    pin: true",
                "mcp.other pin",
            ),
            (
                "  other:\n",
                "  third:\n    url: https://third.example/mcp\n    tools:\n      allow: [x]\n  other:\n",
                "mcp.third (a new server)",
            ),
            (
                "hosts: [github.com]",
                "hosts: [github.com]\nsecrets:\n  KEY:\n    hosts: [api.example.com]",
                "secrets",
            ),
        ];
        for (from, to, named) in cases {
            let new = edited(from, to);
            match compare(&base, &new) {
                Change::NextSession(what) => {
                    assert!(what.iter().any(|w| w == named), "{to}: {what:?}")
                }
                other => panic!("{to}: {other:?}"),
            }
        }
        // A tool-rule change together with a host change is refused whole.
        let both = policy(
            &BASE
                .replacen("allow: [echo]", "allow: [echo, add]", 1)
                .replacen("hosts: [github.com]", "hosts: []", 1),
        );
        assert_eq!(
            compare(&base, &both),
            Change::NextSession(vec!["hosts".into()])
        );
        // A removed server.
        let removed = policy(BASE.split("  other:").next().unwrap());
        assert_eq!(
            compare(&base, &removed),
            Change::NextSession(vec!["mcp.other (removed)".into()])
        );
    }

    #[test]
    fn a_project_narrowing_a_machine_server_changes_live() {
        let machine = "version: 1
mcp:
  echo:
    url: https://127.0.0.1:8443/mcp
    tools:
      allow: [echo, add]
";
        let narrowed = |allow: &str| {
            policy_with(
                Some(machine),
                &format!(
                    "version: 1\nmcp:\n  echo:\n    url: https://127.0.0.1:8443/mcp\n    \
                     tools:\n      allow: [{allow}]\n"
                ),
            )
        };
        assert_eq!(
            compare(&narrowed("echo, add"), &narrowed("echo")),
            Change::ToolRules(vec!["echo".into()])
        );
        // Private ranges (machine file only) are not live.
        let project = "version: 1\nhosts: [github.com]\n";
        let ranges = |range: &str| {
            policy_with(
                Some(&format!(
                    "version: 1\nhosts:\n  - {{host: db.internal, private: [\"{range}\"]}}\n"
                )),
                project,
            )
        };
        assert_eq!(
            compare(&ranges("10.20.0.0/16"), &ranges("10.30.0.0/16")),
            Change::NextSession(vec!["private ranges".into()])
        );
    }
}
