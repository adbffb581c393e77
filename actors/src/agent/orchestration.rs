//! The orchestration tools as one typed set: [`Orchestration`] with one name table, typed
//! inputs (serde structs), results as JSON values, and a dispatch with one arm per tool.
//!
//! Every operation on another agent checks ownership first, in the registry, under the
//! tree's control scope; a foreign id gets the same error as a missing one.

use std::sync::OnceLock;
use std::time::Duration;

use agent_tree_protocol::{
    AgentId, EndReason, Outcome, RequestId, SpawnRequest, ToolCall, ToolSpec, WaitPolicy,
};
use ractor::ActorRef;
use serde::Deserialize;
use serde_json::json;

mod schema;

pub(crate) use schema::{
    Caller, Offer, OfferKey, PlaceKey, PlacedOffer, offered, offered_at, result_text, result_value,
    set_result,
};

use super::AgentState;
use super::calls::Waiting;
use crate::error::{ControlError, SpawnError};
use crate::msg::{AgentMsg, SteerReceipt};
use crate::registry::SteerRoute;
use crate::spawn::{self, SpawnSpec, Spawned};
use crate::tool::{ABORT_TOOL, AGENT_TOOL, ASK_OWNER_TOOL, GET_RESULT_TOOL, STEER_TOOL, WAIT_TOOL};
use crate::wait;

/// The orchestration tools the tree injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Orchestration {
    /// `Agent`: spawn a child, or resume a settled one.
    Agent,
    /// `get_subagent_result`: read (or wait for) a child's outcome.
    GetResult,
    /// `steer_subagent`: guidance for a running child.
    Steer,
    /// `abort_subagent`: abort a child's subtree.
    Abort,
    /// `wait_subagents`: wait for a set under a policy.
    Wait,
    /// `ask_owner`: a question to the owner.
    AskOwner,
}

impl Orchestration {
    /// Every tool, in the order they are offered.
    pub(crate) const ALL: [Orchestration; 6] = [
        Orchestration::Agent,
        Orchestration::GetResult,
        Orchestration::Steer,
        Orchestration::Abort,
        Orchestration::Wait,
        Orchestration::AskOwner,
    ];

    /// The one name table.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Orchestration::Agent => AGENT_TOOL,
            Orchestration::GetResult => GET_RESULT_TOOL,
            Orchestration::Steer => STEER_TOOL,
            Orchestration::Abort => ABORT_TOOL,
            Orchestration::Wait => WAIT_TOOL,
            Orchestration::AskOwner => ASK_OWNER_TOOL,
        }
    }

    /// The tool named `name`, if it is one of the set.
    pub(crate) fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The spec a model is offered, built once per process.
    pub(crate) fn spec(self) -> &'static ToolSpec {
        static SPECS: OnceLock<Vec<ToolSpec>> = OnceLock::new();
        let specs = SPECS.get_or_init(|| Self::ALL.into_iter().map(schema::build_spec).collect());
        &specs[self as usize]
    }
}

/// How a call is answered.
enum Answer {
    /// Now, with this text (and whether it is an error).
    Now(String, bool),
    /// When `agent` settles (or the timeout passes).
    Wait(AgentId, Option<Duration>),
    /// When the owner answers (a steer to this agent).
    Owner,
    /// When every agent of the set has settled, under the policy.
    Set(Vec<AgentId>, WaitPolicy),
}

/// The longest refusal text a model is shown, in bytes: a refusal quotes at most a short
/// prefix of what the model sent, so a 16 MiB type name is not echoed back.
const MAX_REFUSAL: usize = 512;

/// A refusal, as the short JSON a model can act on: `{"error": "..."}`.
fn refused(error: impl ToString) -> Answer {
    let mut text = error.to_string();
    crate::error::cut_to(&mut text, MAX_REFUSAL);
    Answer::Now(json!({ "error": text }).to_string(), true)
}

