//! Admissions and new runs: each hands back a [`StartTicket`] with everything the agent's
//! actor needs, so the actor never reads its own record back.

use agent_tree_protocol::{AgentId, AgentStatus, EventKind, Message, RequestId};
use ractor::ActorCell;

use super::{Entry, Registry, StartTicket};
use crate::config::TreeConfig;
use crate::error::{ControlError, SpawnError};
use crate::policy::admission::{self, Slot};
use crate::spawn::PendingStart;

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
    /// The owner's conversation, for a definition that inherits it (only within
    /// `INHERIT_CONTEXT_MAX_DEPTH`; deeper, a `context_dropped` event says it was dropped).
    pub(crate) inherited: &'a [Message],
    /// The request as made, for the journal (only when the tree keeps one).
    pub(crate) journaled: Option<agent_tree_protocol::SpawnRequest>,
    /// A run continued from another tree (a remote agent resumed in its hosted tree): the
    /// children of its earlier runs, seeded as settled records under it with the ids after
    /// its own, and renamed so in its inherited conversation; `None` for every other spawn.
    pub(crate) earlier: Option<Earlier<'a>>,
}

/// The children a run continued from another tree brings ([`Admission::earlier`]).
#[derive(Clone, Copy)]
pub(crate) struct Earlier<'a> {
    /// Its earlier runs' children, as that tree had them, in start order.
    pub(crate) children: &'a [agent_tree_protocol::EarlierChild],
    /// Renames, in a conversation, the agent ids `map` maps (the placement's rules for
    /// where a conversation names agents).
    pub(crate) rename: fn(&mut [Message], &dyn Fn(AgentId) -> Option<AgentId>),
}

impl std::fmt::Debug for Earlier<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Earlier")
            .field("children", &self.children)
            .finish_non_exhaustive()
    }
}

/// The result of an admission.
#[derive(Debug)]
pub(crate) enum Admitted {
    /// A new record, to be started now.
    New(StartTicket),
    /// A new record waiting for a pool slot; the root starts it when one frees.
    Queued(AgentId),
    /// The owner already spawned this request: the existing child.
    Existing(AgentId),
}

/// What [`Registry::reopen`] says when the agent's conversation is only in the journal and
/// was not read back first, or was read back at an earlier run ([`crate::spawn::reopen`]
/// reads it and tries again).
pub(crate) const NEEDS_CONVERSATION: &str = "its conversation is in the journal";

impl Registry {
    /// When `id`'s settled conversation is only in the journal: the run it is of (a
    /// read-back of it is stale once the agent is at a later run).
    pub(crate) fn conversation_journaled(&self, id: AgentId) -> Option<u32> {
        self.lock()
            .entry(id)
            .filter(|e| e.conversation_journaled)
            .map(|e| e.runs)
    }

