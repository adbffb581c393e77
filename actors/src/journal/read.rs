//! A journal file read back as a stream and replayed: what [`read_journal`] gives an
//! application, and what a tree recovering from its file reads (the index first, then the
//! conversations it keeps in memory, one agent's lines at a time).

use std::fs::File;
use std::io;
use std::path::Path;

use agent_tree_protocol::{AgentId, Replay, SessionId};

use super::JournalError;

/// Reads and replays the journal at `path` (the same fold as the registry's): the records,
/// outcomes, definitions, requests and steers it holds, where each agent's conversation
/// is, and the conversations of the agents it leaves unfinished (those a recovery resumes;
/// any other is read back with [`Replay::read_conversation`]). The file is read as a
/// stream, never whole. `session`, when given, must be the journal's. A torn last line is
/// dropped with a warning.
///
/// # Errors
///
/// [`JournalError`] naming the file and, for a bad line, the line: a missing or unreadable
/// file, a corrupted, garbage or unknown line, a newer version, another tree's journal.
pub fn read_journal(path: &Path, session: Option<&SessionId>) -> Result<Replay, JournalError> {
    let file = File::open(path).map_err(|e| JournalError::io(path, "cannot read", &e))?;
    let mut reader = io::BufReader::new(file);
    let mut replay = replay_file(path, &mut reader, session)?;
    let unfinished: Vec<AgentId> = replay.unfinished().map(|r| r.id).collect();
    read_conversations(path, &mut replay, &mut reader, unfinished)?;
    Ok(replay)
}

/// Fills `replay`'s conversations of `agents` (those the journal holds one of), read back
/// from `reader`, the file at `path` it was replayed from: one agent's lines at a time.
pub(crate) fn read_conversations(
    path: &Path,
    replay: &mut Replay,
    reader: &mut (impl io::Read + io::Seek),
    agents: impl IntoIterator<Item = AgentId>,
) -> Result<(), JournalError> {
    for agent in agents {
        let read = replay
            .read_conversation(reader, agent)
            .map_err(|e| JournalError {
                path: path.to_owned(),
                line: None,
                what: e.to_string(),
            })?;
        if let Some(conversation) = read {
            replay.conversations.insert(agent, conversation);
        }
    }
    Ok(())
}

/// [`agent_tree_protocol::replay_index`] of the journal `reader` reads, from `path`: no
/// conversation read back yet.
pub(crate) fn replay_file(
    path: &Path,
    reader: impl io::BufRead,
    session: Option<&SessionId>,
) -> Result<Replay, JournalError> {
    let replay = agent_tree_protocol::replay_index(reader, session).map_err(|e| {
        let line = match &e {
            agent_tree_protocol::ReplayError::Line { line, .. }
            | agent_tree_protocol::ReplayError::Sequence { line, .. }
            | agent_tree_protocol::ReplayError::Fold { line, .. }
            | agent_tree_protocol::ReplayError::Misplaced { line, .. } => Some(*line),
            agent_tree_protocol::ReplayError::Io(_) => None,
            _ => Some(1),
        };
        let text = e.to_string();
        // The error's own text starts with "line N: "; the file's name carries the line.
        let what = text
            .split_once(": ")
            .filter(|(head, _)| head.starts_with("line "))
            .map_or(text.clone(), |(_, rest)| rest.to_owned());
        JournalError {
            path: path.to_owned(),
            line,
            what,
        }
    })?;
    if let Some(line) = replay.torn {
        tracing::warn!(
            path = %path.display(),
            line,
            "journal ends in a torn line (a write cut off by a crash); dropped"
        );
    }
    Ok(replay)
}
