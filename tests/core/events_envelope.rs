//! Every lifecycle event carries its agent's parent and depth, as the agent's record has
//! them, and a sequence number; sequence numbers are dense from 1 and increasing, across
//! every kind of event (started, usage, steered, completed, failed, aborted by the owner's
//! end, by the application and by shutdown). Each agent has exactly one `started` event,
//! first, and one terminal event, last, matching its final status; the snapshot's tally
//! counts exactly the events emitted; events survive a JSON round trip.

use std::collections::BTreeMap;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{EndReason, Event, EventKind, EventTally, Wire};
use agent_tree::testkit::{Call, ScriptedModel, Turn};
use serde_json::json;

use crate::support::harness::tree_with_tool;
use crate::support::scripts::answers_after_billing;
use crate::support::{build_tree, catalog, delegator, leaf, record, spawn_admitted, within};

fn scripted() -> ScriptedModel {
    ScriptedModel::new()
        .script(
            "lead",
            [
                Turn::calls([
                    Call::spawn_background("sleeper", "outlive me"),
                    Call::spawn("mid", "delegate further"),
                    Call::spawn("failer", "fail"),
                ])
                .usage(Usage::tokens(10, 2)),
                // Ends with the sleeper still live: it is aborted (owner ended).
                Turn::answer("lead done").usage(Usage::tokens(10, 2)),
            ],
        )
        .script(
            "mid",
            [
                Turn::spawn("worker", "work").usage(Usage::tokens(5, 1)),
                Turn::answer("mid done").usage(Usage::tokens(5, 1)),
            ],
        )
        .script(
            "worker",
            answers_after_billing("worked", Usage::tokens(1, 1), Duration::from_millis(5)),
        )
        .script("failer", [Turn::fail("no luck")])
        .script("sleeper", [Turn::hang()])
        .script(
            "steerable",
            [
                Turn::calls([Call::tool("noop", json!({}))])
                    .usage(Usage::tokens(3, 3))
                    .after(Duration::from_secs(1)),
                Turn::answer("steered").usage(Usage::tokens(3, 3)),
            ],
        )
        .script("hanger", [Turn::hang()])
}

/// Every event carries its agent's parent and depth as the record has them and a sequence
/// number dense from 1; each agent has one `started` after its admission and one terminal
/// event last, the tally counts exactly what was emitted, and events survive a JSON round
/// trip.
#[tokio::test(start_paused = true)]
async fn events_carry_parent_and_depth_with_dense_sequence_numbers() {
    let tree = tree_with_tool(
        catalog([
            delegator("lead", &["sleeper", "mid", "failer"]),
            delegator("mid", &["worker"]),
            leaf("worker"),
            leaf("failer"),
            leaf("sleeper"),
            leaf("steerable"),
            leaf("hanger"),
        ]),
        scripted(),
        crate::support::noop_tool(),
    )
    .await;
    let mut events = tree.subscribe();

    let mut lead = spawn_admitted(&tree, SpawnRequest::new("lead", "go")).await;
    assert!(within("lead", lead.outcome()).await.is_completed());

    let mut steerable = spawn_admitted(&tree, SpawnRequest::new("steerable", "listen")).await;
    tree.steer(steerable.id(), "a hint")
        .await
        .expect("a live agent can be steered");
    assert!(
        within("steerable", steerable.outcome())
            .await
            .is_completed()
    );

    let mut hanger = spawn_admitted(&tree, SpawnRequest::new("hanger", "hang")).await;
    tree.abort(hanger.id()).expect("abortable");
    let aborted = within("hanger", hanger.outcome()).await;
    assert_eq!(
        (aborted.status, aborted.reason),
        (AgentStatus::Aborted, EndReason::Aborted)
    );

    let late = spawn_admitted(&tree, SpawnRequest::new("hanger", "hang until shutdown")).await;
    let snapshot = tree.snapshot();
    let emitted_so_far = snapshot.tally.total();
    within("shutdown", tree.shutdown()).await;
    let events: Vec<Event> = events.drain();
    let text = snapshot.render_text();

    // Dense from 1, increasing, and time never runs backwards.
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    assert!(events.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));

    // Parent and depth as in the agent's record. (Every agent was admitted before the
    // snapshot; records never move.)
    for e in &events {
        let r = record(&snapshot, e.agent);
        // The root's only events are the shutdown's: it stops admitting (`completing`),
        // then it completes, with reason `shutdown`, after every agent.
        if e.agent.is_root() {
            assert!(
                matches!(e.kind, EventKind::Completing)
                    || (e.kind.name(), e.kind.reason()) == ("completed", Some(EndReason::Shutdown)),
                "an event about the root: {e:?}"
            );
        }
        assert_eq!((e.parent, e.depth), (r.parent, r.depth), "{e:?} vs\n{text}");
        let back = Event::from_json(&e.to_json()).expect("events decode");
        assert_eq!(&back, e);
        let value: serde_json::Value = serde_json::from_str(&e.to_json()).expect("JSON");
        assert_eq!(value["depth"], json!(r.depth));
        assert_eq!(value["parent"], json!(r.parent.map(|p| p.to_string())));
    }

    // The tally counts exactly what was emitted.
    let mut tally = EventTally::default();
    for e in events.iter().filter(|e| e.seq <= emitted_so_far) {
        tally.count(&e.kind);
    }
    assert_eq!(tally, snapshot.tally);

    // One `started` first and one terminal event last, per agent.
    let mut per_agent: BTreeMap<AgentId, Vec<&Event>> = BTreeMap::new();
    for e in &events {
        per_agent.entry(e.agent).or_default().push(e);
    }
    per_agent.remove(&AgentId::ROOT);
    assert_eq!(per_agent.len(), snapshot.agents().count(), "{text}");
    // Admission (`spawned`) first, then its run's `started`; one terminal event last.
    for (id, list) in &per_agent {
        assert!(
            matches!(list[0].kind, EventKind::Spawned { .. }),
            "{id}: {list:?}"
        );
        assert!(
            matches!(list[1].kind, EventKind::Started { .. }),
            "{id}: {list:?}"
        );
        let terminal: Vec<_> = list
            .iter()
            .filter(|e| e.kind.terminal_status().is_some())
            .collect();
        assert_eq!(terminal.len(), 1, "{id}: {list:?}");
        assert_eq!(
            list.last().map(|e| e.seq),
            Some(terminal[0].seq),
            "{id}: {list:?}"
        );
    }

    // The kinds this run must have produced, with the agent each is about.
    // Each as its kind's name and, for terminal events, its outcome's reason.
    let kind_of = |agent_type: &str| -> Vec<(&str, Option<EndReason>)> {
        let ids = crate::support::all_of_type(&snapshot, agent_type);
        events
            .iter()
            .filter(|e| ids.contains(&e.agent))
            .filter(|e| e.kind.terminal_status().is_some() || e.kind == EventKind::Steered)
            .map(|e| (e.kind.name(), e.kind.reason()))
            .collect()
    };
    assert_eq!(
        kind_of("worker"),
        [("completed", Some(EndReason::FinalAnswer))]
    );
    assert_eq!(kind_of("failer"), [("failed", Some(EndReason::ModelError))]);
    assert_eq!(
        kind_of("sleeper"),
        [("aborted", Some(EndReason::OwnerEnded))]
    );
    assert_eq!(
        kind_of("steerable"),
        [
            ("steered", None),
            ("completed", Some(EndReason::FinalAnswer))
        ]
    );
    let hangers: Vec<(&str, Option<EndReason>)> = events
        .iter()
        .filter(|e| e.agent == hanger.id() || e.agent == late.id())
        .filter(|e| e.kind.terminal_status().is_some())
        .map(|e| (e.kind.name(), e.kind.reason()))
        .collect();
    // (Which reason the shutdown gives is checked on its own below.)
    assert!(
        matches!(
            hangers[..],
            [("aborted", Some(EndReason::Aborted)), ("aborted", _)]
        ),
        "{hangers:?}"
    );
    let depths: Vec<u32> = events.iter().map(|e| e.depth).collect();
    assert!(depths.contains(&3), "the run reached depth 3");
}

