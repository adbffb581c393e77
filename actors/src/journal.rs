//! The journal: an append-only file of the tree's event stream, plus what the fold needs
//! that events do not carry (definitions by hash, spawn requests, conversations), one
//! checksummed JSON line per entry (the format is `agent_tree_protocol::JournalEntry`).
//!
//! # Writing
//!
//! The registry hands each event to the journal in the same transaction that folds it into
//! the records, and admissions hand over their definition and request just before their
//! admission event; agents hand over their conversation at each turn boundary, and each
//! steer they receipt before the receipt is sent (a steer queued for an agent's start, by
//! the registry as it queues it), each `ask_owner` question with the turn that asked it,
//! and each answer before the agent reads it. All of it goes
//! onto an unbounded channel (sending never blocks, so no actor and no registry transaction
//! ever waits on the disk) to one writer thread, which encodes, writes and syncs by the
//! [`Durability`] policy, and rotates the file by compacting it when it grows past
//! [`JournalConfig::rotate_at`] (reading the file back as a stream and replaying it, then
//! copying the lines it keeps: the writer keeps no state of the tree in memory).
//!
//! **Backpressure, not loss.** The channel counts what it holds. When the writer falls
//! more than [`JournalConfig::max_queue`] entries behind (a disk slower than the tree), new
//! work waits: a model turn does not start, and [`Tree::spawn`](crate::Tree::spawn) does not
//! admit, until the writer has caught up below the bound. Entries already on their way are
//! never dropped; the queue can exceed its bound by what turns already in flight emit.
//!
//! # One tree per journal
//!
//! A tree that opens a journal file holds an advisory lock on a file beside it,
//! `<journal>.lock` ([`JournalLock`], `std`'s [`File::try_lock`]), in which it writes its
//! process id, and holds it while its writer may write: until [`Tree::shutdown`](crate::Tree::shutdown)
//! returns or the tree is dropped. A second tree on the file is refused with
//! [`JournalInUseError`], naming the file and that process, before it reads or writes a
//! byte of it. The lock is the operating system's, so it dies with its process: a process
//! killed while it held it leaves the lock file behind, and that is no obstacle (the file
//! is never removed: removing it would let two processes lock two different files). The
//! lock is beside the journal, not on it, because a compaction renames a new file over the
//! journal. A store of the application's own ([`TreeBuilder::journal_store`](crate::TreeBuilder::journal_store))
//! is not locked.
//!
//! # Reading back
//!
//! What memory does not keep (settled conversations by default, read outputs past the
//! retention policy) is read back on demand. The writer indexes, as it writes, where each
//! settled outcome's line is and which lines make up each agent's latest conversation (a
//! recovery starts it from the replay, a compaction rebuilds it), so a read-back reads
//! those lines only, through [`JournalStore::read_range`], after everything queued is
//! written. It publishes the last event it has appended; the registry releases an output
//! only once that covers it.
//!
//! # What each policy can lose
//!
//! | policy | process killed (SIGKILL, OOM, panic) | machine crash or power loss |
//! | --- | --- | --- |
//! | [`Durability::EveryEntry`] | the entries queued, not yet written | the same: each entry is synced before the next is written |
//! | [`Durability::Group`] | the entries queued, not yet written | also what was written since the last sync: at most `max_entries` entries or `max_delay` of them |
//! | [`Durability::None`] | the entries queued, not yet written | whatever the OS had not flushed |
//!
//! In every case a crash leaves at most a partial last line, which recovery drops (and
//! reports); nothing before it is lost or changed. And under every policy nothing the
//! application had seen when it asked for a [`Tree::flush_journal`](crate::Tree::flush_journal)
//! that returned is lost: the registry hands each event to the journal before any
//! subscriber or waiter sees it (the registry's invariant 8), and the writer takes commands
//! in order. With [`Durability::EveryEntry`] an outcome is synced before
//! [`AgentHandle::outcome`](crate::AgentHandle::outcome), [`Tree::wait`](crate::Tree::wait)
//! or [`Tree::run`](crate::Tree::run) returns it.

use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Seek as _, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agent_tree_protocol::{
    AgentDefinition, AgentId, Event, JOURNAL_VERSION, JournalEntry, LineSpan, Message, Outcome,
    Replay, SessionId, SpawnRequest, definition_hash,
};
use parking_lot::Mutex;

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
    path: PathBuf,
    durability: Durability,
    max_queue: usize,
    rotate_at: Option<u64>,
    retain_conversations: bool,
    outputs: OutputRetention,
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

