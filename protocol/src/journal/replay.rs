//! The replay: a journal folded line by line (the same fold as the registry's) into a
//! [`Replay`], keeping each conversation only as the places of its lines.

use std::collections::HashMap;
use std::fmt;

use super::{JOURNAL_VERSION, JournalEntry, LineError, LineSpan};
use crate::definition::AgentDefinition;
use crate::event::EventTally;
use crate::fold::{FoldError, apply};
use crate::ids::{AgentId, SessionId};
use crate::message::Message;
use crate::outcome::Outcome;
use crate::request::SpawnRequest;
use crate::snapshot::AgentRecord;

/// Why a journal cannot be replayed: what, and on which line (from 1).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// A line that does not decode (and is not a torn last line).
    #[error("line {line}: {source}")]
    Line {
        /// The line.
        line: usize,
        /// Why.
        #[source]
        source: LineError,
    },
    /// The journal is empty, or does not start with a header.
    #[error("line 1: not a journal (no header)")]
    NoHeader,
    /// The header's version is newer than this build's.
    #[error("line 1: journal version {found} is newer than this build's {JOURNAL_VERSION}")]
    NewerVersion {
        /// The version found.
        found: u32,
    },
    /// The journal belongs to another tree.
    #[error("line 1: journal of session {found}, not {expected}")]
    OtherTree {
        /// The journal's session.
        found: SessionId,
        /// The session asked for.
        expected: SessionId,
    },
    /// An event whose sequence number is not the next one: a line is missing or repeated.
    #[error(
        "line {line}: event {found} where event {expected} was due (a line is missing or repeated)"
    )]
    Sequence {
        /// The line.
        line: usize,
        /// The sequence number due.
        expected: u64,
        /// The one found.
        found: u64,
    },
    /// An event the records cannot take.
    #[error("line {line}: {source}")]
    Fold {
        /// The line.
        line: usize,
        /// Why.
        #[source]
        source: FoldError,
    },
    /// A second header, or an entry the replay cannot place.
    #[error("line {line}: {what}")]
    Misplaced {
        /// The line.
        line: usize,
        /// What was wrong.
        what: String,
    },
    /// The journal could not be read ([`replay_index`]'s reader failed), or a conversation
    /// read back by its place is not what the replay found there (the file changed).
    #[error("cannot read the journal {0}")]
    Io(String),
}

/// A journal replayed: what a tree rebuilds itself from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Replay {
    /// The tree's session.
    pub session: Option<SessionId>,
    /// Every record, indexed by id from the root: the fold of the events (from the last
    /// checkpoint on).
    pub records: Vec<AgentRecord>,
    /// The last event's sequence number (0 for none).
    pub last_seq: u64,
    /// The events replayed (with those a checkpoint stands for), by kind.
    pub tally: EventTally,
    /// The latest event time (`at_ms`, ms since the tree started) replayed: where a
    /// recovered tree's clock goes on from.
    pub last_ms: u64,
    /// Definitions by hash.
    pub definitions: HashMap<String, AgentDefinition>,
    /// Each agent's admission request and definition hash.
    pub spawns: HashMap<AgentId, (String, SpawnRequest)>,
    /// The contexts agents inherited from their owners, where not empty.
    pub contexts: HashMap<AgentId, std::sync::Arc<[Message]>>,
    /// The outcomes agents held while their children drained.
    pub decided: HashMap<AgentId, Outcome>,
    /// Agents' latest journaled conversations, with their runs: every agent's after
    /// [`replay`]; none after [`replay_index`], which keeps only where they are
    /// ([`Replay::conversation_lines`]) and leaves it to its caller to read back those it
    /// needs ([`Replay::read_conversation`]). A recovery reads those of the agents the
    /// journal leaves unfinished, so that settled agents' conversations, the bulk of a
    /// long-lived journal, are never all in memory at once.
    pub conversations: HashMap<AgentId, (u32, std::sync::Arc<[Message]>)>,
    /// The steers each agent receipted after its latest conversation line, in order: those
    /// no journaled conversation holds yet.
    pub steers: HashMap<AgentId, Vec<String>>,
    /// The `ask_owner` question each agent asked after its latest conversation line and
    /// run start, with its answer if one was journaled: what a recovered agent waits on.
    pub questions: HashMap<AgentId, OpenQuestion>,
    /// Where each settled agent's whole outcome is: the line of its terminal event, or of
    /// a compaction's [`JournalEntry::Output`]. One output is read back from there alone.
    pub outputs: HashMap<AgentId, LineSpan>,
    /// Where each agent's latest journaled conversation is: its run and the lines that
    /// make it up (a whole one, then what each turn added), read back alone on a resume.
    /// No lines: a restarted run cut off before its first turn boundary (its conversation
    /// is its start). Every agent with a journaled conversation has an entry.
    pub conversation_lines: HashMap<AgentId, (u32, Vec<LineSpan>)>,
    /// Each remote child's latest mirror of its hosted subtree ([`JournalEntry::Mirror`]).
    pub mirrors: HashMap<AgentId, Vec<AgentRecord>>,
    /// Lines read (the torn one excluded).
    pub lines: usize,
    /// The bytes those lines take: where a writer appending after a torn line must cut.
    pub bytes: usize,
    /// The line number of a torn last line that was dropped, if there was one.
    pub torn: Option<usize>,
}

