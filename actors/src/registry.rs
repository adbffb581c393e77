//! The registry: what must be global and consistent across a tree. The records (for the
//! snapshot), the usage ledger, event sequencing and subscribers, and the admission counters.
//! Everything about one agent's *lifecycle* (which phase it is in, its turn, its calls, its
//! children's states) belongs to that agent's actor, never to the registry.
//!
//! # Layout
//!
//! * this file: the state, the one lock, and [`Inner::emit`], the only writer of records;
//! * [`admit`]: admissions, pool starts, restarts and resumes, which each hand
//!   back a [`StartTicket`] carrying everything the agent's actor needs;
//! * [`end`]: settles, losses, aborts, kills, shutdown marks;
//! * [`read`]: queries, steering routes, usage and plain announcements.
//!
//! # Invariants
//!
//! 1. Records are only ever added, never removed, and they change only by [`Inner::emit`]
//!    applying the event it emits with the protocol's fold ([`agent_tree_protocol::apply`]):
//!    the event stream describes every record change, in order.
//! 2. A terminal status is sticky: the fold refuses to move away from it, and the registry
//!    checks before emitting, so no refused event is ever sent.
//! 3. Usage is added to the agent's `own` and to the `subtree` of the agent and every
//!    ancestor in one step, so `subtree == own + Σ children.subtree` holds at every instant;
//!    nothing of an agent is recorded after its terminal event.
//! 4. Events get dense sequence numbers and reach every subscriber in that order (unbounded
//!    queues: nothing is dropped).
//! 5. The admission counters (`live`, each agent's live children and lifetime spawns, the pool)
//!    change in the same transaction as the record change that defines them.
//! 6. Each public operation is one lock acquisition: no caller needs two in a row to be
//!    atomic.
//! 7. An output leaves memory (its `released` event) only after it was read and the journal
//!    has appended the event that settled it; never without a journal, after the journal
//!    failed, or after the tree shut down.
//! 8. **The journal before anyone else.** An event is handed to the journal before any
//!    subscriber or waiter can see it: [`Inner::try_emit_as`] queues it for the writer
//!    before it sends it to the subscribers, and every watcher (an outcome's, a run's end,
//!    `idle`) is told after the event that changed what it watches was emitted. Commands to
//!    the writer are taken in the order they were sent, so a
//!    [`Tree::flush_journal`](crate::Tree::flush_journal) asked for after the application
//!    saw anything (an event, an outcome, a record) makes it durable; with
//!    [`Durability::EveryEntry`](crate::Durability::EveryEntry) an outcome is synced before
//!    a handle, [`Tree::wait`](crate::Tree::wait) or [`Tree::run`](crate::Tree::run)
//!    returns it. What each durability setting can lose is in `docs/semantics.md`.
//!
//! # Deadlock safety
//!
//! The registry lock is a leaf: while it is held, code only reads and writes the fields below,
//! runs the pure policy functions (admission, restart deferral), applies the fold, and pushes
//! events onto unbounded channels (which never block and never run user code). It never
//! awaits, never takes another lock, never calls user code (models, tools, hooks), never logs
//! through `tracing` (a subscriber is user code), and never sends to an actor: messages to
//! actors (`Cancel`, `Shutdown`) are collected under the lock and sent after it is released.
//! `clippy::await_holding_lock` is denied in the workspace.

mod admit;
mod end;
mod mirror;
mod read;
mod recover;
mod running;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agent_tree_protocol::{
    AgentId, AgentRecord, AgentStatus, EndReason, Event, EventKind, EventTally, Message, Outcome,
    RequestId, SessionId,
};
use parking_lot::Mutex;
use ractor::{ActorCell, ActorId};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::policy::admission::OwnerView;
use crate::spawn::PendingStart;
use crate::util::IdMap;

pub(crate) use admit::{Admission, Admitted, Earlier, NEEDS_CONVERSATION};
pub(crate) use end::KilledRuns;

