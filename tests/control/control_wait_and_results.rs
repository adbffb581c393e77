//! Waiting and results: a wait that times out (`get_subagent_result` with `wait` and
//! `timeout_ms`) answers `running` and never cancels the child, which completes later;
//! results are kept until read and reading never removes them; and a background child's
//! completion notice still reaches its owner after a wait on it was cut short. A notice is
//! taken back only for the run whose result a tool gave the model: a peek of a running child,
//! or a read of a later run, takes back nothing.

use std::time::Duration;

use crate::control_resume_rules::boss_slow_and_quick;
use crate::support::RecordingModel;
use crate::support::harness::{a, idle, results, status_of, tree};
use crate::support::read_result_call;
use crate::support::run_admitted;
use crate::support::scripts::background_spawns;
use crate::support::scripts::boss_completed;
use agent_tree::prelude::*;
use agent_tree::protocol::Role;
use agent_tree::testkit::{Call, ScriptedModel, Turn};
use serde_json::json;

fn timed_wait(id: &str, ms: u64) -> Call {
    Call::tool(
        "get_subagent_result",
        json!({ "agent_id": id, "wait": true, "timeout_ms": ms }),
    )
}

fn noop() -> Call {
    Call::tool("noop", json!({}))
}

fn noticed(messages: &[agent_tree::protocol::Message], id: &str, text: &str) -> bool {
    messages.iter().any(|m| {
        m.role == Role::User
            && m.content
                .starts_with(&format!(r#"{{"agent_id":"{id}","notice":"subagent_ended""#))
            && m.content.contains(text)
    })
}

fn ms_since_epoch(tree: &Tree, at: tokio::time::Instant) -> u128 {
    (at - tree.epoch()).as_millis()
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_wait_answers_running_and_the_child_completes_later() {
    let model = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn_background("slow", "take your time"),
                Turn::calls([timed_wait("a2", 100)]),
                Turn::calls([Call::result(a(2))]),
                Turn::answer("boss done"),
            ],
        )
        .script(
            "slow",
            [Turn::answer("slow done").after(Duration::from_millis(500))],
        );
    let tree = boss_completed(&model, boss_slow_and_quick()).await;
    idle(&tree).await;

    let log = model.log_of(a(1));
    let cut = &log[2].results[0];
    assert!(!cut.is_error, "{}", cut.content);
    assert_eq!(status_of(cut), "running");
    assert_eq!(
        ms_since_epoch(&tree, log[2].at),
        100,
        "the wait gave up at 100 ms"
    );

    let waited = &log[3].results[0];
    assert_eq!(status_of(waited), "completed");
    assert!(waited.content.contains("slow done"));
    assert_eq!(ms_since_epoch(&tree, log[3].at), 500);

    let child = tree.record(a(2)).unwrap();
    assert_eq!(child.status, AgentStatus::Completed);
    assert_eq!(child.ended_ms, Some(500));
    assert_eq!(model.calls_by(a(2)), 1);
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn unread_results_are_kept_and_reading_never_removes_them() {
    let model = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn_background("quick", "go"),
                Turn::calls([noop()]).after(Duration::from_millis(50)),
                Turn::calls([Call::peek(a(2))]),
                Turn::calls([Call::peek(a(2))]),
                Turn::answer("boss done"),
            ],
        )
        .script("quick", [Turn::answer("quick done")]);
    let tree = tree(model.clone(), boss_slow_and_quick(), TreeConfig::default()).await;
    let outcome = run_admitted(&tree, SpawnRequest::new("boss", "first branch")).await;
    assert!(outcome.is_completed());
    let kept = tree.outcome(a(2)).expect("the result is kept");
    assert_eq!(kept.text.as_deref(), Some("quick done"));
    for n in [3, 4] {
        let read = &results(&model, a(1), n)[0];
        assert_eq!(status_of(read), "completed");
        assert!(read.content.contains("quick done"));
    }

    // Another branch runs, spawns and settles: the first branch's records stay.
    let other = run_admitted(&tree, SpawnRequest::new("boss", "second branch")).await;
    assert!(other.is_completed());
    idle(&tree).await;
    assert_eq!(tree.outcome(a(2)), Some(kept.clone()));
    assert_eq!(tree.outcome(a(2)), Some(kept));
    assert_eq!(tree.snapshot().agents().count(), 4);
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_unread_background_result_is_noticed_by_its_owner() {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn_background("quick", "go"),
                Turn::calls([noop()]).after(Duration::from_millis(50)),
                Turn::answer("boss done"),
            ],
        )
        .script("quick", [Turn::answer("quick done")]);
    let model = RecordingModel::new(scripted);
    let tree = tree(model.clone(), boss_slow_and_quick(), TreeConfig::default()).await;
    tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
    let third = &model.calls_of(a(1))[2].messages;
    let notice = third.last().unwrap();
    assert_eq!(notice.role, Role::User);
    assert_eq!(
        notice.content,
        r#"{"agent_id":"a2","notice":"subagent_ended","status":"completed","text":"quick done"}"#
    );
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_cut_short_wait_does_not_swallow_the_completion_notice() {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn_background("slow", "take your time"),
                Turn::calls([timed_wait("a2", 100)]),
                Turn::calls([noop()]).after(Duration::from_millis(1000)),
                Turn::answer("boss done"),
            ],
        )
        .script(
            "slow",
            [Turn::answer("slow done").after(Duration::from_millis(500))],
        );
    let model = RecordingModel::new(scripted.clone());
    let tree = boss_completed(&model, boss_slow_and_quick()).await;
    assert_eq!(status_of(&results(&scripted, a(1), 2)[0]), "running");
    assert_eq!(tree.record(a(2)).unwrap().status, AgentStatus::Completed);
    // The owner got "running" from its wait, never the result: the completion must reach it.
    let last = &model.calls_of(a(1))[3].messages;
    assert!(
        last.iter().any(|m| m.role == Role::User
            && m.content
                .starts_with(r#"{"agent_id":"a2","notice":"subagent_ended","status":"completed""#)),
        "the owner never learned that a2 completed"
    );
    tree.shutdown().await;
}

/// Background children that end while their owner's model turn runs are noticed; when that
/// turn then awaits (`wait_subagents`) or reads (`get_subagent_result`) their results, the
/// tool's answer carries them and the notices are taken back: each result reaches the model
/// once (found by a new user trying the crate against a mock provider).
#[tokio::test(start_paused = true)]
async fn a_result_awaited_or_read_after_its_child_ended_mid_turn_is_not_noticed_too() {
    for read in [false, true] {
        let take = if read {
            read_result_call("a2")
        } else {
            Call::tool("wait_subagents", json!({ "agent_ids": ["a2", "a3"] }))
        };
        let scripted = ScriptedModel::new()
            .script(
                "boss",
                [
                    background_spawns([("quick", "one"), ("quick", "two")]),
                    Turn::calls([take]).after(Duration::from_millis(50)),
                    Turn::answer("boss done"),
                ],
            )
            .script("quick", [Turn::answer("quick done")]);
        let model = RecordingModel::new(scripted);
        let tree = boss_completed(&model, boss_slow_and_quick()).await;
        let third = &model.calls_of(a(1))[2].messages;
        let noticed = |id: &str| {
            third.iter().any(|m| {
                m.role == Role::User
                    && m.content
                        .starts_with(&format!(r#"{{"agent_id":"{id}","notice":"subagent_ended""#))
            })
        };
        let answered = third
            .iter()
            .filter(|m| m.role == Role::Tool && m.content.contains("quick done"))
            .count();
        if read {
            // a2's result was read: not noticed; a3's was not: noticed.
            assert!(!noticed("a2") && noticed("a3"), "{third:#?}");
            assert_eq!(answered, 1);
        } else {
            assert!(!noticed("a2") && !noticed("a3"), "{third:#?}");
            assert_eq!(answered, 1, "one wait answer with both results");
        }
        tree.shutdown().await;
    }
}

/// A peek (no wait) while the child still runs reads no result, so it takes back no notice:
/// when the child then ends during a later model turn whose tools do not read it, its end
/// notice reaches the owner.
#[tokio::test(start_paused = true)]
async fn a_peek_while_the_child_runs_does_not_take_back_its_later_end_notice() {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn_background("slow", "take your time"),
                Turn::calls([Call::peek(a(2))]),
                Turn::calls([noop()]).after(Duration::from_millis(600)),
                Turn::answer("boss done"),
            ],
        )
        .script(
            "slow",
            [Turn::answer("slow done").after(Duration::from_millis(300))],
        );
    let model = RecordingModel::new(scripted);
    let tree = boss_completed(&model, boss_slow_and_quick()).await;
    let fourth = &model.calls_of(a(1))[3].messages;
    assert!(noticed(fourth, "a2", "slow done"), "{fourth:#?}");
    tree.shutdown().await;
}

/// Reading a result takes back the notice of that run only: a child whose first result was
/// read, resumed in the background and ending again during a model turn that does not read
/// it, is noticed for its second end, and its read first result is not noticed again.
#[tokio::test(start_paused = true)]
async fn a_resumed_child_ending_again_is_noticed_after_its_first_result_was_read() {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn_background("quick", "one"),
                Turn::calls([Call::result(a(2))]).after(Duration::from_millis(50)),
                Turn::calls([Call::tool(
                    "Agent",
                    json!({ "resume": "a2", "prompt": "again", "background": true }),
                )]),
                Turn::calls([noop()]).after(Duration::from_millis(200)),
                Turn::answer("boss done"),
            ],
        )
        .script(
            "quick",
            [
                Turn::answer("first done"),
                Turn::answer("second done").after(Duration::from_millis(50)),
            ],
        );
    let model = RecordingModel::new(scripted);
    let tree = boss_completed(&model, boss_slow_and_quick()).await;
    let calls = model.calls_of(a(1));
    let fifth = &calls[4].messages;
    assert!(noticed(fifth, "a2", "second done"), "{fifth:#?}");
    assert!(
        !noticed(fifth, "a2", "first done"),
        "the read result is not noticed"
    );
    tree.shutdown().await;
}

