//! No actor is alive when `Tree::shutdown` returns, whatever the tree's shape and timing:
//! random trees, agents settling as it begins, descendants of a just-killed agent. A hook
//! that blocks its thread does not stretch the deadline, even with every worker blocked
//! (real multi-thread runtimes of 1 and 2 workers).

use std::sync::Arc;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::testkit::{Call, ScriptedModel, Turn};
use agent_tree::{HookContext, HookError};

use crate::support::harness::a;
use crate::support::lifetimes::{hanging, ms};
use crate::support::races::{GUARD, REAL_GUARD, bounded, yields};
use crate::support::scripts::spawns_n_in_background;
use crate::support::{RecordingModel, catalog, delegator, leaf, spawn_admitted};

/// One random tree: `leads` leads, each with background workers; models that answer soon,
/// later or hang; shutdown hooks that return at once, take a few ms, or hang (killed at the
/// deadline); some agents settle just before the shutdown starts.
async fn random_tree(rng: &mut crate::support::harness::Rng) -> (Tree, RecordingModel) {
    let workers = rng.range(0, 4) as usize;
    let lead_then = match rng.below(3) {
        0 => Turn::hang(),
        1 => Turn::answer("lead done").after(ms(rng.range(0, 3))),
        _ => Turn::calls([Call::wait(
            (0..workers).map(agent_tree::testkit::Target::Spawned),
            WaitPolicy::AllSettled,
        )]),
    };
    let worker_turn = match rng.below(3) {
        0 => Turn::hang(),
        _ => Turn::answer("worker done").after(ms(rng.range(0, 3))),
    };
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                [
                    spawns_n_in_background("worker", "w", workers),
                    lead_then,
                    Turn::answer("lead done"),
                ],
            )
            .script("worker", [worker_turn])
            .script("quick", [Turn::answer("quick done")]),
    );
    let hang_hook = rng.chance(40);
    let seed = rng.next_u64();
    let tree = Tree::builder()
        .config(
            TreeConfig::default()
                .with_shutdown_grace(ms(rng.range(5, 20)))
                .with_max_total_agents(256),
        )
        .catalog(catalog([
            delegator("lead", &["worker"]).with_settle(if rng.chance(50) {
                SettlePolicy::Drain
            } else {
                SettlePolicy::AbortChildren
            }),
            leaf("worker"),
            leaf("quick"),
        ]))
        .model(model.clone())
        .on_shutdown(move |ctx: HookContext| async move {
            let n = ctx.agent.get().wrapping_mul(seed | 1) >> 7;
            match n % 4 {
                0 if hang_hook => std::future::pending::<()>().await,
                1 => tokio::time::sleep(ms(n % 3)).await,
                2 => tokio::task::yield_now().await,
                _ => {}
            }
            Ok::<(), HookError>(())
        })
        .build()
        .await
        .expect("the tree builds");
    (tree, model)
}

/// Fails naming `what`, how many of `runs` it was and the first of `bad`, unless `bad` is
/// empty.
fn assert_none_bad(bad: &[String], runs: u64, what: &str) {
    assert!(
        bad.is_empty(),
        "{} of {runs} {what}; first: {}",
        bad.len(),
        bad.first().map(String::as_str).unwrap_or_default()
    );
}

/// right after `tree.shutdown().await` returns, `tree.alive_actors()` must be
/// empty: shutdown returns only when every actor of the tree has exited. Worker threads, many
/// trees of varied shape, some with hanging models and hooks, some agents settling just
/// before the shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_actor_is_alive_when_shutdown_returns_mt() {
    const TREES: u64 = 300;
    let mut rng = crate::support::harness::Rng::new(7);
    let mut bad = Vec::new();
    for run in 0..TREES {
        let (tree, _model) = random_tree(&mut rng).await;
        for _ in 0..rng.range(1, 4) {
            spawn_admitted(&tree, SpawnRequest::new("lead", "go")).await;
        }
        if rng.chance(50) {
            // One settles just before the shutdown begins.
            let _ = bounded(
                REAL_GUARD,
                "quick",
                tree.run(SpawnRequest::new("quick", "now")),
            )
            .await;
        }
        yields(rng.range(0, 40)).await;
        if rng.chance(30) {
            tokio::time::sleep(ms(rng.range(1, 3))).await;
        }
        let report = bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
        let alive = tree.alive_actors();
        if !alive.is_empty() {
            let statuses: Vec<_> = alive
                .iter()
                .map(|&id| (id, tree.record(id).map(|r| r.status)))
                .collect();
            bad.push(format!(
                "tree {run}: alive {statuses:?} (report {report:?})"
            ));
        }
    }
    assert_none_bad(&bad, TREES, "shutdowns returned with actors still alive");
}

