//! Supervision under injected faults: restarts up to the intensity, the sliding window,
//! escalation and the error text naming the original failure, one_for_one and one_for_all,
//! and a kill that is a crash to the supervisor.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, EventKind, Strategy};
use agent_tree::testkit::{
    self, Call, EventProbe, FaultyModel, Script, ScriptedModel, Target, Turn, experiment,
};

use crate::research_team::{team, team_script};
use crate::support::build_tree;
use crate::support::catalog;
use crate::support::scripts::{background_spawns, delegates};

/// Every run of the searcher fails: two restarts (the lead's intensity), then the lead
/// escalates.
#[tokio::test(start_paused = true)]
async fn a_child_that_always_fails_is_restarted_to_the_intensity_then_escalates() {
    let model = FaultyModel::new(team_script())
        .fail_at_turn(1, ModelError::new("crash"))
        .only_for("searcher");
    let tree = build_tree(team("transient"), model).await;
    let mut events = EventProbe::new(&tree);
    let lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();
    let restarts = events
        .receive_n(2, "a restart", |e| {
            matches!(e.kind, EventKind::Restarted { .. })
        })
        .await;
    assert!(restarts.iter().all(|e| e.depth == 2));
    let outcome = events.expect_terminated(lead.id()).await;
    assert_eq!(outcome.status, AgentStatus::Failed);
    assert_eq!(outcome.reason.as_str(), "escalated");
    tree.shutdown().await;
}

/// A searcher that fails with probability 0.5 (seed 3): it is restarted at least once and
/// the lead still completes with the answer.
#[tokio::test(start_paused = true)]
async fn a_flaky_child_is_restarted_and_its_owner_completes() {
    let scripted = crate::support::lead_spawning_a_searcher()
        // Each run walks on through the script (the cursor survives restarts): enough turns.
        .script(
            "searcher",
            [
                Turn::answer("found"),
                Turn::answer("found"),
                Turn::answer("found"),
            ],
        );
    let log = scripted.call_log();
    let seed = SEED;
    let model = FaultyModel::new(scripted)
        .fail_with_probability(0.5, seed, ModelError::new("flaky"))
        .only_for("searcher");
    let tree = build_tree(team("transient"), model).await;
    let mut events = EventProbe::new(&tree);
    let lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();
    let outcome = events.expect_terminated(lead.id()).await;
    let restarts = events
        .seen()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Restarted { .. }))
        .count();
    println!(
        "seed {seed}: {restarts} restarts, lead {:?}, {} calls",
        outcome.status,
        log.len()
    );
    assert!(restarts >= 1);
    assert_eq!(outcome.text.as_deref(), Some("led"));
    tree.shutdown().await;
}

const SEED: u64 = 3;

fn sup_catalog(strategy: Strategy, max_restarts: u32, period_ms: u64) -> Catalog {
    catalog([
        AgentDefinition::new("sup", "")
            .with_allowed_subagents(SubagentAllowance::only(["flaky", "steady"]))
            .with_supervision(strategy, max_restarts, period_ms),
        AgentDefinition::new("flaky", "").with_restart(RestartPolicy::Transient),
        AgentDefinition::new("steady", "").with_restart(RestartPolicy::Transient),
    ])
}

fn sup_script() -> Script {
    Script::new([
        background_spawns([("flaky", "f"), ("steady", "s")]),
        Turn::calls([Call::wait(
            [Target::Spawned(0), Target::Spawned(1)],
            WaitPolicy::AllSettled,
        )]),
        Turn::answer("supervised"),
    ])
}

/// The scripted cursor continues across restarts, so every script has a turn per run.
fn workers() -> ScriptedModel {
    ScriptedModel::new()
        .script("sup", sup_script())
        .script(
            "flaky",
            [
                Turn::answer("f ok"),
                Turn::answer("f ok"),
                Turn::answer("f ok"),
            ],
        )
        .script(
            "steady",
            [
                Turn::answer("s ok").after(Duration::from_secs(1)),
                Turn::answer("s ok").after(Duration::from_secs(1)),
                Turn::answer("s ok").after(Duration::from_secs(1)),
            ],
        )
}

fn one_trial(strategy: Strategy, fail_every_run: bool) -> experiment::TrialRow {
    let rows = experiment::run_trials(1, 1, move |_seed| {
        Box::pin(async move {
            let mut model = FaultyModel::new(workers())
                .fail_at_turn(1, ModelError::new("connection reset"))
                .only_for("flaky");
            if !fail_every_run {
                model = model.only_in_run(1);
            }
            let tree = build_tree(sup_catalog(strategy, 2, 5_000), model).await;
            (tree, SpawnRequest::new("sup", "go"))
        })
    });
    rows.into_iter().next().unwrap()
}

/// one_for_one restarts only the flaky worker; the supervisor completes.
#[test]
fn one_for_one_restarts_only_the_failed_child() {
    let row = one_trial(Strategy::OneForOne, false);
    assert_eq!(row.status, AgentStatus::Completed, "{row:?}");
    assert_eq!(row.restarts, 1, "{row:?}");
    assert_eq!(row.restarts_per_agent.len(), 1, "{row:?}");
    assert_eq!(
        row.restarts_per_agent.keys().next().unwrap().to_string(),
        "a2"
    );
    assert_eq!(row.escalations, 0);
    // flaky fails at 0 ms; sup ends when steady completes at 1 s.
    assert_eq!(row.recover_ms, Some(1000), "{row:?}");
}

