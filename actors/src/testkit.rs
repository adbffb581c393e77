//! Test support: a scripted, deterministic model, a model a test drives turn by turn
//! ([`pair`]), probes standing in for an agent's owner ([`OwnerProbe`]) or its children
//! ([`probe_children`]), event expectations ([`EventProbe`]), fault injection and seeded
//! experiments. The guide is [`guide`].
//!
//! A [`ScriptedModel`] plays a [`Script`] of [`Turn`]s per agent type (or per agent): answer
//! with text, call tools (spawn a child in the foreground or background, read or steer a
//! child, call a user tool), report usage, fail, panic, take (virtual) time, or hang until
//! cancelled. Every call is logged, so tests can count model calls, e.g. after an abort.
//!
//! Each agent walks its own cursor through its script, across restarts; a script that runs
//! out fails the agent with a clear model error instead of inventing an answer.
//!
//! ```
//! use agent_tree_actors::testkit::{Call, Script, ScriptedModel, Target, Turn};
//! use agent_tree_protocol::Usage;
//!
//! let model = ScriptedModel::new()
//!     .script("lead", Script::new([
//!         // three background children at once, then wait for the first one's result
//!         Turn::calls([
//!             Call::spawn_background("worker", "a"),
//!             Call::spawn_background("worker", "b"),
//!             Call::spawn_background("worker", "c"),
//!         ]),
//!         Turn::calls([Call::result(Target::Spawned(0))]),
//!         Turn::answer("all done").usage(Usage::tokens(50, 10)),
//!     ]))
//!     .script("worker", Script::new([Turn::answer("ok")]));
//! assert_eq!(model.calls(), 0);
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use agent_tree_protocol::{AgentId, Message, Role, ToolCall, Usage};
use parking_lot::Mutex;
use serde_json::json;

mod driven;
pub mod experiment;
mod log;
pub use log::{CallEnd, CallLog, LoggedCall, ModelCall};
#[doc = include_str!("../../docs/testing.md")]
pub mod guide {}
mod children;
mod closure;
mod faults;
mod owner;
mod probe;
mod store;
pub use children::{ChildProbe, ProbedModel, SpawnedChild, probe_children};
pub use closure::FnModel;
pub use driven::{DrivenModel, ModelHandle, PendingTurn, pair};
pub use faults::{
    FaultyModel, FaultyTool, KillSwitch, Killed, failing_hook, hanging_hook, kill_when,
    panicking_hook,
};
pub use owner::{OwnerMessage, OwnerProbe, OwnerQuestion};
pub use probe::{EventProbe, Fish};
pub use store::MemoryJournal;

/// Moves virtual time forward by `by` under a paused clock, running everything that comes
/// due meanwhile in order, each timer at its own instant: "the worker's two seconds pass".
/// It is a sleep of the test's task, so work due at the very end of `by` may still be in
/// flight when it returns (advance a millisecond more to see it done), and on a real clock
/// it takes real time.
///
/// ```
/// use std::time::Duration;
/// use agent_tree_actors::testkit::{advance, Script, ScriptedModel, Turn};
/// use agent_tree_actors::{Catalog, Tree};
/// use agent_tree_protocol::{AgentDefinition, SpawnRequest};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
/// let model = ScriptedModel::new()
///     .script("w", Script::new([Turn::answer("ok").after(Duration::from_secs(2))]));
/// let catalog = Catalog::new([AgentDefinition::new("w", "")]).unwrap();
/// let tree = Tree::builder().catalog(catalog).model(model).build().await.unwrap();
/// let w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
/// advance(Duration::from_millis(1999)).await;
/// assert!(w.try_outcome().is_none());
/// advance(Duration::from_millis(2)).await;
/// assert_eq!(w.try_outcome().unwrap().text.as_deref(), Some("ok"));
/// # });
/// ```
pub async fn advance(by: Duration) {
    tokio::time::sleep(by).await;
}

use crate::error::ModelError;
use crate::model::{Model, ModelRequest, ModelResponse};
use crate::tool::{AGENT_TOOL, ASK_OWNER_TOOL, GET_RESULT_TOOL, STEER_TOOL, WAIT_TOOL};
use crate::util::BoxFuture;

/// Which child a scripted call refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A known id.
    Id(AgentId),
    /// The child returned by the agent's `n`-th `Agent` call (from 0), read from the
    /// conversation's tool results.
    Spawned(usize),
    /// A raw id string, as a model might write it (forged or malformed ids included).
    Raw(String),
}

