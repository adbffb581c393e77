//! The `max_concurrent` pool: top-level background agents beyond the pool are `queued` and
//! start in FIFO order as slots free; raising the limit drains the queue; an aborted queued
//! agent never starts; nested children bypass the pool, so a pooled agent can delegate while
//! the pool is full. A freed slot goes to the head of the queue, never to a newcomer.

use agent_tree::testkit::EventProbe;
use std::sync::Arc;
use std::time::Duration;

use crate::support::WAIT_LIMIT;
use crate::support::catalog;
use crate::support::harness::{a, idle, outcome_of, started, tree};
use crate::support::scripts::answers_after;
use crate::support::spawn_admitted;
use agent_tree::prelude::*;
use agent_tree::protocol::{Event, EventKind};
use agent_tree::testkit::{Script, ScriptedModel, Turn};

fn workers() -> Catalog {
    catalog([
        AgentDefinition::new("worker", ""),
        AgentDefinition::new("boss", "").with_allowed_subagents(SubagentAllowance::All),
    ])
}

/// A tree of [`workers`] on a clone of `model`, with `slots` pool slots.
async fn pool_of(slots: usize, model: &ScriptedModel) -> Tree {
    let config = TreeConfig::default().with_max_concurrent(slots);
    tree(model.clone(), workers(), config).await
}

fn is_started(e: &Event) -> bool {
    matches!(e.kind, EventKind::Started { .. })
}

fn is_queued(e: &Event) -> bool {
    matches!(e.kind, EventKind::Queued { .. })
}

/// Top-level background agents beyond `max_concurrent` are `queued` and start in FIFO order
/// as slots free.
#[tokio::test(start_paused = true)]
async fn agents_beyond_the_pool_queue_and_start_fifo_as_slots_free() {
    let model = ScriptedModel::new();
    // a1 finishes first (10 ms), a2 later (25 ms); each queued agent then works 10 ms.
    let work = |ms| Script::new(answers_after("done", Duration::from_millis(ms)));
    model.script_agent(a(1), work(10));
    model.script_agent(a(2), work(25));
    for n in 3..=6 {
        model.script_agent(a(n), work(10));
    }
    let tree = pool_of(2, &model).await;
    let mut events = tree.subscribe();
    for n in 1..=6u64 {
        let handle = spawn_admitted(
            &tree,
            SpawnRequest::new("worker", format!("job {n}")).background(),
        )
        .await;
        assert_eq!(handle.id(), a(n));
    }
    for n in 3..=6 {
        assert_eq!(tree.record(a(n)).unwrap().status, AgentStatus::Queued);
    }
    idle(&tree).await;

    // Replay: at most two running at once, queued agents start in admission order.
    let mut running = 0usize;
    let mut peak = 0usize;
    let mut start_order = Vec::new();
    let mut queued = Vec::new();
    for e in events.drain() {
        match &e.kind {
            EventKind::Queued { .. } => queued.push(e.agent),
            EventKind::Started { .. } => {
                running += 1;
                peak = peak.max(running);
                start_order.push(e.agent);
            }
            k if k.terminal_status().is_some() => running -= 1,
            _ => {}
        }
    }
    assert_eq!(queued, [a(3), a(4), a(5), a(6)]);
    assert_eq!(start_order, [a(1), a(2), a(3), a(4), a(5), a(6)]);
    assert_eq!(peak, 2);
    // Slots freed at 10 (a1), 20 (a3), 25 (a2), 30 (a4): each queued agent started then.
    let started_at = |n| tree.record(a(n)).unwrap().started_ms.unwrap();
    assert_eq!(
        [started_at(3), started_at(4), started_at(5), started_at(6)],
        [10, 20, 25, 30]
    );
    assert!(
        tree.snapshot()
            .agents()
            .all(|r| r.status == AgentStatus::Completed)
    );
    tree.shutdown().await;
}

/// Raising the pool's limit starts queued agents at once, in FIFO order, up to the new limit;
/// the rest stay queued.
#[tokio::test(start_paused = true)]
async fn raising_the_limit_drains_the_queue() {
    let model = ScriptedModel::new().script("worker", [Turn::hang()]);
    let tree = pool_of(1, &model).await;
    let mut events = EventProbe::new(&tree);
    for n in 1..=4 {
        spawn_admitted(
            &tree,
            SpawnRequest::new("worker", format!("job {n}")).background(),
        )
        .await;
    }
    events.expect_event("a start", started(a(1))).await;
    let queued = events.receive_n(3, "a queued agent", is_queued).await;
    assert_eq!(
        queued.iter().map(|e| e.agent).collect::<Vec<_>>(),
        [a(2), a(3), a(4)]
    );
    tree.set_max_concurrent(3);
    let drained = events.receive_n(2, "a dequeued start", is_started).await;
    assert_eq!(
        drained.iter().map(|e| e.agent).collect::<Vec<_>>(),
        [a(2), a(3)]
    );
    assert_eq!(tree.record(a(4)).unwrap().status, AgentStatus::Queued);
    tree.set_max_concurrent(10);
    events.expect_event("a start", started(a(4))).await;
    tree.shutdown().await;
}