/// one_for_all stops the steady sibling and restarts both, in start order.
#[test]
fn one_for_all_restarts_every_child_in_start_order() {
    let row = one_trial(Strategy::OneForAll, false);
    assert_eq!(row.status, AgentStatus::Completed, "{row:?}");
    assert_eq!(row.restarts, 2, "{row:?}");
    let per: Vec<(String, u64)> = row
        .restarts_per_agent
        .iter()
        .map(|(a, n)| (a.to_string(), *n))
        .collect();
    assert_eq!(per, [("a2".to_owned(), 1), ("a3".to_owned(), 1)]);
    assert_eq!(row.escalations, 0);
    // steady's restarted run takes another second from the restart at 0 ms.
    assert_eq!(row.recover_ms, Some(1000), "{row:?}");
}

/// Past the intensity (2 in 5 s) the supervisor escalates, naming the original
/// failure (docs/semantics.md "Supervision restarts": `flaky a2 failed (model_error):
/// connection reset`).
#[test]
fn past_the_intensity_the_supervisor_escalates_naming_the_cause() {
    for strategy in [Strategy::OneForOne, Strategy::OneForAll] {
        let row = one_trial(strategy, true);
        assert_eq!(row.status, AgentStatus::Failed, "{strategy:?} {row:?}");
        assert_eq!(row.reason, Some(EndReason::Escalated), "{row:?}");
        assert_eq!(row.escalations, 1, "{strategy:?} {row:?}");
        assert_eq!(
            row.restarts_per_agent.get(&"a2".parse().unwrap()),
            Some(&2),
            "{row:?}"
        );
        assert_eq!(row.recover_ms, None);
    }
    let csv = experiment::to_csv(&[one_trial(Strategy::OneForOne, true)]);
    assert!(
        csv.lines().nth(1).unwrap().contains(",failed,escalated,"),
        "{csv}"
    );
}

/// The escalation's error text, read through an EventProbe, names the original failure.
#[tokio::test(start_paused = true)]
async fn an_escalations_error_text_names_the_original_failure() {
    let model = FaultyModel::new(workers())
        .fail_at_turn(1, ModelError::new("connection reset"))
        .only_for("flaky");
    let tree = build_tree(sup_catalog(Strategy::OneForOne, 2, 5_000), model).await;
    let mut events = EventProbe::new(&tree);
    let sup = tree.spawn(SpawnRequest::new("sup", "go")).await.unwrap();
    let outcome = events.expect_terminated(sup.id()).await;
    assert_eq!(outcome.reason, EndReason::Escalated);
    let error = outcome.error.unwrap_or_default();
    assert!(
        error.contains("flaky a2 failed (model_error): connection reset"),
        "{error}"
    );
    tree.shutdown().await;
}

fn timed_flaky_trial(
    max_restarts: u32,
    spacing: Duration,
    failures: usize,
) -> experiment::TrialRow {
    let rows = experiment::run_trials(1, 9, move |_| {
        Box::pin(async move {
            let mut turns: Vec<Turn> = (0..failures)
                .map(|_| Turn::fail("boom").after(spacing))
                .collect();
            turns.push(Turn::answer("f ok"));
            let model = ScriptedModel::new()
                .script("sup", delegates("flaky", "f", "supervised"))
                .script("flaky", Script::new(turns));
            let tree =
                build_tree(sup_catalog(Strategy::OneForOne, max_restarts, 5_000), model).await;
            (tree, SpawnRequest::new("sup", "go"))
        })
    });
    rows.into_iter().next().unwrap()
}

/// The window slides: failures 3 s apart never put 2 restarts in a 5 s window
/// (restarts at 3, 6, 9 s: the window before 9 s holds only 6 s), so 3 failures recover.
#[test]
fn the_intensity_window_slides() {
    let row = timed_flaky_trial(2, Duration::from_secs(3), 3);
    assert_eq!(row.status, AgentStatus::Completed, "{row:?}");
    assert_eq!(row.restarts, 3, "{row:?}");
    assert_eq!(row.escalations, 0);
    assert_eq!(row.elapsed_ms, 9000, "{row:?}");
    // first failure at 3 s, sup completes at 9 s.
    assert_eq!(row.recover_ms, Some(6000), "{row:?}");
}

/// "a restart exactly one period old still counts" (OTP's add_restart): with 1
/// restart per 5 s, failures exactly 5 s apart escalate at the second failure.
#[test]
fn a_restart_exactly_one_period_old_still_counts() {
    let row = timed_flaky_trial(1, Duration::from_secs(5), 2);
    assert_eq!(row.status, AgentStatus::Failed, "{row:?}");
    assert_eq!(row.reason, Some(EndReason::Escalated), "{row:?}");
    assert_eq!(row.restarts, 1, "{row:?}");
    assert_eq!(row.elapsed_ms, 10_000, "{row:?}");
    // One ms more and it recovers.
    let row = timed_flaky_trial(1, Duration::from_millis(5001), 2);
    assert_eq!(row.status, AgentStatus::Completed, "{row:?}");
    assert_eq!(row.restarts, 2, "{row:?}");
}

