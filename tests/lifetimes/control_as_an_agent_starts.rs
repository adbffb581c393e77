//! What is sent to an agent as it starts is handled before its first model call is acted
//! on: an abort, a kill, a shutdown, a steer, and an owner's abort or steer, sent right after
//! the spawn returned, hold the rules whatever the order:
//!
//! * no model call after an abort the agent could see first, and no spawn by an agent
//!   aborted before its first call;
//! * usage billed exactly once per call that returned;
//! * nothing after a terminal event, and exactly one terminal event per agent;
//! * a steer accepted is read by a later turn; a steer refused is in no conversation;
//! * the records fold from the events.
//!
//! Paused-time tests are deterministic (one message order: what is sent right after
//! `Tree::spawn` returns is in the mailbox before the actor's `post_start` runs); `_mt` tests
//! loop on two worker threads, every wait bounded.

use std::collections::HashMap;
use std::sync::Arc;

use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, Event, Role};
use agent_tree::testkit::{Call, CallEnd, ModelCall, ScriptedModel, Target, Turn};
use agent_tree::{ABORT_TOOL, ControlError, HookContext, HookError, SteerReceipt};
use parking_lot::Mutex;
use serde_json::json;

use crate::races_mt::{assert_folds, bounded};
use crate::support::lifetimes::{ms, steers_of as steered};
use crate::support::scripts::background_spawns;
use crate::support::{
    RecordingModel, TreeCell, build_tree, catalog, delegator, leaf, spawn_admitted,
};

/// What every scripted turn that returns reports.
const U: Usage = Usage::tokens(7, 3);

const STEER: &str = "mind the edge case";

/// `lead` spawns two background `kid`s in its first turn, then hangs; kids hang.
fn lead_and_kids() -> ScriptedModel {
    ScriptedModel::new()
        .script(
            "lead",
            [
                background_spawns([("kid", "one"), ("kid", "two")]).usage(U),
                Turn::hang(),
            ],
        )
        .script("kid", [Turn::hang()])
}

type Hooks = Arc<Mutex<HashMap<AgentId, u32>>>;

/// A tree of `lead` and `kid` whose shutdown hook counts its runs per agent (and yields).
async fn lead_tree(model: &ScriptedModel) -> (Tree, Hooks) {
    let hooks = Hooks::default();
    let counted = hooks.clone();
    let tree = Tree::builder()
        .catalog(catalog([delegator("lead", &["kid"]), leaf("kid")]))
        .model(model.clone())
        .on_shutdown(move |ctx: HookContext| {
            *counted.lock().entry(ctx.agent).or_default() += 1;
            async move {
                tokio::task::yield_now().await;
                Ok::<(), HookError>(())
            }
        })
        .build()
        .await
        .expect("builds");
    (tree, hooks)
}

/// A [`lead_tree`] of `model`, its event stream, and `lead` spawned on it with the task `go`.
async fn lead_started(
    model: &ScriptedModel,
) -> (Tree, Hooks, agent_tree::EventStream, AgentHandle) {
    let (tree, hooks) = lead_tree(model).await;
    let all = tree.subscribe();
    let lead = spawn_admitted(&tree, SpawnRequest::new("lead", "go")).await;
    (tree, hooks, all, lead)
}

/// A tree of one `worker` leaf on a clone of `model`.
async fn worker_tree(model: &ScriptedModel) -> Tree {
    build_tree(catalog([leaf("worker")]), model.clone()).await
}

