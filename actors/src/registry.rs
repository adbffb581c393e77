//! The registry: the authoritative record of every agent, the usage ledger and the event bus.
//!
//! One mutex guards everything here, and nothing awaits while holding it. Every state change
//! of a record, its usage and the event announcing it happen under that one lock, so:
//!
//! # Invariants
//!
//! * Records are only ever added, never removed: a finished branch's records stay readable
//!   whatever other branches do.
//! * A terminal status is sticky: [`Registry::settle`] refuses a second terminal status.
//! * Usage is added to the agent's `own` and to the `subtree` of the agent and every ancestor
//!   in one step, so `subtree == own + Σ children.subtree` holds at every instant, not only
//!   at quiescence; and a child's last usage is in the ledger before its settle event, which
//!   is before its owner is told.
//! * Events get dense sequence numbers and reach every subscriber in that order (each
//!   subscriber has an unbounded queue: nothing is dropped).
//! * The live counts used by admission (`live`, each record's live children) change only
//!   here, together with the status that defines them.

use std::collections::HashMap;

use agent_tree_protocol::{
    AgentId, AgentRecord, AgentStatus, EndReason, Event, EventKind, EventTally, Outcome, RequestId,
    SessionId, TreeSnapshot, Usage,
};
use parking_lot::Mutex;
use ractor::{ActorCell, ActorId};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::TreeConfig;
use crate::error::{ControlError, SpawnError};
use crate::events::EventStream;

/// The registry of one tree.
#[derive(Debug)]
pub(crate) struct Registry {
    session: SessionId,
    epoch: Instant,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Indexed by agent id: ids are dense from the root's `a0`.
    entries: Vec<Entry>,
    /// ractor actor → agent, for supervision events.
    by_actor: HashMap<ActorId, AgentId>,
    /// (owner, request id) → child, for replay-safe spawns.
    by_request: HashMap<(AgentId, RequestId), AgentId>,
    tally: EventTally,
    seq: u64,
    /// Live agents (depth ≥ 1, admitted, not terminal).
    live: usize,
    peak_live: usize,
    subscribers: Vec<mpsc::UnboundedSender<Event>>,
    /// Mirrors `live` for [`Registry::idle`].
    live_tx: watch::Sender<usize>,
}

#[derive(Debug)]
struct Entry {
    record: AgentRecord,
    /// Cancelled to abort the agent; children's tokens are children of it (unless detached).
    token: CancellationToken,
    /// Why the agent was aborted, set by whoever cancelled `token` first.
    abort_reason: Option<EndReason>,
    actor: Option<ActorCell>,
    live_children: usize,
    /// Set once, when the agent settles; handles and waits watch it.
    settled: watch::Sender<Option<Outcome>>,
}

/// What [`Registry::admit`] needs to reserve a slot.
#[derive(Debug)]
pub(crate) struct Admission<'a> {
    pub(crate) owner: AgentId,
    pub(crate) agent_type: &'a str,
    pub(crate) request_id: Option<RequestId>,
    pub(crate) detached: bool,
    pub(crate) max_depth: u32,
    pub(crate) config: &'a TreeConfig,
}

/// The result of an admission.
#[derive(Debug)]
pub(crate) enum Admitted {
    /// A new record, with its id, depth and token.
    New {
        id: AgentId,
        depth: u32,
        token: CancellationToken,
    },
    /// The owner already spawned this request: the existing child.
    Existing(AgentId),
}

impl Registry {
    /// A registry holding only the root record.
    pub(crate) fn new(session: SessionId, root_token: CancellationToken) -> Self {
        let (settled, _) = watch::channel(None);
        let root = Entry {
            record: AgentRecord {
                id: AgentId::ROOT,
                agent_type: "root".into(),
                depth: 0,
                parent: None,
                children: Vec::new(),
                status: AgentStatus::Running,
                own: Usage::ZERO,
                subtree: Usage::ZERO,
                incarnation: 1,
                request_id: None,
                detached: false,
                created_ms: 0,
                started_ms: Some(0),
                ended_ms: None,
                outcome: None,
            },
            token: root_token,
            abort_reason: None,
            actor: None,
            live_children: 0,
            settled,
        };
        Registry {
            session,
            epoch: Instant::now(),
            inner: Mutex::new(Inner {
                entries: vec![root],
                by_actor: HashMap::new(),
                by_request: HashMap::new(),
                tally: EventTally::default(),
                seq: 0,
                live: 0,
                peak_live: 0,
                subscribers: Vec::new(),
                live_tx: watch::channel(0).0,
            }),
        }
    }

