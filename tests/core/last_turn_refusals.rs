//! The last turn `max_turns` allows: a steer arriving during it and an `ask_owner` made on
//! it are refused, and the agent ends at its turn limit.

use crate::support::catalog;
use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, ToolCall};
use agent_tree::testkit;
use serde_json::json;

/// docs/semantics.md: "A steer that arrives during the last turn `max_turns` allows
/// is refused (`NoTurnsLeft`)", and "an `ask_owner` on the last turn `max_turns` allows is
/// refused at once".
#[tokio::test(start_paused = true)]
async fn the_last_turn_refuses_steers_and_questions() {
    let (model, mut calls) = testkit::pair();
    let catalog = catalog([AgentDefinition::new("w", "").with_max_turns(2)]);
    let tree = Tree::builder()
        .catalog(catalog)
        .model(model)
        .on_question(|_q: agent_tree::Question| async { Ok::<_, String>("yes".to_owned()) })
        .build()
        .await
        .unwrap();
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    calls
        .expect_turn()
        .await
        .answer(agent_tree::ModelResponse::calls(vec![ToolCall::new(
            "t",
            "read_nothing",
            json!({}),
        )]));
    let last = calls.expect_turn().await;
    assert_eq!(last.turn(), 2);
    let refused = tree.steer(w.id(), "hurry").await;
    assert!(
        matches!(refused, Err(agent_tree::ControlError::NoTurnsLeft(_))),
        "{refused:?}"
    );
    last.answer(agent_tree::ModelResponse::calls(vec![ToolCall::new(
        "q",
        "ask_owner",
        json!({"question": "ok?"}),
    )]));
    let outcome = w.outcome().await;
    assert_eq!(outcome.reason, EndReason::MaxTurns, "{outcome:?}");
    tree.shutdown().await;
}
