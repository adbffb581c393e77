//! Graceful shutdown of the spawn benches' trees (wide, fan-out 4, chain, one agent's
//! burst), against a raw ractor tree whose `post_stop` stops its children and waits, and raw
//! tokio tasks that wait for their children after their token fires.

use agent_tree_benches::scenarios::{Shape, tree_run};
use agent_tree_benches::{runtime, three_way};
use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let rt = runtime();
    for shape in [Shape::Wide, Shape::Fan4, Shape::Chain, Shape::Burst] {
        let name = format!("shutdown_{}", shape.name());
        three_way(c, &name, &[1_000, 10_000], &rt, |variant, n| {
            rt.block_on(tree_run(variant, shape, n)).shutdown
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
