//! Where a store's settled outcomes and each agent's latest conversation are: the writer
//! keeps it as it writes (a recovery starts it from the replay, a compaction rebuilds it),
//! so a read-back reads those lines only.

use agent_tree_protocol::runtime::LineSpan;
use agent_tree_protocol::{AgentId, Replay};

/// Where a store's settled outcomes and conversations are, for reading one back alone, and
/// the last event it holds.
#[derive(Debug, Default)]
pub(crate) struct Index {
    pub(crate) outputs: std::collections::HashMap<AgentId, LineSpan>,
    pub(crate) conversations: Conversations,
    pub(crate) last_seq: u64,
}

impl Index {
    /// The index of the store a replay read.
    pub(crate) fn of(replay: &Replay) -> Self {
        Index {
            outputs: replay.outputs.clone(),
            conversations: replay.conversation_lines.clone(),
            last_seq: replay.last_seq,
        }
    }
}

/// Each agent's latest conversation in the store: its run and the lines that make it up.
pub(crate) type Conversations = std::collections::HashMap<AgentId, (u32, Vec<LineSpan>)>;