/// Everything a run must hold whatever the order: the snapshot's sums; each agent billed `U`
/// once per call that returned, never more, never less; exactly one terminal event per agent
/// and none of its events after it; the records are the fold of the events.
fn check(tree: &Tree, events: &[Event], calls: &[ModelCall], run: u32) {
    let snapshot = tree.snapshot();
    if let Err(mismatch) = snapshot.check_usage() {
        panic!("run {run}: {mismatch:?}\n{}", snapshot.render_text());
    }
    for record in snapshot.agents() {
        let returned = calls
            .iter()
            .filter(|c| c.agent == record.id && c.end == CallEnd::Returned)
            .count() as u64;
        let expected = Usage::tokens(U.input_tokens * returned, U.output_tokens * returned);
        assert_eq!(
            record.own, expected,
            "run {run}: {} billed for {returned} returned calls",
            record.id
        );
        let mine: Vec<&Event> = events.iter().filter(|e| e.agent == record.id).collect();
        let terminals: Vec<&&Event> = mine
            .iter()
            .filter(|e| e.kind.terminal_status().is_some())
            .collect();
        assert_eq!(terminals.len(), 1, "run {run}: terminals {terminals:?}");
        let last = mine.last().expect("it has events");
        assert_eq!(
            last.seq, terminals[0].seq,
            "run {run}: {} announced {:?} after its terminal event",
            record.id, last.kind
        );
    }
    assert_folds(tree, events, run);
}

/// Waits for `lead` to end for `reason` (checked, naming `run`), then for the tree to idle.
async fn ends_then_idle(tree: &Tree, lead: &mut AgentHandle, reason: EndReason, run: u32) {
    let outcome = bounded("the lead", lead.outcome()).await;
    assert_eq!(outcome.reason, reason, "run {run}: {outcome:?}");
    bounded("idle", tree.idle()).await;
}

/// After the tree's shutdown: no actor alive, and [`check`].
fn check_nothing_alive(tree: &Tree, events: &[Event], calls: &[ModelCall], run: u32) {
    assert!(tree.alive_actors().is_empty(), "run {run}");
    check(tree, events, calls, run);
}

fn carries_steer(call: &ModelCall) -> bool {
    call.messages
        .iter()
        .any(|m| m.role == Role::User && m.content == STEER)
}

// ---------------------------------------------------------------------------------------
// Paused time, one thread: the message sent right after `Tree::spawn` returns is in the
// mailbox before the actor's `post_start` runs.
// ---------------------------------------------------------------------------------------

/// A steer sent right after the spawn, to an agent whose first turn answers at once: the
/// agent's session exists and its first turn has not been acted on, so the steer is
/// delivered and read by its second turn (one `steered` event). The `Steer` already in the
/// actor's mailbox is handled before the first turn's final answer settles the run.
// regression: a first turn polled and acted on inside `post_start` refused this steer.
#[tokio::test(start_paused = true)]
async fn a_steer_sent_before_an_immediate_first_turn_is_read() {
    steer_before_first_turn(false).await;
}

/// As above, the first turn answering after 5 ms (virtual).
#[tokio::test(start_paused = true)]
async fn a_steer_sent_before_a_delayed_first_turn_is_read() {
    steer_before_first_turn(true).await;
}

async fn steer_before_first_turn(delayed: bool) {
    let first = Turn::answer("first").usage(U);
    let model = ScriptedModel::new().script(
        "worker",
        [
            if delayed { first.after(ms(5)) } else { first },
            Turn::answer("second").usage(U),
        ],
    );
    let tree = worker_tree(&model).await;
    let mut all = tree.subscribe();
    let mut worker = spawn_admitted(&tree, SpawnRequest::new("worker", "go")).await;
    let receipt = tree.steer(worker.id(), STEER).await;
    let outcome = bounded("the worker", worker.outcome()).await;
    tree.shutdown().await;
    let events = all.drain();
    check(&tree, &events, &model.log(), 0);
    assert!(
        matches!(receipt, Ok(SteerReceipt::Delivered)),
        "a steer sent before the first poll of the first turn was refused: {receipt:?} \
         (model calls {}, outcome {outcome:?})",
        model.calls_by(worker.id())
    );
    let calls = model.log_of(worker.id());
    assert_eq!(calls.len(), 2, "the steer gets one more turn");
    assert!(carries_steer(&calls[1]), "the second turn reads the steer");
    assert_eq!(steered(&events, worker.id()), 1);
    assert_eq!(outcome.text.as_deref(), Some("second"));
}

