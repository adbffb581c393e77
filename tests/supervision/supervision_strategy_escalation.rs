//! Strategies and escalation, read off the event order. When one child of a supervisor
//! fails: `one_for_one` restarts it alone; `one_for_all` stops every live sibling in reverse
//! start order, then restarts all of them in start order; `rest_for_one` does the same for
//! the siblings started after the failed one only. Siblings outside the plan keep running
//! (their model calls are never cancelled); a temporary sibling is stopped but not
//! restarted.
//!
//! Past the restart intensity the supervisor fails with reason `escalated`, its error holding
//! the original cause; its live children are aborted first (bottom-up); its own owner sees
//! that failure (a foreground spawn's result), and restarts it when it is permanent — an
//! agent supervisor and the tree's root alike. Past the root's intensity the root fails and
//! every agent is aborted, stranding no queued agent. A queued sibling, or one a shutdown
//! reaches meanwhile, does not hold up a restart plan.

use agent_tree::testkit::EventProbe;
use std::time::Duration;

use agent_tree::HookContext;
use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, Event, EventKind, Message, RestartPolicy, Strategy};
use agent_tree::testkit::{Call, Script, ScriptedModel, Target, Turn};
use serde_json::json;

use crate::support::harness::{a, assert_escalated, tree};
use crate::support::lifetimes::{hanging, restarted, terminal};
use crate::support::scripts::{background_spawns, delegates};
use crate::support::{
    CallEnd, RecordingModel, WAIT_LIMIT, catalog, delegator, leaf, spawn_admitted, within,
};
use crate::support::{build_tree, run_within};

#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Ended(AgentId, &'static str),
    Restarted(AgentId),
}

fn steps(events: &[Event], among: &[AgentId]) -> Vec<Step> {
    events
        .iter()
        .filter(|e| among.contains(&e.agent))
        .filter_map(|e| match &e.kind {
            EventKind::Restarted { incarnation } => {
                assert_eq!(*incarnation, 2, "{e:?}");
                Some(Step::Restarted(e.agent))
            }
            kind if kind.terminal_status().is_some() => Some(Step::Ended(e.agent, kind.name())),
            _ => None,
        })
        .collect()
}

