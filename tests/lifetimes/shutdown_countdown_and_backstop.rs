//! A shutdown counts each of its agents down once and ends them by its deadline, whoever
//! else is ending them and whether or not its caller still waits:
//!
//! * overlapping shutdowns (a subtree's and the tree's) both return as soon as the agents
//!   settled, not at a deadline, and report every agent graceful;
//! * a shutdown landing anywhere in a supervisor's restart loop returns when the runs it
//!   reaches settle, kills nobody and leaves no actor alive;
//! * a child killed at a `shutdown_agent` deadline in the instant it settles is heard of by
//!   its waiting owner, exactly once;
//! * a shutdown dropped by its caller before its deadline still ends its agents at the
//!   backstop (deadline + `SHUTDOWN_KILL_WAIT`), even one whose hook blocks its thread, and
//!   its hook tasks end there.
//!
//! Paused-time tests are deterministic; `_mt` tests loop a race on worker threads or build a
//! real multi-thread runtime.

use std::sync::Arc;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::testkit::{EventProbe, Script, ScriptedModel, Turn};
use agent_tree::{HookContext, HookError};
use parking_lot::Mutex;

use crate::support::harness::a;
use crate::support::lifetimes::{hanging, ms, spawned};
use crate::support::races::{GUARD, REAL_GUARD, bounded, outcome};
use crate::support::{RecordingModel, catalog, delegator, leaf, spawn_admitted};

// ---------------------------------------------------------------------------------------
// One countdown per shutdown.
// ---------------------------------------------------------------------------------------

/// A subtree shutdown and a tree shutdown overlap; every agent's hook takes 50 ms, far
/// inside the grace. Both calls return as soon as the agents settled (each agent counts down
/// both shutdowns once), not at the deadline, and report every agent graceful.
#[tokio::test(start_paused = true)]
async fn overlapping_shutdowns_both_return_when_the_agents_settle() {
    let model = ScriptedModel::new()
        .script("lead", [Turn::spawn_background("w", "a"), Turn::hang()])
        .script("w", [Turn::spawn_background("w2", "b"), Turn::hang()])
        .script("w2", [Turn::hang()]);
    let tree = Arc::new(
        Tree::builder()
            .config(TreeConfig::default().with_shutdown_grace(Duration::from_secs(3)))
            .catalog(catalog([
                delegator("lead", &["w"]),
                delegator("w", &["w2"]),
                leaf("w2"),
                leaf("other"),
            ]))
            .model(model.script("other", [Turn::hang()]))
            .on_shutdown(|_ctx: agent_tree::HookContext| async move {
                tokio::time::sleep(ms(50)).await;
                Ok::<(), agent_tree::HookError>(())
            })
            .build()
            .await
            .expect("builds"),
    );
    let lead = spawned(&tree, "lead", "go").await;
    let other = spawned(&tree, "other", "go").await;
    tokio::time::sleep(ms(10)).await;
    assert_eq!(tree.live(), 4, "{}", tree.snapshot().render_text());
    let t = tree.clone();
    let first = tokio::spawn(async move { t.shutdown_agent(lead).await.unwrap() });
    tokio::time::sleep(ms(20)).await;
    let second = bounded(GUARD, "the tree shutdown", tree.shutdown()).await;
    let first = bounded(GUARD, "the subtree shutdown", first).await.unwrap();
    assert!(
        first.killed.is_empty() && second.killed.is_empty(),
        "{first:?} {second:?}"
    );
    assert!(
        first.elapsed < Duration::from_secs(1),
        "the subtree shutdown waited to its deadline: {first:?}"
    );
    assert!(
        second.elapsed < Duration::from_secs(1),
        "the tree shutdown waited to its deadline: {second:?}"
    );
    let mut graceful = first.graceful.clone();
    graceful.sort();
    assert_eq!(graceful, vec![lead, a(3), a(4)]);
    assert!(second.graceful.contains(&other), "{second:?}");
    assert!(tree.alive_actors().is_empty());
}

