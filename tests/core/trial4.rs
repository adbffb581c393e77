//! Trial 4: a new user's tests written from README.md, docs/testing.md, docs/semantics.md
//! and the `testkit` rustdoc. A "triage" agent delegating to `billing` and `tech`, driven
//! turn by turn and on a script under virtual time; supervision experiments; retries.
//!
//! Tests marked GUARD pass and hold a documented behaviour; tests marked DEFECT fail on a
//! real defect (expected vs actual, the doc line, the suspected cause).

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, EventKind, ModelErrorKind, Strategy, ToolCall};
use agent_tree::testkit::{
    self, Call, EventProbe, FaultyModel, FaultyTool, Script, ScriptedModel, Target, Turn,
    experiment,
};
use agent_tree::{FnTool, ModelError, RetryPolicy};
use serde_json::{Value, json};

fn triage_catalog() -> Catalog {
    Catalog::new([
        AgentDefinition::new("triage", "You route support tickets.")
            .with_allowed_subagents(SubagentAllowance::only(["billing", "tech"])),
        AgentDefinition::new("billing", "You handle billing."),
        AgentDefinition::new("tech", "You handle technical issues."),
    ])
    .unwrap()
}

fn tool_json(content: &str) -> Value {
    serde_json::from_str(content).unwrap_or_else(|e| panic!("not JSON ({e}): {content}"))
}

// ---------------------------------------------------------------------------------------
// (1) The driven model: every turn answered by the test.
// ---------------------------------------------------------------------------------------