/// An agent aborted while queued settles `aborted` and never starts: the freed slot goes to
/// the next queued agent.
#[tokio::test(start_paused = true)]
async fn an_aborted_queued_agent_never_starts() {
    let model = ScriptedModel::new()
        .script("worker", [Turn::answer("done")])
        .script("boss", [Turn::hang()]);
    let tree = pool_of(1, &model).await;
    let mut events = EventProbe::new(&tree);
    let blocker = spawn_admitted(
        &tree,
        SpawnRequest::new("boss", "hold the slot").background(),
    )
    .await;
    let victim = spawn_admitted(
        &tree,
        SpawnRequest::new("worker", "never runs").background(),
    )
    .await;
    let next = spawn_admitted(&tree, SpawnRequest::new("worker", "runs").background()).await;
    events.expect_event("a start", started(blocker.id())).await;
    assert_eq!(
        tree.record(victim.id()).unwrap().status,
        AgentStatus::Queued
    );

    tree.abort(victim.id()).unwrap();
    let aborted = outcome_of(&tree, victim.id()).await;
    assert_eq!(aborted.status, AgentStatus::Aborted);
    assert_eq!(aborted.reason, agent_tree::protocol::EndReason::Aborted);

    // Free the slot: the next queued agent starts, the aborted one never does.
    tree.abort(blocker.id()).unwrap();
    let done = outcome_of(&tree, next.id()).await;
    assert!(done.is_completed(), "{}", done.summary());
    idle(&tree).await;
    let log = events.drain();
    assert!(
        !log.iter().any(|e| e.agent == victim.id() && is_started(e)),
        "the aborted queued agent started"
    );
    assert_eq!(model.calls_by(victim.id()), 0);
    let record = tree.record(victim.id()).unwrap();
    assert_eq!(record.status, AgentStatus::Aborted);
    assert_eq!(record.started_ms, None);
    tree.shutdown().await;
}

/// Nested children bypass the pool, so a pooled agent can spawn and wait on children while
/// the pool is full and others are queued.
#[tokio::test(start_paused = true)]
async fn nested_children_bypass_a_full_pool() {
    // Pool of one, held by the pooled boss; a second pooled agent waits. The boss still
    // spawns (and waits on) two foreground children, which would deadlock if they queued.
    let model = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::calls([
                    agent_tree::testkit::Call::spawn("worker", "one"),
                    agent_tree::testkit::Call::spawn("worker", "two"),
                ]),
                Turn::answer("boss done"),
            ],
        )
        .script("worker", answers_after("worked", Duration::from_millis(5)));
    let tree = pool_of(1, &model).await;
    let mut events = tree.subscribe();
    let mut boss = spawn_admitted(&tree, SpawnRequest::new("boss", "delegate").background()).await;
    let waiting = spawn_admitted(
        &tree,
        SpawnRequest::new("worker", "wait for the pool").background(),
    )
    .await;
    assert_eq!(
        tree.record(waiting.id()).unwrap().status,
        AgentStatus::Queued
    );
    let outcome = tokio::time::timeout(crate::support::harness::GUARD, boss.outcome())
        .await
        .expect("the pooled boss deadlocked on its children");
    assert!(outcome.is_completed(), "{}", outcome.summary());
    idle(&tree).await;
    let log = events.drain();
    let children = tree.record(boss.id()).unwrap().children;
    assert_eq!(children.len(), 2);
    for child in &children {
        assert_eq!(tree.record(*child).unwrap().depth, 2);
        assert!(
            !log.iter().any(|e| e.agent == *child && is_queued(e)),
            "{child} was queued"
        );
    }
    // The queued top-level agent started only after the boss freed its slot.
    let boss_end = tree.record(boss.id()).unwrap().ended_ms.unwrap();
    let waited = tree.record(waiting.id()).unwrap();
    assert_eq!(waited.status, AgentStatus::Completed);
    assert!(waited.started_ms.unwrap() >= boss_end);
    tree.shutdown().await;
}

/// A slot freed by a finishing pooled agent goes to the agent at the head of the queue, not
/// to a spawn made in the meantime (FIFO; a stream of spawns cannot starve the queue).
#[tokio::test(start_paused = true)]
async fn a_freed_pool_slot_goes_to_the_queue_head_not_a_newcomer() {
    let model = ScriptedModel::new()
        .script("first", answers_after("a", Duration::from_millis(10)))
        .script("w", [Turn::answer("w")]);
    let catalog = catalog([
        AgentDefinition::new("first", ""),
        AgentDefinition::new("w", ""),
    ]);
    let tree = Arc::new(tree(model, catalog, TreeConfig::default().with_max_concurrent(1)).await);
    let mut events = tree.subscribe();
    let mut first = spawn_admitted(&tree, SpawnRequest::new("first", "go").background()).await;
    let queued = spawn_admitted(&tree, SpawnRequest::new("w", "queued").background()).await;
    assert_eq!(
        tree.record(queued.id()).unwrap().status,
        AgentStatus::Queued
    );
    // An application task that starts more work as soon as earlier work finishes.
    let t = tree.clone();
    let late = tokio::spawn(async move {
        let _ = first.outcome().await;
        // The slot is free now; the queued agent is first in line.
        spawn_admitted(&t, SpawnRequest::new("w", "late").background()).await
    })
    .await
    .unwrap();
    let _ = tokio::time::timeout(WAIT_LIMIT, tree.idle()).await;
    let mut order = Vec::new();
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_millis(1), events.next()).await {
        if matches!(e.kind, EventKind::Started { .. }) {
            order.push(e.agent);
        }
    }
    assert_eq!(
        order,
        vec![a(1), queued.id(), late.id()],
        "FIFO: the queued agent must start before the newcomer"
    );
}
