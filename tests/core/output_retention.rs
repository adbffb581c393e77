//! Bounded memory for long-lived trees: a settled output is held while unread, released to
//! the journal once read past the retention budget or age, and read back exactly on demand
//! (by the application, by a handle, by the owner's tools, after a compaction and after a
//! recovery). The memory test counts the heap in a process of its own.

use std::alloc::System;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{EventKind, Role, ToolCall};
use agent_tree::testkit::{Call, EventProbe, ScriptedModel, Turn};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

use agent_tree::{BoxFuture, JournalConfig, Model, ModelError, ModelRequest, ModelResponse};

use crate::support::harness::lead_and_worker;
use crate::support::journal::{TempDir, journaled_tree};
use crate::support::{build_tree, catalog, leaf, read_result_call};

/// The heap, counted: bytes allocated and not yet freed, by the whole process.
#[global_allocator]
static HEAP: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn live_bytes() -> isize {
    let stats = HEAP.stats();
    // `bytes_allocated` and `bytes_deallocated` include what reallocations grew and shrank.
    stats.bytes_allocated as isize - stats.bytes_deallocated as isize
}

const MIB: usize = 1 << 20;

/// A model for the memory test that keeps nothing: a lead delegates once and answers `ok`;
/// a worker answers 1 MiB of its own (no two answers share memory). Written by hand: the
/// kit's models log every call, conversations included, which is the memory this measures.
struct Sized;

impl Model for Sized {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        let response = match (request.agent_type(), request.turn) {
            ("lead", 1) => ModelResponse::calls(vec![ToolCall::new(
                "c1",
                "Agent",
                serde_json::json!({ "agent_type": "worker", "prompt": "report" }),
            )]),
            ("lead", _) => ModelResponse::text("ok"),
            _ => ModelResponse::text(format!("{}:{}", request.agent, "x".repeat(MIB))),
        };
        Box::pin(async move { Ok(response) })
    }
}

/// Set for the child process that runs [`measured_in_a_process_of_its_own`].
const CHILD: &str = "AGENT_TREE_RETENTION_CHILD";

/// The heap measurement runs in a process of its own: other tests of this binary allocate
/// on other threads while it counts.
#[test]
fn a_long_lived_tree_holds_read_outputs_within_its_budget() {
    crate::support::run_alone(
        "output_retention::measured_in_a_process_of_its_own",
        CHILD,
        "the memory test",
    );
}

/// The heap a tree holds after `pairs` more leads have each read a 1 MiB answer of a
/// worker, settled and been read by the application: the growth, in bytes.
async fn growth(journal: Option<JournalConfig>, pairs: usize) -> (isize, Tree) {
    let mut builder = Tree::builder().model(Sized).catalog(lead_and_worker());
    if let Some(journal) = journal {
        builder = builder.journal(journal);
    }
    let tree = builder.build().await.unwrap();
    let run = |n: usize| {
        let tree = &tree;
        async move {
            for _ in 0..n {
                let outcome = tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
                assert_eq!(outcome.text.as_deref(), Some("ok"));
            }
            tree.flush_journal().await;
        }
    };
    // Warm up: the runtime's and the tree's one-time allocations are not growth.
    run(4).await;
    let before = live_bytes();
    run(pairs).await;
    let after = live_bytes();
    (after - before, tree)
}