    /// The tree's session.
    pub(crate) fn session(&self) -> &SessionId {
        &self.session
    }

    /// Milliseconds since the tree started, on tokio's clock.
    pub(crate) fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Reserves a slot for a child of `owner`, atomically: the owner must be accepting
    /// children, and the depth, width and total limits must hold. On success the record
    /// exists with status `starting`.
    pub(crate) fn admit(&self, admission: Admission<'_>) -> Result<Admitted, SpawnError> {
        let now = self.now_ms();
        let mut inner = self.inner.lock();
        if let Some(request_id) = &admission.request_id {
            if let Some(&existing) = inner.by_request.get(&(admission.owner, request_id.clone())) {
                return Ok(Admitted::Existing(existing));
            }
        }
        let owner = inner
            .entry(admission.owner)
            .ok_or(SpawnError::OwnerClosed(admission.owner))?;
        let accepting =
            matches!(owner.record.status, AgentStatus::Running) && !owner.token.is_cancelled();
        if !accepting {
            return Err(SpawnError::OwnerClosed(admission.owner));
        }
        let depth = owner.record.depth + 1;
        if depth > 1 && depth > admission.max_depth {
            return Err(SpawnError::DepthLimit {
                depth,
                max_depth: admission.max_depth,
            });
        }
        if owner.live_children >= admission.config.max_children_per_agent
            && !admission.owner.is_root()
        {
            return Err(SpawnError::ChildLimit {
                owner: admission.owner,
                limit: admission.config.max_children_per_agent,
            });
        }
        if inner.live >= admission.config.max_total_agents {
            return Err(SpawnError::TotalLimit {
                limit: admission.config.max_total_agents,
            });
        }
        let token = if admission.detached {
            inner.entries[0].token.child_token()
        } else {
            owner.token.child_token()
        };
        let id = AgentId::new(inner.entries.len() as u64);
        let (settled, _) = watch::channel(None);
        inner.entries.push(Entry {
            record: AgentRecord {
                id,
                agent_type: admission.agent_type.to_owned(),
                depth,
                parent: Some(admission.owner),
                children: Vec::new(),
                status: AgentStatus::Starting,
                own: Usage::ZERO,
                subtree: Usage::ZERO,
                incarnation: 1,
                request_id: admission.request_id.clone(),
                detached: admission.detached,
                created_ms: now,
                started_ms: None,
                ended_ms: None,
                outcome: None,
            },
            token: token.clone(),
            abort_reason: None,
            actor: None,
            live_children: 0,
            settled,
        });
        let owner = inner
            .entry_mut(admission.owner)
            .expect("owner checked above");
        owner.record.children.push(id);
        owner.live_children += 1;
        inner.live += 1;
        inner.peak_live = inner.peak_live.max(inner.live);
        inner.live_tx.send_replace(inner.live);
        if let Some(request_id) = admission.request_id {
            inner.by_request.insert((admission.owner, request_id), id);
        }
        Ok(Admitted::New { id, depth, token })
    }

    /// Marks `id` running on `actor` and announces it.
    pub(crate) fn started(&self, id: AgentId, actor: ActorCell) {
        let now = self.now_ms();
        let mut inner = self.inner.lock();
        inner.by_actor.insert(actor.get_id(), id);
        let Some(entry) = inner.entry_mut(id) else {
            return;
        };
        entry.actor = Some(actor);
        entry.record.started_ms.get_or_insert(now);
        if let Ok(status) = entry.record.status.advance(AgentStatus::Running) {
            entry.record.status = status;
        }
        let kind = EventKind::Started {
            agent_type: entry.record.agent_type.clone(),
            incarnation: entry.record.incarnation,
        };
        inner.emit(id, kind, now);
    }

