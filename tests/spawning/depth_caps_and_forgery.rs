//! Depth: root 0, top-level 1, default `max_depth` 5 (a chain reaches depth 5 and the
//! depth-5 agent has no `Agent` tool); `max_depth` 0 or 1 disables nesting while top-level
//! agents still run; a branch keeps the cap and catalog it started with when the tree's
//! defaults change under it; and depth, parent or root fields forged into an `Agent` tool
//! input are ignored.

use agent_tree::testkit::EventProbe;
use std::time::Duration;

use crate::support::catalog;
use crate::support::harness::{a, depth_capped_tree, idle, outcome_of, results, started, tools};
use crate::support::run_admitted;
use crate::support::scripts::delegates;
use crate::support::spawn_admitted;
use crate::support::{RecordingModel, build_tree};
use agent_tree::DEFAULT_MAX_DEPTH;
use agent_tree::prelude::*;
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use serde_json::json;

const NOT_AVAILABLE: &str = "tool \"Agent\" is not available to this agent";

/// `link` spawns another `link` in the foreground, then answers.
fn chain_model() -> ScriptedModel {
    ScriptedModel::new().script("link", delegates("link", "one level down", "done"))
}

fn link(prompt: &str) -> AgentDefinition {
    AgentDefinition::new("link", prompt).with_allowed_subagents(SubagentAllowance::All)
}

fn offers_agent(model: &ScriptedModel, id: AgentId) -> bool {
    tools(model, id, 0).iter().any(|t| t == "Agent")
}

/// The default `max_depth` is 5: a chain of delegations reaches depth 5, each agent's
/// parent the one above, and the depth-5 agent is not offered `Agent`.
#[tokio::test(start_paused = true)]
async fn the_default_cap_is_five_and_the_depth_five_agent_cannot_delegate() {
    assert_eq!(DEFAULT_MAX_DEPTH, 5);
    let model = chain_model();
    let catalog = catalog([link("")]);
    let tree = build_tree(catalog, model.clone()).await;
    let outcome = tree.run(SpawnRequest::new("link", "go")).await.unwrap();
    assert!(outcome.is_completed(), "{}", outcome.summary());
    idle(&tree).await;
    let snapshot = tree.snapshot();
    assert_eq!(snapshot.depth_histogram_line(), "d1=1 d2=1 d3=1 d4=1 d5=1");
    for n in 1..=5u64 {
        let record = snapshot.record(a(n)).unwrap();
        assert_eq!(record.depth, n as u32);
        assert_eq!(record.parent, Some(a(n - 1)));
        assert_eq!(record.status, AgentStatus::Completed);
        assert_eq!(offers_agent(&model, a(n)), n < 5, "a{n}");
    }
    let refused = results(&model, a(5), 1);
    assert!(refused[0].is_error);
    assert_eq!(
        crate::support::error_text(&refused[0].content),
        NOT_AVAILABLE
    );
    tree.shutdown().await;
}

/// A `max_depth` of 0 or 1 disables nesting: top-level agents still run at depth 1, but
/// none is offered `Agent` and an attempt to spawn is refused.
#[tokio::test(start_paused = true)]
async fn max_depth_zero_or_one_disables_nesting_but_top_level_runs() {
    for cap in [0, 1] {
        let model = chain_model();
        let catalog = catalog([link("")]);
        let tree = depth_capped_tree(model.clone(), catalog, cap).await;
        let outcome = tree.run(SpawnRequest::new("link", "go")).await.unwrap();
        assert!(outcome.is_completed(), "cap {cap}: {}", outcome.summary());
        assert_eq!(tree.record(a(1)).unwrap().depth, 1);
        assert!(!offers_agent(&model, a(1)), "cap {cap}");
        assert_eq!(
            crate::support::error_text(&results(&model, a(1), 1)[0].content),
            NOT_AVAILABLE
        );
        assert_eq!(tree.snapshot().agents().count(), 1, "cap {cap}");
        tree.shutdown().await;
    }
}

