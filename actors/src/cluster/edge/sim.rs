//! A deterministic in-process fake link between the two ends of owner edges, on a virtual
//! clock (plain milliseconds, no real time); the edge's scenario tests over it are in
//! `sim/scenarios.rs`.
//!
//! The owner's node holds, per edge, an [`Endpoint`] of downward frames, an [`OwnerLease`]
//! and a [`Mirror`]; each child's node an [`Endpoint`] of upward frames, a [`ChildLease`]
//! and the hosted tree's records (a [`Fold`], as its registry would keep them) with a small
//! scripted workload: the edge's top agent takes turns, each billing a usage delta, starts a
//! grandchild on one of them, and completes once it has no live child. Frames cross the
//! link as JSON text, decoded strictly at the other end.
//!
//! The link does what ractor_cluster does, and what goes wrong with it: it delays (and in
//! order within a connection); a disconnect loses everything in flight, and a reconnect is
//! a new connection (both ends replay what is unacknowledged); a partition loses frames
//! without any event; it may drop a frame silently (a decode failure), duplicate or reorder
//! frames. A node may be frozen (SIGSTOP): it does nothing, and frames to it wait. The
//! child's node's clock is offset from the owner's: no instant crosses the edge.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use agent_tree_protocol::{
    AgentId, AgentStatus, Command, Down, EndReason, Event, EventKind, Fold, Frame, LeaseGrant,
    Outcome, RequestId, TerminalReport, Up, Usage, Wire,
};
use proptest::prelude::*;

use super::lease::{ChildLease, LeaseState, LeaseTerms, OwnerLease, Verdict};
use super::mirror::{Late, LateWhy, Mirror, Mirrored, ReportCheck};
use super::seq::{Endpoint, OutboxLimits, QueueError, Received};
use super::shutdown::{NodesShutdown, Round, Taken, Tally};
use super::size::SizeGuard;

mod scenarios;

/// The child's node's clock reads this much more than the owner's.
const CHILD_CLOCK: u64 = 7_000_000;

/// Both ends run their retransmission timer this often (the renewal cadence).
const RETRANSMIT_MS: u64 = 1_000;

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn as_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// xorshift: deterministic, seeded per test (`bodies_in_parts`' lossy link too).
#[derive(Clone, Debug)]
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(super) fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

/// How the link behaves.
#[derive(Clone, Copy, Debug)]
struct LinkConfig {
    /// One-way delay, ms.
    delay: u64,
    /// Extra random delay per frame, ms; any makes delivery out of order.
    jitter: u64,
    /// Percent of frames delivered twice.
    duplicate: u64,
    /// Percent of frames dropped silently (as a frame that fails to decode).
    drop: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            delay: 10,
            jitter: 0,
            duplicate: 0,
            drop: 0,
        }
    }
}

/// One direction of the link: frames in flight, as text, with when they arrive.
#[derive(Clone, Debug, Default)]
struct Pipe {
    flight: Vec<(u64, u64, String)>,
    last_at: u64,
}

#[derive(Clone, Debug)]
struct Link {
    config: LinkConfig,
    up: Pipe,
    down: Pipe,
    connected: bool,
    partitioned: bool,
    order: u64,
    lost: u64,
    rng: Rng,
}

impl Link {
    fn new(config: LinkConfig, seed: u64) -> Self {
        Link {
            config,
            up: Pipe::default(),
            down: Pipe::default(),
            connected: true,
            partitioned: false,
            order: 0,
            lost: 0,
            rng: Rng(seed | 1),
        }
    }

    fn send(&mut self, up: bool, now: u64, text: String) {
        if !self.connected || self.partitioned || self.rng.below(100) < self.config.drop {
            self.lost += 1;
            return;
        }
        let copies = if self.rng.below(100) < self.config.duplicate {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut at = now + self.config.delay + self.rng.below(self.config.jitter + 1);
            let pipe = if up { &mut self.up } else { &mut self.down };
            if self.config.jitter == 0 {
                at = at.max(pipe.last_at); // one connection keeps order
            }
            pipe.last_at = pipe.last_at.max(at);
            self.order += 1;
            pipe.flight.push((at, self.order, text.clone()));
        }
    }

