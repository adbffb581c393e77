//! The registry: the authoritative record of every agent, the usage ledger and the event bus.
//!
//! One mutex guards everything here, and nothing awaits while holding it. Every state change
//! of a record, its usage and the event announcing it happen under that one lock, so:
//!
//! # Invariants
//!
//! * Records are only ever added, never removed: a finished branch's records stay readable
//!   whatever other branches do.
//! * A terminal status is sticky: [`Registry::settle`] refuses a second terminal status.
//! * Usage is added to the agent's `own` and to the `subtree` of the agent and every ancestor
//!   in one step, so `subtree == own + Σ children.subtree` holds at every instant, not only
//!   at quiescence; and a child's last usage is in the ledger before its settle event, which
//!   is before its owner is told.
//! * Events get dense sequence numbers and reach every subscriber in that order (each
//!   subscriber has an unbounded queue: nothing is dropped).
//! * The live counts used by admission (`live`, each record's live children) change only
//!   here, together with the status that defines them.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use agent_tree_protocol::{
    AgentId, AgentRecord, AgentStatus, EndReason, Event, EventKind, EventTally, Message, Outcome,
    RequestId, SessionId, TreeSnapshot, Usage,
};
use parking_lot::Mutex;
use ractor::{ActorCell, ActorId};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{ControlScope, TreeConfig};
use crate::error::{ControlError, SpawnError};
use crate::events::EventStream;
use crate::policy::admission::{self, OwnerView, Slot};
use crate::policy::control;
use crate::policy::restart;
use crate::spawn::PendingStart;

/// The registry of one tree.
#[derive(Debug)]
pub(crate) struct Registry {
    session: SessionId,
    epoch: Instant,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The records, indexed by agent id (dense from the root's `a0`). Written only by
    /// [`Inner::emit`], which applies each event with the protocol's fold
    /// ([`agent_tree_protocol::apply`]): the event stream describes every record change.
    records: Vec<AgentRecord>,
    /// The runtime's side of each agent, indexed like `records`.
    entries: Vec<Entry>,
    /// ractor actor → agent, for supervision events.
    by_actor: HashMap<ActorId, AgentId>,
    /// (owner, request id) → child, for replay-safe spawns.
    by_request: HashMap<(AgentId, RequestId), AgentId>,
    tally: EventTally,
    seq: u64,
    /// Live agents (depth ≥ 1, admitted, not terminal).
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
}

#[derive(Debug)]
struct Entry {
    /// Cancelled to abort the agent; children's tokens are children of it (unless detached).
    token: CancellationToken,
    /// Why the agent was aborted, set by whoever cancelled `token` first.
    abort_reason: Option<EndReason>,
    actor: Option<ActorCell>,
    live_children: usize,
    /// Children spawned in its life (for `max_spawns_per_agent`).
    spawned: u32,
    /// Whether it takes a pool slot (top-level background).
    pooled: bool,
    /// How it was started: used to start a queued agent when a pool slot frees, and to
    /// re-run the original request on a restart.
    spec: Option<PendingStart>,
    /// It ended and its owner decides whether to restart it: its outcome is recorded but not
    /// yet final (watchers are not told, and it keeps its live slot).
    awaiting_supervisor: bool,
    /// Stopped by its owner's restart strategy: held for restart whatever its exit.
    held: bool,
    /// The deadline of a shutdown that reached it.
    shutdown: Option<Instant>,
    /// Shutdown hooks of it that failed.
    hook_failures: Vec<String>,
    /// Its shutdown hooks are running.
    hooks_running: bool,
    /// The task running its shutdown hooks, aborted if the deadline kills the agent.
    hook_task: Option<tokio::task::AbortHandle>,
    /// Its run ended (it takes no more model turns): steers are refused.
    run_over: bool,
    /// The last run that ended (0 before any): bumped by every settle, final or awaiting a
    /// restart decision, so an agent waiting on this one's run hears when it ends.
    ended_run: watch::Sender<u32>,
    /// Which run this is: 1 for the first, +1 for each restart and each resume. Spawn
    /// request ids derive from it, so a new run never finds an earlier run's children.
    runs: u32,
    /// Steers sent before its session existed, delivered in order when it starts.
    pending_steers: Vec<String>,
    /// Its conversation when it last settled, for resume.
    conversation: Option<Arc<Vec<Message>>>,
    /// Set once, when the agent settles; handles and waits watch it.
    settled: watch::Sender<Option<Outcome>>,
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
            awaiting_supervisor: false,
            held: false,
            shutdown: None,
            hook_failures: Vec::new(),
            hooks_running: false,
            hook_task: None,
            run_over: false,
            ended_run: watch::channel(0).0,
            runs: 1,
            pending_steers: Vec::new(),
            conversation: None,
            settled: watch::channel(None).0,
        }
    }

    /// Forgets what belonged to the run that ended: a new run (restart or resume) is not
    /// under an old shutdown, holds no old hooks and takes steers again.
    fn clear_run_marks(&mut self) {
        self.shutdown = None;
        self.held = false;
        self.hooks_running = false;
        self.hook_task = None;
        self.hook_failures.clear();
        self.run_over = false;
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

/// Where a steer goes.
#[derive(Debug)]
pub(crate) enum SteerRoute {
    /// Kept in the registry until the agent's session starts.
    Queued,
    /// To the agent's actor.
    Actor(ActorCell),
}

/// What [`Registry::begin_shutdown`] found.
#[derive(Debug, Default)]
pub(crate) struct ShutdownStart {
    /// Agents to wait for, with their run and a watch on their outcome.
    pub(crate) waiting: Vec<(AgentId, u32, watch::Receiver<Option<Outcome>>)>,
    /// Agents the shutdown settled at once (queued, or awaiting a restart decision).
    pub(crate) settled_now: Vec<AgentId>,
}

/// A settled agent reopened for a resumed run.
#[derive(Debug)]
pub(crate) struct Reopened {
    pub(crate) depth: u32,
    pub(crate) token: CancellationToken,
    pub(crate) start: PendingStart,
}

/// What [`Registry::admit`] needs to reserve a slot.
#[derive(Debug)]
pub(crate) struct Admission<'a> {
    pub(crate) owner: AgentId,
    pub(crate) agent_type: &'a str,
    pub(crate) request_id: Option<RequestId>,
    pub(crate) detached: bool,
    pub(crate) max_depth: u32,
    pub(crate) config: &'a TreeConfig,
    /// How the agent is started (kept for queued starts and restarts).
    pub(crate) spec: PendingStart,
    /// A top-level background agent: it takes a pool slot, and waits for one when the pool
    /// is full.
    pub(crate) pooled: bool,
}

