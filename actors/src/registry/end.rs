//! How runs end in the records: settles, losses of actors, aborts and kills, and the marks a
//! shutdown leaves. Messages to actors (`Cancel`, `Shutdown`) are collected under the lock and
//! sent after it.

use std::sync::Arc;

use agent_tree_protocol::{AgentId, AgentStatus, EndReason, EventKind, Message, Outcome, Usage};
use ractor::{ActorCell, ActorId};
use tokio::sync::watch;

use super::{Inner, Origin, Registry, tell};
use crate::error::ControlError;
use crate::msg::{AgentMsg, ShutdownOrder};
use crate::policy::restart;

/// What [`Registry::settle_run`] did.
#[derive(Debug)]
pub(crate) struct Settled {
    /// The exit awaits the owner's restart decision (not final yet).
    pub(crate) deferred: bool,
    /// The owner's current actor, to tell.
    pub(crate) owner: Option<ActorCell>,
}

/// What [`Registry::kill_runs`] did.
#[derive(Debug, Default)]
pub(crate) struct KilledRuns {
    /// The agents it settled killed, in the order of the runs.
    pub(crate) killed: Vec<AgentId>,
    /// The actors to kill: those whose owner was not killed with them.
    pub(crate) tops: Vec<ActorCell>,
    /// Every actor of the runs.
    pub(crate) actors: Vec<ActorCell>,
    /// For each run, whether it ended killed (here, by an overlapping shutdown or by
    /// `Tree::kill`): every run is settled now, and a settled run's end never changes.
    pub(crate) ended_killed: Vec<bool>,
}

/// What [`Registry::begin_shutdown`] found.
#[derive(Debug, Default)]
pub(crate) struct ShutdownStart {
    /// Agents to wait for, with their run.
    pub(crate) waiting: Vec<(AgentId, u32)>,
    /// How many of `waiting` are not final yet: counted down as each becomes final.
    pub(crate) left: Option<watch::Receiver<usize>>,
    /// Agents the shutdown settled at once (queued, or awaiting a restart decision).
    pub(crate) settled_now: Vec<AgentId>,
}

impl Registry {
    /// Run `run` of `id` ended with `outcome` (its actor settles it, after its last usage):
    /// records the outcome and the conversation to resume from, and decides (the pure restart
    /// rule) whether the exit waits for its owner's restart decision. Returns `None` when the
    /// run was already settled (a kill at a deadline got there first) or is not current.
    pub(crate) fn settle_run(
        &self,
        id: AgentId,
        run: u32,
        outcome: Outcome,
        conversation: impl Into<Arc<[Message]>>,
    ) -> Option<Settled> {
        let now = self.now_ms();
        let conversation: Arc<[Message]> = conversation.into();
        let mut inner = self.lock();
        let entry = inner.entry(id)?;
        if entry.runs != run {
            return None;
        }
        if let Some(record) = inner.rec(id) {
            // Before the terminal event `settle` emits: a hosted tree's edge has the
            // conversation the run ended with when that event comes.
            self.tap_at(id, record.depth, &conversation, inner.seq);
        }
        let entry = inner.entry(id)?;
        // The conversation the cell held is freed after the registry lock is released.
        let replaced = std::mem::replace(&mut entry.conversation.lock().messages, conversation);
        let actor = entry.actor.as_ref().map(|a| a.get_id());
        if !inner.settle(id, outcome, now) {
            return None;
        }
        if let Some(actor) = actor {
            // It settled itself and tells its owner: nobody needs to find it by its actor.
            inner.by_actor.remove(&actor);
        }
        let deferred = inner.entry(id).is_some_and(|e| e.deferred);
        let mut dropped = None;
        if let Some(journal) = inner.journal.clone() {
            // The run's last conversation (its final answer, steers it never read): what a
            // resume continues, after a crash too.
            let drop_it = !journal.retain_conversations && !deferred && !journal.failed();
            if let Some(entry) = inner.entry_mut(id) {
                let last = entry.conversation.lock().messages.clone();
                journal.conversation(id, run, 0, &last);
                if drop_it {
                    // Final, and the journal holds it: memory does not keep it.
                    dropped = Some(std::mem::take(&mut entry.conversation.lock().messages));
                    entry.conversation_journaled = true;
                }
            }
        }
        if !inner.read_outputs.is_empty() {
            // Outputs read long enough ago go at the next settle, not only at the next read.
            inner.release_read_outputs(now);
        }
        let owner = inner
            .rec(id)
            .and_then(|r| r.parent)
            .and_then(|p| inner.entry(p))
            .and_then(|o| o.actor.clone());
        drop(inner);
        drop(replaced);
        drop(dropped);
        Some(Settled { deferred, owner })
    }

