//! What an agent's run's end does to its children, and which settled children the owner
//! hears of: the settle policy (abort the live children, or drain them in `completing`),
//! and the background completion notice.
//!
//! It never aborts, waits, settles or writes a conversation: the agent's actor reads its
//! child table into these facts, and carries the answer out.
//!
//! # Invariants
//!
//! * A run that did not complete always aborts its live children; a completed run drains
//!   them only under [`SettlePolicy::Drain`], and never in a resumed run (children spawned
//!   during a resumed run do not outlive it).
//! * Detached children are never aborted by their owner's end, nor waited for.
//! * A child's completion is noticed once per outcome, and only when the model could not
//!   have seen it otherwise: a background child, whose result was not read and that no
//!   pending call waits on.

use agent_tree_protocol::{AgentId, AgentStatus, Outcome, SettlePolicy};

/// The settle policy a run follows: its own, except that a resumed run always aborts its
/// children (they never outlive the resumed turn).
pub(crate) fn effective(policy: SettlePolicy, resumed: bool) -> SettlePolicy {
    if resumed {
        SettlePolicy::AbortChildren
    } else {
        policy
    }
}

/// One owned child as the owner's table holds it when the run ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Owned {
    pub(crate) id: AgentId,
    /// Its outcome is final and the table has counted it.
    pub(crate) settled: bool,
    /// Spawned detached: it may outlive its owner, which neither aborts nor waits for it.
    pub(crate) detached: bool,
}

/// What the end of a run does to the agent's children.
#[must_use = "the children must be aborted or drained before the agent settles"]
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RunEnd {
    /// No child holds the agent: it settles as soon as its last turn has reported.
    Settle,
    /// Abort these live children (`OwnerEnded`); the agent settles once they have.
    Abort(Vec<AgentId>),
    /// The agent goes `completing` and settles once these live children have drained.
    Drain(Vec<AgentId>),
}

/// What the run's end with `outcome` does to `children` (in start order), under the agent's
/// settle `policy`, in a run that `resumed` or not.
///
/// | outcome | policy | resumed | live children |
/// | --- | --- | --- | --- |
/// | completed | drain | no | drained in `completing` |
/// | completed | drain | yes | aborted |
/// | completed | abort_children | any | aborted |
/// | not completed | any | any | aborted |
///
/// Only live (not settled), attached children count; with none the agent just settles.
pub(crate) fn run_end(
    outcome: &Outcome,
    policy: SettlePolicy,
    resumed: bool,
    children: &[Owned],
) -> RunEnd {
    let live: Vec<AgentId> = children
        .iter()
        .filter(|c| !c.settled && !c.detached)
        .map(|c| c.id)
        .collect();
    if live.is_empty() {
        return RunEnd::Settle;
    }
    let aborting = outcome.status != AgentStatus::Completed
        || effective(policy, resumed) == SettlePolicy::AbortChildren;
    if aborting {
        RunEnd::Abort(live)
    } else {
        RunEnd::Drain(live)
    }
}

/// What the owner's child table says of a child whose outcome just became final.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChildRow {
    /// Spawned in the background (or it asked a question, which answers any wait on it and
    /// makes it so).
    pub(crate) background: bool,
    /// Its current outcome was returned by a tool (a foreground result, a read, a wait).
    pub(crate) read: bool,
    /// An unanswered call of the current turn waits on it.
    pub(crate) awaited: bool,
}

/// Whether a settled child's completion is noticed in the owner's conversation: only a
/// background child's, whose result was not read and that no pending call waits on (a wait
/// returns the result itself; a foreground child's result is its call's answer).
pub(crate) fn notice_due(row: &ChildRow) -> bool {
    row.background && !row.read && !row.awaited
}

#[cfg(test)]
mod tests {
    use agent_tree_protocol::EndReason;

    use super::*;

    fn a(n: u64) -> AgentId {
        AgentId::new(n)
    }

