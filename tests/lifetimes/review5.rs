//! Review 5: defects of the rewritten runtime core (agent phases, the child table, the call
//! table by position, the registry's fold), each shown by a test that fails on the code it was
//! written against. Each test's doc comment names the defect and the correct behaviour; the
//! few that pass cover an interaction nothing else covers and say so.
//!
//! 1. `wait_subagents` with a repeated id, or an empty set, hangs its caller (3 tests).
//! 2. A wait started on a child whose `ask_owner` question is open deadlocks owner and child.
//! 3. A killed agent whose exit awaits a restart decision is reported `graceful` by a shutdown.
//! 4. An abort or `shutdown_agent` releasing a deferred exit never reaches the owner's child
//!    table: the owner hangs (2 tests).
//! 5. A steer answering a question on the asker's last turn is receipted `delivered` unread.
//!
//! `owner_hears_of_a_child_killed_at_the_deadline_while_it_settles_mt` passes on the code it
//! was written against (150 runs): it is kept as the only test of a shutdown hook finishing
//! at the deadline of a `shutdown_agent` while the owner waits in the foreground.
//!
//! Paused-time tests are deterministic; worker-thread tests (`_mt`) loop a race and assert
//! the correct outcome every time. Every wait is bounded, so a hang fails with a message.

use agent_tree::testkit::EventProbe;
use std::sync::Arc;
use std::time::Duration;

use agent_tree::SteerReceipt;
use agent_tree::prelude::*;
use agent_tree::protocol::{EventKind, Strategy};
use agent_tree::testkit::{Call, Script, ScriptedModel, Target, Turn};
use agent_tree::{HookContext, HookError};
use serde_json::json;

use crate::support::RecordingModel;
use crate::support::harness::a;
use crate::support::lifetimes::{hanging, ms};
use crate::support::{catalog, delegator, leaf};

/// Under paused time a guard costs nothing; on worker threads it is real time.
const GUARD: Duration = Duration::from_secs(3600);
/// The bound of one wait on worker threads (real time).
const REAL_GUARD: Duration = Duration::from_secs(5);

async fn bounded<T>(
    limit: Duration,
    what: &str,
    future: impl std::future::Future<Output = T>,
) -> T {
    match tokio::time::timeout(limit, future).await {
        Ok(value) => value,
        Err(_) => panic!("hang: timed out after {limit:?} waiting for {what}"),
    }
}

async fn outcome(tree: &Tree, id: AgentId, limit: Duration) -> Outcome {
    let mut handle = tree.handle(id).expect("the agent exists");
    match tokio::time::timeout(limit, handle.outcome()).await {
        Ok(outcome) => outcome,
        Err(_) => panic!(
            "hang: {id} never settled within {limit:?}:\n{}",
            tree.snapshot().render_text()
        ),
    }
}

async fn plain_tree(model: RecordingModel, catalog: Catalog, config: TreeConfig) -> Tree {
    crate::support::harness::tree(model, catalog, config).await
}

// ---------------------------------------------------------------------------------------
// wait_subagents over the owner's child table: sets a model can write.
// ---------------------------------------------------------------------------------------

/// lead spawns one background worker (a2) that answers after 10 ms, then waits on `set`.
async fn lead_waits_on(set: serde_json::Value) -> (Tree, RecordingModel) {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                Script::new([
                    Turn::spawn_background("worker", "work"),
                    Turn::calls([Call::tool("wait_subagents", set)]),
                    Turn::answer("lead done"),
                ]),
            )
            .script(
                "worker",
                Script::new([Turn::answer("worker done").after(ms(10))]),
            ),
    );
    let tree = plain_tree(
        model.clone(),
        catalog([delegator("lead", &["worker"]), leaf("worker")]),
        TreeConfig::default(),
    )
    .await;
    (tree, model)
}

