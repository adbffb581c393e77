//! The restart matrix, after OTP's own supervisor suite: restart type (`permanent`,
//! `transient`, `temporary`) × exit kind (normal completion, model error, model panic,
//! killed actor, abort) → restarted or not, as the table in `actors/src/policy/restart.rs`
//! says, both under an agent supervisor and under the tree's root. An abort is never restarted.
//!
//! A restart keeps the `AgentId`, bumps the incarnation, emits `restarted`, keeps the usage
//! already spent (the agent's own usage accumulates across incarnations), and re-runs the
//! original request: the new incarnation's first model call sees the original prompt only
//! (and an inherited context again, when the spawn inherited one).
//!
//! The `killed` exit is `Tree::kill` (Erlang's `exit(Pid, kill)`) of the child's actor while
//! it hangs in a model call. A child killed at a shutdown deadline is never restarted:
//! `killed_at_a_shutdown_deadline_is_never_restarted` checks that for every restart type. No
//! restart follows an abort, wherever the restart decision stood when it landed, and a
//! restartable detached child whose owner already ended settles for good. Nothing restarts
//! during a shutdown, even a kill racing it.

use agent_tree::testkit::EventProbe;
use std::sync::Arc;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, Event, EventKind, Message, RestartPolicy, Role, Strategy};
use agent_tree::testkit::{Call, Script, ScriptedModel, Target, Turn};
use agent_tree::{HookContext, HookError};
use serde_json::json;

use crate::support::harness::{GUARD, a, tree};
use crate::support::lifetimes::{hanging, restarted, restarts};
use crate::support::races::{REAL_GUARD, bounded, yields};
use crate::support::{
    RecordingModel, WAIT_LIMIT, catalog, delegator, delegator_of_all, leaf, run_admitted,
    spawn_admitted, user_texts, within,
};
use crate::support::{build_tree, run_within};

const TASK: &str = "the original task";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exit {
    Completed,
    Failed,
    Panicked,
    Killed,
    Aborted,
}

const EXITS: [Exit; 5] = [
    Exit::Completed,
    Exit::Failed,
    Exit::Panicked,
    Exit::Killed,
    Exit::Aborted,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// A supervisor agent spawns the child in the background and waits for its result.
    Agent,
    /// The application spawns the child at top level: the root supervises it.
    Root,
}

/// The table of `actors/src/policy/restart.rs`, as this test expects it.
fn restart_expected(policy: RestartPolicy, exit: Exit) -> bool {
    match (policy, exit) {
        (_, Exit::Aborted) | (RestartPolicy::Temporary, _) => false,
        (RestartPolicy::Permanent, _) => true,
        (RestartPolicy::Transient, exit) => exit != Exit::Completed,
    }
}

/// The child's script: a first turn that spends usage, the exit, then (a second
/// incarnation's run) a turn spending more usage and a hang.
fn child_script(exit: Exit) -> Script {
    let exit_turn = match exit {
        Exit::Completed => Turn::answer("first run done").usage(Usage::tokens(1, 1)),
        Exit::Failed => Turn::fail("gateway down"),
        Exit::Panicked => Turn::panic("kaboom"),
        Exit::Killed | Exit::Aborted => Turn::hang(),
    };
    Script::new([
        Turn::calls([Call::tool("noop", json!({}))]).usage(Usage::tokens(7, 3)),
        exit_turn,
        Turn::calls([Call::tool("noop", json!({}))]).usage(Usage::tokens(20, 5)),
        Turn::hang(),
    ])
}

struct Cell {
    owner: Owner,
    policy: RestartPolicy,
    exit: Exit,
}

impl Cell {
    fn name(&self) -> String {
        format!("{:?} {:?} {:?}", self.owner, self.policy, self.exit)
    }
}

