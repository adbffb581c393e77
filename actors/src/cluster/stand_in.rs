//! A remote child's stand-in: on its owner's node, the actor linked under the owner in the
//! child's place, holding the owner's end of the edge.
//!
//! It is started like any agent (admitted in the owner's registry, linked under its owner's
//! actor, given a [`StartTicket`]) and ends like one (`settle_run`, then
//! [`AgentMsg::ChildEnded`] to the owner, then a stop with [`SETTLED`]), so the owner's
//! restart, wait and shutdown paths do not know it is remote. In between it carries the
//! owner's edge: it sends the spawn and the commands it is given down, folds the hosted
//! tree's events into its [`Mirror`], bills every hosted usage delta to its own record
//! (once: the edge's inbox applies each frame once), grants the lease to renewals it hears,
//! and settles with the hosted top agent's outcome, or, when the hosted side is lost
//! (declared by the lease, its node down or restarted), with a cause saying so.
//!
//! # Invariants
//!
//! * The hosted subtree's usage reaches the owner's registry only through this actor's
//!   `charge` of an applied `usage_reported` event: exactly once, before the settle.
//! * It settles once: with the hosted top agent's terminal event, or by giving the edge up;
//!   the mirror takes nothing after either (later events are reported as late).
//! * Every timer is the one tick; nothing here awaits the peer.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use agent_tree_protocol::{
    AgentId, AgentStatus, Command, Down, EarlierChild, EndReason, EventKind, Frame, Outcome,
    RequestId, Up,
};
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::time::Instant;

use super::wire::Directed;
use super::{EdgeInput, NodeInner};
use super::{RETRANSMIT_EVERY, TICK};
use crate::agent::AgentArgs;
use crate::cluster::edge::lease::{OwnerLease, Verdict};
use crate::cluster::edge::mirror::{Mirror, Mirrored, ReportCheck};
use crate::cluster::edge::presence::{Down as PresenceDown, Presence};
use crate::cluster::edge::seq::{Endpoint, OutboxLimits, Received};
use crate::cluster::edge::size::SizeGuard;
use crate::error::ControlError;
use crate::msg::{AgentMsg, SETTLED, SteerReceipt};
use crate::shared::SharedRef;

/// Starts the stand-in of `args`'s run on node `peer`, reached through `node`, linked under
/// `supervisor`.
pub(crate) async fn start(
    args: AgentArgs,
    node: Arc<NodeInner>,
    peer: Arc<str>,
    supervisor: ActorCell,
) -> Result<ActorRef<AgentMsg>, String> {
    Actor::spawn_linked(None, StandIn, (args, node, peer), supervisor)
        .await
        .map(|(actor, _)| actor)
        .map_err(|e| e.to_string())
}

struct StandIn;