/// The input of a call, which must be a JSON object; `null` fields mean absent.
fn input_of<T: serde::de::DeserializeOwned>(call: &ToolCall) -> Result<T, Answer> {
    if !call.input.is_object() {
        return Err(refused(format!(
            "invalid input: expected a JSON object of {}'s fields",
            call.name
        )));
    }
    // The common case reads the input straight from its text.
    if let Ok(input) = call.input.parse::<T>() {
        return Ok(input);
    }
    // Else without its `null` fields; and a refusal names what is wrong without a position
    // in the text.
    let serde_json::Value::Object(fields) = call.input.to_value() else {
        return Err(refused("invalid input: not a JSON object"));
    };
    let present: serde_json::Map<String, serde_json::Value> = fields
        .into_iter()
        .filter(|(_, value)| !value.is_null())
        .collect();
    serde_json::from_value(serde_json::Value::Object(present))
        .map_err(|error| refused(format!("invalid input: {error}")))
}

/// Runs orchestration tool `tool` for call `index` of turn `turn`.
pub(super) async fn dispatch(
    state: &mut AgentState,
    myself: &ActorRef<AgentMsg>,
    turn: u32,
    index: usize,
    tool: Orchestration,
    call: ToolCall,
) {
    let answer = match tool {
        Orchestration::Agent => spawn_or_resume(state, myself, index, &call).await,
        Orchestration::GetResult => read_result(state, &call),
        Orchestration::Steer => steer(state, &call).await,
        Orchestration::Abort => abort(state, &call),
        Orchestration::Wait => wait_set(state, &call),
        Orchestration::AskOwner => ask_owner(state, index, &call),
    };
    // A wait on an agent whose question is open is answered with the question at once: that
    // agent waits for its owner's answer, so the owner's model must answer first.
    let waits_on: &[AgentId] = match &answer {
        Answer::Wait(agent, _) => std::slice::from_ref(agent),
        Answer::Set(agents, _) => agents,
        Answer::Now(..) | Answer::Owner => &[],
    };
    if let Some(text) = state.asking_among(waits_on) {
        return state.answer_call(turn, index, text, false);
    }
    match answer {
        Answer::Now(text, is_error) => state.answer_call(turn, index, text, is_error),
        Answer::Set(agents, policy) if agents.is_empty() => {
            state.answer_call(turn, index, set_result(policy, &[]), false);
        }
        Answer::Wait(agent, timeout) => {
            // A child's end answers the call from the child table; a timeout, or an agent
            // further down (descendants scope), needs a task.
            let own_child = state.children.get(agent).is_some();
            let task = (!own_child || timeout.is_some())
                .then(|| wait_task(state, myself, turn, index, agent, timeout));
            if let Some(calls) = state.phase.calls_mut(turn) {
                let waiting = Waiting::Agents {
                    agents: vec![agent],
                    set: None,
                };
                calls.wait(index, task, waiting);
            }
            if own_child && state.children.is_final(agent) {
                state.answer_from_record(myself, agent);
            }
        }
        Answer::Owner => {
            let task = owner_gone_task(state, myself);
            if let Some(calls) = state.phase.calls_mut(turn) {
                calls.wait(index, task, Waiting::Owner);
            }
        }
        Answer::Set(agents, policy) => {
            let own = agents.iter().all(|&a| state.children.get(a).is_some());
            let task = (!own).then(|| set_task(state, myself, turn, index, agents.clone(), policy));
            let set = own.then(|| (policy, vec![None; agents.len()]));
            if let Some(calls) = state.phase.calls_mut(turn) {
                let waiting = Waiting::Agents {
                    agents: agents.clone(),
                    set,
                };
                calls.wait(index, task, waiting);
            }
            if own {
                // Outcomes already final count at once, in order.
                for agent in agents {
                    if state.children.is_final(agent) {
                        state.answer_from_record(myself, agent);
                    }
                }
            }
        }
    }
}