/// A journal file another tree holds: a second tree on it is refused
/// ([`TreeError::JournalInUse`](crate::TreeError::JournalInUse)), before anything of it is
/// read or written. The holder is the process id the holding tree wrote into the lock file
/// (its own process's, for another tree in this process).
///
/// ```
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
/// use agent_tree_actors::testkit::ScriptedModel;
/// use agent_tree_actors::{JournalConfig, Tree, TreeError};
/// # let path = std::env::temp_dir().join(format!("agent-tree-doc-in-use-{}", std::process::id()));
/// # let _ = std::fs::remove_file(&path);
/// let open = || Tree::builder().model(ScriptedModel::new()).journal(JournalConfig::new(&path)).build();
/// let first = open().await?;
/// match open().await {
///     Err(TreeError::JournalInUse(in_use)) => {
///         assert_eq!(in_use.path, path);
///         assert_eq!(in_use.holder, Some(std::process::id()));
///     }
///     other => panic!("a second tree opened a journal in use: {other:?}"),
/// }
/// // Released when the tree shuts down (or is dropped).
/// first.shutdown().await;
/// let again = open().await?;
/// # again.shutdown().await;
/// # let _ = std::fs::remove_file(&path);
/// # let _ = std::fs::remove_file(path.with_extension("lock"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "journal {} is in use by {} (it holds the lock {}): one tree per journal",
    path.display(),
    holder_text(*holder),
    lock_file.display()
)]
#[non_exhaustive]
pub struct JournalInUseError {
    /// The journal.
    pub path: PathBuf,
    /// The lock file beside it (`<journal>.lock`).
    pub lock_file: PathBuf,
    /// The process holding it, as its lock file says (`None` when it does not say yet).
    pub holder: Option<u32>,
}

fn holder_text(holder: Option<u32>) -> String {
    match holder {
        Some(pid) if pid == std::process::id() => format!("another tree of this process {pid}"),
        Some(pid) => format!("process {pid}"),
        None => "another process".to_owned(),
    }
}

/// The advisory lock a tree holds on its journal file while its writer may write (see
/// "One tree per journal" above): released when dropped, or by the OS when its process
/// ends, however it ends.
#[derive(Debug)]
pub(crate) struct JournalLock {
    /// Locked (`File::try_lock`); closing it unlocks.
    _file: File,
}

impl JournalLock {
    /// Locks the journal at `journal`, through `<journal>.lock`, and writes this process's
    /// id into it.
    ///
    /// # Errors
    ///
    /// [`JournalInUseError`] when another tree holds it; a [`JournalError`] when the lock
    /// file cannot be opened or locked. A file system that has no locks is used unlocked,
    /// with a warning.
    pub(crate) fn acquire(journal: &Path) -> Result<Option<Self>, crate::TreeError> {
        use std::io::{Read as _, Seek as _};
        let lock_file = lock_path(journal);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_file)
            .map_err(|e| JournalError::io(journal, "cannot open its lock file", &e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut text = String::new();
                // Unreadable (a platform whose locks bar reads) says no holder.
                let _ = file.read_to_string(&mut text);
                let holder = text
                    .split_whitespace()
                    .find_map(|word| word.parse::<u32>().ok());
                return Err(JournalInUseError {
                    path: journal.to_owned(),
                    lock_file,
                    holder,
                }
                .into());
            }
            Err(std::fs::TryLockError::Error(e)) if e.kind() == io::ErrorKind::Unsupported => {
                tracing::warn!(
                    path = %journal.display(),
                    "the file system has no file locks: the journal is opened unlocked"
                );
                return Ok(None);
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(JournalError::io(journal, "cannot lock", &e).into());
            }
        }
        // Ours: say who holds it, for the error another tree gets.
        file.set_len(0)
            .and_then(|()| file.seek(io::SeekFrom::Start(0)))
            .and_then(|_| writeln!(file, "pid {}", std::process::id()))
            .map_err(|e| JournalError::io(journal, "cannot write its lock file", &e))?;
        Ok(Some(JournalLock { _file: file }))
    }
}

/// The lock file of the journal at `journal`: `<journal>.lock`, beside it.
fn lock_path(journal: &Path) -> PathBuf {
    let mut name = journal.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// A journal that cannot be read or written: the file, the line (0 when none), and why.
#[derive(Debug, thiserror::Error)]
#[error("journal {}{}: {what}", path.display(), line.map_or_else(String::new, |l| format!(":{l}")))]
pub struct JournalError {
    /// The file.
    pub path: PathBuf,
    /// The line, for a line that does not decode or fold.
    pub line: Option<usize>,
    /// What is wrong.
    pub what: String,
}

impl JournalError {
    pub(crate) fn io(path: &Path, what: &str, error: &io::Error) -> Self {
        JournalError {
            path: path.to_owned(),
            line: None,
            what: format!("{what}: {error}"),
        }
    }
}

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

/// The storage a journal writes to: appends, syncs, and a compaction that replaces the whole
/// content at once. [`FileJournal`] is the file implementation; tests wrap it to be slow.
pub trait JournalStore: Send + 'static {
    /// Appends `bytes` (whole lines).
    ///
    /// # Errors
    ///
    /// The I/O error.
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Makes everything appended durable.
    ///
    /// # Errors
    ///
    /// The I/O error.
    fn sync(&mut self) -> io::Result<()>;
    /// Replaces the whole content with `bytes`, atomically: after a crash either the old
    /// content or the new one is there, never a mix.
    ///
    /// # Errors
    ///
    /// The I/O error.
    fn replace(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// The content's size in bytes.
    fn size(&self) -> u64;
    /// The whole content: what the default [`reader`](JournalStore::reader) and
    /// [`read_range`](JournalStore::read_range) read from (a store that implements both
    /// never needs to hold it).
    ///
    /// # Errors
    ///
    /// The I/O error.
    fn read(&self) -> io::Result<Vec<u8>>;
    /// The content as a stream, for a compaction to replay it line by line and copy the
    /// lines it keeps, never holding it whole. The default reads the whole content into
    /// memory; [`FileJournal`] reads the file.
    ///
    /// # Errors
    ///
    /// The I/O error.
    fn reader(&self) -> io::Result<Box<dyn JournalReader>> {
        Ok(Box::new(io::Cursor::new(self.read()?)))
    }
    /// Replaces the whole content with what `write` writes, atomically, as
    /// [`replace`](JournalStore::replace) does: a compaction writes its new content as it
    /// goes. The default gathers it in memory and calls `replace`; [`FileJournal`] writes
    /// it to the new file directly.
    ///
    /// # Errors
    ///
    /// The I/O error, or `write`'s.
    fn replace_with(
        &mut self,
        write: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut bytes = Vec::new();
        write(&mut bytes)?;
        self.replace(&bytes)
    }
    /// `len` bytes from `offset`: one line, for reading one released output back. The
    /// default reads the whole content; [`FileJournal`] reads only the range.
    ///
    /// # Errors
    ///
    /// The I/O error, or `UnexpectedEof` when the range is past the end.
    fn read_range(&self, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let all = self.read()?;
        let range = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(len).ok())
            .and_then(|(start, len)| Some(start..start.checked_add(len)?))
            .filter(|range| range.end <= all.len())
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        Ok(all[range].to_vec())
    }
}

