//! What a running session may take from a policy loaded while it runs (README, "Reloading the
//! policy"): [`compare`] splits what a newly compiled [`Policy`] changes into what takes effect now
//! and what waits for the next session. [`Policy::sha256`] names a policy in the audit log.
//!
//! The live part is each existing MCP server's tool rules: everything in its [`ServerRule`] (allow,
//! deny, allow_annotated, argument rules, resources, prompts, list filtering, and whatever field is
//! added there later), its `limits` and `confirm`, except what identifies the server (its name and
//! endpoint, which follow its url) and `pin` (the session's inventories and lock files are set up
//! from it). Everything else — hosts, the set and order of servers, their urls, tokens and origins,
//! secrets, private ranges, body limits, and any field added to [`Policy`] or [`McpServer`] later —
//! waits for the next session. The rule is written as "take the live part from one policy and
//! compare the rest whole", so a new field is on the safe side (next session) unless it is added
//! to the server's rule.
//!
//! Reload narrows at once: one edit that changes both parts is split, not refused whole. The
//! policy put in force is the one in force with, for every server it has, the loaded policy's live
//! part for the server of that name; the rest is named for the next session. A person's new `deny`
//! therefore never waits behind an unrelated host change. A server whose url, token, pin or file
//! changed keeps them as in force and still takes its new tool rules: the rules are the person's
//! word on that server by name (the only file they come from is one the session protected), and the
//! session cannot move the server, so the newest rules are the best description of what may be
//! called on the one it has. A removed server keeps its rules until the next session (the set of
//! servers is fixed for a session).
//!
//! [`ServerRule`]: crate::mcp::ServerRule

use super::{McpServer, Policy};
use sha2::{Digest, Sha256};

/// What a newly loaded policy changes, compared with the one in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// What takes effect now, when some server's tool rules changed.
    pub now: Option<Adopted>,
    /// What differs outside the live part, as keys a person recognises (`hosts`, `mcp.linear
    /// url`): it takes effect in the next session. Empty when nothing does.
    pub next_session: Vec<String>,
}

/// The policy to put in force now: the one in force with new tool rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adopted {
    pub policy: Policy,
    /// The servers (by name) whose tool rules changed, in the policy's order.
    pub servers: Vec<String>,
}

impl Change {
    /// Nothing that is enforced differs (a comment, a reordering that compiles to the same policy,
    /// the same text written again).
    pub fn is_none(&self) -> bool {
        self.now.is_none() && self.next_session.is_empty()
    }
}

/// Compares `loaded` with `in_force` (see the module doc for what may change live). `holds_calls`
/// says whether the session can hold calls for a person (it has a control socket): when it cannot,
/// a server whose new rules would hold calls keeps its rules in force, and that change waits for
/// the next session (held calls no one can answer would only time out).
pub fn compare(in_force: &Policy, loaded: &Policy, holds_calls: bool) -> Change {
    if in_force == loaded {
        return Change {
            now: None,
            next_session: Vec::new(),
        };
    }
    let mut next_session = Vec::new();
    // The rest: `loaded` with the live part of each server the session has taken from the policy
    // in force. Whatever still differs waits.
    let mut rest = loaded.clone();
    for server in &mut rest.servers {
        if let Some(old) = in_force.servers.iter().find(|s| s.name == server.name) {
            adopt_live_part(server, old);
        }
    }
    if rest != *in_force {
        next_session = differences(in_force, loaded);
    }
    // Now: the policy in force with the loaded live part of each of its servers.
    let mut projected = in_force.clone();
    let mut servers = Vec::new();
    for (server, old) in projected.servers.iter_mut().zip(&in_force.servers) {
        let Some(new) = loaded.servers.iter().find(|s| s.name == server.name) else {
            continue;
        };
        adopt_live_part(server, new);
        if server == old {
            continue;
        }
        if !holds_calls && !server.confirm.is_empty() {
            // No one can answer a held call in this session: the calls the new rules would hold
            // are refused instead (narrower than holding them), the rest of the new rules apply
            // now, and holding waits for the next session, which opens a control socket.
            let held = std::mem::take(&mut server.confirm.tools);
            server
                .rule
                .deny
                .extend(held.into_iter().map(|tool| tool.value));
            next_session.push(format!(
                "mcp.{} confirm (this session has no control socket; until then those calls are \
                 refused)",
                server.name
            ));
        }
        servers.push(server.name.clone());
    }
    let now = (!servers.is_empty()).then_some(Adopted {
        policy: projected,
        servers,
    });
    Change { now, next_session }
}