/// The result of an admission.
#[derive(Debug)]
pub(crate) enum Admitted {
    /// A new record, with its id, depth and token.
    New {
        id: AgentId,
        depth: u32,
        token: CancellationToken,
    },
    /// A new record waiting for a pool slot; the root starts it when one frees.
    Queued(AgentId),
    /// The owner already spawned this request: the existing child.
    Existing(AgentId),
}

impl Registry {
    /// A registry holding only the root record.
    pub(crate) fn new(
        session: SessionId,
        root_token: CancellationToken,
        max_concurrent: usize,
    ) -> Self {
        let root = Entry::new(root_token);
        Registry {
            session,
            epoch: Instant::now(),
            inner: Mutex::new(Inner {
                records: vec![AgentRecord::root()],
                entries: vec![root],
                by_actor: HashMap::new(),
                by_request: HashMap::new(),
                tally: EventTally::default(),
                seq: 0,
                live: 0,
                peak_live: 0,
                subscribers: Vec::new(),
                live_tx: watch::channel(0).0,
                pool_running: 0,
                max_concurrent,
                pool_queue: VecDeque::new(),
            }),
        }
    }

    /// The tree's session.
    pub(crate) fn session(&self) -> &SessionId {
        &self.session
    }

    /// The instant every `*_ms` field counts from.
    pub(crate) fn epoch(&self) -> Instant {
        self.epoch
    }

    /// Milliseconds since the tree started, on tokio's clock.
    pub(crate) fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Reserves a slot for a child of `owner`, atomically: the owner must be accepting
    /// children, and the depth, width and total limits must hold. On success the record
    /// exists with status `starting`.
    pub(crate) fn admit(&self, admission: Admission<'_>) -> Result<Admitted, SpawnError> {
        let now = self.now_ms();
        let mut inner = self.inner.lock();
        if let Some(request_id) = &admission.request_id {
            if let Some(&existing) = inner.by_request.get(&(admission.owner, request_id.clone())) {
                return Ok(Admitted::Existing(existing));
            }
        }
        let (Some(owner), Some(owner_record)) =
            (inner.entry(admission.owner), inner.rec(admission.owner))
        else {
            return Err(SpawnError::OwnerClosed(admission.owner));
        };
        let depth = admission::admit(
            admission.config,
            admission.max_depth,
            &owner.owner_view(owner_record),
            inner.live,
        )?;
        let token = if admission.detached {
            inner.entries[0].token.child_token()
        } else {
            owner.token.child_token()
        };
        let pooled = admission.pooled;
        let slot = admission::slot(
            pooled,
            inner.pool_running,
            inner.max_concurrent,
            inner.pool_queue.len(),
        );
        let id = AgentId::new(inner.entries.len() as u64);
        let mut entry = Entry::new(token.clone());
        entry.pooled = pooled;
        entry.spec = Some(admission.spec);
        inner.entries.push(entry);
        let owner = inner
            .entry_mut(admission.owner)
            .expect("owner checked above");
        owner.live_children += 1;
        owner.spawned = owner.spawned.saturating_add(1);
        inner.live += 1;
        inner.peak_live = inner.peak_live.max(inner.live);
        inner.live_tx.send_replace(inner.live);
        if let Some(request_id) = &admission.request_id {
            inner
                .by_request
                .insert((admission.owner, request_id.clone()), id);
        }
        let (agent_type, request_id, detached) = (
            admission.agent_type.to_owned(),
            admission.request_id,
            admission.detached,
        );
        // The admission event creates the record (and its place in its owner's children).
        let (kind, admitted) = match slot {
            Slot::Run => {
                if pooled {
                    inner.pool_running += 1;
                }
                let kind = EventKind::Spawned {
                    agent_type,
                    request_id,
                    detached,
                };
                (kind, Admitted::New { id, depth, token })
            }
            Slot::Queue => {
                inner.pool_queue.push_back(id);
                let kind = EventKind::Queued {
                    agent_type,
                    request_id,
                    detached,
                };
                (kind, Admitted::Queued(id))
            }
        };
        inner.emit_as(id, Some(admission.owner), depth, kind, now);
        Ok(admitted)
    }

