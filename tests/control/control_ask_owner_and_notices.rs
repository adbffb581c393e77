//! `ask_owner` and completion notices travel along the ownership edge: a child's question
//! reaches its direct owner, whose steer is the answer the child's `ask_owner` call returns;
//! a top-level agent asks the application (an `asked` event, answered by `Tree::steer`); and
//! a background child's completion notice enters its owner's conversation only, never an
//! ancestor's, another branch's or the root's.
//!
//! No question leaves anyone waiting: a set wait over an asking child is answered with the
//! question; a second question in one turn is refused; a question still open when its owner's
//! run ends, or its owner settles, or is killed and restarted, is refused. The end of a killed
//! child (detached or not) and the later completion of a foreground child that asked reach
//! the owner as notices.

use agent_tree::testkit::EventProbe;
use std::time::Duration;

use crate::support::harness::{a, id_of, idle, outcome_of, results, status_of, tree};
use crate::support::scripts::background_spawns;
use crate::support::{
    RecordingModel, WAIT_LIMIT, ask, catalog, delegator_of_all, run_admitted, spawn_admitted,
    user_texts,
};
use agent_tree::SteerReceipt;
use agent_tree::prelude::*;
use agent_tree::protocol::{EventKind, Role};
use agent_tree::testkit::{Call, ScriptedModel, Target, Turn};
use serde_json::json;

fn noop() -> Call {
    Call::tool("noop", json!({}))
}

fn boss_mid_asker() -> Catalog {
    let delegator =
        |name: &str| AgentDefinition::new(name, "").with_allowed_subagents(SubagentAllowance::All);
    catalog([
        delegator("boss"),
        delegator("mid"),
        AgentDefinition::new("asker", ""),
        AgentDefinition::new("leaf", ""),
        AgentDefinition::new("observer", ""),
    ])
}

