//! Fault injection: a model failing at turn n or by a seeded probability (drawn once per
//! call, independently across seeds and turns, the same for the same seed), panicking,
//! hanging or slow; tools and hooks that fail, panic or hang; a kill at a picked event (a
//! crash its supervisor restarts, once for two switches on one event, never during a
//! shutdown).

use std::sync::Arc;
use std::time::Duration;

use agent_tree::ControlError;
use agent_tree::prelude::*;
use agent_tree::protocol::EndReason;
use agent_tree::protocol::{EventKind, Strategy};
use agent_tree::testkit::{
    Call, EventProbe, FaultyModel, FaultyTool, KillSwitch, ScriptedModel, Turn, failing_hook,
    hanging_hook, kill_when,
};

use crate::support::build_tree;
use crate::support::catalog;
use crate::support::lifetimes::supervised;
use crate::support::races::on_worker_threads;
use crate::support::scripts::{answers_after, delegates};

fn w_and_v() -> Catalog {
    catalog([AgentDefinition::new("w", ""), AgentDefinition::new("v", "")])
}

fn answers() -> ScriptedModel {
    ScriptedModel::new()
        .script("w", [Turn::answer("ok")])
        .script("v", [Turn::answer("ok")])
}

async fn run(model: impl Model, agent_type: &str) -> Outcome {
    let tree = build_tree(w_and_v(), model).await;
    tree.run(SpawnRequest::new(agent_type, "go")).await.unwrap()
}

/// A `FaultyModel` fails, panics, hangs or delays calls exactly as planned, and only for
/// the agents its plan names: a failure or a panic settles the agent with that reason, a
/// hang lasts until an abort, a delay takes that much virtual time.
#[tokio::test(start_paused = true)]
async fn a_model_fails_panics_hangs_or_is_slow_by_its_plan() {
    let failing = FaultyModel::new(answers())
        .fail_at_turn(1, ModelError::new("injected"))
        .only_for("w");
    let tree = build_tree(w_and_v(), failing).await;
    let w = tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(w.error.as_deref(), Some("injected"));
    let v = tree.run(SpawnRequest::new("v", "go")).await.unwrap();
    assert!(v.is_completed(), "only `w` fails");

    let outcome = run(FaultyModel::new(answers()).panic_at_turn(1), "w").await;
    assert_eq!(outcome.reason, EndReason::Panicked);

    let started = tokio::time::Instant::now();
    let outcome = run(
        FaultyModel::new(answers()).slow(Duration::from_secs(3)),
        "w",
    )
    .await;
    assert!(outcome.is_completed());
    assert_eq!(started.elapsed(), Duration::from_secs(3));

    let tree = build_tree(w_and_v(), FaultyModel::new(answers()).hang_at_turn(1)).await;
    let mut hung = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    tree.abort(hung.id()).unwrap();
    assert_eq!(hung.outcome().await.status, AgentStatus::Aborted);
}

/// A fault injected with a seeded probability fails about that share of calls, and the same
/// seed fails the same calls every time.
#[tokio::test(start_paused = true)]
async fn a_seeded_probability_fails_about_that_share_and_the_same_calls_every_time() {
    let fails = |seed: u64| async move {
        let model =
            FaultyModel::new(answers()).fail_with_probability(0.3, seed, ModelError::new("x"));
        !run(model, "w").await.is_completed()
    };
    let mut failed = 0;
    for seed in 0..200u64 {
        failed += usize::from(fails(seed).await);
    }
    assert!(
        (40..=80).contains(&failed),
        "{failed} of 200 failed at p = 0.3"
    );
    for seed in [3u64, 7, 11, 19] {
        assert_eq!(fails(seed).await, fails(seed).await, "seed {seed}");
    }
}

