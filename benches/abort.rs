//! Abort of a whole subtree: a chain of D hanging agents (every one inside a model call) is
//! aborted at its top, and timed until every agent has settled, bottom-up. Against a chain
//! of D raw ractor actors stopped at the top (ractor kills the linked descendants without
//! waiting for them) and D raw tokio tasks under a tree of cancellation tokens. The point is
//! the shape: work O(D) with no per-level waits, so time grows linearly with D, not as D
//! sequential round trips.

use std::time::{Duration, Instant};

use agent_tree::prelude::*;
use agent_tree::testkit::{Script, ScriptedModel, Turn};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Builds a chain of `depth` agents, each spawning the next in the background and then
/// hanging in a model call; aborts the top; returns the time until all settled.
async fn agents(depth: u32) -> Duration {
    let model = ScriptedModel::new().script(
        "link",
        Script::new([Turn::spawn_background("link", "next"), Turn::hang()]),
    );
    let catalog =
        Catalog::new([AgentDefinition::new("link", "")
            .with_allowed_subagents(SubagentAllowance::only(["link"]))])
        .expect("valid");
    let config = TreeConfig::default()
        .with_max_depth(depth)
        .with_max_total_agents(depth as usize + 1);
    let tree = Tree::builder()
        .config(config)
        .catalog(catalog)
        .model(model)
        .build()
        .await
        .expect("tree");
    let mut events = tree.subscribe();
    let top = tree
        .spawn(SpawnRequest::new("link", "start"))
        .await
        .expect("admitted");
    // Wait until the deepest link is in its hanging model call (its second usage event
    // never comes: count the first turns of every link instead).
    let mut turns = 0;
    while turns < depth {
        if let Some(event) = events.next().await {
            if matches!(
                event.kind,
                agent_tree::protocol::EventKind::UsageReported { .. }
            ) {
                turns += 1;
            }
        }
    }
    let start = Instant::now();
    tree.abort(top.id()).expect("abortable");
    tree.idle().await;
    let elapsed = start.elapsed();
    tree.shutdown().await;
    elapsed
}

/// A raw actor that spawns the next link of a chain when started.
struct Link;

impl Actor for Link {
    type Msg = ();
    type State = ();
    type Arguments = (u32, mpsc::UnboundedSender<ActorRef<()>>);

    async fn pre_start(
        &self,
        myself: ActorRef<()>,
        (left, built): Self::Arguments,
    ) -> Result<(), ActorProcessingErr> {
        if left > 1 {
            Actor::spawn_linked(None, Link, (left - 1, built.clone()), myself.get_cell()).await?;
        } else {
            let _ = built.send(myself);
        }
        Ok(())
    }
}

async fn raw_ractor(depth: u32) -> Duration {
    let (built_tx, mut built) = mpsc::unbounded_channel();
    let (top, handle) = Actor::spawn(None, Link, (depth, built_tx))
        .await
        .expect("chain");
    let deepest = built.recv().await.expect("the chain is built");
    let start = Instant::now();
    top.stop(None);
    let _ = handle.await;
    deepest.get_cell().wait(None).await.expect("no timeout");
    start.elapsed()
}

async fn raw_tokio(depth: u32) -> Duration {
    let root = CancellationToken::new();
    let mut token = root.clone();
    let mut tasks = Vec::new();
    for _ in 0..depth {
        let mine = token.clone();
        tasks.push(tokio::spawn(async move { mine.cancelled().await }));
        token = token.child_token();
    }
    let start = Instant::now();
    root.cancel();
    for task in tasks {
        let _ = task.await;
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("abort_chain");
    group.sample_size(20);
    for depth in [10u32, 50, 200] {
        group.bench_with_input(BenchmarkId::new("agent", depth), &depth, |b, &d| {
            b.iter_custom(|iters| (0..iters).map(|_| rt.block_on(agents(d))).sum())
        });
        group.bench_with_input(BenchmarkId::new("raw_ractor", depth), &depth, |b, &d| {
            b.iter_custom(|iters| (0..iters).map(|_| rt.block_on(raw_ractor(d))).sum())
        });
        group.bench_with_input(BenchmarkId::new("raw_tokio", depth), &depth, |b, &d| {
            b.iter_custom(|iters| (0..iters).map(|_| rt.block_on(raw_tokio(d))).sum())
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