/// A long-lived tree with a journal holds read outputs within its budget: its heap grows by
/// the budget and a little slack, not by every answer, and every released answer reads back
/// exact. (The memory test's body, run in a process of its own.)
#[test]
#[ignore = "run by a_long_lived_tree_holds_read_outputs_within_its_budget in a process of its own"]
fn measured_in_a_process_of_its_own() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let runtime = crate::support::races::runtime_on(2);
    runtime.block_on(async {
        const PAIRS: usize = 32;
        let dir = TempDir::new("retention-memory");
        let (kept, tree) = growth(None, PAIRS).await;
        tree.shutdown().await;
        let bounded_config = JournalConfig::new(dir.file("bounded.journal"))
            .keep_read_outputs(2 * MIB)
            .retain_conversations(false);
        let (bounded, tree) = growth(Some(bounded_config), PAIRS).await;
        println!(
            "retention: {PAIRS} settled 1 MiB answers grow the heap by {:.2} MiB without a \
             journal, {:.2} MiB with read outputs kept up to 2 MiB and settled conversations \
             in the journal",
            kept as f64 / MIB as f64,
            bounded as f64 / MIB as f64
        );
        // Without a journal every answer stays (its record, the worker's and the lead's
        // conversations): the measurement sees it.
        assert!(
            kept > (2 * PAIRS * MIB) as isize,
            "kept {kept} bytes for {PAIRS} MiB of answers"
        );
        // Bounded: the budget, the in-flight slack of one pair, and the records.
        assert!(
            bounded < (5 * MIB) as isize,
            "bounded tree grew by {bounded} bytes for {PAIRS} MiB of answers"
        );
        // Every released answer is still there, exact.
        let snapshot = tree.snapshot();
        let workers: Vec<_> = snapshot
            .agents()
            .filter(|r| r.agent_type == "worker")
            .map(|r| r.id)
            .collect();
        assert_eq!(workers.len(), PAIRS + 4);
        let released = workers
            .iter()
            .filter(|&&id| is_released(&snapshot, id))
            .count();
        assert!(released >= PAIRS, "{released} released");
        for &id in &workers {
            let whole = tree.read_outcome(id).await.unwrap();
            let text = whole.text.unwrap();
            assert_eq!(text.len(), id.to_string().len() + 1 + MIB);
            assert!(text.starts_with(&format!("{id}:x")), "{id}");
        }
        tree.shutdown().await;
    });
}

/// Whether the settled agent `id`'s output has been released from memory.
fn is_released(snapshot: &agent_tree::protocol::TreeSnapshot, id: AgentId) -> bool {
    let outcome = snapshot.record(id).unwrap().outcome.as_ref();
    outcome.expect("the agent settled").released
}

fn report(agent: &str, bytes: usize) -> String {
    format!("{agent} {}", "r".repeat(bytes))
}

fn journaled(dir: &TempDir, name: &str) -> JournalConfig {
    JournalConfig::new(dir.file(name))
}

/// Unread outputs stay in memory whatever the budget; read ones are released to the journal
/// past the budget, oldest read first, and read back exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_outputs_stay_and_read_ones_go_past_the_budget_oldest_first() {
    let dir = TempDir::new("retention-budget");
    let model = ScriptedModel::new().script("worker", [Turn::answer(report("w", 1000))]);
    let journal = journaled(&dir, "j").keep_read_outputs(2500);
    let tree = journaled_tree(model, catalog([leaf("worker")]), journal).await;
    let mut events = EventProbe::new(&tree);
    let mut handles = Vec::new();
    for _ in 0..4 {
        handles.push(tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap());
    }
    let ids: Vec<AgentId> = handles.iter().map(AgentHandle::id).collect();
    tree.idle().await;
    // Settled and unread: all held, whatever the budget.
    let held = |tree: &Tree| -> Vec<bool> {
        let snapshot = tree.snapshot();
        ids.iter().map(|&id| !is_released(&snapshot, id)).collect()
    };
    assert_eq!(held(&tree), [true; 4]);
    // Read in order 2, 0, 3: 3000 bytes read exceed 2500, so the oldest read (2) goes.
    for index in [2, 0, 3] {
        let outcome = handles[index].outcome().await;
        assert_eq!(outcome.text.as_deref().map(str::len), Some(1002));
    }
    tree.flush_journal().await;
    assert_eq!(held(&tree), [true, true, false, true]);
    let released = events
        .expect_event_within("a release", Duration::from_secs(5), |e| {
            matches!(e.kind, EventKind::Released { .. })
        })
        .await;
    assert_eq!(
        (released.agent, &released.kind),
        (ids[2], &EventKind::Released { bytes: 1002 })
    );
    // Reading one again reads it back, whole, and reads nothing twice.
    let again = tree.read_outcome(ids[2]).await.unwrap();
    assert_eq!(again.text, Some(report("w", 1000)));
    assert!(!again.released);
    assert_eq!(held(&tree), [true, true, false, true]);
    // The unread one (1) stays however many are read after it.
    assert_eq!(tree.snapshot().tally.released, 1);
    tree.shutdown().await;
}

