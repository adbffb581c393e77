//! A run's first turn is polled as its agent starts; its result waits for the actor to act
//! on it, whatever else is in the mailbox. An abort, a steer, or a failure of that first
//! turn racing the start hold the rules:
//!
//! * an abort after the first poll keeps the turn's answer as partial output, billed once;
//! * with `max_turns 1` a steer right after the spawn is refused, never delivered and lost;
//! * a delivered steer survives a first turn that fails or panics: a resume reads it;
//! * an abort accepted right after the spawn is final: nothing restarts after it;
//! * billing equals the returned calls, nothing follows the last terminal event, and the
//!   records fold from the events.
//!
//! The paused test fixes the one message order of a current-thread runtime (the actor's
//! `post_start` and the messages already in its mailbox are handled in one poll of its task,
//! so one `yield_now` after `Tree::spawn` lets the first turn be polled and its result be
//! taken); the `_mt` tests loop the races on two worker threads.

use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, Event, EventKind, Role};
use agent_tree::testkit::{CallEnd, Script, ScriptedModel, Turn};
use agent_tree::{ControlError, SteerReceipt};

use crate::races_mt::{assert_folds, bounded};
use crate::support::{build_tree, catalog, leaf, spawn_admitted};

const U: Usage = Usage::tokens(7, 3);
const STEER: &str = "a steer sent as the agent starts";

async fn worker_tree(model: &ScriptedModel, worker: AgentDefinition) -> Tree {
    build_tree(catalog([worker]), model.clone()).await
}

/// A first turn that fails (billing `U`) in even runs and panics in odd ones.
fn failing_first_turn(run: u32) -> Turn {
    if run.is_multiple_of(2) {
        Turn::fail("boom").usage(U)
    } else {
        Turn::panic("boom")
    }
}

/// A worker's script: `first`, then three answers billing `U` each.
fn script(first: Turn) -> Script {
    Script::new([
        first,
        Turn::answer("second").usage(U),
        Turn::answer("third").usage(U),
        Turn::answer("fourth").usage(U),
    ])
}

/// Billing equals the returned calls, one terminal event per run and nothing after the
/// last, and the records fold from the events.
fn check(tree: &Tree, model: &ScriptedModel, events: &[Event], run: u32) {
    let snapshot = tree.snapshot();
    if let Err(mismatch) = snapshot.check_usage() {
        panic!("run {run}: {mismatch:?}");
    }
    for record in snapshot.agents() {
        let returned = model
            .log_of(record.id)
            .iter()
            .filter(|c| matches!(c.end, CallEnd::Returned | CallEnd::Failed))
            .count() as u64;
        // Every scripted turn that returns (answers, and failures, whose error carries its
        // usage) reports `U`, except panics.
        assert!(
            record.own.input_tokens <= U.input_tokens * returned,
            "run {run}: {} billed {:?} for {returned} returned calls",
            record.id,
            record.own
        );
        let mine: Vec<&Event> = events.iter().filter(|e| e.agent == record.id).collect();
        let last = mine.last().expect("it has events");
        assert!(
            last.kind.terminal_status().is_some(),
            "run {run}: {} announced {:?} after its last terminal event",
            record.id,
            last.kind
        );
    }
    assert_folds(tree, events, run);
}

/// The application aborts a worker after its first turn was polled in `post_start` and
/// answered at once, before the worker acted on the answer: it ends aborted, the answer kept
/// as partial output, billed once.
#[tokio::test(start_paused = true)]
async fn an_abort_after_the_first_poll_keeps_the_answer_as_partial() {
    let model = ScriptedModel::new().script("worker", script(Turn::answer("first").usage(U)));
    let tree = worker_tree(&model, leaf("worker")).await;
    let mut all = tree.subscribe();
    let mut worker = spawn_admitted(&tree, SpawnRequest::new("worker", "go")).await;
    tokio::task::yield_now().await;
    assert_eq!(model.calls_by(worker.id()), 1, "the first turn was polled");
    tree.abort(worker.id()).expect("the worker is live");
    let outcome = bounded("the worker", worker.outcome()).await;
    assert_eq!(outcome.reason, EndReason::Aborted, "{outcome:?}");
    assert_eq!(outcome.partial.as_deref(), Some("first"), "{outcome:?}");
    assert_eq!(tree.record(worker.id()).expect("record").own, U);
    tree.shutdown().await;
    check(&tree, &model, &all.drain(), 0);
}