/// Defect: `wait_subagents` naming the same child twice (`["a2", "a2"]`, which a model may
/// well write) hangs its caller forever. The agent-side set wait fills only the first
/// position of a repeated id (`answer_waits_on` uses `position`), so the set is never
/// complete. `Tree::wait` (the registry's `wait_set`) answers such a set. Correct: the call
/// is answered once the child settles, with its outcome at both positions (or refused).
#[tokio::test(start_paused = true)]
async fn wait_subagents_with_a_repeated_id_does_not_hang() {
    let (tree, model) = lead_waits_on(json!({ "agent_ids": ["a2", "a2"] })).await;
    let lead = tree
        .spawn(SpawnRequest::new("lead", "go"))
        .await
        .expect("admitted")
        .id();
    let got = outcome(&tree, lead, GUARD).await;
    assert!(got.is_completed(), "{got:?}");
    assert_eq!(model.count_of(lead), 3, "the lead read the set's result");
    tree.shutdown().await;
}

/// The same with the repeated child already settled when the wait starts (answered from the
/// table at dispatch): it must not hang either.
#[tokio::test(start_paused = true)]
async fn wait_subagents_with_a_repeated_settled_id_does_not_hang() {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                Script::new([
                    Turn::spawn_background("worker", "work"),
                    Turn::calls([Call::result(Target::Id(a(2)))]),
                    Turn::calls([Call::tool(
                        "wait_subagents",
                        json!({ "agent_ids": ["a2", "a2"], "policy": "all_settled" }),
                    )]),
                    Turn::answer("lead done"),
                ]),
            )
            .script("worker", Script::new([Turn::answer("worker done")])),
    );
    let tree = plain_tree(
        model.clone(),
        catalog([delegator("lead", &["worker"]), leaf("worker")]),
        TreeConfig::default(),
    )
    .await;
    let lead = tree
        .spawn(SpawnRequest::new("lead", "go"))
        .await
        .expect("admitted")
        .id();
    let got = outcome(&tree, lead, GUARD).await;
    assert!(got.is_completed(), "{got:?}");
    tree.shutdown().await;
}

/// Defect: `wait_subagents {"agent_ids": []}` hangs its caller forever: an empty set of own
/// children is "all own" and is answered only as a child of the set ends, which never
/// happens. `Tree::wait(&[])` returns at once. Correct: an empty set is answered at once
/// (no outcomes), or refused.
#[tokio::test(start_paused = true)]
async fn wait_subagents_with_an_empty_set_does_not_hang() {
    let (tree, model) = lead_waits_on(json!({ "agent_ids": [] })).await;
    let lead = tree
        .spawn(SpawnRequest::new("lead", "go"))
        .await
        .expect("admitted")
        .id();
    let got = outcome(&tree, lead, GUARD).await;
    assert!(got.is_completed(), "{got:?}");
    assert_eq!(model.count_of(lead), 3, "the lead read the set's result");
    tree.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// ask_owner: a wait started after the question.
// ---------------------------------------------------------------------------------------

/// Defect: a child's open `ask_owner` question answers only the waits on it that exist when
/// the question arrives. If the owner's model then waits on the asking child again
/// (`get_subagent_result {wait: true}`, a natural reaction to `{"status": "asking"}`), owner
/// and child wait on each other forever: a silent hang the contract forbids ("never a silent
/// hang"; "if the owner is waiting on that child, the wait is answered at once with
/// `asking`"). Correct: a wait on a child whose question is still open is answered at once
/// with `asking` (as `Tree`-level tools would see it), so the run goes on.
#[tokio::test(start_paused = true)]
async fn a_wait_on_a_child_with_an_open_question_does_not_deadlock() {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                Script::new([
                    Turn::spawn("worker", "work"),
                    Turn::calls([Call::result(Target::Id(a(2)))]),
                    Turn::calls([Call::steer(Target::Id(a(2)), "the answer is 42")]),
                    Turn::calls([Call::result(Target::Id(a(2)))]),
                    Turn::answer("lead done"),
                ]),
            )
            .script(
                "worker",
                Script::new([
                    Turn::calls([crate::support::ask("which number?")]),
                    Turn::answer("worker done"),
                ]),
            ),
    );
    let tree = plain_tree(
        model.clone(),
        catalog([delegator("lead", &["worker"]), leaf("worker")]),
        TreeConfig::default(),
    )
    .await;
    let lead = tree
        .spawn(SpawnRequest::new("lead", "go"))
        .await
        .expect("admitted")
        .id();
    let got = outcome(&tree, lead, GUARD).await;
    assert!(got.is_completed(), "{got:?}");
    tree.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Shutdown report: a run killed by `Tree::kill` awaiting its restart decision.
