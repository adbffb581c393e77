//! How a run ends: the settle policy for live children, aborts, a shutdown's hooks under its
//! deadline, and the settle itself (registry first, then the owner, then the actor stops).

use agent_tree_protocol::{AgentStatus, EndReason, Outcome};
use ractor::ActorRef;

use super::AgentState;
use super::Inbound;
use super::lifecycle::{AfterHooks, Phase};
use crate::hooks::{self, HookContext};
use crate::msg::{AgentMsg, SETTLED, ShutdownOrder};
use crate::policy::settle;

impl AgentState {
    /// The agent's own run ended with `outcome`: deal with live children per the settle
    /// policy, then settle once their outcomes are final.
    pub(super) fn end_run(&mut self, myself: &ActorRef<AgentMsg>, outcome: Outcome) {
        self.cancel_tasks();
        // Calls left unanswered get their results first: nothing may come between a turn's
        // calls and their results.
        self.close_calls();
        self.keep_unread_steers();
        // Open questions can no longer get an answer.
        for child in std::mem::take(&mut self.open_questions).into_keys() {
            self.refuse_question(child);
        }
        // Nothing restarts under an owner whose run has ended.
        for child in self.children.deferred() {
            self.shared.registry.release(child);
            let actions = vec![crate::supervision::Action::Released(child)];
            self.apply_supervision(myself, actions);
        }
        // The pure rule (policy::settle::run_end); `self.settle` already holds the resumed
        // run's override.
        let owned: Vec<settle::Owned> = self
            .children
            .unsettled()
            .map(|c| settle::Owned {
                id: c.id,
                settled: false,
                detached: c.detached,
            })
            .collect();
        match settle::run_end(&outcome, self.settle, false, &owned) {
            settle::RunEnd::Settle => {}
            settle::RunEnd::Abort(live) => {
                for child in live {
                    let _ = self.shared.registry.abort(child, EndReason::OwnerEnded);
                }
            }
            settle::RunEnd::Drain(_) => self.shared.registry.completing(self.id, &outcome),
        }
        self.phase = Phase::Ending {
            outcome: Box::new(outcome),
        };
        self.try_settle(myself);
    }

    /// Aborted (its token fired): cancel in-flight work and end the run as aborted, keeping
    /// partial output. Children were cancelled with the token.
    ///
    /// An outcome already decided (the run ended and the agent holds it while its children
    /// end) stays: an abort only cuts what is still running.
    ///
    /// A cancellation by a shutdown reaches the agent before the shutdown's order (the
    /// registry cancels every token first, then sends every order): the run then waits for
    /// the order, whose hooks run before it ends.
    pub(super) fn abort(&mut self, myself: &ActorRef<AgentMsg>) {
        if self.phase.run_over() {
            return;
        }
        if self.shutdown.is_some() && self.run_shutdown_hooks(myself, None) {
            return;
        }
        let reason = self
            .shared
            .registry
            .abort_reason(self.id)
            .unwrap_or(EndReason::OwnerEnded);
        if reason == EndReason::Shutdown && self.shutdown.is_none() {
            // The order is on its way; stop what runs meanwhile.
            self.cancel_tasks();
            return;
        }
        let outcome = Outcome::ended(AgentStatus::Aborted, reason).with_partial(self.partial());
        self.end_run(myself, outcome);
    }

    /// A shutdown reached the agent: it runs its shutdown hooks under the deadline (keeping an
    /// outcome its run had already ended with), then ends.
    pub(super) fn on_shutdown(&mut self, myself: &ActorRef<AgentMsg>, order: ShutdownOrder) {
        if self.shutdown.is_some() || matches!(self.phase, Phase::Stopping { .. }) {
            // One shutdown at a time: an overlapping one waits on the same end.
            return;
        }
        self.shutdown = Some(order);
        let held = self.phase.held().cloned();
        if self.run_shutdown_hooks(myself, held.clone()) {
            return;
        }
        if held.is_none() {
            let outcome = Outcome::ended(AgentStatus::Aborted, EndReason::Shutdown)
                .with_partial(self.partial());
            self.end_run(myself, outcome);
        }
    }

    /// When a shutdown reached the agent and shutdown hooks are registered, runs them as a
    /// task bounded by the shutdown's deadline and returns `true`; the run ends when they
    /// finish ([`AgentMsg::ShutdownHooksFinished`]), with `held` if it had ended with it.
    fn run_shutdown_hooks(&mut self, myself: &ActorRef<AgentMsg>, held: Option<Outcome>) -> bool {
        let Some(order) = self.shutdown.clone() else {
            return false;
        };
        let shutdown_hooks = self.shared.hooks.on_shutdown.clone();
        if shutdown_hooks.is_empty() {
            return false;
        }
        self.cancel_tasks();
        // The call table does not outlive this phase: its calls get their results now.
        self.close_calls();
        let context = self.hook_context(Some(order.deadline));
        let reply_to = myself.clone();
        let id = self.id;
        // At the deadline the shutdown kills this agent if its hooks are still running and
        // cancels `killed`, which ends this task; `overdue`, a little later, is only a
        // backstop.
        order.hooked.lock().push((id, myself.clone()));
        // A task of the application's runtime: a hook that blocks its thread holds that
        // worker until it returns (the deadline bounds what awaits; see `shutdown`).
        let task = self.shared.spawn_in(self.span.span(), async move {
            let failures = tokio::select! {
                biased;
                () = order.killed.cancelled() => return,
                () = order.overdue.cancelled() => {
                    vec!["shutdown hook did not finish before the deadline".to_owned()]
                }
                failures = hooks::run_all(&shutdown_hooks, &context, false) => failures,
            };
            let _ = order.reports.send((id, failures.clone()));
            let _ = reply_to.cast(AgentMsg::ShutdownHooksFinished { failures });
        });
        self.phase = Phase::Stopping {
            task: task.abort_handle(),
            held: held.map(Box::new),
        };
        true
    }