/// A stand-in's state: the child as its owner's registry knows it, and the owner's end of
/// its edge.
pub(crate) struct State {
    id: AgentId,
    run: u32,
    /// The actor it was started under, and its owner's id.
    owner: ActorRef<AgentMsg>,
    owner_id: AgentId,
    shared: SharedRef,
    node: Arc<NodeInner>,
    peer: Arc<str>,
    edge: String,
    end: Endpoint<Down>,
    lease: OwnerLease,
    mirror: Mirror,
    /// Its clock's zero: the lease machines take durations.
    epoch: Instant,
    /// Whether the child's node is there, and the same process.
    presence: Presence,
    request_id: RequestId,
    /// The hosted top agent, once its `spawned` event came.
    top: Option<AgentId>,
    /// The hosted agents below the top, by their hosted id: their mirrored records' ids in
    /// the owner's tree (a seeded earlier child's: the record it stands for).
    mirrored: HashMap<AgentId, AgentId>,
    /// A resumed run: the children of its earlier runs it sent down (owner's ids), each
    /// seeded as a settled record in the hosted tree; taken out as its seed comes up.
    earlier: HashSet<AgentId>,
    /// The hosted ids of those seeds: their events stand for records kept here already.
    seeds: HashSet<AgentId>,
    /// The owner's ids its context named, which went down as foreign ones
    /// (`ids::into_hosted`): its conversation coming up has them back.
    foreign: HashSet<AgentId>,
    /// Why it was cancelled, for the outcome it settles with.
    aborted: Option<EndReason>,
    /// The deadline of a shutdown it forwarded.
    shutdown: Option<Instant>,
    settled: bool,
    /// The remote agent's question waiting for its owner's answer: its tag (this run, a
    /// count of its questions).
    asking: Option<(u32, u32)>,
    questions: u32,
    /// Its conversation cell in the owner's registry: what came up of the remote run's
    /// conversation (`Up::Conversation`), as of its last turn boundary or its end, is kept
    /// there (and journaled) as an agent keeps its own, for a resume.
    cell: crate::registry::ConversationCell,
    /// How many messages of this edge's conversation it holds: a resumed run's starts with
    /// the conversation its spawn sent down (the cell holds it), and only what follows
    /// comes up.
    streamed: usize,
    /// More of it than the edge's body limit came at once: none of it is kept.
    cut: bool,
    /// How much of this run's conversation it journaled (with a journal on).
    journaled: usize,
    /// Steers sent down, by their number, waiting for the remote agent's receipt.
    steers: HashMap<u64, RpcReplyPort<Result<SteerReceipt, ControlError>>>,
    /// The spawn's number, once queued (a prompt and context over the body limit cannot
    /// be): a refusal of it names this, its last part's when it went in parts.
    spawn: Option<u64>,
    ticks: u32,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StandIn")
            .field("id", &self.id)
            .field("run", &self.run)
            .field("edge", &self.edge)
            .finish_non_exhaustive()
    }
}

/// How much earlier children's output (text and partial output together) a resumed run's
/// spawn carries: within the edge's body limit (24 MiB) beside the conversation it
/// continues. Past it, the later children's outcomes go down without their output.
const EARLIER_OUTPUT_BUDGET: usize = 8 * 1024 * 1024;

/// The children of `id`'s earlier runs with their whole outcomes, for its resumed run's
/// hosted tree: an output this tree released to its journal is read back from there (as a
/// local resumed run's `get_subagent_result` would), up to [`EARLIER_OUTPUT_BUDGET`] in
/// start order.
async fn earlier_children(shared: &SharedRef, id: AgentId) -> Vec<EarlierChild> {
    let mut earlier = shared.registry.earlier_children(id);
    let mut budget = EARLIER_OUTPUT_BUDGET;
    for child in &mut earlier {
        if child.outcome.released {
            child.outcome = shared
                .whole_outcome(child.agent, child.outcome.clone())
                .await;
        }
        let size = child.outcome.text.as_ref().map_or(0, String::len)
            + child.outcome.partial.as_ref().map_or(0, String::len);
        if size > budget {
            budget = 0;
            if !child.outcome.released {
                child.outcome = child.outcome.clone().into_released();
            }
        } else {
            budget -= size;
        }
    }
    earlier
}

impl Actor for StandIn {
    type Msg = AgentMsg;
    type State = State;
    type Arguments = (AgentArgs, Arc<NodeInner>, Arc<str>);

