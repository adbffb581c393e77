//! Restart strategies: which siblings of a failed child are stopped and restarted with it.
//!
//! # Invariants
//!
//! * A strategy stops siblings in reverse start order and restarts in start order.
//! * Only running siblings are stopped; the failed child is always in the restart set.

use agent_tree_protocol::Strategy;

/// What a strategy does after child `failed` (an index into the owner's children in start
/// order) ended: the siblings to stop, in the order to stop them (reverse start order), and
/// every child to restart, in start order. `live[i]` says whether child `i` is still running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) stop: Vec<usize>,
    pub(crate) restart: Vec<usize>,
}

pub(crate) fn plan(strategy: Strategy, failed: usize, live: &[bool]) -> Plan {
    let siblings: Vec<usize> = match strategy {
        Strategy::OneForOne => Vec::new(),
        Strategy::OneForAll => (0..live.len())
            .filter(|&i| i != failed && live[i])
            .collect(),
        Strategy::RestForOne => (failed + 1..live.len()).filter(|&i| live[i]).collect(),
    };
    let mut restart = siblings.clone();
    restart.push(failed);
    restart.sort_unstable();
    let mut stop = siblings;
    stop.reverse();
    Plan { stop, restart }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategies_choose_siblings() {
        let live = [true, true, false, true, true];
        assert_eq!(
            plan(Strategy::OneForOne, 1, &live),
            Plan {
                stop: vec![],
                restart: vec![1]
            }
        );
        assert_eq!(
            plan(Strategy::OneForAll, 1, &live),
            Plan {
                stop: vec![4, 3, 0],
                restart: vec![0, 1, 3, 4]
            }
        );
        assert_eq!(
            plan(Strategy::RestForOne, 1, &live),
            Plan {
                stop: vec![4, 3],
                restart: vec![1, 3, 4]
            }
        );
    }
}