/// A question an agent asked its owner (`ask_owner`) that no journaled conversation holds
/// yet ([`JournalEntry::Question`]), and its answer, once journaled.
#[derive(Clone, Debug, PartialEq)]
pub struct OpenQuestion {
    /// The run that asked it.
    pub run: u32,
    /// The place of the `ask_owner` call among the asking message's calls.
    pub call: usize,
    /// The question.
    pub question: String,
    /// The assistant message of the turn that asked it.
    pub asking: Message,
    /// The answer, if one was given (its text, and whether it is a refusal).
    pub answer: Option<(String, bool)>,
}

impl Replay {
    /// The final outcome of each settled agent, by id: what a recovered tree still reads.
    pub fn outcomes(&self) -> impl Iterator<Item = (AgentId, &Outcome)> {
        self.records
            .iter()
            .filter_map(|r| r.outcome.as_ref().map(|o| (r.id, o)))
    }

    /// The agents that were live when the journal ends (admitted, not terminal): those a
    /// crash interrupted.
    pub fn unfinished(&self) -> impl Iterator<Item = &AgentRecord> {
        self.records
            .iter()
            .skip(1)
            .filter(|r| !r.status.is_terminal())
    }
}

impl fmt::Display for Replay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} lines, {} agents, last event {}",
            self.lines,
            self.records.len().saturating_sub(1),
            self.last_seq
        )?;
        if let Some(line) = self.torn {
            write!(f, ", torn line {line} dropped")?;
        }
        Ok(())
    }
}

/// Replays a journal's bytes, every agent's latest conversation included. `session`, when
/// given, must be the journal's.
///
/// This is [`replay_index`] of bytes already in memory, then each conversation read back
/// from them ([`Replay::read_conversation`]): a tool or a test that holds the whole journal.
/// A recovery reads a file with [`replay_index`] instead, and only the conversations it
/// resumes, so that its memory does not grow with the file.
///
/// ```
/// use agent_tree_protocol::{replay, Event, EventKind, JournalEntry, SessionId, JOURNAL_VERSION, AgentId};
/// let mut bytes = JournalEntry::Header { version: JOURNAL_VERSION, session: SessionId::new("s") }.to_line();
/// let event = Event { seq: 1, agent: AgentId::new(1), parent: Some(AgentId::ROOT), depth: 1, at_ms: 0,
///     kind: EventKind::Spawned { agent_type: "w".into(), request_id: None, detached: false } };
/// bytes += &JournalEntry::Event { event }.to_line();
/// bytes += "91c2d0"; // a torn last line
/// let replay = replay(bytes.as_bytes(), None).unwrap();
/// assert_eq!((replay.records.len(), replay.last_seq, replay.torn), (2, 1, Some(3)));
/// ```
///
/// # Errors
///
/// [`ReplayError`], naming the line.
pub fn replay(bytes: &[u8], session: Option<&SessionId>) -> Result<Replay, ReplayError> {
    let mut replay = replay_index(bytes, session)?;
    let mut agents: Vec<AgentId> = replay.conversation_lines.keys().copied().collect();
    agents.sort();
    let mut reader = std::io::Cursor::new(bytes);
    for agent in agents {
        if let Some(conversation) = replay.read_conversation(&mut reader, agent)? {
            replay.conversations.insert(agent, conversation);
        }
    }
    Ok(replay)
}