/// A supervisor of `strategy` over children of `types` (in start order); the child at
/// `failing` fails after 100 ms, every other one hangs. Returns the recorded events from the
/// failure until the last restart, and the model.
async fn run_strategy(strategy: Strategy, types: &[&str], failing: usize, expected: &[Step]) {
    let scripted = ScriptedModel::new()
        .script(
            "sup",
            [
                Turn::calls(
                    types
                        .iter()
                        .enumerate()
                        .map(|(i, t)| Call::spawn_background(*t, format!("run {t} #{i}"))),
                ),
                Turn::calls([Call::result(Target::Spawned(failing))]),
            ],
        )
        .script("perm", hanging(4))
        .script("temp", hanging(4));
    let children: Vec<AgentId> = (0..types.len()).map(|i| a(i as u64 + 2)).collect();
    let failed = children[failing];
    scripted.script_agent(
        failed,
        Script::new([
            Turn::fail("disk on fire").after(Duration::from_millis(100)),
            Turn::hang(),
        ]),
    );
    let model = RecordingModel::new(scripted);
    let tree = build_tree(
        catalog([
            delegator("sup", &["perm", "temp"]).with_supervision(strategy, 5, 5_000),
            leaf("perm").with_restart(RestartPolicy::Permanent),
            leaf("temp").with_restart(RestartPolicy::Temporary),
        ]),
        model.clone(),
    )
    .await;
    let mut events = EventProbe::new(&tree);
    spawn_admitted(&tree, SpawnRequest::new("sup", "supervise")).await;
    let last = match expected.last() {
        Some(Step::Restarted(id)) => *id,
        other => panic!("the plan must end with a restart: {other:?}"),
    };
    events
        .expect_event("the last restart", restarted(last, 2))
        .await;
    let log = events.seen().to_vec();
    let name = format!("{strategy:?}");
    assert_eq!(steps(&log, &children), expected, "{name}: {log:#?}");

    // Everything happened at the instant of the failure.
    let at: Vec<u64> = log
        .iter()
        .filter(|e| {
            children.contains(&e.agent)
                && (e.kind.terminal_status().is_some()
                    || matches!(e.kind, EventKind::Restarted { .. }))
        })
        .map(|e| e.at_ms)
        .collect();
    assert!(at.iter().all(|&t| t == 100), "{name}: {at:?}");

    // Every restarted child runs its original request again; the others were never touched.
    let restarted_ids: Vec<AgentId> = expected
        .iter()
        .filter_map(|s| match s {
            Step::Restarted(id) => Some(*id),
            Step::Ended(..) => None,
        })
        .collect();
    model.until_all_calls(&restarted_ids, 2).await;
    for (i, &child) in children.iter().enumerate() {
        let record = tree.record(child).expect("record");
        let calls = model.calls_of(child);
        if restarted_ids.contains(&child) {
            assert_eq!(record.incarnation, 2, "{name}: {child}");
            assert_eq!(record.status, AgentStatus::Running, "{name}: {child}");
            assert_eq!(calls[1].incarnation, 2);
            assert_eq!(
                calls[1].messages.to_vec(),
                vec![Message::user(format!("run {} #{i}", types[i]))],
                "{name}: {child} re-runs its own request"
            );
            if child != failed {
                assert_eq!(
                    calls[0].end,
                    CallEnd::Dropped,
                    "{name}: {child} was stopped"
                );
            }
        } else if expected.contains(&Step::Ended(child, "aborted")) {
            // Stopped by the strategy and not restarted: a temporary child.
            assert_eq!(types[i], "temp");
            assert_eq!(record.status, AgentStatus::Aborted, "{name}: {child}");
            assert_eq!(record.incarnation, 1);
            assert_eq!(calls.len(), 1, "{name}: {child}");
        } else {
            assert_eq!(record.incarnation, 1, "{name}: {child}");
            assert_eq!(record.status, AgentStatus::Running, "{name}: {child}");
            assert_eq!(calls.len(), 1, "{name}: {child}");
            assert_eq!(calls[0].end, CallEnd::InFlight, "{name}: {child} untouched");
        }
    }
    assert_eq!(
        tree.record(a(1)).expect("sup").status,
        AgentStatus::Running,
        "{name}: the supervisor carries on"
    );
    let report = within("shutdown", tree.shutdown()).await;
    assert!(report.killed.is_empty(), "{name}: {report:?}");
}

/// Under `one_for_one` a failed child is restarted alone: its siblings are neither stopped nor
/// restarted.
#[tokio::test(start_paused = true)]
async fn one_for_one_restarts_the_failed_child_alone() {
    // Children c0..c3 are a2..a5; c1 fails.
    let c1 = a(3);
    run_strategy(
        Strategy::OneForOne,
        &["perm", "perm", "perm", "perm"],
        1,
        &[Step::Ended(c1, "failed"), Step::Restarted(c1)],
    )
    .await;
}

/// Under `one_for_all` a failure stops every live sibling in reverse start order, then restarts
/// all of the children, the failed one included, in start order.
#[tokio::test(start_paused = true)]
async fn one_for_all_stops_in_reverse_and_restarts_in_start_order() {
    let (c0, c1, c2, c3) = (a(2), a(3), a(4), a(5));
    run_strategy(
        Strategy::OneForAll,
        &["perm", "perm", "perm", "perm"],
        1,
        &[
            Step::Ended(c1, "failed"),
            Step::Ended(c3, "aborted"),
            Step::Ended(c2, "aborted"),
            Step::Ended(c0, "aborted"),
            Step::Restarted(c0),
            Step::Restarted(c1),
            Step::Restarted(c2),
            Step::Restarted(c3),
        ],
    )
    .await;
}

/// A temporary sibling in a `one_for_all` plan is stopped with the others but never restarted.
#[tokio::test(start_paused = true)]
async fn one_for_all_stops_a_temporary_sibling_for_good() {
    let (c0, c1, c2, c3) = (a(2), a(3), a(4), a(5));
    run_strategy(
        Strategy::OneForAll,
        &["perm", "perm", "temp", "perm"],
        1,
        &[
            Step::Ended(c1, "failed"),
            Step::Ended(c3, "aborted"),
            Step::Ended(c2, "aborted"),
            Step::Ended(c0, "aborted"),
            Step::Restarted(c0),
            Step::Restarted(c1),
            Step::Restarted(c3),
        ],
    )
    .await;
}

