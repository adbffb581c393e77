//! Depth, parent and root identity are right at every level of a four-deep tree: in the
//! records, in the lifecycle events, in the model requests and in the tool contexts, for two
//! independent top-level branches mixing foreground and background spawns.

use std::collections::BTreeMap;
use std::sync::Arc;

use agent_tree::FnTool;
use agent_tree::prelude::*;
use agent_tree::protocol::EventKind;
use agent_tree::testkit::{Call, ScriptedModel, Target, Turn};
use parking_lot::Mutex;
use serde_json::json;

use crate::support::harness::tree_with_tool;
use crate::support::scripts::delegates;
use crate::support::{RecordingModel, catalog, delegator, leaf, record, spawn_admitted, within};

fn model() -> ScriptedModel {
    ScriptedModel::new()
        .script(
            "top",
            [
                Turn::calls([
                    Call::spawn("mid", "foreground mid"),
                    Call::spawn_background("mid", "background mid"),
                ]),
                Turn::calls([Call::result(Target::Spawned(1))]),
                Turn::answer("top done"),
            ],
        )
        .script("mid", delegates("low", "go lower", "mid done"))
        .script(
            "low",
            [
                Turn::calls([
                    Call::spawn_background("leaf", "background leaf"),
                    Call::spawn("leaf", "foreground leaf"),
                ]),
                Turn::calls([Call::result(Target::Spawned(0))]),
                Turn::answer("low done"),
            ],
        )
        .script(
            "leaf",
            [
                Turn::calls([Call::tool("whereami", json!({}))]),
                Turn::answer("leaf done"),
            ],
        )
}

/// Follows parent links from `id` up to the root; returns the chain (`id` first, `a0` last).
fn ancestry(snapshot: &agent_tree::protocol::TreeSnapshot, id: AgentId) -> Vec<AgentId> {
    let mut chain = vec![id];
    let mut at = id;
    while let Some(parent) = record(snapshot, at).parent {
        assert!(chain.len() < 64, "parent links loop at {at}");
        chain.push(parent);
        at = parent;
    }
    chain
}

/// Depth, parent and root are right at every level of a four-deep tree, in two independent
/// branches: in the records, the lifecycle events, the model requests and the tool contexts
/// alike.
#[tokio::test(start_paused = true)]
async fn depth_parent_and_root_are_right_at_every_level() {
    let contexts: Arc<Mutex<Vec<(AgentId, String, u32)>>> = Arc::default();
    let seen_contexts = contexts.clone();
    let whereami = FnTool::new("whereami", "says where the caller is", move |ctx, _| {
        let contexts = seen_contexts.clone();
        async move {
            contexts.lock().push((ctx.agent, ctx.agent_type, ctx.depth));
            Ok("here".to_owned())
        }
    });
    let model = RecordingModel::new(model());
    let tree = tree_with_tool(
        catalog([
            delegator("top", &["mid"]),
            delegator("mid", &["low"]),
            delegator("low", &["leaf"]),
            leaf("leaf"),
        ]),
        model.clone(),
        whereami,
    )
    .await;
    let mut events = tree.subscribe();

    let mut first = spawn_admitted(&tree, SpawnRequest::new("top", "branch one")).await;
    let mut second = spawn_admitted(&tree, SpawnRequest::new("top", "branch two")).await;
    let branch_roots = [first.id(), second.id()];
    assert!(within("branch one", first.outcome()).await.is_completed());
    assert!(within("branch two", second.outcome()).await.is_completed());
    let events = crate::support::events_at_idle(&tree, &mut events).await;
    let snapshot = tree.snapshot();
    let text = snapshot.render_text();

    assert_eq!(
        snapshot.depth_histogram_line(),
        "d1=2 d2=4 d3=4 d4=8",
        "{text}"
    );
    let expected_depth = BTreeMap::from([("top", 1), ("mid", 2), ("low", 3), ("leaf", 4)]);

    let root = record(&snapshot, AgentId::ROOT);
    assert_eq!((root.depth, root.parent), (0, None));
    assert_eq!(root.children, branch_roots, "{text}");

    let mut per_branch: BTreeMap<AgentId, usize> = BTreeMap::new();
    for r in snapshot.agents() {
        assert_eq!(r.status, AgentStatus::Completed, "{} in\n{text}", r.id);
        assert_eq!(
            r.depth,
            expected_depth[r.agent_type.as_str()],
            "depth of {} ({})\n{text}",
            r.id,
            r.agent_type
        );
        let parent = record(&snapshot, r.parent.expect("an agent has a parent"));
        assert_eq!(
            parent.depth + 1,
            r.depth,
            "{} under {}\n{text}",
            r.id,
            parent.id
        );
        assert!(
            parent.children.contains(&r.id),
            "{} missing from {}'s children\n{text}",
            r.id,
            parent.id
        );
        // The chain up to the root has exactly `depth` links and ends at a0, through the
        // top-level agent of the branch.
        let chain = ancestry(&snapshot, r.id);
        assert_eq!(
            chain.len() as u32,
            r.depth + 1,
            "chain of {}: {chain:?}",
            r.id
        );
        assert_eq!(chain.last(), Some(&AgentId::ROOT));
        let branch_root = chain[chain.len() - 2];
        assert!(
            branch_roots.contains(&branch_root),
            "{} is in no branch",
            r.id
        );
        *per_branch.entry(branch_root).or_default() += 1;
        // Children agree with parents.
        for &child in &r.children {
            assert_eq!(record(&snapshot, child).parent, Some(r.id));
        }
    }
    assert_eq!(
        per_branch.values().copied().collect::<Vec<_>>(),
        [9, 9],
        "{text}"
    );

    // Events: one `started` per agent, and every event names the agent's parent and depth.
    for r in snapshot.agents() {
        let started: Vec<_> = events
            .iter()
            .filter(|e| e.agent == r.id && matches!(e.kind, EventKind::Started { .. }))
            .collect();
        assert_eq!(started.len(), 1, "started events of {}", r.id);
        assert_eq!(
            started[0].kind,
            EventKind::Started {
                agent_type: r.agent_type.clone(),
                incarnation: 1
            }
        );
    }
    for e in &events {
        let r = record(&snapshot, e.agent);
        assert_eq!((e.parent, e.depth), (r.parent, r.depth), "event {e:?}");
    }

    // What the agents themselves were told about their place.
    let seen = model.calls();
    assert_eq!(seen.len(), 2 * (3 + 2 * 2 + 2 * 3 + 4 * 2), "model calls");
    for s in &seen {
        let r = record(&snapshot, s.agent);
        assert_eq!(s.depth, r.depth, "model request of {}", s.agent);
        assert_eq!(s.agent_type, r.agent_type);
        let delegates = s.tools.iter().any(|t| t == agent_tree::AGENT_TOOL);
        assert_eq!(
            delegates,
            r.agent_type != "leaf",
            "tools of {}: {:?}",
            s.agent,
            s.tools
        );
    }
    let contexts = contexts.lock().clone();
    assert_eq!(contexts.len(), 8, "one whereami call per leaf");
    for (agent, agent_type, depth) in contexts {
        let r = record(&snapshot, agent);
        assert_eq!((agent_type.as_str(), depth), ("leaf", 4));
        assert_eq!(r.depth, depth);
    }

    within("shutdown", tree.shutdown()).await;
}
