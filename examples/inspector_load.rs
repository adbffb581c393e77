//! What watching costs the tree: the time for `--agents` agents (default 10,000) to spawn
//! and settle, with no inspector page open and with `--watchers` (default 10) streams of
//! changes read as fast as they come, each measured `--runs` times (default 3, the median
//! printed); then the first read of a 100,000-agent tree (`--whole`): its snapshot's size and
//! time.
//!
//! `cargo run --release --features inspector --example inspector_load`

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_tree::inspector::{Inspector, InspectorConfig};
use agent_tree::prelude::*;
use agent_tree::testkit::{ScriptedModel, Turn};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn new_tree(agents: usize) -> Arc<Tree> {
    let mut config = TreeConfig::default();
    config.max_total_agents = agents + 1;
    config.max_concurrent = agents + 1;
    config.max_spawns_per_tree = agents as u64 + 1;
    let model =
        ScriptedModel::new().script("leaf", [Turn::answer("ok").usage(Usage::tokens(10, 5))]);
    let tree = Tree::builder()
        .config(config)
        .catalog(Catalog::new([AgentDefinition::new("leaf", "")]).expect("valid"))
        .model(model)
        .build()
        .await
        .expect("builds");
    Arc::new(tree)
}

/// Spawns `agents` leaves and waits until every one settled: the time it took.
async fn settle(tree: &Tree, agents: usize) -> Duration {
    let started = Instant::now();
    for i in 0..agents {
        tree.spawn(SpawnRequest::new("leaf", format!("task {i}")).background())
            .await
            .expect("admitted");
    }
    tree.idle().await;
    started.elapsed()
}

/// A watcher: the stream of changes, read and thrown away as fast as it comes.
async fn watch(inspector: &Inspector) -> tokio::task::JoinHandle<u64> {
    let (addr, token) = (inspector.addr(), inspector.token().to_owned());
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    let head = format!(
        "GET /api/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("writes");
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut read = 0u64;
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 {
                break;
            }
            read += n as u64;
        }
        read
    })
}

fn median(mut runs: Vec<Duration>) -> Duration {
    runs.sort();
    runs[runs.len() / 2]
}

#[tokio::main]
async fn main() {
    let agents = arg("--agents", 10_000);
    let watchers = arg("--watchers", 10);
    let runs = arg("--runs", 3);
    let whole = arg("--whole", 100_000);
    let (mut alone, mut watched) = (Vec::new(), Vec::new());
    let mut streamed = 0;
    for _ in 0..runs {
        let tree = new_tree(agents).await;
        alone.push(settle(&tree, agents).await);
        tree.shutdown().await;

        let tree = new_tree(agents).await;
        let inspector = Inspector::serve(tree.clone(), InspectorConfig::default())
            .await
            .expect("serves");
        let mut streams = Vec::new();
        for _ in 0..watchers {
            streams.push(watch(&inspector).await);
        }
        watched.push(settle(&tree, agents).await);
        // Let the last batches go out before the streams end.
        tokio::time::sleep(Duration::from_millis(300)).await;
        inspector.stop().await;
        for stream in streams {
            streamed += stream.await.unwrap_or(0);
        }
        tree.shutdown().await;
    }
    let (alone, watched) = (median(alone), median(watched));
    println!(
        "inspector load: agents={agents} watchers=0 settle_ms={}",
        alone.as_millis()
    );
    println!(
        "inspector load: agents={agents} watchers={watchers} settle_ms={} ratio={:.2} streamed_mib={:.1}",
        watched.as_millis(),
        watched.as_secs_f64() / alone.as_secs_f64(),
        streamed as f64 / runs as f64 / 1_048_576.0
    );

    let tree = new_tree(whole).await;
    settle(&tree, whole).await;
    let inspector = Inspector::serve(tree.clone(), InspectorConfig::default())
        .await
        .expect("serves");
    let started = Instant::now();
    let mut stream = tokio::net::TcpStream::connect(inspector.addr())
        .await
        .expect("connects");
    let head = format!(
        "GET /api/snapshot HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
        inspector.addr(),
        inspector.token()
    );
    stream.write_all(head.as_bytes()).await.expect("writes");
    let mut body = Vec::new();
    stream.read_to_end(&mut body).await.expect("reads");
    println!(
        "inspector whole: agents={whole} bytes={} ms={}",
        body.len(),
        started.elapsed().as_millis()
    );
    inspector.stop().await;
    tree.shutdown().await;
}
