//! MCP server names (README, "Configuration"): the one syntax a policy file, `fenzi mcp add` and a
//! denial's approve line all check a name against. A server name is written into rule names
//! (`mcp.<server> default deny`), token names (`MCP_<SERVER>`, [`crate::secret_name`]) and
//! commands, so it has no spaces and nothing a shell reads specially.

/// Longest server name (`[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`).
pub const MAX_SERVER_NAME: usize = 64;

/// True for `[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`.
pub fn is_valid_server_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_SERVER_NAME
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}