    fn owned(n: u64, settled: bool, detached: bool) -> Owned {
        Owned {
            id: a(n),
            settled,
            detached,
        }
    }

    #[test]
    fn a_resumed_run_always_aborts_its_children() {
        use SettlePolicy::*;
        assert_eq!(effective(Drain, false), Drain);
        assert_eq!(effective(AbortChildren, false), AbortChildren);
        assert_eq!(effective(Drain, true), AbortChildren);
        assert_eq!(effective(AbortChildren, true), AbortChildren);
    }

    #[test]
    fn settle_policy_by_outcome_and_resume() {
        use AgentStatus::*;
        use SettlePolicy::*;
        // a1 live, a2 settled, a3 live but detached, a4 live.
        let children = [
            owned(1, false, false),
            owned(2, true, false),
            owned(3, false, true),
            owned(4, false, false),
        ];
        let live = vec![a(1), a(4)];
        let abort = RunEnd::Abort(live.clone());
        let drain = RunEnd::Drain(live);
        // (status, policy, resumed, what happens)
        let table = [
            (Completed, Drain, false, drain),
            (Completed, Drain, true, abort.clone()),
            (Completed, AbortChildren, false, abort.clone()),
            (Completed, AbortChildren, true, abort.clone()),
            (Failed, Drain, false, abort.clone()),
            (Failed, AbortChildren, false, abort.clone()),
            (Aborted, Drain, false, abort.clone()),
            (Aborted, Drain, true, abort.clone()),
            (Killed, Drain, false, abort.clone()),
            (Failed, AbortChildren, true, abort),
        ];
        for (status, policy, resumed, want) in table {
            let outcome = if status == Completed {
                Outcome::completed("done")
            } else {
                Outcome::ended(status, EndReason::Aborted)
            };
            assert_eq!(
                run_end(&outcome, policy, resumed, &children),
                want,
                "{status:?} {policy:?} resumed {resumed}"
            );
        }
    }

    #[test]
    fn without_live_attached_children_the_agent_just_settles() {
        let only_settled_or_detached = [owned(1, true, false), owned(2, false, true)];
        for children in [&[][..], &only_settled_or_detached[..]] {
            for policy in [SettlePolicy::Drain, SettlePolicy::AbortChildren] {
                for outcome in [
                    Outcome::completed("done"),
                    Outcome::failed(EndReason::ModelError, "boom"),
                ] {
                    for resumed in [false, true] {
                        assert_eq!(
                            run_end(&outcome, policy, resumed, children),
                            RunEnd::Settle,
                            "{policy:?} {} resumed {resumed}",
                            outcome.status
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn live_children_are_aborted_or_drained_in_start_order() {
        let children = [
            owned(3, false, false),
            owned(1, false, false),
            owned(2, false, false),
        ];
        let outcome = Outcome::completed("done");
        assert_eq!(
            run_end(&outcome, SettlePolicy::Drain, false, &children),
            RunEnd::Drain(vec![a(3), a(1), a(2)])
        );
        assert_eq!(
            run_end(&outcome, SettlePolicy::AbortChildren, false, &children),
            RunEnd::Abort(vec![a(3), a(1), a(2)])
        );
    }

    fn row(background: bool, read: bool, awaited: bool) -> ChildRow {
        ChildRow {
            background,
            read,
            awaited,
        }
    }

    #[test]
    fn only_an_unread_unawaited_background_child_is_noticed() {
        // (background, read, awaited, notice)
        let table = [
            (true, false, false, true),
            (true, true, false, false),
            (true, false, true, false),
            (true, true, true, false),
            (false, false, false, false),
            (false, true, false, false),
            (false, false, true, false),
            (false, true, true, false),
        ];
        for (background, read, awaited, want) in table {
            let r = row(background, read, awaited);
            assert_eq!(notice_due(&r), want, "{r:?}");
        }
    }
}
