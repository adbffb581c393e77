//! What a journal line holds: [`JournalEntry`], one kind per line, and the content hash
//! definitions are journaled by.

use serde::{Deserialize, Serialize};

use crate::definition::AgentDefinition;
use crate::event::{Event, EventTally};
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
    /// conversation holds ([`Replay::steers`](crate::Replay::steers)), which a recovered
    /// agent's next run reads.
    Steer {
        /// The agent steered.
        agent: AgentId,
        /// The steer's text.
        text: String,
    },
    /// A question `agent` asked its owner with `ask_owner` in run `run` and that is not
    /// answered yet: the assistant message whose call (at place `call`) asked it, written
    /// before the `asked` event. Until the next conversation line of its agent it stands
    /// for a question waiting on its owner ([`Replay::questions`](crate::Replay::questions)),
    /// which a recovered tree puts again instead of re-running the turn that asked it.
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

impl JournalEntry {
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
}
