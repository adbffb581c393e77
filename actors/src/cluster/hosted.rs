//! The child's side of an edge: the tree a node hosts one remote child's subtree in, and
//! the edge's end that forwards the tree's events up and carries out the commands that
//! come down.
//!
//! One task per edge, owning everything of it (the hosted [`Tree`], its [`Endpoint`], its
//! [`ChildLease`], the fold of what it forwarded): inputs are the edge's frames, the hosted
//! tree's events, the owner's node's session coming and going, and one timer.
//!
//! # Invariants
//!
//! * Every hosted event goes up in the hosted tree's order, once applied by the owner's
//!   node (the outbox keeps it until acknowledged, replays it after a reconnect).
//! * Nothing runs without a lease: commands wait until the first grant; when the lease
//!   lapses every live hosted agent is killed before anything else happens, and every later
//!   command is refused.
//! * The edge ends (its tree shut down, its route removed) a short linger after its top
//!   agent settled or its lease lapsed: the linger gives the owner's node time to
//!   acknowledge the last events.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use agent_tree_protocol::{
    AgentId, Command, Down, Event, EventKind, Fold, Frame, SpawnRequest, TerminalReport, Up,
};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::time::Instant;

use super::placed::RemoteOwned;
use super::wire::Directed;
use super::{NodeInner, PeerEvent};
use super::{RETRANSMIT_EVERY, TICK};
use crate::cluster::edge::lease::{ChildLease, LeaseState};
use crate::cluster::edge::seq::{Endpoint, OutboxLimits, QueueError, Received};
use crate::cluster::edge::size::SizeGuard;
use crate::tree::{TopSpawn, Tree, TreeBuilder};

/// How long an edge whose work is over stays to have its last frames acknowledged.
const LINGER: Duration = Duration::from_secs(2);

/// What the host hands a hosted edge.
#[derive(Debug)]
pub(crate) enum Input {
    /// A frame from the owner's node.
    Frame(Frame<Down>),
}

/// A hosted top agent's `ask_owner` question, from the hosted tree's question handler, and
/// where its answer goes.
struct Asked {
    agent: AgentId,
    question: String,
    answer: oneshot::Sender<Result<String, String>>,
}

/// Who a hosted edge is.
#[derive(Debug)]
pub(crate) struct Edge {
    pub(crate) node: Arc<NodeInner>,
    pub(crate) id: String,
    /// The owner's node.
    pub(crate) owner: String,
}

struct Side {
    edge: Edge,
    tree: Option<Arc<Tree>>,
    end: Endpoint<Up>,
    lease: ChildLease,
    epoch: Instant,
    fold: Fold,
    /// Owner's ids to hosted ids.
    hosted: HashMap<AgentId, AgentId>,
    /// Commands that came before the first grant, with their numbers.
    waiting: VecDeque<(u64, Command)>,
    /// Bodies a full outbox refused, in order.
    held: VecDeque<Up>,
    down: bool,
    lapsed: bool,
    shutdown: Option<tokio::task::JoinHandle<()>>,
    /// When the edge ends, once its work is over.
    finish_at: Option<Instant>,
    /// Questions of hosted top agents waiting for their owner's answer, by hosted id.
    questions: HashMap<AgentId, oneshot::Sender<Result<String, String>>>,
    /// How much of each hosted top agent's conversation went up ([`CUT`]: none can).
    conversations: HashMap<AgentId, usize>,
    /// The definitions its spawns run from (remote-owned copies of the tree's).
    remote_owned: RemoteOwned,
    ticks: u32,
}

/// A top agent's conversation that cannot go up (over the edge's body limit).
const CUT: usize = usize::MAX;

/// A hosted top agent's conversation, from the hosted tree's tap (`Registry::tap_conversation`).
type Tapped = crate::registry::Tapped;

/// What goes up from the hosted tree, in the order it happened there.
enum Hosted {
    Event(Event),
    Tapped(Tapped),
}

