//! The call log the scripted and the driven model share: what each model call was asked,
//! when, and how it ended.

use std::sync::Arc;

use agent_tree_protocol::{AgentId, Message, Role};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::model::ModelRequest;

/// How a logged model call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallEnd {
    /// Not yet: the call is still running.
    InFlight,
    /// The model returned a response.
    Returned,
    /// The model returned an error.
    Failed,
    /// The call's future was dropped before it ended: an abort, a shutdown, a kill (or a
    /// panic in the model).
    Dropped,
}

/// One logged model call.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ModelCall {
    /// The agent.
    pub agent: AgentId,
    /// Its type.
    pub agent_type: String,
    /// Its depth.
    pub depth: u32,
    /// Which run of the agent.
    pub incarnation: u32,
    /// The turn number within its run.
    pub turn: u32,
    /// When the call was made (tokio time).
    pub at: Instant,
    /// The names of the tools the agent was offered.
    pub tools: Vec<String>,
    /// The tool results the call received (the tool messages after the last assistant
    /// message), with the error flag the runtime set.
    pub results: Vec<Message>,
    /// How it ended.
    pub end: CallEnd,
}

/// Every model call of a [`ScriptedModel`](super::ScriptedModel) or a
/// [`DrivenModel`](super::DrivenModel), in the order made. Cheap to clone: clones share the
/// log. The lock is a leaf: only the list is touched under it.
///
/// ```
/// use agent_tree_actors::testkit::{CallEnd, Script, ScriptedModel, Turn};
/// use agent_tree_actors::{Catalog, Tree};
/// use agent_tree_protocol::{AgentDefinition, SpawnRequest};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
/// let model = ScriptedModel::new().script("w", Script::new([Turn::hang()]));
/// let log = model.call_log();
/// let catalog = Catalog::new([AgentDefinition::new("w", "")]).unwrap();
/// let tree = Tree::builder().catalog(catalog).model(model).build().await.unwrap();
/// let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
/// tokio::time::sleep(std::time::Duration::from_millis(5)).await;
/// tree.abort(w.id()).unwrap();
/// w.outcome().await;
/// assert_eq!(log.calls()[0].end, CallEnd::Dropped);
/// # });
/// ```
#[derive(Clone, Debug, Default)]
pub struct CallLog(Arc<Mutex<Vec<ModelCall>>>);

impl CallLog {
    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<ModelCall> {
        self.0.lock().clone()
    }

    /// The calls of `agent`, in order.
    pub fn of(&self, agent: AgentId) -> Vec<ModelCall> {
        self.0
            .lock()
            .iter()
            .filter(|c| c.agent == agent)
            .cloned()
            .collect()
    }

    /// How many calls were made.
    pub fn len(&self) -> usize {
        self.0.lock().len()
    }

    /// Whether no call was made.
    pub fn is_empty(&self) -> bool {
        self.0.lock().is_empty()
    }

    /// Logs the start of a call of `request`; the entry's end is set when the returned
    /// guard is finished or dropped.
    pub(crate) fn start(&self, request: &ModelRequest) -> LoggedCall {
        let mut calls = self.0.lock();
        calls.push(ModelCall {
            agent: request.agent,
            agent_type: request.agent_type().to_owned(),
            depth: request.depth,
            incarnation: request.incarnation,
            turn: request.turn,
            at: Instant::now(),
            tools: request.tools.iter().map(|t| t.name.clone()).collect(),
            results: latest_results(&request.messages),
            end: CallEnd::InFlight,
        });
        LoggedCall {
            log: self.clone(),
            index: calls.len() - 1,
            done: false,
        }
    }
}

/// A call in the log: [`LoggedCall::finish`] records how it ended; dropped unfinished, it
/// was dropped.
pub(crate) struct LoggedCall {
    log: CallLog,
    index: usize,
    done: bool,
}

impl LoggedCall {
    pub(crate) fn finish<T, E>(mut self, result: &Result<T, E>) {
        self.set(if result.is_ok() {
            CallEnd::Returned
        } else {
            CallEnd::Failed
        });
    }

    fn set(&mut self, end: CallEnd) {
        self.done = true;
        if let Some(call) = self.log.0.lock().get_mut(self.index) {
            call.end = end;
        }
    }
}

impl Drop for LoggedCall {
    fn drop(&mut self) {
        if !self.done {
            self.set(CallEnd::Dropped);
        }
    }
}

/// The tool messages after the last assistant message.
fn latest_results(messages: &[Message]) -> Vec<Message> {
    let start = messages
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .map_or(messages.len(), |i| i + 1);
    messages[start..]
        .iter()
        .filter(|m| m.role == Role::Tool)
        .cloned()
        .collect()
}
