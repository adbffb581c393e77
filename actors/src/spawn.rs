//! Starting an agent: admission first (one atomic check in the registry), then the actor,
//! linked under its owner's actor.

use std::sync::Arc;

use agent_tree_protocol::{AgentDefinition, AgentId, Message, SettlePolicy, SpawnRequest};
use ractor::{Actor, ActorId, ActorRef};

use crate::agent::{AgentActor, AgentArgs};
use crate::error::SpawnError;
use crate::msg::AgentMsg;
use crate::policy::capability::Capabilities;
use crate::registry::{Admission, Admitted, StartTicket};
use crate::shared::{Branch, SharedRef};

/// Everything a spawn needs from its owner.
#[derive(Debug)]
pub(crate) struct SpawnSpec<'a> {
    pub(crate) owner: AgentId,
    pub(crate) owner_actor: &'a ActorRef<AgentMsg>,
    /// The owner's tools, in attenuation mode.
    pub(crate) owner_capabilities: Option<Box<Capabilities>>,
    /// The owner's conversation, offered to definitions that inherit context.
    pub(crate) owner_conversation: &'a [Message],
    pub(crate) definition: Arc<AgentDefinition>,
    pub(crate) branch: Arc<Branch>,
    pub(crate) request: SpawnRequest,
    /// A top-level background agent: it takes a pool slot.
    pub(crate) pooled: bool,
    /// The owner's span, the parent of the child's.
    pub(crate) owner_span: crate::util::SpanSlot,
    /// A resumed run of an agent another node hosted: `owner_conversation` is its own
    /// conversation, continued (`Tree::spawn_top`).
    pub(crate) resumed: bool,
    /// With `resumed`, continued from another tree: the children of its earlier runs,
    /// which that conversation names; `None` for every other spawn.
    pub(crate) earlier: Option<crate::registry::Earlier<'a>>,
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
    pub(crate) owner_capabilities: Option<Box<Capabilities>>,
    /// The span of the owner that spawned it: every run's span is its child.
    pub(crate) parent_span: crate::util::SpanSlot,
    /// The node it is placed on (the request's placement, else its definition's): when that
    /// is another node, every run of it starts a stand-in here instead of an agent.
    pub(crate) node: Option<Arc<str>>,
}

/// A started, queued or found child.
#[derive(Debug)]
pub(crate) enum Spawned {
    /// Started: run `run` of `id`, on `actor`.
    New {
        id: AgentId,
        run: u32,
        actor: ActorId,
    },
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
        owner_span,
        resumed,
        earlier,
    } = spec;
    // A new agent's first user message is its task: a blank one gives the model nothing to
    // do, and a provider may refuse the request (Anthropic's Messages API needs a message,
    // and refuses text that is only whitespace). A resumed run's empty prompt adds none.
    if !resumed && request.prompt.trim().is_empty() {
        return Err(SpawnError::InvalidRequest(format!(
            "the task for a new {} is empty: give it a prompt",
            definition.name
        )));
    }
    let node = placement(&request, &definition);
    if let Some(node) = &node {
        check_placement(shared, &definition.name, node)?;
    }
    let journaled = shared.journal.as_ref().map(|_| request.clone());
    let definition_for_type = Arc::clone(&definition);
    let pending = PendingStart {
        settle: request.settle.unwrap_or(definition.settle),
        detached: request.detached || definition.detached,
        definition,
        branch,
        prompt: request.prompt,
        context: Vec::new(),
        resumed,
        owner_capabilities,
        parent_span: owner_span,
        node,
    };
    // One registry transaction: the checks, the reservation, the record, the inherited
    // context (or its drop) and the ticket the actor starts with.
    let admitted = shared.registry.admit(Admission {
        owner,
        agent_type: &definition_for_type.name,
        request_id: request.request_id.clone(),
        detached: pending.detached,
        max_depth: pending.branch.max_depth,
        config: &shared.config,
        spec: pending,
        pooled,
        inherited: owner_conversation,
        journaled,
        earlier,
    })?;
    match admitted {
        Admitted::Existing(id) => Ok(Spawned::Existing(id)),
        Admitted::Queued(id) => Ok(Spawned::Queued(id)),
        Admitted::New(ticket) => {
            let (id, run) = (ticket.id, ticket.run);
            let actor = start(shared, ticket, owner_actor).await?;
            Ok(Spawned::New {
                id,
                run,
                actor: actor.get_id(),
            })
        }
    }
}