    /// Moves a live agent to `completing` (its run ended, its children drain).
    pub(crate) fn completing(&self, id: AgentId) {
        let mut inner = self.inner.lock();
        if let Some(entry) = inner.entry_mut(id) {
            if let Ok(status) = entry.record.status.advance(AgentStatus::Completing) {
                entry.record.status = status;
            }
        }
    }

    /// Records one model turn's usage on `id` and every ancestor, and announces it.
    pub(crate) fn add_usage(&self, id: AgentId, delta: Usage) {
        let now = self.now_ms();
        let mut inner = self.inner.lock();
        let Some(entry) = inner.entry_mut(id) else {
            return;
        };
        entry.record.own += delta;
        let mut cursor = Some(id);
        while let Some(at) = cursor {
            let Some(entry) = inner.entry_mut(at) else {
                break;
            };
            entry.record.subtree += delta;
            cursor = entry.record.parent;
        }
        inner.emit(id, EventKind::UsageReported { delta }, now);
    }

    /// Announces an event about `id` that changes no record.
    pub(crate) fn announce(&self, id: AgentId, kind: EventKind) {
        let now = self.now_ms();
        self.inner.lock().emit(id, kind, now);
    }

    /// Settles `id` with `outcome` (terminal), unless it is terminal already.
    /// Returns whether this call settled it.
    pub(crate) fn settle(&self, id: AgentId, outcome: Outcome) -> bool {
        let now = self.now_ms();
        let mut inner = self.inner.lock();
        inner.settle(id, outcome, now)
    }

    /// Settles every live descendant of `id` as killed (their actors were killed by ractor
    /// when `id`'s actor died) and cancels their tokens so their tasks end.
    pub(crate) fn kill_descendants(&self, id: AgentId) {
        let now = self.now_ms();
        let mut inner = self.inner.lock();
        let mut stack: Vec<AgentId> = inner
            .entry(id)
            .map(|e| e.record.children.clone())
            .unwrap_or_default();
        while let Some(child) = stack.pop() {
            let Some(entry) = inner.entry(child) else {
                continue;
            };
            stack.extend(entry.record.children.iter().copied());
            if entry.record.detached {
                continue;
            }
            entry.token.cancel();
            inner.settle(
                child,
                Outcome::ended(AgentStatus::Killed, EndReason::Killed),
                now,
            );
        }
    }

    /// Aborts `id`: records why (first reason wins) and cancels its token, which reaches its
    /// whole non-detached subtree at once.
    pub(crate) fn abort(&self, id: AgentId, reason: EndReason) -> Result<(), ControlError> {
        let mut inner = self.inner.lock();
        let entry = inner.entry_mut(id).ok_or(ControlError::NotYours(id))?;
        entry.abort_reason.get_or_insert(reason);
        entry.token.cancel();
        Ok(())
    }

    /// Why `id` was aborted, if it was aborted itself (not through an ancestor).
    pub(crate) fn abort_reason(&self, id: AgentId) -> Option<EndReason> {
        self.inner.lock().entry(id).and_then(|e| e.abort_reason)
    }

    /// The agent running on ractor actor `actor`.
    pub(crate) fn agent_for_actor(&self, actor: ActorId) -> Option<AgentId> {
        self.inner.lock().by_actor.get(&actor).copied()
    }

    /// A copy of `id`'s record.
    pub(crate) fn record(&self, id: AgentId) -> Option<AgentRecord> {
        self.inner.lock().entry(id).map(|e| e.record.clone())
    }

    /// `id`'s status.
    pub(crate) fn status(&self, id: AgentId) -> Option<AgentStatus> {
        self.inner.lock().entry(id).map(|e| e.record.status)
    }

    /// `id`'s outcome, once settled.
    pub(crate) fn outcome(&self, id: AgentId) -> Option<Outcome> {
        self.inner
            .lock()
            .entry(id)
            .and_then(|e| e.record.outcome.clone())
    }

    /// A receiver that sees `id`'s outcome once it settles.
    pub(crate) fn watch(&self, id: AgentId) -> Option<watch::Receiver<Option<Outcome>>> {
        self.inner.lock().entry(id).map(|e| e.settled.subscribe())
    }

