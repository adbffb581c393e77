//! What crosses a restart and what does not. A restart is a new run of the same agent: it
//! keeps the agent's pool slot until its exit is final, and a `fail_fast` wait over it sees
//! only the final outcome. A steer receipted `delivered` reaches the restarted run (read
//! once, or refused and never read, when it races the failure), while a question the ended
//! run asked no longer answers its owner's waits. The test kit's fault plans count runs, so a
//! resume is run 2.

use agent_tree::prelude::*;
use agent_tree::protocol::{EventKind, RestartPolicy};
use agent_tree::testkit::{FaultyModel, FnModel, ScriptedModel, Turn};

use crate::support::harness::tree;
use crate::support::lifetimes::ms;
use crate::support::races::{REAL_GUARD, bounded, yields};
use crate::support::scripts::answers_after;
use crate::support::{build_tree, catalog, leaf, spawn_admitted, within};

/// The test kit's `FaultyModel::only_in_run(1)` limits the fault added last to run 1 of each
/// agent, and a resume is a new run: "fails once, then recovers" recovers after `Tree::resume`
/// too. Only an explicit new run reopens a record, a supervisor's restart or an owner's
/// resume, and each is counted in the agent's runs (`ModelRequest::run`), while the
/// incarnation counts restarts only.
#[tokio::test(start_paused = true)]
async fn a_fault_limited_to_run_one_does_not_fire_in_a_resumed_second_run() {
    let scripted =
        ScriptedModel::new().script("w", [Turn::answer("first run"), Turn::answer("second run")]);
    let model = FaultyModel::new(scripted)
        .fail_at_turn(1, ModelError::new("injected"))
        .only_in_run(1);
    let tree = build_tree(catalog([leaf("w")]), model).await;
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    let first = within("w's first run", w.outcome()).await;
    assert_eq!(first.status, AgentStatus::Failed, "run 1 gets the fault");
    let mut resumed = tree.resume(w.id(), "try again").await.expect("resumable");
    let second = within("w's resumed run", resumed.outcome()).await;
    assert_eq!(
        second.status,
        AgentStatus::Completed,
        "the fault limited to run 1 fired in run 2 (a resume): {second:?}"
    );
    tree.shutdown().await;
}

/// A top-level background agent restarted by the root keeps its one pool slot across the
/// restart: with `max_concurrent` 1 the agent queued behind it starts only once the restarted
/// agent's exit is final, never while the restart runs.
#[tokio::test(start_paused = true)]
async fn a_restarted_pooled_agent_keeps_its_slot_until_its_exit_is_final() {
    let model = ScriptedModel::new()
        .script(
            "flaky",
            [
                Turn::fail("boom").after(ms(100)),
                Turn::answer("recovered").after(ms(100)),
            ],
        )
        .script("next", [Turn::answer("ok")]);
    let mut config = TreeConfig::default();
    config.max_concurrent = 1;
    let tree = tree(
        model,
        catalog([
            leaf("flaky").with_restart(RestartPolicy::Transient),
            leaf("next"),
        ]),
        config,
    )
    .await;
    let mut events = tree.subscribe();
    let flaky = spawn_admitted(&tree, SpawnRequest::new("flaky", "go").background()).await;
    let next = spawn_admitted(&tree, SpawnRequest::new("next", "go").background()).await;
    let outcomes = within(
        "both",
        tree.wait(&[flaky.id(), next.id()], WaitPolicy::AllSettled),
    )
    .await;
    assert!(
        outcomes.iter().all(|o| o.status == AgentStatus::Completed),
        "{outcomes:?}"
    );
    let events = events.drain();
    let flaky_done = events
        .iter()
        .position(|e| e.agent == flaky.id() && matches!(e.kind, EventKind::Completed { .. }))
        .expect("flaky completed");
    let next_started = events
        .iter()
        .position(|e| e.agent == next.id() && matches!(e.kind, EventKind::Dequeued))
        .expect("next dequeued");
    assert!(
        next_started > flaky_done,
        "next took the pool slot while flaky was restarting: {:#?}",
        events
    );
    tree.shutdown().await;
}

