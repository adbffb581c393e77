//! Shared helpers of the lifetime, supervision, shutdown, abort and wait-policy integration
//! tests: a model wrapper that records each call's whole request, when it started and when
//! its future ended (returned or dropped by a cancellation), and lets a test await "agent X
//! has made its n-th model call" without polling; a weak cell giving hooks and models the
//! tree they run in; and small script and event helpers.
//!
//! Every helper here is deterministic under a paused tokio clock: nothing sleeps for real and
//! nothing polls. Waits observe a `watch` channel or the event stream under a timeout guard.

#![allow(dead_code, unreachable_pub)]

use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use agent_tree::BoxFuture;
use agent_tree::EventStream;
use agent_tree::prelude::*;
use agent_tree::protocol::{Event, EventKind, Message};
use agent_tree::testkit::{Script, ScriptedModel, Turn};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use super::harness::GUARD;

/// How a recorded model call's future ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallEnd {
    /// It is still in flight.
    InFlight,
    /// It returned (an answer, tool calls or a model error).
    Returned,
    /// Its future was dropped before returning: the turn was cancelled.
    Dropped,
}

/// One model call as the tree made it.
#[derive(Clone, Debug)]
pub struct CallRecord {
    /// The agent.
    pub agent: AgentId,
    /// Its type.
    pub agent_type: String,
    /// Which run of the agent.
    pub incarnation: u32,
    /// The turn within that run.
    pub turn: u32,
    /// The whole conversation sent.
    pub messages: Vec<Message>,
    /// When the call started (tokio time).
    pub at: Instant,
    /// When its future ended, if it has.
    pub ended_at: Option<Instant>,
    /// How it ended.
    pub end: CallEnd,
}

#[derive(Default)]
struct WatchedInner {
    calls: Mutex<Vec<CallRecord>>,
    changed: OnceLock<watch::Sender<u64>>,
}

impl WatchedInner {
    fn bump(&self) {
        self.changed
            .get_or_init(|| watch::channel(0).0)
            .send_modify(|n| *n += 1);
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.get_or_init(|| watch::channel(0).0).subscribe()
    }
}

/// A model that delegates to a [`ScriptedModel`] and records every call: its request, its
/// start, and when and how its future ended. With narration on, a turn that calls tools also
/// carries the text `"<agent> turn <n>"`, so an agent always has partial output to keep.
#[derive(Clone)]
pub struct Watched {
    /// The scripted model answering.
    pub scripted: ScriptedModel,
    narrate: bool,
    inner: Arc<WatchedInner>,
}

impl std::fmt::Debug for Watched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("calls", &self.inner.calls.lock().len())
            .finish()
    }
}

/// Records the end of one call when the call's future finishes or is dropped.
struct EndGuard {
    inner: Arc<WatchedInner>,
    index: usize,
    returned: bool,
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        if let Some(call) = self.inner.calls.lock().get_mut(self.index) {
            call.ended_at = Some(Instant::now());
            call.end = if self.returned {
                CallEnd::Returned
            } else {
                CallEnd::Dropped
            };
        }
        self.inner.bump();
    }
}

impl Watched {
    /// Wraps `scripted`.
    pub fn new(scripted: ScriptedModel) -> Self {
        Watched {
            scripted,
            narrate: false,
            inner: Arc::default(),
        }
    }

    /// Gives every tool-calling turn the text `"<agent> turn <n>"`.
    pub fn narrated(mut self) -> Self {
        self.narrate = true;
        self
    }

    /// The text a narrated tool-calling turn of `agent` carries.
    pub fn narration(agent: AgentId, turn: u32) -> String {
        format!("{agent} turn {turn}")
    }

    /// Every call so far, in the order made.
    pub fn calls(&self) -> Vec<CallRecord> {
        self.inner.calls.lock().clone()
    }

    /// The calls `agent` made, in order.
    pub fn calls_of(&self, agent: AgentId) -> Vec<CallRecord> {
        self.inner
            .calls
            .lock()
            .iter()
            .filter(|c| c.agent == agent)
            .cloned()
            .collect()
    }

    /// How many calls `agent` made.
    pub fn count_of(&self, agent: AgentId) -> usize {
        self.inner
            .calls
            .lock()
            .iter()
            .filter(|c| c.agent == agent)
            .count()
    }

    /// How many calls were made in total.
    pub fn count(&self) -> usize {
        self.inner.calls.lock().len()
    }

    /// Waits (under [`GUARD`]) until `agent` has made at least `n` calls.
    pub async fn until_calls(&self, agent: AgentId, n: usize) {
        self.until(&format!("{agent} to make {n} model calls"), |calls| {
            calls.iter().filter(|c| c.agent == agent).count() >= n
        })
        .await;
    }