/// Faulty tools and hooks fail as planned: a failing tool is an error result the model
/// sees, a failing start hook fails the agent with `hook_failed`, and a hanging shutdown
/// hook gets its agent killed at the deadline.
#[tokio::test(start_paused = true)]
async fn tools_and_hooks_fail_by_plan() {
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([Call::tool("read", serde_json::json!({}))]),
            Turn::answer("ok"),
        ],
    );
    let read = FnTool::new("read", "reads", |_, _| async { Ok("text".to_owned()) });
    let tree = Tree::builder()
        .catalog(w_and_v())
        .model(model.clone())
        .tool(FaultyTool::failing(read, "disk on fire"))
        .unwrap()
        .build()
        .await
        .unwrap();
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    let result = &model.log_of(AgentId::new(1))[1].results[0];
    assert!(result.is_error);
    assert_eq!(result.content, "disk on fire");

    let tree = Tree::builder()
        .catalog(w_and_v())
        .model(answers())
        .on_start(failing_hook("no workspace"))
        .build()
        .await
        .unwrap();
    let outcome = tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(outcome.reason, EndReason::HookFailed);

    let tree = Tree::builder()
        .catalog(w_and_v())
        .model(ScriptedModel::new().script("w", [Turn::hang()]))
        .on_shutdown(hanging_hook())
        .build()
        .await
        .unwrap();
    let w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let report = tree.shutdown().await;
    assert!(report.killed.contains(&w.id()), "{report:?}");
}

/// A worker under a `one_for_one` supervisor, killed inside its first turn's tool call (at
/// the turn's usage, which is billed before its tools run; the tool never returns): the
/// kill is a crash, so the supervisor restarts it and the second run completes.
async fn killed_in_its_first_run_and_restarted() {
    let model = ScriptedModel::new()
        .script("sup", delegates("w", "work", "supervised"))
        .script(
            "w",
            [
                Turn::calls([Call::tool("block", serde_json::json!({}))])
                    .usage(Usage::tokens(1, 1)),
                Turn::answer("second run"),
            ],
        );
    let catalog = catalog([
        AgentDefinition::new("sup", "")
            .with_allowed_subagents(SubagentAllowance::only(["w"]))
            .with_supervision(Strategy::OneForOne, 3, 5_000),
        AgentDefinition::new("w", "").with_restart(RestartPolicy::Transient),
    ]);
    let block = FnTool::new("block", "blocks", |_, _| async { Ok(String::new()) });
    let tree = Tree::builder()
        .catalog(catalog)
        .model(model)
        .tool(FaultyTool::hanging(block))
        .unwrap()
        .build()
        .await
        .unwrap();
    let mut switch = kill_when(&tree, |e| {
        matches!(e.kind, EventKind::UsageReported { .. } if e.depth == 2).then_some(e.agent)
    });
    let killed = sup_through_the_kill(&tree, &mut switch, "supervised", 2).await;
    assert_eq!(
        tree.outcome(killed).unwrap().text.as_deref(),
        Some("second run")
    );
}

/// Runs a `sup` on `tree` through the kill `switch` makes, and asserts that the kill
/// succeeded, that `sup` answers `answer`, and that the killed agent was restarted and
/// completed in incarnation `incarnation`. The killed agent's id.
async fn sup_through_the_kill(
    tree: &Tree,
    switch: &mut KillSwitch,
    answer: &str,
    incarnation: u32,
) -> AgentId {
    let mut sup = tree.spawn(SpawnRequest::new("sup", "go")).await.unwrap();
    let (killed, result) = switch.fired().await.expect("the switch fires");
    assert_eq!(result, Ok(()));
    assert_eq!(sup.outcome().await.text.as_deref(), Some(answer));
    let record = tree.record(killed).unwrap();
    assert_eq!(
        (record.incarnation, record.status),
        (incarnation, AgentStatus::Completed)
    );
    killed
}

/// `kill_when` kills the agent its picker names at the event it picks; a kill is a crash,
/// which the agent's supervisor restarts.
#[tokio::test(start_paused = true)]
async fn kill_when_kills_the_picked_agent_at_the_picked_event() {
    killed_in_its_first_run_and_restarted().await;
}

