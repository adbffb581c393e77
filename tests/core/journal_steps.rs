//! Models and trees the journal's behaviour modules share: `steps`, a model whose answers
//! name the run and the conversation it saw (so a resume on the wrong conversation shows),
//! a tree of its workers, a fixed-answer model, and a real-time bound on each wait.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{Role, ToolCall};
use agent_tree::testkit::FnModel;
use agent_tree::{ModelRequest, ModelResponse};

use crate::support::{catalog, leaf, run_admitted};

/// A generous real-time bound: a hang fails the test instead of sticking the run.
pub(crate) const LIMIT: Duration = Duration::from_secs(30);

/// Awaits `future` within [`LIMIT`], failing the test with `what` if it takes longer.
pub(crate) async fn bounded<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(LIMIT, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out: {what}"),
    }
}

/// Runs one `agent_type` agent with the prompt `go` on `tree` to its end within [`LIMIT`].
pub(crate) async fn run_go(tree: &Tree, agent_type: &str) -> Outcome {
    let what = format!("a run of {agent_type}");
    bounded(
        &what,
        run_admitted(tree, SpawnRequest::new(agent_type, "go")),
    )
    .await
}

/// A model whose every run takes two turns: a `noop` tool call when the conversation ends
/// in a user message, then an answer naming the agent, the run (answers in its
/// conversation + 1) and how many messages it saw: `a3-run2-m7` ([`step_answer`]). A run
/// that resumed on the wrong conversation answers with the wrong run or count. `pad` bytes
/// make outputs large.
pub(crate) fn steps(pad: usize) -> FnModel {
    FnModel::new(move |request: ModelRequest| {
        let messages = &request.messages;
        let last_is_user = messages.last().is_none_or(|m| m.role == Role::User);
        let response = if last_is_user {
            ModelResponse::calls(vec![ToolCall::new(
                format!("c{}", messages.len()),
                "noop",
                serde_json::json!({}),
            )])
        } else {
            let answers = messages
                .iter()
                .filter(|m| m.role == Role::Assistant && m.tool_calls.is_empty())
                .count();
            ModelResponse::text(format!(
                "{}-run{}-m{}{}",
                request.agent,
                answers + 1,
                messages.len(),
                ".".repeat(pad)
            ))
        };
        std::future::ready(Ok(response))
    })
}

/// What [`steps`] answers to agent `a<agent>` in its run `run` (none of them resumed on a
/// wrong conversation).
pub(crate) fn step_answer(agent: u64, run: usize, pad: usize) -> String {
    format!("a{agent}-run{run}-m{}{}", 4 * run - 1, ".".repeat(pad))
}

/// A tree of `worker`s driven by [`steps`] with `pad`, holding the `noop` tool: the builder,
/// for each test's journal and hooks.
pub(crate) fn steps_tree(pad: usize) -> agent_tree::TreeBuilder {
    Tree::builder()
        .model(steps(pad))
        .catalog(catalog([leaf("worker")]))
        .tool(noop())
        .unwrap()
}

/// A model that always answers `text`.
pub(crate) fn fixed(text: impl Into<String>) -> FnModel {
    let text = text.into();
    FnModel::new(move |_| std::future::ready(Ok(ModelResponse::text(text.clone()))))
}

pub(crate) fn noop() -> impl agent_tree::Tool {
    FnTool::new("noop", "does nothing", |_, _| async { Ok("ok".to_owned()) })
}
