//! The tool calls of one model turn are keyed by their position, not by the ids the model
//! gave them: calls with duplicate or empty ids (as some OpenAI-compatible servers send) all
//! run, none hangs the agent, their results come back in call order whichever finishes first,
//! and orchestration calls with the same id each spawn their own child.

use agent_tree::BoxFuture;
use agent_tree::prelude::*;
use agent_tree::protocol::Role;
use agent_tree::testkit::{ScriptedModel, Turn};
use serde_json::json;

use crate::support::harness::{a, lead_and_worker, spawn_for_id};
use crate::support::lifetimes::ms;
use crate::support::races::{GUARD, bounded, outcome, slow, slow_tool};
use crate::support::scripts::{answers_after, background_spawns, foreground_spawns};
use crate::support::{RecordingModel, build_tree};
use crate::support::{catalog, leaf, spawn_admitted};

/// A model that gives every tool call of every turn the same id (as some OpenAI-compatible
/// servers send `""` for every call).
/// Written by hand: it rewrites what the wrapped model answers, as a faulty adapter would.
#[derive(Clone, Debug)]
struct SameIds {
    inner: RecordingModel,
    id: &'static str,
}

impl Model for SameIds {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            let mut response = self.inner.turn(request).await?;
            for call in &mut response.tool_calls {
                call.id = self.id.to_owned();
            }
            Ok(response)
        })
    }
}

/// The tool results of the request after the turn that made the calls, in order.
fn results_after_calls(model: &RecordingModel, agent: AgentId) -> Vec<String> {
    let requests = model.calls_of(agent);
    let second = requests
        .get(1)
        .unwrap_or_else(|| panic!("{agent} made {} model calls, wanted 2", requests.len()));
    second
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.content.clone())
        .collect()
}

async fn duplicate_user_tool_ids(id: &'static str, first_ms: u64, second_ms: u64) {
    let recorder = RecordingModel::new(ScriptedModel::new().script(
        "worker",
        [
            Turn::calls([slow("first", first_ms), slow("second", second_ms)]),
            Turn::answer("worked"),
        ],
    ));
    let tree = Tree::builder()
        .catalog(catalog([leaf("worker")]))
        .model(SameIds {
            inner: recorder.clone(),
            id,
        })
        .tool(slow_tool())
        .expect("the name is free")
        .build()
        .await
        .expect("the tree builds");
    let mut handle = spawn_admitted(&tree, SpawnRequest::new("worker", "two calls, one id")).await;
    let got = tokio::time::timeout(GUARD, handle.outcome()).await;
    let got = got.unwrap_or_else(|_| {
        panic!(
            "two tool calls with the same id {id:?} (first {first_ms} ms, second \
             {second_ms} ms) hang the agent: it is {:?} after an hour; it made {} model calls",
            tree.record(a(1)).map(|r| r.status),
            recorder.calls_of(a(1)).len()
        )
    });
    assert!(got.is_completed(), "{got:?}");
    assert_eq!(
        results_after_calls(&recorder, a(1)),
        ["slow first", "slow second"],
        "the results of calls with the same id {id:?} must come back by position, in \
         call order"
    );
    tree.shutdown().await;
}

/// Two user-tool calls of one turn with the same id, or with empty ids `""` (as some
/// OpenAI-compatible servers send), whichever finishes first: both run, the agent never
/// hangs, and both results come back in call order.
#[tokio::test(start_paused = true)]
async fn user_tool_calls_with_duplicate_or_empty_ids_answer_in_call_order() {
    // (id, first call's ms, second call's ms)
    for (id, first_ms, second_ms) in [("dup", 10, 20), ("", 10, 20), ("", 20, 10)] {
        duplicate_user_tool_ids(id, first_ms, second_ms).await;
    }
}

/// Two foreground `Agent` calls of one turn with empty ids spawn two children, and the owner
/// gets both results (in call order) and completes.
#[tokio::test(start_paused = true)]
async fn two_foreground_spawns_with_empty_ids_both_run_and_answer() {
    let recorder = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                [
                    foreground_spawns([("worker", "task A"), ("worker", "task B")]),
                    Turn::answer("lead done"),
                ],
            )
            .script("worker", answers_after("worker done", ms(10))),
    );
    let tree = build_tree(
        lead_and_worker(),
        SameIds {
            inner: recorder.clone(),
            id: "",
        },
    )
    .await;
    let mut handle = spawn_admitted(&tree, SpawnRequest::new("lead", "two children")).await;
    let got = tokio::time::timeout(GUARD, handle.outcome()).await;
    let workers: Vec<AgentId> = tree
        .snapshot()
        .agents()
        .filter(|r| r.agent_type == "worker")
        .map(|r| r.id)
        .collect();
    let got = got.unwrap_or_else(|_| {
        panic!(
            "two foreground spawns with empty ids hang the owner (it is {:?}); \
             workers spawned: {workers:?}",
            tree.record(a(1)).map(|r| r.status)
        )
    });
    assert!(got.is_completed(), "{got:?}");
    assert_eq!(workers.len(), 2, "both calls spawn a child: {workers:?}");
    let prompts: Vec<String> = workers
        .iter()
        .map(|&w| {
            recorder.calls_of(w)[0]
                .messages
                .iter()
                .find(|m| m.role == Role::User)
                .map(|m| m.content.clone())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(prompts, ["task A", "task B"]);
    let results = results_after_calls(&recorder, a(1));
    assert_eq!(results.len(), 2, "{results:?}");
    for (result, worker) in results.iter().zip(&workers) {
        let value: serde_json::Value = serde_json::from_str(result).expect("JSON");
        assert_eq!(value["agent_id"], json!(worker.to_string()), "{results:?}");
        assert_eq!(value["status"], json!("completed"), "{results:?}");
    }
    tree.shutdown().await;
}

/// With two background spawns with the same id: the second must spawn its own child
/// (it is not a replay of the first).
#[tokio::test(start_paused = true)]
async fn two_background_spawns_with_the_same_id_spawn_two_children() {
    let recorder = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                [
                    background_spawns([("worker", "task A"), ("worker", "task B")]),
                    Turn::answer("lead done"),
                ],
            )
            .script("worker", [Turn::answer("worker done")]),
    );
    let tree = build_tree(
        lead_and_worker(),
        SameIds {
            inner: recorder.clone(),
            id: "call",
        },
    )
    .await;
    let lead = spawn_for_id(&tree, "lead", "two children").await;
    let got = outcome(&tree, lead, GUARD).await;
    assert!(got.is_completed(), "{got:?}");
    bounded(GUARD, "idle", tree.idle()).await;
    let workers = tree
        .snapshot()
        .agents()
        .filter(|r| r.agent_type == "worker")
        .count();
    assert_eq!(
        workers,
        2,
        "the second call with the same id spawned no child of its own:\n{}",
        tree.snapshot().render_text()
    );
    tree.shutdown().await;
}
