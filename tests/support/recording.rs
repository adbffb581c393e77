//! The one recording model of the integration tests, and the one weak tree cell.
//!
//! [`RecordingModel`] wraps a [`ScriptedModel`] and records every call: the whole request,
//! when the call started, and when and how its future ended (returned, or dropped by a
//! cancellation). A hook may look at each request first and may answer it itself; with
//! narration on, a tool-calling turn also carries the text `"<agent> turn <n>"`. A test can
//! await "agent X has made its n-th model call" without polling.
//!
//! [`TreeCell`] gives code running inside the tree (a tool, a hook, a model) the tree it runs
//! in, held weakly so it never keeps the tree alive.

use std::fmt;
use std::sync::{Arc, OnceLock, Weak};

use agent_tree::BoxFuture;
use agent_tree::prelude::*;
use agent_tree::protocol::{Message, Role, TreeSnapshot};
use agent_tree::testkit::ScriptedModel;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use super::harness::GUARD;
use super::{ToolResult, tool_results};

/// How a recorded model call's future ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CallEnd {
    /// It is still in flight.
    InFlight,
    /// It returned (an answer, tool calls or a model error).
    Returned,
    /// Its future was dropped before returning: the turn was cancelled.
    Dropped,
}

/// One model call as the tree made it.
#[derive(Clone, Debug)]
pub(crate) struct ModelCall {
    /// The agent.
    pub(crate) agent: AgentId,
    /// Its type.
    pub(crate) agent_type: String,
    /// Its depth.
    pub(crate) depth: u32,
    /// Which run of the agent.
    pub(crate) incarnation: u32,
    /// The turn within that run.
    pub(crate) turn: u32,
    /// The system prompt.
    pub(crate) system: String,
    /// The whole conversation sent.
    pub(crate) messages: Vec<Message>,
    /// The names of the tools offered.
    pub(crate) tools: Vec<String>,
    /// When the call started (tokio time).
    pub(crate) at: Instant,
    /// When its future ended, if it has.
    pub(crate) ended_at: Option<Instant>,
    /// How it ended.
    pub(crate) end: CallEnd,
}

impl ModelCall {
    /// The tool result answering `call_id` in this request's conversation.
    pub(crate) fn tool_result(&self, call_id: &str) -> Option<ToolResult> {
        tool_results(&self.messages)
            .into_iter()
            .find(|r| r.call_id == call_id)
    }

    /// Whether the conversation holds a user message with exactly `text`.
    pub(crate) fn has_user_message(&self, text: &str) -> bool {
        self.messages
            .iter()
            .any(|m| m.role == Role::User && m.content == text)
    }
}

type Hook = dyn Fn(&ModelRequest) -> Option<Result<ModelResponse, ModelError>> + Send + Sync;

#[derive(Default)]
struct Log {
    calls: Mutex<Vec<ModelCall>>,
    changed: OnceLock<watch::Sender<u64>>,
}

impl Log {
    fn bump(&self) {
        self.changed
            .get_or_init(|| watch::channel(0).0)
            .send_modify(|n| *n += 1);
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.get_or_init(|| watch::channel(0).0).subscribe()
    }
}

/// A model that records every call and delegates the answer to a [`ScriptedModel`] (see the
/// module docs). Clones share the script, its cursors and the log.
#[derive(Clone)]
pub(crate) struct RecordingModel {
    /// The scripted model answering.
    pub(crate) scripted: ScriptedModel,
    hook: Option<Arc<Hook>>,
    narrate: bool,
    log: Arc<Log>,
}

impl fmt::Debug for RecordingModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordingModel")
            .field("calls", &self.log.calls.lock().len())
            .finish_non_exhaustive()
    }
}

/// Records the end of one call when the call's future finishes or is dropped.
struct EndGuard {
    log: Arc<Log>,
    index: usize,
    returned: bool,
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        if let Some(call) = self.log.calls.lock().get_mut(self.index) {
            call.ended_at = Some(Instant::now());
            call.end = if self.returned {
                CallEnd::Returned
            } else {
                CallEnd::Dropped
            };
        }
        self.log.bump();
    }
}

impl RecordingModel {
    /// Records around `scripted`.
    pub(crate) fn new(scripted: ScriptedModel) -> Self {
        RecordingModel {
            scripted,
            hook: None,
            narrate: false,
            log: Arc::default(),
        }
    }

