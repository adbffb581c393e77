//! The main example: a support ticket handled by a tree of 11 agents, four levels deep, with
//! a scripted model.
//!
//! ```text
//! orchestrator (d1)
//! └── ticket-handler (d2)
//!     ├── planner (d3): 3 analysts in parallel (d4), then a writer (d4)
//!     └── implementer (d3): analyst, coder-node, coder-react in parallel (d4)
//! ```
//!
//! It prints the tree's snapshot, then checks the usage invariant on it
//! (`subtree == own + Σ children.subtree` for every agent, and the root's total equals the
//! sum of all own usage) and that the parallel children really overlapped, and only then
//! prints `usage check: ok`.

use std::process::ExitCode;
use std::time::Duration;

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
            "You own one ticket: plan it, then implement it.",
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

fn model() -> ScriptedModel {
    // Leaves take a little time, so siblings started in one turn visibly run side by side.
    let work = Duration::from_millis(40);
    let leaf = |answer: &str, input: u64, output: u64| {
        Script::new([Turn::answer(answer)
            .usage(Usage::tokens(input, output))
            .after(work)])
    };
    ScriptedModel::new()
        .script(
            "orchestrator",
            Script::new([
                Turn::spawn(
                    "ticket-handler",
                    "Ticket #4127: checkout button does nothing",
                )
                .usage(Usage::tokens(300, 40)),
                Turn::answer("Ticket #4127 resolved").usage(Usage::tokens(420, 60)),
            ]),
        )
        .script(
            "ticket-handler",
            Script::new([
                Turn::spawn("planner", "Plan the fix for #4127").usage(Usage::tokens(250, 30)),
                Turn::spawn("implementer", "Implement the plan for #4127")
                    .usage(Usage::tokens(260, 30)),
                Turn::answer("Planned and implemented").usage(Usage::tokens(280, 50)),
            ]),
        )
        .script(
            "planner",
            Script::new([
                Turn::calls([
                    Call::spawn("analyst", "Read the checkout logs"),
                    Call::spawn("analyst", "Read the payment client"),
                    Call::spawn("analyst", "Read the button component"),
                ])
                .usage(Usage::tokens(100, 20)),
                Turn::spawn("writer", "Write the plan").usage(Usage::tokens(150, 25)),
                Turn::answer("Plan: fix the click handler, retry the payment call")
                    .usage(Usage::tokens(200, 40)),
            ]),
        )
        .script(
            "implementer",
            Script::new([
                Turn::calls([
                    Call::spawn("analyst", "Confirm the root cause"),
                    Call::spawn("coder-node", "Add the retry"),
                    Call::spawn("coder-react", "Fix the handler"),
                ])
                .usage(Usage::tokens(180, 30)),
                Turn::answer("Both changes made").usage(Usage::tokens(210, 35)),
            ]),
        )
        .script("analyst", leaf("finding", 90, 30))
        .script("writer", leaf("the plan", 110, 70))
        .script("coder-node", leaf("retry added", 140, 90))
        .script("coder-react", leaf("handler fixed", 130, 80))
}

/// Whether any two of `ids` were live at the same time.
fn overlapped(snapshot: &agent_tree::protocol::TreeSnapshot, ids: &[AgentId]) -> bool {
    let spans: Vec<(u64, u64)> = ids
        .iter()
        .filter_map(|&id| snapshot.record(id))
        .map(|r| (r.created_ms, r.ended_ms.unwrap_or(u64::MAX)))
        .collect();
    spans.len() == ids.len()
        && spans
            .iter()
            .all(|a| spans.iter().all(|b| a.0 <= b.1 && b.0 <= a.1))
}

#[tokio::main]
async fn main() -> ExitCode {
    let catalog = Catalog::new(definitions()).expect("the example's definitions are valid");
    let tree = Tree::builder()
        .catalog(catalog)
        .model(model())
        .build()
        .await
        .expect("a tree with a model builds");

    let outcome = tree
        .run(SpawnRequest::new("orchestrator", "New ticket #4127"))
        .await
        .expect("the orchestrator is admitted");
    tree.idle().await;
    let snapshot = tree.snapshot();
    print!("{}", snapshot.render_text());

    let mut failures = Vec::new();
    if !outcome.is_completed() {
        failures.push(format!(
            "orchestrator did not complete: {}",
            outcome.summary()
        ));
    }
    if snapshot.depth_histogram_line() != "d1=1 d2=1 d3=2 d4=7" {
        failures.push(format!(
            "unexpected shape: {}",
            snapshot.depth_histogram_line()
        ));
    }
    if snapshot.tally.started != 11 || snapshot.tally.completed != 11 {
        failures.push(format!("unexpected tally: {}", snapshot.tally));
    }
    let planner = snapshot.agents().find(|r| r.agent_type == "planner");
    let analysts: Vec<AgentId> = planner
        .map(|p| {
            p.children
                .iter()
                .copied()
                .filter(|&c| {
                    snapshot
                        .record(c)
                        .is_some_and(|r| r.agent_type == "analyst")
                })
                .collect()
        })
        .unwrap_or_default();
    if analysts.len() != 3 || !overlapped(&snapshot, &analysts) {
        failures.push("the planner's three analysts did not run in parallel".into());
    }
    if !(5..=7).contains(&snapshot.peak_live) {
        failures.push(format!(
            "peak of live agents {} is outside 5..=7",
            snapshot.peak_live
        ));
    }
    match snapshot.check_usage() {
        Ok(()) if failures.is_empty() => println!("usage check: ok"),
        Ok(()) => {}
        Err(mismatch) => failures.push(mismatch.to_string()),
    }
    tree.shutdown().await;
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        for failure in failures {
            eprintln!("check failed: {failure}");
        }
        ExitCode::FAILURE
    }
}