impl Hosted {
    /// A conversation tapped after event `s` goes after it and before event `s + 1`: the
    /// children its results name are mirrored first, and a settle's conversation comes
    /// before its terminal event.
    fn order(&self) -> (u64, u8) {
        match self {
            Hosted::Event(event) => (event.seq, 1),
            Hosted::Tapped((_, _, after)) => (after.saturating_add(1), 0),
        }
    }
}

/// Runs one hosted edge until its work is over.
pub(crate) async fn run(
    edge: Edge,
    builder: TreeBuilder,
    mut inbox: mpsc::UnboundedReceiver<Input>,
) {
    // A hosted top agent's owner is the remote one: its questions go up the edge (this
    // replaces a question handler the factory set).
    let (ask_tx, mut asks) = mpsc::unbounded_channel::<Asked>();
    let builder = builder.on_question(move |question: crate::Question| {
        let ask_tx = ask_tx.clone();
        async move {
            let (answer, answered) = oneshot::channel();
            let asked = Asked {
                agent: question.agent,
                question: question.question,
                answer,
            };
            ask_tx
                .send(asked)
                .map_err(|_| "the hosted edge has ended".to_owned())?;
            answered
                .await
                .unwrap_or_else(|_| Err("the owner's node did not answer".to_owned()))
        }
    });
    let tree = match builder.build().await {
        // A hosted tree must be fresh: its ids and event numbers are the edge's, dense from
        // its root. One recovered from a journal (the factory gave every hosted tree the
        // same file) holds an earlier tree.
        Ok(tree) if tree.record(AgentId::new(1)).is_some() => {
            tracing::warn!(
                edge = %edge.id,
                "the hosted tree is not fresh (its journal holds an earlier tree): give each hosted tree its own journal"
            );
            None
        }
        Ok(tree) => Some(Arc::new(tree)),
        Err(error) => {
            tracing::warn!(edge = %edge.id, %error, "the hosted tree did not build");
            None
        }
    };
    // Each top agent's conversation at its turn boundaries and its settle: it goes up as
    // it grows, so the owner's node keeps what a local owner's tree would.
    let (tap, mut taps) = mpsc::unbounded_channel::<Tapped>();
    if let Some(tree) = &tree {
        tree.shared.registry.set_conversation_tap(tap);
        edge.node.hosted_tree(&edge.id, tree);
    }
    let mut events = tree.as_ref().map(|t| t.subscribe());
    let mut peers = edge.node.subscribe_peers();
    let terms = edge.node.terms();
    let mut side = Side {
        down: !edge.node.reaches(&edge.owner),
        edge,
        tree,
        end: Endpoint::new(OutboxLimits::default(), SizeGuard::default()),
        lease: ChildLease::new(terms.renew_every(), terms.lease),
        epoch: Instant::now(),
        fold: Fold::new(),
        hosted: HashMap::new(),
        waiting: VecDeque::new(),
        held: VecDeque::new(),
        lapsed: false,
        shutdown: None,
        finish_at: None,
        questions: HashMap::new(),
        conversations: HashMap::new(),
        remote_owned: RemoteOwned::default(),
        ticks: 0,
    };
    side.renew_now();
    let mut peers_open = true;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            input = inbox.recv() => match input {
                Some(Input::Frame(frame)) => side.on_frame(frame).await,
                None => break,
            },
            Some(event) = next_event(&mut events) => {
                side.on_hosted(Hosted::Event(event), &mut taps, &mut events);
            }
            Some(tapped) = taps.recv() => {
                side.on_hosted(Hosted::Tapped(tapped), &mut taps, &mut events);
            }
            Some(asked) = asks.recv() => side.on_asked(asked),
            // Lagged, the timer's reachability check catches up.
            peer = peers.recv(), if peers_open => match peer {
                Ok(PeerEvent::Up(name)) if name == side.edge.owner => side.on_peer_up(),
                Ok(PeerEvent::Down(name)) if name == side.edge.owner => side.down = true,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => peers_open = false,
            },
            _ = tick.tick() => {
                side.on_tick().await;
                if side.finished() {
                    break;
                }
            }
        }
        side.flush();
    }
    side.end_edge().await;
}

