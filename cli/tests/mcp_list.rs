//! `fenzi mcp list`: each server, where it comes from (machine, project, machine narrowed by the
//! project), what it is, its tools, its secrets' positions, and whether its secrets are stored — "unknown" with the reason
//! when the store cannot be used.

mod mcp_support;

use mcp_support::fenzi;
use serde_json::json;

const MACHINE: &str = "\
version: 1
mcp:
  linear:
    url: https://mcp.linear.app/mcp
    token: true
    tools:
      allow: [list_issues, get_issue]
  droplets:
    command: [npx, -y, \"@digitalocean/mcp\"]
    run: host
    secrets: [DIGITALOCEAN_API_TOKEN]
    hosts: [api.digitalocean.com]
    tools:
      allow: [droplet-list, droplet-get]
      deny: [droplet-delete]
    limits: [{tool: \"*\", rate: 5/s}]
";

const PROJECT: &str = "\
version: 1
mcp:
  linear:
    url: https://mcp.linear.app/mcp
    token: true
    tools:
      allow: [list_issues]
      deny: [delete_issue]
  claude-ai:
    account: claude
    tools:
      allow: [\"*\"]
secrets:
  ANTHROPIC_API_KEY:
    hosts: [api.anthropic.com]
  MAPS_KEY:
    hosts: [maps.example.com]
    in: [query:key, header:X-Api-Key]
";

fn folder() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("xdg/fenzi")).unwrap();
    std::fs::write(tmp.path().join("xdg/fenzi/mcp.yaml"), MACHINE).unwrap();
    std::fs::write(tmp.path().join("fenzi.yaml"), PROJECT).unwrap();
    tmp
}

#[test]
fn json_lists_sources_tools_and_stored_state() {
    let tmp = folder();
    let out = fenzi(tmp.path(), &["mcp", "list", "--json"], None, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let machine = tmp.path().join("xdg/fenzi/mcp.yaml").display().to_string();
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = json!({
        "store": {"backend": "in-process memory store", "error": null},
        "servers": [
            {"name": "linear", "source": "machine", "narrowed_by_project": true,
             "file": machine, "line": 3, "kind": "remote", "url": "https://mcp.linear.app/mcp",
             "token": true, "oauth": false, "tools": {"allow": ["list_issues"], "deny": ["delete_issue"]},
             "secrets": [{"name": "MCP_LINEAR", "hosts": ["mcp.linear.app:443"],
                          "in": ["header:Authorization"], "stored": false,
                          "withheld": null, "store_error": null}],
             "rules": [], "limits": [], "resources": [], "prompts": [], "private": []},
            {"name": "droplets", "source": "machine", "narrowed_by_project": false,
             "file": machine, "line": 8, "kind": "local",
             "command": ["npx", "-y", "@digitalocean/mcp"], "hosts": ["api.digitalocean.com"],
             "stdio_url": "http://droplets.stdio.fenzi.internal/mcp", "run": "host",
             "tools": {"allow": ["droplet-list", "droplet-get"], "deny": ["droplet-delete"]},
             "secrets": [{"name": "DIGITALOCEAN_API_TOKEN", "hosts": ["api.digitalocean.com"],
                          "in": null, "stored": false, "withheld": null, "store_error": null}],
             "rules": [], "limits": [{"rule": "mcp.droplets.limits[0]", "limit": "* rate=5/s"}],
             "resources": [], "prompts": [], "private": []},
            {"name": "claude-ai", "source": "project", "narrowed_by_project": false,
             "file": "fenzi.yaml", "line": 9, "kind": "account", "account": "claude",
             "host": "mcp-proxy.anthropic.com", "tools": {"allow": ["*"], "deny": []},
             "secrets": [],
             "rules": [], "limits": [], "resources": [], "prompts": [], "private": []}
        ],
        "secrets": [
            {"name": "ANTHROPIC_API_KEY", "hosts": ["api.anthropic.com"], "body": false, "in": null,
             "stored": false, "withheld": null},
            {"name": "MAPS_KEY", "hosts": ["maps.example.com"], "body": false,
             "in": ["query:key", "header:X-Api-Key"], "stored": false, "withheld": null}
        ]
    });
    assert_eq!(got, want, "{}", serde_json::to_string_pretty(&got).unwrap());
}

#[test]
fn what_fenzi_enforces_beyond_tool_names_is_listed() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("xdg/fenzi")).unwrap();
    std::fs::write(
        tmp.path().join("xdg/fenzi/mcp.yaml"),
        "version: 1\nmcp:\n  corp:\n    url: https://mcp.corp.example/mcp\n    private: [\"10.20.0.0/16\"]\n    tools:\n      allow: [\"*\"]\n    resources: {allow: [\"corp://docs/*\"]}\n    prompts: {allow: [summarize]}\n",
    )
    .unwrap();
    std::fs::write(
        tmp.path().join("fenzi.yaml"),
        "version: 1\nmcp:\n  corp:\n    url: https://mcp.corp.example/mcp\n    tools:\n      allow: [create]\n      rules:\n        - tool: create\n          args:\n            /id: {prefix: ENG-, max_length: 9}\n          deny_args:\n            /n: {max: 0.5}\n    limits:\n      - {tool: create, rate: 10/min}\n    resources: {allow: [\"corp://docs/*\"]}\n    prompts: {allow: [summarize]}\n",
    )
    .unwrap();
    let out = fenzi(tmp.path(), &["mcp", "list", "--json"], None, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let corp = &got["servers"][0];
    assert_eq!(
        corp["rules"],
        json!([{"tool": "create", "args": {"/id": {"prefix": "ENG-", "max_length": 9}},
                "deny_args": {"/n": {"max": 0.5}}, "rule": "mcp.corp.tools.rules[0]",
                "written_at": "fenzi.yaml:8"}])
    );
    assert_eq!(corp["resources"], json!(["corp://docs/*"]));
    assert_eq!(corp["prompts"], json!(["summarize"]));
    assert_eq!(corp["private"], json!(["10.20.0.0/16"]));
    assert_eq!(corp["limits"][0]["limit"], "create rate=10/min");
    let text = fenzi(tmp.path(), &["mcp", "list"], None, &[]);
    let text = String::from_utf8_lossy(&text.stdout);
    for line in [
        "rule create args /id prefix \"ENG-\", max_length 9",
        "rule create deny_args /n max 0.5",
        "limit create rate=10/min",
        "private 10.20.0.0/16",
    ] {
        assert!(text.contains(line), "{line:?} not in:\n{text}");
    }
    let render = fenzi(
        tmp.path(),
        &["mcp", "render", "--agent", "claude"],
        None,
        &[],
    );
    let notes = String::from_utf8_lossy(&render.stderr);
    assert!(
        notes.contains("note: fenzi enforces on `corp`: rule create args /id prefix \"ENG-\""),
        "{notes}"
    );
}

#[test]
fn text_says_where_each_server_comes_from_and_what_to_store() {
    let tmp = folder();
    let out = fenzi(tmp.path(), &["mcp", "list"], None, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for want in [
        "linear     remote  https://mcp.linear.app/mcp  [machine, narrowed by project]",
        "tools: allow list_issues; deny delete_issue",
        "secret MCP_LINEAR -> mcp.linear.app:443 (in header:Authorization): not stored (fenzi mcp token linear)",
        "MAPS_KEY -> maps.example.com (in query:key, header:X-Api-Key): not stored",
        "droplets   local   npx -y @digitalocean/mcp  [machine]\n           \
         address: http://droplets.stdio.fenzi.internal/mcp\n           \
         run: host (on this machine, outside any sandbox)\n           \
         tools: allow droplet-list, droplet-get; deny droplet-delete\n           \
         limit * rate=5/s\n           \
         secret DIGITALOCEAN_API_TOKEN -> api.digitalocean.com: not stored (fenzi mcp token droplets)",
        "claude-ai  account claude (via mcp-proxy.anthropic.com)  [project]",
        "tools: allow every tool",
        "ANTHROPIC_API_KEY -> api.anthropic.com: not stored",
        "credential store: in-process memory store",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in\n{stdout}");
    }
}

#[test]
fn an_unusable_store_makes_each_answer_unknown_with_the_reason() {
    let tmp = folder();
    let env = [("FENZI_CREDSTORE", "secret-service")];
    let out = fenzi(tmp.path(), &["mcp", "list", "--json"], None, &env);
    assert!(out.status.success());
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["store"]["backend"], serde_json::Value::Null);
    assert!(
        got["store"]["error"]
            .as_str()
            .unwrap()
            .contains("no D-Bus session bus")
    );
    let secret = &got["servers"][0]["secrets"][0];
    assert_eq!(secret["stored"], serde_json::Value::Null);
    assert!(
        secret["store_error"]
            .as_str()
            .unwrap()
            .starts_with("store unavailable: ")
    );

    let out = fenzi(tmp.path(), &["mcp", "list"], None, &env);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("secret MCP_LINEAR -> mcp.linear.app:443 (in header:Authorization): unknown (store unavailable: the Secret Service cannot be used"), "{stdout}");
}

#[test]
fn an_invalid_policy_is_an_error() {
    let tmp = folder();
    std::fs::write(tmp.path().join("fenzi.yaml"), "version: 2\n").unwrap();
    let out = fenzi(tmp.path(), &["mcp", "list"], None, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("fenzi.yaml"));
}

#[test]
fn no_policy_says_how_to_add_one() {
    let tmp = tempfile::tempdir().unwrap();
    let out = fenzi(tmp.path(), &["mcp", "list"], None, &[]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("add one with `fenzi mcp add`"));
}

/// Two servers on one host at different paths are two servers (README, "Servers by path"): each
/// listed with its own url, tools and token.
#[test]
fn two_servers_on_one_host_are_listed_apart() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("xdg/fenzi")).unwrap();
    std::fs::write(
        tmp.path().join("fenzi.yaml"),
        "version: 1\nmcp:\n  full:\n    url: https://api.example.com/mcp\n    token: true\n    \
         tools:\n      allow: [\"*\"]\n  readonly:\n    url: https://api.example.com/mcp/readonly\n    \
         token: true\n    tools:\n      allow: [search]\n",
    )
    .unwrap();
    let out = fenzi(tmp.path(), &["mcp", "list", "--json"], None, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let servers = got["servers"].as_array().unwrap();
    let pick = |name: &str| {
        let s = servers.iter().find(|s| s["name"] == name).unwrap();
        (
            s["url"].clone(),
            s["tools"]["allow"].clone(),
            s["secrets"][0]["name"].clone(),
        )
    };
    assert_eq!(
        pick("full"),
        (
            json!("https://api.example.com/mcp"),
            json!(["*"]),
            json!("MCP_FULL")
        )
    );
    assert_eq!(
        pick("readonly"),
        (
            json!("https://api.example.com/mcp/readonly"),
            json!(["search"]),
            json!("MCP_READONLY")
        )
    );
    let text = fenzi(tmp.path(), &["mcp", "list"], None, &[]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("full      remote  https://api.example.com/mcp  ["),
        "{text}"
    );
    assert!(
        text.contains("readonly  remote  https://api.example.com/mcp/readonly  ["),
        "{text}"
    );
    assert!(text.contains("secret MCP_READONLY"), "{text}");
}
