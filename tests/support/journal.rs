//! Journal-test helpers: a temporary directory removed when dropped, trees journaling to a
//! file or a store, the in-process stand-in for a crash (the journal as a kill right now
//! would leave it), and the check that a journal replays to a tree's records.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_tree::prelude::*;
use agent_tree::{JournalConfig, JournalStore};

/// A fresh directory under the system's temp dir, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new directory whose name starts with `name`.
    pub fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "agent-tree-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The path of `name` inside it.
    pub fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The journal as a crash right now would leave it: everything handed to the writer is
/// flushed, then the file at `from` is copied to `to`.
pub async fn crash_copy(tree: &Tree, from: &Path, to: &Path) {
    tree.flush_journal().await;
    std::fs::copy(from, to).unwrap();
}

/// The paths of a live journal in `dir` and of the copy a crash leaves ([`crash`]).
pub fn live_and_crashed(dir: &TempDir) -> (PathBuf, PathBuf) {
    (dir.file("live.journal"), dir.file("crashed.journal"))
}

/// Crashes `tree`: its journal at `live` is copied to `to` as a kill right now would leave it
/// ([`crash_copy`]), then the tree is dropped without a shutdown.
pub async fn crash(tree: Tree, live: &Path, to: &Path) {
    crash_copy(&tree, live, to).await;
    drop(tree);
}

/// Builds a tree of `catalog` on `model` with the default configuration on the journal at
/// `path`; the build's error as text.
pub async fn open_journal(
    model: impl Model,
    catalog: Catalog,
    path: &Path,
) -> Result<Tree, String> {
    Tree::builder()
        .catalog(catalog)
        .model(model)
        .journal(JournalConfig::new(path))
        .build()
        .await
        .map_err(|e| e.to_string())
}

/// A tree of `catalog` on `model` with the default configuration, journaling by `journal`
/// (and recovering from what its file already holds).
pub async fn journaled_tree(model: impl Model, catalog: Catalog, journal: JournalConfig) -> Tree {
    Tree::builder()
        .model(model)
        .catalog(catalog)
        .journal(journal)
        .build()
        .await
        .expect("the journaled tree builds")
}

/// A tree of `catalog` on `model` with the default configuration and the one user tool
/// `tool`, journaling by `journal`.
pub async fn journaled_tree_with_tool(
    model: impl Model,
    catalog: Catalog,
    tool: impl agent_tree::Tool,
    journal: JournalConfig,
) -> Tree {
    Tree::builder()
        .model(model)
        .catalog(catalog)
        .tool(tool)
        .expect("the tool name is free")
        .journal(journal)
        .build()
        .await
        .expect("the journaled tree builds")
}

/// A tree of `catalog` on `model` with the default configuration, journaling by `journal`
/// into `store` instead of a file.
pub async fn stored_tree(
    model: impl Model,
    catalog: Catalog,
    journal: JournalConfig,
    store: impl JournalStore,
) -> Tree {
    Tree::builder()
        .model(model)
        .catalog(catalog)
        .journal_store(journal, store)
        .build()
        .await
        .expect("the journaled tree builds")
}

/// The records `tree` holds now, owned, as a journal's replay holds them.
pub fn records_now(tree: &Tree) -> Vec<agent_tree::protocol::AgentRecord> {
    tree.snapshot()
        .records
        .iter()
        .map(|r| (**r).clone())
        .collect()
}

/// The model of a `w` that answers "first answer", then (resumed) "second answer".
pub fn answering_twice() -> agent_tree::testkit::ScriptedModel {
    agent_tree::testkit::ScriptedModel::new().script(
        "w",
        [
            agent_tree::testkit::Turn::answer("first answer"),
            agent_tree::testkit::Turn::answer("second answer"),
        ],
    )
}

/// Resumes `a1` (a `w` of [`answering_twice`] that ran "go" and settled) with "follow up",
/// and asserts that the resumed run answers "second answer" having read its whole
/// conversation (`log` is the model's call log).
pub async fn assert_resumed_on_its_whole_conversation(
    tree: &Tree,
    log: &agent_tree::testkit::CallLog,
) {
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
}

/// A journal store in memory that knows, as the writer appends and syncs, which events it
/// holds: the last event appended, the last synced, and each agent's latest terminal event.
/// `sync_delay` makes every sync take that long (a slow disk), on the writer's thread.
#[derive(Clone, Default)]
pub struct Recorded {
    inner: std::sync::Arc<parking_lot::Mutex<RecordedState>>,
    sync_delay: std::time::Duration,
}

#[derive(Default)]
struct RecordedState {
    bytes: Vec<u8>,
    appended_seq: u64,
    synced_seq: u64,
    terminal: std::collections::HashMap<agent_tree::protocol::AgentId, u64>,
}

impl Recorded {
    /// A store whose every sync takes `delay`.
    pub fn syncing_in(delay: std::time::Duration) -> Self {
        Recorded {
            sync_delay: delay,
            ..Recorded::default()
        }
    }

    /// Whether the event numbered `seq` has been appended and synced.
    pub fn synced(&self, seq: u64) -> bool {
        self.inner.lock().synced_seq >= seq
    }

    /// Whether `agent`'s latest terminal event has been appended and synced.
    pub fn settle_synced(&self, agent: agent_tree::protocol::AgentId) -> bool {
        let state = self.inner.lock();
        state
            .terminal
            .get(&agent)
            .is_some_and(|&seq| seq <= state.synced_seq)
    }

    /// Everything appended.
    pub fn bytes(&self) -> Vec<u8> {
        self.inner.lock().bytes.clone()
    }
}

impl agent_tree::JournalStore for Recorded {
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        use agent_tree::protocol::JournalEntry;
        let mut state = self.inner.lock();
        for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            if let Ok(JournalEntry::Event { event }) = JournalEntry::from_line_bytes(line) {
                state.appended_seq = state.appended_seq.max(event.seq);
                if event.kind.terminal_status().is_some() {
                    state.terminal.insert(event.agent, event.seq);
                }
            }
        }
        state.bytes.extend_from_slice(bytes);
        Ok(())
    }

    fn sync(&mut self) -> std::io::Result<()> {
        if !self.sync_delay.is_zero() {
            std::thread::sleep(self.sync_delay);
        }
        let mut state = self.inner.lock();
        state.synced_seq = state.appended_seq;
        Ok(())
    }

    fn replace(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.inner.lock().bytes = bytes.to_vec();
        Ok(())
    }

    fn size(&self) -> u64 {
        self.inner.lock().bytes.len() as u64
    }

    fn read(&self) -> std::io::Result<Vec<u8>> {
        Ok(self.inner.lock().bytes.clone())
    }
}