async fn next_event(events: &mut Option<crate::EventStream>) -> Option<Event> {
    match events {
        Some(events) => events.next().await,
        None => std::future::pending().await,
    }
}

impl Side {
    fn now(&self) -> Duration {
        Instant::now().saturating_duration_since(self.epoch)
    }

    fn renew_now(&mut self) {
        if self.lapsed {
            return;
        }
        let ticket = self.lease.request(self.now());
        let frame = self.end.control(Up::Renew { ticket });
        self.send_control(frame);
    }

    fn on_peer_up(&mut self) {
        if self.down {
            self.down = false;
            self.end.reconnect();
            self.renew_now();
        }
    }

    fn send_control(&mut self, frame: Frame<Up>) {
        if !self.down {
            let edge = &self.edge;
            edge.node.send(&edge.owner, &edge.id, Directed::Up(frame));
        }
    }

    fn flush(&mut self) {
        while let Some(body) = self.held.pop_front() {
            if let Err(body) = self.try_queue(body) {
                self.held.push_front(*body);
                break;
            }
        }
        if self.down {
            return;
        }
        for frame in self.end.outgoing() {
            let edge = &self.edge;
            if !edge.node.send(&edge.owner, &edge.id, Directed::Up(frame)) {
                self.down = true;
                self.end.reconnect();
                return;
            }
        }
    }

    /// Sends a sequenced body, behind anything held.
    fn queue(&mut self, body: Up) {
        if !self.held.is_empty() {
            self.held.push_back(body);
        } else if let Err(body) = self.try_queue(body) {
            self.held.push_back(*body);
        }
    }

    /// Queues `body` (in parts when it is over the frame limit); hands it back when the
    /// outbox is full. An event over the body limit is shrunk once ([`shrink`]: never a gap
    /// in the event numbers the owner's mirror folds), a conversation cut; anything else
    /// that large is dropped with a warning (the callers check what they can refuse, a
    /// question, beforehand).
    fn try_queue(&mut self, body: Up) -> Result<(), Box<Up>> {
        self.try_queue_once(body, false)
    }

    fn try_queue_once(&mut self, body: Up, shrunk: bool) -> Result<(), Box<Up>> {
        match self.end.queue(body) {
            Ok(_) => Ok(()),
            Err(QueueError::Full(full)) => Err(Box::new(full.item)),
            Err(QueueError::Oversized { body, error }) => {
                match body {
                    Up::Event { event } if !shrunk => {
                        let event = shrink(event, self.edge.node.name());
                        return self.try_queue_once(Up::Event { event }, true);
                    }
                    // Over the body limit even in parts: none of the conversation stays at
                    // the owner's node.
                    Up::Conversation {
                        agent,
                        from,
                        cut: false,
                        ..
                    } => {
                        let from = usize::try_from(from).unwrap_or(CUT);
                        self.cut_conversation(agent, from);
                    }
                    other => tracing::warn!(
                        edge = %self.edge.id, %error, kind = ?std::mem::discriminant(&other),
                        "an upward frame over the size limit was not sent"
                    ),
                }
                Ok(())
            }
            Err(QueueError::Control(_)) => Ok(()),
        }
    }

