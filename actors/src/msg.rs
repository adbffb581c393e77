//! The one message type of the tree's actors (root and agents).
//!
//! Kept in one place and small: enabling ractor's `cluster` feature later needs an explicit
//! `Message` impl for it. Commands are imperative (`Steer`, `Cancel`, `Shutdown`); notices
//! are past tense (`ToolFinished`, `ChildEnded`).

use agent_tree_protocol::{AgentId, Outcome};
use ractor::RpcReplyPort;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{ControlError, ModelError};
use crate::model::ModelResponse;

/// The reason an agent's actor stops with once it has settled. Its owner, seeing ractor's
/// termination event with this reason, knows the [`AgentMsg::ChildEnded`] notice is on its
/// way (ractor's supervision events overtake user messages) and waits for it; any other
/// termination of a child that has not settled is a lost actor.
pub(crate) const SETTLED: &str = "agent-tree: settled";

/// How a model turn ended.
#[derive(Debug)]
pub(crate) enum TurnResult {
    Response(ModelResponse),
    /// Boxed: a model error is several times a response's size, and rare.
    Failed(Box<ModelError>),
    Panicked(String),
    Cancelled,
}

/// Where a steer went.
///
/// ```
/// use agent_tree_actors::SteerReceipt;
/// assert_eq!(serde_json::to_string(&SteerReceipt::Delivered).unwrap(), "\"delivered\"");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SteerReceipt {
    /// The agent's session exists and took the steer: it enters its conversation at the
    /// next turn boundary, or answered its pending question.
    Delivered,
    /// The agent's session does not exist yet; the steer waits, in order, until it starts.
    Queued,
}

/// What an agent's shutdown hooks report to the shutdown that ordered them when they finish
/// (or hit the deadline): the agent and the failures, in order.
pub(crate) type HookReport = (AgentId, Vec<String>);

/// The agents that started their shutdown hooks under one order, with their actors.
pub(crate) type Hooked =
    std::sync::Arc<parking_lot::Mutex<Vec<(AgentId, ractor::ActorRef<AgentMsg>)>>>;

/// A shutdown's order to every agent it reaches, all at once: one shared value (a shutdown of
/// 100k agents hands it to each agent and to each agent's registry entry, and a clone is
/// one reference count, not one per field).
#[derive(Clone, Debug)]
pub(crate) struct ShutdownOrder(std::sync::Arc<Order>);

impl ShutdownOrder {
    pub(crate) fn new(order: Order) -> Self {
        ShutdownOrder(std::sync::Arc::new(order))
    }
}

impl std::ops::Deref for ShutdownOrder {
    type Target = Order;

    fn deref(&self) -> &Order {
        &self.0
    }
}

/// What a [`ShutdownOrder`] holds.
#[derive(Debug)]
pub(crate) struct Order {
    /// The one deadline of the whole subtree.
    pub(crate) deadline: Instant,
    /// Where finished hooks' failures go.
    pub(crate) reports: mpsc::UnboundedSender<HookReport>,
    /// Cancelled at the deadline, after the kill: hook tasks still running end with it.
    pub(crate) killed: CancellationToken,
    /// Cancelled a little after the deadline by one timer of the shutdown's (a backstop,
    /// should the shutdown itself be dropped before its kill): hook tasks still running then
    /// report that their hooks did not finish, and their agents end. One timer per
    /// shutdown, not one per agent.
    pub(crate) overdue: CancellationToken,
    /// The agents that started their hooks under this order: the shutdown's report counts
    /// them as started, and the backstop tells each its hooks are over (a hook blocking its
    /// thread never sees `overdue`). A leaf lock: only pushed to and drained.
    pub(crate) hooked: Hooked,
}

