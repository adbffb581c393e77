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
//! * A body too large for one frame and within [`DEFAULT_MAX_BODY_BYTES`] is queued as its
//!   [`Part`]s, all at once or not at all (consecutive numbers, nothing between them); the
//!   receiving end joins them and hands the caller the body once, when the last part is
//!   applied. A body over that is refused before it is queued.

use std::collections::VecDeque;

use agent_tree_protocol::{DEFAULT_MAX_BODY_BYTES, Down, Frame, Part, Up};

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

    /// Whether `frames` more frames of `bytes` in all fit now.
    pub(crate) fn has_room(&self, frames: usize, bytes: usize) -> bool {
        self.kept.len().saturating_add(frames) <= self.limits.max_frames
            && self.bytes.saturating_add(bytes) <= self.limits.max_bytes
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
pub(crate) trait Body:
    Clone + Sized + serde::Serialize + serde::de::DeserializeOwned
{
    /// Whether it is numbered and kept until acknowledged.
    fn sequenced(&self) -> bool;
    /// Whether it asks the other end to replay its unacknowledged frames.
    fn asks_resend(&self) -> bool;
    /// The acknowledgement-only body.
    fn ack(resend: bool) -> Self;
    /// The body carrying one part of another ([`Endpoint::queue`] of a large body).
    fn part(part: Part) -> Self;
    /// The part it carries, or itself when it is not a part.
    fn into_part(self) -> Result<Part, Self>;
    /// Its JSON (what its parts carry).
    fn body_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
    /// A body from the JSON its parts carried, strictly.
    fn from_body_json(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }
}

/// What a frame's encoding adds to its body's, at most: `{"seq":…,"ack":…,"body":…}` with
/// the largest numbers it can carry.
const FRAME_OVERHEAD: usize =
    r#"{"seq":18446744073709551615,"ack":18446744073709551615,"body":}"#.len();

/// The bytes `text` takes as a JSON string, its quotes and escapes included (counted by the
/// encoder itself, not kept).
fn escaped_len(text: &str) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, text) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
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
    fn part(part: Part) -> Self {
        Down::Part { part }
    }
    fn into_part(self) -> Result<Part, Self> {
        match self {
            Down::Part { part } => Ok(part),
            other => Err(other),
        }
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
    fn part(part: Part) -> Self {
        Up::Part { part }
    }
    fn into_part(self) -> Result<Part, Self> {
        match self {
            Up::Part { part } => Ok(part),
            other => Err(other),
        }
    }
}

/// `text` in pieces of at most `max` bytes each (`max` ≥ 4), cut at character boundaries.
fn cut(text: &str, max: usize) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = rest.len().min(max);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (piece, tail) = rest.split_at(end);
        pieces.push(piece);
        rest = tail;
    }
    pieces
}

