//! A child's usage arrives before its settle notice. For every agent, all of its
//! `usage_reported` events come before its terminal event; and whenever an owner is told of a
//! child's end (a waiting read, a foreground spawn's result, a later peek), the child's
//! terminal event was already emitted and the owner's subtree already holds the child's
//! whole usage (its own and its descendants'). Nothing of an agent is recorded after its
//! terminal event: a turn returning as its agent is killed bills nothing after the kill, and
//! the snapshot at idle equals the sum of the usage events.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use agent_tree::BoxFuture;
use agent_tree::prelude::*;
use agent_tree::protocol::{Event, EventKind, TreeSnapshot};
use agent_tree::testkit::{Call, ScriptedModel, Target, Turn};
use parking_lot::Mutex;
use serde_json::json;

use crate::support::JsonContent;
use crate::support::harness::{a, spawn_for_id, tree_with_tool};
use crate::support::lifetimes::ms;
use crate::support::races::{REAL_GUARD, bounded, outcome, yields};
use crate::support::scripts::{answers_after_billing, delegates};
use crate::support::{
    RecordingModel, TreeCell, build_tree, catalog, delegator, leaf, record, reported_usage,
    spawn_admitted, terminal_event, within,
};

const SECOND: Duration = Duration::from_secs(1);

fn scripted() -> ScriptedModel {
    ScriptedModel::new()
        .script(
            "lead",
            [
                // 1: a background child
                Turn::spawn_background("bg", "work in the background").usage(Usage::tokens(1, 1)),
                // 2: wait for it by id
                Turn::calls([Call::result(Target::Spawned(0))]).usage(Usage::tokens(2, 1)),
                // 3: a foreground child that has a child of its own
                Turn::spawn("fg", "work in the foreground").usage(Usage::tokens(3, 1)),
                // 4: a background child that settles during turn 5's model call
                Turn::spawn_background("quick", "be quick").usage(Usage::tokens(4, 1)),
                // 5: a long turn, then peek at it
                Turn::calls([Call::peek(Target::Spawned(2))])
                    .usage(Usage::tokens(5, 1))
                    .after(Duration::from_secs(5)),
                // 6
                Turn::answer("lead done").usage(Usage::tokens(6, 1)),
            ],
        )
        .script(
            "bg",
            [
                Turn::calls([Call::tool("noop", json!({}))])
                    .usage(Usage::tokens(100, 10))
                    .after(SECOND),
                Turn::answer("bg done")
                    .usage(Usage::tokens(200, 20))
                    .after(SECOND),
            ],
        )
        .script(
            "fg",
            [
                Turn::spawn("gc", "go deeper").usage(Usage::tokens(300, 30)),
                Turn::answer("fg done")
                    .usage(Usage::tokens(400, 40))
                    .after(SECOND),
            ],
        )
        .script(
            "gc",
            answers_after_billing("gc done", Usage::tokens(500, 50), SECOND),
        )
        .script(
            "quick",
            answers_after_billing("quick done", Usage::tokens(600, 60), SECOND),
        )
}

/// A catalog of a `lead` that may delegate to a `victim` leaf.
fn lead_and_victim() -> Catalog {
    catalog([delegator("lead", &["victim"]), leaf("victim")])
}

