//! A shutdown across nodes under its one deadline: which nodes asked to shut down have
//! reported, which are still pending, and, at the deadline, which are counted killed
//! because they never reported (unreachable).
//!
//! Every node is told at once (the caller sends each its `shutdown` command); the round
//! only counts. The caller waits at most until `Round::Waiting::until`, so the call
//! returns by the deadline (plus its own small kill wait, which is not this module's).
//!
//! # Invariants
//!
//! * A node is reported, or counted killed, never both, and exactly once.
//! * A report counts only before the deadline; one at or after it is [`Taken::Late`] and
//!   the node stays counted killed.
//! * [`NodesShutdown::poll`] at or past the deadline is always [`Round::Done`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// What a node's report did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// Counted: the node shut down within the deadline.
    Counted,
    /// Too late: the deadline had passed, the node is counted killed.
    Late,
    /// The node had reported already.
    Duplicate,
    /// The node was not asked to shut down.
    Unknown,
}

/// How the round ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Tally<N, R> {
    /// Nodes that reported within the deadline, with their reports.
    pub(crate) reported: BTreeMap<N, R>,
    /// Nodes that did not: counted killed, unreachable.
    pub(crate) killed: BTreeSet<N>,
}

/// Where the round is at `now`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Round<N, R> {
    /// Nodes still pending; poll again by `until` (the deadline) at the latest.
    Waiting {
        /// The nodes not yet reported.
        pending: Vec<N>,
        /// The deadline.
        until: Duration,
    },
    /// Every node reported, or the deadline passed.
    Done(Tally<N, R>),
}

/// One shutdown across the nodes `N`, with reports `R`.
#[derive(Clone, Debug)]
pub(crate) struct NodesShutdown<N, R> {
    deadline: Duration,
    pending: BTreeSet<N>,
    reported: BTreeMap<N, R>,
    killed: BTreeSet<N>,
}

impl<N: Ord + Clone, R: Clone> NodesShutdown<N, R> {
    /// A round over `nodes`, every one told at once, ending at `deadline`.
    pub(crate) fn new(nodes: impl IntoIterator<Item = N>, deadline: Duration) -> Self {
        NodesShutdown {
            deadline,
            pending: nodes.into_iter().collect(),
            reported: BTreeMap::new(),
            killed: BTreeSet::new(),
        }
    }

    /// The deadline.
    pub(crate) fn deadline(&self) -> Duration {
        self.deadline
    }

    /// `node` reported `report` at `now`.
    pub(crate) fn on_report(&mut self, node: N, report: R, now: Duration) -> Taken {
        if self.reported.contains_key(&node) {
            return Taken::Duplicate;
        }
        if now >= self.deadline {
            self.close();
            return if self.killed.contains(&node) {
                Taken::Late
            } else {
                Taken::Unknown
            };
        }
        if !self.pending.remove(&node) {
            return Taken::Unknown;
        }
        self.reported.insert(node, report);
        Taken::Counted
    }

    /// Where the round is at `now`: at or past the deadline every node still pending is
    /// counted killed.
    pub(crate) fn poll(&mut self, now: Duration) -> Round<N, R> {
        if now >= self.deadline {
            self.close();
        }
        if self.pending.is_empty() {
            Round::Done(Tally {
                reported: self.reported.clone(),
                killed: self.killed.clone(),
            })
        } else {
            Round::Waiting {
                pending: self.pending.iter().cloned().collect(),
                until: self.deadline,
            }
        }
    }

    fn close(&mut self) {
        self.killed.append(&mut self.pending);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn all_reporting_ends_the_round_before_the_deadline() {
        let mut round = NodesShutdown::new(["a", "b"], ms(3_000));
        assert_eq!(
            round.poll(ms(0)),
            Round::Waiting {
                pending: vec!["a", "b"],
                until: ms(3_000)
            }
        );
        assert_eq!(round.on_report("b", 2, ms(100)), Taken::Counted);
        assert_eq!(round.on_report("b", 2, ms(101)), Taken::Duplicate);
        assert_eq!(round.on_report("z", 0, ms(101)), Taken::Unknown);
        assert_eq!(round.on_report("a", 1, ms(2_999)), Taken::Counted);
        let Round::Done(tally) = round.poll(ms(2_999)) else {
            panic!("all reported")
        };
        assert_eq!(
            tally.reported.into_iter().collect::<Vec<_>>(),
            [("a", 1), ("b", 2)]
        );
        assert!(tally.killed.is_empty());
    }

    #[test]
    fn a_node_silent_at_the_deadline_is_counted_killed_and_stays_so() {
        let mut round = NodesShutdown::new([1, 2, 3], ms(3_000));
        assert_eq!(round.deadline(), ms(3_000));
        assert_eq!(round.on_report(2, (), ms(10)), Taken::Counted);
        assert!(matches!(round.poll(ms(2_999)), Round::Waiting { .. }));
        let Round::Done(tally) = round.poll(ms(3_000)) else {
            panic!("the deadline ends the round")
        };
        assert_eq!(tally.killed.into_iter().collect::<Vec<_>>(), [1, 3]);
        assert_eq!(round.on_report(1, (), ms(3_001)), Taken::Late);
        assert_eq!(round.on_report(2, (), ms(3_001)), Taken::Duplicate);
        let Round::Done(tally) = round.poll(ms(9_000)) else {
            panic!("done stays done")
        };
        assert_eq!(tally.reported.len(), 1);
        assert_eq!(tally.killed.len(), 2);
    }

    #[test]
    fn a_report_exactly_at_the_deadline_is_late() {
        let mut round = NodesShutdown::new(["a"], ms(5));
        assert_eq!(round.on_report("a", (), ms(5)), Taken::Late);
        assert!(matches!(round.poll(ms(5)), Round::Done(t) if t.killed.len() == 1));
        let mut empty: NodesShutdown<&str, ()> = NodesShutdown::new([], ms(5));
        assert!(matches!(empty.poll(ms(0)), Round::Done(t) if t.killed.is_empty()));
    }
}