/// A body being joined from its parts.
#[derive(Clone, Debug)]
struct Joining {
    of: u32,
    next: u32,
    text: String,
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
    /// A part that does not continue the body being joined, parts over the body limit, or
    /// joined parts that do not decode: the body is dropped.
    #[error("a body in parts: {0}")]
    Part(&'static str),
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

impl<B> QueueError<B> {
    /// The body that was not queued.
    #[cfg(test)]
    pub(crate) fn into_body(self) -> B {
        match self {
            QueueError::Oversized { body, .. } | QueueError::Control(body) => body,
            QueueError::Full(full) => full.item,
        }
    }
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
    /// A part of a body, applied: the body comes with its last part (as [`Received::Fresh`]).
    Part {
        /// Its number.
        seq: u64,
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
            Received::Fresh { .. } | Received::Part { .. } | Received::Duplicate { .. } => {
                Some(false)
            }
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
    /// A body whose parts are coming.
    joining: Option<Joining>,
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
            joining: None,
        }
    }

    /// Numbers a sequenced body and keeps it until acknowledged; it goes out with the next
    /// [`Endpoint::outgoing`].
    pub(crate) fn queue(&mut self, body: O) -> Result<u64, QueueError<O>> {
        if !body.sequenced() {
            return Err(QueueError::Control(body));
        }
        // Encoded once: its frame is this and the envelope's numbers (a large body's parts
        // are cut from it).
        let json = body.body_json();
        let bytes = json.len() + FRAME_OVERHEAD;
        if let Err(error) = self.guard.check(bytes) {
            return self.queue_parts(body, &json, error);
        }
        self.outbox.push(body, bytes).map_err(QueueError::Full)
    }

    /// Queues `body`, too large for one frame, as its parts: every part or none (a full
    /// outbox hands the body back whole, to be queued again later). Refused as oversized
    /// when its JSON is over [`DEFAULT_MAX_BODY_BYTES`], or its parts could never fit the
    /// outbox.
    fn queue_parts(&mut self, body: O, json: &str, error: Oversized) -> Result<u64, QueueError<O>> {
        // A part's text is a JSON string in its frame: escaping at most doubles it (its size
        // is counted, not encoded: the wire encodes it once).
        let piece = (self.guard.max_bytes() / 2).saturating_sub(256).max(4);
        if json.len() > DEFAULT_MAX_BODY_BYTES {
            return Err(QueueError::Oversized { body, error });
        }
        let pieces = cut(json, piece);
        let of = u32::try_from(pieces.len()).unwrap_or(u32::MAX);
        let mut parts = Vec::with_capacity(pieces.len());
        let mut total = 0usize;
        for (index, text) in (0..of).zip(pieces) {
            let empty = O::part(Part {
                index,
                of,
                text: String::new(),
            })
            .body_json()
            .len();
            let bytes = empty + escaped_len(text) + FRAME_OVERHEAD;
            if self.guard.check(bytes).is_err() {
                return Err(QueueError::Oversized { body, error });
            }
            total = total.saturating_add(bytes);
            let part = O::part(Part {
                index,
                of,
                text: text.to_owned(),
            });
            parts.push((part, bytes));
        }
        let limits = self.outbox.limits;
        if parts.len() > limits.max_frames || total > limits.max_bytes {
            return Err(QueueError::Oversized { body, error });
        }
        if !self.outbox.has_room(parts.len(), total) {
            return Err(QueueError::Full(OutboxFull {
                item: body,
                frames: self.outbox.len(),
                bytes: self.outbox.bytes(),
            }));
        }
        let mut last = 0;
        for (part, bytes) in parts {
            // Room for every part was checked above: none is refused.
            let pushed = self.outbox.push(part, bytes);
            debug_assert!(pushed.is_ok(), "the outbox had room for every part");
            last = pushed.map_or(last, |seq| seq);
        }
        Ok(last)
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
            Ok(_) => match frame.body.into_part() {
                Err(body) => Received::Fresh {
                    seq: frame.seq,
                    body,
                },
                Ok(part) => match self.join(part)? {
                    Some(body) => Received::Fresh {
                        seq: frame.seq,
                        body,
                    },
                    None => Received::Part { seq: frame.seq },
                },
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

    /// Takes the next part of a body: the body once its last part came.
    fn join<I: Body>(&mut self, part: Part) -> Result<Option<I>, EdgeError> {
        let Part { index, of, text } = part;
        let mut joining = match self.joining.take() {
            None if index == 0 && of > 1 => Joining {
                of,
                next: 0,
                text: String::new(),
            },
            Some(joining) if joining.next == index && joining.of == of => joining,
            _ => return Err(EdgeError::Part("a part that does not continue its body")),
        };
        if joining.text.len().saturating_add(text.len()) > DEFAULT_MAX_BODY_BYTES {
            return Err(EdgeError::Part("parts over the body limit"));
        }
        joining.text.push_str(&text);
        joining.next += 1;
        if joining.next < joining.of {
            self.joining = Some(joining);
            return Ok(None);
        }
        // Parts never nest: a part's body is a whole one.
        match I::from_body_json(&joining.text).map(Body::into_part) {
            Some(Err(body)) if body.sequenced() => Ok(Some(body)),
            _ => Err(EdgeError::Part("joined parts that do not decode to a body")),
        }
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
    use agent_tree_protocol::Wire;
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

    /// A spawn whose prompt is `bytes` long, of quotes and `é`s (escaping doubles a quote;
    /// a cut must fall on a character boundary).
    fn big_spawn(bytes: usize) -> Down {
        let prompt: String = "\"é".chars().cycle().take(bytes * 2 / 3).collect();
        Down::Command {
            command: Command::Spawn {
                agent: AgentId::new(2),
                incarnation: 1,
                definition: "worker".into(),
                prompt,
                request_id: agent_tree_protocol::RequestId::new("r"),
                settle: None,
                context: Vec::new(),
                resume: false,
                earlier: Vec::new(),
            },
        }
    }

    #[test]
    fn sizes_are_counted_as_the_wire_encodes_them_or_over() {
        let frame = |body: Down| Frame {
            seq: u64::MAX,
            ack: u64::MAX,
            body,
        };
        let body = abort(3);
        assert_eq!(
            frame(body.clone()).to_json().len(),
            body.body_json().len() + FRAME_OVERHEAD,
            "exact for a whole body"
        );
        for text in ["", "plain", "\"quoted\" \\ back", "ctl \u{1} \n \t é"] {
            let part = Down::part(Part {
                index: 3,
                of: 9,
                text: text.into(),
            });
            let empty = Down::part(Part {
                index: 3,
                of: 9,
                text: String::new(),
            });
            let counted = empty.body_json().len() + escaped_len(text) + FRAME_OVERHEAD;
            assert!(frame(part).to_json().len() <= counted, "{text:?}");
        }
    }

    #[test]
    fn a_body_over_the_frame_limit_goes_in_parts_and_comes_out_once_whole() {
        let guard = SizeGuard::new(1024);
        let mut owner: Endpoint<Down> = Endpoint::new(OutboxLimits::default(), guard);
        let mut child: Endpoint<Up> = Endpoint::new(OutboxLimits::default(), guard);
        owner.queue(abort(1)).unwrap();
        let big = big_spawn(10_000);
        let last = owner.queue(big.clone()).unwrap();
        owner.queue(abort(2)).unwrap();
        let frames = owner.outgoing();
        assert!(frames.len() > 10, "{} frames", frames.len());
        assert_eq!(last, frames.len() as u64 - 1);
        for frame in &frames {
            assert!(frame.to_json().len() <= 1024, "a frame over the limit");
        }
        // The connection drops halfway through the parts: the replay joins them once.
        let half = frames.len() / 2;
        let mut bodies = Vec::new();
        for frame in &frames[..half] {
            if let Received::Fresh { body, .. } = child.receive(frame.clone()).unwrap() {
                bodies.push(body);
            }
        }
        owner.reconnect();
        let ack = child.ack_frame(false);
        owner.receive(ack).unwrap();
        for frame in owner.outgoing() {
            match child.receive(frame).unwrap() {
                Received::Fresh { body, .. } => bodies.push(body),
                Received::Part { .. } => {}
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(bodies, [abort(1), big, abort(2)]);
        assert_eq!(child.inbox().ack(), frames.len() as u64);
    }

    #[test]
    fn a_body_in_parts_is_queued_whole_or_not_at_all() {
        let guard = SizeGuard::new(1024);
        let limits = OutboxLimits {
            max_frames: 8,
            max_bytes: 64 * 1024,
        };
        let mut owner: Endpoint<Down> = Endpoint::new(limits, guard);
        owner.queue(abort(1)).unwrap();
        // Over the eight frames the outbox may ever hold: never fits, refused as oversized.
        let err = owner.queue(big_spawn(10_000)).unwrap_err();
        assert!(matches!(err, QueueError::Oversized { .. }), "{err:?}");
        assert_eq!(owner.outbox().len(), 1);
        // Fits an empty outbox, not this one now: handed back whole, nothing queued.
        for n in 2..=6 {
            owner.queue(abort(n)).unwrap();
        }
        let body = big_spawn(900);
        let err = owner.queue(body.clone()).unwrap_err();
        assert!(matches!(err, QueueError::Full(_)), "{err:?}");
        assert_eq!(err.into_body(), body);
        assert_eq!(owner.outbox().len(), 6, "no part of it was queued");
        // Acknowledged, the room is there: queued as its parts.
        owner.outgoing();
        owner
            .receive(Frame {
                seq: 0,
                ack: 6,
                body: Up::Ack { resend: false },
            })
            .unwrap();
        assert!(owner.queue(body).unwrap() > 7);
        // Over the body limit: refused, whatever the outbox.
        let mut roomy: Endpoint<Down> =
            Endpoint::new(OutboxLimits::default(), SizeGuard::default());
        let huge = big_spawn(DEFAULT_MAX_BODY_BYTES + 1);
        assert!(matches!(
            roomy.queue(huge),
            Err(QueueError::Oversized { .. })
        ));
        assert_eq!(roomy.outbox().len(), 0);
    }

    #[test]
    fn stray_parts_are_errors_never_panics_and_the_edge_goes_on() {
        let mut child: Endpoint<Up> = Endpoint::new(OutboxLimits::default(), SizeGuard::default());
        let part = |seq, index, of, text: &str| Frame {
            seq,
            ack: 0,
            body: Down::Part {
                part: Part {
                    index,
                    of,
                    text: text.into(),
                },
            },
        };
        // A body's second part without its first; a one-part "body"; parts of a part.
        assert!(matches!(
            child.receive(part(1, 1, 2, "x")),
            Err(EdgeError::Part(_))
        ));
        assert!(matches!(
            child.receive(part(2, 0, 1, "{}")),
            Err(EdgeError::Part(_))
        ));
        let nested = serde_json::to_string(&Down::Part {
            part: Part {
                index: 0,
                of: 2,
                text: "{".into(),
            },
        })
        .unwrap();
        let (a, b) = nested.split_at(nested.len() / 2);
        assert!(matches!(
            child.receive(part(3, 0, 2, a)),
            Ok(Received::Part { seq: 3 })
        ));
        assert!(matches!(
            child.receive(part(4, 1, 2, b)),
            Err(EdgeError::Part(_))
        ));
        // Joined text that is no body.
        assert!(matches!(
            child.receive(part(5, 0, 2, "{\"kind\":")),
            Ok(Received::Part { .. })
        ));
        assert!(matches!(
            child.receive(part(6, 1, 2, "\"nope\"}")),
            Err(EdgeError::Part(_))
        ));
        // The edge goes on: the next whole body is applied.
        let next = Frame {
            seq: 7,
            ack: 0,
            body: abort(7),
        };
        assert!(matches!(
            child.receive(next),
            Ok(Received::Fresh { seq: 7, .. })
        ));
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
        // A limit under a part's own frame: the body cannot go in parts either.
        let mut owner: Endpoint<Down> = Endpoint::new(OutboxLimits::default(), SizeGuard::new(100));
        let big = Down::Command {
            command: Command::Steer {
                agent: AgentId::new(1),
                message: "x".repeat(300),
            },
        };
        match owner.queue(big.clone()) {
            Err(QueueError::Oversized { body, error }) => {
                assert_eq!(body, big);
                assert!(error.bytes > 300 && error.max == 100, "{error}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(owner.outbox().last(), 0);
        assert!(owner.outgoing().is_empty());
        // Nothing of it stays behind: under a limit a frame fits, the next one goes first.
        let mut roomy: Endpoint<Down> = Endpoint::new(OutboxLimits::default(), SizeGuard::new(200));
        assert!(roomy.queue(big).is_ok(), "in parts under 200 bytes each");
        assert!(roomy.outgoing().iter().all(|f| f.to_json().len() <= 200));
    }
}
