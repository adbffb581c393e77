//! Exactly-once delivery over one edge: the sender's [`Outbox`], the receiver's [`Inbox`],
//! and an [`Endpoint`] that is both, for one end of an edge.
//!
//! The transport (ractor_cluster) keeps order within a connection but loses whatever is in
//! flight when the connection drops (a new connection is a new node id), and drops a
//! message it cannot decode without a word. So every sequenced frame is kept by its sender
//! until the other end's cumulative `ack` covers it, and the whole unacknowledged tail is
//! sent again after a reconnect, or when the receiver asks (`resend`) because it saw a gap.
//!
//! # Invariants
//!
//! * The outbox numbers frames `1, 2, 3, …` and holds every one not yet acknowledged, in
//!   order; an acknowledgement drops exactly the frames it covers. A full outbox refuses a
//!   new frame and hands it back ([`OutboxFull`]): nothing is ever dropped unacknowledged.
//! * The inbox applies frame `n` only right after `n − 1`: a number already applied is a
//!   duplicate (counted, ignored), a number past the next is a gap (refused, so the sender
//!   replays). So no number is applied twice and none is skipped.
//! * Nothing a peer sends panics here: a zero sequence number or an acknowledgement of a
//!   frame never sent is an [`EdgeError`], and the frame is not applied.

use std::collections::VecDeque;

use agent_tree_protocol::{Down, Frame, Up, Wire};

use super::size::{Oversized, SizeGuard};

/// How much an outbox holds before it refuses new frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OutboxLimits {
    /// The most unacknowledged frames.
    pub(crate) max_frames: usize,
    /// The most bytes of unacknowledged frames (their encoded sizes).
    pub(crate) max_bytes: usize,
}

impl Default for OutboxLimits {
    /// 4096 frames, 64 MiB: a lease's worth of events of a busy subtree.
    fn default() -> Self {
        OutboxLimits {
            max_frames: 4096,
            max_bytes: 64 * 1024 * 1024,
        }
    }
}

/// A frame the outbox had no room for, handed back: the caller holds it (and the work that
/// produces more) until acknowledgements free room.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("edge outbox full: {frames} frames, {bytes} bytes unacknowledged")]
pub(crate) struct OutboxFull<T> {
    /// The frame that was refused.
    pub(crate) item: T,
    /// Frames held when it was refused.
    pub(crate) frames: usize,
    /// Bytes held when it was refused.
    pub(crate) bytes: usize,
}

/// An acknowledgement the sender cannot take.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AckError {
    /// It acknowledges a frame that was never numbered.
    #[error("ack {ack} of a frame never sent (last sent {last})")]
    Unsent {
        /// The acknowledgement.
        ack: u64,
        /// The last number assigned.
        last: u64,
    },
}

#[derive(Clone, Debug)]
struct Kept<T> {
    seq: u64,
    bytes: usize,
    item: T,
}

/// The sending side of one direction: numbers frames, keeps them until acknowledged, and
/// knows which were handed to the current connection.
#[derive(Clone, Debug)]
pub(crate) struct Outbox<T> {
    limits: OutboxLimits,
    kept: VecDeque<Kept<T>>,
    bytes: usize,
    /// The last number assigned.
    last: u64,
    /// Everything up to here is acknowledged (and gone).
    acked: u64,
    /// Everything up to here was handed to the current connection.
    sent: u64,
}

impl<T> Outbox<T> {
    /// An empty outbox: the first frame gets number 1.
    pub(crate) fn new(limits: OutboxLimits) -> Self {
        Outbox {
            limits,
            kept: VecDeque::new(),
            bytes: 0,
            last: 0,
            acked: 0,
            sent: 0,
        }
    }