    /// The actor of run `run` of `id` ended without settling (its owner saw it die:
    /// `failure` set when it failed, else it was killed). Settles it failed or killed, and its
    /// live non-detached descendants killed (ractor kills linked actors with it). Returns the
    /// run's outcome and whether it awaits its owner's restart decision: the recorded one if
    /// the run had settled meanwhile (a kill at a deadline), `None` for another run.
    pub(crate) fn lost(
        &self,
        id: AgentId,
        run: u32,
        failure: Option<String>,
    ) -> Option<(Outcome, bool)> {
        let now = self.now_ms();
        let mut inner = self.lock();
        if inner.entry(id)?.runs != run {
            return None;
        }
        inner.lose(id, failure, now)
    }

    /// As [`Registry::lost`], for an actor known only by its ractor id (the root's detached
    /// descendants). Returns the agent, its run's outcome, whether it is deferred, and its
    /// owner's current actor.
    pub(crate) fn lost_actor(
        &self,
        actor: ActorId,
        failure: Option<String>,
    ) -> Option<(AgentId, u32, Outcome, bool, Option<ActorCell>)> {
        let now = self.now_ms();
        let mut inner = self.lock();
        let id = inner.by_actor.remove(&actor)?;
        let entry = inner.entry(id)?;
        if entry.actor.as_ref().is_none_or(|a| a.get_id() != actor) {
            return None;
        }
        let run = entry.runs;
        let (outcome, deferred) = inner.lose(id, failure, now)?;
        let owner = inner
            .rec(id)
            .and_then(|r| r.parent)
            .and_then(|p| inner.entry(p))
            .and_then(|o| o.actor.clone());
        Some((id, run, outcome, deferred, owner))
    }

    /// Keeps `steers`, which run `run` of `id` receipted `delivered` and which no turn of it
    /// will read (the run ends; its conversation holds them now), announcing as `steered`
    /// the `fresh` ones among them (the rest were announced by an earlier run that kept them):
    /// a restart hands them to its new run as it starts, whose first turn reads them after
    /// the task; a resume drops them, since the conversation it continues holds them. A
    /// delivered steer is never lost. Nothing, once the run settled.
    pub(crate) fn keep_unread_steers(
        &self,
        id: AgentId,
        run: u32,
        steers: Vec<String>,
        fresh: usize,
    ) {
        let now = self.now_ms();
        let mut inner = self.lock();
        if !inner.run_is_on(id, run) {
            return;
        }
        for _ in 0..fresh {
            inner.emit(id, EventKind::Steered, now);
        }
        if let Some(entry) = inner.entry_mut(id) {
            let kept = u32::try_from(steers.len()).unwrap_or(u32::MAX);
            entry.unread_kept = entry.unread_kept.saturating_add(kept);
            entry.pending_steers.splice(0..0, steers);
        }
    }

    /// Run `run` of `id` could not start its actor: it fails, for good unless it was a
    /// restart (`retryable`), whose exit then awaits its owner's decision again per its
    /// restart type.
    pub(crate) fn fail_start(&self, id: AgentId, run: u32, error: String, retryable: bool) {
        let now = self.now_ms();
        let mut inner = self.lock();
        if inner.entry(id).is_some_and(|e| e.runs == run) {
            let outcome = Outcome::failed(EndReason::ActorFailed, error);
            if retryable {
                inner.settle(id, outcome, now);
            } else {
                inner.settle_final(id, outcome, now);
            }
        }
    }

    /// The owner decided not to restart `id`: its outcome becomes final.
    pub(crate) fn release(&self, id: AgentId) {
        self.lock().release(id);
    }

    /// Whether `id` ended and waits for its owner's restart decision.
    pub(crate) fn awaiting_supervisor(&self, id: AgentId) -> bool {
        self.lock().entry(id).is_some_and(|e| e.deferred)
    }

