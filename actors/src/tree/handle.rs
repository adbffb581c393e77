//! [`AgentHandle`]: one agent's id and its eventual outcome, and what the application
//! taking an outcome does in a journaled tree (it counts as read; a released output is read
//! back; with every-entry durability it is synced first).

use std::sync::Arc;

use agent_tree_protocol::{AgentId, AgentStatus, EndReason, Outcome};
use tokio::sync::watch;

use crate::shared::Shared;

/// A handle on one agent: its id and its eventual outcome. Waiting on it, or dropping it,
/// never affects the agent.
///
/// In a journaled tree, taking the outcome reads it (for the journal's retention policy,
/// [`JournalConfig::keep_read_outputs`](crate::JournalConfig::keep_read_outputs)); a released
/// output is read back from the journal.
#[derive(Debug, Clone)]
pub struct AgentHandle {
    id: AgentId,
    settled: watch::Receiver<Option<Outcome>>,
    /// The tree, not kept alive by the handle: a dropped tree ends every wait.
    shared: std::sync::Weak<Shared>,
}

impl AgentHandle {
    /// The handle on agent `id` of the tree `shared`, whose outcome `settled` carries.
    pub(super) fn new(
        id: AgentId,
        settled: watch::Receiver<Option<Outcome>>,
        shared: &Arc<Shared>,
    ) -> Self {
        AgentHandle {
            id,
            settled,
            shared: Arc::downgrade(shared),
        }
    }

    /// The agent's id.
    pub fn id(&self) -> AgentId {
        self.id
    }

    /// Waits for the agent to settle and returns its outcome, whole (a released output is
    /// read back from the journal). With [`Durability::EveryEntry`](crate::Durability) the
    /// outcome is synced to the journal before it is returned. Cancel-safe: dropping the
    /// future leaves the agent running.
    pub async fn outcome(&mut self) -> Outcome {
        let outcome = match self.settled.wait_for(Option::is_some).await {
            Ok(outcome) => outcome.clone().unwrap_or_else(killed_outcome),
            // The registry is gone: the tree was dropped, which kills every agent.
            Err(_) => return killed_outcome(),
        };
        match self.shared.upgrade() {
            Some(shared) => taken(&shared, self.id, outcome).await,
            None => outcome,
        }
    }

    /// The outcome, if the agent has settled: as held in memory, so a released output is
    /// not in it (its `released` says so; [`AgentHandle::outcome`] reads it back).
    pub fn try_outcome(&self) -> Option<Outcome> {
        let outcome = self.settled.borrow().clone()?;
        if let Some(shared) = self.shared.upgrade().filter(|s| s.journal.is_some()) {
            shared.registry.output_read(self.id);
        }
        Some(outcome)
    }
}

/// The application took `id`'s final `outcome`: read, for the journal's retention policy,
/// and whole (a released output read back). With [`Durability::EveryEntry`](crate::Durability)
/// it is returned only once the journal has synced everything emitted up to now, its
/// terminal event included: what the application is handed survives a crash.
pub(super) async fn taken(shared: &Shared, id: AgentId, outcome: Outcome) -> Outcome {
    let Some(journal) = &shared.journal else {
        return outcome;
    };
    let (outcome, seq) = if outcome.released {
        let whole = shared.whole_outcome(id, outcome).await;
        (
            whole,
            journal.every_entry.then(|| shared.registry.last_seq()),
        )
    } else {
        let seq = shared.registry.output_read(id);
        (outcome, Some(seq))
    };
    if let Some(seq) = seq.filter(|_| journal.every_entry) {
        journal.synced_through(seq).await;
    }
    outcome
}

fn killed_outcome() -> Outcome {
    Outcome::ended(AgentStatus::Killed, EndReason::Killed)
}