/// Messages of the tree's actors.
#[derive(Debug)]
pub(crate) enum AgentMsg {
    // Notices from the agent's own work.
    /// The agent's model turn `turn` was woken: poll it (its waker sends at most one of
    /// these between polls, however often the turn is woken).
    PollTurn { turn: u32 },
    /// One of the agent's tool tasks ended.
    ToolFinished {
        turn: u32,
        /// The call's place in its turn: calls are keyed by position, never by the model's
        /// call id, which need not be unique (some servers send `""` for every call).
        index: usize,
        result: Result<String, String>,
    },
    /// The agent's start hooks finished (`Err` with the first failure).
    StartHooksFinished { result: Result<(), String> },
    /// The agent's shutdown hooks finished or hit the deadline; failures in order.
    ShutdownHooksFinished { failures: Vec<String> },

    // Commands.
    /// Its cancellation token fired (an abort reached it or its subtree): the registry tells
    /// every actor a cancellation reaches, so no task waits on the token for it.
    Cancel,
    /// A shutdown reached it: run the shutdown hooks under the deadline, then end.
    Shutdown(ShutdownOrder),
    /// Text for the agent's conversation at its next turn boundary, or the answer to its
    /// pending `ask_owner` question when `from` is its owner (the application, `a0`, for a
    /// top-level agent): the one its question went to. Any other sender's steer (the
    /// application's to a nested agent, an ancestor's under `ControlScope::Descendants`)
    /// waits for the next turn boundary.
    Steer {
        text: String,
        from: AgentId,
        reply: Option<RpcReplyPort<Result<SteerReceipt, ControlError>>>,
    },

    // Notices from other actors.
    /// Run `run` of a child ended with `outcome` (sent by the child after its last usage and
    /// its settle were recorded, or by the root for a detached child that died). `deferred`:
    /// the exit awaits this owner's restart decision.
    ChildEnded {
        child: AgentId,
        run: u32,
        outcome: Outcome,
        deferred: bool,
    },
    /// A released output of a final child, read back from the journal for the calls that
    /// wait on it.
    OutputRead { child: AgentId, outcome: Outcome },
    /// A child asks its owner a question (`ask_owner`); a steer to the child answers it.
    ChildAsked {
        child: AgentId,
        question: String,
        /// Which question: the asker's run and turn (one question per turn at most).
        asked: (u32, u32),
    },
    /// The owner cannot answer the agent's pending `ask_owner` question.
    QuestionRefused { reason: String },
    /// The application's question handler answered the agent's pending question (dropped
    /// when a steer answered it first).
    QuestionAnswered { answer: String, asked: (u32, u32) },
    /// The pool may have free slots (root only): start queued agents.
    PoolChanged,
    /// Something for the actor a placement started in an agent's place (a remote child's
    /// stand-in: its edge's frames, ticks, the peer's session coming and going), which only
    /// that actor reads; agents ignore it.
    #[cfg_attr(
        not(feature = "cluster"),
        allow(dead_code, reason = "only a placement sends it")
    )]
    Placed(Placed),
}

/// The body of [`AgentMsg::Placed`]: a message of the placement's own type, which the core
/// never reads.
pub(crate) struct Placed(pub(crate) Box<dyn std::any::Any + Send>);

impl std::fmt::Debug for Placed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The type of what it carries (a message's contents may be large).
        f.debug_tuple("Placed").field(&(*self.0).type_id()).finish()
    }
}

/// Sends `actor` the message `build` makes around a reply port and waits for the reply, or
/// for the actor to exit (`None` then, or when the send is refused).
///
/// Never a bare `ractor::call!`: a message sent in the instant its actor exits can be left in
/// the dead mailbox without being dropped (the channel lives as long as any reference to the
/// actor, and the registry keeps one), so its reply port would never close and a caller
/// waiting for the reply alone would wait forever.
pub(crate) async fn ask<R: Send + 'static>(
    actor: &ractor::ActorRef<AgentMsg>,
    build: impl FnOnce(RpcReplyPort<R>) -> AgentMsg,
) -> Option<R> {
    let (tx, mut rx) = ractor::concurrency::oneshot();
    actor.send_message(build(tx.into())).ok()?;
    tokio::select! {
        biased;
        reply = &mut rx => reply.ok(),
        // A reply sent just before the exit still counts.
        () = async { let _ = actor.get_cell().wait(None).await; } => rx.try_recv().ok(),
    }
}