async fn run_cell(cell: Cell) {
    let name = cell.name();
    let scripted = ScriptedModel::new()
        .script(
            "sup",
            [
                Turn::spawn_background("child", TASK),
                Turn::calls([Call::result(Target::Spawned(0))]),
                Turn::answer("sup done"),
            ],
        )
        .script("child", child_script(cell.exit));
    let model = RecordingModel::new(scripted);
    let config = TreeConfig::default().with_root_supervision(
        Strategy::OneForOne,
        10,
        Duration::from_secs(60),
    );
    let tree = tree(
        model.clone(),
        catalog([
            delegator("sup", &["child"]).with_supervision(Strategy::OneForOne, 10, 60_000),
            leaf("child").with_restart(cell.policy),
        ]),
        config,
    )
    .await;
    let mut events = EventProbe::new(&tree);
    let (sup, child) = match cell.owner {
        Owner::Agent => {
            spawn_admitted(&tree, SpawnRequest::new("sup", "supervise")).await;
            (Some(a(1)), a(2))
        }
        Owner::Root => {
            spawn_admitted(&tree, SpawnRequest::new("child", TASK)).await;
            (None, a(1))
        }
    };
    // The child exists once it made its first model call.
    model.until_calls(child, 1).await;
    if matches!(cell.exit, Exit::Killed | Exit::Aborted) {
        // The child hangs in its second model call: kill or abort it there.
        model.until_calls(child, 2).await;
        if cell.exit == Exit::Killed {
            tree.kill(child).expect("the child's actor runs");
        } else {
            tree.abort(child).expect("the child exists");
        }
    }
    let mut handle = tree.handle(child).expect("the child exists");
    let restarted_now = tokio::select! {
        outcome = handle.outcome() => Err(outcome),
        _ = events.expect_event("the child's restart", restarted(child, 2)) => Ok(()),
        () = tokio::time::sleep(GUARD) => panic!("{name}: neither restarted nor settled"),
    };
    let expected = restart_expected(cell.policy, cell.exit);
    match restarted_now {
        Ok(()) => {
            assert!(expected, "{name}: restarted, but the table says no");
            // The new incarnation re-runs the original request from scratch.
            model.until_calls(child, 4).await;
            let calls = model.calls_of(child);
            let first = &calls[2];
            assert_eq!(first.incarnation, 2, "{name}");
            assert_eq!(first.turn, 1, "{name}: the turn count restarts");
            assert_eq!(
                first.messages.to_vec(),
                vec![Message::user(TASK)],
                "{name}: the new incarnation sees the original prompt only"
            );
            let record = tree.record(child).expect("record");
            assert_eq!(record.id, child, "{name}");
            assert_eq!(record.incarnation, 2, "{name}");
            assert_eq!(record.status, AgentStatus::Running, "{name}");
            assert!(record.outcome.is_none(), "{name}");
            let first_run = if cell.exit == Exit::Completed {
                Usage::tokens(8, 4)
            } else {
                Usage::tokens(7, 3)
            };
            assert_eq!(
                record.own,
                first_run + Usage::tokens(20, 5),
                "{name}: own usage accumulates across incarnations"
            );
            assert!(tree.snapshot().check_usage().is_ok(), "{name}");
            if let Some(sup) = sup {
                assert_eq!(
                    tree.record(sup).expect("sup").status,
                    AgentStatus::Running,
                    "{name}: the supervisor is still waiting"
                );
            }
            // A shutdown ends it for good: nothing restarts under a shutdown.
            let report = within("shutdown", tree.shutdown()).await;
            assert!(report.killed.is_empty(), "{name}: {report:?}");
            let record = tree.record(child).expect("record");
            assert_eq!(
                record.incarnation, 2,
                "{name}: not restarted by the shutdown"
            );
            assert_eq!(record.status, AgentStatus::Aborted, "{name}");
            let events = events.drain();
            assert!(restarts(&events).is_empty(), "{name}: {events:?}");
        }
        Err(outcome) => {
            assert!(!expected, "{name}: not restarted, but the table says so");
            let want = match cell.exit {
                Exit::Completed => (AgentStatus::Completed, EndReason::FinalAnswer),
                Exit::Failed => (AgentStatus::Failed, EndReason::ModelError),
                Exit::Panicked => (AgentStatus::Failed, EndReason::Panicked),
                Exit::Killed => (AgentStatus::Killed, EndReason::Killed),
                Exit::Aborted => (AgentStatus::Aborted, EndReason::Aborted),
            };
            assert_eq!(
                (outcome.status, outcome.reason),
                want,
                "{name}: {outcome:?}"
            );
            let record = tree.record(child).expect("record");
            assert_eq!(record.incarnation, 1, "{name}");
            assert_eq!(model.count_of(child), 2, "{name}: no second run");
            if let Some(sup) = sup {
                // The supervisor's wait saw the final outcome, and it carried on.
                let sup_outcome = within("the supervisor", async {
                    tree.handle(sup).expect("sup").outcome().await
                })
                .await;
                assert_eq!(sup_outcome.text.as_deref(), Some("sup done"), "{name}");
                let waited = &model.calls_of(sup)[2].messages;
                let result = waited
                    .iter()
                    .rfind(|m| m.role == Role::Tool)
                    .expect("a wait result");
                let value: serde_json::Value = serde_json::from_str(&result.content).expect("JSON");
                assert_eq!(value["status"], json!(outcome.status.as_str()), "{name}");
            }
            within("idle", tree.idle()).await;
            let events = events.drain();
            assert!(restarts(&events).is_empty(), "{name}: {events:?}");
            tree.shutdown().await;
        }
    }
    assert!(tree.alive_actors().is_empty(), "{name}");
}

