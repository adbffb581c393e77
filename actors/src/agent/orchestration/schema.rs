//! What a model sees of the orchestration tools: their specs (descriptions and JSON
//! schemas, built once) and their results (JSON values, never encoded and decoded again).

use std::sync::Arc;

use agent_tree_protocol::{AgentDefinition, AgentId, Outcome, ToolSpec, WaitPolicy};
use serde_json::{Value, json};

use super::Orchestration;
use crate::catalog::Catalog;
use crate::policy::capability::{self, Capabilities};
use crate::shared::SharedRef;

/// What an agent holds: its capabilities and the tool specs they offer the model (its user
/// tools, then the orchestration tools it holds). One per distinct set in the tree, shared by
/// every agent holding it and every turn they take.
#[derive(Debug, Default)]
pub(crate) struct Offer {
    pub(crate) capabilities: Capabilities,
    pub(crate) specs: Arc<[ToolSpec]>,
    /// The catalog the `Agent` spec lists types of and the caller's definition, kept alive
    /// so their addresses (in the [`OfferKey`]) are never reused while the offer is cached.
    _reach: Option<(Catalog, Arc<AgentDefinition>)>,
}

/// What an offer depends on: the capabilities, and for an agent that delegates, where its
/// `Agent` tool's list of types comes from: its branch's catalog and its definition (by
/// address: both are kept alive by the offer), and whether its children are below the
/// branch's depth cap, which is all the depth changes in the list (whether each type can
/// delegate further). So a chain of a thousand agents of one type shares two offers, not a
/// thousand.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct OfferKey {
    capabilities: Capabilities,
    reach: Option<(usize, usize, bool)>,
}

/// The caller an `Agent` spec is built for.
pub(crate) struct Caller<'a> {
    pub(crate) catalog: &'a Catalog,
    pub(crate) definition: &'a Arc<AgentDefinition>,
    pub(crate) depth: u32,
    pub(crate) max_depth: u32,
}

impl Caller<'_> {
    /// Whether its children are below the depth cap (they may delegate further).
    fn children_nest(&self) -> bool {
        self.depth + 1 < self.max_depth
    }
}

impl Offer {
    /// The offer of nothing, shared: an agent's until `post_start` computes its own.
    pub(crate) fn none() -> Arc<Offer> {
        static NONE: std::sync::LazyLock<Arc<Offer>> = std::sync::LazyLock::new(Arc::default);
        NONE.clone()
    }
}

/// The offer of `capabilities` to `caller` in `shared`'s tree, built the first time a set is
/// seen.
pub(crate) fn offered(
    shared: &SharedRef,
    capabilities: Capabilities,
    caller: &Caller<'_>,
) -> Arc<Offer> {
    let delegates = capabilities.holds(Orchestration::Agent.name());
    let key = OfferKey {
        reach: delegates.then(|| {
            (
                caller.catalog.identity(),
                Arc::as_ptr(caller.definition) as usize,
                caller.children_nest(),
            )
        }),
        capabilities,
    };
    // A leaf lock: only the map is read or written under it (building a set runs outside).
    if let Some(offer) = shared.offered.lock().get(&key) {
        return offer.clone();
    }
    let offer = Arc::new(Offer {
        specs: build_offered(shared, &key.capabilities, delegates.then_some(caller)),
        capabilities: key.capabilities.clone(),
        _reach: delegates.then(|| (caller.catalog.clone(), caller.definition.clone())),
    });
    shared.offered.lock().entry(key).or_insert(offer).clone()
}

/// Where an agent stands, for its offer, when its owner does not attenuate its tools: its
/// branch's catalog and its definition (by address: the cache keeps both alive), and the
/// three facts of its depth its capabilities and offer depend on (below the branch's cap,
/// below depth 1, its children below the cap). The tree's toolbox and question handler are
/// fixed when it is built, so nothing else changes the offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PlaceKey {
    catalog: usize,
    definition: usize,
    below_cap: bool,
    nested: bool,
    children_nest: bool,
}

/// An offer cached by [`PlaceKey`], with what keeps the key's addresses from being reused.
#[derive(Debug)]
pub(crate) struct PlacedOffer {
    offer: Arc<Offer>,
    _keep: (Catalog, Arc<AgentDefinition>),
}

impl Caller<'_> {
    fn place(&self) -> PlaceKey {
        PlaceKey {
            catalog: self.catalog.identity(),
            definition: Arc::as_ptr(self.definition) as usize,
            below_cap: self.depth < self.max_depth,
            nested: self.depth > 1,
            children_nest: self.children_nest(),
        }
    }
}

/// The offer of an agent at `caller`'s place whose owner does not attenuate its tools: the
/// one computed for the first agent there ([`capability::capabilities`], then [`offered`]),
/// after that one lookup of a few words instead of computing and hashing the capabilities
/// again for every agent.
pub(crate) fn offered_at(
    shared: &SharedRef,
    caller: &Caller<'_>,
    capabilities: impl FnOnce() -> Capabilities,
) -> Arc<Offer> {
    let place = caller.place();
    // A leaf lock, as `offered`'s: computing an offer runs outside.
    if let Some(placed) = shared.placed_offers.lock().get(&place) {
        return placed.offer.clone();
    }
    let offer = offered(shared, capabilities(), caller);
    let placed = PlacedOffer {
        offer,
        _keep: (caller.catalog.clone(), caller.definition.clone()),
    };
    shared
        .placed_offers
        .lock()
        .entry(place)
        .or_insert(placed)
        .offer
        .clone()
}

