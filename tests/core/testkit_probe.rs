//! The event probe: expectations over a tree's events in virtual time, whose failures say
//! what was expected and list everything seen.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::EventKind;
use agent_tree::testkit::{EventProbe, Script, ScriptedModel, Turn};

async fn tree() -> Tree {
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([Turn::spawn("worker", "w"), Turn::answer("led")]),
        )
        .script(
            "worker",
            Script::new([Turn::answer("worked").after(Duration::from_secs(2))]),
        );
    let catalog = Catalog::new([
        AgentDefinition::new("lead", "")
            .with_allowed_subagents(SubagentAllowance::only(["worker"])),
        AgentDefinition::new("worker", ""),
    ])
    .unwrap();
    Tree::builder()
        .catalog(catalog)
        .model(model)
        .build()
        .await
        .unwrap()
}

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