/// Agents stopped by a tree shutdown end with reason `shutdown` (not `owner_ended`, which
/// is for an ancestor's abort or end), in their outcome and in their terminal event.
#[tokio::test(start_paused = true)]
async fn shutdown_ends_agents_with_reason_shutdown() {
    let tree = build_tree(
        catalog([delegator("holder", &["hanger"]), leaf("hanger")]),
        ScriptedModel::new()
            .script(
                "holder",
                [Turn::spawn_background("hanger", "hang"), Turn::hang()],
            )
            .script("hanger", [Turn::hang()]),
    )
    .await;
    let mut events = tree.subscribe();
    let mut holder = spawn_admitted(&tree, SpawnRequest::new("holder", "hold")).await;
    // Wait until the child runs too.
    within("the child to start", async {
        loop {
            let e = events.next().await.expect("tree alive");
            if e.depth == 2 && matches!(e.kind, EventKind::Started { .. }) {
                break;
            }
        }
    })
    .await;
    let child = tree
        .record(holder.id())
        .and_then(|r| r.children.first().copied())
        .expect("the child exists");
    let mut child = tree.handle(child).expect("a handle on the child");
    let report = within("shutdown", tree.shutdown()).await;
    assert!(report.killed.is_empty(), "{report:?}");

    let holder_outcome = within("holder", holder.outcome()).await;
    let child_outcome = within("child", child.outcome()).await;
    let terminal: Vec<(AgentId, EventKind)> = events
        .drain()
        .into_iter()
        .filter(|e| e.kind.terminal_status().is_some())
        .map(|e| (e.agent, e.kind))
        .collect();
    assert_eq!(
        (holder_outcome.status, holder_outcome.reason),
        (AgentStatus::Aborted, EndReason::Shutdown)
    );
    assert_eq!(
        (child_outcome.status, child_outcome.reason),
        (AgentStatus::Aborted, EndReason::Shutdown)
    );
    for (agent, kind) in terminal.into_iter().filter(|(a, _)| !a.is_root()) {
        assert_eq!(
            (kind.name(), kind.reason()),
            ("aborted", Some(EndReason::Shutdown)),
            "{agent}"
        );
    }
}