pub(crate) use running::SteerRoute;

/// What an agent's actor publishes at each turn boundary, written by it without the registry
/// lock (a leaf lock of its own: only these fields are touched under it, and nothing is
/// locked inside it but a turn sink's own leaf lock).
pub(crate) type ConversationCell = Arc<Mutex<TurnBoundary>>;

/// An agent's state as of its last turn boundary ([`ConversationCell`]).
#[derive(Debug, Default)]
pub(crate) struct TurnBoundary {
    /// Its conversation, read when the agent is resumed.
    pub(crate) messages: Arc<[Message]>,
    /// The sink of the turn it started there. A run that settles while that turn has not
    /// billed (its actor killed, mid-turn) is billed what the model reported to it, in the
    /// same transaction as the settle ([`Inner::settle`]), so the usage is never lost to a
    /// kill and never counted twice: the turn's own bill takes the sink's usage under the
    /// registry lock too ([`Registry::bill_turn`]). Taken at every settle, which breaks
    /// the cycle a sink that streams events makes (it holds the tree's shared state).
    pub(crate) turn: Option<crate::model::TurnSink>,
}

/// Where a record's events come from (`registry/mirror.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// Its own actor, in this tree.
    Actor,
    /// A mirror of an agent another tree runs (a remote child's descendant, hosted on its
    /// node, `docs/cluster.md`): no actor, no admission counters, no restarts; its events
    /// are folded in by the actor standing for its remote ancestor
    /// ([`Registry::mirror_event`]), and it settles with them or with that actor.
    Mirror,
    /// A mirrored record a run continued from another tree was admitted with: a settled
    /// child of its earlier runs there (`Inner::seed_earlier`), not a mirror of a live agent.
    Seed,
}

/// Everything an agent's actor is started with: it reads nothing back.
#[derive(Debug)]
pub(crate) struct StartTicket {
    pub(crate) id: AgentId,
    pub(crate) owner: AgentId,
    pub(crate) depth: u32,
    /// Which incarnation (restarts count up).
    pub(crate) incarnation: u32,
    /// Which run (restarts and resumes count up): late messages of an earlier run are told
    /// apart by it.
    pub(crate) run: u32,
    pub(crate) token: CancellationToken,
    pub(crate) conversation: ConversationCell,
    pub(crate) start: PendingStart,
    /// A resumed run's question, recovered from the journal: put again (or answered with
    /// its journaled answer) before any model turn.
    pub(crate) question: Option<Box<agent_tree_protocol::OpenQuestion>>,
}

/// One owner's children by request id: a short list, and a map once it has more than a few
/// (a map per delegating agent would cost more memory than its children's ids).
#[derive(Debug)]
enum ByRequest {
    Few(Vec<(RequestId, AgentId)>),
    Many(IdMap<RequestId, AgentId>),
}

impl Default for ByRequest {
    fn default() -> Self {
        ByRequest::Few(Vec::new())
    }
}

impl ByRequest {
    const FEW: usize = 16;

    fn get(&self, request: &RequestId) -> Option<AgentId> {
        match self {
            ByRequest::Few(list) => list.iter().find(|(r, _)| r == request).map(|&(_, id)| id),
            ByRequest::Many(map) => map.get(request).copied(),
        }
    }

    fn insert(&mut self, request: RequestId, id: AgentId) {
        match self {
            ByRequest::Few(list) if list.len() < Self::FEW => list.push((request, id)),
            ByRequest::Few(list) => {
                let mut map: IdMap<RequestId, AgentId> = std::mem::take(list).into_iter().collect();
                map.insert(request, id);
                *self = ByRequest::Many(map);
            }
            ByRequest::Many(map) => {
                map.insert(request, id);
            }
        }
    }
}