/// A task that refuses the agent's pending question if its owner's run ends first (a
/// detached agent outlives its owner, and a question queued behind the owner's stop is
/// dropped by ractor).
fn owner_gone_task(
    state: &AgentState,
    myself: &ActorRef<AgentMsg>,
) -> Option<tokio::task::AbortHandle> {
    let owner = state.owner_id;
    // The run being asked: its end (final, or a crash its supervisor may restart) means the
    // question died with it.
    let (asked_run, mut ended) = state.shared.registry.watch_runs(owner)?;
    let token = state.token.clone();
    let reply_to = myself.clone();
    let task = state.shared.spawn(async move {
        tokio::select! {
            biased;
            () = token.cancelled() => {}
            _ = ended.wait_for(|&run| run >= asked_run) => {
                let reason = format!("{owner} has finished its run and cannot answer");
                let _ = reply_to.cast(AgentMsg::QuestionRefused { reason });
            }
        }
    });
    Some(task.abort_handle())
}

/// A task that answers call `index` of `turn` with every outcome of `agents` once the wait
/// over them ends under `policy` (for sets reaching beyond this agent's children).
fn set_task(
    state: &AgentState,
    myself: &ActorRef<AgentMsg>,
    turn: u32,
    index: usize,
    agents: Vec<AgentId>,
    policy: WaitPolicy,
) -> tokio::task::AbortHandle {
    let shared = state.shared.clone();
    let token = state.token.clone();
    let reply_to = myself.clone();
    state
        .shared
        .spawn(async move {
            let outcomes = tokio::select! {
                biased;
                () = token.cancelled() => return,
                outcomes = wait::wait_set(&shared.registry, &agents, policy) => outcomes,
            };
            let mut list: Vec<(AgentId, Outcome)> = Vec::with_capacity(agents.len());
            for (&agent, outcome) in agents.iter().zip(outcomes) {
                list.push((agent, shared.whole_outcome(agent, outcome).await));
            }
            let _ = reply_to.cast(AgentMsg::ToolFinished {
                turn,
                index,
                result: Ok(set_result(policy, &list)),
            });
        })
        .abort_handle()
}

/// A task that answers call `index` of `turn` when `agent` settles, or after `timeout` with
/// its current status. Cancelling it (abort, early answer) never touches `agent`.
fn wait_task(
    state: &AgentState,
    myself: &ActorRef<AgentMsg>,
    turn: u32,
    index: usize,
    agent: AgentId,
    timeout: Option<Duration>,
) -> tokio::task::AbortHandle {
    let settled = state.shared.registry.watch(agent);
    let token = state.token.clone();
    let reply_to = myself.clone();
    let shared = state.shared.clone();
    state
        .shared
        .spawn(async move {
            let Some(mut settled) = settled else { return };
            let wait = async {
                let outcome = match settled.wait_for(Option::is_some).await {
                    Ok(outcome) => outcome.clone(),
                    Err(_) => None,
                }?;
                Some(shared.whole_outcome(agent, outcome).await)
            };
            let outcome = tokio::select! {
                biased;
                () = token.cancelled() => return,
                outcome = async {
                    match timeout {
                        Some(limit) => tokio::time::timeout(limit, wait).await.ok().flatten(),
                        None => wait.await,
                    }
                } => outcome,
            };
            let _ = reply_to.cast(AgentMsg::ToolFinished {
                turn,
                index,
                result: Ok(result_text(agent, outcome.as_ref())),
            });
        })
        .abort_handle()
}

/// The `Agent` tool's input: everything a model may choose, and nothing that changes
/// lifetimes (`detached` and the settle policy come from the definition or the
/// application). Unknown fields (`detached`, `depth`) are ignored.
#[derive(Deserialize)]
struct AgentInput {
    #[serde(default, alias = "subagent_type", alias = "type")]
    agent_type: Option<String>,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default, alias = "run_in_background")]
    background: Option<bool>,
    #[serde(default)]
    resume: Option<String>,
}

/// The longest agent type name not in the catalog that a refusal names whole, in bytes.
const MAX_TYPE_NAME: usize = 128;

