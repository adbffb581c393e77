//! Control is ownership-scoped: `get_subagent_result` (peek and wait) and `steer_subagent`
//! on an id that is not the caller's own child, whether a sibling's child, a sibling, the
//! caller's owner, another branch's agent or an id that does not exist, are all refused with
//! the same error text (up to the echoed id), so ids cannot be probed; a refused steer reaches
//! nobody, while the caller's own child is read and steered normally.

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::EventKind;
use agent_tree::testkit::{Call, ScriptedModel, Target, Turn};
use serde_json::json;
use tokio::time::Instant;

use crate::support::{
    JsonContent, RecordingModel, catalog, delegator, leaf, record, spawn_admitted, within,
};

const INNER_WORK: Duration = Duration::from_secs(20);

/// Every probe the `right` agent makes in its second turn: (call, id it names, which kind).
fn probes() -> Vec<(Call, &'static str)> {
    let raw = |id: &str| Target::Raw(id.to_owned());
    vec![
        // a sibling's child (live)
        (Call::peek(raw("a5")), "a5"),
        (Call::result(raw("a5")), "a5"),
        (Call::steer(raw("a5"), "foreign steer"), "a5"),
        // a sibling (live)
        (Call::peek(raw("a4")), "a4"),
        (Call::steer(raw("a4"), "foreign steer"), "a4"),
        // the caller's own owner
        (Call::peek(raw("a3")), "a3"),
        (Call::steer(raw("a3"), "foreign steer"), "a3"),
        // another branch's agent, live
        (Call::peek(raw("a2")), "a2"),
        (Call::result(raw("a2")), "a2"),
        (Call::steer(raw("a2"), "foreign steer"), "a2"),
        // another branch's agent, already settled
        (Call::peek(raw("a1")), "a1"),
        (Call::result(raw("a1")), "a1"),
        (Call::steer(raw("a1"), "foreign steer"), "a1"),
        // an id that does not exist
        (Call::peek(raw("a99")), "a99"),
        (Call::result(raw("a99")), "a99"),
        (Call::steer(raw("a99"), "foreign steer"), "a99"),
    ]
}

fn scripted() -> ScriptedModel {
    let mut right_probe: Vec<Call> = probes().into_iter().map(|(call, _)| call).collect();
    // Two positive controls after the probes: the caller's own child.
    right_probe.push(Call::peek(Target::Spawned(0)));
    right_probe.push(Call::steer(Target::Spawned(0), "own steer"));
    ScriptedModel::new()
        .script("quick", [Turn::answer("quick done")])
        .script(
            "other",
            [Turn::answer("other done").after(Duration::from_secs(30))],
        )
        .script(
            "lead",
            [
                Turn::spawn_background("left", "left branch"),
                // Later, so that the left branch's child exists first (ids are deterministic).
                Turn::spawn("right", "right branch").after(Duration::from_secs(1)),
                Turn::answer("lead done"),
            ],
        )
        .script(
            "left",
            [
                Turn::spawn_background("inner", "left's child"),
                Turn::calls([Call::result(Target::Spawned(0))]),
                Turn::answer("left done"),
            ],
        )
        .script(
            "right",
            [
                Turn::spawn_background("inner", "right's child"),
                Turn::calls(right_probe),
                Turn::calls([Call::result(Target::Spawned(0))]),
                Turn::answer("right done"),
            ],
        )
        .script(
            "inner",
            [
                Turn::calls([Call::tool("noop", json!({}))]).after(INNER_WORK),
                Turn::answer("inner done"),
            ],
        )
}

