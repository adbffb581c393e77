//! When the journal stops (an I/O error, a store that panics), "the tree goes on, and
//! nothing waits on the journal any more": work is never held back by a dead writer, and
//! what the journal already holds is still read back.

use std::io;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::testkit::{MemoryJournal, ScriptedModel, Turn};
use agent_tree::{JournalConfig, JournalStore};

use crate::support::journal::{
    answering_twice, assert_resumed_on_its_whole_conversation, stored_tree,
};
use crate::support::{catalog, leaf};

/// A store whose writes panic (a bug in a store of the application's own,
/// `TreeBuilder::journal_store`). Written by hand: the test is about a store that breaks the
/// trait's contract, which the kit's `MemoryJournal` never does.
struct PanickingStore;

impl JournalStore for PanickingStore {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        // The header goes through; the first entries do not.
        if bytes.windows(8).any(|w| w == b"\"header\"") {
            return Ok(());
        }
        panic!("store bug");
    }
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn replace(&mut self, _bytes: &[u8]) -> io::Result<()> {
        Ok(())
    }
    fn size(&self) -> u64 {
        0
    }
    fn read(&self) -> io::Result<Vec<u8>> {
        Ok(Vec::new())
    }
}

/// A journal writer that is gone (its store panicked) never holds new work back: with a queue
/// bound of 1 the run still ends, whatever `journal_error` says.
/// The test runs on real time: the writer is a thread of its own, so a paused clock would
/// time the wait out before the thread has even run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_journal_writer_never_holds_work_back() {
    let model = ScriptedModel::new().script("w", [Turn::answer("ok")]);
    let journal = JournalConfig::new("unused.journal").max_queue(1);
    let tree = stored_tree(model, catalog([leaf("w")]), journal, PanickingStore).await;
    let run = tokio::time::timeout(
        Duration::from_secs(60),
        tree.run(SpawnRequest::new("w", "a")),
    )
    .await;
    assert!(
        run.is_ok(),
        "the run waited for a dead journal writer (journal_error: {:?})",
        tree.journal_error()
    );
    tree.shutdown().await;
}

/// A resume continues the agent's conversation whatever became of the journal since it
/// settled: with `retain_conversations(false)` a settled agent's conversation "is read back
/// ... when the agent is resumed", and an I/O error that stopped the journal since ("the tree
/// goes on") still leaves what the store holds readable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_after_the_journal_failed_keeps_the_conversation() {
    let model = answering_twice();
    let log = model.call_log();
    let store = MemoryJournal::new();
    let journal = JournalConfig::new("failing.journal").retain_conversations(false);
    let tree = stored_tree(
        model.script("x", [Turn::answer("x done")]),
        catalog([leaf("w"), leaf("x")]),
        journal,
        store.clone(),
    )
    .await;
    let first = tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(first.text.as_deref(), Some("first answer"));
    tree.flush_journal().await;
    // The disk fills up: the next entries fail, the journal stops, the tree goes on.
    store.fail_writes();
    tree.run(SpawnRequest::new("x", "more")).await.unwrap();
    tree.flush_journal().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while tree.journal_error().is_none() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        tree.journal_error().is_some(),
        "the journal should have stopped"
    );

    assert_resumed_on_its_whole_conversation(&tree, &log).await;
    tree.shutdown().await;
}
