//! The detached boundary. A child spawned `detached` (its definition says `detached`)
//! survives its owner's normal end and an ordinary abort of its owner or of an ancestor:
//! its status stays `running` and its in-flight model call is not cancelled, and it later
//! completes on its own. An explicit abort of the detached child (by the application or by
//! its owner's `abort_subagent` tool), a shutdown of its owner's subtree and a tree shutdown
//! all reach it. Its usage still bills up to its owner and every ancestor. A detached child
//! resumed by a later run of its owner stays detached. A detached child's question racing the
//! end of its owner's run, and the owner's resume, is answered or refused, never left waiting.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, Message, Role};
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use agent_tree::{ABORT_TOOL, EventStream};
use serde_json::json;

use crate::support::harness::{a, tree};
use crate::support::lifetimes::{hanging, ms};
use crate::support::scripts::background_spawns;
use crate::support::{
    CallEnd, RecordingModel, WAIT_LIMIT, build_tree, catalog, delegator, delegator_of_all, leaf,
    spawn_admitted, terminal_event, within,
};

const LATER: Duration = Duration::from_secs(10);

fn spawns() -> Turn {
    background_spawns([("worker", "attached work"), ("drifter", "detached work")])
        .usage(Usage::tokens(3, 3))
}

/// boss (a1) → lead (a2) → attached worker (a3) and detached worker (a4). The lead's
/// second turn is `lead_then`; the detached worker spends usage, then answers after 10 s.
async fn setup(lead_then: Vec<Turn>) -> (Tree, RecordingModel, EventStream) {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn_background("lead", "lead the work"),
                Turn::hang(),
            ],
        )
        .script(
            "lead",
            Script::new(std::iter::once(spawns()).chain(lead_then)),
        )
        .script("worker", hanging(2))
        .script("drifter", hanging(2));
    scripted.script_agent(
        a(4),
        Script::new([
            Turn::calls([Call::tool("noop", json!({}))]).usage(Usage::tokens(5, 5)),
            Turn::answer("detached done")
                .usage(Usage::tokens(1, 1))
                .after(LATER),
        ]),
    );
    let model = RecordingModel::new(scripted);
    let tree = tree(
        model.clone(),
        catalog([
            delegator("boss", &["lead"]),
            delegator("lead", &["worker", "drifter"]),
            leaf("worker"),
            leaf("drifter").detached(),
        ]),
        TreeConfig::default(),
    )
    .await;
    let events = tree.subscribe();
    spawn_admitted(&tree, SpawnRequest::new("boss", "oversee")).await;
    // Both workers are in flight: the detached one in its long second call.
    model.until_calls(a(3), 1).await;
    model.until_calls(a(4), 2).await;
    let detached = tree.record(a(4)).expect("detached record");
    assert!(detached.detached);
    assert_eq!((detached.parent, detached.depth), (Some(a(2)), 3));
    assert!(!tree.record(a(3)).expect("attached").detached);
    (tree, model, events)
}

/// The detached worker is still running with its model call in flight, then completes on
/// its own, and its usage reached the lead, the boss and the root.
async fn assert_detached_survives(tree: &Tree, model: &RecordingModel) {
    let detached = a(4);
    let record = tree.record(detached).expect("record");
    assert_eq!(record.status, AgentStatus::Running);
    assert!(tree.alive_actors().contains(&detached));
    let calls = model.calls_of(detached);
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[1].end,
        CallEnd::InFlight,
        "its model call was not cancelled"
    );

    let mut handle = tree.handle(detached).expect("handle");
    let outcome = within("the detached worker", handle.outcome()).await;
    assert_eq!(outcome.text.as_deref(), Some("detached done"));
    assert_eq!(model.calls_of(detached)[1].end, CallEnd::Returned);
    let snapshot = tree.snapshot();
    assert!(snapshot.check_usage().is_ok(), "{}", snapshot.render_text());
    let own = |id: AgentId| snapshot.record(id).expect("record").own;
    let subtree = |id: AgentId| snapshot.record(id).expect("record").subtree;
    assert_eq!(own(detached), Usage::tokens(6, 6));
    assert_eq!(subtree(a(2)), own(a(2)) + subtree(a(3)) + subtree(detached));
    assert_eq!(subtree(a(1)), own(a(1)) + subtree(a(2)));
    assert_eq!(
        snapshot.root().expect("root").subtree,
        snapshot.total_own(),
        "the root's subtree is the tree's total"
    );
    assert!(subtree(a(2)).total_tokens() >= 12 + 6);
}