    /// Takes queued agents off the pool queue while slots are free, in FIFO order, moving
    /// them to `starting`; the caller starts their actors.
    pub(crate) fn pool_next(&self) -> Vec<(AgentId, CancellationToken, PendingStart)> {
        let now = self.now_ms();
        let mut inner = self.inner.lock();
        let mut out = Vec::new();
        while inner.pool_running < inner.max_concurrent {
            let Some(id) = inner.pool_queue.pop_front() else {
                break;
            };
            if inner.status_of(id) != Some(AgentStatus::Queued) {
                continue;
            }
            let Some(entry) = inner.entry(id) else {
                continue;
            };
            let Some(pending) = entry.spec.clone() else {
                continue;
            };
            let token = entry.token.clone();
            inner.emit(id, EventKind::Dequeued, now);
            inner.pool_running += 1;
            out.push((id, token, pending));
        }
        out
    }

    /// Resizes the pool; raising it lets [`Registry::pool_next`] start queued agents.
    pub(crate) fn set_max_concurrent(&self, max: usize) {
        self.inner.lock().max_concurrent = max.max(1);
    }

    /// Routes a steer: queued in the registry while the agent has no session yet, else to its
    /// actor.
    pub(crate) fn route_steer(
        &self,
        id: AgentId,
        text: String,
    ) -> Result<SteerRoute, ControlError> {
        let mut inner = self.inner.lock();
        let status = inner.status_of(id).ok_or(ControlError::NotYours(id))?;
        let entry = inner.entry_mut(id).ok_or(ControlError::NotYours(id))?;
        if status.is_terminal() || entry.run_over {
            return Err(ControlError::WrongStatus(id, status));
        }
        match &entry.actor {
            Some(actor) => Ok(SteerRoute::Actor(actor.clone())),
            None => {
                entry.pending_steers.push(text);
                Ok(SteerRoute::Queued)
            }
        }
    }

    /// Whether `caller` may control `target` under `scope`. A missing target and a foreign
    /// one give the same error.
    pub(crate) fn authorize(
        &self,
        caller: AgentId,
        target: AgentId,
        scope: ControlScope,
    ) -> Result<(), ControlError> {
        let inner = self.inner.lock();
        let parent_of = |id: AgentId| inner.rec(id).and_then(|r| r.parent);
        if control::reaches(scope, caller, target, parent_of) {
            Ok(())
        } else {
            Err(ControlError::NotYours(target))
        }
    }

    /// Whether `id` ended and waits for its owner's restart decision.
    pub(crate) fn awaiting_supervisor(&self, id: AgentId) -> bool {
        self.inner
            .lock()
            .entry(id)
            .is_some_and(|e| e.awaiting_supervisor)
    }

    /// The owner decided not to restart `id`: its outcome becomes final.
    pub(crate) fn release(&self, id: AgentId) {
        self.inner.lock().release(id);
    }

    /// Stops `id` for its owner's restart strategy: it will be held for restart whatever its
    /// exit.
    pub(crate) fn hold_and_abort(&self, id: AgentId) {
        let mut inner = self.inner.lock();
        let live = inner.status_of(id).is_some_and(AgentStatus::is_live);
        if let Some(entry) = inner.entry_mut(id) {
            if live {
                // One its owner or the application already aborted is not held: an abort is
                // never restarted.
                entry.held = entry.abort_reason.is_none();
                entry.abort_reason.get_or_insert(EndReason::Aborted);
                entry.token.cancel();
            }
        }
    }

    /// Restarts `id` (which awaits its owner's decision): a new incarnation of the same
    /// agent, re-running its original request, with its usage kept. Returns what its actor
    /// needs.
    pub(crate) fn restart(&self, id: AgentId) -> Option<(u32, CancellationToken, PendingStart)> {
        let now = self.now_ms();
        let mut inner = self.inner.lock();
        let entry = inner.entry(id)?;
        if !entry.awaiting_supervisor {
            return None;
        }
        let record = inner.rec(id)?;
        let (parent, depth, incarnation) = (record.parent?, record.depth, record.incarnation + 1);
        let token = if record.detached {
            inner.entries[0].token.child_token()
        } else {
            inner.entry(parent)?.token.child_token()
        };
        let entry = inner.entry_mut(id)?;
        let spec = entry.spec.clone()?;
        entry.awaiting_supervisor = false;
        entry.held = false;
        entry.runs += 1;
        entry.clear_run_marks();
        entry.token = token.clone();
        entry.abort_reason = None;
        entry.actor = None;
        inner.emit(id, EventKind::Restarted { incarnation }, now);
        Some((depth, token, spec))
    }

    /// Tells every live agent of the subtree of `top` (detached descendants included) that a
    /// shutdown with `deadline` reached it, and aborts them all at once. Queued agents settle
    /// at once; agents awaiting a restart decision become final. With `top` the root, the
    /// tree stops admitting top-level agents.
    pub(crate) fn begin_shutdown(&self, top: AgentId, deadline: Instant) -> ShutdownStart {
        let now = self.now_ms();
        let mut inner = self.inner.lock();
        // The whole tree's shutdown closes the root to new agents; a root that already failed
        // (escalation) stays failed: terminal is sticky.
        if top.is_root() && inner.status_of(AgentId::ROOT) == Some(AgentStatus::Running) {
            inner.emit(AgentId::ROOT, EventKind::Completing, now);
        }
        let mut stack = vec![top];
        let mut start = ShutdownStart::default();
        while let Some(id) = stack.pop() {
            let Some(record) = inner.rec(id) else {
                continue;
            };
            stack.extend(record.children.iter().copied());
            let status = record.status;
            if id.is_root() {
                continue;
            }
            let Some(entry) = inner.entry_mut(id) else {
                continue;
            };
            if entry.awaiting_supervisor {
                inner.release(id);
                start.settled_now.push(id);
                continue;
            }
            if status.is_terminal() {
                continue;
            }
            entry.shutdown = Some(deadline);
            entry.abort_reason.get_or_insert(EndReason::Shutdown);
            entry.token.cancel();
            if status == AgentStatus::Queued {
                inner.settle(
                    id,
                    Outcome::ended(AgentStatus::Aborted, EndReason::Shutdown),
                    now,
                );
                start.settled_now.push(id);
            } else {
                start
                    .waiting
                    .push((id, entry.runs, entry.settled.subscribe()));
            }
        }
        start
    }