/// Under `rest_for_one` a failure stops the siblings started after the failed child (in reverse
/// start order) and restarts it and them in start order; earlier siblings are untouched.
#[tokio::test(start_paused = true)]
async fn rest_for_one_restarts_the_failed_child_and_those_after_it() {
    let (c1, c2, c3) = (a(3), a(4), a(5));
    run_strategy(
        Strategy::RestForOne,
        &["perm", "perm", "perm", "perm"],
        1,
        &[
            Step::Ended(c1, "failed"),
            Step::Ended(c3, "aborted"),
            Step::Ended(c2, "aborted"),
            Step::Restarted(c1),
            Step::Restarted(c2),
            Step::Restarted(c3),
        ],
    )
    .await;
}

/// Under `rest_for_one` the failure of the last-started child restarts it alone.
#[tokio::test(start_paused = true)]
async fn rest_for_one_of_the_last_child_restarts_it_alone() {
    // Children c0..c2 are a2..a4; the last one fails.
    let c2 = a(4);
    run_strategy(
        Strategy::RestForOne,
        &["perm", "perm", "perm"],
        2,
        &[Step::Ended(c2, "failed"), Step::Restarted(c2)],
    )
    .await;
}

fn flaky_catalog(sup_restart: RestartPolicy) -> Catalog {
    catalog([
        delegator("boss", &["sup"]).with_supervision(Strategy::OneForOne, 3, 5_000),
        // Intensity 1 per 5 s (Erlang's default): the second failure escalates.
        delegator("sup", &["flaky", "idle"])
            .with_supervision(Strategy::OneForOne, 1, 5_000)
            .with_restart(sup_restart),
        leaf("flaky").with_restart(RestartPolicy::Transient),
        leaf("idle"),
    ])
}

/// How a second incarnation of sup re-runs its request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rerun {
    /// Exactly as the first run: the same tool calls with the same call ids.
    Same,
    /// A no-op tool turn first, so its spawns' tool call ids differ from the first run's
    /// (working around the request-id collision the ignored test below reports).
    Shifted,
}

/// sup spawns flaky and idle, and waits on flaky; the first flaky (`flaky`) fails every
/// 100 ms. sup's script is set per agent (`sup`).
fn flaky_model(boss_waits: bool, sup: AgentId, flaky: AgentId, rerun: Rerun) -> RecordingModel {
    let boss = if boss_waits {
        Script::new(delegates("sup", "supervise flaky", "boss saw it"))
    } else {
        Script::new([Turn::answer("unused")])
    };
    let sup_run = [
        background_spawns([("flaky", "call the gateway"), ("idle", "stand by")]),
        Turn::calls([Call::result(Target::Spawned(0))]),
    ];
    let second: Vec<Turn> = match rerun {
        Rerun::Same => sup_run.to_vec(),
        Rerun::Shifted => std::iter::once(Turn::calls([Call::tool("noop", json!({}))]))
            .chain(sup_run.iter().cloned())
            .collect(),
    };
    let scripted = ScriptedModel::new()
        .script("boss", boss)
        .script("flaky", hanging(4))
        .script("idle", hanging(4));
    // A second incarnation of sup runs the same request again; its script cursor goes on.
    scripted.script_agent(sup, Script::new(sup_run.iter().cloned().chain(second)));
    scripted.script_agent(
        flaky,
        Script::new(
            (0..3)
                .map(|_| Turn::fail("connection reset by peer").after(Duration::from_millis(100))),
        ),
    );
    RecordingModel::new(scripted)
}