#[tokio::test(start_paused = true)]
async fn a_detached_child_outlives_its_owners_normal_end() {
    let (tree, model, mut events) =
        setup(vec![Turn::answer("lead done").usage(Usage::tokens(2, 2))]).await;
    let lead = within("the lead", async {
        tree.handle(a(2)).expect("lead").outcome().await
    })
    .await;
    assert_eq!(lead.text.as_deref(), Some("lead done"));
    // The attached worker was aborted because its owner ended; the detached one was not.
    let attached = tree.outcome(a(3)).expect("attached settled");
    assert_eq!(
        (attached.status, attached.reason),
        (AgentStatus::Aborted, EndReason::OwnerEnded)
    );
    assert_eq!(model.calls_of(a(3))[0].end, CallEnd::Dropped);
    assert_detached_survives(&tree, &model).await;
    let events = events.drain();
    let lead_end = terminal_event(&events, a(2)).expect("lead's end").seq;
    let detached_end = terminal_event(&events, a(4)).expect("detached end");
    assert!(
        lead_end < detached_end.seq,
        "the detached child outlived its owner"
    );
    assert_eq!(detached_end.kind.name(), "completed");
    tree.shutdown().await;
}

/// Aborts `id` (`Tree::abort`) and waits for its outcome, `what` naming it.
async fn aborted(tree: &Tree, id: AgentId, what: &str) -> Outcome {
    tree.abort(id)
        .unwrap_or_else(|e| panic!("{what} exists: {e}"));
    within(what, async {
        tree.handle(id).expect("its handle").outcome().await
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn a_detached_child_outlives_an_ordinary_abort_of_its_owner() {
    let (tree, model, _events) = setup(vec![Turn::hang()]).await;
    let lead = aborted(&tree, a(2), "the lead").await;
    assert_eq!(
        (lead.status, lead.reason),
        (AgentStatus::Aborted, EndReason::Aborted)
    );
    assert_eq!(
        tree.outcome(a(3)).expect("attached").status,
        AgentStatus::Aborted
    );
    assert_detached_survives(&tree, &model).await;
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_detached_child_outlives_an_abort_cascade_from_above_its_owner() {
    let (tree, model, _events) = setup(vec![Turn::hang()]).await;
    let boss = aborted(&tree, a(1), "the boss").await;
    assert_eq!(boss.status, AgentStatus::Aborted);
    let lead = tree
        .outcome(a(2))
        .expect("the lead settled before the boss");
    assert_eq!(
        (lead.status, lead.reason),
        (AgentStatus::Aborted, EndReason::OwnerEnded)
    );
    assert_detached_survives(&tree, &model).await;
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_explicit_abort_by_the_application_reaches_a_detached_child() {
    let (tree, model, _events) = setup(vec![Turn::hang()]).await;
    let outcome = aborted(&tree, a(4), "the detached worker").await;
    assert_eq!(
        (outcome.status, outcome.reason),
        (AgentStatus::Aborted, EndReason::Aborted)
    );
    assert_eq!(model.calls_of(a(4))[1].end, CallEnd::Dropped);
    // Nothing else was touched.
    for id in [a(1), a(2), a(3)] {
        assert_eq!(
            tree.record(id).expect("rec").status,
            AgentStatus::Running,
            "{id}"
        );
    }
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_explicit_abort_by_its_owner_reaches_a_detached_child() {
    let (tree, model, _events) = setup(vec![
        Turn::calls([Call::tool(ABORT_TOOL, json!({ "agent_id": "a4" }))])
            .after(Duration::from_secs(1)),
        Turn::hang(),
    ])
    .await;
    let outcome = within("the detached worker", async {
        tree.handle(a(4)).expect("detached").outcome().await
    })
    .await;
    assert_eq!(
        (outcome.status, outcome.reason),
        (AgentStatus::Aborted, EndReason::Aborted)
    );
    model.until_calls(a(2), 3).await;
    let answer = model.calls_of(a(2))[2]
        .messages
        .last()
        .cloned()
        .expect("result");
    assert!(!answer.is_error, "{answer:?}");
    assert_eq!(tree.record(a(3)).expect("rec").status, AgentStatus::Running);
    assert_eq!(tree.record(a(2)).expect("rec").status, AgentStatus::Running);
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_tree_shutdown_reaches_a_detached_child_whose_owner_is_gone() {
    let (tree, model, _events) = setup(vec![Turn::answer("lead done")]).await;
    within("the lead", async {
        tree.handle(a(2)).expect("lead").outcome().await
    })
    .await;
    assert_eq!(tree.record(a(4)).expect("rec").status, AgentStatus::Running);
    let report = within("shutdown", tree.shutdown()).await;
    assert!(report.graceful.contains(&a(4)), "{report:?}");
    assert!(report.killed.is_empty(), "{report:?}");
    let outcome = tree.outcome(a(4)).expect("settled");
    assert_eq!(
        (outcome.status, outcome.reason),
        (AgentStatus::Aborted, EndReason::Shutdown)
    );
    assert_eq!(model.calls_of(a(4))[1].end, CallEnd::Dropped);
    assert!(tree.alive_actors().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_subtree_shutdown_of_its_owner_reaches_a_detached_child() {
    let (tree, model, _events) = setup(vec![Turn::hang()]).await;
    let report = within("subtree shutdown", tree.shutdown_agent(a(2)))
        .await
        .expect("the lead exists");
    let mut stopped = report.graceful.clone();
    stopped.sort();
    assert_eq!(stopped, [a(2), a(3), a(4)], "{report:?}");
    assert_eq!(
        tree.outcome(a(4)).expect("settled").reason,
        EndReason::Shutdown
    );
    assert_eq!(model.calls_of(a(4))[1].end, CallEnd::Dropped);
    assert_eq!(
        tree.record(a(1)).expect("boss").status,
        AgentStatus::Running
    );
    assert_eq!(tree.alive_actors(), [a(1)]);
    tree.shutdown().await;
}

/// A detached child from an earlier incarnation, resumed by the restarted owner, is still
/// detached: the owner's end does not abort it.
#[tokio::test(start_paused = true)]
async fn a_resumed_detached_child_of_an_earlier_run_stays_detached() {
    let model = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn_background("kid", "x"),
                Turn::fail("crash").after(Duration::from_millis(50)),
                // restarted incarnation: resume the detached child, then finish
                Turn::calls([Call::tool(
                    "Agent",
                    json!({ "resume": "a2", "prompt": "more", "background": true }),
                )]),
                Turn::answer("boss done"),
            ],
        )
        .script("kid", [Turn::answer("kid 1"), Turn::hang()]);
    let catalog = catalog([
        delegator_of_all("boss").with_restart(RestartPolicy::Transient),
        AgentDefinition::new("kid", "").detached(),
    ]);
    let tree = tree(model, catalog, TreeConfig::default()).await;
    let mut boss = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    let out = tokio::time::timeout(WAIT_LIMIT, boss.outcome())
        .await
        .unwrap();
    assert_eq!(out.status, AgentStatus::Completed, "{out:?}");
    assert_eq!(tree.record(a(1)).unwrap().incarnation, 2);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let kid = tree.record(a(2)).unwrap();
    assert!(
        kid.status.is_live(),
        "the detached child was aborted with its owner: {:?}",
        kid.outcome
    );
}

/// The boss's model for [`detached_question_around_owner_runs`]: its first turn starts a
/// detached background `kid`; a turn whose last message is a question notice steers the kid
/// `blue`; any other turn plays the boss's script (answers, each after 2 ms).
fn boss_hook(request: &ModelRequest) -> Option<Result<ModelResponse, ModelError>> {
    use agent_tree::protocol::ToolCall;
    if request.agent != AgentId::new(1) {
        return None;
    }
    let last = request.messages.last()?;
    if request.messages.len() == 1 {
        let call = ToolCall::new(
            "spawn",
            "Agent",
            json!({ "agent_type": "kid", "prompt": "detached work", "background": true }),
        );
        return Some(Ok(ModelResponse::calls(vec![call])));
    }
    if last.role == Role::User && last.content.contains("\"notice\":\"question\"") {
        let call = ToolCall::new(
            "steer",
            "steer_subagent",
            json!({ "agent_id": "a2", "message": "blue" }),
        );
        return Some(Ok(ModelResponse::calls(vec![call])));
    }
    // Any other turn: the boss's script.
    None
}

/// One trial: `boss` (a1) starts a detached `kid` (a2) and answers; the kid asks it a
/// question after `delay`; with `resume`, the boss is resumed as soon as its first run
/// ended. Returns the result the kid's question got.
async fn detached_question_around_owner_runs(delay: Duration, resume: bool) -> Message {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "kid",
                [
                    Turn::calls([crate::support::ask("which colour?")]).after(delay),
                    Turn::answer("kid done"),
                ],
            )
            .script(
                "boss",
                Script::new((0..4).map(|_| Turn::answer("boss done").after(ms(2)))),
            ),
    )
    .with_hook(boss_hook);
    let tree = build_tree(
        catalog([delegator_of_all("boss"), leaf("kid").detached()]),
        model.clone(),
    )
    .await;
    let mut boss = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    let first = crate::races_mt::bounded("the boss's first run", boss.outcome()).await;
    assert!(first.is_completed(), "{first:?}");
    let second = if resume {
        Some(tree.resume(a(1), "again").await.expect("resumes"))
    } else {
        None
    };
    let mut kid = tree.handle(a(2)).expect("the kid");
    let kid_outcome = match tokio::time::timeout(Duration::from_secs(5), kid.outcome()).await {
        Ok(outcome) => outcome,
        Err(_) => panic!(
            "the kid's question was never answered nor refused (resume {resume}, delay \
             {delay:?}):\n{}",
            tree.snapshot().render_text()
        ),
    };
    assert!(kid_outcome.is_completed(), "{kid_outcome:?}");
    if let Some(mut second) = second {
        crate::races_mt::bounded("the boss's second run", second.outcome()).await;
    }
    let answer = model.calls_of(a(2))[1].results[0].clone();
    tree.shutdown().await;
    answer
}

/// A detached child's question racing the end of its owner's run, and the owner's resume, on
/// worker threads: it reaches a run that answers it, or is refused at once; it never waits
/// forever.
#[test]
fn a_detached_childs_question_around_its_owners_runs_is_answered_or_refused_mt() {
    let mut trial = 0u64;
    crate::support::races::on_worker_threads(160, Duration::from_secs(20), || {
        trial += 1;
        let delay = Duration::from_micros((trial % 16) * 500);
        let resume = trial.is_multiple_of(2);
        async move {
            let answer = detached_question_around_owner_runs(delay, resume).await;
            assert!(
                answer.is_error || answer.content.contains("blue"),
                "trial {trial}: {answer:?}"
            );
        }
    });
}
