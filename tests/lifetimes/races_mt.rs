//! Lifecycle interactions on worker threads, many times: a paused current-thread test fixes
//! one message order, these let the order vary. Each loop checks the outcome every time and
//! that the event stream folds to the snapshot.

use std::sync::Arc;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{Event, EventKind, Fold, Role, Strategy};
use agent_tree::testkit::{Call, ScriptedModel, Turn};

use crate::support::{
    RecordingModel, build_tree, catalog, delegator, leaf, read_result_call, run_admitted,
    spawn_admitted,
};

/// Real time: a loop iteration that does not finish in this long has hung.
pub(crate) const REAL_GUARD: Duration = Duration::from_secs(10);

pub(crate) async fn bounded<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(REAL_GUARD, future)
        .await
        .unwrap_or_else(|_| panic!("{what} hung"))
}

/// Folds `events` and compares with the tree's records.
pub(crate) fn assert_folds(tree: &Tree, events: &[Event], run: u32) {
    let snapshot = tree.snapshot();
    let mut fold = Fold::new();
    for event in events.iter().filter(|e| e.seq <= snapshot.tally.total()) {
        fold.apply(event)
            .unwrap_or_else(|e| panic!("run {run}: {e}"));
    }
    let recorded: Vec<_> = snapshot.records.iter().map(|r| (**r).clone()).collect();
    assert_eq!(fold.records(), &recorded[..], "run {run}");
}

/// A tree on `model` of a `sup` (one-for-one, at most `max_restarts` in 5 s) over a
/// transient `child`.
async fn supervisor_of_a_transient_child(model: ScriptedModel, max_restarts: u32) -> Tree {
    build_tree(
        catalog([
            delegator("sup", &["child"]).with_supervision(Strategy::OneForOne, max_restarts, 5_000),
            leaf("child").with_restart(RestartPolicy::Transient),
        ]),
        model,
    )
    .await
}

/// `sup` run on `tree` with the task `go`, to its end (bounded, `what` naming it).
async fn run_sup(tree: &Tree, what: &str) -> Outcome {
    bounded(what, run_admitted(tree, SpawnRequest::new("sup", "go"))).await
}

/// A tree of a `boss` over a `worker` leaf on `recorder`, and its event stream, where `boss`
/// ran with the task `go` and completed (checked, naming `run`): its handle and outcome.
async fn boss_run_to_completion(
    recorder: &RecordingModel,
    run: u32,
) -> (Tree, agent_tree::EventStream, AgentHandle, Outcome) {
    let tree = build_tree(
        catalog([delegator("boss", &["worker"]), leaf("worker")]),
        recorder.clone(),
    )
    .await;
    let all = tree.subscribe();
    let mut boss = spawn_admitted(&tree, SpawnRequest::new("boss", "go")).await;
    let outcome = bounded("the boss", boss.outcome()).await;
    assert!(outcome.is_completed(), "run {run}: {outcome:?}");
    (tree, all, boss, outcome)
}

/// A transient child fails twice and then completes: two restarts, whatever the order of
/// its notices, its owner's wait and ractor's termination events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_on_worker_threads() {
    for run in 0..100 {
        let model = ScriptedModel::new()
            .script(
                "sup",
                [Turn::spawn("child", "go"), Turn::answer("sup done")],
            )
            .script(
                "child",
                [
                    Turn::fail("first"),
                    Turn::panic("second"),
                    Turn::answer("third time"),
                ],
            );
        let tree = supervisor_of_a_transient_child(model, 5).await;
        let mut events = tree.subscribe();
        let outcome = run_sup(&tree, "the supervisor").await;
        assert!(outcome.is_completed(), "run {run}: {outcome:?}");
        bounded("idle", tree.idle()).await;
        let child = tree.record(AgentId::new(2)).expect("child");
        assert_eq!(
            (child.status, child.incarnation),
            (AgentStatus::Completed, 3),
            "run {run}"
        );
        tree.shutdown().await;
        assert_folds(&tree, &events.drain(), run);
    }
}

