//! The seam through which a plug-in gives the tree tools it serves itself (the MCP plug-in's
//! server connections): [`ToolSource`].

use std::sync::Arc;

use tokio::time::Instant;

use crate::tool::Tool;
use crate::util::BoxFuture;

/// Tools the tree offers like its user tools, together with what serves them (a connection,
/// a child process), which the tree owns: [`Tree::shutdown`](crate::Tree::shutdown) ends it
/// under the shutdown's one deadline, beside the agents, and dropping the tree ends it at
/// once.
///
/// The MCP plug-in's servers are one (`agent_tree::mcp::McpServers`). A source's tools are
/// read once, when the tree is built; their names follow the user tools' rules
/// ([`Toolbox::insert`](crate::Toolbox::insert)).
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use agent_tree_actors::{BoxFuture, FnTool, Tool, ToolSource, Tree};
/// use agent_tree_actors::testkit::ScriptedModel;
///
/// /// A source whose one tool needs nothing ended; it remembers being ended.
/// #[derive(Default)]
/// struct Clock(AtomicBool);
///
/// impl ToolSource for Clock {
///     fn tools(&self) -> Vec<Arc<dyn Tool>> {
///         let now = FnTool::new("now", "the time", |_ctx, _input| async { Ok("noon".to_owned()) });
///         vec![Arc::new(now)]
///     }
///     fn shutdown(&self, _deadline: tokio::time::Instant) -> BoxFuture<'_, ()> {
///         self.0.store(true, Ordering::Relaxed);
///         Box::pin(async {})
///     }
///     fn kill(&self) {
///         self.0.store(true, Ordering::Relaxed);
///     }
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let clock = Arc::new(Clock::default());
/// let tree = Tree::builder()
///     .model(ScriptedModel::new())
///     .tool_source(clock.clone())
///     .unwrap()
///     .build()
///     .await
///     .unwrap();
/// tree.shutdown().await;
/// assert!(clock.0.load(Ordering::Relaxed));
/// # });
/// ```
pub trait ToolSource: Send + Sync + 'static {
    /// The tools, offered under their specs' names.
    fn tools(&self) -> Vec<Arc<dyn Tool>>;

    /// Ends what serves the tools by `deadline`: asked to stop, then forced. The tree runs
    /// it beside its agents' shutdown and waits for it until
    /// [`SHUTDOWN_KILL_WAIT`](crate::SHUTDOWN_KILL_WAIT) past `deadline`, then calls
    /// [`ToolSource::kill`].
    fn shutdown(&self, deadline: Instant) -> BoxFuture<'_, ()>;

    /// Ends what serves the tools now, without waiting: the tree was dropped without a
    /// shutdown. It must not block.
    fn kill(&self);
}

impl<T: ToolSource + ?Sized> ToolSource for Arc<T> {
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        (**self).tools()
    }

    fn shutdown(&self, deadline: Instant) -> BoxFuture<'_, ()> {
        (**self).shutdown(deadline)
    }

    fn kill(&self) {
        (**self).kill();
    }
}

/// The tool sources a tree owns, in the order they were added.
#[derive(Clone, Default)]
pub(crate) struct ToolSources(pub(crate) Vec<Arc<dyn ToolSource>>);

impl std::fmt::Debug for ToolSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} tool source(s)", self.0.len())
    }
}

impl ToolSources {
    /// Ends every source by `deadline`, all at once, waiting for them no longer than the
    /// small constant past it a shutdown allows; a source still ending then is killed.
    pub(crate) async fn shutdown(&self, deadline: Instant) {
        let mut ending = tokio::task::JoinSet::new();
        for source in &self.0 {
            let source = source.clone();
            ending.spawn(async move { source.shutdown(deadline).await });
        }
        let all = async { while ending.join_next().await.is_some() {} };
        let bound = deadline + crate::config::SHUTDOWN_KILL_WAIT;
        if tokio::time::timeout_at(bound, all).await.is_err() {
            tracing::warn!("a tool source did not end by the shutdown's deadline: killed");
            self.kill();
        }
    }

    /// Ends every source now.
    pub(crate) fn kill(&self) {
        for source in &self.0 {
            source.kill();
        }
    }
}
