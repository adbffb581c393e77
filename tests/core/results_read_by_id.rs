//! A background child's result is read by id through `get_subagent_result`: a peek while it
//! runs says `running`, a waiting read blocks until that very child settles (not merely the
//! first one to finish), a later peek returns the same kept result, and the owner's final
//! answer is built from what it read.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::testkit::{Call, ScriptedModel, Target, Turn};
use serde_json::json;
use tokio::time::Instant;

use crate::support::scripts::{answers_after_billing, background_spawns};
use crate::support::{JsonContent, build_tree};
use crate::support::{
    RecordingModel, catalog, delegator, leaf, only_of_type, spawn_admitted, within,
};

const FAST: Duration = Duration::from_secs(1);
const SLOW: Duration = Duration::from_secs(5);

fn scripted() -> ScriptedModel {
    ScriptedModel::new()
        .script(
            "lead",
            [
                // turn 1: two background children; ids come back at once
                background_spawns([("slow", "take your time"), ("fast", "be quick")]),
                // turn 2: peek at both while they run
                Turn::calls([
                    Call::peek(Target::Spawned(0)),
                    Call::peek(Target::Spawned(1)),
                ]),
                // turn 3: wait for the slow one by id, although the fast one settles first
                Turn::calls([Call::result(Target::Spawned(0))]),
                // turn 4: later, peek at both again (reading never removes a result)
                Turn::calls([
                    Call::peek(Target::Spawned(1)),
                    Call::peek(Target::Spawned(0)),
                ])
                .after(Duration::from_secs(10)),
                // turn 5 is answered by the hook from what the lead read
            ],
        )
        .script(
            "slow",
            answers_after_billing("slow result", Usage::tokens(5, 5), SLOW),
        )
        .script(
            "fast",
            answers_after_billing("fast result", Usage::tokens(1, 1), FAST),
        )
}

/// The lead's last turn: its answer quotes the results it read in turns 3 and 4.
fn answer_from_results(request: &ModelRequest) -> Option<Result<ModelResponse, ModelError>> {
    if request.agent_type() != "lead" || request.turn != 5 {
        return None;
    }
    let results = crate::support::tool_results(&request.messages);
    let text_of = |call_id: &str| {
        let result = results
            .iter()
            .find(|r| r.call_id == call_id)
            .unwrap_or_else(|| panic!("no result for {call_id}"));
        result.json()["text"]
            .as_str()
            .unwrap_or("<none>")
            .to_owned()
    };
    let answer = format!("slow={}; fast={}", text_of("call_3_0"), text_of("call_4_0"));
    Some(Ok(ModelResponse::text(answer)))
}

/// A background child's result is read by its id: a peek while it runs says `running`, a
/// waiting read returns when that very child settles, a later peek returns the same result,
/// and the owner's answer is built from what it read.
#[tokio::test(start_paused = true)]
async fn background_result_is_read_by_id_and_shapes_the_final_answer() {
    let model = RecordingModel::new(scripted()).with_hook(answer_from_results);
    let tree = build_tree(
        catalog([
            delegator("lead", &["slow", "fast"]),
            leaf("slow"),
            leaf("fast"),
        ]),
        model.clone(),
    )
    .await;
    let start = Instant::now();

    let mut lead = spawn_admitted(&tree, SpawnRequest::new("lead", "gather")).await;
    let outcome = within("the lead", lead.outcome()).await;
    assert!(outcome.is_completed(), "{outcome:?}");
    assert_eq!(
        outcome.text.as_deref(),
        Some("slow=slow result; fast=fast result")
    );

    within("idle", tree.idle()).await;
    let snapshot = tree.snapshot();
    let slow = only_of_type(&snapshot, "slow");
    let fast = only_of_type(&snapshot, "fast");
    let lead = lead.id();

    // Turn 1: the background spawns answered at once with the ids, still running.
    let turn2 = model.request(lead, 2);
    for (call, child) in [("call_1_0", slow), ("call_1_1", fast)] {
        let result = turn2.tool_result(call).expect("spawn result");
        assert!(!result.is_error);
        assert_eq!(
            result.json(),
            json!({ "agent_id": child.to_string(), "status": "running" })
        );
    }

    // Turn 2: peeks while both run.
    let turn3 = model.request(lead, 3);
    for (call, child) in [("call_2_0", slow), ("call_2_1", fast)] {
        let result = turn3.tool_result(call).expect("peek result");
        assert!(!result.is_error);
        assert_eq!(
            result.json(),
            json!({ "agent_id": child.to_string(), "status": "running" }),
            "a peek never waits"
        );
    }

    // Turn 3: the waiting read returned the slow child's result, once it had settled.
    let turn4 = model.request(lead, 4);
    let waited = turn4.tool_result("call_3_0").expect("wait result");
    assert!(!waited.is_error);
    assert_eq!(
        waited.json(),
        json!({ "agent_id": slow.to_string(), "status": "completed", "text": "slow result" })
    );
    assert!(
        turn4.at - start >= SLOW,
        "the lead resumed after {:?}, before the slow child could finish",
        turn4.at - start
    );

    // Turn 4: later peeks return the kept results, the one read before included.
    let turn5 = model.request(lead, 5);
    assert_eq!(
        turn5.tool_result("call_4_0").expect("peek").json(),
        json!({ "agent_id": fast.to_string(), "status": "completed", "text": "fast result" })
    );
    assert_eq!(
        turn5.tool_result("call_4_1").expect("peek").json(),
        json!({ "agent_id": slow.to_string(), "status": "completed", "text": "slow result" })
    );

    // The application can still read both results too.
    assert_eq!(
        tree.outcome(slow).and_then(|o| o.text).as_deref(),
        Some("slow result")
    );
    assert_eq!(
        tree.outcome(fast).and_then(|o| o.text).as_deref(),
        Some("fast result")
    );
    assert_eq!(model.calls_of(lead).len(), 5);
    within("shutdown", tree.shutdown()).await;
}
