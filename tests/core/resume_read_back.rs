//! A resume reads a settled conversation back from the journal when only the journal holds
//! it, and continues the latest one: a read-back that another resume's whole run overtook
//! is read again, never continued.

use std::collections::HashSet;
use std::io;
use std::sync::mpsc;

use agent_tree::prelude::*;
use agent_tree::protocol::Role;
use agent_tree::testkit::{ScriptedModel, Turn};
use agent_tree::{FileJournal, JournalConfig, JournalStore};
use parking_lot::Mutex;

use crate::support::journal::{TempDir, stored_tree};
use crate::support::{catalog, leaf, run_admitted};

/// A journal file whose second read of any line waits until the test opens the gate: the
/// first read-back of a conversation passes, a second one of the same lines is held.
/// Written by hand: the kit's `MemoryJournal` holds writes, not the second read of a line.
struct GatedJournal {
    file: FileJournal,
    read: Mutex<HashSet<u64>>,
    gate: Mutex<mpsc::Receiver<()>>,
}

impl JournalStore for GatedJournal {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.append(bytes)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync()
    }

    fn replace(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.replace(bytes)
    }

    fn size(&self) -> u64 {
        self.file.size()
    }

    fn read(&self) -> io::Result<Vec<u8>> {
        self.file.read()
    }

    fn read_range(&self, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        if !self.read.lock().insert(offset) {
            let _ = self.gate.lock().recv();
        }
        self.file.read_range(offset, len)
    }
}

/// Two resumes of one settled agent, racing: the second one's read-back of the
/// conversation is overtaken by the first one's whole run (it reads the conversation as of
/// run 1, and is answered after run 2 settled). The second resume continues what run 2 left,
/// its prompt and answer included, not run 1's conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_overtaken_by_another_resumes_run_continues_the_latest_conversation() {
    let dir = TempDir::new("read-back");
    let (open, gate) = mpsc::channel();
    let store = GatedJournal {
        file: FileJournal::open(&dir.file("tree.journal")).unwrap(),
        read: Mutex::default(),
        gate: Mutex::new(gate),
    };
    let model = ScriptedModel::new().script(
        "writer",
        [
            Turn::answer("first"),
            Turn::answer("second"),
            Turn::answer("third"),
        ],
    );
    let log = model.call_log();
    let journal = JournalConfig::new(dir.file("tree.journal"));
    let tree = stored_tree(model, catalog([leaf("writer")]), journal, store).await;
    let writer = run_admitted(&tree, SpawnRequest::new("writer", "the task")).await;
    assert_eq!(writer.text.as_deref(), Some("first"));
    let writer = AgentId::new(1);

    let first = async {
        let mut handle = tree.resume(writer, "again").await.unwrap();
        let outcome = handle.outcome().await;
        // Run 2 settled: the second resume's read-back, held until now, comes back.
        open.send(()).unwrap();
        outcome
    };
    let (first, second) = tokio::join!(first, tree.resume(writer, "more"));
    assert_eq!(first.text.as_deref(), Some("second"));
    let mut second = second.expect("a resume after the first one's run settled");
    assert_eq!(second.outcome().await.text.as_deref(), Some("third"));

    let calls = log.of(writer);
    let last = calls.last().unwrap();
    let said: Vec<(Role, &str)> = last
        .messages
        .iter()
        .map(|m| (m.role, m.content.as_str()))
        .collect();
    assert_eq!(
        said,
        [
            (Role::User, "the task"),
            (Role::Assistant, "first"),
            (Role::User, "again"),
            (Role::Assistant, "second"),
            (Role::User, "more"),
        ]
    );
    tree.shutdown().await;
}