/// Past the restart intensity the supervisor fails with reason `escalated` and the child's
/// original error; its other children are aborted before it settles, and its owner sees the
/// failure as its spawn's result and carries on.
#[tokio::test(start_paused = true)]
async fn intensity_exceeded_escalates_with_the_original_cause() {
    let model = flaky_model(true, a(2), a(3), Rerun::Same);
    let tree = build_tree(flaky_catalog(RestartPolicy::Temporary), model.clone()).await;
    let mut events = tree.subscribe();
    let outcome = run_within(&tree, "the boss", SpawnRequest::new("boss", "delegate")).await;
    assert_eq!(outcome.text.as_deref(), Some("boss saw it"));
    within("idle", tree.idle()).await;
    let events = events.drain();
    let (boss, sup, flaky, idle) = (a(1), a(2), a(3), a(4));

    // flaky: failed at 100 ms, restarted, failed again at 200 ms: past 1 restart per 5 s.
    let flaky_steps: Vec<(&str, u64)> = events
        .iter()
        .filter(|e| e.agent == flaky)
        .map(|e| (e.kind.name(), e.at_ms))
        .collect();
    assert_eq!(
        flaky_steps,
        [
            ("spawned", 0),
            ("started", 0),
            ("failed", 100),
            ("restarted", 100),
            ("started", 100),
            ("failed", 200)
        ]
    );
    let flaky_record = tree.record(flaky).expect("record");
    assert_eq!(flaky_record.status, AgentStatus::Failed);
    assert_eq!(flaky_record.incarnation, 2);

    // sup failed, escalated, with the original cause in its error.
    let sup_outcome = tree.outcome(sup).expect("sup settled");
    assert_eq!(sup_outcome.status, AgentStatus::Failed);
    assert_eq!(sup_outcome.reason, EndReason::Escalated);
    let error = sup_outcome.error.clone().unwrap_or_default();
    assert!(error.contains("connection reset by peer"), "{error}");
    assert!(error.contains(&flaky.to_string()), "{error}");
    let sup_end = events
        .iter()
        .find(|e| e.agent == sup && e.kind.terminal_status().is_some())
        .expect("sup's end");
    assert_eq!(sup_end.at_ms, 200);
    assert!(
        matches!(&sup_end.kind, EventKind::Failed { outcome } if outcome.reason == EndReason::Escalated && outcome.error.as_deref().is_some_and(|error| error.contains("connection reset"))),
        "{sup_end:?}"
    );

    // Its other child was aborted because its owner ended, and settled before it.
    let idle_outcome = tree.outcome(idle).expect("idle settled");
    assert_eq!(idle_outcome.status, AgentStatus::Aborted);
    assert_eq!(idle_outcome.reason, EndReason::OwnerEnded);
    let idle_end = events
        .iter()
        .find(|e| terminal(idle)(e))
        .expect("idle's end");
    assert!(idle_end.seq < sup_end.seq);

    // The boss saw the failure as its foreground spawn's result, and carried on.
    let seen = &model.calls_of(boss)[1].messages;
    let result = seen.last().expect("the spawn's result");
    let value: serde_json::Value = serde_json::from_str(&result.content).expect("JSON");
    assert_eq!(value["agent_id"], json!(sup.to_string()));
    assert_eq!(value["status"], json!("failed"));
    assert_eq!(value["reason"], json!("escalated"));
    assert!(
        value["error"]
            .as_str()
            .is_some_and(|e| e.contains("connection reset by peer")),
        "{value}"
    );
    assert_eq!(tree.record(sup).expect("sup").incarnation, 1, "temporary");
    tree.shutdown().await;
}