async fn run_row(owner: Owner, policy: RestartPolicy) {
    for exit in EXITS {
        run_cell(Cell {
            owner,
            policy,
            exit,
        })
        .await;
    }
}

/// A permanent child is restarted after every exit (completion, model error, panic, kill)
/// except an abort, under an agent supervisor and under the root alike.
#[tokio::test(start_paused = true)]
async fn permanent_restarts_every_exit_but_abort() {
    run_row(Owner::Agent, RestartPolicy::Permanent).await;
    run_row(Owner::Root, RestartPolicy::Permanent).await;
}

/// A transient child is restarted after an abnormal exit (model error, panic, kill) only: a
/// completion and an abort are final, under an agent supervisor and under the root alike.
#[tokio::test(start_paused = true)]
async fn transient_restarts_abnormal_exits_only() {
    run_row(Owner::Agent, RestartPolicy::Transient).await;
    run_row(Owner::Root, RestartPolicy::Transient).await;
}

/// A temporary child is never restarted, whatever its exit, under an agent supervisor and under
/// the root alike.
#[tokio::test(start_paused = true)]
async fn temporary_never_restarts() {
    run_row(Owner::Agent, RestartPolicy::Temporary).await;
    run_row(Owner::Root, RestartPolicy::Temporary).await;
}

/// A restart emits exactly one `restarted` event, after the exit's terminal event and before
/// anything of the new incarnation, and every event of the new run carries the same id.
#[tokio::test(start_paused = true)]
async fn restart_event_sits_between_the_incarnations() {
    let scripted = ScriptedModel::new()
        .script(
            "sup",
            [
                Turn::spawn_background("child", TASK),
                Turn::calls([Call::result(Target::Spawned(0))]),
                Turn::answer("sup done"),
            ],
        )
        .script(
            "child",
            [
                Turn::fail("first run fails").after(Duration::from_millis(300)),
                Turn::answer("second run done").usage(Usage::tokens(2, 2)),
            ],
        );
    let model = RecordingModel::new(scripted);
    let tree = build_tree(
        catalog([
            delegator("sup", &["child"]).with_supervision(Strategy::OneForOne, 3, 5_000),
            leaf("child").with_restart(RestartPolicy::Transient),
        ]),
        model.clone(),
    )
    .await;
    let mut events = tree.subscribe();
    let outcome = run_within(&tree, "the supervisor", SpawnRequest::new("sup", "go")).await;
    assert_eq!(outcome.text.as_deref(), Some("sup done"));
    within("idle", tree.idle()).await;
    let events: Vec<Event> = events
        .drain()
        .into_iter()
        .filter(|e| e.agent == a(2))
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.name()).collect();
    assert_eq!(
        kinds,
        [
            "spawned",
            "started",
            "failed",
            "restarted",
            "started",
            "usage_reported",
            "completed"
        ],
        "{events:?}"
    );
    assert_eq!(events[2].at_ms, 300);
    assert_eq!(events[3].at_ms, 300, "restarted at once");
    assert_eq!(events[3].kind, EventKind::Restarted { incarnation: 2 });
    assert_eq!(
        events[4].kind,
        EventKind::Started {
            agent_type: "child".into(),
            incarnation: 2
        },
        "every run announces its start"
    );
    let record = tree.record(a(2)).expect("record");
    assert_eq!(
        (record.incarnation, record.status),
        (2, AgentStatus::Completed)
    );
    assert_eq!(
        model.calls_of(a(2))[1].messages.to_vec(),
        vec![Message::user(TASK)]
    );
    // The supervisor's wait got the second run's answer, not the first run's failure.
    let waited = &model.calls_of(a(1))[2].messages;
    let last = waited.last().expect("a wait result");
    let value: serde_json::Value = serde_json::from_str(&last.content).expect("JSON");
    assert_eq!(value["status"], json!("completed"), "{value}");
    assert_eq!(value["text"], json!("second run done"), "{value}");
    tree.shutdown().await;
}

