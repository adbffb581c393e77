//! A snapshot of a live fan-out-4 tree of 10k and 100k agents (records out of id order
//! across parents), alone and walked depth first, and its text rendering. There is no raw counterpart:
//! the target is an absolute 200 ns per record (`docs/performance.md`).

use std::time::{Duration, Instant};

use agent_tree_benches::runtime;
use agent_tree_benches::scenarios::fan4_tree;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("snapshot");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    for n in [10_000usize, 100_000] {
        let tree = rt.block_on(fan4_tree(n));
        group.bench_with_input(BenchmarkId::new("snapshot", n), &n, |b, _| {
            b.iter(|| std::hint::black_box(tree.snapshot().records.len()))
        });
        group.bench_with_input(BenchmarkId::new("snapshot_walk", n), &n, |b, _| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    let snapshot = tree.snapshot();
                    std::hint::black_box(snapshot.depth_first().len());
                }
                start.elapsed()
            })
        });
        group.bench_with_input(BenchmarkId::new("render_text", n), &n, |b, _| {
            let snapshot = tree.snapshot();
            b.iter(|| std::hint::black_box(snapshot.render_text().len()))
        });
        rt.block_on(tree.shutdown());
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
