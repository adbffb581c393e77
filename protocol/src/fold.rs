//! Records as the fold of events: the one function that changes an [`AgentRecord`].
//!
//! The runtime's registry writes its records only by [`apply`]ing the lifecycle event it
//! emits, in sequence order, so the event stream alone rebuilds every record: a subscriber,
//! a journal replay or a remote mirror folds the same events with the same function and gets
//! the same records as [`TreeSnapshot::records`](crate::TreeSnapshot::records).
//!
//! # Invariants
//!
//! * Records are dense by id from the root `a0`, which every fold starts with
//!   ([`AgentRecord::root`]); an admission event (`spawned` or `queued`) appends the next id
//!   and adds it to its parent's children, in start order.
//! * A terminal status is sticky: a second terminal event, or any lifecycle move away from
//!   a terminal status other than `restarted` and `resumed`, is refused
//!   ([`FoldError::Transition`]) and changes nothing.
//! * `usage_reported` adds its delta to the agent's `own` and to the `subtree` of the agent
//!   and every ancestor, so `subtree == own + Σ children.subtree` after every event.
//! * Events that change no record (`steered`, `asked`, `context_dropped`) are accepted as
//!   they are.

use std::borrow::Cow;
use std::sync::Arc;

use crate::event::{Event, EventKind, EventTally};
use crate::ids::{AgentId, RequestId};
use crate::outcome::Outcome;
use crate::snapshot::AgentRecord;
use crate::status::{AgentStatus, StatusTransitionError};
use crate::usage::Usage;

/// An event the records cannot take.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FoldError {
    /// The event names an agent with no record.
    #[error("event {seq}: no record of {agent}")]
    UnknownAgent {
        /// The event's sequence number.
        seq: u64,
        /// The agent it names.
        agent: AgentId,
    },
    /// An admission event whose id is not the next one, or whose parent has no record.
    #[error("event {seq}: admission of {agent} out of order (next id is a{next})")]
    OutOfOrder {
        /// The event's sequence number.
        seq: u64,
        /// The agent it names.
        agent: AgentId,
        /// The id the next admission must have.
        next: u64,
    },
    /// Usage reported for an agent whose record is terminal: nothing of an agent is
    /// recorded after its terminal event.
    #[error("event {seq}: usage of {agent} after its terminal event")]
    AfterTerminal {
        /// The event's sequence number.
        seq: u64,
        /// The agent it names.
        agent: AgentId,
    },
    /// An output released from an agent that has not settled.
    #[error("event {seq}: output of {agent} released before it settled")]
    NotSettled {
        /// The event's sequence number.
        seq: u64,
        /// The agent it names.
        agent: AgentId,
    },
    /// A status change the agent's status does not allow (terminal is sticky).
    #[error("event {seq} on {agent}: {source}")]
    Transition {
        /// The event's sequence number.
        seq: u64,
        /// The agent it names.
        agent: AgentId,
        /// The refused move.
        #[source]
        source: StatusTransitionError,
    },
}

/// Where [`apply`] keeps records, indexed by agent id: a plain `Vec<AgentRecord>`, or
/// `Vec<Arc<AgentRecord>>`, shared records changed copy-on-write, as the runtime's registry
/// keeps them so that a [`TreeSnapshot`](crate::TreeSnapshot) shares every record instead of
/// copying it.
///
/// ```
/// use std::sync::Arc;
/// use agent_tree_protocol::runtime::RecordStore;
/// use agent_tree_protocol::AgentRecord;
/// let mut shared: Vec<Arc<AgentRecord>> = vec![Arc::new(AgentRecord::root())];
/// let snapshot = shared.clone();
/// shared.record_mut(0).unwrap().incarnation = 2; // copies the root once: the snapshot keeps its own
/// assert_eq!((snapshot[0].incarnation, shared[0].incarnation), (1, 2));
/// ```
pub trait RecordStore {
    /// How many records there are.
    fn len(&self) -> usize;
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The record at `index`, to change.
    fn record_mut(&mut self, index: usize) -> Option<&mut AgentRecord>;
    /// Adds a record at the end.
    fn push(&mut self, record: AgentRecord);
}

impl RecordStore for Vec<AgentRecord> {
    fn len(&self) -> usize {
        self.as_slice().len()
    }
    fn record_mut(&mut self, index: usize) -> Option<&mut AgentRecord> {
        self.get_mut(index)
    }
    fn push(&mut self, record: AgentRecord) {
        Vec::push(self, record);
    }
}

