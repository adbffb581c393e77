//! Delegation is an explicit capability: the orchestration tools (`Agent`,
//! `get_subagent_result`, `steer_subagent`, `abort_subagent`, `wait_subagents`) are offered only to an agent
//! whose definition opts in with `allowed_subagents`, that sits below its branch's depth cap,
//! is not isolated and whose tool policy does not deny `Agent`. `Agent` is inferred into an
//! explicit tool allowlist, and `allowed_subagents` is never inherited by children.
//!
//! Every verdict is read from what the agent was offered (the scripted model's log) and from
//! the tool results it received when it tried to spawn anyway.

use crate::support::harness::{a, depth_capped_tree, results, tools, tree_with_tools};
use crate::support::scripts::delegates;
use crate::support::{build_tree, catalog};
use agent_tree::prelude::*;
use agent_tree::testkit::{Script, ScriptedModel, Turn};
use agent_tree::{ASK_OWNER_TOOL, ORCHESTRATION_TOOLS};

fn has_orchestration(offered: &[String]) -> Vec<&'static str> {
    ORCHESTRATION_TOOLS
        .into_iter()
        .filter(|t| offered.iter().any(|o| o == t))
        .collect()
}

/// A type that tries to spawn a `leaf` child, then answers.
fn tries_to_spawn() -> Script {
    Script::new(delegates("leaf", "go", "done"))
}

fn model(types: &[&str]) -> ScriptedModel {
    let mut model = ScriptedModel::new().script("leaf", [Turn::answer("leaf done")]);
    for t in types {
        model = model.script(*t, tries_to_spawn());
    }
    model
}

/// Asserts that the top-level agent's spawn (read at its second model call) was admitted and
/// made `a2` a `leaf`.
fn assert_spawned_a_leaf(tree: &Tree, model: &ScriptedModel) {
    let spawn = results(model, a(1), 1);
    assert!(!spawn[0].is_error, "{}", spawn[0].content);
    assert_eq!(tree.record(a(2)).unwrap().agent_type, "leaf");
}

const NOT_AVAILABLE: &str = "tool \"Agent\" is not available to this agent";

/// An agent whose definition opts in with `allowed_subagents` and that sits below the depth
/// cap is offered every orchestration tool, and its spawn succeeds.
#[tokio::test(start_paused = true)]
async fn an_opted_in_agent_below_the_cap_gets_every_orchestration_tool() {
    let model = model(&["boss"]);
    let catalog = catalog([
        AgentDefinition::new("boss", "").with_allowed_subagents(SubagentAllowance::All),
        AgentDefinition::new("leaf", ""),
    ]);
    let tree = build_tree(catalog, model.clone()).await;
    let outcome = tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
    assert!(outcome.is_completed(), "{}", outcome.summary());
    let offered = tools(&model, a(1), 0);
    assert_eq!(has_orchestration(&offered), ORCHESTRATION_TOOLS);
    // A top-level agent's owner is the application, which has no question handler here.
    assert!(!offered.iter().any(|t| t == ASK_OWNER_TOOL));
    assert_spawned_a_leaf(&tree, &model);
    tree.shutdown().await;
}

/// An agent at its branch's depth cap is offered no orchestration tool, even when its
/// definition opts in, and its spawn attempt is refused.
#[tokio::test(start_paused = true)]
async fn none_at_the_depth_cap() {
    // max_depth 2: the top-level delegator (depth 1) may delegate; its delegating child at
    // depth 2 sits at the cap and gets none of the tools, and its attempt is refused.
    let model = ScriptedModel::new()
        .script("boss", delegates("boss", "one level down", "done"))
        .script("leaf", [Turn::answer("leaf done")]);
    let catalog = catalog([
        AgentDefinition::new("boss", "").with_allowed_subagents(SubagentAllowance::All),
        AgentDefinition::new("leaf", ""),
    ]);
    let tree = depth_capped_tree(model.clone(), catalog, 2).await;
    let outcome = tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
    assert!(outcome.is_completed(), "{}", outcome.summary());
    assert_eq!(tree.record(a(2)).unwrap().depth, 2);
    assert_eq!(
        has_orchestration(&tools(&model, a(1), 0)),
        ORCHESTRATION_TOOLS
    );
    assert!(has_orchestration(&tools(&model, a(2), 0)).is_empty());
    let attempt = results(&model, a(2), 1);
    assert!(attempt[0].is_error);
    assert_eq!(
        crate::support::error_text(&attempt[0].content),
        NOT_AVAILABLE
    );
    assert_eq!(
        tree.snapshot().agents().count(),
        2,
        "no depth-3 agent exists"
    );
    tree.shutdown().await;
}