    /// Runs `hook` on every request before the scripted model; when it returns `Some`, that
    /// is the turn's response and the script is not consulted.
    pub(crate) fn with_hook(
        mut self,
        hook: impl Fn(&ModelRequest) -> Option<Result<ModelResponse, ModelError>>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// Gives every scripted tool-calling turn without text the text `"<agent> turn <n>"`.
    pub(crate) fn narrated(mut self) -> Self {
        self.narrate = true;
        self
    }

    /// The text a narrated tool-calling turn of `agent` carries.
    pub(crate) fn narration(agent: AgentId, turn: u32) -> String {
        format!("{agent} turn {turn}")
    }

    /// Every call so far, in the order made.
    pub(crate) fn calls(&self) -> Vec<ModelCall> {
        self.log.calls.lock().clone()
    }

    /// The calls `agent` made, in order.
    pub(crate) fn calls_of(&self, agent: AgentId) -> Vec<ModelCall> {
        self.log
            .calls
            .lock()
            .iter()
            .filter(|c| c.agent == agent)
            .cloned()
            .collect()
    }

    /// `agent`'s call for turn `turn` (the first, over several runs).
    pub(crate) fn request(&self, agent: AgentId, turn: u32) -> ModelCall {
        self.calls_of(agent)
            .into_iter()
            .find(|c| c.turn == turn)
            .unwrap_or_else(|| panic!("{agent} made no request for turn {turn}"))
    }

    /// How many calls `agent` made.
    pub(crate) fn count_of(&self, agent: AgentId) -> usize {
        self.log
            .calls
            .lock()
            .iter()
            .filter(|c| c.agent == agent)
            .count()
    }

    /// How many calls were made in total.
    pub(crate) fn count(&self) -> usize {
        self.log.calls.lock().len()
    }

    /// Waits (under [`GUARD`]) until `agent` has made at least `n` calls.
    pub(crate) async fn until_calls(&self, agent: AgentId, n: usize) {
        self.until(&format!("{agent} to make {n} model calls"), |calls| {
            calls.iter().filter(|c| c.agent == agent).count() >= n
        })
        .await;
    }

    /// Waits (under [`GUARD`]) until every agent of `agents` has made at least `n` calls.
    pub(crate) async fn until_all_calls(&self, agents: &[AgentId], n: usize) {
        self.until(
            &format!("{agents:?} to make {n} model calls each"),
            |calls| {
                agents
                    .iter()
                    .all(|&a| calls.iter().filter(|c| c.agent == a).count() >= n)
            },
        )
        .await;
    }

    /// Waits (under [`GUARD`]) until `pred` holds over the calls.
    pub(crate) async fn until(&self, what: &str, mut pred: impl FnMut(&[ModelCall]) -> bool) {
        let mut changes = self.log.subscribe();
        let log = self.log.clone();
        let wait = changes.wait_for(move |_| pred(&log.calls.lock()));
        match tokio::time::timeout(GUARD, wait).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => panic!("the model was dropped while waiting for {what}"),
            Err(_) => panic!("timed out waiting for {what}"),
        }
    }
}

impl Model for RecordingModel {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        let (agent, turn) = (request.agent, request.turn);
        let index = {
            let mut calls = self.log.calls.lock();
            calls.push(ModelCall {
                agent,
                agent_type: request.agent_type().to_owned(),
                depth: request.depth,
                incarnation: request.incarnation,
                turn,
                system: request.system().to_owned(),
                messages: request.messages.to_vec(),
                tools: request.tools.iter().map(|t| t.name.clone()).collect(),
                at: Instant::now(),
                ended_at: None,
                end: CallEnd::InFlight,
            });
            calls.len() - 1
        };
        self.log.bump();
        let mut guard = EndGuard {
            log: self.log.clone(),
            index,
            returned: false,
        };
        if let Some(answer) = self.hook.as_ref().and_then(|hook| hook(&request)) {
            return Box::pin(async move {
                guard.returned = true;
                drop(guard);
                answer
            });
        }
        let narrate = self.narrate;
        Box::pin(async move {
            let mut result = self.scripted.turn(request).await;
            guard.returned = true;
            drop(guard);
            if let Ok(response) = &mut result {
                if narrate && !response.tool_calls.is_empty() && response.text.is_empty() {
                    response.text = RecordingModel::narration(agent, turn);
                }
            }
            result
        })
    }
}

/// A weak handle on the tree, for tools, hooks and models that need to call it or look at
/// it: set it once the tree is built. Holds the tree weakly, so it never keeps it alive.
#[derive(Clone, Default)]
pub(crate) struct TreeCell {
    tree: Arc<OnceLock<Weak<Tree>>>,
}

impl fmt::Debug for TreeCell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TreeCell").finish_non_exhaustive()
    }
}

impl TreeCell {
    /// An empty cell.
    pub(crate) fn new() -> Self {
        TreeCell::default()
    }

    /// Points the cell at `tree`.
    pub(crate) fn set(&self, tree: &Arc<Tree>) {
        self.tree
            .set(Arc::downgrade(tree))
            .expect("the cell is set once");
    }

    /// The tree, while it is alive.
    pub(crate) fn get(&self) -> Option<Arc<Tree>> {
        self.tree.get().and_then(Weak::upgrade)
    }

    /// The tree's snapshot now.
    pub(crate) fn snapshot(&self) -> TreeSnapshot {
        self.get()
            .expect("the cell is set and the tree is alive")
            .snapshot()
    }
}