    fn take(&mut self, up: bool, now: u64) -> Vec<String> {
        let pipe = if up { &mut self.up } else { &mut self.down };
        pipe.flight.sort_by_key(|&(at, order, _)| (at, order));
        let due = pipe.flight.iter().take_while(|(at, ..)| *at <= now).count();
        pipe.flight.drain(..due).map(|(.., text)| text).collect()
    }

    /// The connection drops: what is in flight is lost.
    fn disconnect(&mut self) {
        self.lost += (self.up.flight.len() + self.down.flight.len()) as u64;
        self.up = Pipe::default();
        self.down = Pipe::default();
        self.connected = false;
    }
}

/// One hosted agent at work on the child's node.
#[derive(Clone, Debug)]
struct Worker {
    id: AgentId,
    turns_left: u32,
    next_turn_at: u64,
    /// Start a grandchild after this many turns (the edge's top agent only).
    spawn_after: Option<u32>,
    turns: u32,
}

/// The workload of a hosted subtree.
#[derive(Clone, Copy, Debug)]
struct Plan {
    turns: u32,
    grandchild_turns: u32,
    spawn_after: u32,
    turn_ms: u64,
    /// How long a shutdown's hooks take.
    hook_ms: u64,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            turns: 40,
            grandchild_turns: 25,
            spawn_after: 5,
            turn_ms: 100,
            hook_ms: 300,
        }
    }
}

/// The child's node of one edge.
#[derive(Clone, Debug)]
struct Child {
    plan: Plan,
    end: Endpoint<Up>,
    lease: ChildLease,
    tree: Fold,
    workers: Vec<Worker>,
    /// Owner ids of spawned agents to hosted ids.
    hosted: BTreeMap<AgentId, AgentId>,
    requests: BTreeSet<RequestId>,
    /// Refused by a full outbox, in order: sent before anything newer.
    held: VecDeque<Up>,
    full_refusals: u64,
    controls: Vec<Frame<Up>>,
    reconnect_pending: bool,
    /// Every usage delta the child's node billed, by hosted event number.
    generated: Vec<(u64, Usage)>,
    /// Every hosted event, in order (what the agents' tree saw).
    log: Vec<Event>,
    /// Owner's clock: every turn taken.
    turn_times: Vec<u64>,
    /// Owner's clock: when the lapsed lease stopped the subtree.
    stopped_at: Option<u64>,
    applied_down: BTreeSet<u64>,
    shutdown_at: Option<u64>,
    errors: Vec<String>,
    rng: Rng,
}

impl Child {
    fn new(plan: Plan, terms: LeaseTerms, limits: OutboxLimits, seed: u64) -> Self {
        Child {
            plan,
            end: Endpoint::new(limits, SizeGuard::default()),
            lease: ChildLease::new(terms.renew_every(), terms.lease),
            tree: Fold::new(),
            workers: Vec::new(),
            hosted: BTreeMap::new(),
            requests: BTreeSet::new(),
            held: VecDeque::new(),
            full_refusals: 0,
            controls: Vec::new(),
            reconnect_pending: false,
            generated: Vec::new(),
            log: Vec::new(),
            turn_times: Vec::new(),
            stopped_at: None,
            applied_down: BTreeSet::new(),
            shutdown_at: None,
            errors: Vec::new(),
            rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
        }
    }

    fn local(now: u64) -> u64 {
        now + CHILD_CLOCK
    }

    /// The lease's end on the owner's clock.
    fn until(&self) -> Option<u64> {
        self.lease
            .until()
            .map(|u| as_ms(u).saturating_sub(CHILD_CLOCK))
    }

    /// Sends a sequenced body, behind anything held.
    fn send(&mut self, body: Up) {
        if !self.held.is_empty() {
            self.held.push_back(body);
            return;
        }
        match self.end.queue(body) {
            Ok(_) => {}
            Err(QueueError::Full(full)) => {
                self.full_refusals += 1;
                self.held.push_back(full.item);
            }
            Err(other) => self.errors.push(other.to_string()),
        }
    }

