//! Randomized: an agent aborted before or while it is being constructed never makes a model
//! call and never has children — 10,400 trials under paused time, split over four test
//! functions (each ≥ 2,500 trials) so they run in parallel and each stays well under a
//! few seconds in a debug build.
//!
//! Each trial builds one agent ("target", whose first model turn would spawn a child) and
//! aborts it at a random point of its construction:
//!
//! * right after `Tree::spawn` returns, before the actor's first message;
//! * during its slow async start hook (`on_start`, a random virtual delay of 1–40 ms), at a
//!   random virtual instant and after a random number of yields;
//! * through its owner's abort, during its start hook;
//! * through a shutdown of its own subtree or of its owner's, during its start hook;
//! * through a whole-tree shutdown during its start hook (one tree per trial).
//!
//! and asserts that the aborted agents made no model call after the abort (the target none
//! at all), that the target has no children and no child record was ever admitted, and that
//! it settled `aborted`.
//!
//! No user code runs inside a spawn any more (a tool's `spec()` is asked for once, when the
//! tool is added, not per agent), so an abort between admission and `pre_start` can only come
//! from another thread: `races_mt` runs those orders on worker threads.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{EventKind, ToolCall};
use agent_tree::testkit::{EventProbe, FnModel};
use agent_tree::{AGENT_TOOL, HookContext, HookError};
use parking_lot::Mutex;
use serde_json::json;

use crate::support::harness::{GUARD, Rng, started};
use crate::support::{catalog, delegator, leaf, spawn_admitted};

/// A tiny model: an owner spawns a target, a target spawns a child; every later turn
/// hangs. Its call log counts the calls per agent.
fn tiny() -> FnModel {
    FnModel::new(|request: ModelRequest| async move {
        let spawn = |agent_type: &str| {
            Ok(ModelResponse::calls(vec![ToolCall::new(
                "c1",
                AGENT_TOOL,
                json!({ "agent_type": agent_type, "prompt": "go", "background": true }),
            )]))
        };
        match (request.agent_type(), request.turn) {
            ("owner", 1) => spawn("target"),
            ("target", 1) => spawn("child"),
            _ => std::future::pending().await,
        }
    })
}

/// How many model calls `agent` made.
fn calls_of(model: &FnModel, agent: AgentId) -> u32 {
    model.of(agent).len() as u32
}

/// One tree and everything a trial needs to drive it.
struct Bench {
    tree: Arc<Tree>,
    model: FnModel,
    /// Start-hook delay per agent (none: the hook returns at once).
    delays: Arc<Mutex<HashMap<AgentId, Duration>>>,
    /// The next id the tree will admit.
    next: u64,
    hooked: bool,
}

