//! Restart strategies: which siblings of a failed child are stopped and restarted with it
//! ([`plan`]), and one owner's whole restart exchange as a pure state machine
//! ([`StrategyMachine`]) that yields one [`Step`] at a time: stop this sibling, release these
//! exits, restart these children, escalate, or nothing to do.
//!
//! It never stops, starts, releases or reads anything itself, and never waits: the glue
//! (the owner's actor) gathers the facts ([`Child`] for each supervised child, in start
//! order), carries each step out and reports back what happened (`ended`,
//! `restart_failed`, `next`). It never reads a clock: `now` comes with each call.
//!
//! # Invariants
//!
//! * A strategy stops siblings in reverse start order and restarts in start order.
//! * Only running siblings are stopped; the failed child is always in the restart set.
//! * One plan at a time: siblings are stopped one by one, each `Stop` handed out once, the
//!   next only after the previous one's end is reported. Failures that arrive meanwhile are
//!   queued and taken up after the plan (restarts and their retries included), in arrival
//!   order, each as if it had just ended (one the plan restarted or that was released
//!   meanwhile decides nothing).
//! * The intensity is charged once per decision to restart (a plan, or a retry of a start
//!   that failed: OTP's `try_again_restart`), before anything is stopped or started; past it
//!   the owner escalates with the exit that exceeded it as the cause, and every exit still
//!   waiting on the machine is released.
//! * A temporary child is never restarted: stopped by a plan, its exit is released.
//! * An owner that is closing restarts nothing: the plan is dropped and every exit that
//!   reaches it, or still waits on the machine (held by the dropped plan included), is
//!   released.

use std::collections::VecDeque;
use std::time::Duration;

use agent_tree_protocol::{AgentId, RestartPolicy, Strategy};

use super::restart::{Intensity, RestartBudget};

/// What a strategy does after child `failed` (an index into the owner's children in start
/// order) ended: the siblings to stop, in the order to stop them (reverse start order), and
/// every child to restart, in start order. `live[i]` says whether child `i` is still running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The running siblings to stop, in reverse start order.
    pub(crate) stop: Vec<usize>,
    /// The failed child and the stopped siblings, in start order.
    pub(crate) restart: Vec<usize>,
}

/// The [`Plan`] of `strategy` after child `failed` ended, given which children run.
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

/// What the owner knows of one of its supervised (not detached) children, as the glue reads
/// it just before each call. Children are handed over in start order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Child {
    pub(crate) id: AgentId,
    /// It runs: live and not queued (a queued child has nothing to stop or restart; it stays
    /// queued).
    pub(crate) running: bool,
    /// It ended and its exit waits for the owner's decision (see
    /// [`super::restart::deferred`]).
    pub(crate) awaiting: bool,
    /// The restart type it was started with.
    pub(crate) restart: RestartPolicy,
}

/// Whether the owner can still restart anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    /// It runs: exits are decided.
    Running,
    /// It is ending (its run is over, or it is being aborted or shut down): nothing restarts.
    Closing,
}

/// What the glue does next.
#[must_use = "a step is an effect the glue must carry out"]
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing to do until a child's end is reported ([`StrategyMachine::ended`]).
    Idle,
    /// Stop this running sibling, holding its exit for the restart whatever it is
    /// (`Registry::hold_and_abort`), then wait: report its end with `ended`.
    Stop(AgentId),
    /// Make these exits final: nobody restarts them (`Registry::release`). Then `next`.
    Release(Vec<AgentId>),
    /// Restart these children, in this (start) order. Report each whose start fails with
    /// `restart_failed`, leaving its exit awaiting; then `next`.
    Restart(Vec<AgentId>),
    /// The restart intensity is exceeded: release `release` (the cause's exit first, then
    /// every other exit still waiting on the machine), and the owner fails with `cause`'s
    /// exit as the reason. The machine is empty afterwards.
    Escalate {
        cause: AgentId,
        release: Vec<AgentId>,
    },
}

