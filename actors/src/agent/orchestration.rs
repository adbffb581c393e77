//! The orchestration tools as an agent runs them: `Agent` (spawn or resume),
//! `get_subagent_result`, `steer_subagent`, `abort_subagent` and `ask_owner`.
//!
//! Every operation on another agent checks ownership first, in the registry, under the
//! tree's control scope; a foreign id gets the same error as a missing one.

use std::time::Duration;

use agent_tree_protocol::{
    AgentId, EndReason, EventKind, Outcome, RequestId, SpawnRequest, ToolCall, ToolSpec, WaitPolicy,
};
use ractor::ActorRef;
use serde::Deserialize;
use serde_json::json;

use super::{AgentState, Child};
use crate::error::{ControlError, SpawnError};
use crate::msg::{AgentMsg, SteerReceipt};
use crate::registry::SteerRoute;
use crate::spawn::{self, SpawnSpec, Spawned};
use crate::tool::{
    ABORT_TOOL, AGENT_TOOL, ASK_OWNER_TOOL, GET_RESULT_TOOL, ORCHESTRATION_TOOLS, STEER_TOOL,
    WAIT_TOOL,
};
use crate::wait;

pub(super) fn is_orchestration(name: &str) -> bool {
    ORCHESTRATION_TOOLS.contains(&name) || name == ASK_OWNER_TOOL
}

/// The spec offered to the model for orchestration tool `name`.
pub(super) fn spec(name: &str) -> ToolSpec {
    let target = |extra: serde_json::Value| {
        let mut schema = json!({
            "type": "object",
            "properties": { "agent_id": { "type": "string" } },
            "required": ["agent_id"]
        });
        if let (Some(props), Some(extra)) =
            (schema["properties"].as_object_mut(), extra.as_object())
        {
            props.extend(extra.clone());
        }
        schema
    };
    let (description, schema) = match name {
        AGENT_TOOL => (
            "Start a subagent of an allowed type with a task, or resume one of your settled \
             subagents (`resume`: its id) with a new prompt. In the foreground the result comes \
             back as this tool's result; in the background an agent id comes back at once.",
            json!({
                "type": "object",
                "properties": {
                    "agent_type": { "type": "string" },
                    "prompt": { "type": "string" },
                    "description": { "type": "string" },
                    "background": { "type": "boolean" },
                    "resume": { "type": "string" }
                },
                "required": ["prompt"]
            }),
        ),
        GET_RESULT_TOOL => (
            "Read the result of one of your subagents by id; with `wait`, wait for it to settle \
             (at most `timeout_ms` if given; the subagent keeps running either way).",
            target(json!({ "wait": { "type": "boolean" }, "timeout_ms": { "type": "integer" } })),
        ),
        STEER_TOOL => (
            "Send guidance to one of your running subagents; it arrives at its next turn, or \
             answers its pending question.",
            target(json!({ "message": { "type": "string" } })),
        ),
        ABORT_TOOL => (
            "Abort one of your subagents and everything below it.",
            target(json!({})),
        ),
        WAIT_TOOL => (
            "Wait for several of your subagents. `all_settled` returns every outcome when all \
             have ended; `fail_fast` aborts the rest of the set at the first outcome that is \
             not completed. Outcomes come back in the order of `agent_ids`.",
            json!({
                "type": "object",
                "properties": {
                    "agent_ids": { "type": "array", "items": { "type": "string" } },
                    "policy": { "type": "string", "enum": ["all_settled", "fail_fast"] }
                },
                "required": ["agent_ids"]
            }),
        ),
        _ => (
            "Ask the agent that started you a question and wait for its answer.",
            json!({
                "type": "object",
                "properties": { "question": { "type": "string" } },
                "required": ["question"]
            }),
        ),
    };
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        input_schema: schema,
    }
}

/// The tool result describing an agent: its id, status and outcome.
pub(super) fn result_text(agent: AgentId, outcome: Option<&Outcome>) -> String {
    match outcome {
        Some(outcome) => {
            let mut value = json!({ "agent_id": agent, "status": outcome.status });
            if let Some(text) = &outcome.text {
                value["text"] = json!(text);
            }
            if let Some(error) = &outcome.error {
                value["error"] = json!(error);
            }
            if let Some(partial) = &outcome.partial {
                value["partial"] = json!(partial);
            }
            if !outcome.is_completed() {
                value["reason"] = json!(outcome.reason);
            }
            value.to_string()
        }
        None => json!({ "agent_id": agent, "status": "running" }).to_string(),
    }
}