async fn spawn_or_resume(
    state: &mut AgentState,
    myself: &ActorRef<AgentMsg>,
    index: usize,
    call: &ToolCall,
) -> Answer {
    let input: AgentInput = match input_of(call) {
        Ok(input) => input,
        Err(answer) => return answer,
    };
    if let Some(target) = input.resume {
        let prompt = input.prompt.unwrap_or_default();
        let background = input.background.unwrap_or(false);
        return resume(state, myself, &target, prompt, background).await;
    }
    let (Some(agent_type), Some(prompt)) = (input.agent_type, input.prompt) else {
        return refused(SpawnError::InvalidRequest(
            "`agent_type` and `prompt` are required (or `resume` with an agent id)".to_owned(),
        ));
    };
    // A long name the catalog does not hold is refused here, so the refusal does not echo
    // it whole; a long name it holds is looked up as any other.
    if agent_type.len() > MAX_TYPE_NAME && state.branch.catalog.get(&agent_type).is_none() {
        let mut shown = agent_type;
        crate::error::cut_to(&mut shown, 64);
        return refused(SpawnError::InvalidRequest(format!(
            "agent type name too long: {shown:?}"
        )));
    }
    let mut request = SpawnRequest::new(agent_type, prompt);
    request.description = input.description;
    request.background = input.background;
    let definition = match state
        .branch
        .catalog
        .resolve_for(&state.definition, &request.agent_type)
    {
        Ok(definition) => definition.clone(),
        Err(error) => return refused(error),
    };
    let background = request.background.unwrap_or(definition.run_in_background);
    // Idempotency keys are the runtime's: a model cannot name another run's request (or
    // another owner's) to get that child back. They name the call by its place (the
    // assistant message's position in the conversation, and the call's in the message),
    // never by the model's call id, which need not be unique: a conversation resumed after a
    // crash re-issues a lost turn's calls at the same places, and finds their children.
    let message = state.conversation.last_assistant().unwrap_or(0);
    let request_id = RequestId::at_call(state.id, state.incarnation, message, index);
    let detached = definition.detached;
    let owner_capabilities = state
        .shared
        .config
        .attenuate_tools
        .then(|| Box::new(state.offer.capabilities.clone()));
    // Only a definition that inherits context reads the owner's conversation.
    let inherited = if definition.inherit_context {
        state.conversation.inheritable()
    } else {
        Vec::new()
    };
    let spawned = spawn::spawn(
        &state.shared,
        SpawnSpec {
            owner: state.id,
            owner_actor: myself,
            owner_capabilities,
            owner_conversation: &inherited,
            definition,
            branch: state.branch.clone(),
            request: request.with_request_id(request_id),
            pooled: false,
            owner_span: state.span.clone(),
            resumed: false,
            earlier: None,
        },
    )
    .await;
    let child = match spawned {
        Ok(Spawned::New { id, run, actor }) => {
            state
                .children
                .started(id, run, Some(actor), detached, background);
            id
        }
        Ok(Spawned::Existing(id) | Spawned::Queued(id)) => id,
        Err(error) => return refused(error),
    };
    answer_for(state, child, background)
}

/// A background spawn answers with the child's id (and status) at once; a foreground one
/// waits for the child. (A background spawn re-issued for a child that is final answers
/// with its result; a released one is read back first, like a wait.)
fn answer_for(state: &AgentState, child: AgentId, background: bool) -> Answer {
    if !background {
        return Answer::Wait(child, None);
    }
    let outcome = state
        .children
        .is_final(child)
        .then(|| state.shared.registry.outcome(child))
        .flatten();
    match outcome {
        Some(outcome) if outcome.released => Answer::Wait(child, None),
        outcome => Answer::Now(result_text(child, outcome.as_ref()), false),
    }
}

