//! A steer's round trip to a running agent (`Tree::steer`, awaited until delivered), against a
//! ractor `call` and a tokio request/reply. 1000 round trips per repetition.

use agent_tree_benches::scenarios::steer_run;
use agent_tree_benches::{runtime, three_way};
use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let rt = runtime();
    three_way(c, "steer_round_trip", &[1_000], &rt, |variant, reps| {
        rt.block_on(steer_run(variant, reps))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