    /// Numbers `item` (of encoded size `bytes`) and keeps it until acknowledged, or hands it
    /// back when the outbox is at its limits.
    pub(crate) fn push(&mut self, item: T, bytes: usize) -> Result<u64, OutboxFull<T>> {
        let frames_full = self.kept.len() >= self.limits.max_frames;
        let bytes_full = self.bytes.saturating_add(bytes) > self.limits.max_bytes;
        if frames_full || bytes_full {
            return Err(OutboxFull {
                item,
                frames: self.kept.len(),
                bytes: self.bytes,
            });
        }
        self.last += 1;
        self.bytes += bytes;
        self.kept.push_back(Kept {
            seq: self.last,
            bytes,
            item,
        });
        Ok(self.last)
    }

    /// Takes the other end's cumulative acknowledgement: drops every frame up to `ack` and
    /// says how many. An older acknowledgement than one already taken changes nothing.
    pub(crate) fn on_ack(&mut self, ack: u64) -> Result<usize, AckError> {
        if ack > self.last {
            return Err(AckError::Unsent {
                ack,
                last: self.last,
            });
        }
        if ack <= self.acked {
            return Ok(0);
        }
        let mut dropped = 0;
        while let Some(front) = self.kept.front() {
            if front.seq > ack {
                break;
            }
            self.bytes -= front.bytes;
            self.kept.pop_front();
            dropped += 1;
        }
        self.acked = ack;
        self.sent = self.sent.max(ack);
        Ok(dropped)
    }

    /// The frames not yet handed to the current connection, in order, now marked handed.
    pub(crate) fn take_unsent(&mut self) -> Vec<(u64, T)>
    where
        T: Clone,
    {
        let sent = self.sent;
        let out: Vec<(u64, T)> = self
            .kept
            .iter()
            .filter(|k| k.seq > sent)
            .map(|k| (k.seq, k.item.clone()))
            .collect();
        self.sent = self.last;
        out
    }

    /// Every unacknowledged frame is to be sent again, in order: after a reconnect (what
    /// was in flight is lost) or when the receiver asks.
    pub(crate) fn rewind(&mut self) {
        self.sent = self.acked;
    }

    /// The unacknowledged frames, in order.
    pub(crate) fn unacked(&self) -> impl Iterator<Item = (u64, &T)> {
        self.kept.iter().map(|k| (k.seq, &k.item))
    }

    /// How many frames are unacknowledged.
    pub(crate) fn len(&self) -> usize {
        self.kept.len()
    }

    /// Their encoded bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The last number assigned (0 before the first).
    pub(crate) fn last(&self) -> u64 {
        self.last
    }

    /// The last number handed to the current connection or acknowledged.
    pub(crate) fn sent(&self) -> u64 {
        self.sent
    }

    /// The other end's cumulative acknowledgement.
    pub(crate) fn acked(&self) -> u64 {
        self.acked
    }
}

/// Why the inbox did not apply a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Applied before (a replay of a frame whose acknowledgement was lost, or a duplicate).
    Duplicate {
        /// The frame's number.
        seq: u64,
    },
    /// Frames between were not received: refused, the sender must replay from `expected`.
    Gap {
        /// The number the inbox waits for.
        expected: u64,
        /// The number that came.
        got: u64,
    },
}

/// The receiving side of one direction: applies each number exactly once, in order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Inbox {
    applied: u64,
    duplicates: u64,
    gaps: u64,
}

impl Inbox {
    /// An inbox waiting for frame 1.
    pub(crate) fn new() -> Self {
        Inbox::default()
    }

    /// Whether frame `seq` is applied now; on `Ok` the caller applies it and the value is
    /// the cumulative acknowledgement to send. `seq` must not be 0 ([`Endpoint`] checks).
    pub(crate) fn accept(&mut self, seq: u64) -> Result<u64, Refusal> {
        if seq <= self.applied {
            self.duplicates += 1;
            return Err(Refusal::Duplicate { seq });
        }
        if seq != self.applied + 1 {
            self.gaps += 1;
            return Err(Refusal::Gap {
                expected: self.applied + 1,
                got: seq,
            });
        }
        self.applied = seq;
        Ok(seq)
    }