/// One owner's restart state: its strategy, its restart intensity, the plan under way and
/// the failures waiting for it, as a pure machine.
///
/// The glue's exchange: report each child end noticed with [`ended`](Self::ended) and carry
/// out the step it returns; after a `Release` or `Restart` (steps that need no report) ask
/// for the following one with [`next`](Self::next), until `Idle`, `Stop` (wait for that
/// sibling's end) or `Escalate`. Every call takes the children's current facts and `now`.
///
/// The glue, in outline (what `supervision::ChildSupervisor::child_ended` becomes):
///
/// ```text
/// step = machine.ended(child, owner, now, &facts())
/// loop:
///     Idle                      -> return Continue
///     Stop(c)                   -> hold_and_abort(c); return Continue   // its end: `ended`
///     Release(ids)              -> release each
///     Restart(ids)              -> for each: restart + start; on failure `restart_failed`
///     Escalate { cause, release } -> release each; return Escalate(cause's summary)
///     step = machine.next(now, &facts())
/// ```
#[derive(Debug)]
pub(crate) struct StrategyMachine {
    strategy: Strategy,
    budget: RestartBudget,
    /// The plan under way, while it stops siblings.
    plan: Option<Active>,
    /// Steps decided but not handed out yet (a finished plan's release, then its restart).
    owed: VecDeque<Step>,
    /// Children whose restart failed to start, to retry under the same intensity, in order.
    retries: VecDeque<AgentId>,
    /// Failures that arrived while a plan was under way, to take up after it, in order.
    deferred: VecDeque<AgentId>,
}

/// A plan stopping its siblings.
#[derive(Debug)]
struct Active {
    /// Siblings still to stop, in stop order (reverse start order).
    stop: VecDeque<AgentId>,
    /// Whether the `Stop` of `stop`'s front was handed out: it is handed out once.
    asked: bool,
    /// Every child of the plan to restart, in start order.
    restart: Vec<AgentId>,
}

impl StrategyMachine {
    /// An idle machine for `strategy`, allowing `max_restarts` restarts within any `period`.
    pub(crate) fn new(strategy: Strategy, max_restarts: u32, period: Duration) -> Self {
        StrategyMachine {
            strategy,
            budget: RestartBudget::new(max_restarts, period),
            plan: None,
            owed: VecDeque::new(),
            retries: VecDeque::new(),
            deferred: VecDeque::new(),
        }
    }

    /// A child's end was noticed (every end, whatever it is: duplicates and stale reports
    /// decide nothing). The machine tells the cases apart from `children`:
    ///
    /// * `owner` is [`Owner::Closing`]: the plan is dropped and `child` is released, with
    ///   every exit still waiting on the machine.
    /// * `child` is not among `children` (a detached child): nobody's to restart; released.
    /// * `child` runs (a report from before a restart): nothing.
    /// * `child` is the sibling the plan is stopping: it has stopped (held, or final if
    ///   something else ended it for good); the plan moves on.
    /// * `child`'s exit is final: nothing to decide.
    /// * a plan is under way: the failure is queued until the plan is done.
    /// * otherwise a plan begins, if the intensity allows it.
    pub(crate) fn ended(
        &mut self,
        child: AgentId,
        owner: Owner,
        now: Duration,
        children: &[Child],
    ) -> Step {
        if owner == Owner::Closing {
            return self.close(child, children);
        }
        let Some(facts) = find(children, child) else {
            return Step::Release(vec![child]);
        };
        if facts.running {
            return self.next(now, children);
        }
        if let Some(active) = &mut self.plan {
            // The glue cannot tell a stopped sibling from a failure; the plan can.
            if active.stop.front() == Some(&child) {
                active.stop.pop_front();
                active.asked = false;
                return self.next(now, children);
            }
        }
        if !facts.awaiting {
            return self.next(now, children);
        }
        if self.busy() {
            // Decided after the plan; if the plan restarts it meanwhile, there is nothing left
            // to decide then.
            if let Some(active) = &mut self.plan {
                active.stop.retain(|&c| c != child);
            }
            if !self.deferred.contains(&child) {
                self.deferred.push_back(child);
            }
            return self.next(now, children);
        }
        self.begin(child, now, children)
    }

