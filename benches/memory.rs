//! Resident memory per idle node: 10k agents in their first model turn against 10k idle raw
//! ractor actors and raw tokio tasks, wide and fan-out 4. Criterion times the measurement;
//! the bytes are printed (the perf report measures them in fresh processes).

use agent_tree_benches::scenarios::{Shape, Variant, memory_per_node};
use agent_tree_benches::{runtime, three_way};
use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let rt = runtime();
    for shape in [Shape::Wide, Shape::Fan4] {
        for variant in Variant::ALL {
            let bytes = rt.block_on(memory_per_node(variant, shape, 10_000));
            println!(
                "memory_per_agent_{} {} {bytes} bytes",
                shape.name(),
                variant.name()
            );
        }
        let name = format!("memory_{}", shape.name());
        three_way(c, &name, &[10_000], &rt, |variant, n| {
            let start = std::time::Instant::now();
            std::hint::black_box(rt.block_on(memory_per_node(variant, shape, n)));
            start.elapsed()
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