/// sup (a2, permanent) escalates under boss (a1), which restarts it: the new incarnation
/// re-runs sup's original request and spawns new children.
async fn restarted_by_boss(rerun: Rerun) {
    let model = flaky_model(true, a(2), a(3), rerun);
    let tree = build_tree(flaky_catalog(RestartPolicy::Permanent), model.clone()).await;
    let mut events = EventProbe::new(&tree);
    spawn_admitted(&tree, SpawnRequest::new("boss", "delegate")).await;
    let (boss, sup) = (a(1), a(2));
    events
        .expect_event("the supervisor's restart", restarted(sup, 2))
        .await;
    let log = events.seen().to_vec();
    let escalation = log
        .iter()
        .find(|e| terminal(sup)(e))
        .expect("sup failed first");
    assert_eq!(escalation.at_ms, 200);
    assert!(
        matches!(&escalation.kind, EventKind::Failed { outcome } if outcome.reason == EndReason::Escalated && outcome.error.as_deref().is_some_and(|error| error.contains("connection reset by peer"))),
        "{escalation:?}"
    );
    model.until_calls(sup, 3).await;
    let first_again = &model.calls_of(sup)[2];
    assert_eq!(first_again.incarnation, 2);
    assert_eq!(
        first_again.messages.to_vec(),
        vec![Message::user("supervise flaky")]
    );
    // The new run spawns new children (a5, a6) and waits on the new flaky one, which hangs.
    let (flaky2, idle2) = (a(5), a(6));
    let spawn_results = |calls: &[crate::support::ModelCall]| -> Option<Vec<String>> {
        calls
            .iter()
            .filter(|c| c.agent == sup && c.incarnation == 2)
            .map(|c| {
                c.messages
                    .iter()
                    .filter(|m| m.role == agent_tree::protocol::Role::Tool)
                    .filter(|m| m.content.contains("agent_id"))
                    .map(|m| m.content.clone())
                    .collect::<Vec<_>>()
            })
            .find(|r| r.len() >= 2)
    };
    model
        .until("sup's second run to see its spawns' results", |calls| {
            spawn_results(calls).is_some()
        })
        .await;
    let results = spawn_results(&model.calls()).expect("seen");
    for (result, want) in results.iter().zip([flaky2, idle2]) {
        let value: serde_json::Value = serde_json::from_str(result).expect("JSON");
        assert_eq!(
            (value["agent_id"].clone(), value["status"].clone()),
            (json!(want.to_string()), json!("running")),
            "the re-run's spawn must start a new child: {value}"
        );
    }
    model.until_all_calls(&[flaky2, idle2], 1).await;
    let record = tree.record(sup).expect("sup");
    assert_eq!(
        (record.incarnation, record.status),
        (2, AgentStatus::Running)
    );
    assert_eq!(
        record.children,
        [a(3), a(4), flaky2, idle2],
        "the old children stay on record; the new run has its own"
    );
    // The boss is still waiting for its foreground child: it saw no failure.
    assert_eq!(model.count_of(boss), 1);
    assert_eq!(
        tree.record(boss).expect("boss").status,
        AgentStatus::Running
    );
    tree.shutdown().await;
    assert!(tree.alive_actors().is_empty());
}

/// A permanent supervisor that escalates is restarted by the agent that owns it: the new
/// incarnation re-runs its original request and spawns new children, and the owner, still
/// waiting, sees no failure.
#[tokio::test(start_paused = true)]
async fn a_permanent_supervisor_that_escalates_is_restarted_by_its_owner() {
    restarted_by_boss(Rerun::Shifted).await;
}

/// The same, with the second incarnation making exactly the first run's tool calls (a
/// deterministic model does): its spawns must start new children, not hand back the
/// previous incarnation's settled ones.
#[tokio::test(start_paused = true)]
async fn a_restarted_supervisor_rerunning_identical_calls_gets_new_children() {
    restarted_by_boss(Rerun::Same).await;
}

/// The root restarts a permanent top-level supervisor that escalates, as an agent owner would:
/// the new incarnation starts again from its original prompt.
#[tokio::test(start_paused = true)]
async fn the_root_restarts_a_permanent_top_level_supervisor_that_escalates() {
    // Ids: sup a1, flaky a2, idle a3; the restarted sup spawns a4, a5.
    let model = flaky_model(false, a(1), a(2), Rerun::Shifted);
    let tree = tree(
        model.clone(),
        flaky_catalog(RestartPolicy::Permanent),
        TreeConfig::default().with_root_supervision(Strategy::OneForOne, 3, Duration::from_secs(5)),
    )
    .await;
    let mut events = EventProbe::new(&tree);
    spawn_admitted(&tree, SpawnRequest::new("sup", "supervise flaky")).await;
    let sup = a(1);
    events
        .expect_event("the supervisor's restart", restarted(sup, 2))
        .await;
    let log = events.seen().to_vec();
    let escalation = log.iter().find(|e| terminal(sup)(e)).expect("sup failed");
    assert_eq!(escalation.at_ms, 200);
    assert!(
        matches!(&escalation.kind, EventKind::Failed { outcome } if outcome.reason == EndReason::Escalated && outcome.error.as_deref().is_some_and(|error| error.contains("connection reset by peer"))),
        "{escalation:?}"
    );
    model.until_all_calls(&[a(4), a(5)], 1).await;
    let record = tree.record(sup).expect("sup");
    assert_eq!(
        (record.incarnation, record.status),
        (2, AgentStatus::Running)
    );
    assert_eq!(
        model.calls_of(sup)[2].messages.to_vec(),
        vec![Message::user("supervise flaky")]
    );
    tree.shutdown().await;
}