fn build_offered(
    shared: &SharedRef,
    capabilities: &Capabilities,
    caller: Option<&Caller<'_>>,
) -> Arc<[ToolSpec]> {
    capabilities
        .user_tools
        .iter()
        .filter_map(|name| shared.toolbox.spec(name).cloned())
        .chain(
            Orchestration::ALL
                .into_iter()
                .filter(|t| capabilities.holds(t.name()))
                .map(|t| match (t, caller) {
                    (Orchestration::Agent, Some(caller)) => agent_spec(caller),
                    _ => t.spec().clone(),
                }),
        )
        .collect()
}

/// The longest description of a type the `Agent` tool quotes, in bytes: every turn of a
/// delegating agent sends the list, so a long description (an agent file's examples) is cut.
const MAX_TYPE_DESCRIPTION: usize = 200;

/// What the `Agent` tool says after its list of types (and, with no list, after its first
/// sentence).
const AGENT_RETURNS: &str =
    "Returns its result (`background`: its id). Running subagents stop when you answer.";

/// The `Agent` tool as `caller` sees it: the types it may start, each with its description
/// and whether it can delegate further, and `agent_type` constrained to them.
///
/// Every spec here is sent on every turn of every agent holding it, so each says what its
/// tool does in a sentence or two and its schema holds the fields and types, with no
/// descriptions a field's name already gives (`docs/semantics.md` has the measured size).
pub(crate) fn agent_spec(caller: &Caller<'_>) -> ToolSpec {
    let reachable = caller.catalog.reachable_for(caller.definition);
    let mut listing = String::new();
    for definition in &reachable {
        let mut description = definition.description.trim().replace('\n', " ");
        if description.is_empty() {
            description = "(no description)".to_owned();
        }
        crate::error::cut_to(&mut description, MAX_TYPE_DESCRIPTION);
        let mut notes = Vec::new();
        if capability::may_delegate(definition, caller.depth + 1, caller.max_depth) {
            notes.push("can delegate");
        }
        if definition.run_in_background {
            notes.push("background by default");
        }
        let notes = if notes.is_empty() {
            String::new()
        } else {
            format!(" ({})", notes.join("; "))
        };
        listing.push_str(&format!("\n- {}: {description}{notes}", definition.name));
    }
    let names: Vec<&str> = reachable.iter().map(|d| d.name.as_str()).collect();
    let description = format!(
        "Start a subagent (it sees only `prompt`) or `resume` one. Types:{}\n\
         {AGENT_RETURNS}",
        if listing.is_empty() {
            " none (every type you may start is disabled)".to_owned()
        } else {
            listing
        }
    );
    let mut agent_type = json!({ "type": "string" });
    if !names.is_empty() {
        agent_type["enum"] = json!(names);
    }
    ToolSpec::new(
        Orchestration::Agent.name(),
        description,
        agent_schema(agent_type),
    )
}

/// The `Agent` tool's input schema, with `agent_type`'s.
fn agent_schema(agent_type: Value) -> Value {
    json!({
        "type": "object",
        "properties": {
            "agent_type": agent_type,
            "prompt": { "type": "string" },
            "background": { "type": "boolean" },
            "resume": { "type": "string" }
        },
        "required": ["agent_type", "prompt"]
    })
}

pub(super) fn build_spec(tool: Orchestration) -> ToolSpec {
    let target = |extra: Value, required: Value| {
        let mut schema = json!({
            "type": "object",
            "properties": { "agent_id": { "type": "string" } },
            "required": required
        });
        if let (Some(props), Some(extra)) =
            (schema["properties"].as_object_mut(), extra.as_object())
        {
            props.extend(extra.clone());
        }
        schema
    };
    let (description, schema) = match tool {
        // The spec of no particular caller; every agent that delegates is offered its own,
        // listing its types ([`agent_spec`]).
        Orchestration::Agent => (
            format!(
                "Start a subagent of an allowed type (it sees only `prompt`) or `resume` one. \
                 {AGENT_RETURNS}"
            ),
            agent_schema(json!({ "type": "string" })),
        ),
        Orchestration::GetResult => (
            "Read a subagent's result (`wait`: wait for it).".to_owned(),
            target(
                json!({ "wait": { "type": "boolean" } }),
                json!(["agent_id"]),
            ),
        ),
        Orchestration::Steer => (
            "Message a running subagent or answer its question.".to_owned(),
            target(
                json!({ "message": { "type": "string" } }),
                json!(["agent_id", "message"]),
            ),
        ),
        Orchestration::Abort => (
            "Abort a subagent and its subtree.".to_owned(),
            target(json!({}), json!(["agent_id"])),
        ),
        Orchestration::Wait => (
            "Wait for subagents (policy `fail_fast`: abort the rest at a failure).".to_owned(),
            json!({
                "type": "object",
                "properties": {
                    "agent_ids": { "type": "array", "items": { "type": "string" } },
                    // No enum: the description names the one other than the default, and a
                    // wrong word is answered with serde's list of both.
                    "policy": { "type": "string" }
                },
                "required": ["agent_ids"]
            }),
        ),
        Orchestration::AskOwner => (
            "Ask the agent that started you; waits for its answer.".to_owned(),
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
            if let Some(kind) = outcome.error_kind {
                value["error_kind"] = json!(kind);
            }
            if let Some(partial) = &outcome.partial {
                value["partial"] = json!(partial);
            }
            if !outcome.is_completed() {
                value["reason"] = json!(outcome.reason);
            }
            if outcome.released {
                value["released"] = json!(true);
                // Only when the journal could not give the output back: say so, rather
                // than pass for an agent that answered nothing.
                value["error"] = json!(
                    "the agent's output was released from memory to the journal and could \
                     not be read back"
                );
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
