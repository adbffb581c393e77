//! Bodies over the frame limit go in parts (`Endpoint::queue_parts`, `join`) and come out
//! whole, once, in order: through replays, gaps, duplicates, reconnects, acks covering part
//! of a body, small outboxes, multi-byte text at cut points, the size accounting and the
//! exact limits, and a lossy, duplicating, reordering link.

use std::collections::VecDeque;

use agent_tree_protocol::{
    AgentId, Command, DEFAULT_MAX_BODY_BYTES, Down, Frame, Part, RequestId, Up, Wire,
};

use super::seq::{Body, EdgeError, Endpoint, OutboxLimits, QueueError, Received};
use super::sim::Rng;
use super::size::SizeGuard;

fn steer(message: impl Into<String>) -> Down {
    Down::Command {
        command: Command::Steer {
            agent: AgentId::new(1),
            message: message.into(),
        },
    }
}

fn spawn(prompt: impl Into<String>) -> Down {
    Down::Command {
        command: Command::Spawn {
            agent: AgentId::new(2),
            incarnation: 1,
            definition: "worker".into(),
            prompt: prompt.into(),
            request_id: RequestId::new("r"),
            settle: None,
            context: Vec::new(),
            resume: false,
            earlier: Vec::new(),
        },
    }
}

/// Text of about `bytes` bytes mixing ASCII, quotes, backslashes, 2-, 3- and 4-byte
/// characters and control characters (escaped by the encoder), so cuts fall everywhere.
fn mixed(bytes: usize, salt: usize) -> String {
    let alphabet = ['a', '"', 'é', '€', '𝄞', '\\', '\u{1}', '\n', 'z', '😀'];
    let mut out = String::new();
    let mut i = salt;
    while out.len() < bytes {
        out.push(alphabet[i % alphabet.len()]);
        i = i.wrapping_mul(31).wrapping_add(7);
    }
    out
}

fn endpoints(max_frame: usize, limits: OutboxLimits) -> (Endpoint<Down>, Endpoint<Up>) {
    let guard = SizeGuard::new(max_frame);
    (Endpoint::new(limits, guard), Endpoint::new(limits, guard))
}

fn roomy() -> OutboxLimits {
    OutboxLimits::default()
}

/// Delivers `frames` to `child`, collecting whole bodies; every result must be `Ok`.
fn deliver(child: &mut Endpoint<Up>, frames: Vec<Frame<Down>>, bodies: &mut Vec<Down>) {
    for frame in frames {
        // As the wire does: encoded, decoded strictly.
        let frame = Frame::<Down>::from_json(&frame.to_json()).expect("decodes");
        match child.receive(frame) {
            Ok(Received::Fresh { body, .. }) => bodies.push(body),
            Ok(_) => {}
            Err(error) => panic!("the child refused a frame: {error}"),
        }
    }
}

fn ack_owner(owner: &mut Endpoint<Down>, child: &mut Endpoint<Up>) {
    let ack = child.ack_frame(false);
    owner.receive(ack).expect("the owner takes the ack");
}

/// An ack covering only the first parts of a body, then a reconnect: the replay starts at a
/// part in the middle of the body and the child joins it once.
#[test]
fn a_replay_that_starts_mid_body_joins_it_once() {
    let (mut owner, mut child) = endpoints(1024, roomy());
    let big = steer(mixed(12_000, 3));
    owner.queue(steer("before")).unwrap();
    owner.queue(big.clone()).unwrap();
    owner.queue(steer("after")).unwrap();
    let frames = owner.outgoing();
    assert!(frames.len() > 8);
    let mut bodies = Vec::new();
    let cut = frames.len() / 3;
    deliver(&mut child, frames[..cut].to_vec(), &mut bodies);
    // The child acks part of the body; the rest is lost with the connection.
    ack_owner(&mut owner, &mut child);
    assert_eq!(owner.outbox().acked(), cut as u64);
    owner.reconnect();
    child.reconnect();
    let replay = owner.outgoing();
    assert_eq!(replay.first().map(|f| f.seq), Some(cut as u64 + 1));
    assert!(matches!(replay[0].body, Down::Part { ref part } if part.index > 0));
    deliver(&mut child, replay, &mut bodies);
    assert_eq!(bodies, [steer("before"), big, steer("after")]);
    ack_owner(&mut owner, &mut child);
    assert_eq!(owner.outbox().len(), 0);
}