    async fn pre_start(
        &self,
        myself: ActorRef<AgentMsg>,
        (args, node, peer): Self::Arguments,
    ) -> Result<State, ActorProcessingErr> {
        let AgentArgs {
            ticket,
            owner,
            shared,
        } = args;
        let (id, run, owner_id) = (ticket.id, ticket.run, ticket.owner);
        let registered = shared
            .registry
            .started(id, run, myself.get_cell())
            .ok_or_else(|| ActorProcessingErr::from(format!("{id} settled before it started")))?;
        // Its earlier runs' detached children run on the remote node, under its hosted tree.
        let (early, shutdown) = (registered.steers, registered.shutdown);
        let edge = node.new_edge(id, run);
        node.route_stand_in(&edge, &peer, myself.clone());
        let epoch = Instant::now();
        let request_id = RequestId::new(format!("{edge}/spawn"));
        let mut state = State {
            presence: Presence::new(node.reconnect_window(), node.reaches(&peer), Duration::ZERO),
            id,
            run,
            owner,
            owner_id,
            shared,
            lease: OwnerLease::new(node.terms(), Duration::ZERO),
            node,
            peer,
            edge,
            end: Endpoint::new(OutboxLimits::default(), SizeGuard::default()),
            mirror: Mirror::new(),
            mirrored: HashMap::new(),
            earlier: HashSet::new(),
            foreign: HashSet::new(),
            seeds: HashSet::new(),
            epoch,
            request_id: request_id.clone(),
            top: None,
            aborted: None,
            shutdown: None,
            settled: false,
            asking: None,
            questions: 0,
            cell: ticket.conversation.clone(),
            streamed: if ticket.start.resumed {
                ticket.start.context.len()
            } else {
                0
            },
            cut: false,
            journaled: 0,
            spawn: None,
            steers: HashMap::new(),
            ticks: 0,
            ticker: None,
        };
        let start = &ticket.start;
        // The children of its earlier runs, which the conversation it continues names.
        let earlier = if start.resumed {
            earlier_children(&state.shared, id).await
        } else {
            Vec::new()
        };
        state.earlier = earlier.iter().map(|child| child.agent).collect();
        // The owner's ids it names go down as foreign ones, clear of the hosted tree's own.
        let mut context = start.context.clone();
        let seeded: Vec<AgentId> = earlier.iter().map(|child| child.agent).collect();
        state.foreign = crate::cluster::edge::ids::into_hosted(&mut context, &seeded);
        state.spawn = state.command(Command::Spawn {
            agent: id,
            incarnation: ticket.incarnation,
            definition: start.definition.name.clone(),
            prompt: start.prompt.clone(),
            request_id,
            // The request's override only: otherwise the child's node's definition decides.
            settle: (start.settle != start.definition.settle).then_some(start.settle),
            // What its admission kept of its owner's conversation (its definition inherits),
            // or, resumed, its own conversation, continued there.
            context,
            resume: start.resumed,
            earlier,
        });
        // Aborted before it got here: the abort follows the spawn.
        if ticket.token.is_cancelled() {
            let reason = state
                .shared
                .registry
                .abort_reason(id)
                .unwrap_or(EndReason::OwnerEnded);
            if reason != EndReason::Shutdown {
                state.aborted = Some(reason);
                state.command(Command::Abort { agent: id });
            }
        }
        for text in early {
            state.command(Command::Steer {
                agent: id,
                message: text,
            });
        }
        if let Some(order) = shutdown {
            state.forward_shutdown(order.deadline);
        }
        state.flush();
        let ticker = myself.clone();
        state.ticker = Some(tokio::spawn(async move {
            let mut every = tokio::time::interval(TICK);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                if ticker
                    .send_message(super::placed::edge_msg(EdgeInput::Tick))
                    .is_err()
                {
                    return;
                }
            }
        }));
        Ok(state)
    }

    async fn post_start(
        &self,
        myself: ActorRef<AgentMsg>,
        state: &mut State,
    ) -> Result<(), ActorProcessingErr> {
        if state.spawn.is_none() {
            let outcome = Outcome::failed(
                EndReason::ActorFailed,
                format!(
                    "the spawn for node {} is over the edge's body limit",
                    state.peer
                ),
            );
            state.settle(&myself, outcome);
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<AgentMsg>,
        message: AgentMsg,
        state: &mut State,
    ) -> Result<(), ActorProcessingErr> {
        if state.settled {
            return Ok(());
        }
        match message {
            AgentMsg::Placed(msg) => {
                if let Some(input) = super::placed::edge_input(msg) {
                    state.on_edge(&myself, input);
                }
            }
            AgentMsg::Steer { text, from, reply } => {
                // The owner's steer answers a pending question, as it does a local agent's.
                if from == state.owner_id && state.asking.take().is_some() {
                    let receipt = state.answer(text, false).map(|()| SteerReceipt::Delivered);
                    state.flush();
                    if let Some(reply) = reply {
                        let _ = reply.send(receipt.map_err(|bytes| ControlError::SteerTooLarge {
                            agent: state.id,
                            bytes,
                            limit: agent_tree_protocol::DEFAULT_MAX_BODY_BYTES,
                        }));
                    }
                    return Ok(());
                }
                // A remote agent whose run is over (draining its children) takes no steer,
                // as a local one does not.
                let over = state
                    .top
                    .and_then(|top| state.mirror.record(top))
                    .map(|r| r.status)
                    .filter(|status| *status != AgentStatus::Running);
                if let Some(status) = over {
                    if let Some(reply) = reply {
                        let _ = reply.send(Err(ControlError::WrongStatus(state.id, status)));
                    }
                    return Ok(());
                }
                // The receipt is the remote agent's own: it waits for its `steered` or
                // `refused`, so a steer that crossed the end of its run is refused here too.
                let queued = state.end.queue(Down::Command {
                    command: Command::Steer {
                        agent: state.id,
                        message: text,
                    },
                });
                match (queued, reply) {
                    (Ok(seq), Some(reply)) => {
                        state.steers.insert(seq, reply);
                    }
                    (Ok(_), None) => {}
                    (Err(error), reply) => {
                        tracing::warn!(agent = %state.id, %error, "a steer for a remote child was not sent");
                        if let Some(reply) = reply {
                            let status = state.status();
                            let _ = reply.send(Err(ControlError::WrongStatus(state.id, status)));
                        }
                    }
                }
                state.flush();
            }
            AgentMsg::Cancel => {
                let reason = state
                    .shared
                    .registry
                    .abort_reason(state.id)
                    .unwrap_or(EndReason::OwnerEnded);
                // A shutdown's order is on its way: it is forwarded as a shutdown, with its
                // deadline, not as an abort.
                if reason != EndReason::Shutdown && state.aborted.is_none() {
                    state.aborted = Some(reason);
                    state.command(Command::Abort { agent: state.id });
                    state.flush();
                }
            }
            AgentMsg::Shutdown(order) => {
                state.forward_shutdown(order.deadline);
                state.flush();
            }
            AgentMsg::QuestionAnswered { answer, asked } if state.asking == Some(asked) => {
                state.asking = None;
                let _ = state.answer(answer, false);
                state.flush();
            }
            AgentMsg::QuestionRefused { reason } if state.asking.is_some() => {
                state.asking = None;
                let _ = state.answer(reason, true);
                state.flush();
            }
            _ => {}
        }
        Ok(())
    }
}

