//! The event probe: expectations over a tree's events in virtual time, whose failures say
//! what was expected and list everything seen. `expect_terminated` is the agent's final
//! outcome: the end of the run its record ends in, past restarts and after a resume.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::EventKind;
use agent_tree::testkit::{EventProbe, FaultyModel, ScriptedModel, Turn};

use crate::support::lifetimes::supervised;
use crate::support::scripts::{answers_after, delegates};
use crate::support::{build_tree, catalog, leaf};

async fn tree() -> Tree {
    let model = ScriptedModel::new()
        .script("lead", delegates("worker", "w", "led"))
        .script("worker", answers_after("worked", Duration::from_secs(2)));
    let catalog = catalog([
        AgentDefinition::new("lead", "")
            .with_allowed_subagents(SubagentAllowance::only(["worker"])),
        AgentDefinition::new("worker", ""),
    ]);
    build_tree(catalog, model).await
}

/// The event probe's expectations wait in virtual time: for a number of matching events,
/// for the absence of one over a span, and for an agent's final outcome.
#[tokio::test(start_paused = true)]
async fn expectations_follow_a_run_in_virtual_time() {
    let tree = tree().await;
    let mut probe = EventProbe::new(&tree);
    let lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    let started = probe
        .receive_n(2, "a start", |e| {
            matches!(e.kind, EventKind::Started { .. })
        })
        .await;
    assert_eq!(started.iter().map(|e| e.depth).collect::<Vec<_>>(), [1, 2]);
    // The worker takes 2 s of model time: nothing ends within 1 s.
    probe
        .expect_no_event(Duration::from_secs(1), |e| e.kind.outcome().is_some())
        .await;
    let outcome = probe.expect_terminated(lead.id()).await;
    assert_eq!(outcome.text.as_deref(), Some("led"));
    assert!(probe.seen().len() >= 6);
}

/// The text of the panic `task` ends with.
async fn panic_text(task: impl std::future::Future<Output = ()> + Send + 'static) -> String {
    let err = tokio::spawn(task).await.expect_err("the expectation fails");
    let payload = err.into_panic();
    payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_else(|| payload.downcast_ref::<&str>().unwrap().to_string())
}

/// A failed probe expectation panics saying what was expected and listing every event seen,
/// one line each, as docs/testing.md shows it.
#[tokio::test(start_paused = true)]
async fn a_failed_expectation_says_what_was_expected_and_lists_what_was_seen() {
    let tree = tree().await;
    let mut probe = EventProbe::new(&tree);
    tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    let text = panic_text(async move {
        probe
            .expect_event("a restart", |e| {
                matches!(e.kind, EventKind::Restarted { .. })
            })
            .await;
    })
    .await;
    // The text docs/testing.md shows.
    assert_eq!(
        text,
        "expected a restart; seen 6 events:\n  \
         #1 a1 (depth 1, parent a0) at 0 ms: spawned\n  \
         #2 a1 (depth 1, parent a0) at 0 ms: started\n  \
         #3 a2 (depth 2, parent a1) at 0 ms: spawned\n  \
         #4 a2 (depth 2, parent a1) at 0 ms: started\n  \
         #5 a2 (depth 2, parent a1) at 2000 ms: completed worked\n  \
         #6 a1 (depth 1, parent a0) at 2000 ms: completed led"
    );
    assert!(
        text.contains("a1 (depth 1, parent a0) at 0 ms: spawned"),
        "{text}"
    );
    assert!(
        text.contains("a2 (depth 2, parent a1) at 2000 ms: completed"),
        "{text}"
    );

    let tree = self::tree().await;
    let mut probe = EventProbe::new(&tree);
    let text = panic_text(async move {
        let _lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
        probe
            .expect_no_event(Duration::from_secs(10), |e| {
                matches!(e.kind, EventKind::Completed { .. })
            })
            .await;
    })
    .await;
    assert!(
        text.starts_with("expected no such event within 10s, got #"),
        "{text}"
    );
}

