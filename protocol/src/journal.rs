//! The journal's line format: one checksummed JSON entry per line, and the pure replay of a
//! journal's bytes into records, outcomes, definitions, spawn requests and conversations.
//!
//! A journal is replayed as a stream ([`replay_index`]): the fold keeps each agent's
//! conversation only as the places of its lines, and reads one back alone when it is
//! needed ([`Replay::read_conversation`]), so a replay's memory grows with what the tree
//! keeps, not with the file.
//!
//! A line is `<CRC-32 of the JSON, 8 lower-case hex digits> <JSON>\n`, the JSON one
//! [`JournalEntry`] tagged by `entry` (`header`, `event`, `definition`, `spawn`,
//! `conversation`, `steer`, `question`, `answer`, `decided`, `checkpoint`, `output`,
//! `mirror`).
//!
//! # Invariants
//!
//! * A journal starts with one header line naming its format version and its tree's session.
//! * Event lines carry dense sequence numbers from 1 (or from a checkpoint's): a missing or
//!   repeated line is detected, not folded over.
//! * Only the last line may be incomplete: a process killed mid-write leaves at most a partial
//!   last line (no newline, or a tail of zero bytes), which replay drops and reports. Any
//!   other line that fails its checksum or does not parse is an error naming its line.
//! * Replay never panics, whatever the bytes.
//! * A steer line stands for a steer receipted and not yet in a journaled conversation
//!   until the next conversation line of its agent: a conversation is journaled at a turn
//!   boundary, after the steers before it entered it ([`Replay::steers`]).
//! * A question line likewise stands for a question its agent waits on, and an answer line
//!   after it for the answer given to it, until the next conversation line of its agent or
//!   the start of its next run ([`Replay::questions`]).

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::definition::AgentDefinition;
use crate::event::{Event, EventTally};
use crate::fold::{FoldError, apply};
use crate::ids::{AgentId, SessionId};
use crate::message::Message;
use crate::outcome::Outcome;
use crate::request::SpawnRequest;
use crate::snapshot::AgentRecord;

/// The format version this build writes and reads.
pub const JOURNAL_VERSION: u32 = 1;

