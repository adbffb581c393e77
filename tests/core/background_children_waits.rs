//! Background children and waits on them: a delegating agent spawns in the background,
//! reads `running`, `asking` and results, answers a child's question by a steer, is steered
//! mid-turn, and a timed read answers `running` at its timeout, in virtual time.

use std::time::Duration;

use agent_tree::FnTool;
use agent_tree::prelude::*;
use agent_tree::protocol::{EventKind, ToolCall};
use agent_tree::testkit::{self, Call, EventProbe, FaultyTool, ScriptedModel, Target, Turn};
use serde_json::{Value, json};

use crate::small_catalogs::{tool_json, triage_catalog};
use crate::support::build_tree;
use crate::support::harness::contents;
use crate::support::scripts::{answers_after, background_spawns};
use crate::support::spawn_admitted;

/// Driven turn by turn: triage spawns billing and tech in the background, tech asks its owner, triage
/// waits on tech and gets `asking`, answers by a steer, is steered by the application
/// mid-turn, then waits for both and answers.
#[tokio::test(start_paused = true)]
async fn background_children_that_ask_are_answered_by_a_steer_and_waited_for() {
    let (model, mut calls) = testkit::pair();
    let tree = build_tree(triage_catalog(), model).await;
    let mut events = EventProbe::new(&tree);
    let mut triage = spawn_admitted(
        &tree,
        SpawnRequest::new("triage", "ticket 42: refund + crash"),
    )
    .await;

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
    let all = contents(t5.messages()).join("\n");
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

/// `get_subagent_result` with `timeout_ms` answers `running` at the timeout (virtual
/// time) and leaves the child running; a slow tool takes its virtual time; events come in
/// the order and at the times the script implies.
#[tokio::test(start_paused = true)]
async fn a_timed_result_read_answers_running_at_its_timeout_in_virtual_time() {
    // Ids are deterministic: triage a1, billing a2, tech a3. `Call::result` has no
    // `timeout_ms`, so the raw tool call has to name the id itself.
    let model = ScriptedModel::new()
        .script(
            "triage",
            [
                background_spawns([("billing", "refund order 42"), ("tech", "app crashes")]),
                Turn::calls([Call::tool(
                    "get_subagent_result",
                    json!({"agent_id": "a2", "wait": true, "timeout_ms": 1000}),
                )]),
                Turn::calls([
                    Call::result(Target::Spawned(0)),
                    Call::result(Target::Spawned(1)),
                ]),
                Turn::answer("handled"),
            ],
        )
        .script(
            "billing",
            answers_after("refund issued", Duration::from_secs(5)),
        )
        .script(
            "tech",
            [
                Turn::calls([Call::tool("lookup", json!({"q": "crash"}))]),
                Turn::answer("known bug"),
            ],
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
    let triage = spawn_admitted(&tree, SpawnRequest::new("triage", "ticket 42")).await;

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
    let all = contents(last).join("\n");
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