/// What a [`JournalStore`] is read through as a stream: buffered lines, and a seek to the
/// lines read back alone.
pub trait JournalReader: io::BufRead + io::Seek {}

impl<T: io::BufRead + io::Seek> JournalReader for T {}

/// A journal file, appended to; compaction writes a new file beside it, syncs it and renames
/// it over the old one.
#[derive(Debug)]
pub struct FileJournal {
    path: PathBuf,
    file: File,
    size: u64,
}

impl FileJournal {
    /// Opens (or creates) the file at `path` for appending.
    ///
    /// # Errors
    ///
    /// The I/O error.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let size = file.metadata()?.len();
        Ok(FileJournal {
            path: path.to_owned(),
            file,
            size,
        })
    }
}

impl JournalStore for FileJournal {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)?;
        self.size += bytes.len() as u64;
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn replace(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.replace_with(&mut |out| out.write_all(bytes))
    }

    fn replace_with(
        &mut self,
        write: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".compacting");
        let tmp = PathBuf::from(tmp);
        let written = File::create(&tmp).and_then(|file| {
            let mut out = io::BufWriter::with_capacity(1 << 16, file);
            write(&mut out)?;
            let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
            file.sync_all()
        });
        if let Err(error) = written {
            // The old file stays as it was; a half-written new one is no use to anyone.
            let _ = std::fs::remove_file(&tmp);
            return Err(error);
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // The rename is durable once the directory is synced (where a directory can be
            // opened: not on every platform).
            if let Ok(dir) = File::open(dir) {
                let _ = dir.sync_all();
            }
        }
        self.file = OpenOptions::new().append(true).open(&self.path)?;
        self.size = self.file.metadata()?.len();
        Ok(())
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn read(&self) -> io::Result<Vec<u8>> {
        std::fs::read(&self.path)
    }

    fn reader(&self) -> io::Result<Box<dyn JournalReader>> {
        Ok(Box::new(io::BufReader::with_capacity(
            1 << 16,
            File::open(&self.path)?,
        )))
    }

    fn read_range(&self, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let mut file = File::open(&self.path)?;
        file.seek(io::SeekFrom::Start(offset))?;
        let mut bytes = vec![0; usize::try_from(len).map_err(io::Error::other)?];
        file.read_exact(&mut bytes)?;
        Ok(bytes)
    }
}

/// What the writer calls once it has written what a release waited for.
pub(crate) type OnWritten = Box<dyn Fn() + Send + Sync>;

/// How far the writer is behind, and who waits for it to catch up.
struct Backlog {
    queued: AtomicUsize,
    bound: usize,
    room: tokio::sync::Notify,
    /// Set when the writer stopped writing, on an I/O error or a close: nothing waits for
    /// it any more.
    failed: AtomicBool,
    /// Every event up to this sequence number is written to the store (appended: a
    /// read-back finds it), so an output settled by then may be released from memory.
    written_seq: AtomicU64,
    /// Every event up to this sequence number is synced (durable): what
    /// [`JournalTap::synced_through`] waits for; woken on `synced` at each sync.
    synced_seq: AtomicU64,
    synced: tokio::sync::Notify,
    /// Set by the registry when a release waits for a line to be written: the writer then
    /// calls `on_written` after its next append (on its own thread, holding no lock; the
    /// tree's call starts a task on its runtime, which takes the registry lock).
    release_waits: AtomicBool,
    on_written: std::sync::OnceLock<OnWritten>,
}

impl std::fmt::Debug for Backlog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backlog")
            .field("queued", &self.queued)
            .field("bound", &self.bound)
            .field("failed", &self.failed)
            .field("written_seq", &self.written_seq)
            .field("synced_seq", &self.synced_seq)
            .finish_non_exhaustive()
    }
}

