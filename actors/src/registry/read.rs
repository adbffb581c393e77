//! Queries: ownership checks, and what handles, waits, snapshots and the shutdown read.
//! (What a running agent writes is in `running.rs`.)

use agent_tree_protocol::{AgentId, AgentRecord, AgentStatus, Outcome, TreeSnapshot};
use ractor::ActorCell;
use tokio::sync::{mpsc, watch};

use super::Registry;
use crate::config::ControlScope;
use crate::error::ControlError;
use crate::events::EventStream;
use crate::policy::control;

impl Registry {
    /// Whether `caller` may control `target` under `scope`. A missing target and a foreign
    /// one give the same error.
    pub(crate) fn authorize(
        &self,
        caller: AgentId,
        target: AgentId,
        scope: ControlScope,
    ) -> Result<(), ControlError> {
        let inner = self.lock();
        let parent_of = |id: AgentId| inner.rec(id).and_then(|r| r.parent);
        if control::reaches(scope, caller, target, parent_of) {
            Ok(())
        } else {
            Err(ControlError::NotYours(target))
        }
    }

    /// `id`'s current run and a receiver of the last run of it that ended.
    pub(crate) fn watch_runs(&self, id: AgentId) -> Option<(u32, watch::Receiver<u32>)> {
        let mut inner = self.lock();
        let runs = inner.entry(id)?.runs;
        inner.watch_ended(id).map(|ended| (runs, ended))
    }

    /// Agents whose ractor actor is still alive, asking ractor (not our records).
    pub(crate) fn alive_actors(&self) -> Vec<AgentId> {
        let inner = self.lock();
        inner
            .entries
            .iter()
            .zip(&inner.records)
            .filter(|(e, _)| {
                e.actor
                    .as_ref()
                    .is_some_and(|a| a.get_status() != ractor::ActorStatus::Stopped)
            })
            .map(|(_, r)| r.id)
            .collect()
    }

    /// Actors of the subtree of `top` (detached descendants included) whose agent is terminal
    /// but whose actor has not exited yet: settled and stopping, or killed with its owner.
    pub(crate) fn settled_but_alive(&self, top: AgentId) -> Vec<ActorCell> {
        let inner = self.lock();
        let mut out = Vec::new();
        let mut stack = vec![top];
        while let Some(id) = stack.pop() {
            let (Some(entry), Some(record)) = (inner.entry(id), inner.rec(id)) else {
                continue;
            };
            stack.extend(record.children.iter().copied());
            if let Some(actor) = entry.actor.as_ref().filter(|_| record.status.is_terminal()) {
                if actor.get_status() != ractor::ActorStatus::Stopped {
                    out.push(actor.clone());
                }
            }
        }
        out
    }

    /// The actors of `ids` that are still alive.
    pub(crate) fn actors_of(&self, ids: &[AgentId]) -> Vec<(AgentId, ActorCell)> {
        let inner = self.lock();
        ids.iter()
            .filter_map(|&id| {
                inner
                    .entry(id)
                    .and_then(|e| e.actor.clone().map(|a| (id, a)))
            })
            .collect()
    }

    /// What a supervisor's strategy machine needs of `owner`'s supervised (non-detached)
    /// children, in start order, in one transaction.
    pub(crate) fn supervision_facts(&self, owner: AgentId) -> Vec<crate::policy::strategy::Child> {
        let inner = self.lock();
        let Some(record) = inner.rec(owner) else {
            return Vec::new();
        };
        record
            .children
            .iter()
            .filter_map(|&c| Some((inner.rec(c)?, inner.entry(c)?)))
            .filter(|(r, _)| !r.detached)
            .map(|(r, e)| crate::policy::strategy::Child {
                id: r.id,
                // A queued sibling has nothing to stop or restart: it stays queued.
                running: r.status.is_live() && r.status != AgentStatus::Queued,
                awaiting: e.deferred,
                restart: e
                    .spec
                    .as_ref()
                    .map(|s| s.definition.restart)
                    .unwrap_or_default(),
            })
            .collect()
    }

