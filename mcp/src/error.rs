//! What can go wrong before a call: a configuration that is not one, a server that never
//! came up.

/// An MCP configuration that cannot be used, or a server that could not be started.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// A configuration that is not one: `origin` (a file's path, or `code`), the field
    /// (`mcpServers.fs.args[1]`) and what is wrong with it.
    #[error("{origin}: {field}: {message}")]
    Config {
        /// Where the configuration came from.
        origin: String,
        /// The field, by its path in `.mcp.json`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A server that did not come up (under [`StartFailure::Fail`](crate::StartFailure)).
    #[error("MCP server `{server}` did not start: {reason}")]
    Start {
        /// The server's name.
        server: String,
        /// Why: the process's error or exit and its last standard-error lines, the
        /// handshake's error, or the start timeout.
        reason: String,
    },
}

impl McpError {
    pub(crate) fn config(
        origin: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        McpError::Config {
            origin: origin.into(),
            field: field.into(),
            message: message.into(),
        }
    }
}