    fn flush_held(&mut self) {
        while let Some(body) = self.held.pop_front() {
            match self.end.queue(body) {
                Ok(_) => {}
                Err(QueueError::Full(full)) => {
                    self.held.push_front(full.item);
                    return;
                }
                Err(other) => self.errors.push(other.to_string()),
            }
        }
    }

    /// Emits a hosted event: folded into the hosted records, then forwarded.
    fn emit(&mut self, now: u64, agent: AgentId, kind: EventKind) {
        let record = self.tree.records()[agent.get() as usize].clone();
        let event = Event {
            seq: self.log.len() as u64 + 1,
            agent,
            parent: record.parent,
            depth: record.depth,
            at_ms: Self::local(now),
            kind,
        };
        self.push(event);
    }

    fn push(&mut self, event: Event) {
        self.tree
            .apply(&event)
            .expect("the hosted tree takes its own events");
        if let EventKind::UsageReported { delta } = &event.kind {
            self.generated.push((event.seq, *delta));
        }
        self.log.push(event.clone());
        self.send(Up::Event { event });
    }

    fn admit(
        &mut self,
        now: u64,
        parent: AgentId,
        agent_type: &str,
        request_id: Option<RequestId>,
        incarnation: u32,
    ) -> AgentId {
        let id = AgentId::new(self.tree.records().len() as u64);
        let depth = self.tree.records()[parent.get() as usize].depth + 1;
        self.push(Event {
            seq: self.log.len() as u64 + 1,
            agent: id,
            parent: Some(parent),
            depth,
            at_ms: Self::local(now),
            kind: EventKind::Spawned {
                agent_type: agent_type.into(),
                request_id,
                detached: false,
            },
        });
        self.emit(
            now,
            id,
            EventKind::Started {
                agent_type: agent_type.into(),
                incarnation,
            },
        );
        id
    }

    fn report(&mut self, agent: AgentId) {
        let record = self.tree.records()[agent.get() as usize].clone();
        self.send(Up::Report {
            report: TerminalReport {
                agent,
                incarnation: record.incarnation,
                status: record.status,
                usage: record.subtree,
                last_event: self.log.len() as u64,
            },
        });
    }

    /// Settles every live hosted agent, children before owners, then reports the tree.
    fn settle_all(&mut self, now: u64, outcome: &Outcome) {
        let mut live: Vec<AgentId> = self.workers.iter().map(|w| w.id).collect();
        live.sort_by(|a, b| b.cmp(a));
        for id in live {
            self.emit(now, id, EventKind::settled(outcome.clone()));
        }
        self.workers.clear();
        self.report(AgentId::ROOT);
    }

    fn receive(&mut self, now: u64, frame: Frame<Down>) {
        let received = match self.end.receive(frame) {
            Ok(received) => received,
            Err(error) => return self.errors.push(error.to_string()),
        };
        let reply = received.reply();
        match received {
            Received::Fresh { seq, body } => {
                assert!(
                    self.applied_down.insert(seq),
                    "down frame {seq} applied twice"
                );
                if let Down::Command { command } = body {
                    self.command(now, seq, command);
                }
            }
            Received::Control {
                body: Down::Grant { grant },
                ..
            } => {
                // A grant for a forgotten ticket, or after the lapse, is not taken.
                let _ = self.lease.on_grant(grant);
            }
            Received::Part { .. }
            | Received::Duplicate { .. }
            | Received::Gap { .. }
            | Received::Control { .. } => {}
        }
        if let Some(resend) = reply {
            let ack = self.end.ack_frame(resend);
            self.controls.push(ack);
        }
    }

