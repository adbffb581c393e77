#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

/// The wire data: ids, definitions, requests, events, usage, outcomes, snapshots.
pub use agent_tree_protocol as protocol;

pub use agent_tree_actors::*;

/// The names most programs need.
pub mod prelude {
    pub use agent_tree_actors::{
        AgentHandle, Catalog, Model, ModelError, ModelRequest, ModelResponse, SpawnError, Tool,
        Tree, TreeConfig,
    };
    pub use agent_tree_protocol::{
        AgentDefinition, AgentId, AgentStatus, Outcome, RestartPolicy, SettlePolicy, SpawnRequest,
        SubagentAllowance, ToolSet, Usage, WaitPolicy,
    };
}