impl Bench {
    async fn new(hooked: bool) -> Self {
        let model = tiny();
        let delays: Arc<Mutex<HashMap<AgentId, Duration>>> = Arc::default();
        let mut builder = Tree::builder()
            .config(TreeConfig::default().with_max_total_agents(64))
            .catalog(catalog([
                delegator("owner", &["target"]),
                delegator("target", &["child"]),
                leaf("child"),
            ]))
            .model(model.clone());
        if hooked {
            let delays = delays.clone();
            builder = builder
                .on_start(move |ctx: HookContext| {
                    let delay = delays.lock().get(&ctx.agent).copied();
                    async move {
                        if let Some(delay) = delay {
                            tokio::time::sleep(delay).await;
                        }
                        Ok::<(), HookError>(())
                    }
                })
                .on_shutdown(|_ctx: HookContext| async move {
                    tokio::task::yield_now().await;
                    Ok::<(), HookError>(())
                });
        }
        let tree = Arc::new(builder.build().await.expect("the tree builds"));
        Bench {
            tree,
            model,
            delays,
            next: 1,
            hooked,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Mode {
    /// Top level: aborted right after `Tree::spawn` returns.
    RightAfterSpawn,
    /// Top level: aborted during its start hook.
    DuringStartHook,
    /// Under an owner: the owner is aborted during the target's start hook.
    OwnerAbortedDuringStartHook,
    /// Top level: its subtree is shut down during its start hook.
    ShutdownOfItself,
    /// Under an owner: the owner's subtree is shut down during the target's start hook.
    ShutdownOfItsOwner,
    /// Top level: the whole tree is shut down during its start hook.
    TreeShutdown,
}

impl Mode {
    fn nested(self) -> bool {
        matches!(
            self,
            Mode::OwnerAbortedDuringStartHook | Mode::ShutdownOfItsOwner
        )
    }

    fn needs_hook(self) -> bool {
        matches!(
            self,
            Mode::DuringStartHook
                | Mode::OwnerAbortedDuringStartHook
                | Mode::ShutdownOfItself
                | Mode::ShutdownOfItsOwner
                | Mode::TreeShutdown
        )
    }
}

async fn guarded<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(GUARD, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out: {what}"),
    }
}

/// Sleeps a random virtual time shorter than `delay`, then yields a random number of times.
async fn somewhere_within(rng: &mut Rng, delay: Duration) {
    let ms = u64::try_from(delay.as_millis()).expect("small");
    let at = rng.below(ms);
    if at > 0 {
        tokio::time::sleep(Duration::from_millis(at)).await;
    }
    for _ in 0..rng.below(4) {
        tokio::task::yield_now().await;
    }
}

/// Runs one trial; returns the target's status at the moment of the abort.
async fn trial(bench: &mut Bench, mode: Mode, rng: &mut Rng, seed: u64) -> AgentStatus {
    let ctx = format!("trial {seed} {mode:?}");
    let tree = bench.tree.clone();
    let (owner, target) = if mode.nested() {
        (Some(AgentId::new(bench.next)), AgentId::new(bench.next + 1))
    } else {
        (None, AgentId::new(bench.next))
    };
    let delay = if mode.needs_hook() {
        assert!(bench.hooked);
        Duration::from_millis(rng.range(1, 40))
    } else if bench.hooked {
        Duration::from_millis(rng.range(1, 40))
    } else {
        Duration::ZERO
    };
    bench.delays.lock().insert(target, delay);
    // Model calls of each aborted agent at the moment of its abort.
    let mut at_abort: Vec<(AgentId, u32)> = Vec::new();
    let status_at_abort: AgentStatus;
    let mut events = mode.nested().then(|| EventProbe::new(&tree));

    match mode {
        Mode::RightAfterSpawn => {
            spawn_admitted(&tree, SpawnRequest::new("target", "go")).await;
            status_at_abort = tree.record(target).expect("rec").status;
            at_abort.push((target, calls_of(&bench.model, target)));
            tree.abort(target).expect("exists");
        }
        Mode::DuringStartHook | Mode::ShutdownOfItself => {
            spawn_admitted(&tree, SpawnRequest::new("target", "go")).await;
            somewhere_within(rng, delay).await;
            status_at_abort = tree.record(target).expect("rec").status;
            at_abort.push((target, calls_of(&bench.model, target)));
            if mode == Mode::ShutdownOfItself {
                let report = guarded(&ctx, tree.shutdown_agent(target))
                    .await
                    .expect("exists");
                assert_eq!(report.graceful, [target], "{ctx}: {report:?}");
            } else {
                tree.abort(target).expect("exists");
            }
        }
        Mode::OwnerAbortedDuringStartHook | Mode::ShutdownOfItsOwner => {
            let owner = owner.expect("nested");
            spawn_admitted(&tree, SpawnRequest::new("owner", "go")).await;
            let events = events.as_mut().expect("subscribed");
            events
                .expect_event("the target's start", started(target))
                .await;
            somewhere_within(rng, delay).await;
            status_at_abort = tree.record(target).expect("rec").status;
            at_abort.push((owner, calls_of(&bench.model, owner)));
            at_abort.push((target, calls_of(&bench.model, target)));
            if mode == Mode::ShutdownOfItsOwner {
                let report = guarded(&ctx, tree.shutdown_agent(owner))
                    .await
                    .expect("exists");
                assert_eq!(report.graceful.len(), 2, "{ctx}: {report:?}");
                assert!(report.killed.is_empty(), "{ctx}: {report:?}");
            } else {
                tree.abort(owner).expect("exists");
            }
        }
        Mode::TreeShutdown => {
            spawn_admitted(&tree, SpawnRequest::new("target", "go")).await;
            somewhere_within(rng, delay).await;
            status_at_abort = tree.record(target).expect("rec").status;
            at_abort.push((target, calls_of(&bench.model, target)));
            let report = guarded(&ctx, tree.shutdown()).await;
            assert_eq!(report.graceful, [target], "{ctx}: {report:?}");
            assert!(tree.alive_actors().is_empty(), "{ctx}");
        }
    }

    guarded(&ctx, tree.idle()).await;

    for &(agent, calls) in &at_abort {
        assert_eq!(
            calls_of(&bench.model, agent),
            calls,
            "{ctx}: {agent} called the model after its abort"
        );
    }
    assert_eq!(
        calls_of(&bench.model, target),
        0,
        "{ctx}: the target called the model"
    );
    let record = tree.record(target).expect("record");
    assert!(record.children.is_empty(), "{ctx}: the target has children");
    assert_eq!(record.status, AgentStatus::Aborted, "{ctx}: {record:?}");
    // No child record was ever admitted for it: the trial added exactly its own agents.
    let added = if mode.nested() { 2 } else { 1 };
    assert!(
        tree.record(AgentId::new(bench.next + added)).is_none(),
        "{ctx}: an extra agent was admitted"
    );
    assert!(
        tree.record(AgentId::new(bench.next + added - 1)).is_some(),
        "{ctx}: the trial's agents exist"
    );
    if let Some(mut events) = events {
        assert!(
            !events
                .drain()
                .iter()
                .any(|e| e.agent == target && matches!(e.kind, EventKind::UsageReported { .. })),
            "{ctx}"
        );
    }
    bench.next += added;
    bench.delays.lock().remove(&target);
    status_at_abort
}

/// Runs `n` trials of the given modes (chosen at random per trial) on one tree per `batch`
/// trials; returns how many trials aborted the target in each status.
async fn run(seed: u64, n: usize, modes: &[Mode], hooked: bool) -> HashMap<AgentStatus, usize> {
    const BATCH: usize = 500;
    let mut rng = Rng::new(seed);
    let mut seen: HashMap<AgentStatus, usize> = HashMap::new();
    let mut bench = Bench::new(hooked).await;
    for i in 0..n {
        if i % BATCH == 0 && i > 0 {
            let old = std::mem::replace(&mut bench, Bench::new(hooked).await);
            guarded("batch shutdown", old.tree.shutdown()).await;
        }
        let mode = modes[rng.below(modes.len() as u64) as usize];
        let status = trial(&mut bench, mode, &mut rng, seed ^ i as u64).await;
        *seen.entry(status).or_default() += 1;
    }
    guarded("final shutdown", bench.tree.shutdown()).await;
    assert!(bench.tree.alive_actors().is_empty());
    seen
}

/// How many of the runs `seen` counts ended with the agent `running` (the abort came after
/// its session existed).
fn running(seen: &HashMap<AgentStatus, usize>) -> usize {
    seen.get(&AgentStatus::Running).copied().unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn random_aborts_while_a_top_level_agent_is_constructed() {
    let started = std::time::Instant::now();
    // Without start hooks: the points around `Tree::spawn`.
    let bare = run(0xA11CE, 1_300, &[Mode::RightAfterSpawn], false).await;
    // With slow start hooks: those points again, and the hook's whole window.
    let hooked = run(
        0xB0B,
        1_300,
        &[Mode::RightAfterSpawn, Mode::DuringStartHook],
        true,
    )
    .await;
    // `Tree::spawn` returns once the actor's `pre_start` ran: the session exists.
    assert_eq!(
        bare.get(&AgentStatus::Running).copied(),
        Some(1_300),
        "{bare:?}"
    );
    assert!(running(&hooked) > 300, "{hooked:?}");
    eprintln!(
        "top level: bare {bare:?} hooked {hooked:?} in {:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn random_owner_aborts_while_the_agent_starts() {
    let started = std::time::Instant::now();
    let hooked = run(0xD00D, 2_600, &[Mode::OwnerAbortedDuringStartHook], true).await;
    assert!(running(&hooked) > 300, "{hooked:?}");
    eprintln!("nested: hooked {hooked:?} in {:?}", started.elapsed());
}

#[tokio::test(start_paused = true)]
async fn random_subtree_shutdowns_while_the_agent_is_constructed() {
    let started = std::time::Instant::now();
    let seen = run(
        0x5EED,
        2_600,
        &[Mode::ShutdownOfItself, Mode::ShutdownOfItsOwner],
        true,
    )
    .await;
    eprintln!("subtree shutdowns: {seen:?} in {:?}", started.elapsed());
}

#[tokio::test(start_paused = true)]
async fn random_tree_shutdowns_while_the_agent_is_constructed() {
    let started = std::time::Instant::now();
    let mut rng = Rng::new(0x7EE);
    let mut seen: HashMap<AgentStatus, usize> = HashMap::new();
    for i in 0..2_600u64 {
        // One tree per trial: a shutdown ends a tree.
        let mut bench = Bench::new(true).await;
        let status = trial(&mut bench, Mode::TreeShutdown, &mut rng, i).await;
        *seen.entry(status).or_default() += 1;
    }
    eprintln!("tree shutdowns: {seen:?} in {:?}", started.elapsed());
}
