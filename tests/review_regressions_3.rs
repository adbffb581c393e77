//! Regressions from a third review: pool FIFO against newcomers, a shutdown deadline and a
//! run resumed after the shutdown began, overlapping shutdowns, queued agents in the report,
//! the root's handle after shutdown, and an owner seeing its child shut down.
mod support;

use std::sync::Arc;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{AgentStatus, EventKind};
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use agent_tree::{HookContext, HookError};
use serde_json::json;
use support::harness::{a, tree};
use support::{WAIT_LIMIT as GUARD, delegator_of_all as delegator};

/// A slot freed by a finishing pooled agent goes to the agent at the head of the queue, not
/// to a spawn made in the meantime (FIFO; a stream of spawns cannot starve the queue).
#[tokio::test(start_paused = true)]
async fn a_freed_pool_slot_goes_to_the_queue_head_not_a_newcomer() {
    let model = ScriptedModel::new()
        .script(
            "first",
            Script::new([Turn::answer("a").after(Duration::from_millis(10))]),
        )
        .script("w", Script::new([Turn::answer("w")]));
    let catalog = Catalog::new([
        AgentDefinition::new("first", ""),
        AgentDefinition::new("w", ""),
    ])
    .unwrap();
    let tree = Arc::new(tree(model, catalog, TreeConfig::default().with_max_concurrent(1)).await);
    let mut events = tree.subscribe();
    let mut first = tree
        .spawn(SpawnRequest::new("first", "go").background())
        .await
        .unwrap();
    let queued = tree
        .spawn(SpawnRequest::new("w", "queued").background())
        .await
        .unwrap();
    assert_eq!(
        tree.record(queued.id()).unwrap().status,
        AgentStatus::Queued
    );
    // An application task that starts more work as soon as earlier work finishes.
    let t = tree.clone();
    let late = tokio::spawn(async move {
        let _ = first.outcome().await;
        // The slot is free now; the queued agent is first in line.
        t.spawn(SpawnRequest::new("w", "late").background())
            .await
            .unwrap()
    })
    .await
    .unwrap();
    let _ = tokio::time::timeout(GUARD, tree.idle()).await;
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

/// A shutdown's deadline does not touch a new run of an agent that settled gracefully within
/// the grace and was resumed before the deadline (the subtree still waited on a detached
/// descendant's hook): the new run and its child keep running, records consistent.
#[tokio::test(start_paused = true)]
async fn a_shutdown_deadline_does_not_kill_a_run_resumed_after_it() {
    let model = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::calls([
                    Call::spawn_background("slow", "x").with_field("detached", json!(true))
                ]),
                Turn::hang(),
                // the resumed run: a child, then it works on
                Turn::calls([Call::spawn_background("kid", "y")]),
                Turn::hang(),
            ]),
        )
        .script("slow", Script::new([Turn::hang()]))
        .script("kid", Script::new([Turn::hang()]));
    let catalog = Catalog::new([
        delegator("boss"),
        AgentDefinition::new("slow", ""),
        AgentDefinition::new("kid", ""),
    ])
    .unwrap();
    let tree = Arc::new(
        Tree::builder()
            .config(TreeConfig::default().with_shutdown_grace(Duration::from_secs(1)))
            .catalog(catalog)
            .model(model)
            .on_shutdown(|ctx: HookContext| async move {
                if ctx.agent_type == "slow" {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                }
                Ok::<(), HookError>(())
            })
            .build()
            .await
            .unwrap(),
    );
    let mut boss = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let t = tree.clone();
    let shutdown = tokio::spawn(async move { t.shutdown_agent(a(1)).await.unwrap() });
    let first = boss.outcome().await;
    assert_eq!(first.status, AgentStatus::Aborted);
    let _h = tree.resume(a(1), "again").await.unwrap();
    let report = shutdown.await.unwrap();
    assert!(
        report.killed.contains(&a(2)),
        "the slow hook is cut off: {report:?}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Whatever happened to the new run, no record may stay live without an actor.
    let kid = tree.record(a(3)).expect("the resumed run spawned a3");
    let alive = tree.alive_actors();
    assert!(
        !kid.status.is_live() || alive.contains(&a(3)),
        "a3 is recorded {:?} but its actor is gone (alive: {alive:?}); live={}",
        kid.status,
        tree.live()
    );
    assert!(
        tree.record(a(1)).unwrap().status.is_live(),
        "the resumed run was killed by the old shutdown: {:?} report {report:?}",
        tree.record(a(1)).unwrap().outcome
    );
}