/// The application aborts, kills or shuts down a lead right after its spawn returned: the
/// actor checks its token (or ractor its signal) before the first poll, so the lead never
/// calls the model and never spawns, and it settles as the control says.
#[tokio::test(start_paused = true)]
async fn control_right_after_spawn_comes_before_the_first_model_call() {
    for control in ["abort", "kill", "shutdown", "shutdown_agent"] {
        let model = lead_and_kids();
        let (tree, hooks, mut all, mut lead) = lead_started(&model).await;
        let id = lead.id();
        let mut report = None;
        match control {
            "abort" => tree.abort(id).expect("the lead is live"),
            "kill" => tree.kill(id).expect("the lead's actor runs"),
            "shutdown" => report = Some(bounded("the shutdown", tree.shutdown()).await),
            _ => report = bounded("the shutdown", tree.shutdown_agent(id)).await.ok(),
        }
        let outcome = bounded("the lead", lead.outcome()).await;
        let expected = match control {
            "abort" => EndReason::Aborted,
            "kill" => EndReason::Killed,
            _ => EndReason::Shutdown,
        };
        assert_eq!(outcome.reason, expected, "{control}: {outcome:?}");
        assert_eq!(model.calls_by(id), 0, "{control}: the lead's model calls");
        assert_eq!(tree.snapshot().agents().count(), 1, "{control}: its kids");
        if let Some(report) = report {
            assert!(report.killed.is_empty(), "{control}: {report:?}");
            assert_eq!(hooks.lock().get(&id), Some(&1), "{control}: its hook runs");
        }
        if control != "shutdown" {
            tree.shutdown().await;
        }
        assert!(tree.alive_actors().is_empty(), "{control}");
        check(&tree, &all.drain(), &model.log(), 0);
    }
}