/// A notice is taken back only for a result that reached the model by a tool: a child that
/// ended during its owner's model turn, resumed by that turn's first call and awaited by its
/// second, answers the wait with its second run's result, so the first run's result still
/// reaches the model as its notice.
#[tokio::test(start_paused = true)]
async fn a_read_of_the_second_run_does_not_take_back_the_first_runs_notice() {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn_background("quick", "one"),
                Turn::calls([
                    Call::tool(
                        "Agent",
                        json!({ "resume": "a2", "prompt": "again", "background": true }),
                    ),
                    Call::tool(
                        "get_subagent_result",
                        json!({ "agent_id": "a2", "wait": true }),
                    ),
                ])
                .after(Duration::from_millis(50)),
                Turn::answer("boss done"),
            ],
        )
        .script(
            "quick",
            [Turn::answer("first done"), Turn::answer("second done")],
        );
    let model = RecordingModel::new(scripted);
    let tree = boss_completed(&model, boss_slow_and_quick()).await;
    let calls = model.calls_of(a(1));
    let third = &calls[2].messages;
    let resumed_ok = third
        .iter()
        .any(|m| m.role == Role::Tool && m.content.contains("second done"));
    if resumed_ok {
        let first_seen = third.iter().any(|m| m.content.contains("first done"));
        assert!(
            first_seen,
            "the first run's result never reached the model: {third:#?}"
        );
    }
    tree.shutdown().await;
}