/// A transient child killed while its turn hangs is restarted by its owner and completes
/// (a kill is a failure for `transient`; a completion is not restarted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_transient_child_restarts_on_worker_threads() {
    for run in 0..100 {
        // The child's first incarnation hangs, its second answers: chosen by incarnation,
        // not by the script's cursor, so the order the two runs reach the model in (a
        // preempted first call can be overtaken) does not matter.
        let model = RecordingModel::new(
            ScriptedModel::new()
                .script(
                    "sup",
                    [Turn::spawn("child", "go"), Turn::answer("sup done")],
                )
                .script("child", [Turn::hang(), Turn::hang()]),
        )
        .with_hook(|request| {
            (request.agent_type() == "child" && request.incarnation == 2)
                .then(|| Ok(agent_tree::ModelResponse::text("back again")))
        });
        let tree = Arc::new(
            build_tree(
                catalog([
                    delegator("sup", &["child"]),
                    leaf("child").with_restart(RestartPolicy::Transient),
                ]),
                model.clone(),
            )
            .await,
        );
        let mut all = tree.subscribe();
        let mut sup = spawn_admitted(&tree, SpawnRequest::new("sup", "go")).await;
        let child = AgentId::new(2);
        // The child hangs in its first model call: kill it there.
        bounded("the child's model call", model.until_calls(child, 1)).await;
        tree.kill(child).expect("the child's actor runs");
        let outcome = match tokio::time::timeout(REAL_GUARD, sup.outcome()).await {
            Ok(outcome) => outcome,
            Err(_) => panic!(
                "run {run}: the supervisor hung\n{}\ncalls {:?}",
                tree.snapshot().render_text(),
                model
                    .calls()
                    .iter()
                    .map(|c| (c.agent, c.incarnation, c.turn, c.end))
                    .collect::<Vec<_>>()
            ),
        };
        assert!(outcome.is_completed(), "run {run}: {outcome:?}");
        let record = tree.record(child).expect("child");
        assert_eq!(
            (record.status, record.incarnation),
            (AgentStatus::Completed, 2),
            "run {run}"
        );
        tree.shutdown().await;
        assert!(tree.alive_actors().is_empty(), "run {run}");
        assert_folds(&tree, &all.drain(), run);
    }
}

/// A top-level agent asks the application; `Tree::steer` answers whenever it lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_to_the_application_on_worker_threads() {
    for run in 0..150 {
        let model = ScriptedModel::new().script(
            "asker",
            [
                Turn::calls([crate::support::ask("which branch?")]),
                Turn::answer("asked and answered"),
            ],
        );
        // A handler that never answers: the application answers with a steer.
        let tree = Tree::builder()
            .catalog(catalog([leaf("asker")]))
            .model(model)
            .on_question(|_: agent_tree::Question| std::future::pending())
            .build()
            .await
            .expect("builds");
        let mut all = tree.subscribe();
        let mut events = tree.subscribe();
        let mut asker = spawn_admitted(&tree, SpawnRequest::new("asker", "go")).await;
        bounded("the question", async {
            loop {
                match events.next().await {
                    Some(e) if matches!(e.kind, EventKind::Asked { .. }) => break,
                    Some(_) => {}
                    None => panic!("stream ended"),
                }
            }
        })
        .await;
        let receipt = tree.steer(asker.id(), "main").await;
        assert!(receipt.is_ok(), "run {run}: {receipt:?}");
        let outcome = bounded("the asker", asker.outcome()).await;
        assert_eq!(
            outcome.text.as_deref(),
            Some("asked and answered"),
            "run {run}"
        );
        tree.shutdown().await;
        assert_folds(&tree, &all.drain(), run);
    }
}