    /// At a shutdown's deadline: if `id` is still in run `run` and live, settles it killed
    /// (for good) and returns its actor to kill. A run started after the shutdown began (a
    /// resume) is not the shutdown's to kill.
    pub(crate) fn kill_run(&self, id: AgentId, run: u32) -> Option<Option<ActorCell>> {
        let now = self.now_ms();
        let mut inner = self.inner.lock();
        let entry = inner.entry(id)?;
        if entry.runs != run || inner.status_of(id)?.is_terminal() {
            return None;
        }
        let actor = entry.actor.clone();
        inner.settle_final(
            id,
            Outcome::ended(AgentStatus::Killed, EndReason::Killed),
            now,
        );
        Some(actor)
    }

    /// The actor of `id` while it is still in run `run`.
    pub(crate) fn run_actor(&self, id: AgentId, run: u32) -> Option<ActorCell> {
        let inner = self.inner.lock();
        inner
            .entry(id)
            .filter(|e| e.runs == run)
            .and_then(|e| e.actor.clone())
    }

    /// Whether `id` is still in run `run` and ended killed.
    pub(crate) fn killed_in_run(&self, id: AgentId, run: u32) -> bool {
        let inner = self.inner.lock();
        inner.status_of(id) == Some(AgentStatus::Killed)
            && inner.entry(id).is_some_and(|e| e.runs == run)
    }

    /// The deadline of a shutdown that reached `id`.
    pub(crate) fn shutdown_deadline(&self, id: AgentId) -> Option<Instant> {
        self.inner.lock().entry(id).and_then(|e| e.shutdown)
    }

    /// Notes that `id`'s shutdown hooks started, in the task `task`.
    pub(crate) fn hooks_started(&self, id: AgentId, task: tokio::task::AbortHandle) {
        if let Some(entry) = self.inner.lock().entry_mut(id) {
            entry.hooks_running = true;
            entry.hook_task = Some(task);
        }
    }

    /// `id`'s run ended: it takes no more turns, so steers to it are refused from now on.
    pub(crate) fn run_ended(&self, id: AgentId) {
        if let Some(entry) = self.inner.lock().entry_mut(id) {
            entry.run_over = true;
        }
    }

    /// `id`'s current run and a receiver of the last run of it that ended.
    pub(crate) fn watch_runs(&self, id: AgentId) -> Option<(u32, watch::Receiver<u32>)> {
        let inner = self.inner.lock();
        inner.entry(id).map(|e| (e.runs, e.ended_run.subscribe()))
    }

    /// Which run of `id` this is (1 for its first).
    pub(crate) fn run_of(&self, id: AgentId) -> u32 {
        self.inner.lock().entry(id).map_or(1, |e| e.runs)
    }

    /// Records that `id`'s shutdown hooks finished, with their failures.
    pub(crate) fn add_hook_failures(&self, id: AgentId, failures: Vec<String>) {
        if let Some(entry) = self.inner.lock().entry_mut(id) {
            entry.hooks_running = false;
            entry.hook_task = None;
            entry.hook_failures.extend(failures);
        }
    }

    /// Of agents killed at a shutdown deadline, records a failure for each whose hooks were
    /// still running.
    pub(crate) fn hooks_cut_off(&self, killed: &[AgentId]) {
        let mut inner = self.inner.lock();
        for &id in killed {
            if let Some(entry) = inner.entry_mut(id) {
                // The hooks die with their agent: nothing of it outlives the shutdown.
                if let Some(task) = entry.hook_task.take() {
                    task.abort();
                }
                if std::mem::take(&mut entry.hooks_running) {
                    entry
                        .hook_failures
                        .push("shutdown hook still running at the deadline; killed".to_owned());
                }
            }
        }
    }

    /// Failed shutdown hooks of `ids`.
    pub(crate) fn hook_failures(&self, ids: &[AgentId]) -> Vec<(AgentId, String)> {
        let inner = self.inner.lock();
        ids.iter()
            .filter_map(|&id| inner.entry(id).map(|e| (id, e)))
            .flat_map(|(id, e)| e.hook_failures.iter().map(move |f| (id, f.clone())))
            .collect()
    }

    /// Forgets the actor behind a terminated ractor actor (its cell is no longer kept).
    pub(crate) fn actor_exited(&self, actor: ActorId) {
        let mut inner = self.inner.lock();
        if let Some(id) = inner.by_actor.remove(&actor) {
            if let Some(entry) = inner.entry_mut(id) {
                if entry.actor.as_ref().is_some_and(|a| a.get_id() == actor) {
                    entry.actor = None;
                }
            }
        }
    }

    /// Agents whose ractor actor is still alive, asking ractor (not our records).
    pub(crate) fn alive_actors(&self) -> Vec<AgentId> {
        let inner = self.inner.lock();
        inner
            .entries
            .iter()
            .zip(&inner.records)
            .filter(|(e, _)| {
                e.actor
                    .as_ref()
                    .is_some_and(|a| a.get_status() != ractor::ActorStatus::Stopped)
            })
            .map(|(_, r)| r.id)
            .collect()
    }