    async fn on_frame(&mut self, frame: Frame<Down>) {
        let received = match self.end.receive(frame) {
            Ok(received) => received,
            Err(error) => {
                tracing::warn!(edge = %self.edge.id, %error, "refused a frame from the owner's node");
                return;
            }
        };
        let reply = received.reply();
        match received {
            Received::Fresh {
                seq,
                body: Down::Command { command },
            } => {
                if matches!(self.lease_state(), LeaseState::Awaiting) {
                    self.waiting.push_back((seq, command));
                } else {
                    self.command(seq, command).await;
                }
            }
            // A grant for a forgotten ticket, or after the lapse, is not taken.
            Received::Control {
                body: Down::Grant { grant },
                ..
            } if self.lease.on_grant(grant).is_ok() => {
                while let Some((seq, command)) = self.waiting.pop_front() {
                    self.command(seq, command).await;
                }
            }
            _ => {}
        }
        if let Some(resend) = reply {
            let ack = self.end.ack_frame(resend);
            self.send_control(ack);
        }
    }

    fn lease_state(&mut self) -> LeaseState {
        let now = self.now();
        self.lease.check(now)
    }

    fn refuse(&mut self, seq: u64, error: impl Into<String>) {
        self.queue(Up::Refused {
            command: seq,
            error: error.into(),
        });
    }

    async fn command(&mut self, seq: u64, command: Command) {
        if self.lapsed {
            return self.refuse(seq, "the lease lapsed");
        }
        let Some(tree) = self.tree.clone() else {
            return self.refuse(
                seq,
                "the hosted tree did not build, or is not fresh (a journal shared by hosted trees)",
            );
        };
        let hosted = command.agent().and_then(|a| self.hosted.get(&a).copied());
        match command {
            Command::Spawn {
                agent,
                definition,
                prompt,
                request_id,
                settle,
                context,
                resume,
                earlier,
                ..
            } => {
                let mut request = SpawnRequest::new(definition, prompt);
                request.request_id = Some(request_id);
                request.settle = settle;
                // Its owner's node restarts it (a new edge): never this tree too.
                let remote_owned = &self.remote_owned;
                let top = TopSpawn {
                    adapt: Some(&|definition, inherits| remote_owned.of(definition, inherits)),
                    inherited: &context,
                    resumed: resume,
                    earlier: resume.then_some(crate::registry::Earlier {
                        children: &earlier,
                        rename: super::edge::ids::rename,
                    }),
                };
                match tree.spawn_top(request, top).await {
                    Ok(handle) => {
                        self.hosted.insert(agent, handle.id());
                        if resume {
                            // A resumed run's conversation starts with the one its owner's
                            // node sent down, which it holds: only what follows goes up.
                            self.conversations.insert(handle.id(), context.len());
                        }
                    }
                    Err(error) => self.refuse(seq, error.to_string()),
                }
            }
            Command::Steer { message, .. } => match hosted {
                Some(id) => match tree.steer(id, message).await {
                    Ok(receipt) => self.queue(Up::Steered {
                        command: seq,
                        queued: receipt == crate::SteerReceipt::Queued,
                    }),
                    Err(error) => self.refuse(seq, error.to_string()),
                },
                None => self.refuse(seq, "no such hosted agent"),
            },
            Command::Abort { .. } => match hosted.map(|id| tree.abort(id)) {
                Some(Ok(())) => {}
                Some(Err(error)) => self.refuse(seq, error.to_string()),
                None => self.refuse(seq, "no such hosted agent"),
            },
            Command::Answer {
                answer, refused, ..
            } => match hosted.and_then(|id| self.questions.remove(&id)) {
                Some(waiting) => {
                    let _ = waiting.send(if refused { Err(answer) } else { Ok(answer) });
                }
                None => self.refuse(seq, "no question of that agent is waiting"),
            },
            Command::Shutdown { within_ms } => {
                if self.shutdown.is_none() {
                    let within = Duration::from_millis(within_ms);
                    self.shutdown = Some(tokio::spawn(async move {
                        tree.shutdown_within(within).await;
                    }));
                }
            }
            _ => self.refuse(seq, "unknown command"),
        }
    }

