//! Recovery: a registry seeded from a journal's replay, the same fold's records, with the
//! runtime's side of each agent rebuilt and every agent the crash interrupted settled
//! `aborted` with reason `interrupted`.
//!
//! # Invariants
//!
//! * Every agent the journal has a request of comes back with a conversation to continue:
//!   its latest journaled one, or, when none was journaled (it never reached a turn
//!   boundary), the one its first run starts with (inherited context, then its task), so a
//!   resume with no prompt continues the task exactly as a first run would have started it.
//! * A steer receipted (`delivered` or `queued`) that no journaled conversation holds is
//!   kept for the agent's next run, which reads it at its first turn boundary: once, since
//!   that boundary's conversation line ends it in the journal.

use std::sync::Arc;

use agent_tree_protocol::{AgentId, AgentStatus, EndReason, EventKind, Message, Outcome, Replay};
use tokio_util::sync::CancellationToken;

use super::{Entry, Origin, Registry};
use crate::shared::Branch;
use crate::spawn::PendingStart;

impl Registry {
    /// Seeds this fresh registry from `replay`: its records (the journal's fold), each
    /// agent's request, definition, conversation and unread steers (for resumes), the request ids (for
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
            // Where its conversation is in the journal; the replay holds its messages only
            // where this tree keeps them (an unfinished agent's, or any with conversations
            // retained): the others stay in the journal.
            let lines = replay.conversation_lines.get(&record.id);
            entry.runs = lines
                .map_or(record.incarnation, |(run, _)| {
                    (*run).max(record.incarnation)
                })
                .max(1);
            let dropped = inner
                .journal
                .as_ref()
                .is_some_and(|j| !j.retain_conversations)
                && record.status.is_terminal();
            match (lines, replay.conversations.get(&record.id)) {
                // A restarted run cut off before its first turn boundary (its incarnation's
                // start, below), or the journal keeps it and a resume reads it back.
                (Some((_, spans)), _) if spans.is_empty() => {
                    entry.conversation.lock().messages = first_conversation(replay, record.id);
                }
                (Some(_), Some((_, messages))) if !dropped => {
                    entry.conversation.lock().messages = messages.clone();
                }
                (Some(_), _) => entry.conversation_journaled = true,
                // Admitted, never at a turn boundary (a start hook still running, a kill
                // right after admission): its conversation is the one its first run would
                // have started with, from its journaled request.
                (None, _) => {
                    entry.conversation.lock().messages = first_conversation(replay, record.id);
                }
            }
            entry.spec = spec_of(replay, record, branch);
            // Steers receipted that no journaled conversation holds: its next run reads them
            // first thing, as a run reads steers queued before it started.
            if let Some(steers) = replay.steers.get(&record.id) {
                entry.pending_steers.clone_from(steers);
            }
            // A mirrored record (a remote child's descendant) has no spawn of this tree's:
            // it is under a stand-in (placed on a node) or under another mirrored record.
            let mirrored = !replay.spawns.contains_key(&record.id)
                && record
                    .parent
                    .and_then(|p| entries.get(p.get() as usize))
                    .is_some_and(|owner: &Entry| {
                        owner.origin != Origin::Actor
                            || owner.spec.as_ref().is_some_and(|s| s.node.is_some())
                    });
            if mirrored {
                entry.origin = Origin::Mirror;
            }
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
                    // A question it was waiting on: its next run puts it again (or reads the
                    // answer journaled for it) instead of re-running the turn that asked it.
                    if let (Some(open), Some(entry)) =
                        (replay.questions.get(&id), inner.entry_mut(id))
                    {
                        entry.question = Some(Box::new(open.clone()));
                    }
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

impl Registry {
    /// The agents of `owner` a recovery found waiting on a question (settled `interrupted`,
    /// their question kept for their next run), in id order.
    pub(crate) fn waiting_on_questions(&self, owner: AgentId) -> Vec<AgentId> {
        let inner = self.lock();
        inner
            .records
            .iter()
            .filter(|r| r.parent == Some(owner))
            .filter(|r| inner.entry(r.id).is_some_and(|e| e.question.is_some()))
            .map(|r| r.id)
            .collect()
    }
}

/// The conversation agent `id`'s first run starts with, from its journaled request: the
/// context it inherited, then its task (as `AgentState::new` builds it). Empty for an agent
/// the journal has no request of (a mirrored record).
fn first_conversation(replay: &Replay, id: AgentId) -> Arc<[Message]> {
    let Some((_, request)) = replay.spawns.get(&id) else {
        return Arc::default();
    };
    let context = replay.contexts.get(&id).map_or(&[][..], |c| &c[..]);
    // A new agent's task is never blank (a spawn refuses one); only a remote agent's resumed
    // run, whose context is its own conversation, is admitted with none.
    let task = (!request.prompt.is_empty()).then(|| Message::user(request.prompt.clone()));
    context.iter().cloned().chain(task).collect()
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

#[cfg(test)]
mod tests {
    use agent_tree_protocol::{
        AgentDefinition, Event, JOURNAL_VERSION, JournalEntry, SessionId, SpawnRequest,
        definition_hash,
    };

    use super::*;
    use crate::catalog::Catalog;

    /// An agent whose journal holds its request (with the context it inherited) and no
    /// conversation comes back with the conversation its first run starts with: the
    /// context, then its task.
    #[tokio::test(start_paused = true)]
    async fn an_agent_without_a_journaled_conversation_gets_its_first_runs() {
        let definition = AgentDefinition::new("w", "").with_inherit_context(true);
        let hash = definition_hash(&definition);
        let context = vec![Message::user("the owner's task")];
        let agent = AgentId::new(1);
        let lines = [
            JournalEntry::Header {
                version: JOURNAL_VERSION,
                session: SessionId::new("s"),
            },
            JournalEntry::Definition {
                hash: hash.clone(),
                definition,
            },
            JournalEntry::Spawn {
                agent,
                definition: hash,
                request: SpawnRequest::new("w", "the task"),
                context: context.clone().into(),
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
        ];
        let bytes: String = lines.iter().map(JournalEntry::to_line).collect();
        let replay = agent_tree_protocol::replay(bytes.as_bytes(), None).unwrap();
        let registry = Registry::new(SessionId::new("s"), CancellationToken::new(), 10);
        let branch = Arc::new(Branch {
            catalog: Catalog::default(),
            max_depth: 5,
        });
        assert_eq!(registry.recover(&replay, &branch), [agent]);
        let conversation = registry.conversation(agent);
        let texts: Vec<&str> = conversation.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(texts, ["the owner's task", "the task"]);
    }
}