/// The registry of one tree.
#[derive(Debug)]
pub(crate) struct Registry {
    session: SessionId,
    epoch: Instant,
    /// Milliseconds the tree had run before `epoch`: a recovered tree's clock goes on from
    /// its journal's last event (set once, by recovery, before any agent runs).
    before_ms: AtomicU64,
    inner: Mutex<Inner>,
    /// How many times the lock was taken: the cost model of `docs/architecture.md` counts
    /// acquisitions per agent, and a test holds the count.
    acquisitions: AtomicU64,
    /// Where top agents' conversations go ([`Registry::tap_conversation`]), set once
    /// before any agent runs (by a placement's host: a hosted tree's edge); unset in every
    /// other tree.
    conversations: std::sync::OnceLock<ConversationTap>,
}

/// Where a tree's top agents' conversations go (a hosted tree's edge sends them to the
/// owner's node): the agent, its whole conversation at a turn boundary or a settle (one
/// reference, no copy), and the sequence number of the last event emitted before it (a
/// reader that takes events in order has every event up to it first: a conversation never
/// names a child whose `spawned` it has not read).
pub(crate) type ConversationTap = mpsc::UnboundedSender<Tapped>;

/// What a [`ConversationTap`] carries.
pub(crate) type Tapped = (AgentId, Arc<[Message]>, u64);

#[derive(Debug)]
struct Inner {
    /// The records, indexed by agent id (dense from the root's `a0`). Written only by
    /// [`Inner::emit`]. Shared with snapshots: one is a reference per record, and the fold
    /// copies a record only when it changes while a snapshot still holds it.
    records: Vec<Arc<AgentRecord>>,
    /// The runtime's side of each agent, indexed like `records`.
    entries: Vec<Entry>,
    /// ractor actor → agent, for the actors linked under the root actor (top-level and
    /// detached agents) only: the root uses it for those whose actor died without settling.
    /// Owners find their children in their own table.
    by_actor: IdMap<ActorId, AgentId>,
    /// (owner, request id) → child, for replay-safe spawns.
    /// Keyed by owner first, so a lookup borrows the request id instead of copying it.
    by_request: IdMap<AgentId, ByRequest>,
    tally: EventTally,
    seq: u64,
    /// Live agents (depth ≥ 1, admitted, not final).
    live: usize,
    peak_live: usize,
    subscribers: Vec<mpsc::UnboundedSender<Event>>,
    /// Mirrors `live` for [`Registry::idle`].
    live_tx: watch::Sender<usize>,
    /// Top-level background agents holding a pool slot.
    pool_running: usize,
    /// Pool size (can be raised while the tree runs).
    max_concurrent: usize,
    /// Top-level background agents waiting for a slot, FIFO.
    pool_queue: VecDeque<AgentId>,
    /// The journal every event goes to, before the subscribers (queued: never blocks), and
    /// the definitions already written to it.
    journal: Option<crate::journal::JournalTap>,
    journaled_definitions: crate::journal::JournaledDefinitions,
    /// Read outputs still held in memory, oldest read first, and their bytes: what the
    /// journal's retention policy releases from (`policy/retention.rs`).
    read_outputs: VecDeque<ReadOutput>,
    read_bytes: usize,
}

/// A read output held in memory: whose, of which run, its bytes and when it was read.
#[derive(Debug)]
struct ReadOutput {
    agent: AgentId,
    run: u32,
    read: crate::policy::retention::Read,
}