/// Replays a journal read as a stream, line by line: everything [`replay`] finds but the
/// conversations, of which it keeps only where they are ([`Replay::conversation_lines`]);
/// [`Replay::conversations`] is left empty, for the caller to fill with
/// [`Replay::read_conversation`] for the agents it needs. Its memory is what the replay
/// holds (records, requests, outputs' places, open questions and steers) and the longest
/// line, whatever the file's size. `session`, when given, must be the journal's.
///
/// ```
/// use agent_tree_protocol::{replay_index, AgentId, JournalEntry, Message, SessionId, JOURNAL_VERSION};
/// let mut bytes = JournalEntry::Header { version: JOURNAL_VERSION, session: SessionId::new("s") }.to_line();
/// let agent = AgentId::new(1);
/// bytes += &JournalEntry::Conversation { agent, run: 1, from: 0, messages: vec![Message::user("go")].into() }.to_line();
/// let mut reader = std::io::Cursor::new(bytes.as_bytes());
/// let index = replay_index(&mut reader, None).unwrap();
/// assert!(index.conversations.is_empty());
/// let (run, messages) = index.read_conversation(&mut reader, agent).unwrap().unwrap();
/// assert_eq!((run, messages[0].content.as_str()), (1, "go"));
/// ```
///
/// # Errors
///
/// [`ReplayError`], naming the line; [`ReplayError::Io`] when the reader fails.
pub fn replay_index(
    mut reader: impl std::io::BufRead,
    session: Option<&SessionId>,
) -> Result<Replay, ReplayError> {
    let mut replay = Replay {
        records: vec![AgentRecord::root()],
        ..Replay::default()
    };
    // Each agent's latest conversation's run and length, so that a line continuing it is
    // checked without holding its messages.
    let mut lengths: HashMap<AgentId, (u32, usize)> = HashMap::new();
    let mut line: Vec<u8> = Vec::new();
    let mut line_no = 0;
    let mut offset: u64 = 0;
    // A line of zero bytes (or an empty one), and why it does not decode: the start of a
    // torn tail if nothing but zeros and newlines follows it, else an error on its line.
    let mut zeros_from: Option<(usize, LineError)> = None;
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| ReplayError::Io(format!("after line {line_no}: {e}")))?;
        if read == 0 {
            break;
        }
        line_no += 1;
        let complete = line.last() == Some(&b'\n');
        if complete {
            line.pop();
        }
        // A partial last line: no newline, or the zero bytes a file system may leave after
        // a crash. Only the very end may be torn.
        let zeros = line.iter().all(|&b| b == 0);
        if let Some((suspect, error)) = &zeros_from {
            if zeros {
                continue;
            }
            return Err(ReplayError::Line {
                line: *suspect,
                source: error.clone(),
            });
        }
        if !complete {
            replay.torn = Some(line_no);
            break;
        }
        if zeros {
            let error = JournalEntry::from_line_bytes(&line)
                .err()
                .unwrap_or(LineError::NoChecksum);
            zeros_from = Some((line_no, error));
            continue;
        }
        let entry = JournalEntry::from_line_bytes(&line).map_err(|source| ReplayError::Line {
            line: line_no,
            source,
        })?;
        let span = LineSpan {
            offset,
            len: line.len() as u64,
        };
        replay.take(entry, line_no, span, session, &mut lengths)?;
        offset += read as u64;
        replay.lines = line_no;
        replay.bytes = offset as usize;
    }
    if let Some((suspect, _)) = zeros_from {
        replay.torn = Some(suspect);
    }
    if replay.session.is_none() {
        return Err(ReplayError::NoHeader);
    }
    Ok(replay)
}

