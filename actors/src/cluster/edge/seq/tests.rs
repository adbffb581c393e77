//! The outbox, the inbox and the endpoint: numbering, acknowledgement, replay after a
//! reconnect, bounds, duplicates and gaps, and bodies sent as parts.

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
    let mut owner: Endpoint<Down> = Endpoint::new(OutboxLimits::default(), SizeGuard::default());
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
    let mut roomy: Endpoint<Down> = Endpoint::new(OutboxLimits::default(), SizeGuard::default());
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
    let mut owner: Endpoint<Down> = Endpoint::new(OutboxLimits::default(), SizeGuard::default());
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
    let mut owner: Endpoint<Down> = Endpoint::new(OutboxLimits::default(), SizeGuard::default());
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
