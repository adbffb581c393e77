//! Supervision in the actors: ractor's supervision events handled our way, and the restart
//! decisions of an owner (agent or root) carried out.
//!
//! ractor's default `handle_supervisor_evt` stops the parent when any child ends, even
//! normally; both of our actor types replace it with [`lost_actor`] and a
//! [`ChildSupervisor`].

use std::collections::VecDeque;
use std::time::Duration;

use agent_tree_protocol::{AgentId, AgentStatus, RestartPolicy, Strategy};
use ractor::{ActorRef, SupervisionEvent};

use crate::msg::AgentMsg;
use crate::policy::restart::{Intensity, RestartBudget};
use crate::policy::strategy;
use crate::registry::Registry;
use crate::shared::SharedRef;
use crate::spawn;

/// Handles a child's supervision event: a child whose current actor ended without settling
/// itself is settled (failed after an actor failure, killed otherwise). Returns the child's
/// agent id when the event is about its current actor.
pub(crate) fn lost_actor(registry: &Registry, event: &SupervisionEvent) -> Option<AgentId> {
    match event {
        SupervisionEvent::ActorTerminated(cell, _, _) => registry.lost_actor(cell.get_id(), None),
        SupervisionEvent::ActorFailed(cell, error) => {
            registry.lost_actor(cell.get_id(), Some(error.to_string()))
        }
        _ => None,
    }
}

/// What the owner should make of a child's end. Which children are live again, or final,
/// is read from the registry afterwards.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing more for the owner to do.
    Continue,
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

    /// A child of `owner` ended (or its notice arrived). `closing` is true when the owner
    /// itself is ending: nothing is restarted then. Failures that arrive while a restart is
    /// under way are taken up, in order, once it is done.
    pub(crate) async fn child_ended(
        &mut self,
        shared: &SharedRef,
        owner: AgentId,
        owner_actor: &ActorRef<AgentMsg>,
        child: AgentId,
        closing: bool,
    ) -> Verdict {
        let mut next = Some(child);
        while let Some(ended) = next {
            let verdict = self
                .one_ended(shared, owner, owner_actor, ended, closing)
                .await;
            if verdict != Verdict::Continue {
                return verdict;
            }
            next = self.next_deferred();
        }
        Verdict::Continue
    }

    async fn one_ended(
        &mut self,
        shared: &SharedRef,
        owner: AgentId,
        owner_actor: &ActorRef<AgentMsg>,
        child: AgentId,
        closing: bool,
    ) -> Verdict {
        let registry = &shared.registry;
        if closing {
            // The owner is ending: no plan goes on, nothing restarts.
            self.active = None;
            registry.release(child);
            return Verdict::Continue;
        }
        if let Some((stopping, _)) = &mut self.active {
            // The sibling being stopped has ended, held for the restart or final because
            // something else ended it for good (a shutdown): the plan moves on either way.
            let ended = !registry.status(child).is_some_and(AgentStatus::is_live);
            if ended && stopping.front() == Some(&child) {
                stopping.pop_front();
                return self.advance(shared, owner_actor).await;
            }
        }
        if !registry.awaiting_supervisor(child) {
            return Verdict::Continue;
        }
        if let Some((stopping, _)) = &mut self.active {
            // Another child ended while a restart is under way: decide after it.
            stopping.retain(|&c| c != child);
            if !self.deferred.contains(&child) {
                self.deferred.push_back(child);
            }
            return Verdict::Continue;
        }
        self.begin(shared, owner, owner_actor, child).await
    }

    async fn begin(
        &mut self,
        shared: &SharedRef,
        owner: AgentId,
        owner_actor: &ActorRef<AgentMsg>,
        child: AgentId,
    ) -> Verdict {
        let registry = &shared.registry;
        if self.budget.try_add(registry.epoch().elapsed()) == Intensity::Exceeded {
            registry.release(child);
            let cause = registry
                .record(child)
                .map(|r| {
                    let outcome = r.outcome.map(|o| o.summary()).unwrap_or_default();
                    format!("{} {} {}", r.agent_type, r.id, outcome)
                })
                .unwrap_or_else(|| child.to_string());
            // The owner fails: failures still waiting for a decision are final too.
            for deferred in self.deferred.drain(..) {
                registry.release(deferred);
            }
            return Verdict::Escalate(cause);
        }
        let children = registry.children_of(owner);
        let live: Vec<bool> = children.iter().map(|&(_, live)| live).collect();
        let Some(index) = children.iter().position(|&(c, _)| c == child) else {
            registry.release(child);
            return Verdict::Continue;
        };
        let plan = strategy::plan(self.strategy, index, &live);
        let stop = plan.stop.iter().map(|&i| children[i].0).collect();
        let restart = plan.restart.iter().map(|&i| children[i].0).collect();
        self.active = Some((stop, restart));
        self.advance(shared, owner_actor).await
    }

    /// Stops the next sibling, or, when all are stopped, restarts every child of the plan in
    /// start order and takes up deferred failures.
    async fn advance(&mut self, shared: &SharedRef, owner_actor: &ActorRef<AgentMsg>) -> Verdict {
        let registry = &shared.registry;
        let Some((stopping, _)) = &mut self.active else {
            return Verdict::Continue;
        };
        while let Some(&next) = stopping.front() {
            if registry.status(next).is_some_and(|s| s.is_live()) {
                registry.hold_and_abort(next);
                return Verdict::Continue;
            }
            // It ended by itself meanwhile; a final one is not restarted.
            stopping.pop_front();
        }
        let Some((_, restart)) = self.active.take() else {
            return Verdict::Continue;
        };
        for id in restart {
            if !registry.awaiting_supervisor(id) {
                continue;
            }
            if registry.restart_policy(id) == RestartPolicy::Temporary {
                registry.release(id);
                continue;
            }
            let Some((depth, token, spec)) = registry.restart(id) else {
                continue;
            };
            tracing::debug!(agent = %id, "restarting");
            if let Err(error) = spawn::start(shared, id, depth, token, owner_actor, spec).await {
                tracing::warn!(agent = %id, %error, "restart failed to start");
            }
        }
        Verdict::Continue
    }

    /// A failure deferred while a restart was under way, to be handled now.
    fn next_deferred(&mut self) -> Option<AgentId> {
        if self.active.is_some() {
            return None;
        }
        self.deferred.pop_front()
    }
}
