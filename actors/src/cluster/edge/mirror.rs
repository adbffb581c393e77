//! The owner's node's mirror of a hosted subtree: the forwarded events folded into records
//! with the protocol's [`Fold`] (the same [`apply`](agent_tree_protocol::apply) as the
//! journal's replay and the registry), the check of each terminal report against it, and
//! the declaration of the subtree killed when its node is given up.
//!
//! The hosted subtree is a tree of its own on the child's node (ids dense from `a0`, which
//! stands for the remote owner), so its events fold exactly as a journal does; mapping its
//! ids to the owner's tree is the caller's.
//!
//! # Invariants
//!
//! * Events are taken in the hosted tree's order (sequence numbers dense from 1) and each
//!   changes the records at most once: usage counts exactly once.
//! * An event about an agent whose record is terminal (other than the `restarted`,
//!   `resumed` and `released` that legitimately follow a settle) is never folded: it comes
//!   back as a [`Late`], with the usage it carried. So is every event after a declaration.
//! * A declaration settles every live mirrored agent `killed`, children before owners, with
//!   the usage the mirror holds (what was last reported): the mirror then agrees with
//!   itself (`subtree == own + Σ children.subtree`) and never changes again.
//! * A terminal report whose usage, status or last event differs from the mirror's is
//!   returned as a [`ReportMismatch`], never corrected silently.

use agent_tree_protocol::{
    AgentId, AgentRecord, AgentStatus, EndReason, Event, EventKind, Fold, FoldError, Outcome,
    TerminalReport, Usage,
};

/// Why an event was not folded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LateWhy {
    /// Its agent's record was already terminal.
    AfterTerminal {
        /// The record's status.
        status: AgentStatus,
    },
    /// The subtree was declared killed before it came.
    Declared,
}

/// An event reported instead of folded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Late {
    /// Its sequence number in the hosted tree.
    pub(crate) seq: u64,
    /// Its agent.
    pub(crate) agent: AgentId,
    /// Its kind's name.
    pub(crate) kind: &'static str,
    /// The usage it carried (a `usage_reported` event), not counted.
    pub(crate) usage: Option<Usage>,
    /// Why.
    pub(crate) why: LateWhy,
}

/// What the mirror did with an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Mirrored {
    /// Folded into the records.
    Applied,
    /// Reported, not folded.
    Late(Late),
}

/// An event the mirror refuses: the stream is not the hosted tree's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MirrorError {
    /// Not the next event of the hosted tree.
    #[error("hosted event {found} out of order (expected {expected})")]
    Sequence {
        /// The number expected.
        expected: u64,
        /// The number that came.
        found: u64,
    },
    /// The fold refused it (an unknown agent, an admission out of order, a move the status
    /// does not allow). It is skipped: the records are unchanged.
    #[error(transparent)]
    Fold(#[from] FoldError),
    /// A report about an agent the mirror has no record of.
    #[error("terminal report of {agent}, which the mirror does not hold")]
    UnknownAgent {
        /// The agent named.
        agent: AgentId,
    },
}

/// A terminal report that does not match the mirror.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReportMismatch {
    /// The agent reported on.
    pub(crate) agent: AgentId,
    /// The mirror's subtree usage of it.
    pub(crate) mirror_usage: Usage,
    /// The report's.
    pub(crate) reported_usage: Usage,
    /// The mirror's status of it.
    pub(crate) mirror_status: AgentStatus,
    /// The report's.
    pub(crate) reported_status: AgentStatus,
    /// The last event the mirror took.
    pub(crate) mirror_last_event: u64,
    /// The last event the report counts.
    pub(crate) reported_last_event: u64,
}

/// What a terminal report says about the mirror.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReportCheck {
    /// The mirror holds exactly what the child's node reports.
    Agrees,
    /// It does not.
    Differs(Box<ReportMismatch>),
    /// The subtree was declared killed before the report came: nothing is compared.
    AfterDeclaration,
}

/// The mirror of one edge's hosted subtree.
#[derive(Clone, Debug)]
pub(crate) struct Mirror {
    fold: Fold,
    last_event: u64,
    declared: bool,
}

impl Default for Mirror {
    fn default() -> Self {
        Mirror::new()
    }
}