/// One line of a journal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum JournalEntry {
    /// The first line: the format version and the tree it belongs to.
    Header {
        /// [`JOURNAL_VERSION`] of the writer.
        version: u32,
        /// The tree's session.
        session: SessionId,
    },
    /// A lifecycle event, as the tree emitted it.
    Event {
        /// The event.
        event: Event,
    },
    /// An agent definition an agent was started with, by name and content hash.
    Definition {
        /// The content hash ([`definition_hash`]).
        hash: String,
        /// The definition.
        definition: AgentDefinition,
    },
    /// The request an agent was admitted with, and the definition (by hash) it resolved to.
    Spawn {
        /// The agent.
        agent: AgentId,
        /// Its definition's hash.
        definition: String,
        /// The request.
        request: SpawnRequest,
        /// The owner's conversation it inherited, if its definition inherits one.
        #[serde(default, skip_serializing_if = "<[Message]>::is_empty")]
        context: std::sync::Arc<[Message]>,
    },
    /// An agent's conversation as of a turn boundary or the end of run `run` (the latest
    /// one wins): its messages from index `from` on, after the first `from` of the agent's
    /// previous entry for the same run (0: the whole conversation). A turn writes only what
    /// it added, so a long conversation costs its length, not its length squared.
    Conversation {
        /// The agent.
        agent: AgentId,
        /// Its run.
        run: u32,
        /// Where `messages` start in the conversation.
        #[serde(default, skip_serializing_if = "is_zero")]
        from: usize,
        /// The messages from `from` on.
        messages: std::sync::Arc<[Message]>,
    },
    /// A steer `agent` receipted (`delivered` or `queued`) and no turn has read yet. It is
    /// read by the agent's next turn boundary, whose conversation line follows it: the
    /// steers of an agent after its latest conversation line are those no journaled
    /// conversation holds ([`Replay::steers`]), which a recovered agent's next run reads.
    Steer {
        /// The agent steered.
        agent: AgentId,
        /// The steer's text.
        text: String,
    },
    /// A question `agent` asked its owner with `ask_owner` in run `run` and that is not
    /// answered yet: the assistant message whose call (at place `call`) asked it, written
    /// before the `asked` event. Until the next conversation line of its agent it stands
    /// for a question waiting on its owner ([`Replay::questions`]), which a recovered tree
    /// puts again instead of re-running the turn that asked it.
    Question {
        /// The agent asking.
        agent: AgentId,
        /// Its run.
        run: u32,
        /// The place of the `ask_owner` call among the message's calls.
        call: usize,
        /// The question.
        question: String,
        /// The assistant message of the turn that asked it (every call of that turn).
        asking: Message,
    },
    /// The answer to `agent`'s open question of run `run`, written before the agent reads
    /// it: a recovery hands it to the agent instead of asking again, so it is delivered
    /// once.
    Answer {
        /// The agent that asked.
        agent: AgentId,
        /// Its run.
        run: u32,
        /// The answer (or the refusal).
        text: String,
        /// Whether the question was refused: the call's result is an error.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
    /// An agent's run ended with `outcome`, held while its children drain (`completing`):
    /// the outcome it settles with once they have.
    Decided {
        /// The agent.
        agent: AgentId,
        /// The outcome it holds.
        outcome: Outcome,
    },
    /// A compaction point: the records as of event `seq`, replacing every event before it.
    /// A compaction writes the settled records' outcomes without their output (`text`,
    /// `partial`) and each output on an [`JournalEntry::Output`] line of its own after it.
    Checkpoint {
        /// The last event folded into `records`.
        seq: u64,
        /// Every record, indexed by id from the root.
        records: Vec<AgentRecord>,
        /// The events before it, by kind.
        #[serde(default)]
        tally: EventTally,
        /// The latest event time before it (`at_ms`), so a recovered tree's clock goes on
        /// from there.
        #[serde(default)]
        at_ms: u64,
    },
    /// A settled agent's whole outcome, written by a compaction after its checkpoint, one
    /// line per agent, so that one output can be read back alone. The record takes it back
    /// unless its output was released (then the line is only where it is read back from).
    Output {
        /// The agent.
        agent: AgentId,
        /// Its whole outcome.
        outcome: Outcome,
    },
    /// The records of remote child `agent`'s hosted subtree as its owner's node mirrored
    /// them when its latest run's edge ended (the hosted tree's ids, `a1` the remote agent
    /// itself); the latest one wins.
    Mirror {
        /// The remote child (the owner tree's id).
        agent: AgentId,
        /// The hosted subtree's records, indexed by hosted id.
        records: Vec<AgentRecord>,
    },
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The content hash of a definition: FNV-1a 64 of its JSON, as 16 hex digits.
///
/// ```
/// use agent_tree_protocol::{definition_hash, AgentDefinition};
/// let a = AgentDefinition::new("w", "You write.");
/// assert_eq!(definition_hash(&a), definition_hash(&a.clone()));
/// assert_ne!(definition_hash(&a), definition_hash(&AgentDefinition::new("w", "You edit.")));
/// ```
pub fn definition_hash(definition: &AgentDefinition) -> String {
    let json = serde_json::to_vec(definition).unwrap_or_default();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in json {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// CRC-32 (IEEE) of `bytes`.
///
/// ```
/// assert_eq!(agent_tree_protocol::crc32(b"123456789"), 0xcbf4_3926);
/// ```
pub fn crc32(bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    let mut crc = !0u32;
    for &byte in bytes {
        crc = TABLE[((crc ^ u32::from(byte)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

impl JournalEntry {
    /// The entry as one journal line, newline included.
    ///
    /// ```
    /// use agent_tree_protocol::{JournalEntry, SessionId, JOURNAL_VERSION};
    /// let header = JournalEntry::Header { version: JOURNAL_VERSION, session: SessionId::new("s1") };
    /// let line = header.to_line();
    /// assert!(line.ends_with("{\"entry\":\"header\",\"version\":1,\"session\":\"s1\"}\n"));
    /// assert_eq!(JournalEntry::from_line(line.trim_end()).unwrap(), header);
    /// ```
    pub fn to_line(&self) -> String {
        // Journal entries hold only strings, numbers, maps with string keys and JSON values,
        // which serde_json always encodes.
        let json = serde_json::to_string(self).unwrap_or_default();
        format!("{:08x} {json}\n", crc32(json.as_bytes()))
    }

    /// The agent and whole outcome this entry holds, if it is a terminal event or an
    /// [`JournalEntry::Output`]: what a released output is read back from.
    ///
    /// ```
    /// use agent_tree_protocol::{AgentId, JournalEntry, Outcome};
    /// let entry = JournalEntry::Output { agent: AgentId::new(3), outcome: Outcome::completed("42") };
    /// let (agent, outcome) = entry.output().unwrap();
    /// assert_eq!((agent, outcome.text.as_deref()), (AgentId::new(3), Some("42")));
    /// ```
    pub fn output(&self) -> Option<(AgentId, &Outcome)> {
        match self {
            JournalEntry::Event { event } => event.kind.outcome().map(|o| (event.agent, o)),
            JournalEntry::Output { agent, outcome } => Some((*agent, outcome)),
            _ => None,
        }
    }

    /// [`JournalEntry::from_line`] of a line's bytes (without its newline): bytes that are
    /// not UTF-8 are no journal line.
    ///
    /// ```
    /// use agent_tree_protocol::{JournalEntry, LineError};
    /// assert_eq!(JournalEntry::from_line_bytes(&[0xff, 0x20]), Err(LineError::NoChecksum));
    /// ```
    ///
    /// # Errors
    ///
    /// As [`JournalEntry::from_line`].
    pub fn from_line_bytes(line: &[u8]) -> Result<Self, LineError> {
        let text = std::str::from_utf8(line).map_err(|_| LineError::NoChecksum)?;
        JournalEntry::from_line(text)
    }

    /// Decodes one line (without its newline).
    ///
    /// # Errors
    ///
    /// [`LineError`]: no checksum, a checksum that does not match, JSON that does not parse,
    /// or an entry or event kind this version does not know.
    pub fn from_line(line: &str) -> Result<Self, LineError> {
        let (sum, json) = line.split_once(' ').ok_or(LineError::NoChecksum)?;
        // Exactly the 8 lower-case digits `to_line` writes: a flipped case bit is corruption
        // too.
        if sum.len() != 8 || !sum.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(LineError::NoChecksum);
        }
        let expected = u32::from_str_radix(sum, 16).map_err(|_| LineError::NoChecksum)?;
        let actual = crc32(json.as_bytes());
        if expected != actual {
            return Err(LineError::Checksum { expected, actual });
        }
        let depth = nesting(json);
        if depth > MAX_LINE_DEPTH {
            return Err(LineError::Json(format!(
                "nested {depth} levels deep, more than the {MAX_LINE_DEPTH} a journal line may"
            )));
        }
        // Checked above, so the parser's own limit (128 levels, which a model's tool input
        // of up to 127 inside a conversation line would pass) is not needed.
        let mut de = serde_json::Deserializer::from_str(json);
        de.disable_recursion_limit();
        let entry = Self::deserialize(&mut de).and_then(|entry| de.end().map(|()| entry));
        entry.map_err(|e| {
            let text = e.to_string();
            if text.contains("unknown variant") {
                LineError::UnknownKind(text)
            } else {
                LineError::Json(text)
            }
        })
    }
}

/// The deepest a journal line may nest (arrays and objects) to be read: a conversation line
/// wraps each tool input in a few levels of its own, and the runtime keeps no input nested
/// deeper than `ToolInput::MAX_TEXT_DEPTH` (96), so every line it writes is well within it
/// (a line written by an older build, with an input up to a parser's 127, too); a deeper
/// line is refused before it is parsed.
pub(crate) const MAX_LINE_DEPTH: usize = 256;

/// How deep the arrays and objects of JSON text `json` nest (its strings skipped).
fn nesting(json: &str) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for byte in json.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Whether `bytes` (a whole file without a newline) can be what a crash left of a journal's
/// header line: zeros (space allocated, never written), or a prefix of
/// `<crc32 in lower-case hex> {"entry":"header","version":<digits>,"session":"<text>"}`, the
/// one line a new journal starts with ([`JournalEntry::to_line`] of a header). Anything
/// else is some other file, which a tree opening it refuses instead of wiping it.
///
/// ```
/// use agent_tree_protocol::{torn_header, JournalEntry, SessionId, JOURNAL_VERSION};
/// let header = JournalEntry::Header { version: JOURNAL_VERSION, session: SessionId::new("s1") };
/// let line = header.to_line();
/// for cut in 1..line.len() {
///     assert!(torn_header(&line.as_bytes()[..cut]));
/// }
/// assert!(torn_header(&[0, 0, 0]));
/// assert!(!torn_header(b"DEADBEEF"));
/// assert!(!torn_header(br#"0123abcd {"entry":"header","note":"mine"}"#));
/// ```
pub fn torn_header(bytes: &[u8]) -> bool {
    if bytes.iter().all(|&b| b == 0) {
        return true;
    }
    // The line's parts in order: each literal is matched as far as the bytes go, and the
    // bytes may end anywhere.
    let mut rest = bytes;
    let lower_hex = |b: &u8| b.is_ascii_digit() || (b'a'..=b'f').contains(b);
    let crc = rest.iter().take(8).take_while(|b| lower_hex(b)).count();
    if crc < rest.len().min(8) {
        return false;
    }
    rest = &rest[crc..];
    // A literal: `Ok` with the bytes after it when they match it whole and go on;
    // `Err(true)` when they end inside it (or right at its end); `Err(false)` when they
    // differ from it.
    fn literal<'a>(rest: &'a [u8], text: &[u8]) -> Result<&'a [u8], bool> {
        let n = rest.len().min(text.len());
        if rest[..n] != text[..n] {
            return Err(false);
        }
        if rest.len() <= text.len() {
            return Err(true);
        }
        Ok(&rest[text.len()..])
    }
    let rest = match literal(rest, br#" {"entry":"header","version":"#) {
        Ok(rest) => rest,
        Err(torn) => return torn,
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == rest.len() {
        return true;
    }
    if digits == 0 {
        return false;
    }
    let rest = match literal(&rest[digits..], br#","session":""#) {
        Ok(rest) => rest,
        Err(torn) => return torn,
    };
    // The session's text (escapes taken whole), then its closing `"}`.
    let mut at = 0;
    while at < rest.len() {
        match rest[at] {
            b'\\' => at += 2,
            b'"' => return literal(&rest[at..], br#""}"#).is_err_and(|torn| torn),
            _ => at += 1,
        }
    }
    true
}

/// Why one line does not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LineError {
    /// The line does not start with 8 hex digits and a space.
    #[error("not a journal line (no checksum)")]
    NoChecksum,
    /// The checksum does not match: the line was changed after it was written.
    #[error("checksum mismatch (line says {expected:08x}, content is {actual:08x}): corrupted")]
    Checksum {
        /// The checksum on the line.
        expected: u32,
        /// The checksum of its content.
        actual: u32,
    },
    /// The checksum matches but the JSON is not an entry.
    #[error("malformed entry: {0}")]
    Json(String),
    /// An entry or event kind this version does not know.
    #[error("an entry or event kind this version does not know (written by a newer one?): {0}")]
    UnknownKind(String),
}

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

/// Where a line is in a journal: its first byte and its length, newline excluded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineSpan {
    /// The offset of its first byte.
    pub offset: u64,
    /// Its length in bytes, without the newline.
    pub len: u64,
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

/// An agent's conversation with the run it belongs to, as [`Replay::conversations`] holds it.
type RunConversation = (u32, std::sync::Arc<[Message]>);

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

    /// Agent `agent`'s latest journaled conversation and its run, read back from
    /// `reader` (the journal this replay read) by the places
    /// [`Replay::conversation_lines`] holds: only its own lines are read. `None` when the
    /// journal holds no conversation of it.
    ///
    /// # Errors
    ///
    /// [`ReplayError::Io`]: the reader fails, or its lines there are not the agent's
    /// conversation any more (another file, or one changed since the replay).
    pub fn read_conversation<R: std::io::Read + std::io::Seek>(
        &self,
        reader: &mut R,
        agent: AgentId,
    ) -> Result<Option<RunConversation>, ReplayError> {
        let Some((run, spans)) = self.conversation_lines.get(&agent) else {
            return Ok(None);
        };
        let mut entries = Vec::with_capacity(spans.len());
        for span in spans {
            let io = |e: std::io::Error| {
                ReplayError::Io(format!(
                    "at byte {} ({agent}'s conversation): {e}",
                    span.offset
                ))
            };
            let len = usize::try_from(span.len).map_err(|e| io(std::io::Error::other(e)))?;
            let mut line = vec![0; len];
            reader
                .seek(std::io::SeekFrom::Start(span.offset))
                .and_then(|_| reader.read_exact(&mut line))
                .map_err(io)?;
            entries.push(
                JournalEntry::from_line_bytes(&line)
                    .map_err(|e| io(std::io::Error::other(e.to_string())))?,
            );
        }
        let messages = assemble_conversation(agent, entries)
            .map_err(|e| ReplayError::Io(format!("({agent}'s conversation): {e}")))?;
        Ok(Some((*run, messages.into())))
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

/// Assembles one agent's conversation from its [`JournalEntry::Conversation`] lines, in
/// order (the lines [`Replay::conversation_lines`] names): the first whole, each after it
/// continuing where it says.
///
/// ```
/// use agent_tree_protocol::{AgentId, JournalEntry, Message, assemble_conversation};
/// let a = AgentId::new(1);
/// let whole = JournalEntry::Conversation { agent: a, run: 1, from: 0, messages: vec![Message::user("go")].into() };
/// let more = JournalEntry::Conversation { agent: a, run: 1, from: 1, messages: vec![Message::assistant("done", vec![])].into() };
/// let messages = assemble_conversation(a, [whole, more]).unwrap();
/// assert_eq!(messages.len(), 2);
/// ```
///
/// # Errors
///
/// What is wrong: a line of another kind, agent or run, or one continuing past what came
/// before it.
pub fn assemble_conversation(
    agent: AgentId,
    entries: impl IntoIterator<Item = JournalEntry>,
) -> Result<Vec<Message>, String> {
    let mut messages: Vec<Message> = Vec::new();
    let mut of_run = None;
    for entry in entries {
        let JournalEntry::Conversation {
            agent: found,
            run,
            from,
            messages: tail,
        } = entry
        else {
            return Err("a line that is not a conversation".into());
        };
        if found != agent || of_run.is_some_and(|r| r != run) || from > messages.len() {
            return Err(format!(
                "a conversation line of {found} run {run} from {from} does not continue \
                 {agent}'s"
            ));
        }
        of_run = Some(run);
        messages.truncate(from);
        messages.extend(tail.iter().cloned());
    }
    Ok(messages)
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

#[cfg(test)]
mod tests {
    use super::{JournalEntry, LineError, MAX_LINE_DEPTH, crc32, nesting};

    fn line(json: &str) -> String {
        format!("{:08x} {json}", crc32(json.as_bytes()))
    }

    /// Brackets inside strings (escaped quotes included) do not count; arrays and objects do.
    #[test]
    fn nesting_counts_arrays_and_objects_outside_strings() {
        assert_eq!(nesting(r#"{"a":"[[{{\"]]","b":[[1],{"c":[]}]}"#), 4);
        assert_eq!(nesting(r#""[[[""#), 0);
        assert_eq!(nesting("[]"), 1);
    }

    /// A line past the depth limit is refused before it is parsed, whatever its checksum
    /// says (no parser recursion, so no stack to exhaust); one within it but past the
    /// parser's own 128 levels is read.
    #[test]
    fn a_line_too_deep_is_refused_unparsed_and_one_past_128_is_read() {
        let deep = format!(
            "{}{}",
            "[".repeat(MAX_LINE_DEPTH + 1),
            "]".repeat(MAX_LINE_DEPTH + 1)
        );
        assert!(matches!(
            JournalEntry::from_line(&line(&deep)),
            Err(LineError::Json(text)) if text.contains("levels deep")
        ));
        let input = format!("{}1{}", "[".repeat(140), "]".repeat(140));
        let json = format!(
            r#"{{"entry":"conversation","agent":"a1","run":1,"from":0,"messages":[{{"role":"assistant","tool_calls":[{{"id":"c","name":"t","input":{input}}}]}}]}}"#
        );
        match JournalEntry::from_line(&line(&json)) {
            Ok(JournalEntry::Conversation { messages, .. }) => {
                assert_eq!(messages[0].tool_calls[0].input.as_str(), input);
            }
            other => panic!("not read back: {other:?}"),
        }
    }
}
