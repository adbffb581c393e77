//! Shutdown of a subtree under one deadline, run by the runtime (the application's
//! [`Tree`](crate::Tree) only asks for it).
//!
//! The phases are OTP's per-child `shutdown` (ask → wait → kill), applied to a whole subtree
//! at once rather than child by child, so the deadline does not grow with depth:
//!
//! 1. **Tell** ([`Registry::begin_shutdown`]): every live agent of the subtree is marked with
//!    the deadline and its cancellation token fires, all in one registry transaction, so every
//!    in-flight model call stops at once; then every agent gets the imperative
//!    [`AgentMsg::Shutdown`](crate::msg::AgentMsg::Shutdown) order at once. Queued agents
//!    settle on the spot.
//! 2. **Hooks under the deadline**: each agent runs its shutdown hooks (bounded by the
//!    deadline, reporting to this module) and settles once its children have: subtrees settle
//!    bottom-up by themselves. This module only waits for the settled records.
//! 3. **Kill** at the deadline: whatever is still live is settled `killed` and its actor is
//!    killed; hook tasks still running end with it. Owners of killed agents hear of it from
//!    ractor's termination event, the one path a lost child takes.
//! 4. **Wait** a small bound ([`SHUTDOWN_KILL_WAIT`]) for every actor of the subtree to exit,
//!    those started during the shutdown included, so nothing of it outlives the call.
//! 5. **Report** ([`classify`], a pure function): who settled gracefully, who was killed, whose
//!    hooks failed, and how long it took.
//!
//! # What the deadline bounds
//!
//! The deadline bounds everything that yields to the runtime: model calls, tools, waits and
//! async hooks are cancelled or killed at their next await point. A hook that *blocks its
//! thread* (a synchronous sleep, a blocking read) holds that worker thread until it returns:
//! no runtime can preempt it. On a multi-thread runtime the shutdown's own timer and kill
//! path run on the other workers, so the call still returns near the deadline while a worker
//! is free; on a current-thread runtime, or when every worker is blocked, nothing can run
//! until the blocking call returns. Run blocking work in a hook through
//! `tokio::task::spawn_blocking`.

use std::collections::HashMap;
use std::time::Duration;

use agent_tree_protocol::AgentId;
use ractor::{ActorCell, ActorStatus};
use tokio::time::Instant;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::SHUTDOWN_KILL_WAIT;
use crate::msg::{AgentMsg, ShutdownOrder};
use crate::registry::{KilledRuns, Registry};

/// What a shutdown did.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use agent_tree_actors::testkit::{Script, ScriptedModel, Turn};
/// use agent_tree_actors::{Catalog, Tree};
/// use agent_tree_protocol::{AgentDefinition, SpawnRequest};
///
/// let model = ScriptedModel::new().script("w", Script::new([Turn::hang()]));
/// let catalog = Catalog::new([AgentDefinition::new("w", "")]).unwrap();
/// let tree = Tree::builder().catalog(catalog).model(model).build().await.unwrap();
/// let handle = tree.spawn(SpawnRequest::new("w", "wait")).await.unwrap();
/// let report = tree.shutdown().await;
/// assert_eq!(report.graceful, vec![handle.id()]);
/// assert!(report.killed.is_empty());
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Agents that settled before the deadline.
    pub graceful: Vec<AgentId>,
    /// Agents still alive at the deadline, killed.
    pub killed: Vec<AgentId>,
    /// Shutdown hooks that failed, panicked or were cut off by the deadline, per agent.
    pub hook_failures: Vec<(AgentId, String)>,
    /// How long the shutdown took.
    pub elapsed: Duration,
    /// The other nodes (trees across nodes, feature `cluster`) that did not report by the
    /// deadline: a remote child of the subtree placed there had not settled by it, so it
    /// was counted killed (unreachable), its mirrored subtree with it. Sorted, each once;
    /// empty without remote children.
    pub unreachable_nodes: Vec<String>,
}

