//! Restart decisions for one exit: whether its restart type wants a restart, and the restart
//! intensity window checked before each restart.
//!
//! # Invariants
//!
//! * The intensity is checked before each restart: at most `max_restarts` restarts within any
//!   window of `period`; the one past it escalates instead (Erlang's `add_restart`).
//! * An abort is the owner's (or the application's) intent, like `terminate_child`: it is
//!   never restarted, whatever the restart type.

use std::collections::VecDeque;
use std::time::Duration;

use agent_tree_protocol::{AgentStatus, Outcome, RestartPolicy};
use tokio::time::Instant;

/// Whether a child of restart type `policy` that ended with `outcome` is restarted.
///
/// | exit | permanent | transient | temporary |
/// | --- | --- | --- | --- |
/// | completed | restart | — | — |
/// | failed (error, panic, max turns) | restart | restart | — |
/// | killed | restart | restart | — |
/// | aborted | — | — | — |
pub(crate) fn restart_wanted(policy: RestartPolicy, outcome: &Outcome) -> bool {
    match (policy, outcome.status) {
        (RestartPolicy::Temporary, _) => false,
        (_, AgentStatus::Aborted) => false,
        (RestartPolicy::Permanent, _) => true,
        (RestartPolicy::Transient, status) => {
            matches!(status, AgentStatus::Failed | AgentStatus::Killed)
        }
    }
}

/// A sliding window of restart times.
#[derive(Clone, Debug)]
pub(crate) struct RestartBudget {
    max_restarts: u32,
    period: Duration,
    restarts: VecDeque<Instant>,
}

impl RestartBudget {
    pub(crate) fn new(max_restarts: u32, period: Duration) -> Self {
        RestartBudget {
            max_restarts,
            period,
            restarts: VecDeque::new(),
        }
    }

    /// Records a restart at `now` if the intensity allows it; `false` means escalate.
    #[must_use = "false means the intensity is exceeded"]
    pub(crate) fn try_add(&mut self, now: Instant) -> bool {
        // As OTP's `add_restart`: a restart exactly one period old still counts.
        while let Some(&oldest) = self.restarts.front() {
            if now.saturating_duration_since(oldest) > self.period {
                self.restarts.pop_front();
            } else {
                break;
            }
        }
        if self.restarts.len() as u64 >= u64::from(self.max_restarts) {
            return false;
        }
        self.restarts.push_back(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use agent_tree_protocol::EndReason;

    use super::*;

    fn ended(status: AgentStatus) -> Outcome {
        Outcome::ended(status, EndReason::Killed)
    }

    #[test]
    fn restart_types_by_exit_kind() {
        use AgentStatus::*;
        use RestartPolicy::*;
        let table = [
            (Permanent, [true, true, true, false]),
            (Transient, [false, true, true, false]),
            (Temporary, [false, false, false, false]),
        ];
        for (policy, expected) in table {
            for (status, want) in [Completed, Failed, Killed, Aborted]
                .into_iter()
                .zip(expected)
            {
                assert_eq!(
                    restart_wanted(policy, &ended(status)),
                    want,
                    "{policy:?} {status:?}"
                );
            }
        }
    }

    #[test]
    fn intensity_window_slides() {
        let t0 = Instant::now();
        let mut budget = RestartBudget::new(3, Duration::from_secs(5));
        for s in [0, 1, 2] {
            assert!(budget.try_add(t0 + Duration::from_secs(s)));
        }
        assert!(
            !budget.try_add(t0 + Duration::from_secs(3)),
            "fourth within 5 s"
        );
        // Exactly one period later the first restart still counts (OTP's `Now =< Then +
        // Period`); just after, it has left the window.
        assert!(!budget.try_add(t0 + Duration::from_secs(5)));
        assert!(budget.try_add(t0 + Duration::from_millis(5_001)));
        assert!(!budget.try_add(t0 + Duration::from_millis(6_000)));
        assert!(budget.try_add(t0 + Duration::from_millis(6_001)));
    }

    #[test]
    fn zero_intensity_never_restarts() {
        assert!(!RestartBudget::new(0, Duration::from_secs(5)).try_add(Instant::now()));
    }
}
