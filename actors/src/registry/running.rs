//! The plain writes of a running agent, each one transaction: a steer routed, a kill, the
//! run moving to `completing`, usage billed, a question announced, an event of its run.

use agent_tree_protocol::{AgentId, AgentStatus, EventKind, Message, Outcome, Usage};
use ractor::ActorCell;

use super::Registry;
use crate::error::ControlError;

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
}