/// A kill at a chosen event (kill_when) is a crash: under one_for_all the killed
/// steady worker and its flaky sibling both restart (docs/testing.md: "A kill is a crash to
/// the supervisor, so a `transient` or `permanent` child restarts").
#[tokio::test(start_paused = true)]
async fn a_kill_at_a_chosen_event_is_a_crash_to_a_one_for_all_supervisor() {
    let tree = build_tree(sup_catalog(Strategy::OneForAll, 2, 5_000), workers()).await;
    let mut events = EventProbe::new(&tree);
    // a3 is steady; kill it as it starts its first run.
    let mut switch = testkit::kill_when(&tree, |e| {
        (e.agent.to_string() == "a3" && matches!(e.kind, EventKind::Started { incarnation: 1, .. }))
            .then_some(e.agent)
    });
    let sup = tree.spawn(SpawnRequest::new("sup", "go")).await.unwrap();
    let (killed, result) = switch.fired().await.unwrap();
    assert_eq!(killed.to_string(), "a3");
    result.unwrap();
    let restarted = events
        .receive_n(2, "a restart", |e| {
            matches!(e.kind, EventKind::Restarted { .. })
        })
        .await;
    let mut who: Vec<String> = restarted.iter().map(|e| e.agent.to_string()).collect();
    who.sort();
    assert_eq!(who, ["a2", "a3"]);
    assert_eq!(
        events.expect_terminated(sup.id()).await.text.as_deref(),
        Some("supervised")
    );
    tree.shutdown().await;
}

/// lead (one_for_one, 1 restart in 5 s) supervises a transient sup (one_for_all, 1 in 5 s),
/// which supervises a transient flaky whose every first turn fails: sup escalates in each of
/// its two runs, then lead escalates.
async fn nested_escalation_tree() -> Tree {
    let model = FaultyModel::new(
        ScriptedModel::new()
            .script("lead", delegates("sup", "s", "lead ok"))
            // The cursor runs on across restarts, and an escalated run never took its answer
            // turn: the restarted run's first turn is the second spawn.
            .script(
                "sup",
                [
                    Turn::spawn("flaky", "f"),
                    Turn::spawn("flaky", "f"),
                    Turn::answer("sup ok"),
                ],
            )
            .script("flaky", [Turn::answer("never")]),
    )
    .fail_at_turn(1, ModelError::new("connection reset"))
    .only_for("flaky");
    let catalog = catalog([
        AgentDefinition::new("lead", "")
            .with_allowed_subagents(SubagentAllowance::only(["sup"]))
            .with_supervision(Strategy::OneForOne, 1, 5_000),
        AgentDefinition::new("sup", "")
            .with_allowed_subagents(SubagentAllowance::only(["flaky"]))
            .with_supervision(Strategy::OneForAll, 1, 5_000)
            .with_restart(RestartPolicy::Transient),
        AgentDefinition::new("flaky", "").with_restart(RestartPolicy::Transient),
    ]);
    build_tree(catalog, model).await
}

/// A nested escalation: the top's error names the original failure through
/// the chain (`sup a2 failed (escalated): flaky a4 failed (model_error): connection reset`).
#[tokio::test(start_paused = true)]
async fn a_nested_escalation_names_the_original_failure_through_the_chain() {
    let tree = nested_escalation_tree().await;
    let mut events = EventProbe::new(&tree);
    let lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    let outcome = events.expect_terminated(lead.id()).await;
    let error = outcome.error.clone().unwrap_or_default();
    assert_eq!(outcome.reason, EndReason::Escalated, "{outcome:?}");
    assert!(error.contains("(model_error): connection reset"), "{error}");
    tree.shutdown().await;
}

/// Rule (actors/src/testkit/experiment.rs, `TrialRow::escalations`): "Agents that failed
/// because a child's restart intensity was exceeded." lead (one_for_one, 1 per 5 s)
/// supervises a transient sup (one_for_all, 1 per 5 s) that supervises an always-failing
/// flaky: sup escalates, lead restarts it, it escalates again, lead escalates. Two agents
/// escalated (sup, lead), so the row counts 2, not one per run that escalated.
#[test]
fn escalations_in_an_experiment_row_count_agents_not_runs() {
    let rows = experiment::run_trials(1, 5, |_| {
        Box::pin(async move {
            let tree = nested_escalation_tree().await;
            (tree, SpawnRequest::new("lead", "go"))
        })
    });
    let row = &rows[0];
    assert_eq!(row.reason, Some(EndReason::Escalated), "{row:?}");
    // flaky: restarted once per sup incarnation; sup restarted once by lead.
    assert_eq!(row.restarts, 3, "{row:?}");
    // "Agents that failed because a child's restart intensity was exceeded": sup and lead.
    assert_eq!(
        row.escalations, 2,
        "two agents escalated (sup, lead): {row:?}"
    );
}
