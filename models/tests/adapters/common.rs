//! What the adapter tests share: a request of each shape and a tree around a model.

use std::sync::Arc;
use std::time::Duration;

use agent_tree_actors::{Catalog, Model, ModelRequest, RetryPolicy, Tree, TreeConfig};
use agent_tree_protocol::{AgentDefinition, AgentId, Message, ToolCall, ToolSpec};
use serde_json::json;

/// The definition every test's agent has.
pub(crate) fn definition() -> AgentDefinition {
    AgentDefinition::new("writer", "You write short answers.")
}

/// A first-turn request: the task alone, no tools.
pub(crate) fn first_turn() -> ModelRequest {
    ModelRequest::new(AgentId::new(1), Arc::new(definition()))
        .with_messages(vec![Message::user("Say hello")])
}

/// The tool every tool-using request offers.
pub(crate) fn read_tool() -> ToolSpec {
    ToolSpec::new(
        "read_file",
        "Reads a file.",
        json!({
            "type": "object",
            "properties": { "path": { "type": "string" } },
            "required": ["path"]
        }),
    )
}

/// A later turn: the task, an assistant turn that called two tools, their results (one an
/// error), and a steer.
pub(crate) fn later_turn() -> ModelRequest {
    ModelRequest::new(AgentId::new(1), Arc::new(definition()))
        .with_turn(1, 2)
        .with_messages(vec![
            Message::user("Summarise a.txt and b.txt"),
            Message::assistant(
                "Reading both.",
                vec![
                    ToolCall::new("call_a", "read_file", json!({"path": "a.txt"})),
                    ToolCall::new("call_b", "read_file", json!({"path": "b.txt"})),
                ],
            ),
            Message::tool_result("call_a", "alpha", false),
            Message::tool_result("call_b", "no such file", true),
            Message::user("Be brief."),
        ])
        .with_tools(vec![read_tool()])
}

/// A tree of one `writer` agent on `model`, retrying twice more with tiny real-time backoff.
pub(crate) async fn tree(model: impl Model) -> Tree {
    let retry = RetryPolicy::default()
        .with_max_attempts(3)
        .with_backoff(Duration::from_millis(5), Duration::from_millis(20));
    Tree::builder()
        .config(TreeConfig::default().with_retry(retry))
        .catalog(Catalog::new(vec![definition()]).expect("valid definition"))
        .model(model)
        .build()
        .await
        .expect("tree builds")
}

/// A fresh directory under the system's temp dir, for a project's agent files or a journal.
pub(crate) fn scratch(name: &str) -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "agent-tree-adapters-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Each turn of `model` fails with the next of `kinds`, its text never showing `key`.
pub(crate) async fn turns_fail_as(
    model: &impl Model,
    kinds: &[agent_tree_protocol::ModelErrorKind],
    key: &str,
) {
    for &kind in kinds {
        let error = model.turn(first_turn()).await.unwrap_err();
        assert_eq!(error.kind, kind, "{error}");
        assert!(!error.to_string().contains(key));
    }
}

/// A turn of `model` (whose server answers after 3 s, past its 300 ms timeout) fails as
/// transient, within 2 s.
pub(crate) async fn times_out_transient(model: &impl Model) {
    let started = std::time::Instant::now();
    let error = model.turn(first_turn()).await.unwrap_err();
    assert_eq!(
        error.kind,
        agent_tree_protocol::ModelErrorKind::Transient,
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// The two calls a streamed tool-call test expects, with the ids `ids`: `read_file` of `a`,
/// then `write_file` of `b`.
pub(crate) fn read_a_then_write_b(ids: [&str; 2]) -> Vec<ToolCall> {
    vec![
        ToolCall::new(ids[0], "read_file", json!({"path": "a"})),
        ToolCall::new(ids[1], "write_file", json!({"path": "b"})),
    ]
}

/// One `read_file` call, its id `id`, of `path`.
pub(crate) fn read_of(id: &str, path: &str) -> Vec<ToolCall> {
    vec![ToolCall::new(id, "read_file", json!({ "path": path }))]
}