    /// The cumulative acknowledgement: every frame up to it is applied.
    pub(crate) fn ack(&self) -> u64 {
        self.applied
    }

    /// Duplicates ignored so far.
    pub(crate) fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Frames refused for a gap so far.
    pub(crate) fn gaps(&self) -> u64 {
        self.gaps
    }
}

/// A frame body of one direction, as an [`Endpoint`] handles it.
pub(crate) trait Body: Clone + Sized {
    /// Whether it is numbered and kept until acknowledged.
    fn sequenced(&self) -> bool;
    /// Whether it asks the other end to replay its unacknowledged frames.
    fn asks_resend(&self) -> bool;
    /// The acknowledgement-only body.
    fn ack(resend: bool) -> Self;
    /// Its encoded size inside a frame, at most: with the largest numbers an envelope
    /// can carry.
    fn frame_bytes(self) -> (usize, Self);
}

fn frame_bytes<B>(body: B) -> (usize, B)
where
    Frame<B>: Wire,
{
    let probe = Frame {
        seq: u64::MAX,
        ack: u64::MAX,
        body,
    };
    (probe.to_json().len(), probe.body)
}

impl Body for Down {
    fn sequenced(&self) -> bool {
        self.is_sequenced()
    }
    fn asks_resend(&self) -> bool {
        matches!(self, Down::Ack { resend: true })
    }
    fn ack(resend: bool) -> Self {
        Down::Ack { resend }
    }
    fn frame_bytes(self) -> (usize, Self) {
        frame_bytes(self)
    }
}

impl Body for Up {
    fn sequenced(&self) -> bool {
        self.is_sequenced()
    }
    fn asks_resend(&self) -> bool {
        matches!(self, Up::Ack { resend: true })
    }
    fn ack(resend: bool) -> Self {
        Up::Ack { resend }
    }
    fn frame_bytes(self) -> (usize, Self) {
        frame_bytes(self)
    }
}

/// A frame the other end sent that this end refuses outright.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EdgeError {
    /// Its acknowledgement covers frames never sent.
    #[error(transparent)]
    Ack(#[from] AckError),
    /// A sequenced frame numbered 0.
    #[error("sequenced frame numbered 0")]
    ZeroSeq,
}

/// Why [`Endpoint::queue`] did not take a body; the body comes back.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum QueueError<B> {
    /// Its frame would exceed the size limit: it never reaches the wire.
    #[error("{error}")]
    Oversized {
        /// The body.
        body: B,
        /// The sizes.
        error: Oversized,
    },
    /// The outbox is full: hold it (and the work that makes more) until acks free room.
    #[error("{0}")]
    Full(OutboxFull<B>),
    /// A control body (grant, renewal, ack) is sent with [`Endpoint::control`], never kept.
    #[error("control bodies are not queued")]
    Control(B),
}

/// What a received frame is, for the caller to act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Received<B> {
    /// A sequenced frame applied now: the caller applies its body, exactly once.
    Fresh {
        /// Its number.
        seq: u64,
        /// Its body.
        body: B,
    },
    /// A sequenced frame applied before: ignored, but answered with an acknowledgement
    /// (its sender may have lost the last one).
    Duplicate {
        /// Its number.
        seq: u64,
    },
    /// A sequenced frame past a gap: refused. When `resend`, the caller sends an ack asking
    /// for a replay (asked once per gap per connection; a control frame asks again).
    Gap {
        /// The number waited for.
        expected: u64,
        /// The number that came.
        got: u64,
        /// Ask the sender to replay.
        resend: bool,
    },
    /// A control body. When `resend`, the sender has sent frames this end never received
    /// (the control frame's number is past what was applied): ask for a replay.
    Control {
        /// The body.
        body: B,
        /// Ask the sender to replay.
        resend: bool,
    },
}

