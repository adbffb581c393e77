//! The one child table of an agent, and how a child's end reaches it.
//!
//! A child's end arrives once, by one path: the child's own [`AgentMsg::ChildEnded`] notice
//! (sent after its usage and settle are recorded), or, for a child whose actor died without
//! settling, ractor's supervision event, which the owner turns into the same handling after
//! settling the child in the registry. A settled child stops with the reason
//! [`SETTLED`], so its supervision event is told apart from a death. Each end is keyed by the
//! child's run, so a late notice of an earlier run (before a restart or resume) is ignored.

use crate::util::IdMap;

use agent_tree_protocol::{AgentId, EndReason, Outcome};
use ractor::{ActorId, ActorRef, SupervisionEvent};

use super::AgentState;
use super::Inbound;
use super::lifecycle::Phase;
use crate::msg::{AgentMsg, SETTLED};
use crate::policy::settle;
use crate::supervision::Action;

/// An agent's children, in start order, with a count of the non-detached ones whose outcome
/// is not final. Past [`INDEX_FROM`] children they are also indexed by id and by their current
/// run's actor, so a child's end, the settle check and a supervision event each cost O(1)
/// whatever the number of children; below it a scan of a few entries is cheaper than two maps
/// per agent.
#[derive(Debug, Default)]
pub(super) struct Children {
    list: Vec<Child>,
    index: Option<Box<ChildIndex>>,
    /// Non-detached children not in [`ChildState::Final`].
    unsettled: usize,
}

/// How many children an agent has before its table is indexed.
const INDEX_FROM: usize = 16;

/// The places of the children in [`Children::list`].
#[derive(Debug, Default)]
struct ChildIndex {
    by_id: IdMap<AgentId, usize>,
    by_actor: IdMap<ActorId, usize>,
}

/// One child, as its owner knows it.
#[derive(Debug)]
pub(super) struct Child {
    pub(super) id: AgentId,
    /// Its current run.
    run: u32,
    /// Its current run's actor.
    actor: Option<ActorId>,
    pub(super) detached: bool,
    /// Spawned in the background: its end is noticed in the conversation unless its result
    /// was read or awaited.
    pub(super) background: bool,
    pub(super) state: ChildState,
}

/// Where a child is, as its owner knows it.
#[derive(Debug)]
pub(super) enum ChildState {
    /// Its run goes on.
    Running,
    /// Its run ended and waits for this owner's restart decision.
    Deferred(Outcome),
    /// Its outcome is final (the registry holds it: one owner, so a released output is
    /// released here too); `read` once a tool returned it.
    Final { read: bool },
}

impl Children {
    /// A child (new, resumed or restarted) starts run `run` on `actor`.
    pub(super) fn started(
        &mut self,
        id: AgentId,
        run: u32,
        actor: Option<ActorId>,
        detached: bool,
        background: bool,
    ) {
        let place = match self.place(id) {
            Some(place) => {
                let child = &mut self.list[place];
                let old = child.actor.take();
                child.run = run;
                child.background = background;
                if let (Some(index), Some(old)) = (self.index.as_mut(), old) {
                    index.by_actor.remove(&old);
                }
                place
            }
            None => {
                self.list.push(Child {
                    id,
                    run,
                    actor: None,
                    detached,
                    background,
                    // Counted as running by the `set_state` below.
                    state: ChildState::Final { read: true },
                });
                let place = self.list.len() - 1;
                match self.index.as_mut() {
                    Some(index) => {
                        index.by_id.insert(id, place);
                    }
                    None if self.list.len() > INDEX_FROM => self.build_index(),
                    None => {}
                }
                place
            }
        };
        self.list[place].actor = actor;
        if let (Some(index), Some(actor)) = (self.index.as_mut(), actor) {
            index.by_actor.insert(actor, place);
        }
        self.set_state(place, ChildState::Running);
    }

    /// Indexes the table (it grew past [`INDEX_FROM`]).
    fn build_index(&mut self) {
        let mut index = ChildIndex::default();
        for (place, child) in self.list.iter().enumerate() {
            index.by_id.insert(child.id, place);
            if let Some(actor) = child.actor {
                index.by_actor.insert(actor, place);
            }
        }
        self.index = Some(Box::new(index));
    }

    /// The place of child `id` in the list.
    fn place(&self, id: AgentId) -> Option<usize> {
        match &self.index {
            Some(index) => index.by_id.get(&id).copied(),
            None => self.list.iter().position(|c| c.id == id),
        }
    }

    /// Moves the child at `index` to `state`, keeping the unsettled count.
    fn set_state(&mut self, index: usize, state: ChildState) {
        let child = &mut self.list[index];
        let was = !child.detached && !matches!(child.state, ChildState::Final { .. });
        let is = !child.detached && !matches!(state, ChildState::Final { .. });
        child.state = state;
        match (was, is) {
            (false, true) => self.unsettled += 1,
            (true, false) => self.unsettled -= 1,
            _ => {}
        }
    }

    /// Child `id`'s outcome is final.
    pub(super) fn set_final(&mut self, id: AgentId) {
        if let Some(index) = self.place(id) {
            self.set_state(index, ChildState::Final { read: false });
        }
    }

