#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

/// The wire data: ids, definitions, requests, events, usage, outcomes, snapshots.
pub use agent_tree_protocol as protocol;

pub use agent_tree_actors::*;

/// Model adapters for real providers (features `openai`, `anthropic`).
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub use agent_tree_models as models;

/// Tools from MCP servers (feature `mcp`): [`mcp::McpServers`], given to a tree with
/// [`TreeBuilder::tool_source`].
#[cfg(feature = "mcp")]
pub use agent_tree_mcp as mcp;

/// The live inspector (feature `inspector`): [`inspector::Inspector`] serves a running tree
/// to a browser.
#[cfg(feature = "inspector")]
pub use agent_tree_inspector as inspector;

/// The names most programs need.
pub mod prelude {
    pub use agent_tree_actors::{
        AgentHandle, BoxFuture, Catalog, FnTool, Model, ModelError, ModelRequest, ModelResponse,
        Question, RetryPolicy, SpawnError, Tool, ToolContext, ToolError, Tree, TreeConfig,
    };
    pub use agent_tree_protocol::{
        AgentDefinition, AgentId, AgentStatus, FinishReason, ModelErrorKind, Outcome,
        RestartPolicy, SettlePolicy, SpawnRequest, SubagentAllowance, ToolSet, Usage, WaitPolicy,
    };
}
