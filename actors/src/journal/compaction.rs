//! Compaction: the compacted content of a journal, written from its replay (a checkpoint of
//! the records, then what recovery needs besides) with each conversation's lines copied from
//! the old file as they are, one at a time.

use std::io::{self, Write};

use agent_tree_protocol::runtime::LineSpan;
use agent_tree_protocol::{AgentId, JOURNAL_VERSION, JournalEntry, Outcome, Replay, SessionId};

use super::JournalReader;
use super::index::Conversations;

/// Writes to `out` the compacted content of a journal whose replay ([`replay_index`]) is
/// `state`, read from `old`, and returns where each settled agent's whole outcome and each
/// agent's conversation is in it: the checkpoint's records carry outcomes without their
/// output, and each output has a line of its own after it (a released one taken from its
/// line in `old`); each agent's latest conversation is its lines in `old`, copied as they
/// are, one at a time. Its memory is the replay's and the longest line, not the journal's.
///
/// [`replay_index`]: agent_tree_protocol::replay_index
pub(crate) fn compact(
    state: &Replay,
    session: &SessionId,
    old: &mut dyn JournalReader,
    out: &mut dyn Write,
) -> io::Result<(std::collections::HashMap<AgentId, LineSpan>, Conversations)> {
    let mut out = Counted { out, written: 0 };
    out.line(&JournalEntry::Header {
        version: JOURNAL_VERSION,
        session: session.clone(),
    })?;
    let mut records = state.records.clone();
    let mut whole = Vec::new();
    for record in &mut records {
        let Some(outcome) = record.outcome.as_mut() else {
            continue;
        };
        if outcome.released {
            match released_output(state, old, record.id) {
                Some(full) => whole.push((record.id, full)),
                None => tracing::warn!(
                    agent = %record.id,
                    "a released output is not in the journal any more; compaction drops it"
                ),
            }
        } else if outcome.output_bytes() > 0 {
            let full = outcome.clone();
            outcome.text = None;
            outcome.partial = None;
            whole.push((record.id, full));
        }
    }
    out.line(&JournalEntry::Checkpoint {
        seq: state.last_seq,
        records,
        tally: state.tally.clone(),
        at_ms: state.last_ms,
    })?;
    let mut outputs = std::collections::HashMap::with_capacity(whole.len());
    for (agent, outcome) in whole {
        let span = out.line(&JournalEntry::Output { agent, outcome })?;
        outputs.insert(agent, span);
    }
    let mut hashes: Vec<&String> = state.definitions.keys().collect();
    hashes.sort();
    for hash in hashes {
        out.line(&JournalEntry::Definition {
            hash: hash.clone(),
            definition: state.definitions[hash].clone(),
        })?;
    }
    let mut agents: Vec<&AgentId> = state.spawns.keys().collect();
    agents.sort();
    for agent in agents {
        let (definition, request) = &state.spawns[agent];
        out.line(&JournalEntry::Spawn {
            agent: *agent,
            definition: definition.clone(),
            request: request.clone(),
            context: state
                .contexts
                .get(agent)
                .cloned()
                .unwrap_or_else(|| Vec::new().into()),
        })?;
    }
    let mut agents: Vec<&AgentId> = state.decided.keys().collect();
    agents.sort();
    for agent in agents {
        out.line(&JournalEntry::Decided {
            agent: *agent,
            outcome: state.decided[agent].clone(),
        })?;
    }
    let mut agents: Vec<&AgentId> = state.mirrors.keys().collect();
    agents.sort();
    for agent in agents {
        out.line(&JournalEntry::Mirror {
            agent: *agent,
            records: state.mirrors[agent].clone(),
        })?;
    }
    let mut agents: Vec<&AgentId> = state.conversation_lines.keys().collect();
    agents.sort();
    let mut conversations = Conversations::with_capacity(agents.len());
    let mut line = Vec::new();
    for agent in agents {
        let (run, spans) = &state.conversation_lines[agent];
        let mut kept = Vec::with_capacity(spans.len().max(1));
        if spans.is_empty() {
            // A restarted run cut off before its first turn boundary: its conversation is
            // its start, an empty one here (recovery rebuilds it from the request).
            kept.push(out.line(&JournalEntry::Conversation {
                agent: *agent,
                run: *run,
                from: 0,
                messages: Vec::new().into(),
            })?);
        }
        // The lines as they are (their checksums were checked by the replay): a whole
        // conversation, then what each turn added, continuing one another as before.
        for span in spans {
            let len = usize::try_from(span.len).map_err(io::Error::other)?;
            line.resize(len, 0);
            old.seek(io::SeekFrom::Start(span.offset))?;
            old.read_exact(&mut line)?;
            line.push(b'\n');
            kept.push(out.raw(&line)?);
            // One long line does not keep its buffer for the rest of the copy.
            line.clear();
            line.shrink_to(1 << 16);
        }
        conversations.insert(*agent, (*run, kept));
    }
    // After every conversation: steers no journaled conversation holds yet stay so.
    let mut agents: Vec<&AgentId> = state.steers.keys().collect();
    agents.sort();
    for agent in agents {
        for text in &state.steers[agent] {
            out.line(&JournalEntry::Steer {
                agent: *agent,
                text: text.clone(),
            })?;
        }
    }
    // And the questions live agents wait on, with the answers given to them.
    let live = |agent: &AgentId| {
        usize::try_from(agent.get())
            .ok()
            .and_then(|i| state.records.get(i))
            .is_some_and(|r| !r.status.is_terminal())
    };
    let mut agents: Vec<&AgentId> = state.questions.keys().filter(|a| live(a)).collect();
    agents.sort();
    for agent in agents {
        let open = &state.questions[agent];
        out.line(&JournalEntry::Question {
            agent: *agent,
            run: open.run,
            call: open.call,
            question: open.question.clone(),
            asking: open.asking.clone(),
        })?;
        if let Some((text, is_error)) = &open.answer {
            out.line(&JournalEntry::Answer {
                agent: *agent,
                run: open.run,
                text: text.clone(),
                is_error: *is_error,
            })?;
        }
    }
    out.out.flush()?;
    Ok((outputs, conversations))
}

