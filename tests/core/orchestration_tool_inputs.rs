//! What a model writes in an orchestration tool call is checked, never trusted, and never
//! refused for what the tools themselves offered: every type the `Agent` tool lists can be
//! spawned (a long type name among them); a blank resume prompt never reaches a model as a
//! message; hostile ids get the same refusal from every control tool and reach no agent; and
//! a refusal a model is shown is short JSON, at most 512 bytes.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use serde_json::json;

use crate::support::harness::{GUARD, a, lead_and_worker, results, tree};
use crate::support::scripts::answers_after;
use crate::support::{
    build_tree, catalog, delegator, delegator_of_all, leaf, read_result_call, resume_call,
};

/// A type the `Agent` tool offers is one the model can start: a catalog takes a type name of
/// any length and the tool lists it in its `agent_type` enum, so a model's call naming it
/// exactly spawns it.
#[tokio::test(start_paused = true)]
async fn a_listed_type_with_a_long_name_can_be_spawned_by_the_model() {
    let long = format!("worker-{}", "x".repeat(140));
    let model = ScriptedModel::new()
        .script(
            "lead",
            [
                Turn::calls([Call::spawn(long.clone(), "do it")]),
                Turn::answer("lead done"),
            ],
        )
        .script(long.clone(), Script::new([Turn::answer("worker done")]));
    let tree = build_tree(
        catalog([delegator("lead", &[&long]), leaf(&long)]),
        model.clone(),
    )
    .await;
    let mut handle = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    let got = tokio::time::timeout(GUARD, handle.outcome()).await.unwrap();
    assert!(got.is_completed(), "{got:?}");
    let offered = model.log_of(a(1))[0].tools.iter().any(|t| t == "Agent");
    assert!(offered, "the lead is offered the Agent tool");
    let result = &results(&model, a(1), 1)[0];
    assert!(
        !result.is_error,
        "the lead's Agent call naming a type its tool lists was refused: {}",
        result.content
    );
    tree.shutdown().await;
}

/// A blank prompt (empty or whitespace only) is refused whoever sends it, and only an empty
/// prompt resumes "as it was": a model's `Agent {resume, prompt: "   "}` never puts a
/// whitespace-only user message in the child's next request (a provider may refuse one).
#[tokio::test(start_paused = true)]
async fn a_whitespace_resume_prompt_never_reaches_the_model_as_a_message() {
    let model = ScriptedModel::new()
        .script(
            "lead",
            [
                Turn::calls([Call::spawn("worker", "first task")]),
                Turn::calls([resume_call("a2", "   \n\t ")]),
                Turn::answer("lead done"),
            ],
        )
        .script("worker", [Turn::answer("first"), Turn::answer("second")]);
    let tree = build_tree(lead_and_worker(), model.clone()).await;
    let mut handle = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    let got = tokio::time::timeout(GUARD, handle.outcome()).await.unwrap();
    assert!(got.is_completed(), "{got:?}");
    let resume_result = &results(&model, a(1), 2)[0];
    let worker_calls = model.log_of(a(2));
    let blank: Vec<String> = worker_calls
        .iter()
        .flat_map(|c| crate::support::user_texts(&c.messages))
        .filter(|t| t.trim().is_empty())
        .collect();
    assert!(
        blank.is_empty(),
        "a whitespace-only resume prompt reached the worker's model as a user message \
         {blank:?} (the resume answered {})",
        resume_result.content
    );
    tree.shutdown().await;
}

/// Hostile ids a model may write (itself, its owner, the root, a sibling's branch, an
/// overflowing number, a leading zero, upper case, padding, unicode digits, empty) all get
/// the same kind of refusal from every control tool, and none reaches an agent: the lead's
/// only child keeps running to its own answer.
#[tokio::test(start_paused = true)]
async fn hostile_ids_are_refused_alike_by_every_control_tool() {
    let hostile = [
        "a1",
        "a0",
        "a2",
        "a18446744073709551616",
        "a03",
        " A3",
        "a３",
        "",
        "a-3",
        "3",
    ];
    let mut calls = Vec::new();
    for id in hostile {
        calls.push(Call::tool(
            "steer_subagent",
            json!({ "agent_id": id, "message": "hi" }),
        ));
        calls.push(Call::tool("abort_subagent", json!({ "agent_id": id })));
        calls.push(read_result_call(id));
        calls.push(Call::tool(
            "wait_subagents",
            json!({ "agent_ids": [id, id] }),
        ));
        calls.push(resume_call(id, "again"));
    }
    let count = calls.len();
    let model = ScriptedModel::new()
        .script(
            "lead",
            [
                Turn::calls([Call::spawn_background("worker", "work")]),
                Turn::calls(calls),
                Turn::answer("lead done"),
            ],
        )
        .script(
            "other",
            answers_after("other done", Duration::from_millis(50)),
        )
        .script(
            "worker",
            answers_after("worker done", Duration::from_millis(100)),
        );
    let tree = tree(
        model.clone(),
        catalog([
            delegator("lead", &["worker"]),
            leaf("worker"),
            leaf("other"),
        ]),
        TreeConfig::default().with_max_tool_calls_per_turn(count),
    )
    .await;
    let mut lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    let mut other = tree.spawn(SpawnRequest::new("other", "go")).await.unwrap();
    assert_eq!((lead.id(), other.id()), (a(1), a(2)));
    let got = tokio::time::timeout(GUARD, lead.outcome()).await.unwrap();
    assert!(got.is_completed(), "{got:?}");
    let results = results(&model, a(1), 2);
    assert_eq!(results.len(), count);
    for (i, result) in results.iter().enumerate() {
        let text = crate::support::error_text(&result.content);
        assert!(
            result.is_error && text.starts_with("no subagent ") && text.ends_with(" of yours"),
            "call {i} (id {:?}) got {}",
            hostile[i / 5],
            result.content
        );
    }
    assert!(
        tokio::time::timeout(GUARD, other.outcome())
            .await
            .unwrap()
            .is_completed()
    );
    let worker = tree.record(a(3)).expect("the lead's worker");
    assert_eq!(worker.parent, Some(a(1)));
    tree.shutdown().await;
}

/// Refusals are short JSON, `{"error": "..."}`, cut to 512 bytes: a long refusal (an
/// unknown type, whose error lists every type the caller may reach) is at most 512 bytes,
/// its cut mark included.
#[tokio::test(start_paused = true)]
async fn a_refusal_a_model_is_shown_is_at_most_512_bytes() {
    let mut definitions = vec![delegator_of_all("lead")];
    for i in 0..12 {
        definitions.push(leaf(&format!(
            "worker-with-a-rather-long-type-name-number-{i:02}"
        )));
    }
    let model = ScriptedModel::new().script(
        "lead",
        [
            Turn::calls([Call::spawn("no-such-type", "x")]),
            Turn::answer("done"),
        ],
    );
    let tree = build_tree(catalog(definitions), model.clone()).await;
    tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    tree.shutdown().await;
    let result = results(&model, a(1), 1);
    let refusal = &result[0];
    assert!(refusal.is_error, "{}", refusal.content);
    let value: serde_json::Value = serde_json::from_str(&refusal.content).unwrap();
    let text = value["error"].as_str().unwrap();
    assert!(text.starts_with("unknown agent type"), "{text}");
    assert!(
        text.len() <= 512,
        "refusal text is {} bytes: {text:?}",
        text.len()
    );
}
