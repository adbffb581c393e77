//! Supervision in the actors: ractor's supervision events handled our way, and the restart
//! decisions of an owner (agent or root) carried out.
//!
//! ractor's default `handle_supervisor_evt` stops the parent when any child ends, even
//! normally; both of our actor types replace it and hand deferred exits to a
//! [`ChildSupervisor`], which reports what it did as [`Action`]s.

use std::collections::VecDeque;
use std::time::Duration;

use agent_tree_protocol::{AgentId, AgentStatus, RestartPolicy, Strategy};
use ractor::{ActorId, ActorRef};
use tokio::time::Instant;

use crate::msg::AgentMsg;
use crate::shared::SharedRef;
use crate::spawn;
use crate::supervisor::{self, RestartBudget};

/// What a supervisor did about its children, for the owner's child table: the owner never
/// reads its children's states back.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// The child's deferred exit is final now (not restarted).
    Released(AgentId),
    /// The child runs again: run `run` on `actor`.
    Restarted {
        id: AgentId,
        run: u32,
        actor: ActorId,
    },
    /// A restart failed to start: the child's outcome is final, as recorded.
    StartFailed(AgentId, agent_tree_protocol::Outcome),
    /// The restart intensity is exceeded: the owner fails with this cause (the original
    /// failure, kept).
    Escalate(String),
}

/// The restart state of one owner: its strategy, its intensity window and a restart in
/// progress (siblings being stopped one by one, in reverse start order).
#[derive(Debug)]
pub(crate) struct ChildSupervisor {
    strategy: Strategy,
    budget: RestartBudget,
    /// Siblings still to stop, in stop order, and every child to restart, in start order.
    active: Option<(VecDeque<AgentId>, Vec<AgentId>)>,
    /// Failures that arrived while a restart was under way.
    deferred: VecDeque<AgentId>,
}

impl ChildSupervisor {
    pub(crate) fn new(strategy: Strategy, max_restarts: u32, period: Duration) -> Self {
        ChildSupervisor {
            strategy,
            budget: RestartBudget::new(max_restarts, period),
            active: None,
            deferred: VecDeque::new(),
        }
    }

    /// Whether a restart plan is under way (siblings being stopped).
    pub(crate) fn is_active(&self) -> bool {
        self.active.is_some()
    }

    /// A child of `owner` ended (deferred to this owner's decision, or a sibling a plan is
    /// stopping). `closing` is true when the owner itself is ending: nothing is restarted
    /// then. Failures that arrive while a restart is under way are taken up, in order, once
    /// it is done. Returns what was done, for the owner's child table.
    pub(crate) async fn child_ended(
        &mut self,
        shared: &SharedRef,
        owner: AgentId,
        owner_actor: &ActorRef<AgentMsg>,
        child: AgentId,
        closing: bool,
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        let mut next = Some(child);
        while let Some(ended) = next {
            self.one_ended(shared, owner, owner_actor, ended, closing, &mut actions)
                .await;
            if matches!(actions.last(), Some(Action::Escalate(_))) {
                break;
            }
            next = self.next_deferred();
        }
        actions
    }

    async fn one_ended(
        &mut self,
        shared: &SharedRef,
        owner: AgentId,
        owner_actor: &ActorRef<AgentMsg>,
        child: AgentId,
        closing: bool,
        actions: &mut Vec<Action>,
    ) {
        let registry = &shared.registry;
        if closing {
            // The owner is ending: no plan goes on, nothing restarts.
            self.active = None;
            release(registry, child, actions);
            for deferred in self.deferred.drain(..) {
                release(registry, deferred, actions);
            }
            return;
        }
        if let Some((stopping, _)) = &mut self.active {
            // The sibling being stopped has ended, held for the restart or final because
            // something else ended it for good (a shutdown): the plan moves on either way.
            let ended = !registry.status(child).is_some_and(AgentStatus::is_live);
            if ended && stopping.front() == Some(&child) {
                stopping.pop_front();
                return self.advance(shared, owner_actor, actions).await;
            }
        }
        if !registry.awaiting_supervisor(child) {
            return;
        }
        if let Some((stopping, _)) = &mut self.active {
            // Another child ended while a restart is under way: decide after it.
            stopping.retain(|&c| c != child);
            if !self.deferred.contains(&child) {
                self.deferred.push_back(child);
            }
            return;
        }
        self.begin(shared, owner, owner_actor, child, actions).await;
    }

