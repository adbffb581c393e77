//! Steering: the sender gets a receipt (`Delivered` when the agent's session exists,
//! `Queued` while it waits for a pool slot); steers sent before the session exists are
//! delivered in order at its first turn; a steer enters the conversation at the next turn
//! boundary with one `steered` event each; a settled agent refuses steers, naming its status.

use std::time::Duration;

use crate::support::harness::{Recorder, a, idle, outcome_of, started, tree, wait_event};
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
    let model = Recorder::new(scripted);
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

    let requests = model.of(worker.id());
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
    let model = Recorder::new(scripted.clone());
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
    assert_eq!(model.of(blocker.id()).len(), 1);

    let first = &model.of(queued.id())[0].messages;
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
