//! Supervision glue: an owner's (agent's or root's) restart decisions carried out. The
//! decisions themselves are [`StrategyMachine`]'s, a pure machine with `now` passed in; this
//! module gathers the facts it needs, carries out each [`Step`] (stop, release, restart,
//! escalate) and reports back, and tells the owner what it did as [`Action`]s for its child
//! table.
//!
//! ractor's default `handle_supervisor_evt` stops the parent when any child ends, even
//! normally; both of our actor types replace it and hand deferred exits here.

use std::time::Duration;

use agent_tree_protocol::{AgentId, Outcome, Strategy};
use ractor::{ActorId, ActorRef};

use crate::msg::AgentMsg;
use crate::policy::strategy::{Owner, Step, StrategyMachine};
use crate::registry::Registry;
use crate::shared::SharedRef;
use crate::spawn;

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
    /// A restart could not start and the exit is final, as recorded.
    StartFailed(AgentId, Outcome),
    /// The restart intensity is exceeded: the owner fails with this cause (the original
    /// failure, kept).
    Escalate(String),
}

/// The restart state of one owner.
#[derive(Debug)]
pub(crate) struct ChildSupervisor {
    machine: StrategyMachine,
}

impl ChildSupervisor {
    pub(crate) fn new(strategy: Strategy, max_restarts: u32, period: Duration) -> Self {
        ChildSupervisor {
            machine: StrategyMachine::new(strategy, max_restarts, period),
        }
    }

    /// Whether a restart is under way: every child end must be reported then, not only
    /// deferred exits.
    pub(crate) fn is_active(&self) -> bool {
        self.machine.busy()
    }

    /// A child of `owner` ended (deferred to this owner's decision, or while a restart is
    /// under way). `closing` is true when the owner itself is ending: nothing is restarted
    /// then. Returns what was done, for the owner's child table.
    pub(crate) async fn child_ended(
        &mut self,
        shared: &SharedRef,
        owner: AgentId,
        owner_actor: &ActorRef<AgentMsg>,
        child: AgentId,
        closing: bool,
    ) -> Vec<Action> {
        let registry = &shared.registry;
        let mut actions = Vec::new();
        let state = if closing {
            Owner::Closing
        } else {
            Owner::Running
        };
        let now = registry.epoch().elapsed();
        let mut step = self
            .machine
            .ended(child, state, now, &registry.supervision_facts(owner));
        loop {
            match step {
                Step::Idle => break,
                Step::Stop(sibling) => {
                    // Its end comes back through `child_ended`.
                    registry.hold_and_abort(sibling);
                    break;
                }
                Step::Release(ids) => {
                    for id in ids {
                        release(registry, id, &mut actions);
                    }
                }
                Step::Restart(ids) => {
                    for id in ids {
                        self.restart(shared, owner_actor, id, &mut actions).await;
                    }
                }
                Step::Escalate {
                    cause,
                    release: ids,
                } => {
                    for id in ids {
                        release(registry, id, &mut actions);
                    }
                    actions.push(Action::Escalate(cause_of(registry, cause)));
                    break;
                }
            }
            let now = registry.epoch().elapsed();
            step = self.machine.next(now, &registry.supervision_facts(owner));
        }
        actions
    }

    /// Restarts `id`: a new run from its original request. A start that fails leaves the
    /// exit awaiting, and the machine retries it under the same intensity (OTP's
    /// `try_again_restart`).
    async fn restart(
        &mut self,
        shared: &SharedRef,
        owner_actor: &ActorRef<AgentMsg>,
        id: AgentId,
        actions: &mut Vec<Action>,
    ) {
        let registry = &shared.registry;
        let Some(ticket) = registry.restart(id) else {
            return;
        };
        let run = ticket.run;
        tracing::debug!(agent = %id, run, "restarting");
        match spawn::start_restart(shared, ticket, owner_actor).await {
            Ok(actor) => actions.push(Action::Restarted {
                id,
                run,
                actor: actor.get_id(),
            }),
            Err(error) => {
                tracing::warn!(agent = %id, %error, "restart failed to start; retrying");
                if registry.awaiting_supervisor(id) {
                    self.machine.restart_failed(id);
                } else if let Some(outcome) = registry.outcome(id) {
                    actions.push(Action::StartFailed(id, outcome));
                }
            }
        }
    }
}

/// Makes `child`'s deferred exit final, and says so.
fn release(registry: &Registry, child: AgentId, actions: &mut Vec<Action>) {
    registry.release(child);
    actions.push(Action::Released(child));
}

/// The escalation's cause: the exit that exceeded the intensity, as `type id outcome`.
fn cause_of(registry: &Registry, child: AgentId) -> String {
    registry
        .record(child)
        .map(|r| {
            let outcome = r.outcome.map(|o| o.summary()).unwrap_or_default();
            format!("{} {} {}", r.agent_type, r.id, outcome)
        })
        .unwrap_or_else(|| child.to_string())
}
