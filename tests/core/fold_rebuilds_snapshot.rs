//! Records are the fold of events: on random trees with spawns (foreground, background,
//! pooled), failures, restarts (permanent, transient, strategies, escalation), drains,
//! aborts, kills, resumes, steers, subtree shutdowns and a final tree shutdown, folding the
//! event stream alone with `agent_tree::protocol::Fold` rebuilds exactly the records and the
//! tally of `tree.snapshot()`.
//!
//! Run on a paused current-thread runtime (one message order per seed, exact) and on a
//! multi-thread runtime (message orders vary between runs).

use std::sync::Arc;
use std::time::Duration;

use crate::support::catalog;
use crate::support::harness::{Rng, tree};
use crate::support::scripts::answers_after_billing;
use agent_tree::prelude::*;
use agent_tree::protocol::{Event, EventTally, Fold, Strategy, TreeSnapshot};
use agent_tree::testkit::{Call, ScriptedModel, Turn};
use proptest::prelude::*;

const TYPES: [&str; 5] = ["mid", "leaf", "flaky", "sleepy", "leaf"];

fn usage(rng: &mut Rng) -> Usage {
    Usage::tokens(rng.below(200), rng.below(100))
}

fn delay(rng: &mut Rng) -> Duration {
    Duration::from_millis(rng.below(30))
}

/// A random catalog and the scripts its types play.
fn world(rng: &mut Rng) -> (Catalog, ScriptedModel) {
    let strategies = [
        Strategy::OneForOne,
        Strategy::OneForAll,
        Strategy::RestForOne,
    ];
    let settle = |rng: &mut Rng| {
        if rng.chance(50) {
            SettlePolicy::Drain
        } else {
            SettlePolicy::AbortChildren
        }
    };
    let restart = |rng: &mut Rng| match rng.below(3) {
        0 => RestartPolicy::Permanent,
        1 => RestartPolicy::Transient,
        _ => RestartPolicy::Temporary,
    };
    let pick = |rng: &mut Rng| TYPES[rng.below(TYPES.len() as u64) as usize];
    let spawns = |rng: &mut Rng, n: u64| -> Vec<Call> {
        (0..n)
            .map(|_| {
                let child = pick(rng);
                if rng.chance(70) {
                    Call::spawn_background(child, "go")
                } else {
                    Call::spawn(child, "go")
                }
            })
            .collect()
    };
    let n = 1 + rng.below(3);
    let boss_calls = spawns(rng, n);
    let n = 1 + rng.below(2);
    let mid_calls = spawns(rng, n);
    let definitions = [
        AgentDefinition::new("boss", "")
            .with_allowed_subagents(SubagentAllowance::All)
            .with_supervision(
                strategies[rng.below(3) as usize],
                rng.below(3) as u32,
                1_000,
            )
            .with_settle(settle(rng)),
        AgentDefinition::new("mid", "")
            .with_allowed_subagents(SubagentAllowance::only(["leaf", "flaky", "sleepy"]))
            .with_restart(restart(rng))
            .with_supervision(
                strategies[rng.below(3) as usize],
                rng.below(3) as u32,
                1_000,
            )
            .with_settle(settle(rng)),
        AgentDefinition::new("leaf", "").with_restart(restart(rng)),
        AgentDefinition::new("flaky", "").with_restart(restart(rng)),
        AgentDefinition::new("sleepy", "").with_restart(restart(rng)),
    ];
    let model = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::calls(boss_calls).usage(usage(rng)).after(delay(rng)),
                Turn::answer("boss done")
                    .usage(usage(rng))
                    .after(delay(rng)),
                Turn::answer("boss resumed").usage(usage(rng)),
                Turn::answer("boss resumed again").usage(usage(rng)),
            ],
        )
        .script(
            "mid",
            [
                Turn::calls(mid_calls).usage(usage(rng)).after(delay(rng)),
                Turn::answer("mid done").usage(usage(rng)).after(delay(rng)),
                Turn::answer("mid again").usage(usage(rng)),
            ],
        )
        .script(
            "leaf",
            answers_after_billing("leaf done", usage(rng), delay(rng)),
        )
        .script(
            "flaky",
            [
                Turn::fail("flaky failed")
                    .usage(usage(rng))
                    .after(delay(rng)),
                Turn::panic("flaky panicked").after(delay(rng)),
                Turn::answer("flaky done")
                    .usage(usage(rng))
                    .after(delay(rng)),
            ],
        )
        .script("sleepy", [Turn::hang()]);
    let catalog = catalog(definitions);
    (catalog, model)
}

