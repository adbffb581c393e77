//! Experiment rows (`testkit::experiment`): seeded trials give the same rows, escalations
//! and restarts are counted as `TrialRow` documents, a hanging trial is recorded as it
//! stands, and `run_trials` is called from synchronous code.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::Strategy;
use agent_tree::testkit::{FaultyModel, Script, ScriptedModel, Turn, experiment};

use crate::research_team::team;
use crate::small_catalogs::one_worker;
use crate::support::build_tree;
use crate::support::catalog;
use crate::support::harness::tree;

fn setup(p: f64) -> impl Fn(u64) -> BoxFuture<'static, (Tree, SpawnRequest)> + Copy {
    move |seed: u64| -> BoxFuture<'static, (Tree, SpawnRequest)> {
        Box::pin(async move {
            let scripted = crate::support::lead_spawning_a_searcher().script(
                "searcher",
                Script::new((0..4).map(|_| Turn::answer("found").usage(Usage::tokens(5, 1)))),
            );
            let model = FaultyModel::new(scripted)
                .fail_with_probability(p, seed, ModelError::new("flaky"))
                .only_for("searcher");
            let tree = build_tree(team("transient"), model).await;
            (tree, SpawnRequest::new("lead", "X?"))
        })
    }
}

/// A sweep of the searcher's failure probability against the lead's intensity of 2: the same
/// seeds give the same rows; at p = 0 nothing restarts and every trial bills 6 tokens; a
/// failed trial escalated once; escalations do not fall as p grows, and some come at p = 0.9.
#[test]
fn a_failure_rate_sweep_gives_the_same_rows_per_seed_and_escalates_no_less_as_p_grows() {
    let mut escalated = Vec::new();
    for p in [0.0, 0.4, 0.9] {
        let rows = experiment::run_trials(12, 1, setup(p));
        assert_eq!(rows.len(), 12);
        assert_eq!(
            rows,
            experiment::run_trials(12, 1, setup(p)),
            "same seeds, same rows"
        );
        print!("p = {p}\n{}", experiment::to_csv(&rows));
        let n = rows
            .iter()
            .filter(|r| r.status == AgentStatus::Failed)
            .count();
        if p == 0.0 {
            assert!(
                rows.iter()
                    .all(|r| r.restarts == 0 && r.status == AgentStatus::Completed)
            );
            assert!(rows.iter().all(|r| r.tokens == 6), "{rows:?}");
        }
        for r in &rows {
            if r.status == AgentStatus::Failed {
                assert_eq!(r.escalations, 1, "{r:?}");
                assert_eq!(r.reason.as_ref().map(|r| r.as_str()), Some("escalated"));
            }
        }
        escalated.push(n);
    }
    assert!(
        escalated[0] <= escalated[1] && escalated[1] <= escalated[2],
        "{escalated:?}"
    );
    assert!(escalated[2] > 0);
}

/// `run_trials` builds its own runtime per trial, so it cannot be called from a
/// `#[tokio::test]` (documented: "Call it from synchronous code").
#[tokio::test(start_paused = true)]
#[should_panic(expected = "Cannot start a runtime from within a runtime")]
async fn run_trials_refuses_an_async_caller() {
    let rows = experiment::run_trials(2, 1, setup(0.0));
    assert_eq!(rows.len(), 2);
}

/// Root supervision in an experiment: a top-level transient worker that always fails,
/// under the root's intensity (1 restart per 5 s). docs/semantics.md: "past that intensity
/// the root fails and every agent is aborted"; TrialRow::escalations: "Agents that failed
/// because a child's restart intensity was exceeded".
#[test]
fn a_root_escalation_counts_in_the_experiment_row() {
    let rows = experiment::run_trials(1, 3, |_| {
        Box::pin(async move {
            let model = FaultyModel::new(ScriptedModel::new().script("w", [Turn::answer("ok")]))
                .fail_at_turn(1, ModelError::new("crash"));
            let catalog =
                catalog([AgentDefinition::new("w", "").with_restart(RestartPolicy::Transient)]);
            let tree = tree(
                model,
                catalog,
                TreeConfig::default().with_root_supervision(
                    Strategy::OneForOne,
                    1,
                    Duration::from_secs(5),
                ),
            )
            .await;
            (tree, SpawnRequest::new("w", "go"))
        })
    });
    let row = &rows[0];
    assert_eq!(row.restarts, 1, "{row:?}");
    assert_eq!(row.status, AgentStatus::Failed, "{row:?}");
    assert_eq!(row.escalations, 1, "the root escalated: {row:?}");
}

/// A trial that never settles is recorded as it stands after TRIAL_LIMIT.
#[test]
fn a_trial_that_never_settles_is_recorded_running_at_the_trial_limit() {
    let rows = experiment::run_trials(1, 0, |_| {
        Box::pin(async move {
            let model = ScriptedModel::new().script("w", [Turn::hang()]);
            let tree = build_tree(one_worker(), model).await;
            (tree, SpawnRequest::new("w", "go"))
        })
    });
    assert_eq!(rows[0].status, AgentStatus::Running, "{:?}", rows[0]);
    assert_eq!(rows[0].reason, None);
    assert_eq!(
        rows[0].elapsed_ms,
        experiment::TRIAL_LIMIT.as_millis() as u64
    );
}
