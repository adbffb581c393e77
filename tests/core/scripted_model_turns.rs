//! The scripted model's turns, end to end: tool calls of one turn run concurrently (three
//! background spawns in one turn are three children running at once), scripted virtual time
//! passes exactly, a hanging turn lasts until it is cancelled, a script that runs out fails
//! its agent with a clear model error instead of inventing an answer, a failing turn bills
//! its scripted usage, and a call's `Target::Spawned(n)` names the child of its own run.

use std::time::Duration;

use crate::support::build_tree;
use crate::support::catalog;
use crate::support::scripts::{answers_after, background_spawns};
use crate::support::spawn_admitted;
use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, EventKind};
use agent_tree::testkit::{Call, ScriptedModel, Target, Turn};

fn lead_and_worker() -> Catalog {
    catalog([
        AgentDefinition::new("lead", "")
            .with_allowed_subagents(SubagentAllowance::only(["worker"])),
        AgentDefinition::new("worker", ""),
    ])
}

async fn tree(model: &ScriptedModel) -> Tree {
    build_tree(lead_and_worker(), model.clone()).await
}

/// Tool calls of one turn run concurrently: three background spawns in one turn are three
/// children running at once, and scripted virtual time passes exactly.
#[tokio::test(start_paused = true)]
async fn three_background_spawns_in_one_turn_run_at_once() {
    let model = ScriptedModel::new()
        .script(
            "lead",
            [
                background_spawns([("worker", "a"), ("worker", "b"), ("worker", "c")]),
                Turn::calls([Call::wait((0..3).map(Target::Spawned), Default::default())]),
                Turn::answer("done"),
            ],
        )
        .script("worker", answers_after("ok", Duration::from_secs(10)));
    let tree = tree(&model).await;
    let mut events = tree.subscribe();
    let started = tokio::time::Instant::now();
    let outcome = tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    assert!(outcome.is_completed(), "{outcome:?}");
    // Each worker takes 10 s of model time; run one after another they would take 30 s.
    assert_eq!(started.elapsed(), Duration::from_secs(10));
    let mut live = 0usize;
    let mut peak = 0usize;
    for event in events.drain().into_iter().filter(|e| e.depth == 2) {
        match event.kind {
            EventKind::Started { .. } => live += 1,
            kind if kind.terminal_status().is_some() => live -= 1,
            _ => {}
        }
        peak = peak.max(live);
    }
    assert_eq!(peak, 3, "the three workers overlapped");
    assert_eq!(tree.snapshot().peak_live, 4);
    tree.shutdown().await;
}

/// A hanging scripted turn keeps its agent in its model call, however long, until it is
/// cancelled.
#[tokio::test(start_paused = true)]
async fn a_hanging_turn_lasts_until_cancelled() {
    let model = ScriptedModel::new().script("worker", [Turn::hang()]);
    let tree = tree(&model).await;
    let mut worker = spawn_admitted(&tree, SpawnRequest::new("worker", "wait")).await;
    // An hour of virtual time later it is still in its model call.
    assert!(
        tokio::time::timeout(Duration::from_secs(3_600), worker.outcome())
            .await
            .is_err()
    );
    assert_eq!(
        tree.record(worker.id()).unwrap().status,
        AgentStatus::Running
    );
    tree.abort(worker.id()).unwrap();
    let outcome = worker.outcome().await;
    assert_eq!(
        (outcome.status, outcome.reason),
        (AgentStatus::Aborted, EndReason::Aborted)
    );
    assert_eq!(model.calls_by(worker.id()), 1);
    tree.shutdown().await;
}

/// A script that runs out, or an agent type with no script, fails the agent with a model
/// error saying so, never an invented answer.
#[tokio::test(start_paused = true)]
async fn a_script_that_runs_out_fails_its_agent() {
    let model = ScriptedModel::new().script(
        "worker",
        [Turn::calls([Call::tool("nothing", serde_json::json!({}))])],
    );
    let tree = tree(&model).await;
    let outcome = tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert_eq!(
        (outcome.status, outcome.reason),
        (AgentStatus::Failed, EndReason::ModelError)
    );
    assert_eq!(
        outcome.error.as_deref(),
        Some("script of worker ran out after 1 turns")
    );
    let unscripted = tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    assert_eq!(
        unscripted.error.as_deref(),
        Some("no script for agent type \"lead\"")
    );
    tree.shutdown().await;
}

/// `Turn::usage` reports usage for any turn, a failing one included: a scripted provider
/// failure that cost tokens is billed them, as every failed attempt is billed its error's
/// usage.
#[tokio::test(start_paused = true)]
async fn a_failing_scripted_turn_bills_its_usage() {
    let model =
        ScriptedModel::new().script("w", [Turn::fail("overloaded").usage(Usage::tokens(30, 7))]);
    let tree = build_tree(crate::support::catalog([crate::support::leaf("w")]), model).await;
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    let outcome = w.outcome().await;
    assert_eq!(outcome.status, AgentStatus::Failed);
    assert_eq!(
        tree.record(w.id()).unwrap().own,
        Usage::tokens(30, 7),
        "the failing turn's scripted usage was not billed"
    );
}

/// `Target::Spawned(n)` is the child returned by the agent's `n`-th `Agent` call (from 0):
/// in a resumed run, whose scripted call ids repeat the first run's, the run's own spawn
/// resolves to that run's child.
#[tokio::test(start_paused = true)]
async fn a_spawned_target_in_a_resumed_run_names_that_runs_child() {
    let model = ScriptedModel::new()
        .script(
            "lead",
            [
                // run 1
                Turn::spawn("first", "one"),
                Turn::answer("run one"),
                // run 2, after a resume
                Turn::spawn_background("second", "two"),
                Turn::calls([Call::result(Target::Spawned(1))]),
                Turn::answer("run two"),
            ],
        )
        .script("first", [Turn::answer("first child")])
        .script(
            "second",
            answers_after("second child", Duration::from_secs(1)),
        );
    let log = model.call_log();
    let tree = build_tree(
        crate::support::catalog([
            AgentDefinition::new("lead", "")
                .with_allowed_subagents(SubagentAllowance::only(["first", "second"])),
            crate::support::leaf("first"),
            crate::support::leaf("second"),
        ]),
        model,
    )
    .await;
    let mut lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    assert_eq!(lead.outcome().await.text.as_deref(), Some("run one"));
    let mut lead = tree.resume(lead.id(), "again").await.unwrap();
    assert_eq!(lead.outcome().await.text.as_deref(), Some("run two"));
    let calls = log.of(lead.id());
    let last = calls.last().unwrap();
    let read = last
        .answered_calls()
        .into_iter()
        .find(|(call, _)| call.name == "get_subagent_result")
        .expect("the last turn read a child's result");
    assert!(
        read.1.content.contains("second child"),
        "Target::Spawned(1) resolved to the first run's child: the read was {} -> {}",
        serde_json::to_string(&read.0).unwrap(),
        read.1.content
    );
}