/// Where a spawn places its agent: the request's node, else its definition's.
pub(crate) fn placement(request: &SpawnRequest, definition: &AgentDefinition) -> Option<Arc<str>> {
    request
        .node
        .as_deref()
        .or(definition.node.as_deref())
        .map(Arc::<str>::from)
}

/// The other node `id` runs on, if it is placed on one (not on the tree's own node).
pub(crate) fn remote_placement(shared: &SharedRef, id: AgentId) -> Option<Arc<str>> {
    shared
        .registry
        .placement(id)
        .filter(|node| crate::placement::elsewhere(shared, node))
}

/// Whether an agent of `agent_type` can be placed on node `node`: the tree's own node, or
/// another its placement reaches (a cluster node attached, with a session to `node` ready).
fn check_placement(shared: &SharedRef, agent_type: &str, node: &str) -> Result<(), SpawnError> {
    let refused = match &shared.placement {
        Some(placement) if placement.is_here(node) || placement.reaches(node) => return Ok(()),
        Some(_) => "no session to that node is ready",
        None => "the tree has no cluster node attached (`TreeBuilder::node`, feature `cluster`)",
    };
    Err(SpawnError::InvalidRequest(format!(
        "{agent_type} is placed on node {node}, but {refused}"
    )))
}

/// Reopens settled agent `id` for a resumed run under `owner` ([`Registry::reopen`]),
/// reading its conversation back from the journal first when only the journal holds it.
pub(crate) async fn reopen(
    shared: &SharedRef,
    id: AgentId,
    owner: AgentId,
    prompt: String,
    owner_capabilities: Option<Box<Capabilities>>,
) -> Result<StartTicket, SpawnError> {
    // An empty prompt continues the conversation as it is; a prompt of white space alone is
    // no task (a provider may refuse it as a message), so it is refused, as a new agent's.
    if !prompt.is_empty() && prompt.trim().is_empty() {
        return Err(SpawnError::InvalidRequest(format!(
            "the prompt to resume {id} is only white space: give it a task, or an empty prompt to continue as it was"
        )));
    }
    // A remote agent's conversation is kept here as its node sends it up, at every turn
    // boundary and at its end (`Up::Conversation`); without it (none came up before the
    // run ended, or it was over the edge's body limit), it can be resumed with a
    // task, never continued as it was (an empty one, in memory or journaled, is none).
    let nothing_to_continue = |conversation: &[Message]| -> Result<(), SpawnError> {
        if !prompt.is_empty() || !conversation.is_empty() {
            return Ok(());
        }
        match remote_placement(shared, id) {
            Some(node) => Err(SpawnError::InvalidRequest(format!(
                "{id} ran on node {node}, which sent no conversation to continue (none of it came up before the run ended, or it was over the edge's body limit): resume it with a prompt"
            ))),
            None => Ok(()),
        }
    };
    // A read-back is of the run the agent was at when it was read: if another resume ran a
    // run meanwhile (the reads await the journal), the registry refuses it as stale and it
    // is read again, so a resume never continues an older run's conversation.
    let mut journaled = None;
    if let Some(run) = shared.registry.conversation_journaled(id) {
        let read = read_back(shared, id).await?;
        nothing_to_continue(&read)?;
        journaled = Some((run, read));
    } else if prompt.is_empty() {
        nothing_to_continue(&shared.registry.conversation(id))?;
    }
    let mut attempts = 0;
    loop {
        let reopened = shared.registry.reopen(
            id,
            owner,
            &shared.config,
            prompt.clone(),
            journaled.as_ref().map(|(run, read)| (*run, read)),
            owner_capabilities.clone(),
        );
        match reopened {
            // It settled since the check (its conversation went to the journal), or a
            // concurrent resume ran a run since the read: read it (again).
            Err(SpawnError::InvalidRequest(text))
                if text == crate::registry::NEEDS_CONVERSATION && attempts < MAX_READ_BACKS =>
            {
                attempts += 1;
                let Some(run) = shared.registry.conversation_journaled(id) else {
                    journaled = None;
                    continue;
                };
                let read = read_back(shared, id).await?;
                nothing_to_continue(&read)?;
                journaled = Some((run, read));
            }
            other => return other,
        }
    }
}