/// An isolated agent, one whose tool policy denies `Agent`, and one without
/// `allowed_subagents` (or with an empty list) are offered no orchestration tool.
#[tokio::test(start_paused = true)]
async fn none_for_isolated_denied_or_not_opted_in_agents() {
    let model = model(&["isolated", "denied", "plain", "empty-list"]);
    let catalog = catalog([
        AgentDefinition::new("isolated", "")
            .with_allowed_subagents(SubagentAllowance::All)
            .isolated(),
        AgentDefinition::new("denied", "")
            .with_allowed_subagents(SubagentAllowance::All)
            .with_disallowed_tools(["Agent"]),
        AgentDefinition::new("plain", ""),
        AgentDefinition::new("empty-list", "")
            .with_allowed_subagents(SubagentAllowance::only(Vec::<String>::new())),
        AgentDefinition::new("leaf", ""),
    ]);
    let tree = build_tree(catalog, model.clone()).await;
    for (n, agent_type) in ["isolated", "denied", "plain", "empty-list"]
        .into_iter()
        .enumerate()
    {
        let id = a(n as u64 + 1);
        let outcome = tree.run(SpawnRequest::new(agent_type, "go")).await.unwrap();
        assert!(
            outcome.is_completed(),
            "{agent_type}: {}",
            outcome.summary()
        );
        assert_eq!(tree.record(id).unwrap().agent_type, agent_type);
        let offered = tools(&model, id, 0);
        assert!(
            has_orchestration(&offered).is_empty(),
            "{agent_type} was offered {offered:?}"
        );
        let attempt = results(&model, id, 1);
        assert!(attempt[0].is_error, "{agent_type} spawned");
        assert_eq!(
            crate::support::error_text(&attempt[0].content),
            NOT_AVAILABLE,
            "{agent_type}"
        );
        assert!(tree.record(id).unwrap().children.is_empty());
    }
    tree.shutdown().await;
}

/// Denying one orchestration tool by name removes that tool alone; the others stay offered.
#[tokio::test(start_paused = true)]
async fn a_deny_of_one_orchestration_tool_removes_only_that_one() {
    let model = model(&["boss"]);
    let catalog = catalog([
        AgentDefinition::new("boss", "")
            .with_allowed_subagents(SubagentAllowance::All)
            .with_disallowed_tools(["steer_subagent"]),
        AgentDefinition::new("leaf", ""),
    ]);
    let tree = build_tree(catalog, model.clone()).await;
    tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
    let offered = tools(&model, a(1), 0);
    assert_eq!(
        has_orchestration(&offered),
        [
            "Agent",
            "get_subagent_result",
            "abort_subagent",
            "wait_subagents"
        ]
    );
    tree.shutdown().await;
}

/// An agent with an explicit tool allowlist and `allowed_subagents` gets the orchestration
/// tools without listing `Agent`, and only the user tools it lists.
#[tokio::test(start_paused = true)]
async fn agent_is_inferred_into_an_explicit_tool_allowlist() {
    let model = model(&["reader"]);
    let catalog = catalog([
        AgentDefinition::new("reader", "")
            .with_tools(ToolSet::only(["read"]))
            .with_allowed_subagents(SubagentAllowance::only(["leaf"])),
        AgentDefinition::new("leaf", ""),
    ]);
    let tree = tree_with_tools(model.clone(), catalog, TreeConfig::default()).await;
    let outcome = tree.run(SpawnRequest::new("reader", "go")).await.unwrap();
    assert!(outcome.is_completed(), "{}", outcome.summary());
    let offered = tools(&model, a(1), 0);
    assert!(offered.iter().any(|t| t == "read"));
    assert!(!offered.iter().any(|t| t == "write" || t == "bash"));
    assert_eq!(has_orchestration(&offered), ORCHESTRATION_TOOLS);
    assert_spawned_a_leaf(&tree, &model);
    tree.shutdown().await;
}

/// `allowed_subagents` is never inherited: a child whose own definition does not opt in
/// cannot spawn, whatever its owner may do.
#[tokio::test(start_paused = true)]
async fn allowed_subagents_is_not_inherited_by_children() {
    // boss (allowed: all) → plain (no allowed_subagents of its own): plain cannot spawn,
    // although its owner could and the depth cap is far.
    let model = ScriptedModel::new()
        .script("boss", delegates("plain", "delegate", "done"))
        .script("plain", tries_to_spawn())
        .script("leaf", [Turn::answer("leaf done")]);
    let catalog = catalog([
        AgentDefinition::new("boss", "").with_allowed_subagents(SubagentAllowance::All),
        AgentDefinition::new("plain", ""),
        AgentDefinition::new("leaf", ""),
    ]);
    let tree = build_tree(catalog, model.clone()).await;
    let outcome = tree.run(SpawnRequest::new("boss", "go")).await.unwrap();
    assert!(outcome.is_completed(), "{}", outcome.summary());
    let plain = tree.record(a(2)).unwrap();
    assert_eq!((plain.agent_type.as_str(), plain.depth), ("plain", 2));
    assert!(has_orchestration(&tools(&model, a(2), 0)).is_empty());
    let attempt = results(&model, a(2), 1);
    assert!(attempt[0].is_error);
    assert_eq!(
        crate::support::error_text(&attempt[0].content),
        NOT_AVAILABLE
    );
    assert!(plain.children.is_empty());
    assert_eq!(tree.snapshot().agents().count(), 2);
    tree.shutdown().await;
}