/// The stand-in's cleanup, on every way it stops: ractor runs no `post_stop` for an actor
/// killed (`Tree::kill`, a shutdown's kill at the deadline, its owner's death), but it
/// drops the state.
impl Drop for State {
    fn drop(&mut self) {
        if let Some(ticker) = self.ticker.take() {
            ticker.abort();
        }
        if !self.settled {
            self.leave();
            // Stopped from outside: the hosted side is told to stop at once; its lease
            // bounds it if the frame is lost.
            let _ = self.command(Command::Shutdown { within_ms: 0 });
            self.flush();
        }
    }
}

impl State {
    /// Leaves the node's routing table and keeps the mirror, which outlives the stand-in.
    fn leave(&self) {
        self.node.unroute_stand_in(&self.edge);
        let records: Arc<[agent_tree_protocol::AgentRecord]> = self.mirror.records().into();
        if let Some(journal) = &self.shared.journal {
            // A tree recovered from the journal still has it (`Tree::remote_records`).
            journal.send(agent_tree_protocol::JournalEntry::Mirror {
                agent: self.id,
                records: records.to_vec(),
            });
        }
        if let Some(placement) = super::placed::NodePlacement::of(&self.shared) {
            placement.keep_mirror(self.id, records);
        }
    }

    fn now(&self) -> Duration {
        Instant::now().saturating_duration_since(self.epoch)
    }

    /// Queues a command (in parts when it is over the frame limit): its number (the last
    /// part's), or `None` (logged) when it cannot go (over the body limit).
    fn command(&mut self, command: Command) -> Option<u64> {
        match self.end.queue(Down::Command { command }) {
            Ok(seq) => Some(seq),
            Err(error) => {
                tracing::warn!(agent = %self.id, %error, "a command for a remote child was not sent");
                None
            }
        }
    }

    /// The remote agent's status as mirrored (`completing` before its record is mirrored
    /// but after it refused something: it is not taking steers).
    fn status(&self) -> AgentStatus {
        self.top
            .and_then(|top| self.mirror.record(top))
            .map_or(AgentStatus::Completing, |r| r.status)
    }

