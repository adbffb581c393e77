//! A panic in model code (`Turn::panic`) or a model error (`Turn::fail`) fails that one agent
//! (`failed`, reason `panicked` / `model_error`) and nothing else: its owner receives the
//! failure as a tool result (background read or foreground spawn) and completes, its siblings
//! complete, a failure two levels down is contained by its own owner, and the tree keeps
//! running new agents, a failing top-level agent included.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, EventKind};
use agent_tree::testkit::{Call, ScriptedModel, Target, Turn};

use crate::support::scripts::{answers_after_billing, background_spawns};
use crate::support::{JsonContent, build_tree, run_within};
use crate::support::{
    RecordingModel, all_of_type, catalog, delegator, leaf, only_of_type, record, spawn_admitted,
    within,
};

fn scripted() -> ScriptedModel {
    ScriptedModel::new()
        .script(
            "lead",
            [
                background_spawns([
                    ("panicker", "crash"),
                    ("failer", "error out"),
                    ("worker", "work"),
                    ("sub", "delegate to a crashing child"),
                ])
                .usage(Usage::tokens(10, 1)),
                Turn::calls([
                    Call::result(Target::Spawned(0)),
                    Call::result(Target::Spawned(1)),
                    Call::result(Target::Spawned(2)),
                    Call::result(Target::Spawned(3)),
                ])
                .usage(Usage::tokens(10, 1)),
                // A foreground child that panics: the failure is the spawn's own result.
                Turn::spawn("panicker", "crash in the foreground").usage(Usage::tokens(10, 1)),
                Turn::answer("lead survived").usage(Usage::tokens(10, 1)),
            ],
        )
        .script("panicker", [Turn::panic("boom")])
        .script("failer", [Turn::fail("rate limited")])
        .script(
            "worker",
            answers_after_billing("worked", Usage::tokens(5, 5), Duration::from_secs(1)),
        )
        .script(
            "sub",
            [
                Turn::spawn("panicker", "crash below me").usage(Usage::tokens(3, 0)),
                Turn::answer("sub survived").usage(Usage::tokens(3, 0)),
            ],
        )
}

