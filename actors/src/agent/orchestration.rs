//! The orchestration tools as an agent runs them: `Agent`, `get_subagent_result` and
//! `steer_subagent`.
//!
//! Every operation on a child checks ownership first: only the agent's own children are
//! reachable, and a foreign id gets the same error as a missing one.

use agent_tree_protocol::{AgentId, Outcome, RequestId, SpawnRequest, ToolCall, ToolSpec};
use ractor::ActorRef;
use serde::Deserialize;
use serde_json::json;

use super::{AgentState, Child, PendingCall};
use crate::error::{ControlError, SpawnError};
use crate::msg::AgentMsg;
use crate::spawn::{self, SpawnSpec, Spawned};
use crate::tool::{AGENT_TOOL, GET_RESULT_TOOL, ORCHESTRATION_TOOLS};

pub(super) fn is_orchestration(name: &str) -> bool {
    ORCHESTRATION_TOOLS.contains(&name)
}

/// The spec offered to the model for orchestration tool `name`.
pub(super) fn spec(name: &str) -> ToolSpec {
    let (description, schema) = match name {
        AGENT_TOOL => (
            "Start a subagent of an allowed type with a task. In the foreground the result \
             comes back as this tool's result; in the background an agent id comes back at once.",
            json!({
                "type": "object",
                "properties": {
                    "agent_type": { "type": "string" },
                    "prompt": { "type": "string" },
                    "description": { "type": "string" },
                    "background": { "type": "boolean" }
                },
                "required": ["agent_type", "prompt"]
            }),
        ),
        GET_RESULT_TOOL => (
            "Read the result of one of your subagents by id, optionally waiting for it.",
            json!({
                "type": "object",
                "properties": {
                    "agent_id": { "type": "string" },
                    "wait": { "type": "boolean" }
                },
                "required": ["agent_id"]
            }),
        ),
        _ => (
            "Send guidance to one of your running subagents; it arrives at its next turn.",
            json!({
                "type": "object",
                "properties": {
                    "agent_id": { "type": "string" },
                    "message": { "type": "string" }
                },
                "required": ["agent_id", "message"]
            }),
        ),
    };
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        input_schema: schema,
    }
}

/// The tool result describing a child: its id, status and outcome.
pub(super) fn result_text(child: AgentId, outcome: Option<&Outcome>) -> (String, bool) {
    match outcome {
        Some(outcome) => {
            let mut value = json!({ "agent_id": child, "status": outcome.status });
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
            (value.to_string(), false)
        }
        None => (
            json!({ "agent_id": child, "status": "running" }).to_string(),
            false,
        ),
    }
}

#[derive(Deserialize)]
struct TargetInput {
    agent_id: String,
    #[serde(default)]
    wait: bool,
    #[serde(default)]
    message: String,
}

pub(super) async fn dispatch(
    state: &mut AgentState,
    myself: &ActorRef<AgentMsg>,
    turn: u32,
    call: ToolCall,
) {
    let answer = match call.name.as_str() {
        AGENT_TOOL => spawn_child(state, myself, &call).await,
        GET_RESULT_TOOL => read_result(state, &call),
        _ => steer(state, &call),
    };
    match answer {
        Answer::Now(text, is_error) => state.answer_call(turn, &call.id, text, is_error),
        Answer::When(child) => {
            // The child may have settled already (its notice is queued behind this handler):
            // then the registry has its outcome.
            match state.shared.registry.outcome(child) {
                Some(outcome) if state.children.iter().any(|c| c.id == child && c.settled) => {
                    let (text, is_error) = result_text(child, Some(&outcome));
                    state.answer_call(turn, &call.id, text, is_error);
                }
                _ => {
                    if let Some(pending) = state.pending_call(turn, &call.id) {
                        *pending = PendingCall {
                            call_id: call.id.clone(),
                            result: None,
                            waits_on: Some(child),
                            task: None,
                        };
                    }
                }
            }
        }
    }
}

enum Answer {
    Now(String, bool),
    When(AgentId),
}

fn refused(error: impl ToString) -> Answer {
    Answer::Now(error.to_string(), true)
}

async fn spawn_child(
    state: &mut AgentState,
    myself: &ActorRef<AgentMsg>,
    call: &ToolCall,
) -> Answer {
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
    let request_id = request
        .request_id
        .clone()
        .unwrap_or_else(|| RequestId::derived(state.id, &call.id));
    let spawned = spawn::spawn(
        &state.shared,
        SpawnSpec {
            owner: state.id,
            owner_actor: myself,
            owner_capabilities: None,
            definition,
            branch: state.branch.clone(),
            request: request.with_request_id(request_id),
        },
    )
    .await;
    let child = match spawned {
        Ok(Spawned::New {
            id,
            actor,
            detached,
        }) => {
            state.children.push(Child {
                id,
                actor,
                detached,
                settled: false,
            });
            id
        }
        Ok(Spawned::Existing(id)) => id,
        Err(error) => return refused(error),
    };
    if background {
        let settled = state.children.iter().any(|c| c.id == child && c.settled);
        let outcome = if settled {
            state.shared.registry.outcome(child)
        } else {
            None
        };
        let (text, is_error) = result_text(child, outcome.as_ref());
        Answer::Now(text, is_error)
    } else {
        Answer::When(child)
    }
}

/// The child `input` names, if it is one of the caller's own.
fn own_child(state: &AgentState, agent_id: &str) -> Result<AgentId, ControlError> {
    let id = agent_id.parse::<AgentId>().unwrap_or(AgentId::ROOT);
    state
        .children
        .iter()
        .find(|c| c.id == id)
        .map(|c| c.id)
        .ok_or(ControlError::NotYours(id))
}

fn parse_target(call: &ToolCall) -> Result<TargetInput, Answer> {
    serde_json::from_value::<TargetInput>(call.input.clone())
        .map_err(|error| refused(format!("invalid input: {error}")))
}

fn read_result(state: &mut AgentState, call: &ToolCall) -> Answer {
    let input = match parse_target(call) {
        Ok(input) => input,
        Err(answer) => return answer,
    };
    let child = match own_child(state, &input.agent_id) {
        Ok(child) => child,
        Err(error) => return refused(error),
    };
    let settled = state.children.iter().any(|c| c.id == child && c.settled);
    if settled {
        let (text, is_error) = result_text(child, state.shared.registry.outcome(child).as_ref());
        Answer::Now(text, is_error)
    } else if input.wait {
        Answer::When(child)
    } else {
        let (text, is_error) = result_text(child, None);
        Answer::Now(text, is_error)
    }
}

fn steer(state: &mut AgentState, call: &ToolCall) -> Answer {
    let input = match parse_target(call) {
        Ok(input) => input,
        Err(answer) => return answer,
    };
    let child = match own_child(state, &input.agent_id) {
        Ok(child) => child,
        Err(error) => return refused(error),
    };
    let Some(entry) = state.children.iter().find(|c| c.id == child) else {
        return refused(ControlError::NotYours(child));
    };
    let status = state.shared.registry.status(child);
    match status {
        Some(status) if status.is_live() => {
            let sent = entry.actor.cast(AgentMsg::Steer {
                text: input.message,
                reply: None,
            });
            match sent {
                Ok(()) => Answer::Now(
                    json!({ "agent_id": child, "receipt": "delivered" }).to_string(),
                    false,
                ),
                Err(_) => refused(ControlError::WrongStatus(child, status)),
            }
        }
        Some(status) => refused(ControlError::WrongStatus(child, status)),
        None => refused(ControlError::NotYours(child)),
    }
}
