//! A usage delta from an agent at depth 5, 50 and 1000 reaching the root's subtree total
//! (ours: one registry transaction, `Tree::charge`), against relaying it up a chain of raw
//! ractor actors or tokio tasks. 100 deltas per repetition.

use agent_tree_benches::scenarios::usage_run;
use agent_tree_benches::{runtime, three_way};
use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let rt = runtime();
    three_way(c, "usage_delta", &[5, 50, 1_000], &rt, |variant, depth| {
        rt.block_on(usage_run(variant, depth, 100))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
