//! The tree's side of its journal: what the registry (events, admissions) and the agents
//! (conversations, steers, questions) hand the writer, the backlog they wait on when it falls
//! behind, the syncs an outcome waits for, and read-back requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;

use agent_tree_protocol::{
    AgentDefinition, AgentId, Event, JOURNAL_VERSION, JournalEntry, Message, Outcome, SessionId,
    SpawnRequest, definition_hash,
};
use parking_lot::Mutex;

use super::writer::{Backlog, Command, Writer};
use super::{Durability, Index, JournalConfig, JournalError, JournalLock, JournalStore};
use crate::policy::retention::OutputRetention;

/// What the writer calls once it has written what a release waited for.
pub(crate) type OnWritten = Box<dyn Fn() + Send + Sync>;

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

/// The definitions journaled so far, by address, with their hashes (each kept alive here,
/// so an address is never reused for another): a definition is written once, not per
/// spawn. Owned by the registry, next to its tap, and only touched under its lock.
pub(crate) type JournaledDefinitions = Vec<(Arc<AgentDefinition>, String)>;

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
        let sender = Writer::start(config, store, session, index, lock, &backlog, &error)?;
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

    /// Hands `entry` to the writer (dropped once the writer has failed). The typed methods
    /// of this impl are the core's; a plug-in writes its own entries through this.
    pub(crate) fn send(&self, entry: JournalEntry) {
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
        written: &mut JournaledDefinitions,
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