/// What the writer thread is told.
enum Command {
    /// Boxed: an entry is large, and most of the channel's traffic.
    Entry(Box<JournalEntry>),
    /// Sync everything and answer (a clean shutdown, or a test).
    Flush(std::sync::mpsc::SyncSender<()>),
    /// Write and sync everything, release the file's lock, write nothing more, and answer
    /// (reads are still answered): the tree is done with the journal.
    Close(std::sync::mpsc::SyncSender<()>),
    /// Write everything, then answer with the lines of the agent's latest conversation.
    ReadConversation(
        AgentId,
        std::sync::mpsc::SyncSender<io::Result<Vec<Vec<u8>>>>,
    ),
    /// Write everything, then answer with the line holding the agent's whole outcome
    /// (`None` when the journal has none).
    ReadOutput(
        AgentId,
        std::sync::mpsc::SyncSender<io::Result<Option<Vec<u8>>>>,
    ),
}

/// The tree's side of its journal: cheap to clone, shared by the registry (events,
/// admissions) and the agents (conversations).
#[derive(Clone, Debug)]
pub(crate) struct JournalTap {
    sender: mpsc::Sender<Command>,
    backlog: Arc<Backlog>,
    /// The policy is [`Durability::EveryEntry`]: an outcome is synced before the
    /// application is handed it ([`JournalTap::synced_through`]).
    pub(crate) every_entry: bool,
    /// The writer holds the file's lock ([`JournalLock`]).
    locked: bool,
    /// Whether settled agents keep their conversation in memory.
    pub(crate) retain_conversations: bool,
    /// How long read outputs stay in memory.
    pub(crate) outputs: OutputRetention,
    error: Arc<Mutex<Option<String>>>,
}

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

/// The definitions journaled so far, by address, with their hashes (each kept alive here,
/// so an address is never reused for another): a definition is written once, not per
/// spawn. Owned by the registry, next to its tap, and only touched under its lock.
pub(crate) type Written = Vec<(Arc<AgentDefinition>, String)>;

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Entry(_) => f.write_str("Entry"),
            Command::Flush(_) => f.write_str("Flush"),
            Command::Close(_) => f.write_str("Close"),
            Command::ReadConversation(..) => f.write_str("ReadConversation"),
            Command::ReadOutput(..) => f.write_str("ReadOutput"),
        }
    }
}