    async fn begin(
        &mut self,
        shared: &SharedRef,
        owner: AgentId,
        owner_actor: &ActorRef<AgentMsg>,
        child: AgentId,
        actions: &mut Vec<Action>,
    ) {
        let registry = &shared.registry;
        if !self.budget.try_add(Instant::now()) {
            release(registry, child, actions);
            let cause = registry
                .record(child)
                .map(|r| {
                    let outcome = r.outcome.map(|o| o.summary()).unwrap_or_default();
                    format!("{} {} {}", r.agent_type, r.id, outcome)
                })
                .unwrap_or_else(|| child.to_string());
            // The owner fails: failures still waiting for a decision are final too.
            for deferred in self.deferred.drain(..) {
                release(registry, deferred, actions);
            }
            actions.push(Action::Escalate(cause));
            return;
        }
        let children = registry.children_of(owner);
        let live: Vec<bool> = children.iter().map(|&(_, live)| live).collect();
        let Some(index) = children.iter().position(|&(c, _)| c == child) else {
            release(registry, child, actions);
            return;
        };
        let plan = supervisor::plan(self.strategy, index, &live);
        let stop = plan.stop.iter().map(|&i| children[i].0).collect();
        let restart = plan.restart.iter().map(|&i| children[i].0).collect();
        self.active = Some((stop, restart));
        self.advance(shared, owner_actor, actions).await;
    }

    /// Stops the next sibling, or, when all are stopped, restarts every child of the plan in
    /// start order and takes up deferred failures.
    async fn advance(
        &mut self,
        shared: &SharedRef,
        owner_actor: &ActorRef<AgentMsg>,
        actions: &mut Vec<Action>,
    ) {
        let registry = &shared.registry;
        let Some((stopping, _)) = &mut self.active else {
            return;
        };
        while let Some(&next) = stopping.front() {
            if registry.status(next).is_some_and(|s| s.is_live()) {
                registry.hold_and_abort(next);
                return;
            }
            // It ended by itself meanwhile; a final one is not restarted.
            stopping.pop_front();
        }
        let Some((_, restart)) = self.active.take() else {
            return;
        };
        for id in restart {
            if !registry.awaiting_supervisor(id) {
                continue;
            }
            if registry.restart_policy(id) == RestartPolicy::Temporary {
                release(registry, id, actions);
                continue;
            }
            let Some(ticket) = registry.restart(id) else {
                continue;
            };
            let run = ticket.run;
            tracing::debug!(agent = %id, run, "restarting");
            match spawn::start(shared, ticket, owner_actor).await {
                Ok(actor) => actions.push(Action::Restarted {
                    id,
                    run,
                    actor: actor.get_id(),
                }),
                Err(error) => {
                    tracing::warn!(agent = %id, %error, "restart failed to start");
                    if let Some(outcome) = registry.outcome(id) {
                        actions.push(Action::StartFailed(id, outcome));
                    }
                }
            }
        }
    }

    /// A failure deferred while a restart was under way, to be handled now.
    fn next_deferred(&mut self) -> Option<AgentId> {
        if self.active.is_some() {
            return None;
        }
        self.deferred.pop_front()
    }
}

/// Makes `child`'s deferred exit final, and says so.
fn release(registry: &crate::registry::Registry, child: AgentId, actions: &mut Vec<Action>) {
    registry.release(child);
    actions.push(Action::Released(child));
}
