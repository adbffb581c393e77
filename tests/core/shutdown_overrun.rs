//! A shutdown whose grace runs out: no hook task outlives it (on the current thread, on
//! worker threads, inside a subtree shutdown, or when the shutdown future is dropped), and
//! every overrunning agent is killed once and reported once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::testkit::{Call, ScriptedModel, Turn};
use agent_tree::{HookContext, HookError};

use crate::support::harness::{a, builder};
use crate::support::races::{REAL_GUARD, bounded, on_worker_threads};
use crate::support::{catalog, delegator, leaf, within};

/// Counts hook futures alive (started, not dropped).
#[derive(Clone, Default)]
struct Live(Arc<AtomicUsize>);

struct LiveGuard(Arc<AtomicUsize>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Live {
    fn hook(&self) -> impl agent_tree::Hook + use<> {
        let live = self.0.clone();
        move |_ctx: HookContext| {
            let live = live.clone();
            async move {
                live.fetch_add(1, Ordering::SeqCst);
                let _guard = LiveGuard(live);
                // A hook that never returns and ignores its deadline.
                std::future::pending::<()>().await;
                Ok::<(), HookError>(())
            }
        }
    }

    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// A lead that spawns `workers` background workers and hangs, its workers hanging too.
fn team(workers: usize) -> ScriptedModel {
    ScriptedModel::new()
        .script(
            "lead",
            [
                Turn::calls((0..workers).map(|i| Call::spawn_background("w", format!("part {i}")))),
                Turn::hang(),
            ],
        )
        .script("w", [Turn::hang()])
}

/// A tree of `catalog` on `model` with `config`, whose shutdown hook is `live`'s.
async fn hooked_tree(
    model: ScriptedModel,
    catalog: Catalog,
    config: TreeConfig,
    live: &Live,
) -> Tree {
    builder(model, catalog, config)
        .on_shutdown(live.hook())
        .build()
        .await
        .unwrap()
}

/// A tree running `team(workers)` with a hook on shutdown that never returns, once every
/// worker has started.
async fn team_tree(workers: usize, grace: Duration, live: &Live) -> Tree {
    let model = team(workers);
    let config = TreeConfig::default().with_shutdown_grace(grace);
    let catalog = catalog([delegator("lead", &["w"]), leaf("w")]);
    let tree = hooked_tree(model.clone(), catalog, config, live).await;
    tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    // Every worker has started (its one call hangs).
    while model.calls() < workers + 2 {
        tokio::task::yield_now().await;
    }
    tree
}

/// A shutdown past its grace on the current thread kills every agent, reports each hook's
/// failure, and leaves no hook future alive once it returns.
#[tokio::test(start_paused = true)]
async fn no_hook_outlives_shutdown_current_thread() {
    let live = Live::default();
    let tree = team_tree(4, Duration::from_millis(5), &live).await;
    let report = within("shutdown", tree.shutdown()).await;
    assert_eq!(report.killed.len(), 5, "{report:?}");
    assert!(report.graceful.is_empty(), "{report:?}");
    assert_eq!(report.hook_failures.len(), 5, "{report:?}");
    // The hook tasks were cancelled: let them run once.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(live.count(), 0, "hook futures still alive after shutdown");
    assert!(tree.alive_actors().is_empty());
}

/// Tiny graces on worker threads: the kill can come before (or while) the first agent starts
/// its hooks. A hook started then still ends with the shutdown.
#[test]
fn no_hook_outlives_shutdown_multi_thread() {
    let round = AtomicUsize::new(0);
    on_worker_threads(40, Duration::from_secs(60), || {
        let n = round.fetch_add(1, Ordering::SeqCst) as u64;
        async move {
            let live = Live::default();
            let grace = Duration::from_micros(1 + 50 * (n % 20));
            let tree = team_tree(4, grace, &live).await;
            let report = bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
            assert!(report.graceful.is_empty(), "{report:?}");
            assert!(tree.alive_actors().is_empty(), "run {n}");
            // Hook tasks end with the kill token, on the runtime's other worker: allow them
            // a bounded moment, never forever.
            bounded(REAL_GUARD, "the hook futures' drop", async {
                while live.count() != 0 {
                    tokio::task::yield_now().await;
                }
            })
            .await;
            drop(tree);
        }
    });
}

/// A subtree's shutdown overlapping the tree's (one grace each) kills every agent between
/// them and leaves no hook future alive.
#[tokio::test(start_paused = true)]
async fn a_subtree_shutdown_inside_a_tree_shutdown_leaves_no_hook() {
    // Overlapping: shutdown_agent(lead) and the tree's shutdown, one grace each.
    let live = Live::default();
    let tree = Arc::new(team_tree(4, Duration::from_millis(20), &live).await);
    let t = tree.clone();
    let sub = tokio::spawn(async move { t.shutdown_agent(a(1)).await });
    tokio::task::yield_now().await;
    let report = within("shutdown", tree.shutdown()).await;
    let sub = sub.await.unwrap().unwrap();
    let mut killed: Vec<AgentId> = report.killed.iter().chain(&sub.killed).copied().collect();
    killed.sort();
    killed.dedup();
    assert_eq!(killed.len(), 5, "{report:?} {sub:?}");
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        live.count(),
        0,
        "hook futures still alive after both shutdowns"
    );
    assert!(tree.alive_actors().is_empty());
}
/// A shutdown dropped before its kill: its backstop still ends the hooks a little after
/// the deadline.
#[tokio::test(start_paused = true)]
async fn a_dropped_shutdown_still_ends_its_hooks() {
    let live = Live::default();
    let tree = team_tree(3, Duration::from_millis(20), &live).await;
    let _ = tokio::time::timeout(Duration::from_millis(5), tree.shutdown()).await;
    assert_eq!(live.count(), 4, "every agent runs its hook");
    tokio::time::sleep(
        Duration::from_millis(20) + agent_tree::SHUTDOWN_KILL_WAIT + Duration::from_millis(1),
    )
    .await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        live.count(),
        0,
        "hooks of a dropped shutdown outlive its deadline"
    );
}

