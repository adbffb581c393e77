//! Shared helpers of the race tests (paused time and worker threads) that several behaviour
//! modules hold: guards for one wait, bounded waits that fail with a message instead of
//! hanging, yield loops that vary the timing of a race, and the `slow` user tool.
//!
//! Paused-time tests are deterministic; worker-thread tests (`_mt`) loop a race many times
//! with varied timing and assert the correct outcome every time.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::testkit::Call;
use agent_tree::{FnTool, ToolError};
use serde_json::json;

use super::lifetimes::ms;

/// Under paused time a guard costs nothing; on worker threads it is real time.
pub const GUARD: Duration = Duration::from_secs(3600);

/// The bound of one wait on worker threads (real time).
pub const REAL_GUARD: Duration = Duration::from_secs(5);

/// Awaits `future`, failing the test with `what` if it takes longer than `limit`.
pub async fn bounded<T>(
    limit: Duration,
    what: &str,
    future: impl std::future::Future<Output = T>,
) -> T {
    match tokio::time::timeout(limit, future).await {
        Ok(value) => value,
        Err(_) => panic!("hang: timed out after {limit:?} waiting for {what}"),
    }
}

/// The outcome of `id`, failing the test with the tree's rendering if it takes longer than
/// `limit`.
pub async fn outcome(tree: &Tree, id: AgentId, limit: Duration) -> Outcome {
    let mut handle = tree.handle(id).expect("the agent exists");
    match tokio::time::timeout(limit, handle.outcome()).await {
        Ok(outcome) => outcome,
        Err(_) => panic!(
            "hang: {id} never settled within {limit:?}:\n{}",
            tree.snapshot().render_text()
        ),
    }
}

/// Runs `scenario` `times` times, each on a fresh runtime with two worker threads, where
/// messages and the journal's writer interleave differently each time; a run that takes
/// longer than `limit` (real time) fails the test as a hang.
pub fn on_worker_threads<F, Fut>(times: usize, limit: Duration, mut scenario: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for run in 0..times {
        crate::support::races::runtime_on(2).block_on(bounded(
            limit,
            &format!("run {run} of the scenario"),
            scenario(),
        ));
    }
}

/// Yields to the runtime `n` times (varies the timing of a race).
pub async fn yields(n: u64) {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
}

/// The `slow` tool: sleeps `ms`, answers `slow <tag>`.
pub fn slow_tool() -> impl agent_tree::Tool {
    FnTool::new(
        "slow",
        "sleeps, then answers",
        |_ctx, input: serde_json::Value| async move {
            let wait = input["ms"].as_u64().unwrap_or(0);
            tokio::time::sleep(ms(wait)).await;
            Ok::<String, ToolError>(format!("slow {}", input["tag"].as_str().unwrap_or("?")))
        },
    )
}

/// A scripted call of the `slow` tool, tagged `tag`, sleeping `wait` ms.
pub fn slow(tag: &str, wait: u64) -> Call {
    Call::tool("slow", json!({ "tag": tag, "ms": wait }))
}

/// A multi-thread runtime of `workers` worker threads, with time and I/O.
pub fn runtime_on(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("a runtime")
}
