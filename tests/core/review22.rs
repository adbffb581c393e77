//! Review 22: the test kit (`agent_tree::testkit`) as a product. Each `dN_` test is a
//! defect (it fails against the code it was written for); `guard_` tests pass and hold
//! behaviour worth keeping.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, EventKind, Strategy};
use agent_tree::testkit::{
    Call, EventProbe, FaultyModel, Script, ScriptedModel, Target, Turn, experiment, kill_when,
};

use crate::support::{catalog, leaf};

/// The text of the panic `task` ends with.
async fn panic_text(task: impl std::future::Future<Output = ()> + Send + 'static) -> String {
    let payload = tokio::spawn(task)
        .await
        .expect_err("the task panics")
        .into_panic();
    payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_else(|| payload.downcast_ref::<&str>().unwrap().to_string())
}

/// A `one_for_one` supervisor over one transient worker, spawned in the foreground.
fn supervised(max_restarts: u32, period_ms: u64) -> Catalog {
    catalog([
        AgentDefinition::new("sup", "")
            .with_allowed_subagents(SubagentAllowance::only(["worker"]))
            .with_supervision(Strategy::OneForOne, max_restarts, period_ms)
            .with_restart(RestartPolicy::Temporary),
        AgentDefinition::new("worker", "").with_restart(RestartPolicy::Transient),
    ])
}

// ---- d1: expect_terminated after the agent's start was read ---------------------------

/// D1. `EventProbe::expect_terminated` promises "`agent`'s final outcome (after any
/// restarts) ... A run its supervisor restarts has a terminal event too: this skips those,
/// by the run the agent's record ends in." It learns each event's run only from `started`
/// / `restarted` events it reads itself: when an earlier expectation already consumed the
/// agent's `started` (the probe's own rustdoc example does exactly that:
/// `expect_event("w started")`, then `expect_terminated`), the run is unknown and the first
/// terminal event, of a run that was restarted, is returned as the "final" outcome.
#[tokio::test(start_paused = true)]
async fn d1_expect_terminated_skips_a_restarted_run_after_its_start_was_read() {
    let scripted = ScriptedModel::new()
        .script(
            "sup",
            Script::new([Turn::spawn("worker", "w"), Turn::answer("done")]),
        )
        .script("worker", Script::new([Turn::answer("ok")]));
    // Run 1 of the worker fails at its first turn; run 2 answers "ok".
    let model = FaultyModel::new(scripted)
        .fail_at_turn(1, ModelError::new("crash"))
        .only_for("worker")
        .only_in_run(1);
    let tree = Tree::builder()
        .catalog(supervised(3, 5_000))
        .model(model)
        .build()
        .await
        .unwrap();
    let mut events = EventProbe::new(&tree);
    tree.spawn(SpawnRequest::new("sup", "go")).await.unwrap();
    let started = events
        .expect_event("the worker started", |e| {
            matches!(e.kind, EventKind::Started { .. }) && e.depth == 2
        })
        .await;
    let outcome = events.expect_terminated(started.agent).await;
    let record = tree.record(started.agent).unwrap();
    assert_eq!(record.incarnation, 2, "the worker was restarted once");
    assert_eq!(
        (outcome.status, outcome.text.as_deref()),
        (AgentStatus::Completed, Some("ok")),
        "d1: expect_terminated returned the restarted run 1's end ({}) as the worker's \
         final outcome; its record ends completed in run 2",
        outcome.summary()
    );
}

// ---- d2: expect_terminated's failure lists nothing ------------------------------------

/// D2. The guide: "When an expectation fails, its message says what was expected and lists
/// every event seen", and `expect_terminated_within`: "When it does not end in time, listing
/// every event seen." While it waits on the registry for the agent to settle it reads no
/// events, so when the agent never ends the failure says `seen 0 events` though the agent's
/// `spawned` and `started` (and everything else) came meanwhile; every other expectation
/// (`expect_event`, `fish`, ...) reads and lists them.
#[tokio::test(start_paused = true)]
async fn d2_expect_terminated_failure_lists_the_events_that_came() {
    let model = ScriptedModel::new().script("w", Script::new([Turn::hang()]));
    let tree = Tree::builder()
        .catalog(catalog([leaf("w")]))
        .model(model)
        .build()
        .await
        .unwrap();
    let mut events = EventProbe::new(&tree);
    let w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    let id = w.id();
    let text = panic_text(async move {
        events
            .expect_terminated_within(id, Duration::from_secs(10))
            .await;
    })
    .await;
    assert!(
        text.contains("a1 (depth 1, parent a0) at 0 ms: started"),
        "d2: the failure of expect_terminated does not list the events that came: {text}"
    );
    drop(tree);
}