    /// Sends the answer (or refusal) of the remote agent's question; an answer over the
    /// body limit goes as a refusal saying so, and `Err` gives its size.
    fn answer(&mut self, answer: String, refused: bool) -> Result<(), usize> {
        let bytes = answer.len();
        let sent = self.command(Command::Answer {
            agent: self.id,
            answer,
            refused,
        });
        if sent.is_some() {
            return Ok(());
        }
        self.command(Command::Answer {
            agent: self.id,
            answer: format!("the owner's answer ({bytes} bytes) is over the edge's body limit"),
            refused: true,
        });
        Err(bytes)
    }

    fn forward_shutdown(&mut self, deadline: Instant) {
        if self.shutdown.is_some() {
            return;
        }
        self.shutdown = Some(deadline);
        let left = deadline.saturating_duration_since(Instant::now());
        self.command(Command::Shutdown {
            within_ms: u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
        });
    }

    /// Hands every frame due to the connection, if a session to the child's node is
    /// ready; otherwise they wait (unacknowledged) for the next session.
    fn flush(&mut self) {
        if !self.presence.connected() {
            return;
        }
        for frame in self.end.outgoing() {
            if !self
                .node
                .send(&self.peer, &self.edge, Directed::Down(frame))
            {
                // Lost with the session: everything unacknowledged goes again on the next.
                self.end.reconnect();
                return;
            }
        }
    }

    fn send_control(&mut self, frame: Frame<Down>) {
        if self.presence.connected() {
            self.node
                .send(&self.peer, &self.edge, Directed::Down(frame));
        }
    }

    fn on_edge(&mut self, myself: &ActorRef<AgentMsg>, input: EdgeInput) {
        match input {
            EdgeInput::Frame { frame, boot } => self.on_frame(myself, frame, boot),
            EdgeInput::Tick => self.on_tick(myself),
            EdgeInput::PeerDown => {
                let now = self.now();
                self.presence.closed(now);
            }
            EdgeInput::PeerUp => {
                if self.presence.opened() {
                    self.end.reconnect();
                    // A probe: the same process takes it as an ack; a new process under the
                    // node's name answers it with its boot id (a restart: down).
                    let probe = self.end.ack_frame(false);
                    self.send_control(probe);
                }
            }
            EdgeInput::Records(reply) => {
                let _ = reply.send(self.mirror.records().to_vec());
            }
        }
        if !self.settled {
            self.flush();
        }
    }

    fn on_frame(&mut self, myself: &ActorRef<AgentMsg>, frame: Frame<Up>, boot: u64) {
        match self.presence.frame(boot) {
            Err(down) => return self.node_down(myself, down),
            // A frame proves a session is up, whatever the session events said.
            Ok(true) => self.end.reconnect(),
            Ok(false) => {}
        }
        if frame.body == Up::Gone {
            // The same process, without the edge: its subtree ended there unseen here (its
            // last events lost), so nothing more will come of it.
            return self.give_up(
                myself,
                &format!("node {} no longer has this child's subtree", self.peer),
                AgentStatus::Killed,
            );
        }
        let now = self.now();
        self.lease.heard(now);
        let received = match self.end.receive(frame) {
            Ok(received) => received,
            Err(error) => {
                tracing::warn!(agent = %self.id, %error, "refused a frame of a remote child");
                return;
            }
        };
        let reply = received.reply();
        match received {
            Received::Fresh { body, .. } => self.apply(myself, body),
            Received::Control {
                body: Up::Renew { ticket },
                ..
            } => {
                if let Ok(grant) = self.lease.grant(ticket, now) {
                    let frame = self.end.control(Down::Grant { grant });
                    self.send_control(frame);
                }
            }
            Received::Part { .. }
            | Received::Duplicate { .. }
            | Received::Gap { .. }
            | Received::Control { .. } => {}
        }
        // Acknowledged even when this frame settled the stand-in: the hosted side then
        // knows its terminal event arrived.
        if let Some(resend) = reply {
            let ack = self.end.ack_frame(resend);
            self.send_control(ack);
        }
    }

