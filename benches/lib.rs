//! The benches of `agent-tree` (`cargo bench -p agent-tree-benches`), one scenario per file,
//! each with raw ractor and raw tokio baselines in the same criterion group, so ratios come
//! from one run. The scenarios themselves are `examples/perf_report/scenarios.rs`, shared
//! with the performance report (`cargo run --release --example perf_report`).

#![allow(missing_docs)]

#[path = "../examples/perf_report/scenarios.rs"]
pub mod scenarios;

use std::time::Duration;

use criterion::{BenchmarkId, Criterion};
use scenarios::Variant;
use tokio::runtime::Runtime;

/// The runtime every bench runs on: two worker threads, like CI's machines.
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// One criterion group `name` with the three variants side by side for every size of
/// `sizes`: `run(variant, size)` runs one repetition on `rt` and returns the time it
/// measured (criterion sums them over its iterations).
pub fn three_way(
    c: &mut Criterion,
    name: &str,
    sizes: &[usize],
    rt: &Runtime,
    run: impl Fn(Variant, usize) -> Duration,
) {
    let mut group = c.benchmark_group(name);
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    for &size in sizes {
        for variant in Variant::ALL {
            group.bench_with_input(BenchmarkId::new(variant.name(), size), &size, |b, &size| {
                b.iter_custom(|iters| (0..iters).map(|_| run(variant, size)).sum())
            });
        }
    }
    group.finish();
    let _ = rt;
}