/// A deep chain overrunning its grace is killed in one pass: each agent appears once in the
/// report, killed or graceful, and each killed one is `killed` in the snapshot.
#[tokio::test(start_paused = true)]
async fn a_deep_chain_overrunning_is_killed_once_each_in_the_report() {
    let depth = 30u64;
    let mut model = ScriptedModel::new();
    model = model.script(
        "c",
        [
            Turn::calls([Call::spawn_background("c", "deeper")]),
            Turn::hang(),
        ],
    );
    let live = Live::default();
    let config = TreeConfig::default()
        .with_shutdown_grace(Duration::from_millis(10))
        .with_max_depth(depth as u32);
    let catalog = catalog([
        AgentDefinition::new("c", "").with_allowed_subagents(SubagentAllowance::only(["c"]))
    ]);
    let tree = hooked_tree(model.clone(), catalog, config, &live).await;
    tree.spawn(SpawnRequest::new("c", "go")).await.unwrap();
    for _ in 0..10_000 {
        if tree.snapshot().agents().count() as u64 >= depth {
            break;
        }
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
    let n = tree.snapshot().agents().count();
    let report = within("shutdown", tree.shutdown()).await;
    let mut killed = report.killed.clone();
    killed.sort();
    killed.dedup();
    assert_eq!(killed.len(), report.killed.len(), "each once: {report:?}");
    assert_eq!(report.killed.len() + report.graceful.len(), n, "{report:?}");
    assert!(tree.alive_actors().is_empty());
    let snapshot = tree.snapshot();
    for id in &report.killed {
        assert_eq!(
            snapshot.record(*id).map(|r| r.status),
            Some(AgentStatus::Killed),
            "{id}"
        );
    }
}