/// A child's usage is recorded before its terminal event, and whenever an owner hears of a
/// child's end its own subtree already holds the child's whole usage; the snapshot equals
/// the sum of the usage events.
#[tokio::test(start_paused = true)]
async fn usage_is_in_before_the_owner_hears_of_the_end() {
    let probe = TreeCell::new();
    // (turn, snapshot at the lead's model call)
    let (model, lead_turns) = RecordingModel::new(scripted()).snapshotting("lead", &probe);
    let tree = probe.share(
        tree_with_tool(
            catalog([
                delegator("lead", &["bg", "fg", "quick"]),
                delegator("fg", &["gc"]),
                leaf("bg"),
                leaf("gc"),
                leaf("quick"),
            ]),
            model.clone(),
            crate::support::noop_tool(),
        )
        .await,
    );
    let mut events = tree.subscribe();

    let mut lead = spawn_admitted(&tree, SpawnRequest::new("lead", "delegate")).await;
    assert!(within("the lead", lead.outcome()).await.is_completed());
    let events = crate::support::events_at_idle(&tree, &mut events).await;
    let snapshot = tree.snapshot();
    let text = snapshot.render_text();
    assert!(snapshot.check_usage().is_ok(), "{text}");

    // For every agent, its usage events precede its terminal event.
    let mut usage_events: BTreeMap<AgentId, Vec<u64>> = BTreeMap::new();
    for e in &events {
        if let EventKind::UsageReported { .. } = e.kind {
            usage_events.entry(e.agent).or_default().push(e.seq);
        }
    }
    for r in snapshot.agents() {
        let end = terminal_event(&events, r.id)
            .unwrap_or_else(|| panic!("{} has no terminal event", r.id))
            .seq;
        let seqs = usage_events.get(&r.id).cloned().unwrap_or_default();
        assert!(!seqs.is_empty(), "{} reported no usage", r.id);
        assert!(
            seqs.iter().all(|&s| s < end),
            "{}: usage events {seqs:?} not all before its terminal event {end}",
            r.id
        );
    }

    let lead = lead.id();
    let children = record(&snapshot, lead).children.clone();
    assert_eq!(children.len(), 3, "{text}");
    let (bg, fg, quick) = (children[0], children[1], children[2]);
    let lead_turns = lead_turns.lock().clone();
    assert_eq!(
        lead_turns.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6]
    );

    // The turn at which the lead learns each child's end, and the call that tells it.
    for (child, turn, call) in [
        (bg, 3, "call_2_0"),
        (fg, 4, "call_3_0"),
        (quick, 6, "call_5_0"),
    ] {
        let told = model
            .request(lead, turn)
            .tool_result(call)
            .unwrap_or_else(|| panic!("no result for {call}"))
            .json();
        assert_eq!(told["agent_id"], child.to_string());
        assert_eq!(told["status"], "completed", "turn {turn}: {told}");

        let (_, at) = &lead_turns[turn as usize - 1];
        let child_end = terminal_event(&events, child).expect("settled").seq;
        assert!(
            child_end <= at.tally.total(),
            "turn {turn}: the lead was told of {child} before its terminal event {child_end} \
             (only {} events so far)",
            at.tally.total()
        );
        // The ledger at that moment already had the child's whole usage, below and above it.
        let final_child = record(&snapshot, child);
        let then_child = record(at, child);
        assert!(
            then_child.status.is_terminal(),
            "turn {turn}: {child} still live"
        );
        assert_eq!(
            then_child.own, final_child.own,
            "turn {turn}: own of {child}"
        );
        assert_eq!(
            then_child.subtree, final_child.subtree,
            "turn {turn}: subtree of {child}"
        );
        let then_lead = record(at, lead);
        let children_then: Usage = then_lead
            .children
            .iter()
            .map(|&c| record(at, c).subtree)
            .sum();
        assert_eq!(
            then_lead.subtree,
            then_lead.own + children_then,
            "turn {turn}: the lead's subtree does not add up"
        );
        assert!(
            at.check_usage().is_ok(),
            "turn {turn}: the ledger does not add up:\n{}",
            at.render_text()
        );
    }
    // The foreground child's subtree holds its own child's usage too.
    let gc = record(&snapshot, fg).children[0];
    assert_eq!(
        record(&snapshot, fg).subtree,
        Usage::tokens(700, 70) + record(&snapshot, gc).subtree
    );
    assert_eq!(record(&snapshot, gc).own, Usage::tokens(500, 50));

    crate::support::shutdown(tree).await;
}