impl RecordStore for Vec<Arc<AgentRecord>> {
    fn len(&self) -> usize {
        self.as_slice().len()
    }
    fn record_mut(&mut self, index: usize) -> Option<&mut AgentRecord> {
        self.get_mut(index).map(Arc::make_mut)
    }
    fn push(&mut self, record: AgentRecord) {
        Vec::push(self, Arc::new(record));
    }
}

/// Applies one event to `records` (indexed by agent id): a `Vec<AgentRecord>`, or the
/// runtime's shared records.
///
/// ```
/// use agent_tree_protocol::{apply, AgentId, AgentRecord, AgentStatus, Event, EventKind, Outcome};
///
/// let mut records = vec![AgentRecord::root()];
/// let event = |seq, kind| Event { seq, agent: AgentId::new(1), parent: Some(AgentId::ROOT), depth: 1, at_ms: seq, kind };
/// apply(&mut records, &event(1, EventKind::Spawned { agent_type: "w".into(), request_id: None, detached: false })).unwrap();
/// apply(&mut records, &event(2, EventKind::Started { agent_type: "w".into(), incarnation: 1 })).unwrap();
/// apply(&mut records, &event(3, EventKind::settled(Outcome::completed("done")))).unwrap();
/// assert_eq!(records[1].status, AgentStatus::Completed);
/// assert_eq!(records[0].children, vec![AgentId::new(1)]);
/// // Terminal is sticky.
/// assert!(apply(&mut records, &event(4, EventKind::settled(Outcome::completed("again")))).is_err());
/// ```
///
/// # Errors
///
/// A [`FoldError`] when the event does not fit the records; the records are unchanged then.
pub fn apply<S: RecordStore + ?Sized>(records: &mut S, event: &Event) -> Result<(), FoldError> {
    fold_in(records, Cow::Borrowed(event))
}

/// [`apply`], taking the event: the texts it carries (an agent type, a request id, an
/// outcome) move into the records instead of being copied. For a caller that has no other
/// use for the event, such as a registry with nobody listening to its stream.
///
/// ```
/// use agent_tree_protocol::{apply_owned, AgentId, AgentRecord, Event, EventKind};
///
/// let mut records = vec![AgentRecord::root()];
/// let kind = EventKind::Spawned { agent_type: "w".into(), request_id: None, detached: false };
/// let event = Event { seq: 1, agent: AgentId::new(1), parent: Some(AgentId::ROOT), depth: 1, at_ms: 1, kind };
/// apply_owned(&mut records, event).unwrap();
/// assert_eq!(records[1].agent_type, "w");
/// ```
///
/// # Errors
///
/// As [`apply`]: the records are unchanged then.
pub fn apply_owned<S: RecordStore + ?Sized>(
    records: &mut S,
    event: Event,
) -> Result<(), FoldError> {
    fold_in(records, Cow::Owned(event))
}