/// Overlapping shutdowns: an agent killed by the first call's deadline is reported killed by
/// the second too, never graceful.
#[tokio::test(start_paused = true)]
async fn an_agent_killed_by_an_overlapping_shutdown_is_not_reported_graceful() {
    let model = ScriptedModel::new().script("w", Script::new([Turn::hang()]));
    let catalog = Catalog::new([AgentDefinition::new("w", "")]).unwrap();
    let tree = Arc::new(
        Tree::builder()
            .config(TreeConfig::default().with_shutdown_grace(Duration::from_secs(1)))
            .catalog(catalog)
            .model(model)
            .on_shutdown(|_ctx: HookContext| async move {
                std::future::pending::<()>().await;
                Ok::<(), HookError>(())
            })
            .build()
            .await
            .unwrap(),
    );
    let w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let t = tree.clone();
    let id = w.id();
    let first = tokio::spawn(async move { t.shutdown_agent(id).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = tree.shutdown().await;
    let first = first.await.unwrap();
    assert_eq!(tree.record(id).unwrap().status, AgentStatus::Killed);
    assert!(first.killed.contains(&id));
    assert!(
        !second.graceful.contains(&id),
        "killed agent listed as graceful: {second:?}"
    );
}

/// A queued agent stopped by a shutdown is in the report (graceful: it never ran).
#[tokio::test(start_paused = true)]
async fn a_queued_agent_stopped_by_shutdown_is_in_the_report() {
    let model = ScriptedModel::new().script("w", Script::new([Turn::hang()]));
    let catalog = Catalog::new([AgentDefinition::new("w", "")]).unwrap();
    let tree = tree(model, catalog, TreeConfig::default().with_max_concurrent(1)).await;
    let _r = tree
        .spawn(SpawnRequest::new("w", "run").background())
        .await
        .unwrap();
    let q = tree
        .spawn(SpawnRequest::new("w", "wait").background())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let report = tree.shutdown().await;
    assert_eq!(tree.record(q.id()).unwrap().status, AgentStatus::Aborted);
    assert!(
        report.graceful.contains(&q.id()) || report.killed.contains(&q.id()),
        "queued agent unaccounted: {report:?}"
    );
}

/// After `Tree::shutdown`, a handle on the root resolves.
#[tokio::test(start_paused = true)]
async fn the_roots_handle_resolves_after_shutdown() {
    let model = ScriptedModel::new();
    let tree = tree(model, Catalog::default(), TreeConfig::default()).await;
    let mut root = tree.handle(a(0)).unwrap();
    tree.shutdown().await;
    assert!(
        tokio::time::timeout(GUARD, root.outcome()).await.is_ok(),
        "root handle hangs after shutdown"
    );
}

/// `shutdown_agent` on a permanent background child while its owner runs: no restart, and
/// the owner is told.
#[tokio::test(start_paused = true)]
async fn probe_owner_sees_shut_down_child() {
    use agent_tree::protocol::RestartPolicy;
    let model = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::calls([Call::spawn_background("kid", "x")]),
                Turn::answer("mid").after(Duration::from_millis(0)),
            ]),
        )
        .script("kid", Script::new([Turn::hang(), Turn::answer("again")]));
    let boss = delegator("boss").with_settle(agent_tree::protocol::SettlePolicy::Drain);
    let catalog = Catalog::new([
        boss,
        AgentDefinition::new("kid", "").with_restart(RestartPolicy::Permanent),
    ])
    .unwrap();
    let tree = tree(model, catalog, TreeConfig::default()).await;
    let mut h = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let r = tree.shutdown_agent(a(2)).await.unwrap();
    let out = tokio::time::timeout(GUARD, h.outcome()).await.unwrap();
    println!(
        "report {r:?} boss {out:?} kid {:?}",
        tree.record(a(2)).map(|r| (r.status, r.incarnation))
    );
}