/// A tree shutdown lands at varied points of a supervisor's restart loop (a transient child
/// failing over and over, each exit deferred, then restarted with a new run). Every run it
/// reaches becomes final once, so the shutdown returns when they settle, well before its
/// deadline, kills nobody, and leaves no actor alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_during_restarts_returns_before_its_deadline_mt() {
    for run in 0..40u64 {
        let model = ScriptedModel::new()
            .script(
                "sup",
                [Turn::spawn("child", "go"), Turn::answer("sup done")],
            )
            .script("child", Script::new((0..200).map(|_| Turn::fail("again"))));
        let tree = Tree::builder()
            .config(TreeConfig::default().with_shutdown_grace(Duration::from_secs(2)))
            .catalog(catalog([
                delegator("sup", &["child"]).with_supervision(
                    agent_tree::protocol::Strategy::OneForOne,
                    1_000,
                    60_000,
                ),
                leaf("child").with_restart(RestartPolicy::Transient),
            ]))
            .model(model.clone())
            .build()
            .await
            .expect("builds");
        let _sup = tree.spawn(SpawnRequest::new("sup", "go")).await.unwrap();
        while model.calls_by(a(2)) < 1 + (run % 5) as usize {
            tokio::task::yield_now().await;
        }
        crate::support::races::yields(run % 7).await;
        let report = bounded(REAL_GUARD, "the shutdown", tree.shutdown()).await;
        assert!(report.killed.is_empty(), "run {run}: {report:?}");
        assert!(
            report.elapsed < Duration::from_millis(1_500),
            "run {run}: waited to the deadline: {report:?}\n{}",
            tree.snapshot().render_text()
        );
        assert!(tree.alive_actors().is_empty(), "run {run}");
        assert_eq!(tree.live(), 0, "run {run}");
    }
}

// ---------------------------------------------------------------------------------------
// A child killed at a `shutdown_agent` deadline while it settles: its owner hears.
// ---------------------------------------------------------------------------------------

/// lead (a1) waits in the foreground on worker (a2), which hangs; `shutdown_agent(a2)` with
/// a grace of `grace_ms`, and the worker's shutdown hook sleeping `hook_ms`.
async fn lead_waiting_on_a_stopping_worker(
    grace_ms: u64,
    hook_ms: u64,
) -> (Arc<Tree>, RecordingModel) {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                [Turn::spawn("worker", "work"), Turn::answer("lead done")],
            )
            .script("worker", hanging(1)),
    );
    let tree = Tree::builder()
        .config(TreeConfig::default().with_shutdown_grace(ms(grace_ms)))
        .catalog(catalog([delegator("lead", &["worker"]), leaf("worker")]))
        .model(model.clone())
        .on_shutdown(move |ctx: HookContext| async move {
            if ctx.agent_type == "worker" {
                tokio::time::sleep(ms(hook_ms)).await;
            }
            Ok::<(), HookError>(())
        })
        .build()
        .await
        .expect("the tree builds");
    (Arc::new(tree), model)
}

/// When a `shutdown_agent` deadline kills a child in the instant the child's own settle runs
/// (its hook finished right at the deadline), the owner waiting on it in the foreground hears
/// of the child's end exactly once, whatever the interleaving: a settle that lost the race to
/// the kill still tells the owner of the recorded end (or does not stop as settled), so the
/// owner never waits forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_hears_of_a_child_killed_at_the_deadline_while_it_settles_mt() {
    const RUNS: u64 = 150;
    let mut stranded = Vec::new();
    for run in 0..RUNS {
        // The hook ends right around the deadline, varied a little.
        let grace = 20;
        let hook = 19 + run % 3;
        let (tree, model) = lead_waiting_on_a_stopping_worker(grace, hook).await;
        let lead = spawned(&tree, "lead", "go").await;
        bounded(
            REAL_GUARD,
            "the worker's first call",
            model.until_calls(a(2), 1),
        )
        .await;
        let report = bounded(REAL_GUARD, "shutdown_agent", tree.shutdown_agent(a(2)))
            .await
            .expect("the worker exists");
        let mut handle = tree.handle(lead).expect("the lead exists");
        match tokio::time::timeout(REAL_GUARD, handle.outcome()).await {
            Ok(got) => assert!(got.is_completed(), "run {run}: {got:?}"),
            Err(_) => stranded.push((
                run,
                report.killed.clone(),
                tree.record(a(2)).map(|r| r.status),
            )),
        }
        let tree = Arc::try_unwrap(tree).expect("one holder");
        bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
    }
    assert!(
        stranded.is_empty(),
        "in {} of {RUNS} runs the lead never heard that its worker ended at the \
         shutdown_agent deadline (run, killed, worker status): {:?}",
        stranded.len(),
        &stranded[..stranded.len().min(8)]
    );
}

// ---------------------------------------------------------------------------------------
// A shutdown dropped before its deadline: the backstop still ends its agents.
// ---------------------------------------------------------------------------------------

/// A tree builder of one `w` leaf whose model turn hangs, with a 100 ms shutdown grace.
fn hanging_w_tree() -> agent_tree::TreeBuilder {
    Tree::builder()
        .config(TreeConfig::default().with_shutdown_grace(ms(100)))
        .catalog(catalog([leaf("w")]))
        .model(ScriptedModel::new().script("w", hanging(1)))
}

