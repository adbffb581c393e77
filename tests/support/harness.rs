//! Shared helpers of the capability, resolution, depth, admission, pool, limits, control,
//! ownership and attenuation integration tests: tree builders, event waits with timeout
//! guards, and a small seeded PRNG.
//!
//! Every helper here is deterministic under a paused tokio clock; nothing sleeps for real
//! and nothing polls: waits observe the event stream or handles, guarded by a timeout.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{Event, EventKind, Message, ToolCall};
use agent_tree::testkit::ScriptedModel;
use agent_tree::{FnTool, ToolContext, ToolError};

use super::ModelCall;

/// The guard every wait in these tests runs under. Under a paused clock it fires only once
/// the runtime has nothing else to do, so it is an upper bound, never a race.
pub const GUARD: Duration = Duration::from_secs(24 * 3600);

/// `a<n>`.
pub fn a(n: u64) -> AgentId {
    AgentId::new(n)
}

/// The builder of a tree of `model`, `catalog` and `config`, for a test that adds tools,
/// hooks or a journal before it builds.
pub fn builder(model: impl Model, catalog: Catalog, config: TreeConfig) -> agent_tree::TreeBuilder {
    Tree::builder().config(config).catalog(catalog).model(model)
}

/// `builder` holding, besides, an [`ok_tool`] of each of `names`.
pub fn with_ok_tools(
    mut builder: agent_tree::TreeBuilder,
    names: &[&'static str],
) -> agent_tree::TreeBuilder {
    for &name in names {
        builder = builder.tool(ok_tool(name)).expect("tool names are free");
    }
    builder
}

/// A tree of `catalog` on `model` whose agents nest at most `max_depth` deep (the default
/// configuration otherwise).
pub async fn depth_capped_tree(model: impl Model, catalog: Catalog, max_depth: u32) -> Tree {
    tree(
        model,
        catalog,
        TreeConfig::default().with_max_depth(max_depth),
    )
    .await
}

/// Builds a tree with `model`, `catalog` and `config`, and no user tools.
pub async fn tree(model: impl Model, catalog: Catalog, config: TreeConfig) -> Tree {
    builder(model, catalog, config)
        .build()
        .await
        .expect("the tree builds")
}

/// A tree of `catalog` on `model` built under an owner probe: the test is the owner of its
/// top-level agents.
pub async fn owned_tree(
    catalog: Catalog,
    model: impl Model,
) -> (Tree, agent_tree::testkit::OwnerProbe) {
    agent_tree::testkit::OwnerProbe::build(Tree::builder().catalog(catalog).model(model))
        .await
        .expect("the tree builds")
}

/// Spawns `agent_type` with `prompt` on `tree` (failing the test when it is refused) and
/// returns the new agent's id.
pub async fn spawn_for_id(tree: &Tree, agent_type: &str, prompt: &str) -> AgentId {
    super::spawn_admitted(tree, SpawnRequest::new(agent_type, prompt))
        .await
        .id()
}

/// Asserts that `outcome` is a failure by escalation (reason `escalated`) whose error holds
/// the original `cause`; `what` names the agent in the failure message.
pub fn assert_escalated(outcome: &Outcome, cause: &str, what: &str) {
    assert_eq!(
        (outcome.status, outcome.reason),
        (
            AgentStatus::Failed,
            agent_tree::protocol::EndReason::Escalated
        ),
        "{what}: {outcome:?}"
    );
    assert!(
        outcome.error.as_deref().is_some_and(|e| e.contains(cause)),
        "{what}: {outcome:?}"
    );
}

/// The content of each of `messages`, in order.
pub fn contents(messages: &[Message]) -> Vec<&str> {
    messages.iter().map(|m| m.content.as_str()).collect()
}

/// A catalog of a `lead` that may delegate to a `worker` leaf.
pub fn lead_and_worker() -> Catalog {
    super::catalog([super::delegator("lead", &["worker"]), super::leaf("worker")])
}

/// A user tool that answers `<name>: ok`.
pub fn ok_tool(
    name: &'static str,
) -> FnTool<
    impl Fn(ToolContext, serde_json::Value) -> std::future::Ready<Result<String, ToolError>>
    + Send
    + Sync
    + 'static,
> {
    FnTool::new(name, format!("the {name} tool"), move |_, _| {
        std::future::ready(Ok(format!("{name}: ok")))
    })
}

/// A tree of `catalog` on `model` with the default configuration and the one user tool
/// `tool`.
pub async fn tree_with_tool(
    catalog: Catalog,
    model: impl Model,
    tool: impl agent_tree::Tool,
) -> Tree {
    Tree::builder()
        .catalog(catalog)
        .model(model)
        .tool(tool)
        .expect("the tool name is free")
        .build()
        .await
        .expect("the tree builds")
}

/// A tree of `catalog` on `model` with the default configuration and an [`ok_tool`] of
/// each of `names`.
pub async fn tree_with_ok_tools(
    model: impl Model,
    catalog: Catalog,
    names: &[&'static str],
) -> Tree {
    with_ok_tools(builder(model, catalog, TreeConfig::default()), names)
        .build()
        .await
        .expect("the tree builds")
}

/// Builds a tree with the user tools `read`, `write` and `bash`.
pub async fn tree_with_tools(model: impl Model, catalog: Catalog, config: TreeConfig) -> Tree {
    let builder = builder(model, catalog, config);
    with_ok_tools(builder, &["read", "write", "bash"])
        .build()
        .await
        .expect("the tree builds")
}

/// The tool results `agent`'s `n`-th model call (from 0) received.
pub fn results(model: &ScriptedModel, agent: AgentId, n: usize) -> Vec<Message> {
    let log = model.log_of(agent);
    match log.get(n) {
        Some(call) => call.results.clone(),
        None => panic!("{agent} made {} model calls, wanted call #{n}", log.len()),
    }
}

/// The tools `agent`'s `n`-th model call (from 0) was offered.
pub fn tools(model: &ScriptedModel, agent: AgentId, n: usize) -> Vec<String> {
    let log = model.log_of(agent);
    match log.get(n) {
        Some(call) => call.tools.clone(),
        None => panic!("{agent} made {} model calls, wanted call #{n}", log.len()),
    }
}

/// The id a successful `Agent` tool result names.
pub fn spawned_id(result: &Message) -> AgentId {
    assert!(!result.is_error, "spawn refused: {}", result.content);
    let value: serde_json::Value =
        serde_json::from_str(&result.content).expect("a spawn result is JSON");
    value["agent_id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no agent_id in {}", result.content))
}

/// The `status` field of a JSON tool result.
pub fn status_of(result: &Message) -> String {
    let value: serde_json::Value = serde_json::from_str(&result.content)
        .unwrap_or_else(|_| panic!("not JSON: {}", result.content));
    value["status"].as_str().unwrap_or_default().to_owned()
}

/// Waits (under [`GUARD`]) until no agent is live.
pub async fn idle(tree: &Tree) {
    tokio::time::timeout(GUARD, tree.idle())
        .await
        .expect("the tree never went idle");
}

/// Waits (under [`GUARD`]) for `id`'s outcome.
pub async fn outcome_of(tree: &Tree, id: AgentId) -> Outcome {
    let mut handle = tree.handle(id).expect("the agent exists");
    tokio::time::timeout(GUARD, handle.outcome())
        .await
        .expect("the agent never settled")
}

/// Whether `event` is a `started` event of `id`.
pub fn started(id: AgentId) -> impl FnMut(&Event) -> bool {
    move |e| e.agent == id && matches!(e.kind, EventKind::Started { .. })
}

/// The id of the only agent of `agent_type`.
pub fn id_of(tree: &Tree, agent_type: &str) -> AgentId {
    let snapshot = tree.snapshot();
    let mut found = snapshot.agents().filter(|r| r.agent_type == agent_type);
    let first = found
        .next()
        .unwrap_or_else(|| panic!("no agent of type {agent_type}"));
    assert!(
        found.next().is_none(),
        "several agents of type {agent_type}"
    );
    first.id
}

/// For each model request, the `(call, result)` pairs of the tool calls its conversation's
/// last assistant message made, in call order.
pub fn answered_calls(request: &ModelCall) -> Vec<(ToolCall, Message)> {
    request.answered_calls()
}

/// A small deterministic PRNG (xorshift64*), so randomized tests replay from their seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value).
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}