/// Past the root's own intensity the root fails with reason `escalated`: every agent is
/// aborted, nothing is restarted after that, and the tree admits no new agent.
#[tokio::test(start_paused = true)]
async fn past_the_root_intensity_the_root_fails_and_every_agent_is_aborted() {
    let scripted = ScriptedModel::new()
        .script(
            "crasher",
            Script::new(
                (0..3).map(|_| Turn::fail("out of memory").after(Duration::from_millis(100))),
            ),
        )
        .script("bystander", hanging(2))
        .script(
            "lead",
            [Turn::spawn_background("bystander", "x"), Turn::hang()],
        );
    let model = RecordingModel::new(scripted);
    let tree = tree(
        model.clone(),
        catalog([
            leaf("crasher").with_restart(RestartPolicy::Permanent),
            leaf("bystander"),
            delegator("lead", &["bystander"]),
        ]),
        TreeConfig::default().with_root_supervision(Strategy::OneForOne, 1, Duration::from_secs(5)),
    )
    .await;
    let mut events = tree.subscribe();
    let mut lead = spawn_admitted(&tree, SpawnRequest::new("lead", "wait")).await;
    let mut crasher = spawn_admitted(&tree, SpawnRequest::new("crasher", "crash")).await;
    let lead_outcome = within("the lead", lead.outcome()).await;
    assert_eq!(
        lead_outcome.status,
        AgentStatus::Aborted,
        "{lead_outcome:?}"
    );
    let crasher_outcome = within("the crasher", crasher.outcome()).await;
    assert_eq!(crasher_outcome.status, AgentStatus::Failed);
    within("idle", tree.idle()).await;
    let snapshot = tree.snapshot();
    let root = snapshot.root().expect("root");
    assert_eq!(
        root.status,
        AgentStatus::Failed,
        "{}",
        snapshot.render_text()
    );
    let root_outcome = root.outcome.clone().expect("root outcome");
    assert_escalated(&root_outcome, "out of memory", "the root");
    assert_eq!(tree.record(crasher.id()).expect("rec").incarnation, 2);
    for record in snapshot.agents() {
        assert!(record.status.is_terminal(), "{}", snapshot.render_text());
    }
    let bystander = tree.record(a(3)).expect("bystander");
    assert_eq!(bystander.status, AgentStatus::Aborted);
    // The failed root admits nothing new.
    let refused = tree.spawn(SpawnRequest::new("bystander", "late")).await;
    assert!(refused.is_err(), "{refused:?}");
    let events = events.drain();
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Restarted { .. }))
            .count(),
        1
    );
    tree.shutdown().await;
    assert!(tree.alive_actors().is_empty());
}

/// Under every strategy, the failure past the intensity is not restarted: the supervisor
/// fails `escalated` with the original cause, and every child still live is aborted with
/// reason `owner_ended` before the supervisor settles.
#[tokio::test(start_paused = true)]
async fn every_strategy_escalates_past_the_intensity() {
    for (strategy, restarted_per_failure) in [
        (Strategy::OneForOne, 1),
        (Strategy::OneForAll, 3),
        (Strategy::RestForOne, 2),
    ] {
        let name = format!("{strategy:?}");
        let scripted = ScriptedModel::new()
            .script(
                "sup",
                [
                    Turn::calls((0..3).map(|i| Call::spawn_background("perm", format!("s{i}")))),
                    Turn::calls([Call::result(Target::Spawned(1))]),
                ],
            )
            .script("perm", hanging(4));
        scripted.script_agent(
            a(3),
            Script::new(
                (0..3).map(|_| Turn::fail("checksum mismatch").after(Duration::from_millis(100))),
            ),
        );
        let model = RecordingModel::new(scripted);
        let tree = build_tree(
            catalog([
                delegator("sup", &["perm"]).with_supervision(strategy, 1, 5_000),
                leaf("perm").with_restart(RestartPolicy::Permanent),
            ]),
            model.clone(),
        )
        .await;
        let mut events = tree.subscribe();
        let outcome = run_within(&tree, "sup", SpawnRequest::new("sup", "supervise")).await;
        assert_escalated(&outcome, "checksum mismatch", &name);
        let events = events.drain();
        let restarts = events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Restarted { .. }))
            .count();
        assert_eq!(restarts, restarted_per_failure, "{name}: one restart only");
        let sup_end = events
            .iter()
            .find(|e| terminal(a(1))(e))
            .expect("sup's end");
        assert_eq!(sup_end.at_ms, 200, "{name}");
        for child in [a(2), a(3), a(4)] {
            let end = events
                .iter()
                .rfind(|e| terminal(child)(e))
                .expect("the child's last end");
            assert!(end.seq < sup_end.seq, "{name}: {child} settled first");
            let outcome = tree.outcome(child).expect("final");
            if child == a(3) {
                assert_eq!(outcome.status, AgentStatus::Failed, "{name}");
            } else {
                assert_eq!(
                    (outcome.status, outcome.reason),
                    (AgentStatus::Aborted, EndReason::OwnerEnded),
                    "{name}: {child}"
                );
            }
        }
        tree.shutdown().await;
    }
}

