//! Wait policies over a set of agents: which of the set to abort, given the outcomes known so
//! far. It never watches, aborts or reads anything itself: `wait_set` carries it out.
//!
//! # Invariants
//!
//! * `all_settled` never aborts anything.
//! * `fail_fast` aborts, once any known outcome is not `completed`, exactly the members of
//!   the set whose outcome is not known yet: never a settled one, never one outside the set.

use agent_tree_protocol::{Outcome, WaitPolicy};

/// The indices of the set to abort now, given the outcomes known so far.
pub(crate) fn to_abort(policy: WaitPolicy, outcomes: &[Option<Outcome>]) -> Vec<usize> {
    match policy {
        WaitPolicy::AllSettled => Vec::new(),
        WaitPolicy::FailFast => {
            let failed = outcomes.iter().flatten().any(|o| !o.is_completed());
            if failed {
                (0..outcomes.len())
                    .filter(|&i| outcomes[i].is_none())
                    .collect()
            } else {
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use agent_tree_protocol::{AgentStatus, EndReason};

    use super::*;

    #[test]
    fn fail_fast_aborts_only_the_live_rest_of_the_set() {
        let done = Some(Outcome::completed("ok"));
        let failed = Some(Outcome::failed(EndReason::ModelError, "boom"));
        assert!(to_abort(WaitPolicy::FailFast, &[done.clone(), None, None]).is_empty());
        assert_eq!(
            to_abort(
                WaitPolicy::FailFast,
                &[None, failed.clone(), done.clone(), None]
            ),
            vec![0, 3]
        );
        let aborted = Some(Outcome::ended(AgentStatus::Aborted, EndReason::Aborted));
        assert_eq!(to_abort(WaitPolicy::FailFast, &[aborted, None]), vec![1]);
        assert!(to_abort(WaitPolicy::AllSettled, &[failed, None]).is_empty());
    }
}