    /// Actors of the subtree of `top` (detached descendants included) whose agent is terminal
    /// but whose actor has not exited yet: settled and stopping, or killed with its owner.
    pub(crate) fn settled_but_alive(&self, top: AgentId) -> Vec<ActorCell> {
        let inner = self.inner.lock();
        let mut out = Vec::new();
        let mut stack = vec![top];
        while let Some(id) = stack.pop() {
            let (Some(entry), Some(record)) = (inner.entry(id), inner.rec(id)) else {
                continue;
            };
            stack.extend(record.children.iter().copied());
            if let Some(actor) = entry.actor.as_ref().filter(|_| record.status.is_terminal()) {
                if actor.get_status() != ractor::ActorStatus::Stopped {
                    out.push(actor.clone());
                }
            }
        }
        out
    }

    /// The actors of `ids` that are still alive.
    pub(crate) fn actors_of(&self, ids: &[AgentId]) -> Vec<(AgentId, ActorCell)> {
        let inner = self.inner.lock();
        ids.iter()
            .filter_map(|&id| {
                inner
                    .entry(id)
                    .and_then(|e| e.actor.clone().map(|a| (id, a)))
            })
            .collect()
    }

    /// Records the context an agent inherited in its start spec, so a restart re-runs it.
    pub(crate) fn set_inherited_context(&self, id: AgentId, context: &[Message]) {
        if let Some(spec) = self
            .inner
            .lock()
            .entry_mut(id)
            .and_then(|e| e.spec.as_mut())
        {
            spec.context = context.to_vec();
        }
    }

    /// Keeps `id`'s conversation for a later resume.
    pub(crate) fn keep_conversation(&self, id: AgentId, conversation: Vec<Message>) {
        if let Some(entry) = self.inner.lock().entry_mut(id) {
            entry.conversation = Some(Arc::new(conversation));
        }
    }

    /// Reopens settled agent `id` for a resumed run under its owner `owner`, with a new
    /// `prompt` after its kept conversation. It runs with the definition and branch (catalog,
    /// depth cap) it was started with, and the same admission limits apply as for a new
    /// child. Nothing changes when it is refused; otherwise its record goes back to
    /// `starting`, its outcome is cleared and a `resumed` event is emitted.
    pub(crate) fn reopen(
        &self,
        id: AgentId,
        owner: AgentId,
        config: &TreeConfig,
        prompt: String,
    ) -> Result<Reopened, SpawnError> {
        let now = self.now_ms();
        let mut inner = self.inner.lock();
        let not_yours = || SpawnError::Control(ControlError::NotYours(id));
        let entry = inner.entry(id).ok_or_else(not_yours)?;
        let record = inner.rec(id).ok_or_else(not_yours)?;
        if record.parent != Some(owner) {
            return Err(not_yours());
        }
        if record.status.is_live() || entry.awaiting_supervisor {
            return Err(SpawnError::Control(ControlError::WrongStatus(
                id,
                record.status,
            )));
        }
        let Some(spec) = entry.spec.clone() else {
            return Err(not_yours());
        };
        let conversation = entry.conversation.as_deref().cloned().unwrap_or_default();
        let detached = record.detached;
        let (Some(owner_entry), Some(owner_record)) = (inner.entry(owner), inner.rec(owner)) else {
            return Err(SpawnError::OwnerClosed(owner));
        };
        let mut view = owner_entry.owner_view(owner_record);
        // A resume is not a new spawn: it does not count against the lifetime budget.
        view.spawned = 0;
        let depth = admission::admit(config, spec.branch.max_depth, &view, inner.live)?;
        let token = if detached {
            inner.entries[0].token.child_token()
        } else {
            owner_entry.token.child_token()
        };
        let entry = inner.entry_mut(id).expect("checked above");
        entry.runs += 1;
        entry.clear_run_marks();
        // A resumed run bypasses the pool, like any run its owner waits on.
        entry.pooled = false;
        entry.token = token.clone();
        entry.abort_reason = None;
        entry.actor = None;
        entry.settled.send_replace(None);
        if let Some(owner) = inner.entry_mut(owner) {
            owner.live_children += 1;
        }
        inner.live += 1;
        inner.peak_live = inner.peak_live.max(inner.live);
        inner.live_tx.send_replace(inner.live);
        inner.emit(id, EventKind::Resumed, now);
        let start = PendingStart {
            prompt,
            context: conversation,
            resumed: true,
            ..spec
        };
        Ok(Reopened {
            depth,
            token,
            start,
        })
    }

    /// Marks `id` running on `actor`, announces its first start, and hands over the steers
    /// that arrived before its session existed, in order.
    ///
    /// `None` when the record settled before its actor got here (a shutdown deadline or an
    /// abort of a starting agent): the actor must not start.
    pub(crate) fn started(&self, id: AgentId, actor: ActorCell) -> Option<Vec<String>> {
        let now = self.now_ms();
        let mut inner = self.inner.lock();
        let record = inner.rec(id)?;
        if record.status.is_terminal() {
            return None;
        }
        let kind = EventKind::Started {
            agent_type: record.agent_type.clone(),
            incarnation: record.incarnation,
        };
        inner.by_actor.insert(actor.get_id(), id);
        let entry = inner.entry_mut(id)?;
        entry.actor = Some(actor);
        let steers = std::mem::take(&mut entry.pending_steers);
        inner.emit(id, kind, now);
        Some(steers)
    }