/// A model whose `victim` turn blocks its worker thread inside `poll` until released, and
/// then returns a response with usage; every other agent plays its script.
/// Written by hand: it blocks its worker thread inside `poll`, which no kit model does.
struct BlockingVictim {
    inner: RecordingModel,
    started: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    release: Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Model for BlockingVictim {
    fn turn(
        &self,
        request: ModelRequest,
    ) -> agent_tree::BoxFuture<'_, Result<ModelResponse, ModelError>> {
        if request.agent_type() != "victim" {
            return self.inner.turn(request);
        }
        Box::pin(async move {
            if let Some(started) = self.started.lock().take() {
                let _ = started.send(());
            }
            // Blocks this worker thread (bounded, so a broken run cannot hang the suite).
            let _ = self.release.lock().recv_timeout(Duration::from_secs(10));
            Ok(ModelResponse::text("late answer").with_usage(Usage::tokens(7, 7)))
        })
    }
}

/// The same rule when a child is aborted while its model call is returning, on a
/// multi-threaded runtime: the turn's usage must still be in the ledger before the child's
/// terminal event and before its owner is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn usage_of_a_turn_returning_during_an_abort_is_in_before_the_settle() {
    let limit = Duration::from_secs(10);
    let probe = TreeCell::new();
    let (told_tx, told_rx) = tokio::sync::oneshot::channel::<TreeSnapshot>();
    let told_tx = Mutex::new(Some(told_tx));
    let hook_probe = probe.clone();
    let recording = RecordingModel::new(
        ScriptedModel::new().script("lead", delegates("victim", "take a while", "lead done")),
    )
    .with_hook(move |request| {
        if request.agent_type() == "lead" && request.turn == 2 {
            if let Some(tx) = told_tx.lock().take() {
                let _ = tx.send(hook_probe.snapshot());
            }
        }
        None
    });
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel();
    let model = BlockingVictim {
        inner: recording,
        started: Mutex::new(Some(started_tx)),
        release: Mutex::new(release_rx),
    };
    let tree = probe.share(build_tree(lead_and_victim(), model).await);
    let mut events = tree.subscribe();

    let mut lead = spawn_admitted(&tree, SpawnRequest::new("lead", "delegate")).await;
    tokio::time::timeout(limit, started_rx)
        .await
        .expect("the victim's model call started")
        .expect("started signal");
    let victim = *tree
        .record(lead.id())
        .expect("lead record")
        .children
        .first()
        .expect("the victim exists");
    tree.abort(victim)
        .expect("the application may abort any agent");
    // Let the abort run its course while the victim's model call is still inside `poll`.
    // A runtime that settled without waiting for the in-flight turn would do so within
    // microseconds; a correct one cannot settle until the call returns, so this bounded
    // window (a race on worker threads: paused time cannot stand in for it) runs out.
    let mut seen = Vec::new();
    let _ = tokio::time::timeout(Duration::from_millis(250), async {
        while let Some(event) = events.next().await {
            let end = event.agent == victim && event.kind.terminal_status().is_some();
            seen.push(event);
            if end {
                break;
            }
        }
    })
    .await;
    release_tx.send(()).expect("the victim's model waits");
    // The call returns with usage: wait until that usage is in the ledger.
    tokio::time::timeout(limit, async {
        while let Some(event) = events.next().await {
            let usage =
                event.agent == victim && matches!(event.kind, EventKind::UsageReported { .. });
            seen.push(event);
            if usage {
                break;
            }
        }
    })
    .await
    .expect("the usage of the victim's finished model call is recorded");
    let told = tokio::time::timeout(limit, told_rx)
        .await
        .expect("the lead was told of the abort")
        .expect("snapshot");
    assert!(
        tokio::time::timeout(limit, lead.outcome())
            .await
            .expect("lead settles")
            .is_completed()
    );
    tokio::time::timeout(limit, tree.idle())
        .await
        .expect("tree idles");
    seen.extend(events.drain());
    let events = seen;
    let snapshot = tree.snapshot();

    let end = terminal_event(&events, victim).expect("victim settled");
    assert_eq!(end.kind.terminal_status(), Some(AgentStatus::Aborted));
    for e in events.iter().filter(|e| e.agent == victim) {
        if let EventKind::UsageReported { .. } = e.kind {
            assert!(
                e.seq < end.seq,
                "usage of {victim} reported at seq {} after its terminal event at seq {}",
                e.seq,
                end.seq
            );
        }
    }
    assert_eq!(
        record(&told, victim).subtree,
        record(&snapshot, victim).subtree,
        "the lead was told of {victim}'s end before its usage was in the ledger"
    );
    drop(events);
    let tree = Arc::try_unwrap(tree).expect("sole owner");
    let _ = tokio::time::timeout(limit, tree.shutdown()).await;
}