/// A part lost inside a body (the transport dropped it): the next is a gap, the replay
/// fills it, the body comes out once.
#[test]
fn a_gap_inside_a_bodys_parts_is_filled_by_the_replay() {
    let (mut owner, mut child) = endpoints(600, roomy());
    let big = spawn(mixed(6_000, 11));
    owner.queue(big.clone()).unwrap();
    let frames = owner.outgoing();
    let n = frames.len();
    assert!(n > 4);
    let mut bodies = Vec::new();
    deliver(&mut child, frames[..2].to_vec(), &mut bodies);
    // Frame 3 is lost; 4 comes.
    let got = child.receive(frames[3].clone()).unwrap();
    assert!(
        matches!(
            got,
            Received::Gap {
                expected: 3,
                got: 4,
                resend: true
            }
        ),
        "{got:?}"
    );
    let ask = child.ack_frame(true);
    // The rest of the burst arrives too (gaps, not asked again).
    for frame in &frames[4..] {
        assert!(matches!(
            child.receive(frame.clone()).unwrap(),
            Received::Gap { resend: false, .. }
        ));
    }
    owner.receive(ask).unwrap();
    let replay = owner.outgoing();
    assert_eq!(replay.first().map(|f| f.seq), Some(3));
    deliver(&mut child, replay, &mut bodies);
    assert_eq!(bodies, [big]);
    assert_eq!(child.inbox().ack(), n as u64);
}