/// A compaction's output, counting what it wrote: where each line lands.
struct Counted<'a> {
    out: &'a mut dyn Write,
    written: u64,
}

impl Counted<'_> {
    /// Writes `entry` as a line, and returns where it is.
    fn line(&mut self, entry: &JournalEntry) -> io::Result<LineSpan> {
        self.raw(entry.to_line().as_bytes())
    }

    /// Writes `line`, a whole line with its newline, and returns where it is.
    fn raw(&mut self, line: &[u8]) -> io::Result<LineSpan> {
        self.out.write_all(line)?;
        let span = LineSpan {
            offset: self.written,
            len: line.len() as u64 - 1,
        };
        self.written += line.len() as u64;
        Ok(span)
    }
}

/// The whole outcome of `agent` from its line in `old`, where `state` (their replay) says
/// it is.
fn released_output(state: &Replay, old: &mut dyn JournalReader, agent: AgentId) -> Option<Outcome> {
    let span = state.outputs.get(&agent)?;
    let mut line = vec![0; usize::try_from(span.len).ok()?];
    old.seek(io::SeekFrom::Start(span.offset)).ok()?;
    old.read_exact(&mut line).ok()?;
    let entry = JournalEntry::from_line_bytes(&line).ok()?;
    let (found, outcome) = entry.output()?;
    (found == agent).then(|| outcome.clone())
}

#[cfg(test)]
mod tests {
    use agent_tree_protocol::{Event, EventKind, Message};

    use super::*;

    /// What [`compact`] writes of `bytes`, replayed as `state`.
    fn compacted(state: &Replay, session: &SessionId, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        compact(state, session, &mut io::Cursor::new(bytes), &mut out).expect("compacts");
        out
    }