/// The one fold behind [`apply`] and [`apply_owned`]: `event`'s texts are moved into the
/// records when it is owned, copied when borrowed.
fn fold_in<S: RecordStore + ?Sized>(
    records: &mut S,
    event: Cow<'_, Event>,
) -> Result<(), FoldError> {
    let (seq, agent) = (event.seq, event.agent);
    let index = |id: AgentId| usize::try_from(id.get()).ok();
    match &event.kind {
        EventKind::Spawned { detached, .. } | EventKind::Queued { detached, .. } => {
            let next = records.len() as u64;
            let parent = event.parent.and_then(index).filter(|&p| p < records.len());
            let (Some(parent), true) = (parent, agent.get() == next) else {
                return Err(FoldError::OutOfOrder { seq, agent, next });
            };
            let status = if matches!(event.kind, EventKind::Queued { .. }) {
                AgentStatus::Queued
            } else {
                AgentStatus::Starting
            };
            if let Some(parent) = records.record_mut(parent) {
                parent.children.push(agent);
            }
            let (detached, depth, parent, at_ms) =
                (*detached, event.depth, event.parent, event.at_ms);
            let Some((agent_type, request_id)) = spawn_texts(event) else {
                return Err(FoldError::OutOfOrder { seq, agent, next });
            };
            records.push(AgentRecord {
                id: agent,
                agent_type,
                depth,
                parent,
                children: Vec::new(),
                status,
                own: Usage::ZERO,
                subtree: Usage::ZERO,
                incarnation: 1,
                request_id,
                detached,
                created_ms: at_ms,
                started_ms: None,
                ended_ms: None,
                outcome: None,
            });
            Ok(())
        }
        EventKind::UsageReported { delta } => {
            let record = record_mut(records, seq, agent)?;
            if record.status.is_terminal() {
                return Err(FoldError::AfterTerminal { seq, agent });
            }
            record.own += *delta;
            let mut cursor = Some(agent);
            while let Some(at) = cursor {
                let Some(record) = index(at).and_then(|i| records.record_mut(i)) else {
                    break;
                };
                record.subtree += *delta;
                cursor = record.parent;
            }
            Ok(())
        }
        EventKind::Dequeued => advance(records, &event, AgentStatus::Starting),
        EventKind::Completing => advance(records, &event, AgentStatus::Completing),
        EventKind::Started { incarnation, .. } => {
            advance(records, &event, AgentStatus::Running)?;
            let record = record_mut(records, seq, agent)?;
            record.incarnation = *incarnation;
            record.started_ms.get_or_insert(event.at_ms);
            Ok(())
        }
        EventKind::Restarted { incarnation } => {
            let record = record_mut(records, seq, agent)?;
            reopen(record);
            record.incarnation = *incarnation;
            Ok(())
        }
        EventKind::Resumed => {
            reopen(record_mut(records, seq, agent)?);
            Ok(())
        }
        EventKind::Completed { outcome }
        | EventKind::Failed { outcome }
        | EventKind::Aborted { outcome }
        | EventKind::Killed { outcome } => {
            let status = event.kind.terminal_status().unwrap_or(outcome.status);
            advance(records, &event, status)?;
            let at_ms = event.at_ms;
            let Some(outcome) = outcome_of(event) else {
                return Err(FoldError::UnknownAgent { seq, agent });
            };
            let record = record_mut(records, seq, agent)?;
            record.ended_ms = Some(at_ms);
            record.outcome = Some(outcome);
            Ok(())
        }
        EventKind::Released { .. } => {
            let record = record_mut(records, seq, agent)?;
            match record.outcome.take() {
                Some(outcome) if record.status.is_terminal() => {
                    record.outcome = Some(outcome.into_released());
                    Ok(())
                }
                outcome => {
                    record.outcome = outcome;
                    Err(FoldError::NotSettled { seq, agent })
                }
            }
        }
        EventKind::Steered
        | EventKind::Asked { .. }
        | EventKind::ContextDropped
        | EventKind::Retrying { .. }
        | EventKind::TextDelta { .. }
        | EventKind::ToolProgress { .. } => record_mut(records, seq, agent).map(|_| ()),
    }
}

/// The agent type and request id of a `spawned` or `queued` event: moved out of an owned
/// event, copied from a borrowed one.
fn spawn_texts(event: Cow<'_, Event>) -> Option<(String, Option<RequestId>)> {
    match event {
        Cow::Owned(Event {
            kind:
                EventKind::Spawned {
                    agent_type,
                    request_id,
                    ..
                }
                | EventKind::Queued {
                    agent_type,
                    request_id,
                    ..
                },
            ..
        }) => Some((agent_type, request_id)),
        Cow::Borrowed(Event {
            kind:
                EventKind::Spawned {
                    agent_type,
                    request_id,
                    ..
                }
                | EventKind::Queued {
                    agent_type,
                    request_id,
                    ..
                },
            ..
        }) => Some((agent_type.clone(), request_id.clone())),
        _ => None,
    }
}

/// The outcome a terminal event announces: moved out of an owned event, copied from a
/// borrowed one.
fn outcome_of(event: Cow<'_, Event>) -> Option<Outcome> {
    match event {
        Cow::Owned(Event {
            kind:
                EventKind::Completed { outcome }
                | EventKind::Failed { outcome }
                | EventKind::Aborted { outcome }
                | EventKind::Killed { outcome },
            ..
        }) => Some(outcome),
        Cow::Borrowed(event) => event.kind.outcome().cloned(),
        Cow::Owned(_) => None,
    }
}

/// A new run of a settled (or restarting) agent: back to `starting`, its outcome cleared.
fn reopen(record: &mut AgentRecord) {
    record.status = AgentStatus::Starting;
    record.outcome = None;
    record.ended_ms = None;
}

fn record_mut<S: RecordStore + ?Sized>(
    records: &mut S,
    seq: u64,
    agent: AgentId,
) -> Result<&mut AgentRecord, FoldError> {
    usize::try_from(agent.get())
        .ok()
        .and_then(|i| records.record_mut(i))
        .ok_or(FoldError::UnknownAgent { seq, agent })
}