/// How one agent's run under the shutdown ended, for [`classify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunEnd {
    /// It settled by itself (hooks done, children settled) before the deadline.
    Settled,
    /// Its run ended killed: by this deadline, an overlapping shutdown or `Tree::kill`.
    Killed,
}

/// Sorts the agents a shutdown reached into the report's lists, in the order given: the runs
/// it waited for, then those it settled at once (queued, or awaiting a restart decision), each
/// by how its run ended (one killed by `Tree::kill` or an overlapping shutdown is killed).
pub(crate) fn classify(
    runs: impl IntoIterator<Item = (AgentId, RunEnd)>,
    settled_at_once: impl IntoIterator<Item = (AgentId, RunEnd)>,
) -> (Vec<AgentId>, Vec<AgentId>) {
    let ends: Vec<(AgentId, RunEnd)> = runs.into_iter().chain(settled_at_once).collect();
    // Each list sized once (counted first): grown by pushes, 100,000 ids took glibc dozens
    // of milliseconds of consolidating its free lists, after the deadline.
    let killed_count = ends
        .iter()
        .filter(|(_, end)| *end == RunEnd::Killed)
        .count();
    let mut graceful = Vec::with_capacity(ends.len() - killed_count);
    let mut killed = Vec::with_capacity(killed_count);
    for (id, end) in ends {
        match end {
            RunEnd::Settled => graceful.push(id),
            RunEnd::Killed => killed.push(id),
        }
    }
    (graceful, killed)
}

/// How many runs make a shutdown large enough to free its bookkeeping in a task of its own.
const LARGE_SHUTDOWN: usize = 10_000;

