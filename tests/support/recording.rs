//! The recording model of the integration tests, and the one weak tree cell.
//!
//! [`RecordingModel`] wraps a [`ScriptedModel`] and logs every call in the test kit's
//! [`CallLog`] (the whole request, when it started, when and how it ended). What is
//! particular to this crate's tests: a hook may look at each request first and may answer it
//! itself, and with narration on a tool-calling turn also carries the text
//! `"<agent> turn <n>"`.
//!
//! [`TreeCell`] gives code running inside the tree (a tool, a hook, a model) the tree it runs
//! in, held weakly so it never keeps the tree alive.

use std::fmt;
use std::sync::{Arc, OnceLock, Weak};

use agent_tree::BoxFuture;
use agent_tree::prelude::*;
use agent_tree::protocol::TreeSnapshot;
use agent_tree::testkit::{CallLog, ModelCall, ScriptedModel};

/// The turn of each model call an agent type made, and the tree as it was at that call
/// ([`RecordingModel::snapshotting`]).
pub(crate) type SnapshotsAtCalls = Arc<parking_lot::Mutex<Vec<(u32, TreeSnapshot)>>>;

type Hook = dyn Fn(&ModelRequest) -> Option<Result<ModelResponse, ModelError>> + Send + Sync;

/// A model that logs every call and delegates the answer to a [`ScriptedModel`] (see the
/// module docs). Clones share the script, its cursors and the log.
#[derive(Clone)]
pub(crate) struct RecordingModel {
    /// The scripted model answering.
    pub(crate) scripted: ScriptedModel,
    hook: Option<Arc<Hook>>,
    narrate: bool,
    log: CallLog,
}

impl fmt::Debug for RecordingModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordingModel")
            .field("calls", &self.log.len())
            .finish_non_exhaustive()
    }
}

impl RecordingModel {
    /// Records around `scripted`.
    pub(crate) fn new(scripted: ScriptedModel) -> Self {
        RecordingModel {
            scripted,
            hook: None,
            narrate: false,
            log: CallLog::new(),
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

    /// Records, at each model call of an agent of `agent_type`, its turn and a snapshot of the
    /// tree in `cell`, into the list returned beside the model (it replaces any hook).
    pub(crate) fn snapshotting(
        self,
        agent_type: &'static str,
        cell: &TreeCell,
    ) -> (Self, SnapshotsAtCalls) {
        let snapshots = SnapshotsAtCalls::default();
        let (cell, log) = (cell.clone(), snapshots.clone());
        let model = self.with_hook(move |request| {
            if request.agent_type() == agent_type {
                log.lock().push((request.turn, cell.snapshot()));
            }
            None
        });
        (model, snapshots)
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

    /// The log itself.
    pub(crate) fn log(&self) -> &CallLog {
        &self.log
    }

    /// Every call so far, in the order made.
    pub(crate) fn calls(&self) -> Vec<ModelCall> {
        self.log.calls()
    }

    /// The calls `agent` made, in order.
    pub(crate) fn calls_of(&self, agent: AgentId) -> Vec<ModelCall> {
        self.log.of(agent)
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
        self.log.count_of(agent)
    }

    /// How many calls were made in total.
    pub(crate) fn count(&self) -> usize {
        self.log.len()
    }

    /// Waits until `agent` has made at least `n` calls.
    pub(crate) async fn until_calls(&self, agent: AgentId, n: usize) {
        self.log.until_calls(agent, n).await;
    }

    /// Waits until every agent of `agents` has made at least `n` calls.
    pub(crate) async fn until_all_calls(&self, agents: &[AgentId], n: usize) {
        self.log
            .until(
                &format!("{agents:?} to make {n} model calls each"),
                |calls| {
                    agents
                        .iter()
                        .all(|&a| calls.iter().filter(|c| c.agent == a).count() >= n)
                },
            )
            .await;
    }

    /// Waits until `pred` holds over the calls.
    pub(crate) async fn until(&self, what: &str, pred: impl FnMut(&[ModelCall]) -> bool) {
        self.log.until(what, pred).await;
    }
}

impl Model for RecordingModel {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        let (agent, turn) = (request.agent, request.turn);
        let logged = self.log.record(&request);
        if let Some(answer) = self.hook.as_ref().and_then(|hook| hook(&request)) {
            logged.finish(&answer);
            return Box::pin(std::future::ready(answer));
        }
        let narrate = self.narrate;
        Box::pin(async move {
            let mut result = self.scripted.turn(request).await;
            logged.finish(&result);
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

    /// Shares `tree` behind an [`Arc`] and points this cell at it.
    pub(crate) fn share(&self, tree: Tree) -> Arc<Tree> {
        let tree = Arc::new(tree);
        self.set(&tree);
        tree
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
