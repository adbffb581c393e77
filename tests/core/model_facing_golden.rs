//! What a model sees: the spec (name, description, JSON schema) of every orchestration tool,
//! for one delegating definition, compared with the fixtures in `tests/fixtures/model_facing`.
//! The `Agent` tool lists exactly the types the caller may reach, with descriptions and
//! whether each can delegate further, and constrains `agent_type` to them. Every turn of a
//! delegating agent sends them all, so their size is held under a bound.
//!
//! Regenerate with `UPDATE_GOLDEN=1 cargo test --test core model_facing_golden`; review the
//! diff before committing it.

use std::path::PathBuf;
use std::sync::Arc;

use crate::support::catalog;
use crate::support::run_admitted;
use agent_tree::prelude::*;
use agent_tree::protocol::ToolSpec;
use agent_tree::testkit::FnModel;
use agent_tree::{ModelRequest, ModelResponse, ORCHESTRATION_TOOLS, Question};
use parking_lot::Mutex;

fn planner_team() -> Catalog {
    catalog([
        AgentDefinition::new("planner", "You plan.")
            .with_description("Breaks a task into steps and delegates each step.")
            .with_allowed_subagents(SubagentAllowance::only(["scout", "writer", "retired"])),
        AgentDefinition::new("scout", "You look.")
            .with_description("Finds the files and facts a step needs. Read-only."),
        AgentDefinition::new("writer", "You write.")
            .with_description("Writes and edits code for one step.")
            .with_allowed_subagents(SubagentAllowance::only(["scout"]))
            .in_background(),
        AgentDefinition::new("retired", "").with_enabled(false),
        AgentDefinition::new("secret", "").with_description("Not for the planner."),
    ])
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/model_facing")
        .join(format!("{name}.json"))
}

/// The tools a planner (which delegates and may ask its owner) is offered on its first turn.
async fn planner_tools() -> Vec<ToolSpec> {
    // Answers at once, keeping the tools of the first request.
    let first_tools: Arc<Mutex<Option<Vec<ToolSpec>>>> = Arc::default();
    let keep = first_tools.clone();
    let model = FnModel::new(move |request: ModelRequest| {
        keep.lock().get_or_insert_with(|| request.tools.to_vec());
        std::future::ready(Ok(ModelResponse::text("done")))
    });
    let tree = Tree::builder()
        .catalog(planner_team())
        .model(model)
        .on_question(|_: Question| async { Ok("yes".to_owned()) })
        .build()
        .await
        .unwrap();
    run_admitted(&tree, SpawnRequest::new("planner", "plan")).await;
    let tools = first_tools.lock().clone();
    tools.expect("the planner took a turn")
}

/// A delegating model sees every orchestration tool, and `ask_owner`, exactly as the
/// fixtures in `tests/fixtures/model_facing` spell them.
#[tokio::test(start_paused = true)]
async fn every_orchestration_tool_as_a_delegating_model_sees_it() {
    let tools = planner_tools().await;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    let mut expected: Vec<&str> = ORCHESTRATION_TOOLS.to_vec();
    expected.push("ask_owner");
    assert_eq!(names, expected);
    for spec in &tools {
        let path = fixture(&spec.name);
        let mut text = serde_json::to_string_pretty(spec).unwrap();
        text.push('\n');
        if std::env::var("UPDATE_GOLDEN").as_deref() == Ok("1") {
            std::fs::write(&path, &text).unwrap();
        }
        let golden = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
        assert_eq!(text, golden, "{} differs from its fixture", spec.name);
    }
    // The Agent tool names the reachable, enabled types only, and constrains the choice.
    let agent = &tools[0];
    assert_eq!(
        agent.input_schema["properties"]["agent_type"]["enum"],
        serde_json::json!(["scout", "writer"])
    );
    assert_eq!(
        agent.input_schema["required"],
        serde_json::json!(["agent_type", "prompt"])
    );
    assert!(agent.description.contains("- scout: Finds the files"));
    assert!(agent.description.contains(
        "- writer: Writes and edits code for one step. (can delegate; background by default)"
    ));
    assert!(!agent.description.contains("secret") && !agent.description.contains("retired"));
}

/// What the six orchestration tools cost in every prompt of a delegating agent, as compact
/// JSON (what a server's chat template renders, give or take its wrapping): for this
/// catalog, 3,498 bytes (about 875 tokens at 4 bytes a token) before they were cut; they
/// must stay at most half that, with every type, required field and tool still described.
#[tokio::test(start_paused = true)]
async fn the_orchestration_tools_cost_at_most_half_their_former_prompt_size() {
    const BEFORE: usize = 3_498;
    let tools = planner_tools().await;
    let sizes: Vec<(String, usize)> = tools
        .iter()
        .map(|spec| {
            (
                spec.name.clone(),
                serde_json::to_string(spec).unwrap().len(),
            )
        })
        .collect();
    let total: usize = sizes.iter().map(|(_, size)| size).sum();
    assert!(
        total <= BEFORE / 2,
        "{total} bytes (about {} tokens), over {}: {sizes:?}",
        total / 4,
        BEFORE / 2
    );
    // Still there: one sentence or more per tool, and each required field in its schema.
    for spec in &tools {
        assert!(
            spec.description.len() >= 30,
            "{}: {:?}",
            spec.name,
            spec.description
        );
        let required = spec.input_schema["required"]
            .as_array()
            .expect("required fields");
        for field in required {
            let field = field.as_str().unwrap();
            assert!(
                spec.input_schema["properties"].get(field).is_some(),
                "{}: {field} is required but not described",
                spec.name
            );
        }
    }
}