/// The `killed` row as far as the public API reaches: a child killed at a shutdown deadline
/// (its shutdown hook never returns) is never restarted, whatever its restart type, under an
/// agent supervisor and under the root.
#[tokio::test(start_paused = true)]
async fn killed_at_a_shutdown_deadline_is_never_restarted() {
    for policy in [
        RestartPolicy::Permanent,
        RestartPolicy::Transient,
        RestartPolicy::Temporary,
    ] {
        for owner in [Owner::Agent, Owner::Root] {
            let name = format!("{owner:?} {policy:?}");
            let scripted = ScriptedModel::new()
                .script(
                    "sup",
                    [
                        Turn::spawn_background("child", TASK),
                        Turn::calls([Call::result(Target::Spawned(0))]),
                    ],
                )
                .script("child", hanging(4));
            let model = RecordingModel::new(scripted);
            let stuck = match owner {
                Owner::Agent => a(2),
                Owner::Root => a(1),
            };
            let tree = Arc::new(
                Tree::builder()
                    .config(
                        TreeConfig::default()
                            .with_shutdown_grace(Duration::from_secs(1))
                            .with_root_supervision(
                                Strategy::OneForOne,
                                10,
                                Duration::from_secs(60),
                            ),
                    )
                    .catalog(catalog([
                        delegator("sup", &["child"]).with_supervision(
                            Strategy::OneForOne,
                            10,
                            60_000,
                        ),
                        leaf("child").with_restart(policy),
                    ]))
                    .model(model.clone())
                    .on_shutdown(move |ctx: HookContext| async move {
                        if ctx.agent == stuck {
                            std::future::pending::<()>().await;
                        }
                        Ok::<(), HookError>(())
                    })
                    .build()
                    .await
                    .expect("the tree builds"),
            );
            let mut events = EventProbe::new(&tree);
            let top = if owner == Owner::Agent {
                "sup"
            } else {
                "child"
            };
            spawn_admitted(&tree, SpawnRequest::new(top, TASK)).await;
            model.until_calls(stuck, 1).await;
            let report = within("shutdown", tree.shutdown()).await;
            assert!(report.killed.contains(&stuck), "{name}: {report:?}");
            let record = tree.record(stuck).expect("record");
            assert_eq!(record.status, AgentStatus::Killed, "{name}");
            assert_eq!(record.incarnation, 1, "{name}: never restarted");
            events
                .expect_event("the stuck child's kill", |e| {
                    e.agent == stuck && matches!(e.kind, EventKind::Killed { .. })
                })
                .await;
            events.drain();
            let log = events.seen().to_vec();
            assert!(restarts(&log).is_empty(), "{name}: {log:?}");
            assert_eq!(model.count_of(stuck), 1, "{name}: no second run");
            assert!(tree.alive_actors().is_empty(), "{name}");
        }
    }
}

