//! Review 9: the performance commits after `2b7fcbb` (a turn aborted through its task's abort
//! handle with a drop guard reporting it; one hook runtime per shutdown, stopped at the kill,
//! with a backstop timer; the deadline phase killing only the tops; copy-on-write records;
//! child, call and request-id tables indexed only past 16). Each test either fails on the
//! code it was written against (its doc comment says why, and which line is at fault) or
//! guards an interaction of those changes nothing else covers (it says so).
//!
//! Paused-time tests are deterministic; `_mt` tests build a real multi-thread runtime.

use agent_tree::testkit::EventProbe;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::RequestId;
use agent_tree::testkit::{Script, ScriptedModel, Turn};

use std::sync::Arc;

use crate::support::lifetimes::{hanging, ms};
use crate::support::races::{GUARD, bounded, outcome};
use crate::support::{catalog, leaf};
use agent_tree::{HookContext, HookError};
use parking_lot::Mutex;

// ---------------------------------------------------------------------------------------
// 1. A shutdown dropped before its deadline: the backstop must still end its agents.
// ---------------------------------------------------------------------------------------

/// A real multi-thread runtime of two workers; `a1` hangs in its model turn and its shutdown
/// hook blocks its thread (`std::thread::sleep`) for `block`. A `shutdown_agent(a1)` with a
/// 100 ms grace is dropped after 20 ms (the caller gave up, e.g. under its own timeout).
/// Returns how long after the drop `a1` took to settle, and its outcome (`None`: it had not
/// settled within `limit`).
fn dropped_shutdown_with_blocking_hook(
    block: Duration,
    limit: Duration,
) -> (Duration, Option<Outcome>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let result = runtime.block_on(async move {
        let tree = Tree::builder()
            .config(TreeConfig::default().with_shutdown_grace(ms(100)))
            .catalog(catalog([leaf("w")]))
            .model(ScriptedModel::new().script("w", hanging(1)))
            .on_shutdown(move |_ctx: HookContext| async move {
                std::thread::sleep(block);
                Ok::<(), HookError>(())
            })
            .build()
            .await
            .expect("the tree builds");
        let mut events = EventProbe::new(&tree);
        let w = tree
            .spawn(SpawnRequest::new("w", "go"))
            .await
            .expect("admitted")
            .id();
        events
            .expect_event("a start", crate::support::harness::started(w))
            .await;
        // The caller gives up on the shutdown before its deadline: the future is dropped.
        let gave_up = tokio::time::timeout(ms(20), tree.shutdown_agent(w)).await;
        assert!(gave_up.is_err(), "the shutdown cannot be over after 20 ms");
        let dropped = std::time::Instant::now();
        let mut handle = tree.handle(w).expect("w exists");
        let got = tokio::time::timeout(limit, handle.outcome()).await.ok();
        (dropped.elapsed(), got)
    });
    // Do not wait for the blocked hook thread.
    runtime.shutdown_background();
    result
}

