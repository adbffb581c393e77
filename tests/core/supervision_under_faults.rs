//! Supervision under injected faults: restarts up to the intensity, the sliding window,
//! escalation and the error text naming the original failure, one_for_one and one_for_all,
//! and a kill that is a crash to the supervisor.

use agent_tree::ModelError;
use agent_tree::Tree;
use agent_tree::protocol::{AgentStatus, EventKind, SpawnRequest};
use agent_tree::testkit::{EventProbe, FaultyModel, Script, ScriptedModel, Turn};

use crate::research_team::{team, team_script};

/// Every run of the searcher fails: two restarts (the lead's intensity), then the lead
/// escalates.
#[tokio::test(start_paused = true)]
async fn a_child_that_always_fails_is_restarted_to_the_intensity_then_escalates() {
    let model = FaultyModel::new(team_script())
        .fail_at_turn(1, ModelError::new("crash"))
        .only_for("searcher");
    let tree = Tree::builder()
        .catalog(team("transient"))
        .model(model)
        .build()
        .await
        .unwrap();
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
    let scripted = ScriptedModel::new()
        .script(
            "lead",
            Script::new([Turn::spawn("searcher", "find X"), Turn::answer("led")]),
        )
        // Each run walks on through the script (the cursor survives restarts): enough turns.
        .script(
            "searcher",
            Script::new([
                Turn::answer("found"),
                Turn::answer("found"),
                Turn::answer("found"),
            ]),
        );
    let log = scripted.call_log();
    let seed = SEED;
    let model = FaultyModel::new(scripted)
        .fail_with_probability(0.5, seed, ModelError::new("flaky"))
        .only_for("searcher");
    let tree = Tree::builder()
        .catalog(team("transient"))
        .model(model)
        .build()
        .await
        .unwrap();
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
