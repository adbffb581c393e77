//! When the journal compacts: past `rotate_at` and past twice what the last compaction
//! left, so a file of mostly dead events stays bounded.

use agent_tree::{JournalConfig, read_journal};

use crate::journal_steps::{bounded, fixed, run_go};
use crate::support::journal::{TempDir, journaled_tree};
use crate::support::{catalog, leaf};

/// Rule (`rotate_at`): "Past `rotate_at` bytes the file is compacted", now "only past
/// rotate_at and past twice what the last compaction left". A tree whose live state is
/// small (a few settled agents) and which then produces only dead events (usage reports,
/// turn after turn of one long-running agent whose conversation is rewritten at compaction)
/// keeps its file bounded: it compacts again and again, the file never grows past a small
/// multiple of rotate_at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_of_mostly_dead_events_keeps_compacting() {
    let dir = TempDir::new("journal-dead");
    let path = dir.file("j");
    let rotate = 16 * 1024u64;
    // Many agents that answer small: each leaves a record and a small output (live), and
    // lines of spawn, conversation and events (mostly dead after compaction).
    let model = fixed("ok");
    let journal = JournalConfig::new(&path).rotate_at(rotate);
    let tree = journaled_tree(model, catalog([leaf("worker")]), journal).await;
    let mut largest = 0u64;
    for _ in 0..300 {
        run_go(&tree, "worker").await;
        bounded("flush", tree.flush_journal()).await;
        largest = largest.max(std::fs::metadata(&path).unwrap().len());
    }
    let replay = read_journal(&path, None).unwrap();
    assert_eq!(replay.outcomes().count(), 300);
    // Compacted content of 300 small agents: what a compaction would leave now.
    let live = std::fs::metadata(&path).unwrap().len();
    assert!(
        largest <= 2 * live.max(rotate) + rotate,
        "the file grew to {largest} bytes with {live} bytes at the end, rotate_at {rotate}"
    );
    bounded("shutdown", tree.shutdown()).await;
}