async fn resume(
    state: &mut AgentState,
    myself: &ActorRef<AgentMsg>,
    target: &str,
    prompt: String,
    background: bool,
) -> Answer {
    // Resume re-creates the agent's actor under its owner, so only the owner may resume it,
    // whatever the control scope.
    let target = match parse_id(target) {
        Ok(target) => target,
        Err(error) => return refused(error),
    };
    // Attenuated by this owner's capabilities now, as a spawn is.
    let capabilities = state
        .shared
        .config
        .attenuate_tools
        .then(|| Box::new(state.offer.capabilities.clone()));
    let ticket = match spawn::reopen(&state.shared, target, state.id, prompt, capabilities).await {
        Ok(ticket) => ticket,
        Err(error) => return refused(error),
    };
    let (run, detached) = (ticket.run, ticket.start.detached);
    let actor = match spawn::start(&state.shared, ticket, myself).await {
        Ok(actor) => actor,
        Err(error) => return refused(error),
    };
    state
        .children
        .started(target, run, Some(actor.get_id()), detached, background);
    answer_for(state, target, background)
}

#[derive(Deserialize)]
struct TargetInput {
    agent_id: String,
    #[serde(default)]
    wait: bool,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    message: String,
}

/// Parses an id a model wrote. A malformed one gets the same error as a foreign or missing
/// one, naming what the model wrote.
fn parse_id(text: &str) -> Result<AgentId, ControlError> {
    text.trim()
        .parse()
        .map_err(|_| ControlError::NotYoursText(text.chars().take(64).collect()))
}

/// The agent `call` names, if the caller may control it.
fn target(state: &AgentState, call: &ToolCall) -> Result<(AgentId, TargetInput), Answer> {
    let input: TargetInput = input_of(call)?;
    let id = parse_id(&input.agent_id).map_err(refused)?;
    state
        .shared
        .registry
        .authorize(state.id, id, state.shared.config.control_scope)
        .map_err(refused)?;
    Ok((id, input))
}

fn read_result(state: &mut AgentState, call: &ToolCall) -> Answer {
    let (agent, input) = match target(state, call) {
        Ok(found) => found,
        Err(answer) => return answer,
    };
    // A child's outcome once its table says it is final; a descendant's (descendants
    // scope) once the registry has one. Both are the registry's.
    let outcome = match state.children.get(agent) {
        Some(_) if !state.children.is_final(agent) => None,
        _ => state.shared.registry.outcome(agent),
    };
    match outcome {
        // Released to the journal: read back by a wait, which answers at once.
        Some(outcome) if outcome.released => Answer::Wait(agent, None),
        Some(outcome) => {
            state.mark_read(agent);
            Answer::Now(result_text(agent, Some(&outcome)), false)
        }
        None if input.wait => Answer::Wait(agent, input.timeout_ms.map(Duration::from_millis)),
        None => Answer::Now(result_text(agent, None), false),
    }
}

async fn steer(state: &mut AgentState, call: &ToolCall) -> Answer {
    let (agent, input) = match target(state, call) {
        Ok(found) => found,
        Err(answer) => return answer,
    };
    let receipt =
        match state
            .shared
            .registry
            .route_steer(agent, input.message.clone(), &state.shared.config)
        {
            Ok(SteerRoute::Queued) => SteerReceipt::Queued,
            Ok(SteerRoute::Actor(actor)) => {
                // The receipt is the target's own answer: it says `delivered` only once the steer
                // is in its inbox for a coming turn (or answered its question), and refuses a
                // steer that crossed the end of its run. Steers only go down the tree, so this
                // call never waits on an actor that waits on this one.
                let actor = ActorRef::<AgentMsg>::from(actor);
                let text = input.message;
                let reply = crate::msg::ask(&actor, |reply| AgentMsg::Steer {
                    text,
                    from: state.id,
                    reply: Some(reply),
                })
                .await;
                match reply {
                    Some(Ok(receipt)) => receipt,
                    Some(Err(error)) => return refused(error),
                    None => {
                        let status = state
                            .shared
                            .registry
                            .status(agent)
                            .unwrap_or(agent_tree_protocol::AgentStatus::Completed);
                        return refused(ControlError::WrongStatus(agent, status));
                    }
                }
            }
            Err(error) => return refused(error),
        };
    // A steer the child took answers its open question; a refused one leaves it open.
    state.open_questions.remove(&agent);
    Answer::Now(
        json!({ "agent_id": agent, "receipt": receipt }).to_string(),
        false,
    )
}

