//! The scripted model's turns, end to end: tool calls of one turn run concurrently (three
//! background spawns in one turn are three children running at once), scripted virtual time
//! passes exactly, a hanging turn lasts until it is cancelled, and a script that runs out
//! fails its agent with a clear model error instead of inventing an answer.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, EventKind};
use agent_tree::testkit::{Call, Script, ScriptedModel, Target, Turn};

fn catalog() -> Catalog {
    Catalog::new([
        AgentDefinition::new("lead", "")
            .with_allowed_subagents(SubagentAllowance::only(["worker"])),
        AgentDefinition::new("worker", ""),
    ])
    .unwrap()
}

async fn tree(model: &ScriptedModel) -> Tree {
    Tree::builder()
        .catalog(catalog())
        .model(model.clone())
        .build()
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn three_background_spawns_in_one_turn_run_at_once() {
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                Turn::calls([
                    Call::spawn_background("worker", "a"),
                    Call::spawn_background("worker", "b"),
                    Call::spawn_background("worker", "c"),
                ]),
                Turn::calls([Call::wait((0..3).map(Target::Spawned), Default::default())]),
                Turn::answer("done"),
            ]),
        )
        .script(
            "worker",
            Script::new([Turn::answer("ok").after(Duration::from_secs(10))]),
        );
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

#[tokio::test(start_paused = true)]
async fn a_hanging_turn_lasts_until_cancelled() {
    let model = ScriptedModel::new().script("worker", Script::new([Turn::hang()]));
    let tree = tree(&model).await;
    let mut worker = tree
        .spawn(SpawnRequest::new("worker", "wait"))
        .await
        .unwrap();
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

#[tokio::test(start_paused = true)]
async fn a_script_that_runs_out_fails_its_agent() {
    let model = ScriptedModel::new().script(
        "worker",
        Script::new([Turn::calls([Call::tool("nothing", serde_json::json!({}))])]),
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
