//! Shared helpers of the integration tests: definitions, the recording model that wraps the
//! scripted one and the weak tree cell (both in `recording`), tool-result and event helpers,
//! and bounded waits that fail instead of hanging.
#![allow(dead_code)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use agent_tree::EventStream;
use agent_tree::prelude::*;
use agent_tree::protocol::{Event, EventKind, Message, Role, TreeSnapshot};
use agent_tree::testkit::{Call, ScriptedModel, Turn};

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

/// A scripted `Agent` call resuming `agent` (its id as a model writes it) with `prompt`.
pub(crate) fn resume_call(agent: &str, prompt: &str) -> Call {
    Call::tool(
        "Agent",
        serde_json::json!({ "resume": agent, "prompt": prompt }),
    )
}

/// A scripted `get_subagent_result` call of `agent` (its id as a model writes it), without
/// a wait.
pub(crate) fn read_result_call(agent: &str) -> Call {
    Call::tool(
        "get_subagent_result",
        serde_json::json!({ "agent_id": agent }),
    )
}

/// Builds a catalog, panicking on invalid definitions.
pub(crate) fn catalog(definitions: impl IntoIterator<Item = AgentDefinition>) -> Catalog {
    Catalog::new(definitions).expect("test definitions are valid")
}

/// A tree of `catalog` on `model`, with the default configuration and nothing else.
pub(crate) async fn build_tree(catalog: Catalog, model: impl Model) -> Tree {
    Tree::builder()
        .catalog(catalog)
        .model(model)
        .build()
        .await
        .expect("the tree builds")
}

/// Spawns `request` on `tree`, failing the test when it is refused.
pub(crate) async fn spawn_admitted(tree: &Tree, request: SpawnRequest) -> AgentHandle {
    tree.spawn(request).await.expect("the spawn is admitted")
}

/// Runs `request` on `tree` to its end, failing the test when it is refused.
pub(crate) async fn run_admitted(tree: &Tree, request: SpawnRequest) -> Outcome {
    tree.run(request).await.expect("the run is admitted")
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

/// The agent-file helpers: a file around a frontmatter, its parse, a JSON definition.
pub mod agent_files;

/// The control-test helpers: tree builders, guarded event waits and a seeded PRNG.
pub mod harness;

/// The recording model around the scripted one, and the weak tree cell.
mod recording;
#[allow(unused_imports)] // not every test binary uses all of them
pub(crate) use agent_tree::testkit::{CallEnd, ModelCall};
#[allow(unused_imports)]
pub(crate) use recording::{RecordingModel, TreeCell};

/// Where a call of `messages` has no result right after its message (results of one
/// message come together, before anything else), or a call has two results.
pub(crate) fn unanswered(messages: &[Message]) -> Option<String> {
    for (at, message) in messages.iter().enumerate() {
        if message.role != Role::Assistant || message.tool_calls.is_empty() {
            continue;
        }
        let results: Vec<&str> = messages[at + 1..]
            .iter()
            .take_while(|m| m.role == Role::Tool)
            .filter_map(|m| m.tool_call_id.as_deref())
            .collect();
        for call in &message.tool_calls {
            let n = results.iter().filter(|r| **r == call.id).count();
            if n != 1 {
                return Some(format!(
                    "call {} of message {at} has {n} results right after it",
                    call.id
                ));
            }
        }
    }
    None
}

/// A tool result's content as JSON (orchestration results are JSON objects).
pub(crate) trait JsonContent {
    /// The content, parsed; panics naming the content when it is not JSON.
    fn json(&self) -> serde_json::Value;
}

impl JsonContent for Message {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.content)
            .unwrap_or_else(|e| panic!("tool result {:?} is not JSON: {e}", self.content))
    }
}

/// The journal-test helpers: a temporary directory and a crash copy.
pub mod journal;

/// The lifetime-test helpers: script and event helpers.
pub mod lifetimes;

/// The step model of the model-contract tests: streams, cut-offs, context windows.
pub mod steps;

/// The race-test helpers: guards, bounded waits, yield loops and the `slow` tool.
pub mod races;

/// Runs the ignored test `test` (its path in the binary) alone, in a child process of this
/// test binary with `env` set (the test returns at once without it), and fails naming
/// `what` unless it ran and passed. For tests that need the process to themselves.
pub(crate) fn run_alone(test: &str, env: &str, what: &str) {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", test, "--nocapture"])
        .env(env, "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{what} failed:\n{text}");
    assert!(text.contains("1 passed"), "{what} did not run:\n{text}");
}

/// The text of a refusal a tool call got (`{"error": "..."}`), or the content as it is.
pub(crate) fn error_text(content: &str) -> String {
    serde_json::from_str::<serde_json::Value>(content)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
        .unwrap_or_else(|| content.to_owned())
}

/// A script whose `lead` spawns a `searcher` ("find X") in the foreground, then answers "led".
pub(crate) fn lead_spawning_a_searcher() -> ScriptedModel {
    ScriptedModel::new().script(
        "lead",
        [Turn::spawn("searcher", "find X"), Turn::answer("led")],
    )
}

/// A tree of a `lead` that may delegate to a `worker` leaf, on a clone of `model`.
pub(crate) async fn lead_and_worker_tree(model: &(impl Model + Clone)) -> Tree {
    harness::tree(
        model.clone(),
        catalog([delegator("lead", &["worker"]), leaf("worker")]),
        agent_tree::TreeConfig::default(),
    )
    .await
}

/// A user tool `noop` that does nothing and answers `ok`.
pub(crate) fn noop_tool() -> impl agent_tree::Tool {
    agent_tree::FnTool::new("noop", "does nothing", |_, _| async { Ok("ok".to_owned()) })
}

/// `request` admitted on `tree` and run to its end within [`WAIT_LIMIT`] (`what` naming it).
pub(crate) async fn run_within(tree: &Tree, what: &str, request: SpawnRequest) -> Outcome {
    within(what, run_admitted(tree, request)).await
}

/// Scripted-model turns and scripts many tests write the same way.
pub mod scripts;
