//! The writer thread: it takes what the tap hands it in order, encodes and writes it, syncs
//! by the [`Durability`] policy, rotates the file by compacting it, answers read-backs from
//! its index, and publishes how far it has written and synced through the [`Backlog`] it
//! shares with the tap.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use agent_tree_protocol::runtime::LineSpan;
use agent_tree_protocol::{AgentId, JournalEntry, SessionId};
use parking_lot::Mutex;

use super::compaction::compact;
use super::tap::OnWritten;
use super::{
    Durability, Index, JournalConfig, JournalError, JournalLock, JournalStore, index::Conversations,
};

/// How far the writer is behind, and who waits for it to catch up.
pub(super) struct Backlog {
    pub(super) queued: AtomicUsize,
    pub(super) bound: usize,
    pub(super) room: tokio::sync::Notify,
    /// Set when the writer stopped writing, on an I/O error or a close: nothing waits for
    /// it any more.
    pub(super) failed: AtomicBool,
    /// Every event up to this sequence number is written to the store (appended: a
    /// read-back finds it), so an output settled by then may be released from memory.
    pub(super) written_seq: AtomicU64,
    /// Every event up to this sequence number is synced (durable): what
    /// [`JournalTap::synced_through`] waits for; woken on `synced` at each sync.
    pub(super) synced_seq: AtomicU64,
    pub(super) synced: tokio::sync::Notify,
    /// Set by the registry when a release waits for a line to be written: the writer then
    /// calls `on_written` after its next append (on its own thread, holding no lock; the
    /// tree's call starts a task on its runtime, which takes the registry lock).
    pub(super) release_waits: AtomicBool,
    pub(super) on_written: std::sync::OnceLock<OnWritten>,
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
pub(super) enum Command {
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

/// The writer thread's state.
pub(super) struct Writer {
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

impl Writer {
    /// The most entries written per batch.
    const BATCH: usize = 512;
    /// The write buffer's usual capacity: a batch of large entries grows it, and it shrinks
    /// back after, so one burst of large outputs does not stay allocated for the tree's life.
    const BUFFER: usize = 64 * 1024;

    /// Starts the writer thread on `store` (`index` says where its settled outcomes and
    /// conversations are), sharing `backlog` and `error` with the tap, and returns the
    /// channel it takes commands on. `lock`, the file's lock, is held by the writer until
    /// the journal is closed.
    pub(super) fn start(
        config: &JournalConfig,
        store: Box<dyn JournalStore>,
        session: &SessionId,
        index: Index,
        lock: Option<JournalLock>,
        backlog: &Arc<Backlog>,
        error: &Arc<Mutex<Option<String>>>,
    ) -> Result<mpsc::Sender<Command>, JournalError> {
        let (sender, receiver) = mpsc::channel();
        let mut writer = Writer {
            store,
            durability: config.durability,
            rotate_at: config.rotate_at,
            backlog: backlog.clone(),
            error: error.clone(),
            path: config.path.clone(),
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
        Ok(sender)
    }

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
