//! One-deadline shutdown of a large tree, in real time: 1,060 agents (10 hubs × 10 workers ×
//! 9 leaves, plus a chain 50 deep) whose shutdown hooks mostly flush quickly, but some never
//! return and some panic. The whole tree is shut down with the default grace (3 s): every
//! agent is told at once, hooks run concurrently under the one deadline, children settle
//! before owners, and whatever is alive at the deadline is killed.
//!
//! The report's counts come from the runtime, and the last line asks ractor, not our
//! records, how many agent actors are still alive.

use std::process::ExitCode;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::EventKind;
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use agent_tree::{DEFAULT_SHUTDOWN_GRACE, HookContext, HookError};

const HUBS: usize = 10;
const WORKERS_PER_HUB: usize = 10;
const LEAVES_PER_WORKER: usize = 9;
const CHAIN: u32 = 50;
const TOTAL: usize =
    HUBS + HUBS * WORKERS_PER_HUB + HUBS * WORKERS_PER_HUB * LEAVES_PER_WORKER + CHAIN as usize;

fn fan_out(child: &str, n: usize) -> Script {
    Script::new([
        Turn::calls((0..n).map(|i| Call::spawn_background(child, format!("part {i}")))),
        Turn::hang(),
    ])
}

/// What an agent's shutdown hook does, chosen by its id: most flush for a few ms, every
/// 97th never returns, every 89th panics.
async fn flush(ctx: HookContext) -> Result<(), HookError> {
    let n = ctx.agent.get();
    if n.is_multiple_of(97) {
        std::future::pending::<()>().await;
    }
    if n.is_multiple_of(89) {
        panic!("flush of {} panicked", ctx.agent);
    }
    tokio::time::sleep(Duration::from_millis(5 + n % 40)).await;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    // The panicking hooks are part of the scenario: keep their panics off the terminal (the
    // runtime reports them in the shutdown report), and let any other panic print as usual.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let expected = info
            .payload()
            .downcast_ref::<String>()
            .is_some_and(|m| m.starts_with("flush of"));
        if !expected {
            default_hook(info);
        }
    }));
    let catalog = Catalog::new([
        AgentDefinition::new("hub", "You run a region.")
            .with_allowed_subagents(SubagentAllowance::only(["worker"])),
        AgentDefinition::new("worker", "You run a shard.")
            .with_allowed_subagents(SubagentAllowance::only(["leaf"])),
        AgentDefinition::new("leaf", "You hold a connection."),
        AgentDefinition::new("link", "You are one link of a chain.")
            .with_allowed_subagents(SubagentAllowance::only(["link"])),
    ])
    .expect("valid definitions");
    let model = ScriptedModel::new()
        .script("hub", fan_out("worker", WORKERS_PER_HUB))
        .script("worker", fan_out("leaf", LEAVES_PER_WORKER))
        .script("leaf", Script::new([Turn::hang()]))
        // The deepest link is at the cap: its spawn is refused, and it hangs like the rest.
        .script(
            "link",
            Script::new([Turn::spawn_background("link", "next link"), Turn::hang()]),
        );
    let config = TreeConfig::default()
        .with_max_depth(CHAIN)
        .with_max_total_agents(TOTAL + 10)
        .with_max_children_per_agent(WORKERS_PER_HUB.max(LEAVES_PER_WORKER))
        .with_max_concurrent(HUBS + 1);
    let tree = Tree::builder()
        .config(config)
        .catalog(catalog)
        .model(model)
        .on_shutdown(flush)
        .build()
        .await
        .expect("the tree builds");

    let mut events = tree.subscribe();
    for _ in 0..HUBS {
        tree.spawn(SpawnRequest::new("hub", "serve").background())
            .await
            .expect("admitted");
    }
    tree.spawn(SpawnRequest::new("link", "start the chain").background())
        .await
        .expect("admitted");
    let mut started = 0;
    while started < TOTAL {
        match events.next().await {
            Some(event) if matches!(event.kind, EventKind::Started { .. }) => started += 1,
            Some(_) => {}
            None => break,
        }
    }
    let snapshot = tree.snapshot();
    let deepest = snapshot.agents().map(|r| r.depth).max().unwrap_or_default();
    let built = snapshot.agents().count();

    let report = tree.shutdown().await;
    let alive = tree.alive_actors().len();
    let elapsed_ms = report.elapsed.as_millis();
    println!(
        "shutdown: graceful={} killed={} hook_failures={} elapsed_ms={elapsed_ms}",
        report.graceful.len(),
        report.killed.len(),
        report.hook_failures.len()
    );
    println!("alive after shutdown: {alive}");

    let mut failures = Vec::new();
    if built != TOTAL || deepest != CHAIN {
        failures.push(format!("built {built} agents, deepest at depth {deepest}"));
    }
    if report.graceful.len() + report.killed.len() != TOTAL {
        failures.push("the report does not account for every agent".into());
    }
    if elapsed_ms > DEFAULT_SHUTDOWN_GRACE.as_millis() + 200 {
        failures.push(format!("shutdown took {elapsed_ms} ms"));
    }
    if tree.snapshot().live() != 0 {
        failures.push("records still live after shutdown".into());
    }
    for failure in &failures {
        eprintln!("check failed: {failure}");
    }
    if failures.is_empty() && alive == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