/// How many times a resume reads a conversation back before it gives up on one that keeps
/// changing under it (each change is a whole run of another resume).
const MAX_READ_BACKS: u32 = 4;

/// `id`'s conversation, read back from the journal; never an empty one in its place (its
/// places would collide with the earlier run's children).
async fn read_back(shared: &SharedRef, id: AgentId) -> Result<Arc<[Message]>, SpawnError> {
    let journal = shared.journal.as_ref();
    match journal {
        Some(journal) => journal.read_conversation(id).await,
        None => None,
    }
    .ok_or_else(|| {
        SpawnError::InvalidRequest(format!(
            "{id}'s conversation is kept only in the journal, and the journal cannot be read back"
        ))
    })
}

/// Starts the actor of `ticket`'s run, linked under `owner_actor` (under the root actor for a
/// detached agent). If it cannot start, the agent fails for good.
pub(crate) async fn start(
    shared: &SharedRef,
    ticket: StartTicket,
    owner_actor: &ActorRef<AgentMsg>,
) -> Result<ActorRef<AgentMsg>, SpawnError> {
    start_run(shared, ticket, owner_actor, false).await
}

/// As [`start`], for a restart: if it cannot start, the failed run's exit awaits its owner's
/// decision again (per its restart type), so the owner can retry it under its intensity.
pub(crate) async fn start_restart(
    shared: &SharedRef,
    ticket: StartTicket,
    owner_actor: &ActorRef<AgentMsg>,
) -> Result<ActorRef<AgentMsg>, SpawnError> {
    start_run(shared, ticket, owner_actor, true).await
}

async fn start_run(
    shared: &SharedRef,
    ticket: StartTicket,
    owner_actor: &ActorRef<AgentMsg>,
    restart: bool,
) -> Result<ActorRef<AgentMsg>, SpawnError> {
    // A detached agent is supervised by the root actor, so its owner's end (which makes
    // ractor kill every linked child) does not take it along.
    let supervisor = match (ticket.start.detached, shared.root.get()) {
        (true, Some(root)) => root.get_cell(),
        _ => owner_actor.get_cell(),
    };
    let (id, run, token) = (ticket.id, ticket.run, ticket.token.clone());
    let node = ticket.start.node.clone();
    let args = AgentArgs {
        ticket,
        owner: owner_actor.clone(),
        shared: shared.clone(),
    };
    let elsewhere = node.filter(|node| crate::placement::elsewhere(shared, node));
    let started = match (elsewhere, &shared.placement) {
        (Some(node), Some(placement)) => placement.start(args, node, supervisor).await,
        // A recovered remote agent restarted in a tree with no node attached.
        (Some(node), None) => Err(format!(
            "it is placed on node {node}, and the tree has no cluster node attached"
        )),
        // Placed on this very node: an agent like any other.
        (None, _) => Actor::spawn_linked(None, AgentActor, args, supervisor)
            .await
            .map(|(actor, _)| actor)
            .map_err(|error| error.to_string()),
    };
    match started {
        Ok(actor) => Ok(actor),
        Err(message) => {
            // The actor may have run `pre_start` before the link failed: cancel the token so
            // nothing of it is left running.
            token.cancel();
            shared
                .registry
                .fail_start(id, run, message.clone(), restart);
            Err(SpawnError::Startup(message))
        }
    }
}
