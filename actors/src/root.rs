//! The root actor (depth 0): the supervisor of the top-level agents, and the starter of
//! queued top-level background agents when pool slots free.

use agent_tree_protocol::AgentStatus;
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

use agent_tree_protocol::AgentId;

use crate::msg::AgentMsg;
use crate::shared::SharedRef;
use crate::spawn;
use crate::supervision::{self, ChildSupervisor, Verdict};

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
            for (id, token, pending) in batch {
                if let Err(error) = spawn::start(&self.shared, id, 1, token, myself, pending).await
                {
                    tracing::warn!(agent = %id, %error, "queued agent failed to start");
                }
            }
        }
    }

    /// A top-level agent ended: restart it if its type and the root's intensity say so; past
    /// the intensity the root fails and every agent is aborted (as an OTP application stops
    /// when its top supervisor gives up).
    async fn child_ended(&mut self, myself: &ActorRef<AgentMsg>, child: AgentId) {
        let closing = self.shared.registry.status(AgentId::ROOT) != Some(AgentStatus::Running);
        let verdict = self
            .supervisor
            .child_ended(&self.shared, AgentId::ROOT, myself, child, closing)
            .await;
        if let Verdict::Escalate(cause) = verdict {
            tracing::error!(%cause, "root restart intensity exceeded; aborting the tree");
            self.shared.registry.fail_root(cause);
            return;
        }
        self.start_queued(myself).await;
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
            // A notice from an earlier incarnation of a restarted agent is stale.
            AgentMsg::ChildSettled { child }
                if !state
                    .shared
                    .registry
                    .status(child)
                    .is_some_and(AgentStatus::is_live) =>
            {
                state.child_ended(&myself, child).await;
            }
            // The pool grew: slots may be free.
            AgentMsg::PoolChanged => state.start_queued(&myself).await,
            // Questions to the application are announced as `asked` events; the application
            // answers with `Tree::steer`.
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
        if let Some(child) = supervision::lost_actor(&state.shared.registry, &event) {
            // Detached agents anywhere in the tree are linked here; only top-level agents
            // are the root's to restart.
            let parent = state.shared.registry.record(child).and_then(|r| r.parent);
            if parent == Some(AgentId::ROOT) {
                state.child_ended(&myself, child).await;
            } else if let Some(owner) = parent {
                // A detached agent deeper down died without settling itself: its owner (not
                // this actor) must hear of it.
                if let Some((_, actor)) = state.shared.registry.actors_of(&[owner]).first() {
                    let _ = actor.send_message(AgentMsg::ChildSettled { child });
                }
            }
        }
        Ok(())
    }
}
