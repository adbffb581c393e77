//! An agent aborted while it waits for a pool slot never starts: no `started` event, no
//! actor, no model call — not when the slot frees, not when the pool grows. It settles
//! `aborted` at once, and the queue moves on to the next agent in FIFO order. A shutdown
//! settles queued agents the same way.

use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, EventKind};
use agent_tree::testkit::{Script, ScriptedModel, Turn};

use crate::support::harness::{a, tree};
use crate::support::lifetimes::{hanging, ms};
use crate::support::{RecordingModel, catalog, leaf, spawn_admitted, within};

/// A pool of one: a1 runs (hanging), a2 and a3 wait in the queue.
async fn full_pool() -> (Tree, RecordingModel, agent_tree::EventStream) {
    let scripted = ScriptedModel::new().script("worker", hanging(1));
    scripted.script_agent(
        a(3),
        Script::new([Turn::answer("third done").after(ms(10))]),
    );
    let model = RecordingModel::new(scripted);
    let tree = tree(
        model.clone(),
        catalog([leaf("worker")]),
        TreeConfig::default().with_max_concurrent(1),
    )
    .await;
    let events = tree.subscribe();
    for i in 1..=3 {
        spawn_admitted(
            &tree,
            SpawnRequest::new("worker", format!("job {i}")).background(),
        )
        .await;
    }
    model.until_calls(a(1), 1).await;
    for id in [a(2), a(3)] {
        assert_eq!(
            tree.record(id).expect("rec").status,
            AgentStatus::Queued,
            "{id}"
        );
    }
    (tree, model, events)
}

#[tokio::test(start_paused = true)]
async fn an_aborted_queued_agent_never_starts() {
    let (tree, model, mut events) = full_pool().await;
    tree.abort(a(2)).expect("a2 exists");
    // Settled at once: no actor had to do anything.
    let outcome = tree.outcome(a(2)).expect("settled at once");
    assert_eq!(
        (outcome.status, outcome.reason),
        (AgentStatus::Aborted, EndReason::Aborted)
    );
    // Free the slot: a3, next in line, starts and completes; a2 stays as it was.
    tree.abort(a(1)).expect("a1 exists");
    let third = within("a3", async {
        tree.handle(a(3)).expect("a3").outcome().await
    })
    .await;
    assert_eq!(third.text.as_deref(), Some("third done"));
    // Growing the pool starts nothing either.
    tree.set_max_concurrent(4);
    within("idle", tree.idle()).await;
    let events = events.drain();
    let of_a2: Vec<(&str, Option<EndReason>)> = events
        .iter()
        .filter(|e| e.agent == a(2))
        .map(|e| (e.kind.name(), e.kind.reason()))
        .collect();
    assert_eq!(
        of_a2,
        [("queued", None), ("aborted", Some(EndReason::Aborted))]
    );
    assert_eq!(model.count_of(a(2)), 0);
    let record = tree.record(a(2)).expect("rec");
    assert_eq!(record.started_ms, None, "never started");
    assert!(record.children.is_empty());
    assert!(!tree.alive_actors().contains(&a(2)));
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_settles_queued_agents_without_starting_them() {
    let (tree, model, mut events) = full_pool().await;
    let report = within("shutdown", tree.shutdown()).await;
    assert_eq!(report.killed, []);
    for id in [a(2), a(3)] {
        let outcome = tree.outcome(id).expect("settled");
        assert_eq!(
            (outcome.status, outcome.reason),
            (AgentStatus::Aborted, EndReason::Shutdown),
            "{id}"
        );
        assert_eq!(model.count_of(id), 0, "{id}");
        assert_eq!(tree.record(id).expect("rec").started_ms, None, "{id}");
    }
    let started: Vec<AgentId> = events
        .drain()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Started { .. }))
        .map(|e| e.agent)
        .collect();
    assert_eq!(
        started,
        [a(1)],
        "only the agent that held the slot ever started"
    );
    assert!(tree.alive_actors().is_empty());
}
