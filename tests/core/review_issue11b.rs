//! Review of issue 11, second round (journal and recovery): conversations kept only in the
//! journal (`retain_conversations(false)`), read back on a resume.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use agent_tree::prelude::*;
use agent_tree::testkit::{Script, ScriptedModel, Turn};
use agent_tree::{JournalConfig, JournalStore};
use parking_lot::Mutex;

use crate::support::journal::TempDir;
use crate::support::{catalog, leaf};

/// An in-memory store whose appends start failing on request (a full disk); what it holds
/// stays readable.
#[derive(Clone, Default)]
struct Failing {
    bytes: Arc<Mutex<Vec<u8>>>,
    fail: Arc<AtomicBool>,
}

impl JournalStore for Failing {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.fail.load(Ordering::Acquire) {
            return Err(io::Error::other("disk full"));
        }
        self.bytes.lock().extend_from_slice(bytes);
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn replace(&mut self, bytes: &[u8]) -> io::Result<()> {
        *self.bytes.lock() = bytes.to_vec();
        Ok(())
    }
    fn size(&self) -> u64 {
        self.bytes.lock().len() as u64
    }
    fn read(&self) -> io::Result<Vec<u8>> {
        Ok(self.bytes.lock().clone())
    }
}

/// Rule (semantics, "Journal and recovery": an I/O error stops the journal, "the tree goes
/// on"; with `retain_conversations(false)` a settled agent's conversation "is read back ...
/// when the agent is resumed"): a resume continues the agent's conversation whatever became
/// of the journal since it settled.
///
/// Defect: the conversation was dropped from memory while the journal was healthy
/// (`settle_run`, actors/src/registry/end.rs:84-92). When a later append fails, the writer
/// thread leaves its loop and drops the channel's receiver (actors/src/journal.rs,
/// `Writer::run`: `if failed { break }`), so `JournalTap::read_conversation` cannot even ask
/// (`send(Command::Read)` fails, `None`), and `spawn::reopen` (actors/src/spawn.rs:158)
/// resumes with an empty conversation. The agent silently forgets its task and answer; the
/// store still held them. (Its re-derived request ids, `m<index>c<call>`, also restart at
/// the bottom and can collide with the children of its earlier run.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_after_the_journal_failed_keeps_the_conversation() {
    let model = ScriptedModel::new().script(
        "w",
        Script::new([Turn::answer("first answer"), Turn::answer("second answer")]),
    );
    let log = model.call_log();
    let store = Failing::default();
    let tree = Tree::builder()
        .catalog(catalog([leaf("w"), leaf("x")]))
        .model(model.script("x", Script::new([Turn::answer("x done")])))
        .journal_store(
            JournalConfig::new("failing.journal").retain_conversations(false),
            store.clone(),
        )
        .build()
        .await
        .unwrap();
    let first = tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(first.text.as_deref(), Some("first answer"));
    tree.flush_journal().await;
    // The disk fills up: the next entries fail, the journal stops, the tree goes on.
    store.fail.store(true, Ordering::Release);
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

    let mut resumed = tree.resume(AgentId::new(1), "follow up").await.unwrap();
    assert_eq!(
        resumed.outcome().await.text.as_deref(),
        Some("second answer")
    );
    let second = &log.of(AgentId::new(1))[1];
    let texts: Vec<&str> = second.messages.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(
        texts,
        ["go", "first answer", "follow up"],
        "the resumed run lost its conversation"
    );
    tree.shutdown().await;
}

/// Guard: with `retain_conversations(false)`, an agent settled before a crash, in a journal
/// compacted by rotation, is resumed on the recovered tree with its whole conversation
/// (read back from the recovered file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_after_rotation_and_recovery_reads_the_conversation_back() {
    let dir = TempDir::new("rotated");
    let (live, crashed) = (dir.file("live.journal"), dir.file("crashed.journal"));
    let model = ScriptedModel::new().script(
        "w",
        Script::new([Turn::answer("first answer"), Turn::answer("second answer")]),
    );
    let config = |path: &PathBuf| {
        JournalConfig::new(path)
            .retain_conversations(false)
            .rotate_at(2_000)
    };
    let tree = Tree::builder()
        .catalog(catalog([leaf("w")]))
        .model(model.clone())
        .journal(config(&live))
        .build()
        .await
        .unwrap();
    for i in 0..6 {
        tree.run(SpawnRequest::new("w", format!("go {i}")))
            .await
            .unwrap();
    }
    tree.flush_journal().await;
    std::fs::copy(&live, &crashed).unwrap();
    drop(tree);

    let model = ScriptedModel::new().script("w", Script::new([Turn::answer("again")]));
    let log = model.call_log();
    let tree = Tree::builder()
        .catalog(catalog([leaf("w")]))
        .model(model)
        .journal(config(&crashed))
        .build()
        .await
        .unwrap();
    let mut resumed = tree.resume(AgentId::new(2), "follow up").await.unwrap();
    assert_eq!(resumed.outcome().await.text.as_deref(), Some("again"));
    let call = &log.of(AgentId::new(2))[0];
    let texts: Vec<&str> = call.messages.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(texts, ["go 1", "first answer", "follow up"]);
    tree.shutdown().await;
}