    /// Actors of agents not yet terminal, with their ids.
    pub(crate) fn live_actors(&self) -> Vec<(AgentId, ActorCell)> {
        self.inner
            .lock()
            .entries
            .iter()
            .filter(|e| e.record.depth > 0 && e.record.status.is_live())
            .filter_map(|e| e.actor.clone().map(|a| (e.record.id, a)))
            .collect()
    }

    /// Live agents (depth ≥ 1).
    pub(crate) fn live(&self) -> usize {
        self.inner.lock().live
    }

    /// Waits until no agent is live.
    pub(crate) async fn idle(&self) {
        let mut live = self.inner.lock().live_tx.subscribe();
        // The sender lives as long as the registry, which `&self` keeps alive.
        let _ = live.wait_for(|&n| n == 0).await;
    }

    /// Subscribes to every event from now on.
    pub(crate) fn subscribe(&self) -> EventStream {
        let (tx, rx) = mpsc::unbounded_channel();
        self.inner.lock().subscribers.push(tx);
        EventStream::new(rx)
    }

    /// The whole tree as it is now.
    pub(crate) fn snapshot(&self) -> TreeSnapshot {
        let now = self.now_ms();
        let inner = self.inner.lock();
        TreeSnapshot {
            session: self.session.clone(),
            taken_ms: now,
            records: inner.entries.iter().map(|e| e.record.clone()).collect(),
            tally: inner.tally.clone(),
            peak_live: inner.peak_live,
        }
    }

    /// Settles the root (the tree stopped).
    pub(crate) fn settle_root(&self) {
        let now = self.now_ms();
        let mut inner = self.inner.lock();
        let root = &mut inner.entries[0];
        root.record.status = AgentStatus::Completed;
        root.record.ended_ms = Some(now);
    }
}

impl Inner {
    fn entry(&self, id: AgentId) -> Option<&Entry> {
        usize::try_from(id.get())
            .ok()
            .and_then(|i| self.entries.get(i))
    }

    fn entry_mut(&mut self, id: AgentId) -> Option<&mut Entry> {
        usize::try_from(id.get())
            .ok()
            .and_then(|i| self.entries.get_mut(i))
    }

    fn settle(&mut self, id: AgentId, outcome: Outcome, now: u64) -> bool {
        let Some(entry) = self.entry_mut(id) else {
            return false;
        };
        let Ok(status) = entry.record.status.advance(outcome.status) else {
            return false;
        };
        entry.record.status = status;
        entry.record.ended_ms = Some(now);
        entry.record.outcome = Some(outcome.clone());
        entry.settled.send_replace(Some(outcome.clone()));
        let parent = entry.record.parent;
        if id.is_root() {
            return true;
        }
        self.live = self.live.saturating_sub(1);
        self.live_tx.send_replace(self.live);
        if let Some(parent) = parent.and_then(|p| self.entry_mut(p)) {
            parent.live_children = parent.live_children.saturating_sub(1);
        }
        let kind = match outcome.status {
            AgentStatus::Completed => EventKind::Completed,
            AgentStatus::Failed => EventKind::Failed {
                reason: outcome.reason,
                error: outcome.error.unwrap_or_default(),
            },
            AgentStatus::Killed => EventKind::Killed,
            _ => EventKind::Aborted {
                reason: outcome.reason,
            },
        };
        self.emit(id, kind, now);
        true
    }

    fn emit(&mut self, agent: AgentId, kind: EventKind, now: u64) {
        let Some((parent, depth)) = self.entry(agent).map(|e| (e.record.parent, e.record.depth))
        else {
            return;
        };
        self.seq += 1;
        let event = Event {
            seq: self.seq,
            agent,
            parent,
            depth,
            at_ms: now,
            kind,
        };
        self.tally.count(&event.kind);
        tracing::debug!(seq = event.seq, agent = %agent, event = event.kind.name(), "agent event");
        // Sending on an unbounded channel never blocks; closed subscribers are dropped here.
        self.subscribers.retain(|tx| tx.send(event.clone()).is_ok());
    }
}