/// Root escalation with the pool full leaves no queued top-level agent behind.
#[tokio::test(start_paused = true)]
async fn root_escalation_strands_no_queued_agent() {
    let model = ScriptedModel::new()
        .script("flaky", [Turn::fail("a"), Turn::fail("b"), Turn::fail("c")])
        .script("leaf", [Turn::answer("leaf")]);
    let catalog = catalog([
        AgentDefinition::new("flaky", "").with_restart(RestartPolicy::Transient),
        AgentDefinition::new("leaf", ""),
    ]);
    let config = TreeConfig::default().with_max_concurrent(1);
    let tree = tree(model, catalog, config).await;
    let _a = spawn_admitted(&tree, SpawnRequest::new("flaky", "go").background()).await;
    let b = spawn_admitted(&tree, SpawnRequest::new("leaf", "go").background()).await;
    let r = tokio::time::timeout(WAIT_LIMIT, tree.idle()).await;
    assert!(
        r.is_ok(),
        "stuck: live={} queued leaf={:?} root={:?}",
        tree.live(),
        tree.record(b.id()).map(|r| r.status),
        tree.record(a(0)).map(|r| r.status)
    );
}

/// Root `one_for_all` with a full pool: a queued sibling is neither stopped nor restarted by
/// the plan (it has nothing to stop), so the failed agent restarts and everything settles.
#[tokio::test(start_paused = true)]
async fn one_for_all_with_a_queued_sibling_does_not_hang() {
    let model = ScriptedModel::new()
        .script("flaky", [Turn::fail("boom"), Turn::answer("ok")])
        .script("leaf", [Turn::answer("leaf")]);
    let catalog = catalog([
        AgentDefinition::new("flaky", "").with_restart(RestartPolicy::Transient),
        AgentDefinition::new("leaf", ""),
    ]);
    let config = TreeConfig::default()
        .with_max_concurrent(1)
        .with_root_supervision(Strategy::OneForAll, 3, Duration::from_secs(5));
    let tree = tree(model, catalog, config).await;
    let f = spawn_admitted(&tree, SpawnRequest::new("flaky", "go").background()).await;
    let l = spawn_admitted(&tree, SpawnRequest::new("leaf", "go").background()).await;
    let r = tokio::time::timeout(WAIT_LIMIT, tree.idle()).await;
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
            [
                Turn::fail("boom").after(Duration::from_millis(100)),
                Turn::answer("ok"),
            ],
        )
        .script("idler", [Turn::hang()]);
    let catalog = catalog([
        AgentDefinition::new("flaky", "").with_restart(RestartPolicy::Transient),
        AgentDefinition::new("idler", ""),
    ]);
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
    let r = tokio::time::timeout(WAIT_LIMIT, tree.idle()).await;
    assert!(
        r.is_ok(),
        "stuck: live={} flaky={:?} outcome={:?}",
        tree.live(),
        tree.record(f.id()).map(|r| (r.status, r.incarnation)),
        tree.outcome(f.id()),
    );
}
