//! Regressions from a review of the runtime: a set wait answered when a waited child asks,
//! open questions refused when a draining run ends, restartable detached children of an
//! ended owner settling for good, no restart after an abort, a resumed agent free of an old
//! shutdown, no queued agent stranded by root escalation, and steers refused once a run is
//! over.
mod support;

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{EventKind, RestartPolicy, SettlePolicy, WaitPolicy};
use agent_tree::testkit::{Call, Script, ScriptedModel, Target, Turn};
use serde_json::json;
use support::harness::{a, tree};
use support::{WAIT_LIMIT as GUARD, ask, delegator_of_all as delegator};

/// A `wait_subagents` over a child that asks its owner is answered at once with the
/// question, as a single-child wait is, instead of deadlocking.
#[tokio::test(start_paused = true)]
async fn a_set_wait_is_answered_when_a_waited_child_asks() {
    let model = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::calls([
                    Call::spawn_background("asker", "x"),
                    Call::spawn_background("leaf", "y"),
                ]),
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
            ]),
        )
        .script(
            "asker",
            Script::new([Turn::calls([ask("colour?")]), Turn::answer("ok")]),
        )
        .script("leaf", Script::new([Turn::answer("leaf")]));
    let catalog = Catalog::new([
        delegator("boss"),
        AgentDefinition::new("asker", ""),
        AgentDefinition::new("leaf", ""),
    ])
    .unwrap();
    let tree = tree(model, catalog, TreeConfig::default()).await;
    let run = tree.run(SpawnRequest::new("boss", "go"));
    let r = tokio::time::timeout(GUARD, run).await;
    assert!(
        r.is_ok(),
        "deadlock: boss waits on {{asker, leaf}}, asker waits for boss"
    );
}

/// A question still open when the owner's run ends (and the owner drains) is refused, so
/// neither the child nor the draining owner waits forever.
#[tokio::test(start_paused = true)]
async fn a_question_left_open_when_a_draining_run_ends_is_refused() {
    let model = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::calls([Call::spawn_background("asker", "x")]),
                // the question arrives while this turn is in flight; the model ends anyway
                Turn::answer("boss done").after(Duration::from_millis(50)),
            ]),
        )
        .script(
            "asker",
            Script::new([Turn::calls([ask("colour?")]), Turn::answer("ok")]),
        );
    let catalog = Catalog::new([
        delegator("boss").with_settle(SettlePolicy::Drain),
        AgentDefinition::new("asker", ""),
    ])
    .unwrap();
    let tree = tree(model, catalog, TreeConfig::default()).await;
    let run = tree.run(SpawnRequest::new("boss", "go"));
    let r = tokio::time::timeout(GUARD, run).await;
    assert!(
        r.is_ok(),
        "hang: boss {:?}, asker {:?}",
        tree.record(a(1)).map(|r| r.status),
        tree.record(a(2)).map(|r| r.status)
    );
}

/// A restartable detached child whose owner already settled has no one to decide a restart:
/// its exit is final at once, its slot freed and its watchers told.
#[tokio::test(start_paused = true)]
async fn a_restartable_detached_child_of_an_ended_owner_settles_for_good() {
    let model = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::calls([
                    Call::spawn_background("flaky", "x").with_field("detached", json!(true))
                ]),
                Turn::answer("boss done"),
            ]),
        )
        .script(
            "flaky",
            Script::new([Turn::fail("connection reset").after(Duration::from_millis(100))]),
        );
    let catalog = Catalog::new([
        delegator("boss"),
        AgentDefinition::new("flaky", "").with_restart(RestartPolicy::Transient),
    ])
    .unwrap();
    let tree = tree(model, catalog, TreeConfig::default()).await;
    let boss = tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
    assert!(boss.is_completed());
    let r = tokio::time::timeout(GUARD, tree.idle()).await;
    assert!(
        r.is_ok(),
        "stuck: live={} flaky={:?} (outcome recorded, never final)",
        tree.live(),
        tree.record(a(2)).map(|r| r.status)
    );
}

