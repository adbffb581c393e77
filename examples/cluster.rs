//! Trees across nodes under failure: each trial starts a worker node as a child process (this
//! same program, `--worker`), runs a remote `runner` from an owner tree on this node, and at
//! a random moment kills it (`kill -9`), freezes it within or beyond its lease (SIGSTOP,
//! then SIGCONT), shuts the tree down (with the worker running, or frozen), or lets it be. It checks, and prints exactly:
//!
//! `trials=<n> lost_usage=<n> orphans_past_lease=<n> late_shutdowns=<n> wrong_outcomes=<n>`
//!
//! * `lost_usage`: usage deltas the owner's node acknowledged that are missing from the root's
//!   totals; and, when the worker was left alone, frozen within its lease or shut down
//!   gracefully, any delta it billed that is missing.
//! * `orphans_past_lease`: agents still running on the worker after the lease plus the grace
//!   with no reachable owner.
//! * `late_shutdowns`: shutdowns returning after their deadline plus the kill wait (every
//!   trial's, with the worker running, frozen, or gone).
//! * `wrong_outcomes`: remote agents (the runner, and its helper as the owner's records
//!   mirror it) whose settled status or cause differs from what the trial caused.
//!
//! Run: `cargo run --release --features cluster --example cluster -- --trials 50 [--seed S]`.

#[path = "cluster/worker.rs"]
mod worker;

use std::time::{Duration, Instant};

use agent_tree::cluster::Node;
use agent_tree::protocol::{AgentDefinition, AgentId, AgentStatus, EndReason, SpawnRequest};
use agent_tree::testkit::ScriptedModel;
use agent_tree::{Catalog, SHUTDOWN_KILL_WAIT, Tree, TreeConfig};
use worker::{WorkerArgs, WorkerProcess};

const LEASE_MS: u64 = 1_000;
const GRACE_MS: u64 = 400;
/// The remote task: the runner (two turns of 12 tokens) delegates to a helper on the worker
/// (six turns of 12 tokens, a pause of 60 ms between them), so the subtree on the worker is
/// two agents.
const TASK: &str = "delegate 6 60";
const TASK_TOKENS: u64 = (2 + 6) * 12;
const TASK_ANSWER: &str = "lead done";
/// The owner tree's shutdown grace: the one deadline a shutdown must return by (plus the
/// kill wait), frozen worker or not.
const SHUTDOWN_GRACE_MS: u64 = 1_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    None,
    Kill,
    FreezeWithin,
    FreezeBeyond,
    Shutdown,
    /// The tree shut down while the worker is frozen: the one deadline must hold.
    ShutdownFrozen,
}

/// xorshift, seeded: a run is repeatable by its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[derive(Debug, Default)]
struct Tally {
    trials: u64,
    lost_usage: u64,
    orphans_past_lease: u64,
    late_shutdowns: u64,
    wrong_outcomes: u64,
    /// Per fault: trials, and those where it landed while the remote run was live.
    faults: std::collections::BTreeMap<String, (u64, u64)>,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    if args.first().map(String::as_str) == Some("--worker") {
        let worker = WorkerArgs::parse(&args[1..]).expect("worker arguments");
        runtime.block_on(worker::run_worker(worker));
        return;
    }
    let value = |flag: &str, default: u64| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .map(|v| {
                v.parse()
                    .unwrap_or_else(|_| panic!("{flag} takes a number"))
            })
            .unwrap_or(default)
    };
    let (trials, seed) = (value("--trials", 20), value("--seed", 1));
    let tally = runtime.block_on(run(trials, seed));
    // What was exercised, on stderr: the checked line stays the only line on stdout.
    for (fault, (n, live)) in &tally.faults {
        eprintln!("{fault}: {n} trials, {live} while the remote run was live");
    }
    println!(
        "trials={} lost_usage={} orphans_past_lease={} late_shutdowns={} wrong_outcomes={}",
        tally.trials,
        tally.lost_usage,
        tally.orphans_past_lease,
        tally.late_shutdowns,
        tally.wrong_outcomes
    );
    let clean = tally.lost_usage == 0
        && tally.orphans_past_lease == 0
        && tally.late_shutdowns == 0
        && tally.wrong_outcomes == 0;
    if !clean {
        std::process::exit(1);
    }
}

