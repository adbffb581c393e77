//! Shared helpers of the integration tests: definitions, a recording model that wraps the
//! scripted one, a way for tools and models to look at the tree they run in, and bounded
//! waits that fail instead of hanging.
#![allow(dead_code)]

use std::future::Future;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{Event, EventKind, Message, Role, TreeSnapshot};
use agent_tree::testkit::{Call, ScriptedModel};
use agent_tree::{BoxFuture, EventStream};
use parking_lot::Mutex;
use tokio::time::Instant;

/// How long (tokio time, virtual under paused tests) any single wait of a test may take
/// before the test fails instead of hanging.
pub(crate) const WAIT_LIMIT: Duration = Duration::from_secs(600);

/// Awaits `future`, failing the test with `what` if it takes longer than [`WAIT_LIMIT`].
pub(crate) async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT_LIMIT, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

/// A definition that may not delegate.
pub(crate) fn leaf(name: &str) -> AgentDefinition {
    AgentDefinition::new(name, format!("You are {name}."))
}

/// A definition that may spawn exactly `allowed`.
pub(crate) fn delegator(name: &str, allowed: &[&str]) -> AgentDefinition {
    AgentDefinition::new(name, format!("You are {name}."))
        .with_allowed_subagents(SubagentAllowance::only(allowed.iter().copied()))
}

/// A definition that may spawn any enabled type.
pub(crate) fn delegator_of_all(name: &str) -> AgentDefinition {
    AgentDefinition::new(name, "").with_allowed_subagents(SubagentAllowance::All)
}

/// A scripted `ask_owner` call.
pub(crate) fn ask(question: &str) -> Call {
    Call::tool("ask_owner", serde_json::json!({ "question": question }))
}

/// Builds a catalog, panicking on invalid definitions.
pub(crate) fn catalog(definitions: impl IntoIterator<Item = AgentDefinition>) -> Catalog {
    Catalog::new(definitions).expect("test definitions are valid")
}

/// One model request as an agent made it.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    pub(crate) agent: AgentId,
    pub(crate) agent_type: String,
    pub(crate) depth: u32,
    pub(crate) turn: u32,
    pub(crate) messages: Vec<Message>,
    pub(crate) tools: Vec<String>,
    pub(crate) at: Instant,
}

impl Seen {
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

/// The contents of a conversation's user messages, in order.
pub(crate) fn user_texts(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| m.content.clone())
        .collect()
}

/// A tool result message, unpacked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ToolResult {
    pub(crate) call_id: String,
    pub(crate) content: String,
    pub(crate) is_error: bool,
}

impl ToolResult {
    /// The content as JSON (orchestration results are JSON objects).
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.content)
            .unwrap_or_else(|e| panic!("tool result {:?} is not JSON: {e}", self.content))
    }
}

/// Every tool result of a conversation, in order.
pub(crate) fn tool_results(messages: &[Message]) -> Vec<ToolResult> {
    messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| ToolResult {
            call_id: m.tool_call_id.clone().unwrap_or_default(),
            content: m.content.clone(),
            is_error: m.is_error,
        })
        .collect()
}

type Hook = dyn Fn(&ModelRequest) -> Option<Result<ModelResponse, ModelError>> + Send + Sync;

/// A model that records every request and delegates to a [`ScriptedModel`]; a hook may look
/// at each request first (e.g. take a snapshot) and may answer it itself.
#[derive(Clone)]
pub(crate) struct RecordingModel {
    scripted: ScriptedModel,
    seen: Arc<Mutex<Vec<Seen>>>,
    hook: Option<Arc<Hook>>,
}