// ---------------------------------------------------------------------------------------

/// Defect: an agent killed by `Tree::kill` whose exit still awaits its supervisor's restart
/// decision (the root's `one_for_all` plan is stopping its sibling first) when a shutdown
/// begins is released by the shutdown and reported `graceful`. The semantics: the report
/// lists who was killed "by how each run ended, so an agent killed by an overlapping shutdown
/// or `Tree::kill` counts as killed". Correct: it is in `killed`, never in `graceful`
/// (`Registry::begin_shutdown` puts every released deferred exit in `settled_now`, which
/// `shutdown::classify` counts as graceful whatever the run ended with).
#[tokio::test(start_paused = true)]
async fn shutdown_reports_a_killed_agent_awaiting_restart_as_killed() {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script("flaky", hanging(4))
            .script("steady", hanging(4)),
    );
    let config = TreeConfig::default().with_root_supervision(
        Strategy::OneForAll,
        5,
        Duration::from_secs(60),
    );
    let tree = plain_tree(
        model.clone(),
        catalog([
            leaf("flaky").with_restart(RestartPolicy::Transient),
            leaf("steady"),
        ]),
        config,
    )
    .await;
    let flaky = tree
        .spawn(SpawnRequest::new("flaky", "go"))
        .await
        .expect("admitted")
        .id();
    let steady = tree
        .spawn(SpawnRequest::new("steady", "go"))
        .await
        .expect("admitted")
        .id();
    model.until_all_calls(&[flaky, steady], 1).await;
    // The shutdown begins in the task that hears flaky's `killed` event: it is woken while
    // the root handles the death, before the stopped sibling's end can come back.
    let tree = Arc::new(tree);
    let mut events = tree.subscribe();
    let stopper = {
        let tree = tree.clone();
        tokio::spawn(async move {
            loop {
                match events.next().await {
                    Some(e) if e.agent == flaky && e.kind.terminal_status().is_some() => break,
                    Some(_) => {}
                    None => panic!("the event stream closed"),
                }
            }
            // The precondition: flaky's exit awaits the root's decision (no outcome yet).
            let awaiting = tree.outcome(flaky).is_none();
            (awaiting, tree.shutdown().await)
        })
    };
    tree.kill(flaky).expect("flaky runs");
    let (awaiting, report) = bounded(GUARD, "shutdown", stopper).await.expect("no panic");
    assert!(
        awaiting,
        "precondition: flaky's killed exit awaits the root's restart decision"
    );
    assert!(
        !report.graceful.contains(&flaky),
        "defect: {flaky}, killed by Tree::kill, is reported graceful by the shutdown: {report:?}\n{}",
        tree.snapshot().render_text()
    );
    assert!(
        report.killed.contains(&flaky),
        "{flaky} was killed: {report:?}"
    );
}

// ---------------------------------------------------------------------------------------
// A child killed at a `shutdown_agent` deadline while it settles: its owner must hear.
// ---------------------------------------------------------------------------------------

/// lead (a1) waits in the foreground on worker (a2), which hangs; `shutdown_agent(a2)` with
/// a grace of `grace_ms`, and the worker's shutdown hook sleeping `hook_ms`.
async fn lead_waiting_on_a_stopping_worker(
    grace_ms: u64,
    hook_ms: u64,
) -> (Arc<Tree>, RecordingModel) {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                Script::new([Turn::spawn("worker", "work"), Turn::answer("lead done")]),
            )
            .script("worker", hanging(1)),
    );
    let tree = Tree::builder()
        .config(TreeConfig::default().with_shutdown_grace(ms(grace_ms)))
        .catalog(catalog([delegator("lead", &["worker"]), leaf("worker")]))
        .model(model.clone())
        .on_shutdown(move |ctx: HookContext| async move {
            if ctx.agent_type == "worker" {
                tokio::time::sleep(ms(hook_ms)).await;
            }
            Ok::<(), HookError>(())
        })
        .build()
        .await
        .expect("the tree builds");
    (Arc::new(tree), model)
}

