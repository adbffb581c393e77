//! Wait policies over a set of agents, through the agents' own `wait_subagents` tool and
//! through the application's `Tree::wait`.
//!
//! * `fail_fast`: the first outcome that is not `completed` aborts the rest of the set that
//!   is still live, at that instant, and only them: not the waiter, not agents outside the
//!   set. The waiter gets every outcome, in the order it named the set.
//! * `all_settled`: resumes when every agent of the set is terminal and returns every
//!   outcome in the order given, whatever order they ended in; nothing is aborted.
//! * Cancelling a wait (dropping it) aborts nothing, even when a member fails afterwards.

use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, WaitPolicy};
use agent_tree::testkit::{Call, Script, ScriptedModel, Target, Turn};
use serde_json::{Value, json};

use crate::support::harness::{a, tree};
use crate::support::lifetimes::ms;
use crate::support::run_within;
use crate::support::scripts::spawns_n_in_background;
use crate::support::{CallEnd, RecordingModel, catalog, delegator, leaf, spawn_admitted, within};

fn answer_after(text: &str, delay: u64) -> Script {
    Script::new([Turn::answer(text).after(ms(delay))])
}

fn fail_after(text: &str, delay: u64) -> Script {
    Script::new([Turn::fail(text).after(ms(delay))])
}

