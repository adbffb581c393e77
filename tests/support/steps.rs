//! A model answering every call, of any agent, with the next step of a list, streaming to the
//! sink where the step says so: for the tests of the model contract itself (streams, cut-off
//! turns, partial output, context windows), which the kit's scripted model does not stream.

#![allow(dead_code, unreachable_pub)]

use std::collections::VecDeque;
use std::sync::Arc;

use agent_tree::prelude::*;
use agent_tree::protocol::FinishReason;
use agent_tree::{BoxFuture, ModelError, ModelRequest, ModelResponse};
use parking_lot::Mutex;
use tokio::sync::Notify;

/// What the model does on one call.
pub enum Step {
    /// Answers with this response.
    Respond(ModelResponse),
    /// Fails with this error.
    Fail(ModelError),
    /// Never returns.
    Hang,
    /// Streams these pieces and this usage to the sink, then answers with their
    /// concatenation.
    Stream(Vec<&'static str>, Usage),
    /// Streams these pieces, then fails with this error (a server dying mid-stream).
    StreamThenFail(Vec<String>, ModelError),
    /// Streams these pieces (and this usage, if any) to the sink, says so, then never
    /// returns.
    StreamThenHang(Vec<&'static str>, Option<Usage>, Arc<Notify>),
}

/// A catalog of one `worker`, prompted "You work.".
pub fn one_worker() -> Catalog {
    super::catalog([AgentDefinition::new("worker", "You work.")])
}

/// A response cut off at the length limit, saying `text`.
pub fn cut(text: &'static str) -> Step {
    Step::Respond(ModelResponse::text(text).with_finish_reason(FinishReason::Length))
}

/// The model: every call takes the next step (a call past the last fails: "script ran
/// out"); every request is kept. Written by hand, not from the kit: it streams through the
/// request's sink and reports a context window.
#[derive(Clone, Default)]
pub struct Steps {
    steps: Arc<Mutex<VecDeque<Step>>>,
    seen: Arc<Mutex<Vec<ModelRequest>>>,
    /// The context window it reports, if any.
    window: Option<u32>,
}

impl Steps {
    /// A model taking `steps` in order.
    pub fn new(steps: impl IntoIterator<Item = Step>) -> Self {
        Steps {
            steps: Arc::new(Mutex::new(steps.into_iter().collect())),
            ..Steps::default()
        }
    }

    /// The same model, reporting a context window of `tokens`.
    pub fn with_window(mut self, tokens: u32) -> Self {
        self.window = Some(tokens);
        self
    }

    /// How many calls it took.
    pub fn calls(&self) -> usize {
        self.seen.lock().len()
    }

    /// Every request it was sent, in order.
    pub fn seen(&self) -> Vec<ModelRequest> {
        self.seen.lock().clone()
    }

    /// A tree of [`one_worker`] on this model, under `config`.
    pub async fn worker_tree(&self, config: TreeConfig) -> Tree {
        Tree::builder()
            .config(config)
            .catalog(one_worker())
            .model(self.clone())
            .build()
            .await
            .expect("the tree builds")
    }
}

impl Model for Steps {
    fn context_window(&self, _: &ModelRequest) -> Option<u32> {
        self.window
    }

    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        self.seen.lock().push(request.clone());
        let step = self.steps.lock().pop_front();
        Box::pin(async move {
            match step {
                None => Err(ModelError::new("script ran out")),
                Some(Step::Respond(response)) => Ok(response),
                Some(Step::Fail(error)) => Err(error),
                Some(Step::Hang) => std::future::pending().await,
                Some(Step::Stream(pieces, usage)) => {
                    let mut text = String::new();
                    for piece in pieces {
                        request.sink.text(piece);
                        text.push_str(piece);
                        tokio::task::yield_now().await;
                    }
                    request.sink.usage(usage);
                    Ok(ModelResponse::text(text).with_usage(usage))
                }
                Some(Step::StreamThenFail(pieces, error)) => {
                    for piece in pieces {
                        request.sink.text(&piece);
                        tokio::task::yield_now().await;
                    }
                    Err(error)
                }
                Some(Step::StreamThenHang(pieces, usage, ready)) => {
                    for piece in pieces {
                        request.sink.text(piece);
                    }
                    if let Some(usage) = usage {
                        request.sink.usage(usage);
                    }
                    ready.notify_one();
                    std::future::pending().await
                }
            }
        })
    }
}