/// Duplicates of parts already joined (and of the last part, after the body came out) are
/// duplicates: the body is never handed over twice and no join state is disturbed.
#[test]
fn duplicates_of_joined_parts_never_repeat_the_body() {
    let (mut owner, mut child) = endpoints(700, roomy());
    let first = steer(mixed(5_000, 1));
    let second = steer(mixed(5_000, 2));
    owner.queue(first.clone()).unwrap();
    owner.queue(second.clone()).unwrap();
    let frames = owner.outgoing();
    let mut bodies = Vec::new();
    for (i, frame) in frames.iter().enumerate() {
        deliver(&mut child, vec![frame.clone()], &mut bodies);
        // Every earlier frame again, including the last part of the first body.
        for old in &frames[..=i] {
            match child.receive(old.clone()).unwrap() {
                Received::Duplicate { .. } => {}
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!(bodies, [first, second]);
}

/// The receiving end reconnects (a new connection) in the middle of a body's parts: what
/// it joined so far is kept (its inbox kept the numbers), and the body comes out whole.
#[test]
fn the_receiver_reconnecting_mid_join_keeps_the_half_joined_body() {
    let (mut owner, mut child) = endpoints(512, roomy());
    let big = steer(mixed(4_000, 5));
    owner.queue(big.clone()).unwrap();
    let frames = owner.outgoing();
    let mut bodies = Vec::new();
    let half = frames.len() / 2;
    deliver(&mut child, frames[..half].to_vec(), &mut bodies);
    child.reconnect();
    owner.reconnect();
    // The ack never came: the whole body is replayed, the first half as duplicates.
    deliver(&mut child, owner.outgoing(), &mut bodies);
    assert_eq!(bodies, [big]);
    // And a retransmission tick mid-body (no ack came) does the same.
    let (mut owner, mut child) = endpoints(512, roomy());
    let big = steer(mixed(4_000, 6));
    owner.queue(big.clone()).unwrap();
    let frames = owner.outgoing();
    let mut bodies = Vec::new();
    deliver(&mut child, frames[..half].to_vec(), &mut bodies);
    assert!(!owner.retransmit_tick());
    assert!(owner.retransmit_tick());
    deliver(&mut child, owner.outgoing(), &mut bodies);
    assert_eq!(bodies, [big]);
}

/// Every part's counted size is at least its frame's real encoding (with the largest
/// numbers), every frame is under the limit, and multi-byte characters survive the cuts.
#[test]
fn counted_sizes_are_never_under_the_real_encoding_and_cuts_keep_characters() {
    for max in [150usize, 200, 257, 300, 513, 777, 1024, 4096] {
        for salt in 0..6 {
            let (mut owner, mut child) = endpoints(max, roomy());
            let body = steer(mixed(3_000 + salt * 37, salt));
            match owner.queue(body.clone()) {
                Ok(_) => {}
                // A limit too small for a part's own frame: refused, nothing queued.
                Err(QueueError::Oversized { .. }) => {
                    assert_eq!(owner.outbox().len(), 0, "max {max}");
                    continue;
                }
                Err(other) => panic!("max {max}: {other:?}"),
            }
            let counted = owner.outbox().bytes();
            let frames = owner.outgoing();
            let mut real = 0;
            for frame in &frames {
                let worst = Frame {
                    seq: u64::MAX,
                    ack: u64::MAX,
                    body: frame.body.clone(),
                };
                let len = worst.to_json().len();
                assert!(len <= max, "max {max}: a frame of {len} bytes");
                real += len;
            }
            assert!(
                counted >= real,
                "max {max}: counted {counted} < real {real}"
            );
            let mut bodies = Vec::new();
            deliver(&mut child, frames, &mut bodies);
            assert_eq!(bodies, [body], "max {max} salt {salt}");
        }
    }
}

/// The size of a steer body whose message is `n` ASCII bytes.
fn steer_json_len(n: usize) -> usize {
    steer("x".repeat(n)).body_json().len()
}

/// A body exactly at the frame limit goes whole; one byte over goes in parts; a body
/// exactly at the body limit goes in parts and is joined; one byte over is refused.
#[test]
fn bodies_exactly_at_the_limits() {
    let base = steer_json_len(0);
    let overhead = Frame {
        seq: u64::MAX,
        ack: u64::MAX,
        body: steer(""),
    }
    .to_json()
    .len()
        - base;
    let max = 2048;
    let exact = steer("x".repeat(max - overhead - base));
    let (mut owner, mut child) = endpoints(max, roomy());
    owner.queue(exact.clone()).unwrap();
    let frames = owner.outgoing();
    assert_eq!(frames.len(), 1, "exactly at the frame limit: one frame");
    assert!(matches!(frames[0].body, Down::Command { .. }));
    let mut bodies = Vec::new();
    deliver(&mut child, frames, &mut bodies);
    let over = steer("x".repeat(max - overhead - base + 1));
    owner.queue(over.clone()).unwrap();
    let frames = owner.outgoing();
    assert!(frames.len() > 1, "one byte over: in parts");
    deliver(&mut child, frames, &mut bodies);
    assert_eq!(bodies, [exact, over]);

    // The body limit, with the default frame limit.
    let at_limit = steer("x".repeat(DEFAULT_MAX_BODY_BYTES - base));
    assert_eq!(at_limit.body_json().len(), DEFAULT_MAX_BODY_BYTES);
    let mut owner: Endpoint<Down> = Endpoint::new(roomy(), SizeGuard::default());
    let mut child: Endpoint<Up> = Endpoint::new(roomy(), SizeGuard::default());
    owner
        .queue(at_limit.clone())
        .expect("a body at the limit is queued");
    let mut bodies = Vec::new();
    for frame in owner.outgoing() {
        if let Received::Fresh { body, .. } = child.receive(frame).expect("joined") {
            bodies.push(body);
        }
    }
    assert!(bodies == [at_limit], "the body at the limit came out whole");
    let over_limit = steer("x".repeat(DEFAULT_MAX_BODY_BYTES - base + 1));
    assert!(matches!(
        owner.queue(over_limit),
        Err(QueueError::Oversized { .. })
    ));
}

/// `has_room` and `push` agree at the boundary: parts filling an empty outbox's frames or
/// bytes exactly are queued; with one frame more already held, the body is `Full` (handed
/// back whole, nothing queued), never `Oversized`, and fits once that frame is acked.
#[test]
fn parts_filling_the_outbox_exactly_are_queued() {
    let body = steer(mixed(3_000, 9));
    let (mut probe, _) = endpoints(1024, roomy());
    probe.queue(body.clone()).unwrap();
    let (frames, bytes) = (probe.outbox().len(), probe.outbox().bytes());
    assert!(frames > 2);
    for limits in [
        OutboxLimits {
            max_frames: frames,
            max_bytes: 1 << 20,
        },
        OutboxLimits {
            max_frames: frames + 10,
            max_bytes: bytes,
        },
    ] {
        let (mut owner, mut child) = endpoints(1024, limits);
        let queued = owner.queue(body.clone());
        assert!(
            queued.is_ok(),
            "{limits:?}: exactly full: {:?}",
            queued.map_err(|e| e.to_string())
        );
        assert_eq!(owner.outbox().len(), frames);
        let (mut owner2, _) = endpoints(1024, limits);
        owner2.queue(steer("s")).unwrap();
        match owner2.queue(body.clone()) {
            Err(QueueError::Full(full)) => assert_eq!(full.item, body),
            other => panic!("{limits:?}: {other:?}"),
        }
        assert_eq!(owner2.outbox().len(), 1, "nothing of it queued");
        owner2.outgoing();
        owner2
            .receive(Frame {
                seq: 0,
                ack: 1,
                body: Up::Ack { resend: false },
            })
            .unwrap();
        assert!(owner2.queue(body.clone()).is_ok(), "{limits:?}: room again");
        let mut bodies = Vec::new();
        deliver(&mut child, owner.outgoing(), &mut bodies);
        assert_eq!(bodies, std::slice::from_ref(&body));
    }
}

/// A failed join (a stray part mid-body) leaves the end able to join the next body in
/// parts.
#[test]
fn after_a_failed_join_the_next_body_in_parts_joins() {
    let (mut owner, mut child) = endpoints(512, roomy());
    let next = steer(mixed(2_000, 4));
    let stray = |seq, index, of| Frame {
        seq,
        ack: 0,
        body: Down::Part {
            part: Part {
                index,
                of,
                text: "{\"ki".into(),
            },
        },
    };
    assert!(matches!(
        child.receive(stray(1, 0, 3)),
        Ok(Received::Part { .. })
    ));
    assert!(matches!(
        child.receive(stray(2, 2, 3)),
        Err(EdgeError::Part(_))
    ));
    // The owner's real stream continues from 3 (the stray ones took 1 and 2).
    owner.queue(steer("a")).unwrap();
    owner.queue(steer("b")).unwrap();
    owner.queue(next.clone()).unwrap();
    let frames: Vec<_> = owner.outgoing().into_iter().skip(2).collect();
    let mut bodies = Vec::new();
    deliver(&mut child, frames, &mut bodies);
    assert_eq!(bodies, [next]);
}

/// Models the stand-in's rule for a refused spawn (`Up::Refused { command == 1 }` while it
/// has no top agent: `actors/src/cluster/stand_in.rs`) against what the hosted side sends
/// (`self.refuse(seq, ..)` with the `seq` of `Received::Fresh`, `actors/src/cluster/hosted.rs`).
/// An edge's first body is its spawn; a spawn over the frame limit (a 9 MiB prompt, a resume
/// of a large conversation) comes out with the number of its *last* part. The refusal must
/// name the number the stand-in recognises as its spawn.
#[test]
fn a_refused_spawn_in_parts_is_recognised_as_the_spawn() {
    let (mut owner, mut child) = endpoints(1024, roomy());
    // The stand-in keeps the number `queue` gave its spawn, and takes a refusal naming it
    // as its spawn's.
    // regression: the stand-in once expected 1, the first part's, and hung on a refused
    // spawn in parts.
    let queued = owner.queue(spawn(mixed(5_000, 8))).unwrap();
    let mut refused_command = None;
    for frame in owner.outgoing() {
        if let Received::Fresh { seq, .. } = child.receive(frame).unwrap() {
            // The hosted side's refusal of a spawn it cannot run (unknown definition, say).
            refused_command = Some(seq);
        }
    }
    let command = refused_command.expect("the spawn came out");
    assert!(command > 1, "the spawn went in parts");
    assert_eq!(
        command, queued,
        "the hosted side refuses the spawn as command {command}: the number queue returned"
    );
}

/// A lossy link between the two ends, in steps: frames may be dropped, duplicated,
/// reordered; the connection may drop (everything in flight lost, both ends reconnect);
/// both ends run the retransmission timer. Large bodies in parts and small ones, a small
/// outbox holding work back: every body comes out exactly once, in order, whole.
#[test]
fn a_lossy_link_delivers_bodies_in_parts_exactly_once_in_order() {
    for seed in 1..=40u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let limits = OutboxLimits {
            max_frames: 40 + (seed as usize % 20),
            max_bytes: 64 * 1024,
        };
        let max = 1024 + (seed as usize * 97) % 900;
        let (mut owner, mut child) = endpoints(max, limits);
        let mut to_send: VecDeque<Down> = (0..30)
            .map(|i| {
                let size = match rng.below(4) {
                    0 => 5 + rng.below(50) as usize,
                    1 => max / 2,
                    _ => 500 + rng.below(4_000) as usize,
                };
                steer(format!("{i}:{}", mixed(size, i + seed as usize)))
            })
            .collect();
        let expected: Vec<Down> = to_send.iter().cloned().collect();
        let mut down: Vec<(u64, String)> = Vec::new();
        let mut up: Vec<(u64, String)> = Vec::new();
        let mut bodies = Vec::new();
        let (drop, dup, reorder, cut) = (rng.below(8), rng.below(15), rng.below(30), rng.below(3));
        for step in 0..20_000u64 {
            // The owner queues what fits (in order), sends, and ticks.
            while let Some(body) = to_send.pop_front() {
                match owner.queue(body) {
                    Ok(_) => {}
                    Err(QueueError::Full(full)) => {
                        to_send.push_front(full.item);
                        break;
                    }
                    Err(other) => panic!("seed {seed}: {other}"),
                }
            }
            if step % 25 == 0 {
                owner.retransmit_tick();
                child.retransmit_tick();
            }
            for frame in owner.outgoing() {
                if rng.below(100) < drop {
                    continue;
                }
                let copies = if rng.below(100) < dup { 2 } else { 1 };
                for _ in 0..copies {
                    let at = step
                        + 1
                        + if rng.below(100) < reorder {
                            rng.below(5)
                        } else {
                            0
                        };
                    down.push((at, frame.to_json()));
                }
            }
            if cut > 0 && rng.below(400) == 0 {
                down.clear();
                up.clear();
                owner.reconnect();
                child.reconnect();
            }
            // Deliver what is due.
            down.sort_by_key(|(at, _)| *at);
            let due = down.iter().take_while(|(at, _)| *at <= step).count();
            for (_, text) in down.drain(..due).collect::<Vec<_>>() {
                let frame = Frame::<Down>::from_json(&text).unwrap();
                let received = match child.receive(frame) {
                    Ok(received) => received,
                    Err(error) => panic!("seed {seed}: the child refused a frame: {error}"),
                };
                let reply = received.reply();
                if let Received::Fresh { body, .. } = received {
                    bodies.push(body);
                }
                if let Some(resend) = reply {
                    let ack = child.ack_frame(resend);
                    if rng.below(100) >= drop {
                        up.push((step + 1, ack.to_json()));
                    }
                }
            }
            up.sort_by_key(|(at, _)| *at);
            let due = up.iter().take_while(|(at, _)| *at <= step).count();
            for (_, text) in up.drain(..due).collect::<Vec<_>>() {
                let frame = Frame::<Up>::from_json(&text).unwrap();
                if let Ok(Received::Control { resend: true, .. }) = owner.receive(frame) {
                    // Not expected from acks only; harmless.
                }
            }
            if to_send.is_empty() && owner.outbox().len() == 0 && down.is_empty() {
                break;
            }
        }
        assert_eq!(
            owner.outbox().len(),
            0,
            "seed {seed}: never all acknowledged"
        );
        assert_eq!(bodies.len(), expected.len(), "seed {seed}");
        assert!(bodies == expected, "seed {seed}: bodies differ");
    }
}
