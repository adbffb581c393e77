//! Spawning a fan4 tree until every agent is in its first model turn (raw: every actor
//! started, every task running), side by side with raw ractor and raw tokio.

use agent_tree_benches::scenarios::{Shape, tree_run};
use agent_tree_benches::{runtime, three_way};
use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let rt = runtime();
    three_way(c, "spawn_fan4", &[1_000, 10_000], &rt, |variant, n| {
        rt.block_on(tree_run(variant, Shape::Fan4, n)).spawn
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