    /// A hosted top agent asked its (remote) owner: the question goes up.
    fn on_asked(&mut self, asked: Asked) {
        let Asked {
            agent,
            question,
            answer,
        } = asked;
        // A question that cannot go up in one frame is refused here, at once.
        if question.len() > QUESTION_LIMIT {
            let _ = answer.send(Err(format!(
                "the question ({} bytes) is over the edge's body limit ({QUESTION_LIMIT} bytes)",
                question.len()
            )));
            return;
        }
        self.questions.insert(agent, answer);
        self.queue(Up::Asked { agent, question });
    }

    /// `first` and everything else the hosted tree has queued now, events and tapped
    /// conversations, sent up in the order they happened there. Whatever must precede an
    /// item is queued by the time it is: the events before a tap (emitted before it was
    /// sent), and a settle's tap before its terminal event (sent under the same lock).
    fn on_hosted(
        &mut self,
        first: Hosted,
        taps: &mut mpsc::UnboundedReceiver<Tapped>,
        events: &mut Option<crate::EventStream>,
    ) {
        let mut batch = vec![first];
        batch.extend(std::iter::from_fn(|| taps.try_recv().ok()).map(Hosted::Tapped));
        if let Some(events) = events {
            batch.extend(std::iter::from_fn(|| events.try_next()).map(Hosted::Event));
        }
        // Stable: taps keep their order among themselves, as events do.
        batch.sort_by_key(Hosted::order);
        for item in batch {
            match item {
                Hosted::Event(event) => self.on_event(event),
                Hosted::Tapped(tapped) => self.on_conversation(tapped),
            }
        }
    }

    /// A hosted top agent's conversation as it is now: what the owner's node lacks of it
    /// goes up (in parts when it is over the frame limit; over the body limit, it cuts the
    /// conversation). A run's conversation only grows, so a tap older than the last is
    /// nothing new.
    fn on_conversation(&mut self, (agent, messages, _): Tapped) {
        let from = self.conversations.get(&agent).copied().unwrap_or(0);
        if from == CUT || messages.len() <= from {
            return;
        }
        self.conversations.insert(agent, messages.len());
        self.queue(Up::Conversation {
            agent,
            from: from as u64,
            messages: messages[from..].to_vec(),
            cut: false,
        });
    }

    /// `agent`'s conversation cannot go up whole: the owner's node is told to keep none.
    fn cut_conversation(&mut self, agent: AgentId, from: usize) {
        tracing::warn!(edge = %self.edge.id, %agent, "more of a hosted agent's conversation than the edge's body limit at once: its owner's node keeps none of it");
        self.conversations.insert(agent, CUT);
        self.queue(Up::Conversation {
            agent,
            from: from as u64,
            messages: Vec::new(),
            cut: true,
        });
    }

    fn on_event(&mut self, event: Event) {
        if let Err(error) = self.fold.apply(&event) {
            tracing::warn!(edge = %self.edge.id, %error, "a hosted event does not fold");
        }
        let terminal = event.kind.outcome().is_some();
        let (agent, seq) = (event.agent, event.seq);
        let top = self
            .fold
            .records()
            .get(usize::try_from(agent.get()).unwrap_or(usize::MAX))
            .filter(|r| r.parent == Some(AgentId::ROOT))
            .cloned();
        self.queue(Up::Event { event });
        if let (true, Some(record)) = (terminal, top) {
            self.queue(Up::Report {
                report: TerminalReport {
                    agent,
                    incarnation: record.incarnation,
                    status: record.status,
                    usage: record.subtree,
                    last_event: seq,
                },
            });
            let all_final = self.hosted.values().all(|id| {
                self.fold
                    .records()
                    .get(id.get() as usize)
                    .is_some_and(|r| r.status.is_terminal())
            });
            if all_final {
                self.finish_soon();
            }
        }
    }

