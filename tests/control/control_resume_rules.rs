//! Resume: refused while the agent is running or queued (the error names the status);
//! resuming a settled child continues its conversation (the next model call sees the old
//! messages and the new prompt); children spawned during a resumed run never outlive it,
//! whatever the definition's settle policy; and only the owner may resume. Resuming a run
//! that was killed continues that run's conversation, not an older one. An empty resume
//! continues too: a blank task is refused for new agents only.

use agent_tree::testkit::EventProbe;
use std::time::Duration;

use crate::support::harness::{a, idle, outcome_of, results, started, status_of, tree};
use crate::support::scripts::boss_completed;
use crate::support::{
    RecordingModel, WAIT_LIMIT, catalog, resume_call, run_admitted, spawn_admitted, user_texts,
};
use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, EventKind, Role, SettlePolicy};
use agent_tree::testkit::{Call, ScriptedModel, Turn};
use serde_json::json;

fn resume(id: &str, prompt: &str) -> Call {
    resume_call(id, prompt)
}

/// A boss that may delegate to anything, a `slow` and a `quick` agent.
pub(crate) fn boss_slow_and_quick() -> Catalog {
    catalog([
        AgentDefinition::new("boss", "").with_allowed_subagents(SubagentAllowance::All),
        AgentDefinition::new("slow", ""),
        AgentDefinition::new("quick", ""),
    ])
}

fn boss_worker_sleeper() -> Catalog {
    catalog([
        AgentDefinition::new("boss", "").with_allowed_subagents(SubagentAllowance::All),
        // Drain would keep children alive after the run; a resumed run must abort them anyway.
        AgentDefinition::new("worker", "")
            .with_allowed_subagents(SubagentAllowance::All)
            .with_settle(SettlePolicy::Drain),
        AgentDefinition::new("sleeper", ""),
    ])
}