impl Mirror {
    /// A mirror holding only the hosted tree's root (the remote owner's stand-in).
    pub(crate) fn new() -> Self {
        Mirror {
            fold: Fold::new(),
            last_event: 0,
            declared: false,
        }
    }

    /// Takes the hosted tree's next event.
    pub(crate) fn apply(&mut self, event: &Event) -> Result<Mirrored, MirrorError> {
        let late = |why| {
            Mirrored::Late(Late {
                seq: event.seq,
                agent: event.agent,
                kind: event.kind.name(),
                usage: match &event.kind {
                    EventKind::UsageReported { delta } => Some(*delta),
                    _ => None,
                },
                why,
            })
        };
        if self.declared {
            return Ok(late(LateWhy::Declared));
        }
        let expected = self.last_event + 1;
        if event.seq != expected {
            return Err(MirrorError::Sequence {
                expected,
                found: event.seq,
            });
        }
        // The event is taken (folded, reported or refused): the next one follows it.
        self.last_event = event.seq;
        let reopens = matches!(
            event.kind,
            EventKind::Restarted { .. } | EventKind::Resumed | EventKind::Released { .. }
        );
        if let Some(record) = self.record(event.agent) {
            if record.status.is_terminal() && !reopens {
                return Ok(late(LateWhy::AfterTerminal {
                    status: record.status,
                }));
            }
        }
        match self.fold.apply(event) {
            Ok(()) => Ok(Mirrored::Applied),
            Err(FoldError::AfterTerminal { .. }) => Ok(late(LateWhy::AfterTerminal {
                status: self
                    .record(event.agent)
                    .map_or(AgentStatus::Killed, |r| r.status),
            })),
            Err(error) => Err(error.into()),
        }
    }

    /// Compares a terminal report with the mirror: it follows every event it counts on the
    /// same edge, so the mirror must hold exactly that usage, status and last event.
    pub(crate) fn check(&self, report: &TerminalReport) -> Result<ReportCheck, MirrorError> {
        if self.declared {
            return Ok(ReportCheck::AfterDeclaration);
        }
        let record = self.record(report.agent).ok_or(MirrorError::UnknownAgent {
            agent: report.agent,
        })?;
        let agrees = record.subtree == report.usage
            && record.status == report.status
            && self.last_event == report.last_event;
        Ok(if agrees {
            ReportCheck::Agrees
        } else {
            ReportCheck::Differs(Box::new(ReportMismatch {
                agent: report.agent,
                mirror_usage: record.subtree,
                reported_usage: report.usage,
                mirror_status: record.status,
                reported_status: report.status,
                mirror_last_event: self.last_event,
                reported_last_event: report.last_event,
            }))
        })
    }

    /// Gives the subtree up at `at_ms` (its node is unreachable): every live mirrored agent
    /// is settled `killed` with `cause` as its error, children before owners, keeping the
    /// usage the mirror holds. Returns the events folded (numbered after the last one
    /// taken, for the caller to publish); none the second time. Every event after this is
    /// [`Late`].
    pub(crate) fn declare_killed(&mut self, at_ms: u64, cause: &str) -> Vec<Event> {
        if self.declared {
            return Vec::new();
        }
        self.declared = true;
        let live: Vec<AgentRecord> = self
            .fold
            .records()
            .iter()
            .skip(1) // a0 stands for the remote owner
            .rev() // children have larger ids than their owners
            .filter(|r| r.status.is_live())
            .cloned()
            .collect();
        let mut events = Vec::with_capacity(live.len());
        for record in live {
            let mut outcome = Outcome::ended(AgentStatus::Killed, EndReason::Killed);
            outcome.error = Some(cause.to_owned());
            let event = Event {
                seq: self.last_event + 1,
                agent: record.id,
                parent: record.parent,
                depth: record.depth,
                at_ms,
                kind: EventKind::settled(outcome),
            };
            match self.fold.apply(&event) {
                Ok(()) => {
                    self.last_event = event.seq;
                    events.push(event);
                }
                // A live record always takes `killed`; were it refused, the record keeps
                // its status and the refusal is logged, not hidden.
                Err(error) => {
                    tracing::warn!(%error, agent = %record.id, "mirror: declaring killed refused")
                }
            }
        }
        events
    }

    /// The mirrored records, `a0` (the remote owner's stand-in) first.
    pub(crate) fn records(&self) -> &[AgentRecord] {
        self.fold.records()
    }

