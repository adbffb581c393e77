//! The experiment harness: seeded trials in virtual time, the same rows every run, and the
//! counts a supervision experiment reads (restarts per agent, escalations, recovery).

use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, Strategy};
use agent_tree::testkit::{FaultyModel, Script, ScriptedModel, Turn, experiment};

/// A supervisor that spawns one worker in the foreground; with `fail`, the worker's first
/// turn of every run fails.
fn setup(
    max_restarts: u32,
    fail: bool,
) -> impl Fn(u64) -> agent_tree::BoxFuture<'static, (Tree, SpawnRequest)> {
    move |_seed| {
        Box::pin(async move {
            let scripted = ScriptedModel::new()
                .script(
                    "sup",
                    Script::new([Turn::spawn("worker", "w"), Turn::answer("done")]),
                )
                .script(
                    "worker",
                    Script::new([Turn::answer("ok"), Turn::answer("ok"), Turn::answer("ok")]),
                );
            let mut model = FaultyModel::new(scripted);
            if fail {
                model = model
                    .fail_at_turn(1, ModelError::new("crash"))
                    .only_for("worker");
            }
            let catalog = Catalog::new([
                AgentDefinition::new("sup", "")
                    .with_allowed_subagents(SubagentAllowance::only(["worker"]))
                    .with_supervision(Strategy::OneForOne, max_restarts, 5_000)
                    .with_restart(RestartPolicy::Temporary),
                AgentDefinition::new("worker", "").with_restart(RestartPolicy::Transient),
            ])
            .unwrap();
            let tree = Tree::builder()
                .catalog(catalog)
                .model(model)
                .build()
                .await
                .unwrap();
            (tree, SpawnRequest::new("sup", "go"))
        })
    }
}

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

#[test]
fn a_tree_without_faults_completes_without_restarts() {
    let rows = experiment::run_trials(2, 1, setup(2, false));
    for row in rows {
        assert_eq!(row.status, AgentStatus::Completed);
        assert_eq!((row.restarts, row.escalations), (0, 0));
        assert!(row.restarts_per_agent.is_empty());
    }
}
