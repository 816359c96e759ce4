//! Denials that teach (README, "What the proxy decides"): for a `tools/call` the policy denied by
//! its tool rules, what a person can do about it, as the one line that both the JSON-RPC error's
//! `data.hint` and `fenzi log` show.
//!
//! The line is built from two things only: the decision's rule (policy text: server names and
//! patterns) and the tool name, and the tool name only when it is in the plain MCP charset
//! `[A-Za-z0-9_.-]{1,128}` (so it needs no escaping anywhere, and is shell-safe). Nothing else
//! from the request is ever in it. Which denial is which is read from the rule names
//! [`super::methods::tool`] writes: `mcp.<server> default deny` for a tool no `allow` pattern
//! matches, `mcp.<server>.tools.deny "<pattern>"` for one a `deny` pattern matches. Server names
//! have no spaces, so the server is the text between `mcp.` and the first space (less
//! `.tools.deny`).

use crate::server_name::is_valid_server_name;
use crate::tool_pattern::is_plain_tool_name;

/// Why the policy's tool rules denied a call, as far as the person's next step goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolDenial<'a> {
    /// No `allow` pattern of `server` matches: `fenzi approve` can add the tool.
    NotAllowed { server: &'a str },
    /// A `deny` pattern of `server` matches: a choice that approve does not undo.
    DenyListed { server: &'a str },
}

impl<'a> ToolDenial<'a> {
    /// Reads a decision's rule; `None` for every other rule (argument rules, limits, pins,
    /// requests that were not decided by the tool rules).
    pub fn from_rule(rule: &'a str) -> Option<ToolDenial<'a>> {
        let rest = rule.strip_prefix("mcp.")?;
        let (head, tail) = rest.split_once(' ')?;
        if tail == "default deny" && is_valid_server_name(head) {
            return Some(ToolDenial::NotAllowed { server: head });
        }
        let server = head.strip_suffix(".tools.deny")?;
        (is_valid_server_name(server) && tail.starts_with('"'))
            .then_some(ToolDenial::DenyListed { server })
    }

    pub fn server(self) -> &'a str {
        match self {
            ToolDenial::NotAllowed { server } | ToolDenial::DenyListed { server } => server,
        }
    }
}

/// The command a person runs to allow `tool` on `server`: `fenzi approve --yes SERVER/TOOL`.
/// `None` for a tool name outside the plain charset (approve refuses those).
pub fn approve_line(server: &str, tool: &str) -> Option<String> {
    (is_valid_server_name(server) && is_plain_tool_name(tool))
        .then(|| format!("fenzi approve --yes {server}/{tool}"))
}

/// The hint for a `tools/call` of `tool` denied as `policy_denied` by `rule`: the approve line for
/// a tool the server does not allow, a sentence naming the deny rule for one it denies, `None`
/// otherwise (and for a tool name outside the plain charset that is not deny-listed).
pub fn tool_hint(rule: &str, tool: &str) -> Option<String> {
    match ToolDenial::from_rule(rule)? {
        ToolDenial::NotAllowed { server } => approve_line(server, tool),
        ToolDenial::DenyListed { .. } => Some(format!(
            "denied by the policy's deny list ({rule}); fenzi approve does not undo a deny"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::JsonLimits;
    use crate::mcp::inventory::Inventory;
    use crate::mcp::{EndpointPath, ServerRule, methods};
    use crate::tool_pattern::ToolPattern;

    #[test]
    fn reads_the_rules_the_tool_decision_writes() {
        // The rules as `methods::tool` writes them, for a server whose name has dots.
        let server = &ServerRule::with_tools(
            "a.b-c",
            EndpointPath::Exact("/mcp".into()),
            vec![ToolPattern::parse("get_*").unwrap()],
            vec![ToolPattern::parse("get_secret").unwrap()],
            JsonLimits::default(),
        );
        let inv = Inventory::unpinned();
        let not_allowed = methods::tool(server, &inv, "delete_issue");
        let denied = methods::tool(server, &inv, "get_secret");
        assert_eq!(
            ToolDenial::from_rule(&not_allowed.rule),
            Some(ToolDenial::NotAllowed { server: "a.b-c" })
        );
        assert_eq!(
            ToolDenial::from_rule(&denied.rule),
            Some(ToolDenial::DenyListed { server: "a.b-c" })
        );
        assert_eq!(
            tool_hint(&not_allowed.rule, "delete_issue").as_deref(),
            Some("fenzi approve --yes a.b-c/delete_issue")
        );
        assert_eq!(
            tool_hint(&denied.rule, "get_secret").as_deref(),
            Some(
                "denied by the policy's deny list (mcp.a.b-c.tools.deny \"get_secret\"); fenzi \
                 approve does not undo a deny"
            )
        );
        let allowed = methods::tool(server, &inv, "get_issue");
        assert_eq!(ToolDenial::from_rule(&allowed.rule), None);
    }

    #[test]
    fn other_rules_and_names_that_are_not_plain_get_no_approve_line() {
        for rule in [
            "mcp.x pin",
            "mcp.x.tools.rules[0].args./q",
            "mcp.x.limits[0].rate",
            "mcp.x batch",
            "default deny",
            "mcp. default deny",
            "mcp.x y default deny",
            "mcp.x.tools.deny",
            "strict json-rpc",
        ] {
            assert_eq!(ToolDenial::from_rule(rule), None, "{rule}");
            assert_eq!(tool_hint(rule, "t"), None, "{rule}");
        }
        for tool in ["get_*", "a b", "a/b", "x\n", "", "é", &"x".repeat(129)] {
            assert_eq!(tool_hint("mcp.x default deny", tool), None, "{tool:?}");
        }
        assert!(tool_hint("mcp.x.tools.deny \"*\"", "a b").is_some());
    }
}