    /// A compaction keeps what recovery reads: an agent's steers no journaled conversation
    /// holds stay unread in the compacted file, and those a conversation read stay read.
    #[test]
    fn a_compaction_keeps_the_steers_no_conversation_holds() {
        let session = SessionId::new("s");
        let agent = AgentId::new(1);
        let lines = [
            JournalEntry::Header {
                version: JOURNAL_VERSION,
                session: session.clone(),
            },
            JournalEntry::Event {
                event: Event {
                    seq: 1,
                    agent,
                    parent: Some(AgentId::ROOT),
                    depth: 1,
                    at_ms: 0,
                    kind: EventKind::Spawned {
                        agent_type: "w".into(),
                        request_id: None,
                        detached: false,
                    },
                },
            },
            JournalEntry::Steer {
                agent,
                text: "read".into(),
            },
            JournalEntry::Conversation {
                agent,
                run: 1,
                from: 0,
                messages: vec![Message::user("task"), Message::user("read")].into(),
            },
            JournalEntry::Steer {
                agent,
                text: "unread".into(),
            },
        ];
        let bytes: String = lines.iter().map(JournalEntry::to_line).collect();
        let state = agent_tree_protocol::replay(bytes.as_bytes(), None).unwrap();
        assert_eq!(state.steers[&agent], ["unread"]);
        let compacted = compacted(&state, &session, bytes.as_bytes());
        let again = agent_tree_protocol::replay(&compacted, None).unwrap();
        assert_eq!(again.steers, state.steers);
        assert_eq!(again.conversations, state.conversations);
    }

    /// A compaction keeps the question a live agent waits on, with the answer given to it;
    /// a question a later conversation line answered is not kept, and neither is a settled
    /// agent's.
    #[test]
    fn a_compaction_keeps_the_open_questions_of_live_agents() {
        let session = SessionId::new("s");
        let spawned = |seq: u64, agent: AgentId| JournalEntry::Event {
            event: Event {
                seq,
                agent,
                parent: Some(AgentId::ROOT),
                depth: 1,
                at_ms: 0,
                kind: EventKind::Spawned {
                    agent_type: "w".into(),
                    request_id: None,
                    detached: false,
                },
            },
        };
        let asking = Message::assistant(
            "",
            vec![agent_tree_protocol::ToolCall::new(
                "c",
                "ask_owner",
                serde_json::json!({ "question": "tabs?" }),
            )],
        );
        let question = |agent: AgentId| JournalEntry::Question {
            agent,
            run: 1,
            call: 0,
            question: "tabs?".into(),
            asking: asking.clone(),
        };
        let (waiting, answered, settled) = (AgentId::new(1), AgentId::new(2), AgentId::new(3));
        let lines = [
            JournalEntry::Header {
                version: JOURNAL_VERSION,
                session: session.clone(),
            },
            spawned(1, waiting),
            spawned(2, answered),
            spawned(3, settled),
            question(waiting),
            JournalEntry::Answer {
                agent: waiting,
                run: 1,
                text: "tabs".into(),
                is_error: false,
            },
            // An answer to another run's question is not this one's.
            JournalEntry::Answer {
                agent: waiting,
                run: 2,
                text: "spaces".into(),
                is_error: false,
            },
            question(answered),
            JournalEntry::Conversation {
                agent: answered,
                run: 1,
                from: 0,
                messages: vec![Message::user("task")].into(),
            },
            question(settled),
            JournalEntry::Event {
                event: Event {
                    seq: 4,
                    agent: settled,
                    parent: Some(AgentId::ROOT),
                    depth: 1,
                    at_ms: 0,
                    kind: EventKind::Aborted {
                        outcome: agent_tree_protocol::Outcome::ended(
                            agent_tree_protocol::AgentStatus::Aborted,
                            agent_tree_protocol::EndReason::Killed,
                        ),
                    },
                },
            },
        ];
        let bytes: String = lines.iter().map(JournalEntry::to_line).collect();
        let state = agent_tree_protocol::replay(bytes.as_bytes(), None).unwrap();
        assert_eq!(
            state.questions[&waiting].answer,
            Some(("tabs".into(), false))
        );
        assert!(!state.questions.contains_key(&answered));
        let compacted = compacted(&state, &session, bytes.as_bytes());
        let again = agent_tree_protocol::replay(&compacted, None).unwrap();
        assert_eq!(again.questions.len(), 1);
        assert_eq!(again.questions[&waiting], state.questions[&waiting]);
    }
}