// ---- d3: Turn::fail(..).usage(..) bills nothing ---------------------------------------

/// D3. `Turn::usage`: "Reports `usage` for the turn", on any turn; docs/semantics.md:
/// "every failed attempt is billed its error's usage" (`ModelError::usage`: "What the
/// provider reported the failed call used; billed like a turn's usage"). The scripted
/// model builds a failing turn's error as `ModelError::new(message)` and drops the turn's
/// usage: a scripted provider failure that cost tokens bills nothing, the owner probe sees
/// no usage message, and nothing documents that a failing turn ignores its usage.
#[tokio::test(start_paused = true)]
async fn d3_a_failing_scripted_turn_bills_its_usage() {
    let model = ScriptedModel::new().script(
        "w",
        Script::new([Turn::fail("overloaded").usage(Usage::tokens(30, 7))]),
    );
    let tree = Tree::builder()
        .catalog(catalog([leaf("w")]))
        .model(model)
        .build()
        .await
        .unwrap();
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    let outcome = w.outcome().await;
    assert_eq!(outcome.status, AgentStatus::Failed);
    assert_eq!(
        tree.record(w.id()).unwrap().own,
        Usage::tokens(30, 7),
        "d3: the failing turn's scripted usage was not billed"
    );
}

// ---- d4: Target::Spawned(n) in a resumed run -----------------------------------------

/// D4. `Target::Spawned(n)`: "The child returned by the agent's `n`-th `Agent` call (from
/// 0), read from the conversation's tool results." The scripted model names its calls
/// `call_<turn>_<index>`, and turns are numbered per run, so a resumed run's calls reuse
/// the ids of the first run's (the runtime copes: calls are keyed by place). The resolver
/// pairs each `Agent` call with the FIRST tool result of that id, so the resumed run's
/// spawn (the agent's 2nd `Agent` call) resolves to the first run's child: the script reads
/// the wrong child.
#[tokio::test(start_paused = true)]
async fn d4_spawned_target_in_a_resumed_run_names_that_runs_child() {
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                // run 1
                Turn::spawn("first", "one"),
                Turn::answer("run one"),
                // run 2, after a resume
                Turn::spawn_background("second", "two"),
                Turn::calls([Call::result(Target::Spawned(1))]),
                Turn::answer("run two"),
            ]),
        )
        .script("first", Script::new([Turn::answer("first child")]))
        .script(
            "second",
            Script::new([Turn::answer("second child").after(Duration::from_secs(1))]),
        );
    let log = model.call_log();
    let tree = Tree::builder()
        .catalog(catalog([
            AgentDefinition::new("lead", "")
                .with_allowed_subagents(SubagentAllowance::only(["first", "second"])),
            leaf("first"),
            leaf("second"),
        ]))
        .model(model)
        .build()
        .await
        .unwrap();
    let mut lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    assert_eq!(lead.outcome().await.text.as_deref(), Some("run one"));
    let mut lead = tree.resume(lead.id(), "again").await.unwrap();
    assert_eq!(lead.outcome().await.text.as_deref(), Some("run two"));
    let calls = log.of(lead.id());
    let last = calls.last().unwrap();
    let read = last
        .answered_calls()
        .into_iter()
        .find(|(call, _)| call.name == "get_subagent_result")
        .expect("the last turn read a child's result");
    assert!(
        read.1.content.contains("second child"),
        "d4: Target::Spawned(1) resolved to the first run's child: the read was {} -> {}",
        serde_json::to_string(&read.0).unwrap(),
        read.1.content
    );
}

// ---- d5: expect_terminated after a resume ---------------------------------------------