fn abort(state: &mut AgentState, call: &ToolCall) -> Answer {
    let (agent, _) = match target(state, call) {
        Ok(found) => found,
        Err(answer) => return answer,
    };
    match state.shared.registry.status(agent) {
        Some(status) if status.is_terminal() => refused(ControlError::WrongStatus(agent, status)),
        _ => match state.shared.registry.abort(agent, EndReason::Aborted) {
            Ok(()) => Answer::Now(
                json!({ "agent_id": agent, "status": "aborting" }).to_string(),
                false,
            ),
            Err(error) => refused(error),
        },
    }
}

#[derive(Deserialize)]
struct SetInput {
    agent_ids: Vec<String>,
    #[serde(default)]
    policy: WaitPolicy,
}

fn wait_set(state: &mut AgentState, call: &ToolCall) -> Answer {
    let input: SetInput = match input_of(call) {
        Ok(input) => input,
        Err(answer) => return answer,
    };
    let mut agents = Vec::with_capacity(input.agent_ids.len());
    for text in &input.agent_ids {
        let agent = match parse_id(text) {
            Ok(agent) => agent,
            Err(error) => return refused(error),
        };
        if let Err(error) =
            state
                .shared
                .registry
                .authorize(state.id, agent, state.shared.config.control_scope)
        {
            return refused(error);
        }
        agents.push(agent);
    }
    Answer::Set(agents, input.policy)
}

#[derive(Deserialize)]
struct AskInput {
    question: String,
}

/// `ask_owner`, the call at place `index` of the turn: the question goes to the owner (and,
/// with the turn's assistant message, into the journal) and the call waits for the answer.
fn ask_owner(state: &mut AgentState, index: usize, call: &ToolCall) -> Answer {
    let input: AskInput = match input_of(call) {
        Ok(input) => input,
        Err(answer) => return answer,
    };
    if state.phase.current_calls().is_some_and(|c| c.asking()) {
        // The owner answers a child's question with its next steer: one question at a time.
        return refused("one question at a time: the previous ask_owner is not answered yet");
    }
    if state.turns >= state.max_turns {
        // The answer would come back as this call's result, which only a next turn reads.
        return refused(ControlError::NoTurnsLeft(state.id));
    }
    // The turn's assistant message is the conversation's last: journaled with the question,
    // so a recovery puts the question again instead of re-running the turn.
    let asking = state.conversation.last().cloned();
    put_question(state, input.question, asking.as_ref().map(|m| (index, m)))
}

/// Puts `question` to the owner (journaled with `asking` when given) and says how the
/// asking call is answered.
fn put_question(
    state: &mut AgentState,
    question: String,
    asking: Option<(usize, &agent_tree_protocol::Message)>,
) -> Answer {
    let Some(owner) = state
        .shared
        .registry
        .ask(state.id, state.run, question.clone(), asking)
    else {
        return refused("this run has ended");
    };
    let asked = AgentMsg::ChildAsked {
        child: state.id,
        question,
        asked: (state.run, state.turns),
    };
    // The owner's current run: the one this agent was started under may have ended since
    // (a detached child outlives it).
    let sent = match owner {
        Some(owner) => owner.send_message(asked).is_ok(),
        None => state.owner.cast(asked).is_ok(),
    };
    if sent {
        Answer::Owner
    } else {
        refused("the owner is gone")
    }
}

/// Puts again the question a recovered run starts with (journaled already), the call at
/// place `index` of turn `turn`: it waits for the owner's answer as the first asking did,
/// or is answered with the refusal.
pub(super) fn ask_again(
    state: &mut AgentState,
    myself: &ActorRef<AgentMsg>,
    turn: u32,
    index: usize,
    question: String,
) {
    match put_question(state, question, None) {
        Answer::Owner => {
            let task = owner_gone_task(state, myself);
            if let Some(calls) = state.phase.calls_mut(turn) {
                calls.wait(index, task, Waiting::Owner);
            }
        }
        Answer::Now(text, is_error) => state.answer_call(turn, index, text, is_error),
        Answer::Wait(..) | Answer::Set(..) => {}
    }
}