    /// The start of `child`, restarted by the last `Restart` step, failed; its exit still
    /// awaits. It is retried, under the same intensity, before anything else is taken up:
    /// the step from [`next`](Self::next) restarts it again or escalates.
    pub(crate) fn restart_failed(&mut self, child: AgentId) {
        if !self.retries.contains(&child) {
            self.retries.push_back(child);
        }
    }

    /// The step after a `Release` or `Restart` was carried out (or after any report): the
    /// plan's next stop or its restart, a retry, a queued failure taken up, or `Idle`. While
    /// a `Stop` is being waited for, `Idle`: a stop is handed out once.
    pub(crate) fn next(&mut self, now: Duration, children: &[Child]) -> Step {
        loop {
            if let Some(step) = self.owed.pop_front() {
                return step;
            }
            if let Some(active) = &mut self.plan {
                // Stop the running siblings one by one; one that ended by itself meanwhile is
                // not stopped (a final one is then not restarted either).
                while let Some(&sibling) = active.stop.front() {
                    if find(children, sibling).is_some_and(|c| c.running) {
                        if active.asked {
                            return Step::Idle;
                        }
                        active.asked = true;
                        return Step::Stop(sibling);
                    }
                    active.stop.pop_front();
                    active.asked = false;
                }
                self.finish_plan(children);
                continue;
            }
            if let Some(child) = self.retries.pop_front() {
                if !find(children, child).is_some_and(|c| c.awaiting) {
                    // Settled for good meanwhile: nothing to retry.
                    continue;
                }
                return match self.budget.try_add(now) {
                    Intensity::Within => Step::Restart(vec![child]),
                    Intensity::Exceeded => self.escalate(child, children),
                };
            }
            while let Some(child) = self.deferred.pop_front() {
                match find(children, child) {
                    Some(facts) if facts.awaiting => return self.begin(child, now, children),
                    Some(_) => {}
                    None => return Step::Release(vec![child]),
                }
            }
            return Step::Idle;
        }
    }

    /// Whether a plan, its restarts or their retries are under way: every child end must be
    /// reported then (a stopped sibling's included), not only deferred exits.
    pub(crate) fn busy(&self) -> bool {
        self.plan.is_some() || !self.owed.is_empty() || !self.retries.is_empty()
    }

    /// `child`'s exit awaits and nothing is under way: a plan begins, if the intensity allows.
    fn begin(&mut self, child: AgentId, now: Duration, children: &[Child]) -> Step {
        let Some(index) = children.iter().position(|c| c.id == child) else {
            return Step::Release(vec![child]);
        };
        if self.budget.try_add(now) == Intensity::Exceeded {
            return self.escalate(child, children);
        }
        let running: Vec<bool> = children.iter().map(|c| c.running).collect();
        let plan = plan(self.strategy, index, &running);
        self.plan = Some(Active {
            stop: plan.stop.iter().map(|&i| children[i].id).collect(),
            asked: false,
            restart: plan.restart.iter().map(|&i| children[i].id).collect(),
        });
        self.next(now, children)
    }

    /// Every sibling is stopped: the plan's children whose exit awaits are restarted in start
    /// order, except temporary ones, which are released (first: they hold live slots).
    fn finish_plan(&mut self, children: &[Child]) {
        let Some(active) = self.plan.take() else {
            return;
        };
        let (mut release, mut restart) = (Vec::new(), Vec::new());
        for facts in active.restart.iter().filter_map(|&id| find(children, id)) {
            if !facts.awaiting {
                continue;
            }
            if facts.restart == RestartPolicy::Temporary {
                release.push(facts.id);
            } else {
                restart.push(facts.id);
            }
        }
        if !release.is_empty() {
            self.owed.push_back(Step::Release(release));
        }
        if !restart.is_empty() {
            self.owed.push_back(Step::Restart(restart));
        }
    }

