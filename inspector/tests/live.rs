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

/// Inspectors of one tree with the usual catalog and `model`.
async fn served(model: ScriptedModel) -> (Arc<Tree>, Inspector) {
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
    (tree, inspector)
}

/// A watcher sees agents appear and settle: batches carry the rows that changed, the
/// owner's among them (its children and subtree usage changed too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_sends_the_rows_each_change_touched() {
    let model = ScriptedModel::new()
        .script("lead", [Turn::spawn("worker", "dig"), Turn::answer("done")])
        .script("worker", [Turn::answer("dug")]);
    let (tree, inspector) = served(model).await;
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
    let (tree, inspector) = served(model).await;
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

/// The tokens of a row's usage.
fn tokens(usage: &serde_json::Value) -> u64 {
    usage["input_tokens"].as_u64().unwrap_or(0) + usage["output_tokens"].as_u64().unwrap_or(0)
}

/// A batch that carries an agent's new usage carries its ancestors' rows too, their
/// subtree usage already counting it (the root's included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_carries_the_ancestors_subtree_usage() {
    let model = ScriptedModel::new()
        .script(
            "lead",
            [
                Turn::spawn("worker", "dig"),
                Turn::answer("done").after(Duration::from_secs(2)),
            ],
        )
        .script(
            "worker",
            [Turn::answer("dug")
                .usage(agent_tree_protocol::Usage::tokens(100, 5))
                .after(Duration::from_millis(300))],
        );
    let (tree, inspector) = served(model).await;
    let mut events = Events::open(inspector.addr(), inspector.token()).await;
    let lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    let batch = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let batch = events.next().await;
            // A reset first: the stream was opened without the page's snapshot.
            let Some(rows) = batch["rows"].as_array().cloned() else {
                continue;
            };
            if rows
                .iter()
                .any(|r| r["agent_type"] == "worker" && tokens(&r["own"]) == 105)
            {
                return rows;
            }
        }
    })
    .await
    .expect("a batch with the worker's usage");
    let row = |id: String| batch.iter().find(|r| r["id"] == id.as_str()).cloned();
    let lead_row = row(lead.id().to_string()).expect("the lead's row is in the batch");
    assert_eq!(tokens(&lead_row["subtree"]), 105, "{lead_row}");
    let root = row(agent_tree_protocol::AgentId::ROOT.to_string()).expect("the root's row");
    assert_eq!(tokens(&root["subtree"]), 105, "{root}");
    inspector.stop().await;
    tree.shutdown().await;
}

/// A page reads the snapshot, then opens the stream: a change made between the two
/// reaches it (as a batch with the changed row, or a reset to read the tree again), even
/// when nobody else was watching.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_between_the_snapshot_and_the_stream_reaches_the_watcher() {
    let model = ScriptedModel::new().script("worker", [Turn::answer("dug")]);
    let (tree, inspector) = served(model).await;
    let (name, token) = bearer(inspector.token());
    let whole = request(
        inspector.addr(),
        "GET",
        "/api/snapshot",
        &[(name, &token)],
        None,
    )
    .await;
    assert_eq!(whole.status, 200);
    tree.run(SpawnRequest::new("worker", "dig")).await.unwrap();
    // The page's script opens its stream a moment later.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut events = Events::open(inspector.addr(), inspector.token()).await;
    let seen = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            // A reset is as good as the row: the page then reads the tree whole.
            let batch = events.next().await;
            if batch.get("rows").is_none()
                || batch["rows"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r["agent_type"] == "worker" && r["status"] == "completed")
            {
                return;
            }
        }
    })
    .await;
    assert!(
        seen.is_ok(),
        "the worker's completion never reached the watcher"
    );
    inspector.stop().await;
}

/// Stopping the inspector ends the streams open on it, promptly, and closes its port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_inspector_ends_open_streams() {
    let (tree, inspector) = served(ScriptedModel::new()).await;
    let addr = inspector.addr();
    let first = Events::open(addr, inspector.token()).await;
    let second = Events::open(addr, inspector.token()).await;
    tokio::time::timeout(Duration::from_secs(5), inspector.stop())
        .await
        .expect("stop is bounded with streams open");
    for mut events in [first, second] {
        let end = tokio::time::timeout(Duration::from_secs(5), async {
            events.end().await;
        })
        .await;
        assert!(end.is_ok(), "a stream outlived the inspector");
    }
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    tree.shutdown().await;
}

/// Dropping the inspector stops it as `stop` does: its streams end and its port closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_inspector_stops_it() {
    let (tree, inspector) = served(ScriptedModel::new()).await;
    let addr = inspector.addr();
    let mut events = Events::open(addr, inspector.token()).await;
    drop(inspector);
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        events.end().await;
    })
    .await;
    assert!(end.is_ok(), "a stream outlived the dropped inspector");
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(closed.is_ok(), "the port stayed open");
    tree.shutdown().await;
}

/// A watcher that goes away mid-stream costs nothing: the others keep their batches and
/// the tree runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_leaves_mid_stream_does_not_disturb_the_rest() {
    let model = ScriptedModel::new()
        .script("worker", [Turn::answer("one")])
        .script(
            "lead",
            [Turn::answer("two").after(Duration::from_millis(200))],
        );
    let (tree, inspector) = served(model).await;
    let addr = inspector.addr();
    let mut staying = Events::open(addr, inspector.token()).await;
    let mut leaving = Events::open(addr, inspector.token()).await;
    tree.run(SpawnRequest::new("worker", "w")).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(5),
        leaving.until(|r| r["agent_type"] == "worker" && r["status"] == "completed"),
    )
    .await
    .unwrap();
    drop(leaving);
    tree.run(SpawnRequest::new("lead", "l")).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(5),
        staying.until(|r| r["agent_type"] == "lead" && r["status"] == "completed"),
    )
    .await
    .expect("the staying watcher is still sent batches");
    tokio::time::timeout(Duration::from_secs(5), inspector.stop())
        .await
        .unwrap();
    tree.shutdown().await;
}

/// A tree shut down while a watcher streams: the watcher is sent the agents' final
/// statuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_sees_the_tree_shut_down() {
    let model = ScriptedModel::new().script(
        "lead",
        [Turn::answer("never").after(Duration::from_secs(60))],
    );
    let (tree, inspector) = served(model).await;
    let mut events = Events::open(inspector.addr(), inspector.token()).await;
    let lead = tree.spawn(SpawnRequest::new("lead", "wait")).await.unwrap();
    tree.shutdown().await;
    let id = lead.id().to_string();
    let row = tokio::time::timeout(
        Duration::from_secs(5),
        events.until(|r| r["id"] == id.as_str() && r["ended"].is_string()),
    )
    .await
    .expect("the lead's end reached the watcher");
    assert_ne!(row["status"], "running");
    inspector.stop().await;
}
