//! Starting an agent: admission first (one atomic check in the registry), then the actor,
//! linked under its owner's actor.

use std::sync::Arc;

use agent_tree_protocol::{
    AgentDefinition, AgentId, EndReason, EventKind, Message, Outcome, SettlePolicy, SpawnRequest,
};
use ractor::{Actor, ActorRef};
use tokio_util::sync::CancellationToken;

use crate::agent::{AgentActor, AgentArgs};
use crate::config::INHERIT_CONTEXT_MAX_DEPTH;
use crate::error::SpawnError;
use crate::msg::AgentMsg;
use crate::policy::capability::Capabilities;
use crate::registry::{Admission, Admitted};
use crate::shared::{Branch, SharedRef};

/// Everything a spawn needs from its owner.
#[derive(Debug)]
pub(crate) struct SpawnSpec<'a> {
    pub(crate) owner: AgentId,
    pub(crate) owner_actor: &'a ActorRef<AgentMsg>,
    /// The owner's tools, in attenuation mode.
    pub(crate) owner_capabilities: Option<Capabilities>,
    /// The owner's conversation, offered to definitions that inherit context.
    pub(crate) owner_conversation: &'a [Message],
    pub(crate) definition: Arc<AgentDefinition>,
    pub(crate) branch: Arc<Branch>,
    pub(crate) request: SpawnRequest,
    /// A top-level background agent: it takes a pool slot.
    pub(crate) pooled: bool,
}

/// How to start an agent's actor, kept while it waits for a pool slot.
#[derive(Clone, Debug)]
pub(crate) struct PendingStart {
    pub(crate) definition: Arc<AgentDefinition>,
    pub(crate) branch: Arc<Branch>,
    pub(crate) prompt: String,
    pub(crate) settle: SettlePolicy,
    /// Messages before the task: an inherited context or a resumed conversation.
    pub(crate) context: Vec<Message>,
    /// A resumed run: its children never outlive it.
    pub(crate) resumed: bool,
    /// Linked under the root actor instead of its owner's, so it can outlive its owner.
    pub(crate) detached: bool,
    pub(crate) owner_capabilities: Option<Capabilities>,
}

/// A started, queued or found child.
#[derive(Debug)]
pub(crate) enum Spawned {
    New(AgentId),
    /// Waiting for a pool slot (top-level background agents only).
    Queued(AgentId),
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
        owner_conversation,
        definition,
        branch,
        request,
        pooled,
    } = spec;
    let mut pending = PendingStart {
        settle: request.settle.unwrap_or(definition.settle),
        definition,
        branch,
        prompt: request.prompt,
        context: Vec::new(),
        resumed: false,
        detached: request.detached,
        owner_capabilities,
    };
    let admitted = shared.registry.admit(Admission {
        owner,
        agent_type: &pending.definition.name,
        request_id: request.request_id.clone(),
        detached: request.detached,
        max_depth: pending.branch.max_depth,
        config: &shared.config,
        spec: pending.clone(),
        pooled,
    })?;
    let (id, depth, token) = match admitted {
        Admitted::Existing(id) => return Ok(Spawned::Existing(id)),
        Admitted::Queued(id) => return Ok(Spawned::Queued(id)),
        Admitted::New { id, depth, token } => (id, depth, token),
    };
    if pending.definition.inherit_context {
        if depth <= INHERIT_CONTEXT_MAX_DEPTH {
            pending.context = owner_conversation.to_vec();
            shared
                .registry
                .set_inherited_context(id, owner_conversation);
        } else {
            shared.registry.announce(id, EventKind::ContextDropped);
        }
    }
    start(shared, id, depth, token, owner_actor, pending).await?;
    Ok(Spawned::New(id))
}

/// Starts the actor of admitted agent `id`, linked under `owner_actor`.
pub(crate) async fn start(
    shared: &SharedRef,
    id: AgentId,
    depth: u32,
    token: CancellationToken,
    owner_actor: &ActorRef<AgentMsg>,
    pending: PendingStart,
) -> Result<ActorRef<AgentMsg>, SpawnError> {
    // A detached agent is supervised by the root actor, so its owner's end (which makes
    // ractor kill every linked child) does not take it along.
    let supervisor = match (pending.detached, shared.root.get()) {
        (true, Some(root)) => root.get_cell(),
        _ => owner_actor.get_cell(),
    };
    let args = AgentArgs {
        id,
        depth,
        owner: owner_actor.clone(),
        start: pending,
        token: token.clone(),
        shared: shared.clone(),
    };
    match Actor::spawn_linked(None, AgentActor, args, supervisor).await {
        Ok((actor, _)) => Ok(actor),
        Err(error) => {
            // The actor may have run `pre_start` (and started its token watcher) before the
            // link failed: cancel the token so nothing of it is left running.
            token.cancel();
            let message = error.to_string();
            shared
                .registry
                .settle_final(id, Outcome::failed(EndReason::ActorFailed, message.clone()));
            Err(SpawnError::Startup(message))
        }
    }
}