/// Shuts down the subtree of `top` (the whole tree for the root) under `deadline`.
pub(crate) async fn run(registry: &Registry, top: AgentId, deadline: Instant) -> ShutdownReport {
    let started = Instant::now();

    // 1. Tell: one transaction marks and cancels the whole subtree, then every agent gets
    // the order at once.
    let (reports, mut hook_reports) = mpsc::unbounded_channel();
    let order = ShutdownOrder::new(crate::msg::Order {
        deadline,
        reports,
        killed: CancellationToken::new(),
        overdue: CancellationToken::new(),
        hooked: std::sync::Arc::default(),
    });
    // Should this shutdown be dropped before its kill, its hooks still end a little after the
    // deadline: hook tasks that can see it stop at `overdue`, and every agent that started
    // its hooks is told they are over (a hook blocking its thread never sees `overdue`; a
    // duplicate is ignored). Only then: a shutdown that is merely late to its kill (a loaded
    // machine) must not have its overrunning agents settle by themselves before it kills
    // them, or they would be reported graceful.
    let dropped = CancellationToken::new();
    let alive = dropped.clone().drop_guard();
    let backstop = {
        let order = order.clone();
        tokio::spawn(async move {
            dropped.cancelled().await;
            tokio::time::sleep_until(deadline + SHUTDOWN_KILL_WAIT).await;
            order.overdue.cancel();
            let hooked = std::mem::take(&mut *order.hooked.lock());
            for (_, agent) in hooked {
                let failures = vec!["shutdown hook did not finish before the deadline".to_owned()];
                let _ = agent.cast(AgentMsg::ShutdownHooksFinished { failures });
            }
        })
    };
    let start = registry.begin_shutdown(top, &order);
    let runs = start.waiting;

    // 2. Hooks under the deadline: the agents run them and settle bottom-up.
    let all_settled = async {
        if let Some(mut left) = start.left {
            let _ = left.wait_for(|&n| n == 0).await;
        }
    };
    let _ = tokio::time::timeout_at(deadline, all_settled).await;

    // 3. Kill: whatever is alive is settled killed in one transaction, owners included, and
    // the tops of it are killed: ractor stops every linked child of an exiting actor, so the
    // rest dies with them, signalled once. Any other actor of the runs still running is
    // killed too (ractor would skip one that is already stopping). A run started after the
    // shutdown began (a resume) is not the shutdown's. Their owners hear of it from ractor
    // (a killed actor's termination), by the one path a lost child takes.
    // From here the shutdown cancels the hook tasks itself: the backstop is not needed.
    backstop.abort();
    alive.disarm();
    // Hook tasks still running end with the kill token. Its cancel wakes every one of them
    // (100,000 agents: tens of milliseconds), so it runs as a task of its own, on another
    // worker while this one makes the kill transaction, and is awaited before returning. A
    // hook task that ends now sends no report: its agent is killed below, still stopping.
    let hooks_killed = order.killed.clone();
    let hooks_cut = tokio::spawn(async move { hooks_killed.cancel() });
    let KilledRuns {
        killed,
        tops,
        actors: cells,
        ended_killed,
    } = registry.kill_runs(&runs);
    kill_all(&tops);
    // The agents whose hooks started, for the report. Nothing more is owed to them (they were
    // killed or have settled), and the orders the registry keeps must not hold their actors.
    let hooked = std::mem::take(&mut *order.hooked.lock());
    let mut hooks = HookLedger::new(hooked.into_iter().map(|(id, _)| id).collect());
    drop(order);

    // 4. Wait: every actor of the shutdown's runs exits within the small bound, including one
    // that registered after the kill above (a run that was still starting), and so does any
    // actor of the subtree whose agent had settled but had not exited yet (a subtree killed
    // just before, whose actors ractor is still killing). A run that began after the shutdown
    // (a resume) is live, so it is neither killed nor waited for.
    let cut_off = deadline + SHUTDOWN_KILL_WAIT;
    wait_exits(&cells, cut_off).await;
    // Every run of the shutdown is settled now (killed, or by itself), so the settled agents
    // of the subtree whose actors are still alive include them all (an actor of a run that
    // registers after the kill finds its record settled and does not start).
    while Instant::now() < cut_off {
        let left = registry.settled_but_alive(top);
        if left.is_empty() {
            break;
        }
        kill_all(&left);
        wait_exits(&left, cut_off).await;
    }

    // 5. Report.
    while let Ok((id, failures)) = hook_reports.try_recv() {
        hooks.finished(id, failures);
    }
    let ends = runs.iter().zip(ended_killed).map(|(&(id, _), killed)| {
        let end = if killed {
            RunEnd::Killed
        } else {
            RunEnd::Settled
        };
        (id, end)
    });
    let at_once = start.settled_now.iter().map(|&id| {
        let end = if registry.status(id) == Some(agent_tree_protocol::AgentStatus::Killed) {
            RunEnd::Killed
        } else {
            RunEnd::Settled
        };
        (id, end)
    });
    let (graceful, killed_report) = classify(ends, at_once);
    // The hook tasks' cancel was only handed to another task (see step 3).
    let _ = hooks_cut.await;
    let hook_failures = hooks.failures(&runs, &killed);
    // The bookkeeping of a large shutdown is freed by a task of its own, after the report
    // is returned: glibc frees a large block by first consolidating its lists of small
    // freed chunks, which the kill just filled (tens of milliseconds for 100,000 agents).
    let bookkeeping = (cells, runs, killed, hooks);
    if bookkeeping.1.len() >= LARGE_SHUTDOWN {
        drop(tokio::spawn(async move { drop(bookkeeping) }));
    }
    ShutdownReport {
        hook_failures,
        graceful,
        killed: killed_report,
        elapsed: started.elapsed(),
        unreachable_nodes: Vec::new(),
    }
}

/// A set of agent ids as a bitmap (a registry's ids are dense): membership in O(1) without
/// hashing, for the 100,000-agent reports.
struct IdSet(Vec<bool>);

impl IdSet {
    fn new(ids: &[AgentId]) -> Self {
        let index = |id: &AgentId| usize::try_from(id.get()).unwrap_or(usize::MAX);
        let len = ids
            .iter()
            .map(index)
            .filter(|&i| i != usize::MAX)
            .max()
            .map_or(0, |m| m + 1);
        let mut bits = vec![false; len];
        for i in ids.iter().map(index).filter(|&i| i < len) {
            bits[i] = true;
        }
        IdSet(bits)
    }

