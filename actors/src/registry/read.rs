//! Queries and the plain writes of a running agent: steering routes, ownership checks,
//! usage, `completing`, announcements, and what handles, waits and snapshots read.

use agent_tree_protocol::{
    AgentId, AgentRecord, AgentStatus, EventKind, Message, Outcome, TreeSnapshot, Usage,
};
use ractor::ActorCell;
use tokio::sync::{mpsc, watch};

use super::Registry;
use crate::config::ControlScope;
use crate::error::ControlError;
use crate::events::EventStream;
use crate::policy::control;

/// Where a steer goes.
#[derive(Debug)]
pub(crate) enum SteerRoute {
    /// Kept in the registry until the agent's session starts.
    Queued,
    /// To the agent's actor.
    Actor(ActorCell),
}

impl Registry {
    /// Routes a steer: queued in the registry while the agent has no session yet, else to its
    /// actor. A steer larger than `max_steer_bytes`, or past `max_steers_per_run` steers of
    /// this run, is refused here, whoever sent it.
    pub(crate) fn route_steer(
        &self,
        id: AgentId,
        text: String,
        config: &crate::config::TreeConfig,
    ) -> Result<SteerRoute, ControlError> {
        let mut inner = self.lock();
        let status = inner.status_of(id).ok_or(ControlError::NotYours(id))?;
        inner.refuse_mirrored(id)?;
        let entry = inner.entry_mut(id).ok_or(ControlError::NotYours(id))?;
        // A live agent whose run has ended refuses the steer itself (its actor answers).
        if status.is_terminal() {
            return Err(ControlError::WrongStatus(id, status));
        }
        // The text is judged only for an agent that could read it: an unknown id is not
        // yours, and a settled agent's status says why, whatever the text.
        if text.trim().is_empty() {
            return Err(ControlError::EmptySteer(id));
        }
        if text.len() > config.max_steer_bytes {
            return Err(ControlError::SteerTooLarge {
                agent: id,
                bytes: text.len(),
                limit: config.max_steer_bytes,
            });
        }
        if entry.steers >= config.max_steers_per_run {
            return Err(ControlError::TooManySteers {
                agent: id,
                limit: config.max_steers_per_run,
            });
        }
        entry.steers += 1;
        match &entry.actor {
            Some(actor) => Ok(SteerRoute::Actor(actor.clone())),
            None => {
                // Journaled before it is receipted `queued`: a crash before the agent's
                // start keeps it for the run a resume starts.
                if let Some(journal) = &inner.journal {
                    journal.steer(id, &text);
                }
                if let Some(entry) = inner.entry_mut(id) {
                    entry.pending_steers.push(text);
                }
                Ok(SteerRoute::Queued)
            }
        }
    }

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

