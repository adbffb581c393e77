//! Shared helpers of the lifetime, supervision, shutdown, abort and wait-policy integration
//! tests: small script and event helpers (the recording model and the tree cell they use are
//! in `support`).
//!
//! Every helper here is deterministic under a paused tokio clock: nothing sleeps for real and
//! nothing polls. Waits observe the event stream under a timeout guard.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{Event, EventKind, Strategy};
use agent_tree::testkit::{Script, Turn};
use agent_tree::{ControlError, ShutdownReport};

/// A script of `n` turns that each hang until cancelled.
pub fn hanging(n: usize) -> Script {
    Script::new((0..n).map(|_| Turn::hang()))
}

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The restart events of `events`, as `(agent, incarnation)`, in order.
pub fn restarts(events: &[Event]) -> Vec<(AgentId, u32)> {
    events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Restarted { incarnation } => Some((e.agent, incarnation)),
            _ => None,
        })
        .collect()
}

/// The terminal events of `agent` in `events` (one per incarnation), in order.
pub fn terminals_of(events: &[Event], agent: AgentId) -> Vec<Event> {
    events
        .iter()
        .filter(|e| e.agent == agent && e.kind.terminal_status().is_some())
        .cloned()
        .collect()
}

/// Whether `event` is a `restarted` event of `agent` with `incarnation`.
pub fn restarted(agent: AgentId, incarnation: u32) -> impl FnMut(&Event) -> bool {
    move |e| e.agent == agent && e.kind == EventKind::Restarted { incarnation }
}

/// Whether `event` is a terminal event of `agent`.
pub fn terminal(agent: AgentId) -> impl FnMut(&Event) -> bool {
    move |e| e.agent == agent && e.kind.terminal_status().is_some()
}

/// A catalog of a temporary `one_for_one` supervisor `sup` (`max_restarts` per `period_ms`)
/// over one transient `worker`.
pub fn supervised(max_restarts: u32, period_ms: u64) -> Catalog {
    Catalog::new([
        AgentDefinition::new("sup", "")
            .with_allowed_subagents(SubagentAllowance::only(["worker"]))
            .with_supervision(Strategy::OneForOne, max_restarts, period_ms)
            .with_restart(RestartPolicy::Temporary),
        AgentDefinition::new("worker", "").with_restart(RestartPolicy::Transient),
    ])
    .expect("test definitions are valid")
}

/// A `agent_type` agent spawned with `prompt`, once a2 (its first child) made its first
/// model call: its id.
pub async fn spawned_with_a2_called(
    tree: &Tree,
    model: &crate::support::RecordingModel,
    agent_type: &str,
    prompt: &str,
) -> AgentId {
    let id = crate::support::spawn_admitted(tree, SpawnRequest::new(agent_type, prompt))
        .await
        .id();
    model.until_calls(AgentId::new(2), 1).await;
    id
}

/// `Tree::shutdown_agent(id)`, run in a task of its own.
pub fn shutdown_agent_in_a_task(
    tree: &std::sync::Arc<Tree>,
    id: AgentId,
) -> tokio::task::JoinHandle<Result<ShutdownReport, ControlError>> {
    let tree = tree.clone();
    tokio::spawn(async move { tree.shutdown_agent(id).await })
}

/// How many `steered` events of `agent` `events` holds.
pub fn steers_of(events: &[Event], agent: AgentId) -> usize {
    events
        .iter()
        .filter(|e| e.agent == agent && matches!(e.kind, EventKind::Steered))
        .count()
}

/// The id of a `agent_type` spawned on `tree` with `task` (failing the test if refused).
pub async fn spawned(tree: &Tree, agent_type: &str, task: &str) -> AgentId {
    crate::support::spawn_admitted(tree, SpawnRequest::new(agent_type, task))
        .await
        .id()
}
