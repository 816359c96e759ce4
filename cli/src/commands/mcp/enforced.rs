//! What fenzi enforces on a server beyond its tool list (argument rules, limits, allowed resources
//! and prompts, private ranges), in one place for `fenzi mcp list` (lines and `--json`) and `fenzi
//! mcp render` (notes on stderr: the agent's file cannot carry them, the proxy applies them).

use fenzi_policy::config::{Config, McpServerConfig, ServerKind, ToolRules};
use serde_json::{Value, json};

fn tools(s: &McpServerConfig) -> Option<&ToolRules> {
    // A command server is checked per tool behind the bridge like the others (DESIGN §18).
    match &s.kind {
        ServerKind::Remote { tools, .. }
        | ServerKind::Account { tools, .. }
        | ServerKind::Local { tools, .. } => Some(tools),
    }
}

/// The ranges `config` lets server `s`'s host resolve to.
fn private_ranges(config: &Config, s: &McpServerConfig) -> Vec<String> {
    let ServerKind::Remote { url, .. } = &s.kind else {
        return vec![];
    };
    config
        .private
        .iter()
        .filter(|p| p.pattern.matches(&url.host, url.port))
        .flat_map(|p| p.ranges.iter().map(|r| r.value.to_string()))
        .collect()
}

/// The members `fenzi mcp list --json` adds to a server: `rules`, `limits`, `resources`,
/// `prompts` and `private` (each a list, empty when there is none).
pub fn json_members(config: &Config, s: &McpServerConfig) -> Vec<(&'static str, Value)> {
    let rules: Vec<Value> = tools(s)
        .map(|t| t.rules.iter().map(|r| r.value.describe()).collect())
        .unwrap_or_default();
    let limits: Vec<Value> = s
        .surface
        .limits
        .iter()
        .map(|l| {
            let mut rule = l.at.key.clone();
            if l.project_on_machine {
                rule.push_str(" (project)");
            }
            json!({"rule": rule, "limit": l.to_string()})
        })
        .collect();
    let patterns = |v: Vec<String>| json!(v);
    vec![
        ("rules", json!(rules)),
        ("limits", json!(limits)),
        (
            "resources",
            patterns(
                s.surface
                    .resources
                    .iter()
                    .map(|r| r.value.to_string())
                    .collect(),
            ),
        ),
        (
            "prompts",
            patterns(
                s.surface
                    .prompts
                    .iter()
                    .map(|p| p.value.to_string())
                    .collect(),
            ),
        ),
        ("private", patterns(private_ranges(config, s))),
    ]
}

/// One line per thing enforced, for people (`rule create_comment args /issueId prefix "ENG-"`).
pub fn lines(config: &Config, s: &McpServerConfig) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(t) = tools(s) {
        for r in &t.rules {
            out.extend(r.value.lines().into_iter().map(|l| format!("rule {l}")));
        }
    }
    out.extend(s.surface.limits.iter().map(|l| format!("limit {l}")));
    if !s.surface.resources.is_empty() {
        let r: Vec<String> = s
            .surface
            .resources
            .iter()
            .map(|r| r.value.to_string())
            .collect();
        out.push(format!("resources {}", r.join(", ")));
    }
    if !s.surface.prompts.is_empty() {
        let p: Vec<String> = s
            .surface
            .prompts
            .iter()
            .map(|p| p.value.to_string())
            .collect();
        out.push(format!("prompts {}", p.join(", ")));
    }
    let private = private_ranges(config, s);
    if !private.is_empty() {
        out.push(format!("private {}", private.join(", ")));
    }
    out
}