/// The simplest shape: an agent that settled an instant ago (its actor still
/// stopping) must not be alive once `shutdown` returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_just_settled_is_not_alive_after_shutdown_mt() {
    const RUNS: u64 = 200;
    let mut bad = Vec::new();
    for run in 0..RUNS {
        let model = ScriptedModel::new().script("quick", [Turn::answer("done")]);
        let tree =
            crate::support::harness::tree(model, catalog([leaf("quick")]), TreeConfig::default())
                .await;
        let _ = bounded(
            REAL_GUARD,
            "quick",
            tree.run(SpawnRequest::new("quick", "now")),
        )
        .await;
        yields(run % 3).await;
        let _ = bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
        let alive = tree.alive_actors();
        if !alive.is_empty() {
            bad.push((run, alive));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {RUNS} shutdowns returned with an actor alive: {:?}",
        bad.len(),
        &bad[..bad.len().min(8)]
    );
}

/// Paused time: leads (with and without workers, drain or not) settle at the very
/// instant the shutdown begins. Every actor must have exited when `shutdown` returns.
#[tokio::test(start_paused = true)]
async fn agents_settling_as_the_shutdown_begins_are_not_alive_after_it() {
    let mut bad = Vec::new();
    for variant in 0..24u64 {
        let workers = (variant % 3) as usize;
        let model = ScriptedModel::new()
            .script(
                "lead",
                [
                    spawns_n_in_background("worker", "w", workers),
                    Turn::answer("lead done").after(ms(10)),
                ],
            )
            .script(
                "worker",
                [Turn::answer("worker done").after(ms(10 - variant / 12))],
            );
        let settle = if variant / 3 % 2 == 0 {
            SettlePolicy::Drain
        } else {
            SettlePolicy::AbortChildren
        };
        let builder = Tree::builder()
            .catalog(catalog([
                delegator("lead", &["worker"]).with_settle(settle),
                leaf("worker"),
            ]))
            .model(model);
        let builder = if variant / 6 % 2 == 0 {
            builder.on_shutdown(|_ctx: HookContext| async move { Ok::<(), HookError>(()) })
        } else {
            builder
        };
        let tree = builder.build().await.expect("the tree builds");
        spawn_admitted(&tree, SpawnRequest::new("lead", "go")).await;
        tokio::time::sleep(ms(10)).await;
        let report = bounded(GUARD, "shutdown", tree.shutdown()).await;
        let alive = tree.alive_actors();
        if !alive.is_empty() {
            bad.push(format!(
                "variant {variant}: alive {alive:?}, report {report:?}"
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "shutdown returned with actors alive: {bad:#?}"
    );
}

/// lead (a1) with `workers` hanging workers, each with `subs` hanging sub-workers.
async fn killable_team(workers: usize, subs: usize) -> (Tree, RecordingModel) {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                [spawns_n_in_background("worker", "w", workers), Turn::hang()],
            )
            .script(
                "worker",
                [spawns_n_in_background("sub", "s", subs), Turn::hang()],
            )
            .script("sub", hanging(1)),
    );
    let config = TreeConfig::default()
        .with_max_total_agents(512)
        .with_max_children_per_agent(64);
    let team = catalog([
        delegator("lead", &["worker"]),
        delegator("worker", &["sub"]),
        leaf("sub"),
    ]);
    (
        crate::support::harness::tree(model.clone(), team, config).await,
        model,
    )
}

/// No actor is alive when `shutdown` returns, also when it starts right after
/// `Tree::kill(lead)`, which records the lead's descendants `killed` at once while ractor is
/// still killing their actors (terminal records, live actors).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descendants_of_a_killed_agent_are_not_alive_after_shutdown_mt() {
    const RUNS: u64 = 300;
    let mut bad = Vec::new();
    for run in 0..RUNS {
        let (workers, subs) = (4 + (run % 4) as usize, (run % 3) as usize);
        let (tree, model) = killable_team(workers, subs).await;
        spawn_admitted(&tree, SpawnRequest::new("lead", "go")).await;
        let total = 1 + workers + workers * subs;
        bounded(
            REAL_GUARD,
            "every agent's model call",
            model.until("every agent in flight", |calls| {
                calls.len() >= total + 1 + workers * usize::from(subs > 0)
            }),
        )
        .await;
        tree.kill(a(1)).expect("the lead runs");
        bounded(REAL_GUARD, "idle", tree.idle()).await;
        yields(run % 3).await;
        let report = bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
        let alive = tree.alive_actors();
        if !alive.is_empty() {
            bad.push(format!("run {run}: alive {alive:?} (report {report:?})"));
        }
    }
    assert_none_bad(
        &bad,
        RUNS,
        "shutdowns returned with actors of a killed subtree alive",
    );
}

