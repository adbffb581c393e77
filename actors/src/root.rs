//! The root actor (depth 0): the supervisor of the top-level agents.

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

use crate::msg::AgentMsg;
use crate::shared::SharedRef;
use crate::supervision;

/// The tree's own actor.
#[derive(Debug)]
pub(crate) struct RootActor;

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
        _myself: ActorRef<AgentMsg>,
        message: AgentMsg,
        _shared: &mut SharedRef,
    ) -> Result<(), ActorProcessingErr> {
        // Top-level results are read from the registry by the application; the notice
        // itself needs no action.
        if let AgentMsg::ChildSettled { child } = message {
            tracing::trace!(agent = %child, "top-level agent settled");
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<AgentMsg>,
        event: SupervisionEvent,
        shared: &mut SharedRef,
    ) -> Result<(), ActorProcessingErr> {
        supervision::settle_lost_child(&shared.registry, &event);
        Ok(())
    }
}