impl<B> Received<B> {
    /// The acknowledgement this frame is answered with, once the caller has acted on it:
    /// `Some(resend)` for [`Endpoint::ack_frame`]. A sequenced frame, fresh or duplicate,
    /// is acknowledged (its sender may have lost the last ack); a gap, or a control frame
    /// showing frames never received, asks for a replay when `resend`.
    pub(crate) fn reply(&self) -> Option<bool> {
        match self {
            Received::Fresh { .. } | Received::Duplicate { .. } => Some(false),
            Received::Gap { resend, .. } | Received::Control { resend, .. } => {
                resend.then_some(true)
            }
        }
    }
}

/// One end of an edge: the outbox of what it sends (`O`), the inbox of what it receives,
/// and the size guard on everything it queues.
#[derive(Clone, Debug)]
pub(crate) struct Endpoint<O> {
    outbox: Outbox<O>,
    inbox: Inbox,
    guard: SizeGuard,
    /// The gap already asked about on this connection (the inbox's ack then).
    asked_at: Option<u64>,
    /// The outbox's (acked, sent) at the last retransmission tick.
    at_tick: (u64, u64),
}

impl<O: Body> Endpoint<O> {
    /// A fresh end of a fresh edge.
    pub(crate) fn new(limits: OutboxLimits, guard: SizeGuard) -> Self {
        Endpoint {
            outbox: Outbox::new(limits),
            inbox: Inbox::new(),
            guard,
            asked_at: None,
            at_tick: (0, 0),
        }
    }

    /// Numbers a sequenced body and keeps it until acknowledged; it goes out with the next
    /// [`Endpoint::outgoing`].
    pub(crate) fn queue(&mut self, body: O) -> Result<u64, QueueError<O>> {
        if !body.sequenced() {
            return Err(QueueError::Control(body));
        }
        let (bytes, body) = body.frame_bytes();
        if let Err(error) = self.guard.check(bytes) {
            return Err(QueueError::Oversized { body, error });
        }
        self.outbox.push(body, bytes).map_err(QueueError::Full)
    }

    /// The frames to hand to the connection now (queued since the last call, or everything
    /// unacknowledged after a [`Endpoint::reconnect`] or a resend request), each carrying
    /// this end's current acknowledgement.
    pub(crate) fn outgoing(&mut self) -> Vec<Frame<O>> {
        let ack = self.inbox.ack();
        self.outbox
            .take_unsent()
            .into_iter()
            .map(|(seq, body)| Frame { seq, ack, body })
            .collect()
    }

    /// A control frame (grant, renewal, acknowledgement): not numbered, not kept; its `seq`
    /// is the last number handed to the connection, so the other end sees what it lacks.
    pub(crate) fn control(&self, body: O) -> Frame<O> {
        Frame {
            seq: self.outbox.sent(),
            ack: self.inbox.ack(),
            body,
        }
    }

    /// An acknowledgement-only frame, asking for a replay when `resend`.
    pub(crate) fn ack_frame(&mut self, resend: bool) -> Frame<O> {
        if resend {
            self.asked_at = Some(self.inbox.ack());
        }
        self.control(O::ack(resend))
    }

    /// A new connection: everything unacknowledged goes out again, in order.
    pub(crate) fn reconnect(&mut self) {
        self.outbox.rewind();
        self.asked_at = None;
    }

    /// The retransmission timer, called at the caller's cadence (every lease renewal, say):
    /// when frames were outstanding at the previous tick and no acknowledgement has come
    /// since, everything unacknowledged goes out again. That recovers a lost tail (which no
    /// later frame reveals) and lost acknowledgements (the receiver answers the duplicates
    /// with its ack). Returns whether it rewound.
    pub(crate) fn retransmit_tick(&mut self) -> bool {
        let (acked, sent) = self.at_tick;
        let stalled = sent > acked && self.outbox.acked() == acked;
        self.at_tick = (self.outbox.acked(), self.outbox.sent());
        if stalled {
            self.outbox.rewind();
        }
        stalled
    }