    /// The shutdown hooks finished: the run ends as aborted by the shutdown, or with the
    /// outcome it had already ended with.
    pub(super) fn on_shutdown_hooks_finished(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        _failures: Vec<String>,
    ) {
        match self.phase.hooks_finished() {
            // The run had ended before the shutdown: its children were dealt with then;
            // settle with its outcome once they are final.
            Some(AfterHooks::Settle) => self.try_settle(myself),
            Some(AfterHooks::EndRun) => {
                let outcome = Outcome::ended(AgentStatus::Aborted, EndReason::Shutdown)
                    .with_partial(self.partial());
                self.end_run(myself, outcome);
            }
            None => {}
        }
    }

    pub(super) fn hook_context(&self, deadline: Option<tokio::time::Instant>) -> HookContext {
        HookContext {
            agent: self.id,
            agent_type: self.definition.name.clone(),
            depth: self.depth,
            deadline,
        }
    }

    /// Stops whatever the current phase runs (hooks, the model turn, tool calls).
    pub(super) fn cancel_tasks(&mut self) {
        self.phase.abort_task();
        if let Some(in_flight) = self.turn_in_flight.take() {
            // Dropped here: it bills what the model reported and never runs again.
            self.land(in_flight, false);
        }
        if let Some(calls) = self.phase.current_calls() {
            calls.abort_tasks();
        }
    }

    /// Settles once every non-detached child's outcome is final and no turn can still
    /// record usage: registry first, then the owner, then the actor stops.
    pub(super) fn try_settle(&mut self, myself: &ActorRef<AgentMsg>) {
        // A turn in flight might still record usage, which must precede the settle (a
        // cancelled one has left already: dropped, it billed).
        if self.turn_in_flight.is_some() || !self.children.all_settled() {
            return;
        }
        let Some(outcome) = self.phase.settle() else {
            return;
        };
        tracing::debug!(agent = %self.id, status = %outcome.status, "agent settled");
        // If another path settled this run first (a kill at a shutdown's deadline), the owner
        // was not told by this actor: it must hear of the end from the termination itself,
        // so the actor does not stop with the marker that says "a notice follows".
        let reason = if self.record_end(outcome) {
            SETTLED
        } else {
            "agent-tree: settled elsewhere"
        };
        myself.stop(Some(reason.to_owned()));
    }

    /// Tells the owner (its current actor: an owner restarted or resumed since the spawn has
    /// a new one, else the one it was spawned under) that this run ended.
    fn notify_owner(&self, outcome: Outcome, deferred: bool, owner: Option<ractor::ActorCell>) {
        let ended = AgentMsg::ChildEnded {
            child: self.id,
            run: self.run,
            outcome,
            deferred,
        };
        match owner {
            Some(actor) => {
                let _ = actor.send_message(ended);
            }
            None => {
                let _ = self.owner.cast(ended);
            }
        }
    }

    /// The actor stopped from outside without settling: end its tasks, and record it (and the
    /// children ractor is about to kill).
    pub(super) fn on_stopped_from_outside(&mut self) {
        if self.phase.is_done() {
            return;
        }
        self.token.cancel();
        self.cancel_tasks();
        self.close_calls();
        self.keep_unread_steers();
        let outcome =
            Outcome::ended(AgentStatus::Aborted, EndReason::Shutdown).with_partial(self.partial());
        self.shared.registry.kill_descendants(self.id);
        let _ = self.record_end(outcome);
        self.phase = Phase::Done;
    }

    /// Steers receipted `delivered` that no turn of this run will read (it ended): they stay
    /// in the conversation kept for a resume, and the registry keeps them for a restart's
    /// new run ([`crate::registry::Registry::keep_unread_steers`]). A delivered steer is
    /// never lost.
    fn keep_unread_steers(&mut self) {
        // In the order they came; those an earlier run kept were announced then.
        let (mut unread, mut fresh) = (Vec::new(), 0);
        for inbound in std::mem::take(&mut self.inbox) {
            match inbound {
                Inbound::Steer(text) => {
                    fresh += 1;
                    unread.push(text);
                }
                Inbound::Kept(text) => unread.push(text),
                Inbound::Notice(_) | Inbound::Ended { .. } => {}
            }
        }
        if unread.is_empty() {
            return;
        }
        for text in &unread {
            self.conversation
                .push(agent_tree_protocol::Message::user(text.clone()));
        }
        // Published now, as at a turn boundary: a kill before the settle (a deadline while
        // the children end) settles with what the cell holds, and a resume continues that.
        let messages = self.conversation.publish();
        self.conversation_cell.lock().messages = messages;
        self.shared
            .registry
            .keep_unread_steers(self.id, self.run, unread, fresh);
    }

    /// Records the run's end (outcome and conversation) and tells the owner. Returns whether
    /// this call settled the run (`false`: another path had settled it already).
    fn record_end(&mut self, outcome: Outcome) -> bool {
        // What this run published at its last turn boundary when nothing was added since (a
        // run's conversation only grows): the same messages, already shared, so the settle
        // keeps that copy instead of making another (most runs a shutdown ends are in a turn).
        let conversation = self.conversation.publish();
        match self
            .shared
            .registry
            .settle_run(self.id, self.run, outcome.clone(), conversation)
        {
            Some(settled) => {
                self.notify_owner(outcome, settled.deferred, settled.owner);
                true
            }
            None => false,
        }
    }
}
