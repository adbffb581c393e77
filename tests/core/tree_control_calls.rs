//! The application's control calls on a `Tree` answer their documented errors and never
//! reach past their target. The root is no agent the application controls: charging it is
//! refused, and a `fail_fast` wait naming it aborts only the set. A steer to an unknown id is
//! `NotYours` whatever its text, a kill of a queued agent is `WrongStatus`, resuming a nested
//! agent is a control error. Nothing a user sets panics (a shutdown grace of
//! `Duration::MAX`), and a dropped tree ends its event stream and every wait.

use std::time::Duration;

use agent_tree::ControlError;
use agent_tree::prelude::*;
use agent_tree::protocol::WaitPolicy;
use agent_tree::testkit::{Call, ScriptedModel, Turn};

use crate::support::harness::{GUARD, a, tree};
use crate::support::scripts::answers_after;
use crate::support::{build_tree, catalog, delegator, leaf, spawn_admitted};

/// Nothing a user sets may panic: a shutdown grace of `Duration::MAX` (a "wait as long as it
/// takes" grace, which the config accepts) shuts the tree down without an overflow.
#[tokio::test(start_paused = true)]
async fn a_shutdown_grace_of_duration_max_does_not_panic_the_shutdown() {
    let config = TreeConfig::default().with_shutdown_grace(Duration::MAX);
    assert!(config.validate().is_ok(), "the config is accepted");
    let tree = tree(
        ScriptedModel::new().script("w", [Turn::answer("done")]),
        catalog([leaf("w")]),
        config,
    )
    .await;
    let mut handle = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    assert!(handle.outcome().await.is_completed());
    let joined = tokio::spawn(async move { tree.shutdown().await }).await;
    assert!(
        joined.is_ok(),
        "Tree::shutdown with a shutdown_grace the config accepted panicked: {:?}",
        joined.err()
    );
}

/// `fail_fast` aborts only the set: a `Tree::wait(&[a0, x], FailFast)` whose `x` fails ends
/// no agent outside the set (the root is not an agent the application aborts), and agents
/// started afterwards are not born cancelled.
#[tokio::test(start_paused = true)]
async fn a_fail_fast_wait_naming_the_root_aborts_nothing_outside_the_set() {
    let model = ScriptedModel::new()
        .script(
            "failer",
            [Turn::fail("boom").after(Duration::from_millis(10))],
        )
        .script(
            "bystander",
            answers_after("still here", Duration::from_secs(5)),
        )
        .script("later", [Turn::answer("later done")]);
    let tree = build_tree(
        catalog([leaf("failer"), leaf("bystander"), leaf("later")]),
        model,
    )
    .await;
    let bystander = spawn_admitted(&tree, SpawnRequest::new("bystander", "wait")).await;
    let failer = spawn_admitted(&tree, SpawnRequest::new("failer", "fail")).await;
    // The root never settles before a shutdown: the wait is bounded.
    let _ = tokio::time::timeout(
        Duration::from_secs(1),
        tree.wait(&[AgentId::ROOT, failer.id()], WaitPolicy::FailFast),
    )
    .await;
    let mut bystander = bystander;
    let got = tokio::time::timeout(GUARD, bystander.outcome())
        .await
        .unwrap();
    assert!(
        got.is_completed(),
        "an agent outside the fail_fast set was ended: {got:?}\n{}",
        tree.snapshot().render_text()
    );
    let mut later = tree.spawn(SpawnRequest::new("later", "go")).await.unwrap();
    let got = tokio::time::timeout(GUARD, later.outcome()).await.unwrap();
    assert!(
        got.is_completed(),
        "an agent started after the wait was born aborted: {got:?}"
    );
    tree.shutdown().await;
}