    async fn on_tick(&mut self) {
        self.ticks = self.ticks.wrapping_add(1);
        if self.ticks.is_multiple_of(RETRANSMIT_EVERY) {
            self.end.retransmit_tick();
        }
        if self.down && self.edge.node.reaches(&self.edge.owner) {
            self.on_peer_up();
        }
        // The lease first: lapsed, the subtree stops before anything else runs.
        if let LeaseState::Expired { .. } = self.lease_state() {
            if !self.lapsed {
                self.lapsed = true;
                tracing::warn!(edge = %self.edge.id, owner = %self.edge.owner, "lease lapsed: stopping the hosted subtree");
                if let Some(tree) = &self.tree {
                    for id in self.hosted.values() {
                        if tree.kill(*id).is_err() {
                            let _ = tree.abort(*id);
                        }
                    }
                }
                let refused: Vec<u64> = self.waiting.drain(..).map(|(seq, _)| seq).collect();
                for seq in refused {
                    self.refuse(seq, "the lease lapsed");
                }
                self.finish_soon();
            }
            return;
        }
        let now = self.now();
        if let Some(ticket) = self.lease.renew(now) {
            let frame = self.end.control(Up::Renew { ticket });
            self.send_control(frame);
        }
        if self.shutdown.as_ref().is_some_and(|s| s.is_finished()) {
            self.finish_soon();
        }
    }

    /// Its work is over: the edge ends once its last frames are acknowledged, or a linger
    /// after now (the first call's time stands).
    fn finish_soon(&mut self) {
        self.finish_at
            .get_or_insert_with(|| Instant::now() + LINGER);
    }

    /// Over: its work is done and its last frames acknowledged, or the linger passed.
    fn finished(&self) -> bool {
        self.finish_at.is_some_and(|at| {
            let acked = self.end.outbox().len() == 0 && self.held.is_empty();
            (acked && at.saturating_duration_since(Instant::now()) < LINGER - TICK)
                || Instant::now() >= at
        })
    }

    async fn end_edge(self) {
        let mut usage = agent_tree_protocol::Usage::ZERO;
        if let Some(tree) = self.tree {
            tree.shutdown_within(Duration::from_millis(500)).await;
            usage = tree.record(AgentId::ROOT).map_or(usage, |r| r.subtree);
        }
        self.edge.node.unroute_hosted(&self.edge.id, usage);
    }
}

/// The longest question that goes up: what fits in one body (in parts) with room for its
/// envelope.
const QUESTION_LIMIT: usize = agent_tree_protocol::DEFAULT_MAX_BODY_BYTES - 64 * 1024;

/// The longest string of an event shrunk to fit the body limit.
const CUT_TO: usize = 64 * 1024;

/// An event over the edge's body limit, made to fit: a terminal event goes without its output
/// (its error says where it stays), and every string longer than 64 KiB is cut, saying so.
/// Its kind and number stay: the owner's mirror folds every number in order.
fn shrink(mut event: Event, node: &str) -> Event {
    if let Some(outcome) = event_outcome_mut(&mut event) {
        let bytes = outcome.text.as_ref().map_or(0, String::len)
            + outcome.partial.as_ref().map_or(0, String::len);
        if bytes > 0 {
            outcome.text = None;
            outcome.partial = None;
            outcome.error = Some(format!(
                "its output ({bytes} bytes) is over the edge's body limit; it stays on node {node}"
            ));
        }
    }
    let Ok(mut value) = serde_json::to_value(&event) else {
        return event;
    };
    cut_strings(&mut value);
    serde_json::from_value(value).unwrap_or(event)
}

fn cut_strings(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(text) if text.len() > CUT_TO => {
            let mut end = CUT_TO;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            let cut = text.len() - end;
            text.truncate(end);
            text.push_str(&format!(" [… {cut} bytes cut: over the edge's body limit]"));
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(cut_strings),
        serde_json::Value::Object(fields) => fields.values_mut().for_each(cut_strings),
        _ => {}
    }
}

