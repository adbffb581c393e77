//! Tables that switch to an index past 16 entries (the root's request ids, an agent's child
//! and call tables) and records shared copy-on-write with snapshots change nothing a caller
//! can see:
//!
//! * every request id replays to its agent before, at and after the list-to-map switch, and
//!   an unseen one gets a new agent;
//! * children restarted after their owner's child table was indexed still answer their calls
//!   in a turn of more than 16 calls;
//! * a snapshot never changes after it was taken.

use agent_tree::prelude::*;
use agent_tree::protocol::RequestId;
use agent_tree::testkit::{EventProbe, ScriptedModel, Turn};

use crate::support::lifetimes::{hanging, ms, spawned};
use crate::support::races::{GUARD, bounded, outcome};
use crate::support::{catalog, leaf};

/// The root's request ids move from a list to a map at the 17th; every earlier id, the one
/// that triggered the switch and later ones each still return the existing agent (no second
/// record, no second `spawned`), while an unseen id gets a new agent.
#[tokio::test(start_paused = true)]
async fn a_request_id_replays_its_agent_across_the_list_to_map_switch() {
    let tree = crate::support::harness::tree(
        ScriptedModel::new().script("w", [Turn::hang()]),
        catalog([leaf("w")]),
        TreeConfig::default()
            .with_max_total_agents(64)
            .with_max_concurrent(64),
    )
    .await;
    let request = |n: usize| {
        SpawnRequest::new("w", format!("job {n}"))
            .with_request_id(RequestId::new(format!("job-{n}")))
    };
    let mut ids = Vec::new();
    for n in 0..20 {
        let id = tree.spawn(request(n)).await.expect("admitted").id();
        ids.push(id);
        // Replay every id so far after each spawn: before, at and after the switch.
        for (m, &want) in ids.iter().enumerate() {
            let again = tree.spawn(request(m)).await.expect("replay").id();
            assert_eq!(again, want, "replay of job-{m} after {} spawns", n + 1);
        }
    }
    assert_eq!(
        tree.snapshot().agents().count(),
        20,
        "{}",
        tree.snapshot().render_text()
    );
    let fresh = tree.spawn(request(20)).await.expect("admitted").id();
    assert!(
        !ids.contains(&fresh),
        "a new request id got an existing agent {fresh}"
    );
    let report = bounded(GUARD, "the shutdown", tree.shutdown()).await;
    assert!(report.killed.is_empty(), "{report:?}");
}

/// One turn of 20 foreground `Agent` calls, so the call table is indexed (> 16 calls) and
/// the child table is indexed at the 17th spawn while the turn's calls are being dispatched.
/// The first child (added before the index existed) and the last (added after) are transient
/// and fail once: each is restarted after the index was built (its old actor replaced in the
/// index), and its second run's end still answers its call. Every one of the 20 calls gets a
/// `completed` result and the owner completes.
#[tokio::test(start_paused = true)]
async fn restarted_children_answer_their_calls_across_the_index_thresholds() {
    let n = 20;
    let calls = (0..n).map(|i| {
        let agent_type = if i == 0 || i == n - 1 { "flaky" } else { "w" };
        agent_tree::testkit::Call::spawn(agent_type, format!("job {i}"))
    });
    let model = ScriptedModel::new()
        .script("lead", [Turn::calls(calls), Turn::answer("all done")])
        .script("w", [Turn::answer("ok").after(ms(20))])
        .script(
            "flaky",
            [Turn::fail("boom").after(ms(10)), Turn::answer("ok at last")],
        );
    let catalog = catalog([
        crate::support::delegator("lead", &["w", "flaky"]).with_supervision(
            agent_tree::protocol::Strategy::OneForOne,
            10,
            5_000,
        ),
        leaf("w"),
        leaf("flaky").with_restart(agent_tree::protocol::RestartPolicy::Transient),
    ]);
    let tree = crate::support::harness::tree(
        model.clone(),
        catalog,
        TreeConfig::default()
            .with_max_children_per_agent(32)
            .with_max_total_agents(64),
    )
    .await;
    let lead = spawned(&tree, "lead", "go").await;
    let got = outcome(&tree, lead, GUARD).await;
    assert_eq!(got.status, AgentStatus::Completed, "{got:?}");
    let results = crate::support::harness::results(&model, lead, 1);
    assert_eq!(results.len(), n, "{results:?}");
    for (i, result) in results.iter().enumerate() {
        assert_eq!(
            crate::support::harness::status_of(result),
            "completed",
            "call {i}: {}",
            result.content
        );
    }
    let snapshot = tree.snapshot();
    let flaky = crate::support::all_of_type(&snapshot, "flaky");
    assert_eq!(flaky.len(), 2, "{}", snapshot.render_text());
    for id in flaky {
        assert_eq!(
            crate::support::record(&snapshot, id).incarnation,
            2,
            "{}",
            snapshot.render_text()
        );
    }
    bounded(GUARD, "the shutdown", tree.shutdown()).await;
}

/// A snapshot's records are the registry's own, changed copy-on-write: a snapshot taken
/// before usage, settles, restarts and a shutdown stays exactly what it was (compared by its
/// JSON), while a later snapshot sees the changes.
#[tokio::test(start_paused = true)]
async fn an_earlier_snapshot_never_changes() {
    let tree = crate::support::harness::tree(
        ScriptedModel::new()
            .script("done", [Turn::answer("ok").usage(Usage::tokens(3, 4))])
            .script("w", hanging(1)),
        catalog([leaf("done"), leaf("w")]),
        TreeConfig::default(),
    )
    .await;
    let mut events = EventProbe::new(&tree);
    let w = spawned(&tree, "w", "hang").await;
    events
        .expect_event("a start", crate::support::harness::started(w))
        .await;
    let before = tree.snapshot();
    let frozen = serde_json::to_string(&before).expect("json");
    let done = spawned(&tree, "done", "go").await;
    let got = outcome(&tree, done, GUARD).await;
    assert_eq!(got.status, AgentStatus::Completed);
    bounded(GUARD, "the shutdown", tree.shutdown()).await;
    assert_eq!(
        serde_json::to_string(&before).expect("json"),
        frozen,
        "an earlier snapshot changed after later events"
    );
    let after = tree.snapshot();
    assert!(after.record(done).is_some());
    assert!(after.record(w).expect("w").status.is_terminal());
    assert!(!before.record(w).expect("w").status.is_terminal());
    assert_ne!(
        after.record(AgentId::ROOT).expect("root").subtree,
        Usage::ZERO
    );
    assert_eq!(
        before.record(AgentId::ROOT).expect("root").subtree,
        Usage::ZERO
    );
}
