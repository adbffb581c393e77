//! The cost model of one agent, held by tests: registry lock acquisitions and runtime tasks
//! per leaf agent spawned by a model's `Agent` call, run for one turn and settled (the
//! owner's handling of its end included). See `docs/architecture.md`.

use std::sync::atomic::Ordering;

use agent_tree_protocol::{AgentDefinition, SpawnRequest, SubagentAllowance, Usage};

use crate::testkit::{Call, Script, ScriptedModel, Turn};
use crate::{Catalog, Tree};

/// Lock acquisitions and tasks of a tree whose lead spawns `n` leaves in one turn (in the
/// background, or in the foreground and waits for each), and answers once they have settled.
async fn cost(n: usize, background: bool) -> (u64, u64) {
    let spawns = (0..n).map(|_| {
        if background {
            Call::spawn_background("leaf", "go")
        } else {
            Call::spawn("leaf", "go")
        }
    });
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([Turn::calls(spawns), Turn::answer("lead done")]),
        )
        .script(
            "leaf",
            Script::new([Turn::answer("leaf done").usage(Usage::tokens(3, 2))]),
        );
    let catalog = Catalog::new([
        AgentDefinition::new("lead", "")
            .with_allowed_subagents(SubagentAllowance::All)
            .with_settle(agent_tree_protocol::SettlePolicy::Drain),
        AgentDefinition::new("leaf", ""),
    ])
    .expect("valid");
    let config = crate::TreeConfig::default()
        .with_max_children_per_agent(64)
        .with_max_total_agents(128);
    let tree = Tree::builder()
        .config(config)
        .catalog(catalog)
        .model(model)
        .build()
        .await
        .expect("builds");
    let before = (
        tree.shared.registry.lock_acquisitions(),
        tree.shared.tasks.load(Ordering::Relaxed),
    );
    let outcome = tree
        .run(SpawnRequest::new("lead", "go"))
        .await
        .expect("runs");
    assert!(outcome.is_completed(), "{outcome:?}");
    tree.idle().await;
    let after = (
        tree.shared.registry.lock_acquisitions(),
        tree.shared.tasks.load(Ordering::Relaxed),
    );
    assert_eq!(tree.snapshot().agents().count(), n + 1);
    (after.0 - before.0, after.1 - before.1)
}

/// Per leaf: the difference between trees of 20 and 10 leaves, over 10. The target of the
/// runtime's design: admit, start, usage and settle are one lock acquisition each, and a
/// leaf is its actor alone: its model turn is a future the actor polls, not a task (the
/// owner waits for the leaf from its child table).
#[tokio::test(start_paused = true)]
async fn cost_per_leaf_agent() {
    for background in [true, false] {
        let (locks_10, tasks_10) = cost(10, background).await;
        let (locks_20, tasks_20) = cost(20, background).await;
        let locks = (locks_20 - locks_10) as f64 / 10.0;
        let tasks = (tasks_20 - tasks_10) as f64 / 10.0;
        let how = if background {
            "background"
        } else {
            "foreground"
        };
        println!(
            "per {how} leaf agent: {locks} registry lock acquisitions, {tasks} tasks beside its actor"
        );
        assert!(locks <= 4.0, "{how}: {locks} lock acquisitions per leaf");
        assert!(
            tasks == 0.0,
            "{how}: {tasks} tasks per leaf beside its actor"
        );
    }
}