    /// The record of a hosted agent.
    pub(crate) fn record(&self, agent: AgentId) -> Option<&AgentRecord> {
        usize::try_from(agent.get())
            .ok()
            .and_then(|i| self.fold.records().get(i))
    }

    /// The usage of the whole hosted subtree, as folded.
    #[cfg(test)]
    pub(crate) fn total(&self) -> Usage {
        self.fold.records()[0].subtree
    }

    /// The last hosted event taken.
    #[cfg(test)]
    pub(crate) fn last_event(&self) -> u64 {
        self.last_event
    }

    /// Whether the subtree was declared killed.
    #[cfg(test)]
    pub(crate) fn is_declared(&self) -> bool {
        self.declared
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, agent: u64, parent: u64, kind: EventKind) -> Event {
        Event {
            seq,
            agent: AgentId::new(agent),
            parent: Some(AgentId::new(parent)),
            depth: if parent == 0 { 1 } else { 2 },
            at_ms: seq * 10,
            kind,
        }
    }

    fn spawned() -> EventKind {
        EventKind::Spawned {
            agent_type: "w".into(),
            request_id: None,
            detached: false,
        }
    }

    fn started() -> EventKind {
        EventKind::Started {
            agent_type: "w".into(),
            incarnation: 1,
        }
    }

    fn usage(n: u64) -> EventKind {
        EventKind::UsageReported {
            delta: Usage::tokens(n, 1),
        }
    }

    /// The events of [`running_pair`].
    fn pair_events() -> [Event; 6] {
        [
            event(1, 1, 0, spawned()),
            event(2, 1, 0, started()),
            event(3, 2, 1, spawned()),
            event(4, 2, 1, started()),
            event(5, 2, 1, usage(10)),
            event(6, 1, 0, usage(5)),
        ]
    }

    /// a1 under a0 and a2 under a1, both running, a2 with usage 10+1 and a1 with 5+1.
    fn running_pair() -> (Mirror, u64) {
        let mut m = Mirror::new();
        for e in &pair_events() {
            assert_eq!(m.apply(e), Ok(Mirrored::Applied));
        }
        (m, 6)
    }

    #[test]
    fn the_mirror_folds_as_the_journal_does() {
        let (m, _) = running_pair();
        let mut fold = Fold::new();
        for e in pair_events() {
            fold.apply(&e).unwrap();
        }
        assert_eq!(m.records(), fold.records());
        assert_eq!(m.total(), Usage::tokens(15, 2));
        assert_eq!(
            m.record(AgentId::new(1)).unwrap().subtree,
            Usage::tokens(15, 2)
        );
    }

    #[test]
    fn events_out_of_order_are_refused_and_usage_counts_once() {
        let (mut m, last) = running_pair();
        // A replayed event (the inbox lets none through, but the mirror checks too).
        assert_eq!(
            m.apply(&event(last, 1, 0, usage(5))),
            Err(MirrorError::Sequence {
                expected: 7,
                found: 6
            })
        );
        assert_eq!(
            m.apply(&event(last + 2, 1, 0, usage(5))),
            Err(MirrorError::Sequence {
                expected: 7,
                found: 8
            })
        );
        assert_eq!(m.total(), Usage::tokens(15, 2));
        // A refused fold skips the event, and the next one follows it.
        assert!(matches!(
            m.apply(&event(7, 9, 0, usage(1))),
            Err(MirrorError::Fold(FoldError::UnknownAgent { .. }))
        ));
        assert_eq!(m.apply(&event(8, 1, 0, usage(1))), Ok(Mirrored::Applied));
        assert_eq!(m.total(), Usage::tokens(16, 3));
    }

    #[test]
    fn events_after_a_terminal_status_are_reported_not_added() {
        let (mut m, _) = running_pair();
        let done = EventKind::settled(Outcome::completed("ok"));
        assert_eq!(
            m.apply(&event(7, 2, 1, done.clone())),
            Ok(Mirrored::Applied)
        );
        let late = m.apply(&event(8, 2, 1, usage(99))).unwrap();
        assert_eq!(
            late,
            Mirrored::Late(Late {
                seq: 8,
                agent: AgentId::new(2),
                kind: "usage_reported",
                usage: Some(Usage::tokens(99, 1)),
                why: LateWhy::AfterTerminal {
                    status: AgentStatus::Completed
                },
            })
        );
        // A second settle and a steer are late too; a restart is not.
        assert!(matches!(
            m.apply(&event(9, 2, 1, done)),
            Ok(Mirrored::Late(_))
        ));
        assert!(matches!(
            m.apply(&event(10, 2, 1, EventKind::Steered)),
            Ok(Mirrored::Late(_))
        ));
        assert_eq!(
            m.apply(&event(11, 2, 1, EventKind::Restarted { incarnation: 2 })),
            Ok(Mirrored::Applied)
        );
        assert_eq!(m.total(), Usage::tokens(15, 2), "nothing late was added");
    }

