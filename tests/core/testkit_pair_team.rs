//! The driven model (`testkit::pair`) with a delegating team loaded from agent files: the
//! test answers every turn, sees what each agent is offered and reads, and a turn dropped,
//! never taken or taken for the wrong agent fails the test by name.

use std::time::Duration;

use agent_tree::protocol::{AgentStatus, Role, SpawnRequest, Usage};
use agent_tree::testkit::{ModelHandle, pair};
use agent_tree::{AgentHandle, Tree};

use crate::research_team::{agent_call, team};
use crate::support::build_tree;
use crate::support::spawn_admitted;

/// A lead whose model the test drives turn by turn: it is offered `Agent` (and no
/// `ask_owner`: nobody answers a top-level agent here), its prompt is its file's body; the
/// searcher is a leaf offered no orchestration tool and reads its task; each child's answer
/// comes back to the lead as a tool message; the lead's record bills the whole subtree and
/// the pair saw exactly five calls.
#[tokio::test(start_paused = true)]
async fn a_driven_lead_delegates_search_then_summary_and_bills_its_subtree() {
    let (model, mut calls) = pair();
    let tree = build_tree(team("temporary"), model).await;
    let mut lead = spawn_admitted(&tree, SpawnRequest::new("lead", "what is known about X?")).await;

    let turn = calls.expect_turn_of(lead.id()).await;
    assert_eq!(
        (turn.agent_type(), turn.depth(), turn.turn()),
        ("lead", 1, 1)
    );
    assert!(
        turn.tool_names().contains(&"Agent"),
        "{:?}",
        turn.tool_names()
    );
    // Nobody answers a top-level agent's questions here: no `ask_owner`.
    assert!(
        !turn.tool_names().contains(&"ask_owner"),
        "{:?}",
        turn.tool_names()
    );
    assert_eq!(
        turn.request().definition.prompt.lines().next(),
        Some(
            "You lead research. Delegate searching to `searcher` and summarizing to `summarizer`."
        )
    );
    turn.call_tools(
        vec![agent_call("c1", "searcher", "find papers on X")],
        Usage::tokens(100, 20),
    );

    let search = calls.expect_turn().await;
    assert_eq!((search.agent_type(), search.depth()), ("searcher", 2));
    assert_eq!(search.last_message().unwrap().content, "find papers on X");
    // A leaf: it is offered no orchestration tool.
    assert!(!search.tool_names().contains(&"Agent"));
    search.answer_text("3 papers: A, B, C", Usage::tokens(40, 10));

    let turn = calls.expect_turn_of(lead.id()).await;
    assert_eq!(turn.turn(), 2);
    let result = turn.last_message().unwrap();
    assert_eq!(result.role, Role::Tool);
    assert!(
        result.content.contains("3 papers: A, B, C"),
        "{}",
        result.content
    );
    turn.call_tools(
        vec![agent_call("c2", "summarizer", "summarize A, B, C")],
        Usage::tokens(150, 15),
    );

    let summary = calls.expect_turn().await;
    assert_eq!(summary.agent_type(), "summarizer");
    summary.answer_text("X is well studied", Usage::tokens(30, 5));

    let turn = calls.expect_turn_of(lead.id()).await;
    assert!(
        turn.last_message()
            .unwrap()
            .content
            .contains("X is well studied")
    );
    turn.answer_text("report: X is well studied", Usage::tokens(60, 6));

    let outcome = lead.outcome().await;
    assert_eq!(outcome.status, AgentStatus::Completed);
    assert_eq!(outcome.text.as_deref(), Some("report: X is well studied"));
    let record = tree.record(lead.id()).unwrap();
    assert_eq!(record.subtree, Usage::tokens(380, 56));
    calls.expect_no_turn();
    assert_eq!(calls.log().len(), 5);
    tree.shutdown().await;
}

/// Two foreground `Agent` calls in one turn run concurrently: the test takes their turns in
/// whatever order they come, and the lead reads both results, one tool message per call.
#[tokio::test(start_paused = true)]
async fn two_foreground_agent_calls_of_one_turn_run_concurrently() {
    let (model, mut calls) = pair();
    let tree = build_tree(team("temporary"), model).await;
    let mut lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();

    calls.expect_turn_of(lead.id()).await.call_tools(
        vec![
            agent_call("c1", "searcher", "find X"),
            agent_call("c2", "summarizer", "summarize what is known of X"),
        ],
        Usage::tokens(10, 1),
    );
    let mut seen = Vec::new();
    for _ in 0..2 {
        let child = calls.expect_turn().await;
        seen.push(child.agent_type().to_owned());
        let text = format!("{} done", child.agent_type());
        child.answer_text(text, Usage::tokens(1, 1));
    }
    seen.sort();
    assert_eq!(seen, ["searcher", "summarizer"]);

    let turn = calls.expect_turn_of(lead.id()).await;
    // Both results come back, one tool message per call.
    let results: Vec<_> = turn
        .messages()
        .iter()
        .filter(|m| m.role == Role::Tool)
        .collect();
    assert_eq!(results.len(), 2);
    assert!(results.iter().any(|m| m.tool_call_id.as_deref() == Some("c1") && m.content.contains("searcher done")));
    assert!(
        results
            .iter()
            .any(|m| m.tool_call_id.as_deref() == Some("c2")
                && m.content.contains("summarizer done"))
    );
    turn.answer_text("both", Usage::ZERO);
    assert_eq!(lead.outcome().await.text.as_deref(), Some("both"));
    tree.shutdown().await;
}

/// A temporary team whose lead (asked "X?") delegated "find X" to a searcher: the tree, the
/// lead and the pair's handle.
async fn lead_delegated_to_a_searcher() -> (Tree, AgentHandle, ModelHandle) {
    let (model, mut calls) = pair();
    let tree = build_tree(team("temporary"), model).await;
    let lead = tree.spawn(SpawnRequest::new("lead", "X?")).await.unwrap();
    calls
        .expect_turn_of(lead.id())
        .await
        .call_tools(vec![agent_call("c1", "searcher", "find X")], Usage::ZERO);
    (tree, lead, calls)
}

/// A turn the test takes and drops unanswered fails the test, naming the agent type.
#[tokio::test(start_paused = true)]
#[should_panic(expected = "searcher")]
async fn a_dropped_turn_fails_the_test() {
    let (_tree, _lead, mut calls) = lead_delegated_to_a_searcher().await;
    let searcher = calls.expect_turn().await;
    drop(searcher);
    tokio::time::sleep(Duration::from_millis(1)).await;
}

/// A turn the test never takes (the pair dropped while it waits) fails the test, naming the
/// agent type.
#[tokio::test(start_paused = true)]
#[should_panic(expected = "searcher")]
async fn a_turn_never_taken_fails_the_test() {
    let (_tree, _lead, calls) = lead_delegated_to_a_searcher().await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    drop(calls);
}

/// `expect_turn_of` given another agent's call fails naming that caller: its id, type, run
/// and turn.
#[tokio::test(start_paused = true)]
#[should_panic(expected = "expected a model call of a1, got a2 (searcher) run 1 turn 1")]
async fn expect_turn_of_names_the_other_caller() {
    let (_tree, lead, mut calls) = lead_delegated_to_a_searcher().await;
    let _ = calls.expect_turn_of(lead.id()).await;
}
