//! Partial output: a run cut short (its model call failed, an abort or a shutdown landed
//! mid-turn, a length continuation broke off) keeps the text it had so far as the outcome's
//! `partial`, once, whatever cut it.

use std::sync::Arc;
use std::time::Duration;

use crate::support::steps::{Step, Steps, cut, one_worker};
use agent_tree::prelude::*;
use agent_tree::protocol::EndReason;
use agent_tree::{HookContext, ModelError};
use tokio::sync::Notify;

/// A run that fails during a length continuation keeps the text cut off so far, once: the
/// partial is the cut piece, not the cut piece followed by the same piece again.
#[tokio::test(start_paused = true)]
async fn a_continuation_that_fails_keeps_the_cut_text_once_as_partial() {
    let model = Steps::new([
        cut("The plan: "),
        Step::Fail(ModelError::new("provider exploded")),
    ]);
    let tree = model.worker_tree(TreeConfig::default()).await;
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
    let tree = model.worker_tree(TreeConfig::default()).await;
    let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(model.calls(), 2, "the continuation was not called");
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
        None,
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
        vec!["Half ".into(), "an ".into(), "answer".into()],
        ModelError::new("the response was cut off"),
    )]);
    let tree = model.worker_tree(TreeConfig::default()).await;
    let outcome = tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert_eq!(outcome.reason, EndReason::ModelError, "{outcome:?}");
    assert_eq!(
        outcome.partial.as_deref(),
        Some("Half an answer"),
        "{outcome:?}"
    );
}
