//! User hooks: async work an agent runs when it starts (before its first model call) and
//! when a shutdown reaches it (under the shutdown's one deadline).
//!
//! # Invariants
//!
//! * Hooks run as tasks, never inside an actor handler, and a panic in one is a failure of
//!   that hook, not of the runtime.
//! * A start hook runs before the agent's first model call; an abort during it cancels it,
//!   and the agent then never calls the model.
//! * Shutdown hooks never outlive the shutdown's deadline: the task running them ends there.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use agent_tree_protocol::AgentId;
use tokio::time::Instant;

use crate::util::{BoxFuture, CatchUnwind};

/// Who a hook runs for.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct HookContext {
    /// The agent.
    pub agent: AgentId,
    /// Its type.
    pub agent_type: String,
    /// Its depth.
    pub depth: u32,
    /// For shutdown hooks: the shutdown's deadline (tokio time).
    pub deadline: Option<Instant>,
}

/// A hook that failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HookError(pub String);

/// An async hook: implemented for every `Fn(HookContext) -> impl Future<Output = Result<(),
/// HookError>>`.
///
/// ```
/// use agent_tree_actors::{HookContext, HookError, Tree};
/// let builder = Tree::builder().on_shutdown(|ctx: HookContext| async move {
///     // close a socket, flush a file...
///     let _ = ctx.agent;
///     Ok::<(), HookError>(())
/// });
/// # let _ = builder;
/// ```
pub trait Hook: Send + Sync + 'static {
    /// Runs the hook.
    ///
    /// # Errors
    ///
    /// A [`HookError`]: for a start hook it fails the agent; for a shutdown hook it is
    /// reported in the shutdown report.
    fn run(&self, context: HookContext) -> BoxFuture<'static, Result<(), HookError>>;
}

impl<F, Fut> Hook for F
where
    F: Fn(HookContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HookError>> + Send + 'static,
{
    fn run(&self, context: HookContext) -> BoxFuture<'static, Result<(), HookError>> {
        Box::pin(self(context))
    }
}

/// A question a top-level agent asked with `ask_owner`: its owner is the application.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Question {
    /// The agent asking.
    pub agent: AgentId,
    /// Its type.
    pub agent_type: String,
    /// The question.
    pub question: String,
}

/// The application's answer to a top-level agent's `ask_owner` question
/// ([`TreeBuilder::on_question`](crate::TreeBuilder::on_question)): `Ok(answer)` is the tool
/// call's result; `Err(reason)` refuses the question, and the agent's model reads the reason
/// as an error result. Implemented for every `Fn(Question) -> impl Future<Output =
/// Result<String, String>>`.
///
/// The handler runs as a task while the agent waits (it keeps handling steers and aborts);
/// it is dropped if the agent settles first. A panic in it refuses the question. With a
/// journal, a question still open at a crash is asked again when a tree is built on the
/// journal (the agent waits again, its turn is not re-run), and an answer given before the
/// crash is delivered, not asked for again.
///
/// ```
/// use agent_tree_actors::{Question, Tree};
/// let builder = Tree::builder().on_question(|q: Question| async move {
///     if q.question.contains("deploy") {
///         Err("deploys are not decided by agents".to_owned())
///     } else {
///         Ok("Go ahead.".to_owned())
///     }
/// });
/// # let _ = builder;
/// ```
pub trait QuestionHandler: Send + Sync + 'static {
    /// Answers or refuses `question`.
    ///
    /// # Errors
    ///
    /// A refusal, with the reason the agent is told.
    fn answer(&self, question: Question) -> BoxFuture<'static, Result<String, String>>;
}

impl<F, Fut> QuestionHandler for F
where
    F: Fn(Question) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<String, String>> + Send + 'static,
{
    fn answer(&self, question: Question) -> BoxFuture<'static, Result<String, String>> {
        Box::pin(self(question))
    }
}

/// The hooks of a tree.
#[derive(Clone, Default)]
pub(crate) struct Hooks {
    pub(crate) on_start: Vec<Arc<dyn Hook>>,
    pub(crate) on_shutdown: Vec<Arc<dyn Hook>>,
    /// Who answers top-level agents' questions; with none, they are not offered `ask_owner`.
    pub(crate) questions: Option<Arc<dyn QuestionHandler>>,
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("on_start", &self.on_start.len())
            .field("on_shutdown", &self.on_shutdown.len())
            .field("questions", &self.questions.is_some())
            .finish()
    }
}

/// Runs `hooks` in order; returns every failure (errors and panics), in order. A start
/// sequence stops at its first failure; a shutdown sequence runs every hook.
pub(crate) async fn run_all(
    hooks: &[Arc<dyn Hook>],
    context: &HookContext,
    stop_at_first: bool,
) -> Vec<String> {
    let mut failures = Vec::new();
    for hook in hooks {
        match CatchUnwind::new(hook.run(context.clone())).await {
            Ok(Ok(())) => continue,
            Ok(Err(error)) => failures.push(error.0),
            Err(panic) => failures.push(format!("hook panicked: {panic}")),
        }
        if stop_at_first {
            break;
        }
    }
    failures
}