impl From<AgentId> for Target {
    fn from(id: AgentId) -> Self {
        Target::Id(id)
    }
}

/// One scripted tool call.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    /// `Agent`: spawn a child.
    Spawn {
        /// The requested type.
        agent_type: String,
        /// The child's task.
        prompt: String,
        /// Foreground (`Some(false)`), background (`Some(true)`) or the definition's default.
        background: Option<bool>,
        /// Extra fields to put in the input (e.g. a forged `depth`).
        extra: serde_json::Map<String, serde_json::Value>,
    },
    /// `get_subagent_result`.
    Result {
        /// Which child.
        target: Target,
        /// Whether to wait for it to settle.
        wait: bool,
    },
    /// `steer_subagent`.
    Steer {
        /// Which child.
        target: Target,
        /// The guidance.
        message: String,
    },
    /// `wait_subagents` over several children under a policy.
    Wait {
        /// The children.
        targets: Vec<Target>,
        /// The policy.
        policy: agent_tree_protocol::WaitPolicy,
    },
    /// Any tool by name with a raw input.
    Tool {
        /// The tool's name.
        name: String,
        /// Its input.
        input: serde_json::Value,
    },
}

impl Call {
    /// Spawns a child in the foreground: the result comes back as the tool result.
    pub fn spawn(agent_type: impl Into<String>, prompt: impl Into<String>) -> Self {
        Call::Spawn {
            agent_type: agent_type.into(),
            prompt: prompt.into(),
            background: Some(false),
            extra: serde_json::Map::new(),
        }
    }

    /// Spawns a child in the background: its id comes back at once.
    pub fn spawn_background(agent_type: impl Into<String>, prompt: impl Into<String>) -> Self {
        Call::Spawn {
            agent_type: agent_type.into(),
            prompt: prompt.into(),
            background: Some(true),
            extra: serde_json::Map::new(),
        }
    }

    /// Adds a raw field to a spawn's input (other calls are unchanged).
    pub fn with_field(mut self, key: impl Into<String>, value: serde_json::Value) -> Self {
        if let Call::Spawn { extra, .. } = &mut self {
            extra.insert(key.into(), value);
        }
        self
    }

    /// Reads a child's result, waiting for it to settle.
    pub fn result(target: impl Into<Target>) -> Self {
        Call::Result {
            target: target.into(),
            wait: true,
        }
    }

    /// Reads a child's result without waiting.
    pub fn peek(target: impl Into<Target>) -> Self {
        Call::Result {
            target: target.into(),
            wait: false,
        }
    }

    /// Steers a child.
    pub fn steer(target: impl Into<Target>, message: impl Into<String>) -> Self {
        Call::Steer {
            target: target.into(),
            message: message.into(),
        }
    }

    /// Waits for several children under `policy`.
    pub fn wait(
        targets: impl IntoIterator<Item = Target>,
        policy: agent_tree_protocol::WaitPolicy,
    ) -> Self {
        Call::Wait {
            targets: targets.into_iter().collect(),
            policy,
        }
    }

    /// Asks the agent's owner `question` (`ask_owner`); the answer is the call's result.
    pub fn ask_owner(question: impl Into<String>) -> Self {
        Call::tool(ASK_OWNER_TOOL, json!({ "question": question.into() }))
    }

