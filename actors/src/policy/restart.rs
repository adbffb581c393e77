//! Restart decisions about one exit: whether its restart type wants a restart
//! ([`restart_wanted`]), whether the exit waits for its owner's decision or is final at once
//! ([`deferred`]), and the restart intensity checked before each restart ([`RestartBudget`]).
//!
//! It never restarts, releases or holds anything, and never picks siblings: the registry
//! keeps an exit open on [`deferred`]'s word, and [`super::strategy`] plans the restart.
//!
//! # Invariants
//!
//! * The intensity is checked before each restart: at most `max_restarts` restarts within any
//!   window of `period`; the one past it escalates instead (Erlang's `add_restart`).
//! * An abort is the owner's (or the application's) intent, like `terminate_child`: it is
//!   never restarted, whatever the restart type, unless the owner's own strategy stopped it.
//! * Only a live owner decides, and only for its supervised children: an exit under a
//!   shutdown, of a detached nested agent, or whose owner is gone or aborting is final at
//!   once.

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

/// The facts about one exit that decide whether it waits for its owner's decision
/// ([`deferred`]). The root's own exit never asks: nobody is above it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Exit<'a> {
    /// The restart type the agent was started with.
    pub(crate) restart: RestartPolicy,
    /// How it ended.
    pub(crate) outcome: &'a Outcome,
    /// Its owner's strategy stopped it to restart it: held for the restart whatever its exit.
    pub(crate) held: bool,
    /// The run was aborted (by its owner or the application) before it ended, whatever it
    /// ended with: a turn that failed or panicked while the abort was on its way still ends
    /// an aborted run, never restarted.
    pub(crate) aborted: bool,
    /// Spawned detached: linked under the root actor, not its owner's.
    pub(crate) detached: bool,
    /// Its owner is the root (a top-level agent).
    pub(crate) top_level: bool,
    /// A shutdown reached it: the shutdown decides for everyone, nothing restarts.
    pub(crate) under_shutdown: bool,
    /// Its owner is live and not being aborted, so someone is there to decide.
    pub(crate) owner_live: bool,
}

/// Whether `exit` waits for its owner's restart decision (recorded, but not final: watchers
/// are not told and it keeps its live slot) rather than being final at once: it is
/// restartable (held by its owner's strategy, or, not aborted, its restart type wants it),
/// supervised (not
/// detached, unless top-level, whose owner the root is anyway; and not under a shutdown),
/// and its owner is live.
///
/// | restartable | supervised | owner live | deferred |
/// | --- | --- | --- | --- |
/// | yes | yes | yes | yes |
/// | no | any | any | no |
/// | any | no | any | no |
/// | any | any | no | no |
pub(crate) fn deferred(exit: &Exit<'_>) -> bool {
    let restartable = exit.held || (!exit.aborted && restart_wanted(exit.restart, exit.outcome));
    let supervised = (!exit.detached || exit.top_level) && !exit.under_shutdown;
    restartable && supervised && exit.owner_live
}

/// Whether one more restart fits the restart intensity.
#[must_use = "`Exceeded` means the owner escalates instead of restarting"]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intensity {
    /// The restart is recorded: go ahead.
    Within,
    /// `max_restarts` restarts already fall within the last `period`: nothing is recorded,
    /// and the owner fails and escalates with the exit's cause.
    Exceeded,
}

/// The restart intensity of one owner: a sliding window of its children's restart times
/// (OTP's `restarts` list), at most `max_restarts` within any `period`.
///
/// Times are `Duration`s since an epoch the caller picks; they must not go backwards. The
/// tree's owners use it for their children; a plug-in supervising something of its own (the
/// MCP plug-in's server connections) uses the same window.
///
/// ```
/// use std::time::Duration;
/// use agent_tree_actors::{Intensity, RestartBudget};
/// let mut budget = RestartBudget::new(1, Duration::from_secs(5));
/// assert_eq!(budget.try_add(Duration::from_secs(0)), Intensity::Within);
/// assert_eq!(budget.try_add(Duration::from_secs(3)), Intensity::Exceeded);
/// assert_eq!(budget.try_add(Duration::from_secs(6)), Intensity::Within);
/// ```
#[derive(Clone, Debug)]
pub struct RestartBudget {
    max_restarts: u32,
    period: Duration,
    /// When each restart still inside the window happened, oldest first.
    restarts: VecDeque<Duration>,
}

