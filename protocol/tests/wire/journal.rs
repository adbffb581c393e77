//! The journal's line format and replay: round trips, and every kind of bad input refused
//! with its line named, or dropped when it is a torn last line.

use std::time::Duration;

use agent_tree_protocol::{
    AgentDefinition, AgentId, AgentRecord, AgentStatus, Event, EventKind, JOURNAL_VERSION,
    JournalEntry, LineError, Message, Outcome, ReplayError, SessionId, SpawnRequest, ToolCall,
    Usage, definition_hash, replay, replay_index,
};
use proptest::prelude::*;

fn header(session: &str) -> JournalEntry {
    JournalEntry::Header {
        version: JOURNAL_VERSION,
        session: SessionId::new(session),
    }
}

fn event(seq: u64, agent: u64, kind: EventKind) -> JournalEntry {
    JournalEntry::Event {
        event: Event {
            seq,
            agent: AgentId::new(agent),
            parent: Some(AgentId::ROOT),
            depth: 1,
            at_ms: seq * 10,
            kind,
        },
    }
}

fn spawned() -> EventKind {
    EventKind::Spawned {
        agent_type: "w".into(),
        request_id: None,
        detached: false,
    }
}

fn started() -> EventKind {
    EventKind::Started {
        agent_type: "w".into(),
        incarnation: 1,
    }
}

/// A small journal: a1 completes with usage, a2 is still running at the end.
fn journal() -> Vec<JournalEntry> {
    let definition = AgentDefinition::new("w", "You work.");
    vec![
        header("s1"),
        JournalEntry::Definition {
            hash: definition_hash(&definition),
            definition: definition.clone(),
        },
        event(1, 1, spawned()),
        JournalEntry::Spawn {
            agent: AgentId::new(1),
            definition: definition_hash(&definition),
            request: SpawnRequest::new("w", "first"),
            context: Vec::new().into(),
        },
        event(2, 1, started()),
        event(
            3,
            1,
            EventKind::UsageReported {
                delta: Usage::tokens(10, 5),
            },
        ),
        JournalEntry::Conversation {
            agent: AgentId::new(1),
            run: 1,
            from: 0,
            messages: vec![Message::user("first")].into(),
        },
        event(4, 1, EventKind::settled(Outcome::completed("done"))),
        event(5, 2, spawned()),
        event(6, 2, started()),
    ]
}

fn bytes(entries: &[JournalEntry]) -> String {
    entries.iter().map(JournalEntry::to_line).collect()
}

#[test]
fn a_journal_replays_its_records_outcomes_and_side_entries() {
    let replay = replay(bytes(&journal()).as_bytes(), Some(&SessionId::new("s1"))).unwrap();
    assert_eq!(replay.last_seq, 6);
    assert_eq!(replay.records.len(), 3);
    assert_eq!(replay.records[1].status, AgentStatus::Completed);
    assert_eq!(replay.records[0].subtree, Usage::tokens(10, 5));
    let outcomes: Vec<_> = replay.outcomes().map(|(id, o)| (id, o.clone())).collect();
    assert_eq!(outcomes, [(AgentId::new(1), Outcome::completed("done"))]);
    let unfinished: Vec<AgentId> = replay.unfinished().map(|r| r.id).collect();
    assert_eq!(unfinished, [AgentId::new(2)]);
    assert_eq!(replay.spawns[&AgentId::new(1)].1.prompt, "first");
    assert_eq!(replay.conversations[&AgentId::new(1)].0, 1);
    assert_eq!(replay.definitions.len(), 1);
    assert_eq!(replay.torn, None);
}

#[test]
fn a_torn_last_line_is_dropped_at_every_cut() {
    let entries = journal();
    let text = bytes(&entries);
    let ends: Vec<usize> = text.match_indices('\n').map(|(i, _)| i + 1).collect();
    // Cut the journal at every byte after the header: the complete lines replay, the partial
    // one is reported torn.
    for cut in ends[0]..text.len() {
        let replay =
            replay(&text.as_bytes()[..cut], None).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        let complete = ends.iter().filter(|&&end| end <= cut).count();
        assert_eq!(replay.lines, complete, "cut at {cut}");
        let torn = !ends.contains(&cut);
        assert_eq!(replay.torn.is_some(), torn, "cut at {cut}");
        // The records are those of the complete lines.
        let expected =
            agent_tree_protocol::replay(&text.as_bytes()[..ends[complete - 1]], None).unwrap();
        assert_eq!(replay.records, expected.records, "cut at {cut}");
    }
}

