//! The experiment harness: seeded trials in virtual time, the same rows every run, and the
//! counts a supervision experiment reads (restarts per agent, escalations, recovery), exact
//! at the intensity window's edge. A trial that never settles is recorded running; the
//! trial's own shutdown is no failure the top agent recovered from.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, Strategy};
use agent_tree::testkit::{self, FaultyModel, ScriptedModel, Turn, experiment};

use crate::support::lifetimes::supervised;
use crate::support::scripts::{answers_after, delegates};
use crate::support::{build_tree, catalog, leaf};

/// A supervisor that spawns one worker in the foreground; with `fail`, the worker's first
/// turn of every run fails.
fn setup(
    max_restarts: u32,
    fail: bool,
) -> impl Fn(u64) -> agent_tree::BoxFuture<'static, (Tree, SpawnRequest)> {
    move |_seed| {
        Box::pin(async move {
            let scripted = ScriptedModel::new()
                .script("sup", delegates("worker", "w", "done"))
                .script(
                    "worker",
                    [Turn::answer("ok"), Turn::answer("ok"), Turn::answer("ok")],
                );
            let mut model = FaultyModel::new(scripted);
            if fail {
                model = model
                    .fail_at_turn(1, ModelError::new("crash"))
                    .only_for("worker");
            }
            let catalog = catalog([
                AgentDefinition::new("sup", "")
                    .with_allowed_subagents(SubagentAllowance::only(["worker"]))
                    .with_supervision(Strategy::OneForOne, max_restarts, 5_000)
                    .with_restart(RestartPolicy::Temporary),
                AgentDefinition::new("worker", "").with_restart(RestartPolicy::Transient),
            ]);
            let tree = build_tree(catalog, model).await;
            (tree, SpawnRequest::new("sup", "go"))
        })
    }
}

/// An experiment's rows count a worker failing every run exactly: restarts up to the
/// intensity (per agent too), then one escalation, the top agent failed `escalated` and no
/// recovery time; every trial gives the same row.
#[test]
fn a_worker_failing_every_run_escalates_past_the_intensity() {
    let rows = experiment::run_trials(3, 9, setup(2, true));
    assert_eq!(rows.len(), 3);
    for row in &rows {
        assert_eq!(row.reason, Some(EndReason::Escalated), "{row:?}");
        assert_eq!(row.status, AgentStatus::Failed);
        assert_eq!(row.restarts, 2, "{row:?}");
        assert_eq!(row.restarts_per_agent.get(&AgentId::new(2)), Some(&2));
        assert_eq!(row.escalations, 1);
        assert_eq!(row.recover_ms, None);
    }
    assert_eq!(rows, experiment::run_trials(3, 9, setup(2, true)));
    let csv = experiment::to_csv(&rows);
    assert_eq!(csv.lines().count(), 4);
    assert!(csv.lines().nth(1).unwrap().contains(",2,a2:2,1,,"), "{csv}");
}

/// A trial with no fault injected completes with no restart and no escalation in its row.
#[test]
fn a_tree_without_faults_completes_without_restarts() {
    let rows = experiment::run_trials(2, 1, setup(2, false));
    for row in rows {
        assert_eq!(row.status, AgentStatus::Completed);
        assert_eq!((row.restarts, row.escalations), (0, 0));
        assert!(row.restarts_per_agent.is_empty());
    }
}

/// A worker whose first run fails at once and whose second fails after `second_after`;
/// the third answers.
fn edge_setup(
    second_after: Duration,
) -> impl Fn(u64) -> agent_tree::BoxFuture<'static, (Tree, SpawnRequest)> + Clone {
    move |_seed| {
        Box::pin(async move {
            let model = ScriptedModel::new()
                .script("sup", delegates("worker", "w", "done"))
                .script(
                    "worker",
                    [
                        Turn::fail("crash one"),
                        Turn::fail("crash two").after(second_after),
                        Turn::answer("ok"),
                    ],
                );
            let tree = build_tree(supervised(1, 5_000), model).await;
            (tree, SpawnRequest::new("sup", "go"))
        })
    }
}