#[tokio::test(start_paused = true)]
async fn a_child_asks_its_owner_and_gets_the_owners_steer_as_the_answer() {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn("asker", "pick a colour"),
                Turn::calls([Call::steer(Target::Spawned(0), "blue")]),
                Turn::calls([Call::result(Target::Spawned(0))]),
                Turn::answer("boss done"),
            ],
        )
        .script(
            "asker",
            [
                Turn::calls([ask("which colour?")]),
                Turn::answer("I chose blue"),
            ],
        );
    let model = RecordingModel::new(scripted.clone());
    let tree = tree(model.clone(), boss_mid_asker(), TreeConfig::default()).await;
    let mut events = tree.subscribe();
    let outcome = tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
    assert!(outcome.is_completed(), "{}", outcome.summary());
    idle(&tree).await;

    // The owner's foreground wait was answered with the question...
    let asked = &results(&scripted, a(1), 1)[0];
    assert_eq!(status_of(asked), "asking");
    assert!(asked.content.contains("which colour?"));
    // ...which also entered its conversation.
    assert!(
        model.calls_of(a(1))[1]
            .messages
            .iter()
            .any(|m| m.role == Role::User
                && m.content
                    == r#"{"agent_id":"a2","answer_with":"steer_subagent","notice":"question","question":"which colour?"}"#)
    );
    let receipt = &results(&scripted, a(1), 2)[0];
    assert!(!receipt.is_error);
    assert!(
        receipt.content.contains("\"receipt\":\"delivered\""),
        "{}",
        receipt.content
    );

    // The child's next model call sees the answer as the ask_owner result.
    let answer = &results(&scripted, a(2), 1)[0];
    assert!(!answer.is_error);
    assert_eq!(answer.content, "blue");
    let read = &results(&scripted, a(1), 3)[0];
    assert_eq!(status_of(read), "completed");
    assert!(read.content.contains("I chose blue"));

    let log = events.drain();
    let asked = log
        .iter()
        .find(|e| matches!(&e.kind, EventKind::Asked { .. }))
        .unwrap();
    assert_eq!((asked.agent, asked.parent), (a(2), Some(a(1))));
    assert_eq!(
        asked.kind,
        EventKind::Asked {
            question: "which colour?".into()
        }
    );
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_top_level_agent_asks_the_application() {
    let scripted = ScriptedModel::new().script(
        "asker",
        [
            Turn::calls([ask("may I deploy?")]),
            Turn::answer("deployed"),
        ],
    );
    // The application's handler stays silent; the application answers with a steer.
    let tree = Tree::builder()
        .catalog(boss_mid_asker())
        .model(scripted.clone())
        .on_question(|_: agent_tree::Question| std::future::pending())
        .build()
        .await
        .unwrap();
    let mut events = EventProbe::new(&tree);
    let asker = spawn_admitted(&tree, SpawnRequest::new("asker", "deploy")).await;
    let asked = events
        .expect_event("a question", |e| matches!(e.kind, EventKind::Asked { .. }))
        .await;
    assert_eq!((asked.agent, asked.parent), (asker.id(), Some(a(0))));
    assert_eq!(
        asked.kind,
        EventKind::Asked {
            question: "may I deploy?".into()
        }
    );
    assert_eq!(
        tree.record(asker.id()).unwrap().status,
        AgentStatus::Running
    );
    assert_eq!(
        tree.steer(asker.id(), "yes, go ahead").await.unwrap(),
        SteerReceipt::Delivered
    );
    let outcome = outcome_of(&tree, asker.id()).await;
    assert_eq!(outcome.text.as_deref(), Some("deployed"));
    let answer = &results(&scripted, asker.id(), 1)[0];
    assert!(!answer.is_error);
    assert_eq!(answer.content, "yes, go ahead");
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn completion_notices_go_to_the_direct_owner_only() {
    // boss (top-level, background) → mid (background) → leaf (background); an observer runs
    // beside them. Each owner thinks long enough for its child to finish first.
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn_background("mid", "m"),
                Turn::calls([noop()]).after(Duration::from_millis(200)),
                Turn::answer("boss done"),
            ],
        )
        .script(
            "mid",
            [
                Turn::spawn_background("leaf", "l"),
                Turn::calls([noop()]).after(Duration::from_millis(50)),
                Turn::answer("mid done"),
            ],
        )
        .script("leaf", [Turn::answer("leaf done")])
        .script(
            "observer",
            [
                Turn::calls([noop()]).after(Duration::from_millis(300)),
                Turn::answer("observed"),
            ],
        );
    let model = RecordingModel::new(scripted);
    let tree = tree(model.clone(), boss_mid_asker(), TreeConfig::default()).await;
    let boss = spawn_admitted(&tree, SpawnRequest::new("boss", "go").background()).await;
    let observer = spawn_admitted(&tree, SpawnRequest::new("observer", "watch").background()).await;
    let done = outcome_of(&tree, observer.id()).await;
    assert!(done.is_completed());
    idle(&tree).await;
    let (mid, leaf) = (id_of(&tree, "mid"), id_of(&tree, "leaf"));
    assert_eq!(tree.record(leaf).unwrap().parent, Some(mid));
    assert_eq!(tree.record(mid).unwrap().parent, Some(boss.id()));
    assert!(boss.try_outcome().unwrap().is_completed());

    let notices = |id: AgentId| -> Vec<String> {
        let requests = model.calls_of(id);
        requests
            .last()
            .unwrap()
            .messages
            .iter()
            .filter(|m| m.role == Role::User && m.content.contains(r#""notice":"subagent_ended""#))
            .map(|m| m.content.clone())
            .collect()
    };
    assert_eq!(
        notices(mid),
        [format!(
            r#"{{"agent_id":"{leaf}","notice":"subagent_ended","status":"completed","text":"leaf done"}}"#
        )]
    );
    assert_eq!(
        notices(boss.id()),
        [format!(
            r#"{{"agent_id":"{mid}","notice":"subagent_ended","status":"completed","text":"mid done"}}"#
        )]
    );
    assert!(notices(observer.id()).is_empty());
    assert!(notices(leaf).is_empty());
    // No conversation anywhere mentions a top-level agent's completion.
    for request in model.calls() {
        for m in request.messages.iter() {
            for top in [boss.id(), observer.id()] {
                assert!(
                    !m.content
                        .starts_with(&format!(r#"{{"agent_id":"{top}","notice""#)),
                    "{} got a notice about top-level {top}",
                    request.agent
                );
            }
        }
    }
    tree.shutdown().await;
}

/// A `wait_subagents` over a child that asks its owner is answered at once with the
/// question, as a single-child wait is, instead of deadlocking.
#[tokio::test(start_paused = true)]
async fn a_set_wait_is_answered_when_a_waited_child_asks() {
    let model = ScriptedModel::new()
        .script(
            "boss",
            [
                background_spawns([("asker", "x"), ("leaf", "y")]),
                Turn::calls([Call::wait(
                    [Target::Spawned(0), Target::Spawned(1)],
                    WaitPolicy::AllSettled,
                )]),
                Turn::calls([Call::steer(Target::Spawned(0), "blue")]),
                Turn::calls([Call::wait(
                    [Target::Spawned(0), Target::Spawned(1)],
                    WaitPolicy::AllSettled,
                )]),
                Turn::answer("boss done"),
            ],
        )
        .script("asker", [Turn::calls([ask("colour?")]), Turn::answer("ok")])
        .script("leaf", [Turn::answer("leaf")]);
    let catalog = catalog([
        delegator_of_all("boss"),
        AgentDefinition::new("asker", ""),
        AgentDefinition::new("leaf", ""),
    ]);
    let tree = tree(model, catalog, TreeConfig::default()).await;
    let run = tree.run(SpawnRequest::new("boss", "go"));
    let r = tokio::time::timeout(WAIT_LIMIT, run).await;
    assert!(
        r.is_ok(),
        "deadlock: boss waits on {{asker, leaf}}, asker waits for boss"
    );
}

/// A question still open when the owner's run ends (and the owner drains) is refused, so
/// neither the child nor the draining owner waits forever; a model that asks two questions
/// in one turn gets the second refused (one question at a time), and the owner's end
/// refuses the open one.
#[tokio::test(start_paused = true)]
async fn questions_left_open_when_a_draining_run_ends_are_refused_one_or_two_in_a_turn() {
    for asks in [vec![ask("colour?")], vec![ask("colour?"), ask("size?")]] {
        let n = asks.len();
        let model = ScriptedModel::new()
            .script(
                "boss",
                [
                    Turn::spawn_background("asker", "x"),
                    // the question arrives while this turn is in flight; the model ends anyway
                    Turn::answer("boss done").after(Duration::from_millis(50)),
                ],
            )
            .script("asker", [Turn::calls(asks), Turn::answer("ok")]);
        let catalog = catalog([
            delegator_of_all("boss").with_settle(SettlePolicy::Drain),
            AgentDefinition::new("asker", ""),
        ]);
        let tree = tree(model, catalog, TreeConfig::default()).await;
        let run = tree.run(SpawnRequest::new("boss", "go"));
        let r = tokio::time::timeout(WAIT_LIMIT, run).await;
        assert!(
            r.is_ok(),
            "hang with {n} questions: boss {:?}, asker {:?}",
            tree.record(a(1)).map(|r| r.status),
            tree.record(a(2)).map(|r| r.status)
        );
    }
}

/// A tree of a `boss` that starts a detached `asker` in the background, then takes the
/// turns `boss_then`; the asker asks it `colour?` after `ask_after_ms`, then answers `ok`.
async fn boss_and_detached_asker(boss_then: Vec<Turn>, ask_after_ms: u64) -> Tree {
    let boss = std::iter::once(Turn::spawn_background("asker", "x")).chain(boss_then);
    let model = ScriptedModel::new()
        .script("boss", agent_tree::testkit::Script::new(boss))
        .script(
            "asker",
            [
                Turn::calls([ask("colour?")]).after(Duration::from_millis(ask_after_ms)),
                Turn::answer("ok"),
            ],
        );
    let catalog = catalog([
        delegator_of_all("boss"),
        AgentDefinition::new("asker", "").detached(),
    ]);
    tree(model, catalog, TreeConfig::default()).await
}

/// A detached child asking its owner in the instant the owner settles gets a refusal (the
/// owner's settling is watched), never waits forever.
#[tokio::test(start_paused = true)]
async fn a_detached_child_asking_a_settling_owner_gets_an_answer() {
    for ms in [49u64, 50, 51] {
        let tree = boss_and_detached_asker(
            vec![
                Turn::answer("boss done").after(Duration::from_millis(50)),
                // A question that arrived during that turn gets one more (not answered).
                Turn::answer("boss done"),
            ],
            ms,
        )
        .await;
        let boss = tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
        assert!(boss.is_completed());
        let r = tokio::time::timeout(WAIT_LIMIT, tree.idle()).await;
        assert!(
            r.is_ok(),
            "ask at {ms} ms: asker {:?} waits forever",
            tree.record(a(2)).map(|r| r.status)
        );
        let _ = AgentStatus::Running;
    }
}

/// The same on worker threads, many trials: the race needs real threads, so paused time
/// cannot stand in for it (each trial takes a few real milliseconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_detached_child_asking_a_settling_owner_gets_an_answer_mt() {
    let mut stuck = 0;
    for trial in 0..300u64 {
        let ms = 3 + trial % 3;
        let tree = boss_and_detached_asker(
            vec![Turn::answer("boss done").after(Duration::from_millis(4))],
            ms,
        )
        .await;
        let _ = tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
        if tokio::time::timeout(Duration::from_millis(200), tree.idle())
            .await
            .is_err()
        {
            stuck += 1;
            eprintln!(
                "stuck: asker {:?}, boss {:?}",
                tree.record(a(2)).map(|r| r.status),
                tree.record(a(1)).map(|r| r.status)
            );
        }
        tree.shutdown().await;
    }
    assert_eq!(
        stuck, 0,
        "{stuck} of 300 detached askers never got an answer"
    );
}

/// A foreground `Agent` call answered early with `asking`: when the child later completes,
/// its result reaches the owner's conversation as a completion notice.
#[tokio::test(start_paused = true)]
async fn a_foreground_child_that_asked_is_noticed_when_it_completes() {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::spawn("asker", "x"),
                Turn::calls([Call::steer(Target::Spawned(0), "blue")]),
                Turn::calls([Call::peek(Target::Raw("a99".into()))])
                    .after(Duration::from_millis(100)),
                Turn::answer("boss done"),
            ],
        )
        .script(
            "asker",
            [
                Turn::calls([ask("colour?")]),
                Turn::answer("the answer is blue"),
            ],
        );
    let model = crate::support::RecordingModel::new(scripted);
    let catalog = catalog([delegator_of_all("boss"), AgentDefinition::new("asker", "")]);
    let tree = tree(model.clone(), catalog, TreeConfig::default()).await;
    let out = tokio::time::timeout(
        WAIT_LIMIT,
        run_admitted(&tree, SpawnRequest::new("boss", "go")),
    )
    .await
    .unwrap();
    assert!(out.is_completed());
    assert!(tree.outcome(a(2)).unwrap().is_completed());
    let last = model.calls_of(a(1)).last().cloned().unwrap();
    let seen = format!("{:?}", last.messages).contains("the answer is blue");
    assert!(
        seen,
        "the foreground child's result never reached its owner"
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
            [
                Turn::spawn_background("asker", "x"),
                Turn::hang(),
                // the restarted incarnation works on and on
                Turn::hang(),
            ],
        )
        .script(
            "asker",
            [
                Turn::calls([Call::tool("ask_owner", json!({ "question": "which?" }))]),
                Turn::answer("gave up waiting"),
            ],
        );
    let catalog = catalog([
        delegator_of_all("boss").with_restart(RestartPolicy::Transient),
        AgentDefinition::new("asker", "").detached(),
    ]);
    let tree = tree(model, catalog, TreeConfig::default()).await;
    let mut events = EventProbe::new(&tree);
    let _boss = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    events
        .expect_event("a question", |e| matches!(e.kind, EventKind::Asked { .. }))
        .await;
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
/// when the child is killed, detached (its supervision event goes to the root) or not (its
/// supervision event reaches the owner directly).
#[tokio::test(start_paused = true)]
async fn a_killed_childs_end_is_noticed_by_its_owner_detached_or_not() {
    for detached in [true, false] {
        let scripted = ScriptedModel::new()
            .script(
                "boss",
                [
                    Turn::spawn_background("kid", "x"),
                    Turn::answer("mid").after(Duration::from_millis(100)),
                    Turn::answer("end"),
                ],
            )
            .script("kid", [Turn::hang()]);
        let recorder = RecordingModel::new(scripted);
        let kid = AgentDefinition::new("kid", "");
        let kid = if detached { kid.detached() } else { kid };
        let catalog = catalog([delegator_of_all("boss"), kid]);
        let tree = tree(recorder.clone(), catalog, TreeConfig::default()).await;
        let mut boss = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        tree.kill(a(2)).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(tree.record(a(2)).unwrap().status, AgentStatus::Killed);
        // A steer during the delayed turn gives the boss one more turn to read its inbox.
        tree.steer(a(1), "anything new?").await.unwrap();
        let _ = tokio::time::timeout(WAIT_LIMIT, boss.outcome())
            .await
            .unwrap();
        let last = recorder.calls_of(a(1)).last().cloned().unwrap();
        let texts = user_texts(&last.messages);
        assert!(
            texts.iter().any(|t| t.starts_with(
                r#"{"agent_id":"a2","notice":"subagent_ended","reason":"killed","status":"killed""#
            )),
            "no notice of the killed child (detached {detached}): {texts:?}"
        );
    }
}
