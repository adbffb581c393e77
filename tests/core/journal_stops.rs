//! When the journal stops (an I/O error, a store that panics), "the tree goes on, and
//! nothing waits on the journal any more": work is never held back by a dead writer, and
//! what the journal already holds is still read back.

use std::io;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::testkit::{Script, ScriptedModel, Turn};
use agent_tree::{JournalConfig, JournalStore};

use crate::support::{catalog, leaf};

/// A store whose writes panic (a bug in a store of the application's own,
/// `TreeBuilder::journal_store`).
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
// regression: the dead writer never released the entries it took, and `Tree::spawn` waited
// for room in its queue forever.
// Real time: the writer is a thread of its own, so a paused clock would time the wait out
// before the thread has even run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_journal_writer_never_holds_work_back() {
    let model = ScriptedModel::new().script("w", Script::new([Turn::answer("ok")]));
    let tree = Tree::builder()
        .catalog(catalog([leaf("w")]))
        .model(model)
        .journal_store(
            JournalConfig::new("unused.journal").max_queue(1),
            PanickingStore,
        )
        .build()
        .await
        .unwrap();
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