/// The registry's side of one agent: what admission, restarts, resumes, aborts and the
/// application's handles need. Nothing here says which phase of its run an agent is in.
#[derive(Debug)]
struct Entry {
    /// Cancelled to abort the agent; children's tokens are children of it (unless detached).
    token: CancellationToken,
    /// Why the agent was aborted, set by whoever cancelled `token` first.
    abort_reason: Option<EndReason>,
    /// Its current actor, once started (kept after it exits, for `alive_actors`).
    actor: Option<ActorCell>,
    /// Admission counters: live children now, children spawned in its life.
    live_children: usize,
    spawned: u32,
    /// Whether it takes a pool slot (top-level background).
    pooled: bool,
    /// How it was started: used to start a queued agent when a pool slot frees, and to
    /// re-run the original request on a restart.
    spec: Option<PendingStart>,
    /// It ended and its owner decides whether to restart it: its outcome is recorded but not
    /// final (watchers are not told, and it keeps its live slot).
    deferred: bool,
    /// Stopped by its owner's restart strategy: its exit is deferred to the owner whatever
    /// its restart type, so the plan can restart it.
    held: bool,
    /// The order of a shutdown that reached this run: nothing restarts under a shutdown, and
    /// an actor that registers after it began gets it at once.
    shutdown: Option<crate::msg::ShutdownOrder>,
    /// The last run that ended (0 before any), so an `ask_owner` waiting on this agent's run
    /// hears when it ends.
    ///
    /// Created on the first subscription (most agents never get one): its value then is
    /// derived from the record ([`Inner::ended_value`]) and kept by every settle after.
    ended_run: Option<watch::Sender<u32>>,
    /// Which run this is: 1 for the first, +1 for each restart and each resume.
    runs: u32,
    /// Steers routed to this run, against `max_steers_per_run`.
    steers: u32,
    /// Steers sent before its session existed, handed to its actor when it starts; first
    /// among them, `unread_kept` steers an ended run receipted `delivered` and never read.
    pending_steers: Vec<String>,
    /// How many of `pending_steers`, from the front, an ended run kept
    /// ([`Registry::keep_unread_steers`]; announced then): a restart's new run reads them
    /// in its first turn; a resume drops them, as the conversation it continues holds them.
    unread_kept: u32,
    /// The `ask_owner` question a crash cut its run off waiting on (recovered from the
    /// journal, with its answer if one was journaled): its next run (a resume) starts by
    /// putting it again, or by reading that answer, instead of re-running the turn.
    question: Option<Box<agent_tree_protocol::OpenQuestion>>,
    /// Its conversation, for resume.
    conversation: ConversationCell,
    /// Its settled conversation was dropped from memory: the journal holds it, and a resume
    /// reads it back from there.
    conversation_journaled: bool,
    /// The run whose output is in [`Inner::read_outputs`] (0: none): read once is enough.
    output_read: u32,
    /// Where its events come from: its own actor, or another tree's (a mirrored record).
    origin: Origin,
    /// Set when its outcome becomes final; handles and waits watch it.
    /// Created on the first subscription, like `ended_run` ([`Inner::settled_value`]).
    settled: Option<watch::Sender<Option<Outcome>>>,
    /// The countdowns of the shutdowns waiting for this run to become final: each is told
    /// once, when it is (or when the run is replaced).
    shutdown_waits: ShutdownWaits,
}

/// The countdowns of the shutdowns waiting for one run: almost always none or one (only
/// overlapping shutdowns make more), so the first is held inline, not in a vector each
/// agent of a shutdown would allocate.
#[derive(Debug, Default)]
struct ShutdownWaits {
    first: Option<Arc<watch::Sender<usize>>>,
    // Boxed: 8 bytes in every entry, not 24, for what overlapping shutdowns alone use.
    #[allow(clippy::box_collection)]
    more: Option<Box<Vec<Arc<watch::Sender<usize>>>>>,
}

impl ShutdownWaits {
    fn push(&mut self, left: Arc<watch::Sender<usize>>) {
        if self.first.is_none() {
            self.first = Some(left);
        } else {
            self.more.get_or_insert_default().push(left);
        }
    }

    /// Every countdown, once: they are taken.
    fn drain(&mut self) -> impl Iterator<Item = Arc<watch::Sender<usize>>> + use<> {
        self.first
            .take()
            .into_iter()
            .chain(self.more.take().into_iter().flat_map(|more| *more))
    }
}

