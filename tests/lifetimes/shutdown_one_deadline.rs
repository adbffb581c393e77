//! Shutdown has one deadline for the whole subtree, whatever its depth and width.
//!
//! * Graceful: every hook succeeds, every agent is in `graceful`, `killed` is empty and the
//!   shutdown takes as long as the slowest hook (hooks run at once, not level by level).
//! * A hook that never returns: that agent and its owners up the chain are killed exactly at
//!   the deadline, everything else stops gracefully, the report names the hook, and the call
//!   returns at the grace plus at most `SHUTDOWN_KILL_WAIT`.
//! * A chain 40 deep whose every hook takes grace/2 stops in grace/2 (not 40 × grace/2);
//!   one whose every hook overruns is killed at one deadline.
//! * A tree 200 agents wide stops gracefully; failing hooks are reported and still stop.
//! * A hook that tries to spawn during the shutdown is refused; no agent outlives it.
//!
//! The shutdown of one subtree is in `shutdown_of_one_agent`, what a shutdown leaves for
//! later runs and overlapping shutdowns in `shutdown_reports_and_later_runs`, and that no
//! actor outlives a shutdown in `shutdown_leaves_no_actor_alive`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, Event, EventKind};
use agent_tree::testkit::{Script, ScriptedModel, Turn};
use agent_tree::{HookContext, HookError, SHUTDOWN_KILL_WAIT};
use parking_lot::Mutex;

use crate::support::harness::a;
use crate::support::lifetimes::{hanging, ms};
use crate::support::{
    CallEnd, RecordingModel, TreeCell, catalog, delegator, leaf, spawn_admitted, within,
};

/// Each agent's terminal event settles after every one of its children's.
fn assert_bottom_up(tree: &Tree, events: &[Event]) {
    let snapshot = tree.snapshot();
    let end = |id: AgentId| {
        events
            .iter()
            .find(|e| e.agent == id && e.kind.terminal_status().is_some())
            .unwrap_or_else(|| panic!("no terminal event for {id}"))
            .seq
    };
    for record in snapshot.agents() {
        for &child in &record.children {
            assert!(
                end(child) < end(record.id),
                "{child} settled after its owner {}",
                record.id
            );
        }
    }
}

/// A script that spawns `n` background `child`ren, then hangs.
pub(crate) fn fan_out(child: &str, n: usize) -> Script {
    Script::new([
        Turn::calls(
            (0..n).map(|i| agent_tree::testkit::Call::spawn_background(child, format!("part {i}"))),
        ),
        Turn::hang(),
    ])
}

/// Two teams: lead (a1) with workers a2..a4, and lead (a5) with workers a6..a8.
async fn two_teams(
    model: &RecordingModel,
    grace: Duration,
    hook: impl agent_tree::Hook,
) -> Arc<Tree> {
    let tree = Tree::builder()
        .config(TreeConfig::default().with_shutdown_grace(grace))
        .catalog(catalog([delegator("lead", &["worker"]), leaf("worker")]))
        .model(model.clone())
        .on_shutdown(hook)
        .build()
        .await
        .expect("the tree builds");
    for _ in 0..2 {
        spawn_admitted(&tree, SpawnRequest::new("lead", "run the team")).await;
        // The next lead's id follows this team's.
        let lead = AgentId::new(tree.snapshot().records.len() as u64 - 1);
        model.until_calls(lead, 2).await;
    }
    model
        .until_all_calls(&(2..=8).filter(|&n| n != 5).map(a).collect::<Vec<_>>(), 1)
        .await;
    Arc::new(tree)
}

fn team_model() -> RecordingModel {
    RecordingModel::new(
        ScriptedModel::new()
            .script("lead", fan_out("worker", 3))
            .script("worker", hanging(2)),
    )
    .narrated()
}