/// A top-level question answered by the application's handler while, by turns, the
/// application also steers the asker or aborts it: on worker threads the handler's answer,
/// the steer and the abort arrive in any order. The run always ends; the question gets one
/// answer, and the handler's answer is never read as a steer (a steer sent before the
/// question was asked is a steer, read at the next turn); an abort ends the asker aborted or
/// (when the answer won) completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_handler_races_steers_and_aborts_on_worker_threads() {
    for run in 0..150u32 {
        let scripted = ScriptedModel::new().script(
            "asker",
            [
                Turn::calls([crate::support::ask("which branch?")]),
                Turn::answer("answered"),
                Turn::answer("answered again"),
            ],
        );
        let recorder = RecordingModel::new(scripted);
        let tree = Tree::builder()
            .catalog(catalog([leaf("asker")]))
            .model(recorder.clone())
            .on_question(|_: agent_tree::Question| async {
                tokio::task::yield_now().await;
                Ok("from the handler".to_owned())
            })
            .build()
            .await
            .expect("builds");
        let mut all = tree.subscribe();
        let mut asker = spawn_admitted(&tree, SpawnRequest::new("asker", "go")).await;
        let id = asker.id();
        match run % 3 {
            0 => {
                let _ = tree.steer(id, "from a steer").await;
            }
            1 => {
                let _ = tree.abort(id);
            }
            _ => {}
        }
        let outcome = bounded("the asker", asker.outcome()).await;
        let calls = recorder.calls_of(id);
        // The handler's answer is only ever a tool result, never a user message.
        assert!(
            !calls.iter().any(|c| c.has_user_message("from the handler")),
            "run {run}: the handler's answer was read as a steer"
        );
        match outcome.status {
            AgentStatus::Completed => {
                let answer = &calls[1]
                    .messages
                    .iter()
                    .rfind(|m| m.role == agent_tree::protocol::Role::Tool)
                    .expect("the ask_owner result")
                    .content;
                assert!(
                    ["from the handler", "from a steer"].contains(&answer.as_str()),
                    "run {run}: {answer}"
                );
                // A third turn only for a steer that came before the question, which the
                // handler then answered.
                if calls.len() == 3 {
                    assert_eq!(answer, "from the handler", "run {run}");
                    assert!(calls[2].has_user_message("from a steer"), "run {run}");
                    assert_eq!(outcome.text.as_deref(), Some("answered again"));
                } else {
                    assert_eq!(calls.len(), 2, "run {run}");
                    assert_eq!(outcome.text.as_deref(), Some("answered"), "run {run}");
                }
            }
            AgentStatus::Aborted => assert_eq!(run % 3, 1, "run {run}: aborted unasked"),
            other => panic!("run {run}: {other:?} {outcome:?}"),
        }
        tree.shutdown().await;
        assert_folds(&tree, &all.drain(), run);
    }
}

/// A background child that ends around its owner's last turn, on worker threads: the
/// owner always completes, and when it took one more turn, that turn read the child's
/// notice (the reason it was taken).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_end_around_its_owners_last_turn_on_worker_threads() {
    for run in 0..150u32 {
        let scripted = ScriptedModel::new()
            .script(
                "boss",
                [
                    Turn::spawn_background("worker", "w"),
                    Turn::answer("boss done"),
                    Turn::answer("boss done, with the result"),
                ],
            )
            .script("worker", [Turn::answer("worked")]);
        let recorder = RecordingModel::new(scripted);
        let (tree, mut all, boss, outcome) = boss_run_to_completion(&recorder, run).await;
        let calls = recorder.calls_of(boss.id());
        assert!(
            (2..=3).contains(&calls.len()),
            "run {run}: {} calls",
            calls.len()
        );
        tree.shutdown().await;
        if calls.len() == 3 {
            assert_eq!(outcome.text.as_deref(), Some("boss done, with the result"));
            assert!(
                calls[2]
                    .messages
                    .iter()
                    .any(|m| m.content.contains(r#""notice":"subagent_ended""#)),
                "run {run}: the extra turn read no notice"
            );
        }
        assert_folds(&tree, &all.drain(), run);
    }
}

/// A background child that ends while, or just before or after, its owner's turn asks for
/// its result (`wait_subagents` and `get_subagent_result` in turn): whichever message
/// arrives first, the owner's model never reads the result twice (a tool's answer and the
/// end notice). A wait reads it exactly once; so does a peek that found it final (else
/// the notice may bring it, or the owner's end may stop the child first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_result_reaches_its_owner_once_whatever_comes_first_on_worker_threads() {
    let wait = Call::tool("wait_subagents", serde_json::json!({ "agent_ids": ["a2"] }));
    let peek = read_result_call("a2");
    for run in 0..150u32 {
        let take = if run % 2 == 0 {
            wait.clone()
        } else {
            peek.clone()
        };
        let scripted = ScriptedModel::new()
            .script(
                "boss",
                [
                    Turn::spawn_background("worker", "w"),
                    // Its model turn is in flight while the worker ends, or it is not.
                    Turn::calls([take]).after(Duration::from_micros(u64::from(run / 2 % 5) * 300)),
                    Turn::answer("boss done"),
                    Turn::answer("boss done, noticed"),
                ],
            )
            .script(
                "worker",
                [Turn::answer("worked 42")
                    .after(Duration::from_micros(u64::from(run / 10 % 3) * 400))],
            );
        let recorder = RecordingModel::new(scripted);
        let (tree, mut all, boss, _) = boss_run_to_completion(&recorder, run).await;
        bounded("idle", tree.idle()).await;
        let calls = recorder.calls_of(boss.id());
        let last = calls.last().expect("the boss called its model");
        let seen = last
            .messages
            .iter()
            .filter(|m| m.content.contains("worked 42"))
            .count();
        let peeked_final = last
            .messages
            .iter()
            .any(|m| m.role == Role::Tool && m.content.contains("worked 42"));
        let once = run % 2 == 0 || peeked_final;
        assert!(
            seen <= 1 && (!once || seen == 1),
            "run {run}: the result reached the boss's model {seen} times: {:#?}",
            last.messages
        );
        tree.shutdown().await;
        assert_folds(&tree, &all.drain(), run);
    }
}