/// `max_turns 1`: a steer sent right after the spawn, whatever the first turn does, is
/// refused (`NoTurnsLeft` while the turn is in flight, `WrongStatus` once it settled), never
/// delivered and lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_right_after_spawn_with_one_turn_is_refused_never_lost_mt() {
    for run in 0..120u32 {
        let first = match run % 3 {
            0 => Turn::answer("first").usage(U),
            1 => Turn::fail("boom").usage(U),
            _ => Turn::panic("boom"),
        };
        let model = ScriptedModel::new().script("worker", script(first));
        let tree = worker_tree(&model, leaf("worker").with_max_turns(1)).await;
        let mut all = tree.subscribe();
        let mut worker = spawn_admitted(&tree, SpawnRequest::new("worker", "go")).await;
        let id = worker.id();
        let receipt = bounded("the steer", tree.steer(id, STEER)).await;
        let outcome = bounded("the worker", worker.outcome()).await;
        tree.shutdown().await;
        let events = all.drain();
        assert!(
            matches!(
                receipt,
                Err(ControlError::NoTurnsLeft(..) | ControlError::WrongStatus(..))
            ),
            "run {run}: {receipt:?} ({outcome:?})"
        );
        assert_eq!(model.calls_by(id), 1, "run {run}");
        assert!(
            !events
                .iter()
                .any(|e| e.agent == id && matches!(e.kind, EventKind::Steered)),
            "run {run}"
        );
        check(&tree, &model, &events, run);
    }
}

/// A steer right after the spawn of a worker whose first turn fails or panics at once: a
/// `delivered` steer is never lost. The run fails; the steer stays in the conversation kept
/// for a resume, whose first call reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivered_steer_survives_a_first_turn_failure_mt() {
    let mut delivered = 0;
    for run in 0..120u32 {
        let model = ScriptedModel::new().script("worker", script(failing_first_turn(run)));
        let tree = worker_tree(&model, leaf("worker")).await;
        let mut all = tree.subscribe();
        let mut worker = spawn_admitted(&tree, SpawnRequest::new("worker", "go")).await;
        let id = worker.id();
        let receipt = bounded("the steer", tree.steer(id, STEER)).await;
        let outcome = bounded("the worker", worker.outcome()).await;
        assert_eq!(
            outcome.status,
            AgentStatus::Failed,
            "run {run}: {outcome:?}"
        );
        if matches!(receipt, Ok(SteerReceipt::Delivered | SteerReceipt::Queued)) {
            delivered += 1;
            let mut resumed = bounded("the resume", tree.resume(id, "again"))
                .await
                .expect("resumes");
            let again = bounded("the resumed run", resumed.outcome()).await;
            assert!(again.is_completed(), "run {run}: {again:?}");
            let calls = model.log_of(id);
            let last = calls.last().expect("the resumed call");
            assert!(
                last.messages
                    .iter()
                    .any(|m| m.role == Role::User && m.content == STEER),
                "run {run}: a delivered steer was lost: {:?}",
                last.messages
            );
        } else {
            assert!(
                matches!(receipt, Err(ControlError::WrongStatus(..))),
                "run {run}: {receipt:?}"
            );
        }
        tree.shutdown().await;
        check(&tree, &model, &all.drain(), run);
    }
    eprintln!("delivered: {delivered} of 120");
}

/// A transient top-level worker whose first turn fails or panics at once (so its first run
/// may end inside `post_start`'s poll) is aborted right after the spawn: whatever the order,
/// nothing restarts after the abort is accepted (an abort of a run that already settled is
/// `Ok` and changes nothing), the tree goes idle, billing is exact. An abort that lands while
/// the run is live is a fact of the exit: a run that then ends `failed` (its turn's failure
/// raced the abort) is not restarted, whatever its outcome says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_right_after_spawn_never_restarts_mt() {
    for run in 0..120u32 {
        let model = ScriptedModel::new().script("worker", script(failing_first_turn(run)));
        let tree = worker_tree(
            &model,
            leaf("worker").with_restart(RestartPolicy::Transient),
        )
        .await;
        let mut all = tree.subscribe();
        let mut worker = spawn_admitted(&tree, SpawnRequest::new("worker", "go")).await;
        let id = worker.id();
        tree.abort(id).expect("the worker exists");
        // Everything after this sequence number happened after the abort was accepted.
        let accepted = tree.snapshot().tally.total();
        let outcome = bounded("the worker", worker.outcome()).await;
        bounded("idle", tree.idle()).await;
        tree.shutdown().await;
        let events = all.drain();
        let restarts = events
            .iter()
            .filter(|e| e.seq > accepted && matches!(e.kind, EventKind::Restarted { .. }))
            .count();
        assert_eq!(
            restarts, 0,
            "run {run}: restarted after the abort: {outcome:?}"
        );
        check(&tree, &model, &events, run);
    }
}
