//! Review of issue 11 (journal and recovery), protocol side: replay of crafted but
//! checksum-valid journals.

use std::time::Duration;

use agent_tree_protocol::{
    AgentId, AgentRecord, AgentStatus, Event, EventKind, JOURNAL_VERSION, JournalEntry, SessionId,
    Usage, replay,
};

/// A journal whose checkpoint holds `records`, followed by one `usage_reported` on `a1`.
fn checkpoint_then_usage(records: Vec<AgentRecord>) -> Vec<u8> {
    let mut bytes = JournalEntry::Header {
        version: JOURNAL_VERSION,
        session: SessionId::new("s"),
    }
    .to_line();
    bytes += &JournalEntry::Checkpoint {
        seq: 5,
        records,
        tally: Default::default(),
        at_ms: 0,
    }
    .to_line();
    bytes += &JournalEntry::Event {
        event: Event {
            seq: 6,
            agent: AgentId::new(1),
            parent: Some(AgentId::ROOT),
            depth: 1,
            at_ms: 0,
            kind: EventKind::UsageReported {
                delta: Usage::tokens(1, 1),
            },
        },
    }
    .to_line();
    bytes.into_bytes()
}

/// Rule (protocol/src/journal.rs, "Replay never panics, whatever the bytes"; semantics:
/// any bad line fails naming the file and the line): replay must come back, with an error,
/// on every input.
///
/// Defect: a checkpoint is only checked for starting with the root record. A checkpoint
/// whose record `a1` names itself as its parent (a cycle, checksums all valid) makes the
/// next `usage_reported` walk `cursor = record.parent` forever in `fold::apply`
/// (protocol/src/fold.rs, the `while let Some(at) = cursor` loop of `UsageReported`): replay
/// never returns, and so neither does `read_journal` nor `TreeBuilder::build` on that file.
#[test]
fn replay_of_a_checkpoint_with_a_parent_cycle_returns() {
    let root = AgentRecord::root();
    let looped = AgentRecord {
        id: AgentId::new(1),
        agent_type: "w".into(),
        depth: 1,
        parent: Some(AgentId::new(1)),
        status: AgentStatus::Running,
        ..AgentRecord::root()
    };
    let bytes = checkpoint_then_usage(vec![root, looped]);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let result = replay(&bytes, None).map(|r| r.last_seq);
        let _ = tx.send(result);
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(result) => assert!(
            result.is_err(),
            "a cyclic checkpoint was accepted: {result:?}"
        ),
        Err(_) => panic!("replay of a checkpoint with a parent cycle did not return in 10 s"),
    }
}