/// A settled top-level agent resumed at once (its actor may still be stopping) runs again
/// and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumes_on_worker_threads() {
    for run in 0..150 {
        let model =
            ScriptedModel::new().script("worker", [Turn::answer("first"), Turn::answer("second")]);
        let tree = build_tree(catalog([leaf("worker")]), model).await;
        let mut events = tree.subscribe();
        let mut first = spawn_admitted(&tree, SpawnRequest::new("worker", "go")).await;
        let outcome = bounded("the first run", first.outcome()).await;
        assert_eq!(outcome.text.as_deref(), Some("first"), "run {run}");
        // Settled: resumable at once, while its actor may still be stopping.
        let mut second = tree
            .resume(first.id(), "again")
            .await
            .unwrap_or_else(|e| panic!("run {run}: {e}"));
        let again = bounded("the second run", second.outcome()).await;
        assert_eq!(again.text.as_deref(), Some("second"), "run {run}");
        bounded("idle", tree.idle()).await;
        tree.shutdown().await;
        assert_folds(&tree, &events.drain(), run);
    }
}

/// An owner's run ends by escalation while its own model turn is in flight, on worker
/// threads: the turn is aborted (its task has no token of its own; a drop guard reports it)
/// or returns first with its usage, in either order. Whatever the order, the owner settles
/// once, the usage it recorded is in the records before its terminal event, and the stream
/// folds to the snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escalation_races_the_owners_own_turn_on_worker_threads() {
    let (mut escalated, mut completed) = (0, 0);
    for run in 0..150u64 {
        let model = ScriptedModel::new()
            .script(
                "sup",
                [
                    Turn::spawn_background("child", "go"),
                    Turn::answer("sup done")
                        .after(Duration::from_micros(run % 6 * 250))
                        .usage(Usage::tokens(1, 1)),
                ],
            )
            .script("child", [Turn::fail("boom")]);
        // No restart allowed: the child's first failure escalates.
        let tree = supervisor_of_a_transient_child(model, 0).await;
        let mut events = tree.subscribe();
        let outcome = run_sup(&tree, "the owner").await;
        match (outcome.status, outcome.reason) {
            (AgentStatus::Failed, agent_tree::protocol::EndReason::Escalated) => escalated += 1,
            (AgentStatus::Completed, _) => completed += 1,
            other => panic!("run {run}: {other:?} {outcome:?}"),
        }
        bounded("idle", tree.idle()).await;
        tree.snapshot()
            .check_usage()
            .unwrap_or_else(|e| panic!("run {run}: {e:?}"));
        tree.shutdown().await;
        let events = events.drain();
        let sup = AgentId::new(1);
        let terminal = events
            .iter()
            .position(|e| e.agent == sup && e.kind.terminal_status().is_some())
            .expect("the owner settled");
        assert!(
            !events[terminal..]
                .iter()
                .any(|e| e.agent == sup && matches!(e.kind, EventKind::UsageReported { .. })),
            "run {run}: usage after the owner's terminal event"
        );
        assert_folds(&tree, &events, run as u32);
    }
    eprintln!("escalated {escalated}, completed {completed}");
    assert!(escalated > 0, "the escalation never won the race");
}