/// D5. `expect_terminated`: "`agent`'s final outcome ... the events up to its final
/// terminal event are consumed". It first waits on the registry for the agent to settle,
/// then picks the terminal event "by the run the agent's record ends in", its
/// `incarnation`; a resume (semantics: "an explicit new run reopens a record: a
/// supervisor's restart (a new incarnation) or an owner's resume") keeps the incarnation,
/// so after a `Tree::resume` the probe waits for the resumed run to end and then returns
/// the FIRST run's terminal event, an outcome the agent no longer has.
#[tokio::test(start_paused = true)]
async fn d5_expect_terminated_after_a_resume_is_the_resumed_runs_end() {
    let model = ScriptedModel::new().script(
        "w",
        Script::new([
            Turn::answer("first"),
            Turn::answer("second").after(Duration::from_secs(1)),
        ]),
    );
    let tree = Tree::builder()
        .catalog(catalog([leaf("w")]))
        .model(model)
        .build()
        .await
        .unwrap();
    let mut events = EventProbe::new(&tree);
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(w.outcome().await.text.as_deref(), Some("first"));
    tree.resume(w.id(), "again").await.unwrap();
    let outcome = events.expect_terminated(w.id()).await;
    // It waited for the resumed run to settle (a second of model time) ...
    let now = tree.outcome(w.id()).expect("settled");
    assert_eq!(now.text.as_deref(), Some("second"));
    // ... then returned the first run's end.
    assert_eq!(
        outcome.text.as_deref(),
        Some("second"),
        "d5: expect_terminated waited for the resumed run to end, then returned the first \
         run's end; the agent's outcome is {}",
        now.summary()
    );
}

// ---- guards: the experiment at the intensity window's edge, reproducibility -----------

/// A worker whose first run fails at once and whose second fails after `second_after`;
/// the third answers.
fn edge_setup(
    second_after: Duration,
) -> impl Fn(u64) -> agent_tree::BoxFuture<'static, (Tree, SpawnRequest)> + Clone {
    move |_seed| {
        Box::pin(async move {
            let model = ScriptedModel::new()
                .script(
                    "sup",
                    Script::new([Turn::spawn("worker", "w"), Turn::answer("done")]),
                )
                .script(
                    "worker",
                    Script::new([
                        Turn::fail("crash one"),
                        Turn::fail("crash two").after(second_after),
                        Turn::answer("ok"),
                    ]),
                );
            let tree = Tree::builder()
                .catalog(supervised(1, 5_000))
                .model(model)
                .build()
                .await
                .unwrap();
            (tree, SpawnRequest::new("sup", "go"))
        })
    }
}

/// Guard. "a restart exactly one period old still counts": a second failure exactly 5 s
/// after the first restart escalates (intensity 1 per 5 s), one a millisecond later is
/// restarted; the rows count what the events say, the same every run.
#[test]
fn guard_experiment_counts_at_the_intensity_windows_edge() {
    let rows = experiment::run_trials(2, 3, edge_setup(Duration::from_millis(5_000)));
    for row in &rows {
        assert_eq!(row.restarts, 1, "{row:?}");
        assert_eq!(row.escalations, 1, "{row:?}");
        assert_eq!(row.reason, Some(EndReason::Escalated), "{row:?}");
        assert_eq!(row.recover_ms, None, "{row:?}");
    }
    assert_eq!(
        rows,
        experiment::run_trials(2, 3, edge_setup(Duration::from_millis(5_000)))
    );
    let rows = experiment::run_trials(2, 3, edge_setup(Duration::from_millis(5_001)));
    for row in &rows {
        assert_eq!(row.restarts, 2, "{row:?}");
        assert_eq!(row.escalations, 0, "{row:?}");
        assert_eq!(row.status, AgentStatus::Completed, "{row:?}");
        assert_eq!(row.recover_ms, Some(5_001), "{row:?}");
    }
}

/// Guard. "kill the worker as its second run starts": a kill is a crash, so the transient
/// worker restarts once more and its third run completes.
#[tokio::test(start_paused = true)]
async fn guard_kill_when_at_the_second_runs_start() {
    let scripted = ScriptedModel::new()
        .script(
            "sup",
            Script::new([Turn::spawn("worker", "w"), Turn::answer("done")]),
        )
        .script(
            "worker",
            Script::new([Turn::answer("ok").after(Duration::from_secs(1))]),
        );
    let model = FaultyModel::new(scripted)
        .fail_at_turn(1, ModelError::new("crash"))
        .only_for("worker")
        .only_in_run(1);
    let tree = Tree::builder()
        .catalog(supervised(3, 5_000))
        .model(model)
        .build()
        .await
        .unwrap();
    let mut switch = kill_when(&tree, |e| {
        matches!(e.kind, EventKind::Started { incarnation: 2, .. }).then_some(e.agent)
    });
    let mut sup = tree.spawn(SpawnRequest::new("sup", "go")).await.unwrap();
    let (killed, result) = switch.fired().await.expect("the switch fires");
    assert_eq!(result, Ok(()));
    assert_eq!(sup.outcome().await.text.as_deref(), Some("done"));
    let record = tree.record(killed).unwrap();
    assert_eq!(
        (record.incarnation, record.status),
        (3, AgentStatus::Completed)
    );
}

