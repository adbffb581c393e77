//! Recovery: a registry seeded from a journal's replay, the same fold's records, with the
//! runtime's side of each agent rebuilt and every agent the crash interrupted settled
//! `aborted` with reason `interrupted`.

use std::sync::Arc;

use agent_tree_protocol::{AgentId, AgentStatus, EndReason, EventKind, Outcome, Replay};
use tokio_util::sync::CancellationToken;

use super::{Entry, Registry};
use crate::shared::Branch;
use crate::spawn::PendingStart;

impl Registry {
    /// Seeds this fresh registry from `replay`: its records (the journal's fold), each
    /// agent's request, definition and conversation (for resumes), the request ids (for
    /// replay-safe spawns), the owners' spawn counts; then settles every agent the journal
    /// leaves live as interrupted, one event each, journaled like any other. Returns those
    /// agents, children before owners.
    pub(crate) fn recover(&self, replay: &Replay, branch: &Arc<Branch>) -> Vec<AgentId> {
        // The clock and the tally go on from the journal's: times stay monotonic, counts
        // cover the tree's whole life.
        self.before_ms
            .store(replay.last_ms, std::sync::atomic::Ordering::Relaxed);
        let now = self.now_ms();
        let mut inner = self.lock();
        inner.records = replay.records.iter().cloned().map(Arc::new).collect();
        inner.seq = replay.last_seq;
        inner.tally = replay.tally.clone();
        let root = inner.entries.swap_remove(0);
        let mut entries = Vec::with_capacity(replay.records.len());
        entries.push(root);
        for record in replay.records.iter().skip(1) {
            // Owners precede their children (ids are dense in admission order).
            let owner = match record.parent {
                Some(parent) if !record.detached => parent.get() as usize,
                _ => 0,
            };
            let token = entries
                .get(owner)
                .map_or_else(CancellationToken::new, |e: &Entry| e.token.child_token());
            let mut entry = Entry::new(token);
            let conversation = replay.conversations.get(&record.id);
            entry.runs = conversation
                .map_or(record.incarnation, |(run, _)| {
                    (*run).max(record.incarnation)
                })
                .max(1);
            let dropped = inner
                .journal
                .as_ref()
                .is_some_and(|j| !j.retain_conversations)
                && record.status.is_terminal();
            match conversation {
                // Settled, and the journal keeps it: read back on a resume.
                Some(_) if dropped => entry.conversation_journaled = true,
                Some((_, messages)) => entry.conversation.lock().messages = messages.clone(),
                None => {}
            }
            entry.spec = spec_of(replay, record, branch);
            // A mirrored record (a remote child's descendant) has no spawn of this tree's:
            // it is under a stand-in (placed on a node) or under another mirrored record.
            entry.mirrored = !replay.spawns.contains_key(&record.id)
                && record
                    .parent
                    .and_then(|p| entries.get(p.get() as usize))
                    .is_some_and(|owner: &Entry| {
                        owner.mirrored || owner.spec.as_ref().is_some_and(|s| s.node.is_some())
                    });
            entries.push(entry);
        }
        for record in replay.records.iter().skip(1) {
            if let Some(parent) = record.parent {
                if let Some(owner) = entries.get_mut(parent.get() as usize) {
                    owner.spawned = owner.spawned.saturating_add(1);
                }
                if let Some(request_id) = &record.request_id {
                    inner
                        .by_request
                        .entry(parent)
                        .or_default()
                        .insert(request_id.clone(), record.id);
                }
            }
        }
        inner.entries = entries;
        let unfinished: Vec<AgentId> = replay
            .records
            .iter()
            .skip(1)
            .rev()
            .filter(|r| !r.status.is_terminal())
            .map(|r| r.id)
            .collect();
        let mut interrupted_now = Vec::with_capacity(unfinished.len());
        for &id in &unfinished {
            let completing = replay.records[id.get() as usize].status == AgentStatus::Completing;
            match replay.decided.get(&id) {
                // Its run had ended and it held its outcome while its children drained:
                // that outcome stands (the children are interrupted).
                Some(outcome) if completing => {
                    inner.emit(id, EventKind::settled(outcome.clone()), now);
                }
                _ => {
                    let outcome = Outcome::ended(AgentStatus::Aborted, EndReason::Interrupted);
                    inner.emit(id, EventKind::Aborted { outcome }, now);
                    interrupted_now.push(id);
                }
            }
        }
        // A tree that shut down (or failed) before: the root admits again.
        if replay.records[0].status != AgentStatus::Running {
            let agent_type = replay.records[0].agent_type.clone();
            inner.emit(AgentId::ROOT, EventKind::Resumed, now);
            inner.emit(
                AgentId::ROOT,
                EventKind::Started {
                    agent_type,
                    incarnation: replay.records[0].incarnation,
                },
                now,
            );
        }
        interrupted_now
    }
}

/// How `record`'s agent was started, for a resume: its journaled request and definition (or
/// the catalog's definition of its type, should the journal lack it).
fn spec_of(
    replay: &Replay,
    record: &agent_tree_protocol::AgentRecord,
    branch: &Arc<Branch>,
) -> Option<PendingStart> {
    let (hash, request) = replay.spawns.get(&record.id)?;
    let definition = match replay.definitions.get(hash) {
        Some(definition) => Arc::new(definition.clone()),
        None => branch.catalog.resolve(&record.agent_type).ok()?.clone(),
    };
    let node = crate::spawn::placement(request, &definition);
    Some(PendingStart {
        settle: request.settle.unwrap_or(definition.settle),
        definition,
        branch: branch.clone(),
        prompt: request.prompt.clone(),
        context: replay
            .contexts
            .get(&record.id)
            .map(|c| c.to_vec())
            .unwrap_or_default(),
        resumed: false,
        detached: record.detached,
        owner_capabilities: None,
        parent_span: crate::util::SpanSlot::default(),
        node,
    })
}