    fn contains(&self, id: &AgentId) -> bool {
        usize::try_from(id.get())
            .ok()
            .and_then(|i| self.0.get(i))
            .copied()
            .unwrap_or(false)
    }
}

/// What the agents' shutdown hooks reported, for the report: failures in order, and a
/// failure for each agent killed at the deadline while its hooks still ran.
#[derive(Debug, Default)]
pub(crate) struct HookLedger {
    started: Vec<AgentId>,
    finished: Vec<(AgentId, Vec<String>)>,
}

impl HookLedger {
    /// A ledger of the agents whose hooks `started`.
    pub(crate) fn new(started: Vec<AgentId>) -> Self {
        HookLedger {
            started,
            finished: Vec::new(),
        }
    }

    /// `id`'s hooks finished (or hit the deadline) with `failures`.
    pub(crate) fn finished(&mut self, id: AgentId, failures: Vec<String>) {
        self.finished.push((id, failures));
    }

    /// Hook failures of the shutdown's agents, in the order of `runs`.
    ///
    /// Linear in the agents: a shutdown of 100,000 agents whose hooks all hang reports in
    /// milliseconds.
    pub(crate) fn failures(
        &self,
        runs: &[(AgentId, u32)],
        killed: &[AgentId],
    ) -> Vec<(AgentId, String)> {
        let finished: HashMap<AgentId, &Vec<String>> =
            self.finished.iter().map(|(id, f)| (*id, f)).collect();
        let started = IdSet::new(&self.started);
        let killed = IdSet::new(killed);
        let of = |id: &AgentId| -> Option<HookFailures<'_>> {
            match finished.get(id) {
                Some(failures) => Some(HookFailures::Reported(failures)),
                None if killed.contains(id) && started.contains(id) => Some(HookFailures::CutOff),
                None => None,
            }
        };
        // Sized once (counted first): see `classify`.
        let count = runs
            .iter()
            .filter_map(|(id, _)| of(id))
            .map(|f| f.len())
            .sum();
        let mut out = Vec::with_capacity(count);
        for (id, _) in runs {
            match of(id) {
                Some(HookFailures::Reported(failures)) => {
                    out.extend(failures.iter().map(|f| (*id, f.clone())));
                }
                Some(HookFailures::CutOff) => out.push((
                    *id,
                    "shutdown hook still running at the deadline; killed".to_owned(),
                )),
                None => {}
            }
        }
        out
    }
}

/// One agent's hook failures, for [`HookLedger::failures`].
enum HookFailures<'a> {
    /// As its hooks reported them.
    Reported(&'a [String]),
    /// Still running at the deadline: killed.
    CutOff,
}

impl HookFailures<'_> {
    fn len(&self) -> usize {
        match self {
            HookFailures::Reported(failures) => failures.len(),
            HookFailures::CutOff => 1,
        }
    }
}

fn kill_all(cells: &[ActorCell]) {
    for cell in cells {
        if cell.get_status() != ActorStatus::Stopped {
            cell.kill();
        }
    }
}

async fn wait_exits(cells: &[ActorCell], cut_off: Instant) {
    let exits = async {
        for cell in cells {
            let _ = cell.wait(None).await;
        }
    };
    let _ = tokio::time::timeout_at(cut_off, exits).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_keeps_order_and_sorts_immediate_settles_by_how_they_ended() {
        let a = |n| AgentId::new(n);
        let (graceful, killed) = classify(
            [
                (a(1), RunEnd::Settled),
                (a(2), RunEnd::Killed),
                (a(3), RunEnd::Settled),
            ],
            [(a(4), RunEnd::Settled), (a(5), RunEnd::Killed)],
        );
        assert_eq!(graceful, vec![a(1), a(3), a(4)]);
        assert_eq!(killed, vec![a(2), a(5)]);
    }
}
