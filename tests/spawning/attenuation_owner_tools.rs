//! Privilege attenuation: by default a child runs with its own definition's user tools; with
//! `TreeConfig::with_attenuated_tools(true)` it gets only the user tools its owner also
//! holds, transitively down the tree, and a tool it lacks is refused when called.

use crate::support::catalog;
use crate::support::harness::{a, idle, results, tools, tree_with_tools};
use crate::support::scripts::delegates;
use agent_tree::prelude::*;
use agent_tree::testkit::{Call, ScriptedModel, Turn};
use serde_json::json;

const USER_TOOLS: [&str; 3] = ["read", "write", "bash"];

/// lead (read, write) → mid (every tool, delegates) → leaf (write, bash).
fn lead_mid_leaf() -> Catalog {
    catalog([
        AgentDefinition::new("lead", "")
            .with_tools(ToolSet::only(["read", "write"]))
            .with_allowed_subagents(SubagentAllowance::All),
        AgentDefinition::new("mid", "").with_allowed_subagents(SubagentAllowance::All),
        AgentDefinition::new("leaf", "").with_tools(ToolSet::only(["write", "bash"])),
    ])
}

fn model() -> ScriptedModel {
    ScriptedModel::new()
        .script("lead", delegates("mid", "go", "lead done"))
        .script(
            "mid",
            [
                Turn::calls([Call::tool("bash", json!({}))]),
                Turn::spawn("leaf", "go"),
                Turn::answer("mid done"),
            ],
        )
        .script(
            "leaf",
            [
                Turn::calls([
                    Call::tool("bash", json!({})),
                    Call::tool("write", json!({})),
                ]),
                Turn::answer("leaf done"),
            ],
        )
}

fn user_tools(model: &ScriptedModel, id: AgentId) -> Vec<String> {
    tools(model, id, 0)
        .into_iter()
        .filter(|t| USER_TOOLS.contains(&t.as_str()))
        .collect()
}

async fn run(config: TreeConfig) -> (Tree, ScriptedModel) {
    let model = model();
    let tree = tree_with_tools(model.clone(), lead_mid_leaf(), config).await;
    let outcome = tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    assert!(outcome.is_completed(), "{}", outcome.summary());
    idle(&tree).await;
    assert_eq!(
        ["lead", "mid", "leaf"].map(|t| t.to_owned()),
        [1, 2, 3].map(|n| tree.record(a(n)).unwrap().agent_type)
    );
    (tree, model)
}

/// Without attenuation (the default) every child runs with its own definition's user tools,
/// whatever its owner holds.
#[tokio::test(start_paused = true)]
async fn off_by_default_children_run_with_their_own_tools() {
    assert!(!TreeConfig::default().attenuate_tools);
    let (tree, model) = run(TreeConfig::default()).await;
    // Toolbox order is by name.
    assert_eq!(user_tools(&model, a(1)), ["read", "write"]);
    assert_eq!(user_tools(&model, a(2)), ["bash", "read", "write"]);
    assert_eq!(user_tools(&model, a(3)), ["bash", "write"]);
    assert_eq!(results(&model, a(2), 1)[0].content, "bash: ok");
    let leaf = results(&model, a(3), 1);
    assert_eq!(
        leaf.iter().map(|m| m.content.as_str()).collect::<Vec<_>>(),
        ["bash: ok", "write: ok"]
    );
    tree.shutdown().await;
}

/// With attenuation a child gets only the user tools its owner also holds, transitively
/// down the tree, and a call to a tool it lost is an error result; orchestration tools are
/// not attenuated.
#[tokio::test(start_paused = true)]
async fn attenuated_children_get_only_tools_their_owner_holds() {
    let (tree, model) = run(TreeConfig::default().with_attenuated_tools(true)).await;
    assert_eq!(user_tools(&model, a(1)), ["read", "write"]);
    // mid would have all three; its owner holds read and write.
    assert_eq!(user_tools(&model, a(2)), ["read", "write"]);
    // leaf would have write and bash; mid (attenuated) holds read and write.
    assert_eq!(user_tools(&model, a(3)), ["write"]);
    // Orchestration tools are not user tools: mid still delegates.
    assert!(tools(&model, a(2), 0).iter().any(|t| t == "Agent"));

    let refused = &results(&model, a(2), 1)[0];
    assert!(refused.is_error);
    assert_eq!(
        crate::support::error_text(&refused.content),
        "tool \"bash\" is not available to this agent"
    );
    let leaf = results(&model, a(3), 1);
    assert!(leaf[0].is_error, "bash was not attenuated away");
    assert_eq!(
        (leaf[1].is_error, leaf[1].content.as_str()),
        (false, "write: ok")
    );
    tree.shutdown().await;
}
