//! Models and trees the journal's behaviour modules share: `Steps`, a model whose answers
//! name the run and the conversation it saw (so a resume on the wrong conversation shows),
//! a tree of its workers, a fixed-answer model, and a real-time bound on each wait.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{Role, ToolCall};
use agent_tree::{BoxFuture, ModelRequest, ModelResponse};

use crate::support::{catalog, leaf};

/// A generous real-time bound: a hang fails the test instead of sticking the run.
pub(crate) const LIMIT: Duration = Duration::from_secs(30);

pub(crate) async fn bounded<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(LIMIT, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out: {what}"),
    }
}

/// A model whose every run takes two turns: a `noop` tool call when the conversation ends
/// in a user message, then an answer naming the agent, the run (answers in its
/// conversation + 1) and how many messages it saw: `a3-run2-m7`. A run that resumed on the
/// wrong conversation answers with the wrong run or count. `pad` bytes make outputs large.
#[derive(Clone, Default)]
pub(crate) struct Steps {
    pub(crate) pad: usize,
}

/// A tree of `worker`s driven by [`Steps`] with `pad`, holding the `noop` tool: the builder,
/// for each test's journal and hooks.
pub(crate) fn steps_tree(pad: usize) -> agent_tree::TreeBuilder {
    Tree::builder()
        .model(Steps { pad })
        .catalog(catalog([leaf("worker")]))
        .tool(noop())
        .unwrap()
}

impl Steps {
    pub(crate) fn expected(agent: u64, run: usize, pad: usize) -> String {
        format!("a{agent}-run{run}-m{}{}", 4 * run - 1, ".".repeat(pad))
    }
}

impl Model for Steps {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
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
                ".".repeat(self.pad)
            ))
        };
        Box::pin(async move { Ok(response) })
    }
}

/// A model that always answers `self.0`.
#[derive(Clone)]
pub(crate) struct Fixed(pub(crate) String);

impl Model for Fixed {
    fn turn(&self, _request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        let text = self.0.clone();
        Box::pin(async move { Ok(ModelResponse::text(text)) })
    }
}

pub(crate) fn noop() -> impl agent_tree::Tool {
    FnTool::new("noop", "does nothing", |_, _| async { Ok("ok".to_owned()) })
}