#[tokio::test(start_paused = true)]
async fn foreign_and_missing_ids_get_the_same_refusal() {
    let model = RecordingModel::new(scripted());
    let tree = Tree::builder()
        .catalog(catalog([
            leaf("quick"),
            leaf("other"),
            delegator("lead", &["left", "right"]),
            delegator("left", &["inner"]),
            delegator("right", &["inner"]),
            leaf("inner"),
        ]))
        .model(model.clone())
        .tool(crate::support::noop_tool())
        .expect("tool name is free")
        .build()
        .await
        .expect("tree builds");
    let mut events = tree.subscribe();
    let start = Instant::now();

    let mut quick = spawn_admitted(&tree, SpawnRequest::new("quick", "done at once")).await;
    assert!(within("quick", quick.outcome()).await.is_completed());
    let other = spawn_admitted(&tree, SpawnRequest::new("other", "another branch")).await;
    let mut lead = spawn_admitted(&tree, SpawnRequest::new("lead", "two branches")).await;
    assert!(within("the lead", lead.outcome()).await.is_completed());
    let events = crate::support::events_at_idle(&tree, &mut events).await;
    let snapshot = tree.snapshot();
    let text = snapshot.render_text();

    // The ids the probes name are what the test thinks they are.
    let [a1, a2, a3, a4, a5, a6, a7] = [1, 2, 3, 4, 5, 6, 7].map(AgentId::new);
    assert_eq!((quick.id(), other.id(), lead.id()), (a1, a2, a3));
    let placed = |id, agent_type: &str, parent| {
        let r = record(&snapshot, id);
        assert_eq!(
            (r.agent_type.as_str(), r.parent),
            (agent_type, Some(parent)),
            "{id} in\n{text}"
        );
    };
    placed(a4, "left", a3);
    placed(a5, "inner", a4);
    placed(a6, "right", a3);
    placed(a7, "inner", a6);
    assert_eq!(snapshot.agents().count(), 7, "{text}");
    for r in snapshot.agents() {
        assert_eq!(r.status, AgentStatus::Completed, "{} in\n{text}", r.id);
    }

    // What `right` was told about each probe.
    let turn3 = model.request(a6, 3);
    let result_of = |index: usize| -> agent_tree::protocol::Message {
        turn3
            .tool_result(&format!("call_2_{index}"))
            .cloned()
            .unwrap_or_else(|| panic!("no result for probe {index}"))
    };
    let mut refusals = Vec::new();
    for (index, (call, named)) in probes().into_iter().enumerate() {
        let result = result_of(index);
        assert!(
            result.is_error,
            "probe {call:?} was not refused: {result:?}"
        );
        assert!(
            result.content.contains(named),
            "the refusal echoes the id it was given: {result:?}"
        );
        let normalized = result.content.replace(named, "<id>");
        refusals.push((format!("{call:?}"), normalized));
    }
    let (_, first) = &refusals[0];
    for (call, refusal) in &refusals {
        assert_eq!(
            refusal, first,
            "{call} was refused differently from a sibling's child"
        );
    }
    for hint in [
        "running",
        "completed",
        "inner",
        "left",
        "other",
        "lead",
        "quick",
    ] {
        assert!(
            !first.contains(hint),
            "the refusal {first:?} leaks {hint:?}"
        );
    }

    // The waiting probes did not wait: `right` went on long before any inner child ended.
    assert!(
        turn3.at - start < INNER_WORK,
        "right resumed only after {:?}",
        turn3.at - start
    );

    // The caller's own child is reachable: read (running) and steered (delivered).
    let own_peek = result_of(probes().len());
    assert!(!own_peek.is_error, "{own_peek:?}");
    assert_eq!(
        own_peek.json(),
        json!({ "agent_id": "a7", "status": "running" })
    );
    let own_steer = result_of(probes().len() + 1);
    assert!(!own_steer.is_error, "{own_steer:?}");
    assert_eq!(
        own_steer.json(),
        json!({ "agent_id": "a7", "receipt": "delivered" })
    );

    // A refused steer reached nobody; the accepted one reached exactly its target.
    let steered: Vec<AgentId> = events
        .iter()
        .filter(|e| e.kind == EventKind::Steered)
        .map(|e| e.agent)
        .collect();
    assert_eq!(steered, [a7], "steered agents");
    assert!(model.request(a7, 2).has_user_message("own steer"));
    for foreign in [a1, a2, a3, a4, a5] {
        for seen in model.calls_of(foreign) {
            assert!(
                !seen.has_user_message("foreign steer"),
                "{foreign} received a foreign steer"
            );
        }
    }
    // The live foreign agents did take a turn after the probes, without the steer.
    assert!(!model.request(a5, 2).has_user_message("foreign steer"));
    assert!(!model.request(a3, 3).has_user_message("foreign steer"));

    within("shutdown", tree.shutdown()).await;
}