    /// Waits (under [`GUARD`]) until every agent of `agents` has made at least `n` calls.
    pub async fn until_all_calls(&self, agents: &[AgentId], n: usize) {
        self.until(
            &format!("{agents:?} to make {n} model calls each"),
            |calls| {
                agents
                    .iter()
                    .all(|&a| calls.iter().filter(|c| c.agent == a).count() >= n)
            },
        )
        .await;
    }

    /// Waits (under [`GUARD`]) until `pred` holds over the calls.
    pub async fn until(&self, what: &str, mut pred: impl FnMut(&[CallRecord]) -> bool) {
        let mut changes = self.inner.subscribe();
        let inner = self.inner.clone();
        let wait = changes.wait_for(move |_| pred(&inner.calls.lock()));
        match tokio::time::timeout(GUARD, wait).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => panic!("the model was dropped while waiting for {what}"),
            Err(_) => panic!("timed out waiting for {what}"),
        }
    }
}

impl Model for Watched {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        let inner = self.inner.clone();
        let narrate = self.narrate;
        Box::pin(async move {
            let (agent, turn) = (request.agent, request.turn);
            let index = {
                let mut calls = inner.calls.lock();
                calls.push(CallRecord {
                    agent,
                    agent_type: request.agent_type.clone(),
                    incarnation: request.incarnation,
                    turn,
                    messages: request.messages.clone(),
                    at: Instant::now(),
                    ended_at: None,
                    end: CallEnd::InFlight,
                });
                calls.len() - 1
            };
            inner.bump();
            let mut guard = EndGuard {
                inner: inner.clone(),
                index,
                returned: false,
            };
            let mut result = self.scripted.turn(request).await;
            guard.returned = true;
            drop(guard);
            if let Ok(response) = &mut result {
                if narrate && !response.tool_calls.is_empty() && response.text.is_empty() {
                    response.text = Watched::narration(agent, turn);
                }
            }
            result
        })
    }
}

/// A weak handle on the tree, for hooks and models that need to call it. Holds the tree
/// weakly, so it never keeps it alive.
#[derive(Clone, Default)]
pub struct TreeCell {
    tree: Arc<OnceLock<Weak<Tree>>>,
}

impl std::fmt::Debug for TreeCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeCell").finish_non_exhaustive()
    }
}

impl TreeCell {
    /// An empty cell.
    pub fn new() -> Self {
        TreeCell::default()
    }

    /// Points the cell at `tree`.
    pub fn set(&self, tree: &Arc<Tree>) {
        self.tree
            .set(Arc::downgrade(tree))
            .expect("the cell is set once");
    }

    /// The tree, while it is alive.
    pub fn get(&self) -> Option<Arc<Tree>> {
        self.tree.get().and_then(Weak::upgrade)
    }
}

/// A script of `n` turns that each hang until cancelled.
pub fn hanging(n: usize) -> Script {
    Script::new((0..n).map(|_| Turn::hang()))
}

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The restart events of `events`, as `(agent, incarnation)`, in order.
pub fn restarts(events: &[Event]) -> Vec<(AgentId, u32)> {
    events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Restarted { incarnation } => Some((e.agent, incarnation)),
            _ => None,
        })
        .collect()
}

/// The terminal events of `agent` in `events` (one per incarnation), in order.
pub fn terminals_of(events: &[Event], agent: AgentId) -> Vec<Event> {
    events
        .iter()
        .filter(|e| e.agent == agent && e.kind.terminal_status().is_some())
        .cloned()
        .collect()
}

/// Reads events until one matches `pred`, keeping every event read (the match included) in
/// `log`.
pub async fn collect_until(
    events: &mut EventStream,
    log: &mut Vec<Event>,
    mut pred: impl FnMut(&Event) -> bool,
) -> Event {
    tokio::time::timeout(GUARD, async {
        loop {
            match events.next().await {
                Some(event) => {
                    log.push(event.clone());
                    if pred(&event) {
                        return event;
                    }
                }
                None => panic!("the event stream closed"),
            }
        }
    })
    .await
    .expect("timed out waiting for an event")
}

/// Whether `event` is a `restarted` event of `agent` with `incarnation`.
pub fn restarted(agent: AgentId, incarnation: u32) -> impl FnMut(&Event) -> bool {
    move |e| e.agent == agent && e.kind == EventKind::Restarted { incarnation }
}

/// Whether `event` is a terminal event of `agent`.
pub fn terminal(agent: AgentId) -> impl FnMut(&Event) -> bool {
    move |e| e.agent == agent && e.kind.terminal_status().is_some()
}