/// How a call is answered.
enum Answer {
    /// Now, with this text (and whether it is an error).
    Now(String, bool),
    /// When the agent settles (or the timeout passes).
    Wait(AgentId, Option<Duration>),
    /// When the owner answers (a steer to this agent).
    Owner,
    /// When every agent of the set has settled, under the policy.
    Set(Vec<AgentId>, WaitPolicy),
}

fn refused(error: impl ToString) -> Answer {
    Answer::Now(error.to_string(), true)
}

pub(super) async fn dispatch(
    state: &mut AgentState,
    myself: &ActorRef<AgentMsg>,
    turn: u32,
    index: usize,
    call: ToolCall,
) {
    let answer = match call.name.as_str() {
        AGENT_TOOL => spawn_or_resume(state, myself, turn, index, &call).await,
        GET_RESULT_TOOL => read_result(state, &call),
        STEER_TOOL => steer(state, &call).await,
        ABORT_TOOL => abort(state, &call),
        WAIT_TOOL => wait_set(state, &call),
        _ => ask_owner(state, &call),
    };
    match answer {
        Answer::Now(text, is_error) => state.answer_call(turn, index, text, is_error),
        Answer::Wait(agent, timeout) => {
            let task = wait_task(state, myself, turn, index, agent, timeout);
            if let Some(pending) = state.pending_call(turn, index) {
                pending.task = Some(task);
                pending.waits_on = vec![agent];
            }
        }
        Answer::Owner => {
            let task = owner_gone_task(state, myself);
            if let Some(pending) = state.pending_call(turn, index) {
                pending.asks_owner = true;
                pending.task = task;
            }
        }
        Answer::Set(agents, policy) => {
            let task = set_task(state, myself, turn, index, agents.clone(), policy);
            if let Some(pending) = state.pending_call(turn, index) {
                pending.task = Some(task);
                pending.waits_on = agents;
            }
        }
    }
}

/// A task that refuses the agent's pending question if its owner settles first (a detached
/// agent outlives its owner, and a question queued behind the owner's stop is dropped by
/// ractor).
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
                let _ = reply_to.cast(AgentMsg::AskRefused { reason });
            }
        }
    });
    Some(task.abort_handle())
}

/// A task that answers call `index` of `turn` with every outcome of `agents` once the wait over
/// them ends under `policy`.
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
            let list: Vec<serde_json::Value> = agents
                .iter()
                .zip(&outcomes)
                .map(|(&agent, outcome)| {
                    serde_json::from_str(&result_text(agent, Some(outcome))).unwrap_or_default()
                })
                .collect();
            let result = Ok(json!({ "policy": policy, "outcomes": list }).to_string());
            let _ = reply_to.cast(AgentMsg::ToolFinished {
                turn,
                index,
                result,
            });
        })
        .abort_handle()
}

/// A task that answers call `index` of `turn` when `agent` settles, or after `timeout` with its
/// current status. Cancelling it (abort, early answer) never touches `agent`.
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
    state
        .shared
        .spawn(async move {
            let Some(mut settled) = settled else { return };
            let wait = async {
                match settled.wait_for(Option::is_some).await {
                    Ok(outcome) => outcome.clone(),
                    Err(_) => None,
                }
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
            let result = Ok(result_text(agent, outcome.as_ref()));
            let _ = reply_to.cast(AgentMsg::ToolFinished {
                turn,
                index,
                result,
            });
        })
        .abort_handle()
}

fn mark_read(state: &mut AgentState, agent: AgentId) {
    if let Some(child) = state.children.iter_mut().find(|c| c.id == agent) {
        child.read = true;
    }
}

#[derive(Deserialize)]
struct ResumeInput {
    resume: String,
    #[serde(default)]
    prompt: String,
    #[serde(default)]
    background: bool,
}

async fn spawn_or_resume(
    state: &mut AgentState,
    myself: &ActorRef<AgentMsg>,
    turn: u32,
    index: usize,
    call: &ToolCall,
) -> Answer {
    if call.input.get("resume").is_some() {
        return resume(state, myself, call).await;
    }
    let request: SpawnRequest = match serde_json::from_value(call.input.clone()) {
        Ok(request) => request,
        Err(error) => return refused(SpawnError::InvalidRequest(error.to_string())),
    };
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
    // another owner's) to get that child back. They name the call by its place (turn and
    // position), never by the model's call id, which need not be unique.
    let request_id = RequestId::derived(state.id, state.run, &format!("t{turn}c{index}"));
    let detached = request.detached;
    let owner_capabilities = state
        .shared
        .config
        .attenuate_tools
        .then(|| state.capabilities.clone());
    let spawned = spawn::spawn(
        &state.shared,
        SpawnSpec {
            owner: state.id,
            owner_actor: myself,
            owner_capabilities,
            owner_conversation: &state.conversation,
            definition,
            branch: state.branch.clone(),
            request: request.with_request_id(request_id),
            pooled: false,
        },
    )
    .await;
    let child = match spawned {
        Ok(Spawned::New(id)) => {
            state.children.push(Child {
                id,
                detached,
                background,
                settled: false,
                read: false,
            });
            id
        }
        Ok(Spawned::Existing(id) | Spawned::Queued(id)) => id,
        Err(error) => return refused(error),
    };
    answer_for(state, child, background)
}