impl Replay {
    fn take(
        &mut self,
        entry: JournalEntry,
        line: usize,
        span: LineSpan,
        session: Option<&SessionId>,
        lengths: &mut HashMap<AgentId, (u32, usize)>,
    ) -> Result<(), ReplayError> {
        if self.session.is_none() && !matches!(entry, JournalEntry::Header { .. }) {
            return Err(ReplayError::NoHeader);
        }
        match entry {
            JournalEntry::Header {
                version,
                session: found,
            } => {
                if self.session.is_some() {
                    return Err(ReplayError::Misplaced {
                        line,
                        what: "a second header".into(),
                    });
                }
                if version > JOURNAL_VERSION {
                    return Err(ReplayError::NewerVersion { found: version });
                }
                if let Some(expected) = session {
                    if *expected != found {
                        return Err(ReplayError::OtherTree {
                            found,
                            expected: expected.clone(),
                        });
                    }
                }
                self.session = Some(found);
            }
            JournalEntry::Event { event } => {
                let expected = self.last_seq + 1;
                if event.seq != expected {
                    return Err(ReplayError::Sequence {
                        line,
                        expected,
                        found: event.seq,
                    });
                }
                apply(&mut self.records, &event)
                    .map_err(|source| ReplayError::Fold { line, source })?;
                self.last_seq = event.seq;
                self.tally.count(&event.kind);
                self.last_ms = self.last_ms.max(event.at_ms);
                match &event.kind {
                    kind if kind.outcome().is_some() => {
                        self.outputs.insert(event.agent, span);
                    }
                    crate::event::EventKind::Resumed
                    | crate::event::EventKind::Restarted { .. } => {
                        self.outputs.remove(&event.agent);
                        // A new run: the earlier run's question is not its own.
                        self.questions.remove(&event.agent);
                        if matches!(event.kind, crate::event::EventKind::Restarted { .. }) {
                            // A restart starts its incarnation afresh from its task: until
                            // its first turn boundary, its conversation is that start (an
                            // empty one here; recovery rebuilds it from the request).
                            if let Some((run, _)) = lengths.get(&event.agent) {
                                let run = run + 1;
                                lengths.insert(event.agent, (run, 0));
                                self.conversation_lines
                                    .insert(event.agent, (run, Vec::new()));
                            }
                        }
                    }
                    _ => {}
                }
            }
            JournalEntry::Definition { hash, definition } => {
                self.definitions.insert(hash, definition);
            }
            JournalEntry::Spawn {
                agent,
                definition,
                request,
                context,
            } => {
                if !context.is_empty() {
                    self.contexts.insert(agent, context);
                }
                self.spawns.insert(agent, (definition, request));
            }
            JournalEntry::Decided { agent, outcome } => {
                self.decided.insert(agent, outcome);
            }
            JournalEntry::Steer { agent, text } => {
                self.steers.entry(agent).or_default().push(text);
            }
            JournalEntry::Question {
                agent,
                run,
                call,
                question,
                asking,
            } => {
                self.questions.insert(
                    agent,
                    OpenQuestion {
                        run,
                        call,
                        question,
                        asking,
                        answer: None,
                    },
                );
            }
            JournalEntry::Answer {
                agent,
                run,
                text,
                is_error,
            } => {
                if let Some(open) = self.questions.get_mut(&agent).filter(|q| q.run == run) {
                    open.answer = Some((text, is_error));
                }
            }
            JournalEntry::Mirror { agent, records } => {
                self.mirrors.insert(agent, records);
            }
            JournalEntry::Conversation {
                agent,
                run,
                from,
                messages,
            } => {
                // Only where the conversation is, and its length: its messages are read
                // back alone for the agents that need them.
                let length = if from == 0 {
                    messages.len()
                } else {
                    match lengths.get(&agent) {
                        Some(&(same, before)) if same == run && before >= from => {
                            from + messages.len()
                        }
                        _ => {
                            return Err(ReplayError::Misplaced {
                                line,
                                what: format!(
                                    "a conversation of {agent} continuing at message {from}, \
                                     past what was journaled"
                                ),
                            });
                        }
                    }
                };
                lengths.insert(agent, (run, length));
                // The steers before it entered the conversation it ends, and the question
                // answered before it (or the run's end that gave up on it).
                self.steers.remove(&agent);
                self.questions.remove(&agent);
                let lines = self.conversation_lines.entry(agent).or_default();
                if from == 0 || lines.0 != run {
                    *lines = (run, Vec::new());
                }
                lines.1.push(span);
            }
            JournalEntry::Checkpoint {
                seq,
                records,
                tally,
                at_ms,
            } => {
                // Records dense by id from the root, each parent before its child: what the
                // fold itself guarantees, so nothing later walks a cycle or a gap.
                let dense = records.iter().enumerate().all(|(i, r)| {
                    r.id.get() == i as u64
                        && match r.parent {
                            None => i == 0,
                            Some(parent) => parent.get() < i as u64,
                        }
                        && r.children.iter().all(|c| {
                            usize::try_from(c.get())
                                .ok()
                                .and_then(|c| records.get(c))
                                .is_some_and(|child| child.parent == Some(r.id))
                        })
                });
                if records.is_empty() || !dense {
                    return Err(ReplayError::Misplaced {
                        line,
                        what: "a checkpoint whose records are not dense by id from the root, \
                               with each parent before its children"
                            .into(),
                    });
                }
                self.records = records;
                self.last_seq = seq;
                self.tally = tally;
                self.last_ms = at_ms;
                self.outputs.clear();
            }
            JournalEntry::Output { agent, outcome } => {
                let record = usize::try_from(agent.get())
                    .ok()
                    .and_then(|i| self.records.get_mut(i))
                    .filter(|r| r.status.is_terminal() && r.outcome.is_some())
                    .ok_or_else(|| ReplayError::Misplaced {
                        line,
                        what: format!("the output of {agent}, which has not settled"),
                    })?;
                if record.outcome.as_ref().is_some_and(|o| !o.released) {
                    record.outcome = Some(outcome);
                }
                self.outputs.insert(agent, span);
            }
        }
        Ok(())
    }
}
