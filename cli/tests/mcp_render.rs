//! `fenzi mcp render --agent X`: each agent's configuration against the fixtures in
//! `testdata/render/`.

mod mcp_support;

#[test]
fn render_cases() {
    mcp_support::run_dir("render");
}