// ------------------------------------------------------------------------------------------
// No usage after the terminal event: a model turn returning as its agent is killed records
// nothing after the kill, and the snapshot at idle equals the usage events' sum. On worker
// threads, pinned and looped.
// ------------------------------------------------------------------------------------------

/// A model whose first `victim` turn returns (with 1 token of usage) exactly as its agent is
/// killed: inside its poll it has another thread call `Tree::kill` on its agent and keeps its
/// own thread until the record says `killed` (the other worker settles it), then returns
/// `Ready`. This pins the worker-thread race "the turn's future completes while the kill
/// settles the agent" without depending on luck. Every other turn is the scripted model's.
/// Written by hand: it acts from inside its own poll.
#[derive(Clone, Debug)]
struct ReturnsAsKilled {
    inner: ScriptedModel,
    cell: crate::support::TreeCell,
    returned: Arc<std::sync::atomic::AtomicBool>,
}

impl Model for ReturnsAsKilled {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        if request.agent_type() != "victim" {
            return self.inner.turn(request);
        }
        let (cell, returned, id) = (self.cell.clone(), self.returned.clone(), request.agent);
        Box::pin(async move {
            let tree = cell.get().expect("the tree is alive");
            // From a plain thread, so the wake-ups land where the other worker finds them.
            let killer = {
                let tree = tree.clone();
                std::thread::spawn(move || tree.kill(id))
            };
            let start = std::time::Instant::now();
            while tree.record(id).map(|r| r.status) != Some(AgentStatus::Killed)
                && start.elapsed() < Duration::from_secs(2)
            {
                std::thread::sleep(Duration::from_micros(50));
            }
            let killed = killer.join().expect("the killer thread");
            assert!(killed.is_ok(), "the kill was refused: {killed:?}");
            returned.store(true, std::sync::atomic::Ordering::SeqCst);
            drop(tree);
            Ok(ModelResponse::text("late answer").with_usage(Usage::tokens(1, 0)))
        })
    }
}

fn usage_after_terminal(events: &[Event], agent: AgentId) -> Vec<u64> {
    let Some(end) = terminal_event(events, agent).map(|e| e.seq) else {
        return Vec::new();
    };
    events
        .iter()
        .filter(|e| {
            e.agent == agent && e.seq > end && matches!(e.kind, EventKind::UsageReported { .. })
        })
        .map(|e| e.seq)
        .collect()
}

/// Nothing of an agent is recorded after its terminal event, and the snapshot at
/// `Tree::idle()` equals the events' sum, also when a model turn returns just as its agent
/// is killed (`Tree::kill`) and settled: no `usage_reported` follows the `killed` event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_returning_as_its_agent_is_killed_records_nothing_after_the_kill() {
    let cell = crate::support::TreeCell::new();
    let returned = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let model = ReturnsAsKilled {
        inner: ScriptedModel::new().script(
            "lead",
            [
                Turn::spawn_background("victim", "be killed").usage(Usage::tokens(10, 0)),
                Turn::answer("lead done")
                    .usage(Usage::tokens(89, 0))
                    .after(ms(50)),
            ],
        ),
        cell: cell.clone(),
        returned: returned.clone(),
    };
    let tree = cell.share(build_tree(lead_and_victim(), model).await);
    let mut events = tree.subscribe();
    let lead = spawn_for_id(&tree, "lead", "go").await;
    let _ = outcome(&tree, lead, REAL_GUARD).await;
    bounded(REAL_GUARD, "idle", tree.idle()).await;
    let at_idle = tree.snapshot();
    // The victim's turn task has returned; give it a moment to finish its bookkeeping.
    bounded(REAL_GUARD, "the victim's model call to return", async {
        while !returned.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
    })
    .await;
    tokio::time::sleep(ms(20)).await;
    let events = events.drain();
    let victim = a(2);
    assert_eq!(
        tree.record(victim).map(|r| r.status),
        Some(AgentStatus::Killed)
    );
    let late = usage_after_terminal(&events, victim);
    let billed = at_idle.root().expect("root").subtree.total_tokens();
    let reported = reported_usage(&events).total_tokens();
    assert!(
        late.is_empty() && billed == reported,
        "usage recorded after {victim} was killed: usage events {late:?} follow its \
         terminal event; the snapshot at idle bills {billed} tokens, the usage events sum to \
         {reported}"
    );
}

