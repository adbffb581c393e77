//! Regressions from a fourth review: a failed root stays failed, restarts keep an inherited
//! context, resume after a kill keeps that run's conversation, a detached asker hears of its
//! owner's crash, a killed detached child is noticed by its owner, and a detached child stays
//! detached when resumed by a later run of its owner.
mod support;

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{AgentStatus, EventKind, RestartPolicy, Role, Strategy};
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use serde_json::json;
use support::harness::{Recorder, a, tree};
use support::{WAIT_LIMIT as GUARD, delegator_of_all as delegator};

fn user_texts(messages: &[agent_tree::protocol::Message]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| m.content.clone())
        .collect()
}

/// A terminal status is sticky, the root's included: a root that failed by escalation
/// stays `failed` (reason `escalated`) after `Tree::shutdown`.
#[tokio::test(start_paused = true)]
async fn a_failed_root_stays_failed_after_shutdown() {
    let model = ScriptedModel::new().script("flaky", Script::new([Turn::fail("boom")]));
    let catalog =
        Catalog::new([AgentDefinition::new("flaky", "").with_restart(RestartPolicy::Transient)])
            .unwrap();
    let config =
        TreeConfig::default().with_root_supervision(Strategy::OneForOne, 0, Duration::from_secs(5));
    let tree = tree(model, catalog, config).await;
    let mut h = tree.spawn(SpawnRequest::new("flaky", "go")).await.unwrap();
    let _ = tokio::time::timeout(GUARD, h.outcome()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(tree.record(a(0)).unwrap().status, AgentStatus::Failed);
    tree.shutdown().await;
    let root = tree.record(a(0)).unwrap();
    assert_eq!(
        root.status,
        AgentStatus::Failed,
        "the root's terminal status was rewritten: {:?}",
        root.outcome
    );
}

/// A restart "re-runs the original spawn request": a child spawned with
/// `inherit_context` gets its owner's conversation again in its restarted incarnation.
#[tokio::test(start_paused = true)]
async fn a_restarted_child_keeps_its_inherited_context() {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::calls([Call::spawn("heir", "child task")]),
                Turn::answer("ok"),
            ]),
        )
        .script(
            "heir",
            Script::new([Turn::fail("transient"), Turn::answer("done")]),
        );
    let recorder = Recorder::new(scripted);
    let mut heir = AgentDefinition::new("heir", "").with_restart(RestartPolicy::Transient);
    heir.inherit_context = true;
    let catalog = Catalog::new([delegator("boss"), heir]).unwrap();
    let tree = tree(recorder.clone(), catalog, TreeConfig::default()).await;
    let out = tree
        .run(SpawnRequest::new("boss", "SECRET owner context"))
        .await
        .unwrap();
    assert_eq!(out.status, AgentStatus::Completed);
    let runs = recorder.of(a(2));
    assert_eq!(runs.len(), 2, "one failed turn, one restarted turn");
    assert!(
        user_texts(&runs[0].messages).contains(&"SECRET owner context".to_owned()),
        "first incarnation inherits"
    );
    assert!(
        user_texts(&runs[1].messages).contains(&"SECRET owner context".to_owned()),
        "restarted incarnation lost the inherited context: {:?}",
        user_texts(&runs[1].messages)
    );
}

/// Resume continues the agent's conversation: a run that was killed (`Tree::kill`) is not
/// silently replaced by an older run's conversation.
#[tokio::test(start_paused = true)]
async fn resuming_a_killed_run_keeps_that_runs_conversation() {
    let scripted = ScriptedModel::new().script(
        "w",
        Script::new([
            Turn::answer("first done"),
            Turn::hang(),
            Turn::answer("third"),
        ]),
    );
    let recorder = Recorder::new(scripted);
    let catalog = Catalog::new([AgentDefinition::new("w", "")]).unwrap();
    let tree = tree(recorder.clone(), catalog, TreeConfig::default()).await;
    let out = tree.run(SpawnRequest::new("w", "task one")).await.unwrap();
    assert_eq!(out.status, AgentStatus::Completed);
    let _h = tree.resume(a(1), "task two").await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    tree.kill(a(1)).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(tree.record(a(1)).unwrap().status, AgentStatus::Killed);
    let mut h = tree.resume(a(1), "task three").await.unwrap();
    let _ = tokio::time::timeout(GUARD, h.outcome()).await.unwrap();
    let last = recorder.of(a(1)).last().cloned().unwrap();
    let texts = user_texts(&last.messages);
    assert!(
        texts.contains(&"task two".to_owned()),
        "the killed run's prompt vanished from the resumed conversation: {texts:?}"
    );
}