/// The same kill and restart on two worker threads, many times: the kill switch fires at
/// its event however the threads interleave.
#[test]
fn kill_when_on_worker_threads() {
    on_worker_threads(
        25,
        Duration::from_secs(30),
        killed_in_its_first_run_and_restarted,
    );
}

/// A kill switch that fires after its agent settled reports the refused kill
/// (`WrongStatus`), and one whose event never comes never fires.
#[tokio::test(start_paused = true)]
async fn a_kill_switch_reports_a_late_kill_and_never_fires_without_its_event() {
    let tree = build_tree(w_and_v(), answers()).await;
    // Picked at its end: nothing is left to kill.
    let mut late = kill_when(&tree, |e| e.kind.outcome().map(|_| e.agent));
    let w = tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert!(w.is_completed());
    let (agent, result) = late.fired().await.unwrap();
    assert!(
        matches!(result, Err(ControlError::WrongStatus(a, _)) if a == agent),
        "{result:?}"
    );

    let mut never = kill_when(&tree, |e| {
        matches!(e.kind, EventKind::Restarted { .. }).then_some(e.agent)
    });
    tree.run(SpawnRequest::new("v", "go")).await.unwrap();
    tree.shutdown().await;
    drop(tree);
    assert_eq!(never.fired().await, None);
}

/// A fault limited to run 1 fails the first run only: the restarted run (incarnation 2)
/// completes.
#[tokio::test(start_paused = true)]
async fn a_fault_only_in_run_one_fails_once_and_the_restart_recovers() {
    let model = FaultyModel::new(answers())
        .fail_at_turn(1, ModelError::new("first run only"))
        .only_in_run(1);
    let catalog = catalog([AgentDefinition::new("w", "").with_restart(RestartPolicy::Transient)]);
    let tree = build_tree(catalog, model).await;
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    let outcome = w.outcome().await;
    assert!(outcome.is_completed(), "{outcome:?}");
    assert_eq!(tree.record(w.id()).unwrap().incarnation, 2);
}

/// Whether `model` fails turn `turn` of run 1 of agent a1 (first attempt) with "flaky".
async fn draw_fails(seed: u64, turn: u32) -> bool {
    let model = FaultyModel::new(ScriptedModel::new().script("w", [Turn::answer("ok")]))
        .fail_with_probability(0.5, seed, ModelError::new("flaky"));
    let request = ModelRequest::new(AgentId::new(1), Arc::new(AgentDefinition::new("w", "")))
        .with_turn(1, turn);
    matches!(model.turn(request).await, Err(e) if e.describe().contains("flaky"))
}

/// A seeded probability draws once per call from (seed, agent, run, turn, attempt), each
/// field hashed on its own, so the trials of `experiment::run_trials` (seeds `seed + i`) are
/// independent: turn 2 under seed `s` and turn 1 under seed `s ^ 3` agree about half the
/// time (p = 0.5 each), not always.
#[tokio::test(start_paused = true)]
async fn seeded_draws_of_different_seeds_and_turns_are_independent() {
    let mut agree = 0;
    for s in 0..256u64 {
        if draw_fails(s, 2).await == draw_fails(s ^ 3, 1).await {
            agree += 1;
        }
    }
    assert!(
        agree < 200,
        "turn 2 under seed s and turn 1 under seed s^3 agreed in {agree} of 256 seeds: \
         the same draw, not independent ones"
    );
}

/// The same seed fails the same calls (determinism), and the draws vary across turns.
#[tokio::test(start_paused = true)]
async fn the_same_seed_draws_the_same_and_turns_draw_anew() {
    let mut a = Vec::new();
    let mut b = Vec::new();
    for turn in 1..40 {
        a.push(draw_fails(7, turn).await);
        b.push(draw_fails(7, turn).await);
    }
    assert_eq!(a, b);
    assert!(a.iter().any(|f| *f) && a.iter().any(|f| !*f), "{a:?}");
}