// ---- guards: kills twice and during a shutdown, a trial that never settles ------------

/// A transient worker under a supervisor: its first run hangs, its second answers.
async fn hanging_worker_tree() -> Tree {
    let model = ScriptedModel::new()
        .script(
            "sup",
            Script::new([Turn::spawn("worker", "w"), Turn::answer("done")]),
        )
        .script("worker", Script::new([Turn::hang(), Turn::answer("ok")]));
    Tree::builder()
        .catalog(supervised(3, 5_000))
        .model(model)
        .build()
        .await
        .unwrap()
}

/// Guard. Two switches picking the same event kill the same run: one crash, one restart.
#[tokio::test(start_paused = true)]
async fn guard_two_switches_on_one_event_restart_the_worker_once() {
    let tree = hanging_worker_tree().await;
    let mut events = EventProbe::new(&tree);
    // Both pick the worker's first `started` event.
    let pick = |e: &agent_tree::protocol::Event| {
        matches!(e.kind, EventKind::Started { incarnation: 1, .. } if e.depth == 2)
            .then_some(e.agent)
    };
    let mut one = kill_when(&tree, pick);
    let mut two = kill_when(&tree, pick);
    let sup = tree.spawn(SpawnRequest::new("sup", "go")).await.unwrap();
    let (first, _) = one.fired().await.expect("the first switch fires");
    let (second, _) = two.fired().await.expect("the second switch fires");
    assert_eq!(first, second);
    // Killed at its start, before its model call: run 2 plays the script's first turn
    // (the cursor walks per call, across restarts), which hangs; abort to end it.
    events
        .expect_event("the worker's restart", |e| {
            matches!(e.kind, EventKind::Restarted { incarnation: 2 })
        })
        .await;
    events
        .expect_no_event(Duration::from_secs(60), |e| {
            matches!(
                e.kind,
                EventKind::Restarted { .. } | EventKind::Killed { .. }
            )
        })
        .await;
    tree.abort(sup.id()).unwrap();
    assert_eq!(
        events.expect_terminated(sup.id()).await.status,
        AgentStatus::Aborted
    );
}

/// Guard. A kill at the moment a shutdown begins (the root's `completing`) is a kill the
/// report counts, and nothing restarts during a shutdown.
#[tokio::test(start_paused = true)]
async fn guard_a_kill_during_a_shutdown_restarts_nothing() {
    let tree = hanging_worker_tree().await;
    let mut events = EventProbe::new(&tree);
    let mut switch = kill_when(&tree, |e| {
        (matches!(e.kind, EventKind::Completing) && e.agent == AgentId::ROOT)
            .then_some(AgentId::new(2))
    });
    tree.spawn(SpawnRequest::new("sup", "go")).await.unwrap();
    events
        .expect_event("the worker started", |e| {
            matches!(e.kind, EventKind::Started { .. }) && e.depth == 2
        })
        .await;
    let report = tree.shutdown().await;
    assert_eq!(switch.fired().await, Some((AgentId::new(2), Ok(()))));
    assert!(report.killed.contains(&AgentId::new(2)), "{report:?}");
    assert!(
        !events
            .drain()
            .iter()
            .any(|e| matches!(e.kind, EventKind::Restarted { .. })),
        "a restart during the shutdown"
    );
}

/// Guard. A trial whose top agent never ends is recorded as it stands after
/// `TRIAL_LIMIT`, the same every run.
#[test]
fn guard_a_trial_that_never_settles_is_recorded_running() {
    let setup = |_seed: u64| -> agent_tree::BoxFuture<'static, (Tree, SpawnRequest)> {
        Box::pin(async move {
            let model = ScriptedModel::new().script("w", Script::new([Turn::hang()]));
            let tree = Tree::builder()
                .catalog(catalog([leaf("w")]))
                .model(model)
                .build()
                .await
                .unwrap();
            (tree, SpawnRequest::new("w", "go"))
        })
    };
    let rows = experiment::run_trials(1, 0, setup);
    assert_eq!(rows[0].status, AgentStatus::Running, "{:?}", rows[0]);
    assert_eq!(rows[0].reason, None);
    assert_eq!(
        rows[0].elapsed_ms,
        u64::try_from(experiment::TRIAL_LIMIT.as_millis()).unwrap()
    );
    assert_eq!(rows, experiment::run_trials(1, 0, setup));
}
