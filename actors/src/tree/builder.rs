//! Building a tree: [`TreeBuilder`] (limits, catalog, model, tools, hooks, journal, node),
//! its `build` (the journal opened and recovered from, the registry seeded, the root actor
//! started), and the session id a tree is given when neither the application nor its
//! journal names one.

use std::sync::Arc;

use agent_tree_protocol::{AgentId, SessionId};
use parking_lot::RwLock;
use ractor::{Actor, ActorRef};
use tokio_util::sync::CancellationToken;

use super::Tree;
use crate::catalog::Catalog;
use crate::config::TreeConfig;
use crate::error::TreeError;
use crate::hooks::{Hook, Hooks};
use crate::journal::{JournalConfig, JournalStore};
use crate::model::Model;
use crate::msg::AgentMsg;
use crate::registry::Registry;
use crate::root::RootActor;
use crate::shared::{Branch, Shared, SharedRef};
use crate::spawn;
use crate::tool::{Tool, ToolNameError, ToolSource, ToolSources, Toolbox};

/// Builds a [`Tree`].
#[derive(Default)]
pub struct TreeBuilder {
    config: TreeConfig,
    catalog: Catalog,
    model: Option<Arc<dyn Model>>,
    toolbox: Toolbox,
    sources: ToolSources,
    session: Option<SessionId>,
    hooks: Hooks,
    journal: Option<(JournalConfig, Option<Box<dyn JournalStore>>)>,
    /// Where agents placed on other nodes run (set by the `cluster` feature's
    /// `TreeBuilder::node`).
    pub(crate) placement: Option<Arc<dyn crate::placement::Placement>>,
}

impl std::fmt::Debug for TreeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeBuilder")
            .field("config", &self.config)
            .field("catalog", &self.catalog)
            .field("toolbox", &self.toolbox)
            .finish_non_exhaustive()
    }
}

impl TreeBuilder {
    /// Sets the limits.
    pub fn config(mut self, config: TreeConfig) -> Self {
        self.config = config;
        self
    }

    /// Sets the catalog top-level branches start with.
    pub fn catalog(mut self, catalog: Catalog) -> Self {
        self.catalog = catalog;
        self
    }

    /// Sets the model.
    pub fn model(mut self, model: impl Model) -> Self {
        self.model = Some(Arc::new(model));
        self
    }

    /// Sets a shared model.
    pub fn shared_model(mut self, model: Arc<dyn Model>) -> Self {
        self.model = Some(model);
        self
    }

    /// Adds a user tool.
    ///
    /// # Errors
    ///
    /// [`ToolNameError`] when the name is reserved, taken, or not one the providers accept
    /// (1 to 64 of `A-Z a-z 0-9 _ -`).
    pub fn tool(mut self, tool: impl Tool) -> Result<Self, ToolNameError> {
        self.toolbox.insert(tool)?;
        Ok(self)
    }

    /// Adds a [`ToolSource`]'s tools, and hands the tree what serves them (the MCP plug-in's
    /// servers): the tree ends it with itself. Its tools' names follow the rules of
    /// [`TreeBuilder::tool`]; like any user tool, an agent holds one only when its
    /// definition grants it.
    ///
    /// # Errors
    ///
    /// [`ToolNameError`] for the first of its tools whose name is reserved, taken, or not
    /// one the providers accept; the source is ended then.
    pub fn tool_source(mut self, source: impl ToolSource) -> Result<Self, ToolNameError> {
        let source: std::sync::Arc<dyn ToolSource> = std::sync::Arc::new(source);
        for tool in source.tools() {
            if let Err(error) = self.toolbox.insert_shared(tool) {
                source.kill();
                return Err(error);
            }
        }
        self.sources.0.push(source);
        Ok(self)
    }

    /// Adds a start hook: async work every agent runs before its first model call (set up a
    /// workspace, open a connection). An abort during it cancels it; a failure fails the
    /// agent with reason `hook_failed`. Hooks run in the order added.
    pub fn on_start(mut self, hook: impl Hook) -> Self {
        self.hooks.on_start.push(Arc::new(hook));
        self
    }

    /// Adds a shutdown hook: async work every agent a shutdown reaches runs before it settles
    /// (close a socket, flush a file), all under the shutdown's one deadline. Failures,
    /// panics and hooks cut off by the deadline are reported in the
    /// [`ShutdownReport`](crate::ShutdownReport).
    pub fn on_shutdown(mut self, hook: impl Hook) -> Self {
        self.hooks.on_shutdown.push(Arc::new(hook));
        self
    }

    /// Sets who answers the `ask_owner` questions of top-level agents (whose owner is the
    /// application). Without a handler, top-level agents are not offered `ask_owner` at all,
    /// so no question can wait for an answer no one gives; deeper agents ask their owner
    /// agent either way. The application may still answer with [`Tree::steer`]; the first
    /// answer wins.
    pub fn on_question(mut self, handler: impl crate::hooks::QuestionHandler) -> Self {
        self.hooks.questions = Some(Arc::new(handler));
        self
    }