/// "Kill the worker as its second run starts": a kill is a crash, so the transient worker
/// restarts once more and its third run completes.
#[tokio::test(start_paused = true)]
async fn kill_when_at_the_second_runs_start_restarts_the_worker_once_more() {
    let scripted = ScriptedModel::new()
        .script("sup", delegates("worker", "w", "done"))
        .script("worker", answers_after("ok", Duration::from_secs(1)));
    let model = FaultyModel::new(scripted)
        .fail_at_turn(1, ModelError::new("crash"))
        .only_for("worker")
        .only_in_run(1);
    let tree = build_tree(supervised(3, 5_000), model).await;
    let mut switch = kill_when(&tree, |e| {
        matches!(e.kind, EventKind::Started { incarnation: 2, .. }).then_some(e.agent)
    });
    sup_through_the_kill(&tree, &mut switch, "done", 3).await;
}

/// A transient worker under a supervisor: its first run hangs, its second answers.
async fn hanging_worker_tree() -> Tree {
    let model = ScriptedModel::new()
        .script("sup", delegates("worker", "w", "done"))
        .script("worker", [Turn::hang(), Turn::answer("ok")]);
    build_tree(supervised(3, 5_000), model).await
}

/// Two switches picking the same event kill the same run: one crash, one restart.
#[tokio::test(start_paused = true)]
async fn two_switches_on_one_event_restart_the_worker_once() {
    let tree = hanging_worker_tree().await;
    let mut events = EventProbe::new(&tree);
    // Both pick the worker's first `started` event.
    let pick = |e: &agent_tree::protocol::Event| {
        matches!(e.kind, EventKind::Started { incarnation: 1, .. } if e.depth == 2)
            .then_some(e.agent)
    };
    let mut one = kill_when(&tree, pick);
    let mut two = kill_when(&tree, pick);
    let sup = tree.spawn(SpawnRequest::new("sup", "go")).await.unwrap();
    let (first, _) = one.fired().await.expect("the first switch fires");
    let (second, _) = two.fired().await.expect("the second switch fires");
    assert_eq!(first, second);
    // Killed at its start, before its model call: run 2 plays the script's first turn
    // (the cursor walks per call, across restarts), which hangs; abort to end it.
    events
        .expect_event("the worker's restart", |e| {
            matches!(e.kind, EventKind::Restarted { incarnation: 2 })
        })
        .await;
    events
        .expect_no_event(Duration::from_secs(60), |e| {
            matches!(
                e.kind,
                EventKind::Restarted { .. } | EventKind::Killed { .. }
            )
        })
        .await;
    tree.abort(sup.id()).unwrap();
    assert_eq!(
        events.expect_terminated(sup.id()).await.status,
        AgentStatus::Aborted
    );
}

/// A kill at the moment a shutdown begins (the root's `completing`) is a kill the report
/// counts, and nothing restarts during a shutdown.
#[tokio::test(start_paused = true)]
async fn a_kill_during_a_shutdown_is_reported_and_restarts_nothing() {
    let tree = hanging_worker_tree().await;
    let mut events = EventProbe::new(&tree);
    let mut switch = kill_when(&tree, |e| {
        (matches!(e.kind, EventKind::Completing) && e.agent == AgentId::ROOT)
            .then_some(AgentId::new(2))
    });
    tree.spawn(SpawnRequest::new("sup", "go")).await.unwrap();
    events
        .expect_event("the worker started", |e| {
            matches!(e.kind, EventKind::Started { .. }) && e.depth == 2
        })
        .await;
    let report = tree.shutdown().await;
    assert_eq!(switch.fired().await, Some((AgentId::new(2), Ok(()))));
    assert!(report.killed.contains(&AgentId::new(2)), "{report:?}");
    assert!(
        !events
            .drain()
            .iter()
            .any(|e| matches!(e.kind, EventKind::Restarted { .. })),
        "a restart during the shutdown"
    );
}
