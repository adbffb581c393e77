//! A temporary agent keeps its task (its start spec's prompt and inherited context) for as
//! long as a later run may need it, though it is never restarted.
//!
//! Resumed (by the application or by its owner's `Agent` call) after completing, an abort
//! mid-turn, a kill, a subtree shutdown, an abort before its first model call, or an abort
//! after a delivered steer, it sees its original task (and inherited context), then the new
//! prompt; journaled, its resume reads the right conversation back. Temporary siblings under
//! `one_for_all` / `rest_for_one` are released, never restarted with an empty task, while the
//! restartable child restarts with its task; a queued temporary agent started from the pool
//! gets its prompt. Paused time, one thread: deterministic.

use agent_tree::prelude::*;
use agent_tree::protocol::{Role, Strategy};
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use agent_tree::{JournalConfig, SteerReceipt};

use crate::races_mt::{assert_folds, bounded};
use crate::support::harness::{a, tree};
use crate::support::journal::TempDir;
use crate::support::lifetimes::{ms, restarts};
use crate::support::{
    RecordingModel, catalog, delegator, leaf, resume_call, run_admitted, spawn_admitted,
};

const STEER: &str = "mind the edge case";

/// A conversation as `(role, content)` pairs.
fn texts(messages: &[agent_tree::protocol::Message]) -> Vec<(Role, String)> {
    messages
        .iter()
        .map(|m| (m.role, m.content.clone()))
        .collect()
}

fn u(text: &str) -> (Role, String) {
    (Role::User, text.to_owned())
}

fn asst(text: &str) -> (Role, String) {
    (Role::Assistant, text.to_owned())
}

/// No model call of the whole tree carried an empty user message (a task dropped to "").
fn no_empty_task(model: &RecordingModel) {
    for call in model.calls() {
        assert!(
            !call
                .messages
                .iter()
                .any(|m| m.role == Role::User && m.content.is_empty()),
            "{} turn {} was sent an empty user message: {:?}",
            call.agent,
            call.turn,
            texts(&call.messages)
        );
    }
}

async fn worker_tree(script: Script, config: TreeConfig) -> (Tree, RecordingModel) {
    let model = RecordingModel::new(ScriptedModel::new().script("worker", script));
    let tree = tree(model.clone(), catalog([leaf("worker")]), config).await;
    (tree, model)
}

/// How a temporary top-level worker's first run ends before it is resumed.
#[derive(Clone, Copy, Debug)]
enum End {
    Completed,
    AbortedMidTurn,
    KilledMidTurn,
    SubtreeShutdownMidTurn,
    AbortedBeforeFirstCall,
    SteeredThenAborted,
}