impl Entry {
    fn new(token: CancellationToken) -> Self {
        Entry {
            token,
            abort_reason: None,
            actor: None,
            live_children: 0,
            spawned: 0,
            pooled: false,
            spec: None,
            deferred: false,
            held: false,
            shutdown: None,
            ended_run: None,
            runs: 1,
            steers: 0,
            pending_steers: Vec::new(),
            unread_kept: 0,
            question: None,
            conversation: ConversationCell::default(),
            conversation_journaled: false,
            output_read: 0,
            origin: Origin::Actor,
            settled: None,
            shutdown_waits: ShutdownWaits::default(),
        }
    }

    /// Forgets what belonged to the run that ended: a new run (restart or resume) is not
    /// under an old shutdown and is not held.
    fn new_run(&mut self, token: CancellationToken) {
        // A shutdown waiting for the run that ended is done waiting for it.
        self.count_down_shutdowns();
        self.runs += 1;
        self.steers = 0;
        self.shutdown = None;
        self.held = false;
        self.deferred = false;
        self.token = token;
        self.abort_reason = None;
        self.actor = None;
    }

    /// Tells every shutdown waiting for this run that it is final.
    fn count_down_shutdowns(&mut self) {
        for left in self.shutdown_waits.drain() {
            // Only the last one wakes the shutdown: one wake-up per shutdown, not per agent.
            left.send_if_modified(|n| {
                *n = n.saturating_sub(1);
                *n == 0
            });
        }
    }

    /// Sends `outcome` to the outcome watchers, if any subscribed.
    fn send_settled(&self, outcome: Option<Outcome>) {
        if let Some(settled) = &self.settled {
            settled.send_replace(outcome);
        }
    }

    fn owner_view(&self, record: &AgentRecord) -> OwnerView {
        OwnerView {
            id: record.id,
            depth: record.depth,
            status: record.status,
            cancelled: self.token.is_cancelled(),
            live_children: self.live_children,
            spawned: self.spawned,
            subtree_tokens: record
                .subtree
                .input_tokens
                .saturating_add(record.subtree.output_tokens),
        }
    }
}

impl Registry {
    /// A registry holding only the root record.
    pub(crate) fn new(
        session: SessionId,
        root_token: CancellationToken,
        max_concurrent: usize,
    ) -> Self {
        Registry {
            session,
            epoch: Instant::now(),
            before_ms: AtomicU64::new(0),
            inner: Mutex::new(Inner {
                records: vec![Arc::new(AgentRecord::root())],
                entries: vec![Entry::new(root_token)],
                by_actor: IdMap::default(),
                by_request: IdMap::default(),
                tally: EventTally::default(),
                seq: 0,
                live: 0,
                peak_live: 0,
                subscribers: Vec::new(),
                live_tx: watch::channel(0).0,
                pool_running: 0,
                max_concurrent,
                pool_queue: VecDeque::new(),
                journal: None,
                journaled_definitions: Vec::new(),
                read_outputs: VecDeque::new(),
                read_bytes: 0,
            }),
            acquisitions: AtomicU64::new(0),
            conversations: std::sync::OnceLock::new(),
        }
    }

