//! Fault plans and kill switches: a `FaultyModel`'s faults (per-call draws, every attempt
//! of a failing turn, faults that compose) and `kill_when` (fired, disarmed, or `None` once
//! its tree is gone).

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::EventKind;
use agent_tree::testkit::{
    Call, CallEnd, EventProbe, FaultyModel, ScriptedModel, Turn, experiment, kill_when,
};

use crate::research_team::{team, team_script};
use crate::small_catalogs::one_worker;
use crate::support::{build_tree, catalog, leaf};

/// Rule (faults.rs, `fail_with_probability`): "Fails each call with `probability`". A retry
/// is another model call with its own draw, so a transient fault injected with p = 0.5
/// fails all 4 attempts of the retry policy for about 1 agent in 16, not half of them: the
/// retry path can be exercised with a seeded flaky model.
#[test]
fn a_flaky_transient_fault_is_drawn_per_call_so_retries_can_succeed() {
    let rows = experiment::run_trials(64, 1_000, |seed| {
        Box::pin(async move {
            let scripted = ScriptedModel::new().script("w", [Turn::answer("ok")]);
            let model = agent_tree::testkit::FaultyModel::new(scripted).fail_with_probability(
                0.5,
                seed,
                ModelError::transient("flaky"),
            );
            let tree = build_tree(catalog([leaf("w")]), model).await;
            (tree, SpawnRequest::new("w", "go"))
        })
    });
    let failed = rows
        .iter()
        .filter(|r| r.status == AgentStatus::Failed)
        .count();
    // Independent draws per attempt: P(4 failures) = 1/16, about 4 of 64.
    assert!(
        failed < 16,
        "{failed} of 64 agents failed every retry of a p = 0.5 transient fault"
    );
}

/// A kill switch that never fired reports `None` promptly once its tree is dropped
/// ("`None` when ... the tree ended first"), rather than waiting `EXPECT_WITHIN`.
#[tokio::test(start_paused = true)]
async fn a_kill_switch_reports_none_promptly_when_its_tree_is_dropped() {
    let script = ScriptedModel::new().script("w", [Turn::answer("ok")]);
    let tree = build_tree(catalog([leaf("w")]), script).await;
    let mut switch = kill_when(&tree, |_| None);
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    drop(tree);
    let fired = tokio::time::timeout(Duration::from_secs(60), switch.fired()).await;
    assert!(matches!(fired, Ok(None)), "{fired:?}");
}

/// `fail_at_turn` with a transient error fails every attempt at the turn.
#[tokio::test(start_paused = true)]
async fn fail_at_turn_fails_every_retry() {
    let scripted = team_script();
    let log = scripted.call_log();
    let model = FaultyModel::new(scripted)
        .fail_at_turn(1, ModelError::transient("connection reset"))
        .only_for("searcher");
    let tree = build_tree(team("temporary"), model).await;
    let mut events = EventProbe::new(&tree);
    let lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();
    let outcome = events.expect_terminated(lead.id()).await;
    assert_eq!(outcome.text.as_deref(), Some("led"));
    let searcher = events.seen().iter().find(|e| e.depth == 2).unwrap().agent;
    let record = tree.record(searcher).unwrap();
    assert_eq!(record.status, AgentStatus::Failed);
    // The scripted model never saw a searcher call: every attempt failed in the wrapper.
    assert_eq!(log.count_of(searcher), 0);
    tree.shutdown().await;
}