/// The first run ends as `end`; `Tree::resume(id, "more")` must see `expected` then answer.
async fn resume_after(end: End, journal: Option<&TempDir>) {
    // An agent aborted before its first model call never took the script's first turn: its
    // resumed run takes it.
    let script = match end {
        End::Completed => Script::new([Turn::answer("one"), Turn::answer("two")]),
        End::AbortedBeforeFirstCall => Script::new([Turn::answer("two")]),
        _ => Script::new([Turn::hang(), Turn::answer("two")]),
    };
    let model = RecordingModel::new(ScriptedModel::new().script("worker", script));
    let mut builder = Tree::builder()
        .catalog(catalog([leaf("worker")]))
        .model(model.clone());
    if let Some(dir) = journal {
        builder = builder.journal(JournalConfig::new(dir.file("j")));
    }
    let tree = builder.build().await.expect("builds");
    let mut all = tree.subscribe();
    let mut handle = spawn_admitted(&tree, SpawnRequest::new("worker", "task")).await;
    let id = handle.id();
    if !matches!(end, End::AbortedBeforeFirstCall) {
        bounded("first call", model.until_calls(id, 1)).await;
    }
    match end {
        End::Completed => {}
        End::AbortedMidTurn | End::AbortedBeforeFirstCall => tree.abort(id).unwrap(),
        End::KilledMidTurn => tree.kill(id).unwrap(),
        End::SubtreeShutdownMidTurn => {
            bounded("subtree shutdown", tree.shutdown_agent(id))
                .await
                .unwrap();
        }
        End::SteeredThenAborted => {
            let receipt = tree.steer(id, STEER).await;
            assert!(
                matches!(receipt, Ok(SteerReceipt::Delivered)),
                "{receipt:?}"
            );
            tree.abort(id).unwrap();
        }
    }
    let outcome = bounded("first run", handle.outcome()).await;
    let mut expected = vec![u("task")];
    match end {
        End::Completed => expected.push(asst("one")),
        End::SteeredThenAborted => expected.push(u(STEER)),
        _ => assert!(!outcome.is_completed(), "{end:?}: {outcome:?}"),
    }
    expected.push(u("more"));
    let calls_before = model.count_of(id);
    if matches!(end, End::AbortedBeforeFirstCall) {
        assert_eq!(
            calls_before, 0,
            "the abort came before the first model call"
        );
    }
    let mut resumed = bounded("resume", tree.resume(id, "more"))
        .await
        .unwrap_or_else(|e| panic!("{end:?}: resume refused: {e}"));
    let second = bounded("resumed run", resumed.outcome()).await;
    let calls = model.calls_of(id);
    assert_eq!(calls.len(), calls_before + 1, "{end:?}");
    assert_eq!(
        texts(&calls.last().unwrap().messages),
        expected,
        "{end:?} (journal {}): the resumed run's conversation",
        journal.is_some()
    );
    assert_eq!(second.text.as_deref(), Some("two"), "{end:?}: {second:?}");
    bounded("shutdown", tree.shutdown()).await;
    assert_folds(&tree, &all.drain(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_temporary_agent_resumed_after_completing_sees_its_task() {
    resume_after(End::Completed, None).await;
}

#[tokio::test(start_paused = true)]
async fn a_temporary_agent_resumed_after_an_abort_mid_turn_sees_its_task() {
    resume_after(End::AbortedMidTurn, None).await;
}

#[tokio::test(start_paused = true)]
async fn a_temporary_agent_resumed_after_a_kill_mid_turn_sees_its_task() {
    resume_after(End::KilledMidTurn, None).await;
}

#[tokio::test(start_paused = true)]
async fn a_temporary_agent_resumed_after_a_subtree_shutdown_sees_its_task() {
    resume_after(End::SubtreeShutdownMidTurn, None).await;
}

#[tokio::test(start_paused = true)]
async fn a_temporary_agent_aborted_before_its_first_call_resumed_sees_its_task() {
    resume_after(End::AbortedBeforeFirstCall, None).await;
}

#[tokio::test(start_paused = true)]
async fn a_delivered_steer_is_kept_for_the_resume_after_an_abort() {
    resume_after(End::SteeredThenAborted, None).await;
}

/// Journaled (conversations dropped from memory at settle, read back on resume).
#[tokio::test(start_paused = true)]
async fn journaled_resumes_read_the_right_conversation() {
    for end in [
        End::Completed,
        End::AbortedMidTurn,
        End::SubtreeShutdownMidTurn,
        End::SteeredThenAborted,
    ] {
        let dir = TempDir::new("temporary_resume");
        resume_after(end, Some(&dir)).await;
    }
}

/// A temporary `inherit_context` child, resumed by its owner's `Agent` call: its resumed
/// run's first call is its first run's conversation (inherited context and task included),
/// its answer, then the new prompt.
#[tokio::test(start_paused = true)]
async fn an_inheriting_temporary_child_resumed_by_its_owner_keeps_context_and_task() {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn("kid", "kid task"),
                Turn::calls([resume_call("a2", "again")]),
                Turn::answer("boss done"),
            ],
        )
        .script("kid", [Turn::answer("kid one"), Turn::answer("kid two")]);
    let model = RecordingModel::new(scripted);
    let tree = tree(
        model.clone(),
        catalog([
            delegator("boss", &["kid"]),
            leaf("kid").with_inherit_context(true),
        ]),
        TreeConfig::default(),
    )
    .await;
    let mut all = tree.subscribe();
    let outcome = bounded(
        "boss",
        run_admitted(&tree, SpawnRequest::new("boss", "boss task")),
    )
    .await;
    assert_eq!(outcome.text.as_deref(), Some("boss done"), "{outcome:?}");
    let kid = model.calls_of(a(2));
    assert_eq!(kid.len(), 2);
    let first = texts(&kid[0].messages);
    assert!(
        first.contains(&u("boss task")) && first.last() == Some(&u("kid task")),
        "the first run inherits: {first:?}"
    );
    let mut expected = first.clone();
    expected.extend([asst("kid one"), u("again")]);
    assert_eq!(
        texts(&kid[1].messages),
        expected,
        "the resumed run's conversation"
    );
    no_empty_task(&model);
    bounded("shutdown", tree.shutdown()).await;
    assert_folds(&tree, &all.drain(), 0);
}

/// A boss under `strategy` spawns (background, in this order) a temporary `temp` before and
/// a permanent `perm` after... or the reverse: `perm` fails once. The plan stops and
/// releases `temp` (one model call, never another with an empty task) and restarts `perm`
/// with its task.
async fn strategy_with_temporary_sibling(strategy: Strategy, temp_first: bool) {
    let (temp, perm) = (
        Call::spawn_background("temp", "temp task"),
        Call::spawn_background("perm", "perm task"),
    );
    let spawns = if temp_first {
        [temp, perm]
    } else {
        [perm, temp]
    };
    let scripted = ScriptedModel::new()
        .script("boss", [Turn::calls(spawns), Turn::hang()])
        .script("temp", [Turn::hang(), Turn::answer("temp again")])
        .script(
            "perm",
            [
                Turn::fail("boom").after(ms(5)),
                Turn::answer("perm ok"),
                Turn::answer("perm ok"),
            ],
        );
    let model = RecordingModel::new(scripted);
    let tree = tree(
        model.clone(),
        catalog([
            delegator("boss", &["temp", "perm"]).with_supervision(strategy, 5, 60_000),
            leaf("temp"),
            leaf("perm").with_restart(RestartPolicy::Transient),
        ]),
        TreeConfig::default(),
    )
    .await;
    let mut all = tree.subscribe();
    tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    let (temp_id, perm_id) = if temp_first {
        (a(2), a(3))
    } else {
        (a(3), a(2))
    };
    bounded("perm restarted", model.until_calls(perm_id, 2)).await;
    bounded("perm settles", async {
        tree.handle(perm_id).unwrap().outcome().await
    })
    .await;
    let what = format!("{strategy:?}, temp first {temp_first}");
    let perm = model.calls_of(perm_id);
    assert_eq!(
        texts(&perm[1].messages),
        [u("perm task")],
        "{what}: the restarted transient child's task"
    );
    let temp_record = tree.record(temp_id).unwrap();
    let stopped = strategy == Strategy::OneForAll || !temp_first;
    if stopped {
        assert!(
            temp_record.status.is_terminal(),
            "{what}: temp released: {:?}",
            temp_record.status
        );
        assert_eq!(temp_record.incarnation, 1, "{what}: temp never restarted");
    }
    assert_eq!(
        model.count_of(temp_id),
        1,
        "{what}: temp called the model again"
    );
    no_empty_task(&model);
    bounded("shutdown", tree.shutdown()).await;
    let events = all.drain();
    assert_eq!(restarts(&events), [(perm_id, 2)], "{what}");
    assert_folds(&tree, &events, 0);
}

#[tokio::test(start_paused = true)]
async fn one_for_all_releases_a_temporary_sibling_and_restarts_with_the_task() {
    strategy_with_temporary_sibling(Strategy::OneForAll, true).await;
    strategy_with_temporary_sibling(Strategy::OneForAll, false).await;
}

#[tokio::test(start_paused = true)]
async fn rest_for_one_releases_a_later_temporary_sibling() {
    strategy_with_temporary_sibling(Strategy::RestForOne, true).await;
    strategy_with_temporary_sibling(Strategy::RestForOne, false).await;
}

/// A temporary background top-level agent queued behind a full pool keeps its whole spec:
/// started later from the pool, it gets its prompt.
#[tokio::test(start_paused = true)]
async fn a_queued_temporary_agent_started_later_gets_its_prompt() {
    let (tree, model) = worker_tree(
        Script::new([Turn::hang(), Turn::hang()]),
        TreeConfig::default().with_max_concurrent(1),
    )
    .await;
    let mut all = tree.subscribe();
    let first = spawn_admitted(&tree, SpawnRequest::new("worker", "job 1").background()).await;
    let mut second = spawn_admitted(&tree, SpawnRequest::new("worker", "job 2").background()).await;
    bounded("a1 calls", model.until_calls(first.id(), 1)).await;
    assert_eq!(
        tree.record(second.id()).unwrap().status,
        AgentStatus::Queued
    );
    tree.abort(first.id()).unwrap();
    // The pool starts a2 once a1 has ended, with its task.
    bounded("a2 calls", model.until_calls(second.id(), 1)).await;
    let calls = model.calls_of(second.id());
    assert_eq!(texts(&calls[0].messages), [u("job 2")]);
    tree.abort(second.id()).unwrap();
    let aborted = bounded("a2", second.outcome()).await;
    assert!(!aborted.is_completed(), "{aborted:?}");
    bounded("shutdown", tree.shutdown()).await;
    assert_folds(&tree, &all.drain(), 0);
}
