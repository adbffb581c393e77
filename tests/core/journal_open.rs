//! Building a tree on a file: what recovers, what starts afresh, and what is refused.
//! Nothing in a file's content makes the build panic, and a file that is no journal is
//! refused, never wiped.

use std::path::Path;

use agent_tree::JournalConfig;
use agent_tree::prelude::*;
use agent_tree::protocol::{AgentRecord, JOURNAL_VERSION, JournalEntry, SessionId};
use agent_tree::testkit::ScriptedModel;

use crate::support::journal::TempDir;
use crate::support::{catalog, leaf};

/// A checksum-valid journal: a header and one checkpoint of `records`.
fn crafted(path: &Path, records: Vec<AgentRecord>) {
    let mut text = JournalEntry::Header {
        version: JOURNAL_VERSION,
        session: SessionId::new("crafted"),
    }
    .to_line();
    text += &JournalEntry::Checkpoint {
        seq: 3,
        records,
        tally: Default::default(),
        at_ms: 0,
    }
    .to_line();
    std::fs::write(path, text).unwrap();
}

/// Building a tree on a checksum-valid journal whose checkpoint is inconsistent (two live
/// records with the same id) fails with a `TreeError`; it does not panic ("Any other bad
/// line ... fail[s] with the file and the line named"; nothing panics on any file content).
// regression: replay checked a checkpoint only for its root record, and recovery trusted
// records to be dense by id: the fold refused an event and the build panicked.
#[tokio::test(start_paused = true)]
async fn a_checkpoint_with_a_repeated_id_fails_the_build_without_panicking() {
    let dir = TempDir::new("crafted");
    let path = dir.file("tree.journal");
    let live = AgentRecord {
        id: AgentId::new(1),
        agent_type: "w".into(),
        depth: 1,
        parent: Some(AgentId::ROOT),
        status: AgentStatus::Running,
        ..AgentRecord::root()
    };
    let mut root = AgentRecord::root();
    root.children = vec![AgentId::new(1), AgentId::new(1)];
    crafted(&path, vec![root, live.clone(), live]);
    let built = tokio::spawn(async move {
        Tree::builder()
            .catalog(catalog([leaf("w")]))
            .model(ScriptedModel::new())
            .journal(JournalConfig::new(&path))
            .build()
            .await
            .map(|tree| tree.snapshot().agents().count())
            .map_err(|e| e.to_string())
    })
    .await;
    match built {
        Ok(result) => assert!(
            result.is_err(),
            "an inconsistent checkpoint was accepted: {result:?}"
        ),
        Err(panic) => panic!("the build panicked on a crafted journal: {panic}"),
    }
}
