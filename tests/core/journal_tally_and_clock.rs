//! The event tally and the clock across recoveries and compactions: the tally counts every
//! event of the tree's whole life, and every `*_ms` after a recovery is later than every one
//! before (docs/semantics.md, "Journal and recovery").

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{Event, EventTally};
use agent_tree::{JournalConfig, read_journal};

use crate::journal_steps::{bounded, fixed, run_go, steps_tree};
use crate::support::journal::{TempDir, journaled_tree};
use crate::support::{catalog, leaf};

fn tally_of(events: &[Event]) -> EventTally {
    let mut tally = EventTally::default();
    for event in events {
        tally.count(&event.kind);
    }
    tally
}

fn add(a: &EventTally, b: &EventTally) -> EventTally {
    // EventTally has public counters only through `count`; rebuild a sum by JSON.
    let a = serde_json::to_value(a).unwrap();
    let b = serde_json::to_value(b).unwrap();
    let mut sum = serde_json::Map::new();
    for (key, value) in a.as_object().unwrap() {
        let other = b.get(key).and_then(|v| v.as_u64()).unwrap_or(0);
        sum.insert(key.clone(), (value.as_u64().unwrap() + other).into());
    }
    serde_json::from_value(serde_json::Value::Object(sum)).unwrap()
}

fn last_event_ms(path: &std::path::Path) -> u64 {
    read_journal(path, None).unwrap().last_ms
}

/// Rule: "recovery rebuilds ... the event tally"; the tally covers the tree's whole life:
/// after two recoveries and compactions, `snapshot.tally` equals the count of every event
/// the trees ever emitted (each tree's subscriber from its build, plus the events recovery
/// emitted before anyone could subscribe: the root's `resumed` and `started`), and the
/// journal's own replay agrees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tally_is_the_count_of_every_event_across_two_recoveries_and_compactions() {
    let dir = TempDir::new("journal-tally");
    let path = dir.file("j");
    let build = || async {
        steps_tree(400)
            .journal(
                JournalConfig::new(&path)
                    .rotate_at(6 * 1024)
                    .keep_read_outputs(500),
            )
            .build()
            .await
            .unwrap()
    };
    let mut total = EventTally::default();
    for process in 0..3 {
        let tree = build().await;
        let start = tree.snapshot().tally;
        if process == 0 {
            assert_eq!(
                start.total(),
                0,
                "a new tree has counted nothing: {start:?}"
            );
        } else {
            // Recovery of a shut-down tree: the root's resumed and started only.
            assert_eq!(
                start.total(),
                total.total() + 2,
                "process {process}: the recovered tally goes on from the journal's \
                 ({start:?} vs {total:?})"
            );
        }
        total = start.clone();
        let mut events = tree.subscribe();
        for _ in 0..3 {
            run_go(&tree, "worker").await;
        }
        let first = AgentId::new(1);
        let mut resumed = bounded("resume", tree.resume(first, "again"))
            .await
            .unwrap();
        bounded("resumed", resumed.outcome()).await;
        bounded("flush", tree.flush_journal()).await;
        let now = tree.snapshot().tally;
        let seen = tally_of(&events.drain());
        assert_eq!(
            now,
            add(&total, &seen),
            "process {process}: the tally is what it started with plus every event since"
        );
        let replayed = read_journal(&path, None).unwrap();
        assert_eq!(
            replayed.tally, now,
            "process {process}: the journal's count equals the tree's"
        );
        bounded("shutdown", tree.shutdown()).await;
        let after = tree.snapshot().tally;
        let seen = tally_of(&events.drain());
        assert_eq!(
            after,
            add(&now, &seen),
            "process {process}: shutdown's events"
        );
        assert_eq!(read_journal(&path, None).unwrap().tally, after);
        total = after;
        drop(tree);
    }
    let journal = std::fs::read_to_string(&path).unwrap();
    assert!(journal.contains("\"entry\":\"checkpoint\""), "compacted");
}

/// Rule: "its clock goes on from the journal's last event, so every `*_ms` after recovery
/// is later than every one before", and `Tree::epoch` is "the instant every `*_ms` field
/// of records and events counts from": on a paused clock, after two recoveries (one from a
/// compacted file), new events are not earlier than any before, and `epoch + taken_ms` is
/// now.
#[tokio::test(start_paused = true)]
async fn the_clock_goes_on_across_recoveries_on_a_paused_clock_and_epoch_agrees() {
    let dir = TempDir::new("journal-clock");
    let path = dir.file("j");
    let model = || fixed("a".repeat(3000));
    let build = || async {
        journaled_tree(
            model(),
            catalog([leaf("worker")]),
            JournalConfig::new(&path).rotate_at(4 * 1024),
        )
        .await
    };
    let mut last = 0;
    for process in 0..3 {
        let tree = build().await;
        let snapshot = tree.snapshot();
        let max_before = snapshot
            .agents()
            .flat_map(|r| [Some(r.created_ms), r.ended_ms])
            .flatten()
            .max()
            .unwrap_or(0);
        assert!(
            snapshot.taken_ms >= max_before && snapshot.taken_ms >= last,
            "process {process}: the clock starts at {} before {max_before}/{last}",
            snapshot.taken_ms
        );
        let now = tokio::time::Instant::now();
        let epoch_now = tree.epoch() + Duration::from_millis(tree.snapshot().taken_ms);
        assert!(
            epoch_now <= now && now - epoch_now < Duration::from_millis(2),
            "process {process}: epoch + taken_ms is not now"
        );
        let mut events = tree.subscribe();
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_secs(5)).await;
            tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
        }
        tree.flush_journal().await;
        for event in events.drain() {
            assert!(
                event.at_ms >= max_before,
                "process {process}: event {} at {} ms, before {max_before} ms of an earlier \
                 process",
                event.seq,
                event.at_ms
            );
        }
        tree.shutdown().await;
        last = last_event_ms(&path);
        drop(tree);
    }
    let journal = std::fs::read_to_string(&path).unwrap();
    assert!(journal.contains("\"entry\":\"checkpoint\""), "compacted");
}
