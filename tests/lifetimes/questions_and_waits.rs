//! A model's waits and a child's questions never hang anyone, and an answer is receipted
//! `delivered` only if a turn will read it:
//!
//! * `wait_subagents` over a set a model may well write (a child named twice, settled or
//!   not; an empty set) is answered, as `Tree::wait` answers it;
//! * a wait started on a child whose `ask_owner` question is still open is answered at once
//!   with `asking`, so owner and child never wait on each other;
//! * a question asked on the last turn `max_turns` allows is refused, or its answer is read.
//!
//! Paused time: each test is deterministic, and every wait is bounded, so a hang fails with
//! a message.

use agent_tree::SteerReceipt;
use agent_tree::prelude::*;
use agent_tree::protocol::EventKind;
use agent_tree::testkit::Call;
use agent_tree::testkit::{EventProbe, ScriptedModel, Target, Turn};
use serde_json::json;

use crate::support::harness::a;
use crate::support::lifetimes::{ms, spawned};
use crate::support::races::{GUARD, bounded, outcome};
use crate::support::{RecordingModel, catalog, leaf};

// ---------------------------------------------------------------------------------------
// wait_subagents over the owner's child table: sets a model can write.
// ---------------------------------------------------------------------------------------

/// lead spawns one background worker (a2) that answers after 10 ms, then waits on `set`.
async fn lead_waits_on(set: serde_json::Value) -> (Tree, RecordingModel) {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                [
                    Turn::spawn_background("worker", "work"),
                    Turn::calls([Call::tool("wait_subagents", set)]),
                    Turn::answer("lead done"),
                ],
            )
            .script("worker", [Turn::answer("worker done").after(ms(10))]),
    );
    let tree = crate::support::lead_and_worker_tree(&model).await;
    (tree, model)
}

/// `wait_subagents` naming the same child twice (`["a2", "a2"]`, which a model may well
/// write) is answered once the child settles, with its outcome at both positions (or
/// refused): every position of a repeated id is filled, as `Tree::wait` does. With an empty
/// set (`[]`) it is answered at once (no outcomes), or refused, as `Tree::wait(&[])` returns
/// at once: an empty set of own children never waits for a child of the set to end.
#[tokio::test(start_paused = true)]
async fn wait_subagents_with_a_repeated_id_or_an_empty_set_does_not_hang() {
    for ids in [json!(["a2", "a2"]), json!([])] {
        let (tree, model) = lead_waits_on(json!({ "agent_ids": ids })).await;
        let lead = spawned(&tree, "lead", "go").await;
        let got = outcome(&tree, lead, GUARD).await;
        assert!(got.is_completed(), "{ids}: {got:?}");
        assert_eq!(
            model.count_of(lead),
            3,
            "{ids}: the lead read the set's result"
        );
        tree.shutdown().await;
    }
}

/// Runs `lead` (task `go`) on a [`crate::support::lead_and_worker_tree`] of `model`, checks
/// that it completes (no hang), then shuts the tree down.
async fn lead_completes(model: &RecordingModel) {
    let tree = crate::support::lead_and_worker_tree(model).await;
    let lead = spawned(&tree, "lead", "go").await;
    let got = outcome(&tree, lead, GUARD).await;
    assert!(got.is_completed(), "{got:?}");
    tree.shutdown().await;
}

/// The same with the repeated child already settled when the wait starts (answered from the
/// table at dispatch): it does not hang either.
#[tokio::test(start_paused = true)]
async fn wait_subagents_with_a_repeated_settled_id_does_not_hang() {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                [
                    Turn::spawn_background("worker", "work"),
                    Turn::calls([Call::result(Target::Id(a(2)))]),
                    Turn::calls([Call::tool(
                        "wait_subagents",
                        json!({ "agent_ids": ["a2", "a2"], "policy": "all_settled" }),
                    )]),
                    Turn::answer("lead done"),
                ],
            )
            .script("worker", [Turn::answer("worker done")]),
    );
    lead_completes(&model).await;
}

// ---------------------------------------------------------------------------------------
// ask_owner: a wait started after the question.
// ---------------------------------------------------------------------------------------

/// A child's open `ask_owner` question answers every wait on it, not only those that exist
/// when the question arrives: if the owner's model then waits on the asking child again
/// (`get_subagent_result {wait: true}`, a natural reaction to `{"status": "asking"}`), the
/// wait is answered at once with `asking`, so the run goes on ("never a silent hang"; "if the
/// owner is waiting on that child, the wait is answered at once with `asking`").
#[tokio::test(start_paused = true)]
async fn a_wait_on_a_child_with_an_open_question_does_not_deadlock() {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                [
                    Turn::spawn("worker", "work"),
                    Turn::calls([Call::result(Target::Id(a(2)))]),
                    Turn::calls([Call::steer(Target::Id(a(2)), "the answer is 42")]),
                    Turn::calls([Call::result(Target::Id(a(2)))]),
                    Turn::answer("lead done"),
                ],
            )
            .script(
                "worker",
                [
                    Turn::calls([crate::support::ask("which number?")]),
                    Turn::answer("worker done"),
                ],
            ),
    );
    lead_completes(&model).await;
}

// ---------------------------------------------------------------------------------------
// Steer receipts: a steer answering a question on the last turn.
// ---------------------------------------------------------------------------------------

/// A steer that answers a pending `ask_owner` call is receipted `delivered` only if a turn
/// will read it (`on_steer`'s rule). Here a top-level worker with `max_turns: 1` asks the
/// application on its only turn: either the question itself is refused (an `ask_owner` on the
/// last turn `max_turns` allows is an error result at once, as its answer could only be read
/// by a next turn) and no question is asked, or the steer answering it is read by a turn.
#[tokio::test(start_paused = true)]
async fn a_steer_answering_a_question_on_the_last_turn_is_not_receipted_delivered_unread() {
    let model = RecordingModel::new(ScriptedModel::new().script(
        "worker",
        [
            Turn::calls([crate::support::ask("which number?")]),
            Turn::answer("42"),
        ],
    ));
    let tree = crate::support::harness::tree(
        model.clone(),
        catalog([leaf("worker").with_max_turns(1)]),
        TreeConfig::default(),
    )
    .await;
    let mut events = EventProbe::new(&tree);
    let worker = spawned(&tree, "worker", "go").await;
    // The runtime refuses the question itself: an `ask_owner` on the last turn `max_turns`
    // allows is an error result at once (its answer could only be read by a next turn), so
    // no steer is ever receipted for it. Either the question is refused, or it is asked and
    // a `delivered` answer is read.
    let asked_or_ended = events
        .expect_event("the worker's question or end", |e| {
            e.agent == worker
                && (matches!(e.kind, EventKind::Asked { .. }) || e.kind.terminal_status().is_some())
        })
        .await;
    if matches!(asked_or_ended.kind, EventKind::Asked { .. }) {
        let receipt = bounded(GUARD, "the steer", tree.steer(worker, "the number is 42")).await;
        let got = outcome(&tree, worker, GUARD).await;
        if receipt == Ok(SteerReceipt::Delivered) {
            assert_eq!(
                model.count_of(worker),
                2,
                "the steer was receipted delivered, but no turn read it: the worker \
                 made {} model call(s) and ended {got:?}",
                model.count_of(worker)
            );
        }
    } else {
        assert_eq!(tree.snapshot().tally.asked, 0, "no question was asked");
    }
    tree.shutdown().await;
}