    fn command(&mut self, now: u64, seq: u64, command: Command) {
        let lapsed = matches!(
            self.lease.check(ms(Self::local(now))),
            LeaseState::Expired { .. }
        );
        let refuse = |child: &mut Child, error: &str| {
            child.send(Up::Refused {
                command: seq,
                error: error.into(),
            });
        };
        if lapsed {
            return refuse(self, "the lease lapsed");
        }
        match command {
            Command::Spawn {
                agent,
                incarnation,
                definition,
                request_id,
                ..
            } => {
                if !self.requests.insert(request_id.clone()) {
                    return;
                }
                let id = self.admit(
                    now,
                    AgentId::ROOT,
                    &definition,
                    Some(request_id),
                    incarnation,
                );
                self.hosted.insert(agent, id);
                self.workers.push(Worker {
                    id,
                    turns_left: self.plan.turns,
                    next_turn_at: Self::local(now) + self.plan.turn_ms,
                    spawn_after: Some(self.plan.spawn_after),
                    turns: 0,
                });
            }
            Command::Steer { agent, .. } => match self.hosted.get(&agent).copied() {
                Some(id) if self.workers.iter().any(|w| w.id == id) => {
                    self.emit(now, id, EventKind::Steered);
                }
                _ => refuse(self, "no such live agent"),
            },
            Command::Shutdown { within_ms } => {
                let hooks = self.plan.hook_ms.min(within_ms);
                self.shutdown_at.get_or_insert(now + hooks);
            }
            _ => refuse(self, "not scripted"),
        }
    }

    /// A new connection: replay everything unacknowledged, renew the lease at once.
    fn on_reconnect(&mut self, now: u64) {
        self.end.reconnect();
        if !matches!(
            self.lease.check(ms(Self::local(now))),
            LeaseState::Expired { .. }
        ) {
            let ticket = self.lease.request(ms(Self::local(now)));
            self.controls.push(self.end.control(Up::Renew { ticket }));
        }
    }

    fn tick(&mut self, now: u64) -> Vec<Frame<Up>> {
        let local = Self::local(now);
        if now.is_multiple_of(RETRANSMIT_MS) {
            self.end.retransmit_tick();
        }
        self.flush_held();
        // The lease first: lapsed, the subtree stops before anything else runs.
        let may_run = match self.lease.check(ms(local)) {
            LeaseState::Held { .. } => true,
            LeaseState::Awaiting => false,
            LeaseState::Expired { .. } => {
                if self.stopped_at.is_none() {
                    self.stopped_at = Some(now);
                    let mut killed = Outcome::ended(AgentStatus::Killed, EndReason::Killed);
                    killed.error = Some("lease lapsed: owner unreachable".into());
                    if !self.workers.is_empty() {
                        self.settle_all(now, &killed);
                    }
                }
                false
            }
        };
        if let Some(ticket) = self.lease.renew(ms(local)) {
            self.controls.push(self.end.control(Up::Renew { ticket }));
        }
        if may_run && self.shutdown_at.is_some_and(|at| at <= now) {
            self.shutdown_at = None;
            self.settle_all(
                now,
                &Outcome::ended(AgentStatus::Aborted, EndReason::Shutdown),
            );
        }
        // Work, unless the outbox pushes back.
        if may_run && self.held.is_empty() {
            self.work(now);
        }
        let mut frames = std::mem::take(&mut self.controls);
        frames.extend(self.end.outgoing());
        frames
    }

    fn work(&mut self, now: u64) {
        let local = Self::local(now);
        let mut i = 0;
        while i < self.workers.len() {
            let w = self.workers[i].clone();
            if w.next_turn_at > local {
                i += 1;
                continue;
            }
            if w.turns_left == 0 {
                let children_live = self
                    .workers
                    .iter()
                    .any(|o| self.tree.records()[o.id.get() as usize].parent == Some(w.id));
                if children_live {
                    i += 1;
                    continue;
                }
                self.emit(now, w.id, EventKind::settled(Outcome::completed("done")));
                self.workers.remove(i);
                let parent = self.tree.records()[w.id.get() as usize].parent;
                if parent == Some(AgentId::ROOT) {
                    self.report(w.id);
                }
                continue;
            }
            let delta = Usage::tokens(1 + self.rng.below(100), 1 + self.rng.below(20));
            self.emit(now, w.id, EventKind::UsageReported { delta });
            self.turn_times.push(now);
            let w = &mut self.workers[i];
            w.turns += 1;
            w.turns_left -= 1;
            w.next_turn_at = local + self.plan.turn_ms;
            if w.spawn_after == Some(w.turns) {
                w.spawn_after = None;
                let (parent, turns) = (w.id, self.plan.grandchild_turns);
                let id = self.admit(now, parent, "helper", None, 1);
                self.workers.push(Worker {
                    id,
                    turns_left: turns,
                    next_turn_at: local + self.plan.turn_ms / 2,
                    spawn_after: None,
                    turns: 0,
                });
            }
            i += 1;
        }
    }