/// GUARD: triage spawns billing and tech in the background, tech asks its owner, triage
/// waits on tech and gets `asking`, answers by a steer, is steered by the application
/// mid-turn, then waits for both and answers.
#[tokio::test(start_paused = true)]
async fn guard_triage_driven_turn_by_turn() {
    let (model, mut calls) = testkit::pair();
    let tree = Tree::builder()
        .catalog(triage_catalog())
        .model(model)
        .build()
        .await
        .unwrap();
    let mut events = EventProbe::new(&tree);
    let mut triage = tree
        .spawn(SpawnRequest::new("triage", "ticket 42: refund + crash"))
        .await
        .unwrap();

    // Turn 1: the orchestration tools are offered; spawn both in the background.
    let t1 = calls.expect_turn_of(triage.id()).await;
    let offered = t1.tool_names();
    for tool in [
        "Agent",
        "get_subagent_result",
        "steer_subagent",
        "wait_subagents",
    ] {
        assert!(offered.contains(&tool), "{tool} not offered: {offered:?}");
    }
    t1.calls(
        [
            Call::spawn_background("billing", "refund order 42"),
            Call::spawn_background("tech", "app crashes on login"),
        ],
        Usage::tokens(100, 20),
    );

    // Both children start and triage's turn 2 comes (background spawns answer at once);
    // their order is the runtime's, so dispatch by type.
    let mut billing_id = None;
    let mut tech_id = None;
    let mut t2 = None;
    for _ in 0..3 {
        let call = calls.expect_turn().await;
        match call.agent_type() {
            "triage" => {
                assert_eq!(call.turn(), 2);
                t2 = Some(call);
            }
            "billing" => {
                assert_eq!(call.depth(), 2);
                assert_eq!(call.last_message().unwrap().content, "refund order 42");
                billing_id = Some(call.agent());
                call.answer_after(
                    Duration::from_secs(2),
                    agent_tree::ModelResponse::text("refund issued")
                        .with_usage(Usage::tokens(30, 5)),
                );
            }
            "tech" => {
                assert_eq!(call.depth(), 2);
                assert!(call.tool_names().contains(&"ask_owner"));
                tech_id = Some(call.agent());
                call.call_tools(
                    vec![ToolCall::new(
                        "q1",
                        "ask_owner",
                        json!({"question": "which OS?"}),
                    )],
                    Usage::tokens(20, 4),
                );
            }
            other => panic!("unexpected {other}"),
        }
    }
    let (billing_id, tech_id, t2) = (billing_id.unwrap(), tech_id.unwrap(), t2.unwrap());

    // Turn 2: the two spawn results say running, with the children's ids, in call order.
    let results: Vec<Value> = t2
        .messages()
        .iter()
        .filter(|m| m.role == agent_tree::protocol::Role::Tool)
        .map(|m| tool_json(&m.content))
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[0]["agent_id"], billing_id.to_string());
    assert_eq!(results[1]["agent_id"], tech_id.to_string());
    assert!(
        results.iter().all(|r| r["status"] == "running"),
        "{results:?}"
    );
    // Wait on tech: its question is open (or comes during the wait): `asking`.
    t2.calls([Call::result(Target::Spawned(1))], Usage::tokens(10, 2));

    let t3 = calls.expect_turn_of(triage.id()).await;
    let asked = t3
        .messages()
        .iter()
        .rev()
        .find(|m| m.content.contains("asking"))
        .unwrap_or_else(|| panic!("no asking result: {:?}", t3.messages()));
    assert!(asked.content.contains("which OS?"), "{}", asked.content);
    t3.calls(
        [Call::steer(Target::Spawned(1), "linux")],
        Usage::tokens(10, 2),
    );

    // Tech's next turn carries the answer as its ask_owner result.
    let tech2 = calls.expect_turn_of(tech_id).await;
    assert!(
        tech2.last_message().unwrap().content.contains("linux"),
        "{:?}",
        tech2.last_message()
    );
    tech2.answer_text("reinstall the driver", Usage::tokens(15, 3));

    // Triage's turn 4: the steer was delivered. The application steers triage while the
    // turn is pending (mid-turn); it enters the conversation at the next boundary.
    let t4 = calls.expect_turn_of(triage.id()).await;
    let steer_result = t4
        .messages()
        .iter()
        .rev()
        .find(|m| m.content.contains("delivered"));
    assert!(steer_result.is_some(), "{:?}", t4.messages());
    let receipt = tree.steer(triage.id(), "customer is VIP").await.unwrap();
    assert_eq!(format!("{receipt:?}").to_lowercase(), "delivered");
    t4.calls(
        [Call::wait(
            [Target::Spawned(0), Target::Spawned(1)],
            WaitPolicy::AllSettled,
        )],
        Usage::tokens(10, 2),
    );

    // Turn 5: the steer is in the conversation, and the wait's result has both outcomes.
    let t5 = calls.expect_turn_of(triage.id()).await;
    assert!(
        t5.messages().iter().any(|m| m.content == "customer is VIP"),
        "{:?}",
        t5.messages()
    );
    let all = t5
        .messages()
        .iter()
        .map(|m| m.content.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(all.contains("refund issued"), "{all}");
    assert!(all.contains("reinstall the driver"), "{all}");
    t5.answer_text("refunded; driver fix sent", Usage::tokens(10, 2));

    let outcome = triage.outcome().await;
    assert_eq!(outcome.text.as_deref(), Some("refunded; driver fix sent"));
    events
        .expect_event("a steered event of triage", |e| {
            e.agent == triage.id() && matches!(e.kind, EventKind::Steered)
        })
        .await;
    tree.idle().await;
    let snap = tree.snapshot();
    snap.check_usage().unwrap();
    calls.expect_no_turn();
    tree.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// (2) The scripted model under virtual time.
// ---------------------------------------------------------------------------------------

/// GUARD: `get_subagent_result` with `timeout_ms` answers `running` at the timeout (virtual
/// time) and leaves the child running; a slow tool takes its virtual time; events come in
/// the order and at the times the script implies.
#[tokio::test(start_paused = true)]
async fn guard_triage_scripted_with_virtual_timeouts() {
    // Ids are deterministic: triage a1, billing a2, tech a3. `Call::result` has no
    // `timeout_ms`, so the raw tool call has to name the id itself.
    let model = ScriptedModel::new()
        .script(
            "triage",
            Script::new([
                Turn::calls([
                    Call::spawn_background("billing", "refund order 42"),
                    Call::spawn_background("tech", "app crashes"),
                ]),
                Turn::calls([Call::tool(
                    "get_subagent_result",
                    json!({"agent_id": "a2", "wait": true, "timeout_ms": 1000}),
                )]),
                Turn::calls([
                    Call::result(Target::Spawned(0)),
                    Call::result(Target::Spawned(1)),
                ]),
                Turn::answer("handled"),
            ]),
        )
        .script(
            "billing",
            Script::new([Turn::answer("refund issued").after(Duration::from_secs(5))]),
        )
        .script(
            "tech",
            Script::new([
                Turn::calls([Call::tool("lookup", json!({"q": "crash"}))]),
                Turn::answer("known bug"),
            ]),
        );
    let lookup = FaultyTool::slow(
        FnTool::new("lookup", "looks up known bugs", |_, _| async {
            Ok("bug #7".to_owned())
        }),
        Duration::from_secs(3),
    );
    let tree = Tree::builder()
        .catalog(triage_catalog())
        .model(model.clone())
        .tool(lookup)
        .unwrap()
        .build()
        .await
        .unwrap();
    let mut events = EventProbe::new(&tree);
    let started = tokio::time::Instant::now();
    let triage = tree
        .spawn(SpawnRequest::new("triage", "ticket 42"))
        .await
        .unwrap();

    let tech_done = events
        .expect_event("tech completes", |e| {
            e.agent_type_is("tech") && matches!(e.kind, EventKind::Completed { .. })
        })
        .await;
    assert_eq!(
        tech_done.at_ms, 3000,
        "the slow tool takes 3 s of virtual time"
    );
    // Nothing of billing ends before 5 s.
    events
        .expect_no_event(Duration::from_millis(1900), |e| e.kind.outcome().is_some())
        .await;
    let outcome = events.expect_terminated(triage.id()).await;
    assert_eq!(outcome.text.as_deref(), Some("handled"));
    assert_eq!(started.elapsed(), Duration::from_secs(5));

    // What triage saw: the timed read said running after 1 s.
    let log = model.log_of(triage.id());
    assert_eq!(log.len(), 4);
    let timed = log[2].messages.last().unwrap();
    let timed = tool_json(&timed.content);
    assert_eq!(timed["status"], "running", "{timed}");
    assert_eq!(
        log[2].at.duration_since(started),
        Duration::from_secs(1),
        "the timed read ends at its timeout"
    );
    let last = &log[3].messages;
    let all = last
        .iter()
        .map(|m| m.content.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        all.contains("refund issued") && all.contains("known bug"),
        "{all}"
    );
    tree.shutdown().await;
}

trait TypeIs {
    fn agent_type_is(&self, t: &str) -> bool;
}
impl TypeIs for agent_tree::protocol::Event {
    /// Events carry no type after `spawned`/`started`; our ids are deterministic.
    fn agent_type_is(&self, t: &str) -> bool {
        match t {
            "triage" => self.agent.to_string() == "a1",
            "billing" => self.agent.to_string() == "a2",
            "tech" => self.agent.to_string() == "a3",
            _ => false,
        }
    }
}

// ---------------------------------------------------------------------------------------
// (3) Supervision experiments.
// ---------------------------------------------------------------------------------------

fn sup_catalog(strategy: Strategy, max_restarts: u32, period_ms: u64) -> Catalog {
    Catalog::new([
        AgentDefinition::new("sup", "")
            .with_allowed_subagents(SubagentAllowance::only(["flaky", "steady"]))
            .with_supervision(strategy, max_restarts, period_ms),
        AgentDefinition::new("flaky", "").with_restart(RestartPolicy::Transient),
        AgentDefinition::new("steady", "").with_restart(RestartPolicy::Transient),
    ])
    .unwrap()
}

fn sup_script() -> Script {
    Script::new([
        Turn::calls([
            Call::spawn_background("flaky", "f"),
            Call::spawn_background("steady", "s"),
        ]),
        Turn::calls([Call::wait(
            [Target::Spawned(0), Target::Spawned(1)],
            WaitPolicy::AllSettled,
        )]),
        Turn::answer("supervised"),
    ])
}

/// The scripted cursor continues across restarts, so every script has a turn per run.
fn workers() -> ScriptedModel {
    ScriptedModel::new()
        .script("sup", sup_script())
        .script(
            "flaky",
            Script::new([
                Turn::answer("f ok"),
                Turn::answer("f ok"),
                Turn::answer("f ok"),
            ]),
        )
        .script(
            "steady",
            Script::new([
                Turn::answer("s ok").after(Duration::from_secs(1)),
                Turn::answer("s ok").after(Duration::from_secs(1)),
                Turn::answer("s ok").after(Duration::from_secs(1)),
            ]),
        )
}

fn one_trial(strategy: Strategy, fail_every_run: bool) -> experiment::TrialRow {
    let rows = experiment::run_trials(1, 1, move |_seed| {
        Box::pin(async move {
            let mut model = FaultyModel::new(workers())
                .fail_at_turn(1, ModelError::new("connection reset"))
                .only_for("flaky");
            if !fail_every_run {
                model = model.only_in_run(1);
            }
            let tree = Tree::builder()
                .catalog(sup_catalog(strategy, 2, 5_000))
                .model(model)
                .build()
                .await
                .unwrap();
            (tree, SpawnRequest::new("sup", "go"))
        })
    });
    rows.into_iter().next().unwrap()
}

/// GUARD: one_for_one restarts only the flaky worker; the supervisor completes.
#[test]
fn guard_one_for_one_restarts_only_the_failed_child() {
    let row = one_trial(Strategy::OneForOne, false);
    assert_eq!(row.status, AgentStatus::Completed, "{row:?}");
    assert_eq!(row.restarts, 1, "{row:?}");
    assert_eq!(row.restarts_per_agent.len(), 1, "{row:?}");
    assert_eq!(
        row.restarts_per_agent.keys().next().unwrap().to_string(),
        "a2"
    );
    assert_eq!(row.escalations, 0);
    // flaky fails at 0 ms; sup ends when steady completes at 1 s.
    assert_eq!(row.recover_ms, Some(1000), "{row:?}");
}

/// GUARD: one_for_all stops the steady sibling and restarts both, in start order.
#[test]
fn guard_one_for_all_restarts_every_child() {
    let row = one_trial(Strategy::OneForAll, false);
    assert_eq!(row.status, AgentStatus::Completed, "{row:?}");
    assert_eq!(row.restarts, 2, "{row:?}");
    let per: Vec<(String, u64)> = row
        .restarts_per_agent
        .iter()
        .map(|(a, n)| (a.to_string(), *n))
        .collect();
    assert_eq!(per, [("a2".to_owned(), 1), ("a3".to_owned(), 1)]);
    assert_eq!(row.escalations, 0);
    // steady's restarted run takes another second from the restart at 0 ms.
    assert_eq!(row.recover_ms, Some(1000), "{row:?}");
}

/// GUARD: past the intensity (2 in 5 s) the supervisor escalates, naming the original
/// failure (docs/semantics.md "Supervision restarts": `flaky a2 failed (model_error):
/// connection reset`).
#[test]
fn guard_escalation_past_intensity_names_the_cause() {
    for strategy in [Strategy::OneForOne, Strategy::OneForAll] {
        let row = one_trial(strategy, true);
        assert_eq!(row.status, AgentStatus::Failed, "{strategy:?} {row:?}");
        assert_eq!(row.reason, Some(EndReason::Escalated), "{row:?}");
        assert_eq!(row.escalations, 1, "{strategy:?} {row:?}");
        assert_eq!(
            row.restarts_per_agent.get(&"a2".parse().unwrap()),
            Some(&2),
            "{row:?}"
        );
        assert_eq!(row.recover_ms, None);
    }
    let csv = experiment::to_csv(&[one_trial(Strategy::OneForOne, true)]);
    assert!(
        csv.lines().nth(1).unwrap().contains(",failed,escalated,"),
        "{csv}"
    );
}

/// GUARD: the escalation's error text, read through an EventProbe.
#[tokio::test(start_paused = true)]
async fn guard_escalation_error_text() {
    let model = FaultyModel::new(workers())
        .fail_at_turn(1, ModelError::new("connection reset"))
        .only_for("flaky");
    let tree = Tree::builder()
        .catalog(sup_catalog(Strategy::OneForOne, 2, 5_000))
        .model(model)
        .build()
        .await
        .unwrap();
    let mut events = EventProbe::new(&tree);
    let sup = tree.spawn(SpawnRequest::new("sup", "go")).await.unwrap();
    let outcome = events.expect_terminated(sup.id()).await;
    assert_eq!(outcome.reason, EndReason::Escalated);
    let error = outcome.error.unwrap_or_default();
    assert!(
        error.contains("flaky a2 failed (model_error): connection reset"),
        "{error}"
    );
    tree.shutdown().await;
}

fn timed_flaky_trial(
    max_restarts: u32,
    spacing: Duration,
    failures: usize,
) -> experiment::TrialRow {
    let rows = experiment::run_trials(1, 9, move |_| {
        Box::pin(async move {
            let mut turns: Vec<Turn> = (0..failures)
                .map(|_| Turn::fail("boom").after(spacing))
                .collect();
            turns.push(Turn::answer("f ok"));
            let model = ScriptedModel::new()
                .script(
                    "sup",
                    Script::new([Turn::spawn("flaky", "f"), Turn::answer("supervised")]),
                )
                .script("flaky", Script::new(turns));
            let tree = Tree::builder()
                .catalog(sup_catalog(Strategy::OneForOne, max_restarts, 5_000))
                .model(model)
                .build()
                .await
                .unwrap();
            (tree, SpawnRequest::new("sup", "go"))
        })
    });
    rows.into_iter().next().unwrap()
}

/// GUARD: the window slides: failures 3 s apart never put 2 restarts in a 5 s window
/// (restarts at 3, 6, 9 s: the window before 9 s holds only 6 s), so 3 failures recover.
#[test]
fn guard_intensity_window_slides() {
    let row = timed_flaky_trial(2, Duration::from_secs(3), 3);
    assert_eq!(row.status, AgentStatus::Completed, "{row:?}");
    assert_eq!(row.restarts, 3, "{row:?}");
    assert_eq!(row.escalations, 0);
    assert_eq!(row.elapsed_ms, 9000, "{row:?}");
    // first failure at 3 s, sup completes at 9 s.
    assert_eq!(row.recover_ms, Some(6000), "{row:?}");
}

/// GUARD: "a restart exactly one period old still counts" (OTP's add_restart): with 1
/// restart per 5 s, failures exactly 5 s apart escalate at the second failure.
#[test]
fn guard_restart_exactly_one_period_old_counts() {
    let row = timed_flaky_trial(1, Duration::from_secs(5), 2);
    assert_eq!(row.status, AgentStatus::Failed, "{row:?}");
    assert_eq!(row.reason, Some(EndReason::Escalated), "{row:?}");
    assert_eq!(row.restarts, 1, "{row:?}");
    assert_eq!(row.elapsed_ms, 10_000, "{row:?}");
    // One ms more and it recovers.
    let row = timed_flaky_trial(1, Duration::from_millis(5001), 2);
    assert_eq!(row.status, AgentStatus::Completed, "{row:?}");
    assert_eq!(row.restarts, 2, "{row:?}");
}

// ---------------------------------------------------------------------------------------
// (4) Retries with rate limits, in virtual time.
// ---------------------------------------------------------------------------------------

fn one_worker() -> Catalog {
    Catalog::new([AgentDefinition::new("w", "")]).unwrap()
}

/// GUARD: a retry-after is waited exactly; a rate limit without one backs off from 500 ms
/// with equal jitter; every failed attempt is billed; the turn number stays.
#[tokio::test(start_paused = true)]
async fn guard_rate_limits_are_retried_in_virtual_time() {
    let (model, mut calls) = testkit::pair();
    let tree = Tree::builder()
        .catalog(one_worker())
        .model(model)
        .build()
        .await
        .unwrap();
    let mut events = EventProbe::new(&tree);
    let started = tokio::time::Instant::now();
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();

    let first = calls.expect_turn_of(w.id()).await;
    assert_eq!(first.turn(), 1);
    first.fail(
        ModelError::rate_limited("slow down", Some(Duration::from_secs(2)))
            .with_status(429)
            .with_usage(Usage::tokens(5, 0)),
    );
    let second = calls.expect_turn_of(w.id()).await;
    assert_eq!(second.turn(), 1, "a retry keeps the turn number");
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(2),
        "retry-after waited exactly"
    );
    second.fail(ModelError::rate_limited("slow down", None).with_usage(Usage::tokens(5, 0)));
    let third = calls.expect_turn_of(w.id()).await;
    let backoff = started.elapsed() - Duration::from_secs(2);
    assert!(
        backoff >= Duration::from_millis(250) && backoff <= Duration::from_millis(1000),
        "{backoff:?}"
    );
    third.answer_text("done", Usage::tokens(10, 2));
    assert_eq!(w.outcome().await.text.as_deref(), Some("done"));

    let all = events.drain();
    // "The failed attempt's usage, if any, was reported before" each `retrying`.
    for (i, e) in all.iter().enumerate() {
        if matches!(e.kind, EventKind::Retrying { .. }) {
            assert!(
                matches!(all[i - 1].kind, EventKind::UsageReported { delta } if delta == Usage::tokens(5, 0)),
                "{:?}",
                all[i - 1]
            );
        }
    }
    let retries: Vec<(u32, u32, ModelErrorKind, u64)> = all
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Retrying {
                turn,
                attempt,
                error_kind,
                delay_ms,
            } => Some((turn, attempt, error_kind, delay_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert_eq!(retries[0], (1, 1, ModelErrorKind::RateLimited, 2000));
    // delay_ms is the wait truncated to ms; tokio's timer rounds the sleep up to the next ms.
    assert!(
        backoff.as_millis().abs_diff(u128::from(retries[1].3)) <= 1,
        "{backoff:?} {retries:?}"
    );
    assert_eq!(tree.record(w.id()).unwrap().own, Usage::tokens(20, 2));
    tree.shutdown().await;
}

/// GUARD: the two "not retried" texts of docs/semantics.md.
#[tokio::test(start_paused = true)]
async fn guard_retry_give_up_texts() {
    // Every attempt of turn 1 rate-limited: gives up after 4.
    let model =
        FaultyModel::new(ScriptedModel::new().script("w", Script::new([Turn::answer("ok")])))
            .fail_at_turn(1, ModelError::rate_limited("429", None));
    let tree = Tree::builder()
        .catalog(one_worker())
        .model(model)
        .build()
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    let outcome = w.outcome().await;
    assert_eq!(outcome.reason, EndReason::ModelError);
    let error = outcome.error.unwrap();
    assert!(
        error.ends_with("; gave up after 4 attempts (the retry policy's max_attempts)"),
        "{error}"
    );
    // 3 backoffs: ≤ 0.5 + 1 + 2 s.
    assert!(
        started.elapsed() <= Duration::from_millis(3500),
        "{:?}",
        started.elapsed()
    );
    tree.shutdown().await;

    // A retry-after over max_wait fails at once.
    let (model, mut calls) = testkit::pair();
    let tree = Tree::builder()
        .catalog(one_worker())
        .config(TreeConfig::default().with_retry(RetryPolicy::default()))
        .model(model)
        .build()
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    calls
        .expect_turn()
        .await
        .fail(ModelError::rate_limited("quota", Some(Duration::from_secs(3600))).with_status(429));
    let outcome = w.outcome().await;
    let error = outcome.error.unwrap();
    assert!(
        error.contains(
            "not retried: the provider asked to wait 3600s, over the retry policy's max_wait of 60s"
        ),
        "{error}"
    );
    assert_eq!(started.elapsed(), Duration::ZERO);
    calls.expect_no_turn();
    tree.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Probes: owner and children, restarts.
// ---------------------------------------------------------------------------------------

/// DEFECT: the OwnerProbe's `Restarted { run }` is the incarnation, not the run.
///
/// Doc: actors/src/testkit/owner.rs, `OwnerMessage::Restarted`: "The agent's supervisor
/// restarted it as run `run`" (described "restarted as run N"); docs/semantics.md: "A model
/// request's `incarnation` counts restarts only; its `run` counts restarts and resumes".
/// Expected: after run 1, a resume (run 2) that fails and is restarted, `Restarted { run: 3 }`
/// (the model's next call says run 3). Actual: `Restarted { run: 2 }`.
/// Cause: actors/src/testkit/owner.rs `OwnerProbe::next_within` maps
/// `EventKind::Restarted { incarnation }` to `OwnerMessage::Restarted { run: incarnation }`;
/// the `restarted` event carries only the incarnation. Equal only while nothing was resumed.
#[tokio::test(start_paused = true)]
async fn defect_owner_probe_restart_after_resume_names_the_run() {
    let model = ScriptedModel::new().script(
        "w",
        Script::new([
            Turn::answer("one"),
            Turn::fail("crash"),
            Turn::answer("three"),
        ]),
    );
    let catalog =
        Catalog::new([AgentDefinition::new("w", "").with_restart(RestartPolicy::Transient)])
            .unwrap();
    let (tree, mut owner) =
        testkit::OwnerProbe::build(Tree::builder().catalog(catalog).model(model.clone()))
            .await
            .unwrap();
    let w = owner.spawn(&tree, SpawnRequest::new("w", "go")).await;
    assert_eq!(owner.expect_result().await.text.as_deref(), Some("one"));
    tree.idle().await;
    tree.resume(w, "again").await.unwrap();
    let failed = owner.expect_result().await;
    assert_eq!(failed.status, AgentStatus::Failed, "{failed:?}");
    let restarted = owner
        .expect_message("a restart", |m| {
            matches!(m, testkit::OwnerMessage::Restarted { .. })
        })
        .await;
    assert_eq!(owner.expect_result().await.text.as_deref(), Some("three"));
    let runs: Vec<u32> = model.log_of(w).iter().map(|c| c.run).collect();
    assert_eq!(runs, [1, 2, 3]);
    let testkit::OwnerMessage::Restarted { run } = restarted else {
        unreachable!()
    };
    assert_eq!(
        run, 3,
        "the restarted run's number (its model calls say run 3)"
    );
    tree.shutdown().await;
}

/// GUARD: a probed child that fails restarts under its owner's one_for_one; the probe sees
/// its restarted first turn through `expect_spawn` (incarnation 2), with the same prompt.
#[tokio::test(start_paused = true)]
async fn guard_probed_child_restarts() {
    let lead = ScriptedModel::new().script(
        "triage",
        Script::new([Turn::spawn("tech", "fix login"), Turn::answer("fixed")]),
    );
    let (model, mut techs) = testkit::probe_children(lead, ["tech"]);
    let catalog = Catalog::new([
        AgentDefinition::new("triage", "")
            .with_allowed_subagents(SubagentAllowance::only(["tech"]))
            .with_supervision(Strategy::OneForOne, 3, 5_000),
        AgentDefinition::new("tech", "").with_restart(RestartPolicy::Transient),
    ])
    .unwrap();
    let tree = Tree::builder()
        .catalog(catalog)
        .model(model)
        .build()
        .await
        .unwrap();
    let mut triage = tree
        .spawn(SpawnRequest::new("triage", "ticket"))
        .await
        .unwrap();
    let first = techs.expect_spawn().await;
    assert_eq!((first.incarnation(), first.run()), (1, 1));
    first.fails(ModelError::new("segfault"));
    let second = techs.expect_spawn().await;
    assert_eq!((second.incarnation(), second.run()), (2, 2));
    assert_eq!(second.prompt(), "fix login");
    second.returns("driver updated", Usage::tokens(3, 1));
    let outcome = triage.outcome().await;
    assert_eq!(outcome.text.as_deref(), Some("fixed"));
    tree.shutdown().await;
}

/// GUARD: docs/testing.md: "a foreground `Agent` call returns `{"status": "asking", ...}`"
/// when a probe child asks; the owner's steer is the answer; the owner reads the result
/// later with `get_subagent_result`.
#[tokio::test(start_paused = true)]
async fn guard_probe_child_asks_a_driven_owner() {
    let (owner_model, mut owner_calls) = testkit::pair();
    let (model, mut techs) = testkit::probe_children(owner_model, ["tech"]);
    let tree = Tree::builder()
        .catalog(triage_catalog())
        .model(model)
        .build()
        .await
        .unwrap();
    let mut triage = tree
        .spawn(SpawnRequest::new("triage", "ticket"))
        .await
        .unwrap();
    owner_calls
        .expect_turn_of(triage.id())
        .await
        .calls([Call::spawn("tech", "crash on login")], Usage::tokens(5, 1));
    let tech = techs.expect_spawn().await;
    let tech_id = tech.id();
    tech.asks("which OS?", Usage::tokens(2, 1));

    let t2 = owner_calls.expect_turn_of(triage.id()).await;
    // The Agent call's result is the tool message; a question notice follows it (the
    // model reads the question twice: see the report's friction list).
    let result = t2
        .messages()
        .iter()
        .rfind(|m| m.role == agent_tree::protocol::Role::Tool)
        .unwrap();
    let result = tool_json(&result.content);
    assert_eq!(result["status"], "asking", "{result}");
    assert_eq!(result["question"], "which OS?", "{result}");
    t2.calls(
        [Call::steer(Target::Spawned(0), "linux")],
        Usage::tokens(5, 1),
    );

    let tech2 = techs.expect_turn().await;
    assert_eq!(tech2.agent(), tech_id);
    assert!(tech2.last_message().unwrap().content.contains("linux"));
    tech2.answer_text("reinstall the driver", Usage::tokens(2, 1));

    let t3 = owner_calls.expect_turn_of(triage.id()).await;
    t3.calls([Call::result(Target::Spawned(0))], Usage::tokens(5, 1));
    let t4 = owner_calls.expect_turn_of(triage.id()).await;
    let all = t4
        .messages()
        .iter()
        .map(|m| m.content.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(all.contains("reinstall the driver"), "{all}");
    t4.answer_text("done", Usage::ZERO);
    assert_eq!(triage.outcome().await.text.as_deref(), Some("done"));
    tree.shutdown().await;
}

/// GUARD: root supervision in an experiment: a top-level transient worker that always fails,
/// under the root's intensity (1 restart per 5 s). docs/semantics.md: "past that intensity
/// the root fails and every agent is aborted"; TrialRow::escalations: "Agents that failed
/// because a child's restart intensity was exceeded".
#[test]
fn guard_root_escalation_in_an_experiment_row() {
    let rows = experiment::run_trials(1, 3, |_| {
        Box::pin(async move {
            let model = FaultyModel::new(
                ScriptedModel::new().script("w", Script::new([Turn::answer("ok")])),
            )
            .fail_at_turn(1, ModelError::new("crash"));
            let catalog =
                Catalog::new(
                    [AgentDefinition::new("w", "").with_restart(RestartPolicy::Transient)],
                )
                .unwrap();
            let tree = Tree::builder()
                .catalog(catalog)
                .config(TreeConfig::default().with_root_supervision(
                    Strategy::OneForOne,
                    1,
                    Duration::from_secs(5),
                ))
                .model(model)
                .build()
                .await
                .unwrap();
            (tree, SpawnRequest::new("w", "go"))
        })
    });
    let row = &rows[0];
    assert_eq!(row.restarts, 1, "{row:?}");
    assert_eq!(row.status, AgentStatus::Failed, "{row:?}");
    assert_eq!(row.escalations, 1, "the root escalated: {row:?}");
}

/// DEFECT (doc vs row): `TrialRow::escalations` counts escalation failures, not agents.
///
/// Setup: lead (one_for_one, 1 per 5 s) supervises a transient sup (one_for_all, 1 per 5 s)
/// that supervises an always-failing flaky. sup escalates, lead restarts it, it escalates
/// again, lead escalates.
/// Doc: actors/src/testkit/experiment.rs, `TrialRow::escalations`: "Agents that failed
/// because a child's restart intensity was exceeded." Expected 2 (sup, lead). Actual 3: sup
/// is counted once per incarnation that escalated.
/// Cause: actors/src/testkit/experiment.rs `run_trial` adds one per `failed`/`killed` event
/// with reason `escalated`. Either count distinct agents, or document "escalation failures
/// (one per run that escalated)"; a sweep's "escalation probability" reads differently.
#[test]
fn defect_nested_escalation_counts_agents() {
    let rows = experiment::run_trials(1, 5, |_| {
        Box::pin(async move {
            let tree = nested_escalation_tree().await;
            (tree, SpawnRequest::new("lead", "go"))
        })
    });
    let row = &rows[0];
    assert_eq!(row.reason, Some(EndReason::Escalated), "{row:?}");
    // flaky: restarted once per sup incarnation; sup restarted once by lead.
    assert_eq!(row.restarts, 3, "{row:?}");
    // "Agents that failed because a child's restart intensity was exceeded": sup and lead.
    assert_eq!(
        row.escalations, 2,
        "two agents escalated (sup, lead): {row:?}"
    );
}

/// GUARD: the same nested escalation: the top's error names the original failure through
/// the chain (`sup a2 failed (escalated): flaky a4 failed (model_error): connection reset`).
#[tokio::test(start_paused = true)]
async fn guard_nested_escalation_names_the_original_failure() {
    let tree = nested_escalation_tree().await;
    let mut events = EventProbe::new(&tree);
    let lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    let outcome = events.expect_terminated(lead.id()).await;
    let error = outcome.error.clone().unwrap_or_default();
    assert_eq!(outcome.reason, EndReason::Escalated, "{outcome:?}");
    assert!(error.contains("(model_error): connection reset"), "{error}");
    tree.shutdown().await;
}

/// DEFECT: in a FaultyModel plan only the first fault that applies acts, so `.slow(d)`
/// placed before `.fail_at_turn(1, e)` silently disables the failure.
///
/// Doc: actors/src/testkit/faults.rs, `FaultyModel::slow`: "Delays every call by `delay`";
/// `FaultyModel::fail_at_turn`: "Fails turn `turn` of every run with `error`"; the
/// `FaultyModel` example chains `.fail_at_turn(..).only_for(..).fail_with_probability(..)
/// .slow(..)` as if they compose. Nothing says the order matters.
/// Expected: turn 1 delayed 1 s, then failed. Actual: delayed 1 s, then answered "ok"
/// (completed). (The other order fails at once without the delay: the guard below.)
/// Cause: actors/src/testkit/faults.rs `impl Model for FaultyModel::turn`:
/// `self.plan.iter().find(|f| f.applies(..))` picks one fault; `Slow` applies to every call
/// and shadows every fault after it. Fix: apply every matching `Slow` and then the first
/// failing fault, or document "first matching fault wins".
#[tokio::test(start_paused = true)]
async fn defect_faulty_model_slow_then_fail_still_fails() {
    let model =
        FaultyModel::new(ScriptedModel::new().script("w", Script::new([Turn::answer("ok")])))
            .slow(Duration::from_secs(1))
            .fail_at_turn(1, ModelError::new("crash"));
    let tree = Tree::builder()
        .catalog(one_worker())
        .model(model)
        .build()
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    let outcome = w.outcome().await;
    assert_eq!(started.elapsed(), Duration::from_secs(1), "slowed");
    assert_eq!(
        outcome.status,
        AgentStatus::Failed,
        "fail_at_turn(1) ignored: {outcome:?}"
    );
    tree.shutdown().await;
}

/// GUARD: the other order fails (undelayed: the first matching fault wins).
#[tokio::test(start_paused = true)]
async fn guard_faulty_model_fail_then_slow() {
    let model =
        FaultyModel::new(ScriptedModel::new().script("w", Script::new([Turn::answer("ok")])))
            .fail_at_turn(1, ModelError::new("crash"))
            .slow(Duration::from_secs(1));
    let tree = Tree::builder()
        .catalog(one_worker())
        .model(model)
        .build()
        .await
        .unwrap();
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(w.outcome().await.status, AgentStatus::Failed);
    tree.shutdown().await;
}

/// GUARD: a trial that never settles is recorded as it stands after TRIAL_LIMIT.
#[test]
fn guard_experiment_hanging_trial_is_recorded_running() {
    let rows = experiment::run_trials(1, 0, |_| {
        Box::pin(async move {
            let model = ScriptedModel::new().script("w", Script::new([Turn::hang()]));
            let tree = Tree::builder()
                .catalog(one_worker())
                .model(model)
                .build()
                .await
                .unwrap();
            (tree, SpawnRequest::new("w", "go"))
        })
    });
    assert_eq!(rows[0].status, AgentStatus::Running, "{:?}", rows[0]);
    assert_eq!(rows[0].reason, None);
    assert_eq!(
        rows[0].elapsed_ms,
        experiment::TRIAL_LIMIT.as_millis() as u64
    );
}

/// GUARD: a kill at a chosen event (kill_when) is a crash: under one_for_all the killed
/// steady worker and its flaky sibling both restart (docs/testing.md: "A kill is a crash to
/// the supervisor, so a `transient` or `permanent` child restarts").
#[tokio::test(start_paused = true)]
async fn guard_kill_when_under_one_for_all() {
    let tree = Tree::builder()
        .catalog(sup_catalog(Strategy::OneForAll, 2, 5_000))
        .model(workers())
        .build()
        .await
        .unwrap();
    let mut events = EventProbe::new(&tree);
    // a3 is steady; kill it as it starts its first run.
    let mut switch = testkit::kill_when(&tree, |e| {
        (e.agent.to_string() == "a3" && matches!(e.kind, EventKind::Started { incarnation: 1, .. }))
            .then_some(e.agent)
    });
    let sup = tree.spawn(SpawnRequest::new("sup", "go")).await.unwrap();
    let (killed, result) = switch.fired().await.unwrap();
    assert_eq!(killed.to_string(), "a3");
    result.unwrap();
    let restarted = events
        .receive_n(2, "a restart", |e| {
            matches!(e.kind, EventKind::Restarted { .. })
        })
        .await;
    let mut who: Vec<String> = restarted.iter().map(|e| e.agent.to_string()).collect();
    who.sort();
    assert_eq!(who, ["a2", "a3"]);
    assert_eq!(
        events.expect_terminated(sup.id()).await.text.as_deref(),
        Some("supervised")
    );
    tree.shutdown().await;
}

/// GUARD: docs/semantics.md: "A steer that arrives during the last turn `max_turns` allows
/// is refused (`NoTurnsLeft`)", and "an `ask_owner` on the last turn `max_turns` allows is
/// refused at once".
#[tokio::test(start_paused = true)]
async fn guard_last_turn_refuses_steers_and_questions() {
    let (model, mut calls) = testkit::pair();
    let catalog = Catalog::new([AgentDefinition::new("w", "").with_max_turns(2)]).unwrap();
    let tree = Tree::builder()
        .catalog(catalog)
        .model(model)
        .on_question(|_q: agent_tree::Question| async { Ok::<_, String>("yes".to_owned()) })
        .build()
        .await
        .unwrap();
    let mut w = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    calls
        .expect_turn()
        .await
        .answer(agent_tree::ModelResponse::calls(vec![ToolCall::new(
            "t",
            "read_nothing",
            json!({}),
        )]));
    let last = calls.expect_turn().await;
    assert_eq!(last.turn(), 2);
    let refused = tree.steer(w.id(), "hurry").await;
    assert!(
        matches!(refused, Err(agent_tree::ControlError::NoTurnsLeft(_))),
        "{refused:?}"
    );
    last.answer(agent_tree::ModelResponse::calls(vec![ToolCall::new(
        "q",
        "ask_owner",
        json!({"question": "ok?"}),
    )]));
    let outcome = w.outcome().await;
    assert_eq!(outcome.reason, EndReason::MaxTurns, "{outcome:?}");
    tree.shutdown().await;
}

/// lead (one_for_one, 1 restart in 5 s) supervises a transient sup (one_for_all, 1 in 5 s),
/// which supervises a transient flaky whose every first turn fails: sup escalates in each of
/// its two runs, then lead escalates.
async fn nested_escalation_tree() -> Tree {
    let model = FaultyModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                Script::new([Turn::spawn("sup", "s"), Turn::answer("lead ok")]),
            )
            // The cursor runs on across restarts, and an escalated run never took its answer
            // turn: the restarted run's first turn is the second spawn.
            .script(
                "sup",
                Script::new([
                    Turn::spawn("flaky", "f"),
                    Turn::spawn("flaky", "f"),
                    Turn::answer("sup ok"),
                ]),
            )
            .script("flaky", Script::new([Turn::answer("never")])),
    )
    .fail_at_turn(1, ModelError::new("connection reset"))
    .only_for("flaky");
    let catalog = Catalog::new([
        AgentDefinition::new("lead", "")
            .with_allowed_subagents(SubagentAllowance::only(["sup"]))
            .with_supervision(Strategy::OneForOne, 1, 5_000),
        AgentDefinition::new("sup", "")
            .with_allowed_subagents(SubagentAllowance::only(["flaky"]))
            .with_supervision(Strategy::OneForAll, 1, 5_000)
            .with_restart(RestartPolicy::Transient),
        AgentDefinition::new("flaky", "").with_restart(RestartPolicy::Transient),
    ])
    .unwrap();
    Tree::builder()
        .catalog(catalog)
        .model(model)
        .build()
        .await
        .unwrap()
}