/// "An agent waiting for an answer is told when its owner settles": a detached child whose
/// owner is killed (and restarted, as a transient agent) while its question is open gets a
/// refusal instead of waiting for the owner's final outcome.
#[tokio::test(start_paused = true)]
async fn a_detached_asker_is_told_when_its_owner_is_killed_and_restarted() {
    let model = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::calls([
                    Call::spawn_background("asker", "x").with_field("detached", json!(true))
                ]),
                Turn::hang(),
                // the restarted incarnation works on and on
                Turn::hang(),
            ]),
        )
        .script(
            "asker",
            Script::new([
                Turn::calls([Call::tool("ask_owner", json!({ "question": "which?" }))]),
                Turn::answer("gave up waiting"),
            ]),
        );
    let catalog = Catalog::new([
        delegator("boss").with_restart(RestartPolicy::Transient),
        AgentDefinition::new("asker", ""),
    ])
    .unwrap();
    let tree = tree(model, catalog, TreeConfig::default()).await;
    let mut events = tree.subscribe();
    let _boss = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    support::harness::wait_event(&mut events, |e| matches!(e.kind, EventKind::Asked { .. })).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    tree.kill(a(1)).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(tree.record(a(1)).unwrap().incarnation, 2, "boss restarted");
    let mut asker = tree.handle(a(2)).unwrap();
    let out = tokio::time::timeout(Duration::from_secs(60), asker.outcome()).await;
    assert!(
        out.is_ok(),
        "the detached asker still waits on a question to a dead incarnation: {:?}",
        tree.record(a(2)).unwrap().status
    );
}

/// "A background child's completion reaches its owner's conversation as a notice": also
/// when the child is detached and is killed (its supervision event goes to the root).
#[tokio::test(start_paused = true)]
async fn a_killed_detached_childs_end_is_noticed_by_its_owner() {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::calls([
                    Call::spawn_background("kid", "x").with_field("detached", json!(true))
                ]),
                Turn::answer("mid").after(Duration::from_millis(100)),
                Turn::answer("end"),
            ]),
        )
        .script("kid", Script::new([Turn::hang()]));
    let recorder = Recorder::new(scripted);
    let catalog = Catalog::new([delegator("boss"), AgentDefinition::new("kid", "")]).unwrap();
    let tree = tree(recorder.clone(), catalog, TreeConfig::default()).await;
    let mut boss = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    tree.kill(a(2)).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(tree.record(a(2)).unwrap().status, AgentStatus::Killed);
    // A steer during the delayed turn gives the boss one more turn to read its inbox.
    tree.steer(a(1), "anything new?").await.unwrap();
    let _ = tokio::time::timeout(GUARD, boss.outcome()).await.unwrap();
    let last = recorder.of(a(1)).last().cloned().unwrap();
    let texts = user_texts(&last.messages);
    assert!(
        texts.iter().any(|t| t.starts_with("[subagent a2 killed]")),
        "no notice of the killed detached child: {texts:?}"
    );
}

/// A detached child from an earlier incarnation, resumed by the restarted owner, is still
/// detached: the owner's end does not abort it.
#[tokio::test(start_paused = true)]
async fn a_resumed_detached_child_of_an_earlier_run_stays_detached() {
    let model = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::calls([
                    Call::spawn_background("kid", "x").with_field("detached", json!(true))
                ]),
                Turn::fail("crash").after(Duration::from_millis(50)),
                // restarted incarnation: resume the detached child, then finish
                Turn::calls([Call::tool(
                    "Agent",
                    json!({ "resume": "a2", "prompt": "more", "background": true }),
                )]),
                Turn::answer("boss done"),
            ]),
        )
        .script("kid", Script::new([Turn::answer("kid 1"), Turn::hang()]));
    let catalog = Catalog::new([
        delegator("boss").with_restart(RestartPolicy::Transient),
        AgentDefinition::new("kid", ""),
    ])
    .unwrap();
    let tree = tree(model, catalog, TreeConfig::default()).await;
    let mut boss = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    let out = tokio::time::timeout(GUARD, boss.outcome()).await.unwrap();
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

/// The same for a killed child that is not detached (its supervision event reaches the owner
/// directly): its end is noticed.
#[tokio::test(start_paused = true)]
async fn a_killed_attached_childs_end_is_noticed_by_its_owner() {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::calls([Call::spawn_background("kid", "x")]),
                Turn::answer("mid").after(Duration::from_millis(100)),
                Turn::answer("end"),
            ]),
        )
        .script("kid", Script::new([Turn::hang()]));
    let recorder = Recorder::new(scripted);
    let catalog = Catalog::new([delegator("boss"), AgentDefinition::new("kid", "")]).unwrap();
    let tree = tree(recorder.clone(), catalog, TreeConfig::default()).await;
    let mut boss = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    tree.kill(a(2)).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(tree.record(a(2)).unwrap().status, AgentStatus::Killed);
    // A steer during the delayed turn gives the boss one more turn to read its inbox.
    tree.steer(a(1), "anything new?").await.unwrap();
    let _ = tokio::time::timeout(GUARD, boss.outcome()).await.unwrap();
    let last = recorder.of(a(1)).last().cloned().unwrap();
    let texts = user_texts(&last.messages);
    assert!(
        texts.iter().any(|t| t.starts_with("[subagent a2 killed]")),
        "no notice of the killed detached child: {texts:?}"
    );
}
