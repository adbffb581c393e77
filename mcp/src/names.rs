//! The names a server's tools are offered under: `mcp__<server>__<tool>`, as Claude Code
//! writes them in agent files' `tools:` lists.

/// What every MCP tool's name starts with.
pub const PREFIX: &str = "mcp__";

/// The name the model and agent files use for `server`'s tool `tool`:
/// `mcp__<server>__<tool>`, every character providers refuse (outside `A-Z a-z 0-9 _ -`)
/// written `_`, as Claude Code does. `None` past the providers' 64 characters.
///
/// ```
/// use agent_tree_mcp::tool_name;
/// assert_eq!(tool_name("fs", "read_file").as_deref(), Some("mcp__fs__read_file"));
/// assert_eq!(tool_name("web", "get.page").as_deref(), Some("mcp__web__get_page"));
/// assert_eq!(tool_name("fs", &"x".repeat(60)), None);
/// ```
pub fn tool_name(server: &str, tool: &str) -> Option<String> {
    let name = format!("{PREFIX}{}__{}", provider_safe(server), provider_safe(tool));
    (name.len() <= 64).then_some(name)
}

/// `name` with every character outside `A-Z a-z 0-9 _ -` written `_`.
fn provider_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Why `server` cannot name a server, if it cannot: it must be non-empty, of
/// `A-Z a-z 0-9 _ -`, and free of `__` (which separates it from the tool's name).
pub(crate) fn server_name_problem(server: &str) -> Option<&'static str> {
    if server.is_empty() {
        Some("a server's name must not be empty")
    } else if !server
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        Some("a server's name must be of A-Z a-z 0-9 _ -")
    } else if server.contains("__") || server.starts_with('_') || server.ends_with('_') {
        Some(
            "a server's name must not hold `__` or start or end with `_` (it would blur into its tools' names)",
        )
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Server names that would make `mcp__<server>__<tool>` ambiguous are refused.
    #[test]
    fn server_names_keep_tool_names_unambiguous() {
        assert_eq!(server_name_problem("fs"), None);
        assert_eq!(server_name_problem("my-server_2"), None);
        for bad in ["", "a__b", "_a", "a_", "a b", "a.b"] {
            assert!(server_name_problem(bad).is_some(), "{bad:?}");
        }
    }

    /// Characters providers refuse are written `_`; a name past 64 characters is none.
    #[test]
    fn tool_names_are_provider_safe() {
        assert_eq!(
            tool_name("fs", "list/dir é").as_deref(),
            Some("mcp__fs__list_dir__")
        );
        let longest = "x".repeat(64 - "mcp__fs__".len());
        assert!(tool_name("fs", &longest).is_some());
        assert!(tool_name("fs", &format!("{longest}x")).is_none());
    }
}
