//! The edge's scenario tests on the fake link: a quiet edge, disconnects, partitions,
//! frozen nodes, a lossy link that duplicates and reorders, late events, a shutdown across
//! nodes, a full outbox, and a property test over random schedules.

use super::*;

#[test]
fn a_quiet_edge_mirrors_the_hosted_tree_exactly() {
    let mut sim = Sim::one(LinkConfig::default(), 1);
    sim.run(10_000);
    sim.check_invariants();
    let e = &sim.edges[0];
    assert_eq!(e.child.tree.records()[1].status, AgentStatus::Completed);
    assert_eq!(e.owner.mirror.records(), e.child.tree.records());
    assert_eq!(e.owner.mirror.total(), e.child.total());
    assert_eq!(e.owner.checks, [ReportCheck::Agrees]);
    assert_eq!(e.owner.mirror.last_event(), e.child.log.len() as u64);
    assert!(e.owner.declared_at.is_none() && e.child.stopped_at.is_none());
    assert_eq!(e.child.end.outbox().len(), 0, "everything acknowledged");
    assert!(e.child.turn_times.len() as u32 >= Plan::default().turns);
}

#[test]
fn a_disconnect_within_the_lease_is_invisible() {
    let mut quiet = Sim::one(LinkConfig::default(), 2);
    quiet.run(10_000);
    let mut sim = Sim::one(LinkConfig::default(), 2);
    sim.run_until(2_050);
    sim.disconnect(0);
    sim.run_until(2_500);
    // A steer sent while the connection is down waits in the outbox.
    sim.edges[0].owner.command(Command::Steer {
        agent: AgentId::new(10),
        message: "hurry".into(),
    });
    sim.run_until(3_550);
    sim.reconnect(0);
    sim.run_until(5_000);
    // A second, shorter drop.
    sim.disconnect(0);
    sim.run(800);
    sim.reconnect(0);
    sim.run_until(10_000);
    sim.check_invariants();
    let e = &sim.edges[0];
    assert!(e.link.lost > 0, "frames were lost in flight");
    // Nothing was stopped or declared; every delta counted once; the report agrees.
    assert!(e.owner.declared_at.is_none() && e.child.stopped_at.is_none());
    assert!(e.owner.late.is_empty());
    assert_eq!(e.owner.mirror.records(), e.child.tree.records());
    assert_eq!(e.owner.mirror.total(), e.child.total());
    assert_eq!(e.owner.checks, [ReportCheck::Agrees]);
    // The agents saw the same run as without the disconnects (the late steer aside).
    let seen = |log: &[Event]| -> Vec<(u64, u64, &'static str)> {
        log.iter()
            .filter(|e| !matches!(e.kind, EventKind::Steered))
            .map(|e| (e.agent.get(), e.at_ms, e.kind.name()))
            .collect()
    };
    assert_eq!(seen(&e.child.log), seen(&quiet.edges[0].child.log));
    let billed = |c: &Child| c.generated.iter().map(|(_, u)| *u).collect::<Vec<_>>();
    assert_eq!(billed(&e.child), billed(&quiet.edges[0].child));
    let steers = e
        .child
        .log
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Steered))
        .count();
    assert_eq!(steers, 1, "delivered once, after the reconnect");
}

#[test]
fn a_frozen_child_stops_first_and_the_owner_declares_after_lease_and_grace() {
    let mut sim = Sim::one(LinkConfig::default(), 3);
    sim.run_until(2_000);
    sim.freeze_child(0, 10_000);
    sim.run_until(6_900);
    {
        let e = &sim.edges[0];
        let until = e.child.until().unwrap();
        let declared = e
            .owner
            .declared_at
            .expect("declared while the child is frozen");
        // Heard last just before the freeze (its last turn's frame); declared lease +
        // grace later.
        assert!((5_900..=6_010).contains(&declared), "{declared}");
        assert!(until + 1_000 <= declared);
        // The usage last reported: every delta billed before the freeze.
        assert_eq!(e.owner.mirror.total(), e.child.total());
        assert!(
            e.owner.mirror.records()[1..]
                .iter()
                .all(|r| r.status == AgentStatus::Killed)
        );
        assert_eq!(
            e.owner.declared.len(),
            2,
            "the top agent and its grandchild"
        );
        assert_eq!(
            e.owner.declared[0]
                .kind
                .outcome()
                .and_then(|o| o.error.as_deref()),
            Some("node unreachable: lease expired")
        );
    }
    sim.run_until(14_000);
    sim.check_invariants();
    let e = &sim.edges[0];
    // Thawed at 12 000, past its lease: it stopped its subtree before any turn.
    assert_eq!(e.child.stopped_at, Some(12_000));
    let until = e.child.until().unwrap();
    assert!(e.child.turn_times.iter().all(|&t| t < until));
    assert!(
        e.child.tree.records()[1..]
            .iter()
            .all(|r| r.status == AgentStatus::Killed)
    );
    assert_eq!(
        e.child.tree.records().len(),
        3,
        "both were live when it froze"
    );
    // Its own killed events reached the owner afterwards: reported late, not folded.
    assert!(!e.owner.late.is_empty());
    assert!(e.owner.late.iter().all(|l| l.why == LateWhy::Declared));
    assert_eq!(e.owner.mirror.total(), e.child.total());
    assert_eq!(e.owner.checks, [ReportCheck::AfterDeclaration]);
}