/// An output read longer ago than `keep_read_outputs_for` is released at the next read, and
/// still reads back exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_read_longer_ago_than_its_age_goes_at_the_next_read() {
    let dir = TempDir::new("retention-age");
    let model = ScriptedModel::new().script("worker", [Turn::answer("done")]);
    let journal = journaled(&dir, "j").keep_read_outputs_for(Duration::from_millis(200));
    let tree = journaled_tree(model, catalog([leaf("worker")]), journal).await;
    let mut first = tree.spawn(SpawnRequest::new("worker", "a")).await.unwrap();
    assert_eq!(first.outcome().await.text.as_deref(), Some("done"));
    let a = first.id();
    assert!(!tree.outcome(a).unwrap().released, "read just now: held");
    // Real time: the journal's writer is a thread.
    std::thread::sleep(Duration::from_millis(250));
    let second = tree.run(SpawnRequest::new("worker", "b")).await.unwrap();
    assert_eq!(second.text.as_deref(), Some("done"));
    assert!(
        tree.outcome(a).unwrap().released,
        "read 250 ms ago: released"
    );
    assert_eq!(
        tree.read_outcome(a).await.unwrap().text.as_deref(),
        Some("done")
    );
    tree.shutdown().await;
}

/// An owner reading its child's result twice: the second read finds the output released
/// and gets it back from the journal, through a task (the owner's actor never waits on the
/// disk), identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_reads_a_released_result_back_whole() {
    let dir = TempDir::new("retention-owner");
    let answer = report("worker", 5000);
    let model = ScriptedModel::new()
        .script(
            "lead",
            [
                Turn::spawn("worker", "report"),
                Turn::calls([read_result_call("a2")]),
                Turn::calls([Call::tool(
                    "wait_subagents",
                    serde_json::json!({ "agent_ids": ["a2"] }),
                )]),
                Turn::answer("read twice"),
            ],
        )
        .script("worker", [Turn::answer(answer.clone())]);
    let log = model.clone();
    let journal = journaled(&dir, "j").keep_read_outputs(0);
    let tree = journaled_tree(model, lead_and_worker(), journal).await;
    let outcome = tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    assert_eq!(outcome.text.as_deref(), Some("read twice"));
    let worker = AgentId::new(2);
    tree.flush_journal().await;
    assert!(tree.outcome(worker).unwrap().released);
    // Each of the lead's three reads carried the whole answer to its model.
    let calls = log.log();
    let last = calls.iter().rfind(|c| c.agent_type == "lead").unwrap();
    let results: Vec<&str> = last
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(results.len(), 3, "{results:?}");
    for result in &results {
        assert!(
            result.contains(&answer),
            "{}",
            &result[..200.min(result.len())]
        );
    }
    tree.shutdown().await;
}

