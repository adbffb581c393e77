//! Spawn requests: what an owner (the application or an agent's `Agent` tool) asks for.
//!
//! # Invariants
//!
//! * A request names *what* to run, never *where*: it has no depth, parent or root field, so
//!   nothing a caller or a model passes can forge its place in the tree. Unknown fields in a
//!   request's JSON (a model inventing `"depth": 0`) are ignored.

use serde::{Deserialize, Serialize};

use crate::definition::SettlePolicy;
use crate::ids::RequestId;

/// A request to start one agent.
///
/// ```
/// use agent_tree_protocol::SpawnRequest;
/// let r = SpawnRequest::new("planner", "plan the release").background();
/// assert_eq!(r.background, Some(true));
/// // A model cannot place the child: extra fields are ignored.
/// let forged: SpawnRequest = serde_json::from_str(
///     r#"{"agent_type":"planner","prompt":"p","depth":0,"parent":"a0"}"#).unwrap();
/// assert_eq!(forged.agent_type, "planner");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SpawnRequest {
    /// The agent type to resolve in the branch's catalog.
    #[serde(alias = "subagent_type", alias = "type")]
    pub agent_type: String,
    /// The task given to the agent.
    pub prompt: String,
    /// A short label for renderings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Run in the background (the caller gets an id at once) or the foreground (the caller
    /// gets the result). `None` follows the definition's `run_in_background`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        alias = "run_in_background"
    )]
    pub background: Option<bool>,
    /// The idempotency key, for the application's spawns. An agent's spawns always get one
    /// derived by the runtime from the owner, its run and the tool call; a value a model puts
    /// in its `Agent` tool input is ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<RequestId>,
    /// A detached child is skipped by an ordinary abort cascade.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub detached: bool,
    /// Overrides the definition's settle policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle: Option<SettlePolicy>,
    /// Places the agent on the node named `node`, overriding its definition's placement.
    /// Only the application sets it: an agent's spawns are built by the runtime from its
    /// model's typed `Agent` input, which has no such field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl SpawnRequest {
    /// A request for an agent of `agent_type` with task `prompt`.
    pub fn new(agent_type: impl Into<String>, prompt: impl Into<String>) -> Self {
        SpawnRequest {
            agent_type: agent_type.into(),
            prompt: prompt.into(),
            description: None,
            background: None,
            request_id: None,
            detached: false,
            settle: None,
            node: None,
        }
    }

    /// Runs the agent in the background.
    pub fn background(mut self) -> Self {
        self.background = Some(true);
        self
    }

    /// Runs the agent in the foreground.
    pub fn foreground(mut self) -> Self {
        self.background = Some(false);
        self
    }

    /// Sets the idempotency key.
    pub fn with_request_id(mut self, id: RequestId) -> Self {
        self.request_id = Some(id);
        self
    }

    /// Detaches the child from ordinary abort cascades.
    pub fn detached(mut self) -> Self {
        self.detached = true;
        self
    }

    /// Places the agent on the node named `node` (see [`SpawnRequest::node`]).
    ///
    /// ```
    /// use agent_tree_protocol::SpawnRequest;
    /// let request = SpawnRequest::new("runner", "build it").on_node("builder-1");
    /// assert_eq!(request.node.as_deref(), Some("builder-1"));
    /// ```
    pub fn on_node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }

    /// Overrides the settle policy.
    pub fn with_settle(mut self, settle: SettlePolicy) -> Self {
        self.settle = Some(settle);
        self
    }

    /// Sets the description.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

/// How a wait over a set of agents ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitPolicy {
    /// Resume when every agent of the set is terminal; every outcome is returned, in order.
    #[default]
    AllSettled,
    /// The first outcome that is not `completed` aborts the rest of the set (only the set:
    /// not the waiter, not other agents); then as `all_settled`.
    FailFast,
}