/// `server` with the live part of `from` in place of its own; what identifies it, and `pin`, stay.
/// `allow_annotated` needs a pinned server (the loader refuses it elsewhere), so it goes with `pin`.
fn adopt_live_part(server: &mut McpServer, from: &McpServer) {
    let mut rule = from.rule.clone();
    rule.name = std::mem::take(&mut server.rule.name);
    rule.endpoint = server.rule.endpoint.clone();
    rule.pin = server.rule.pin;
    rule.allow_read_only &= rule.pin;
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
        // A local server keeps running as it was started.
        if old.transport != new.transport {
            out.push(format!("mcp.{name} run"));
        }
        if old.launch != new.launch {
            out.push(format!("mcp.{name} command, hosts or secrets"));
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

    fn none() -> Change {
        Change {
            now: None,
            next_session: Vec::new(),
        }
    }

    /// The change when only tool rules of `servers` differ: `loaded` is put in force as it is.
    fn live(loaded: &Policy, servers: &[&str]) -> Change {
        Change {
            now: Some(Adopted {
                policy: loaded.clone(),
                servers: servers.iter().map(|s| s.to_string()).collect(),
            }),
            next_session: Vec::new(),
        }
    }

    fn server<'p>(p: &'p Policy, name: &str) -> &'p McpServer {
        p.servers.iter().find(|s| s.name == name).unwrap()
    }

    #[test]
    fn a_local_server_takes_new_tool_rules_now_and_keeps_how_it_was_started() {
        let local = "version: 1
mcp:
  notes:
    command: [notes-server, --stdio]
    secrets: [NOTES_TOKEN]
    hosts: [api.notes.example]
    tools:
      allow: [read]
";
        let base = policy(local);
        let loaded = policy(&local.replace("allow: [read]", "allow: [read, list]"));
        assert_eq!(compare(&base, &loaded, true), live(&loaded, &["notes"]));
        for (from, to) in [
            ("--stdio", "--verbose"),
            ("api.notes.example", "api2.notes.example"),
            ("[NOTES_TOKEN]", "[NOTES_KEY]"),
        ] {
            let loaded = policy(&local.replace(from, to));
            let change = compare(&base, &loaded, true);
            assert!(change.now.is_none(), "{from} -> {to}: {change:?}");
            assert_eq!(
                change.next_session,
                ["mcp.notes command, hosts or secrets"],
                "{from} -> {to}"
            );
            assert_ne!(base.sha256(), loaded.sha256());
        }
    }

    #[test]
    fn the_same_policy_and_a_comment_are_no_change() {
        let base = policy(BASE);
        assert_eq!(compare(&base, &policy(BASE), true), none());
        assert!(compare(&base, &policy(BASE), true).is_none());
        let commented = format!("{BASE}# a comment at the end\n");
        assert_eq!(compare(&base, &policy(&commented), true), none());
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
            assert_eq!(compare(&base, &new, true), live(&new, &["echo"]), "{to}");
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
            let change = compare(&base, &edited(from, to), true);
            assert_eq!(change.now, None, "{to}");
            assert!(
                change.next_session.iter().any(|w| w == named),
                "{to}: {change:?}"
            );
        }
        // A removed server.
        let removed = policy(BASE.split("  other:").next().unwrap());
        assert_eq!(
            compare(&base, &removed, true),
            Change {
                now: None,
                next_session: vec!["mcp.other (removed)".into()],
            }
        );
    }

    #[test]
    fn one_edit_of_both_parts_takes_the_tool_rules_now_and_the_rest_next_session() {
        let base = policy(BASE);
        // A new deny and a host: the deny now, the host later.
        let both = policy(
            &BASE
                .replacen("deny: [drop]", "deny: [drop, delete]", 1)
                .replacen("hosts: [github.com]", "hosts: [github.com, gitlab.com]", 1),
        );
        let change = compare(&base, &both, true);
        assert_eq!(change.next_session, vec!["hosts".to_string()]);
        let now = change.now.expect("the deny applies now");
        assert_eq!(now.servers, vec!["echo".to_string()]);
        // The policy put in force: the new rules, the hosts in force.
        let only_the_deny = policy(&BASE.replacen("deny: [drop]", "deny: [drop, delete]", 1));
        assert_eq!(now.policy, only_the_deny);
        assert_eq!(now.policy.hosts, base.hosts);

        // A server added, another removed, a url, token and pin changed, together with tool
        // rules: each server the session has takes its new rules, keeping what identifies it.
        let moved = policy(
            "version: 1
hosts: [github.com]
mcp:
  echo:
    url: https://127.0.0.1:9443/v2/mcp
    token: true
    pin: true
    tools:
      allow: [echo]
      allow_annotated: [read_only]
      deny: [drop, add]
  third:
    url: https://third.example/mcp
    tools:
      allow: [x]
",
        );
        let change = compare(&base, &moved, true);
        assert_eq!(
            change.next_session,
            vec![
                "mcp.third (a new server)".to_string(),
                "mcp.other (removed)".to_string(),
                "mcp.echo url".to_string(),
                "mcp.echo token".to_string(),
                "mcp.echo pin".to_string(),
                // The token's secret binding.
                "secrets".to_string(),
            ]
        );
        let now = change.now.unwrap();
        assert_eq!(now.servers, vec!["echo".to_string()]);
        let (old, new) = (server(&base, "echo"), server(&now.policy, "echo"));
        assert_eq!(new.rule.deny, server(&moved, "echo").rule.deny);
        assert_eq!(
            (&new.pattern, new.tls, &new.rule.endpoint, &new.token_secret),
            (&old.pattern, old.tls, &old.rule.endpoint, &old.token_secret)
        );
        // Not pinned in this session: `allow_annotated` (pinned servers only) is not taken.
        assert!(!new.rule.pin && !new.rule.allow_read_only);
        // The servers stay those in force, in order; a removed one keeps its rules.
        let names: Vec<&str> = now.policy.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["echo", "other"]);
        assert_eq!(server(&now.policy, "other"), server(&base, "other"));
    }

    #[test]
    fn a_session_that_cannot_hold_calls_refuses_what_the_new_rules_would_hold() {
        let base = policy(BASE);
        let held = policy(
            &BASE
                .replacen("deny: [drop]", "deny: [drop]\n      confirm: [echo]", 1)
                .replacen("allow: [read]", "allow: []", 1),
        );
        let change = compare(&base, &held, false);
        assert_eq!(
            change.next_session,
            vec![
                "mcp.echo confirm (this session has no control socket; until then those calls \
                 are refused)"
                    .to_string()
            ]
        );
        // Both servers' changes apply now: echo's held calls as refusals, without confirm.
        let now = change.now.unwrap();
        assert_eq!(now.servers, vec!["echo".to_string(), "other".to_string()]);
        let echo = server(&now.policy, "echo");
        assert!(echo.confirm.is_empty());
        let denied: Vec<String> = echo.rule.deny.iter().map(|p| format!("{p:?}")).collect();
        let wanted: Vec<String> = server(&held, "echo")
            .confirm
            .tools
            .iter()
            .map(|t| format!("{:?}", t.value))
            .collect();
        assert!(wanted.iter().all(|w| denied.contains(w)), "{denied:?}");
        assert!(server(&now.policy, "other").rule.allow.is_empty());
        // A session that can hold calls takes confirm as it is.
        let change = compare(&base, &held, true);
        assert!(change.next_session.is_empty());
        assert!(
            !server(&change.now.unwrap().policy, "echo")
                .confirm
                .is_empty()
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
        let new = narrowed("echo");
        assert_eq!(
            compare(&narrowed("echo, add"), &new, true),
            live(&new, &["echo"])
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
            compare(&ranges("10.20.0.0/16"), &ranges("10.30.0.0/16"), true),
            Change {
                now: None,
                next_session: vec!["private ranges".into()],
            }
        );
    }
}