    /// Stops `id` for its owner's restart strategy: its exit will wait for the owner's
    /// decision whatever its restart type.
    pub(crate) fn hold_and_abort(&self, id: AgentId) {
        let cells = {
            let mut inner = self.lock();
            if !inner.status_of(id).is_some_and(AgentStatus::is_live) {
                return;
            }
            let Some(entry) = inner.entry_mut(id) else {
                return;
            };
            // One its owner or the application already aborted is not held: an abort is never
            // restarted.
            entry.held = entry.abort_reason.is_none();
            entry.abort_reason.get_or_insert(EndReason::Aborted);
            if entry.token.is_cancelled() {
                // Whoever cancelled it told its token subtree then (see `abort`).
                return;
            }
            entry.token.cancel();
            inner.token_subtree_actors(id)
        };
        tell(cells, || AgentMsg::Cancel);
    }

    /// Aborts `id`: records why (first reason wins), cancels its token (which reaches its
    /// whole non-detached subtree's in-flight calls at once) and tells each of those actors.
    pub(crate) fn abort(&self, id: AgentId, reason: EndReason) -> Result<(), ControlError> {
        let (cells, notice) = {
            let mut inner = self.lock();
            let now = self.now_ms();
            let queued = inner.status_of(id) == Some(AgentStatus::Queued);
            inner.refuse_mirrored(id)?;
            let entry = inner.entry_mut(id).ok_or(ControlError::NotYours(id))?;
            entry.abort_reason.get_or_insert(reason);
            // A token cancelled before was cancelled here, by a shutdown or by an ancestor's
            // abort, each of which told every live actor of its token subtree then; an actor
            // started since checks its token before its first turn. Telling them again would
            // make a chain's shutdown quadratic (each owner aborts its child's whole subtree).
            let told = entry.token.is_cancelled();
            entry.token.cancel();
            // An abort is final even for a sibling its owner's strategy holds for a restart
            // (one_for_all, rest_for_one): the plan goes on without it, as with a shutdown.
            entry.held = false;
            let release = entry.deferred;
            let mut notice = None;
            if queued {
                // No actor exists to settle it: it never starts.
                inner.settle(id, Outcome::ended(AgentStatus::Aborted, reason), now);
            } else if release {
                // An abort is never restarted: an exit awaiting a restart decision is final,
                // and its owner (told it was deferred) hears that it is final now.
                inner.release(id);
                notice = inner.final_notice(id);
            }
            let cells = if told {
                Vec::new()
            } else {
                inner.token_subtree_actors(id)
            };
            (cells, notice)
        };
        tell(cells, || AgentMsg::Cancel);
        send_notices(notice);
        Ok(())
    }

    /// Why `id` was aborted, if it was aborted itself (not through an ancestor).
    pub(crate) fn abort_reason(&self, id: AgentId) -> Option<EndReason> {
        self.lock().entry(id).and_then(|e| e.abort_reason)
    }

    /// The tree's top supervisor exceeded its restart intensity: the root fails with `cause`
    /// and every agent is aborted.
    pub(crate) fn fail_root(&self, cause: String) {
        let cells = {
            let now = self.now_ms();
            let mut inner = self.lock();
            let root = &mut inner.entries[0];
            root.abort_reason.get_or_insert(EndReason::Escalated);
            root.token.cancel();
            inner.settle(
                AgentId::ROOT,
                Outcome::failed(EndReason::Escalated, cause),
                now,
            );
            // Nobody is left to restart anything, and no queued agent will ever start.
            let top_level = inner.records[0].children.clone();
            for &id in &top_level {
                inner.release(id);
                if inner.status_of(id) == Some(AgentStatus::Queued) {
                    let outcome = Outcome::ended(AgentStatus::Aborted, EndReason::OwnerEnded);
                    inner.settle(id, outcome, now);
                }
            }
            // The root's token reaches detached agents too.
            let mut cells = Vec::new();
            for &id in &top_level {
                cells.extend(inner.token_subtree_actors(id));
            }
            for id in inner.detached_live() {
                cells.extend(inner.token_subtree_actors(id));
            }
            cells
        };
        tell(cells, || AgentMsg::Cancel);
    }