/// The `(agent_id, status)` pairs of a `wait_subagents` result.
fn outcomes_of(result: &str) -> Vec<(String, String)> {
    let value: Value = serde_json::from_str(result).expect("a wait result is JSON");
    value["outcomes"]
        .as_array()
        .expect("outcomes")
        .iter()
        .map(|o| {
            (
                o["agent_id"].as_str().unwrap_or_default().to_owned(),
                o["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn pairs(expected: &[(u64, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|&(n, s)| (a(n).to_string(), s.to_owned()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn fail_fast_through_the_tool_aborts_only_the_rest_of_the_set() {
    // lead a1 spawns p1..p4 (a2..a5), the set, and an outsider (a6).
    let scripted = ScriptedModel::new().script(
        "lead",
        [
            spawns_n_in_background("worker", "job ", 5),
            Turn::calls([Call::wait(
                (0..4).map(Target::Spawned),
                WaitPolicy::FailFast,
            )]),
            Turn::calls([Call::result(Target::Spawned(4))]),
            Turn::answer("lead done"),
        ],
    );
    scripted.script_agent(a(2), answer_after("p1 done", 500));
    scripted.script_agent(a(3), fail_after("card declined", 100));
    scripted.script_agent(a(4), answer_after("p3 done", 300));
    scripted.script_agent(a(5), Script::new([Turn::hang()]));
    scripted.script_agent(a(6), answer_after("outside done", 1000));
    let model = RecordingModel::new(scripted);
    let tree = tree(
        model.clone(),
        catalog([delegator("lead", &["worker"]), leaf("worker")]),
        TreeConfig::default().with_max_children_per_agent(5),
    )
    .await;
    let outcome = run_within(&tree, "the lead", SpawnRequest::new("lead", "checkout")).await;
    assert_eq!(
        outcome.text.as_deref(),
        Some("lead done"),
        "the waiter is untouched"
    );

    let calls = model.calls_of(a(1));
    let waited = &calls[2];
    assert_eq!(
        waited.at,
        calls[0].at + ms(100),
        "answered at the first failure"
    );
    let result = waited.messages.last().expect("the wait's result");
    assert!(!result.is_error);
    assert_eq!(
        outcomes_of(&result.content),
        pairs(&[
            (2, "aborted"),
            (3, "failed"),
            (4, "aborted"),
            (5, "aborted")
        ])
    );
    for id in [a(2), a(4), a(5)] {
        let outcome = tree.outcome(id).expect("settled");
        assert_eq!(
            (outcome.status, outcome.reason),
            (AgentStatus::Aborted, EndReason::Aborted),
            "{id}"
        );
        let call = &model.calls_of(id)[0];
        assert_eq!(call.end, CallEnd::Dropped, "{id}");
        assert_eq!(call.ended_at, Some(calls[0].at + ms(100)), "{id}");
    }
    // The outsider ran to its end, and the lead read it afterwards.
    assert_eq!(
        tree.outcome(a(6)).expect("outsider").text.as_deref(),
        Some("outside done")
    );
    let read = calls[3].messages.last().expect("read");
    let value: Value = serde_json::from_str(&read.content).expect("JSON");
    assert_eq!(value["status"], json!("completed"));
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn all_settled_through_the_tool_returns_every_outcome_in_the_order_asked() {
    // q1..q4 (a2..a5) end in reverse order; the lead names them in the order 2, 0, 3, 1.
    let order = [2usize, 0, 3, 1];
    let scripted = ScriptedModel::new().script(
        "lead",
        [
            spawns_n_in_background("worker", "probe ", 4),
            Turn::calls([Call::wait(
                order.iter().map(|&i| Target::Spawned(i)),
                WaitPolicy::AllSettled,
            )]),
            Turn::answer("diagnosed"),
        ],
    );
    scripted.script_agent(a(2), answer_after("disk ok", 400));
    scripted.script_agent(a(3), fail_after("dns timeout", 300));
    scripted.script_agent(a(4), answer_after("memory ok", 200));
    scripted.script_agent(a(5), answer_after("cpu ok", 100));
    let model = RecordingModel::new(scripted);
    let tree = tree(
        model.clone(),
        catalog([delegator("lead", &["worker"]), leaf("worker")]),
        TreeConfig::default(),
    )
    .await;
    let outcome = run_within(&tree, "the lead", SpawnRequest::new("lead", "diagnose")).await;
    assert_eq!(outcome.text.as_deref(), Some("diagnosed"));
    let calls = model.calls_of(a(1));
    assert_eq!(
        calls[2].at,
        calls[0].at + ms(400),
        "resumed when the last settled"
    );
    let result = calls[2].messages.last().expect("the wait's result");
    assert_eq!(
        outcomes_of(&result.content),
        pairs(&[
            (4, "completed"),
            (2, "completed"),
            (5, "completed"),
            (3, "failed")
        ])
    );
    let value: Value = serde_json::from_str(&result.content).expect("JSON");
    assert_eq!(value["policy"], json!("all_settled"));
    assert_eq!(value["outcomes"][0]["text"], json!("memory ok"));
    assert_eq!(value["outcomes"][3]["error"], json!("dns timeout"));
    // No call was cut off: each returned, or failed (the failing worker's model error).
    assert!(
        model
            .calls()
            .iter()
            .all(|c| matches!(c.end, CallEnd::Returned | CallEnd::Failed))
    );
    assert_eq!(
        model
            .calls()
            .iter()
            .filter(|c| c.end == CallEnd::Failed)
            .count(),
        1
    );
    tree.shutdown().await;
}

/// Five top-level workers (a1..a5); the first four are the set, a5 is outside it.
async fn top_level(scripts: [Script; 5]) -> (Tree, RecordingModel, Vec<AgentId>) {
    let scripted = ScriptedModel::new();
    for (i, script) in scripts.into_iter().enumerate() {
        scripted.script_agent(a(i as u64 + 1), script);
    }
    let model = RecordingModel::new(scripted);
    let tree = tree(
        model.clone(),
        catalog([leaf("worker")]),
        TreeConfig::default(),
    )
    .await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let handle = spawn_admitted(&tree, SpawnRequest::new("worker", format!("job {i}"))).await;
        ids.push(handle.id());
    }
    (tree, model, ids)
}

#[tokio::test(start_paused = true)]
async fn fail_fast_through_the_application_aborts_only_the_rest_of_the_set() {
    let (tree, model, ids) = top_level([
        answer_after("t1 done", 500),
        fail_after("t2 broke", 100),
        answer_after("t3 done", 50),
        Script::new([Turn::hang()]),
        answer_after("outside done", 1000),
    ])
    .await;
    let start = tokio::time::Instant::now();
    let set = [ids[3], ids[1], ids[0], ids[2]];
    let outcomes = within("the wait", tree.wait(&set, WaitPolicy::FailFast)).await;
    assert_eq!(tokio::time::Instant::now() - start, ms(100));
    let got: Vec<(AgentStatus, EndReason)> =
        outcomes.iter().map(|o| (o.status, o.reason)).collect();
    assert_eq!(
        got,
        [
            (AgentStatus::Aborted, EndReason::Aborted),
            (AgentStatus::Failed, EndReason::ModelError),
            (AgentStatus::Aborted, EndReason::Aborted),
            (AgentStatus::Completed, EndReason::FinalAnswer),
        ]
    );
    assert_eq!(
        outcomes[3].text.as_deref(),
        Some("t3 done"),
        "completed before the failure"
    );
    assert_eq!(
        model.calls_of(ids[4])[0].end,
        CallEnd::InFlight,
        "outside the set"
    );
    let outside = within("the outsider", async {
        tree.handle(ids[4]).expect("handle").outcome().await
    })
    .await;
    assert_eq!(outside.text.as_deref(), Some("outside done"));
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn fail_fast_counts_an_abort_as_a_failure() {
    let (tree, model, ids) = top_level([
        Script::new([Turn::hang()]),
        Script::new([Turn::hang()]),
        answer_after("t3 done", 500),
        Script::new([Turn::hang()]),
        answer_after("outside done", 1000),
    ])
    .await;
    let set = [ids[0], ids[1], ids[2]];
    let aborter = async {
        tokio::time::sleep(ms(100)).await;
        tree.abort(ids[1]).expect("exists");
    };
    let (outcomes, ()) = tokio::join!(tree.wait(&set, WaitPolicy::FailFast), aborter);
    let statuses: Vec<AgentStatus> = outcomes.iter().map(|o| o.status).collect();
    assert_eq!(statuses, [AgentStatus::Aborted; 3]);
    assert_eq!(model.calls_of(ids[3])[0].end, CallEnd::InFlight);
    assert_eq!(model.calls_of(ids[4])[0].end, CallEnd::InFlight);
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn all_settled_through_the_application_returns_every_outcome_in_order() {
    let (tree, model, ids) = top_level([
        answer_after("t1 done", 400),
        fail_after("t2 broke", 300),
        answer_after("t3 done", 200),
        Script::new([Turn::panic("t4 crashed").after(ms(100))]),
        answer_after("outside done", 1000),
    ])
    .await;
    let set = [ids[0], ids[1], ids[2], ids[3]];
    let outcomes = within("the wait", tree.wait(&set, WaitPolicy::AllSettled)).await;
    let got: Vec<(AgentStatus, EndReason)> =
        outcomes.iter().map(|o| (o.status, o.reason)).collect();
    assert_eq!(
        got,
        [
            (AgentStatus::Completed, EndReason::FinalAnswer),
            (AgentStatus::Failed, EndReason::ModelError),
            (AgentStatus::Completed, EndReason::FinalAnswer),
            (AgentStatus::Failed, EndReason::Panicked),
        ]
    );
    assert_eq!(outcomes[0].text.as_deref(), Some("t1 done"));
    assert_eq!(model.calls_of(ids[4])[0].end, CallEnd::InFlight);
    // Reading outcomes never removes them: the same wait again answers at once.
    let again = tree.wait(&set, WaitPolicy::AllSettled).await;
    assert_eq!(again, outcomes);
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_fail_fast_wait_aborts_nothing() {
    let (tree, model, ids) = top_level([
        answer_after("t1 done", 500),
        fail_after("t2 broke", 100),
        answer_after("t3 done", 300),
        Script::new([Turn::hang()]),
        Script::new([Turn::hang()]),
    ])
    .await;
    let set = [ids[0], ids[1], ids[2]];
    let cut = tokio::time::timeout(ms(50), tree.wait(&set, WaitPolicy::FailFast)).await;
    assert!(cut.is_err(), "nothing settled within 50 ms");
    // t2 fails at 100 ms with nobody waiting: t1 and t3 finish on their own.
    let outcomes = within("all", tree.wait(&set, WaitPolicy::AllSettled)).await;
    let statuses: Vec<AgentStatus> = outcomes.iter().map(|o| o.status).collect();
    assert_eq!(
        statuses,
        [
            AgentStatus::Completed,
            AgentStatus::Failed,
            AgentStatus::Completed
        ]
    );
    assert!(
        model
            .calls_of(ids[0])
            .iter()
            .all(|c| c.end == CallEnd::Returned)
    );
    tree.shutdown().await;
}