/// "An abort is the owner's or the application's intent and never restarts": whether the
/// abort lands while the failed agent awaits the root's restart decision or after the root
/// restarted it, no model call and no restart follows the abort.
#[tokio::test(start_paused = true)]
async fn an_abort_is_never_followed_by_a_restart() {
    let model = ScriptedModel::new().script(
        "flaky",
        Script::new([Turn::fail("boom"), Turn::hang(), Turn::answer("ran again")]),
    );
    let catalog =
        Catalog::new([AgentDefinition::new("flaky", "").with_restart(RestartPolicy::Transient)])
            .unwrap();
    let tree = tree(model.clone(), catalog, TreeConfig::default()).await;
    let mut events = tree.subscribe();
    let h = tree.spawn(SpawnRequest::new("flaky", "go")).await.unwrap();
    loop {
        let e = events.next().await.unwrap();
        if e.agent == h.id() && matches!(e.kind, EventKind::Failed { .. }) {
            break;
        }
    }
    tree.abort(h.id()).unwrap();
    let calls_at_abort = model.calls_by(h.id());
    let restarts_at_abort = tree.record(h.id()).unwrap().incarnation;
    tokio::time::timeout(GUARD, tree.idle()).await.unwrap();
    let rec = tree.record(h.id()).unwrap();
    assert!(rec.status.is_terminal());
    assert_eq!(
        (rec.incarnation, model.calls_by(h.id())),
        (restarts_at_abort, calls_at_abort),
        "restarted after the abort: {:?}",
        rec.outcome
    );
}

/// A resume starts a new run free of the shutdown that ended the last one: its failures
/// restart as usual.
#[tokio::test(start_paused = true)]
async fn a_resumed_agent_is_not_under_an_old_shutdown() {
    let model = ScriptedModel::new().script(
        "flaky",
        Script::new([
            Turn::hang(),
            Turn::fail("boom"),
            Turn::answer("restarted ok"),
        ]),
    );
    let catalog =
        Catalog::new([AgentDefinition::new("flaky", "").with_restart(RestartPolicy::Transient)])
            .unwrap();
    let tree = tree(model.clone(), catalog, TreeConfig::default()).await;
    let h = tree.spawn(SpawnRequest::new("flaky", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let report = tree.shutdown_agent(h.id()).await.unwrap();
    assert_eq!(report.graceful, vec![h.id()]);
    let mut h2 = tree.resume(h.id(), "again").await.unwrap();
    let _ = tokio::time::timeout(GUARD, h2.outcome()).await;
    let rec = tree.record(h.id()).unwrap();
    assert_eq!(
        rec.incarnation, 2,
        "transient failure after resume not restarted: {:?}",
        rec.outcome
    );
}

/// Root escalation with the pool full leaves no queued top-level agent behind.
#[tokio::test(start_paused = true)]
async fn root_escalation_strands_no_queued_agent() {
    let model = ScriptedModel::new()
        .script(
            "flaky",
            Script::new([Turn::fail("a"), Turn::fail("b"), Turn::fail("c")]),
        )
        .script("leaf", Script::new([Turn::answer("leaf")]));
    let catalog = Catalog::new([
        AgentDefinition::new("flaky", "").with_restart(RestartPolicy::Transient),
        AgentDefinition::new("leaf", ""),
    ])
    .unwrap();
    let config = TreeConfig::default().with_max_concurrent(1);
    let tree = tree(model, catalog, config).await;
    let _a = tree
        .spawn(SpawnRequest::new("flaky", "go").background())
        .await
        .unwrap();
    let b = tree
        .spawn(SpawnRequest::new("leaf", "go").background())
        .await
        .unwrap();
    let r = tokio::time::timeout(GUARD, tree.idle()).await;
    assert!(
        r.is_ok(),
        "stuck: live={} queued leaf={:?} root={:?}",
        tree.live(),
        tree.record(b.id()).map(|r| r.status),
        tree.record(a(0)).map(|r| r.status)
    );
}

/// A steer to a draining (completing) agent is refused: no turn would ever read it.
#[tokio::test(start_paused = true)]
async fn a_steer_to_a_completing_agent_is_refused() {
    let model = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::calls([Call::spawn_background("slow", "x")]),
                Turn::answer("boss done"),
            ]),
        )
        .script(
            "slow",
            Script::new([Turn::answer("slow").after(Duration::from_secs(1))]),
        );
    let catalog = Catalog::new([
        delegator("boss").with_settle(SettlePolicy::Drain),
        AgentDefinition::new("slow", ""),
    ])
    .unwrap();
    let tree = tree(model, catalog, TreeConfig::default()).await;
    let h = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        tree.record(h.id()).unwrap().status,
        agent_tree::protocol::AgentStatus::Completing
    );
    let receipt = tree.steer(h.id(), "please also do X").await;
    assert!(
        receipt.is_err(),
        "receipt {receipt:?} but no turn will ever read it"
    );
}