/// Defect (race): when a `shutdown_agent` deadline's `kill_run` settles a child `killed` in
/// the instant the child's own settle runs (its hook finished at the deadline),
/// `AgentState::try_settle` gets `None` from `settle_run`, tells nobody, and still stops with
/// the reason `SETTLED`; if that stop is processed before the shutdown's `kill()` reaches the
/// actor, the owner's `on_supervision_event` ignores the termination (reason `SETTLED`), so
/// the child's end never reaches its owner, which waits on it forever. Correct: the owner
/// hears of the child's end exactly once whatever the interleaving (the actor should stop
/// with `SETTLED` only when its settle took, or tell its owner of the recorded end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_hears_of_a_child_killed_at_the_deadline_while_it_settles_mt() {
    const RUNS: u64 = 150;
    let mut stranded = Vec::new();
    for run in 0..RUNS {
        // The hook ends right around the deadline, varied a little.
        let grace = 20;
        let hook = 19 + run % 3;
        let (tree, model) = lead_waiting_on_a_stopping_worker(grace, hook).await;
        let lead = tree
            .spawn(SpawnRequest::new("lead", "go"))
            .await
            .expect("admitted")
            .id();
        bounded(
            REAL_GUARD,
            "the worker's first call",
            model.until_calls(a(2), 1),
        )
        .await;
        let report = bounded(REAL_GUARD, "shutdown_agent", tree.shutdown_agent(a(2)))
            .await
            .expect("the worker exists");
        let mut handle = tree.handle(lead).expect("the lead exists");
        match tokio::time::timeout(REAL_GUARD, handle.outcome()).await {
            Ok(got) => assert!(got.is_completed(), "run {run}: {got:?}"),
            Err(_) => stranded.push((
                run,
                report.killed.clone(),
                tree.record(a(2)).map(|r| r.status),
            )),
        }
        let tree = Arc::try_unwrap(tree).expect("one holder");
        bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
    }
    assert!(
        stranded.is_empty(),
        "defect: in {} of {RUNS} runs the lead never heard that its worker ended at the \
         shutdown_agent deadline (run, killed, worker status): {:?}",
        stranded.len(),
        &stranded[..stranded.len().min(8)]
    );
}

// ---------------------------------------------------------------------------------------
// An abort that lands while a child's exit awaits its owner's restart decision.
// ---------------------------------------------------------------------------------------

/// Defect: "an abort that lands while an exit awaits the decision makes it final" — the
/// registry does (`Registry::abort` releases the deferred exit), but the owner's child table
/// never learns: the child's `ChildEnded { deferred: true }` notice, already on its way,
/// marks it `Deferred` in the table, and the strategy machine, seeing it no longer awaiting
/// (`StrategyMachine::ended`: `!facts.awaiting` → `next` → `Idle`), releases nothing. The
/// child stays `Deferred` in the owner's table forever: the owner's foreground wait on it is
/// never answered and the owner never settles (`Tree::idle` hangs). Correct: the owner gets
/// the child's final `failed` outcome and completes.
#[tokio::test(start_paused = true)]
async fn an_abort_during_a_pending_restart_decision_reaches_the_owner() {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                Script::new([Turn::spawn("worker", "work"), Turn::answer("lead done")]),
            )
            .script("worker", Script::new([Turn::fail("connection reset")])),
    );
    let tree = Arc::new(
        plain_tree(
            model.clone(),
            catalog([
                delegator("lead", &["worker"]),
                leaf("worker").with_restart(RestartPolicy::Transient),
            ]),
            TreeConfig::default(),
        )
        .await,
    );
    let mut events = tree.subscribe();
    let aborter = {
        let tree = tree.clone();
        tokio::spawn(async move {
            loop {
                match events.next().await {
                    // Woken as the worker settles, before its owner reads the notice.
                    Some(e) if e.agent == a(2) && e.kind.terminal_status().is_some() => break,
                    Some(_) => {}
                    None => panic!("the event stream closed"),
                }
            }
            let awaiting = tree.outcome(a(2)).is_none();
            tree.abort(a(2)).expect("the worker exists");
            awaiting
        })
    };
    let lead = tree
        .spawn(SpawnRequest::new("lead", "go"))
        .await
        .expect("admitted")
        .id();
    let awaiting = bounded(GUARD, "the aborter", aborter)
        .await
        .expect("no panic");
    assert!(
        awaiting,
        "precondition: the worker's exit awaited the lead's decision"
    );
    let got = outcome(&tree, lead, GUARD).await;
    assert!(got.is_completed(), "{got:?}");
    bounded(GUARD, "idle", tree.idle()).await;
}