#[test]
fn a_partition_stops_the_child_at_its_lease_and_the_owner_a_grace_later() {
    let mut sim = Sim::one(LinkConfig::default(), 4);
    sim.run_until(2_000);
    sim.edges[0].link.partitioned = true;
    sim.run_until(8_000);
    {
        let e = &sim.edges[0];
        let until = e.child.until().unwrap();
        let stopped = e.child.stopped_at.expect("the child's side stopped");
        let declared = e.owner.declared_at.expect("the owner's side declared");
        assert_eq!(stopped, until, "at the first tick of the lapse");
        assert!(
            stopped + 1_000 <= declared,
            "child first: {stopped} {declared}"
        );
        // The child billed turns during the partition the owner never acknowledged.
        assert!(e.owner.mirror.total().total_tokens() < e.child.total().total_tokens());
        assert_eq!(e.owner.mirror.total(), e.owner.acked_usage);
    }
    // Healed long after: the unacknowledged tail replays and is reported late, not added.
    sim.edges[0].link.partitioned = false;
    sim.disconnect(0);
    sim.reconnect(0);
    sim.run_until(12_000);
    sim.check_invariants();
    let e = &sim.edges[0];
    assert_eq!(e.child.end.outbox().len(), 0);
    assert!(e.owner.late.iter().all(|l| l.why == LateWhy::Declared));
    assert_eq!(
        e.owner.mirror.total() + e.owner.late_usage(),
        e.child.total()
    );
    assert!(e.owner.late_usage().total_tokens() > 0);
}

#[test]
fn duplicated_reordered_and_dropped_delivery_never_double_counts() {
    for seed in 0..6 {
        let link = LinkConfig {
            delay: 5,
            jitter: 60,
            duplicate: 25,
            drop: 5,
        };
        let mut sim = Sim::one(link, 100 + seed);
        sim.run(20_000);
        sim.check_invariants();
        let e = &sim.edges[0];
        assert!(e.owner.end.inbox().duplicates() > 0 && e.owner.end.inbox().gaps() > 0);
        assert!(e.owner.declared_at.is_none(), "seed {seed}");
        assert_eq!(
            e.owner.mirror.records(),
            e.child.tree.records(),
            "seed {seed}"
        );
        assert_eq!(e.owner.mirror.total(), e.child.total());
        assert_eq!(e.owner.checks, [ReportCheck::Agrees]);
    }
}

#[test]
fn events_after_a_terminal_status_are_reported() {
    let mut sim = Sim::one(LinkConfig::default(), 5);
    sim.run(10_000);
    // A faulty child's node bills its completed top agent once more, bypassing its own
    // records (which would refuse it).
    let e = &mut sim.edges[0];
    let top = e.child.tree.records()[1].clone();
    assert!(top.status.is_terminal());
    let seq = e.child.log.len() as u64 + 1;
    let forged = Event {
        seq,
        agent: top.id,
        parent: top.parent,
        depth: top.depth,
        at_ms: Child::local(sim.now),
        kind: EventKind::UsageReported {
            delta: Usage::tokens(1_000, 0),
        },
    };
    e.child.end.queue(Up::Event { event: forged }).unwrap();
    e.child.generated.push((seq, Usage::tokens(1_000, 0)));
    sim.run(200);
    sim.check_invariants();
    let e = &sim.edges[0];
    assert_eq!(
        e.owner.late,
        [Late {
            seq,
            agent: top.id,
            kind: "usage_reported",
            usage: Some(Usage::tokens(1_000, 0)),
            why: LateWhy::AfterTerminal {
                status: AgentStatus::Completed
            },
        }]
    );
    assert_eq!(
        e.owner.mirror.total(),
        e.child.tree.records()[0].subtree,
        "not added"
    );
    assert_eq!(e.owner.late_usage(), Usage::tokens(1_000, 0));
}