/// `Tree::wait` with `fail_fast` over an agent that fails and is restarted does not take the
/// restarted failure for an outcome (it is not final): the rest of the set is not aborted, and
/// both complete.
#[tokio::test(start_paused = true)]
async fn a_fail_fast_wait_spans_a_restart() {
    let model = ScriptedModel::new()
        .script(
            "flaky",
            [
                Turn::fail("boom").after(ms(10)),
                Turn::answer("recovered").after(ms(10)),
            ],
        )
        .script("slow", answers_after("slow ok", ms(500)));
    let tree = build_tree(
        catalog([
            leaf("flaky").with_restart(RestartPolicy::Transient),
            leaf("slow"),
        ]),
        model,
    )
    .await;
    let flaky = tree.spawn(SpawnRequest::new("flaky", "go")).await.unwrap();
    let slow = tree.spawn(SpawnRequest::new("slow", "go")).await.unwrap();
    let outcomes = within(
        "the set",
        tree.wait(&[flaky.id(), slow.id()], WaitPolicy::FailFast),
    )
    .await;
    assert_eq!(
        outcomes.iter().map(|o| o.status).collect::<Vec<_>>(),
        vec![AgentStatus::Completed, AgentStatus::Completed],
        "{outcomes:?}"
    );
    tree.shutdown().await;
}

/// An owner's view of an open question belongs to the run that asked it: when the asking
/// child's run ends and its supervisor restarts it, the question is closed. `kid` (transient)
/// asks `boss` a question; before the boss answers, the application kills the kid (Erlang's
/// `exit(Pid, kill)`) and the boss restarts it. The new run asks nothing and answers after
/// 2 s, so the boss's later `get_subagent_result {wait: true}` on it waits for that answer
/// (`completed`) instead of being answered `asking` with the dead run's question.
#[tokio::test(start_paused = true)]
async fn a_restarted_childs_old_question_does_not_answer_waits() {
    use agent_tree::testkit::{Call, Target};

    use crate::support::{RecordingModel, ask, delegator};

    let scripted = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::calls([Call::spawn_background("kid", "work")]),
                // Answered `asking` (the kid's question, correct).
                Turn::calls([Call::result(Target::Spawned(0))]),
                // By now the kid was killed and restarted: this wait is on its new run.
                Turn::calls([Call::result(Target::Spawned(0))]).after(ms(1_000)),
                Turn::answer("boss done"),
            ],
        )
        .script(
            "kid",
            [
                Turn::calls([ask("which colour?")]),
                Turn::answer("kid done").after(ms(2_000)),
            ],
        );
    let recorder = RecordingModel::new(scripted);
    let tree = build_tree(
        catalog([
            delegator("boss", &["kid"]),
            leaf("kid").with_restart(RestartPolicy::Transient),
        ]),
        recorder.clone(),
    )
    .await;
    let mut events = tree.subscribe();
    let mut boss = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    let kid = loop {
        let e = within("the kid's question", events.next()).await.unwrap();
        if matches!(e.kind, EventKind::Asked { .. }) {
            break e.agent;
        }
    };
    tokio::time::sleep(ms(500)).await;
    tree.kill(kid).expect("the kid's actor runs");
    let out = within("boss", boss.outcome()).await;
    assert_eq!(out.status, AgentStatus::Completed, "{out:?}");
    assert_eq!(
        tree.record(kid).unwrap().incarnation,
        2,
        "the kid was restarted once"
    );
    let calls = recorder.calls_of(boss.id());
    assert_eq!(calls.len(), 4, "boss's turns");
    let third_wait = &calls[3].results;
    let value: serde_json::Value =
        serde_json::from_str(&third_wait.last().expect("a result").content).unwrap();
    assert_eq!(
        value["status"], "completed",
        "the wait on the restarted kid was answered with its dead run's question: {value}"
    );
    tree.shutdown().await;
}

