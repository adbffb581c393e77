//! Calls: listed tools offered as `mcp__<server>__<tool>`, results made into text the model
//! reads, errors, size caps, progress, timeouts and cancellation.

use std::time::Duration;

use agent_tree::protocol::{EventKind, SpawnRequest};
use agent_tree::testkit::{Call, ScriptedModel, Turn};
use serde_json::json;

use crate::support::{
    agent, everything, hostile, only_result, start, temp_dir, tool_results, tree,
};

/// A server's tools are listed and offered under `mcp__<server>__<tool>`; a call reaches
/// the server and its text result is the model's tool result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_tools_are_called_under_their_mcp_names() {
    let servers = start([("everything", everything())]).await;
    let names: Vec<&str> = servers.tool_names().collect();
    assert!(names.contains(&"mcp__everything__echo"), "{names:?}");
    assert!(names.contains(&"mcp__everything__get-sum"), "{names:?}");
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([
                Call::tool("mcp__everything__echo", json!({"message": "hello"})),
                Call::tool("mcp__everything__get-sum", json!({"a": 2, "b": 40})),
            ]),
            Turn::answer("done"),
        ],
    );
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__everything"])]).await;
    let outcome = tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(outcome.text.as_deref(), Some("done"));
    let results = tool_results(&model);
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].content, "Echo: hello");
    assert!(results[1].content.contains("42"), "{}", results[1].content);
    assert!(!results[0].is_error && !results[1].is_error);
    assert_eq!(servers.stats().calls, 2);
    assert_eq!(servers.stats().errors, 0);
    tree.shutdown().await;
    assert_eq!(servers.live_processes(), 0);
}

/// Text is read as it is, structured content as JSON, images, audio and links described
/// (never their bytes); `isError` is a tool error to the model; output past the server's
/// cap is cut, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_become_text_the_model_reads() {
    let servers = start([("h", hostile("well").max_output_bytes(1000))]).await;
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([
                Call::tool("mcp__h__mixed", json!({})),
                Call::tool("mcp__h__fail", json!({})),
                Call::tool("mcp__h__big", json!({"bytes": 50_000})),
                Call::tool("mcp__h__structured", json!({})),
            ]),
            Turn::answer("done"),
        ],
    );
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__h"])]).await;
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    let results = tool_results(&model);
    let mixed = &results[0].content;
    assert!(
        mixed.starts_with("hello\n[image image/png, 1000 bytes]\n[audio "),
        "{mixed}"
    );
    assert!(
        mixed.contains("[resource link file:///tmp/a.txt (a.txt)]"),
        "{mixed}"
    );
    assert!(
        mixed.contains("[resource file:///tmp/b.txt]\nbee"),
        "{mixed}"
    );
    assert!(
        !mixed.contains("answer"),
        "structured content beside text is not read twice: {mixed}"
    );
    assert_eq!(
        (results[1].content.as_str(), results[1].is_error),
        ("it broke", true)
    );
    let big = &results[2].content;
    assert!(
        big.len() < 1100 && big.ends_with("[output cut: 1000 of 50000 bytes shown]"),
        "{big}"
    );
    assert_eq!(results[3].content, "{\"answer\":42}");
    assert_eq!(servers.stats().errors, 1);
    tree.shutdown().await;
}

/// A server's progress notifications for a call are the calling agent's `tool_progress`
/// events, naming the call and the tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_notifications_are_events_of_the_calling_agent() {
    let servers = start([("h", hostile("well"))]).await;
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([Call::tool("mcp__h__progress", json!({}))]),
            Turn::answer("done"),
        ],
    );
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__h__progress"])]).await;
    let mut events = tree.subscribe();
    let mut worker = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    worker.outcome().await;
    assert_eq!(only_result(&model), "done");
    let mut progress = Vec::new();
    while let Some(event) = events.try_next() {
        if event.agent == worker.id()
            && let EventKind::ToolProgress {
                tool,
                progress: p,
                total,
                message,
                ..
            } = event.kind
        {
            progress.push((tool, p.to_string(), total.map(|t| t.to_string()), message));
        }
    }
    let step = |n: u32| {
        (
            "mcp__h__progress".to_owned(),
            n.to_string(),
            Some("3".to_owned()),
            Some(format!("step {n}")),
        )
    };
    assert_eq!(progress, [step(1), step(2), step(3)]);
    tree.shutdown().await;
}

/// A call past its tool's timeout fails, saying so, and the server is told it is
/// cancelled; the server stays up for the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_is_cancelled() {
    let dir = temp_dir("timeout");
    let log = dir.join("cancelled.log");
    let server = hostile("well")
        .env("HOSTILE_LOG", log.display().to_string())
        .tool_timeout("hang", Duration::from_millis(300));
    let servers = start([("h", server)]).await;
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([Call::tool("mcp__h__hang", json!({}))]),
            Turn::calls([Call::tool("mcp__h__echo", json!({"text": "still here"}))]),
            Turn::answer("done"),
        ],
    );
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__h"])]).await;
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    let results = tool_results(&model);
    assert!(results[0].is_error);
    assert!(
        results[0]
            .content
            .contains("did not answer `hang` within 300ms; the call was cancelled"),
        "{}",
        results[0].content
    );
    assert_eq!(results[1].content, "still here");
    tree.shutdown().await;
    let cancelled = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(cancelled.starts_with("cancelled "), "{cancelled:?}");
}
