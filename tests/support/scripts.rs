//! Script helpers the control and lifetime tests share: one scripted turn that starts
//! several children at once, in the background or in the foreground, and a scripted `boss`
//! run to its completion.

#![allow(dead_code, unreachable_pub)]

use agent_tree::testkit::{Call, Turn};

/// One turn whose message spawns each `(agent_type, task)` of `children` in the background,
/// in order.
pub fn spawns_in_background<const N: usize>(children: [(&str, &str); N]) -> Turn {
    Turn::calls(children.map(|(agent_type, task)| Call::spawn_background(agent_type, task)))
}

/// One turn whose message spawns a `agent_type` in the foreground for each of `tasks`, in
/// order.
pub fn spawns_in_foreground<const N: usize>(agent_type: &str, tasks: [&str; N]) -> Turn {
    Turn::calls(tasks.map(|task| Call::spawn(agent_type, task)))
}

/// One turn whose message spawns `n` `agent_type`s in the background, the `i`-th (from 0)
/// with the task `<task><i>`.
pub fn spawns_n_in_background(agent_type: &str, task: &str, n: usize) -> Turn {
    Turn::calls((0..n).map(|i| Call::spawn_background(agent_type, format!("{task}{i}"))))
}

/// A tree of `catalog` on a clone of `model` (the default configuration) where `boss` ran
/// with the task `go` and completed (checked, with its summary): the tree.
pub async fn boss_completed(
    model: &(impl agent_tree::Model + Clone),
    catalog: agent_tree::Catalog,
) -> agent_tree::Tree {
    let tree =
        super::harness::tree(model.clone(), catalog, agent_tree::TreeConfig::default()).await;
    let outcome =
        super::run_admitted(&tree, agent_tree::protocol::SpawnRequest::new("boss", "go")).await;
    assert!(outcome.is_completed(), "{}", outcome.summary());
    tree
}