#[test]
fn a_shutdown_counts_an_unreachable_node_killed_and_returns_by_the_deadline() {
    let mut sim = Sim::new(2, LinkConfig::default(), OutboxLimits::default(), 6);
    sim.run_until(1_500);
    sim.edges[1].link.partitioned = true;
    sim.run_until(2_000);
    sim.start_shutdown(3_000);
    let deadline = 5_000;
    while sim.shutdown_done.is_none() {
        assert!(sim.now <= deadline, "the round ends by its deadline");
        sim.step();
    }
    let (returned, tally) = sim.shutdown_done.clone().unwrap();
    assert_eq!(
        returned, deadline,
        "one node never reports: the deadline ends it"
    );
    assert_eq!(tally.reported.keys().copied().collect::<Vec<_>>(), [0]);
    assert_eq!(tally.killed.iter().copied().collect::<Vec<_>>(), [1]);
    sim.check_invariants();
    // The reachable node shut down gracefully and its report agrees with the mirror.
    let reached = &sim.edges[0];
    assert!(reached.owner.mirror.records()[1..].iter().all(|r| {
        r.outcome
            .as_ref()
            .is_some_and(|o| o.reason == EndReason::Shutdown)
    }));
    assert_eq!(reached.owner.checks, [ReportCheck::Agrees]);
    assert_eq!(reached.owner.mirror.total(), reached.child.total());
    // The unreachable one is settled killed with the usage last reported.
    let lost = &sim.edges[1];
    assert_eq!(lost.owner.declared_at, Some(deadline));
    assert!(
        lost.owner.mirror.records()[1..]
            .iter()
            .all(|r| r.status == AgentStatus::Killed)
    );
    assert_eq!(
        lost.owner.declared[0]
            .kind
            .outcome()
            .and_then(|o| o.error.as_deref()),
        Some("node unreachable at the shutdown deadline")
    );
    assert_eq!(lost.owner.mirror.total(), lost.owner.acked_usage);
}

#[test]
fn a_full_outbox_holds_work_back_and_loses_nothing() {
    let limits = OutboxLimits {
        max_frames: 6,
        max_bytes: 64 * 1024,
    };
    let mut sim = Sim::new(1, LinkConfig::default(), limits, 7);
    sim.run_until(1_000);
    sim.disconnect(0);
    sim.run_until(2_400);
    let e = &sim.edges[0];
    assert!(e.child.full_refusals > 0 && !e.child.held.is_empty());
    assert_eq!(e.child.end.outbox().len(), 6);
    let turns_while_down = e.child.turn_times.iter().filter(|&&t| t > 1_000).count();
    sim.reconnect(0);
    sim.run_until(15_000);
    sim.check_invariants();
    let e = &sim.edges[0];
    // Six frames fit; the turn whose event was refused is the last before the pause.
    assert!(
        turns_while_down <= 7,
        "backpressure paused the turns: {turns_while_down}"
    );
    assert!(e.child.held.is_empty());
    assert!(e.owner.declared_at.is_none() && e.child.stopped_at.is_none());
    assert_eq!(e.owner.mirror.records(), e.child.tree.records());
    assert_eq!(e.owner.mirror.total(), e.child.total());
}

#[test]
fn an_owner_frozen_past_the_lease_finds_its_child_stopped_and_folds_the_kill() {
    let mut sim = Sim::one(LinkConfig::default(), 8);
    sim.run_until(2_000);
    sim.freeze_owner(6_000);
    sim.run_until(12_000);
    sim.check_invariants();
    let e = &sim.edges[0];
    let stopped = e
        .child
        .stopped_at
        .expect("no grants: the child's side stopped");
    assert!(stopped < 8_000, "while the owner was frozen");
    // The owner woke to the child's killed events and folded them: the mirror is the
    // child's tree, then the silence of a lapsed node declares nothing more.
    assert_eq!(e.owner.mirror.records(), e.child.tree.records());
    assert!(e.owner.late.is_empty());
    assert!(e.owner.declared.is_empty());
    assert_eq!(e.owner.mirror.total(), e.child.total());
}