/// An owner aborts the child it has just started, from inside its own next model call (so
/// before the child's actor can run, on this one thread): the child makes no model call after
/// the abort, and if it had made none, it never spawns its own child.
#[tokio::test(start_paused = true)]
async fn a_child_aborted_by_its_owner_as_it_starts_makes_no_model_call_after_it() {
    let scripted = ScriptedModel::new()
        .script(
            "lead",
            [Turn::spawn_background("mid", "go").usage(U), Turn::hang()],
        )
        .script(
            "mid",
            [Turn::spawn_background("kid", "go").usage(U), Turn::hang()],
        )
        .script("kid", [Turn::hang()]);
    let cell = TreeCell::new();
    let at_abort: Arc<Mutex<Option<usize>>> = Arc::default();
    let mid = AgentId::new(2);
    let model = RecordingModel::new(scripted.clone()).with_hook({
        let (cell, at_abort, scripted) = (cell.clone(), at_abort.clone(), scripted.clone());
        move |request| {
            if request.agent_type() == "lead" && request.turn == 2 {
                let tree = cell.get().expect("the tree lives");
                tree.abort(mid).expect("mid is live");
                *at_abort.lock() = Some(scripted.calls_by(mid));
            }
            None
        }
    });
    let tree = Arc::new(
        build_tree(
            catalog([
                delegator("lead", &["mid"]),
                delegator("mid", &["kid"]),
                leaf("kid"),
            ]),
            model,
        )
        .await,
    );
    cell.set(&tree);
    let mut all = tree.subscribe();
    let lead = spawn_admitted(&tree, SpawnRequest::new("lead", "go")).await;
    let mut mid_handle = bounded("mid's admission", async {
        loop {
            if let Some(handle) = tree.handle(mid) {
                break handle;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    let outcome = bounded("mid", mid_handle.outcome()).await;
    assert_eq!(outcome.reason, EndReason::Aborted, "{outcome:?}");
    let before = at_abort.lock().expect("the lead's second turn aborted mid");
    eprintln!("mid's model calls when its owner aborted it: {before}");
    assert_eq!(
        scripted.calls_by(mid),
        before,
        "mid's calls after its abort"
    );
    if before == 0 {
        assert_eq!(tree.snapshot().agents().count(), 2, "mid spawned after it");
    }
    tree.abort(lead.id()).expect("the lead is live");
    bounded("idle", tree.idle()).await;
    tree.shutdown().await;
    check(&tree, &all.drain(), &scripted.log(), 0);
}

// ---------------------------------------------------------------------------------------
// Worker threads: the control races the actor's `post_start` (and its first poll).
// ---------------------------------------------------------------------------------------

/// `Tree::abort` right after the spawn: the lead ends aborted, every kid it got to spawn is
/// aborted, a kid exists only if the lead's first call returned, and billing is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_right_after_spawn_reaches_every_kid_and_bills_exactly_mt() {
    for run in 0..100u32 {
        let model = lead_and_kids();
        let (tree, _, mut all, mut lead) = lead_started(&model).await;
        tree.abort(lead.id()).expect("the lead is live");
        ends_then_idle(&tree, &mut lead, EndReason::Aborted, run).await;
        let snapshot = tree.snapshot();
        let kids: Vec<_> = snapshot
            .agents()
            .filter(|r| r.agent_type == "kid")
            .collect();
        let lead_calls = model.log_of(lead.id());
        assert!(lead_calls.len() <= 2, "run {run}: {lead_calls:?}");
        if !kids.is_empty() {
            assert_eq!(lead_calls[0].end, CallEnd::Returned, "run {run}");
        }
        for kid in kids {
            assert_eq!(kid.status, AgentStatus::Aborted, "run {run}: {kid:?}");
            assert!(model.calls_by(kid.id) <= 1, "run {run}");
        }
        tree.shutdown().await;
        check_nothing_alive(&tree, &all.drain(), &model.log(), run);
    }
}

/// `Tree::kill` right after the spawn: the lead is killed (never completes), its kids with it,
/// each billed exactly what returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_right_after_spawn_takes_every_kid_and_bills_exactly_mt() {
    for run in 0..100u32 {
        let model = lead_and_kids();
        let (tree, _, mut all, mut lead) = lead_started(&model).await;
        tree.kill(lead.id()).expect("the lead's actor runs");
        ends_then_idle(&tree, &mut lead, EndReason::Killed, run).await;
        for kid in tree.snapshot().agents().filter(|r| r.agent_type == "kid") {
            assert_eq!(kid.status, AgentStatus::Killed, "run {run}: {kid:?}");
        }
        let report = bounded("the shutdown", tree.shutdown()).await;
        assert!(report.killed.len() <= 3, "run {run}: {report:?}");
        check_nothing_alive(&tree, &all.drain(), &model.log(), run);
    }
}

/// `Tree::shutdown` right after the spawn: it returns with nobody killed (nothing hangs past
/// the order), every agent settles aborted by the shutdown after its hook ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_right_after_spawn_runs_each_hook_once_and_kills_nobody_mt() {
    for run in 0..100u32 {
        let model = lead_and_kids();
        let (tree, hooks, mut all, _lead) = lead_started(&model).await;
        let report = bounded("the shutdown", tree.shutdown()).await;
        assert!(report.killed.is_empty(), "run {run}: {report:?}");
        assert!(report.hook_failures.is_empty(), "run {run}: {report:?}");
        for record in tree.snapshot().agents() {
            let reason = record.outcome.as_ref().map(|o| o.reason);
            assert_eq!(reason, Some(EndReason::Shutdown), "run {run}: {record:?}");
            assert_eq!(
                hooks.lock().get(&record.id),
                Some(&1),
                "run {run}: {}",
                record.id
            );
            assert!(model.calls_by(record.id) <= 2, "run {run}");
        }
        check_nothing_alive(&tree, &all.drain(), &model.log(), run);
    }
}

/// A steer right after the spawn, the first turn answering at once or after 1 ms: delivered,
/// it is read by the second turn (one `steered` event); refused, the run had ended (one call,
/// no `steered` event, the steer in no conversation). Never delivered and lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_right_after_spawn_is_read_or_refused_never_lost_mt() {
    let mut delivered = [0u32; 2];
    for run in 0..100u32 {
        let first = Turn::answer("first").usage(U);
        let model = ScriptedModel::new().script(
            "worker",
            [
                if run % 2 == 1 {
                    first.after(ms(1))
                } else {
                    first
                },
                Turn::answer("second").usage(U),
            ],
        );
        let tree = worker_tree(&model).await;
        let mut all = tree.subscribe();
        let mut worker = spawn_admitted(&tree, SpawnRequest::new("worker", "go")).await;
        let id = worker.id();
        let receipt = bounded("the steer", tree.steer(id, STEER)).await;
        let outcome = bounded("the worker", worker.outcome()).await;
        assert!(outcome.is_completed(), "run {run}: {outcome:?}");
        tree.shutdown().await;
        let events = all.drain();
        let calls = model.log_of(id);
        match receipt {
            Ok(SteerReceipt::Delivered | SteerReceipt::Queued) => {
                delivered[(run % 2) as usize] += 1;
                assert!(
                    calls.iter().any(carries_steer),
                    "run {run}: delivered, never read"
                );
                assert_eq!(steered(&events, id), 1, "run {run}");
                assert_eq!(outcome.text.as_deref(), Some("second"), "run {run}");
            }
            Err(ControlError::WrongStatus(_, AgentStatus::Completed)) => {
                assert_eq!(calls.len(), 1, "run {run}");
                assert!(!calls.iter().any(carries_steer), "run {run}");
                assert_eq!(steered(&events, id), 0, "run {run}");
            }
            other => panic!("run {run}: {other:?}"),
        }
        check(&tree, &events, &model.log(), run);
    }
    eprintln!("steers delivered (immediate, delayed first turn): {delivered:?} of 50 each");
}