    /// Moves a live agent to `completing` (its run ended, its children drain).
    pub(crate) fn completing(&self, id: AgentId) {
        let now = self.now_ms();
        let mut inner = self.inner.lock();
        if inner
            .status_of(id)
            .is_some_and(|s| s.advance(AgentStatus::Completing).is_ok())
        {
            inner.emit(id, EventKind::Completing, now);
        }
    }

    /// Records one model turn's usage of run `run` on `id` and every ancestor, and announces
    /// it. Nothing of an agent is recorded after its terminal event: a turn that returns after
    /// its run settled (its actor was killed meanwhile, or it was restarted) is dropped, with
    /// a warning, so the records and the event stream always agree.
    pub(crate) fn add_usage(&self, id: AgentId, run: u32, delta: Usage) {
        let now = self.now_ms();
        let mut inner = self.inner.lock();
        let (Some(entry), Some(status)) = (inner.entry(id), inner.status_of(id)) else {
            return;
        };
        if entry.runs != run || status.is_terminal() {
            drop(inner);
            tracing::warn!(agent = %id, run, ?delta, "usage of a turn that returned after its run settled is dropped");
            return;
        }
        // The fold adds the delta to the agent's own and every ancestor's subtree.
        inner.emit(id, EventKind::UsageReported { delta }, now);
    }

    /// Announces an event about `id` that changes no record.
    pub(crate) fn announce(&self, id: AgentId, kind: EventKind) {
        let now = self.now_ms();
        self.inner.lock().emit(id, kind, now);
    }

    /// Settles `id` with `outcome` (terminal), unless it is terminal already.
    /// Returns whether this call settled it.
    pub(crate) fn settle(&self, id: AgentId, outcome: Outcome) -> bool {
        let now = self.now_ms();
        let mut inner = self.inner.lock();
        inner.settle(id, outcome, now)
    }

    /// Settles every live descendant of `id` as killed (their actors were killed by ractor
    /// when `id`'s actor died) and cancels their tokens so their tasks end.
    pub(crate) fn kill_descendants(&self, id: AgentId) {
        let now = self.now_ms();
        let mut inner = self.inner.lock();
        let mut stack: Vec<AgentId> = inner
            .rec(id)
            .map(|r| r.children.clone())
            .unwrap_or_default();
        while let Some(child) = stack.pop() {
            let (Some(entry), Some(record)) = (inner.entry(child), inner.rec(child)) else {
                continue;
            };
            // A detached subtree is linked under the root actor, so it was not killed.
            if record.detached {
                continue;
            }
            stack.extend(record.children.iter().copied());
            entry.token.cancel();
            inner.settle_final(
                child,
                Outcome::ended(AgentStatus::Killed, EndReason::Killed),
                now,
            );
        }
    }

    /// Settles `id` for good: no owner is left to restart it.
    pub(crate) fn settle_final(&self, id: AgentId, outcome: Outcome) -> bool {
        let now = self.now_ms();
        self.inner.lock().settle_final(id, outcome, now)
    }

    /// Aborts `id`: records why (first reason wins) and cancels its token, which reaches its
    /// whole non-detached subtree at once.
    pub(crate) fn abort(&self, id: AgentId, reason: EndReason) -> Result<(), ControlError> {
        let mut inner = self.inner.lock();
        let now = self.now_ms();
        let queued = inner.status_of(id) == Some(AgentStatus::Queued);
        let entry = inner.entry_mut(id).ok_or(ControlError::NotYours(id))?;
        entry.abort_reason.get_or_insert(reason);
        entry.token.cancel();
        let release = entry.awaiting_supervisor && !entry.held;
        if queued {
            // No actor exists to settle it: it never starts.
            inner.settle(id, Outcome::ended(AgentStatus::Aborted, reason), now);
        } else if release {
            // An abort is never restarted: an exit awaiting a restart decision becomes final.
            inner.release(id);
        }
        Ok(())
    }

    /// Why `id` was aborted, if it was aborted itself (not through an ancestor).
    pub(crate) fn abort_reason(&self, id: AgentId) -> Option<EndReason> {
        self.inner.lock().entry(id).and_then(|e| e.abort_reason)
    }

    /// A ractor actor ended (`failure` set when it failed). If it is the current actor of a
    /// live agent, that agent died without settling: it is settled as failed or killed, and
    /// its live descendants, which ractor killed with it, as killed. The actor is forgotten.
    /// Returns the agent when the actor was its current one (a stale incarnation's actor
    /// returns `None`).
    pub(crate) fn lost_actor(&self, actor: ActorId, failure: Option<String>) -> Option<AgentId> {
        let id = {
            let mut inner = self.inner.lock();
            let id = inner.by_actor.remove(&actor)?;
            let entry = inner.entry_mut(id)?;
            if entry.actor.as_ref().is_none_or(|a| a.get_id() != actor) {
                return None;
            }
            entry.actor = None;
            // Its tasks (model turn, tools, watcher, shutdown hooks) outlive a dead actor
            // unless told.
            entry.token.cancel();
            if let Some(task) = entry.hook_task.take() {
                task.abort();
            }
            id
        };
        // Its linked descendants died with it (ractor kills them), whatever its own record
        // says: a run's actor can be killed after its record settled.
        self.kill_descendants(id);
        if self.status(id).is_some_and(AgentStatus::is_live) {
            let outcome = match failure {
                Some(error) => {
                    tracing::warn!(agent = %id, %error, "agent actor failed");
                    Outcome::failed(EndReason::ActorFailed, error)
                }
                None => Outcome::ended(AgentStatus::Killed, EndReason::Killed),
            };
            self.settle(id, outcome);
        }
        Some(id)
    }

