//! The performance report: every scenario of `docs/performance.md` as agent-tree ("ours")
//! and as raw ractor, side by side in one process, variants interleaved, medians over
//! repetitions; each tree scenario, each large one and each memory measurement in a fresh
//! child process.
//!
//! ```text
//! cargo run --release --example perf_report
//! ```
//!
//! Prints one `perf …` line per scenario: `ours` and `raw` medians, `ratio` (ours / raw) and
//! the bound the ratio must stay under: a `target` for what users feel (memory, usage,
//! steer, snapshot, the 100k shutdowns), a `guard` against regressions for the spawn and
//! shutdown ratios against raw ractor (an agent's contract costs more than a bare actor; the
//! guard only says it has not grown); an `info …` line gives the raw tokio median of the
//! same scenario. The run fails (exit 1) when a line misses its bound.

mod scenarios;

use std::process::Command;
use std::time::{Duration, Instant};

use scenarios::{Shape, Variant};

/// The regression guard on spawning a tree, as a ratio to raw ractor.
const SPAWN_GUARD: f64 = 3.3;
/// The regression guard on shutting a tree down gracefully, as a ratio to raw ractor.
const SHUTDOWN_GUARD: f64 = 2.0;

/// How many repetitions of each variant a timed scenario runs.
const REPS_1K: usize = 25;
const REPS_10K: usize = 9;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--memory") {
        // A child process: one memory measurement, printed as bytes per node.
        let variant = match args.get(2).map(String::as_str) {
            Some("ours") => Variant::Ours,
            Some("raw_ractor") => Variant::RawRactor,
            _ => Variant::RawTokio,
        };
        let shape = args
            .get(3)
            .and_then(|s| Shape::parse(s))
            .unwrap_or(Shape::Wide);
        let n = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(10_000);
        let bytes = runtime().block_on(scenarios::memory_per_node(variant, shape, n));
        println!("{bytes}");
        return;
    }
    if args.get(1).map(String::as_str) == Some("--profile") {
        // For `perf record`: only agent-tree's side of one tree scenario, repeated
        // (`--profile <shape> <n> <reps> [hung|raw_ractor|raw_tokio]`, `hung`: every shutdown
        // hook hangs).
        let shape = args
            .get(2)
            .and_then(|s| Shape::parse(s))
            .unwrap_or(Shape::Wide);
        let n = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(10_000);
        let reps = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(10);
        let hanging_hooks = args.get(5).map(String::as_str) == Some("hung");
        // `raw_ractor` or `raw_tokio` in place of `hung`: that baseline's side instead.
        let variant = Variant::ALL
            .into_iter()
            .find(|v| args.get(5).map(String::as_str) == Some(v.name()))
            .unwrap_or(Variant::Ours);
        let rt = runtime();
        for _ in 0..reps {
            let run = match variant {
                Variant::Ours => rt.block_on(scenarios::ours_tree_run(shape, n, hanging_hooks)),
                raw => rt.block_on(scenarios::tree_run(raw, shape, n)),
            };
            println!(
                "spawn={:?} shutdown={:?} killed={}",
                run.spawn, run.shutdown, run.killed
            );
        }
        return;
    }
    if args.get(1).map(String::as_str) == Some("--large") {
        // One of the large scenarios, in a process of its own (`--large <name>`). Exits
        // with the number of lines that missed their bound.
        let mut report = Report::default();
        let name = args.get(2).map_or("hung", String::as_str);
        large_scenario(&runtime(), name, &mut report);
        std::process::exit(i32::try_from(report.missed).unwrap_or(i32::MAX));
    }
    if args.get(1).map(String::as_str) == Some("--only") {
        // One tree scenario, side by side (`--only <shape> <n> <reps>`): for measuring a
        // change to one shape without running the whole report, and how the report runs
        // each tree scenario (in a process of its own). Exits with the number of lines that
        // missed their bound.
        let shape = args
            .get(2)
            .and_then(|s| Shape::parse(s))
            .unwrap_or(Shape::Wide);
        let n = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(10_000);
        let reps = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(REPS_10K);
        let mut report = Report::default();
        tree_scenario(&runtime(), shape, n, reps, &mut report);
        std::process::exit(i32::try_from(report.missed).unwrap_or(i32::MAX));
    }
    if cfg!(debug_assertions) {
        eprintln!("perf_report measures an optimised build: run it with --release");
    }
    let started = Instant::now();
    let rt = runtime();
    let mut report = Report::default();

    for (shape, n, reps) in [
        (Shape::Wide, 1_000, REPS_1K),
        (Shape::Wide, 10_000, REPS_10K),
        (Shape::Fan4, 1_000, REPS_1K),
        (Shape::Fan4, 10_000, REPS_10K),
        (Shape::Chain, 1_000, REPS_1K),
        (Shape::Burst, 1_000, REPS_1K),
        (Shape::Burst, 10_000, REPS_10K),
    ] {
        child_lines(
            &["--only", shape.name(), &n.to_string(), &reps.to_string()],
            &mut report,
        );
    }

    for (depth, target) in [(5, 1.0), (50, 0.2), (1000, 0.05)] {
        let runs = interleave(REPS_1K, |variant| {
            rt.block_on(scenarios::usage_run(variant, depth, 1_000))
        });
        report.timed(&format!("usage_depth_{depth}"), &runs, target);
    }

    let runs = interleave(REPS_1K, |variant| {
        rt.block_on(scenarios::steer_run(variant, 1_000))
    });
    report.timed("steer_round_trip", &runs, 2.0);

    for shape in [Shape::Wide, Shape::Fan4] {
        let mut ours = Vec::new();
        let mut raw = Vec::new();
        for _ in 0..3 {
            ours.push(memory_child(Variant::Ours, shape));
            raw.push(memory_child(Variant::RawRactor, shape));
        }
        let (ours, raw) = (median(&mut ours), median(&mut raw));
        report.line(format!(
            "perf memory_per_agent_{} ours={ours} raw={raw} ratio={:.2} target=1.50",
            shape.name(),
            ours as f64 / raw as f64
        ));
        report.check(ours as f64 / raw as f64 <= 1.5);
    }

    // The large trees, each in a process of its own too.
    for scenario in LARGE_SCENARIOS {
        child_lines(&["--large", scenario], &mut report);
    }

    report.info(format!(
        "info total_seconds={:.1}",
        started.elapsed().as_secs_f64()
    ));
    if report.missed > 0 {
        eprintln!("{} perf line(s) missed their bound", report.missed);
        std::process::exit(1);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

fn size(n: usize) -> String {
    if n.is_multiple_of(1000) {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

/// Results per variant.
struct PerVariant<T> {
    ours: Vec<T>,
    raw: Vec<T>,
    tokio: Vec<T>,
}

impl<T: Copy> PerVariant<T> {
    fn map<U>(&self, f: impl Fn(&T) -> U) -> PerVariant<U> {
        PerVariant {
            ours: self.ours.iter().map(&f).collect(),
            raw: self.raw.iter().map(&f).collect(),
            tokio: self.tokio.iter().map(&f).collect(),
        }
    }
}

/// Runs `reps` rounds of every variant, interleaved (ours, raw ractor, raw tokio, ours, …),
/// after one warm-up round.
fn interleave<T>(reps: usize, mut run: impl FnMut(Variant) -> T) -> PerVariant<T> {
    for variant in Variant::ALL {
        run(variant);
    }
    let mut out = PerVariant {
        ours: Vec::new(),
        raw: Vec::new(),
        tokio: Vec::new(),
    };
    for _ in 0..reps {
        out.ours.push(run(Variant::Ours));
        out.raw.push(run(Variant::RawRactor));
        out.tokio.push(run(Variant::RawTokio));
    }
    out
}

fn median<T: Ord + Copy>(values: &mut [T]) -> T {
    values.sort_unstable();
    values[values.len() / 2]
}

fn median_f(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// A ratio with two decimals, or four below 0.1 (usage deltas run far under their raw cost).
fn ratio_text(ratio: f64) -> String {
    if ratio < 0.1 {
        format!("{ratio:.4}")
    } else {
        format!("{ratio:.2}")
    }
}

fn micros(d: Duration) -> String {
    format!("{:.1}us", d.as_secs_f64() * 1e6)
}

/// Resident bytes per idle node, measured in a fresh process.
/// The scenarios of 100,000 agents (and a 10,000-deep chain), run by `--large <name>`.
const LARGE_SCENARIOS: [&str; 3] = ["snapshot_and_graceful", "chain_10k", "hung"];

/// One of [`LARGE_SCENARIOS`], its lines in `report`.
fn large_scenario(rt: &tokio::runtime::Runtime, name: &str, report: &mut Report) {
    match name {
        "snapshot_and_graceful" => {
            // 100k agents: the snapshot, then a graceful shutdown of the same tree.
            let (per_record, walk, render, shutdown) = rt.block_on(async {
                let tree = scenarios::fan4_tree(100_000).await;
                let mut per_record: Vec<f64> = (0..5)
                    .map(|_| scenarios::snapshot_ns_per_record(&tree))
                    .collect();
                let mut walk: Vec<f64> = (0..5)
                    .map(|_| scenarios::walk_ns_per_record(&tree))
                    .collect();
                let mut render: Vec<f64> = (0..3)
                    .map(|_| scenarios::render_ns_per_record(&tree))
                    .collect();
                let start = Instant::now();
                let report = tree.shutdown().await;
                (
                    median_f(&mut per_record),
                    median_f(&mut walk),
                    median_f(&mut render),
                    (report.killed.len(), start.elapsed()),
                )
            });
            report.line(format!(
                "perf snapshot_per_record ours={per_record:.0} raw=200 ratio={:.2} target=1.00",
                per_record / 200.0
            ));
            report.check(per_record <= 200.0);
            report.info(format!("info depth_first_per_record ours={walk:.0}ns"));
            report.info(format!("info render_text_per_record ours={render:.0}ns"));
            report.line(format!(
                "perf graceful_shutdown_100k_fan4 killed={} elapsed_ms={} grace_ms=3000",
                shutdown.0,
                shutdown.1.as_millis()
            ));
            report.check(shutdown.0 == 0);
        }
        "chain_10k" => {
            let chain = rt.block_on(scenarios::ours_tree_run(Shape::Chain, 10_000, false));
            report.line(format!(
                "perf graceful_shutdown_10k_chain killed={} elapsed_ms={} grace_ms=3000",
                chain.killed,
                chain.shutdown.as_millis()
            ));
            report.check(chain.killed == 0);
        }
        "hung" => {
            let hung = rt.block_on(scenarios::ours_tree_run(Shape::Fan4, 100_000, true));
            report.line(format!(
                "perf hung_shutdown_100k elapsed_ms={} grace_ms=3000 target_ms=3200",
                hung.shutdown.as_millis()
            ));
            report.check(hung.shutdown <= Duration::from_millis(3200));
        }
        other => panic!("no large scenario {other:?}"),
    }
}

/// One tree scenario's spawn and shutdown, ours and raw interleaved, as two lines of
/// `report`; its graceful shutdowns must kill nobody.
fn tree_scenario(
    rt: &tokio::runtime::Runtime,
    shape: Shape,
    n: usize,
    reps: usize,
    report: &mut Report,
) {
    let runs = interleave(reps, |variant| {
        rt.block_on(scenarios::tree_run(variant, shape, n))
    });
    let label = format!("{}_{}", shape.name(), size(n));
    report.guarded(
        &format!("spawn_{label}"),
        &runs.map(|r| r.spawn),
        SPAWN_GUARD,
    );
    report.guarded(
        &format!("shutdown_{label}"),
        &runs.map(|r| r.shutdown),
        SHUTDOWN_GUARD,
    );
    let killed: usize = runs.ours.iter().map(|r| r.killed).sum();
    assert_eq!(
        killed, 0,
        "{label}: a graceful shutdown with nothing hanging killed agents"
    );
}

/// Runs this program with `args` as a child process (a scenario of its own, `--only` or
/// `--large`): each scenario starts on a fresh heap, so what an earlier one left in the
/// allocator does not tax the next (agent-tree's side makes about four times raw ractor's
/// allocations, so a fragmented heap moved its ratios, the chain's most, by up to 0.8).
/// Its lines are printed here and its misses (its exit status) counted.
fn child_lines(args: &[&str], report: &mut Report) {
    let exe = std::env::current_exe().expect("this program's path");
    let output = Command::new(exe)
        .args(args)
        .output()
        .expect("the scenario's child runs");
    print!("{}", String::from_utf8_lossy(&output.stdout));
    match output.status.code() {
        Some(missed) if output.stdout.starts_with(b"perf ") => {
            report.missed += usize::try_from(missed).unwrap_or(1);
        }
        _ => panic!(
            "the child {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

fn memory_child(variant: Variant, shape: Shape) -> usize {
    let exe = std::env::current_exe().expect("this program's path");
    let output = Command::new(exe)
        .args(["--memory", variant.name(), shape.name(), "10000"])
        .output()
        .expect("the memory child runs");
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("memory child failed: {output:?}"))
}

/// Prints the lines and counts the misses.
#[derive(Default)]
struct Report {
    missed: usize,
}

impl Report {
    /// A timed line with a target users feel.
    fn timed(&mut self, scenario: &str, runs: &PerVariant<Duration>, target: f64) {
        self.ratio_line(scenario, runs, "target", target);
    }

    /// A timed line with a regression guard.
    fn guarded(&mut self, scenario: &str, runs: &PerVariant<Duration>, guard: f64) {
        self.ratio_line(scenario, runs, "guard", guard);
    }

    fn ratio_line(&mut self, scenario: &str, runs: &PerVariant<Duration>, bound: &str, limit: f64) {
        let ours = median(&mut runs.ours.clone());
        let raw = median(&mut runs.raw.clone());
        let tokio = median(&mut runs.tokio.clone());
        let ratio = ours.as_secs_f64() / raw.as_secs_f64();
        self.line(format!(
            "perf {scenario} ours={} raw={} ratio={} {bound}={limit:.2}",
            micros(ours),
            micros(raw),
            ratio_text(ratio)
        ));
        self.check(ratio <= limit);
        self.info(format!("info {scenario} raw_tokio={}", micros(tokio)));
    }

    fn line(&mut self, line: String) {
        println!("{line}");
    }

    fn info(&mut self, line: String) {
        self.line(line);
    }

    fn check(&mut self, held: bool) {
        if !held {
            self.missed += 1;
        }
    }
}
