//! The restart intensity is a sliding window, on virtual time. With an intensity of 2
//! restarts per 1 s: failures 0.4 s apart exceed it at the third failure (1.2 s), and the
//! supervisor fails with reason `escalated`; failures 0.6 s apart never do, however many
//! there are, because the oldest restart has left the window by the time of each new one;
//! and bursts separated by a quiet second each get the full budget again.

use agent_tree::prelude::*;
use agent_tree::protocol::{AgentRecord, EndReason, Event, EventKind, RestartPolicy, Strategy};
use agent_tree::testkit::{Call, Script, ScriptedModel, Target, Turn};

use crate::support::harness::{a, assert_escalated};
use crate::support::lifetimes::ms;
use crate::support::scripts::answers_after;
use crate::support::{RecordingModel, build_tree, catalog, delegator, leaf, run_within, within};

/// Runs a supervisor (intensity 2 per 1 s) over one transient child whose incarnations fail
/// after the given delays (ms, each from the start of its incarnation) and whose next
/// incarnation answers. Returns the supervisor's outcome and the child's events.
async fn run(delays: &[u64]) -> (Outcome, Vec<Event>, AgentRecord) {
    let child = a(2);
    let scripted = ScriptedModel::new().script(
        "sup",
        [
            Turn::spawn_background("child", "flap"),
            Turn::calls([Call::result(Target::Spawned(0))]),
            Turn::answer("steady"),
        ],
    );
    scripted.script_agent(
        child,
        Script::new(
            delays
                .iter()
                .map(|&d| Turn::fail(format!("flap after {d} ms")).after(ms(d)))
                .chain(answers_after("recovered", ms(10))),
        ),
    );
    let tree = build_tree(
        catalog([
            delegator("sup", &["child"]).with_supervision(Strategy::OneForOne, 2, 1_000),
            leaf("child").with_restart(RestartPolicy::Transient),
        ]),
        RecordingModel::new(scripted),
    )
    .await;
    let mut events = tree.subscribe();
    let outcome = run_within(
        &tree,
        "the supervisor",
        SpawnRequest::new("sup", "supervise"),
    )
    .await;
    within("idle", tree.idle()).await;
    let events = events
        .drain()
        .into_iter()
        .filter(|e| e.agent == child)
        .collect();
    let record = tree.record(child).expect("record");
    tree.shutdown().await;
    (outcome, events, record)
}

fn restart_times(events: &[Event]) -> Vec<(u64, u32)> {
    events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Restarted { incarnation } => Some((e.at_ms, incarnation)),
            _ => None,
        })
        .collect()
}

fn failure_times(events: &[Event]) -> Vec<u64> {
    events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Failed { .. }))
        .map(|e| e.at_ms)
        .collect()
}

/// Failures closer together than the window allows escalate at the first one past the
/// intensity: with 2 restarts per second, a third failure 0.4 s after the second fails the
/// supervisor with reason `escalated`.
#[tokio::test(start_paused = true)]
async fn failures_0_4_s_apart_exceed_2_per_second_at_the_third() {
    let (outcome, events, record) = run(&[400, 400, 400, 400]).await;
    assert_eq!(failure_times(&events), [400, 800, 1200]);
    assert_eq!(restart_times(&events), [(400, 2), (800, 3)]);
    assert_escalated(&outcome, "flap after 400 ms", "the supervisor");
    assert_eq!(record.status, AgentStatus::Failed);
    assert_eq!(record.incarnation, 3);
}

/// The window slides: restarts that have left it no longer count, so failures spaced wider than
/// the intensity allows are restarted for ever, however many there are.
#[tokio::test(start_paused = true)]
async fn failures_0_6_s_apart_never_exceed_2_per_second() {
    let (outcome, events, record) = run(&[600; 6]).await;
    assert_eq!(failure_times(&events), [600, 1200, 1800, 2400, 3000, 3600]);
    assert_eq!(
        restart_times(&events),
        [
            (600, 2),
            (1200, 3),
            (1800, 4),
            (2400, 5),
            (3000, 6),
            (3600, 7)
        ]
    );
    assert_eq!(outcome.text.as_deref(), Some("steady"), "{outcome:?}");
    assert_eq!(record.status, AgentStatus::Completed);
    assert_eq!(record.incarnation, 7);
    assert_eq!(record.ended_ms, Some(3610));
}

/// After a quiet window a burst of failures gets the full budget of restarts again; a failure
/// with the budget of the last second spent escalates.
#[tokio::test(start_paused = true)]
async fn bursts_separated_by_a_quiet_window_each_get_the_full_budget() {
    // Restarts at 100, 200 (a burst of two), then 1300, 1400 (both older ones have left the
    // window), then a fifth failure at 1450 with two restarts in the last second: escalate.
    let (outcome, events, record) = run(&[100, 100, 1100, 100, 50]).await;
    assert_eq!(failure_times(&events), [100, 200, 1300, 1400, 1450]);
    assert_eq!(
        restart_times(&events),
        [(100, 2), (200, 3), (1300, 4), (1400, 5)]
    );
    assert_eq!(outcome.reason, EndReason::Escalated, "{outcome:?}");
    assert_eq!(record.incarnation, 5);
}
