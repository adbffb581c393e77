//! Model calls in flight are bounded per model inside the tree (`max_model_calls`): with a
//! bound, no more calls of one model name run at once, whatever the number of agents; each
//! model name has its own bound; an agent waiting for its place is aborted at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::catalog;
use crate::support::harness::tree;
use crate::support::spawn_admitted;
use agent_tree::prelude::*;
use agent_tree::{BoxFuture, ModelError, ModelRequest, ModelResponse};
use parking_lot::Mutex;
use tokio::sync::Notify;

/// Counts the calls in flight, per model name, and the most seen at once. A call of type
/// `hanger` never returns; any other takes `hold` (or yields a few times when `hold` is
/// zero) and answers.
/// Written by hand: it counts the calls in flight, which a call log does not.
#[derive(Clone, Default)]
struct Counting {
    inner: Arc<Counts>,
    hold: Duration,
}

#[derive(Default)]
struct Counts {
    /// Calls in flight, per model name.
    in_flight: Mutex<std::collections::HashMap<Option<String>, usize>>,
    /// The most calls in flight at once of one model name, and of all together.
    peak_per_model: AtomicUsize,
    peak_all: AtomicUsize,
    calls: AtomicUsize,
    /// Told when a call starts.
    started: Notify,
}

/// Counts a call out of flight when dropped (returned or cancelled).
struct InFlight(Arc<Counts>, Option<String>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(n) = self.0.in_flight.lock().get_mut(&self.1) {
            *n -= 1;
        }
    }
}

impl Counting {
    fn holding(hold: Duration) -> Self {
        Counting {
            hold,
            ..Counting::default()
        }
    }

    fn calls(&self) -> usize {
        self.inner.calls.load(Ordering::SeqCst)
    }

    fn peaks(&self) -> (usize, usize) {
        (
            self.inner.peak_per_model.load(Ordering::SeqCst),
            self.inner.peak_all.load(Ordering::SeqCst),
        )
    }
}

impl Model for Counting {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        let counts = self.inner.clone();
        let model = request.model().map(str::to_owned);
        let hold = self.hold;
        Box::pin(async move {
            counts.calls.fetch_add(1, Ordering::SeqCst);
            let guard = {
                let mut in_flight = counts.in_flight.lock();
                let mine = in_flight.entry(model.clone()).or_default();
                *mine += 1;
                counts.peak_per_model.fetch_max(*mine, Ordering::SeqCst);
                let all = in_flight.values().sum();
                counts.peak_all.fetch_max(all, Ordering::SeqCst);
                InFlight(counts.clone(), model)
            };
            counts.started.notify_one();
            if request.agent_type() == "hanger" {
                std::future::pending::<()>().await;
            }
            if hold.is_zero() {
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
            } else {
                tokio::time::sleep(hold).await;
            }
            drop(guard);
            Ok(ModelResponse::text("done"))
        })
    }
}

fn named(name: &str, model: Option<&str>) -> AgentDefinition {
    let mut definition = AgentDefinition::new(name, "You work.");
    definition.model = model.map(str::to_owned);
    definition
}

async fn build(model: &Counting, bound: Option<usize>) -> Tree {
    let catalog = catalog([
        named("worker", None),
        named("a", Some("model-a")),
        named("b", Some("model-b")),
        named("hanger", None),
    ]);
    let mut config = TreeConfig::default();
    if let Some(bound) = bound {
        config = config.with_max_model_calls(bound);
    }
    tree(model.clone(), catalog, config).await
}

/// Spawns one top-level agent of each type and waits for every outcome.
async fn run_all(tree: &Tree, types: &[&str]) -> Vec<Outcome> {
    let mut handles = Vec::new();
    for agent_type in types {
        handles.push(spawn_admitted(tree, SpawnRequest::new(*agent_type, "go").background()).await);
    }
    let mut outcomes = Vec::new();
    for handle in &mut handles {
        outcomes.push(handle.outcome().await);
    }
    outcomes
}