    /// Sends each top agent's conversation, at its every turn boundary and its settle, to
    /// `tap` from now on (set once, by a hosted tree's edge, before any agent runs).
    #[cfg_attr(
        not(feature = "cluster"),
        allow(dead_code, reason = "only a placement sets it")
    )]
    pub(crate) fn set_conversation_tap(&self, tap: ConversationTap) {
        let _ = self.conversations.set(tap);
    }

    /// `id`'s conversation, to the tap when one is set and `id` is a top agent (`depth` 1):
    /// a hosted tree's edge sends it up, so its owner's node keeps what a local owner's
    /// tree would. Called by the agent at its turn boundaries; takes the registry lock
    /// only in a tree with a tap (for the sequence number the tap's reader orders it by).
    pub(crate) fn tap_conversation(&self, id: AgentId, depth: u32, messages: &Arc<[Message]>) {
        if depth == 1 && self.conversations.get().is_some() {
            let seq = self.lock().seq;
            self.tap_at(id, depth, messages, seq);
        }
    }

    /// As [`Registry::tap_conversation`], after the event numbered `seq`; the settle calls
    /// it under the lock, before its terminal event, so the tap's reader has the
    /// conversation the run ended with when that event comes.
    fn tap_at(&self, id: AgentId, depth: u32, messages: &Arc<[Message]>, seq: u64) {
        if depth == 1
            && let Some(tap) = self.conversations.get()
        {
            let _ = tap.send((id, messages.clone(), seq));
        }
    }

    /// Sends every event from now on to `journal` too (set once, before any agent).
    pub(crate) fn set_journal(&self, journal: crate::journal::JournalTap) {
        self.lock().journal = Some(journal);
    }

    /// Takes the registry lock. Every acquisition goes through here.
    fn lock(&self) -> parking_lot::MutexGuard<'_, Inner> {
        self.acquisitions.fetch_add(1, Ordering::Relaxed);
        self.inner.lock()
    }

    /// How many times the registry lock has been taken (read by the cost tests).
    #[cfg(test)]
    pub(crate) fn lock_acquisitions(&self) -> u64 {
        self.acquisitions.load(Ordering::Relaxed)
    }

    /// The tree's session.
    pub(crate) fn session(&self) -> &SessionId {
        &self.session
    }

    /// The instant every `*_ms` field counts from.
    pub(crate) fn epoch(&self) -> Instant {
        let before = Duration::from_millis(self.before_ms.load(Ordering::Relaxed));
        self.epoch.checked_sub(before).unwrap_or(self.epoch)
    }

    /// Milliseconds since the tree started, on tokio's clock.
    pub(crate) fn now_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        elapsed.saturating_add(self.before_ms.load(Ordering::Relaxed))
    }
}

impl Inner {
    fn entry(&self, id: AgentId) -> Option<&Entry> {
        usize::try_from(id.get())
            .ok()
            .and_then(|i| self.entries.get(i))
    }

    fn entry_mut(&mut self, id: AgentId) -> Option<&mut Entry> {
        usize::try_from(id.get())
            .ok()
            .and_then(|i| self.entries.get_mut(i))
    }

    /// `id`'s record (read only: records change only through [`Inner::emit`]).
    fn rec(&self, id: AgentId) -> Option<&AgentRecord> {
        usize::try_from(id.get())
            .ok()
            .and_then(|i| self.records.get(i))
            .map(|r| &**r)
    }

    fn status_of(&self, id: AgentId) -> Option<AgentStatus> {
        self.rec(id).map(|r| r.status)
    }

    /// What `id`'s outcome watchers see: its outcome once final (recorded, and not awaiting
    /// its owner's restart decision), else `None`.
    fn settled_value(&self, id: AgentId) -> Option<Outcome> {
        let (entry, record) = (self.entry(id)?, self.rec(id)?);
        (!entry.deferred && record.status.is_terminal())
            .then(|| record.outcome.clone())
            .flatten()
    }

    /// The last run of `id` that ended: its current one once its record is terminal, else
    /// the one before (0 before any ended).
    fn ended_value(&self, id: AgentId) -> u32 {
        match (self.entry(id), self.rec(id)) {
            (Some(entry), Some(record)) if record.status.is_terminal() => entry.runs,
            (Some(entry), Some(_)) => entry.runs - 1,
            _ => 0,
        }
    }

    /// A receiver of `id`'s outcome once final (see [`Inner::settled_value`]).
    fn watch_settled(&mut self, id: AgentId) -> Option<watch::Receiver<Option<Outcome>>> {
        let value = self.settled_value(id);
        let entry = self.entry_mut(id)?;
        Some(
            entry
                .settled
                .get_or_insert_with(|| watch::channel(value).0)
                .subscribe(),
        )
    }

    /// A receiver of the last run of `id` that ended (see [`Inner::ended_value`]).
    fn watch_ended(&mut self, id: AgentId) -> Option<watch::Receiver<u32>> {
        let value = self.ended_value(id);
        let entry = self.entry_mut(id)?;
        Some(
            entry
                .ended_run
                .get_or_insert_with(|| watch::channel(value).0)
                .subscribe(),
        )
    }

