//! The driven model (`testkit::pair`): a test awaits each model call, inspects it and
//! answers it; calls it drops or never takes fail the test, naming the agent and the turn.

use std::time::Duration;

use crate::support::catalog;
use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, ToolCall};
use agent_tree::testkit::{self, PendingTurn};
use serde_json::json;

fn lead_and_worker() -> Catalog {
    catalog([
        AgentDefinition::new("lead", "You lead.")
            .with_allowed_subagents(SubagentAllowance::only(["worker"])),
        AgentDefinition::new("worker", "You work."),
    ])
}

async fn tree(model: testkit::DrivenModel, config: TreeConfig) -> Tree {
    crate::support::harness::tree(model, lead_and_worker(), config).await
}

fn spawn_call(prompt: &str) -> ToolCall {
    ToolCall::new(
        "c1",
        "Agent",
        json!({"agent_type": "worker", "prompt": prompt}),
    )
}

/// With the driven model a test awaits each model call, inspects it (agent, depth, turn,
/// tools, messages) and answers it, and the tree goes on exactly as the answers say, usage
/// included.
#[tokio::test(start_paused = true)]
async fn a_test_drives_a_delegation_turn_by_turn() {
    let (model, mut handle) = testkit::pair();
    let tree = tree(model, TreeConfig::default()).await;
    let mut lead = tree.spawn(SpawnRequest::new("lead", "plan")).await.unwrap();

    let turn = handle.expect_turn_of(lead.id()).await;
    assert_eq!((turn.depth(), turn.turn(), turn.incarnation()), (1, 1, 1));
    assert!(turn.tool_names().contains(&"Agent"));
    assert_eq!(turn.request().system(), "You lead.");
    turn.call_tools(vec![spawn_call("check the logs")], Usage::tokens(10, 5));

    let worker = handle.expect_turn().await;
    assert_eq!((worker.agent_type(), worker.depth()), ("worker", 2));
    assert_eq!(worker.last_message().unwrap().content, "check the logs");
    assert_eq!(worker.tool_names(), ["ask_owner"]);
    worker.answer_text("logs are clean", Usage::tokens(7, 3));

    let turn = handle.expect_turn_of(lead.id()).await;
    assert_eq!(turn.turn(), 2);
    let result = turn.last_message().unwrap();
    assert!(
        result.content.contains("logs are clean"),
        "{}",
        result.content
    );
    turn.answer_text("all clean", Usage::tokens(4, 2));

    let outcome = lead.outcome().await;
    assert_eq!(outcome.text.as_deref(), Some("all clean"));
    assert_eq!(
        tree.record(lead.id()).unwrap().subtree,
        Usage::tokens(21, 10)
    );
    handle.expect_no_turn();
}

/// An answer of the driven model may be any error kind, a panic or a hang, and the tree
/// treats each as from a real model: a rate limit is retried under the same turn, a panic
/// fails the agent, a hang lasts until an abort.
#[tokio::test(start_paused = true)]
async fn errors_of_any_kind_hangs_and_panics_reach_the_tree() {
    let (model, mut handle) = testkit::pair();
    let retry = agent_tree::RetryPolicy::default()
        .with_backoff(Duration::from_millis(10), Duration::from_millis(10));
    let tree = tree(model, TreeConfig::default().with_retry(retry)).await;

    // A rate limit is retried: the same turn comes again.
    let mut a = tree.spawn(SpawnRequest::new("worker", "x")).await.unwrap();
    let first = handle.expect_turn().await;
    first.fail(ModelError::rate_limited("slow down", None));
    let again = handle.expect_turn().await;
    assert_eq!((again.agent(), again.turn()), (a.id(), 1));
    again.fail(ModelError::from_status(401, "bad key"));
    assert_eq!(a.outcome().await.reason, EndReason::ModelError);

    // A panic fails the agent, the tree carries on.
    let mut b = tree.spawn(SpawnRequest::new("worker", "y")).await.unwrap();
    handle.expect_turn().await.panic("the model blew up");
    assert_eq!(b.outcome().await.reason, EndReason::Panicked);

    // A hang lasts until the agent is aborted.
    let mut c = tree.spawn(SpawnRequest::new("worker", "z")).await.unwrap();
    handle.expect_turn().await.hang();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(tree.record(c.id()).unwrap().status, AgentStatus::Running);
    tree.abort(c.id()).unwrap();
    assert_eq!(c.outcome().await.status, AgentStatus::Aborted);
}

