//! Erlang-style restarts: a flaky agent fails four times in a row under a supervisor agent
//! with restart intensity 3 per 5 s. Three restarts happen (same AgentId, new incarnation),
//! the fourth failure exceeds the intensity and the supervisor fails, escalating the
//! original cause to the application. Then the same under `rest_for_one`, where the
//! siblings started after the flaky one restart with it and the one started before does not.
//!
//! Every printed line is read from the tree's `restarted` events and records. Time is
//! virtual, so the run is deterministic.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{EventKind, RestartPolicy, Strategy};
use agent_tree::testkit::{Call, Script, ScriptedModel, Target, Turn};

const INTENSITY: u32 = 3;
const PERIOD_MS: u64 = 5_000;

fn flaky_script() -> Script {
    Script::new((0..4).map(|_| {
        Turn::fail("connection reset by payment gateway").after(Duration::from_millis(200))
    }))
}

fn hanging_script() -> Script {
    Script::new((0..8).map(|_| Turn::hang()))
}

/// Runs a supervisor of `strategy` over `children` (types, in start order), waiting on the
/// child at `flaky`. Prints a line per restart of the flaky child naming every agent
/// restarted with it, then the escalation.
async fn run(strategy: Strategy, children: &[&str], flaky: usize, failures: &mut Vec<String>) {
    let model = ScriptedModel::new()
        .script(
            "supervisor",
            Script::new([
                Turn::calls(
                    children
                        .iter()
                        .map(|c| Call::spawn_background(*c, format!("run {c}"))),
                ),
                Turn::calls([Call::result(Target::Spawned(flaky))]),
                Turn::answer("all good"),
            ]),
        )
        .script("flaky", flaky_script())
        .script("db", hanging_script())
        .script("cache", hanging_script())
        .script("web", hanging_script());
    let mut definitions = vec![
        AgentDefinition::new("supervisor", "You supervise services.")
            .with_allowed_subagents(SubagentAllowance::All)
            .with_supervision(strategy, INTENSITY, PERIOD_MS),
        AgentDefinition::new("flaky", "You talk to a flaky gateway.")
            .with_restart(RestartPolicy::Transient),
    ];
    for service in ["db", "cache", "web"] {
        definitions.push(
            AgentDefinition::new(service, "You run a service.")
                .with_restart(RestartPolicy::Permanent),
        );
    }
    let tree = Tree::builder()
        .catalog(Catalog::new(definitions).expect("valid definitions"))
        .model(model)
        .build()
        .await
        .expect("the tree builds");
    let mut events = tree.subscribe();
    let outcome = tree
        .run(SpawnRequest::new("supervisor", "keep the services up"))
        .await
        .expect("admitted");
    tree.idle().await;
    let snapshot = tree.snapshot();
    let type_of = |id: AgentId| {
        snapshot
            .record(id)
            .map(|r| r.agent_type.clone())
            .unwrap_or_default()
    };

    // One restart decision restarts its agents at one instant (time is virtual, and each
    // failure takes 200 ms): group the `restarted` events by time.
    let mut groups: BTreeMap<u64, Vec<(AgentId, u32)>> = BTreeMap::new();
    for event in events.drain() {
        if let EventKind::Restarted { incarnation } = event.kind {
            groups
                .entry(event.at_ms)
                .or_default()
                .push((event.agent, incarnation));
        }
    }
    for (n, members) in groups.values().enumerate() {
        let incarnation = members
            .iter()
            .find(|(id, _)| type_of(*id) == "flaky")
            .map(|&(_, i)| i)
            .unwrap_or_default();
        // Restarts happen in start order, so `members` is in start order already.
        let restarted: Vec<String> = members.iter().map(|&(id, _)| type_of(id)).collect();
        let kept: Vec<&str> = children
            .iter()
            .copied()
            .filter(|c| !restarted.iter().any(|r| r == c))
            .collect();
        let expected: Vec<&str> = match strategy {
            Strategy::OneForOne => vec!["flaky"],
            Strategy::OneForAll => children.to_vec(),
            Strategy::RestForOne => children[flaky..].to_vec(),
        };
        if restarted != expected {
            failures.push(format!(
                "restart {} restarted {restarted:?}, expected {expected:?}",
                n + 1
            ));
        }
        if children.len() == 1 {
            println!("restart {} incarnation={incarnation}", n + 1);
        } else {
            println!(
                "restart {} incarnation={incarnation} restarted={} kept={}",
                n + 1,
                restarted.join(","),
                if kept.is_empty() {
                    "-".to_owned()
                } else {
                    kept.join(",")
                }
            );
        }
    }
    if groups.len() != INTENSITY as usize {
        failures.push(format!("{} restarts, expected {INTENSITY}", groups.len()));
    }
    let cause = outcome.error.clone().unwrap_or_default();
    if outcome.status != AgentStatus::Failed || !cause.contains("connection reset") {
        failures.push(format!("supervisor ended {}", outcome.summary()));
    }
    println!("escalated: {cause}");
    tree.shutdown().await;
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> ExitCode {
    let mut failures = Vec::new();
    println!(
        "one_for_one, intensity {INTENSITY} per {} s:",
        PERIOD_MS / 1000
    );
    run(Strategy::OneForOne, &["flaky"], 0, &mut failures).await;
    println!(
        "rest_for_one, intensity {INTENSITY} per {} s:",
        PERIOD_MS / 1000
    );
    run(
        Strategy::RestForOne,
        &["db", "flaky", "cache", "web"],
        1,
        &mut failures,
    )
    .await;
    for failure in &failures {
        eprintln!("check failed: {failure}");
    }
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