    /// Publishes `live` to [`Registry::idle`]'s watchers: the value always, a wake-up only
    /// when it reaches zero (the one value they wait for), not at every admission and settle.
    fn publish_live(&mut self) {
        let live = self.live;
        self.live_tx.send_if_modified(|value| {
            *value = live;
            live == 0
        });
    }

    /// Emits an event about an agent that has a record.
    fn emit(&mut self, agent: AgentId, kind: EventKind, now: u64) {
        let Some((parent, depth)) = self.rec(agent).map(|r| (r.parent, r.depth)) else {
            return;
        };
        self.emit_as(agent, parent, depth, kind, now);
    }

    /// Emits an event: the next sequence number, the record change it describes (the
    /// protocol's fold, the only writer of records), the tally, then every subscriber.
    fn emit_as(
        &mut self,
        agent: AgentId,
        parent: Option<AgentId>,
        depth: u32,
        kind: EventKind,
        now: u64,
    ) {
        if let Err(error) = self.try_emit_as(agent, parent, depth, kind, now) {
            // Every change is checked before it is emitted; an event the fold refuses is a bug
            // here, and is not sent (the records and the stream stay in step).
            debug_assert!(false, "registry event refused by the fold: {error}");
        }
    }

    /// Whether run `run` is `id`'s current run and has not settled: what may still be
    /// recorded of it (its usage, its text, its question).
    fn run_is_on(&self, id: AgentId, run: u32) -> bool {
        self.entry(id).is_some_and(|e| e.runs == run)
            && self.status_of(id).is_some_and(|s| !s.is_terminal())
    }

    /// Whether anyone but the records reads the events: a subscriber or the journal.
    fn listened(&self) -> bool {
        !self.subscribers.is_empty() || self.journal.is_some()
    }

    /// [`Inner::emit_as`] for an event whose change was not checked before (one folded in
    /// from another node's stream): a refused event changes nothing and is not sent.
    fn try_emit_as(
        &mut self,
        agent: AgentId,
        parent: Option<AgentId>,
        depth: u32,
        kind: EventKind,
        now: u64,
    ) -> Result<(), agent_tree_protocol::FoldError> {
        let event = Event {
            seq: self.seq + 1,
            agent,
            parent,
            depth,
            at_ms: now,
            kind,
        };
        if !self.listened() {
            // Nobody reads the event but the records: its texts move into them. (A subscriber
            // gone since the last event is dropped by the send below, so this path is taken
            // from the next event on.)
            let mut tally = self.tally.clone();
            tally.count(&event.kind);
            agent_tree_protocol::apply_owned(&mut self.records, event)?;
            self.tally = tally;
            self.seq += 1;
            return Ok(());
        }
        agent_tree_protocol::apply(&mut self.records, &event)?;
        self.seq = event.seq;
        self.tally.count(&event.kind);
        // The journal first (invariant 8): a subscriber woken by its send may ask for a
        // flush at once, on another thread, while this transaction still sends; the flush
        // must find the event already handed to the writer.
        if let Some(journal) = &self.journal {
            journal.event(&event);
        }
        // Sending on an unbounded channel never blocks; closed subscribers are dropped here.
        self.subscribers.retain(|tx| tx.send(event.clone()).is_ok());
        Ok(())
    }