#[test]
fn the_lease_grant_is_only_a_length() {
    // The child's clock is 7 000 s ahead and the lease still holds for 3 s from its request.
    let mut sim = Sim::one(LinkConfig::default(), 9);
    sim.run_until(1_500);
    let until = sim.edges[0].child.until().unwrap();
    assert!((3_000..=4_100).contains(&until), "{until}");
    let grant: LeaseGrant = terms().grant(1);
    assert_eq!(grant.lease_ms, 3_000);
}

#[test]
fn a_child_never_granted_a_lease_stops_what_it_admitted() {
    // Found by the proptest: the child's node is frozen before its first request, the
    // owner's node is frozen when it comes, and the grant is lost to a partition. The child
    // admitted its top agent (the spawn came first) but never ran it; it must not hold it
    // forever.
    let mut sim = Sim::one(LinkConfig::default(), 241);
    sim.freeze_child(0, 1_131);
    sim.run(1);
    sim.freeze_owner(1_749);
    sim.run(1_130);
    sim.edges[0].link.partitioned = true;
    sim.run(8_000);
    sim.check_invariants();
    let e = &sim.edges[0];
    assert!(e.child.turn_times.is_empty(), "never granted: never ran");
    assert_eq!(e.child.tree.records()[1].status, AgentStatus::Killed);
    assert!(
        e.child
            .stopped_at
            .is_some_and(|at| at <= e.owner.declared_at.unwrap())
    );
    sim.edges[0].link.partitioned = false;
    sim.run(4_000);
    sim.check_invariants();
    let e = &sim.edges[0];
    assert!(e.owner.late.iter().all(|l| l.why == LateWhy::Declared));
    assert_eq!(e.owner.mirror.records()[1].status, AgentStatus::Killed);
}

#[derive(Clone, Debug)]
enum Op {
    Run(u64),
    Disconnect,
    Reconnect,
    Partition,
    Heal,
    FreezeChild(u64),
    FreezeOwner(u64),
    Steer,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..2_500).prop_map(Op::Run),
        1 => Just(Op::Disconnect),
        1 => Just(Op::Reconnect),
        1 => Just(Op::Partition),
        1 => Just(Op::Heal),
        1 => (1u64..6_000).prop_map(Op::FreezeChild),
        1 => (1u64..6_000).prop_map(Op::FreezeOwner),
        1 => Just(Op::Steer),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Over random schedules of sends, acks, disconnects, reconnects, partitions and
    /// freezes, on a link that may also reorder, duplicate and drop: the owner's mirror
    /// holds exactly the usage the child billed and the owner acknowledged, never more; no
    /// number is applied twice (asserted as frames are applied); the lease is safe.
    #[test]
    fn usage_counts_exactly_once_over_any_schedule(
        ops in proptest::collection::vec(op(), 1..24),
        seed in 1u64..1_000,
        messy in any::<bool>(),
    ) {
        let link = if messy {
            LinkConfig { delay: 5, jitter: 40, duplicate: 10, drop: 3 }
        } else {
            LinkConfig::default()
        };
        let mut sim = Sim::one(link, seed);
        for op in ops {
            match op {
                Op::Run(ms) => sim.run(ms),
                Op::Disconnect => sim.disconnect(0),
                Op::Reconnect => sim.reconnect(0),
                Op::Partition => sim.edges[0].link.partitioned = true,
                Op::Heal => sim.edges[0].link.partitioned = false,
                Op::FreezeChild(ms) => sim.freeze_child(0, ms),
                Op::FreezeOwner(ms) => sim.freeze_owner(ms),
                Op::Steer => sim.edges[0].owner.command(Command::Steer {
                    agent: AgentId::new(10),
                    message: "go on".into(),
                }),
            }
            sim.check_invariants();
        }
        // Heal everything and let the edge settle.
        sim.edges[0].link.partitioned = false;
        sim.reconnect(0);
        sim.run(16_000);
        sim.check_invariants();
        let e = &sim.edges[0];
        prop_assert!(e.owner.acked_usage.total_tokens() <= e.child.total().total_tokens());
        prop_assert_eq!(e.child.end.outbox().len(), 0, "all acknowledged in the end");
        prop_assert_eq!(e.owner.acked_usage, e.child.total());
        if e.owner.late.is_empty() {
            prop_assert_eq!(e.owner.mirror.records(), e.child.tree.records());
        } else {
            let explained = e.owner.declared_at.is_some()
                || e.owner.late.iter().all(|l| matches!(l.why, LateWhy::AfterTerminal { .. }));
            prop_assert!(explained, "late events without a declaration: {:?}", e.owner.late);
        }
    }
}