impl RecordingModel {
    pub(crate) fn new(scripted: ScriptedModel) -> Self {
        RecordingModel {
            scripted,
            seen: Arc::default(),
            hook: None,
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

    /// Every request so far, in the order made.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().clone()
    }

    /// The requests `agent` made, in order.
    pub(crate) fn seen_by(&self, agent: AgentId) -> Vec<Seen> {
        self.seen
            .lock()
            .iter()
            .filter(|s| s.agent == agent)
            .cloned()
            .collect()
    }

    /// `agent`'s request for turn `turn`.
    pub(crate) fn request(&self, agent: AgentId, turn: u32) -> Seen {
        self.seen_by(agent)
            .into_iter()
            .find(|s| s.turn == turn)
            .unwrap_or_else(|| panic!("{agent} made no request for turn {turn}"))
    }

    /// The scripted model behind this one.
    pub(crate) fn scripted(&self) -> &ScriptedModel {
        &self.scripted
    }
}

impl Model for RecordingModel {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        self.seen.lock().push(Seen {
            agent: request.agent,
            agent_type: request.agent_type.clone(),
            depth: request.depth,
            turn: request.turn,
            messages: request.messages.clone(),
            tools: request.tools.iter().map(|t| t.name.clone()).collect(),
            at: Instant::now(),
        });
        if let Some(answer) = self.hook.as_ref().and_then(|hook| hook(&request)) {
            return Box::pin(async move { answer });
        }
        self.scripted.turn(request)
    }
}

/// Lets code running inside the tree (a tool, a model hook) look at the tree: set it once the
/// tree is built. Holds the tree weakly, so it never keeps it alive.
#[derive(Clone, Default)]
pub(crate) struct TreeProbe {
    tree: Arc<OnceLock<Weak<Tree>>>,
}

impl TreeProbe {
    pub(crate) fn new() -> Self {
        TreeProbe::default()
    }

    /// Points the probe at `tree`.
    pub(crate) fn set(&self, tree: &Arc<Tree>) {
        self.tree
            .set(Arc::downgrade(tree))
            .expect("the probe is set once");
    }

    /// The tree's snapshot now.
    pub(crate) fn snapshot(&self) -> TreeSnapshot {
        self.tree
            .get()
            .and_then(Weak::upgrade)
            .expect("the probe is set and the tree is alive")
            .snapshot()
    }
}

/// Shuts down a tree shared through an `Arc` (every other holder must be gone).
pub(crate) async fn shutdown(tree: Arc<Tree>) {
    let tree = Arc::try_unwrap(tree).expect("no other strong reference to the tree");
    within("shutdown", tree.shutdown()).await;
}

/// Waits until no agent is live, then returns every event the stream has queued.
pub(crate) async fn events_at_idle(tree: &Tree, events: &mut EventStream) -> Vec<Event> {
    within("the tree to become idle", tree.idle()).await;
    events.drain()
}

/// The terminal event of `agent`, if any.
pub(crate) fn terminal_event(events: &[Event], agent: AgentId) -> Option<&Event> {
    events
        .iter()
        .find(|e| e.agent == agent && e.kind.terminal_status().is_some())
}

/// The sum of every `usage_reported` delta in `events`.
pub(crate) fn reported_usage(events: &[Event]) -> Usage {
    events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::UsageReported { delta } => Some(delta),
            _ => None,
        })
        .sum()
}

/// The record of `id`, panicking with the rendering when it is missing.
pub(crate) fn record(snapshot: &TreeSnapshot, id: AgentId) -> &agent_tree::protocol::AgentRecord {
    snapshot
        .record(id)
        .unwrap_or_else(|| panic!("no record {id} in\n{}", snapshot.render_text()))
}

/// The id of the only agent of `agent_type`.
pub(crate) fn only_of_type(snapshot: &TreeSnapshot, agent_type: &str) -> AgentId {
    let ids: Vec<AgentId> = snapshot
        .agents()
        .filter(|r| r.agent_type == agent_type)
        .map(|r| r.id)
        .collect();
    assert_eq!(
        ids.len(),
        1,
        "expected one {agent_type} in\n{}",
        snapshot.render_text()
    );
    ids[0]
}

/// Ids of every agent of `agent_type`, in id order.
pub(crate) fn all_of_type(snapshot: &TreeSnapshot, agent_type: &str) -> Vec<AgentId> {
    snapshot
        .agents()
        .filter(|r| r.agent_type == agent_type)
        .map(|r| r.id)
        .collect()
}

/// The control-test helpers: a recording model keeping whole requests, tree builders,
/// guarded event waits and a seeded PRNG.
pub mod harness;

/// The lifetime-test helpers: a model wrapper recording whole requests and when each call
/// ended, a weak tree cell for hooks, and script and event helpers.
pub mod lifetimes;