/// Runs one random scenario and returns the snapshot and every event, in order.
async fn scenario(seed: u64) -> (TreeSnapshot, Vec<Event>) {
    let mut rng = Rng::new(seed);
    let (catalog, model) = world(&mut rng);
    let config = TreeConfig::default()
        .with_max_concurrent(1 + rng.below(2) as usize)
        .with_shutdown_grace(Duration::from_millis(200));
    let tree = Arc::new(tree(model, catalog, config).await);
    let mut events = tree.subscribe();
    for _ in 0..1 + rng.below(3) {
        let mut request = SpawnRequest::new("boss", "run");
        if rng.chance(50) {
            request = request.background();
        }
        let _ = tree.spawn(request).await;
    }
    let mut shutdowns = Vec::new();
    for _ in 0..rng.below(12) {
        tokio::time::sleep(Duration::from_millis(rng.below(40))).await;
        let agents: Vec<_> = tree.snapshot().agents().map(|r| (r.id, r.depth)).collect();
        if agents.is_empty() {
            continue;
        }
        let (id, depth) = agents[rng.below(agents.len() as u64) as usize];
        match rng.below(6) {
            0 => {
                let _ = tree.abort(id);
            }
            1 => {
                let _ = tree.kill(id);
            }
            2 if depth == 1 => {
                let _ = tree.resume(id, "again").await;
            }
            3 => {
                let _ = tree.steer(id, "steer").await;
            }
            4 => {
                let tree = tree.clone();
                shutdowns.push(tokio::spawn(async move {
                    let _ = tree.shutdown_agent(id).await;
                }));
            }
            _ => {}
        }
    }
    tokio::time::sleep(Duration::from_millis(rng.below(100))).await;
    tree.shutdown().await;
    for task in shutdowns {
        let _ = task.await;
    }
    let snapshot = tree.snapshot();
    let emitted = snapshot.tally.total();
    let stream: Vec<Event> = events
        .drain()
        .into_iter()
        .take_while(|e| e.seq <= emitted)
        .collect();
    (snapshot, stream)
}

fn check(seed: u64, snapshot: &TreeSnapshot, events: &[Event]) {
    let mut fold = Fold::new();
    for (n, event) in events.iter().enumerate() {
        assert_eq!(event.seq, n as u64 + 1, "seed {seed}: dense sequence");
        if let Err(error) = fold.apply(event) {
            panic!("seed {seed}: the fold refused an emitted event: {error}");
        }
    }
    assert_eq!(fold.tally(), &snapshot.tally, "seed {seed}: tally");
    for (folded, recorded) in fold.records().iter().zip(&snapshot.records) {
        assert_eq!(folded, &**recorded, "seed {seed}: record {}", recorded.id);
    }
    assert_eq!(
        fold.records().len(),
        snapshot.records.len(),
        "seed {seed}: record count"
    );
    snapshot
        .check_usage()
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
}

/// Runs the scenario of `seed` on a fresh one-thread runtime with paused time.
fn paused_scenario(seed: u64) -> (TreeSnapshot, Vec<Event>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(scenario(seed))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Paused time, one thread: every seed replays exactly.
    #[test]
    fn the_event_stream_alone_rebuilds_the_snapshot(seed in any::<u64>()) {
        let (snapshot, events) = paused_scenario(seed);
        check(seed, &snapshot, &events);
    }
}

/// The generated scenarios reach every kind of record change (so the equality above is not
/// vacuous): paused, 40 fixed seeds.
#[test]
fn the_scenarios_cover_every_record_change() {
    let mut seen = EventTally::default();
    for seed in 0..40 {
        let (snapshot, events) = paused_scenario(seed);
        check(seed, &snapshot, &events);
        for event in &events {
            seen.count(&event.kind);
        }
    }
    let kinds = [
        ("spawned", seen.spawned),
        ("queued", seen.queued),
        ("dequeued", seen.dequeued),
        ("started", seen.started),
        ("usage_reported", seen.usage_reported),
        ("completing", seen.completing),
        ("restarted", seen.restarted),
        ("resumed", seen.resumed),
        ("completed", seen.completed),
        ("failed", seen.failed),
        ("aborted", seen.aborted),
        ("killed", seen.killed),
    ];
    for (kind, count) in kinds {
        assert!(count > 0, "no {kind} event in 40 scenarios: {seen}");
    }
}

/// Worker threads: message orders vary between runs, the fold must still agree.
#[test]
fn the_fold_agrees_on_worker_threads() {
    for seed in 0..12 {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (snapshot, events) = runtime.block_on(scenario(seed));
        check(seed, &snapshot, &events);
    }
}