/// With a bound of 1, four agents of one model take their turns one at a time: never two
/// calls in flight, each call waited for inside the tree (four 1 s calls take 4 s).
#[tokio::test(start_paused = true)]
async fn a_bound_of_one_lets_one_call_of_a_model_run_at_a_time() {
    let model = Counting::holding(Duration::from_secs(1));
    let tree = build(&model, Some(1)).await;
    let started = tokio::time::Instant::now();
    let outcomes = run_all(&tree, &["worker"; 4]).await;
    assert!(outcomes.iter().all(Outcome::is_completed), "{outcomes:?}");
    assert_eq!(model.calls(), 4);
    assert_eq!(model.peaks(), (1, 1));
    assert_eq!(started.elapsed(), Duration::from_secs(4));

    // Unbounded (the default), the four run at once.
    let model = Counting::holding(Duration::from_secs(1));
    let tree = build(&model, None).await;
    let started = tokio::time::Instant::now();
    run_all(&tree, &["worker"; 4]).await;
    assert_eq!(model.peaks(), (4, 4));
    assert_eq!(started.elapsed(), Duration::from_secs(1));
}

/// The bound is per model name: two models bounded to 1 each run one call at a time each,
/// two in flight in all.
#[tokio::test(start_paused = true)]
async fn each_model_name_has_its_own_bound() {
    let model = Counting::holding(Duration::from_secs(1));
    let tree = build(&model, Some(1)).await;
    let started = tokio::time::Instant::now();
    let outcomes = run_all(&tree, &["a", "b", "a", "b"]).await;
    assert!(outcomes.iter().all(Outcome::is_completed), "{outcomes:?}");
    assert_eq!(model.peaks(), (1, 2));
    assert_eq!(started.elapsed(), Duration::from_secs(2));
}

/// An agent waiting for its place among a model's calls is aborted at once: its wait ends
/// with its turn, its model is never called, and the call holding the place runs on.
#[tokio::test(start_paused = true)]
async fn an_abort_ends_a_wait_for_a_model_call_at_once() {
    let model = Counting::holding(Duration::from_secs(1));
    let tree = build(&model, Some(1)).await;
    let hanger = tree.spawn(SpawnRequest::new("hanger", "go")).await.unwrap();
    model.inner.started.notified().await;
    let mut waiting = tree.spawn(SpawnRequest::new("worker", "go")).await.unwrap();
    // Time passes: the worker still waits, its model not called.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(model.calls(), 1);
    tree.abort(waiting.id()).unwrap();
    let outcome = tokio::time::timeout(Duration::from_millis(1), waiting.outcome())
        .await
        .expect("the abort ends the wait at once");
    assert_eq!(outcome.status, AgentStatus::Aborted, "{outcome:?}");
    assert_eq!(
        model.calls(),
        1,
        "the aborted agent's model was never called"
    );
    assert_eq!(
        tree.record(hanger.id()).unwrap().status,
        AgentStatus::Running
    );
    // The place is the hanger's until it goes; then the next agent runs.
    tree.abort(hanger.id()).unwrap();
    let outcome = tree.run(SpawnRequest::new("worker", "go")).await.unwrap();
    assert!(outcome.is_completed(), "{outcome:?}");
    assert_eq!(model.peaks(), (1, 1));
    tree.shutdown().await;
}

/// On worker threads, many times: six agents of one model under a bound of 2 never have
/// more than 2 calls in flight, all complete, and an agent aborted while it may be waiting
/// or calling ends without breaking the bound for the rest.
#[test]
fn the_bound_holds_on_worker_threads() {
    let runtime = crate::support::races::runtime_on(2);
    for round in 0..40u32 {
        runtime.block_on(async {
            let model = Counting::default();
            let tree = build(&model, Some(2)).await;
            let mut handles = Vec::new();
            for _ in 0..6 {
                let request = SpawnRequest::new("worker", "go").background();
                handles.push(tree.spawn(request).await.unwrap());
            }
            let aborted = handles[(round % 6) as usize].id();
            for _ in 0..(round % 5) {
                tokio::task::yield_now().await;
            }
            let _ = tree.abort(aborted);
            for handle in &mut handles {
                let outcome = tokio::time::timeout(Duration::from_secs(10), handle.outcome())
                    .await
                    .unwrap_or_else(|_| panic!("round {round}: {} never ended", handle.id()));
                if handle.id() != aborted {
                    assert!(outcome.is_completed(), "round {round}: {outcome:?}");
                }
            }
            let (per_model, _) = model.peaks();
            assert!(per_model <= 2, "round {round}: {per_model} calls in flight");
            tree.shutdown().await;
        });
    }
}
