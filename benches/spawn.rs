//! What an agent costs next to a bare actor: spawning N agents under one owner, each taking
//! one (scripted, instant) model turn and settling, against N raw ractor actors linked under
//! one supervisor that stop themselves, and N raw tokio tasks. One group, so the ratios come
//! from one run.

use std::hint::black_box;
use std::time::{Duration, Instant};

use agent_tree::prelude::*;
use agent_tree::testkit::{Script, ScriptedModel, Turn};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// N top-level agents, each answering at once, run to completion.
async fn agents(n: usize) -> Duration {
    let model = ScriptedModel::new().script(
        "w",
        Script::new([Turn::answer("ok").usage(Usage::tokens(1, 1))]),
    );
    let catalog = Catalog::new([AgentDefinition::new("w", "")]).expect("valid");
    let config = TreeConfig::default().with_max_total_agents(n + 1);
    let tree = Tree::builder()
        .config(config)
        .catalog(catalog)
        .model(model)
        .build()
        .await
        .expect("tree");
    let start = Instant::now();
    let mut handles = Vec::with_capacity(n);
    for _ in 0..n {
        handles.push(
            tree.spawn(SpawnRequest::new("w", "go"))
                .await
                .expect("admitted"),
        );
    }
    for mut handle in handles {
        black_box(handle.outcome().await);
    }
    let elapsed = start.elapsed();
    tree.shutdown().await;
    elapsed
}

/// A supervisor that counts its children's exits (and, unlike ractor's default, does not
/// stop when one ends).
struct Supervisor;

impl Actor for Supervisor {
    type Msg = ();
    type State = (usize, Option<mpsc::UnboundedSender<()>>);
    type Arguments = (usize, mpsc::UnboundedSender<()>);

    async fn pre_start(
        &self,
        _: ActorRef<()>,
        (n, done): Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok((n, Some(done)))
    }

    async fn handle_supervisor_evt(
        &self,
        _: ActorRef<()>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorTerminated(..) = event {
            state.0 -= 1;
            if state.0 == 0 {
                if let Some(done) = state.1.take() {
                    let _ = done.send(());
                }
            }
        }
        Ok(())
    }
}

/// An actor that stops itself once started.
struct Worker;

impl Actor for Worker {
    type Msg = ();
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, _: ActorRef<()>, (): ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn post_start(
        &self,
        myself: ActorRef<()>,
        (): &mut (),
    ) -> Result<(), ActorProcessingErr> {
        myself.stop(None);
        Ok(())
    }
}

/// N raw ractor actors linked under one supervisor, each stopping itself.
async fn raw_ractor(n: usize) -> Duration {
    let (done_tx, mut done) = mpsc::unbounded_channel();
    let (supervisor, handle) = Actor::spawn(None, Supervisor, (n, done_tx))
        .await
        .expect("supervisor");
    let start = Instant::now();
    for _ in 0..n {
        Actor::spawn_linked(None, Worker, (), supervisor.get_cell())
            .await
            .expect("worker");
    }
    done.recv().await;
    let elapsed = start.elapsed();
    supervisor.stop(None);
    let _ = handle.await;
    elapsed
}

/// N raw tokio tasks, each reporting on a channel.
async fn raw_tokio(n: usize) -> Duration {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let start = Instant::now();
    for _ in 0..n {
        let tx = tx.clone();
        tokio::spawn(async move {
            let _ = tx.send(());
        });
    }
    for _ in 0..n {
        rx.recv().await;
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("spawn_and_settle");
    group.sample_size(20);
    for n in [100usize, 1_000] {
        group.bench_with_input(BenchmarkId::new("agent", n), &n, |b, &n| {
            b.iter_custom(|iters| (0..iters).map(|_| rt.block_on(agents(n))).sum())
        });
        group.bench_with_input(BenchmarkId::new("raw_ractor", n), &n, |b, &n| {
            b.iter_custom(|iters| (0..iters).map(|_| rt.block_on(raw_ractor(n))).sum())
        });
        group.bench_with_input(BenchmarkId::new("raw_tokio", n), &n, |b, &n| {
            b.iter_custom(|iters| (0..iters).map(|_| rt.block_on(raw_tokio(n))).sum())
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
