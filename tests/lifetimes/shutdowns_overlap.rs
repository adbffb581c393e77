//! Shutdowns that overlap: a subtree shutdown and the tree's shutdown begun together both
//! return, every agent ends with reason `shutdown`, and each report names the agents it
//! reached.

use agent_tree::prelude::*;
use agent_tree::protocol::EndReason;
use agent_tree::testkit::{ScriptedModel, Turn};

use crate::races_mt::{assert_folds, bounded};
use crate::support::harness::{a, tree};
use crate::support::lifetimes::spawned;
use crate::support::scripts::background_spawns;
use crate::support::{RecordingModel, catalog, delegator, leaf};

/// A subtree shutdown and the tree's shutdown overlap (both begin before any agent acts):
/// the subtree's agents wait under two countdowns (the inline one and the boxed rest); both
/// shutdowns return, and every agent is final.
#[tokio::test(start_paused = true)]
async fn overlapping_subtree_and_tree_shutdowns_both_return() {
    let scripted = ScriptedModel::new()
        .script(
            "lead",
            [
                background_spawns([("kid", "one"), ("kid", "two")]),
                Turn::hang(),
            ],
        )
        .script("kid", [Turn::hang()]);
    let model = RecordingModel::new(scripted);
    let tree = tree(
        model.clone(),
        catalog([delegator("lead", &["kid"]), leaf("kid")]),
        TreeConfig::default(),
    )
    .await;
    let mut all = tree.subscribe();
    let lead = spawned(&tree, "lead", "go").await;
    let other = spawned(&tree, "kid", "alone").await;
    bounded("kids", model.until_all_calls(&[a(3), a(4), other], 1)).await;
    let (subtree, whole) = bounded("both shutdowns", async {
        tokio::join!(tree.shutdown_agent(lead), tree.shutdown())
    })
    .await;
    let subtree = subtree.expect("a subtree shutdown");
    let snapshot = tree.snapshot();
    for record in snapshot.agents().filter(|r| !r.id.is_root()) {
        assert!(
            record.status.is_terminal(),
            "{}: {:?}",
            record.id,
            record.status
        );
        let reason = record.outcome.as_ref().map(|o| o.reason);
        assert_eq!(reason, Some(EndReason::Shutdown), "{}", record.id);
    }
    let mut reached: Vec<AgentId> = subtree
        .graceful
        .iter()
        .chain(&subtree.killed)
        .copied()
        .collect();
    reached.sort();
    assert_eq!(
        reached,
        [lead, a(3), a(4)],
        "the subtree's report: {subtree:?}"
    );
    assert!(
        whole.graceful.contains(&other),
        "the tree's report: {whole:?}"
    );
    assert_folds(&tree, &all.drain(), 0);
}
