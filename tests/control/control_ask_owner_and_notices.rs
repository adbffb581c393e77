//! `ask_owner` and completion notices travel along the ownership edge: a child's question
//! reaches its direct owner, whose steer is the answer the child's `ask_owner` call returns;
//! a top-level agent asks the application (an `asked` event, answered by `Tree::steer`); and
//! a background child's completion notice enters its owner's conversation only, never an
//! ancestor's, another branch's or the root's.

use std::time::Duration;

use crate::support::harness::{
    Recorder, a, id_of, idle, outcome_of, results, status_of, tree, wait_event,
};
use agent_tree::SteerReceipt;
use agent_tree::prelude::*;
use agent_tree::protocol::{EventKind, Role};
use agent_tree::testkit::{Call, Script, ScriptedModel, Target, Turn};
use serde_json::json;

fn ask(question: &str) -> Call {
    Call::tool("ask_owner", json!({ "question": question }))
}

fn noop() -> Call {
    Call::tool("noop", json!({}))
}

fn catalog() -> Catalog {
    let delegator =
        |name: &str| AgentDefinition::new(name, "").with_allowed_subagents(SubagentAllowance::All);
    Catalog::new([
        delegator("boss"),
        delegator("mid"),
        AgentDefinition::new("asker", ""),
        AgentDefinition::new("leaf", ""),
        AgentDefinition::new("observer", ""),
    ])
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_child_asks_its_owner_and_gets_the_owners_steer_as_the_answer() {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::spawn("asker", "pick a colour"),
                Turn::calls([Call::steer(Target::Spawned(0), "blue")]),
                Turn::calls([Call::result(Target::Spawned(0))]),
                Turn::answer("boss done"),
            ]),
        )
        .script(
            "asker",
            Script::new([
                Turn::calls([ask("which colour?")]),
                Turn::answer("I chose blue"),
            ]),
        );
    let model = Recorder::new(scripted.clone());
    let tree = tree(model.clone(), catalog(), TreeConfig::default()).await;
    let mut events = tree.subscribe();
    let outcome = tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
    assert!(outcome.is_completed(), "{}", outcome.summary());
    idle(&tree).await;

    // The owner's foreground wait was answered with the question...
    let asked = &results(&scripted, a(1), 1)[0];
    assert_eq!(status_of(asked), "asking");
    assert!(asked.content.contains("which colour?"));
    // ...which also entered its conversation.
    assert!(
        model.of(a(1))[1]
            .messages
            .iter()
            .any(|m| m.role == Role::User
                && m.content
                    == "[question from subagent a2; answer with steer_subagent] which colour?")
    );
    let receipt = &results(&scripted, a(1), 2)[0];
    assert!(!receipt.is_error);
    assert!(
        receipt.content.contains("\"receipt\":\"delivered\""),
        "{}",
        receipt.content
    );

    // The child's next model call sees the answer as the ask_owner result.
    let answer = &results(&scripted, a(2), 1)[0];
    assert!(!answer.is_error);
    assert_eq!(answer.content, "blue");
    let read = &results(&scripted, a(1), 3)[0];
    assert_eq!(status_of(read), "completed");
    assert!(read.content.contains("I chose blue"));

    let log = events.drain();
    let asked = log
        .iter()
        .find(|e| matches!(&e.kind, EventKind::Asked { .. }))
        .unwrap();
    assert_eq!((asked.agent, asked.parent), (a(2), Some(a(1))));
    assert_eq!(
        asked.kind,
        EventKind::Asked {
            question: "which colour?".into()
        }
    );
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_top_level_agent_asks_the_application() {
    let scripted = ScriptedModel::new().script(
        "asker",
        Script::new([
            Turn::calls([ask("may I deploy?")]),
            Turn::answer("deployed"),
        ]),
    );
    let tree = tree(scripted.clone(), catalog(), TreeConfig::default()).await;
    let mut events = tree.subscribe();
    let asker = tree
        .spawn(SpawnRequest::new("asker", "deploy"))
        .await
        .unwrap();
    let asked = wait_event(&mut events, |e| matches!(e.kind, EventKind::Asked { .. })).await;
    assert_eq!((asked.agent, asked.parent), (asker.id(), Some(a(0))));
    assert_eq!(
        asked.kind,
        EventKind::Asked {
            question: "may I deploy?".into()
        }
    );
    assert_eq!(
        tree.record(asker.id()).unwrap().status,
        AgentStatus::Running
    );
    assert_eq!(
        tree.steer(asker.id(), "yes, go ahead").await.unwrap(),
        SteerReceipt::Delivered
    );
    let outcome = outcome_of(&tree, asker.id()).await;
    assert_eq!(outcome.text.as_deref(), Some("deployed"));
    let answer = &results(&scripted, asker.id(), 1)[0];
    assert!(!answer.is_error);
    assert_eq!(answer.content, "yes, go ahead");
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn completion_notices_go_to_the_direct_owner_only() {
    // boss (top-level, background) → mid (background) → leaf (background); an observer runs
    // beside them. Each owner thinks long enough for its child to finish first.
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::spawn_background("mid", "m"),
                Turn::calls([noop()]).after(Duration::from_millis(200)),
                Turn::answer("boss done"),
            ]),
        )
        .script(
            "mid",
            Script::new([
                Turn::spawn_background("leaf", "l"),
                Turn::calls([noop()]).after(Duration::from_millis(50)),
                Turn::answer("mid done"),
            ]),
        )
        .script("leaf", Script::new([Turn::answer("leaf done")]))
        .script(
            "observer",
            Script::new([
                Turn::calls([noop()]).after(Duration::from_millis(300)),
                Turn::answer("observed"),
            ]),
        );
    let model = Recorder::new(scripted);
    let tree = tree(model.clone(), catalog(), TreeConfig::default()).await;
    let boss = tree
        .spawn(SpawnRequest::new("boss", "go").background())
        .await
        .unwrap();
    let observer = tree
        .spawn(SpawnRequest::new("observer", "watch").background())
        .await
        .unwrap();
    let done = outcome_of(&tree, observer.id()).await;
    assert!(done.is_completed());
    idle(&tree).await;
    let (mid, leaf) = (id_of(&tree, "mid"), id_of(&tree, "leaf"));
    assert_eq!(tree.record(leaf).unwrap().parent, Some(mid));
    assert_eq!(tree.record(mid).unwrap().parent, Some(boss.id()));
    assert!(boss.try_outcome().unwrap().is_completed());

    let notices = |id: AgentId| -> Vec<String> {
        let requests = model.of(id);
        requests
            .last()
            .unwrap()
            .messages
            .iter()
            .filter(|m| m.role == Role::User && m.content.starts_with("[subagent "))
            .map(|m| m.content.clone())
            .collect()
    };
    assert_eq!(
        notices(mid),
        [format!("[subagent {leaf} completed] leaf done")]
    );
    assert_eq!(
        notices(boss.id()),
        [format!("[subagent {mid} completed] mid done")]
    );
    assert!(notices(observer.id()).is_empty());
    assert!(notices(leaf).is_empty());
    // No conversation anywhere mentions a top-level agent's completion.
    for request in model.requests() {
        for m in &request.messages {
            for top in [boss.id(), observer.id()] {
                assert!(
                    !m.content.starts_with(&format!("[subagent {top} ")),
                    "{} got a notice about top-level {top}",
                    request.agent
                );
            }
        }
    }
    tree.shutdown().await;
}