/// Paused time: the same right after `Tree::kill(lead)`.
#[tokio::test(start_paused = true)]
async fn descendants_of_a_killed_agent_are_not_alive_after_shutdown() {
    let mut bad = Vec::new();
    for variant in 0..6u64 {
        let (workers, subs) = (3 + variant as usize, (variant % 3) as usize);
        let (tree, model) = killable_team(workers, subs).await;
        spawn_admitted(&tree, SpawnRequest::new("lead", "go")).await;
        let total = 1 + workers + workers * subs;
        model
            .until("every agent in flight", |calls| {
                calls.len() >= total + 1 + workers * usize::from(subs > 0)
            })
            .await;
        tree.kill(a(1)).expect("the lead runs");
        bounded(GUARD, "idle", tree.idle()).await;
        let report = bounded(GUARD, "shutdown", tree.shutdown()).await;
        let alive = tree.alive_actors();
        if !alive.is_empty() {
            bad.push(format!(
                "variant {variant}: alive {alive:?} (report {report:?})"
            ));
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

/// What one blocking-hook shutdown did.
#[derive(Debug)]
#[allow(dead_code)] // read through `Debug` in the failure messages
struct BlockedShutdown {
    took: Duration,
    killed: Vec<AgentId>,
    alive_after: Vec<AgentId>,
}

/// lead (a1) with four hanging workers (a2..a5); the shutdown hooks of `blocking` block their
/// thread for 2 s (`std::thread::sleep`, not an await); grace 300 ms; a real multi-thread
/// runtime of `workers` worker threads. The shutdown is awaited by a task on the runtime
/// (`spawned`) or from `block_on`.
fn blocking_hook_shutdown(
    workers: usize,
    blocking: &'static [u64],
    spawned: bool,
) -> BlockedShutdown {
    let runtime = crate::support::races::runtime_on(workers);
    let result = runtime.block_on(async move {
        let model = RecordingModel::new(
            ScriptedModel::new()
                .script(
                    "lead",
                    [spawns_n_in_background("worker", "w", 4), Turn::hang()],
                )
                .script("worker", hanging(1)),
        );
        let tree = Tree::builder()
            .config(TreeConfig::default().with_shutdown_grace(ms(300)))
            .catalog(catalog([delegator("lead", &["worker"]), leaf("worker")]))
            .model(model.clone())
            .on_shutdown(move |ctx: HookContext| async move {
                if blocking.contains(&ctx.agent.get()) {
                    std::thread::sleep(Duration::from_secs(2));
                }
                Ok::<(), HookError>(())
            })
            .build()
            .await
            .expect("the tree builds");
        spawn_admitted(&tree, SpawnRequest::new("lead", "go")).await;
        bounded(
            REAL_GUARD,
            "every worker's model call",
            model.until_all_calls(&[a(2), a(3), a(4), a(5)], 1),
        )
        .await;
        let tree = Arc::new(tree);
        let start = std::time::Instant::now();
        let (killed, alive_after) = if spawned {
            let tree = tree.clone();
            tokio::spawn(async move {
                let killed = tree.shutdown().await.killed;
                (killed, tree.alive_actors())
            })
            .await
            .expect("the shutdown task")
        } else {
            let killed = tree.shutdown().await.killed;
            (killed, tree.alive_actors())
        };
        BlockedShutdown {
            took: start.elapsed(),
            killed,
            alive_after,
        }
    });
    // Do not wait for a blocked worker thread.
    runtime.shutdown_background();
    result
}

const BLOCKED_HOOK_BOUND: Duration = Duration::from_millis(1300);

/// one shutdown hook (a3's) blocks its thread for 2 s; the shutdown, with a 300 ms
/// grace, must return within the grace plus 1 s, with no actor left alive. Real 2-worker
/// runtime; awaited from a task and from `block_on` (one run each).
#[test]
fn one_blocking_shutdown_hook_does_not_stretch_the_grace() {
    let mut over = Vec::new();
    for spawned in [true, false] {
        let got = blocking_hook_shutdown(2, &[3], spawned);
        if got.took > BLOCKED_HOOK_BOUND || !got.alive_after.is_empty() {
            over.push(format!(
                "awaited {}: {got:?}",
                if spawned {
                    "in a task"
                } else {
                    "from block_on"
                }
            ));
        }
    }
    assert!(
        over.is_empty(),
        "a hook blocking its thread for 2 s stretched the 300 ms grace past \
         {BLOCKED_HOOK_BOUND:?}: {over:?}"
    );
}