/// A branch keeps the depth cap and catalog it started with when the tree's defaults change
/// while it runs; only a new top-level branch gets the new ones.
#[tokio::test(start_paused = true)]
async fn a_running_branch_keeps_the_cap_and_catalog_it_started_with() {
    let scripted = chain_model();
    // Branch 1's top-level agent thinks for a while before delegating, so the tree's defaults
    // change while it runs.
    scripted.script_agent(
        a(1),
        Script::new([
            Turn::spawn("link", "one level down").after(Duration::from_millis(100)),
            Turn::answer("done"),
        ]),
    );
    let model = RecordingModel::new(scripted.clone());
    let old = catalog([link("v1")]);
    let tree = build_tree(old, model.clone()).await;
    let mut events = EventProbe::new(&tree);
    let mut first = spawn_admitted(&tree, SpawnRequest::new("link", "branch 1")).await;
    events.expect_event("a start", started(a(1))).await;

    let new = catalog([link("v2")]);
    tree.set_branch_defaults(new, 2);
    assert_eq!(tree.catalog().get("link").unwrap().prompt, "v2");

    let outcome = tokio::time::timeout(crate::support::harness::GUARD, first.outcome())
        .await
        .unwrap();
    assert!(outcome.is_completed(), "{}", outcome.summary());
    idle(&tree).await;
    let snapshot = tree.snapshot();
    assert_eq!(snapshot.depth_histogram_line(), "d1=1 d2=1 d3=1 d4=1 d5=1");
    for n in 1..=5u64 {
        let requests = model.calls_of(a(n));
        assert_eq!(
            requests[0].system(),
            "v1",
            "a{n} resolved in the new catalog"
        );
        assert_eq!(
            requests[0].tools.iter().any(|t| t == "Agent"),
            n < 5,
            "a{n} did not keep the branch's cap of 5"
        );
    }

    // A new top-level branch starts with the new catalog and cap 2.
    let second = run_admitted(&tree, SpawnRequest::new("link", "branch 2")).await;
    assert!(second.is_completed(), "{}", second.summary());
    idle(&tree).await;
    let top = a(6);
    let child = a(7);
    assert_eq!(tree.record(top).unwrap().depth, 1);
    assert_eq!(tree.record(child).unwrap().depth, 2);
    assert_eq!(
        tree.snapshot().agents().count(),
        7,
        "branch 2 stops at depth 2"
    );
    assert_eq!(model.calls_of(top)[0].system(), "v2");
    assert_eq!(model.calls_of(child)[0].system(), "v2");
    assert!(model.calls_of(top)[0].tools.iter().any(|t| t == "Agent"));
    assert!(!model.calls_of(child)[0].tools.iter().any(|t| t == "Agent"));
    assert_eq!(
        crate::support::error_text(&results(&scripted, child, 1)[0].content),
        NOT_AVAILABLE
    );
    tree.shutdown().await;
}

/// Depth, parent, owner and root fields forged into an `Agent` tool input are ignored: the
/// child sits under its caller at the caller's depth + 1, and the cap still holds for it.
#[tokio::test(start_paused = true)]
async fn forged_depth_parent_and_root_fields_are_ignored() {
    // max_depth 2: a forged `depth: 0` must not lift the child under the cap, and forged
    // parent/root/owner ids must not move it.
    let model = ScriptedModel::new()
        .script(
            "boss",
            [
                Turn::calls([
                    Call::spawn_background("sub", "forged one")
                        .with_field("depth", json!(0))
                        .with_field("parent", json!("a0"))
                        .with_field("root", json!("a0")),
                    Call::spawn_background("sub", "forged two")
                        .with_field("depth", json!(-1))
                        .with_field("parent", json!("a7"))
                        .with_field("owner", json!("a0"))
                        .with_field("root_id", json!("a99")),
                ]),
                Turn::answer("done").after(Duration::from_millis(50)),
                // The subs' completions arrive during that turn: one more to read them.
                Turn::answer("done"),
            ],
        )
        .script(
            "sub",
            [
                Turn::calls([Call::spawn("leaf", "a"), Call::spawn("leaf", "b")]),
                Turn::answer("sub done"),
            ],
        )
        .script("leaf", [Turn::answer("leaf")]);
    // The children opt in to delegation, so only the cap stops them.
    let catalog = catalog([
        AgentDefinition::new("boss", "").with_allowed_subagents(SubagentAllowance::All),
        AgentDefinition::new("sub", "").with_allowed_subagents(SubagentAllowance::All),
        AgentDefinition::new("leaf", ""),
    ]);
    let tree = depth_capped_tree(model.clone(), catalog, 2).await;
    let mut top = tree.spawn(SpawnRequest::new("boss", "go")).await.unwrap();
    let outcome = tokio::time::timeout(crate::support::harness::GUARD, top.outcome())
        .await
        .unwrap();
    assert!(outcome.is_completed(), "{}", outcome.summary());
    idle(&tree).await;
    let spawned = results(&model, a(1), 1);
    assert!(spawned.iter().all(|r| !r.is_error), "{spawned:?}");
    for child in [a(2), a(3)] {
        let record = tree.record(child).unwrap();
        assert_eq!(record.depth, 2, "{child}");
        assert_eq!(record.parent, Some(a(1)), "{child}");
        assert!(!offers_agent(&model, child), "{child} escaped the cap");
        let attempt = results(&model, child, 1);
        assert_eq!(attempt.len(), 2);
        assert!(
            attempt
                .iter()
                .all(|r| crate::support::error_text(&r.content) == NOT_AVAILABLE)
        );
        assert_eq!(
            outcome_of(&tree, child).await.status,
            AgentStatus::Completed
        );
    }
    assert_eq!(tree.record(a(0)).unwrap().children, [a(1)]);
    assert_eq!(tree.record(a(1)).unwrap().children, [a(2), a(3)]);
    assert_eq!(tree.snapshot().agents().count(), 3);
    tree.shutdown().await;
}
