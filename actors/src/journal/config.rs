//! Where and how a tree journals: the file, when the writer syncs ([`Durability`]), how far
//! it may fall behind, when it compacts, and what settled agents keep in memory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::policy::retention::OutputRetention;

/// When the writer syncs what it wrote to the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// Each entry is written and synced (`fsync`) before the next: slowest, loses only what
    /// was still queued. An outcome is synced before a handle, a wait or a run returns it.
    EveryEntry,
    /// Entries are written as they come and synced once `max_entries` are unsynced or the
    /// oldest unsynced one is `max_delay` old (group commit).
    Group {
        /// Unsynced entries that force a sync.
        max_entries: usize,
        /// The age of the oldest unsynced entry that forces a sync.
        max_delay: Duration,
    },
    /// Entries are written as they come, never synced but at rotation and close: a process
    /// crash loses nothing written, a machine crash what the OS had not flushed.
    None,
}

impl Default for Durability {
    /// Group commit every 64 entries or 50 ms.
    fn default() -> Self {
        Durability::Group {
            max_entries: 64,
            max_delay: Duration::from_millis(50),
        }
    }
}

/// Where and how a tree journals ([`TreeBuilder::journal`](crate::TreeBuilder::journal)).
///
/// ```
/// use std::time::Duration;
/// use agent_tree_actors::{Durability, JournalConfig};
/// let config = JournalConfig::new("/var/lib/agents/tree.journal")
///     .durability(Durability::Group { max_entries: 128, max_delay: Duration::from_millis(20) })
///     .max_queue(10_000)
///     .rotate_at(64 << 20);
/// assert_eq!(config.path().file_name().unwrap(), "tree.journal");
/// ```
#[derive(Clone, Debug)]
pub struct JournalConfig {
    pub(super) path: PathBuf,
    pub(super) durability: Durability,
    pub(super) max_queue: usize,
    pub(super) rotate_at: Option<u64>,
    pub(super) retain_conversations: bool,
    pub(super) outputs: OutputRetention,
}

impl JournalConfig {
    /// A journal at `path`: group commit, a queue of 4096 entries, no rotation, read outputs
    /// kept up to 64 MiB, settled conversations in the journal only: a journaled tree's
    /// memory is bounded by default.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        JournalConfig {
            path: path.into(),
            durability: Durability::default(),
            max_queue: 4096,
            rotate_at: None,
            retain_conversations: false,
            outputs: OutputRetention {
                max_bytes: 64 << 20,
                max_age: None,
            },
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether settled agents keep their conversation in memory
    /// ([`JournalConfig::retain_conversations`]).
    pub(crate) fn keeps_conversations(&self) -> bool {
        self.retain_conversations
    }

    /// Sets the sync policy.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// How many entries the writer may fall behind before new work waits (at least 1).
    pub fn max_queue(mut self, entries: usize) -> Self {
        self.max_queue = entries.max(1);
        self
    }

    /// Whether a settled agent's conversation stays in memory, or only in the journal (the
    /// default), read back from it (its own lines, after everything queued is written) when
    /// the agent is resumed: a tree that runs for days then holds no settled agent's
    /// conversation. Kept in memory anyway while the journal has failed.
    pub fn retain_conversations(mut self, retain: bool) -> Self {
        self.retain_conversations = retain;
        self
    }

    /// How many bytes of settled agents' outputs (their outcomes' `text` and `partial`)
    /// stay in memory once read (64 MiB by default). Unread outputs always stay. Past the
    /// budget, the oldest read are released: the record keeps status, reason and error, a
    /// `released` event says so, and the output is read back from the journal on demand
    /// ([`Tree::read_outcome`](crate::Tree::read_outcome), an [`AgentHandle`](crate::AgentHandle)'s
    /// outcome, an owner's `get_subagent_result`). An output is read when a tool of its
    /// owner returned it to the owner's model (a wait, a result, a notice of its end), or
    /// when the application took it (a handle, [`Tree::outcome`](crate::Tree::outcome),
    /// [`Tree::wait`](crate::Tree::wait), [`Tree::read_outcome`](crate::Tree::read_outcome)).
    /// An output is released only once the journal has written its line (the journal is
    /// then its only copy): at the first read, settle or
    /// [`Tree::flush_journal`](crate::Tree::flush_journal) after that.
    ///
    /// ```
    /// use std::time::Duration;
    /// use agent_tree_actors::JournalConfig;
    /// // A tree that runs for days: read outputs stay up to 8 MiB, and at most an hour.
    /// let config = JournalConfig::new("tree.journal")
    ///     .keep_read_outputs(8 << 20)
    ///     .keep_read_outputs_for(Duration::from_secs(3600));
    /// # let _ = config;
    /// ```
    pub fn keep_read_outputs(mut self, bytes: usize) -> Self {
        self.outputs.max_bytes = bytes;
        self
    }

    /// How long a read output stays in memory at most (no limit by default): it is released
    /// at the first read or settle in the tree after `age` has passed since it was read.
    pub fn keep_read_outputs_for(mut self, age: Duration) -> Self {
        self.outputs.max_age = Some(age);
        self
    }

    /// Compacts the file (a checkpoint of the records, then what recovery needs besides)
    /// once it grows past `bytes` and past twice what the last compaction left (settled
    /// outputs stay in the journal, so a long-lived tree's compacted file grows; it is not
    /// rewritten at every write for it).
    pub fn rotate_at(mut self, bytes: u64) -> Self {
        self.rotate_at = Some(bytes);
        self
    }
}