fn advance<S: RecordStore + ?Sized>(
    records: &mut S,
    event: &Event,
    to: AgentStatus,
) -> Result<(), FoldError> {
    let record = record_mut(records, event.seq, event.agent)?;
    record.status = record
        .status
        .advance(to)
        .map_err(|source| FoldError::Transition {
            seq: event.seq,
            agent: event.agent,
            source,
        })?;
    Ok(())
}

/// Records and tally rebuilt from an event stream.
///
/// ```
/// use agent_tree_protocol::Fold;
/// let fold = Fold::new();
/// assert_eq!(fold.records().len(), 1); // the root
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fold {
    records: Vec<AgentRecord>,
    tally: EventTally,
}

impl Default for Fold {
    fn default() -> Self {
        Fold::new()
    }
}

impl Fold {
    /// A fold holding only the root record.
    pub fn new() -> Self {
        Fold {
            records: vec![AgentRecord::root()],
            tally: EventTally::default(),
        }
    }

    /// Applies one event and counts it.
    ///
    /// # Errors
    ///
    /// As [`apply`]; the event is not counted then.
    pub fn apply(&mut self, event: &Event) -> Result<(), FoldError> {
        apply(&mut self.records, event)?;
        self.tally.count(&event.kind);
        Ok(())
    }

    /// The records, in id order.
    pub fn records(&self) -> &[AgentRecord] {
        &self.records
    }

    /// The events counted so far, by kind.
    pub fn tally(&self) -> &EventTally {
        &self.tally
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::EndReason;

    fn event(seq: u64, agent: u64, parent: u64, kind: EventKind) -> Event {
        Event {
            seq,
            agent: AgentId::new(agent),
            parent: Some(AgentId::new(parent)),
            depth: 1,
            at_ms: seq * 10,
            kind,
        }
    }

    /// Taking the event folds exactly as borrowing it: the same records after every event
    /// of a stream that spawns, queues, starts, bills, settles, restarts, resumes and
    /// releases, and the same refusals (with the records unchanged) for events that do not
    /// fit.
    #[test]
    fn an_owned_event_folds_as_a_borrowed_one() {
        let spawned = |t: &str, id: Option<&str>| EventKind::Spawned {
            agent_type: t.into(),
            request_id: id.map(RequestId::new),
            detached: id.is_none(),
        };
        let stream = [
            event(1, 1, 0, spawned("lead", None)),
            event(2, 2, 1, spawned("worker", Some("a1/c1"))),
            event(
                3,
                3,
                1,
                EventKind::Queued {
                    agent_type: "worker".into(),
                    request_id: Some(RequestId::new("a1/c2")),
                    detached: false,
                },
            ),
            // Out of order: the next id is 4.
            event(4, 9, 1, spawned("worker", None)),
            event(5, 3, 1, EventKind::Dequeued),
            event(
                6,
                2,
                1,
                EventKind::Started {
                    agent_type: "worker".into(),
                    incarnation: 1,
                },
            ),
            event(
                7,
                2,
                1,
                EventKind::UsageReported {
                    delta: Usage::tokens(5, 2),
                },
            ),
            event(
                8,
                2,
                1,
                EventKind::settled(Outcome::completed("done").with_partial("do")),
            ),
            // Terminal is sticky.
            event(
                9,
                2,
                1,
                EventKind::settled(Outcome::failed(EndReason::ModelError, "late")),
            ),
            event(10, 2, 1, EventKind::Released { bytes: 4 }),
            event(11, 2, 1, EventKind::Resumed),
            event(
                12,
                3,
                1,
                EventKind::Killed {
                    outcome: Outcome::failed(EndReason::ActorFailed, "gone"),
                },
            ),
            event(13, 3, 1, EventKind::Restarted { incarnation: 2 }),
            event(14, 77, 1, EventKind::Steered),
        ];
        let mut borrowed = vec![AgentRecord::root()];
        let mut owned = vec![AgentRecord::root()];
        for event in stream {
            let by_ref = apply(&mut borrowed, &event);
            let by_value = apply_owned(&mut owned, event.clone());
            assert_eq!(by_ref, by_value, "event {}", event.seq);
            assert_eq!(borrowed, owned, "event {}", event.seq);
        }
        assert_eq!(owned[2].outcome, None, "resumed");
        assert_eq!(owned[2].request_id, Some(RequestId::new("a1/c1")));
        assert_eq!(owned[3].agent_type, "worker");
        assert_eq!(owned.len(), 4);
    }
}