    /// Kills `id`'s actor at once ([`Tree::kill`](crate::Tree::kill)).
    pub(crate) fn kill(&self, id: AgentId) -> Result<(), crate::error::ControlError> {
        use crate::error::ControlError;
        let status = self
            .status(id)
            .filter(|_| !id.is_root())
            .ok_or(ControlError::NotYours(id))?;
        self.refuse_mirrored(id)?;
        match self.actors_of(&[id]).first() {
            Some((_, actor)) if status.is_live() => {
                actor.kill();
                Ok(())
            }
            _ => Err(ControlError::WrongStatus(id, status)),
        }
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

    /// Moves a live agent to `completing` (its run ended with `outcome`, its children
    /// drain); the journal keeps the outcome it holds.
    pub(crate) fn completing(&self, id: AgentId, outcome: &Outcome) {
        let now = self.now_ms();
        let mut inner = self.lock();
        if inner
            .status_of(id)
            .is_some_and(|s| s.advance(AgentStatus::Completing).is_ok())
        {
            if let Some(journal) = &inner.journal {
                journal.decided(id, outcome);
            }
            inner.emit(id, EventKind::Completing, now);
        }
    }

    /// Bills one model call of run `run` of `id` to it and every ancestor, and announces it:
    /// `own` (the usage a response or a failed call carried) when given, else what the model
    /// last reported to the turn's `sink`. The sink's usage is taken either way, under the
    /// registry lock, so a settle that bills a cut-off turn ([`Inner::settle`](super::Inner))
    /// and the turn's own bill never both bill it.
    ///
    /// Nothing of an agent is recorded after its terminal event: a turn that returns after
    /// its run settled (its actor was killed meanwhile, or it was restarted) is dropped, with
    /// a warning, so the records and the event stream always agree. Returns what the call
    /// was billed (or would have been).
    pub(crate) fn bill_turn(
        &self,
        id: AgentId,
        run: u32,
        sink: &crate::model::TurnSink,
        own: Option<Usage>,
    ) -> Usage {
        if !sink.has_usage() && own.is_none_or(|u| u == Usage::default()) {
            // Nothing to record, and nothing a settle could bill either (only this turn
            // reports to its sink): no lock, no event, no walk up the ancestors.
            return Usage::default();
        }
        let now = self.now_ms();
        let mut inner = self.lock();
        let reported = sink.take_usage();
        let delta = own.unwrap_or(reported);
        if delta == Usage::default() {
            return delta;
        }
        if inner.status_of(id).is_none() {
            return delta;
        }
        if !inner.run_is_on(id, run) {
            drop(inner);
            tracing::warn!(agent = %id, run, ?delta, "usage of a turn that returned after its run settled is dropped");
            return delta;
        }
        // The fold adds the delta to the agent's own and every ancestor's subtree.
        inner.emit(id, EventKind::UsageReported { delta }, now);
        delta
    }

    /// Bills `delta`, spent on `id`'s behalf outside its model turns, to `id`'s current run.
    pub(crate) fn charge(&self, id: AgentId, delta: Usage) -> Result<(), ControlError> {
        let now = self.now_ms();
        let mut inner = self.lock();
        let status = inner.status_of(id).ok_or(ControlError::NotYours(id))?;
        if !status.is_live() {
            return Err(ControlError::WrongStatus(id, status));
        }
        if delta != Usage::default() {
            inner.emit(id, EventKind::UsageReported { delta }, now);
        }
        Ok(())
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

    /// Announces the question of run `run` of `id` (an `asked` event) and returns where it
    /// goes: its owner's current actor (a later run of the owner, restarted or resumed, owns
    /// the children of its earlier runs), `Some(None)` for an owner with no actor
    /// registered. `None`, announcing nothing, once that run settled (another path, a kill,
    /// settled it while its actor was asking): nothing of an agent follows its terminal
    /// event.
    ///
    /// With `asking` (the place of the `ask_owner` call and the assistant message it is
    /// in), the question is journaled first, in the same transaction: whoever sees the
    /// event, then flushes the journal, has made the question durable.
    pub(crate) fn ask(
        &self,
        id: AgentId,
        run: u32,
        question: String,
        asking: Option<(usize, &Message)>,
    ) -> Option<Option<ractor::ActorCell>> {
        let now = self.now_ms();
        let mut inner = self.lock();
        if !inner.run_is_on(id, run) {
            return None;
        }
        if let (Some(journal), Some((call, message))) = (inner.journal.as_ref(), asking) {
            journal.question(id, run, call, &question, message);
        }
        inner.emit(id, EventKind::Asked { question }, now);
        let owner = inner.rec(id).and_then(|r| r.parent);
        Some(owner.and_then(|o| inner.entry(o)?.actor.clone()))
    }

    /// Announces an event about `id` that changes no record, for what run `run` of `id`
    /// does while it runs (a turn's streamed text, a steer it read): dropped once that run
    /// settled, as a late bill is
    /// ([`Registry::bill_turn`]), so nothing of an agent follows its terminal event. (Its
    /// actor may be inside a poll of its turn while its owner's transaction settles it
    /// killed.)
    pub(crate) fn announce_run(&self, id: AgentId, run: u32, kind: EventKind) {
        let now = self.now_ms();
        let mut inner = self.lock();
        if inner.run_is_on(id, run) {
            inner.emit(id, kind, now);
        }
    }

    /// Waits until no agent is live.
    pub(crate) async fn idle(&self) {
        let mut live = self.lock().live_tx.subscribe();
        // The sender lives as long as the registry, which `&self` keeps alive.
        let _ = live.wait_for(|&n| n == 0).await;
    }
}