    /// Tells every live agent of the subtree of `top` (detached descendants included) that a
    /// shutdown with `order`'s deadline reached it, and cancels them all at once. Queued
    /// agents settle at once; agents awaiting a restart decision become final. With `top` the
    /// root, the tree stops admitting top-level agents.
    pub(crate) fn begin_shutdown(&self, top: AgentId, order: &ShutdownOrder) -> ShutdownStart {
        let mut notices = Vec::new();
        let (start, cells) = {
            let now = self.now_ms();
            let mut inner = self.lock();
            // The whole tree's shutdown closes the root to new agents; a root that already
            // failed (escalation) stays failed: terminal is sticky.
            if top.is_root() && inner.status_of(AgentId::ROOT) == Some(AgentStatus::Running) {
                inner.emit(AgentId::ROOT, EventKind::Completing, now);
            }
            let mut stack = vec![top];
            let mut start = ShutdownStart::default();
            let left = Arc::new(watch::channel(0).0);
            let mut cells = Vec::new();
            while let Some(id) = stack.pop() {
                let Some(record) = inner.rec(id) else {
                    continue;
                };
                if inner.is_mirrored(id) {
                    // Its stand-in carries the shutdown to its node; it settles with what
                    // the node reports, or with its stand-in.
                    continue;
                }
                stack.extend(record.children.iter().copied());
                let status = record.status;
                if id.is_root() {
                    continue;
                }
                let Some(entry) = inner.entry_mut(id) else {
                    continue;
                };
                if entry.deferred {
                    // Nothing restarts under a shutdown: final, and its owner hears so.
                    inner.release(id);
                    notices.extend(inner.final_notice(id));
                    start.settled_now.push(id);
                    continue;
                }
                if status.is_terminal() {
                    continue;
                }
                entry.shutdown = Some(order.clone());
                entry.abort_reason.get_or_insert(EndReason::Shutdown);
                // The top's cancel reaches its non-detached descendants' tokens: only the
                // others (detached ones) need their own, and a cancel that has nothing to do
                // still takes the token's lock.
                if !entry.token.is_cancelled() {
                    entry.token.cancel();
                }
                if status == AgentStatus::Queued {
                    inner.settle(
                        id,
                        Outcome::ended(AgentStatus::Aborted, EndReason::Shutdown),
                        now,
                    );
                    start.settled_now.push(id);
                } else {
                    cells.extend(entry.actor.clone());
                    entry.shutdown_waits.push(left.clone());
                    start.waiting.push((id, entry.runs));
                }
            }
            left.send_replace(start.waiting.len());
            start.left = Some(left.subscribe());
            (start, cells)
        };
        // Every agent at once: each runs its hooks under the one deadline.
        tell(cells, || AgentMsg::Shutdown(order.clone()));
        for notice in notices {
            send_notices(Some(notice));
        }
        start
    }

    /// At a shutdown's deadline, in one transaction: every agent of `runs` still in that run
    /// and live settles killed (for good). A run started after the shutdown began (a resume)
    /// is not the shutdown's to kill.
    ///
    /// Returns those agents, in order; the actors to kill (the tops of what was killed: an
    /// agent whose owner was killed here dies with its owner's actor, as ractor stops every
    /// linked child of an actor that exits, so killing it too would only send a second
    /// signal), and every actor of `runs` (to wait for).
    pub(crate) fn kill_runs(&self, runs: &[(AgentId, u32)]) -> KilledRuns {
        let now = self.now_ms();
        let mut inner = self.lock();
        // Sized once: growing these by pushes, each a larger allocation, made glibc
        // consolidate its free lists again and again, inside the transaction that decides
        // how late a 100,000-agent kill returns (two thirds of it, measured).
        let mut out = KilledRuns {
            killed: Vec::with_capacity(runs.len()),
            actors: Vec::with_capacity(runs.len()),
            ended_killed: Vec::with_capacity(runs.len()),
            ..KilledRuns::default()
        };
        let mut killed_here = vec![false; inner.entries.len()];
        let index = |id: AgentId| usize::try_from(id.get()).ok();
        // One pass: `runs` lists an owner before its descendants (the shutdown's walk is
        // depth-first, preorder), so whether an agent's owner was killed here is known when
        // the agent is reached. (Out of that order, an agent would only be killed as a top
        // too: a second signal, never a missed one.)
        for &(id, run) in runs {
            let Some(entry) = inner.entry(id).filter(|e| e.runs == run) else {
                out.ended_killed.push(false);
                continue;
            };
            let actor = entry.actor.clone();
            if inner.status_of(id).is_some_and(AgentStatus::is_live) {
                inner.settle_final(
                    id,
                    Outcome::ended(AgentStatus::Killed, EndReason::Killed),
                    now,
                );
                out.killed.push(id);
                if let Some(slot) = index(id).and_then(|i| killed_here.get_mut(i)) {
                    *slot = true;
                }
            }
            let Some(record) = inner.rec(id) else {
                out.ended_killed.push(false);
                out.actors.extend(actor);
                continue;
            };
            let owner_killed = !record.detached
                && record
                    .parent
                    .and_then(index)
                    .and_then(|p| killed_here.get(p).copied())
                    .unwrap_or(false);
            out.ended_killed.push(record.status == AgentStatus::Killed);
            if !owner_killed {
                out.tops.extend(actor.clone());
            }
            out.actors.extend(actor);
        }
        out
    }