/// `fish` skips the events its picker skips and returns the first it catches; an event it
/// marks as a failure fails the test, naming the event.
#[tokio::test(start_paused = true)]
async fn fishing_skips_what_it_skips_and_fails_on_what_it_fails() {
    use agent_tree::testkit::Fish;
    let tree = tree().await;
    let mut probe = EventProbe::new(&tree);
    tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    let depth = probe
        .fish("the worker's end", |e| match &e.kind {
            EventKind::Completed { outcome } if outcome.text.as_deref() == Some("worked") => {
                Fish::Catch(e.depth)
            }
            EventKind::Failed { .. } => Fish::Fail("something failed".into()),
            _ => Fish::Skip,
        })
        .await;
    assert_eq!(depth, 2);

    let tree = self::tree().await;
    let mut probe = EventProbe::new(&tree);
    let text = panic_text(async move {
        tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
        probe
            .fish("nothing", |e| match e.kind {
                EventKind::Started { .. } => Fish::<()>::Fail("no agent may start".into()),
                _ => Fish::Skip,
            })
            .await;
    })
    .await;
    assert!(
        text.starts_with("fishing for nothing: no agent may start at #2 a1 (depth 1, parent a0)"),
        "{text}"
    );
}

/// `expect_terminated` returns the agent's final outcome after any restarts, by the run its
/// record ends in, also when an earlier expectation already read the agent's `started`
/// event (as the probe's own example does): a restarted run's end is skipped.
#[tokio::test(start_paused = true)]
async fn expect_terminated_skips_a_restarted_run_after_its_start_was_read() {
    let scripted = ScriptedModel::new()
        .script("sup", delegates("worker", "w", "done"))
        .script("worker", [Turn::answer("ok")]);
    // Run 1 of the worker fails at its first turn; run 2 answers "ok".
    let model = FaultyModel::new(scripted)
        .fail_at_turn(1, ModelError::new("crash"))
        .only_for("worker")
        .only_in_run(1);
    let tree = build_tree(supervised(3, 5_000), model).await;
    let mut events = EventProbe::new(&tree);
    tree.spawn(SpawnRequest::new("sup", "go")).await.unwrap();
    let started = events
        .expect_event("the worker started", |e| {
            matches!(e.kind, EventKind::Started { .. }) && e.depth == 2
        })
        .await;
    let outcome = events.expect_terminated(started.agent).await;
    let record = tree.record(started.agent).unwrap();
    assert_eq!(record.incarnation, 2, "the worker was restarted once");
    assert_eq!(
        (outcome.status, outcome.text.as_deref()),
        (AgentStatus::Completed, Some("ok")),
        "expect_terminated returned the restarted run 1's end ({}) as the worker's final \
         outcome; its record ends completed in run 2",
        outcome.summary()
    );
}

/// A failed `expect_terminated_within` lists every event seen while it waited, like every
/// other expectation: an agent that never ends has its `spawned` and `started` listed.
#[tokio::test(start_paused = true)]
async fn expect_terminated_failure_lists_the_events_that_came() {
    let model = ScriptedModel::new().script("w", [Turn::hang()]);
    let tree = build_tree(catalog([leaf("w")]), model).await;
    let mut events = EventProbe::new(&tree);
    let w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    let id = w.id();
    let text = panic_text(async move {
        events
            .expect_terminated_within(id, Duration::from_secs(10))
            .await;
    })
    .await;
    assert!(
        text.contains("a1 (depth 1, parent a0) at 0 ms: started"),
        "the failure of expect_terminated does not list the events that came: {text}"
    );
    drop(tree);
}

/// After a `Tree::resume` (which keeps the incarnation), `expect_terminated` is the resumed
/// run's end, the outcome the agent has, never the first run's.
#[tokio::test(start_paused = true)]
async fn expect_terminated_after_a_resume_is_the_resumed_runs_end() {
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::answer("first"),
            Turn::answer("second").after(Duration::from_secs(1)),
        ],
    );
    let tree = build_tree(catalog([leaf("w")]), model).await;
    let mut events = EventProbe::new(&tree);
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(w.outcome().await.text.as_deref(), Some("first"));
    tree.resume(w.id(), "again").await.unwrap();
    let outcome = events.expect_terminated(w.id()).await;
    // It waited for the resumed run to settle (a second of model time) ...
    let now = tree.outcome(w.id()).expect("settled");
    assert_eq!(now.text.as_deref(), Some("second"));
    // ... and returned that run's end.
    assert_eq!(
        outcome.text.as_deref(),
        Some("second"),
        "expect_terminated waited for the resumed run to end, then returned the first run's \
         end; the agent's outcome is {}",
        now.summary()
    );
}
