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

/// The hooks of a tree.
#[derive(Clone, Default)]
pub(crate) struct Hooks {
    pub(crate) on_start: Vec<Arc<dyn Hook>>,
    pub(crate) on_shutdown: Vec<Arc<dyn Hook>>,
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("on_start", &self.on_start.len())
            .field("on_shutdown", &self.on_shutdown.len())
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