    /// Applies one fresh upward body, exactly once.
    fn apply(&mut self, myself: &ActorRef<AgentMsg>, body: Up) {
        match body {
            Up::Event { event } => match self.mirror.apply(&event) {
                Ok(Mirrored::Applied) => {
                    if let EventKind::Spawned {
                        request_id: Some(request_id),
                        ..
                    } = &event.kind
                    {
                        if event.parent == Some(AgentId::ROOT) && *request_id == self.request_id {
                            self.top = Some(event.agent);
                        }
                    }
                    if let EventKind::UsageReported { delta } = &event.kind {
                        self.node.acknowledged(*delta);
                        // Billed to the mirrored record of the agent that spent it (and so to
                        // every ancestor's subtree, this child's among them), or to this
                        // child's own record: its top's, or one that no longer takes it
                        // (settled here first, by a shutdown's deadline).
                        let billed = self.fold_in(&event);
                        if !billed {
                            let _ = self.shared.registry.charge(self.id, *delta);
                        }
                    } else {
                        self.fold_in(&event);
                    }
                    // The remote agent's steers show in the owner's stream as a local one's do.
                    if self.top == Some(event.agent) && matches!(event.kind, EventKind::Steered) {
                        self.shared
                            .registry
                            .announce_run(self.id, self.run, EventKind::Steered);
                    }
                    if self.top == Some(event.agent) {
                        if let Some(outcome) = event.kind.outcome() {
                            let mut outcome = outcome.clone();
                            if let (Some(reason), AgentStatus::Aborted) =
                                (self.aborted, outcome.status)
                            {
                                outcome.reason = reason;
                            }
                            self.settle(myself, outcome);
                        }
                    }
                }
                Ok(Mirrored::Late(late)) => tracing::warn!(
                    agent = %self.id,
                    hosted = %late.agent,
                    kind = late.kind,
                    usage = ?late.usage,
                    "a remote child's event came after its record was final"
                ),
                Err(error) => {
                    tracing::warn!(agent = %self.id, %error, "a remote child's event does not fold");
                }
            },
            Up::Asked { agent, question } => {
                if Some(agent) == self.top {
                    self.questions += 1;
                    let asked = (self.run, self.questions);
                    self.asking = Some(asked);
                    let asked = AgentMsg::ChildAsked {
                        child: self.id,
                        question,
                        asked,
                    };
                    if self.owner.cast(asked).is_err() {
                        // Its owner is gone (a detached child outliving it): no one answers.
                        self.asking = None;
                        let _ = self.answer(
                            format!("{} has ended and cannot answer", self.owner_id),
                            true,
                        );
                    }
                } else {
                    let _ = self.answer(format!("{agent} is not this edge's agent"), true);
                }
            }
            // Its top agent's (the only agent whose conversation comes up; it may come
            // before the `spawned` event, which goes up by another queue).
            Up::Conversation {
                agent,
                from,
                messages,
                cut,
            } if self.top.is_none_or(|top| top == agent) => {
                self.on_conversation(from, messages, cut);
            }
            Up::Report { report } => match self.mirror.check(&report) {
                Ok(ReportCheck::Differs(mismatch)) => {
                    tracing::warn!(agent = %self.id, ?mismatch, "a remote child's report disagrees with its mirror");
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(agent = %self.id, %error, "a remote child's report"),
            },
            Up::Steered { command, queued } => {
                if let Some(reply) = self.steers.remove(&command) {
                    let receipt = if queued {
                        SteerReceipt::Queued
                    } else {
                        SteerReceipt::Delivered
                    };
                    let _ = reply.send(Ok(receipt));
                }
            }
            Up::Refused { command, error } => {
                if let Some(reply) = self.steers.remove(&command) {
                    tracing::debug!(agent = %self.id, %error, "a remote child refused a steer");
                    let status = self.status();
                    let _ = reply.send(Err(ControlError::WrongStatus(self.id, status)));
                } else if self.top.is_none() && Some(command) == self.spawn {
                    let outcome = Outcome::failed(
                        EndReason::ActorFailed,
                        format!("node {} refused the spawn: {error}", self.peer),
                    );
                    self.settle(myself, outcome);
                } else {
                    tracing::warn!(agent = %self.id, command, %error, "a remote child's node refused a command");
                }
            }
            Up::Renew { .. } | Up::Ack { .. } => {}
            _ => {}
        }
    }

    /// The earlier child (owner's id) a seed's request id names, if it is one this run sent
    /// down and no seed has come up for yet.
    fn seed_of(&self, request_id: &RequestId) -> Option<AgentId> {
        EarlierChild::seeded_from(request_id).filter(|id| self.earlier.contains(id))
    }

    /// Folds a hosted event about an agent below the top into its mirrored record in the
    /// owner's registry (its `spawned` or `queued` event creates it). Returns whether it was
    /// applied there: events of the top (this child's own record) and of the hosted root are
    /// not, nor is a `released` (the output stays in memory here: this node's journal does
    /// not hold it).
    fn fold_in(&mut self, event: &agent_tree_protocol::Event) -> bool {
        if self.top.is_none_or(|top| top == event.agent) || event.parent.is_none() {
            return false;
        }
        let registry = &self.shared.registry;
        if self.seeds.contains(&event.agent) {
            return false;
        }
        match &event.kind {
            // A seeded earlier child: the record it stands for is kept here already.
            EventKind::Spawned {
                request_id: Some(request_id),
                ..
            } if event.parent == self.top && self.seed_of(request_id).is_some() => {
                if let Some(earlier) = self.seed_of(request_id) {
                    self.earlier.remove(&earlier);
                    self.seeds.insert(event.agent);
                    self.mirrored.insert(event.agent, earlier);
                }
                false
            }
            EventKind::Spawned { .. } | EventKind::Queued { .. } => {
                let parent = event.parent.and_then(|p| {
                    if Some(p) == self.top {
                        Some(self.id)
                    } else {
                        self.mirrored.get(&p).copied()
                    }
                });
                let Some(parent) = parent else { return false };
                match registry.mirror_spawn(self.id, parent, event.kind.clone()) {
                    Some(local) => {
                        self.mirrored.insert(event.agent, local);
                        true
                    }
                    None => false,
                }
            }
            EventKind::Released { .. } => false,
            kind => {
                let Some(&local) = self.mirrored.get(&event.agent) else {
                    return false;
                };
                match registry.mirror_event(local, kind.clone()) {
                    Ok(()) => true,
                    Err(error) => {
                        tracing::debug!(agent = %self.id, hosted = %event.agent, mirrored = %local, %error, "a remote descendant's event does not fold into its mirrored record");
                        false
                    }
                }
            }
        }
    }

    fn on_tick(&mut self, myself: &ActorRef<AgentMsg>) {
        self.ticks = self.ticks.wrapping_add(1);
        if self.ticks.is_multiple_of(RETRANSMIT_EVERY) {
            self.end.retransmit_tick();
        }
        let now = self.now();
        if let Verdict::Declare { .. } = self.lease.declare(now) {
            return self.give_up(
                myself,
                "node unreachable: lease expired",
                AgentStatus::Killed,
            );
        }
        if let Some(down) = self.presence.check(now) {
            return self.node_down(myself, down);
        }
        if self
            .shutdown
            .is_some_and(|deadline| Instant::now() >= deadline)
        {
            // The shutdown's own kill settles it at the deadline; this is the backstop for a
            // shutdown that was dropped.
            self.give_up(
                myself,
                "node unreachable at the shutdown deadline",
                AgentStatus::Killed,
            );
        }
    }

    fn node_down(&mut self, myself: &ActorRef<AgentMsg>, down: PresenceDown) {
        let cause = match down {
            PresenceDown::NotBack { window } => format!(
                "node down: {} disconnected and was not back within {window:?}",
                self.peer
            ),
            PresenceDown::Restarted => format!("node down: {} restarted", self.peer),
        };
        self.give_up(myself, &cause, AgentStatus::Failed);
    }

    /// The hosted side is lost: the mirror settles its live agents killed (with the usage
    /// last reported), and the stand-in settles with `cause`.
    fn give_up(&mut self, myself: &ActorRef<AgentMsg>, cause: &str, status: AgentStatus) {
        let now = self.now();
        self.lease.give_up(now);
        let at_ms = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
        let _ = self.mirror.declare_killed(at_ms, cause);
        // Tell the hosted side to stop, should it still hear.
        self.command(Command::Shutdown { within_ms: 0 });
        self.flush();
        let reason = match status {
            AgentStatus::Killed => EndReason::Killed,
            _ => EndReason::ActorFailed,
        };
        let mut outcome = Outcome::ended(status, reason);
        outcome.error = Some(cause.to_owned());
        tracing::warn!(agent = %self.id, node = %self.peer, cause, "remote child given up");
        self.settle(myself, outcome);
    }

    /// More of the remote run's conversation came up (messages `from..`): kept in its cell,
    /// and journaled, as an agent's turn boundary is, so a resume (after its node died mid-
    /// run, or the owner's process crashed, too) continues from there. A cut keeps none.
    fn on_conversation(
        &mut self,
        from: u64,
        mut messages: Vec<agent_tree_protocol::Message>,
        cut: bool,
    ) {
        if self.cut {
            return;
        }
        let from = usize::try_from(from).unwrap_or(usize::MAX);
        // Kept under the owner tree's ids, as a local agent's conversation names its
        // children (the hosted side sends every child's `spawned` before a conversation
        // that names it, so each is mirrored by now).
        {
            let (top, id, mirrored, foreign) = (self.top, self.id, &self.mirrored, &self.foreign);
            let earlier = if from == 0 {
                Arc::from(Vec::new())
            } else {
                self.cell.lock().messages.clone()
            };
            // The owner's ids its context named went down as foreign ones.
            crate::cluster::edge::ids::translate(&mut messages, &earlier, |hosted| {
                if Some(hosted) == top {
                    Some(id)
                } else {
                    mirrored.get(&hosted).copied().or_else(|| {
                        crate::cluster::edge::ids::owner_of_foreign(hosted)
                            .filter(|owner| foreign.contains(owner))
                    })
                }
            });
        }
        let whole: Arc<[agent_tree_protocol::Message]> = if cut {
            self.cut = true;
            tracing::warn!(agent = %self.id, node = %self.peer, "a remote child's conversation is over the edge's body limit: none of it is kept");
            Arc::from(Vec::new())
        } else if from == 0 {
            messages.into()
        } else if from == self.streamed {
            let cell = self.cell.lock();
            cell.messages.iter().cloned().chain(messages).collect()
        } else {
            tracing::warn!(agent = %self.id, from, held = self.streamed, "a remote child's conversation came up out of order: not kept");
            return;
        };
        self.streamed = whole.len();
        self.cell.lock().messages = whole.clone();
        if let Some(journal) = &self.shared.journal {
            // As an agent journals its turn boundaries: the run's first line whole (a
            // resumed run's earlier messages included), then what each adds.
            let from = if cut {
                0
            } else {
                self.journaled.min(whole.len())
            };
            journal.conversation(self.id, self.run, from, &whole);
            self.journaled = whole.len();
        }
    }

    /// Settles the run in the owner's registry and tells the owner, as an agent does.
    fn settle(&mut self, myself: &ActorRef<AgentMsg>, outcome: Outcome) {
        self.settled = true;
        // Off the routing table with the settle, not only when the actor is gone (the
        // node's counts agree with the records), the mirror kept before it is visible.
        self.leave();
        // What came up of the run's conversation; when nothing did (the spawn never got
        // there, or the run ended before its first turn), the one the owner holds stays: a
        // resume continues that.
        let conversation = self.cell.lock().messages.clone();
        let reason =
            match self
                .shared
                .registry
                .settle_run(self.id, self.run, outcome.clone(), conversation)
            {
                Some(settled) => {
                    let ended = AgentMsg::ChildEnded {
                        child: self.id,
                        run: self.run,
                        outcome,
                        deferred: settled.deferred,
                    };
                    match settled.owner {
                        Some(owner) => {
                            let _ = owner.send_message(ended);
                        }
                        None => {
                            let _ = self.owner.cast(ended);
                        }
                    }
                    SETTLED
                }
                None => "agent-tree: settled elsewhere",
            };
        myself.stop(Some(reason.to_owned()));
    }
}
