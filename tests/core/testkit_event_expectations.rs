//! The event probe's expectations read final outcomes: a terminal event of a run its
//! supervisor restarts is not the agent's end.

use agent_tree::prelude::*;
use agent_tree::testkit::{ScriptedModel, Turn};

use crate::support::{build_tree, catalog, leaf};

/// Rule (`EventProbe::expect_terminated`): "`agent`'s final outcome, from its terminal
/// event". A run that its supervisor restarts also ends with a terminal event
/// (docs/semantics.md: "recorded (status, terminal event) but not final"); for a transient
/// agent that crashes once and then completes, `expect_terminated` returns the final
/// outcome `completed: ok`, not the crash.
#[tokio::test(start_paused = true)]
async fn expect_terminated_returns_the_final_outcome_not_a_restarted_runs() {
    let script = ScriptedModel::new().script("w", [Turn::fail("crash"), Turn::answer("ok")]);
    let tree = build_tree(
        catalog([leaf("w").with_restart(RestartPolicy::Transient)]),
        script,
    )
    .await;
    let mut events = agent_tree::testkit::EventProbe::new(&tree);
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    let outcome = events.expect_terminated(w.id()).await;
    assert_eq!(w.outcome().await.text.as_deref(), Some("ok"));
    assert_eq!(
        (outcome.status, outcome.text.as_deref()),
        (AgentStatus::Completed, Some("ok")),
        "expect_terminated returned a run the supervisor restarted: {outcome:?}"
    );
}
