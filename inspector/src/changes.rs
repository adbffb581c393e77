//! What a watcher is sent: the tree as rows (the page's view of a record), first whole,
//! then in batches of the events since and the rows they changed.
//!
//! One collector task per inspector reads the tree's events as they come, so the tree never
//! waits for a browser: it keeps the events for the log (at most a batch's worth, the rest
//! counted as skipped) and the ids of the agents they changed (one entry per agent, however
//! many events), and every batch interval, while anyone watches, makes one batch that every
//! watcher is sent: ten watchers cost the tree what one does. Each batch and snapshot says
//! how many events its rows hold (`seq`), so a page never takes rows older than its own.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use agent_tree_actors::Tree;
use agent_tree_protocol::{AgentId, AgentRecord, AgentStatus, Event, TreeSnapshot, Usage};
use axum::response::sse;
use futures_util::Stream;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

/// One agent as the page shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Row {
    pub(crate) id: AgentId,
    pub(crate) parent: Option<AgentId>,
    pub(crate) agent_type: String,
    pub(crate) depth: u32,
    pub(crate) status: AgentStatus,
    pub(crate) own: Usage,
    pub(crate) subtree: Usage,
    pub(crate) children: usize,
    pub(crate) incarnation: u32,
    pub(crate) detached: bool,
    pub(crate) created_ms: u64,
    pub(crate) ended_ms: Option<u64>,
    /// The outcome's reason and the first 200 bytes of its text, once settled.
    pub(crate) ended: Option<String>,
}

impl Row {
    pub(crate) fn of(record: &AgentRecord) -> Row {
        let ended = record.outcome.as_ref().map(|outcome| {
            let mut text = outcome
                .text
                .clone()
                .or_else(|| outcome.error.clone())
                .unwrap_or_default();
            if text.len() > 200 {
                let mut end = 200;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                text.push('…');
            }
            let reason = serde_json::to_value(outcome.reason)
                .ok()
                .and_then(|r| r.as_str().map(str::to_owned))
                .unwrap_or_default();
            if text.is_empty() {
                reason
            } else {
                format!("{reason}: {text}")
            }
        });
        Row {
            id: record.id,
            parent: record.parent,
            agent_type: record.agent_type.clone(),
            depth: record.depth,
            status: record.status,
            own: record.own,
            subtree: record.subtree,
            children: record.children.len(),
            incarnation: record.incarnation,
            detached: record.detached,
            created_ms: record.created_ms,
            ended_ms: record.ended_ms,
            ended,
        }
    }
}

/// The tree as the page first reads it.
#[derive(Debug, Serialize)]
pub(crate) struct Whole {
    pub(crate) session: String,
    pub(crate) taken_ms: u64,
    pub(crate) read_only: bool,
    pub(crate) rows: Vec<Row>,
    pub(crate) tally: agent_tree_protocol::EventTally,
    pub(crate) peak_live: usize,
    /// How many events the rows hold: batches of no later `seq` are older than them.
    pub(crate) seq: u64,
    /// For a rewind: how many events the journal holds (the page's scrubber).
    pub(crate) rewind: Option<usize>,
}

impl Whole {
    pub(crate) fn of(snapshot: &TreeSnapshot, read_only: bool) -> Whole {
        Whole {
            session: snapshot.session.to_string(),
            taken_ms: snapshot.taken_ms,
            read_only,
            rows: snapshot.records.iter().map(|r| Row::of(r)).collect(),
            tally: snapshot.tally.clone(),
            peak_live: snapshot.peak_live,
            seq: snapshot.tally.total(),
            rewind: None,
        }
    }

    /// A journal's tree after the first `at` of its `len` events.
    pub(crate) fn rewound(
        session: &str,
        records: &[AgentRecord],
        tally: agent_tree_protocol::EventTally,
        len: usize,
    ) -> Whole {
        Whole {
            session: session.to_owned(),
            taken_ms: records
                .iter()
                .filter_map(|r| r.ended_ms.or(r.started_ms))
                .max()
                .unwrap_or(0),
            read_only: true,
            rows: records.iter().map(Row::of).collect(),
            seq: tally.total(),
            tally,
            peak_live: 0,
            rewind: Some(len),
        }
    }
}

/// One message to a watcher: the events since the last (the first `max` of them), how many
/// more there were, and the rows they changed (with every ancestor's, whose subtree usage
/// and children changed with them).
#[derive(Debug, Default, Serialize)]
pub(crate) struct Batch {
    /// How many events the rows hold (the page skips rows older than its snapshot's).
    pub(crate) seq: u64,
    pub(crate) events: Vec<Event>,
    pub(crate) skipped: u64,
    pub(crate) rows: Vec<Row>,
    pub(crate) tally: Option<agent_tree_protocol::EventTally>,
}

/// What a watcher's collector has gathered and its stream not yet sent.
#[derive(Debug, Default)]
struct Pending {
    events: Vec<Event>,
    skipped: u64,
    changed: BTreeSet<AgentId>,
}

