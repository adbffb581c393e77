//! Mirrored records: the descendants of a remote child, folded into the owner's records so
//! the root's snapshot, event stream and journal cover the whole tree (`docs/cluster.md`).
//!
//! A remote child's stand-in reads its hosted tree's events in order, each once. The hosted
//! top agent is the stand-in's own record; every agent below it gets a record here, under
//! the stand-in, with an id of this tree (so ids never collide across nodes), created by its
//! `spawned` (or `queued`) event and changed only by the events that follow, translated to
//! this tree's ids and applied by the same fold as every other record. A mirrored record has
//! no actor and takes no admission counter: its node admitted it. It cannot be steered,
//! aborted, killed, resumed or shut down from here ([`ControlError::Remote`]): its node's
//! owner does that, and this tree reaches it through the stand-in. It settles with its own
//! terminal event, or, when the stand-in settles first (its node lost, its edge given up),
//! `killed` in the same transaction, before the stand-in's own terminal event.

use agent_tree_protocol::{
    AgentId, AgentStatus, EarlierChild, EndReason, EventKind, FoldError, Outcome,
};
use tokio_util::sync::CancellationToken;

use super::{Entry, Inner, Origin, Registry};
use crate::error::ControlError;

/// What the actor standing for a remote child calls (the placement's side of the seam).
#[cfg_attr(
    not(feature = "cluster"),
    allow(dead_code, reason = "only a placement calls them")
)]
impl Registry {
    /// The children of `id`'s earlier runs on another node (its mirrored children, all
    /// settled when its run did), in start order, their outcomes as this registry holds
    /// them (released ones without their output): what a resumed run's hosted tree seeds.
    pub(crate) fn earlier_children(&self, id: AgentId) -> Vec<EarlierChild> {
        let inner = self.lock();
        let Some(record) = inner.rec(id) else {
            return Vec::new();
        };
        record
            .children
            .iter()
            .filter(|&&child| inner.is_mirrored(child))
            .filter_map(|&child| {
                let record = inner.rec(child)?;
                Some(EarlierChild {
                    agent: child,
                    agent_type: record.agent_type.clone(),
                    outcome: record.outcome.clone()?,
                })
            })
            .collect()
    }

    /// Creates the mirrored record of a hosted agent under `parent` (the stand-in, or a
    /// mirrored record), from its `spawned` or `queued` event. Returns its id in this tree;
    /// `None` when `parent` is gone, settled, or neither a stand-in's nor a mirrored record
    /// (then nothing changes).
    pub(crate) fn mirror_spawn(
        &self,
        stand_in: AgentId,
        parent: AgentId,
        kind: EventKind,
    ) -> Option<AgentId> {
        if !matches!(kind, EventKind::Spawned { .. } | EventKind::Queued { .. }) {
            return None;
        }
        let now = self.now_ms();
        let mut inner = self.lock();
        let owner = inner.rec(parent)?;
        let depth = owner.depth.saturating_add(1);
        let under = parent == stand_in || inner.is_mirrored(parent);
        if !under || !owner.status.is_live() || inner.is_mirrored(stand_in) {
            return None;
        }
        let id = AgentId::new(inner.entries.len() as u64);
        let mut entry = Entry::new(CancellationToken::new());
        entry.origin = Origin::Mirror;
        inner.entries.push(entry);
        if inner
            .try_emit_as(id, Some(parent), depth, kind, now)
            .is_err()
        {
            inner.entries.pop();
            return None;
        }
        Some(id)
    }

    /// Folds one event of mirrored agent `id` in: a terminal one settles it (final at once:
    /// its node decides on restarts, and a restart comes as its own event); any other is
    /// applied as it is. An event the fold refuses (after the record settled, out of order)
    /// changes nothing and is returned as the error.
    pub(crate) fn mirror_event(&self, id: AgentId, kind: EventKind) -> Result<(), FoldError> {
        let now = self.now_ms();
        let mut inner = self.lock();
        let refused = FoldError::UnknownAgent {
            seq: inner.seq + 1,
            agent: id,
        };
        if !inner.is_mirrored(id) {
            return Err(refused);
        }
        match kind.outcome() {
            Some(outcome) => {
                let (parent, depth, before) = match inner.rec(id) {
                    Some(r) => (r.parent, r.depth, r.status),
                    None => return Err(refused),
                };
                if before.advance(outcome.status).is_ok() {
                    inner.settle_mirrored(id, now, outcome);
                }
                inner.try_emit_as(id, parent, depth, kind, now)?;
                inner.finalize(id, before);
                Ok(())
            }
            None => {
                let (parent, depth, status) = match inner.rec(id) {
                    Some(r) => (r.parent, r.depth, r.status),
                    None => return Err(refused),
                };
                // After its terminal event only a new run (its node restarted or resumed
                // it) changes a record: anything else came late, and is reported.
                let reopens = matches!(kind, EventKind::Restarted { .. } | EventKind::Resumed);
                if status.is_terminal() && !reopens {
                    return Err(FoldError::AfterTerminal {
                        seq: inner.seq + 1,
                        agent: id,
                    });
                }
                inner.try_emit_as(id, parent, depth, kind, now)
            }
        }
    }
}

