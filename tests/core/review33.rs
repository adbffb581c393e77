//! Review 33: the test kit's run numbering, fault combination and seeded draws, and the
//! experiment rows. `defect_` tests fail on a real defect; `guard_` tests pass and hold
//! documented behaviour.

use std::sync::Arc;
use std::time::Duration;

use agent_tree::ModelError;
use agent_tree::prelude::*;
use agent_tree::protocol::AgentId;
use agent_tree::testkit::{self, FaultyModel, Script, ScriptedModel, Turn, experiment};

/// Whether `model` fails turn `turn` of run 1 of agent a1 (first attempt) with "flaky".
async fn draw_fails(seed: u64, turn: u32) -> bool {
    let model =
        FaultyModel::new(ScriptedModel::new().script("w", Script::new([Turn::answer("ok")])))
            .fail_with_probability(0.5, seed, ModelError::new("flaky"));
    let request = ModelRequest::new(AgentId::new(1), Arc::new(AgentDefinition::new("w", "")))
        .with_turn(1, turn);
    matches!(model.turn(request).await, Err(e) if e.describe().contains("flaky"))
}

/// DEFECT: the seeded draw mixes seed and turn by XOR before hashing, so the draw depends
/// only on `seed ^ turn`: turn 2 under seed `s` is the same draw as turn 1 under seed
/// `s ^ 3`. Trials of `experiment::run_trials` (seeds `seed + i`) are then not independent:
/// a multi-turn agent's draws in one trial are mostly the draws of its neighbours, permuted.
///
/// Doc: actors/src/testkit/faults.rs module docs: "a seeded probability draws once per call
/// from (seed, agent, run, turn, attempt)"; docs/testing.md: run_trials "sweeps ...
/// failure rates ... and plots the escalation probability" (independent trials assumed).
/// Expected: over 256 seeds, `fails(s, turn 2) == fails(s ^ 3, turn 1)` about half the
/// time (p = 0.5 each, independent). Actual: all 256 agree.
/// Cause: actors/src/testkit/faults.rs `Fault::applies`: `splitmix64(seed ^ agent<<<21 ^
/// run<<40 ^ (attempt-1)<<56 ^ turn)` — the fields are XORed into one word before the one
/// hash, so (seed, turn) pairs with the same XOR collide (likewise seed bits 21.. with the
/// agent id, 40.. with the run, 56.. with the attempt). Hash the fields in sequence.
#[tokio::test(start_paused = true)]
async fn defect_seeded_draw_depends_only_on_seed_xor_turn() {
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

/// GUARD: same seed, same calls fail (determinism), and a different agent draws anew.
#[tokio::test(start_paused = true)]
async fn guard_same_seed_same_draws() {
    let mut a = Vec::new();
    let mut b = Vec::new();
    for turn in 1..40 {
        a.push(draw_fails(7, turn).await);
        b.push(draw_fails(7, turn).await);
    }
    assert_eq!(a, b);
    assert!(a.iter().any(|f| *f) && a.iter().any(|f| !*f), "{a:?}");
}

/// DEFECT: `TrialRow::recover_ms` is reported for a trial in which nothing failed before the
/// top agent completed: an agent the trial's own shutdown kills after the top's end (its
/// shutdown hook outlived the grace) counts as "the first failure", and the negative span
/// is clamped to 0.
///
/// Doc: actors/src/testkit/experiment.rs `TrialRow::recover_ms`: "Virtual milliseconds from
/// the first failure in the tree to the top agent's end, when something failed and the top
/// agent still completed." Expected: `None` (the top completed with nothing failed before
/// it; a kill by the experiment's own shutdown is no failure the top recovered from).
/// Actual: `Some(0)`.
/// Cause: actors/src/testkit/experiment.rs `run_trial` drains the events after
/// `tree.shutdown()` and takes every `failed`/`killed` event, including those after the
/// top's end (the shutdown's), then `end.saturating_sub(failed)` hides that the "failure"
/// came after the end.
#[test]
fn defect_recover_ms_counts_the_trials_own_shutdown_kill() {
    let rows = experiment::run_trials(1, 1, |_| {
        Box::pin(async move {
            let model = ScriptedModel::new()
                .script(
                    "top",
                    Script::new([Turn::answer("done").after(Duration::from_secs(1))]),
                )
                .script("idle", Script::new([Turn::hang()]));
            let catalog = Catalog::new([
                AgentDefinition::new("top", ""),
                AgentDefinition::new("idle", ""),
            ])
            .unwrap();
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

/// GUARD: the owner probe's run numbers follow the model's `run` through a failure and
/// restart, a resume, a kill and its restart, and a restart of a resumed run.
#[tokio::test(start_paused = true)]
async fn guard_owner_probe_runs_through_restarts_resumes_and_kills() {
    let model = ScriptedModel::new().script(
        "w",
        Script::new([
            Turn::fail("crash"),       // run 1
            Turn::answer("two"),       // run 2 (restart)
            Turn::hang(),              // run 3 (resume), killed
            Turn::answer("four"),      // run 4 (restart)
            Turn::fail("crash again"), // run 5 (resume)
            Turn::answer("six"),       // run 6 (restart)
        ]),
    );
    let catalog =
        Catalog::new([AgentDefinition::new("w", "").with_restart(RestartPolicy::Transient)])
            .unwrap();
    let (tree, mut owner) = testkit::OwnerProbe::build(
        Tree::builder()
            .catalog(catalog)
            .config(TreeConfig::default().with_root_supervision(
                agent_tree::protocol::Strategy::OneForOne,
                10,
                Duration::from_secs(5),
            ))
            .model(model.clone()),
    )
    .await
    .unwrap();
    let w = owner.spawn(&tree, SpawnRequest::new("w", "go")).await;
    let mut restarts = Vec::new();
    let take = |m: &testkit::OwnerMessage, restarts: &mut Vec<u32>| {
        if let testkit::OwnerMessage::Restarted { run } = m {
            restarts.push(*run);
        }
    };
    // run 1 fails, restarted as 2, which completes.
    let m = owner
        .expect_message("end 1", |m| matches!(m, testkit::OwnerMessage::Ended(_)))
        .await;
    take(&m, &mut restarts);
    let m = owner
        .expect_message("restart", |m| {
            matches!(m, testkit::OwnerMessage::Restarted { .. })
        })
        .await;
    take(&m, &mut restarts);
    assert_eq!(owner.expect_result().await.text.as_deref(), Some("two"));
    tree.idle().await;
    // run 3: resumed, killed while hanging, restarted as 4.
    tree.resume(w, "three").await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    tree.kill(w).unwrap();
    let killed = owner.expect_result().await;
    assert_eq!(killed.status, AgentStatus::Killed, "{killed:?}");
    let m = owner
        .expect_message("restart", |m| {
            matches!(m, testkit::OwnerMessage::Restarted { .. })
        })
        .await;
    take(&m, &mut restarts);
    assert_eq!(owner.expect_result().await.text.as_deref(), Some("four"));
    tree.idle().await;
    // run 5: resumed, fails, restarted as 6.
    tree.resume(w, "five").await.unwrap();
    assert_eq!(owner.expect_result().await.status, AgentStatus::Failed);
    let m = owner
        .expect_message("restart", |m| {
            matches!(m, testkit::OwnerMessage::Restarted { .. })
        })
        .await;
    take(&m, &mut restarts);
    assert_eq!(owner.expect_result().await.text.as_deref(), Some("six"));
    let runs: Vec<u32> = model.log_of(w).iter().map(|c| c.run).collect();
    assert_eq!(runs, [1, 2, 3, 4, 5, 6]);
    assert_eq!(restarts, [2, 4, 6], "seen: {:?}", owner.seen());
    tree.shutdown().await;
}

/// GUARD: a probed child resumed by its owner starts a run (run 2, turn 1) the probe reads
/// through `expect_spawn`, with the resume's prompt.
#[tokio::test(start_paused = true)]
async fn guard_probe_child_resumed_by_its_owner() {
    let lead = ScriptedModel::new().script(
        "lead",
        Script::new([
            Turn::spawn("checker", "first"),
            Turn::calls([testkit::Call::spawn("checker", "again")
                .with_field("resume", serde_json::json!("a2"))]),
            Turn::answer("verified"),
        ]),
    );
    let (model, mut checkers) = testkit::probe_children(lead, ["checker"]);
    let catalog = Catalog::new([
        AgentDefinition::new("lead", "")
            .with_allowed_subagents(SubagentAllowance::only(["checker"])),
        AgentDefinition::new("checker", ""),
    ])
    .unwrap();
    let tree = Tree::builder()
        .catalog(catalog)
        .model(model)
        .build()
        .await
        .unwrap();
    let mut lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    let first = checkers.expect_spawn().await;
    assert_eq!(
        (first.id(), first.run(), first.prompt()),
        (AgentId::new(2), 1, "first")
    );
    first.returns("one", Usage::tokens(1, 1));
    let second = checkers.expect_spawn().await;
    assert_eq!(
        (
            second.id(),
            second.incarnation(),
            second.run(),
            second.prompt()
        ),
        (AgentId::new(2), 1, 2, "again")
    );
    second.returns("two", Usage::tokens(1, 1));
    assert_eq!(lead.outcome().await.text.as_deref(), Some("verified"));
    let runs: Vec<(u32, u32)> = checkers
        .log()
        .calls()
        .iter()
        .map(|c| (c.run, c.turn))
        .collect();
    assert_eq!(runs, [(1, 1), (2, 1)]);
    tree.shutdown().await;
}