    /// `id`'s final output was read: it joins the read outputs, and the retention policy
    /// releases what is due. Only in a journaled tree whose journal still writes (the
    /// journal is where a released output is read back from).
    fn output_read(&mut self, id: AgentId, now: u64) {
        if self.journal.as_ref().is_none_or(|j| j.failed()) {
            return;
        }
        let (Some(entry), Some(record)) = (self.entry(id), self.rec(id)) else {
            return;
        };
        let run = entry.runs;
        let bytes = match &record.outcome {
            Some(outcome)
                if record.status.is_terminal()
                    && !entry.deferred
                    && !outcome.released
                    && entry.output_read != run =>
            {
                outcome.output_bytes()
            }
            _ => return,
        };
        if bytes == 0 {
            return;
        }
        if let Some(entry) = self.entry_mut(id) {
            entry.output_read = run;
        }
        self.read_outputs.push_back(ReadOutput {
            agent: id,
            run,
            read: crate::policy::retention::Read {
                bytes,
                at_ms: now,
                seq: self.seq,
            },
        });
        self.read_bytes += bytes;
        self.release_read_outputs(now);
    }

    /// A new run of `id` begins: the output of its earlier run, if queued as read, is not
    /// held any more (the run's reopen clears it), so it leaves the queue and the count.
    fn forget_read_output(&mut self, id: AgentId) {
        if let Some(place) = self.read_outputs.iter().position(|r| r.agent == id) {
            if let Some(gone) = self.read_outputs.remove(place) {
                self.read_bytes -= gone.read.bytes;
            }
        }
    }

    /// Releases the read outputs the retention policy says are due at `now` and the journal
    /// has written: a `released` event each (the fold drops the output from the record), and
    /// the outcome watchers see the released outcome. Nothing once the tree has shut down.
    fn release_read_outputs(&mut self, now: u64) {
        if self
            .status_of(AgentId::ROOT)
            .is_some_and(|s| s.is_terminal())
        {
            // The tree has shut down: its journal is final, nothing more is written.
            return;
        }
        let Some((policy, written)) = self
            .journal
            .as_ref()
            .filter(|j| !j.failed())
            .map(|j| (j.outputs, j.written_seq()))
        else {
            return;
        };
        let due = crate::policy::retention::due(
            self.read_outputs.iter().map(|r| r.read),
            self.read_bytes,
            &policy,
            now,
            written,
        );
        if due.waits {
            // Due, but its line is not written yet: checked again once the writer has
            // appended.
            if let Some(journal) = &self.journal {
                journal.release_waits();
            }
        }
        for _ in 0..due.now {
            let Some(held) = self.read_outputs.pop_front() else {
                break;
            };
            self.read_bytes -= held.read.bytes;
            // An output read in an earlier run (the agent was resumed since) is gone already.
            let current = self
                .entry(held.agent)
                .is_some_and(|e| e.runs == held.run && !e.deferred)
                && self.rec(held.agent).is_some_and(|r| {
                    r.status.is_terminal() && r.outcome.as_ref().is_some_and(|o| !o.released)
                });
            if !current {
                continue;
            }
            let bytes = held.read.bytes as u64;
            self.emit(held.agent, EventKind::Released { bytes }, now);
            let value = self.settled_value(held.agent);
            if let Some(entry) = self.entry(held.agent) {
                entry.send_settled(value);
            }
        }
    }

    /// The live actors of the token subtree of `id` (itself and its non-detached
    /// descendants: exactly the agents a cancellation of its token reaches), to be told after
    /// the lock is released.
    fn token_subtree_actors(&self, id: AgentId) -> Vec<ActorCell> {
        let mut out = Vec::new();
        let mut stack = vec![id];
        while let Some(at) = stack.pop() {
            let (Some(entry), Some(record)) = (self.entry(at), self.rec(at)) else {
                continue;
            };
            if at != id && record.detached {
                continue;
            }
            stack.extend(record.children.iter().copied());
            if record.status.is_live() {
                out.extend(entry.actor.clone());
            }
        }
        out
    }
}

/// Sends `message()` to every actor of `cells` (after the registry lock is released).
fn tell(cells: Vec<ActorCell>, message: impl Fn() -> crate::msg::AgentMsg) {
    for cell in cells {
        // An actor that stopped meanwhile needs nothing.
        let _ = cell.send_message(message());
    }
}

#[cfg(test)]
pub(crate) mod tests;
