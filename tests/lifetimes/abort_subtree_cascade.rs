//! An abort reaches a whole subtree at once, then the subtree settles bottom-up.
//!
//! A tree four levels deep (lead → 2 mids → 4 leaves → 4 deep agents), every agent with a
//! model call in flight. Aborting the lead cancels every in-flight model call at every depth
//! at the same virtual instant; every agent ends `aborted` at that instant (the lead with
//! reason `aborted`, everything below with `owner_ended`); each child's terminal event comes
//! before its owner's; and each keeps its last text as partial output. Aborting a middle
//! agent — by the application or by its owner's `abort_subagent` tool — reaches exactly its
//! subtree.

use std::collections::BTreeSet;
use std::time::Duration;

use agent_tree::ABORT_TOOL;
use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, Event, TreeSnapshot};
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use serde_json::json;

use crate::support::harness::{a, tree};
use crate::support::{
    CallEnd, RecordingModel, catalog, delegator, leaf, spawn_admitted, terminal_event, within,
};

const AGENTS: usize = 11;

fn fan(child: &str, n: usize) -> Turn {
    Turn::calls((0..n).map(|i| Call::spawn_background(child, format!("{child} {i}"))))
}

/// Builds the four-level tree with every agent hanging in its second model call (its first
/// call spawned or called a tool, with narrated text). `lead_then` replaces the lead's hang.
async fn four_levels(lead_then: Vec<Turn>) -> (Tree, RecordingModel) {
    let model = RecordingModel::new(
        ScriptedModel::new()
            .script(
                "lead",
                Script::new(std::iter::once(fan("mid", 2)).chain(lead_then)),
            )
            .script("mid", [fan("leaf", 2), Turn::hang()])
            .script("leaf", [fan("deep", 1), Turn::hang()])
            .script(
                "deep",
                [
                    Turn::calls([Call::tool("noop", json!({}))]),
                    Turn::calls([Call::tool("noop", json!({}))]),
                    Turn::hang(),
                ],
            ),
    )
    .narrated();
    let tree = tree(
        model.clone(),
        catalog([
            delegator("lead", &["mid"]),
            delegator("mid", &["leaf"]),
            delegator("leaf", &["deep"]),
            leaf("deep"),
        ]),
        TreeConfig::default(),
    )
    .await;
    spawn_admitted(&tree, SpawnRequest::new("lead", "build")).await;
    model
        .until("every agent in its hanging call", |calls| {
            let agents: BTreeSet<AgentId> = calls.iter().map(|c| c.agent).collect();
            agents.len() == AGENTS
                && agents.iter().all(|&id| {
                    let n = calls.iter().filter(|c| c.agent == id).count();
                    let deep = calls
                        .iter()
                        .any(|c| c.agent == id && c.agent_type == "deep");
                    n >= if deep { 3 } else { 2 }
                })
        })
        .await;
    let snapshot = tree.snapshot();
    assert_eq!(snapshot.agents().count(), AGENTS);
    assert_eq!(snapshot.agents().map(|r| r.depth).max(), Some(4));
    (tree, model)
}

fn subtree_of(snapshot: &TreeSnapshot, top: AgentId) -> Vec<AgentId> {
    let mut out = vec![top];
    let mut i = 0;
    while i < out.len() {
        out.extend(
            snapshot
                .record(out[i])
                .expect("record")
                .children
                .iter()
                .copied(),
        );
        i += 1;
    }
    out
}