/// `w` spawned on `tree` and started, then a `shutdown_agent` of it given up on (dropped)
/// after 20 ms, before its deadline: `w`'s id.
async fn w_whose_shutdown_was_dropped(tree: &Tree) -> AgentId {
    let mut events = EventProbe::new(tree);
    let w = spawn_admitted(tree, SpawnRequest::new("w", "go"))
        .await
        .id();
    events
        .expect_event("a start", crate::support::harness::started(w))
        .await;
    let gave_up = tokio::time::timeout(ms(20), tree.shutdown_agent(w)).await;
    assert!(gave_up.is_err(), "the shutdown cannot be over after 20 ms");
    w
}

/// A real multi-thread runtime of two workers; `a1` hangs in its model turn and its shutdown
/// hook blocks its thread (`std::thread::sleep`) for `block`. A `shutdown_agent(a1)` with a
/// 100 ms grace is dropped after 20 ms (the caller gave up, e.g. under its own timeout).
/// Returns how long after the drop `a1` took to settle, and its outcome (`None`: it had not
/// settled within `limit`).
fn dropped_shutdown_with_blocking_hook(
    block: Duration,
    limit: Duration,
) -> (Duration, Option<Outcome>) {
    let runtime = crate::support::races::runtime_on(2);
    let result = runtime.block_on(async move {
        let tree = hanging_w_tree()
            .on_shutdown(move |_ctx: HookContext| async move {
                std::thread::sleep(block);
                Ok::<(), HookError>(())
            })
            .build()
            .await
            .expect("the tree builds");
        let w = w_whose_shutdown_was_dropped(&tree).await;
        let dropped = std::time::Instant::now();
        let mut handle = tree.handle(w).expect("w exists");
        let got = tokio::time::timeout(limit, handle.outcome()).await.ok();
        (dropped.elapsed(), got)
    });
    // Do not wait for the blocked hook thread.
    runtime.shutdown_background();
    result
}

/// A shutdown dropped before its kill still ends an agent whose shutdown hook blocks its
/// thread: the backstop (deadline + `SHUTDOWN_KILL_WAIT`), which ends hook tasks "should the
/// shutdown itself be dropped before its kill", is a task of its own that tells the agent
/// its hooks are over, so the agent settles `aborted` soon after the 100 ms deadline though
/// its hook blocks its thread for 3 s.
// regression: the backstop was once watched by the hook's own task, which the blocked hook
// held.
#[test]
fn a_dropped_shutdown_still_ends_an_agent_whose_hook_blocks_its_thread_mt() {
    // deadline 80 ms after the drop, backstop 100 ms later; 1.2 s is ample slack.
    let (took, got) = dropped_shutdown_with_blocking_hook(Duration::from_secs(3), ms(1200));
    let got = got.unwrap_or_else(|| {
        panic!(
            "a1 had not settled {took:?} after its shutdown was dropped (grace 100 ms, backstop \
             at deadline + 100 ms): its blocked hook hides the backstop"
        )
    });
    assert_eq!(got.status, AgentStatus::Aborted, "{got:?}");
}

/// A shutdown dropped before its kill ends its hook tasks at the backstop, not when the tree
/// goes: an async hook that never returns is dropped once the backstop has ended its agent.
/// On a real two-worker runtime, ten times.
#[test]
fn a_dropped_shutdown_ends_its_hook_tasks_at_the_backstop_mt() {
    for round in 0..10 {
        assert!(
            dropped_shutdown_ends_its_hook_task(),
            "round {round}: the hook task of a dropped shutdown still runs 2 s after the \
             backstop ended its only agent"
        );
    }
}

/// One dropped `shutdown_agent` of an agent whose hook never returns: whether the hook's
/// future was dropped within 2 s of the agent settling.
fn dropped_shutdown_ends_its_hook_task() -> bool {
    /// Dropped with the hook's future.
    struct DropSignal(#[allow(dead_code)] tokio::sync::oneshot::Sender<()>);
    let runtime = crate::support::races::runtime_on(2);
    let (signal, hook_dropped) = tokio::sync::oneshot::channel::<()>();
    let signal = Arc::new(Mutex::new(Some(signal)));
    let ended = runtime.block_on(async move {
        let tree = hanging_w_tree()
            .on_shutdown(move |_ctx: HookContext| {
                let guard = signal.lock().take().map(DropSignal);
                async move {
                    let _guard = guard;
                    std::future::pending::<()>().await;
                    Ok::<(), HookError>(())
                }
            })
            .build()
            .await
            .expect("the tree builds");
        let w = w_whose_shutdown_was_dropped(&tree).await;
        let got = outcome(&tree, w, Duration::from_secs(2)).await;
        assert_eq!(got.status, AgentStatus::Aborted, "{got:?}");
        // The hook's future is dropped with its task: the sender goes, the receiver hears.
        let ended = tokio::time::timeout(Duration::from_secs(2), hook_dropped)
            .await
            .is_ok();
        drop(tree);
        ended
    });
    runtime.shutdown_background();
    ended
}