/// A lead starts two kids, then in its next turn steers the first and aborts the second
/// while they may still be starting, then waits for the first: a `delivered` receipt means
/// the first kid's later turn reads it; the aborted kid calls the model at most once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_steering_and_aborting_kids_it_just_started_loses_no_steer_mt() {
    let mut delivered = 0;
    for run in 0..100u32 {
        let model = ScriptedModel::new()
            .script(
                "lead",
                [
                    background_spawns([("kid", "one"), ("kid", "two")]).usage(U),
                    Turn::calls([
                        Call::steer(Target::Spawned(0), STEER),
                        Call::tool(ABORT_TOOL, json!({ "agent_id": "a3" })),
                    ])
                    .usage(U),
                    Turn::calls([Call::result(Target::Spawned(0))]).usage(U),
                    // A kid's end notice arriving during an answer gets one more turn.
                    Turn::answer("lead done").usage(U),
                    Turn::answer("lead done").usage(U),
                    Turn::answer("lead done").usage(U),
                ],
            )
            .script(
                "kid",
                [
                    Turn::answer("kid first").usage(U),
                    Turn::answer("kid read").usage(U),
                ],
            );
        let (tree, _, mut all, mut lead) = lead_started(&model).await;
        let outcome = bounded("the lead", lead.outcome()).await;
        assert!(outcome.is_completed(), "run {run}: {outcome:?}");
        bounded("idle", tree.idle()).await;
        tree.shutdown().await;
        let (first, second) = (AgentId::new(2), AgentId::new(3));
        let lead_calls = model.log_of(lead.id());
        let result = lead_calls[2]
            .tool_result("call_2_0")
            .expect("the steer's result");
        let receipt = serde_json::from_str::<serde_json::Value>(&result.content)
            .ok()
            .and_then(|v| v["receipt"].as_str().map(str::to_owned));
        if !result.is_error && receipt.as_deref() == Some("delivered") {
            delivered += 1;
            let calls = model.log_of(first);
            assert!(
                calls.iter().any(carries_steer),
                "run {run}: delivered, never read"
            );
            let record = tree.record(first).expect("the first kid");
            assert_eq!(record.status, AgentStatus::Completed, "run {run}");
        }
        assert!(
            model.calls_by(second) <= 1,
            "run {run}: {:?}",
            model.log_of(second)
        );
        check(&tree, &all.drain(), &model.log(), run);
    }
    eprintln!("owner steers delivered: {delivered} of 100");
}