/// A background spawn answers with the child's id (and status) at once; a foreground one
/// waits for the child.
fn answer_for(state: &AgentState, child: AgentId, background: bool) -> Answer {
    if background {
        Answer::Now(
            result_text(child, state.shared.registry.outcome(child).as_ref()),
            false,
        )
    } else {
        Answer::Wait(child, None)
    }
}

async fn resume(state: &mut AgentState, myself: &ActorRef<AgentMsg>, call: &ToolCall) -> Answer {
    let input: ResumeInput = match serde_json::from_value(call.input.clone()) {
        Ok(input) => input,
        Err(error) => return refused(SpawnError::InvalidRequest(error.to_string())),
    };
    // Resume re-creates the agent's actor under its owner, so only the owner may resume it,
    // whatever the control scope.
    let target = match parse_id(&input.resume) {
        Ok(target) => target,
        Err(error) => return refused(error),
    };
    let reopened =
        match state
            .shared
            .registry
            .reopen(target, state.id, &state.shared.config, input.prompt)
        {
            Ok(reopened) => reopened,
            Err(error) => return refused(error),
        };
    let started = spawn::start(
        &state.shared,
        target,
        reopened.depth,
        reopened.token,
        myself,
        reopened.start,
    )
    .await;
    if let Err(error) = started {
        return refused(error);
    }
    match state.children.iter_mut().find(|c| c.id == target) {
        Some(child) => {
            child.settled = false;
            child.read = false;
            child.background = input.background;
        }
        None => state.children.push(Child {
            id: target,
            detached: state
                .shared
                .registry
                .record(target)
                .is_some_and(|r| r.detached),
            background: input.background,
            settled: false,
            read: false,
        }),
    }
    answer_for(state, target, input.background)
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
    let input = serde_json::from_value::<TargetInput>(call.input.clone())
        .map_err(|error| refused(format!("invalid input: {error}")))?;
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
    match state.shared.registry.outcome(agent) {
        Some(outcome) => {
            mark_read(state, agent);
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
    // A steer to a child with an open question is its answer.
    state.open_questions.remove(&agent);
    let receipt = match state
        .shared
        .registry
        .route_steer(agent, input.message.clone())
    {
        Ok(SteerRoute::Queued) => SteerReceipt::Queued,
        Ok(SteerRoute::Actor(actor)) => {
            // The receipt is the target's own answer: it says `delivered` only once the steer
            // is in its inbox for a coming turn (or answered its question), and refuses a
            // steer that crossed the end of its run. Steers only go down the tree, so this
            // call never waits on an actor that waits on this one.
            let actor = ActorRef::<AgentMsg>::from(actor);
            let text = input.message;
            match ractor::call!(actor, |reply| AgentMsg::Steer {
                text,
                reply: Some(reply)
            }) {
                Ok(Ok(receipt)) => receipt,
                Ok(Err(error)) => return refused(error),
                Err(_) => {
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
    let input = match serde_json::from_value::<SetInput>(call.input.clone()) {
        Ok(input) => input,
        Err(error) => return refused(format!("invalid input: {error}")),
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

fn ask_owner(state: &mut AgentState, call: &ToolCall) -> Answer {
    let input = match serde_json::from_value::<AskInput>(call.input.clone()) {
        Ok(input) => input,
        Err(error) => return refused(format!("invalid input: {error}")),
    };
    let asking = matches!(&state.phase, super::Phase::Acting { calls, .. }
        if calls.iter().any(|c| c.asks_owner && c.result.is_none()));
    if asking {
        // The owner answers a child's question with its next steer: one question at a time.
        return refused("one question at a time: the previous ask_owner is not answered yet");
    }
    state.shared.registry.announce(
        state.id,
        EventKind::Asked {
            question: input.question.clone(),
        },
    );
    let asked = AgentMsg::Asked {
        child: state.id,
        question: input.question,
    };
    match state.owner.cast(asked) {
        Ok(()) => Answer::Owner,
        Err(_) => refused("the owner is gone"),
    }
}
