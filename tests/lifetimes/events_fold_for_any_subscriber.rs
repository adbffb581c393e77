//! The event stream folds to the records for any subscriber, whenever it comes and goes:
//! the registry folds events while nobody listens, and a subscriber that comes later, or
//! leaves early, still sees a dense run of events that folds onto a snapshot taken at the
//! instant it subscribed.

use agent_tree::prelude::*;
use agent_tree::testkit::{ScriptedModel, Turn};

use crate::support::lifetimes::ms;
use crate::support::scripts::background_spawns;
use crate::support::{build_tree, catalog, delegator_of_all, leaf};

/// The registry folds events with `apply_owned` (and writes `started` without its agent
/// type) while nobody listens; what subscribers get still folds to the records. A
/// subscriber that comes mid-run, folding what it receives onto a snapshot taken at the same
/// instant, ends with the tree's records and tally, through a restart, a resume and a
/// shutdown; every `started` event it gets names its agent's type; one that came earlier and
/// left mid-run got a dense run of events up to the instant it left.
#[tokio::test(start_paused = true)]
async fn late_and_leaving_subscribers_fold_to_the_records() {
    use agent_tree::protocol::{EventKind, Strategy, apply};
    let model = ScriptedModel::new()
        .script(
            "lead",
            [
                background_spawns([("flaky", "a"), ("worker", "b")]).usage(Usage::tokens(5, 1)),
                Turn::answer("first").after(ms(30)),
                Turn::answer("lead resumed").usage(Usage::tokens(3, 1)),
            ],
        )
        .script(
            "flaky",
            [
                Turn::fail("boom").after(ms(5)),
                Turn::answer("flaky ok")
                    .after(ms(10))
                    .usage(Usage::tokens(2, 2)),
            ],
        )
        .script(
            "worker",
            [Turn::answer("worker ok")
                .after(ms(20))
                .usage(Usage::tokens(1, 1))],
        );
    let tree = build_tree(
        catalog([
            delegator_of_all("lead").with_supervision(Strategy::OneForOne, 3, 5_000),
            leaf("flaky").with_restart(RestartPolicy::Transient),
            leaf("worker"),
        ]),
        model,
    )
    .await;
    // Nobody listens for the first events.
    let lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    tokio::time::sleep(ms(2)).await;
    let mut early = tree.subscribe();
    tokio::time::sleep(ms(6)).await;
    // The same instant (no await between): what the early one leaves with.
    let at_leaving = tree.snapshot();
    let left_with = early.drain();
    drop(early);
    tokio::time::sleep(ms(5)).await;
    // The same instant: a late subscriber and the records it starts from.
    let start = tree.snapshot();
    let mut late = tree.subscribe();
    let outcome = crate::support::harness::outcome_of(&tree, lead.id()).await;
    assert!(outcome.is_completed(), "{outcome:?}");
    let mut resumed = tree.resume(lead.id(), "again").await.unwrap();
    resumed.outcome().await;
    tree.shutdown().await;
    let end = tree.snapshot();
    let events = late.drain();

    let mut records = start.records.clone();
    let mut tally = start.tally.clone();
    for event in &events {
        apply(&mut records, event).unwrap_or_else(|e| panic!("{e}: {event:?}"));
        tally.count(&event.kind);
        if let EventKind::Started { agent_type, .. } = &event.kind {
            if !event.agent.is_root() {
                assert!(!agent_type.is_empty(), "{event:?}");
            }
        }
    }
    assert_eq!(records, end.records);
    assert_eq!(tally, end.tally);
    assert_eq!(
        events.first().map(|e| e.seq),
        Some(start.tally.total() + 1),
        "the late subscriber starts at the next event"
    );

    // The early subscriber got a dense run of events from when it subscribed up to the
    // instant it left.
    assert!(!left_with.is_empty());
    let first_seq = left_with[0].seq;
    assert!(
        first_seq > 1,
        "events before the early subscriber are not sent to it"
    );
    assert_eq!(
        left_with.last().map(|e| e.seq),
        Some(at_leaving.tally.total()),
        "the early subscriber got every event up to when it left"
    );
    for pair in left_with.windows(2) {
        assert_eq!(pair[1].seq, pair[0].seq + 1, "dense");
    }
}