/// A panic or a model error fails that one agent and nothing else: its owner gets the
/// failure as a tool result and completes, its siblings complete, and a failure two levels
/// down is contained by its own owner.
#[tokio::test(start_paused = true)]
async fn a_failing_agent_fails_alone() {
    let model = RecordingModel::new(scripted());
    let tree = build_tree(
        catalog([
            delegator("lead", &["panicker", "failer", "worker", "sub"]),
            delegator("sub", &["panicker"]),
            leaf("panicker"),
            leaf("failer"),
            leaf("worker"),
        ]),
        model.clone(),
    )
    .await;
    let mut events = tree.subscribe();

    let mut lead = spawn_admitted(&tree, SpawnRequest::new("lead", "survive failures")).await;
    let outcome = within("the lead", lead.outcome()).await;
    assert!(outcome.is_completed(), "{outcome:?}");
    assert_eq!(outcome.text.as_deref(), Some("lead survived"));
    let events = crate::support::events_at_idle(&tree, &mut events).await;
    let snapshot = tree.snapshot();
    let text = snapshot.render_text();

    let panickers = all_of_type(&snapshot, "panicker");
    assert_eq!(panickers.len(), 3, "{text}");
    let failer = only_of_type(&snapshot, "failer");
    for &id in &panickers {
        let r = record(&snapshot, id);
        let o = r.outcome.as_ref().expect("settled");
        assert_eq!(
            (r.status, o.reason),
            (AgentStatus::Failed, EndReason::Panicked),
            "{id}"
        );
        assert!(
            o.error.as_deref().is_some_and(|e| e.contains("boom")),
            "{o:?}"
        );
        assert!(r.own.is_zero(), "a panicked turn reports no usage");
    }
    let r = record(&snapshot, failer);
    let o = r.outcome.as_ref().expect("settled");
    assert_eq!(
        (r.status, o.reason),
        (AgentStatus::Failed, EndReason::ModelError)
    );
    assert!(
        o.error
            .as_deref()
            .is_some_and(|e| e.contains("rate limited")),
        "{o:?}"
    );

    // Everyone else completed: the lead, the sibling worker, and the sub whose own child
    // panicked.
    let failed: Vec<AgentId> = panickers.iter().copied().chain([failer]).collect();
    for r in snapshot.agents().filter(|r| !failed.contains(&r.id)) {
        assert_eq!(r.status, AgentStatus::Completed, "{} in\n{text}", r.id);
    }
    let sub = only_of_type(&snapshot, "sub");
    assert_eq!(
        record(&snapshot, sub)
            .outcome
            .as_ref()
            .and_then(|o| o.text.as_deref()),
        Some("sub survived")
    );

    // The failure events say why, once per failed agent.
    let failures: Vec<(AgentId, EndReason)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Failed { outcome } => Some((e.agent, outcome.reason)),
            _ => None,
        })
        .collect();
    assert_eq!(failures.len(), 4, "{failures:?}");
    for &id in &panickers {
        assert!(failures.contains(&(id, EndReason::Panicked)));
    }
    assert!(failures.contains(&(failer, EndReason::ModelError)));

    // The lead was told of each failure as a tool result.
    let lead = lead.id();
    let lead_children = record(&snapshot, lead).children.clone();
    assert_eq!(lead_children.len(), 5, "{text}");
    let turn3 = model.request(lead, 3);
    let read = |call: &str| turn3.tool_result(call).expect("result").json();
    let background_panicker = read("call_2_0");
    assert_eq!(
        background_panicker["agent_id"],
        lead_children[0].to_string()
    );
    assert_eq!(background_panicker["status"], "failed");
    assert_eq!(background_panicker["reason"], "panicked");
    assert!(
        background_panicker["error"]
            .as_str()
            .unwrap_or("")
            .contains("boom")
    );
    let model_error = read("call_2_1");
    assert_eq!(model_error["status"], "failed");
    assert_eq!(model_error["reason"], "model_error");
    // The kind as data beside the text (the scripted failure is a provider error).
    assert_eq!(model_error["error_kind"], "provider");
    assert_eq!(background_panicker.get("error_kind"), None);
    assert!(
        model_error["error"]
            .as_str()
            .unwrap_or("")
            .contains("rate limited")
    );
    assert_eq!(read("call_2_2")["status"], "completed");
    assert_eq!(read("call_2_3")["text"], "sub survived");
    let foreground = model
        .request(lead, 4)
        .tool_result("call_3_0")
        .expect("foreground spawn result")
        .json();
    assert_eq!(foreground["agent_id"], lead_children[4].to_string());
    assert_eq!(foreground["status"], "failed");
    assert_eq!(foreground["reason"], "panicked");
    // The sub saw its own child's failure the same way.
    let sub_saw = model
        .request(sub, 2)
        .tool_result("call_1_0")
        .expect("sub's spawn result")
        .json();
    assert_eq!(sub_saw["status"], "failed");
    assert_eq!(sub_saw["reason"], "panicked");

    assert!(snapshot.check_usage().is_ok(), "{text}");

    // The tree is unharmed: a failing top-level agent fails alone, and work goes on.
    let top_panic = run_within(
        &tree,
        "a top-level panicker",
        SpawnRequest::new("panicker", "again"),
    )
    .await;
    assert_eq!(
        (top_panic.status, top_panic.reason),
        (AgentStatus::Failed, EndReason::Panicked)
    );
    let top_fail = run_within(
        &tree,
        "a top-level failer",
        SpawnRequest::new("failer", "again"),
    )
    .await;
    assert_eq!(
        (top_fail.status, top_fail.reason),
        (AgentStatus::Failed, EndReason::ModelError)
    );
    let after = run_within(
        &tree,
        "a worker",
        SpawnRequest::new("worker", "still there"),
    )
    .await;
    assert_eq!(after.text.as_deref(), Some("worked"));

    within("shutdown", tree.shutdown()).await;
}
