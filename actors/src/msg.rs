//! The one message type of the tree's actors (root and agents).
//!
//! Kept in one place and small: enabling ractor's `cluster` feature later needs an explicit
//! `Message` impl for it.

use agent_tree_protocol::AgentId;
use ractor::RpcReplyPort;

use crate::error::{ControlError, ModelError};
use crate::model::ModelResponse;

/// How a model turn task ended.
#[derive(Debug)]
pub(crate) enum TurnResult {
    Response(ModelResponse),
    Failed(ModelError),
    Panicked(String),
    Cancelled,
}

/// Where a steer went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SteerReceipt {
    /// The agent's session exists; the steer enters its conversation at the next turn
    /// boundary.
    Delivered,
    /// The agent's session does not exist yet; the steer waits, in order, until it starts.
    Queued,
}

/// Messages of the tree's actors.
#[derive(Debug)]
pub(crate) enum AgentMsg {
    /// The agent's model turn task ended (sent by the agent's own task).
    TurnFinished { turn: u32, result: TurnResult },
    /// One of the agent's tool tasks ended.
    ToolFinished {
        turn: u32,
        /// The call's place in its turn: calls are keyed by position, never by the model's
        /// call id, which need not be unique (some servers send `""` for every call).
        index: usize,
        result: Result<String, String>,
    },
    /// The agent's cancellation token fired (an abort reached it or its subtree).
    Cancelled,
    /// Text for the agent's conversation at its next turn boundary.
    Steer {
        text: String,
        reply: Option<RpcReplyPort<Result<SteerReceipt, ControlError>>>,
    },
    /// A child has settled; its outcome is in the registry (sent by the child itself, after
    /// its last usage was recorded).
    ChildSettled { child: AgentId },
    /// A child asks its owner a question (`ask_owner`); a steer to the child answers it.
    Asked { child: AgentId, question: String },
    /// The owner cannot answer the agent's pending `ask_owner` question.
    AskRefused { reason: String },
    /// The pool may have free slots (root only): start queued agents.
    PoolChanged,
    /// The agent's start hooks finished (`Err` with the first failure).
    StartDone { result: Result<(), String> },
    /// The agent's shutdown hooks finished or hit the deadline; failures in order.
    HooksDone { failures: Vec<String> },
}