    /// Reserves a slot for a child of `owner`, atomically: the owner must be accepting
    /// children, and the depth, width and total limits must hold. On success the record
    /// exists (`spawned`, or `queued` behind the pool).
    pub(crate) fn admit(&self, admission: Admission<'_>) -> Result<Admitted, SpawnError> {
        let now = self.now_ms();
        let mut inner = self.lock();
        if let Some(request_id) = &admission.request_id {
            let existing = inner
                .by_request
                .get(&admission.owner)
                .and_then(|ids| ids.get(request_id));
            if let Some(existing) = existing {
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
            // Every record but the root's is an agent the tree spawned.
            inner.records.len().saturating_sub(1) as u64,
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
        let mut spec = admission.spec;
        let mut context_dropped = false;
        if spec.definition.inherit_context {
            if depth <= crate::config::INHERIT_CONTEXT_MAX_DEPTH {
                // Kept in the start spec, so a restart re-runs it.
                spec.context = admission.inherited.to_vec();
            } else {
                context_dropped = true;
            }
        }
        let earlier = admission.earlier;
        if let Some(earlier) = earlier {
            // The conversation names the earlier children by the other tree's ids: here
            // they are the seeds that follow this agent's own id.
            let seeds: std::collections::HashMap<AgentId, AgentId> = earlier
                .children
                .iter()
                .zip(id.get() + 1..)
                .map(|(child, seed)| (child.agent, AgentId::new(seed)))
                .collect();
            (earlier.rename)(&mut spec.context, &|other| seeds.get(&other).copied());
        }
        let mut entry = Entry::new(token.clone());
        entry.pooled = pooled;
        entry.spec = Some(kept_spec(&spec, slot));
        let conversation = entry.conversation.clone();
        inner.entries.push(entry);
        let owner = inner
            .entry_mut(admission.owner)
            .expect("owner checked above");
        owner.live_children += 1;
        owner.spawned = owner.spawned.saturating_add(1);
        inner.live += 1;
        inner.peak_live = inner.peak_live.max(inner.live);
        inner.publish_live();
        if let Some(request_id) = &admission.request_id {
            inner
                .by_request
                .entry(admission.owner)
                .or_default()
                .insert(request_id.clone(), id);
        }
        let (agent_type, request_id, detached) = (
            admission.agent_type.to_owned(),
            admission.request_id,
            admission.detached,
        );
        if let (Some(journal), Some(request)) = (inner.journal.clone(), admission.journaled) {
            // Before the admission event: recovery finds the request of every record.
            journal.admission(
                &mut inner.journaled_definitions,
                id,
                &spec.definition,
                request,
                &spec.context,
            );
        }
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
                let ticket = StartTicket {
                    id,
                    owner: admission.owner,
                    depth,
                    incarnation: 1,
                    run: 1,
                    token,
                    conversation,
                    start: spec,
                    question: None,
                };
                (kind, Admitted::New(ticket))
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
        if let Some(earlier) = earlier {
            inner.seed_earlier(id, depth, earlier.children, now);
        }
        if context_dropped {
            inner.emit(id, EventKind::ContextDropped, now);
        }
        Ok(admitted)
    }

    /// Takes queued agents off the pool queue while slots are free, in FIFO order, moving
    /// them to `starting`; the caller starts their actors.
    pub(crate) fn pool_next(&self) -> Vec<StartTicket> {
        let now = self.now_ms();
        let mut inner = self.lock();
        let mut out = Vec::new();
        while inner.pool_running < inner.max_concurrent {
            let Some(id) = inner.pool_queue.pop_front() else {
                break;
            };
            if inner.status_of(id) != Some(AgentStatus::Queued) {
                continue;
            }
            let (Some(entry), Some(record)) = (inner.entry(id), inner.rec(id)) else {
                continue;
            };
            let Some(start) = entry.spec.clone() else {
                continue;
            };
            let ticket = StartTicket {
                id,
                owner: record.parent.unwrap_or(AgentId::ROOT),
                depth: record.depth,
                incarnation: record.incarnation,
                run: entry.runs,
                token: entry.token.clone(),
                conversation: entry.conversation.clone(),
                start,
                question: None,
            };
            inner.emit(id, EventKind::Dequeued, now);
            inner.pool_running += 1;
            out.push(ticket);
        }
        out
    }

    /// Resizes the pool; raising it lets [`Registry::pool_next`] start queued agents.
    pub(crate) fn set_max_concurrent(&self, max: usize) {
        self.lock().max_concurrent = max.max(1);
    }

    /// Restarts `id` (whose exit awaits its owner's decision): a new incarnation of the same
    /// agent, re-running its original request, with its usage kept.
    pub(crate) fn restart(&self, id: AgentId) -> Option<StartTicket> {
        let now = self.now_ms();
        let mut inner = self.lock();
        let entry = inner.entry(id)?;
        if !entry.deferred {
            return None;
        }
        let record = inner.rec(id)?;
        let (owner, depth, incarnation) = (record.parent?, record.depth, record.incarnation + 1);
        let token = if record.detached {
            inner.entries[0].token.child_token()
        } else {
            inner.entry(owner)?.token.child_token()
        };
        let entry = inner.entry_mut(id)?;
        let start = entry.spec.clone()?;
        entry.new_run(token.clone());
        let (run, conversation) = (entry.runs, entry.conversation.clone());
        inner.emit(id, EventKind::Restarted { incarnation }, now);
        Some(StartTicket {
            id,
            owner,
            depth,
            incarnation,
            run,
            token,
            conversation,
            start,
            question: None,
        })
    }

    /// Reopens settled agent `id` for a resumed run under its owner `owner`, with a new
    /// `prompt` after its kept conversation. It runs with the definition and branch (catalog,
    /// depth cap) it was started with, and the same admission limits apply as for a new
    /// child. Nothing changes when it is refused; otherwise a `resumed` event puts its record
    /// back to `starting`.
    pub(crate) fn reopen(
        &self,
        id: AgentId,
        owner: AgentId,
        config: &TreeConfig,
        prompt: String,
        journaled: Option<(u32, &std::sync::Arc<[Message]>)>,
        owner_capabilities: Option<Box<crate::policy::capability::Capabilities>>,
    ) -> Result<StartTicket, SpawnError> {
        let now = self.now_ms();
        let mut inner = self.lock();
        let not_yours = || SpawnError::Control(ControlError::NotYours(id));
        let entry = inner.entry(id).ok_or_else(not_yours)?;
        let record = inner.rec(id).ok_or_else(not_yours)?;
        if record.parent != Some(owner) {
            return Err(not_yours());
        }
        if inner.is_earlier(id) {
            return Err(SpawnError::Control(ControlError::EarlierRun(id)));
        }
        inner.refuse_mirrored(id).map_err(SpawnError::Control)?;
        if record.status.is_live() || entry.deferred {
            return Err(SpawnError::Control(ControlError::WrongStatus(
                id,
                record.status,
            )));
        }
        let Some(mut spec) = entry.spec.clone() else {
            return Err(not_yours());
        };
        if owner_capabilities.is_some() {
            // The owner's capabilities now (after a recovery the journal has none).
            spec.owner_capabilities = owner_capabilities;
        }
        // A read-back of an earlier run (another resume ran one since it was read) is stale.
        let read_back = match (entry.conversation_journaled, journaled) {
            (false, _) => None,
            (true, Some((run, journaled))) if run == entry.runs => Some(journaled.clone()),
            (true, _) => return Err(SpawnError::InvalidRequest(NEEDS_CONVERSATION.into())),
        };
        let conversation = match &read_back {
            None => entry.conversation.lock().messages.to_vec(),
            Some(journaled) => journaled.to_vec(),
        };
        let (detached, depth, incarnation) = (record.detached, record.depth, record.incarnation);
        let (Some(owner_entry), Some(owner_record)) = (inner.entry(owner), inner.rec(owner)) else {
            return Err(SpawnError::OwnerClosed(owner));
        };
        let mut view = owner_entry.owner_view(owner_record);
        // A resume is not a new spawn: it does not count against the lifetime budget.
        view.spawned = 0;
        admission::admit(config, spec.branch.max_depth, &view, inner.live, 0)?;
        let token = if detached {
            inner.entries[0].token.child_token()
        } else {
            owner_entry.token.child_token()
        };
        inner.forget_read_output(id);
        let entry = inner.entry_mut(id).expect("checked above");
        entry.new_run(token.clone());
        // A question a crash cut its run off waiting on is put again; a prompt answers it.
        let mut question = entry.question.take();
        let mut prompt = prompt;
        if let Some(open) = question.as_mut().filter(|q| q.answer.is_none()) {
            if !prompt.is_empty() {
                open.answer = Some((std::mem::take(&mut prompt), false));
            }
        }
        // The ended run's unread steers are in the conversation this run continues.
        let kept = std::mem::take(&mut entry.unread_kept) as usize;
        entry
            .pending_steers
            .drain(..kept.min(entry.pending_steers.len()));
        entry.conversation_journaled = false;
        if let Some(journaled) = read_back {
            // The cell holds the read-back conversation from now on: a run that ends before
            // its first turn boundary (killed in its start hook, say) journals none, and the
            // next resume continues this one, not an empty one.
            entry.conversation.lock().messages = journaled;
        }
        if let Some(kept) = entry.spec.as_mut() {
            // Its restarts attenuate as its resumed run does.
            kept.owner_capabilities.clone_from(&spec.owner_capabilities);
        }
        // A resumed run bypasses the pool, like any run its owner waits on.
        entry.pooled = false;
        entry.send_settled(None);
        let (run, cell) = (entry.runs, entry.conversation.clone());
        if let Some(owner) = inner.entry_mut(owner) {
            owner.live_children += 1;
        }
        inner.live += 1;
        inner.peak_live = inner.peak_live.max(inner.live);
        inner.publish_live();
        if let (Some(journal), false) = (inner.journal.as_ref(), prompt.is_empty()) {
            // The resumed run's conversation as it starts, its new task included, before
            // the `resumed` event: a crash after the event, before the run's first turn
            // boundary, keeps the task (a new agent's is on its `spawn` line).
            let mut start = conversation.clone();
            start.push(Message::user(prompt.clone()));
            journal.conversation(id, run, 0, &std::sync::Arc::from(start));
            // Steers a recovery kept for this run are not in that conversation (its first
            // turn reads them): journaled again after it, so they stay unread there too.
            if let Some(entry) = inner.entry(id) {
                for text in &entry.pending_steers {
                    journal.steer(id, text);
                }
            }
        }
        inner.emit(id, EventKind::Resumed, now);
        if let Some(open) = question.as_mut() {
            open.run = run;
        }
        if let (Some(journal), Some(open)) = (inner.journal.as_ref(), question.as_ref()) {
            // The question, for this run, after the `resumed` event that ended the last
            // run's: a crash before the run puts it keeps it again, with its answer.
            journal.question(id, run, open.call, &open.question, &open.asking);
            if let Some((text, is_error)) = &open.answer {
                journal.answer(id, run, text, *is_error);
            }
        }
        Ok(StartTicket {
            id,
            owner,
            depth,
            incarnation,
            run,
            token,
            conversation: cell,
            start: PendingStart {
                prompt,
                context: conversation,
                resumed: true,
                ..spec
            },
            question,
        })
    }

    /// Marks run `run` of `id` running on `actor`, announces its start, and hands over the
    /// steers that arrived before its session existed, in order.
    ///
    /// `None` when the record settled (or moved to a later run) before its actor got here:
    /// the actor must not start. With the steers comes the order of a shutdown that began
    /// before the actor registered (it was sent no `Shutdown` message), and, for a later
    /// run, the live detached children of the earlier ones: found in the transaction that
    /// makes `actor` the one their ends are told to, so each end is either told to this run
    /// (and the child is in the list) or came before it.
    pub(crate) fn started(&self, id: AgentId, run: u32, actor: ActorCell) -> Option<Registered> {
        let now = self.now_ms();
        let mut inner = self.lock();
        let record = inner.rec(id)?;
        if record.status.is_terminal() || inner.entry(id)?.runs != run {
            return None;
        }
        // The fold reads only a `started` event's incarnation; its agent type is for the
        // stream's readers, so it is not copied when there are none.
        let agent_type = if inner.listened() {
            record.agent_type.clone()
        } else {
            String::new()
        };
        let kind = EventKind::Started {
            agent_type,
            incarnation: record.incarnation,
        };
        if record.parent == Some(AgentId::ROOT) || record.detached {
            // Linked under the root actor: the root finds it by its actor.
            inner.by_actor.insert(actor.get_id(), id);
        }
        let earlier = if run > 1 {
            inner.live_detached_children(id)
        } else {
            Vec::new()
        };
        let entry = inner.entry_mut(id)?;
        entry.actor = Some(actor);
        let steers = std::mem::take(&mut entry.pending_steers);
        let kept = std::mem::take(&mut entry.unread_kept);
        let shutdown = entry.shutdown.clone();
        inner.emit(id, kind, now);
        Some(Registered {
            steers,
            kept,
            shutdown,
            earlier,
        })
    }
}

/// What a run's actor is handed as it registers ([`Registry::started`]).
#[derive(Debug)]
pub(crate) struct Registered {
    /// Steers sent before the actor existed, in order, after those an ended run kept
    /// unread.
    pub(crate) steers: Vec<String>,
    /// How many of `steers`, from the front, an ended run kept unread (and announced).
    pub(crate) kept: u32,
    /// The order of a shutdown that began before the actor registered.
    pub(crate) shutdown: Option<crate::msg::ShutdownOrder>,
    /// The live detached children of the agent's earlier runs, each with its current run
    /// and actor: a later run of their owner hears when they end, and their questions.
    pub(crate) earlier: Vec<(AgentId, u32, Option<ractor::ActorId>)>,
}

impl super::Inner {
    /// `owner`'s live detached children, each with its current run and actor.
    fn live_detached_children(
        &self,
        owner: AgentId,
    ) -> Vec<(AgentId, u32, Option<ractor::ActorId>)> {
        let Some(record) = self.rec(owner) else {
            return Vec::new();
        };
        record
            .children
            .iter()
            .filter_map(|&child| {
                let (record, entry) = (self.rec(child)?, self.entry(child)?);
                (record.detached && record.status.is_live()).then(|| {
                    let actor = entry.actor.as_ref().map(|a| a.get_id());
                    (child, entry.runs, actor)
                })
            })
            .collect()
    }
}

/// The start spec the registry keeps for `spec`'s agent: whole when a later start may re-run
/// its task (a queued agent's start from the pool, a restart), else without its task and
/// inherited context (a temporary agent started now is never restarted, and a resume brings
/// its own prompt after the kept conversation): no copy of the prompt per spawn.
fn kept_spec(spec: &PendingStart, slot: Slot) -> PendingStart {
    let restartable = spec.definition.restart != agent_tree_protocol::RestartPolicy::Temporary;
    if slot == Slot::Queue || restartable {
        return spec.clone();
    }
    PendingStart {
        definition: spec.definition.clone(),
        branch: spec.branch.clone(),
        prompt: String::new(),
        settle: spec.settle,
        context: Vec::new(),
        resumed: spec.resumed,
        detached: spec.detached,
        owner_capabilities: spec.owner_capabilities.clone(),
        parent_span: spec.parent_span.clone(),
        node: spec.node.clone(),
    }
}
