//! Supervision experiments: run a tree under a fault plan for N seeded trials in virtual
//! time, and collect per trial the restarts per agent, escalations, time to recover, tokens
//! spent and the final outcome, as rows (serde, CSV).
//!
//! # Invariants
//!
//! * Each trial runs on a fresh current-thread runtime with a paused clock, so a trial's
//!   virtual time is its own, and the same seed gives the same row every run (the tree's
//!   decisions, the runtime's retry jitter and the test kit's seeded faults are all drawn
//!   from seeds, never from a clock or the OS).
//! * A trial that does not settle within [`TRIAL_LIMIT`] of virtual time is recorded as it
//!   stands (status `running`), never hangs the experiment.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use agent_tree_protocol::{AgentId, AgentStatus, EndReason, EventKind, SpawnRequest};
use serde::{Deserialize, Serialize};

use crate::tree::Tree;
use crate::util::BoxFuture;

/// The most virtual time one trial may take before it is recorded as it stands.
pub const TRIAL_LIMIT: Duration = Duration::from_secs(24 * 3600);

/// What one trial did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TrialRow {
    /// The trial's number, from 0.
    pub trial: u32,
    /// The seed it was built with.
    pub seed: u64,
    /// Restarts in the whole tree.
    pub restarts: u64,
    /// Restarts of each agent that was restarted.
    pub restarts_per_agent: BTreeMap<AgentId, u64>,
    /// Agents that failed because a child's restart intensity was exceeded (each counted
    /// once, however many of its runs did).
    pub escalations: u64,
    /// Virtual milliseconds from the first failure in the tree to the top agent's end, when
    /// something failed and the top agent still completed.
    pub recover_ms: Option<u64>,
    /// Tokens (input + output) the whole tree used.
    pub tokens: u64,
    /// The top agent's final status.
    pub status: AgentStatus,
    /// Why it ended (`None` if it had not when the trial stopped).
    pub reason: Option<EndReason>,
    /// Virtual milliseconds the trial took until the top agent ended.
    pub elapsed_ms: u64,
}

/// Runs `trials` trials: trial `i` is built by `setup(seed + i)`, which returns the tree and
/// the request of the top agent to run; the trial waits for that agent's outcome, shuts the
/// tree down and records a [`TrialRow`].
///
/// Call it from synchronous code (a `main`, a plain `#[test]`): each trial builds its own
/// paused runtime.
///
/// # Panics
///
/// If a trial's top agent cannot be spawned.
///
/// ```
/// use agent_tree_actors::testkit::{experiment, FaultyModel, Script, ScriptedModel, Turn};
/// use agent_tree_actors::{Catalog, ModelError, Tree};
/// use agent_tree_protocol::{AgentDefinition, SpawnRequest};
///
/// let rows = experiment::run_trials(5, 100, |seed| Box::pin(async move {
///     let model = FaultyModel::new(ScriptedModel::new().script("w", Script::new([Turn::answer("ok")])))
///         .fail_with_probability(0.5, seed, ModelError::new("flaky"));
///     let catalog = Catalog::new([AgentDefinition::new("w", "")]).unwrap();
///     let tree = Tree::builder().catalog(catalog).model(model).build().await.unwrap();
///     (tree, SpawnRequest::new("w", "go"))
/// }));
/// assert_eq!(rows.len(), 5);
/// assert_eq!(rows, experiment::run_trials(5, 100, |seed| Box::pin(async move {
///     let model = FaultyModel::new(ScriptedModel::new().script("w", Script::new([Turn::answer("ok")])))
///         .fail_with_probability(0.5, seed, ModelError::new("flaky"));
///     let catalog = Catalog::new([AgentDefinition::new("w", "")]).unwrap();
///     let tree = Tree::builder().catalog(catalog).model(model).build().await.unwrap();
///     (tree, SpawnRequest::new("w", "go"))
/// })));
/// let csv = experiment::to_csv(&rows);
/// assert!(csv.starts_with("trial,seed,restarts,"));
/// ```
pub fn run_trials<F>(trials: u32, seed: u64, setup: F) -> Vec<TrialRow>
where
    F: Fn(u64) -> BoxFuture<'static, (Tree, SpawnRequest)>,
{
    (0..trials)
        .map(|trial| {
            let seed = seed.wrapping_add(u64::from(trial));
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .expect("a trial's runtime starts");
            runtime.block_on(run_trial(trial, seed, setup(seed)))
        })
        .collect()
}

async fn run_trial(
    trial: u32,
    seed: u64,
    setup: BoxFuture<'static, (Tree, SpawnRequest)>,
) -> TrialRow {
    let (tree, request) = setup.await;
    let mut events = tree.subscribe();
    let started = tokio::time::Instant::now();
    let mut top = tree
        .spawn(request)
        .await
        .expect("the trial's top agent spawns");
    let outcome = tokio::time::timeout(TRIAL_LIMIT, top.outcome()).await.ok();
    let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let snapshot = tree.snapshot();
    tree.shutdown().await;
    let mut row = TrialRow {
        trial,
        seed,
        restarts: 0,
        restarts_per_agent: BTreeMap::new(),
        escalations: 0,
        recover_ms: None,
        tokens: snapshot.root().map_or(0, |r| {
            r.subtree
                .input_tokens
                .saturating_add(r.subtree.output_tokens)
        }),
        status: outcome.as_ref().map_or(AgentStatus::Running, |o| o.status),
        reason: outcome.as_ref().map(|o| o.reason),
        elapsed_ms,
    };
    let mut first_failure = None;
    let mut top_end = None;
    // An agent restarted and escalating again is one agent that escalated.
    let mut escalated = std::collections::BTreeSet::new();
    for event in events.drain() {
        match &event.kind {
            EventKind::Restarted { .. } => {
                row.restarts += 1;
                *row.restarts_per_agent.entry(event.agent).or_default() += 1;
            }
            EventKind::Failed { outcome } | EventKind::Killed { outcome } => {
                // What the trial's own shutdown ends after the top agent's end is no failure
                // it recovered from.
                if top_end.is_none() {
                    first_failure.get_or_insert(event.at_ms);
                }
                if outcome.reason == EndReason::Escalated && escalated.insert(event.agent) {
                    row.escalations += 1;
                }
            }
            _ => {}
        }
        if event.agent == top.id() && event.kind.outcome().is_some() {
            top_end = Some(event.at_ms);
        }
    }
    if let (Some(failed), Some(end), AgentStatus::Completed) = (first_failure, top_end, row.status)
    {
        row.recover_ms = Some(end.saturating_sub(failed));
    }
    row
}

/// The rows as CSV: a header, then one line per trial (`restarts_per_agent` as
/// `a2:1 a3:2`, empty fields for `None`).
pub fn to_csv(rows: &[TrialRow]) -> String {
    let mut csv = String::from(
        "trial,seed,restarts,restarts_per_agent,escalations,recover_ms,tokens,status,reason,elapsed_ms\n",
    );
    for row in rows {
        let per_agent: Vec<String> = row
            .restarts_per_agent
            .iter()
            .map(|(agent, n)| format!("{agent}:{n}"))
            .collect();
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{},{},{},{}",
            row.trial,
            row.seed,
            row.restarts,
            per_agent.join(" "),
            row.escalations,
            row.recover_ms.map(|ms| ms.to_string()).unwrap_or_default(),
            row.tokens,
            row.status,
            row.reason.map(|r| r.to_string()).unwrap_or_default(),
            row.elapsed_ms,
        );
    }
    csv
}
