//! The call log the scripted and the driven model share: what each model call was asked,
//! when, and how it ended.

use std::sync::Arc;
use std::time::Duration;

use agent_tree_protocol::{AgentDefinition, AgentId, Message, Role, ToolCall};
use parking_lot::Mutex;
use tokio::sync::watch;
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
    /// Which incarnation of the agent (restarts count up; a resume keeps it).
    pub incarnation: u32,
    /// Which run of the agent (1 for the first; restarts and resumes count up).
    pub run: u32,
    /// The turn number within its run.
    pub turn: u32,
    /// The agent's definition (shared with the request).
    pub definition: Arc<AgentDefinition>,
    /// The whole conversation sent (shared with the request, not copied).
    pub messages: Arc<[Message]>,
    /// When the call was made (tokio time).
    pub at: Instant,
    /// When it ended (returned, failed or was dropped), if it has.
    pub ended_at: Option<Instant>,
    /// The names of the tools the agent was offered.
    pub tools: Vec<String>,
    /// The tool results the call received (the tool messages after the last assistant
    /// message), with the error flag the runtime set.
    pub results: Vec<Message>,
    /// How it ended.
    pub end: CallEnd,
}

impl ModelCall {
    /// The system prompt sent.
    pub fn system(&self) -> &str {
        &self.definition.prompt
    }

    /// The tool result answering the tool call `call_id`, anywhere in the conversation.
    pub fn tool_result(&self, call_id: &str) -> Option<&Message> {
        self.messages
            .iter()
            .find(|m| m.role == Role::Tool && m.tool_call_id.as_deref() == Some(call_id))
    }

    /// Whether the conversation holds a user message of exactly `text` (a task, a steer).
    pub fn has_user_message(&self, text: &str) -> bool {
        self.messages
            .iter()
            .any(|m| m.role == Role::User && m.content == text)
    }

    /// The tool calls of the conversation's last assistant message, each with the result
    /// that answered it, in call order (calls without a result are left out).
    pub fn answered_calls(&self) -> Vec<(ToolCall, Message)> {
        let Some(last) = self
            .messages
            .iter()
            .rposition(|m| m.role == Role::Assistant)
        else {
            return Vec::new();
        };
        let tail = &self.messages[last + 1..];
        self.messages[last]
            .tool_calls
            .iter()
            .filter_map(|call| {
                tail.iter()
                    .find(|m| m.role == Role::Tool && m.tool_call_id.as_deref() == Some(&call.id))
                    .map(|m| (call.clone(), m.clone()))
            })
            .collect()
    }
}

/// Every model call of a [`ScriptedModel`](super::ScriptedModel) or a
/// [`DrivenModel`](super::DrivenModel), in the order made; a model wrapper of your own can
/// log into one too ([`CallLog::record`]). Cheap to clone: clones share the log. The lock is
/// a leaf: only the list is touched under it; waiters are woken after it is released.
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
#[derive(Clone, Debug)]
pub struct CallLog(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    calls: Mutex<Vec<ModelCall>>,
    /// Bumped after every change, for [`CallLog::until`].
    changed: watch::Sender<u64>,
}

impl Default for CallLog {
    fn default() -> Self {
        CallLog(Arc::new(Shared {
            calls: Mutex::new(Vec::new()),
            changed: watch::channel(0).0,
        }))
    }
}

impl CallLog {
    /// How long [`CallLog::until`] waits (virtual time under a paused clock).
    pub const EXPECT_WITHIN: Duration = Duration::from_secs(3600);