    /// Calls a tool by name.
    pub fn tool(name: impl Into<String>, input: serde_json::Value) -> Self {
        Call::Tool {
            name: name.into(),
            input,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Action {
    Answer(String),
    Calls(Vec<Call>),
    Fail(String),
    Hang,
    Panic(String),
}

/// One scripted model turn.
#[derive(Clone, Debug, PartialEq)]
pub struct Turn {
    action: Action,
    usage: Usage,
    delay: Duration,
}

impl Turn {
    fn of(action: Action) -> Self {
        Turn {
            action,
            usage: Usage::ZERO,
            delay: Duration::ZERO,
        }
    }

    /// A final answer.
    pub fn answer(text: impl Into<String>) -> Self {
        Turn::of(Action::Answer(text.into()))
    }

    /// Tool calls, run concurrently by the agent.
    pub fn calls(calls: impl IntoIterator<Item = Call>) -> Self {
        Turn::of(Action::Calls(calls.into_iter().collect()))
    }

    /// One foreground spawn.
    pub fn spawn(agent_type: impl Into<String>, prompt: impl Into<String>) -> Self {
        Turn::calls([Call::spawn(agent_type, prompt)])
    }

    /// One background spawn.
    pub fn spawn_background(agent_type: impl Into<String>, prompt: impl Into<String>) -> Self {
        Turn::calls([Call::spawn_background(agent_type, prompt)])
    }

    /// A model error.
    pub fn fail(message: impl Into<String>) -> Self {
        Turn::of(Action::Fail(message.into()))
    }

    /// A turn that never returns (until the agent is aborted).
    pub fn hang() -> Self {
        Turn::of(Action::Hang)
    }

    /// A turn whose model code panics.
    pub fn panic(message: impl Into<String>) -> Self {
        Turn::of(Action::Panic(message.into()))
    }

    /// Reports `usage` for the turn: with its response, or with its error (a failed attempt
    /// is billed what it spent).
    pub fn usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    /// Takes `delay` (tokio time, so virtual under paused tests) before returning.
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// The turns one agent (or every agent of a type) takes, in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Script {
    turns: Vec<Turn>,
}

impl Script {
    /// A script of `turns`.
    pub fn new(turns: impl IntoIterator<Item = Turn>) -> Self {
        Script {
            turns: turns.into_iter().collect(),
        }
    }

    /// The same script with one more turn.
    pub fn then(mut self, turn: Turn) -> Self {
        self.turns.push(turn);
        self
    }

    /// The number of turns.
    pub fn len(&self) -> usize {
        self.turns.len()
    }

    /// Whether the script has no turns.
    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }
}

/// A script of the turns in the array, in order: `.script("w", [Turn::answer("ok")])`.
impl<const N: usize> From<[Turn; N]> for Script {
    fn from(turns: [Turn; N]) -> Self {
        Script::new(turns)
    }
}

/// A deterministic model playing scripts. Cheap to clone: clones share scripts and the log.
///
/// It keeps one place in a script per agent id. Trees hosted on another node
/// (`cluster::Node::host`, feature `cluster`) are fresh for every run of a remote child,
/// and each names its remote agent `a1`: one model shared by such trees plays one script
/// position for all of them (right for the runs of one agent, which follow each other;
/// wrong for remote agents running side by side, which want a model per hosted tree).
#[derive(Clone, Default)]
pub struct ScriptedModel {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    by_type: Mutex<HashMap<String, Script>>,
    by_agent: Mutex<HashMap<AgentId, Script>>,
    cursors: Mutex<HashMap<AgentId, usize>>,
    log: CallLog,
}

impl fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedModel")
            .field(
                "types",
                &self.inner.by_type.lock().keys().collect::<Vec<_>>(),
            )
            .field("calls", &self.calls())
            .finish()
    }
}

impl ScriptedModel {
    /// A model with no scripts.
    pub fn new() -> Self {
        ScriptedModel::default()
    }

    /// Sets the script every agent of `agent_type` plays: a [`Script`], or an array of
    /// [`Turn`]s.
    ///
    /// ```
    /// use agent_tree_actors::testkit::{Script, ScriptedModel, Turn};
    ///
    /// let model = ScriptedModel::new()
    ///     .script("lead", [Turn::spawn("worker", "dig"), Turn::answer("done")])
    ///     .script("worker", Script::new([Turn::answer("dug")]));
    /// # let _ = model;
    /// ```
    pub fn script(self, agent_type: impl Into<String>, script: impl Into<Script>) -> Self {
        self.inner
            .by_type
            .lock()
            .insert(agent_type.into(), script.into());
        self
    }

    /// Sets the script one agent plays, overriding its type's.
    pub fn script_agent(&self, agent: AgentId, script: Script) {
        self.inner.by_agent.lock().insert(agent, script);
    }

    /// Model calls made so far.
    pub fn calls(&self) -> usize {
        self.inner.log.len()
    }

    /// Model calls made by `agent`.
    pub fn calls_by(&self, agent: AgentId) -> usize {
        self.inner.log.of(agent).len()
    }

    /// The call log itself (shared with clones of this model).
    pub fn call_log(&self) -> CallLog {
        self.inner.log.clone()
    }

    /// Every call, in the order made.
    pub fn log(&self) -> Vec<ModelCall> {
        self.inner.log.calls()
    }

    /// The calls made by `agent`, in order.
    pub fn log_of(&self, agent: AgentId) -> Vec<ModelCall> {
        self.inner.log.of(agent)
    }

    fn next_turn(&self, request: &ModelRequest) -> Result<Turn, ModelError> {
        let index = {
            let mut cursors = self.inner.cursors.lock();
            let cursor = cursors.entry(request.agent).or_insert(0);
            let index = *cursor;
            *cursor += 1;
            index
        };
        if let Some(script) = self.inner.by_agent.lock().get(&request.agent) {
            return pick(script, index, &request.agent.to_string());
        }
        match self.inner.by_type.lock().get(request.agent_type()) {
            Some(script) => pick(script, index, request.agent_type()),
            None => Err(ModelError::new(format!(
                "no script for agent type {:?}",
                request.agent_type()
            ))),
        }
    }
}