/// Defect: a shutdown dropped before its kill no longer ends an agent whose shutdown hook
/// blocks its thread. The order's backstop (`ShutdownOrder::overdue`, cancelled by the timer
/// spawned in `shutdown::run` at deadline + `SHUTDOWN_KILL_WAIT`) is documented as what ends
/// hook tasks "should the shutdown itself be dropped before its kill" (`msg.rs`), but the
/// `select!` that watches it is now *the hook task itself*, spawned on the hook runtime
/// (`agent/ending.rs` `run_shutdown_hooks`: `hook_runtime.spawn(async move { select! {
/// killed, overdue, run_all } })`): a hook that blocks the thread polling it also blocks the
/// select, so `overdue` is never seen and the agent stays `stopping` until the hook returns
/// (here 3 s; forever for a hook that never returns) though the deadline was 100 ms.
/// Before 9f7061d the selecting task ran on the tree's runtime (`shared.spawn`) around a
/// `HookRuntime::run` future, so its own `timeout_at(cut_off, ..)` fired whatever the hook
/// thread did. Fix: keep the watcher on the tree's runtime (spawn only the hooks on the hook
/// runtime and select on their `JoinHandle` there), or have the backstop stop the hook
/// runtime (`order.hooks.stop()`) and send the agents their `ShutdownHooksFinished`.
#[test]
fn dropped_shutdown_still_ends_an_agent_whose_hook_blocks_mt() {
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

// ---------------------------------------------------------------------------------------
// 2. Replay-safe spawns by request id across the 16-entry list → map switch (`ByRequest`).
// ---------------------------------------------------------------------------------------

/// Guard: the root's request ids move from a list to a map at the 17th (`ByRequest::insert`,
/// `registry.rs`); every earlier id, the one that triggered the switch and later ones must
/// each still return the existing agent (no second record, no second `spawned`), while an
/// unseen id gets a new agent. Nothing else spawns more than 16 agents with request ids.
#[tokio::test(start_paused = true)]
async fn request_ids_replay_across_the_list_to_map_switch() {
    let tree = crate::support::harness::tree(
        ScriptedModel::new().script("w", Script::new([Turn::hang()])),
        catalog([leaf("w")]),
        TreeConfig::default()
            .with_max_total_agents(64)
            .with_max_concurrent(64),
    )
    .await;
    let request = |n: usize| {
        SpawnRequest::new("w", format!("job {n}"))
            .with_request_id(RequestId::new(format!("job-{n}")))
    };
    let mut ids = Vec::new();
    for n in 0..20 {
        let id = tree.spawn(request(n)).await.expect("admitted").id();
        ids.push(id);
        // Replay every id so far after each spawn: before, at and after the switch.
        for (m, &want) in ids.iter().enumerate() {
            let again = tree.spawn(request(m)).await.expect("replay").id();
            assert_eq!(again, want, "replay of job-{m} after {} spawns", n + 1);
        }
    }
    assert_eq!(
        tree.snapshot().agents().count(),
        20,
        "{}",
        tree.snapshot().render_text()
    );
    let fresh = tree.spawn(request(20)).await.expect("admitted").id();
    assert!(
        !ids.contains(&fresh),
        "a new request id got an existing agent {fresh}"
    );
    let report = bounded(GUARD, "the shutdown", tree.shutdown()).await;
    assert!(report.killed.is_empty(), "{report:?}");
}

// ---------------------------------------------------------------------------------------
// 3. Snapshots share records copy-on-write: an old snapshot never changes.
// ---------------------------------------------------------------------------------------

/// Guard: `TreeSnapshot::records` are the registry's own `Arc<AgentRecord>`s, changed
/// copy-on-write by the fold (`RecordStore for Vec<Arc<AgentRecord>>`). A snapshot taken
/// before usage, settles, restarts and a shutdown must stay exactly what it was (compared by
/// its JSON), while a later snapshot sees the changes. The fold proptest compares only the
/// latest snapshot.
#[tokio::test(start_paused = true)]
async fn an_earlier_snapshot_never_changes() {
    let tree = crate::support::harness::tree(
        ScriptedModel::new()
            .script(
                "done",
                Script::new([Turn::answer("ok").usage(Usage::tokens(3, 4))]),
            )
            .script("w", hanging(1)),
        catalog([leaf("done"), leaf("w")]),
        TreeConfig::default(),
    )
    .await;
    let mut events = EventProbe::new(&tree);
    let w = tree
        .spawn(SpawnRequest::new("w", "hang"))
        .await
        .expect("w")
        .id();
    events
        .expect_event("a start", crate::support::harness::started(w))
        .await;
    let before = tree.snapshot();
    let frozen = serde_json::to_string(&before).expect("json");
    let done = tree
        .spawn(SpawnRequest::new("done", "go"))
        .await
        .expect("done")
        .id();
    let got = outcome(&tree, done, GUARD).await;
    assert_eq!(got.status, AgentStatus::Completed);
    bounded(GUARD, "the shutdown", tree.shutdown()).await;
    assert_eq!(
        serde_json::to_string(&before).expect("json"),
        frozen,
        "an earlier snapshot changed after later events"
    );
    let after = tree.snapshot();
    assert!(after.record(done).is_some());
    assert!(after.record(w).expect("w").status.is_terminal());
    assert!(!before.record(w).expect("w").status.is_terminal());
    assert_ne!(
        after.record(AgentId::ROOT).expect("root").subtree,
        Usage::ZERO
    );
    assert_eq!(
        before.record(AgentId::ROOT).expect("root").subtree,
        Usage::ZERO
    );
}

/// Defect: a shutdown dropped before its kill leaves its hook runtime (two OS threads, and
/// every task its hooks spawned there) running for the rest of the tree's life, after every
/// agent under it has ended. The runtime is stopped only at the kill (`shutdown.rs`,
/// `order.hooks.stop()`) or when the last `ShutdownOrder` clone drops (`Drop for
/// HookRuntime`), but the registry keeps each settled agent's order (`Entry::shutdown`, only
/// cleared by `Entry::new_run`), so a dropped shutdown's runtime lives as long as the tree:
/// each caller that times out on `shutdown_agent` leaks two threads. Here an async hook that
/// never returns is ended by the backstop (the agent settles), yet 300 ms later the runtime
/// the hook ran on still runs tasks. Fix: the backstop, after cancelling `overdue`, stops the
/// runtime (`hooks.stop()`, e.g. hand the backstop an `Arc<HookRuntime>`), or clear
/// `Entry::shutdown` when the run is final.
#[test]
fn dropped_shutdown_stops_its_hook_runtime_after_the_backstop_mt() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let seen: Arc<Mutex<Option<tokio::runtime::Handle>>> = Arc::default();
    let hook_seen = seen.clone();
    let still_runs = runtime.block_on(async move {
        let tree = Tree::builder()
            .config(TreeConfig::default().with_shutdown_grace(ms(100)))
            .catalog(catalog([leaf("w")]))
            .model(ScriptedModel::new().script("w", hanging(1)))
            .on_shutdown(move |_ctx: HookContext| {
                let seen = hook_seen.clone();
                async move {
                    *seen.lock() = Some(tokio::runtime::Handle::current());
                    std::future::pending::<()>().await;
                    Ok::<(), HookError>(())
                }
            })
            .build()
            .await
            .expect("the tree builds");
        let mut events = EventProbe::new(&tree);
        let w = tree
            .spawn(SpawnRequest::new("w", "go"))
            .await
            .expect("admitted")
            .id();
        events
            .expect_event("a start", crate::support::harness::started(w))
            .await;
        let gave_up = tokio::time::timeout(ms(20), tree.shutdown_agent(w)).await;
        assert!(gave_up.is_err(), "the shutdown cannot be over after 20 ms");
        let got = outcome(&tree, w, Duration::from_secs(2)).await;
        assert_eq!(got.status, AgentStatus::Aborted, "{got:?}");
        tokio::time::sleep(ms(300)).await;
        let hook_runtime = seen.lock().clone().expect("the hook ran");
        let probe = hook_runtime.spawn(async {});
        let still_runs = tokio::time::timeout(Duration::from_secs(2), probe)
            .await
            .is_ok_and(|r| r.is_ok());
        drop(tree);
        still_runs
    });
    runtime.shutdown_background();
    assert!(
        !still_runs,
        "the hook runtime of a dropped shutdown still runs tasks 300 ms after the backstop \
         ended its only agent"
    );
}