    /// Takes one frame from the other end: its acknowledgement, then its body.
    pub(crate) fn receive<I: Body>(&mut self, frame: Frame<I>) -> Result<Received<I>, EdgeError> {
        if frame.body.sequenced() && frame.seq == 0 {
            return Err(EdgeError::ZeroSeq);
        }
        self.outbox.on_ack(frame.ack)?;
        if !frame.body.sequenced() {
            if frame.body.asks_resend() {
                self.outbox.rewind();
            }
            let resend = frame.seq > self.inbox.ack();
            return Ok(Received::Control {
                body: frame.body,
                resend,
            });
        }
        Ok(match self.inbox.accept(frame.seq) {
            Ok(_) => Received::Fresh {
                seq: frame.seq,
                body: frame.body,
            },
            Err(Refusal::Duplicate { seq }) => Received::Duplicate { seq },
            Err(Refusal::Gap { expected, got }) => {
                let resend = self.asked_at != Some(self.inbox.ack());
                if resend {
                    self.asked_at = Some(self.inbox.ack());
                }
                Received::Gap {
                    expected,
                    got,
                    resend,
                }
            }
        })
    }

    /// The sending side.
    pub(crate) fn outbox(&self) -> &Outbox<O> {
        &self.outbox
    }

    /// The receiving side.
    pub(crate) fn inbox(&self) -> &Inbox {
        &self.inbox
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_tree_protocol::{AgentId, Command};

    fn limits(max_frames: usize, max_bytes: usize) -> OutboxLimits {
        OutboxLimits {
            max_frames,
            max_bytes,
        }
    }

    #[test]
    fn every_received_frame_gets_its_acknowledgement() {
        let fresh: Received<()> = Received::Fresh { seq: 1, body: () };
        assert_eq!(fresh.reply(), Some(false));
        assert_eq!(Received::<()>::Duplicate { seq: 1 }.reply(), Some(false));
        for resend in [false, true] {
            let gap = Received::<()>::Gap {
                expected: 2,
                got: 4,
                resend,
            };
            assert_eq!(gap.reply(), resend.then_some(true));
            let control = Received::Control { body: (), resend };
            assert_eq!(control.reply(), resend.then_some(true));
        }
    }

    #[test]
    fn the_outbox_numbers_keeps_and_drops_on_a_cumulative_ack() {
        let mut out = Outbox::new(OutboxLimits::default());
        assert_eq!(out.push("a", 1), Ok(1));
        assert_eq!(out.push("b", 2), Ok(2));
        assert_eq!(out.push("c", 3), Ok(3));
        assert_eq!(out.take_unsent(), vec![(1, "a"), (2, "b"), (3, "c")]);
        assert!(out.take_unsent().is_empty(), "handed once per connection");
        assert_eq!(out.on_ack(2), Ok(2));
        assert_eq!(out.unacked().collect::<Vec<_>>(), vec![(3, &"c")]);
        assert_eq!((out.len(), out.bytes(), out.acked()), (1, 3, 2));
        // An older ack changes nothing; an ack of a frame never numbered is refused.
        assert_eq!(out.on_ack(1), Ok(0));
        assert_eq!(out.on_ack(4), Err(AckError::Unsent { ack: 4, last: 3 }));
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn a_rewind_replays_every_unacknowledged_frame_in_order() {
        let mut out = Outbox::new(OutboxLimits::default());
        for item in ["a", "b", "c", "d"] {
            out.push(item, 1).unwrap();
        }
        assert_eq!(out.take_unsent().len(), 4);
        out.on_ack(1).unwrap();
        out.rewind();
        assert_eq!(out.take_unsent(), vec![(2, "b"), (3, "c"), (4, "d")]);
        // Queued while the connection was down, then a rewind: still in order, once each.
        out.push("e", 1).unwrap();
        out.rewind();
        assert_eq!(
            out.take_unsent(),
            vec![(2, "b"), (3, "c"), (4, "d"), (5, "e")]
        );
    }

    #[test]
    fn a_full_outbox_hands_the_frame_back() {
        let mut out = Outbox::new(limits(2, 100));
        out.push("a", 10).unwrap();
        out.push("b", 10).unwrap();
        let full = out.push("c", 10).unwrap_err();
        assert_eq!(
            full,
            OutboxFull {
                item: "c",
                frames: 2,
                bytes: 20
            }
        );
        assert_eq!(out.last(), 2, "a refused frame takes no number");
        out.on_ack(1).unwrap();
        assert_eq!(out.push("c", 10), Ok(3));
        // The byte limit too.
        let mut out = Outbox::new(limits(10, 25));
        out.push("a", 20).unwrap();
        assert_eq!(out.push("b", 6).unwrap_err().item, "b");
        assert_eq!(out.push("b", 5), Ok(2));
    }

    #[test]
    fn the_inbox_applies_each_number_once_and_refuses_gaps() {
        let mut inbox = Inbox::new();
        assert_eq!(inbox.accept(1), Ok(1));
        assert_eq!(
            inbox.accept(3),
            Err(Refusal::Gap {
                expected: 2,
                got: 3
            })
        );
        assert_eq!(inbox.accept(2), Ok(2));
        assert_eq!(inbox.accept(2), Err(Refusal::Duplicate { seq: 2 }));
        assert_eq!(inbox.accept(1), Err(Refusal::Duplicate { seq: 1 }));
        assert_eq!(inbox.accept(3), Ok(3));
        assert_eq!((inbox.ack(), inbox.duplicates(), inbox.gaps()), (3, 2, 1));
        // The largest number is a gap, not an overflow.
        assert!(matches!(inbox.accept(u64::MAX), Err(Refusal::Gap { .. })));
    }

    fn abort(n: u64) -> Down {
        Down::Command {
            command: Command::Abort {
                agent: AgentId::new(n),
            },
        }
    }

    #[test]
    fn endpoints_deliver_exactly_once_across_a_lost_connection() {
        let mut owner: Endpoint<Down> =
            Endpoint::new(OutboxLimits::default(), SizeGuard::default());
        let mut child: Endpoint<Up> = Endpoint::new(OutboxLimits::default(), SizeGuard::default());
        for n in 1..=3 {
            owner.queue(abort(n)).unwrap();
        }
        let first = owner.outgoing();
        assert_eq!(first.len(), 3);
        // Only the first arrives; the connection drops with the others in flight.
        let got = child.receive(first[0].clone()).unwrap();
        assert!(matches!(got, Received::Fresh { seq: 1, .. }));
        owner.reconnect();
        child.reconnect();
        let replay = owner.outgoing();
        assert_eq!(
            replay.iter().map(|f| f.seq).collect::<Vec<_>>(),
            [1, 2, 3],
            "the ack of 1 never came back"
        );
        let seen: Vec<_> = replay
            .into_iter()
            .map(|f| child.receive(f).unwrap())
            .collect();
        assert!(matches!(seen[0], Received::Duplicate { seq: 1 }));
        assert!(matches!(seen[1], Received::Fresh { seq: 2, .. }));
        assert!(matches!(seen[2], Received::Fresh { seq: 3, .. }));
        // The child's ack empties the owner's outbox.
        let ack = child.ack_frame(false);
        assert_eq!(ack.ack, 3);
        assert!(matches!(
            owner.receive(ack).unwrap(),
            Received::Control { resend: false, .. }
        ));
        assert_eq!(owner.outbox().len(), 0);
        assert_eq!(child.inbox().duplicates(), 1);
    }

    #[test]
    fn a_gap_asks_for_a_replay_once_and_a_control_frame_shows_a_lost_tail() {
        let mut owner: Endpoint<Down> =
            Endpoint::new(OutboxLimits::default(), SizeGuard::default());
        let mut child: Endpoint<Up> = Endpoint::new(OutboxLimits::default(), SizeGuard::default());
        for n in 1..=3 {
            owner.queue(abort(n)).unwrap();
        }
        let frames = owner.outgoing();
        // Frame 1 is dropped by the transport (it failed to decode, say).
        let second = child.receive(frames[1].clone()).unwrap();
        assert_eq!(
            second,
            Received::Gap {
                expected: 1,
                got: 2,
                resend: true
            }
        );
        let ask = child.ack_frame(true);
        let third = child.receive(frames[2].clone()).unwrap();
        assert!(
            matches!(third, Received::Gap { resend: false, .. }),
            "asked once"
        );
        owner.receive(ask).unwrap();
        let replay = owner.outgoing();
        assert_eq!(replay.iter().map(|f| f.seq).collect::<Vec<_>>(), [1, 2, 3]);
        for frame in replay {
            assert!(matches!(
                child.receive(frame).unwrap(),
                Received::Fresh { .. }
            ));
        }
        // The last frame of a burst is lost: the next control frame says so.
        owner.queue(abort(4)).unwrap();
        let _lost = owner.outgoing();
        let grant = owner.control(Down::Grant {
            grant: agent_tree_protocol::LeaseGrant {
                ticket: 1,
                lease_ms: 10,
            },
        });
        assert!(matches!(
            child.receive(grant).unwrap(),
            Received::Control { resend: true, .. }
        ));
    }

    #[test]
    fn the_retransmission_timer_resends_a_stalled_tail_only() {
        let mut owner: Endpoint<Down> =
            Endpoint::new(OutboxLimits::default(), SizeGuard::default());
        assert!(!owner.retransmit_tick(), "nothing outstanding");
        owner.queue(abort(1)).unwrap();
        let _lost = owner.outgoing();
        assert!(!owner.retransmit_tick(), "just sent: give it a tick");
        assert!(owner.retransmit_tick(), "a whole tick without an ack");
        assert_eq!(owner.outgoing().len(), 1);
        // An ack in between stops it.
        owner
            .receive(Frame {
                seq: 0,
                ack: 1,
                body: Up::Ack { resend: false },
            })
            .unwrap();
        owner.queue(abort(2)).unwrap();
        let _ = owner.outgoing();
        assert!(!owner.retransmit_tick(), "progress was made");
        assert!(owner.retransmit_tick());
        assert_eq!(
            owner.outgoing().iter().map(|f| f.seq).collect::<Vec<_>>(),
            [2]
        );
    }

    #[test]
    fn a_peer_cannot_panic_an_endpoint() {
        let mut child: Endpoint<Up> = Endpoint::new(OutboxLimits::default(), SizeGuard::default());
        // Acks of frames never sent, sequence number 0, absurd numbers.
        let frame = |seq, ack| Frame {
            seq,
            ack,
            body: abort(1),
        };
        assert_eq!(
            child.receive(frame(1, 5)),
            Err(EdgeError::Ack(AckError::Unsent { ack: 5, last: 0 }))
        );
        assert_eq!(child.receive(frame(0, 0)), Err(EdgeError::ZeroSeq));
        assert!(matches!(
            child.receive(frame(u64::MAX, 0)),
            Ok(Received::Gap { .. })
        ));
        assert_eq!(child.inbox().ack(), 0, "nothing was applied");
        // A control body cannot be queued.
        assert!(matches!(
            child.queue(Up::Renew { ticket: 1 }),
            Err(QueueError::Control(_))
        ));
    }

    #[test]
    fn an_oversized_frame_is_refused_before_the_wire_and_handed_back() {
        let mut owner: Endpoint<Down> = Endpoint::new(OutboxLimits::default(), SizeGuard::new(200));
        let big = Down::Command {
            command: Command::Steer {
                agent: AgentId::new(1),
                message: "x".repeat(300),
            },
        };
        match owner.queue(big.clone()) {
            Err(QueueError::Oversized { body, error }) => {
                assert_eq!(body, big);
                assert!(error.bytes > 300 && error.max == 200, "{error}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(owner.outbox().last(), 0);
        assert!(owner.outgoing().is_empty());
        assert_eq!(owner.queue(abort(1)), Ok(1));
    }
}