fn pick(script: &Script, index: usize, whose: &str) -> Result<Turn, ModelError> {
    script.turns.get(index).cloned().ok_or_else(|| {
        ModelError::new(format!(
            "script of {whose} ran out after {} turns",
            script.turns.len()
        ))
    })
}

impl Model for ScriptedModel {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            let logged = self.inner.log.record(&request);
            let result = self.play(&request).await;
            logged.finish(&result);
            result
        })
    }
}

impl ScriptedModel {
    /// Plays the agent's next scripted turn for `request`.
    async fn play(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        {
            let turn = self.next_turn(request)?;
            if !turn.delay.is_zero() {
                tokio::time::sleep(turn.delay).await;
            }
            match turn.action {
                Action::Answer(text) => Ok(ModelResponse::text(text).with_usage(turn.usage)),
                Action::Calls(calls) => {
                    let tool_calls = calls
                        .into_iter()
                        .enumerate()
                        .map(|(i, call)| to_tool_call(request, i, call))
                        .collect();
                    Ok(ModelResponse::calls(tool_calls).with_usage(turn.usage))
                }
                Action::Fail(message) => Err(ModelError::new(message).with_usage(turn.usage)),
                Action::Hang => std::future::pending().await,
                Action::Panic(message) => panic!("{message}"),
            }
        }
    }
}

pub(crate) fn to_tool_call(request: &ModelRequest, index: usize, call: Call) -> ToolCall {
    let id = format!("call_{}_{}", request.turn, index);
    match call {
        Call::Spawn {
            agent_type,
            prompt,
            background,
            extra,
        } => {
            let mut input = serde_json::Map::new();
            input.insert("agent_type".into(), json!(agent_type));
            input.insert("prompt".into(), json!(prompt));
            if let Some(background) = background {
                input.insert("background".into(), json!(background));
            }
            input.extend(extra);
            ToolCall::new(id, AGENT_TOOL, serde_json::Value::Object(input))
        }
        Call::Result { target, wait } => ToolCall::new(
            id,
            GET_RESULT_TOOL,
            json!({ "agent_id": resolve(&request.messages, &target), "wait": wait }),
        ),
        Call::Steer { target, message } => ToolCall::new(
            id,
            STEER_TOOL,
            json!({ "agent_id": resolve(&request.messages, &target), "message": message }),
        ),
        Call::Wait { targets, policy } => {
            let ids: Vec<String> = targets
                .iter()
                .map(|t| resolve(&request.messages, t))
                .collect();
            ToolCall::new(id, WAIT_TOOL, json!({ "agent_ids": ids, "policy": policy }))
        }
        Call::Tool { name, input } => ToolCall::new(id, name, input),
    }
}

/// The id text a target stands for, read from the conversation for [`Target::Spawned`].
fn resolve(messages: &[Message], target: &Target) -> String {
    match target {
        Target::Id(id) => id.to_string(),
        Target::Raw(raw) => raw.clone(),
        Target::Spawned(n) => spawned_ids(messages)
            .into_iter()
            .nth(*n)
            .flatten()
            .unwrap_or_else(|| "unresolved".to_owned()),
    }
}

/// For each `Agent` call in the conversation, in order, the child id its result named.
fn spawned_ids(messages: &[Message]) -> Vec<Option<String>> {
    // Each call's result is among the tool messages right after its assistant message: call
    // ids repeat across runs (a resumed run's turns count from 1 again), so a result is
    // found by its place, never by its id alone.
    let mut ids = Vec::new();
    for (at, message) in messages.iter().enumerate() {
        if message.role != Role::Assistant {
            continue;
        }
        let results = || {
            messages[at + 1..]
                .iter()
                .take_while(|m| m.role == Role::Tool)
        };
        for call in message.tool_calls.iter().filter(|c| c.name == AGENT_TOOL) {
            let id = results()
                .find(|m| m.tool_call_id.as_deref() == Some(call.id.as_str()))
                .and_then(|m| serde_json::from_str::<serde_json::Value>(&m.content).ok())
                .and_then(|v| {
                    v.get("agent_id")
                        .and_then(|id| id.as_str())
                        .map(str::to_owned)
                });
            ids.push(id);
        }
    }
    ids
}