    /// Settles every live non-detached descendant of `id` killed: `id`'s actor is stopping
    /// without having settled them, and ractor kills linked actors with it.
    pub(crate) fn kill_descendants(&self, id: AgentId) {
        let now = self.now_ms();
        self.lock().kill_descendants(id, now);
    }

    /// Settles the root (the tree stopped).
    pub(crate) fn settle_root(&self) {
        let now = self.now_ms();
        let mut inner = self.lock();
        if inner
            .status_of(AgentId::ROOT)
            .is_some_and(AgentStatus::is_live)
        {
            let outcome = Outcome::ended(AgentStatus::Completed, EndReason::Shutdown);
            inner.emit(AgentId::ROOT, EventKind::settled(outcome.clone()), now);
            inner.entries[0].send_settled(Some(outcome));
        }
    }
}

impl Inner {
    /// Settles `id` with `outcome` (terminal) unless it is terminal already; decides whether
    /// the exit waits for the owner's restart decision. Returns whether this call settled it.
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
        // A turn of this run that has not billed (its actor was killed mid-turn, or the run
        // settled for it) is billed what its model reported, before the terminal event; its
        // own bill, if it still comes, finds the sink's usage taken (`Registry::bill_turn`).
        // The text it held back for a fuller `text_delta` event goes first.
        let cut_off = entry.conversation.lock().turn.take();
        if let Some(sink) = cut_off {
            if let Some(delta) = sink.take_pending() {
                self.emit(id, delta, now);
            }
            let delta = sink.take_usage();
            if delta != Usage::default() {
                self.emit(id, EventKind::UsageReported { delta }, now);
            }
        }
        let Some(entry) = self.entry(id) else {
            return false;
        };
        let runs = entry.runs;
        let policy = entry
            .spec
            .as_ref()
            .map(|s| s.definition.restart)
            .unwrap_or_default();
        let (held, under_shutdown) = (entry.held, entry.shutdown.is_some());
        // An abort accepted before the run settled, whatever the run ended with (a turn's
        // failure may have raced it): never restarted.
        let aborted = entry.abort_reason.is_some();
        let (parent, detached) = self
            .rec(id)
            .map(|r| (r.parent, r.detached))
            .unwrap_or_default();
        let owner_live = parent.is_some_and(|p| {
            self.status_of(p).is_some_and(AgentStatus::is_live)
                && self.entry(p).is_some_and(|o| !o.token.is_cancelled())
        });
        // A mirrored record's node decides on its restarts; a stand-in's mirrored
        // descendants settle before it does.
        let mirrored = entry.origin != Origin::Actor;
        self.settle_mirrored(id, now, &outcome);
        let deferred = !id.is_root()
            && !mirrored
            && restart::deferred(&restart::Exit {
                restart: policy,
                outcome: &outcome,
                held,
                aborted,
                detached,
                top_level: parent == Some(AgentId::ROOT),
                under_shutdown,
                owner_live,
            });
        // The terminal event writes status, end time and outcome.
        self.emit(id, EventKind::settled(outcome.clone()), now);
        let Some(entry) = self.entry_mut(id) else {
            return false;
        };
        if let Some(ended) = &entry.ended_run {
            ended.send_replace(runs);
        }
        if id.is_root() {
            entry.send_settled(Some(outcome));
            return true;
        }
        // The pure rule (policy::restart::deferred): only a live owner decides, and only for
        // its supervised children; a shutdown decides for everyone.
        if let Some(entry) = self.entry_mut(id) {
            entry.deferred = deferred;
        }
        if !deferred {
            self.finalize(id, before);
        }
        true
    }

    fn settle_final(&mut self, id: AgentId, outcome: Outcome, now: u64) -> bool {
        let settled = self.settle(id, outcome, now);
        self.release(id);
        settled
    }

    /// `id`'s actor died without settling: see [`Registry::lost`].
    fn lose(&mut self, id: AgentId, failure: Option<String>, now: u64) -> Option<(Outcome, bool)> {
        // Its tasks (model turn, tools, hooks) outlive a dead actor unless told.
        self.entry(id)?.token.cancel();
        // Its linked descendants died with it (ractor kills them), whatever its own record
        // says: a run's actor can be killed after its record settled.
        self.kill_descendants(id, now);
        if self.status_of(id)?.is_live() {
            let outcome = match failure {
                Some(error) => Outcome::failed(EndReason::ActorFailed, error),
                None => Outcome::ended(AgentStatus::Killed, EndReason::Killed),
            };
            self.settle(id, outcome, now);
        }
        let outcome = self.rec(id)?.outcome.clone()?;
        Some((outcome, self.entry(id)?.deferred))
    }

    /// Settles every live non-detached descendant of `id` as killed (their actors were
    /// killed by ractor when `id`'s actor died) and cancels their tokens so their tasks end.
    fn kill_descendants(&mut self, id: AgentId, now: u64) {
        let mut stack: Vec<AgentId> = self.rec(id).map(|r| r.children.clone()).unwrap_or_default();
        while let Some(child) = stack.pop() {
            let (Some(entry), Some(record)) = (self.entry(child), self.rec(child)) else {
                continue;
            };
            // A detached subtree is linked under the root actor, so it was not killed.
            if record.detached {
                continue;
            }
            // A settled agent's non-detached descendants are settled (an agent settles after
            // its children; a kill settles a whole subtree in one transaction), so the walk
            // stops there: a cascade of kills down a chain stays linear. An exit that awaited
            // this owner's restart decision is final now: nobody is left to decide.
            if record.status.is_terminal() {
                self.release(child);
                continue;
            }
            stack.extend(record.children.iter().copied());
            entry.token.cancel();
            self.settle_final(
                child,
                Outcome::ended(AgentStatus::Killed, EndReason::Killed),
                now,
            );
        }
    }

    /// Makes an outcome that awaits its owner's restart decision final.
    fn release(&mut self, id: AgentId) {
        if self.entry(id).is_some_and(|e| e.deferred) {
            if let Some(status) = self.status_of(id) {
                self.finalize(id, status);
            }
        }
    }

    /// Makes `id`'s recorded outcome final: watchers are told, and its live slot (and pool
    /// slot) is released.
    pub(super) fn finalize(&mut self, id: AgentId, before: AgentStatus) {
        let (outcome, parent) = match self.rec(id) {
            Some(r) => (r.outcome.clone(), r.parent),
            None => return,
        };
        let Some(entry) = self.entry_mut(id) else {
            return;
        };
        entry.deferred = false;
        entry.held = false;
        entry.send_settled(outcome);
        entry.count_down_shutdowns();
        if entry.origin != Origin::Actor {
            // Never counted here: its own node admitted it.
            return;
        }
        let pooled = entry.pooled;
        self.live = self.live.saturating_sub(1);
        self.publish_live();
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

    /// The notice telling `id`'s owner that its exit, which the owner was told awaits its
    /// restart decision, is final (released by an abort or a shutdown).
    fn final_notice(&self, id: AgentId) -> Option<(ActorCell, AgentMsg)> {
        let record = self.rec(id)?;
        let owner = self.entry(record.parent?)?.actor.clone()?;
        let notice = AgentMsg::ChildEnded {
            child: id,
            run: self.entry(id)?.runs,
            outcome: record.outcome.clone()?,
            deferred: false,
        };
        Some((owner, notice))
    }

    /// Every live detached agent.
    fn detached_live(&self) -> Vec<AgentId> {
        self.records
            .iter()
            .filter(|r| r.detached && r.status.is_live())
            .map(|r| r.id)
            .collect()
    }
}

/// Sends a final notice to an owner (after the registry lock is released).
fn send_notices(notice: Option<(ActorCell, AgentMsg)>) {
    if let Some((owner, notice)) = notice {
        let _ = owner.send_message(notice);
    }
}