#[tokio::test(start_paused = true)]
async fn graceful_shutdown_stops_everyone_in_the_time_of_the_slowest_hook() {
    let model = team_model();
    let ran: Arc<Mutex<BTreeMap<AgentId, usize>>> = Arc::default();
    let seen = ran.clone();
    let tree = two_teams(&model, Duration::from_secs(3), move |ctx: HookContext| {
        let seen = seen.clone();
        async move {
            *seen.lock().entry(ctx.agent).or_default() += 1;
            assert!(ctx.deadline.is_some(), "a shutdown hook knows its deadline");
            // 10..=80 ms, by id.
            tokio::time::sleep(ms(10 * ctx.agent.get())).await;
            Ok::<(), HookError>(())
        }
    })
    .await;
    let mut events = tree.subscribe();
    let everyone: BTreeSet<AgentId> = (1..=8).map(a).collect();

    let began = tokio::time::Instant::now();
    let report = within("shutdown", tree.shutdown()).await;
    assert_eq!(
        report.graceful.iter().copied().collect::<BTreeSet<_>>(),
        everyone,
        "{report:?}"
    );
    assert_eq!(report.graceful.len(), 8, "each agent once: {report:?}");
    assert!(report.killed.is_empty(), "{report:?}");
    assert!(report.hook_failures.is_empty(), "{report:?}");
    assert_eq!(report.elapsed, ms(80), "the slowest hook, not their sum");
    assert!(ran.lock().values().all(|&n| n == 1), "{:?}", ran.lock());
    assert_eq!(ran.lock().len(), 8);

    // Every in-flight model call (the leads' second, the workers' first) was cancelled at
    // the instant the shutdown began.
    let in_flight: Vec<_> = model
        .calls()
        .into_iter()
        .filter(|c| c.agent_type == "worker" || c.turn == 2)
        .collect();
    assert_eq!(in_flight.len(), 8);
    for call in &in_flight {
        assert_eq!(call.end, CallEnd::Dropped, "{call:?}");
        assert_eq!(call.ended_at, Some(began), "{call:?}");
    }

    // Records stay readable, and nothing is alive.
    let events = events.drain();
    assert_bottom_up(&tree, &events);
    let snapshot = tree.snapshot();
    assert_eq!(snapshot.live(), 0);
    for id in &everyone {
        let record = snapshot.record(*id).expect("record kept");
        assert_eq!(record.status, AgentStatus::Aborted, "{id}");
        let outcome = tree.outcome(*id).expect("outcome kept");
        assert_eq!(outcome.reason, EndReason::Shutdown, "{id}");
        // The leads kept their narrated text as partial output, with the reason.
        if record.agent_type == "lead" {
            assert_eq!(
                outcome.partial,
                Some(RecordingModel::narration(*id, 1)),
                "{id}"
            );
        }
        let mut handle = tree.handle(*id).expect("handle");
        assert_eq!(within("outcome", handle.outcome()).await, outcome);
        // The agent settled when its own hook and its children were done, no later.
        let end = events
            .iter()
            .find(|e| e.agent == *id && e.kind.terminal_status().is_some())
            .expect("terminal");
        let last_hook = record
            .children
            .iter()
            .map(|c| c.get())
            .chain([id.get()])
            .max()
            .unwrap_or_default();
        assert_eq!(
            end.at_ms,
            10 * last_hook,
            "{id}: settles after its own hook"
        );
    }
    assert!(tree.alive_actors().is_empty());
    assert!(
        tree.spawn(SpawnRequest::new("worker", "late"))
            .await
            .is_err(),
        "a stopped tree admits nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hook_that_never_returns_is_killed_at_the_deadline_with_its_owners() {
    // lead a1 → mid a2 → stuck a3 → tail a4; and a second lead a5 → worker a6.
    let grace = Duration::from_secs(2);
    let scripted = ScriptedModel::new()
        .script("link", fan_out("link", 1))
        .script("lead", fan_out("worker", 1))
        .script("worker", hanging(1));
    scripted.script_agent(a(4), hanging(1));
    let model = RecordingModel::new(scripted);
    let tree = Tree::builder()
        .config(
            TreeConfig::default()
                .with_shutdown_grace(grace)
                .with_max_depth(4),
        )
        .catalog(catalog([
            delegator("link", &["link"]),
            delegator("lead", &["worker"]),
            leaf("worker"),
        ]))
        .model(model.clone())
        .on_shutdown(|ctx: HookContext| async move {
            if ctx.agent == AgentId::new(3) {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(ms(5)).await;
            Ok::<(), HookError>(())
        })
        .build()
        .await
        .expect("the tree builds");
    spawn_admitted(&tree, SpawnRequest::new("link", "chain")).await;
    model.until_calls(a(4), 1).await;
    spawn_admitted(&tree, SpawnRequest::new("lead", "team")).await;
    model.until_calls(a(6), 1).await;
    let mut events = tree.subscribe();

    let report = within("shutdown", tree.shutdown()).await;
    let killed: BTreeSet<AgentId> = report.killed.iter().copied().collect();
    let graceful: BTreeSet<AgentId> = report.graceful.iter().copied().collect();
    assert_eq!(killed, [a(1), a(2), a(3)].into(), "{report:?}");
    assert_eq!(graceful, [a(4), a(5), a(6)].into(), "{report:?}");
    assert_eq!(report.hook_failures.len(), 1, "{report:?}");
    assert_eq!(report.hook_failures[0].0, a(3), "{report:?}");
    assert!(report.hook_failures[0].1.contains("deadline"), "{report:?}");
    assert!(report.elapsed >= grace, "{report:?}");
    assert!(report.elapsed <= grace + SHUTDOWN_KILL_WAIT, "{report:?}");

    let events = events.drain();
    for id in [a(1), a(2), a(3)] {
        let end = events
            .iter()
            .find(|e| e.agent == id && e.kind.terminal_status().is_some())
            .expect("terminal");
        assert_eq!(end.kind.name(), "killed", "{id}");
        assert_eq!(
            end.at_ms,
            grace.as_millis() as u64,
            "{id}: killed at the deadline"
        );
        assert_eq!(tree.record(id).expect("rec").status, AgentStatus::Killed);
    }
    for id in [a(4), a(5), a(6)] {
        let end = events
            .iter()
            .find(|e| e.agent == id && e.kind.terminal_status().is_some())
            .expect("terminal");
        assert_eq!(
            (end.kind.name(), end.kind.reason()),
            ("aborted", Some(EndReason::Shutdown)),
            "{id}"
        );
        assert_eq!(end.at_ms, 5, "{id}: stopped when its hook returned");
    }
    assert_eq!(tree.snapshot().live(), 0);
    assert!(tree.alive_actors().is_empty());
}

/// A hook cut off by the deadline must not keep running after `shutdown` returned: the
/// hooks' invariant says it ends at the deadline (`actors/src/hooks.rs`), and the agent's
/// comment says its task "never outlives the shutdown".
#[tokio::test(start_paused = true)]
async fn a_stuck_hook_does_not_outlive_the_shutdown() {
    struct Alive(Arc<Mutex<Option<tokio::time::Instant>>>);
    impl Drop for Alive {
        fn drop(&mut self) {
            *self.0.lock() = Some(tokio::time::Instant::now());
        }
    }
    let dropped: Arc<Mutex<Option<tokio::time::Instant>>> = Arc::default();
    let flag = dropped.clone();
    let grace = Duration::from_secs(1);
    let model = RecordingModel::new(ScriptedModel::new().script("worker", hanging(1)));
    let tree = Tree::builder()
        .config(TreeConfig::default().with_shutdown_grace(grace))
        .catalog(catalog([leaf("worker")]))
        .model(model.clone())
        .on_shutdown(move |_ctx: HookContext| {
            let alive = Alive(flag.clone());
            async move {
                let _alive = alive;
                std::future::pending::<()>().await;
                Ok::<(), HookError>(())
            }
        })
        .build()
        .await
        .expect("the tree builds");
    spawn_admitted(&tree, SpawnRequest::new("worker", "hold")).await;
    model.until_calls(a(1), 1).await;
    let start = tokio::time::Instant::now();
    let report = within("shutdown", tree.shutdown()).await;
    let returned = tokio::time::Instant::now();
    assert_eq!(report.killed, [a(1)]);
    let dropped_at = *dropped.lock();
    assert!(
        dropped_at.is_some_and(|t| t <= returned),
        "the hook was still running when shutdown returned at {:?} (dropped at {:?})",
        returned - start,
        dropped_at.map(|t| t - start)
    );
}

async fn chain(depth: u32, hook_takes: Duration, grace: Duration) -> (Arc<Tree>, RecordingModel) {
    let model = RecordingModel::new(ScriptedModel::new().script("link", fan_out("link", 1)));
    let tree = Tree::builder()
        .config(
            TreeConfig::default()
                .with_shutdown_grace(grace)
                .with_max_depth(depth)
                .with_max_total_agents(depth as usize + 1),
        )
        .catalog(catalog([delegator("link", &["link"])]))
        .model(model.clone())
        .on_shutdown(move |_ctx: HookContext| async move {
            tokio::time::sleep(hook_takes).await;
            Ok::<(), HookError>(())
        })
        .build()
        .await
        .expect("the tree builds");
    spawn_admitted(&tree, SpawnRequest::new("link", "chain")).await;
    // The deepest link's spawn is refused at the cap; then it hangs like the others.
    model.until_calls(a(u64::from(depth)), 2).await;
    let snapshot = tree.snapshot();
    assert_eq!(snapshot.agents().count(), depth as usize);
    assert_eq!(snapshot.agents().map(|r| r.depth).max(), Some(depth));
    (Arc::new(tree), model)
}

#[tokio::test(start_paused = true)]
async fn a_chain_40_deep_has_one_deadline_not_one_per_level() {
    let grace = Duration::from_secs(2);
    let (tree, _model) = chain(40, grace / 2, grace).await;
    let mut events = tree.subscribe();
    let report = within("shutdown", tree.shutdown()).await;
    assert_eq!(report.graceful.len(), 40, "{report:?}");
    assert!(report.killed.is_empty(), "{report:?}");
    assert_eq!(report.elapsed, grace / 2, "every level's hook ran at once");
    let events = events.drain();
    assert_bottom_up(&tree, &events);
    assert!(tree.alive_actors().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_chain_40_deep_whose_hooks_all_overrun_is_killed_at_one_deadline() {
    let grace = Duration::from_secs(2);
    let (tree, _model) = chain(40, grace * 2, grace).await;
    let mut events = tree.subscribe();
    let report = within("shutdown", tree.shutdown()).await;
    assert_eq!(report.killed.len(), 40, "{report:?}");
    assert!(report.graceful.is_empty(), "{report:?}");
    assert_eq!(report.hook_failures.len(), 40, "{report:?}");
    assert!(report.elapsed >= grace, "{report:?}");
    assert!(report.elapsed <= grace + SHUTDOWN_KILL_WAIT, "{report:?}");
    let kills: Vec<u64> = events
        .drain()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Killed { .. }))
        .map(|e| e.at_ms)
        .collect();
    assert_eq!(kills, vec![grace.as_millis() as u64; 40]);
    assert!(tree.alive_actors().is_empty());
    assert_eq!(tree.snapshot().live(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_tree_200_wide_stops_gracefully_and_reports_failing_hooks() {
    const HUBS: usize = 10;
    const WORKERS: usize = 19;
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script("hub", fan_out("worker", WORKERS))
            .script("worker", hanging(1)),
    );
    let tree = Tree::builder()
        .config(
            TreeConfig::default()
                .with_shutdown_grace(Duration::from_secs(3))
                .with_max_total_agents(256)
                .with_max_children_per_agent(WORKERS),
        )
        .catalog(catalog([delegator("hub", &["worker"]), leaf("worker")]))
        .model(model.clone())
        .on_shutdown(|ctx: HookContext| async move {
            let n = ctx.agent.get();
            tokio::time::sleep(ms(n % 37)).await;
            if n.is_multiple_of(50) {
                return Err(HookError(format!("flush of {} failed", ctx.agent)));
            }
            if n.is_multiple_of(71) {
                panic!("flush of {} panicked", ctx.agent);
            }
            Ok(())
        })
        .build()
        .await
        .expect("the tree builds");
    for _ in 0..HUBS {
        spawn_admitted(&tree, SpawnRequest::new("hub", "serve")).await;
    }
    model
        .until("200 agents in flight", |calls| {
            calls.len() == HUBS * 2 + HUBS * WORKERS
        })
        .await;
    assert_eq!(tree.snapshot().live(), 200);
    let mut events = tree.subscribe();
    let report = within("shutdown", tree.shutdown()).await;
    assert_eq!(report.graceful.len(), 200, "{report:?}");
    assert!(report.killed.is_empty(), "{report:?}");
    assert_eq!(report.elapsed, ms(36), "the slowest hook");
    let failed: BTreeSet<AgentId> = report.hook_failures.iter().map(|(id, _)| *id).collect();
    let expected: BTreeSet<AgentId> = (1..=200u64)
        .filter(|n| n % 50 == 0 || n % 71 == 0)
        .map(a)
        .collect();
    assert_eq!(failed, expected, "{:?}", report.hook_failures);
    assert!(
        report
            .hook_failures
            .iter()
            .any(|(_, f)| f.contains("panicked")),
        "{:?}",
        report.hook_failures
    );
    let events = events.drain();
    assert_bottom_up(&tree, &events);
    assert!(tree.alive_actors().is_empty());
    assert_eq!(tree.snapshot().live(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_hook_spawning_during_the_shutdown_is_refused() {
    let cell = TreeCell::new();
    let attempts: Arc<Mutex<Vec<Result<AgentId, SpawnError>>>> = Arc::default();
    let (hook_cell, log) = (cell.clone(), attempts.clone());
    let model = team_model();
    let tree = two_teams(&model, Duration::from_secs(1), move |_ctx: HookContext| {
        let (cell, log) = (hook_cell.clone(), log.clone());
        async move {
            if let Some(tree) = cell.get() {
                let spawned = tree
                    .spawn(SpawnRequest::new("lead", "start over"))
                    .await
                    .map(|h| h.id());
                log.lock().push(spawned);
            }
            Ok::<(), HookError>(())
        }
    })
    .await;
    cell.set(&tree);
    let before = tree.snapshot().records.len();

    let report = within("shutdown", tree.shutdown()).await;
    assert_eq!(report.graceful.len(), 8, "{report:?}");
    assert!(report.killed.is_empty(), "{report:?}");
    let attempts = attempts.lock().clone();
    assert_eq!(attempts.len(), 8, "every hook tried");
    for attempt in &attempts {
        assert_eq!(
            attempt,
            &Err(SpawnError::OwnerClosed(AgentId::ROOT)),
            "{attempts:?}"
        );
    }
    assert_eq!(tree.snapshot().records.len(), before, "no record was added");
    assert_eq!(tree.snapshot().live(), 0);
    assert!(tree.alive_actors().is_empty());
    let tree = Arc::try_unwrap(tree).expect("the hooks released the tree");
    drop(tree);
}