    /// Keeps a journal of the tree at `config`'s path (see [`JournalConfig`] for what each
    /// durability policy can lose). A new or empty file gets a header. A journal that holds
    /// a tree is recovered from, by the same fold as the registry's: every record, owner
    /// edge, usage total and settled outcome comes back; agents that were live come back
    /// `aborted` with reason `interrupted` ([`Tree::interrupted`]), to be resumed or
    /// abandoned, never re-run on their own; a resumed owner that re-issues a spawn at the
    /// same place in its conversation gets the existing child. The journal goes on from
    /// there. A bad journal fails the build, naming the file and line.
    ///
    /// One tree per journal file: the tree locks it (an advisory lock on `<file>.lock`,
    /// released by [`Tree::shutdown`], by dropping the tree, or by the OS when the process
    /// ends), and a tree built on a file another tree holds fails with
    /// [`TreeError::JournalInUse`] naming the file and the holding process.
    pub fn journal(mut self, config: JournalConfig) -> Self {
        self.journal = Some((config, None));
        self
    }

    /// As [`TreeBuilder::journal`], writing to `store` instead of the file (a slow disk in a
    /// test, a store of your own); `store` should be empty. A store is not locked: one tree
    /// per store is the application's to keep.
    pub fn journal_store(mut self, config: JournalConfig, store: impl JournalStore) -> Self {
        self.journal = Some((config, Some(Box::new(store))));
        self
    }

    /// Sets the session id (one is generated otherwise).
    pub fn session(mut self, session: SessionId) -> Self {
        self.session = Some(session);
        self
    }

    /// Starts the tree's root actor.
    ///
    /// # Errors
    ///
    /// [`TreeError::NoModel`] without a model; [`TreeError::Startup`] if the root actor
    /// cannot start; [`TreeError::Journal`] for a journal that cannot be read or recovered,
    /// [`TreeError::JournalInUse`] for a journal file another tree holds.
    pub async fn build(self) -> Result<Tree, TreeError> {
        let model = self.model.ok_or(TreeError::NoModel)?;
        self.config.validate()?;
        crate::catalog::warn_tool_problems(&self.catalog, self.toolbox.names());
        let (session, journal, recovered) = match self.journal {
            None => (self.session.unwrap_or_else(new_session_id), None, None),
            Some((config, store)) => {
                let (session, tap, recovered) =
                    crate::journal::open(config, store, self.session, new_session_id)?;
                (session, Some(tap), recovered)
            }
        };
        let session_name = session.to_string();
        let root_token = CancellationToken::new();
        let shared = Arc::new(Shared {
            sampling: Arc::new(self.config.sampling.clone()),
            registry: Registry::new(session, root_token.clone(), self.config.max_concurrent),
            model_permits: crate::permits::ModelPermits::new(self.config.max_model_calls),
            config: self.config,
            model,
            toolbox: self.toolbox,
            hooks: self.hooks,
            root: std::sync::OnceLock::new(),
            tasks: std::sync::atomic::AtomicU64::new(0),
            offered: parking_lot::Mutex::default(),
            placed_offers: parking_lot::Mutex::default(),
            span: tracing::info_span!("agent_tree", session = %session_name),
            journal,
            placement: self.placement,
        });
        if let Some(journal) = &shared.journal {
            shared.registry.set_journal(journal.clone());
            // A release waiting for its line runs once the writer has written it: a task
            // on the tree's runtime (its clock, not the writer thread's), started from the
            // writer thread.
            let (tree, runtime) = (Arc::downgrade(&shared), tokio::runtime::Handle::current());
            journal.on_written(Box::new(move || {
                let tree = tree.clone();
                runtime.spawn(async move {
                    if let Some(shared) = tree.upgrade() {
                        shared.registry.release_due();
                    }
                });
            }));
        }
        let branch = Arc::new(Branch {
            catalog: self.catalog,
            max_depth: shared.config.max_depth,
        });
        if let Some(replay) = &recovered {
            let interrupted = shared.registry.recover(replay, &branch);
            if let Some(placement) = &shared.placement {
                placement.recovered(replay);
            }
            tracing::info!(
                agents = replay.records.len() - 1,
                interrupted = interrupted.len(),
                "tree recovered from its journal"
            );
        }
        let (root, _) = Actor::spawn(None, RootActor, shared.clone())
            .await
            .map_err(|e| TreeError::Startup(Box::new(e)))?;
        let _ = shared.root.set(root.clone());
        if recovered.is_some() && shared.hooks.questions.is_some() {
            resume_questions(&shared, &root).await;
        }
        let branch = RwLock::new(branch);
        Ok(Tree {
            shared,
            root,
            root_token,
            branch,
            sources: self.sources,
            stopped: std::sync::atomic::AtomicBool::new(false),
        })
    }
}

/// Resumes the top-level agents a crash cut off waiting on the application's answer: each
/// waits again, its question put to the question handler again (its turn is not re-run),
/// or, answered before the crash, reads the journaled answer.
async fn resume_questions(shared: &SharedRef, root: &ActorRef<AgentMsg>) {
    for id in shared.registry.waiting_on_questions(AgentId::ROOT) {
        let started = match spawn::reopen(shared, id, AgentId::ROOT, String::new(), None).await {
            Ok(ticket) => spawn::start(shared, ticket, root).await.map(|_| ()),
            Err(error) => Err(error),
        };
        if let Err(error) = started {
            tracing::warn!(agent = %id, %error, "a recovered question could not be put again");
        }
    }
}

/// A session id unique to this process and moment: `s<pid>-<nanos>-<n>`.
fn new_session_id() -> SessionId {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    SessionId::new(format!(
        "s{:x}-{:x}-{}",
        std::process::id(),
        nanos,
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}
