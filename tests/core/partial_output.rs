//! Partial output: a run cut short (its model call failed, an abort or a shutdown landed
//! mid-turn, a length continuation broke off) keeps the text it had so far as the outcome's
//! `partial`, once, whatever cut it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::support::catalog;
use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, FinishReason};
use agent_tree::{BoxFuture, HookContext, ModelError, ModelRequest, ModelResponse};
use parking_lot::Mutex;
use tokio::sync::Notify;

/// What the model does on one call.
enum Step {
    Respond(ModelResponse),
    Fail(ModelError),
    /// Never returns.
    Hang,
    /// Streams these pieces to the sink, says so, then never returns.
    StreamThenHang(Vec<&'static str>, Arc<Notify>),
    /// Streams these pieces to the sink, then fails with this error.
    StreamThenFail(Vec<&'static str>, ModelError),
}

/// A model answering every call with the next step.
#[derive(Clone, Default)]
struct Steps {
    steps: Arc<Mutex<VecDeque<Step>>>,
    calls: Arc<Mutex<usize>>,
}

impl Steps {
    fn new(steps: impl IntoIterator<Item = Step>) -> Self {
        Steps {
            steps: Arc::new(Mutex::new(steps.into_iter().collect())),
            calls: Arc::default(),
        }
    }
}

impl Model for Steps {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        *self.calls.lock() += 1;
        let step = self.steps.lock().pop_front();
        Box::pin(async move {
            match step {
                None => Err(ModelError::new("script ran out")),
                Some(Step::Respond(response)) => Ok(response),
                Some(Step::Fail(error)) => Err(error),
                Some(Step::Hang) => std::future::pending().await,
                Some(Step::StreamThenHang(pieces, ready)) => {
                    for piece in pieces {
                        request.sink.text(piece);
                    }
                    ready.notify_one();
                    std::future::pending().await
                }
                Some(Step::StreamThenFail(pieces, error)) => {
                    for piece in pieces {
                        request.sink.text(piece);
                        tokio::task::yield_now().await;
                    }
                    Err(error)
                }
            }
        })
    }
}

fn one_worker() -> Catalog {
    catalog([AgentDefinition::new("worker", "You work.")])
}

async fn build(model: &Steps, config: TreeConfig) -> Tree {
    Tree::builder()
        .config(config)
        .catalog(one_worker())
        .model(model.clone())
        .build()
        .await
        .unwrap()
}

fn cut(text: &'static str) -> Step {
    Step::Respond(ModelResponse::text(text).with_finish_reason(FinishReason::Length))
}

/// A run that fails during a length continuation keeps the text cut off so far, once: the
/// partial is the cut piece, not the cut piece followed by the same piece again.
#[tokio::test(start_paused = true)]
async fn a_continuation_that_fails_keeps_the_cut_text_once_as_partial() {
    let model = Steps::new([
        cut("The plan: "),
        Step::Fail(ModelError::new("provider exploded")),
    ]);
    let tree = build(&model, TreeConfig::default()).await;
    let outcome = tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert_eq!(outcome.reason, EndReason::ModelError, "{outcome:?}");
    assert_eq!(
        outcome.partial.as_deref(),
        Some("The plan: "),
        "{outcome:?}"
    );
}

/// The same for an abort that lands while the continuation turn is in flight (nothing
/// streamed yet): the partial is the text cut off so far, once.
#[tokio::test(start_paused = true)]
async fn an_abort_during_a_continuation_keeps_the_cut_text_once_as_partial() {
    let model = Steps::new([cut("The plan: "), Step::Hang]);
    let tree = build(&model, TreeConfig::default()).await;
    let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(*model.calls.lock(), 2, "the continuation was not called");
    tree.abort(handle.id()).unwrap();
    let outcome = handle.outcome().await;
    assert_eq!(outcome.status, AgentStatus::Aborted);
    assert_eq!(
        outcome.partial.as_deref(),
        Some("The plan: "),
        "{outcome:?}"
    );
}

/// A streamed turn cut by a shutdown keeps its streamed text as partial output, also when
/// shutdown hooks are registered (the hooks run first, then the run ends aborted).
#[tokio::test(start_paused = true)]
async fn a_shutdown_with_hooks_keeps_the_streamed_text_as_partial() {
    let ready = Arc::new(Notify::new());
    let model = Steps::new([Step::StreamThenHang(
        vec!["Half ", "an ", "answer"],
        ready.clone(),
    )]);
    let tree = Tree::builder()
        .catalog(one_worker())
        .model(model.clone())
        .on_shutdown(|_ctx: HookContext| async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Ok(())
        })
        .build()
        .await
        .unwrap();
    let handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
    ready.notified().await;
    let report = tree.shutdown().await;
    assert!(report.killed.is_empty(), "{report:?}");
    let outcome = tree.outcome(handle.id()).unwrap();
    assert_eq!(outcome.status, AgentStatus::Aborted);
    assert_eq!(outcome.reason, EndReason::Shutdown);
    assert_eq!(
        outcome.partial.as_deref(),
        Some("Half an answer"),
        "{outcome:?}"
    );
}

/// A streamed turn whose call then fails (the connection dropped mid-stream, retries spent)
/// keeps the text it streamed as partial output, as an aborted one does.
#[tokio::test(start_paused = true)]
async fn a_stream_that_fails_keeps_its_streamed_text_as_partial() {
    let model = Steps::new([Step::StreamThenFail(
        vec!["Half ", "an ", "answer"],
        ModelError::new("the response was cut off"),
    )]);
    let tree = build(&model, TreeConfig::default()).await;
    let outcome = tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert_eq!(outcome.reason, EndReason::ModelError, "{outcome:?}");
    assert_eq!(
        outcome.partial.as_deref(),
        Some("Half an answer"),
        "{outcome:?}"
    );
}