/// Compaction keeps every output, released or not, each on a line of its own; recovery
/// holds the released ones released and reads them back from the compacted file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_outputs_survive_compaction_and_recovery() {
    let dir = TempDir::new("retention-compact");
    let path = dir.file("j");
    let config = || {
        JournalConfig::new(&path)
            .keep_read_outputs(0)
            .rotate_at(16 * 1024)
    };
    let model = ScriptedModel::new().script("worker", [Turn::answer(report("w", 3000))]);
    let tree = journaled_tree(model, catalog([leaf("worker")]), config()).await;
    let mut ids = Vec::new();
    let mut events = EventProbe::new(&tree);
    for i in 0..12 {
        let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
        // Read the even ones (released at once); leave the odd ones unread (the event
        // stream is not a read).
        if i % 2 == 0 {
            handle.outcome().await;
        } else {
            events.expect_terminated(handle.id()).await;
        }
        ids.push(handle.id());
    }
    // Unread ones stay in memory, read ones are released (once the journal holds them).
    tree.flush_journal().await;
    let snapshot = tree.snapshot();
    for (i, &id) in ids.iter().enumerate() {
        let outcome = snapshot.record(id).unwrap().outcome.clone().unwrap();
        assert_eq!(outcome.released, i % 2 == 0, "{id} before recovery");
    }
    tree.flush_journal().await;
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"entry\":\"checkpoint\""), "compacted");
    assert!(
        text.contains("\"entry\":\"output\""),
        "outputs on lines of their own"
    );
    for &id in ids.iter().step_by(2) {
        let whole = tree.read_outcome(id).await.unwrap();
        assert_eq!(whole.text, Some(report("w", 3000)), "{id} before recovery");
    }
    tree.shutdown().await;
    drop(tree);

    let model = ScriptedModel::new();
    let recovered = journaled_tree(model, catalog([leaf("worker")]), config()).await;
    let snapshot = recovered.snapshot();
    for (i, &id) in ids.iter().enumerate() {
        let outcome = snapshot.record(id).unwrap().outcome.clone().unwrap();
        // Even ones were read, so released; odd ones were not, so they came back whole.
        assert_eq!(outcome.released, i % 2 == 0, "{id}");
        let whole = recovered.read_outcome(id).await.unwrap();
        assert_eq!(whole.text, Some(report("w", 3000)), "{id} after recovery");
        assert!(!whole.released);
    }
    recovered.shutdown().await;
}

/// Without a journal nothing is released: there is nowhere to read an output back from.
#[tokio::test(start_paused = true)]
async fn a_tree_without_a_journal_keeps_every_output() {
    let model = ScriptedModel::new().script("worker", [Turn::answer("kept")]);
    let tree = build_tree(catalog([leaf("worker")]), model).await;
    let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
    handle.outcome().await;
    handle.outcome().await;
    let outcome = tree.outcome(handle.id()).unwrap();
    assert_eq!(
        (outcome.text.as_deref(), outcome.released),
        (Some("kept"), false)
    );
    assert_eq!(tree.snapshot().tally.released, 0);
    tree.shutdown().await;
}

/// A resumed agent's earlier output leaves the read queue (its record no longer holds it),
/// so it does not count against the budget and release other agents' outputs early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_agents_old_output_does_not_count_against_the_budget() {
    let dir = TempDir::new("retention-resumed");
    let model = ScriptedModel::new()
        .script("b", [Turn::answer(report("b", 598))])
        .script("a", [Turn::answer(report("a", 998)), Turn::answer("again")])
        .script("c", [Turn::answer(report("c", 598))]);
    let journal = journaled(&dir, "j").keep_read_outputs(2000);
    let tree = journaled_tree(model, catalog([leaf("a"), leaf("b"), leaf("c")]), journal).await;
    let mut b = tree.spawn(SpawnRequest::new("b", "go")).await.unwrap();
    b.outcome().await;
    let mut a = tree.spawn(SpawnRequest::new("a", "go")).await.unwrap();
    a.outcome().await;
    // 1600 bytes read, within 2000. A runs again: its 1000 bytes are not held any more.
    let mut again = tree.resume(a.id(), "more").await.unwrap();
    assert_eq!(again.outcome().await.text.as_deref(), Some("again"));
    let mut c = tree.spawn(SpawnRequest::new("c", "go")).await.unwrap();
    c.outcome().await;
    tree.flush_journal().await;
    // Held: b (600), a's second answer (5), c (600): nothing is over the budget.
    let b = tree.outcome(b.id()).unwrap();
    assert!(!b.released, "b was released for bytes nobody holds: {b:?}");
    assert_eq!(tree.snapshot().tally.released, 0);
    tree.shutdown().await;
}