    /// Child `id`'s run ended and waits for this owner's restart decision.
    fn set_deferred(&mut self, id: AgentId, outcome: Outcome) {
        if let Some(index) = self.place(id) {
            self.set_state(index, ChildState::Deferred(outcome));
        }
    }

    /// Whether every non-detached child's outcome is final.
    pub(super) fn all_settled(&self) -> bool {
        self.unsettled == 0
    }

    pub(super) fn get(&self, id: AgentId) -> Option<&Child> {
        self.place(id).map(|i| &self.list[i])
    }

    fn get_mut(&mut self, id: AgentId) -> Option<&mut Child> {
        self.place(id).map(|i| &mut self.list[i])
    }

    /// Whether child `id`'s outcome is final.
    pub(super) fn is_final(&self, id: AgentId) -> bool {
        self.get(id)
            .is_some_and(|c| matches!(c.state, ChildState::Final { .. }))
    }

    /// Whether run `run` of child `id` is its current run, and goes on (its end not handled).
    pub(super) fn is_running_run(&self, id: AgentId, run: u32) -> bool {
        self.get(id)
            .is_some_and(|c| c.run == run && matches!(c.state, ChildState::Running))
    }

    /// Child `id` asked a question: waits on it were answered with the question, so its end
    /// will be noticed like a background child's.
    pub(super) fn asked(&mut self, id: AgentId) {
        if let Some(child) = self.get_mut(id) {
            child.background = true;
        }
    }

    /// Child `id`'s final outcome was returned by a tool. Returns whether it was unread.
    fn mark_read(&mut self, id: AgentId) -> bool {
        match self.get_mut(id) {
            Some(Child {
                state: ChildState::Final { read },
                ..
            }) => !std::mem::replace(read, true),
            _ => false,
        }
    }

    /// The child whose current run runs on `actor`.
    fn by_actor(&self, actor: ActorId) -> Option<(AgentId, u32)> {
        let child = match &self.index {
            Some(index) => &self.list[*index.by_actor.get(&actor)?],
            None => self.list.iter().find(|c| c.actor == Some(actor))?,
        };
        matches!(child.state, ChildState::Running).then_some((child.id, child.run))
    }

    /// Non-detached children whose outcome is not final yet.
    pub(super) fn unsettled(&self) -> impl Iterator<Item = &Child> {
        self.list
            .iter()
            .filter(|c| !c.detached && !matches!(c.state, ChildState::Final { .. }))
    }

    /// Children whose exit waits for a restart decision.
    pub(super) fn deferred(&self) -> Vec<AgentId> {
        self.list
            .iter()
            .filter(|c| matches!(c.state, ChildState::Deferred(_)))
            .map(|c| c.id)
            .collect()
    }

    /// Makes a deferred child's outcome final.
    fn finalize(&mut self, id: AgentId) -> Option<Outcome> {
        let ChildState::Deferred(outcome) = &self.get(id)?.state else {
            return None;
        };
        let outcome = outcome.clone();
        self.set_final(id);
        Some(outcome)
    }
}

impl AgentState {
    /// Run `run` of `child` ended with `outcome` (`deferred`: its exit waits for this
    /// owner's restart decision).
    pub(super) async fn on_child_ended(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        child: AgentId,
        run: u32,
        outcome: Outcome,
        deferred: bool,
    ) {
        let Some(entry) = self.children.get(child) else {
            return;
        };
        if entry.run != run {
            // A late notice of an earlier run.
            return;
        }
        match &entry.state {
            ChildState::Running if deferred => self.children.set_deferred(child, outcome),
            ChildState::Running => {
                self.children.set_final(child);
                self.child_final(child, &outcome);
            }
            // The registry made a deferred exit final (an abort or a shutdown landed before
            // this owner decided): final here too.
            ChildState::Deferred(_) if !deferred => {
                if let Some(outcome) = self.children.finalize(child) {
                    self.child_final(child, &outcome);
                }
            }
            // An end already handled.
            _ => return,
        }
        // A question the ended run asked is nobody's now: a wait on a later run of the child
        // (a restart or a resume) is not answered with it, and no steer answers it.
        self.open_questions.remove(&child);
        let active = self.supervisor.as_ref().is_some_and(|s| s.is_active());
        if deferred || active {
            let closing = self.phase.run_over() || self.token.is_cancelled();
            let (shared, id) = (self.shared.clone(), self.id);
            let actions = self
                .supervisor()
                .child_ended(&shared, id, myself, child, closing)
                .await;
            if self.apply_supervision(myself, actions) {
                return;
            }
        }
        match self.phase {
            // A call this end answered may complete the turn's calls.
            Phase::Acting { .. } => self.after_answer(myself),
            Phase::Ending { .. } => self.try_settle(myself),
            _ => {}
        }
    }