/// A steer the agent receipted `delivered` is never lost, even when the run that received it
/// fails and its supervisor restarts it: the restart keeps the `AgentId`, and a turn of the
/// new run reads the steer. `w` (top-level, transient) is steered during its first turn; that
/// turn fails, the root restarts `w`, and the restarted run sees the steer.
#[tokio::test(start_paused = true)]
async fn a_delivered_steer_survives_a_restart() {
    use crate::support::RecordingModel;

    let scripted = ScriptedModel::new().script(
        "w",
        [
            Turn::fail("connection reset").after(ms(100)),
            Turn::answer("done").after(ms(100)),
        ],
    );
    let recorder = RecordingModel::new(scripted);
    let tree = build_tree(
        catalog([leaf("w").with_restart(RestartPolicy::Transient)]),
        recorder.clone(),
    )
    .await;
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    tokio::time::sleep(ms(50)).await;
    let receipt = tree.steer(w.id(), "use the EU region").await;
    assert_eq!(receipt, Ok(agent_tree::SteerReceipt::Delivered));
    let out = within("w", w.outcome()).await;
    assert_eq!(out.status, AgentStatus::Completed, "{out:?}");
    assert_eq!(
        tree.record(w.id()).unwrap().incarnation,
        2,
        "restarted once"
    );
    let read = recorder
        .calls_of(w.id())
        .iter()
        .any(|call| call.has_user_message("use the EU region"));
    assert!(read, "the delivered steer was never read by any turn of w");
    tree.shutdown().await;
}

/// Fails every turn of an agent's first run after `delay` yields; answers every later run's
/// turns at once.
fn fail_first_run(delay: u64) -> FnModel {
    FnModel::new(move |request: ModelRequest| async move {
        if request.run > 1 {
            return Ok(ModelResponse::text("done"));
        }
        yields(delay).await;
        Err(ModelError::new("boom"))
    })
}

/// A steer racing the failure of an agent's first run, then its restart (transient) or the
/// application's resume (temporary), on two worker threads: an accepted steer (`delivered`
/// or `queued`) is read exactly once by the run that completes, and announced once; a
/// refused one never reaches a model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_racing_a_failing_run_is_read_once_or_refused_mt() {
    const STEER: &str = "use the EU region";
    let mut accepted = 0;
    for i in 0..160u64 {
        let restart = i % 2 == 0;
        let model = fail_first_run((i / 2) % 7);
        let definition = if restart {
            leaf("w").with_restart(RestartPolicy::Transient)
        } else {
            leaf("w")
        };
        let tree = build_tree(catalog([definition]), model.clone()).await;
        let mut events = tree.subscribe();
        let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
        yields(i % 5).await;
        let receipt = tree.steer(w.id(), STEER).await;
        let mut out = bounded(REAL_GUARD, "w", w.outcome()).await;
        if !restart {
            assert_eq!(out.status, AgentStatus::Failed, "{i}: {out:?}");
            let mut again = tree.resume(w.id(), "again").await.expect("resumable");
            out = bounded(REAL_GUARD, "w again", again.outcome()).await;
        }
        assert_eq!(out.status, AgentStatus::Completed, "{i}: {out:?}");
        let last = model.call_log().calls().pop().expect("a request");
        assert_eq!(last.run, 2, "{i}: the completing run");
        let read = last.messages.iter().filter(|m| m.content == STEER).count();
        let steered = events
            .drain()
            .iter()
            .filter(|e| e.agent == w.id() && matches!(e.kind, EventKind::Steered))
            .count();
        match receipt {
            Ok(_) => {
                accepted += 1;
                assert_eq!(read, 1, "{i}: an accepted steer ({receipt:?}) is read once");
                assert_eq!(steered, 1, "{i}: and announced once");
            }
            Err(_) => {
                assert_eq!(read, 0, "{i}: a refused steer ({receipt:?}) is never read");
                assert_eq!(steered, 0, "{i}");
            }
        }
        tree.shutdown().await;
    }
    assert!(accepted > 0, "no steer was accepted in any trial");
}
