//! Output retention against a store that fails: an output leaves memory only once the
//! journal can give it back, a read-back that fails neither hangs nor reads as an empty
//! answer, and nothing rewrites the journal once `Tree::shutdown` returned
//! (docs/semantics.md, "Journal and recovery", "Output retention").

use std::time::Duration;

use agent_tree::JournalConfig;
use agent_tree::prelude::*;
use agent_tree::testkit::{MemoryJournal, ScriptedModel, Turn};

use crate::journal_steps::{bounded, run_go};
use crate::output_retention_reads::{report, tool_messages};
use crate::support::harness::lead_and_worker;
use crate::support::journal::stored_tree;
use crate::support::scripts::reads_its_worker_back;
use crate::support::{catalog, leaf};

/// A store that writes but cannot read one line back (a bad sector under an old line).
fn unreadable() -> MemoryJournal {
    let store = MemoryJournal::new();
    store.fail_line_reads();
    store
}

/// An output leaves memory only once the journal can give it back ("Without a journal
/// nothing is released ..., nor once the journal has failed"; a released output "is read
/// back from the journal, exactly"): an output whose terminal line fails to be written is
/// never released, and still reads back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_whose_line_was_never_written_still_reads_back() {
    const MARKER: &str = "UNWRITTEN-ANSWER-0123456789";
    // The append carrying the answer waits (the line is on its way), then fails.
    let store = MemoryJournal::new();
    store.hold_writes_containing(MARKER);
    store.fail_writes_containing(MARKER);
    let model = ScriptedModel::new().script("worker", [Turn::answer(MARKER)]);
    let journal = JournalConfig::new("memory").keep_read_outputs(0);
    let tree = stored_tree(model, catalog([leaf("worker")]), journal, store.clone()).await;
    let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
    let id = handle.id();
    let first = bounded("the outcome", handle.outcome()).await;
    assert_eq!(first.text.as_deref(), Some(MARKER));
    // Now the write carrying the answer fails.
    store.release();
    bounded("the flush", tree.flush_journal()).await;
    assert!(tree.journal_error().is_some(), "the journal failed");
    let again = bounded("the read-back", tree.read_outcome(id))
        .await
        .unwrap();
    assert_eq!(
        again.text.as_deref(),
        Some(MARKER),
        "the answer is gone: memory released it and the journal never had it ({again:?})"
    );
    bounded("shutdown", tree.shutdown()).await;
}

/// When the read-back of a released child fails, the tree does not hang or panic, and the
/// owner's model is told clearly that the result is not available (its text, an error, or a
/// mark that the output was released), never a plain `completed` with no text, which reads as
/// a child that answered nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_whose_child_cannot_be_read_back_is_told_so() {
    let answer = report("child", 200);
    let model = ScriptedModel::new()
        .script("lead", reads_its_worker_back("report", "done"))
        .script("worker", [Turn::answer(answer.clone())]);
    let log = model.clone();
    let journal = JournalConfig::new("memory").keep_read_outputs(0);
    let tree = stored_tree(model, lead_and_worker(), journal, unreadable()).await;
    let outcome = run_go(&tree, "lead").await;
    assert_eq!(outcome.text.as_deref(), Some("done"));
    let results = tool_messages(&log, AgentId::new(1));
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].contains(&answer), "the first read is whole");
    let second: serde_json::Value = serde_json::from_str(&results[1]).unwrap();
    let clear = second.get("text").is_some()
        || second.get("error").is_some()
        || second.get("released").is_some();
    assert!(
        clear,
        "the owner's model is told the child completed with no text and no hint why: {second}"
    );
    bounded("shutdown", tree.shutdown()).await;
}

/// The application's read of an output that cannot be read back does not hang and says the
/// output is not there (`released` stays set), through `read_outcome`, a handle and a wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_read_that_cannot_be_read_back_keeps_released_and_does_not_hang() {
    let model = ScriptedModel::new().script("worker", [Turn::answer("lost text")]);
    let journal = JournalConfig::new("memory").keep_read_outputs(0);
    let tree = stored_tree(model, catalog([leaf("worker")]), journal, unreadable()).await;
    let mut handle = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
    let first = bounded("the outcome", handle.outcome()).await;
    assert_eq!(first.text.as_deref(), Some("lost text"));
    let id = handle.id();
    tree.flush_journal().await;
    let again = bounded("read_outcome", tree.read_outcome(id))
        .await
        .unwrap();
    assert!(again.released && again.text.is_none(), "{again:?}");
    let via_handle = bounded("handle", handle.outcome()).await;
    assert!(via_handle.released, "{via_handle:?}");
    let waited = bounded("wait", tree.wait(&[id], WaitPolicy::AllSettled)).await;
    assert!(waited[0].released, "{waited:?}");
    bounded("shutdown", tree.shutdown()).await;
}

/// "`Tree::shutdown` ends with a flush": once it returns, the journal is what a new tree
/// recovers from, and nothing rewrites it any more (a tree built on the same file right after
/// must not have the file renamed away under it), even when retained outputs keep the
/// compacted journal past `rotate_at`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_rewrites_the_journal_after_shutdown_returned() {
    let store = MemoryJournal::new();
    let model = ScriptedModel::new().script("worker", [Turn::answer(report("w", 4000))]);
    let journal = JournalConfig::new("memory")
        .keep_read_outputs(0)
        .rotate_at(8 * 1024);
    let tree = stored_tree(model, catalog([leaf("worker")]), journal, store.clone()).await;
    for _ in 0..4 {
        run_go(&tree, "worker").await;
    }
    bounded("shutdown", tree.shutdown()).await;
    let at_shutdown = store.compactions();
    assert!(at_shutdown > 0, "compacted while running");
    let bytes = store.bytes();
    // Real time is what is tested: the writer thread, left alone, must not touch it again.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while std::time::Instant::now() < deadline {
        let now = store.compactions();
        assert_eq!(
            now, at_shutdown,
            "the journal was compacted again after shutdown returned"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(store.bytes(), bytes, "the journal changed after shutdown");
}