impl JournalTap {
    /// Starts the writer thread on `store`, writing a header first when the store is empty.
    /// `index` says where the store's settled outcomes and conversations are (a recovery's
    /// replay; empty for a new journal).
    /// `lock`, the file's lock, is held by the writer until the journal is closed.
    pub(crate) fn start(
        config: &JournalConfig,
        mut store: Box<dyn JournalStore>,
        session: &SessionId,
        index: Index,
        lock: Option<JournalLock>,
    ) -> Result<Self, JournalError> {
        let path = config.path.clone();
        let locked = lock.is_some();
        if store.size() == 0 {
            let header = JournalEntry::Header {
                version: JOURNAL_VERSION,
                session: session.clone(),
            };
            store
                .append(header.to_line().as_bytes())
                .and_then(|()| store.sync())
                .map_err(|e| JournalError::io(&path, "cannot write the header", &e))?;
        }
        let backlog = Arc::new(Backlog {
            queued: AtomicUsize::new(0),
            bound: config.max_queue,
            room: tokio::sync::Notify::new(),
            failed: AtomicBool::new(false),
            written_seq: AtomicU64::new(index.last_seq),
            // What the store holds was synced when it was opened (a recovery's replay).
            synced_seq: AtomicU64::new(index.last_seq),
            synced: tokio::sync::Notify::new(),
            release_waits: AtomicBool::new(false),
            on_written: std::sync::OnceLock::new(),
        });
        let error = Arc::new(Mutex::new(None));
        let (sender, receiver) = mpsc::channel();
        let mut writer = Writer {
            store,
            durability: config.durability,
            rotate_at: config.rotate_at,
            backlog: backlog.clone(),
            error: error.clone(),
            path,
            session: session.clone(),
            unsynced: 0,
            oldest_unsynced: None,
            outputs: index.outputs,
            conversations: index.conversations,
            buffered_seq: 0,
            compacted_size: 0,
            lock,
        };
        let (died_backlog, died_error, died_path) =
            (backlog.clone(), error.clone(), path_of(config));
        std::thread::Builder::new()
            .name("agent-tree-journal".into())
            .spawn(move || {
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    writer.run(&receiver);
                }));
                if ran.is_err() {
                    // A store that panicked: the journal stops, and nothing waits on it.
                    let text = format!("journal {}: the writer panicked", died_path.display());
                    tracing::error!("{text}; the tree goes on without it");
                    *died_error.lock() = Some(text);
                    died_backlog.failed.store(true, Ordering::Release);
                    died_backlog.room.notify_waiters();
                    died_backlog.synced.notify_waiters();
                }
            })
            .map_err(|e| JournalError::io(&config.path, "cannot start the writer", &e))?;
        Ok(JournalTap {
            sender,
            backlog,
            every_entry: config.durability == Durability::EveryEntry,
            locked,
            retain_conversations: config.retain_conversations,
            outputs: config.outputs,
            error,
        })
    }

    fn send(&self, entry: JournalEntry) {
        if self.backlog.failed.load(Ordering::Acquire) {
            return;
        }
        self.backlog.queued.fetch_add(1, Ordering::AcqRel);
        if self.sender.send(Command::Entry(Box::new(entry))).is_err() {
            self.backlog.queued.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// An event, as the registry emits it (under its lock: this only queues).
    pub(crate) fn event(&self, event: &Event) {
        self.send(JournalEntry::Event {
            event: event.clone(),
        });
    }

    /// An admission: the definition (once), then the request, before its admission event.
    pub(crate) fn admission(
        &self,
        written: &mut Written,
        agent: AgentId,
        definition: &Arc<AgentDefinition>,
        request: SpawnRequest,
        context: &[Message],
    ) {
        let (hash, new) = match written.iter().find(|(d, _)| Arc::ptr_eq(d, definition)) {
            Some((_, hash)) => (hash.clone(), false),
            None => {
                let hash = definition_hash(definition);
                written.push((definition.clone(), hash.clone()));
                (hash, true)
            }
        };
        if new {
            self.send(JournalEntry::Definition {
                hash: hash.clone(),
                definition: (**definition).clone(),
            });
        }
        self.send(JournalEntry::Spawn {
            agent,
            definition: hash,
            request,
            context: context.into(),
        });
    }

    /// A steer `agent` receipted (`delivered` or `queued`), before the receipt is sent: a
    /// crash before a turn boundary reads it keeps it for the agent's next run.
    pub(crate) fn steer(&self, agent: AgentId, text: &str) {
        self.send(JournalEntry::Steer {
            agent,
            text: text.to_owned(),
        });
    }

    /// A question `agent` asked its owner in run `run`, by the call at place `call` of
    /// `asking`, before the `asked` event: a crash while it waits keeps the question, and
    /// the turn that asked it, for the run a recovery starts.
    pub(crate) fn question(
        &self,
        agent: AgentId,
        run: u32,
        call: usize,
        question: &str,
        asking: &agent_tree_protocol::Message,
    ) {
        self.send(JournalEntry::Question {
            agent,
            run,
            call,
            question: question.to_owned(),
            asking: asking.clone(),
        });
    }

    /// The answer to `agent`'s open question of run `run`, before the agent reads it: a
    /// crash before the turn boundary after it delivers it once, without asking again.
    pub(crate) fn answer(&self, agent: AgentId, run: u32, text: &str, is_error: bool) {
        self.send(JournalEntry::Answer {
            agent,
            run,
            text: text.to_owned(),
            is_error,
        });
    }

    /// An agent's run ended with `outcome`, which it holds while its children drain.
    pub(crate) fn decided(&self, agent: AgentId, outcome: &agent_tree_protocol::Outcome) {
        self.send(JournalEntry::Decided {
            agent,
            outcome: outcome.clone(),
        });
    }

    /// An agent's conversation at a turn boundary or the end of run `run`: only the
    /// messages from `from` on are written (what was journaled before stays).
    pub(crate) fn conversation(
        &self,
        agent: AgentId,
        run: u32,
        from: usize,
        messages: &Arc<[Message]>,
    ) {
        let from = from.min(messages.len());
        let tail: Arc<[Message]> = if from == 0 {
            messages.clone()
        } else {
            messages[from..].into()
        };
        self.send(JournalEntry::Conversation {
            agent,
            run,
            from,
            messages: tail,
        });
    }

    /// Remote child `agent`'s mirror of its hosted subtree, as its latest run's edge ended:
    /// a tree recovered from this journal still has it (`Tree::remote_records`).
    #[cfg(feature = "cluster")]
    pub(crate) fn mirror(&self, agent: AgentId, records: Vec<agent_tree_protocol::AgentRecord>) {
        self.send(JournalEntry::Mirror { agent, records });
    }

    /// Waits until the writer is less than the bound behind (backpressure); at once when it
    /// is, or when it has stopped on an error.
    pub(crate) async fn room(&self) {
        loop {
            let notified = self.backlog.room.notified();
            tokio::pin!(notified);
            // Registered before the check: a wake-up between the check and the await is
            // not missed.
            notified.as_mut().enable();
            if self.backlog.queued.load(Ordering::Acquire) < self.backlog.bound
                || self.backlog.failed.load(Ordering::Acquire)
            {
                return;
            }
            notified.await;
        }
    }

    /// Every event up to this sequence number is written (a released output is read back
    /// from what is written).
    pub(crate) fn written_seq(&self) -> u64 {
        self.backlog.written_seq.load(Ordering::Acquire)
    }

    /// Waits until every event up to `seq` is synced, or the writer has stopped (an I/O
    /// error: nothing more will be). The writer syncs what it was handed in order, so this
    /// waits for what was queued before, never for later work.
    pub(crate) async fn synced_through(&self, seq: u64) {
        loop {
            let notified = self.backlog.synced.notified();
            tokio::pin!(notified);
            // Registered before the check: a sync between the check and the await wakes it.
            notified.as_mut().enable();
            if self.backlog.synced_seq.load(Ordering::Acquire) >= seq
                || self.backlog.failed.load(Ordering::Acquire)
            {
                return;
            }
            notified.await;
        }
    }

    /// A release waits for lines not written yet: the writer calls back after its next
    /// append (under the registry lock: this only sets a flag).
    pub(crate) fn release_waits(&self) {
        self.backlog.release_waits.store(true, Ordering::Release);
    }

    /// What the writer calls when a waiting release may go on (set once, by the tree).
    pub(crate) fn on_written(&self, call: OnWritten) {
        let _ = self.backlog.on_written.set(call);
    }

    /// Whether the writer stopped writing: an I/O error, or the journal was closed.
    pub(crate) fn failed(&self) -> bool {
        self.backlog.failed.load(Ordering::Acquire)
    }

    /// Entries queued and not yet written.
    pub(crate) fn queued(&self) -> usize {
        self.backlog.queued.load(Ordering::Acquire)
    }

    /// Sends the writer the command `command` builds around a reply channel and waits for
    /// the answer on a blocking thread. `None` when the writer (or the blocking pool) is
    /// gone: the tree is closing.
    async fn ask<T: Send + 'static>(
        &self,
        command: impl FnOnce(std::sync::mpsc::SyncSender<T>) -> Command,
    ) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.sender.send(command(tx)).ok()?;
        tokio::task::spawn_blocking(move || rx.recv())
            .await
            .ok()?
            .ok()
    }

    /// Writes and syncs everything queued so far, waiting on a blocking thread.
    pub(crate) async fn flush(&self) {
        self.ask(Command::Flush).await;
    }

    /// Writes and syncs everything queued so far, then stops writing and releases the
    /// file's lock (another tree may open it now), waiting on a blocking thread. What is
    /// handed over afterwards is dropped; reads are still answered.
    pub(crate) async fn close(&self) {
        self.ask(Command::Close).await;
    }

    /// [`JournalTap::close`], blocking the calling thread until it is done (a dropped tree:
    /// the file is free when the drop returns). Only a locked journal (a file's) waits: a
    /// store of the application's own is left to end with the tree's last reference, as it
    /// would without a close.
    pub(crate) fn close_now(&self) {
        if !self.locked {
            return;
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        if self.sender.send(Command::Close(tx)).is_ok() {
            let _ = rx.recv();
        }
    }

    /// Agent `agent`'s latest journaled conversation, read back from the journal (after
    /// everything queued is written): only its own lines, found by the writer's index.
    /// `None` (with a warning) when the journal cannot be read or holds none.
    pub(crate) async fn read_conversation(&self, agent: AgentId) -> Option<Arc<[Message]>> {
        let lines = match self
            .ask(|reply| Command::ReadConversation(agent, reply))
            .await?
        {
            Ok(lines) if !lines.is_empty() => lines,
            Ok(_) => return None,
            Err(error) => {
                tracing::warn!(%agent, %error, "cannot read a conversation back from the journal");
                return None;
            }
        };
        let entries: Result<Vec<JournalEntry>, String> = lines
            .iter()
            .map(|line| JournalEntry::from_line_bytes(line).map_err(|e| e.to_string()))
            .collect();
        match entries.and_then(|entries| agent_tree_protocol::assemble_conversation(agent, entries))
        {
            Ok(messages) => Some(messages.into()),
            Err(error) => {
                tracing::warn!(%agent, %error, "the journal's conversation lines do not read back");
                None
            }
        }
    }

    /// Agent `agent`'s whole outcome, read back from the journal (after everything queued
    /// is written): one line, found by the writer's index. `None` (with a warning) when the
    /// journal cannot be read or holds none.
    pub(crate) async fn read_outcome(&self, agent: AgentId) -> Option<Outcome> {
        let line = match self.ask(|reply| Command::ReadOutput(agent, reply)).await? {
            Ok(Some(line)) => line,
            Ok(None) => {
                tracing::warn!(%agent, "the journal holds no output of this agent");
                return None;
            }
            Err(error) => {
                tracing::warn!(%agent, %error, "cannot read an output back from the journal");
                return None;
            }
        };
        match JournalEntry::from_line_bytes(&line) {
            Ok(entry) => match entry.output() {
                Some((found, outcome)) if found == agent => Some(outcome.clone()),
                _ => {
                    tracing::warn!(%agent, "the journal's line for this output holds another entry");
                    None
                }
            },
            Err(error) => {
                tracing::warn!(%agent, %error, "the journal's line for this output does not decode");
                None
            }
        }
    }

    /// Why the writer stopped, if it did.
    pub(crate) fn error(&self) -> Option<String> {
        self.error.lock().clone()
    }
}

