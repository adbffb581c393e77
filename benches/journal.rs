//! Journal write throughput, entries per second, per durability policy, against raw appends
//! of the same bytes to a file in the same run: `raw` (one `write` per batch of 512 lines, as
//! the writer batches), `raw_fsync_each` (a write and an `fsync` per line, the floor for
//! `every_entry`), and ours with `none`, `group` (64 entries or 50 ms) and `every_entry`,
//! each a tree of `n` leaf agents run to completion and the journal flushed. The `no_journal`
//! tree is the same work without one: what journaling adds is ours minus it.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent_tree::prelude::*;
use agent_tree::{BoxFuture, Durability, JournalConfig};
use agent_tree_benches::runtime;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

fn dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agent-tree-bench-journal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    dir
}

/// Every agent answers at once.
struct Answers;

impl Model for Answers {
    fn turn(&self, _: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        Box::pin(async { Ok(ModelResponse::text("done").with_usage(Usage::tokens(10, 2))) })
    }
}

/// Runs `n` leaf agents on a tree journaling to `path` under `durability` (or none), and
/// flushes; the time taken.
async fn tree_run(n: usize, path: Option<(&Path, Durability)>) -> Duration {
    let model = Answers;
    let catalog = Catalog::new([AgentDefinition::new("w", "You work.")]).expect("valid");
    let mut builder = Tree::builder().catalog(catalog).model(model).config(
        TreeConfig::default()
            .with_max_total_agents(n + 1)
            .with_max_children_per_agent(n + 1),
    );
    if let Some((path, durability)) = path {
        let _ = std::fs::remove_file(path);
        builder = builder.journal(JournalConfig::new(path).durability(durability));
    }
    let tree = builder.build().await.expect("a tree");
    let started = Instant::now();
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        handles.push(
            tree.spawn(SpawnRequest::new("w", format!("task {i}")))
                .await
                .expect("admitted"),
        );
    }
    for handle in &mut handles {
        handle.outcome().await;
    }
    tree.flush_journal().await;
    let took = started.elapsed();
    tree.shutdown().await;
    took
}

fn lines_of(path: &Path) -> Vec<Vec<u8>> {
    std::fs::read(path)
        .expect("the journal")
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

fn raw(path: &Path, lines: &[Vec<u8>], fsync_each: bool) -> Duration {
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("a file");
    let started = Instant::now();
    if fsync_each {
        for line in lines {
            file.write_all(line).expect("written");
            file.sync_data().expect("synced");
        }
    } else {
        for batch in lines.chunks(512) {
            file.write_all(&batch.concat()).expect("written");
        }
        file.sync_data().expect("synced");
    }
    started.elapsed()
}

fn journal(c: &mut Criterion) {
    let rt = runtime();
    let dir = dir();
    let path = dir.join("bench.journal");
    let mut group = c.benchmark_group("journal_write");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    for n in [200usize, 1000] {
        // The journal this work writes, for its entry count and the raw baselines' bytes.
        rt.block_on(tree_run(n, Some((&path, Durability::None))));
        let lines = lines_of(&path);
        group.throughput(Throughput::Elements(lines.len() as u64));
        group.bench_with_input(BenchmarkId::new("raw", n), &n, |b, _| {
            b.iter_custom(|iters| (0..iters).map(|_| raw(&path, &lines, false)).sum())
        });
        group.bench_with_input(BenchmarkId::new("no_journal", n), &n, |b, &n| {
            b.iter_custom(|iters| (0..iters).map(|_| rt.block_on(tree_run(n, None))).sum())
        });
        for (name, durability) in [("none", Durability::None), ("group", Durability::default())] {
            group.bench_with_input(BenchmarkId::new(name, n), &n, |b, &n| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| rt.block_on(tree_run(n, Some((&path, durability)))))
                        .sum()
                })
            });
        }
        if n == 200 {
            // A sync per line is slow on any disk: the small tree only.
            group.bench_with_input(BenchmarkId::new("raw_fsync_each", n), &n, |b, _| {
                b.iter_custom(|iters| (0..iters).map(|_| raw(&path, &lines, true)).sum())
            });
            group.bench_with_input(BenchmarkId::new("every_entry", n), &n, |b, &n| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| rt.block_on(tree_run(n, Some((&path, Durability::EveryEntry)))))
                        .sum()
                })
            });
        }
    }
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, journal);
criterion_main!(benches);
