//! Regressions from a second review: two questions in one turn, a queued sibling in a
//! restart plan, a plan whose stopping sibling is shut down meanwhile, a steer accepted during
//! the last turn, a detached child asking an owner that settles, and a foreground child whose
//! wait was answered by its question.
mod support;

use std::time::Duration;

use agent_tree::HookContext;
use agent_tree::prelude::*;
use agent_tree::protocol::{AgentStatus, EventKind, RestartPolicy, SettlePolicy, Strategy};
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use serde_json::json;
use support::harness::{a, tree};
use support::{WAIT_LIMIT as GUARD, ask, delegator_of_all as delegator};

/// A model that asks two questions in one turn gets the second refused (one question at a
/// time), and the owner's end refuses the open one: neither the child nor a draining owner
/// waits forever.
#[tokio::test(start_paused = true)]
async fn two_questions_in_one_turn_do_not_hang_a_draining_owner() {
    let model = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::calls([Call::spawn_background("asker", "x")]),
                Turn::answer("boss done").after(Duration::from_millis(50)),
            ]),
        )
        .script(
            "asker",
            Script::new([
                Turn::calls([ask("colour?"), ask("size?")]),
                Turn::answer("ok"),
            ]),
        );
    let catalog = Catalog::new([
        delegator("boss").with_settle(SettlePolicy::Drain),
        AgentDefinition::new("asker", ""),
    ])
    .unwrap();
    let tree = tree(model, catalog, TreeConfig::default()).await;
    let r = tokio::time::timeout(GUARD, tree.run(SpawnRequest::new("boss", "go"))).await;
    assert!(
        r.is_ok(),
        "hang: boss {:?}, asker {:?}",
        tree.record(a(1)).map(|r| r.status),
        tree.record(a(2)).map(|r| r.status)
    );
}

/// Root `one_for_all` with a full pool: a queued sibling is neither stopped nor restarted by
/// the plan (it has nothing to stop), so the failed agent restarts and everything settles.
#[tokio::test(start_paused = true)]
async fn one_for_all_with_a_queued_sibling_does_not_hang() {
    let model = ScriptedModel::new()
        .script(
            "flaky",
            Script::new([Turn::fail("boom"), Turn::answer("ok")]),
        )
        .script("leaf", Script::new([Turn::answer("leaf")]));
    let catalog = Catalog::new([
        AgentDefinition::new("flaky", "").with_restart(RestartPolicy::Transient),
        AgentDefinition::new("leaf", ""),
    ])
    .unwrap();
    let config = TreeConfig::default()
        .with_max_concurrent(1)
        .with_root_supervision(Strategy::OneForAll, 3, Duration::from_secs(5));
    let tree = tree(model, catalog, config).await;
    let f = tree
        .spawn(SpawnRequest::new("flaky", "go").background())
        .await
        .unwrap();
    let l = tree
        .spawn(SpawnRequest::new("leaf", "go").background())
        .await
        .unwrap();
    let r = tokio::time::timeout(GUARD, tree.idle()).await;
    assert!(
        r.is_ok(),
        "stuck: live={} flaky={:?} (awaiting) leaf={:?}",
        tree.live(),
        tree.record(f.id()).map(|r| (r.status, r.incarnation)),
        tree.record(l.id()).map(|r| r.status),
    );
}

