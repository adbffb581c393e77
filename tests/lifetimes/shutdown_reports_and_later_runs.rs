//! What a shutdown leaves behind: a run resumed after a shutdown is free of it (its
//! deadline does not kill the new run and its failures restart as usual); overlapping
//! shutdowns report a killed agent killed; a queued agent is in the report; the root's handle
//! resolves, and a failed root stays failed; shutting a permanent child down lets its running
//! owner settle. After a shutdown, records and outcomes stay readable.

use std::sync::Arc;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{RestartPolicy, Strategy};
use agent_tree::testkit::{ScriptedModel, Turn};
use agent_tree::{HookContext, HookError};

use crate::support::harness::{a, tree};
use crate::support::{WAIT_LIMIT, catalog, delegator_of_all, spawn_admitted};

/// A resume starts a new run free of the shutdown that ended the last one: its failures
/// restart as usual.
#[tokio::test(start_paused = true)]
async fn a_resumed_agent_is_not_under_an_old_shutdown() {
    let model = ScriptedModel::new().script(
        "flaky",
        [
            Turn::hang(),
            Turn::fail("boom"),
            Turn::answer("restarted ok"),
        ],
    );
    let catalog =
        catalog([AgentDefinition::new("flaky", "").with_restart(RestartPolicy::Transient)]);
    let tree = tree(model.clone(), catalog, TreeConfig::default()).await;
    let h = tree.spawn(SpawnRequest::new("flaky", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let report = tree.shutdown_agent(h.id()).await.unwrap();
    assert_eq!(report.graceful, vec![h.id()]);
    let mut h2 = tree.resume(h.id(), "again").await.unwrap();
    let _ = tokio::time::timeout(WAIT_LIMIT, h2.outcome()).await;
    let rec = tree.record(h.id()).unwrap();
    assert_eq!(
        rec.incarnation, 2,
        "transient failure after resume not restarted: {:?}",
        rec.outcome
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
            [
                Turn::spawn_background("slow", "x"),
                Turn::hang(),
                // the resumed run: a child, then it works on
                Turn::spawn_background("kid", "y"),
                Turn::hang(),
            ],
        )
        .script("slow", [Turn::hang()])
        .script("kid", [Turn::hang()]);
    let catalog = catalog([
        delegator_of_all("boss"),
        AgentDefinition::new("slow", "").detached(),
        AgentDefinition::new("kid", ""),
    ]);
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
    let model = ScriptedModel::new().script("w", [Turn::hang()]);
    let catalog = catalog([AgentDefinition::new("w", "")]);
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
    let model = ScriptedModel::new().script("w", [Turn::hang()]);
    let catalog = catalog([AgentDefinition::new("w", "")]);
    let tree = tree(model, catalog, TreeConfig::default().with_max_concurrent(1)).await;
    let _r = spawn_admitted(&tree, SpawnRequest::new("w", "run").background()).await;
    let q = spawn_admitted(&tree, SpawnRequest::new("w", "wait").background()).await;
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
        tokio::time::timeout(WAIT_LIMIT, root.outcome())
            .await
            .is_ok(),
        "root handle hangs after shutdown"
    );
}

/// `shutdown_agent` on a permanent background child while its owner runs: no restart, and
/// the owner is told. (It asserts only that the owner settles within the wait limit; the
/// report and the child's record are printed, not checked.)
#[tokio::test(start_paused = true)]
async fn shutting_down_a_permanent_child_lets_its_running_owner_settle() {
    let model = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn_background("kid", "x"),
                Turn::answer("mid").after(Duration::from_millis(0)),
            ],
        )
        .script("kid", [Turn::hang(), Turn::answer("again")]);
    let boss = delegator_of_all("boss").with_settle(agent_tree::protocol::SettlePolicy::Drain);
    let catalog = catalog([
        boss,
        AgentDefinition::new("kid", "").with_restart(RestartPolicy::Permanent),
    ]);
    let tree = tree(model, catalog, TreeConfig::default()).await;
    let mut h = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let r = tree.shutdown_agent(a(2)).await.unwrap();
    let out = tokio::time::timeout(WAIT_LIMIT, h.outcome()).await.unwrap();
    println!(
        "report {r:?} boss {out:?} kid {:?}",
        tree.record(a(2)).map(|r| (r.status, r.incarnation))
    );
}

/// A terminal status is sticky, the root's included: a root that failed by escalation
/// stays `failed` (reason `escalated`) after `Tree::shutdown`.
#[tokio::test(start_paused = true)]
async fn a_failed_root_stays_failed_after_shutdown() {
    let model = ScriptedModel::new().script("flaky", [Turn::fail("boom")]);
    let catalog =
        catalog([AgentDefinition::new("flaky", "").with_restart(RestartPolicy::Transient)]);
    let config =
        TreeConfig::default().with_root_supervision(Strategy::OneForOne, 0, Duration::from_secs(5));
    let tree = tree(model, catalog, config).await;
    let mut h = tree.spawn(SpawnRequest::new("flaky", "go")).await.unwrap();
    let _ = tokio::time::timeout(WAIT_LIMIT, h.outcome()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(tree.record(a(0)).unwrap().status, AgentStatus::Failed);
    tree.shutdown().await;
    let root = tree.record(a(0)).unwrap();
    assert_eq!(
        root.status,
        AgentStatus::Failed,
        "the root's terminal status was rewritten: {:?}",
        root.outcome
    );
}
