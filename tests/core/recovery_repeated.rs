//! A recovered journal stays a journal: the tree built on it goes on writing it, and it can be
//! recovered again (after a torn last line, a zero tail, a second crash, a compaction) with
//! the same ids, records and request ids. A "crash" is a copy of the journal taken while the
//! tree runs, after `flush_journal` (`crash_copy` in `support::journal`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::testkit::{ScriptedModel, Turn};
use agent_tree::{JournalConfig, read_journal};

use crate::recovery_resumes::build;
use crate::support::harness::{lead_and_worker, spawn_for_id};
use crate::support::journal::{TempDir, crash, journaled_tree, live_and_crashed};
use crate::support::scripts::{delegates, lead_waiting_on_a_hung_worker};
use crate::support::{catalog, leaf, run_admitted};

/// The journal a crash leaves after one completed agent `w`, with `tail` appended (what a
/// write cut off by the crash leaves).
async fn journal_with_tail(dir: &TempDir, tail: &[u8]) -> PathBuf {
    let (live, path) = (dir.file("live.journal"), dir.file("tree.journal"));
    let model = ScriptedModel::new().script("w", [Turn::answer("ok")]);
    let tree = build(model, catalog([leaf("w")]), &live).await;
    assert!(
        run_admitted(&tree, SpawnRequest::new("w", "go"))
            .await
            .is_completed()
    );
    crash(tree, &live, &path).await;
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(tail);
    std::fs::write(&path, &bytes).unwrap();
    path
}

/// Recovers from `path`, runs one more agent, shuts down, and reads the journal back.
async fn recover_run_and_reread(path: &Path) -> Result<usize, String> {
    let model = ScriptedModel::new().script("w", [Turn::answer("again")]);
    let tree = build(model, catalog([leaf("w")]), path).await;
    assert_eq!(
        tree.record(AgentId::new(1)).unwrap().status,
        AgentStatus::Completed
    );
    let next = tree.run(SpawnRequest::new("w", "more")).await.unwrap();
    assert!(next.is_completed());
    tree.shutdown().await;
    drop(tree);
    read_journal(path, None)
        .map(|r| r.records.len())
        .map_err(|e| e.to_string())
}

/// Only the last line may be torn; recovery drops it and "the journal goes on from there":
/// the recovered tree cuts the torn bytes off before it appends, so its first entry starts a
/// line of its own and the journal recovers again.
#[tokio::test(start_paused = true)]
async fn a_journal_recovered_from_a_torn_last_line_recovers_again() {
    let dir = TempDir::new("torn-twice");
    let path = journal_with_tail(&dir, b"0badc0de {\"entry\":\"ev").await;
    assert_eq!(recover_run_and_reread(&path).await, Ok(3));
}

/// The same for the other torn tail the semantics name, a tail of zero bytes: the zeros are
/// cut off, and the journal recovers again.
#[tokio::test(start_paused = true)]
async fn a_journal_recovered_from_a_zero_tail_recovers_again() {
    let dir = TempDir::new("zeros-twice");
    let path = journal_with_tail(&dir, &[0u8; 100]).await;
    assert_eq!(recover_run_and_reread(&path).await, Ok(3));
}

/// Recover, run more, crash, recover again (no torn tail): ids continue, the records fold the
/// same, and no id is reused.
#[tokio::test(start_paused = true)]
async fn a_journal_recovered_twice_keeps_ids_and_records() {
    let dir = TempDir::new("twice");
    let (one, two, three) = (
        dir.file("one.journal"),
        dir.file("two.journal"),
        dir.file("three.journal"),
    );
    let model = ScriptedModel::new()
        .script("done", [Turn::answer("ok").usage(Usage::tokens(1, 1))])
        .script("hung", [Turn::hang()]);
    let cat = catalog([leaf("done"), leaf("hung")]);
    let tree = build(model.clone(), cat.clone(), &one).await;
    tree.run(SpawnRequest::new("done", "a")).await.unwrap();
    tree.spawn(SpawnRequest::new("hung", "b")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    crash(tree, &one, &two).await;
    let tree = build(model.clone(), cat.clone(), &two).await;
    assert_eq!(tree.interrupted(), [AgentId::new(2)]);
    let id = spawn_for_id(&tree, "hung", "c").await;
    assert_eq!(id, AgentId::new(3));
    tokio::time::sleep(Duration::from_millis(5)).await;
    crash(tree, &two, &three).await;
    let tree = build(model, cat, &three).await;
    assert_eq!(tree.interrupted(), [AgentId::new(2), AgentId::new(3)]);
    let next = tree.run(SpawnRequest::new("done", "d")).await.unwrap();
    assert!(next.is_completed());
    assert_eq!(tree.snapshot().agents().count(), 4);
    assert_eq!(tree.snapshot().records[0].subtree, Usage::tokens(2, 2));
    tree.shutdown().await;
}

/// Compaction (rotation) followed by recovery keeps the spawns, the conversations and the
/// request ids: a resumed owner re-issuing its lost turn's spawn still gets the existing
/// child.
#[tokio::test(start_paused = true)]
async fn a_compacted_then_recovered_journal_keeps_request_ids() {
    let dir = TempDir::new("rotate");
    let (live, crashed) = live_and_crashed(&dir);
    let cat = lead_and_worker();
    let before = lead_waiting_on_a_hung_worker();
    let journal = JournalConfig::new(&live).rotate_at(256);
    let tree = journaled_tree(before, cat.clone(), journal).await;
    let lead = spawn_for_id(&tree, "lead", "go").await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    // The writer answers a flush before it rotates after that batch: a second flush is
    // answered after the rotation.
    tree.flush_journal().await;
    crash(tree, &live, &crashed).await;
    let text = std::fs::read_to_string(&crashed).unwrap();
    assert!(
        text.contains("\"entry\":\"checkpoint\""),
        "compacted: {text}"
    );

    let after = ScriptedModel::new()
        .script("lead", delegates("worker", "dig", "done"))
        .script("worker", [Turn::answer("dug")]);
    let tree = build(after, cat, &crashed).await;
    assert_eq!(tree.interrupted(), [AgentId::new(1), AgentId::new(2)]);
    let mut handle = tree.resume(lead, "").await.unwrap();
    handle.outcome().await;
    assert_eq!(tree.snapshot().agents().count(), 2, "no second worker");
    tree.shutdown().await;
}