    /// A copy of `id`'s record.
    pub(crate) fn record(&self, id: AgentId) -> Option<AgentRecord> {
        self.lock().rec(id).cloned()
    }

    /// `id`'s status.
    pub(crate) fn status(&self, id: AgentId) -> Option<AgentStatus> {
        self.lock().status_of(id)
    }

    /// The node `id` is placed on, if any (its kept start spec's; maybe the tree's own).
    pub(crate) fn placement(&self, id: AgentId) -> Option<std::sync::Arc<str>> {
        let inner = self.lock();
        inner.entry(id)?.spec.as_ref()?.node.clone()
    }

    /// `id`'s outcome, once settled.
    pub(crate) fn outcome(&self, id: AgentId) -> Option<Outcome> {
        // An exit awaiting its owner's restart decision is not an outcome yet.
        self.lock().settled_value(id)
    }

    /// `id`'s outcome, once final, read: it counts as read for the journal's retention
    /// policy ([`Inner::output_read`](super::Inner)). The output may have been released
    /// before (the outcome says so); the journal holds it.
    pub(crate) fn read_outcome(&self, id: AgentId) -> Option<Outcome> {
        let now = self.now_ms();
        let mut inner = self.lock();
        let outcome = inner.settled_value(id)?;
        inner.output_read(id, now);
        Some(outcome)
    }

    /// `id`'s final output was read (by its owner's tools, or by the application through
    /// a handle or a wait): see [`Registry::read_outcome`]. Returns the last event's
    /// sequence number, which a journal synced through it has made durable.
    pub(crate) fn output_read(&self, id: AgentId) -> u64 {
        let now = self.now_ms();
        let mut inner = self.lock();
        inner.output_read(id, now);
        inner.seq
    }

    /// The last event's sequence number.
    pub(crate) fn last_seq(&self) -> u64 {
        self.lock().seq
    }

    /// Releases the read outputs that are due (see [`Registry::read_outcome`]): after a
    /// journal flush, outputs read before their lines were written go now instead of at
    /// the next read or settle.
    /// Returns whether any was released.
    pub(crate) fn release_due(&self) -> bool {
        let now = self.now_ms();
        let mut inner = self.lock();
        let before = inner.seq;
        if !inner.read_outputs.is_empty() {
            inner.release_read_outputs(now);
        }
        inner.seq != before
    }

    /// A receiver that sees `id`'s outcome once it is final.
    pub(crate) fn watch(&self, id: AgentId) -> Option<watch::Receiver<Option<Outcome>>> {
        self.lock().watch_settled(id)
    }

    /// Live agents (depth ≥ 1).
    pub(crate) fn live(&self) -> usize {
        self.lock().live
    }

    /// Subscribes to every event from now on.
    pub(crate) fn subscribe(&self) -> EventStream {
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock().subscribers.push(tx);
        EventStream::new(rx)
    }

    /// The whole tree as it is now.
    pub(crate) fn snapshot(&self) -> TreeSnapshot {
        let now = self.now_ms();
        let inner = self.lock();
        TreeSnapshot {
            session: self.session.clone(),
            taken_ms: now,
            records: inner.records.clone(),
            tally: inner.tally.clone(),
            peak_live: inner.peak_live,
        }
    }

    /// `id`'s conversation as its cell holds it: as of its last turn boundary, or as its
    /// settled run ended. Empty once a journal holds it instead, or for an unknown id.
    pub(crate) fn conversation(
        &self,
        id: AgentId,
    ) -> std::sync::Arc<[agent_tree_protocol::Message]> {
        let inner = self.lock();
        inner
            .entry(id)
            .map(|e| e.conversation.lock().messages.clone())
            .unwrap_or_else(|| std::sync::Arc::from(Vec::new()))
    }

    /// Waits until no agent is live.
    pub(crate) async fn idle(&self) {
        let mut live = self.lock().live_tx.subscribe();
        // The sender lives as long as the registry, which `&self` keeps alive.
        let _ = live.wait_for(|&n| n == 0).await;
    }
}
