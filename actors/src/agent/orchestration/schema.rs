//! What a model sees of the orchestration tools: their specs (descriptions and JSON
//! schemas, built once) and their results (JSON values, never encoded and decoded again).

use std::sync::Arc;

use agent_tree_protocol::{AgentId, Outcome, ToolSpec, WaitPolicy};
use serde_json::{Value, json};

use super::Orchestration;
use crate::policy::capability::Capabilities;
use crate::shared::SharedRef;

/// What an agent holds: its capabilities and the tool specs they offer the model (its user
/// tools, then the orchestration tools it holds). One per distinct set in the tree, shared by
/// every agent holding it and every turn they take.
#[derive(Debug, Default)]
pub(crate) struct Offer {
    pub(crate) capabilities: Capabilities,
    pub(crate) specs: Arc<[ToolSpec]>,
}

impl Offer {
    /// The offer of nothing, shared: an agent's until `post_start` computes its own.
    pub(crate) fn none() -> Arc<Offer> {
        static NONE: std::sync::LazyLock<Arc<Offer>> = std::sync::LazyLock::new(Arc::default);
        NONE.clone()
    }
}

/// The offer of `capabilities` in `shared`'s tree, built the first time a set is seen.
pub(crate) fn offered(shared: &SharedRef, capabilities: Capabilities) -> Arc<Offer> {
    // A leaf lock: only the map is read or written under it (building a set runs outside).
    if let Some(offer) = shared.offered.lock().get(&capabilities) {
        return offer.clone();
    }
    let offer = Arc::new(Offer {
        specs: build_offered(shared, &capabilities),
        capabilities: capabilities.clone(),
    });
    shared
        .offered
        .lock()
        .entry(capabilities)
        .or_insert(offer)
        .clone()
}

fn build_offered(shared: &SharedRef, capabilities: &Capabilities) -> Arc<[ToolSpec]> {
    capabilities
        .user_tools
        .iter()
        .filter_map(|name| shared.toolbox.spec(name).cloned())
        .chain(
            Orchestration::ALL
                .into_iter()
                .filter(|t| capabilities.holds(t.name()))
                .map(|t| t.spec().clone()),
        )
        .collect()
}

pub(super) fn build_spec(tool: Orchestration) -> ToolSpec {
    let target = |extra: Value| {
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
    let (description, schema) = match tool {
        Orchestration::Agent => (
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
        Orchestration::GetResult => (
            "Read the result of one of your subagents by id; with `wait`, wait for it to settle \
             (at most `timeout_ms` if given; the subagent keeps running either way).",
            target(json!({ "wait": { "type": "boolean" }, "timeout_ms": { "type": "integer" } })),
        ),
        Orchestration::Steer => (
            "Send guidance to one of your running subagents; it arrives at its next turn, or \
             answers its pending question.",
            target(json!({ "message": { "type": "string" } })),
        ),
        Orchestration::Abort => (
            "Abort one of your subagents and everything below it.",
            target(json!({})),
        ),
        Orchestration::Wait => (
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
        Orchestration::AskOwner => (
            "Ask the agent that started you a question and wait for its answer.",
            json!({
                "type": "object",
                "properties": { "question": { "type": "string" } },
                "required": ["question"]
            }),
        ),
    };
    ToolSpec::new(tool.name(), description, schema)
}

/// The result describing an agent: its id, status and outcome.
pub(crate) fn result_value(agent: AgentId, outcome: Option<&Outcome>) -> Value {
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
            value
        }
        None => json!({ "agent_id": agent, "status": "running" }),
    }
}

/// [`result_value`] as the tool result's text.
pub(crate) fn result_text(agent: AgentId, outcome: Option<&Outcome>) -> String {
    result_value(agent, outcome).to_string()
}

/// The result of a wait over a set: the policy and every outcome, in the set's order.
pub(crate) fn set_result(policy: WaitPolicy, outcomes: &[(AgentId, Outcome)]) -> String {
    let list: Vec<Value> = outcomes
        .iter()
        .map(|(agent, outcome)| result_value(*agent, Some(outcome)))
        .collect();
    json!({ "policy": policy, "outcomes": list }).to_string()
}