impl Pending {
    /// Takes `event`: kept for the log while fewer than `max` are, its agent marked changed.
    fn take(&mut self, event: Event, max: usize) {
        self.changed.insert(event.agent);
        if self.events.len() < max {
            self.events.push(event);
        } else {
            self.skipped += 1;
        }
    }
}

/// The rows of `changed` and their ancestors, from `snapshot`, in id order.
pub(crate) fn changed_rows(snapshot: &TreeSnapshot, changed: &BTreeSet<AgentId>) -> Vec<Row> {
    let find = |id: AgentId| {
        snapshot
            .records
            .binary_search_by_key(&id, |r| r.id)
            .ok()
            .map(|i| &snapshot.records[i])
    };
    let mut all = BTreeSet::new();
    for &id in changed {
        let mut at = Some(id);
        while let Some(id) = at {
            if !all.insert(id) {
                break;
            }
            at = find(id).and_then(|r| r.parent);
        }
    }
    all.into_iter()
        .filter_map(find)
        .map(|r| Row::of(r))
        .collect()
}

/// The changes of a live tree, gathered once for every watcher: one collector reads the
/// tree's events as they come, and every `every` (while anyone watches) makes one batch,
/// serialized once and sent to each watcher. A watcher that falls more than
/// [`BACKLOG`] batches behind is sent a `reset` (the page reads the snapshot again) instead
/// of what it missed.
#[derive(Clone, Debug)]
pub(crate) struct Hub {
    tree: Arc<Tree>,
    batches: tokio::sync::broadcast::Sender<Arc<str>>,
    stop: CancellationToken,
}

/// How many batches a watcher may fall behind before it is reset.
pub(crate) const BACKLOG: usize = 64;

impl Hub {
    /// Starts the collector of `tree`'s changes, until `stop`.
    pub(crate) fn start(
        tree: Arc<Tree>,
        every: Duration,
        max: usize,
        stop: CancellationToken,
    ) -> Hub {
        let (batches, _) = tokio::sync::broadcast::channel(BACKLOG);
        let hub = Hub {
            tree: tree.clone(),
            batches: batches.clone(),
            stop: stop.clone(),
        };
        let mut events = tree.subscribe();
        tokio::spawn(async move {
            let mut pending = Pending::default();
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    event = events.next() => match event {
                        Some(event) => pending.take(event, max),
                        None => return,
                    },
                    _ = tick.tick() => {
                        if pending.changed.is_empty() {
                            continue;
                        }
                        let taken = std::mem::take(&mut pending);
                        // Nobody watching: nothing to make.
                        if batches.receiver_count() == 0 {
                            continue;
                        }
                        let snapshot = tree.snapshot();
                        let batch = Batch {
                            seq: snapshot.tally.total(),
                            rows: changed_rows(&snapshot, &taken.changed),
                            events: taken.events,
                            skipped: taken.skipped,
                            tally: Some(snapshot.tally.clone()),
                        };
                        let data: Arc<str> = serde_json::to_string(&batch).unwrap_or_default().into();
                        let _ = batches.send(data);
                    }
                }
            }
        });
        hub
    }

    /// One watcher's stream of batches, until the inspector stops. A page that read the
    /// snapshot at `since` (its `seq`) and has missed a change since (made before this
    /// stream began, so in no batch it will get) is first sent a `reset`.
    pub(crate) fn watch(
        &self,
        since: Option<u64>,
    ) -> impl Stream<Item = Result<sse::Event, Infallible>> + Send + use<> {
        let receiver = self.batches.subscribe();
        let missed = since.is_none_or(|seq| self.tree.snapshot().tally.total() > seq);
        let stop = self.stop.clone();
        let state = (receiver, stop, missed);
        futures_util::stream::unfold(state, |(mut receiver, stop, missed)| async move {
            if missed {
                let reset = sse::Event::default().event("reset").data("{}");
                return Some((Ok(reset), (receiver, stop, false)));
            }
            let event = tokio::select! {
                () = stop.cancelled() => return None,
                batch = receiver.recv() => match batch {
                    Ok(data) => sse::Event::default().event("batch").data(&*data),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        sse::Event::default().event("reset").data("{}")
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                },
            };
            Some((Ok(event), (receiver, stop, false)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch keeps at most `max` events for the log and counts the rest, but marks every
    /// agent they changed.
    #[test]
    fn a_batch_keeps_its_log_bounded_and_every_change() {
        let mut pending = Pending::default();
        for i in 0..10u64 {
            let event = Event {
                seq: i + 1,
                agent: AgentId::new(i % 3 + 1),
                parent: Some(AgentId::ROOT),
                depth: 1,
                at_ms: i,
                kind: agent_tree_protocol::EventKind::Steered,
            };
            pending.take(event, 4);
        }
        assert_eq!(pending.events.len(), 4);
        assert_eq!(pending.skipped, 6);
        assert_eq!(pending.changed.len(), 3);
    }
}