/// The doc's recipe: kill the searcher as its first turn's usage is billed. It is
/// transient, so it restarts; its second run answers and the lead reads that answer.
#[tokio::test(start_paused = true)]
async fn a_child_killed_as_its_first_usage_is_billed_restarts_and_its_owner_reads_the_second_run() {
    let scripted = crate::support::lead_spawning_a_searcher().script(
        "searcher",
        [
            // An unknown tool: an error result, and the searcher would take a second turn.
            Turn::calls([Call::tool("web_search", serde_json::json!({"q": "X"}))])
                .usage(Usage::tokens(5, 1)),
            Turn::answer("found after the restart"),
        ],
    );
    let log = scripted.call_log();
    let tree = build_tree(team("transient"), scripted).await;
    let mut events = EventProbe::new(&tree);
    let mut switch = kill_when(&tree, |e| {
        matches!(e.kind, EventKind::UsageReported { .. } if e.depth == 2).then_some(e.agent)
    });
    let mut lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();

    let (killed, result) = switch.fired().await.expect("the switch fires");
    assert_eq!(result, Ok(()));
    let restarted = events
        .expect_event("the searcher's restart", |e| {
            matches!(e.kind, EventKind::Restarted { .. })
        })
        .await;
    assert_eq!(restarted.agent, killed);

    let outcome = lead.outcome().await;
    assert_eq!(outcome.text.as_deref(), Some("led"));
    let searcher_calls = log.of(killed);
    // Run 1 made exactly one model call: the kill came before its second turn.
    assert_eq!(
        searcher_calls.iter().filter(|c| c.incarnation == 1).count(),
        1,
        "{searcher_calls:#?}"
    );
    let second_run: Vec<_> = searcher_calls
        .iter()
        .filter(|c| c.incarnation == 2)
        .collect();
    assert_eq!(second_run.len(), 1);
    assert_eq!(second_run[0].end, CallEnd::Returned);
    let (_, result) = &log.of(lead.id())[1].answered_calls()[0];
    assert!(
        result.content.contains("found after the restart"),
        "{}",
        result.content
    );
    assert_eq!(tree.record(killed).unwrap().subtree, Usage::tokens(5, 1));
    tree.shutdown().await;
}

/// "Dropping it disarms it."
#[tokio::test(start_paused = true)]
async fn a_dropped_kill_switch_is_disarmed() {
    let tree = build_tree(team("temporary"), team_script()).await;
    let switch = kill_when(&tree, |e| (e.depth == 2).then_some(e.agent));
    drop(switch);
    let mut lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();
    assert_eq!(lead.outcome().await.status, AgentStatus::Completed);
    tree.shutdown().await;
}

/// Rule: the faults of a `FaultyModel` plan compose (actors/src/testkit/faults.rs,
/// `FaultyModel::slow`: "Delays every call by `delay`"; `FaultyModel::fail_at_turn`: "Fails
/// turn `turn` of every run with `error`"; the `FaultyModel` example chains
/// `.fail_at_turn(..).only_for(..).fail_with_probability(..).slow(..)`): `.slow(1 s)` placed
/// before `.fail_at_turn(1, e)` delays turn 1 by 1 s, then fails it.
#[tokio::test(start_paused = true)]
async fn a_slow_fault_planned_before_a_failure_delays_and_still_fails() {
    let model = FaultyModel::new(ScriptedModel::new().script("w", [Turn::answer("ok")]))
        .slow(Duration::from_secs(1))
        .fail_at_turn(1, ModelError::new("crash"));
    let tree = build_tree(one_worker(), model).await;
    let started = tokio::time::Instant::now();
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    let outcome = w.outcome().await;
    assert_eq!(started.elapsed(), Duration::from_secs(1), "slowed");
    assert_eq!(
        outcome.status,
        AgentStatus::Failed,
        "fail_at_turn(1) ignored: {outcome:?}"
    );
    tree.shutdown().await;
}

/// The other order, `.fail_at_turn(1, e)` then `.slow(1 s)`, fails turn 1 too.
#[tokio::test(start_paused = true)]
async fn a_failure_planned_before_a_slow_fault_fails() {
    let model = FaultyModel::new(ScriptedModel::new().script("w", [Turn::answer("ok")]))
        .fail_at_turn(1, ModelError::new("crash"))
        .slow(Duration::from_secs(1));
    let tree = build_tree(one_worker(), model).await;
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(w.outcome().await.status, AgentStatus::Failed);
    tree.shutdown().await;
}