/// A sibling the plan is stopping that a shutdown also reached settles final, not held: the
/// plan moves on past it and the failed agent is restarted.
#[tokio::test(start_paused = true)]
async fn a_restart_plan_survives_a_sibling_shut_down_meanwhile() {
    let model = ScriptedModel::new()
        .script(
            "flaky",
            Script::new([
                Turn::fail("boom").after(Duration::from_millis(100)),
                Turn::answer("ok"),
            ]),
        )
        .script("idler", Script::new([Turn::hang()]));
    let catalog = Catalog::new([
        AgentDefinition::new("flaky", "").with_restart(RestartPolicy::Transient),
        AgentDefinition::new("idler", ""),
    ])
    .unwrap();
    let config =
        TreeConfig::default().with_root_supervision(Strategy::OneForAll, 3, Duration::from_secs(5));
    let tree = Tree::builder()
        .config(config)
        .catalog(catalog)
        .model(model)
        .on_shutdown(|_ctx: HookContext| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(())
        })
        .build()
        .await
        .unwrap();
    let f = tree.spawn(SpawnRequest::new("flaky", "go")).await.unwrap();
    let i = tree.spawn(SpawnRequest::new("idler", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let report = tree.shutdown_agent(i.id()).await.unwrap();
    assert_eq!(report.graceful, vec![i.id()]);
    let r = tokio::time::timeout(GUARD, tree.idle()).await;
    assert!(
        r.is_ok(),
        "stuck: live={} flaky={:?} outcome={:?}",
        tree.live(),
        tree.record(f.id()).map(|r| (r.status, r.incarnation)),
        tree.outcome(f.id()),
    );
}

/// A steer that arrives during the turn that turns out to be the last is read: the model
/// gets one more turn with it (a `steered` event), or the steer is refused.
#[tokio::test(start_paused = true)]
async fn a_delivered_steer_is_read_or_refused() {
    let model = ScriptedModel::new().script(
        "worker",
        Script::new([
            Turn::answer("done").after(Duration::from_millis(100)),
            Turn::answer("done, with X"),
        ]),
    );
    let catalog = Catalog::new([AgentDefinition::new("worker", "")]).unwrap();
    let tree = tree(model.clone(), catalog, TreeConfig::default()).await;
    let mut events = tree.subscribe();
    let mut h = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let receipt = tree.steer(h.id(), "also do X").await;
    let _ = h.outcome().await;
    let mut steered = 0;
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_millis(1), events.next()).await {
        if matches!(e.kind, EventKind::Steered) {
            steered += 1;
        }
    }
    assert!(
        receipt.is_err() || (model.calls_by(h.id()) == 2 && steered == 1),
        "receipt {receipt:?}, but model calls {} and steered events {steered}",
        model.calls_by(h.id())
    );
}

/// A detached child asking its owner in the instant the owner settles gets a refusal (the
/// owner's settling is watched), never waits forever.
#[tokio::test(start_paused = true)]
async fn a_detached_child_asking_a_settling_owner_gets_an_answer() {
    for ms in [49u64, 50, 51] {
        let model = ScriptedModel::new()
            .script(
                "boss",
                Script::new([
                    Turn::calls([
                        Call::spawn_background("asker", "x").with_field("detached", json!(true))
                    ]),
                    Turn::answer("boss done").after(Duration::from_millis(50)),
                ]),
            )
            .script(
                "asker",
                Script::new([
                    Turn::calls([ask("colour?")]).after(Duration::from_millis(ms)),
                    Turn::answer("ok"),
                ]),
            );
        let catalog = Catalog::new([delegator("boss"), AgentDefinition::new("asker", "")]).unwrap();
        let tree = tree(model, catalog, TreeConfig::default()).await;
        let boss = tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
        assert!(boss.is_completed());
        let r = tokio::time::timeout(GUARD, tree.idle()).await;
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
        let model = ScriptedModel::new()
            .script(
                "boss",
                Script::new([
                    Turn::calls([
                        Call::spawn_background("asker", "x").with_field("detached", json!(true))
                    ]),
                    Turn::answer("boss done").after(Duration::from_millis(4)),
                ]),
            )
            .script(
                "asker",
                Script::new([
                    Turn::calls([ask("colour?")]).after(Duration::from_millis(ms)),
                    Turn::answer("ok"),
                ]),
            );
        let catalog = Catalog::new([delegator("boss"), AgentDefinition::new("asker", "")]).unwrap();
        let tree = tree(model, catalog, TreeConfig::default()).await;
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
    use agent_tree::testkit::Target;
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            Script::new([
                Turn::calls([Call::spawn("asker", "x")]),
                Turn::calls([Call::steer(Target::Spawned(0), "blue")]),
                Turn::calls([Call::peek(Target::Raw("a99".into()))])
                    .after(Duration::from_millis(100)),
                Turn::answer("boss done"),
            ]),
        )
        .script(
            "asker",
            Script::new([
                Turn::calls([ask("colour?")]),
                Turn::answer("the answer is blue"),
            ]),
        );
    let model = support::harness::Recorder::new(scripted);
    let catalog = Catalog::new([delegator("boss"), AgentDefinition::new("asker", "")]).unwrap();
    let tree = tree(model.clone(), catalog, TreeConfig::default()).await;
    let out = tokio::time::timeout(GUARD, tree.run(SpawnRequest::new("boss", "go")))
        .await
        .unwrap()
        .unwrap();
    assert!(out.is_completed());
    assert!(tree.outcome(a(2)).unwrap().is_completed());
    let last = model.of(a(1)).last().cloned().unwrap();
    let seen = format!("{:?}", last.messages).contains("the answer is blue");
    assert!(
        seen,
        "the foreground child's result never reached its owner"
    );
}
