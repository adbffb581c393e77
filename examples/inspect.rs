//! The ticket-handler tree, slowed down, with the live inspector on: open the address it
//! prints in a browser and watch 11 agents spawn, work and settle, four levels deep; steer,
//! abort or kill one, or shut the tree down, from the page.
//!
//! `cargo run --features inspector --example inspect` (a new ticket every time the last one
//! is handled, until Ctrl-C); `-- --once` handles one ticket and exits; `-- --read-only`
//! serves a page without controls; `-- --slow-ms N` sets each model turn's time (default
//! 1500); `-- --rewind <journal>` serves a journal instead, to scrub through its events
//! (until Ctrl-C).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agent_tree::inspector::{Inspector, InspectorConfig, Timeline};
use agent_tree::prelude::*;
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};

fn definitions() -> Vec<AgentDefinition> {
    let delegator = |name: &str, prompt: &str, allowed: &[&str]| {
        AgentDefinition::new(name, prompt)
            .with_allowed_subagents(SubagentAllowance::only(allowed.iter().copied()))
    };
    vec![
        delegator(
            "orchestrator",
            "You route incoming tickets.",
            &["ticket-handler"],
        ),
        delegator(
            "ticket-handler",
            "You own one ticket.",
            &["planner", "implementer"],
        ),
        delegator("planner", "You plan a fix.", &["analyst", "writer"]),
        delegator(
            "implementer",
            "You implement a plan.",
            &["analyst", "coder-node", "coder-react"],
        ),
        AgentDefinition::new("analyst", "You analyse one aspect."),
        AgentDefinition::new("writer", "You write the plan down."),
        AgentDefinition::new("coder-node", "You change the Node.js service."),
        AgentDefinition::new("coder-react", "You change the React front end."),
    ]
}

/// The ticket handler's scripts, every turn taking `slow`.
fn model(slow: Duration) -> ScriptedModel {
    let turn = |t: Turn, input: u64, output: u64| t.usage(Usage::tokens(input, output)).after(slow);
    let leaf = |answer: &str| Script::new([turn(Turn::answer(answer), 90, 40)]);
    ScriptedModel::new()
        .script(
            "orchestrator",
            Script::new([
                turn(
                    Turn::spawn(
                        "ticket-handler",
                        "Ticket #4127: checkout button does nothing",
                    ),
                    300,
                    40,
                ),
                turn(Turn::answer("Ticket #4127 resolved"), 420, 60),
            ]),
        )
        .script(
            "ticket-handler",
            Script::new([
                turn(Turn::spawn("planner", "Plan the fix"), 250, 30),
                turn(Turn::spawn("implementer", "Implement the plan"), 260, 30),
                turn(Turn::answer("Planned and implemented"), 280, 50),
            ]),
        )
        .script(
            "planner",
            Script::new([
                turn(
                    Turn::calls([
                        Call::spawn("analyst", "Read the checkout logs"),
                        Call::spawn("analyst", "Read the payment client"),
                        Call::spawn("analyst", "Read the button component"),
                    ]),
                    100,
                    20,
                ),
                turn(Turn::spawn("writer", "Write the plan"), 150, 25),
                turn(
                    Turn::answer("Plan: fix the click handler, retry the payment"),
                    200,
                    40,
                ),
            ]),
        )
        .script(
            "implementer",
            Script::new([
                turn(
                    Turn::calls([
                        Call::spawn("analyst", "Confirm the root cause"),
                        Call::spawn("coder-node", "Add the retry"),
                        Call::spawn("coder-react", "Fix the handler"),
                    ]),
                    180,
                    30,
                ),
                turn(Turn::answer("Both changes made"), 210, 35),
            ]),
        )
        .script("analyst", leaf("finding"))
        .script("writer", leaf("the plan"))
        .script("coder-node", leaf("retry added"))
        .script("coder-react", leaf("handler fixed"))
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let once = args.iter().any(|a| a == "--once");
    let read_only = args.iter().any(|a| a == "--read-only");
    let slow_ms = args
        .iter()
        .position(|a| a == "--slow-ms")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500);
    if let Some(journal) = args
        .iter()
        .position(|a| a == "--rewind")
        .and_then(|i| args.get(i + 1))
    {
        return rewind(std::path::Path::new(journal)).await;
    }
    let catalog = Catalog::new(definitions()).expect("the example's definitions are valid");
    let tree = Tree::builder()
        .catalog(catalog)
        .model(model(Duration::from_millis(slow_ms)))
        .build()
        .await
        .expect("a tree with a model builds");
    let tree = Arc::new(tree);
    let mut config = InspectorConfig::default();
    if read_only {
        config = config.read_only();
    }
    let inspector = match Inspector::serve(tree.clone(), config).await {
        Ok(inspector) => inspector,
        Err(error) => {
            eprintln!("inspect: {error}");
            return ExitCode::FAILURE;
        }
    };
    println!("inspector: {}", inspector.url());
    println!("address: {} token: {}", inspector.addr(), inspector.token());
    let mut ticket = 1;
    loop {
        let request = SpawnRequest::new("orchestrator", format!("New ticket #{ticket}"));
        match tree.run(request).await {
            Ok(outcome) => println!("ticket {ticket}: {:?}", outcome.status),
            Err(refused) => {
                // The page shut the tree down.
                println!("the tree takes no more work: {refused}");
                break;
            }
        }
        if once {
            break;
        }
        ticket += 1;
    }
    inspector.stop().await;
    tree.shutdown().await;
    ExitCode::SUCCESS
}

/// Serves `journal` rewound, until the process is stopped.
async fn rewind(journal: &std::path::Path) -> ExitCode {
    let timeline = match Timeline::read(journal) {
        Ok(timeline) => timeline,
        Err(error) => {
            eprintln!("inspect: {error}");
            return ExitCode::FAILURE;
        }
    };
    let events = timeline.len();
    match Inspector::rewind(timeline, InspectorConfig::default()).await {
        Ok(inspector) => {
            println!("inspector: {}", inspector.url());
            println!("rewind: {} events of {}", events, journal.display());
            std::future::pending::<()>().await;
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("inspect: {error}");
            ExitCode::FAILURE
        }
    }
}