/// A model call the test takes and drops without an answer fails the test, naming the
/// agent, run and turn.
#[tokio::test(start_paused = true)]
#[should_panic(
    expected = "the model call of a1 (worker) run 1 turn 1 was dropped without an answer"
)]
async fn a_call_dropped_unanswered_fails_the_test_naming_it() {
    let (model, mut handle) = testkit::pair();
    let tree = tree(model, TreeConfig::default()).await;
    let _worker = tree.spawn(SpawnRequest::new("worker", "x")).await.unwrap();
    let turn: PendingTurn = handle.expect_turn().await;
    drop(turn);
}

/// Model calls the test never took fail it when the handle is dropped, each named by agent,
/// run and turn.
#[tokio::test(start_paused = true)]
#[should_panic(expected = "model calls the test never took: a1 (worker) run 1 turn 1")]
async fn calls_the_test_never_took_fail_it_when_the_handle_goes() {
    let (model, handle) = testkit::pair();
    let tree = tree(model, TreeConfig::default()).await;
    let _worker = tree.spawn(SpawnRequest::new("worker", "x")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    drop(handle);
}

/// Waiting for a model call that never comes fails the test after an hour of virtual time,
/// saying how many calls came.
#[tokio::test(start_paused = true)]
#[should_panic(expected = "expected a model call within 3600s, none came (after 0 calls)")]
async fn waiting_for_a_call_that_never_comes_fails_in_virtual_time() {
    let (model, mut handle) = testkit::pair();
    let _tree = tree(model, TreeConfig::default()).await;
    let _ = handle.expect_turn().await;
}

/// The driven model's call log records each call's agent, turn and run and how it ended:
/// returned, failed, dropped, or still in flight.
#[tokio::test(start_paused = true)]
async fn the_call_log_says_how_each_call_ended() {
    use agent_tree::testkit::CallEnd;
    let (model, mut handle) = testkit::pair();
    let log = handle.log();
    let tree = tree(
        model,
        TreeConfig::default().with_retry(agent_tree::RetryPolicy::none()),
    )
    .await;
    let mut a = tree.spawn(SpawnRequest::new("worker", "x")).await.unwrap();
    handle.expect_turn().await.answer_text("ok", Usage::ZERO);
    a.outcome().await;
    let mut b = tree.spawn(SpawnRequest::new("worker", "y")).await.unwrap();
    handle.expect_turn().await.fail(ModelError::new("no"));
    b.outcome().await;
    let mut c = tree.spawn(SpawnRequest::new("worker", "z")).await.unwrap();
    let pending = handle.expect_turn().await;
    assert_eq!(log.of(c.id())[0].end, CallEnd::InFlight);
    pending.hang();
    tree.abort(c.id()).unwrap();
    c.outcome().await;
    let ends: Vec<CallEnd> = log.calls().iter().map(|call| call.end).collect();
    assert_eq!(ends, [CallEnd::Returned, CallEnd::Failed, CallEnd::Dropped]);
    let first = &log.calls()[0];
    assert_eq!(
        (first.agent_type.as_str(), first.turn, first.incarnation),
        ("worker", 1, 1)
    );
}

/// A driven turn answers with the scripted model's calls, resolved against its own
/// conversation, and with a delay of model time.
#[tokio::test(start_paused = true)]
async fn a_driven_turn_answers_with_scripted_calls_and_after_a_delay() {
    use agent_tree::testkit::{Call, Target};
    let (model, mut handle) = testkit::pair();
    let tree = tree(model, TreeConfig::default()).await;
    let mut lead = tree.spawn(SpawnRequest::new("lead", "plan")).await.unwrap();
    handle
        .expect_turn_of(lead.id())
        .await
        .calls([Call::spawn_background("worker", "w")], Usage::ZERO);
    // The lead's second turn and the worker's first, in either order.
    let (first, second) = (handle.expect_turn().await, handle.expect_turn().await);
    let (turn, worker) = if first.agent() == lead.id() {
        (first, second)
    } else {
        (second, first)
    };
    let worker_id = worker.agent();
    worker.hang();
    turn.calls([Call::steer(Target::Spawned(0), "faster")], Usage::ZERO);
    let started = tokio::time::Instant::now();
    handle
        .expect_turn_of(lead.id())
        .await
        .answer_after(Duration::from_secs(5), ModelResponse::text("planned"));
    assert_eq!(lead.outcome().await.text.as_deref(), Some("planned"));
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    // The lead's end stopped the hanging worker.
    assert_eq!(
        tree.outcome(worker_id).unwrap().reason,
        EndReason::OwnerEnded
    );
    // The steer named the worker the spawn returned.
    let steered = &handle.log().of(lead.id())[2].results[0];
    assert!(!steered.is_error, "{steered:?}");
    assert!(
        steered.content.contains(&worker_id.to_string()),
        "{steered:?}"
    );
}