impl Registry {
    /// The refusal of a control operation on `id`, if it is a mirrored record.
    pub(crate) fn refuse_mirrored(&self, id: AgentId) -> Result<(), ControlError> {
        self.lock().refuse_mirrored(id)
    }
}

impl Inner {
    /// Seeds, under `parent` (a resumed run's top agent, admitted at `depth` in this
    /// transaction), a settled record of each child of its earlier runs, with the next ids
    /// in order: records like mirrored ones (no actor, no counter, not controlled here),
    /// which its model can still read. Their `spawned` events carry the owner's id of
    /// each ([`EarlierChild::seed_request`]), for the owner's stand-in.
    pub(super) fn seed_earlier(
        &mut self,
        parent: AgentId,
        depth: u32,
        earlier: &[EarlierChild],
        now: u64,
    ) {
        let depth = depth.saturating_add(1);
        for child in earlier {
            let id = AgentId::new(self.entries.len() as u64);
            let mut entry = Entry::new(CancellationToken::new());
            entry.origin = Origin::Seed;
            self.entries.push(entry);
            let spawned = EventKind::Spawned {
                agent_type: child.agent_type.clone(),
                request_id: Some(child.seed_request()),
                detached: false,
            };
            // The parent was admitted in this transaction: neither event can be refused.
            if self
                .try_emit_as(id, Some(parent), depth, spawned, now)
                .is_ok()
                && self
                    .try_emit_as(
                        id,
                        Some(parent),
                        depth,
                        EventKind::settled(child.outcome.clone()),
                        now,
                    )
                    .is_ok()
            {
                self.finalize(id, AgentStatus::Starting);
            }
        }
    }

    /// Whether `id` is a mirrored record (a seeded one too).
    pub(super) fn is_mirrored(&self, id: AgentId) -> bool {
        self.entry(id).is_some_and(|e| e.origin != Origin::Actor)
    }

    /// Whether `id` is a seeded child of an earlier run ([`Inner::seed_earlier`]).
    pub(super) fn is_earlier(&self, id: AgentId) -> bool {
        self.entry(id).is_some_and(|e| e.origin == Origin::Seed)
    }

    /// The refusal of a control operation on mirrored `id`, if it is one. A seeded child of
    /// an earlier run is settled: refused as any settled agent is (its resume, which a
    /// local run could make, is refused apart: `ControlError::EarlierRun`).
    pub(super) fn refuse_mirrored(&self, id: AgentId) -> Result<(), ControlError> {
        if self.is_earlier(id) {
            let status = self.status_of(id).unwrap_or(AgentStatus::Completed);
            Err(ControlError::WrongStatus(id, status))
        } else if self.is_mirrored(id) {
            Err(ControlError::Remote(id))
        } else {
            Ok(())
        }
    }

    /// Settles, `killed`, the live mirrored descendants of `id`, which is settling with
    /// `outcome`, deepest first, each before its owner. For a stand-in, all of them: their
    /// node reports on them through this tree no more. For a mirrored record, those that
    /// died with it (not detached ones, which outlive their owner on their node too, and
    /// have events of their own to come). Their cause says why: the stand-in's own error,
    /// or who ended first.
    pub(super) fn settle_mirrored(&mut self, id: AgentId, now: u64, outcome: &Outcome) {
        let first = self.rec(id).and_then(|r| r.children.first().copied());
        if !first.is_some_and(|c| self.is_mirrored(c)) {
            return;
        }
        let all = !self.is_mirrored(id);
        let cause = outcome.error.clone().unwrap_or_else(|| {
            format!(
                "{id} ended {} before this agent did: its node reports on it no more",
                outcome.status
            )
        });
        // Preorder, then reversed: every descendant before its owner.
        let mut order = Vec::new();
        let mut stack = vec![id];
        while let Some(at) = stack.pop() {
            let Some(record) = self.rec(at) else { continue };
            for &child in &record.children {
                let detached = self.rec(child).is_some_and(|r| r.detached);
                if self.is_mirrored(child) && (all || !detached) {
                    order.push(child);
                    stack.push(child);
                }
            }
        }
        for &child in order.iter().rev() {
            let Some((parent, depth, before)) = self
                .rec(child)
                .filter(|r| r.status.is_live())
                .map(|r| (r.parent, r.depth, r.status))
            else {
                continue;
            };
            let mut killed = Outcome::ended(AgentStatus::Killed, EndReason::Killed);
            killed.error = Some(cause.clone());
            let kind = EventKind::settled(killed);
            if self.try_emit_as(child, parent, depth, kind, now).is_ok() {
                self.finalize(child, before);
            }
        }
    }
}