    /// Σ usage billed.
    fn total(&self) -> Usage {
        self.generated.iter().map(|(_, u)| *u).sum()
    }
}

/// The owner's node's end of one edge.
#[derive(Clone, Debug)]
struct Owner {
    end: Endpoint<Down>,
    lease: OwnerLease,
    mirror: Mirror,
    controls: Vec<Frame<Down>>,
    reconnect_pending: bool,
    late: Vec<Late>,
    checks: Vec<ReportCheck>,
    reports: Vec<TerminalReport>,
    refused: Vec<String>,
    applied_up: BTreeSet<u64>,
    /// Σ usage of every hosted usage event the owner's inbox applied (and so acknowledges).
    acked_usage: Usage,
    /// The last hosted event the owner's inbox applied.
    last_hosted: u64,
    /// When the subtree was given up: by the lease, or early (a shutdown's deadline).
    declared_at: Option<u64>,
    /// When the lease declared it (lease + grace of silence).
    lease_declared_at: Option<u64>,
    declared: Vec<Event>,
    errors: Vec<String>,
}

impl Owner {
    fn new(terms: LeaseTerms) -> Self {
        Owner {
            end: Endpoint::new(OutboxLimits::default(), SizeGuard::default()),
            lease: OwnerLease::new(terms, ms(0)),
            mirror: Mirror::new(),
            controls: Vec::new(),
            reconnect_pending: false,
            late: Vec::new(),
            checks: Vec::new(),
            reports: Vec::new(),
            refused: Vec::new(),
            applied_up: BTreeSet::new(),
            acked_usage: Usage::ZERO,
            last_hosted: 0,
            declared_at: None,
            lease_declared_at: None,
            declared: Vec::new(),
            errors: Vec::new(),
        }
    }

    fn command(&mut self, command: Command) {
        self.end
            .queue(Down::Command { command })
            .expect("the owner's outbox has room");
    }

    fn receive(&mut self, now: u64, frame: Frame<Up>) {
        self.lease.heard(ms(now));
        let received = match self.end.receive(frame) {
            Ok(received) => received,
            Err(error) => return self.errors.push(error.to_string()),
        };
        let reply = received.reply();
        match received {
            Received::Fresh { seq, body } => {
                assert!(self.applied_up.insert(seq), "up frame {seq} applied twice");
                match body {
                    Up::Event { event } => {
                        if let EventKind::UsageReported { delta } = &event.kind {
                            self.acked_usage += *delta;
                        }
                        self.last_hosted = event.seq;
                        match self.mirror.apply(&event) {
                            Ok(Mirrored::Applied) => {}
                            Ok(Mirrored::Late(late)) => self.late.push(late),
                            Err(error) => self.errors.push(error.to_string()),
                        }
                    }
                    Up::Report { report } => {
                        match self.mirror.check(&report) {
                            Ok(check) => self.checks.push(check),
                            Err(error) => self.errors.push(error.to_string()),
                        }
                        self.reports.push(report);
                    }
                    Up::Refused { error, .. } => self.refused.push(error),
                    other => self.errors.push(format!("unexpected {other:?}")),
                }
            }
            Received::Control {
                body: Up::Renew { ticket },
                ..
            } => {
                if let Ok(grant) = self.lease.grant(ticket, ms(now)) {
                    self.controls.push(self.end.control(Down::Grant { grant }));
                }
            }
            Received::Part { .. }
            | Received::Duplicate { .. }
            | Received::Gap { .. }
            | Received::Control { .. } => {}
        }
        if let Some(resend) = reply {
            let ack = self.end.ack_frame(resend);
            self.controls.push(ack);
        }
    }