/// A model whose `victim` turns return after a varied number of real yields.
/// Written by hand: the yields are inside the poll the test races the kill against.
#[derive(Clone, Debug)]
struct YieldingVictim {
    inner: ScriptedModel,
    spins: Arc<std::sync::atomic::AtomicU64>,
    started: Arc<tokio::sync::Notify>,
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
}

impl Model for YieldingVictim {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        if request.agent_type() != "victim" {
            return self.inner.turn(request);
        }
        let spins = self.spins.load(std::sync::atomic::Ordering::SeqCst);
        let (started, in_flight) = (self.started.clone(), self.in_flight.clone());
        in_flight.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        struct Done(Arc<std::sync::atomic::AtomicUsize>);
        impl Drop for Done {
            fn drop(&mut self) {
                self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let done = Done(in_flight);
        Box::pin(async move {
            let _done = done;
            started.notify_one();
            yields(spins).await;
            Ok(ModelResponse::text("victim done").with_usage(Usage::tokens(1, 0)))
        })
    }
}

/// Under a plain race on worker threads: the application kills an agent while its
/// model call returns (varied yields on both sides). Every run, no usage event of the victim
/// may follow its terminal event, and the snapshot at idle must equal the usage events' sum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_racing_a_returning_turn_never_bills_after_the_end_mt() {
    const RUNS: u64 = 500;
    let mut bad = Vec::new();
    for run in 0..RUNS {
        let model = YieldingVictim {
            inner: ScriptedModel::new(),
            spins: Arc::new(std::sync::atomic::AtomicU64::new(run % 5)),
            started: Arc::new(tokio::sync::Notify::new()),
            in_flight: Arc::default(),
        };
        let tree = crate::support::harness::tree(
            model.clone(),
            catalog([leaf("victim")]),
            TreeConfig::default(),
        )
        .await;
        let mut events = tree.subscribe();
        let victim = spawn_for_id(&tree, "victim", "race").await;
        bounded(
            REAL_GUARD,
            "the victim's model call",
            model.started.notified(),
        )
        .await;
        yields((run / 5) % 4).await;
        let _ = tree.kill(victim);
        bounded(REAL_GUARD, "idle", tree.idle()).await;
        let at_idle = tree.snapshot();
        bounded(REAL_GUARD, "the victim's model call to end", async {
            while model.in_flight.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                tokio::task::yield_now().await;
            }
        })
        .await;
        tokio::time::sleep(ms(2)).await;
        let events = events.drain();
        let late = usage_after_terminal(&events, victim);
        let billed = at_idle.root().expect("root").subtree.total_tokens();
        let reported = reported_usage(&events).total_tokens();
        if !late.is_empty() || billed != reported {
            bad.push((run, late, billed, reported));
        }
        bounded(REAL_GUARD, "shutdown", tree.shutdown()).await;
    }
    assert!(
        bad.is_empty(),
        "{} of {RUNS} runs recorded usage after the kill (run, late usage seqs, billed \
         at idle, events sum): {:?}",
        bad.len(),
        &bad[..bad.len().min(8)]
    );
}
