//! The root actor (depth 0): the supervisor of the top-level agents (and the link holder of
//! detached agents anywhere), and the starter of queued top-level background agents when
//! pool slots free.

use agent_tree_protocol::{AgentId, AgentStatus};
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

use crate::msg::{AgentMsg, SETTLED};
use crate::shared::SharedRef;
use crate::spawn;
use crate::supervision::{Action, ChildSupervisor};

/// The tree's own actor.
#[derive(Debug)]
pub(crate) struct RootActor;

/// The root's state.
#[derive(Debug)]
pub(crate) struct RootState {
    shared: SharedRef,
    /// Restart decisions for top-level agents (the config's root strategy and intensity).
    supervisor: ChildSupervisor,
}

impl RootState {
    /// Starts queued agents while pool slots are free, in FIFO order.
    async fn start_queued(&self, myself: &ActorRef<AgentMsg>) {
        // A failed start settles its record and frees its slot, so look again until the
        // queue or the pool is exhausted.
        loop {
            let batch = self.shared.registry.pool_next();
            if batch.is_empty() {
                break;
            }
            for ticket in batch {
                let id = ticket.id;
                if let Err(error) = spawn::start(&self.shared, ticket, myself).await {
                    tracing::warn!(agent = %id, %error, "queued agent failed to start");
                }
            }
        }
    }

    /// A top-level agent's run ended: restart it if its type and the root's intensity say
    /// so; past the intensity the root fails and every agent is aborted (as an OTP
    /// application stops when its top supervisor gives up).
    async fn child_ended(&mut self, myself: &ActorRef<AgentMsg>, child: AgentId, deferred: bool) {
        if deferred || self.supervisor.is_active() {
            let closing = self.shared.registry.status(AgentId::ROOT) != Some(AgentStatus::Running);
            let actions = self
                .supervisor
                .child_ended(&self.shared, AgentId::ROOT, myself, child, closing)
                .await;
            for action in actions {
                if let Action::Escalate(cause) = action {
                    tracing::error!(%cause, "root restart intensity exceeded; aborting the tree");
                    self.shared.registry.fail_root(cause);
                    return;
                }
            }
        }
        self.start_queued(myself).await;
    }
}

impl RootState {
    /// Runs the application's question handler for `child`'s question as a task, and sends
    /// the agent its answer or the refusal. The task ends when the agent settles first.
    fn asked(&self, child: AgentId, question: String, tag: (u32, u32)) {
        let shared = self.shared.clone();
        let Some(handler) = shared.hooks.questions.clone() else {
            let reason = "no one answers questions of top-level agents here".to_owned();
            send_to(&shared, child, AgentMsg::QuestionRefused { reason });
            return;
        };
        let Some(mut settled) = shared.registry.watch(child) else {
            return;
        };
        let agent_type = shared
            .registry
            .record(child)
            .map(|r| r.agent_type.clone())
            .unwrap_or_default();
        let asked = crate::hooks::Question {
            agent: child,
            agent_type,
            question,
        };
        let task_shared = shared.clone();
        shared.spawn(async move {
            let answer = tokio::select! {
                biased;
                _ = settled.wait_for(Option::is_some) => return,
                answer = crate::util::CatchUnwind::new(handler.answer(asked)) => answer,
            };
            let message = match answer {
                Ok(Ok(answer)) => AgentMsg::QuestionAnswered { answer, asked: tag },
                Ok(Err(reason)) => AgentMsg::QuestionRefused { reason },
                Err(panic) => AgentMsg::QuestionRefused {
                    reason: format!("the question handler panicked: {panic}"),
                },
            };
            send_to(&task_shared, child, message);
        });
    }
}

/// Sends `message` to `agent`'s actor, if it has one.
fn send_to(shared: &SharedRef, agent: AgentId, message: AgentMsg) {
    if let Some((_, actor)) = shared.registry.actors_of(&[agent]).first() {
        let _ = actor.send_message(message);
    }
}

impl Actor for RootActor {
    type Msg = AgentMsg;
    type State = RootState;
    type Arguments = SharedRef;

    async fn pre_start(
        &self,
        _myself: ActorRef<AgentMsg>,
        shared: SharedRef,
    ) -> Result<RootState, ActorProcessingErr> {
        let config = &shared.config;
        let supervisor = ChildSupervisor::new(
            config.root_strategy,
            config.root_max_restarts,
            config.root_restart_period,
        );
        Ok(RootState { shared, supervisor })
    }

    async fn handle(
        &self,
        myself: ActorRef<AgentMsg>,
        message: AgentMsg,
        state: &mut RootState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            AgentMsg::ChildEnded {
                child, deferred, ..
            } => state.child_ended(&myself, child, deferred).await,
            // The pool grew: slots may be free.
            AgentMsg::PoolChanged => state.start_queued(&myself).await,
            // A top-level agent's question: the application's handler answers it (the agent
            // is offered `ask_owner` only when there is one); `Tree::steer` may answer too.
            AgentMsg::ChildAsked {
                child,
                question,
                asked,
            } => state.asked(child, question, asked),
            _ => {}
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<AgentMsg>,
        event: SupervisionEvent,
        state: &mut RootState,
    ) -> Result<(), ActorProcessingErr> {
        let (actor, failure) = match &event {
            // A settled agent's own notice is on its way.
            SupervisionEvent::ActorTerminated(_, _, Some(reason)) if reason == SETTLED => {
                return Ok(());
            }
            SupervisionEvent::ActorTerminated(cell, _, _) => (cell.get_id(), None),
            SupervisionEvent::ActorFailed(cell, error) => (cell.get_id(), Some(error.to_string())),
            _ => return Ok(()),
        };
        // A top-level agent, or a detached agent anywhere (linked here), died without
        // settling: settle it, and tell its owner by the notice a settling child sends.
        let Some((child, run, outcome, deferred, owner)) =
            state.shared.registry.lost_actor(actor, failure)
        else {
            return Ok(());
        };
        let parent = state.shared.registry.record(child).and_then(|r| r.parent);
        if parent == Some(AgentId::ROOT) {
            state.child_ended(&myself, child, deferred).await;
        } else if let Some(owner) = owner {
            let _ = owner.send_message(AgentMsg::ChildEnded {
                child,
                run,
                outcome,
                deferred,
            });
        }
        Ok(())
    }
}