/// The root is not an agent the application controls (`abort`, `kill`, `steer` and
/// `shutdown_agent` refuse `a0` as `NotYours`), and its only events are its shutdown's or
/// its escalation: `Tree::charge(a0, usage)` is refused the same way, billing nothing.
#[tokio::test(start_paused = true)]
async fn charging_the_root_is_refused() {
    let tree = build_tree(catalog([leaf("w")]), ScriptedModel::new()).await;
    let mut events = tree.subscribe();
    let charged = tree.charge(AgentId::ROOT, Usage::tokens(5, 5));
    let root_events: Vec<String> = events
        .drain()
        .into_iter()
        .filter(|e| e.agent == AgentId::ROOT)
        .map(|e| format!("{:?}", e.kind))
        .collect();
    assert!(
        matches!(charged, Err(ControlError::NotYours(_))),
        "Tree::charge(a0) was {charged:?}; the root now has own usage {:?} and events \
         {root_events:?}",
        tree.record(AgentId::ROOT).map(|r| r.own)
    );
    tree.shutdown().await;
}

/// `Tree::steer` answers `NotYours` for an unknown id or the root, whatever the text: the id
/// is looked up before the text is checked, so a blank or an oversize steer to an id the
/// tree never gave is `NotYours`, never `EmptySteer` or `SteerTooLarge`.
#[tokio::test(start_paused = true)]
async fn a_steer_to_an_unknown_id_is_not_yours_whatever_its_text() {
    let model = ScriptedModel::new().script("w", [Turn::hang()]);
    let config = TreeConfig::default().with_steer_limits(100, 16);
    let tree = tree(model, catalog([leaf("w")]), config).await;
    let blank = tree.steer(a(99), "  ").await.unwrap_err();
    let large = tree.steer(a(99), "x".repeat(17)).await.unwrap_err();
    tree.shutdown().await;
    assert!(
        matches!(blank, ControlError::NotYours(id) if id == a(99)),
        "blank steer to unknown a99: {blank:?}"
    );
    assert!(
        matches!(large, ControlError::NotYours(id) if id == a(99)),
        "oversize steer to unknown a99: {large:?}"
    );
}

/// `Tree::kill` answers `WrongStatus` for an agent without a running actor (settled, queued
/// or still starting): a queued agent among them.
#[tokio::test(start_paused = true)]
async fn killing_a_queued_agent_is_wrong_status() {
    let model = ScriptedModel::new().script("w", [Turn::hang()]);
    let config = TreeConfig::default().with_max_concurrent(1);
    let tree = tree(model, catalog([leaf("w")]), config).await;
    let _first = spawn_admitted(&tree, SpawnRequest::new("w", "one").background()).await;
    let second = spawn_admitted(&tree, SpawnRequest::new("w", "two").background()).await;
    assert_eq!(
        tree.record(second.id()).unwrap().status,
        AgentStatus::Queued
    );
    let err = tree.kill(second.id()).unwrap_err();
    assert!(matches!(err, ControlError::WrongStatus(..)), "{err:?}");
    tree.shutdown().await;
}

/// `Tree::resume` answers `SpawnError::Control` when the agent is not top-level (or is
/// still live).
#[tokio::test(start_paused = true)]
async fn resuming_a_nested_agent_is_a_control_error() {
    let model = ScriptedModel::new()
        .script(
            "lead",
            [Turn::calls([Call::spawn("w", "x")]), Turn::answer("done")],
        )
        .script("w", [Turn::answer("ok")]);
    let tree = build_tree(catalog([delegator("lead", &["w"]), leaf("w")]), model).await;
    tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    tree.idle().await;
    let err = tree.resume(a(2), "again").await.unwrap_err();
    assert!(matches!(err, SpawnError::Control(_)), "{err:?}");
    tree.shutdown().await;
}

/// The event stream's next event is `None` once the tree is gone and every event was read,
/// and a dropped tree ends every wait, with an agent still in its model call when the tree
/// is dropped.
#[tokio::test(start_paused = true)]
async fn a_dropped_tree_ends_its_event_stream_and_its_waits() {
    let model = ScriptedModel::new().script("w", [Turn::hang()]);
    let tree = build_tree(catalog([leaf("w")]), model).await;
    let mut events = tree.subscribe();
    let mut handle = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    drop(tree);
    let ended = tokio::time::timeout(Duration::from_secs(3600), async {
        while events.next().await.is_some() {}
        handle.outcome().await
    })
    .await;
    assert!(ended.is_ok(), "the stream or the wait never ended");
}
