//! Errors of the runtime, one enum per family.

use agent_tree_protocol::AgentId;

/// A spawn (or resume) that was refused, or whose actor could not start.
///
/// A refusal leaves nothing behind: no actor was started and no record was kept. The one
/// exception is [`SpawnError::Startup`]: the agent had been admitted, so its record is kept,
/// settled as failed with reason `actor_failed`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The type name did not resolve in the branch's catalog. A disabled or ambiguous type the
    /// caller could not reach anyway is reported this way too, so errors never reveal types
    /// outside its reach.
    #[error("unknown agent type {requested:?}; available: {}", available_list(.available))]
    UnknownType {
        /// The name that was asked for.
        requested: String,
        /// The enabled types the caller may spawn.
        available: Vec<String>,
    },
    /// The name matches several types case-insensitively.
    #[error("agent type {requested:?} is ambiguous: {}", .candidates.join(", "))]
    AmbiguousType {
        /// The name that was asked for.
        requested: String,
        /// The types it matches.
        candidates: Vec<String>,
    },
    /// The type exists but is disabled.
    #[error("agent type {0:?} is disabled")]
    DisabledType(String),
    /// The type name was blank.
    #[error("agent type is blank")]
    BlankType,
    /// The caller's allowlist (`allowed_subagents`) does not name the resolved type.
    #[error("agent type {requested:?} is not allowed here; allowed: {}", available_list(.allowed))]
    NotAllowed {
        /// The resolved type.
        requested: String,
        /// The enabled types the caller may spawn.
        allowed: Vec<String>,
    },
    /// The child would be deeper than the branch's `max_depth` (top-level agents, at depth 1,
    /// are always within it).
    #[error("max_depth {max_depth} reached: a child would be at depth {depth}")]
    DepthLimit {
        /// The child's depth.
        depth: u32,
        /// The branch's cap.
        max_depth: u32,
    },
    /// The owner already has `max_children_per_agent` live children.
    #[error("max_children_per_agent {limit} reached for {owner}")]
    ChildLimit {
        /// The owner.
        owner: AgentId,
        /// The limit.
        limit: usize,
    },
    /// The owner has spawned `max_spawns_per_agent` children in its life.
    #[error("max_spawns_per_agent {limit} reached for {owner}")]
    SpawnBudget {
        /// The owner.
        owner: AgentId,
        /// The limit.
        limit: u32,
    },
    /// The owner's subtree has used `max_subtree_tokens`.
    #[error("max_subtree_tokens {limit} reached for {owner}")]
    UsageBudget {
        /// The owner.
        owner: AgentId,
        /// The limit.
        limit: u64,
    },
    /// The tree already has `max_total_agents` live agents.
    #[error("max_total_agents {limit} reached")]
    TotalLimit {
        /// The limit.
        limit: usize,
    },
    /// The owner accepts no new children: it is not running (queued, starting, completing or
    /// terminal), it is being aborted, or it is gone.
    #[error("{0} is not accepting new children")]
    OwnerClosed(AgentId),
    /// A resume was refused by ownership or status.
    #[error(transparent)]
    Control(ControlError),
    /// The spawn request's input was malformed.
    #[error("invalid spawn request: {0}")]
    InvalidRequest(String),
    /// The agent's actor could not be started (ractor's error, as text: this enum is `Eq`).
    /// Unlike the refusals, the admitted agent's record is kept, settled as failed.
    #[error("agent actor failed to start: {0}")]
    Startup(String),
}

fn available_list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// An ownership-scoped control operation that was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// The target is not an agent the caller may control (its child; its descendant under
    /// `ControlScope::Descendants`), or does not exist. Both cases give this same error, so
    /// ids cannot be probed.
    #[error("no subagent {0} of yours")]
    NotYours(AgentId),
    /// As [`ControlError::NotYours`], for an id that is not even well-formed (kept as
    /// written, cut to 64 characters).
    #[error("no subagent {0} of yours")]
    NotYoursText(String),
    /// The agent is not running any more (or not yet) and cannot take this operation.
    #[error("{0} cannot take this now: it is {1}")]
    WrongStatus(AgentId, agent_tree_protocol::AgentStatus),
    /// The agent is in the last model turn its `max_turns` allows: no turn is left to read
    /// a steer, so it is refused rather than receipted and never read.
    #[error("{0} is in its last turn and cannot read a steer")]
    NoTurnsLeft(AgentId),
}

/// A model turn that failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("model error: {message}")]
pub struct ModelError {
    /// What went wrong.
    pub message: String,
}

impl ModelError {
    /// A model error with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        ModelError {
            message: message.into(),
        }
    }
}

/// A tool call that failed; the model sees the message as an error result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    /// What went wrong.
    pub message: String,
}

impl ToolError {
    /// A tool error with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
        }
    }
}

/// A tree that could not be built or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TreeError {
    /// The tree was built without a model.
    #[error("a tree needs a model")]
    NoModel,
    /// The root actor could not be started.
    #[error("root actor failed to start: {0}")]
    Startup(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The config is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}
