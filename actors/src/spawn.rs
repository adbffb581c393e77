//! Starting an agent: admission, then the actor, linked under its owner's actor.

use std::sync::Arc;

use agent_tree_protocol::{AgentDefinition, AgentId, EndReason, Outcome, SpawnRequest};
use ractor::{Actor, ActorRef};

use crate::agent::{AgentActor, AgentArgs};
use crate::capability::Capabilities;
use crate::error::SpawnError;
use crate::msg::AgentMsg;
use crate::registry::{Admission, Admitted};
use crate::shared::{Branch, SharedRef};

/// Everything a spawn needs from its owner.
#[derive(Debug)]
pub(crate) struct SpawnSpec<'a> {
    pub(crate) owner: AgentId,
    pub(crate) owner_actor: &'a ActorRef<AgentMsg>,
    pub(crate) owner_capabilities: Option<crate::capability::Capabilities>,
    pub(crate) definition: Arc<AgentDefinition>,
    pub(crate) branch: Arc<Branch>,
    pub(crate) request: SpawnRequest,
}

/// A started (or found) child.
#[derive(Debug)]
pub(crate) enum Spawned {
    New {
        id: AgentId,
        actor: ActorRef<AgentMsg>,
        detached: bool,
    },
    /// The owner already spawned this request id.
    Existing(AgentId),
}

/// Admits and starts one agent under `spec.owner_actor`.
///
/// The slot is reserved atomically before any actor exists; if the actor then fails to start,
/// the record settles as failed and the slot is released.
pub(crate) async fn spawn(shared: &SharedRef, spec: SpawnSpec<'_>) -> Result<Spawned, SpawnError> {
    let SpawnSpec {
        owner,
        owner_actor,
        owner_capabilities,
        definition,
        branch,
        request,
    } = spec;
    let admitted = shared.registry.admit(Admission {
        owner,
        agent_type: &definition.name,
        request_id: request.request_id.clone(),
        detached: request.detached,
        max_depth: branch.max_depth,
        config: &shared.config,
    })?;
    let (id, depth, token) = match admitted {
        Admitted::Existing(id) => return Ok(Spawned::Existing(id)),
        Admitted::New { id, depth, token } => (id, depth, token),
    };
    let settle = request.settle.unwrap_or(definition.settle);
    let args = AgentArgs {
        id,
        depth,
        owner: owner_actor.clone(),
        definition,
        branch,
        prompt: request.prompt,
        token: token.clone(),
        settle,
        owner_capabilities: owner_capabilities.map(|c: Capabilities| c),
        shared: shared.clone(),
    };
    match Actor::spawn_linked(None, AgentActor, args, owner_actor.get_cell()).await {
        Ok((actor, _)) => Ok(Spawned::New {
            id,
            actor,
            detached: request.detached,
        }),
        Err(error) => {
            // The actor may have run `pre_start` (and started its token watcher) before the
            // link failed: cancel the token so nothing of it is left running.
            token.cancel();
            let message = error.to_string();
            shared
                .registry
                .settle(id, Outcome::failed(EndReason::ActorFailed, message.clone()));
            Err(SpawnError::Startup(message))
        }
    }
}