/// A restartable detached child whose owner already settled has no one to decide a restart:
/// its exit is final at once, its slot freed and its watchers told.
#[tokio::test(start_paused = true)]
async fn a_restartable_detached_child_of_an_ended_owner_settles_for_good() {
    let model = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::calls([Call::spawn_background("flaky", "x")]),
                Turn::answer("boss done"),
            ],
        )
        .script(
            "flaky",
            [Turn::fail("connection reset").after(Duration::from_millis(100))],
        );
    let catalog = catalog([
        delegator_of_all("boss"),
        AgentDefinition::new("flaky", "")
            .with_restart(RestartPolicy::Transient)
            .detached(),
    ]);
    let tree = build_tree(catalog, model).await;
    let boss = tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
    assert!(boss.is_completed());
    let r = tokio::time::timeout(WAIT_LIMIT, tree.idle()).await;
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
        [Turn::fail("boom"), Turn::hang(), Turn::answer("ran again")],
    );
    let catalog =
        catalog([AgentDefinition::new("flaky", "").with_restart(RestartPolicy::Transient)]);
    let tree = build_tree(catalog, model.clone()).await;
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
    tokio::time::timeout(WAIT_LIMIT, tree.idle()).await.unwrap();
    let rec = tree.record(h.id()).unwrap();
    assert!(rec.status.is_terminal());
    assert_eq!(
        (rec.incarnation, model.calls_by(h.id())),
        (restarts_at_abort, calls_at_abort),
        "restarted after the abort: {:?}",
        rec.outcome
    );
}

/// A restart "re-runs the original spawn request": a child spawned with
/// `inherit_context` gets its owner's conversation again in its restarted incarnation.
#[tokio::test(start_paused = true)]
async fn a_restarted_child_keeps_its_inherited_context() {
    let scripted = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::calls([Call::spawn("heir", "child task")]),
                Turn::answer("ok"),
            ],
        )
        .script("heir", [Turn::fail("transient"), Turn::answer("done")]);
    let recorder = RecordingModel::new(scripted);
    let mut heir = AgentDefinition::new("heir", "").with_restart(RestartPolicy::Transient);
    heir.inherit_context = true;
    let catalog = catalog([delegator_of_all("boss"), heir]);
    let tree = build_tree(catalog, recorder.clone()).await;
    let out = run_admitted(&tree, SpawnRequest::new("boss", "SECRET owner context")).await;
    assert_eq!(out.status, AgentStatus::Completed);
    let runs = recorder.calls_of(a(2));
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

/// A kill of a transient top-level agent racing `Tree::shutdown`, on worker threads: nothing
/// restarts during a shutdown. No `restarted` event follows the root's `completing`, the
/// agent is reported once, and nothing of it is alive afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_racing_a_shutdown_restarts_nothing_mt() {
    for i in 0..80u64 {
        let model = ScriptedModel::new().script("w", hanging(50));
        let mut config = TreeConfig::default();
        config.root_max_restarts = 100;
        let tree = Arc::new(
            tree(
                model,
                catalog([leaf("w").with_restart(RestartPolicy::Transient)]),
                config,
            )
            .await,
        );
        let mut events = tree.subscribe();
        let w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
        let id = w.id();
        loop {
            let e = bounded(REAL_GUARD, "w started", events.next())
                .await
                .unwrap();
            if e.agent == id && matches!(e.kind, EventKind::Started { .. }) {
                break;
            }
        }
        let killer = {
            let tree = tree.clone();
            tokio::spawn(async move {
                yields(i % 9).await;
                let _ = tree.kill(id);
            })
        };
        yields(i % 4).await;
        let report = bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
        killer.await.unwrap();
        let all = events.drain();
        let completing = all
            .iter()
            .position(|e| e.agent == AgentId::ROOT && matches!(e.kind, EventKind::Completing))
            .expect("the root's completing");
        let late: Vec<_> = all[completing..]
            .iter()
            .filter(|e| e.agent == id && matches!(e.kind, EventKind::Restarted { .. }))
            .collect();
        assert!(
            late.is_empty(),
            "iteration {i}: restarted after the shutdown began: {all:#?}"
        );
        let record = tree.record(id).unwrap();
        assert!(record.status.is_terminal(), "iteration {i}: {record:?}");
        assert!(
            tree.alive_actors().is_empty(),
            "iteration {i}: {:?}",
            tree.alive_actors()
        );
        let listed = report
            .graceful
            .iter()
            .chain(&report.killed)
            .filter(|&&a| a == id)
            .count();
        assert_eq!(listed, 1, "iteration {i}: {report:?}");
    }
}