// ---------------------------------------------------------------------------------------
// 4. Child and call tables crossing their 16-entry index threshold mid-turn, with restarts.
// ---------------------------------------------------------------------------------------

/// Guard: one turn of 20 foreground `Agent` calls, so the call table is indexed (> 16 calls)
/// and the child table is indexed at the 17th spawn (`Children::add` → `build_index`) while
/// the turn's calls are being dispatched. The first child (added before the index existed)
/// and the last (added after) are transient and fail once: each is restarted after the
/// index was built (its old actor replaced in `by_actor`), and its second run's end must
/// still answer its call. Every one of the 20 calls gets a `completed` result and the owner
/// completes. Nothing else crosses the thresholds with restarts.
#[tokio::test(start_paused = true)]
async fn restarts_across_the_child_and_call_index_thresholds() {
    let n = 20;
    let calls = (0..n).map(|i| {
        let agent_type = if i == 0 || i == n - 1 { "flaky" } else { "w" };
        agent_tree::testkit::Call::spawn(agent_type, format!("job {i}"))
    });
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([Turn::calls(calls), Turn::answer("all done")]),
        )
        .script("w", Script::new([Turn::answer("ok").after(ms(20))]))
        .script(
            "flaky",
            Script::new([Turn::fail("boom").after(ms(10)), Turn::answer("ok at last")]),
        );
    let catalog = catalog([
        crate::support::delegator("lead", &["w", "flaky"]).with_supervision(
            agent_tree::protocol::Strategy::OneForOne,
            10,
            5_000,
        ),
        leaf("w"),
        leaf("flaky").with_restart(agent_tree::protocol::RestartPolicy::Transient),
    ]);
    let tree = crate::support::harness::tree(
        model.clone(),
        catalog,
        TreeConfig::default()
            .with_max_children_per_agent(32)
            .with_max_total_agents(64),
    )
    .await;
    let lead = tree
        .spawn(SpawnRequest::new("lead", "go"))
        .await
        .expect("admitted")
        .id();
    let got = outcome(&tree, lead, GUARD).await;
    assert_eq!(got.status, AgentStatus::Completed, "{got:?}");
    let results = crate::support::harness::results(&model, lead, 1);
    assert_eq!(results.len(), n, "{results:?}");
    for (i, result) in results.iter().enumerate() {
        assert_eq!(
            crate::support::harness::status_of(result),
            "completed",
            "call {i}: {}",
            result.content
        );
    }
    let snapshot = tree.snapshot();
    let flaky = crate::support::all_of_type(&snapshot, "flaky");
    assert_eq!(flaky.len(), 2, "{}", snapshot.render_text());
    for id in flaky {
        assert_eq!(
            crate::support::record(&snapshot, id).incarnation,
            2,
            "{}",
            snapshot.render_text()
        );
    }
    bounded(GUARD, "the shutdown", tree.shutdown()).await;
}