#[test]
fn a_tail_of_zero_bytes_is_a_torn_end() {
    let mut text = bytes(&journal()).into_bytes();
    text.extend_from_slice(&[0; 4096]);
    let replay = replay(&text, None).unwrap();
    assert_eq!((replay.last_seq, replay.torn), (6, Some(11)));
}

#[test]
fn a_flipped_byte_is_a_checksum_error_naming_its_line() {
    let text = bytes(&journal());
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    // Flip one bit in the middle of line 5's JSON.
    let at = line_starts[4] + 20;
    let mut broken = text.clone().into_bytes();
    broken[at] ^= 0x01;
    match replay(&broken, None) {
        Err(ReplayError::Line {
            line: 5,
            source: LineError::Checksum { .. },
        }) => {}
        other => panic!("{other:?}"),
    }
    let error = replay(&broken, None).unwrap_err().to_string();
    assert!(error.starts_with("line 5: checksum mismatch"), "{error}");
}

#[test]
fn garbage_an_unknown_kind_a_newer_version_and_another_tree_are_refused() {
    let mut text = bytes(&journal()[..3]);
    text.push_str("hello world\n");
    text.push_str(&bytes(&journal()[3..]));
    assert!(matches!(
        replay(text.as_bytes(), None),
        Err(ReplayError::Line {
            line: 4,
            source: LineError::NoChecksum
        })
    ));

    // An event kind of a newer version, with a valid checksum.
    let json = r#"{"entry":"event","event":{"seq":1,"agent":"a1","parent":"a0","depth":1,"at_ms":0,"event":"teleported"}}"#;
    let line = format!("{:08x} {json}\n", crc32(json.as_bytes()));
    let text = bytes(&[header("s1")]) + &line;
    let error = replay(text.as_bytes(), None).unwrap_err();
    assert!(
        matches!(
            error,
            ReplayError::Line {
                line: 2,
                source: LineError::UnknownKind(_)
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("newer"), "{error}");

    let newer = JournalEntry::Header {
        version: JOURNAL_VERSION + 1,
        session: SessionId::new("s1"),
    };
    assert_eq!(
        replay(newer.to_line().as_bytes(), None),
        Err(ReplayError::NewerVersion {
            found: JOURNAL_VERSION + 1
        })
    );

    let other = replay(bytes(&journal()).as_bytes(), Some(&SessionId::new("s2")));
    assert_eq!(
        other.unwrap_err().to_string(),
        "line 1: journal of session s1, not s2"
    );

    assert_eq!(replay(b"", None), Err(ReplayError::NoHeader));
    let no_header = bytes(&journal()[2..]);
    assert_eq!(
        replay(no_header.as_bytes(), None),
        Err(ReplayError::NoHeader)
    );
}

#[test]
fn a_missing_or_repeated_line_breaks_the_sequence() {
    let mut entries = journal();
    entries.remove(4); // event 2
    let error = replay(bytes(&entries).as_bytes(), None).unwrap_err();
    assert_eq!(
        error.to_string(),
        "line 5: event 3 where event 2 was due (a line is missing or repeated)"
    );
    let mut entries = journal();
    let again = entries[4].clone();
    entries.insert(5, again);
    assert!(matches!(
        replay(bytes(&entries).as_bytes(), None),
        Err(ReplayError::Sequence { line: 6, .. })
    ));
}

#[test]
fn a_checkpoint_replaces_the_events_before_it() {
    let full = replay(bytes(&journal()).as_bytes(), None).unwrap();
    let compacted = vec![
        header("s1"),
        JournalEntry::Checkpoint {
            seq: full.last_seq,
            records: full.records.clone(),
            tally: full.tally.clone(),
            at_ms: full.last_ms,
        },
        event(7, 2, EventKind::settled(Outcome::completed("late"))),
    ];
    let replay = replay(bytes(&compacted).as_bytes(), None).unwrap();
    assert_eq!(replay.last_seq, 7);
    // The tally goes on from the checkpoint's: its events and the one after.
    assert_eq!(replay.tally.total(), full.tally.total() + 1);
    assert_eq!(replay.tally.completed, full.tally.completed + 1);
    assert_eq!(replay.records[2].status, AgentStatus::Completed);
    assert_eq!(replay.records[1], full.records[1]);
}

#[test]
fn floats_and_odd_text_round_trip_exactly() {
    let values = [
        0.1f64,
        1.0 / 3.0,
        f64::MIN_POSITIVE,
        f64::MAX,
        -2.5e-308,
        123_456_789.123_456_79,
    ];
    for value in values {
        let call = ToolCall::new(
            "c\u{0}1",
            "calc",
            serde_json::json!({ "x": value, "s": "line\nbreak \u{2028} \"quoted\"" }),
        );
        let entry = JournalEntry::Conversation {
            agent: AgentId::new(3),
            run: 2,
            from: 0,
            messages: vec![Message::assistant("é\u{1F600}", vec![call])].into(),
        };
        let line = entry.to_line();
        assert_eq!(line.matches('\n').count(), 1, "one line: {line}");
        let back = JournalEntry::from_line(line.trim_end_matches('\n')).unwrap();
        assert_eq!(back, entry);
        let JournalEntry::Conversation { messages, .. } = back else {
            unreachable!()
        };
        let x = messages[0].tool_calls[0].input.to_value()["x"]
            .as_f64()
            .unwrap();
        assert_eq!(x.to_bits(), value.to_bits(), "{value}");
    }
}

proptest! {
    /// Whatever the bytes, replay answers without panicking.
    #[test]
    fn replay_never_panics(noise in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = replay(&noise, None);
        let mut text = bytes(&journal()).into_bytes();
        text.extend_from_slice(&noise);
        let _ = replay(&text, None);
    }

    /// A flipped byte anywhere in a complete line is an error or, in the last line, a torn
    /// end: never a replay that silently differs in the lines before it.
    #[test]
    fn a_flipped_byte_never_passes_unnoticed(at in 0usize..2000, bit in 0u8..8) {
        let text = bytes(&journal()).into_bytes();
        let at = at % text.len();
        let mut broken = text.clone();
        broken[at] ^= 1 << bit;
        let full = replay(&text, None).unwrap();
        if let Ok(replayed) = replay(&broken, None) {
            // Only a flip that turned a newline into something else, making the rest one
            // torn last line, or a flip in the last line's newline, replays at all; what it
            // replays is a prefix of the original.
            prop_assert!(replayed.torn.is_some());
            prop_assert!(replayed.last_seq <= full.last_seq);
            let kept = text[..at].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let prefix = replay(&text[..kept], None).unwrap();
            prop_assert_eq!(replayed.records, prefix.records);
        }
    }
}

/// A replay read as a stream keeps where each agent's conversation is, not its messages:
/// a settled agent's long conversation is never in memory unless it is read back, alone,
/// by its places, and then it is the one the whole replay holds. Read through a buffer
/// smaller than a line, with a torn last line, the stream folds what the bytes do.
#[test]
fn an_index_keeps_the_places_of_conversations_not_their_messages() {
    let long: Vec<Message> = (0..200)
        .map(|i| Message::user(format!("turn {i} {}", "x".repeat(100))))
        .collect();
    let mut entries = journal();
    // After agent 1's whole conversation, before it settles: what its next turn added.
    entries.insert(
        7,
        JournalEntry::Conversation {
            agent: AgentId::new(1),
            run: 1,
            from: 1,
            messages: long.into(),
        },
    );
    entries.push(JournalEntry::Conversation {
        agent: AgentId::new(2),
        run: 1,
        from: 0,
        messages: vec![Message::user("second")].into(),
    });
    let mut text = bytes(&entries);
    text += "12ab"; // a torn last line
    let whole = replay(text.as_bytes(), None).unwrap();
    let mut reader = std::io::BufReader::with_capacity(7, std::io::Cursor::new(text.as_bytes()));
    let index = replay_index(&mut reader, None).unwrap();
    assert!(index.conversations.is_empty());
    assert_eq!(index.conversation_lines[&AgentId::new(1)].1.len(), 2);
    assert_eq!(
        (index.records.clone(), index.torn, index.bytes, index.lines),
        (whole.records.clone(), whole.torn, whole.bytes, whole.lines)
    );
    assert_eq!(index.conversation_lines, whole.conversation_lines);
    for agent in [AgentId::new(1), AgentId::new(2)] {
        let read = index.read_conversation(&mut reader, agent).unwrap();
        assert_eq!(read.as_ref(), whole.conversations.get(&agent));
    }
    assert_eq!(whole.conversations[&AgentId::new(1)].1.len(), 201);
    assert_eq!(
        index.read_conversation(&mut reader, AgentId::new(9)),
        Ok(None)
    );
    // Another file at those places is refused, not read as the conversation.
    let other = bytes(&journal());
    assert!(matches!(
        index.read_conversation(&mut std::io::Cursor::new(other.as_bytes()), AgentId::new(1)),
        Err(ReplayError::Io(_))
    ));
}

#[test]
fn conversations_are_journaled_by_what_each_turn_added() {
    let conversation = |from: usize, texts: &[&str]| JournalEntry::Conversation {
        agent: AgentId::new(1),
        run: 1,
        from,
        messages: texts
            .iter()
            .map(|t| Message::user(*t))
            .collect::<Vec<_>>()
            .into(),
    };
    let mut entries = journal();
    entries.push(conversation(1, &["second", "third"]));
    entries.push(conversation(2, &["third again", "fourth"]));
    let replayed = replay(bytes(&entries).as_bytes(), None).unwrap();
    let texts: Vec<&str> = replayed.conversations[&AgentId::new(1)]
        .1
        .iter()
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(texts, ["first", "second", "third again", "fourth"]);
    // Only `from` is written beyond the header's fields: a whole conversation has none.
    assert!(!conversation(0, &["x"]).to_line().contains("\"from\""));

    // Continuing past what was journaled is refused, naming the line.
    let mut entries = journal();
    entries.push(conversation(5, &["lost"]));
    let error = replay(bytes(&entries).as_bytes(), None)
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("line 11: a conversation of a1 continuing at message 5"),
        "{error}"
    );
}

/// A remote child's mirror lines: the latest one for an agent wins, each agent keeps its
/// own, and a line round-trips.
#[test]
fn the_latest_mirror_of_each_remote_child_is_replayed() {
    let record = |id: u64, agent_type: &str| {
        let mut record = agent_tree_protocol::AgentRecord::root();
        record.id = AgentId::new(id);
        record.agent_type = agent_type.into();
        record
    };
    let first = vec![record(0, "root"), record(1, "runner")];
    let second = vec![record(0, "root"), record(1, "runner"), record(2, "helper")];
    let other = vec![record(0, "root"), record(1, "lead")];
    let mut entries = journal();
    for (agent, records) in [(1, &first), (2, &other), (1, &second)] {
        entries.push(JournalEntry::Mirror {
            agent: AgentId::new(agent),
            records: records.clone(),
        });
    }
    let line = entries.last().unwrap().to_line();
    assert_eq!(
        JournalEntry::from_line(line.trim_end()).unwrap(),
        *entries.last().unwrap()
    );
    let bytes: String = entries.iter().map(JournalEntry::to_line).collect();
    let replay = replay(bytes.as_bytes(), None).unwrap();
    assert_eq!(replay.mirrors.len(), 2);
    assert_eq!(replay.mirrors[&AgentId::new(1)], second);
    assert_eq!(replay.mirrors[&AgentId::new(2)], other);
}

/// Steer lines: those of an agent after its latest conversation line are the ones no
/// journaled conversation holds, in order; a conversation line of the agent ends them
/// (its turn boundary read them), another agent's does not; a line round-trips.
#[test]
fn steers_after_an_agents_latest_conversation_are_replayed_in_order() {
    let steer = |agent: u64, text: &str| JournalEntry::Steer {
        agent: AgentId::new(agent),
        text: text.into(),
    };
    let line = steer(1, "use \"blue\"\n").to_line();
    assert!(line.contains("\"entry\":\"steer\""), "{line}");
    assert_eq!(
        JournalEntry::from_line(line.trim_end()).unwrap(),
        steer(1, "use \"blue\"\n")
    );
    let mut entries = journal();
    entries.push(steer(1, "read"));
    entries.push(JournalEntry::Conversation {
        agent: AgentId::new(1),
        run: 2,
        from: 0,
        messages: vec![Message::user("first"), Message::user("read")].into(),
    });
    entries.push(steer(2, "a"));
    entries.push(steer(1, "not read"));
    entries.push(JournalEntry::Conversation {
        agent: AgentId::new(3),
        run: 1,
        from: 0,
        messages: vec![Message::user("other")].into(),
    });
    entries.push(steer(2, "b"));
    let replay = replay(bytes(&entries).as_bytes(), None).unwrap();
    assert_eq!(replay.steers[&AgentId::new(1)], ["not read"]);
    assert_eq!(replay.steers[&AgentId::new(2)], ["a", "b"]);
    assert_eq!(replay.steers.len(), 2);
}

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

/// Replay never panics and always comes back, whatever the bytes (a bad line fails naming the
/// file and the line): a checkpoint whose record `a1` names itself as its parent (a cycle,
/// every checksum valid) is refused with an error, rather than sending the next
/// `usage_reported`'s walk up the parents round the cycle forever (which would hang
/// `read_journal` and `TreeBuilder::build` on that file too).
#[test]
fn a_checkpoint_whose_parents_form_a_cycle_is_refused() {
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

/// CRC-32 (IEEE), the line format's checksum, written out here from its definition (the
/// reflected polynomial `0xedb88320`) rather than taken from the crate: a line this test
/// builds by hand is checked against the format, not against the crate's own function.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                0xedb8_8320 ^ (crc >> 1)
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
