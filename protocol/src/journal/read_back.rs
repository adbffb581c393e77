//! One agent's conversation read back alone: where a line is ([`LineSpan`]), and the
//! conversation assembled from the lines a replay found for it.

use super::{JournalEntry, Replay, ReplayError};
use crate::ids::AgentId;
use crate::message::Message;

/// Where a line is in a journal: its first byte and its length, newline excluded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineSpan {
    /// The offset of its first byte.
    pub offset: u64,
    /// Its length in bytes, without the newline.
    pub len: u64,
}

/// An agent's conversation with the run it belongs to, as [`Replay::conversations`] holds it.
type RunConversation = (u32, std::sync::Arc<[Message]>);

impl Replay {
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