    /// Carries out what the supervisor did. Returns whether the run ended (escalation).
    pub(super) fn apply_supervision(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        actions: Vec<Action>,
    ) -> bool {
        let mut escalated = None;
        for action in actions {
            match action {
                Action::Released(id) => {
                    if let Some(outcome) = self.children.finalize(id) {
                        self.child_final(id, &outcome);
                    }
                }
                Action::Restarted { id, run, actor } => {
                    let (detached, background) = self
                        .children
                        .get(id)
                        .map(|c| (c.detached, c.background))
                        .unwrap_or_default();
                    self.children
                        .started(id, run, Some(actor), detached, background);
                }
                Action::StartFailed(id, outcome) => {
                    self.children.set_final(id);
                    self.child_final(id, &outcome);
                }
                Action::Escalate(cause) => escalated = Some(cause),
            }
        }
        if let Some(cause) = escalated {
            let outcome = Outcome::failed(EndReason::Escalated, cause).with_partial(self.partial());
            self.end_run(myself, outcome);
            return true;
        }
        false
    }

    /// A child's outcome became final: calls waiting for it are answered; a background
    /// child's end whose result was neither read nor awaited is noticed in the conversation.
    fn child_final(&mut self, child: AgentId, outcome: &Outcome) {
        let waited = self
            .phase
            .current_calls()
            .is_some_and(|calls| calls.waits_on(child));
        if waited {
            self.answer_waits_on(child, outcome);
            return;
        }
        let run = self.children.get(child).map_or(0, |c| c.run);
        let row = self.children.get(child).map(|c| settle::ChildRow {
            background: c.background,
            read: false,
            awaited: false,
        });
        if row.is_some_and(|row| settle::notice_due(&row)) {
            // Structured: the runtime's fields apart from the child's text, so a child's
            // answer cannot pose as a notice about another agent.
            let mut notice = super::orchestration::result_value(child, Some(outcome));
            notice["notice"] = serde_json::json!("subagent_ended");
            self.inbox.push_back(Inbound::Ended {
                child,
                run,
                text: notice.to_string(),
            });
            // The notice carries the output to the model: read, for the retention policy
            // (the table's flag stays: a notice is not a tool's answer).
            if self.shared.journal.is_some() {
                self.shared.registry.output_read(child);
            }
        }
    }

    /// Child `id`'s final outcome was returned by a tool: read, in the table and, in a
    /// journaled tree, for the retention policy.
    /// A notice of that run's end still waiting for the next turn boundary is taken back:
    /// the tool's answer carries the result, and the model reads it once. (The outcome a
    /// tool reads is the child's current run's.)
    pub(super) fn mark_read(&mut self, id: AgentId) {
        if let Some(current) = self.children.get(id).map(|c| c.run) {
            self.inbox.retain(|inbound| {
                !matches!(inbound, Inbound::Ended { child, run, .. }
                    if *child == id && *run == current)
            });
        }
        if self.children.mark_read(id) && self.shared.journal.is_some() {
            self.shared.registry.output_read(id);
        }
    }

    /// Answers the calls waiting on child `child`, whose outcome is final: from the
    /// registry's record, or, when its output was released to the journal, once a task has
    /// read it back ([`AgentMsg::OutputRead`]), so the actor never waits on the disk.
    pub(super) fn answer_from_record(&mut self, myself: &ActorRef<AgentMsg>, child: AgentId) {
        let Some(outcome) = self.shared.registry.outcome(child) else {
            return;
        };
        if !outcome.released {
            self.answer_waits_on(child, &outcome);
            return;
        }
        let shared = self.shared.clone();
        let reply_to = myself.clone();
        self.shared.spawn(async move {
            let outcome = shared.whole_outcome(child, outcome).await;
            let _ = reply_to.cast(AgentMsg::OutputRead { child, outcome });
        });
    }

    /// A released output of child `child` was read back: the calls still waiting on it
    /// are answered (unless the child runs again: a resume came first).
    pub(super) fn on_output_read(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        child: AgentId,
        outcome: Outcome,
    ) {
        if !self.children.is_final(child) {
            return;
        }
        if self.answer_waits_on(child, &outcome) && matches!(self.phase, Phase::Acting { .. }) {
            self.after_answer(myself);
        }
    }

    /// A supervision event about a linked actor: a child that died without settling is
    /// settled here (failed after an actor failure, killed otherwise), and what its owner
    /// must then handle as its end is returned; every other event (a start, a settled
    /// child's termination, ractor's own) is nothing to do.
    /// Synchronous, so the owner's await path is entered (and its future boxed) only for a
    /// lost child, not for each child's start.
    pub(super) fn on_supervision_event(
        &mut self,
        event: &SupervisionEvent,
    ) -> Option<(AgentId, u32, Outcome, bool)> {
        let (actor, failure) = match event {
            SupervisionEvent::ActorTerminated(_, _, Some(reason)) if reason == SETTLED => {
                return None;
            }
            SupervisionEvent::ActorTerminated(cell, _, _) => (cell.get_id(), None),
            SupervisionEvent::ActorFailed(cell, error) => (cell.get_id(), Some(error.to_string())),
            _ => return None,
        };
        let (child, run) = self.children.by_actor(actor)?;
        let (outcome, deferred) = self.shared.registry.lost(child, run, failure)?;
        Some((child, run, outcome, deferred))
    }
}