async fn run(trials: u64, seed: u64) -> Tally {
    let port = worker::free_port();
    let owner = Node::start(worker::node_config("owner", port, LEASE_MS, GRACE_MS))
        .await
        .expect("the owner's node starts");
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut tally = Tally::default();
    for trial in 0..trials {
        let fault = match rng.below(6) {
            0 => Fault::None,
            1 => Fault::Kill,
            2 => Fault::FreezeWithin,
            3 => Fault::FreezeBeyond,
            4 => Fault::Shutdown,
            _ => Fault::ShutdownFrozen,
        };
        // Within the remote run (about half a second) mostly: a fault after it changes nothing.
        let delay = Duration::from_millis(rng.below(300));
        one_trial(&owner, port, trial, fault, delay, &mut tally).await;
        tally.trials += 1;
    }
    tally
}

async fn one_trial(
    owner: &Node,
    port: u16,
    trial: u64,
    fault: Fault,
    delay: Duration,
    tally: &mut Tally,
) {
    let name = format!("worker-{trial}");
    let args = WorkerArgs {
        name: name.clone(),
        port: worker::free_port(),
        owner: "owner".into(),
        owner_addr: format!("127.0.0.1:{port}").parse().expect("an address"),
        lease_ms: LEASE_MS,
        grace_ms: GRACE_MS,
    };
    let mut command = std::process::Command::new(std::env::current_exe().expect("this program"));
    command.arg("--worker").args(args.to_args());
    let mut process = tokio::task::spawn_blocking(move || WorkerProcess::start(command))
        .await
        .expect("the worker starts");
    owner.await_peer(&name).await.expect("the worker joined");
    let acknowledged_before = owner.stats().acknowledged_deltas;
    let tree = Tree::builder()
        .catalog(Catalog::new([AgentDefinition::new("runner", "").on_node(&name)]).expect("valid"))
        .model(ScriptedModel::new())
        .config(TreeConfig::default().with_shutdown_grace(Duration::from_millis(SHUTDOWN_GRACE_MS)))
        .node(owner)
        .build()
        .await
        .expect("the owner's tree builds");
    let mut events = tree.subscribe();
    let mut handle = tree
        .spawn(SpawnRequest::new("runner", TASK))
        .await
        .expect("the remote runner is admitted");
    tokio::time::sleep(delay).await;
    // What the fault can still change: a run already over keeps its outcome.
    let over = handle.try_outcome().is_some();
    let counts = tally.faults.entry(format!("{fault:?}")).or_default();
    counts.0 += 1;
    counts.1 += u64::from(!over);
    let mut shutdown_took = None;
    match fault {
        Fault::None => {}
        Fault::Kill => process.kill9(),
        Fault::FreezeWithin => {
            process.freeze();
            tokio::time::sleep(Duration::from_millis(LEASE_MS / 3)).await;
            process.thaw();
        }
        Fault::FreezeBeyond => {
            process.freeze();
            tokio::time::sleep(Duration::from_millis(LEASE_MS + GRACE_MS + 300)).await;
            process.thaw();
        }
        Fault::Shutdown => {
            let started = Instant::now();
            tree.shutdown().await;
            shutdown_took = Some(started.elapsed());
        }
        Fault::ShutdownFrozen => {
            process.freeze();
            let started = Instant::now();
            tree.shutdown().await;
            shutdown_took = Some(started.elapsed());
            process.thaw();
        }
    }
    let outcome = handle.outcome().await;
    // The outcome the trial caused.
    let expected = if over { Fault::None } else { fault };
    let right = match expected {
        Fault::None | Fault::FreezeWithin => {
            outcome.status == AgentStatus::Completed && outcome.text.as_deref() == Some(TASK_ANSWER)
        }
        Fault::Kill => {
            outcome.status == AgentStatus::Failed
                && outcome
                    .error
                    .as_deref()
                    .is_some_and(|e| e.starts_with("node down"))
        }
        Fault::FreezeBeyond => {
            outcome.status == AgentStatus::Killed
                && outcome.error.as_deref() == Some("node unreachable: lease expired")
        }
        Fault::Shutdown => {
            outcome.status == AgentStatus::Aborted && outcome.reason == EndReason::Shutdown
        }
        // The frozen node cannot answer by the deadline: counted killed there.
        Fault::ShutdownFrozen => outcome.status == AgentStatus::Killed,
    };
    if !right {
        eprintln!("trial {trial} ({fault:?}, over before: {over}): wrong outcome {outcome:?}");
        tally.wrong_outcomes += 1;
    }
    // The runner's helper, hosted on the worker and mirrored in the owner's records: done,
    // or ended as the trial caused (settled with its stand-in when its node was lost).
    let snapshot = tree.snapshot();
    for helper in snapshot.agents().filter(|r| r.parent == Some(handle.id())) {
        let cause = helper.outcome.as_ref().and_then(|o| o.error.as_deref());
        let reason = helper.outcome.as_ref().map(|o| o.reason);
        let right = helper.status == AgentStatus::Completed
            || match expected {
                Fault::None | Fault::FreezeWithin => false,
                Fault::Kill => {
                    helper.status == AgentStatus::Killed
                        && cause.is_some_and(|e| e.starts_with("node down"))
                }
                Fault::FreezeBeyond => {
                    helper.status == AgentStatus::Killed
                        && cause == Some("node unreachable: lease expired")
                }
                Fault::Shutdown => {
                    helper.status == AgentStatus::Aborted && reason == Some(EndReason::Shutdown)
                }
                Fault::ShutdownFrozen => helper.status == AgentStatus::Killed,
            };
        if !right {
            eprintln!("trial {trial} ({fault:?}, over before: {over}): wrong helper {helper:?}");
            tally.wrong_outcomes += 1;
        }
    }
    // Acknowledged deltas against the root's usage events.
    let acknowledged = owner.stats().acknowledged_deltas - acknowledged_before;
    let counted = events
        .drain()
        .iter()
        .filter(|e| e.kind.name() == "usage_reported")
        .count() as u64;
    if acknowledged != counted {
        eprintln!("trial {trial}: {acknowledged} deltas acknowledged, {counted} at the root");
        tally.lost_usage += acknowledged.abs_diff(counted);
    }
    let root = tree
        .record(AgentId::ROOT)
        .map_or(0, |r| r.subtree.total_tokens());
    if fault == Fault::Kill {
        // Gone with its process: nothing runs there.
    } else {
        // A worker frozen past its lease was thawed a lease plus the grace (and 300 ms)
        // after it lost its owner: it must have stopped everything on waking.
        let within = match fault {
            Fault::FreezeBeyond => Duration::from_millis(300),
            _ => Duration::from_millis(LEASE_MS + GRACE_MS),
        };
        let (live, billed) = settled_worker(&mut process, within);
        if live > 0 {
            eprintln!("trial {trial}: {live} agents still live on the worker");
            tally.orphans_past_lease += live as u64;
        }
        // Left alone, frozen within the lease, or shut down gracefully: every delta the
        // worker billed is in the root's totals (and, untouched, the whole task's).
        let whole = matches!(expected, Fault::None | Fault::FreezeWithin);
        let graceful = expected == Fault::Shutdown;
        if ((whole || graceful) && billed != root) || (whole && root != TASK_TOKENS) {
            eprintln!("trial {trial}: the worker billed {billed} tokens, the root has {root}");
            tally.lost_usage += billed.abs_diff(root).div_ceil(12).max(1);
        }
    }
    let started = Instant::now();
    tree.shutdown().await;
    let took = shutdown_took.unwrap_or_else(|| started.elapsed());
    if took > tree.config().shutdown_grace + SHUTDOWN_KILL_WAIT {
        eprintln!("trial {trial}: the shutdown took {took:?}");
        tally.late_shutdowns += 1;
    }
    process.finish();
}

/// The worker's live agents and billed tokens once nothing is live on it, or `within` has
/// passed.
fn settled_worker(process: &mut WorkerProcess, within: Duration) -> (usize, u64) {
    let deadline = Instant::now() + within;
    loop {
        let (live, billed) = process.stats();
        if live == 0 || Instant::now() >= deadline {
            return (live, billed);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