impl RestartBudget {
    /// A budget of `max_restarts` restarts within any `period`.
    pub fn new(max_restarts: u32, period: Duration) -> Self {
        RestartBudget {
            max_restarts,
            period,
            restarts: VecDeque::new(),
        }
    }

    /// Records a restart at `now` if the intensity allows it.
    pub fn try_add(&mut self, now: Duration) -> Intensity {
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

    /// An exit of a nested, attached child of a live owner, with no shutdown: the facts under
    /// which only restartability decides.
    fn exit(restart: RestartPolicy, outcome: &Outcome) -> Exit<'_> {
        Exit {
            restart,
            outcome,
            held: false,
            aborted: false,
            detached: false,
            top_level: false,
            under_shutdown: false,
            owner_live: true,
        }
    }

    #[test]
    fn a_supervised_exit_is_deferred_exactly_when_its_restart_type_wants_it() {
        use AgentStatus::*;
        use RestartPolicy::*;
        for policy in [Permanent, Transient, Temporary] {
            for status in [Completed, Failed, Killed, Aborted] {
                let outcome = ended(status);
                assert_eq!(
                    deferred(&exit(policy, &outcome)),
                    restart_wanted(policy, &outcome),
                    "{policy:?} {status:?}"
                );
            }
        }
    }

    /// An abort raced by the run's own end (a turn that failed or panicked, a kill) still
    /// ends an aborted run: final, never restarted; only the owner's strategy, which aborts
    /// to restart (held), overrides it.
    #[test]
    fn an_aborted_run_is_final_whatever_it_ended_with_unless_held() {
        use AgentStatus::*;
        use RestartPolicy::*;
        for policy in [Permanent, Transient, Temporary] {
            for status in [Completed, Failed, Killed, Aborted] {
                let outcome = ended(status);
                let aborted = Exit {
                    aborted: true,
                    ..exit(policy, &outcome)
                };
                assert!(!deferred(&aborted), "{policy:?} {status:?}");
                let held = Exit {
                    held: true,
                    ..aborted
                };
                assert!(deferred(&held), "{policy:?} {status:?} held");
            }
        }
    }

    #[test]
    fn a_held_exit_is_deferred_whatever_its_type_and_exit() {
        use AgentStatus::*;
        use RestartPolicy::*;
        for policy in [Permanent, Transient, Temporary] {
            for status in [Completed, Failed, Killed, Aborted] {
                let outcome = ended(status);
                let held = Exit {
                    held: true,
                    ..exit(policy, &outcome)
                };
                assert!(deferred(&held), "{policy:?} {status:?}");
            }
        }
    }

    #[test]
    fn only_a_live_owner_decides_and_only_for_supervised_children() {
        let failed = ended(AgentStatus::Failed);
        let base = Exit {
            held: true,
            ..exit(RestartPolicy::Permanent, &failed)
        };
        // (facts, deferred)
        let table = [
            (base, true),
            (
                Exit {
                    owner_live: false,
                    ..base
                },
                false,
            ),
            (
                Exit {
                    under_shutdown: true,
                    ..base
                },
                false,
            ),
            (
                Exit {
                    detached: true,
                    ..base
                },
                false,
            ),
            // A detached top-level agent is linked under the root, its owner anyway.
            (
                Exit {
                    detached: true,
                    top_level: true,
                    ..base
                },
                true,
            ),
            (
                Exit {
                    top_level: true,
                    ..base
                },
                true,
            ),
            (
                Exit {
                    top_level: true,
                    under_shutdown: true,
                    ..base
                },
                false,
            ),
            (
                Exit {
                    top_level: true,
                    owner_live: false,
                    ..base
                },
                false,
            ),
        ];
        for (facts, want) in table {
            assert_eq!(deferred(&facts), want, "{facts:?}");
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
