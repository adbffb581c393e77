//! A model answering each request with a closure: for tests whose answers depend on the
//! request in ways a script cannot say (which agent, what the conversation holds, what the
//! test's own state is).

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use agent_tree_protocol::AgentId;

use super::log::{CallLog, ModelCall};
use crate::error::ModelError;
use crate::model::{Model, ModelRequest, ModelResponse};
use crate::util::BoxFuture;

type Respond =
    dyn Fn(ModelRequest) -> BoxFuture<'static, Result<ModelResponse, ModelError>> + Send + Sync;

/// A model that answers each request with an async closure over it, and logs every call in
/// a [`CallLog`] (what was asked, when, and how it ended: returned, failed, or dropped by an
/// abort). Cheap to clone: clones share the closure and the log.
///
/// Reach for it when an answer depends on the request (the agent, the conversation so far)
/// or on the test's own state; a fixed sequence of answers per agent type is a
/// [`ScriptedModel`](super::ScriptedModel), and a test that answers each turn by hand is a
/// [`pair`](super::pair).
///
/// ```
/// use agent_tree_actors::testkit::FnModel;
/// use agent_tree_actors::{Catalog, ModelResponse, Tree};
/// use agent_tree_protocol::{AgentDefinition, SpawnRequest};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
/// // Echoes the task back, shouting.
/// let model = FnModel::new(|request| async move {
///     Ok(ModelResponse::text(request.messages[0].content.to_uppercase()))
/// });
/// let catalog = Catalog::new([AgentDefinition::new("echo", "")]).unwrap();
/// let tree = Tree::builder().catalog(catalog).model(model.clone()).build().await.unwrap();
/// let mut echo = tree.spawn(SpawnRequest::new("echo", "hello")).await.unwrap();
/// assert_eq!(echo.outcome().await.text.as_deref(), Some("HELLO"));
/// let calls = model.of(echo.id());
/// assert_eq!((calls.len(), calls[0].turn), (1, 1));
/// # });
/// ```
#[derive(Clone)]
pub struct FnModel {
    respond: Arc<Respond>,
    log: CallLog,
}

impl fmt::Debug for FnModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnModel")
            .field("calls", &self.log.len())
            .finish_non_exhaustive()
    }
}

impl FnModel {
    /// A model whose every turn is `respond(request)`.
    pub fn new<F, Fut>(respond: F) -> Self
    where
        F: Fn(ModelRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ModelResponse, ModelError>> + Send + 'static,
    {
        FnModel {
            respond: Arc::new(move |request| Box::pin(respond(request))),
            log: CallLog::new(),
        }
    }

    /// The log of every call (shared: it keeps filling as the model is called).
    pub fn call_log(&self) -> CallLog {
        self.log.clone()
    }

    /// The calls of `agent` so far, in order.
    pub fn of(&self, agent: AgentId) -> Vec<ModelCall> {
        self.log.of(agent)
    }

    /// How many calls were made.
    pub fn calls(&self) -> usize {
        self.log.len()
    }
}

impl Model for FnModel {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        let logged = self.log.record(&request);
        let respond = (self.respond)(request);
        Box::pin(async move {
            let result = respond.await;
            logged.finish(&result);
            result
        })
    }
}
