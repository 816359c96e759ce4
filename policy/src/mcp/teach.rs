//! Denials that teach (README, "What the proxy decides"): for a `tools/call` the policy denied by
//! its tool rules, what a person can do about it, as the one line that both the JSON-RPC error's
//! `data.hint` and `fenzi log` show.
//!
//! The line is built from three things only: which tool rule denied the call ([`ToolDenial`], set
//! by [`super::methods::tool`] on its decision), the decision's rule (policy text: server names and
//! patterns), and the tool name, and the tool name only when it is in the plain MCP charset
//! `[A-Za-z0-9_.-]{1,128}` (so it needs no escaping anywhere, and is shell-safe). Nothing else
//! from the request is ever in it.
//!
//! An audit record keeps the rule's text but not the [`ToolDenial`], so `fenzi log` and `fenzi
//! approve` read it back from the rule ([`recorded_tool_denial`]), the one place that parses rule
//! names: `mcp.<server> default deny` for a tool no `allow` pattern matches,
//! `mcp.<server>.tools.deny "<pattern>"` for one a `deny` pattern matches. Server names have no
//! spaces, so the server is the text between `mcp.` and the first space (less `.tools.deny`).

use crate::decision::ToolDenial;
use crate::server_name::is_valid_server_name;
use crate::tool_pattern::is_plain_tool_name;

/// The [`ToolDenial`] a recorded rule names, for a log record, where only the rule's text was
/// kept; `None` for every other rule (argument rules, limits, pins, requests that were not decided
/// by the tool rules).
pub fn recorded_tool_denial(rule: &str) -> Option<ToolDenial> {
    let rest = rule.strip_prefix("mcp.")?;
    let (head, tail) = rest.split_once(' ')?;
    if tail == "default deny" && is_valid_server_name(head) {
        return Some(ToolDenial::NotAllowed {
            server: head.to_owned(),
        });
    }
    let server = head.strip_suffix(".tools.deny")?;
    (is_valid_server_name(server) && tail.starts_with('"')).then(|| ToolDenial::DenyListed {
        server: server.to_owned(),
    })
}

/// The command a person runs to allow `tool` on `server`: `fenzi approve --yes SERVER/TOOL`.
/// `None` for a tool name outside the plain charset (approve refuses those).
pub fn approve_line(server: &str, tool: &str) -> Option<String> {
    (is_valid_server_name(server) && is_plain_tool_name(tool))
        .then(|| format!("fenzi approve --yes {server}/{tool}"))
}

/// The hint for a `tools/call` of `tool` the tool rules denied (`denial`) with rule `rule`: the
/// approve line for a tool the server does not allow, a sentence naming the deny rule for one it
/// denies; `None` for a tool name outside the plain charset that is not deny-listed, and for a
/// server name a rule could not name.
pub fn tool_hint(denial: &ToolDenial, rule: &str, tool: &str) -> Option<String> {
    match denial {
        ToolDenial::NotAllowed { server } => approve_line(server, tool),
        ToolDenial::DenyListed { server } => is_valid_server_name(server).then(|| {
            format!("denied by the policy's deny list ({rule}); fenzi approve does not undo a deny")
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::JsonLimits;
    use crate::mcp::inventory::Inventory;
    use crate::mcp::{EndpointPath, ServerRule, methods};
    use crate::tool_pattern::ToolPattern;

    /// `fenzi log`'s hint (from the recorded rule) and `data.hint` (from the decision) agree.
    fn recorded_hint(rule: &str, tool: &str) -> Option<String> {
        tool_hint(&recorded_tool_denial(rule)?, rule, tool)
    }

    #[test]
    fn a_recorded_rule_reads_back_as_the_tool_decision_marked_it() {
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
        let not_allowed_kind = ToolDenial::NotAllowed {
            server: "a.b-c".into(),
        };
        let denied_kind = ToolDenial::DenyListed {
            server: "a.b-c".into(),
        };
        assert_eq!(not_allowed.tool_denial.as_ref(), Some(&not_allowed_kind));
        assert_eq!(denied.tool_denial.as_ref(), Some(&denied_kind));
        assert_eq!(
            recorded_tool_denial(&not_allowed.rule),
            Some(not_allowed_kind.clone())
        );
        assert_eq!(
            recorded_tool_denial(&denied.rule),
            Some(denied_kind.clone())
        );
        assert_eq!(
            tool_hint(&not_allowed_kind, &not_allowed.rule, "delete_issue").as_deref(),
            Some("fenzi approve --yes a.b-c/delete_issue")
        );
        assert_eq!(
            tool_hint(&denied_kind, &denied.rule, "get_secret").as_deref(),
            Some(
                "denied by the policy's deny list (mcp.a.b-c.tools.deny \"get_secret\"); fenzi \
                 approve does not undo a deny"
            )
        );
        assert_eq!(
            recorded_hint(&not_allowed.rule, "delete_issue"),
            tool_hint(&not_allowed_kind, &not_allowed.rule, "delete_issue")
        );
        assert_eq!(
            recorded_hint(&denied.rule, "get_secret"),
            tool_hint(&denied_kind, &denied.rule, "get_secret")
        );
        let allowed = methods::tool(server, &inv, "get_issue");
        assert_eq!(allowed.tool_denial, None);
        assert_eq!(recorded_tool_denial(&allowed.rule), None);
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
            assert_eq!(recorded_tool_denial(rule), None, "{rule}");
            assert_eq!(recorded_hint(rule, "t"), None, "{rule}");
        }
        for tool in ["get_*", "a b", "a/b", "x\n", "", "é", &"x".repeat(129)] {
            assert_eq!(recorded_hint("mcp.x default deny", tool), None, "{tool:?}");
        }
        assert!(recorded_hint("mcp.x.tools.deny \"*\"", "a b").is_some());
    }
}