#[tokio::test(start_paused = true)]
async fn resuming_a_settled_child_continues_its_conversation_and_reaps_its_new_children() {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn("worker", "task one"),
                Turn::calls([resume("a2", "second prompt")]),
                Turn::answer("boss done"),
            ],
        )
        .script(
            "worker",
            [
                Turn::answer("first answer"),
                Turn::spawn_background("sleeper", "nap"),
                Turn::answer("second answer"),
            ],
        )
        .script("sleeper", [Turn::hang()]);
    let model = RecordingModel::new(scripted.clone());
    let tree = tree(model.clone(), boss_worker_sleeper(), TreeConfig::default()).await;
    let mut events = tree.subscribe();
    let outcome = tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
    assert!(outcome.is_completed(), "{}", outcome.summary());
    idle(&tree).await;

    let first = &results(&scripted, a(1), 1)[0];
    assert_eq!(status_of(first), "completed");
    assert!(first.content.contains("first answer"));
    let second = &results(&scripted, a(1), 2)[0];
    assert!(!second.is_error, "{}", second.content);
    assert_eq!(status_of(second), "completed");
    assert!(second.content.contains("second answer"));

    // The resumed run's first model call sees the whole first run, then the new prompt.
    let worker = model.calls_of(a(2));
    assert_eq!(worker.len(), 3);
    let texts: Vec<(Role, &str)> = worker[1]
        .messages
        .iter()
        .map(|m| (m.role, m.content.as_str()))
        .collect();
    assert_eq!(
        texts,
        [
            (Role::User, "task one"),
            (Role::Assistant, "first answer"),
            (Role::User, "second prompt"),
        ]
    );

    // The sleeper spawned during the resumed run was aborted when that run ended.
    let sleeper = tree.record(a(3)).unwrap();
    assert_eq!(sleeper.parent, Some(a(2)));
    assert_eq!(sleeper.status, AgentStatus::Aborted);
    assert_eq!(
        sleeper.outcome.unwrap().reason,
        EndReason::OwnerEnded,
        "the sleeper outlived the resumed run"
    );
    let worker_record = tree.record(a(2)).unwrap();
    assert_eq!(worker_record.status, AgentStatus::Completed);
    assert_eq!(
        tree.outcome(a(2)).unwrap().text.as_deref(),
        Some("second answer")
    );
    let resumed = events
        .drain()
        .into_iter()
        .filter(|e| matches!(e.kind, EventKind::Resumed))
        .map(|e| e.agent)
        .collect::<Vec<_>>();
    assert_eq!(resumed, [a(2)]);
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn resume_of_a_running_child_is_refused_naming_its_status() {
    let model = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn_background("sleeper", "nap"),
                Turn::calls([resume("a2", "wake up")]),
                Turn::answer("boss done"),
            ],
        )
        .script("sleeper", [Turn::hang()]);
    let tree = boss_completed(&model, boss_worker_sleeper()).await;
    let refused = &results(&model, a(1), 2)[0];
    assert!(refused.is_error);
    assert_eq!(
        refused.content,
        r#"{"error":"a2 cannot take this now: it is running"}"#
    );
    assert_eq!(
        model.calls_by(a(2)),
        1,
        "the refused resume started nothing"
    );
    idle(&tree).await;
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_application_cannot_resume_running_queued_or_foreign_agents() {
    let model = ScriptedModel::new()
        .script("sleeper", [Turn::hang()])
        .script(
            "boss",
            [Turn::spawn_background("sleeper", "nap"), Turn::hang()],
        );
    let tree = tree(
        model.clone(),
        boss_worker_sleeper(),
        TreeConfig::default().with_max_concurrent(1),
    )
    .await;
    let mut events = EventProbe::new(&tree);
    let running = spawn_admitted(&tree, SpawnRequest::new("boss", "hold").background()).await;
    let queued = spawn_admitted(&tree, SpawnRequest::new("sleeper", "wait").background()).await;
    events.expect_event("a start", started(running.id())).await;
    let nested = events
        .expect_event("a child of the running boss starting", |e| {
            e.parent == Some(running.id()) && matches!(e.kind, EventKind::Started { .. })
        })
        .await
        .agent;

    let err = tree.resume(running.id(), "again").await.unwrap_err();
    assert_eq!(err.to_string(), "a1 cannot take this now: it is running");
    let err = tree.resume(queued.id(), "again").await.unwrap_err();
    assert_eq!(err.to_string(), "a2 cannot take this now: it is queued");
    let err = tree.resume(nested, "again").await.unwrap_err();
    assert_eq!(err.to_string(), format!("no subagent {nested} of yours"));
    assert_eq!(
        tree.record(running.id()).unwrap().status,
        AgentStatus::Running
    );
    assert_eq!(
        tree.record(queued.id()).unwrap().status,
        AgentStatus::Queued
    );
    assert_eq!(model.calls_by(queued.id()), 0);
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_application_resumes_a_settled_top_level_agent() {
    let scripted =
        ScriptedModel::new().script("sleeper", [Turn::answer("first"), Turn::answer("second")]);
    let model = RecordingModel::new(scripted);
    let tree = tree(model.clone(), boss_worker_sleeper(), TreeConfig::default()).await;
    let first = run_admitted(&tree, SpawnRequest::new("sleeper", "task")).await;
    assert_eq!(first.text.as_deref(), Some("first"));
    let mut handle = tree.resume(a(1), "more").await.unwrap();
    let second = tokio::time::timeout(crate::support::harness::GUARD, handle.outcome())
        .await
        .unwrap();
    assert_eq!(second.text.as_deref(), Some("second"));
    let requests = model.calls_of(a(1));
    let texts: Vec<&str> = requests[1]
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(texts, ["task", "first", "more"]);
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_resume_runs_in_the_catalog_its_branch_started_with() {
    let model =
        ScriptedModel::new().script("sleeper", [Turn::answer("first"), Turn::answer("second")]);
    let tree = tree(model.clone(), boss_worker_sleeper(), TreeConfig::default()).await;
    let first = run_admitted(&tree, SpawnRequest::new("sleeper", "task")).await;
    assert!(first.is_completed());
    // New top-level branches use a catalog without `sleeper`; the settled branch keeps its own.
    tree.set_branch_defaults(catalog([AgentDefinition::new("other", "")]), 5);
    let mut resumed = tree
        .resume(a(1), "more")
        .await
        .expect("the branch's catalog has it");
    assert_eq!(resumed.outcome().await.text.as_deref(), Some("second"));
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_refused_application_resume_keeps_the_settled_result() {
    let model = ScriptedModel::new()
        .script(
            "boss",
            [Turn::spawn("sleeper", "nap"), Turn::answer("boss done")],
        )
        .script("sleeper", [Turn::answer("first")]);
    let tree = tree(model.clone(), boss_worker_sleeper(), TreeConfig::default()).await;
    tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
    let first = outcome_of(&tree, a(2)).await;
    assert!(first.is_completed());
    // a2 is not a top-level agent: the application is not its owner.
    let refused = tree.resume(a(2), "more").await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(outcome_of(&tree, a(2)).await, first);
    assert_eq!(tree.record(a(2)).unwrap().status, AgentStatus::Completed);
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_resume_in_the_background_answers_at_once_and_the_run_completes() {
    let model = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn("sleeper", "one"),
                Turn::calls([Call::tool(
                    "Agent",
                    json!({ "resume": "a2", "prompt": "two", "background": true }),
                )]),
                Turn::calls([Call::result(a(2))]),
                Turn::answer("boss done"),
            ],
        )
        .script(
            "sleeper",
            [
                Turn::answer("one done"),
                Turn::answer("two done").after(Duration::from_millis(20)),
            ],
        );
    let tree = boss_completed(&model, boss_worker_sleeper()).await;
    assert_eq!(status_of(&results(&model, a(1), 2)[0]), "running");
    let read = &results(&model, a(1), 3)[0];
    assert_eq!(status_of(read), "completed");
    assert!(read.content.contains("two done"));
    tree.shutdown().await;
}

/// Resume continues the agent's conversation: a run that was killed (`Tree::kill`) is not
/// silently replaced by an older run's conversation.
#[tokio::test(start_paused = true)]
async fn resuming_a_killed_run_keeps_that_runs_conversation() {
    let scripted = ScriptedModel::new().script(
        "w",
        [
            Turn::answer("first done"),
            Turn::hang(),
            Turn::answer("third"),
        ],
    );
    let recorder = RecordingModel::new(scripted);
    let catalog = catalog([AgentDefinition::new("w", "")]);
    let tree = tree(recorder.clone(), catalog, TreeConfig::default()).await;
    let out = tree.run(SpawnRequest::new("w", "task one")).await.unwrap();
    assert_eq!(out.status, AgentStatus::Completed);
    let _h = tree.resume(a(1), "task two").await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    tree.kill(a(1)).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(tree.record(a(1)).unwrap().status, AgentStatus::Killed);
    let mut h = tree.resume(a(1), "task three").await.unwrap();
    let _ = tokio::time::timeout(WAIT_LIMIT, h.outcome()).await.unwrap();
    let last = recorder.calls_of(a(1)).last().cloned().unwrap();
    let texts = user_texts(&last.messages);
    assert!(
        texts.contains(&"task two".to_owned()),
        "the killed run's prompt vanished from the resumed conversation: {texts:?}"
    );
}

/// An empty resume of a settled top agent (`Tree::resume`) and of a child (the `Agent` tool)
/// continues the conversation; a blank task, empty or whitespace-only, is refused for new
/// agents only.
#[tokio::test(start_paused = true)]
async fn an_empty_resume_continues_while_a_new_agents_blank_task_is_refused() {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn("quick", "one"),
                Turn::calls([resume_call("a2", "")]),
                Turn::answer("boss done"),
                Turn::answer("boss again"),
            ],
        )
        .script(
            "quick",
            [Turn::answer("first done"), Turn::answer("second done")],
        );
    let model = RecordingModel::new(scripted);
    let tree = tree(model.clone(), boss_slow_and_quick(), TreeConfig::default()).await;
    let outcome = tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
    assert!(outcome.is_completed(), "{outcome:?}");
    let third = &model.calls_of(a(1))[2].messages;
    assert!(
        third
            .iter()
            .any(|m| m.role == Role::Tool && m.content.contains("second done")),
        "the child's empty resume did not run: {third:#?}"
    );
    let mut handle = tree
        .resume(a(1), "")
        .await
        .expect("an empty resume is taken");
    let again = handle.outcome().await;
    assert_eq!(again.text.as_deref(), Some("boss again"), "{again:?}");
    // Blank tasks for new agents are refused; whitespace-only too.
    for blank in ["", "  \n\t"] {
        let err = tree
            .spawn(SpawnRequest::new("quick", blank))
            .await
            .unwrap_err();
        assert!(matches!(err, SpawnError::InvalidRequest(_)), "{err:?}");
    }
    tree.shutdown().await;
}