/// Checks that `top`'s subtree was aborted at once at `at`, settled bottom-up and kept its
/// partial output, and that every agent outside it still runs untouched.
fn assert_aborted_at_once(
    tree: &Tree,
    model: &RecordingModel,
    events: &[Event],
    top: AgentId,
    at: tokio::time::Instant,
) {
    let snapshot = tree.snapshot();
    let text = snapshot.render_text();
    let inside = subtree_of(&snapshot, top);
    let at_ms = u64::try_from((at - tree.epoch()).as_millis()).expect("ms");
    for &id in &inside {
        let end = terminal_event(events, id).unwrap_or_else(|| panic!("{id} never settled"));
        let reason = if id == top {
            EndReason::Aborted
        } else {
            EndReason::OwnerEnded
        };
        assert_eq!(
            (end.kind.name(), end.kind.reason()),
            ("aborted", Some(reason)),
            "{id}\n{text}"
        );
        assert_eq!(end.at_ms, at_ms, "{id} ended at the abort's instant");
        let record = snapshot.record(id).expect("record");
        assert_eq!(record.status, AgentStatus::Aborted, "{id}");
        for &child in &record.children {
            let child_end = terminal_event(events, child).expect("child settled").seq;
            assert!(child_end < end.seq, "{child} settled after its owner {id}");
        }
        // The in-flight call was cancelled at that instant; earlier ones had returned.
        let calls = model.calls_of(id);
        let (last, earlier) = calls.split_last().expect("calls");
        assert_eq!(last.end, CallEnd::Dropped, "{id}");
        assert_eq!(last.ended_at, Some(at), "{id}");
        assert!(earlier.iter().all(|c| c.end == CallEnd::Returned), "{id}");
        // Partial output: the last text the model produced.
        let outcome = tree.outcome(id).expect("outcome");
        let last_text = RecordingModel::narration(id, earlier.last().expect("a text turn").turn);
        assert_eq!(outcome.partial.as_deref(), Some(last_text.as_str()), "{id}");
    }
    for record in snapshot.agents().filter(|r| !inside.contains(&r.id)) {
        assert_eq!(record.status, AgentStatus::Running, "{}\n{text}", record.id);
        let calls = model.calls_of(record.id);
        assert_eq!(
            calls.last().expect("calls").end,
            CallEnd::InFlight,
            "{}",
            record.id
        );
    }
}

#[tokio::test(start_paused = true)]
async fn aborting_the_top_cancels_every_depth_at_once_and_settles_bottom_up() {
    let (tree, model) = four_levels(vec![Turn::hang()]).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut events = tree.subscribe();
    let at = tokio::time::Instant::now();
    tree.abort(a(1)).expect("the lead exists");
    within("idle", tree.idle()).await;
    let events = events.drain();
    assert_aborted_at_once(&tree, &model, &events, a(1), at);
    assert_eq!(
        events
            .iter()
            .filter(|e| e.kind.terminal_status().is_some())
            .count(),
        AGENTS
    );
    tree.shutdown().await;
    assert!(tree.alive_actors().is_empty());
}

#[tokio::test(start_paused = true)]
async fn aborting_a_middle_agent_reaches_exactly_its_subtree() {
    let (tree, model) = four_levels(vec![Turn::hang()]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mid = tree.record(a(1)).expect("lead").children[1];
    let inside = subtree_of(&tree.snapshot(), mid);
    assert_eq!(inside.len(), 5);
    let mut events = tree.subscribe();
    let at = tokio::time::Instant::now();
    tree.abort(mid).expect("the mid exists");
    within("the mid", async {
        tree.handle(mid).expect("mid").outcome().await
    })
    .await;
    let events = events.drain();
    assert_aborted_at_once(&tree, &model, &events, mid, at);
    assert_eq!(tree.live(), AGENTS - 5);
    tree.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_owner_aborting_a_child_with_its_tool_reaches_the_childs_subtree() {
    // The lead waits 3 s, then aborts its first mid, then hangs.
    let (tree, model) = four_levels(vec![
        Turn::calls([Call::tool(ABORT_TOOL, json!({ "agent_id": "a2" }))])
            .after(Duration::from_secs(3)),
        Turn::hang(),
    ])
    .await;
    let mut events = tree.subscribe();
    let mid = a(2);
    within("the mid", async {
        tree.handle(mid).expect("mid").outcome().await
    })
    .await;
    let at = model.calls_of(a(1))[1].at + Duration::from_secs(3);
    model.until_calls(a(1), 3).await;
    let result = model.calls_of(a(1))[2]
        .messages
        .last()
        .cloned()
        .expect("result");
    assert!(!result.is_error, "{result:?}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&result.content).expect("JSON")["status"],
        json!("aborting")
    );
    let events = events.drain();
    assert_aborted_at_once(&tree, &model, &events, mid, at);
    // The lead's own partial output is untouched: it is still running.
    assert_eq!(
        tree.record(a(1)).expect("lead").status,
        AgentStatus::Running
    );
    tree.shutdown().await;
}