/// The writer thread's state.
struct Writer {
    store: Box<dyn JournalStore>,
    durability: Durability,
    rotate_at: Option<u64>,
    backlog: Arc<Backlog>,
    error: Arc<Mutex<Option<String>>>,
    path: PathBuf,
    session: SessionId,
    unsynced: usize,
    oldest_unsynced: Option<Instant>,
    /// Where each settled agent's whole outcome is in the store (its latest terminal event,
    /// or a compaction's output line): a released output is read back from its one line.
    outputs: std::collections::HashMap<AgentId, LineSpan>,
    /// Where each agent's latest conversation is: its run and its lines (a whole one, then
    /// each turn's addition), read back alone on a resume.
    conversations: Conversations,
    /// The last event in the buffer: written once the buffer is appended.
    buffered_seq: u64,
    /// The store's size after the last compaction (0 before any).
    compacted_size: u64,
    /// The file's lock, held until the journal is closed (or the writer ends).
    lock: Option<JournalLock>,
}

/// Each agent's latest conversation in the store: its run and the lines that make it up.
pub(crate) type Conversations = std::collections::HashMap<AgentId, (u32, Vec<LineSpan>)>;

impl Writer {
    /// The most entries written per batch.
    const BATCH: usize = 512;
    /// The write buffer's usual capacity: a batch of large entries grows it, and it shrinks
    /// back after, so one burst of large outputs does not stay allocated for the tree's life.
    const BUFFER: usize = 64 * 1024;

