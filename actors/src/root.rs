//! The root actor (depth 0): the supervisor of the top-level agents, and the starter of
//! queued top-level background agents when pool slots free.

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

use crate::msg::AgentMsg;
use crate::shared::SharedRef;
use crate::spawn;
use crate::supervision;

/// The tree's own actor.
#[derive(Debug)]
pub(crate) struct RootActor;

impl RootActor {
    /// Starts queued agents while pool slots are free, in FIFO order.
    async fn start_queued(myself: &ActorRef<AgentMsg>, shared: &SharedRef) {
        // A failed start settles its record and frees its slot, so look again until the
        // queue or the pool is exhausted.
        loop {
            let batch = shared.registry.pool_next();
            if batch.is_empty() {
                break;
            }
            for (id, token, pending) in batch {
                if let Err(error) = spawn::start(shared, id, 1, token, myself, pending).await {
                    tracing::warn!(agent = %id, %error, "queued agent failed to start");
                }
            }
        }
    }
}

impl Actor for RootActor {
    type Msg = AgentMsg;
    type State = SharedRef;
    type Arguments = SharedRef;

    async fn pre_start(
        &self,
        _myself: ActorRef<AgentMsg>,
        shared: SharedRef,
    ) -> Result<SharedRef, ActorProcessingErr> {
        Ok(shared)
    }

    async fn handle(
        &self,
        myself: ActorRef<AgentMsg>,
        message: AgentMsg,
        shared: &mut SharedRef,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            // A top-level agent settled or the pool grew: a slot may be free.
            AgentMsg::ChildSettled { .. } | AgentMsg::PoolChanged => {
                Self::start_queued(&myself, shared).await;
            }
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
        shared: &mut SharedRef,
    ) -> Result<(), ActorProcessingErr> {
        if supervision::settle_lost_child(&shared.registry, &event).is_some() {
            Self::start_queued(&myself, shared).await;
        }
        Ok(())
    }
}