    #[test]
    fn a_terminal_report_is_checked_against_the_mirror() {
        let (mut m, _) = running_pair();
        let done = |agent, parent, seq| {
            event(
                seq,
                agent,
                parent,
                EventKind::settled(Outcome::completed("ok")),
            )
        };
        m.apply(&done(2, 1, 7)).unwrap();
        m.apply(&done(1, 0, 8)).unwrap();
        let report = TerminalReport {
            agent: AgentId::new(1),
            incarnation: 1,
            status: AgentStatus::Completed,
            usage: Usage::tokens(15, 2),
            last_event: 8,
        };
        assert_eq!(m.check(&report), Ok(ReportCheck::Agrees));
        // More usage than the mirror holds (a lost event), or a report ahead of the events.
        let more = TerminalReport {
            usage: Usage::tokens(16, 2),
            ..report.clone()
        };
        match m.check(&more).unwrap() {
            ReportCheck::Differs(d) => {
                assert_eq!(
                    (d.mirror_usage, d.reported_usage),
                    (Usage::tokens(15, 2), Usage::tokens(16, 2))
                );
            }
            other => panic!("{other:?}"),
        }
        let ahead = TerminalReport {
            last_event: 9,
            ..report.clone()
        };
        assert!(matches!(m.check(&ahead), Ok(ReportCheck::Differs(_))));
        let wrong = TerminalReport {
            status: AgentStatus::Failed,
            ..report.clone()
        };
        assert!(matches!(m.check(&wrong), Ok(ReportCheck::Differs(_))));
        let unknown = TerminalReport {
            agent: AgentId::new(40),
            ..report
        };
        assert_eq!(
            m.check(&unknown),
            Err(MirrorError::UnknownAgent {
                agent: AgentId::new(40)
            })
        );
    }

    #[test]
    fn a_declaration_kills_the_live_subtree_bottom_up_with_the_usage_reported() {
        let (mut m, _) = running_pair();
        let events = m.declare_killed(500, "node unreachable");
        assert_eq!(
            events
                .iter()
                .map(|e| (e.seq, e.agent.get()))
                .collect::<Vec<_>>(),
            [(7, 2), (8, 1)],
            "children before owners"
        );
        assert_eq!(
            events[0].kind.outcome().and_then(|o| o.error.as_deref()),
            Some("node unreachable")
        );
        for r in &m.records()[1..] {
            assert_eq!(r.status, AgentStatus::Killed);
        }
        assert_eq!(m.total(), Usage::tokens(15, 2), "the usage last reported");
        assert!(m.is_declared());
        assert!(m.declare_killed(600, "again").is_empty());
        // What comes after is late, whatever it is, and counts nothing.
        for (seq, kind) in [(7, usage(3)), (8, EventKind::Restarted { incarnation: 2 })] {
            match m.apply(&event(seq, 1, 0, kind)).unwrap() {
                Mirrored::Late(late) => assert_eq!(late.why, LateWhy::Declared),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(m.total(), Usage::tokens(15, 2));
        let report = TerminalReport {
            agent: AgentId::new(1),
            incarnation: 1,
            status: AgentStatus::Killed,
            usage: Usage::tokens(18, 3),
            last_event: 9,
        };
        assert_eq!(m.check(&report), Ok(ReportCheck::AfterDeclaration));
        let snapshot = agent_tree_protocol::TreeSnapshot {
            session: agent_tree_protocol::SessionId::new("mirror"),
            taken_ms: 500,
            records: m
                .records()
                .iter()
                .cloned()
                .map(std::sync::Arc::new)
                .collect(),
            tally: Default::default(),
            peak_live: 0,
        };
        assert!(snapshot.check_usage().is_ok());
    }
}