    /// The intensity is exceeded by `cause`'s exit: everything waiting is released.
    fn escalate(&mut self, cause: AgentId, children: &[Child]) -> Step {
        Step::Escalate {
            cause,
            release: self.drain(cause, children),
        }
    }

    /// The owner is closing: nothing restarts.
    fn close(&mut self, child: AgentId, children: &[Child]) -> Step {
        Step::Release(self.drain(child, children))
    }

    /// Empties the machine, returning `first` and every exit still waiting on it, in order:
    /// retries, queued failures, then what a dropped plan held for its restart.
    fn drain(&mut self, first: AgentId, children: &[Child]) -> Vec<AgentId> {
        let mut held: Vec<AgentId> = self.plan.take().map(|p| p.restart).unwrap_or_default();
        for step in self.owed.drain(..) {
            if let Step::Release(ids) | Step::Restart(ids) = step {
                held.extend(ids);
            }
        }
        held.retain(|&id| find(children, id).is_some_and(|c| c.awaiting));
        let mut release = vec![first];
        for id in self
            .retries
            .drain(..)
            .chain(self.deferred.drain(..))
            .chain(held)
        {
            if !release.contains(&id) {
                release.push(id);
            }
        }
        release
    }
}

fn find(children: &[Child], id: AgentId) -> Option<&Child> {
    children.iter().find(|c| c.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::HashMap;

    use RestartPolicy::{Permanent, Temporary, Transient};
    use Step::{Idle, Release, Restart, Stop};

    fn a(n: u64) -> AgentId {
        AgentId::new(n)
    }

    fn ids(ns: &[u64]) -> Vec<AgentId> {
        ns.iter().map(|&n| a(n)).collect()
    }

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    /// The glue, simulated: a child table the steps act on, and the trace of every step.
    struct Sim {
        machine: StrategyMachine,
        children: Vec<Child>,
        now: Duration,
        /// Starts still to fail, per child.
        failing_starts: HashMap<AgentId, u32>,
        /// Stopped siblings end (held) at once, as if their end were reported immediately.
        auto_stop: bool,
        trace: Vec<Step>,
    }

    impl Sim {
        /// Children `a1..=aN` of the given restart types, all running.
        fn new(strategy: Strategy, max_restarts: u32, types: &[RestartPolicy]) -> Self {
            let children = types
                .iter()
                .zip(1..)
                .map(|(&restart, n)| Child {
                    id: a(n),
                    running: true,
                    awaiting: false,
                    restart,
                })
                .collect();
            Sim {
                machine: StrategyMachine::new(strategy, max_restarts, Duration::from_secs(5)),
                children,
                now: Duration::ZERO,
                failing_starts: HashMap::new(),
                auto_stop: true,
                trace: Vec::new(),
            }
        }

        fn child(&mut self, n: u64) -> &mut Child {
            self.children
                .iter_mut()
                .find(|c| c.id == a(n))
                .expect("a child of the sim")
        }

        /// `aN` ends; `awaiting` says whether its exit waits for the owner.
        fn exit(&mut self, n: u64, awaiting: bool) {
            let child = self.child(n);
            child.running = false;
            child.awaiting = awaiting;
        }

        /// `aN` ends and its end is reported to a running owner.
        fn end(&mut self, n: u64, awaiting: bool) {
            self.exit(n, awaiting);
            self.report(n, Owner::Running);
        }

        fn report(&mut self, n: u64, owner: Owner) {
            let step = self.machine.ended(a(n), owner, self.now, &self.children);
            self.run(step);
        }

        /// Carries steps out until the machine waits.
        fn run(&mut self, mut step: Step) {
            loop {
                self.trace.push(step.clone());
                match step {
                    Idle | Step::Escalate { .. } => return,
                    Stop(sibling) => {
                        if !self.auto_stop {
                            return;
                        }
                        // Held for the restart: its exit awaits whatever it is.
                        let n = sibling.get();
                        self.exit(n, true);
                        step =
                            self.machine
                                .ended(sibling, Owner::Running, self.now, &self.children);
                        continue;
                    }
                    Release(released) => {
                        for id in released {
                            self.child(id.get()).awaiting = false;
                        }
                    }
                    Restart(restarted) => {
                        for id in restarted {
                            match self.failing_starts.get_mut(&id) {
                                Some(left) if *left > 0 => {
                                    *left -= 1;
                                    self.machine.restart_failed(id);
                                }
                                _ => {
                                    let child = self.child(id.get());
                                    child.running = true;
                                    child.awaiting = false;
                                }
                            }
                        }
                    }
                }
                step = self.machine.next(self.now, &self.children);
            }
        }

        fn take_trace(&mut self) -> Vec<Step> {
            std::mem::take(&mut self.trace)
        }
    }

    fn escalate(cause: u64, release: &[u64]) -> Step {
        Step::Escalate {
            cause: a(cause),
            release: ids(release),
        }
    }

    #[test]
    fn strategies_stop_in_reverse_and_restart_in_start_order() {
        // Five permanent children; a3 is queued (not running); a2 fails.
        let table = [
            (Strategy::OneForOne, vec![Restart(ids(&[2])), Idle]),
            (
                Strategy::OneForAll,
                vec![
                    Stop(a(5)),
                    Stop(a(4)),
                    Stop(a(1)),
                    Restart(ids(&[1, 2, 4, 5])),
                    Idle,
                ],
            ),
            (
                Strategy::RestForOne,
                vec![Stop(a(5)), Stop(a(4)), Restart(ids(&[2, 4, 5])), Idle],
            ),
        ];
        for (strategy, want) in table {
            let mut sim = Sim::new(strategy, 3, &[Permanent; 5]);
            sim.child(3).running = false;
            sim.end(2, true);
            assert_eq!(sim.take_trace(), want, "{strategy:?}");
            assert!(
                sim.children
                    .iter()
                    .all(|c| c.running == (c.id != a(3)) && !c.awaiting),
                "{strategy:?}: all but the queued one run again"
            );
        }
    }

    #[test]
    fn liveness_patterns_choose_what_is_stopped() {
        // (running a1..a4 before a2 fails, one_for_all trace)
        let table = [
            (
                [true, true, true, true],
                vec![
                    Stop(a(4)),
                    Stop(a(3)),
                    Stop(a(1)),
                    Restart(ids(&[1, 2, 3, 4])),
                ],
            ),
            ([false, true, false, false], vec![Restart(ids(&[2]))]),
            (
                [true, true, false, true],
                vec![Stop(a(4)), Stop(a(1)), Restart(ids(&[1, 2, 4]))],
            ),
            (
                [false, true, true, false],
                vec![Stop(a(3)), Restart(ids(&[2, 3]))],
            ),
        ];
        for (running, mut want) in table {
            let mut sim = Sim::new(Strategy::OneForAll, 3, &[Permanent; 4]);
            for (n, run) in (1..).zip(running) {
                sim.child(n).running = run;
            }
            sim.end(2, true);
            want.push(Idle);
            assert_eq!(sim.take_trace(), want, "{running:?}");
        }
    }

    #[test]
    fn temporary_children_are_released_not_restarted() {
        let mut sim = Sim::new(Strategy::OneForAll, 3, &[Permanent, Temporary, Transient]);
        sim.end(1, true);
        assert_eq!(
            sim.take_trace(),
            [
                Stop(a(3)),
                Stop(a(2)),
                Release(ids(&[2])),
                Restart(ids(&[1, 3])),
                Idle
            ]
        );
        assert!(!sim.child(2).running && !sim.child(2).awaiting);
    }

    #[test]
    fn each_stop_is_handed_out_once_and_waits_for_its_end() {
        // One restart allowed: a second plan would escalate.
        let mut sim = Sim::new(Strategy::RestForOne, 1, &[Permanent; 3]);
        sim.auto_stop = false;
        sim.end(1, true);
        assert_eq!(sim.take_trace(), [Stop(a(3))]);
        // Asking again while the stop is under way hands nothing out.
        assert_eq!(sim.machine.next(sim.now, &sim.children), Idle);
        // The failed child's end reported a second time (its notice and its supervision
        // event) is queued, and decides nothing once the plan restarted it.
        sim.report(1, Owner::Running);
        assert_eq!(sim.take_trace(), [Idle]);
        sim.end(3, true);
        assert_eq!(sim.take_trace(), [Stop(a(2))]);
        sim.end(2, true);
        assert_eq!(sim.take_trace(), [Restart(ids(&[1, 2, 3])), Idle]);
        // After the restart, a late duplicate is stale.
        sim.report(1, Owner::Running);
        assert_eq!(sim.take_trace(), [Idle]);
    }

    #[test]
    fn siblings_that_end_by_themselves_mid_plan_are_not_stopped() {
        // a1 fails under one_for_all; a3 is being stopped when a2 ends by itself.
        // (a2's exit awaits?, a2's end reported?, trace after a3 stops)
        let table = [
            // Final (e.g. a temporary that completed): skipped, not restarted.
            (false, true, vec![Restart(ids(&[1, 3])), Idle]),
            // Final, its report still in flight: the facts say it ended, so it is skipped.
            (false, false, vec![Restart(ids(&[1, 3])), Idle]),
            // A restartable failure of its own: restarted with the plan, and its queued
            // failure then decides nothing.
            (true, true, vec![Restart(ids(&[1, 2, 3])), Idle]),
            (true, false, vec![Restart(ids(&[1, 2, 3])), Idle]),
        ];
        for (awaiting, reported, want) in table {
            let mut sim = Sim::new(Strategy::OneForAll, 1, &[Permanent; 3]);
            sim.auto_stop = false;
            sim.end(1, true);
            assert_eq!(sim.take_trace(), [Stop(a(3))]);
            if reported {
                sim.end(2, awaiting);
                assert_eq!(sim.take_trace(), [Idle]);
            } else {
                sim.exit(2, awaiting);
            }
            sim.end(3, true);
            assert_eq!(
                sim.take_trace(),
                want,
                "awaiting {awaiting}, reported {reported}"
            );
            // With a budget of one, a second plan would have escalated.
            if reported && awaiting {
                sim.report(2, Owner::Running);
                assert_eq!(sim.take_trace(), [Idle]);
            }
        }
    }

    #[test]
    fn a_stopped_sibling_that_was_aborted_meanwhile_is_not_restarted() {
        let mut sim = Sim::new(Strategy::OneForAll, 3, &[Permanent; 2]);
        sim.auto_stop = false;
        sim.end(1, true);
        assert_eq!(sim.take_trace(), [Stop(a(2))]);
        // An abort by its owner or the application got there first: its exit is final.
        sim.end(2, false);
        assert_eq!(sim.take_trace(), [Restart(ids(&[1])), Idle]);
    }

    #[test]
    fn failures_during_a_plan_are_taken_up_after_it_in_order() {
        let mut sim = Sim::new(Strategy::RestForOne, 10, &[Permanent; 4]);
        sim.auto_stop = false;
        sim.end(3, true);
        sim.end(2, true);
        sim.end(1, true);
        assert_eq!(sim.take_trace(), [Stop(a(4)), Idle, Idle]);
        sim.auto_stop = true;
        sim.end(4, true);
        assert_eq!(
            sim.take_trace(),
            [
                // The plan of a3 first,
                Restart(ids(&[3, 4])),
                // then a2's, as if it had just failed,
                Stop(a(4)),
                Stop(a(3)),
                Restart(ids(&[2, 3, 4])),
                // then a1's.
                Stop(a(4)),
                Stop(a(3)),
                Stop(a(2)),
                Restart(ids(&[1, 2, 3, 4])),
                Idle,
            ]
        );
    }

    #[test]
    fn a_queued_failure_released_meanwhile_decides_nothing() {
        let mut sim = Sim::new(Strategy::RestForOne, 10, &[Permanent; 3]);
        sim.auto_stop = false;
        sim.end(2, true);
        sim.end(1, true);
        // An abort made a1's exit final while it waited.
        sim.child(1).awaiting = false;
        sim.end(3, true);
        assert_eq!(
            sim.take_trace(),
            [Stop(a(3)), Idle, Restart(ids(&[2, 3])), Idle]
        );
    }

    #[test]
    fn final_exits_stale_reports_and_strangers_decide_nothing() {
        let mut sim = Sim::new(Strategy::OneForAll, 1, &[Temporary, Permanent]);
        sim.end(1, false);
        assert_eq!(sim.take_trace(), [Idle]);
        // a2 runs: a report from before its restart.
        sim.report(2, Owner::Running);
        assert_eq!(sim.take_trace(), [Idle]);
        // Not a supervised child (a detached one): released, nothing charged.
        let step = sim
            .machine
            .ended(a(9), Owner::Running, sim.now, &sim.children);
        assert_eq!(step, Release(ids(&[9])));
        // The whole budget (one restart) is still there.
        sim.end(2, true);
        assert_eq!(sim.take_trace(), [Restart(ids(&[2])), Idle]);
    }

    #[test]
    fn a_closing_owner_restarts_nothing() {
        // No plan: even a permanent failure is released.
        let mut sim = Sim::new(Strategy::OneForOne, 3, &[Permanent]);
        sim.exit(1, true);
        sim.report(1, Owner::Closing);
        assert_eq!(sim.take_trace(), [Release(ids(&[1])), Idle]);

        // Mid-plan: the plan is dropped and queued failures are released with the report.
        let mut sim = Sim::new(Strategy::RestForOne, 3, &[Permanent; 4]);
        sim.auto_stop = false;
        sim.end(2, true);
        sim.end(1, true);
        assert_eq!(sim.take_trace(), [Stop(a(4)), Idle]);
        sim.exit(4, true);
        sim.report(4, Owner::Closing);
        // a2's exit, held for the dropped plan, is released too.
        assert_eq!(sim.take_trace(), [Release(ids(&[4, 1, 2])), Idle]);
        // Nothing is left: a later report is only released too.
        sim.exit(3, true);
        sim.report(3, Owner::Closing);
        assert_eq!(sim.take_trace(), [Release(ids(&[3])), Idle]);
    }

    #[test]
    fn past_the_intensity_the_owner_escalates_with_the_cause() {
        let mut sim = Sim::new(Strategy::OneForOne, 2, &[Permanent; 2]);
        for t in [0, 1_000] {
            sim.now = ms(t);
            sim.end(1, true);
        }
        sim.now = ms(2_000);
        sim.end(2, true);
        assert_eq!(
            sim.take_trace(),
            [
                Restart(ids(&[1])),
                Idle,
                Restart(ids(&[1])),
                Idle,
                escalate(2, &[2])
            ]
        );
    }

    #[test]
    fn the_window_slides_with_now() {
        let mut sim = Sim::new(Strategy::OneForOne, 1, &[Permanent]);
        // (now in ms, step) — one restart per 5 s, a restart exactly 5 s old still counts.
        let table = [
            (0, Restart(ids(&[1]))),
            (5_001, Restart(ids(&[1]))),
            (10_001, escalate(1, &[1])),
        ];
        for (t, want) in table {
            sim.now = ms(t);
            sim.end(1, true);
            assert_eq!(sim.take_trace().first(), Some(&want), "at {t} ms");
        }
    }

    #[test]
    fn escalation_releases_every_exit_still_waiting() {
        // One restart allowed: a3's plan takes it, a1's (queued) exceeds it.
        let mut sim = Sim::new(Strategy::RestForOne, 1, &[Permanent; 4]);
        sim.auto_stop = false;
        sim.end(3, true);
        sim.end(1, true);
        sim.end(2, true);
        sim.end(4, true);
        assert_eq!(
            sim.take_trace(),
            [
                Stop(a(4)),
                Idle,
                Idle,
                Restart(ids(&[3, 4])),
                escalate(1, &[1, 2])
            ]
        );
        // The machine is empty afterwards.
        assert_eq!(sim.machine.next(sim.now, &sim.children), Idle);
    }

    #[test]
    fn a_failed_start_is_retried_under_the_same_intensity() {
        // (starts that fail, restarts allowed, trace)
        let table = [
            (1, 3, vec![Restart(ids(&[1])), Restart(ids(&[1])), Idle]),
            (
                2,
                3,
                vec![
                    Restart(ids(&[1])),
                    Restart(ids(&[1])),
                    Restart(ids(&[1])),
                    Idle,
                ],
            ),
            // Every start fails: the third restart is the last the intensity allows.
            (
                u32::MAX,
                3,
                vec![
                    Restart(ids(&[1])),
                    Restart(ids(&[1])),
                    Restart(ids(&[1])),
                    escalate(1, &[1]),
                ],
            ),
        ];
        for (failing, max_restarts, want) in table {
            let mut sim = Sim::new(Strategy::OneForOne, max_restarts, &[Permanent]);
            sim.failing_starts.insert(a(1), failing);
            sim.end(1, true);
            assert_eq!(sim.take_trace(), want, "{failing} failing starts");
        }
    }

    #[test]
    fn retries_restart_only_the_child_that_failed_to_start_and_precede_queued_failures() {
        let mut sim = Sim::new(Strategy::OneForAll, 10, &[Permanent; 3]);
        sim.failing_starts.insert(a(2), 1);
        sim.auto_stop = false;
        sim.end(1, true);
        assert_eq!(sim.take_trace(), [Stop(a(3))]);
        sim.end(3, true);
        assert_eq!(sim.take_trace(), [Stop(a(2))]);
        sim.end(2, true);
        assert_eq!(
            sim.take_trace(),
            [Restart(ids(&[1, 2, 3])), Restart(ids(&[2])), Idle]
        );
        assert!(sim.children.iter().all(|c| c.running));
    }

    #[test]
    fn a_failure_reported_before_a_retry_waits_for_it() {
        // Driven by hand: a2's end is reported between a1's failed start and the glue's
        // `next`.
        let mut sim = Sim::new(Strategy::OneForOne, 10, &[Permanent; 2]);
        sim.exit(1, true);
        let step = sim
            .machine
            .ended(a(1), Owner::Running, sim.now, &sim.children);
        assert_eq!(step, Restart(ids(&[1])));
        sim.machine.restart_failed(a(1));
        sim.exit(2, true);
        // The retry comes first; a2 is queued behind it.
        let step = sim
            .machine
            .ended(a(2), Owner::Running, sim.now, &sim.children);
        assert_eq!(step, Restart(ids(&[1])));
        sim.child(1).running = true;
        sim.child(1).awaiting = false;
        let step = sim.machine.next(sim.now, &sim.children);
        assert_eq!(step, Restart(ids(&[2])));
        sim.child(2).running = true;
        sim.child(2).awaiting = false;
        assert_eq!(sim.machine.next(sim.now, &sim.children), Idle);
    }

    #[test]
    fn a_retry_of_an_exit_released_meanwhile_is_dropped_uncharged() {
        let mut sim = Sim::new(Strategy::OneForOne, 1, &[Permanent; 2]);
        sim.exit(1, true);
        let step = sim
            .machine
            .ended(a(1), Owner::Running, sim.now, &sim.children);
        assert_eq!(step, Restart(ids(&[1])));
        sim.machine.restart_failed(a(1));
        // Its failed start settled it for good (today's spawn path does): nothing to retry.
        sim.child(1).awaiting = false;
        assert_eq!(sim.machine.next(sim.now, &sim.children), Idle);
    }

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
