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
    #[cfg(test)]
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
    #[cfg(test)]
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
    #[cfg(test)]
    pub(crate) fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Frames refused for a gap so far.
    #[cfg(test)]
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
    #[cfg(test)]
    pub(crate) fn inbox(&self) -> &Inbox {
        &self.inbox
    }
}

#[cfg(test)]
mod tests;
