//! A child's normal exit never stops its owner (ractor's default supervisor behaviour would):
//! the owner keeps taking turns after a foreground child completes and after a background
//! child completes during one of its model turns, spawns more children afterwards, and
//! settles only with its own final answer. The same holds one level up: top-level agents
//! ending never stop the tree's root.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::testkit::{Call, ScriptedModel, Target, Turn};
use serde_json::json;

use crate::support::scripts::answers_after_billing;
use crate::support::{JsonContent, build_tree, run_within};
use crate::support::{
    RecordingModel, TreeCell, catalog, delegator, leaf, record, spawn_admitted, terminal_event,
    within,
};

fn scripted() -> ScriptedModel {
    ScriptedModel::new()
        .script(
            "lead",
            [
                // 1: a foreground child, which completes and exits
                Turn::spawn("worker", "first"),
                // 2: a background child, which exits during turn 3's model call
                Turn::spawn_background("quick", "second"),
                // 3: a long turn; then peek at the background child, settled by now
                Turn::calls([Call::peek(Target::Spawned(1))]).after(Duration::from_secs(10)),
                // 4: yet another child, after two exits
                Turn::spawn("worker", "third"),
                // 5: the final answer
                Turn::answer("lead done").usage(Usage::tokens(3, 3)),
            ],
        )
        .script(
            "worker",
            [Turn::answer("worked").usage(Usage::tokens(2, 1))],
        )
        .script(
            "quick",
            answers_after_billing("quick", Usage::tokens(1, 1), Duration::from_secs(1)),
        )
}

/// A child's normal exit never stops its owner: the owner keeps taking turns after its
/// foreground and background children complete, spawns more afterwards, and settles only
/// with its own final answer.
#[tokio::test(start_paused = true)]
async fn owner_keeps_running_after_children_exit() {
    let probe = TreeCell::new();
    // (turn, snapshot at the lead's model call)
    let (model, at_turn) = RecordingModel::new(scripted()).snapshotting("lead", &probe);
    let tree = probe.share(
        build_tree(
            catalog([
                delegator("lead", &["worker", "quick"]),
                leaf("worker"),
                leaf("quick"),
            ]),
            model.clone(),
        )
        .await,
    );
    let mut events = tree.subscribe();

    let mut lead = spawn_admitted(&tree, SpawnRequest::new("lead", "delegate thrice")).await;
    let outcome = within("the lead", lead.outcome()).await;
    assert_eq!(outcome.text.as_deref(), Some("lead done"), "{outcome:?}");
    let events = crate::support::events_at_idle(&tree, &mut events).await;
    let snapshot = tree.snapshot();
    let text = snapshot.render_text();
    let lead = lead.id();

    let children = record(&snapshot, lead).children.clone();
    assert_eq!(children.len(), 3, "{text}");
    let types: Vec<&str> = children
        .iter()
        .map(|&c| record(&snapshot, c).agent_type.as_str())
        .collect();
    assert_eq!(types, ["worker", "quick", "worker"]);
    for &child in &children {
        assert_eq!(
            record(&snapshot, child).status,
            AgentStatus::Completed,
            "{text}"
        );
    }
    assert_eq!(
        model.calls_of(lead).len(),
        5,
        "the lead took all of its turns"
    );

    // At every turn after the first, the lead itself was still running, while the children
    // spawned before had exited.
    let at_turn = at_turn.lock().clone();
    assert_eq!(
        at_turn.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    for (turn, seen) in &at_turn {
        assert_eq!(
            record(seen, lead).status,
            AgentStatus::Running,
            "turn {turn}"
        );
    }
    let status_at = |turn: u32, child: AgentId| {
        let (_, seen) = &at_turn[turn as usize - 1];
        record(seen, child).status
    };
    assert_eq!(status_at(2, children[0]), AgentStatus::Completed);
    // The background child finished while the lead's third model call was in flight.
    assert_eq!(status_at(3, children[1]), AgentStatus::Running);
    assert_eq!(status_at(4, children[1]), AgentStatus::Completed);
    assert_eq!(status_at(5, children[2]), AgentStatus::Completed);
    assert_eq!(
        model
            .request(lead, 4)
            .tool_result("call_3_0")
            .expect("peek result")
            .json(),
        json!({ "agent_id": children[1].to_string(), "status": "completed", "text": "quick" })
    );

    // The lead settled last, after every child.
    let lead_end = terminal_event(&events, lead).expect("lead settled").seq;
    for &child in &children {
        assert!(terminal_event(&events, child).expect("child settled").seq < lead_end);
    }

    // Top-level exits did not stop the root: the tree still runs new agents.
    let again = run_within(
        &tree,
        "a second top-level agent",
        SpawnRequest::new("worker", "after the lead"),
    )
    .await;
    assert_eq!(again.text.as_deref(), Some("worked"));
    assert!(tree.snapshot().check_usage().is_ok());

    crate::support::shutdown(tree).await;
}
