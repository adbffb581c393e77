//! A question's answer is its own: a late answer from the application's question handler
//! never answers a later question of the same agent, and a steer the runtime refuses (too
//! large) is no answer, so the child's question stays open and a later wait on the child is
//! answered with it instead of deadlocking owner and child.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::testkit::{Call, ScriptedModel, Turn};
use agent_tree::{ASK_OWNER_TOOL, Question, SteerReceipt};
use serde_json::json;

use crate::support::catalog;
use crate::support::delegator_of_all;
use crate::support::harness::{a, results, tree};

fn boss_and_asker() -> Catalog {
    catalog([delegator_of_all("boss"), AgentDefinition::new("asker", "")])
}

fn ask(question: &str) -> Call {
    Call::tool(ASK_OWNER_TOOL, json!({ "question": question }))
}

/// The application's question handler answers the question it was asked. When the
/// application already answered the first question with `Tree::steer` and the agent asked a
/// second one, the handler's late answer to the first must not become the second's answer.
#[tokio::test(start_paused = true)]
async fn a_late_handler_answer_does_not_answer_a_later_question() {
    let model = ScriptedModel::new().script(
        "asker",
        [
            Turn::calls([ask("q1")]),
            Turn::calls([ask("q2")]),
            Turn::answer("done"),
        ],
    );
    let tree = Tree::builder()
        .catalog(boss_and_asker())
        .model(model.clone())
        .on_question(|q: Question| async move {
            let wait = if q.question == "q1" { 10 } else { 100 };
            tokio::time::sleep(Duration::from_secs(wait)).await;
            Ok(format!("answer to {}", q.question))
        })
        .build()
        .await
        .unwrap();
    let mut asker = tree.spawn(SpawnRequest::new("asker", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The application answers q1 itself.
    let receipt = tree
        .steer(asker.id(), "the application's answer to q1")
        .await;
    assert_eq!(receipt, Ok(SteerReceipt::Delivered));
    let outcome = tokio::time::timeout(Duration::from_secs(600), asker.outcome())
        .await
        .expect("the asker never ended");
    assert!(outcome.is_completed(), "{outcome:?}");
    let first = results(&model, a(1), 1);
    assert_eq!(first[0].content, "the application's answer to q1");
    let second = results(&model, a(1), 2);
    let q2 = second.last().unwrap();
    assert_eq!(
        q2.content, "answer to q2",
        "q2 was answered with another question's answer"
    );
}

/// A steer the runtime refuses (too large) is no answer: the child's question stays open,
/// so a later wait on the child is answered with the question instead of deadlocking the
/// owner and the child on each other.
#[tokio::test(start_paused = true)]
async fn a_refused_steer_leaves_the_childs_question_open_for_a_wait() {
    let huge = "x".repeat(64 * 1024);
    let model = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn_background("asker", "go"),
                // The question's notice has arrived by now.
                Turn::calls([Call::steer(a(2), huge)]).after(Duration::from_millis(50)),
                Turn::calls([Call::tool(
                    "get_subagent_result",
                    json!({"agent_id": "a2", "wait": true}),
                )]),
                Turn::calls([Call::steer(a(2), "blue")]),
                Turn::answer("done"),
                // The asker's completion arrives during that turn: one more to read it.
                Turn::answer("done"),
            ],
        )
        .script(
            "asker",
            [Turn::calls([ask("which colour?")]), Turn::answer("painted")],
        );
    let tree = tree(model.clone(), boss_and_asker(), TreeConfig::default()).await;
    let outcome = tokio::time::timeout(
        Duration::from_secs(600),
        tree.run(SpawnRequest::new("boss", "go")),
    )
    .await
    .expect("the owner's wait and the child's question deadlocked")
    .unwrap();
    assert!(outcome.is_completed(), "{outcome:?}");
    let refused = results(&model, a(1), 2);
    assert!(refused.last().unwrap().is_error, "{refused:?}");
    let waited = results(&model, a(1), 3);
    let value: serde_json::Value = serde_json::from_str(&waited.last().unwrap().content).unwrap();
    assert_eq!(value["status"], "asking", "{value}");
}