    fn run(&mut self, receiver: &mpsc::Receiver<Command>) {
        let mut buffer = Vec::with_capacity(Self::BUFFER);
        loop {
            // Wait for work; with unsynced entries under group commit, no longer than their
            // deadline.
            let first = match self.sync_deadline() {
                Some(deadline) => {
                    match receiver.recv_timeout(deadline.saturating_duration_since(Instant::now()))
                    {
                        Ok(command) => command,
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            self.sync_now();
                            continue;
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                }
                None => match receiver.recv() {
                    Ok(command) => command,
                    Err(_) => break,
                },
            };
            let mut commands = vec![first];
            while commands.len() < Self::BATCH {
                match receiver.try_recv() {
                    Ok(command) => commands.push(command),
                    Err(_) => break,
                }
            }
            let mut written = 0;
            for command in commands {
                match command {
                    Command::Entry(entry) => {
                        let line = entry.to_line();
                        let span = LineSpan {
                            offset: self.store.size() + buffer.len() as u64,
                            len: line.len() as u64 - 1,
                        };
                        if let Some((agent, _)) = entry.output() {
                            self.outputs.insert(agent, span);
                        }
                        if let JournalEntry::Event { event } = &*entry {
                            self.buffered_seq = self.buffered_seq.max(event.seq);
                        }
                        if let JournalEntry::Conversation {
                            agent, run, from, ..
                        } = *entry
                        {
                            let lines = self.conversations.entry(agent).or_default();
                            if from == 0 || lines.0 != run {
                                *lines = (run, Vec::new());
                            }
                            lines.1.push(span);
                        }
                        buffer.extend_from_slice(line.as_bytes());
                        written += 1;
                        if self.durability == Durability::EveryEntry {
                            self.write(&mut buffer, 1);
                            self.sync_now();
                        }
                    }
                    Command::Flush(done) => {
                        // What the batch wrote so far leaves the backlog before the answer:
                        // once a flush returns, `Tree::journal_backlog` counts none of it.
                        self.write(&mut buffer, written);
                        self.release(std::mem::take(&mut written));
                        self.sync_now();
                        // A rotation due is done before the answer: once a flush (a tree's
                        // shutdown) returns, the writer does not touch the file again, so
                        // a tree opened on it next reads what stays.
                        self.maybe_rotate();
                        let _ = done.send(());
                    }
                    Command::Close(done) => {
                        self.write(&mut buffer, written);
                        self.release(std::mem::take(&mut written));
                        self.sync_now();
                        self.maybe_rotate();
                        self.close();
                        let _ = done.send(());
                    }
                    Command::ReadConversation(agent, reply) => {
                        self.write(&mut buffer, written);
                        self.release(std::mem::take(&mut written));
                        let lines = self.conversations.get(&agent).map_or_else(
                            || Ok(Vec::new()),
                            |(_, spans)| {
                                spans
                                    .iter()
                                    .map(|span| self.store.read_range(span.offset, span.len))
                                    .collect()
                            },
                        );
                        let _ = reply.send(lines);
                    }
                    Command::ReadOutput(agent, reply) => {
                        self.write(&mut buffer, written);
                        self.release(std::mem::take(&mut written));
                        let line = self
                            .outputs
                            .get(&agent)
                            .map(|span| self.store.read_range(span.offset, span.len))
                            .transpose();
                        let _ = reply.send(line);
                    }
                }
            }
            if self.durability != Durability::EveryEntry {
                self.write(&mut buffer, written);
            }
            self.release(written);
            self.maybe_sync();
            self.maybe_rotate();
            // A failed writer writes nothing more, but keeps answering flushes and reads:
            // a conversation it holds can still be read back where the store still reads.
        }
        self.write(&mut buffer, 0);
        self.sync_now();
    }

    fn write(&mut self, buffer: &mut Vec<u8>, entries: usize) {
        if buffer.is_empty() || self.backlog.failed.load(Ordering::Acquire) {
            buffer.clear();
            buffer.shrink_to(Self::BUFFER);
            return;
        }
        match self.store.append(buffer) {
            Ok(()) => {
                self.unsynced += entries.max(1);
                self.oldest_unsynced.get_or_insert_with(Instant::now);
                self.backlog
                    .written_seq
                    .fetch_max(self.buffered_seq, Ordering::AcqRel);
                if self.backlog.release_waits.swap(false, Ordering::AcqRel) {
                    if let Some(call) = self.backlog.on_written.get() {
                        // The registry's release check: it may hand the writer more
                        // entries (the `released` events), which only queue.
                        call();
                    }
                }
            }
            Err(error) => self.fail("cannot append", &error),
        }
        self.buffered_seq = 0;
        buffer.clear();
        buffer.shrink_to(Self::BUFFER);
    }

    /// Entries written: the backlog shrinks, and waiters wake once it is under the bound.
    fn release(&self, written: usize) {
        let before = self.backlog.queued.fetch_sub(written, Ordering::AcqRel);
        if before.saturating_sub(written) < self.backlog.bound {
            self.backlog.room.notify_waiters();
        }
    }

    fn sync_deadline(&self) -> Option<Instant> {
        if self.backlog.failed.load(Ordering::Acquire) {
            // Nothing more is written, so nothing is due: wait for commands, not a timer.
            return None;
        }
        match self.durability {
            Durability::Group { max_delay, .. } => self.oldest_unsynced.map(|t| t + max_delay),
            _ => None,
        }
    }

    fn maybe_sync(&mut self) {
        if let Durability::Group {
            max_entries,
            max_delay,
        } = self.durability
        {
            let old = self
                .oldest_unsynced
                .is_some_and(|t| t.elapsed() >= max_delay);
            if self.unsynced >= max_entries || old {
                self.sync_now();
            }
        }
    }

    fn sync_now(&mut self) {
        if self.unsynced == 0 || self.backlog.failed.load(Ordering::Acquire) {
            return;
        }
        let synced = self.store.sync();
        self.unsynced = 0;
        self.oldest_unsynced = None;
        match synced {
            Ok(()) => self.publish_synced(),
            Err(error) => self.fail("cannot sync", &error),
        }
    }

    /// Everything written is synced: waiters for it go on.
    fn publish_synced(&self) {
        let written = self.backlog.written_seq.load(Ordering::Acquire);
        self.backlog.synced_seq.fetch_max(written, Ordering::AcqRel);
        self.backlog.synced.notify_waiters();
    }

    /// Compacts the file once it is past `rotate_at`: a header, a checkpoint of the records,
    /// the definitions, the requests, and each agent's latest conversation.
    fn maybe_rotate(&mut self) {
        let Some(limit) = self.rotate_at else { return };
        // Past the limit, and at least twice what the last compaction left: a journal whose
        // settled outputs alone outweigh the limit is not rewritten at every batch.
        let size = self.store.size();
        if size <= limit
            || size <= self.compacted_size.saturating_mul(2)
            || self.backlog.failed.load(Ordering::Acquire)
        {
            return;
        }
        self.sync_now();
        // Compaction reads the file back as a stream and replays it, so the writer keeps no
        // state of its own (no conversation held in memory for it): the replay holds where
        // each conversation is, and the compaction copies those lines from the old file to
        // the new one.
        let replayed = self
            .store
            .reader()
            .map_err(|e| e.to_string())
            .and_then(|mut reader| {
                let state = agent_tree_protocol::replay_index(&mut reader, Some(&self.session))
                    .map_err(|e| e.to_string())?;
                Ok((reader, state))
            });
        let (mut reader, state) = match replayed {
            Ok(read) => read,
            Err(error) => {
                self.fail("cannot read back to compact", &io::Error::other(error));
                return;
            }
        };
        let session = &self.session;
        let mut index = None;
        let replaced = self.store.replace_with(&mut |out| {
            index = Some(compact(&state, session, &mut reader, out)?);
            Ok(())
        });
        drop(reader);
        match (replaced, index) {
            (Ok(()), Some((outputs, conversations))) => {
                self.outputs = outputs;
                self.conversations = conversations;
                self.compacted_size = self.store.size();
                tracing::debug!(
                    path = %self.path.display(),
                    bytes = self.compacted_size,
                    "journal compacted"
                );
            }
            (Err(error), _) => self.fail("cannot compact", &error),
            (Ok(()), None) => self.fail(
                "cannot compact",
                &io::Error::other("the store replaced its content without writing it"),
            ),
        }
    }

    /// The tree is done with the journal: nothing more is written (as after a failure,
    /// without an error), nothing waits on it, and its lock is released.
    fn close(&mut self) {
        self.backlog.failed.store(true, Ordering::Release);
        self.backlog.room.notify_waiters();
        self.backlog.synced.notify_waiters();
        self.lock = None;
    }

    fn fail(&mut self, what: &str, error: &io::Error) {
        let text = format!("journal {}: {what}: {error}", self.path.display());
        tracing::error!("{text}; the tree goes on without it");
        *self.error.lock() = Some(text);
        self.unsynced = 0;
        self.oldest_unsynced = None;
        self.backlog.failed.store(true, Ordering::Release);
        self.backlog.room.notify_waiters();
        self.backlog.synced.notify_waiters();
    }
}

fn path_of(config: &JournalConfig) -> PathBuf {
    config.path.clone()
}

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
    use agent_tree_protocol::{EventKind, Message};

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
