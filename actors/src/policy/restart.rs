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

/// Whether one more restart fits the restart intensity.
#[must_use = "`Exceeded` means the owner escalates instead of restarting"]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Intensity {
    /// The restart is recorded: go ahead.
    Within,
    /// `max_restarts` restarts already fall within the last `period`: nothing is recorded,
    /// and the owner fails and escalates with the exit's cause.
    Exceeded,
}

/// The restart intensity of one owner: a sliding window of its children's restart times
/// (OTP's `restarts` list), at most `max_restarts` within any `period`.
///
/// Times are `Duration`s since an epoch the caller picks; they must not go backwards.
#[derive(Clone, Debug)]
pub(crate) struct RestartBudget {
    max_restarts: u32,
    period: Duration,
    /// When each restart still inside the window happened, oldest first.
    restarts: VecDeque<Duration>,
}

impl RestartBudget {
    /// A budget of `max_restarts` restarts within any `period`.
    pub(crate) fn new(max_restarts: u32, period: Duration) -> Self {
        RestartBudget {
            max_restarts,
            period,
            restarts: VecDeque::new(),
        }
    }

    /// Records a restart at `now` if the intensity allows it.
    pub(crate) fn try_add(&mut self, now: Duration) -> Intensity {
        // As OTP's `add_restart`: a restart exactly one period old still counts.
        while let Some(&oldest) = self.restarts.front() {
            if now.saturating_sub(oldest) > self.period {
                self.restarts.pop_front();
            } else {
                break;
            }
        }
        if self.restarts.len() as u64 >= u64::from(self.max_restarts) {
            return Intensity::Exceeded;
        }
        self.restarts.push_back(now);
        Intensity::Within
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

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn intensity_window_slides() {
        use Intensity::*;
        let mut budget = RestartBudget::new(3, Duration::from_secs(5));
        for s in [0, 1_000, 2_000] {
            assert_eq!(budget.try_add(ms(s)), Within);
        }
        assert_eq!(budget.try_add(ms(3_000)), Exceeded, "fourth within 5 s");
        // Exactly one period later the first restart still counts (OTP's `Now =< Then +
        // Period`); just after, it has left the window.
        assert_eq!(budget.try_add(ms(5_000)), Exceeded);
        assert_eq!(budget.try_add(ms(5_001)), Within);
        assert_eq!(budget.try_add(ms(6_000)), Exceeded);
        assert_eq!(budget.try_add(ms(6_001)), Within);
    }

    #[test]
    fn an_exceeded_restart_is_not_recorded() {
        use Intensity::*;
        let mut budget = RestartBudget::new(1, ms(100));
        assert_eq!(budget.try_add(ms(0)), Within);
        // Refused attempts do not extend the window: the restart at 0 alone decides.
        for t in [10, 50, 100] {
            assert_eq!(budget.try_add(ms(t)), Exceeded, "at {t} ms");
        }
        assert_eq!(budget.try_add(ms(101)), Within);
    }

    #[test]
    fn zero_intensity_never_restarts() {
        let mut budget = RestartBudget::new(0, Duration::from_secs(5));
        assert_eq!(budget.try_add(ms(0)), Intensity::Exceeded);
        assert_eq!(budget.try_add(ms(60_000)), Intensity::Exceeded);
    }
}