/// Defect (same cause as the test above, reached by a shutdown): `Tree::shutdown_agent` of a
/// child whose exit awaits its running owner's restart decision releases the exit in the
/// registry (`begin_shutdown`), but the owner's table keeps it `Deferred` after the notice
/// arrives, so the owner's foreground wait is never answered and the owner never settles.
/// Correct: the owner gets the child's final outcome and completes.
#[tokio::test(start_paused = true)]
async fn a_shutdown_of_a_child_awaiting_its_restart_decision_reaches_the_owner() {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                Script::new([Turn::spawn("worker", "work"), Turn::answer("lead done")]),
            )
            .script("worker", Script::new([Turn::fail("connection reset")])),
    );
    let tree = Arc::new(
        plain_tree(
            model.clone(),
            catalog([
                delegator("lead", &["worker"]),
                leaf("worker").with_restart(RestartPolicy::Transient),
            ]),
            TreeConfig::default(),
        )
        .await,
    );
    let mut events = tree.subscribe();
    let stopper = {
        let tree = tree.clone();
        tokio::spawn(async move {
            loop {
                match events.next().await {
                    Some(e) if e.agent == a(2) && e.kind.terminal_status().is_some() => break,
                    Some(_) => {}
                    None => panic!("the event stream closed"),
                }
            }
            let awaiting = tree.outcome(a(2)).is_none();
            let report = tree.shutdown_agent(a(2)).await.expect("the worker exists");
            (awaiting, report)
        })
    };
    let lead = tree
        .spawn(SpawnRequest::new("lead", "go"))
        .await
        .expect("admitted")
        .id();
    let (awaiting, _report) = bounded(GUARD, "the stopper", stopper)
        .await
        .expect("no panic");
    assert!(
        awaiting,
        "precondition: the worker's exit awaited the lead's decision"
    );
    let got = outcome(&tree, lead, GUARD).await;
    assert!(got.is_completed(), "{got:?}");
    bounded(GUARD, "idle", tree.idle()).await;
}

// ---------------------------------------------------------------------------------------
// Steer receipts: a steer answering a question on the last turn.
// ---------------------------------------------------------------------------------------

/// Defect: a steer that answers a pending `ask_owner` call is receipted `delivered` even
/// when the asker has no turn left to read it: `on_steer` checks `max_turns` only for a steer
/// that goes to the inbox, not for one that answers the question. Here a top-level worker
/// with `max_turns: 1` asks the application on its only turn; `Tree::steer` answers and gets
/// `Delivered`, and the worker then fails with `max_turns` without any model turn reading
/// the answer. The rule (`on_steer`'s own doc): "`delivered` only if a turn will read it".
/// Correct: the steer is refused (`NoTurnsLeft`), or the answer is read by a turn.
#[tokio::test(start_paused = true)]
async fn a_steer_answering_a_question_on_the_last_turn_is_not_receipted_delivered_unread() {
    let model = RecordingModel::new(ScriptedModel::new().script(
        "worker",
        Script::new([
            Turn::calls([crate::support::ask("which number?")]),
            Turn::answer("42"),
        ]),
    ));
    let tree = plain_tree(
        model.clone(),
        catalog([leaf("worker").with_max_turns(1)]),
        TreeConfig::default(),
    )
    .await;
    let mut events = EventProbe::new(&tree);
    let worker = tree
        .spawn(SpawnRequest::new("worker", "go"))
        .await
        .expect("admitted")
        .id();
    // Fixed by refusing the question itself: an `ask_owner` on the last turn `max_turns`
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
                "defect: the steer was receipted delivered, but no turn read it: the worker \
                 made {} model call(s) and ended {got:?}",
                model.count_of(worker)
            );
        }
    } else {
        assert_eq!(tree.snapshot().tally.asked, 0, "no question was asked");
    }
    tree.shutdown().await;
}