    fn give_up(&mut self, now: u64, cause: &str) {
        self.lease.give_up(ms(now));
        if self.declared_at.is_none() {
            self.declared_at = Some(now);
            self.declared = self.mirror.declare_killed(now, cause);
        }
    }

    fn tick(&mut self, now: u64) -> Vec<Frame<Down>> {
        if now.is_multiple_of(RETRANSMIT_MS) {
            self.end.retransmit_tick();
        }
        if let Verdict::Declare { .. } = self.lease.declare(ms(now)) {
            self.lease_declared_at = Some(now);
            self.give_up(now, "node unreachable: lease expired");
        }
        let mut frames = std::mem::take(&mut self.controls);
        frames.extend(self.end.outgoing());
        frames
    }

    fn late_usage(&self) -> Usage {
        self.late.iter().filter_map(|l| l.usage).sum()
    }
}

/// One edge: the owner's end, the child's node, the link between.
#[derive(Clone, Debug)]
struct EdgeSim {
    owner: Owner,
    child: Child,
    link: Link,
    child_frozen_until: u64,
}

/// The owner's node with its edges, on one virtual clock.
#[derive(Clone, Debug)]
struct Sim {
    now: u64,
    terms: LeaseTerms,
    edges: Vec<EdgeSim>,
    owner_frozen_until: u64,
    shutdown: Option<NodesShutdown<usize, TerminalReport>>,
    shutdown_done: Option<(u64, Tally<usize, TerminalReport>)>,
}

fn terms() -> LeaseTerms {
    LeaseTerms {
        lease: ms(3_000),
        grace: ms(1_000),
    }
}

impl Sim {
    fn new(edges: usize, link: LinkConfig, limits: OutboxLimits, seed: u64) -> Self {
        let terms = terms();
        let edges = (0..edges as u64)
            .map(|i| EdgeSim {
                owner: Owner::new(terms),
                child: Child::new(Plan::default(), terms, limits, seed + i),
                link: Link::new(link, seed.wrapping_add(i).wrapping_mul(31) + 7),
                child_frozen_until: 0,
            })
            .collect();
        let mut sim = Sim {
            now: 0,
            terms,
            edges,
            owner_frozen_until: 0,
            shutdown: None,
            shutdown_done: None,
        };
        for (i, e) in sim.edges.iter_mut().enumerate() {
            e.owner.command(Command::Spawn {
                agent: AgentId::new(10 + i as u64),
                incarnation: 1,
                definition: "worker".into(),
                prompt: "work".into(),
                request_id: RequestId::new(format!("a1/1/m{i}c0")),
                settle: None,
                context: Vec::new(),
                resume: false,
                earlier: Vec::new(),
            });
        }
        sim
    }

    fn one(link: LinkConfig, seed: u64) -> Self {
        Sim::new(1, link, OutboxLimits::default(), seed)
    }

