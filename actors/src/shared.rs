//! State shared by every actor of one tree.

use std::fmt;
use std::sync::Arc;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use std::collections::HashMap;

use parking_lot::Mutex;
use ractor::ActorRef;

use crate::catalog::Catalog;
use crate::config::TreeConfig;
use crate::hooks::Hooks;
use crate::model::Model;
use crate::msg::AgentMsg;
use crate::registry::Registry;
use crate::tool::Toolbox;

/// What every actor of a tree reaches: config, model, tools and the registry.
pub(crate) struct Shared {
    pub(crate) config: TreeConfig,
    /// `config.sampling`, the one copy the runtime reads: shared by the model requests of
    /// every agent whose definition sets no sampling of its own (a request is held for a
    /// whole model call: one copy, not one a turn), and laid under those that do.
    pub(crate) sampling: Arc<agent_tree_protocol::Sampling>,
    pub(crate) model: Arc<dyn Model>,
    /// The bound on model calls in flight per model (`TreeConfig::max_model_calls`).
    pub(crate) model_permits: crate::permits::ModelPermits,
    pub(crate) toolbox: Toolbox,
    pub(crate) registry: Registry,
    pub(crate) hooks: Hooks,
    /// The root actor, set once it runs: detached agents are linked under it, so they
    /// survive their owner.
    pub(crate) root: OnceLock<ActorRef<AgentMsg>>,
    /// Tasks the runtime spawned (model turns, tools, waits, hooks): the cost model of
    /// `docs/architecture.md` counts them per agent, and a test holds the count.
    pub(crate) tasks: AtomicU64,
    /// The tool specs offered per distinct capability set (and, for agents that delegate,
    /// per set of types they may reach), built once and shared by every agent's every turn.
    /// A leaf lock: only the map is touched under it.
    pub(crate) offered: Mutex<
        HashMap<crate::agent::orchestration::OfferKey, Arc<crate::agent::orchestration::Offer>>,
    >,
    /// The offers of agents whose owners do not attenuate their tools, by where they stand
    /// (see `orchestration::offered_at`): most agents' offer is one lookup here. A leaf lock.
    /// Keyed by addresses and flags, the runtime's own: hashed by `util::IdHasher`.
    pub(crate) placed_offers: Mutex<
        crate::util::IdMap<
            crate::agent::orchestration::PlaceKey,
            crate::agent::orchestration::PlacedOffer,
        >,
    >,
    /// The tree's span: the parent of every top-level agent's span.
    pub(crate) span: tracing::Span,
    /// The journal, when the tree keeps one.
    pub(crate) journal: Option<crate::journal::JournalTap>,
    /// Where agents placed on other nodes run, when the tree has a placement (a cluster
    /// node attached): the one seam of `placement.rs`.
    pub(crate) placement: Option<Arc<dyn crate::placement::Placement>>,
}

impl Shared {
    /// Spawns one of the runtime's tasks in `span`; a disabled span is not attached, so the
    /// task is not a `Span` larger for it.
    pub(crate) fn spawn_in<F>(
        &self,
        span: tracing::Span,
        task: F,
    ) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        if span.is_disabled() {
            self.spawn(task)
        } else {
            self.spawn(tracing::Instrument::instrument(task, span))
        }
    }

    /// `outcome` of `id` whole: its output read back from the journal when it was released
    /// (left released, with a warning logged, when the journal cannot give it back).
    pub(crate) async fn whole_outcome(
        &self,
        id: agent_tree_protocol::AgentId,
        outcome: agent_tree_protocol::Outcome,
    ) -> agent_tree_protocol::Outcome {
        match &self.journal {
            Some(journal) if outcome.released => journal.read_outcome(id).await.unwrap_or(outcome),
            _ => outcome,
        }
    }

    /// Spawns one of the runtime's tasks, counted in [`Shared::tasks`].
    pub(crate) fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tasks.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(task)
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .field("toolbox", &self.toolbox)
            .finish_non_exhaustive()
    }
}

/// What a branch keeps from when it started: its catalog and its depth cap. Children share
/// their owner's branch, so changing the tree's catalog or config later never changes how an
/// existing branch resolves names or how deep it may go.
#[derive(Debug)]
pub(crate) struct Branch {
    pub(crate) catalog: Catalog,
    pub(crate) max_depth: u32,
}

pub(crate) type SharedRef = Arc<Shared>;
