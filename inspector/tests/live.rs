//! The inspector shows the tree as it changes and controls it through the `Tree`'s own
//! methods: the stream sends the rows a change touched, a steer reaches the agent at its
//! next turn, an abort ends its subtree, a shutdown returns the tree's report.

mod support;

use std::sync::Arc;
use std::time::Duration;

use agent_tree_actors::testkit::{Call, ScriptedModel, Turn};
use agent_tree_actors::{Catalog, FnTool, Tree};
use agent_tree_inspector::{Inspector, InspectorConfig};
use agent_tree_protocol::{AgentDefinition, AgentStatus, SpawnRequest, SubagentAllowance};
use support::{Events, bearer, request};

fn catalog() -> Catalog {
    Catalog::new([
        AgentDefinition::new("lead", "").with_allowed_subagents(SubagentAllowance::All),
        AgentDefinition::new("worker", ""),
    ])
    .unwrap()
}

/// A watcher sees agents appear and settle: batches carry the rows that changed, the
/// owner's among them (its children and subtree usage changed too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_sends_the_rows_each_change_touched() {
    let model = ScriptedModel::new()
        .script("lead", [Turn::spawn("worker", "dig"), Turn::answer("done")])
        .script("worker", [Turn::answer("dug")]);
    let tree = Arc::new(
        Tree::builder()
            .catalog(catalog())
            .model(model)
            .build()
            .await
            .unwrap(),
    );
    let inspector = Inspector::serve(tree.clone(), InspectorConfig::default())
        .await
        .unwrap();
    let mut events = Events::open(inspector.addr(), inspector.token()).await;
    tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    let lead = events
        .until(|r| r["agent_type"] == "lead" && r["status"] == "completed")
        .await;
    assert_eq!(lead["children"], 1);
    assert_eq!(lead["depth"], 1);
    let (name, token) = bearer(inspector.token());
    let whole = request(
        inspector.addr(),
        "GET",
        "/api/snapshot",
        &[(name, &token)],
        None,
    )
    .await;
    let whole: serde_json::Value = serde_json::from_str(&whole.body).unwrap();
    let rows = whole["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "root, lead, worker");
    assert_eq!(rows[2]["status"], "completed");
    assert_eq!(rows[2]["ended"], "final_answer: dug");
    inspector.stop().await;
}

/// A steer sent through the inspector reaches the agent: its next turn's request holds
/// it; an abort through the inspector ends the agent aborted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steer_and_abort_reach_the_agent() {
    let slow = Duration::from_millis(400);
    let model = ScriptedModel::new()
        .script(
            "worker",
            [
                Turn::calls([Call::tool("noop", serde_json::json!({}))]).after(slow),
                Turn::answer("done"),
            ],
        )
        .script(
            "lead",
            [Turn::answer("never").after(Duration::from_secs(60))],
        );
    let noop = FnTool::new("noop", "does nothing", |_, _| async { Ok("ok".to_owned()) });
    let tree = Arc::new(
        Tree::builder()
            .catalog(catalog())
            .model(model.clone())
            .tool(noop)
            .unwrap()
            .build()
            .await
            .unwrap(),
    );
    let inspector = Inspector::serve(tree.clone(), InspectorConfig::default())
        .await
        .unwrap();
    let (addr, (name, token)) = (inspector.addr(), bearer(inspector.token()));
    let mut worker = tree
        .spawn(SpawnRequest::new("worker", "work"))
        .await
        .unwrap();
    let path = format!("/api/agents/{}/steer", worker.id());
    let steered = request(
        addr,
        "POST",
        &path,
        &[(name, &token)],
        Some("{\"text\": \"look at the logs\"}"),
    )
    .await;
    assert_eq!(steered.status, 200, "{}", steered.body);
    assert_eq!(worker.outcome().await.status, AgentStatus::Completed);
    assert!(
        model
            .log_of(worker.id())
            .last()
            .unwrap()
            .has_user_message("look at the logs")
    );

    let mut lead = tree.spawn(SpawnRequest::new("lead", "wait")).await.unwrap();
    let path = format!("/api/agents/{}/abort", lead.id());
    let aborted = request(addr, "POST", &path, &[(name, &token)], None).await;
    assert_eq!(aborted.status, 200, "{}", aborted.body);
    assert_eq!(lead.outcome().await.status, AgentStatus::Aborted);
    let unknown = request(
        addr,
        "POST",
        "/api/agents/a99/abort",
        &[(name, &token)],
        None,
    )
    .await;
    assert_eq!(unknown.status, 409, "{}", unknown.body);
}

/// A shutdown through the inspector shuts the tree down and answers its report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_answers_the_trees_report() {
    let model = ScriptedModel::new().script(
        "lead",
        [Turn::answer("never").after(Duration::from_secs(60))],
    );
    let tree = Arc::new(
        Tree::builder()
            .catalog(catalog())
            .model(model)
            .build()
            .await
            .unwrap(),
    );
    let inspector = Inspector::serve(tree.clone(), InspectorConfig::default())
        .await
        .unwrap();
    let lead = tree.spawn(SpawnRequest::new("lead", "wait")).await.unwrap();
    let (name, token) = bearer(inspector.token());
    let report = request(
        inspector.addr(),
        "POST",
        "/api/shutdown",
        &[(name, &token)],
        None,
    )
    .await;
    let report: serde_json::Value = serde_json::from_str(&report.body).unwrap();
    assert_eq!(report["graceful"][0], lead.id().to_string());
    assert_eq!(tree.live(), 0);
}
