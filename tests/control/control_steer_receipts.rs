//! Steering: the sender gets a receipt (`Delivered` when the agent's session exists,
//! `Queued` while it waits for a pool slot); steers sent before the session exists are
//! delivered in order at its first turn; a steer enters the conversation at the next turn
//! boundary with one `steered` event each; a settled agent refuses steers, naming its status.
//! A steer to a completing agent is refused, and one delivered during what turns out to be
//! the last turn is read in one more turn (or refused).

use std::time::Duration;

use crate::support::harness::{a, idle, outcome_of, started, tree, wait_event};
use crate::support::{RecordingModel, delegator_of_all};
use agent_tree::SteerReceipt;
use agent_tree::prelude::*;
use agent_tree::protocol::{EventKind, Role};
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use serde_json::json;

fn catalog() -> Catalog {
    Catalog::new([
        AgentDefinition::new("worker", ""),
        AgentDefinition::new("blocker", ""),
    ])
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_running_agent_gets_the_steer_at_its_next_turn_boundary() {
    let scripted = ScriptedModel::new().script(
        "worker",
        Script::new([
            Turn::calls([Call::tool("noop", json!({}))]).after(Duration::from_millis(50)),
            Turn::answer("steered and done"),
        ]),
    );
    let model = RecordingModel::new(scripted);
    let tree = tree(model.clone(), catalog(), TreeConfig::default()).await;
    let mut events = tree.subscribe();
    let worker = tree
        .spawn(SpawnRequest::new("worker", "task"))
        .await
        .unwrap();
    wait_event(&mut events, started(worker.id())).await;
    assert_eq!(
        tree.steer(worker.id(), "use the fast path").await.unwrap(),
        SteerReceipt::Delivered
    );
    let outcome = outcome_of(&tree, worker.id()).await;
    assert!(outcome.is_completed(), "{}", outcome.summary());

    let requests = model.calls_of(worker.id());
    assert_eq!(requests.len(), 2);
    assert!(
        !requests[0]
            .messages
            .iter()
            .any(|m| m.content == "use the fast path"),
        "a steer must not enter an in-flight turn"
    );
    let last = requests[1].messages.last().unwrap();
    assert_eq!(
        (last.role, last.content.as_str()),
        (Role::User, "use the fast path")
    );
    let steered = events
        .drain()
        .into_iter()
        .filter(|e| e.agent == worker.id() && matches!(e.kind, EventKind::Steered))
        .count();
    assert_eq!(steered, 1);

    let refused = tree.steer(worker.id(), "too late").await.unwrap_err();
    assert_eq!(
        refused.to_string(),
        "a1 cannot take this now: it is completed"
    );
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn steers_to_a_queued_agent_are_queued_and_delivered_in_order_at_its_first_turn() {
    let scripted = ScriptedModel::new()
        .script(
            "blocker",
            Script::new([Turn::answer("done").after(Duration::from_millis(100))]),
        )
        .script("worker", Script::new([Turn::answer("worked")]));
    let model = RecordingModel::new(scripted.clone());
    let tree = tree(
        model.clone(),
        catalog(),
        TreeConfig::default().with_max_concurrent(1),
    )
    .await;
    let mut events = tree.subscribe();
    let blocker = tree
        .spawn(SpawnRequest::new("blocker", "hold").background())
        .await
        .unwrap();
    let queued = tree
        .spawn(SpawnRequest::new("worker", "the task").background())
        .await
        .unwrap();
    assert_eq!(
        tree.record(queued.id()).unwrap().status,
        AgentStatus::Queued
    );
    for text in ["first", "second", "third"] {
        assert_eq!(
            tree.steer(queued.id(), text).await.unwrap(),
            SteerReceipt::Queued,
            "{text}"
        );
    }
    let outcome = outcome_of(&tree, queued.id()).await;
    assert!(outcome.is_completed(), "{}", outcome.summary());
    idle(&tree).await;
    assert_eq!(model.calls_of(blocker.id()).len(), 1);

    let first = &model.calls_of(queued.id())[0].messages;
    let texts: Vec<&str> = first.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(texts, ["the task", "first", "second", "third"]);
    assert!(first.iter().all(|m| m.role == Role::User));
    let steered = events
        .drain()
        .into_iter()
        .filter(|e| e.agent == queued.id() && matches!(e.kind, EventKind::Steered))
        .count();
    assert_eq!(steered, 3);
    assert_eq!(scripted.calls_by(queued.id()), 1);
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn steering_the_root_or_an_unknown_id_is_refused_alike() {
    let model = ScriptedModel::new();
    let tree = tree(model, catalog(), TreeConfig::default()).await;
    for id in [a(0), a(42)] {
        let err = tree.steer(id, "hello").await.unwrap_err();
        assert_eq!(err.to_string(), format!("no subagent {id} of yours"));
    }
    tree.shutdown().await;
}

// Review regressions: each test below holds a defect a review of the runtime found.

/// A steer to a draining (completing) agent is refused: no turn would ever read it.
#[tokio::test(start_paused = true)]
async fn a_steer_to_a_completing_agent_is_refused() {
    let model = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::calls([Call::spawn_background("slow", "x")]),
                Turn::answer("boss done"),
            ]),
        )
        .script(
            "slow",
            Script::new([Turn::answer("slow").after(Duration::from_secs(1))]),
        );
    let catalog = Catalog::new([
        delegator_of_all("boss").with_settle(SettlePolicy::Drain),
        AgentDefinition::new("slow", ""),
    ])
    .unwrap();
    let tree = tree(model, catalog, TreeConfig::default()).await;
    let h = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        tree.record(h.id()).unwrap().status,
        agent_tree::protocol::AgentStatus::Completing
    );
    let receipt = tree.steer(h.id(), "please also do X").await;
    assert!(
        receipt.is_err(),
        "receipt {receipt:?} but no turn will ever read it"
    );
}

/// A steer that arrives during the turn that turns out to be the last is read: the model
/// gets one more turn with it (a `steered` event), or the steer is refused.
#[tokio::test(start_paused = true)]
async fn a_delivered_steer_is_read_or_refused() {
    let model = ScriptedModel::new().script(
        "worker",
        Script::new([
            Turn::answer("done").after(Duration::from_millis(100)),
            Turn::answer("done, with X"),
        ]),
    );
    let catalog = Catalog::new([AgentDefinition::new("worker", "")]).unwrap();
    let tree = tree(model.clone(), catalog, TreeConfig::default()).await;
    let mut events = tree.subscribe();
    let mut h = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let receipt = tree.steer(h.id(), "also do X").await;
    let _ = h.outcome().await;
    let mut steered = 0;
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_millis(1), events.next()).await {
        if matches!(e.kind, EventKind::Steered) {
            steered += 1;
        }
    }
    assert!(
        receipt.is_err() || (model.calls_by(h.id()) == 2 && steered == 1),
        "receipt {receipt:?}, but model calls {} and steered events {steered}",
        model.calls_by(h.id())
    );
}