    /// The children of `owner` in start order, with whether each is live.
    pub(crate) fn children_of(&self, owner: AgentId) -> Vec<(AgentId, bool)> {
        let inner = self.inner.lock();
        inner
            .rec(owner)
            .map(|r| {
                r.children
                    .iter()
                    .filter_map(|&c| inner.rec(c))
                    .filter(|c| !c.detached)
                    // A queued sibling has nothing to stop or restart: it stays queued.
                    .map(|c| (c.id, c.status.is_live() && c.status != AgentStatus::Queued))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The restart type `id` was started with.
    pub(crate) fn restart_policy(&self, id: AgentId) -> agent_tree_protocol::RestartPolicy {
        self.inner
            .lock()
            .entry(id)
            .and_then(|e| e.spec.as_ref().map(|s| s.definition.restart))
            .unwrap_or_default()
    }

    /// The tree's top supervisor exceeded its restart intensity: the root fails with `cause`
    /// and every agent is aborted.
    pub(crate) fn fail_root(&self, cause: String) {
        let now = self.now_ms();
        let mut inner = self.inner.lock();
        let root = &mut inner.entries[0];
        root.abort_reason.get_or_insert(EndReason::Escalated);
        root.token.cancel();
        inner.settle(
            AgentId::ROOT,
            Outcome::failed(EndReason::Escalated, cause),
            now,
        );
        // Nobody is left to restart anything.
        let top_level = inner.records[0].children.clone();
        for id in top_level {
            inner.release(id);
        }
    }

    /// A copy of `id`'s record.
    pub(crate) fn record(&self, id: AgentId) -> Option<AgentRecord> {
        self.inner.lock().rec(id).cloned()
    }

    /// `id`'s status.
    pub(crate) fn status(&self, id: AgentId) -> Option<AgentStatus> {
        self.inner.lock().status_of(id)
    }

    /// `id`'s outcome, once settled.
    pub(crate) fn outcome(&self, id: AgentId) -> Option<Outcome> {
        // An exit awaiting its owner's restart decision is not an outcome yet.
        let inner = self.inner.lock();
        inner
            .entry(id)
            .filter(|e| !e.awaiting_supervisor)
            .and_then(|_| inner.rec(id)?.outcome.clone())
    }

    /// A receiver that sees `id`'s outcome once it settles.
    pub(crate) fn watch(&self, id: AgentId) -> Option<watch::Receiver<Option<Outcome>>> {
        self.inner.lock().entry(id).map(|e| e.settled.subscribe())
    }

    /// Live agents (depth ≥ 1).
    pub(crate) fn live(&self) -> usize {
        self.inner.lock().live
    }

    /// Waits until no agent is live.
    pub(crate) async fn idle(&self) {
        let mut live = self.inner.lock().live_tx.subscribe();
        // The sender lives as long as the registry, which `&self` keeps alive.
        let _ = live.wait_for(|&n| n == 0).await;
    }

    /// Subscribes to every event from now on.
    pub(crate) fn subscribe(&self) -> EventStream {
        let (tx, rx) = mpsc::unbounded_channel();
        self.inner.lock().subscribers.push(tx);
        EventStream::new(rx)
    }

    /// The whole tree as it is now.
    pub(crate) fn snapshot(&self) -> TreeSnapshot {
        let now = self.now_ms();
        let inner = self.inner.lock();
        TreeSnapshot {
            session: self.session.clone(),
            taken_ms: now,
            records: inner.records.clone(),
            tally: inner.tally.clone(),
            peak_live: inner.peak_live,
        }
    }

    /// Settles the root (the tree stopped).
    pub(crate) fn settle_root(&self) {
        let now = self.now_ms();
        let mut inner = self.inner.lock();
        if inner
            .status_of(AgentId::ROOT)
            .is_some_and(AgentStatus::is_live)
        {
            let outcome = Outcome::ended(AgentStatus::Completed, EndReason::Shutdown);
            inner.emit(AgentId::ROOT, EventKind::settled(outcome.clone()), now);
            inner.entries[0].settled.send_replace(Some(outcome));
        }
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
    }

    fn status_of(&self, id: AgentId) -> Option<AgentStatus> {
        self.rec(id).map(|r| r.status)
    }

    fn settle(&mut self, id: AgentId, outcome: Outcome, now: u64) -> bool {
        let Some(before) = self.status_of(id) else {
            return false;
        };
        if before.advance(outcome.status).is_err() {
            return false;
        }
        let Some(entry) = self.entry(id) else {
            return false;
        };
        let runs = entry.runs;
        // An exit its owner may restart stays open until the owner decides; a shutdown
        // decides for everyone: nothing restarts.
        let policy = entry
            .spec
            .as_ref()
            .map(|s| s.definition.restart)
            .unwrap_or_default();
        let restartable = entry.held || restart::restart_wanted(policy, &outcome);
        let under_shutdown = entry.shutdown.is_some();
        let (parent, detached) = self
            .rec(id)
            .map(|r| (r.parent, r.detached))
            .unwrap_or_default();
        // The terminal event writes status, end time and outcome.
        self.emit(id, EventKind::settled(outcome.clone()), now);
        let Some(entry) = self.entry_mut(id) else {
            return false;
        };
        entry.ended_run.send_replace(runs);
        if id.is_root() {
            entry.settled.send_replace(Some(outcome));
            return true;
        }
        // Only a live owner decides, and only for its supervised (non-detached) children:
        // a detached agent, or one whose owner is gone, has no one to restart it.
        // A detached top-level agent is the root's anyway (it is linked under the root).
        let supervised = (!detached || parent == Some(AgentId::ROOT)) && !under_shutdown;
        let owner_live = parent.is_some_and(|p| {
            self.status_of(p).is_some_and(AgentStatus::is_live)
                && self.entry(p).is_some_and(|o| !o.token.is_cancelled())
        });
        let defer = restartable && supervised && owner_live;
        if let Some(entry) = self.entry_mut(id) {
            entry.awaiting_supervisor = defer;
        }
        if !defer {
            self.finalize(id, before);
        }
        true
    }

    fn settle_final(&mut self, id: AgentId, outcome: Outcome, now: u64) -> bool {
        let settled = self.settle(id, outcome, now);
        self.release(id);
        settled
    }

    /// Makes an outcome that awaits its owner's restart decision final.
    fn release(&mut self, id: AgentId) {
        if self.entry(id).is_some_and(|e| e.awaiting_supervisor) {
            if let Some(status) = self.status_of(id) {
                self.finalize(id, status);
            }
        }
    }

    /// Makes `id`'s recorded outcome final: watchers are told, and its live slot (and pool
    /// slot) is released.
    fn finalize(&mut self, id: AgentId, before: AgentStatus) {
        let (outcome, parent) = match self.rec(id) {
            Some(r) => (r.outcome.clone(), r.parent),
            None => return,
        };
        let Some(entry) = self.entry_mut(id) else {
            return;
        };
        entry.awaiting_supervisor = false;
        entry.held = false;
        entry.settled.send_replace(outcome);
        let pooled = entry.pooled;
        self.live = self.live.saturating_sub(1);
        self.live_tx.send_replace(self.live);
        if pooled {
            if before == AgentStatus::Queued {
                self.pool_queue.retain(|&q| q != id);
            } else {
                self.pool_running = self.pool_running.saturating_sub(1);
            }
        }
        if let Some(parent) = parent.and_then(|p| self.entry_mut(p)) {
            parent.live_children = parent.live_children.saturating_sub(1);
        }
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
        let event = Event {
            seq: self.seq + 1,
            agent,
            parent,
            depth,
            at_ms: now,
            kind,
        };
        if let Err(error) = agent_tree_protocol::apply(&mut self.records, &event) {
            // The registry checks every change before it emits it; an event the fold refuses
            // is a bug here, and is not emitted (the records and the stream stay in step).
            tracing::error!(%error, "registry event refused by the fold");
            debug_assert!(false, "registry event refused by the fold: {error}");
            return;
        }
        self.seq = event.seq;
        self.tally.count(&event.kind);
        tracing::debug!(seq = event.seq, agent = %agent, event = event.kind.name(), "agent event");
        // Sending on an unbounded channel never blocks; closed subscribers are dropped here.
        self.subscribers.retain(|tx| tx.send(event.clone()).is_ok());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use agent_tree_protocol::{AgentDefinition, RestartPolicy, SettlePolicy};

    use super::*;
    use crate::catalog::Catalog;
    use crate::shared::Branch;

    fn spec(restart: RestartPolicy) -> PendingStart {
        PendingStart {
            definition: Arc::new(AgentDefinition::new("w", "").with_restart(restart)),
            branch: Arc::new(Branch {
                catalog: Catalog::default(),
                max_depth: 5,
            }),
            prompt: String::new(),
            settle: SettlePolicy::AbortChildren,
            context: Vec::new(),
            resumed: false,
            detached: false,
            owner_capabilities: None,
        }
    }

    fn admit(registry: &Registry, restart: RestartPolicy) -> AgentId {
        let config = TreeConfig::default();
        match registry.admit(Admission {
            owner: AgentId::ROOT,
            agent_type: "w",
            request_id: None,
            detached: false,
            max_depth: 5,
            config: &config,
            spec: spec(restart),
            pooled: false,
        }) {
            Ok(Admitted::New { id, .. }) => id,
            other => panic!("not admitted: {other:?}"),
        }
    }

    fn failed() -> Outcome {
        Outcome::failed(EndReason::ModelError, "boom")
    }

    #[tokio::test(start_paused = true)]
    async fn a_restartable_exit_awaits_its_owner_and_is_no_outcome_yet() {
        let registry = Registry::new(SessionId::new("s"), CancellationToken::new(), 10);
        let id = admit(&registry, RestartPolicy::Transient);
        assert!(registry.settle(id, failed()));
        assert!(registry.awaiting_supervisor(id));
        assert_eq!(registry.outcome(id), None, "not final while awaiting");
        assert_eq!(registry.live(), 1, "keeps its slot");
        let (_, _, _) = registry.restart(id).expect("restartable");
        assert_eq!(registry.record(id).unwrap().incarnation, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_abort_makes_an_awaiting_exit_final() {
        let registry = Registry::new(SessionId::new("s"), CancellationToken::new(), 10);
        let id = admit(&registry, RestartPolicy::Permanent);
        registry.settle(id, failed());
        registry.abort(id, EndReason::Aborted).unwrap();
        assert!(!registry.awaiting_supervisor(id));
        assert_eq!(registry.outcome(id), Some(failed()));
        assert_eq!(registry.live(), 0);
        assert!(
            registry.restart(id).is_none(),
            "an abort is never restarted"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn temporary_exits_are_final_at_once() {
        let registry = Registry::new(SessionId::new("s"), CancellationToken::new(), 10);
        let id = admit(&registry, RestartPolicy::Temporary);
        registry.settle(id, failed());
        assert!(!registry.awaiting_supervisor(id));
        assert_eq!(registry.outcome(id), Some(failed()));
        assert!(
            !registry.settle(id, Outcome::completed("late")),
            "terminal is sticky"
        );
    }
}
