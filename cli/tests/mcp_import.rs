//! `fenzi mcp import` from Claude Code and Cursor server lists: the table in `testdata/import/`.

mod mcp_support;

#[test]
fn import_cases() {
    mcp_support::run_dir("import");
}