/// "A restart exactly one period old still counts": a second failure exactly 5 s after the
/// first restart escalates (intensity 1 per 5 s), one a millisecond later is restarted; the
/// rows count what the events say, the same every run.
#[test]
fn the_rows_count_restarts_at_the_intensity_windows_edge() {
    let rows = experiment::run_trials(2, 3, edge_setup(Duration::from_millis(5_000)));
    for row in &rows {
        assert_eq!(row.restarts, 1, "{row:?}");
        assert_eq!(row.escalations, 1, "{row:?}");
        assert_eq!(row.reason, Some(EndReason::Escalated), "{row:?}");
        assert_eq!(row.recover_ms, None, "{row:?}");
    }
    assert_eq!(
        rows,
        experiment::run_trials(2, 3, edge_setup(Duration::from_millis(5_000)))
    );
    let rows = experiment::run_trials(2, 3, edge_setup(Duration::from_millis(5_001)));
    for row in &rows {
        assert_eq!(row.restarts, 2, "{row:?}");
        assert_eq!(row.escalations, 0, "{row:?}");
        assert_eq!(row.status, AgentStatus::Completed, "{row:?}");
        assert_eq!(row.recover_ms, Some(5_001), "{row:?}");
    }
}

/// A trial whose top agent never ends is recorded as it stands after `TRIAL_LIMIT`, the
/// same every run.
#[test]
fn a_trial_that_never_settles_is_recorded_running() {
    let setup = |_seed: u64| -> agent_tree::BoxFuture<'static, (Tree, SpawnRequest)> {
        Box::pin(async move {
            let model = ScriptedModel::new().script("w", [Turn::hang()]);
            let tree = build_tree(catalog([leaf("w")]), model).await;
            (tree, SpawnRequest::new("w", "go"))
        })
    };
    let rows = experiment::run_trials(1, 0, setup);
    assert_eq!(rows[0].status, AgentStatus::Running, "{:?}", rows[0]);
    assert_eq!(rows[0].reason, None);
    assert_eq!(
        rows[0].elapsed_ms,
        u64::try_from(experiment::TRIAL_LIMIT.as_millis()).unwrap()
    );
    assert_eq!(rows, experiment::run_trials(1, 0, setup));
}

/// `TrialRow::recover_ms` is the time from the first failure in the tree to the top agent's
/// end, when something failed and the top still completed: a kill by the trial's own
/// shutdown after the top's end (a shutdown hook outliving the grace) is no failure the top
/// recovered from, so a trial where nothing failed before the top completed has none.
#[test]
fn recover_ms_ignores_the_trials_own_shutdown_kill() {
    let rows = experiment::run_trials(1, 1, |_| {
        Box::pin(async move {
            let model = ScriptedModel::new()
                .script("top", answers_after("done", Duration::from_secs(1)))
                .script("idle", [Turn::hang()]);
            let catalog = catalog([
                AgentDefinition::new("top", ""),
                AgentDefinition::new("idle", ""),
            ]);
            let tree = Tree::builder()
                .catalog(catalog)
                .model(model)
                .on_shutdown(testkit::hanging_hook())
                .build()
                .await
                .unwrap();
            // A second top-level agent still running when the trial shuts the tree down.
            let _idle = tree.spawn(SpawnRequest::new("idle", "wait")).await.unwrap();
            (tree, SpawnRequest::new("top", "go"))
        })
    });
    let row = &rows[0];
    assert_eq!(row.status, AgentStatus::Completed, "{row:?}");
    assert_eq!(row.restarts, 0, "{row:?}");
    assert_eq!(
        row.recover_ms, None,
        "nothing failed before the top completed: {row:?}"
    );
}