    fn step(&mut self) {
        self.now += 1;
        let now = self.now;
        let owner_awake = now >= self.owner_frozen_until;
        for (i, e) in self.edges.iter_mut().enumerate() {
            if owner_awake {
                if std::mem::take(&mut e.owner.reconnect_pending) {
                    e.owner.end.reconnect();
                }
                for text in e.link.take(true, now) {
                    let frame = Frame::<Up>::from_json(&text).expect("frames decode");
                    let shutdown_report = match &frame.body {
                        Up::Report { report } if report.agent.is_root() => Some(report.clone()),
                        _ => None,
                    };
                    let applied = e.owner.applied_up.len();
                    e.owner.receive(now, frame);
                    if let (Some(report), Some(round)) = (shutdown_report, self.shutdown.as_mut()) {
                        if e.owner.applied_up.len() > applied {
                            let _: Taken = round.on_report(i, report, ms(now));
                        }
                    }
                }
            }
            if now >= e.child_frozen_until {
                if std::mem::take(&mut e.child.reconnect_pending) {
                    e.child.on_reconnect(now);
                }
                for text in e.link.take(false, now) {
                    let frame = Frame::<Down>::from_json(&text).expect("frames decode");
                    e.child.receive(now, frame);
                }
            }
        }
        for e in &mut self.edges {
            if owner_awake {
                for frame in e.owner.tick(now) {
                    e.link.send(false, now, frame.to_json());
                }
            }
            if now >= e.child_frozen_until {
                for frame in e.child.tick(now) {
                    e.link.send(true, now, frame.to_json());
                }
            }
        }
        if owner_awake && self.shutdown_done.is_none() {
            if let Some(round) = self.shutdown.as_mut() {
                if let Round::Done(tally) = round.poll(ms(now)) {
                    for &node in &tally.killed {
                        self.edges[node]
                            .owner
                            .give_up(now, "node unreachable at the shutdown deadline");
                    }
                    self.shutdown_done = Some((now, tally));
                }
            }
        }
    }

    fn run_until(&mut self, t: u64) {
        while self.now < t {
            self.step();
        }
    }

    fn run(&mut self, ms: u64) {
        self.run_until(self.now + ms);
    }

    fn disconnect(&mut self, edge: usize) {
        self.edges[edge].link.disconnect();
    }

    fn reconnect(&mut self, edge: usize) {
        let e = &mut self.edges[edge];
        if !e.link.connected {
            e.link.connected = true;
            e.owner.reconnect_pending = true;
            e.child.reconnect_pending = true;
        }
    }

    fn freeze_child(&mut self, edge: usize, for_ms: u64) {
        self.edges[edge].child_frozen_until = self.now + for_ms;
    }

    fn freeze_owner(&mut self, for_ms: u64) {
        self.owner_frozen_until = self.now + for_ms;
    }

    fn start_shutdown(&mut self, grace_ms: u64) {
        let deadline = self.now + grace_ms;
        for e in &mut self.edges {
            e.owner.command(Command::Shutdown {
                within_ms: grace_ms,
            });
        }
        self.shutdown = Some(NodesShutdown::new(0..self.edges.len(), ms(deadline)));
    }

    /// What must hold on every edge at any time.
    fn check_invariants(&self) {
        for (i, e) in self.edges.iter().enumerate() {
            let (o, c) = (&e.owner, &e.child);
            assert!(
                o.errors.is_empty() && c.errors.is_empty(),
                "edge {i}: {:?} {:?}",
                o.errors,
                c.errors
            );
            // Usage folded + usage reported late == usage the owner acknowledged.
            assert_eq!(o.mirror.total() + o.late_usage(), o.acked_usage, "edge {i}");
            // What the owner acknowledged is exactly what the child billed, up to the last
            // hosted event the owner applied: nothing more, nothing twice.
            let billed: Usage = c
                .generated
                .iter()
                .filter(|(seq, _)| *seq <= o.last_hosted)
                .map(|(_, u)| *u)
                .sum();
            assert_eq!(o.acked_usage, billed, "edge {i}");
            assert_eq!(
                o.applied_up.len() as u64,
                o.end.inbox().ack(),
                "edge {i}: dense, once"
            );
            // Lease safety: declared by the lease only after the child's lease ended plus
            // the grace; given up early, the child's lease ends within one lease; the child
            // took no turn past its lease.
            if let (Some(declared), Some(until)) = (o.lease_declared_at, c.until()) {
                assert!(
                    until + as_ms(self.terms.grace) <= declared,
                    "edge {i}: {until} {declared}"
                );
            }
            if let (Some(given_up), Some(until)) = (o.declared_at, c.until()) {
                assert!(
                    until <= given_up + as_ms(self.terms.lease),
                    "edge {i}: {until} {given_up}"
                );
            }
            if let Some(until) = c.until() {
                assert!(
                    c.turn_times.iter().all(|&t| t < until),
                    "edge {i}: a turn past the lease"
                );
            }
        }
    }
}