    /// An empty log.
    pub fn new() -> Self {
        CallLog::default()
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<ModelCall> {
        self.0.calls.lock().clone()
    }

    /// The calls of `agent`, in order.
    pub fn of(&self, agent: AgentId) -> Vec<ModelCall> {
        self.0
            .calls
            .lock()
            .iter()
            .filter(|c| c.agent == agent)
            .cloned()
            .collect()
    }

    /// How many calls `agent` made.
    pub fn count_of(&self, agent: AgentId) -> usize {
        self.0
            .calls
            .lock()
            .iter()
            .filter(|c| c.agent == agent)
            .count()
    }

    /// How many calls were made.
    pub fn len(&self) -> usize {
        self.0.calls.lock().len()
    }

    /// Whether no call was made.
    pub fn is_empty(&self) -> bool {
        self.0.calls.lock().is_empty()
    }

    /// Waits until `done` holds over the calls (checked now and after every change), for
    /// at most [`CallLog::EXPECT_WITHIN`]. `done` runs under the log's lock: it must only
    /// look at the calls.
    ///
    /// # Panics
    ///
    /// When it does not hold in time, naming `what` and listing the calls made.
    pub async fn until(&self, what: &str, mut done: impl FnMut(&[ModelCall]) -> bool) {
        let mut changes = self.0.changed.subscribe();
        let shared = self.0.clone();
        let wait = changes.wait_for(move |_| done(&shared.calls.lock()));
        if tokio::time::timeout(Self::EXPECT_WITHIN, wait)
            .await
            .is_err()
        {
            let calls: Vec<String> = self
                .calls()
                .iter()
                .map(|c| {
                    format!(
                        "{} ({}) run {} turn {} {:?}",
                        c.agent, c.agent_type, c.run, c.turn, c.end
                    )
                })
                .collect();
            panic!(
                "timed out waiting for {what}; {} calls made: {}",
                calls.len(),
                calls.join(", ")
            );
        }
    }

    /// Waits until `agent` has made at least `n` calls (as [`CallLog::until`]).
    ///
    /// # Panics
    ///
    /// As [`CallLog::until`].
    pub async fn until_calls(&self, agent: AgentId, n: usize) {
        self.until(&format!("{agent} to make {n} model calls"), |calls| {
            calls.iter().filter(|c| c.agent == agent).count() >= n
        })
        .await;
    }

    /// Logs the start of a call of `request`, for a model wrapper of your own: finish the
    /// returned [`LoggedCall`] with the call's result; dropped unfinished, the call is logged
    /// as dropped.
    ///
    /// ```
    /// use agent_tree_actors::testkit::{CallEnd, CallLog};
    /// use agent_tree_actors::{Model, ModelError, ModelRequest, ModelResponse, BoxFuture};
    ///
    /// struct Echo(CallLog);
    /// impl Model for Echo {
    ///     fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
    ///         let logged = self.0.record(&request);
    ///         Box::pin(async move {
    ///             let result = Ok(ModelResponse::text(request.messages[0].content.clone()));
    ///             logged.finish(&result);
    ///             result
    ///         })
    ///     }
    /// }
    /// # let _ = (Echo(CallLog::new()), CallEnd::Returned);
    /// ```
    pub fn record(&self, request: &ModelRequest) -> LoggedCall {
        let index = {
            let mut calls = self.0.calls.lock();
            calls.push(ModelCall {
                agent: request.agent,
                agent_type: request.agent_type().to_owned(),
                depth: request.depth,
                incarnation: request.incarnation,
                run: request.run,
                turn: request.turn,
                definition: request.definition.clone(),
                messages: request.messages.clone(),
                at: Instant::now(),
                ended_at: None,
                tools: request.tools.iter().map(|t| t.name.clone()).collect(),
                results: latest_results(&request.messages),
                end: CallEnd::InFlight,
            });
            calls.len() - 1
        };
        self.0.changed.send_modify(|n| *n += 1);
        LoggedCall {
            log: self.clone(),
            index,
            done: false,
        }
    }
}

/// A call in a [`CallLog`]: [`LoggedCall::finish`] records how it ended; dropped
/// unfinished, it was dropped.
#[derive(Debug)]
pub struct LoggedCall {
    log: CallLog,
    index: usize,
    done: bool,
}

impl LoggedCall {
    /// Records the call's end: returned, or failed.
    pub fn finish<T, E>(mut self, result: &Result<T, E>) {
        self.set(if result.is_ok() {
            CallEnd::Returned
        } else {
            CallEnd::Failed
        });
    }

    fn set(&mut self, end: CallEnd) {
        self.done = true;
        if let Some(call) = self.log.0.calls.lock().get_mut(self.index) {
            call.end = end;
            call.ended_at = Some(Instant::now());
        }
        self.log.0.changed.send_modify(|n| *n += 1);
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