/// The outcome a terminal event carries, to change.
fn event_outcome_mut(event: &mut Event) -> Option<&mut agent_tree_protocol::Outcome> {
    match &mut event.kind {
        EventKind::Completed { outcome }
        | EventKind::Failed { outcome }
        | EventKind::Aborted { outcome }
        | EventKind::Killed { outcome } => Some(outcome),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use agent_tree_protocol::{AgentStatus, EndReason, Outcome, Wire};

    use super::*;

    fn event(kind: EventKind) -> Event {
        Event {
            seq: 7,
            agent: AgentId::new(1),
            parent: Some(AgentId::ROOT),
            depth: 1,
            at_ms: 5,
            kind,
        }
    }

    /// A spawn's `spawned` (event 3), a turn boundary tapped after it, a settle's tap under
    /// the lock before its terminal event (event 5), and an event of another agent: queued
    /// in any order across the two channels, they go up in the order they happened.
    #[test]
    fn a_tap_goes_up_after_the_events_before_it_and_before_those_after() {
        let numbered = |seq, kind| Hosted::Event(Event { seq, ..event(kind) });
        let tapped = |after, len| {
            let messages: Vec<_> = (0..len)
                .map(|i| agent_tree_protocol::Message::user(format!("m{i}")))
                .collect();
            Hosted::Tapped((AgentId::new(1), messages.into(), after))
        };
        let spawned = EventKind::Spawned {
            agent_type: "helper".into(),
            request_id: None,
            detached: false,
        };
        // As the edge may take them: the taps first (one channel), then the events.
        let mut batch = [
            tapped(3, 2),
            tapped(4, 3),
            numbered(2, EventKind::Steered),
            numbered(3, spawned),
            numbered(4, EventKind::Steered),
            numbered(5, EventKind::settled(Outcome::completed("done"))),
            numbered(6, EventKind::Steered),
        ];
        batch.sort_by_key(Hosted::order);
        let order: Vec<String> = batch
            .iter()
            .map(|item| match item {
                Hosted::Event(e) => format!("e{}", e.seq),
                Hosted::Tapped((_, m, _)) => format!("t{}", m.len()),
            })
            .collect();
        assert_eq!(order, ["e2", "e3", "t2", "e4", "t3", "e5", "e6"]);
    }

    #[test]
    fn a_terminal_event_goes_without_its_output_and_says_where_it_stays() {
        let mut outcome = Outcome::completed("x".repeat(9 << 20));
        outcome.partial = Some("y".repeat(10));
        let shrunk = shrink(event(EventKind::settled(outcome)), "worker-1");
        let outcome = shrunk.kind.outcome().expect("still terminal");
        assert_eq!(
            (outcome.status, outcome.reason),
            (AgentStatus::Completed, EndReason::FinalAnswer)
        );
        assert_eq!(
            (outcome.text.as_ref(), outcome.partial.as_ref()),
            (None, None)
        );
        let error = outcome.error.as_deref().unwrap();
        assert!(
            error.contains(&format!("{} bytes", (9 << 20) + 10)),
            "{error}"
        );
        assert!(error.contains("worker-1"), "{error}");
        assert_eq!(
            (shrunk.seq, shrunk.agent),
            (7, AgentId::new(1)),
            "its number stays"
        );
    }

    #[test]
    fn every_long_string_is_cut_at_a_char_boundary_saying_so() {
        // 'é' is two bytes: a cut at 64 KiB falls inside one unless it moves back.
        let question = format!("a{}", "é".repeat(1 << 20));
        let shrunk = shrink(event(EventKind::Asked { question }), "w");
        let EventKind::Asked { question } = &shrunk.kind else {
            panic!("the kind stays: {:?}", shrunk.kind);
        };
        assert!(question.len() < CUT_TO + 100, "{}", question.len());
        assert!(
            question.ends_with("bytes cut: over the edge's body limit]"),
            "{question}"
        );
        assert!(shrunk.to_json().len() < agent_tree_protocol::DEFAULT_MAX_FRAME_BYTES);
        // A short event is left as it is.
        let short = event(EventKind::Asked {
            question: "which?".into(),
        });
        assert_eq!(shrink(short.clone(), "w"), short);
    }
}
