//! Wait policies: a checkout waits on four payments under `fail_fast`, and a diagnosis waits
//! on four probes under `all_settled`. Both run through the agents' own `wait_subagents`
//! tool with a scripted model; time is virtual, so the run is deterministic.
//!
//! The printed outcomes are read from the tool result the waiting agent received, and
//! checked against the tree's records before they are printed.

use std::process::ExitCode;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::WaitPolicy;
use agent_tree::testkit::{Call, Script, ScriptedModel, Target, Turn};

/// Spawns `labels.len()` children of `child_type` in the background, waits on them under
/// `policy`, then answers.
fn parent_script(child_type: &str, labels: &[&str], policy: WaitPolicy) -> Script {
    Script::new([
        Turn::calls(
            labels
                .iter()
                .map(|l| Call::spawn_background(child_type, *l)),
        ),
        Turn::calls([Call::wait((0..labels.len()).map(Target::Spawned), policy)]),
        Turn::answer("done"),
    ])
}

/// Runs `parent` with children scripted by `behaviours` (in spawn order), and returns the
/// `label=status` pairs of the wait's result, after checking them against the records.
async fn run(
    parent: &str,
    child_type: &str,
    behaviours: Vec<(&'static str, Turn)>,
    policy: WaitPolicy,
    failures: &mut Vec<String>,
) -> (Outcome, String) {
    let labels: Vec<&str> = behaviours.iter().map(|(l, _)| *l).collect();
    let model = ScriptedModel::new().script(parent, parent_script(child_type, &labels, policy));
    // Ids follow admission order: the parent is a1, its children a2, a3, ...
    for (i, (_, turn)) in behaviours.into_iter().enumerate() {
        model.script_agent(AgentId::new(i as u64 + 2), Script::new([turn]));
    }
    let catalog = Catalog::new([
        AgentDefinition::new(parent, "You wait on your children.")
            .with_allowed_subagents(SubagentAllowance::only([child_type])),
        AgentDefinition::new(child_type, "You do one thing."),
    ])
    .expect("valid definitions");
    let tree = Tree::builder()
        .catalog(catalog)
        .model(model.clone())
        .build()
        .await
        .expect("the tree builds");
    let outcome = tree
        .run(SpawnRequest::new(parent, "go"))
        .await
        .expect("admitted");
    tree.idle().await;

    // The wait's result is the tool result of the parent's third model call.
    let waited = model
        .log_of(AgentId::new(1))
        .get(2)
        .and_then(|call| call.results.first().cloned());
    let value: serde_json::Value = waited
        .as_ref()
        .and_then(|m| serde_json::from_str(&m.content).ok())
        .unwrap_or_default();
    let empty = Vec::new();
    let outcomes = value["outcomes"].as_array().unwrap_or(&empty);
    let mut pairs = Vec::new();
    for (i, label) in labels.iter().enumerate() {
        let status = outcomes
            .get(i)
            .and_then(|o| o["status"].as_str())
            .unwrap_or("missing");
        let id = AgentId::new(i as u64 + 2);
        let recorded = tree
            .record(id)
            .map(|r| r.status.to_string())
            .unwrap_or_default();
        if recorded != status
            || outcomes.get(i).and_then(|o| o["agent_id"].as_str()) != Some(&id.to_string())
        {
            failures.push(format!(
                "{label}: wait said {status}, record says {recorded}"
            ));
        }
        pairs.push(format!("{label}={status}"));
    }
    tree.shutdown().await;
    (outcome, pairs.join(" "))
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> ExitCode {
    let ms = Duration::from_millis;
    let mut failures = Vec::new();

    let payments = vec![
        ("p1", Turn::answer("charged card").after(ms(500))),
        ("p2", Turn::fail("card declined").after(ms(100))),
        ("p3", Turn::answer("charged wallet").after(ms(300))),
        ("p4", Turn::hang()),
    ];
    let (checkout, outcomes) = run(
        "checkout",
        "payment",
        payments,
        WaitPolicy::FailFast,
        &mut failures,
    )
    .await;
    println!("outcomes: {outcomes}");
    println!("checkout: {}", checkout.status);

    let probes = vec![
        ("q1", Turn::answer("disk ok").after(ms(100))),
        ("q2", Turn::fail("dns timeout").after(ms(50))),
        ("q3", Turn::answer("memory ok").after(ms(200))),
        ("q4", Turn::answer("cpu ok").after(ms(10))),
    ];
    let (diagnosis, outcomes) = run(
        "diagnosis",
        "probe",
        probes,
        WaitPolicy::AllSettled,
        &mut failures,
    )
    .await;
    println!("probes: {outcomes}");
    if !diagnosis.is_completed() {
        failures.push(format!("diagnosis: {}", diagnosis.summary()));
    }

    for failure in &failures {
        eprintln!("check failed: {failure}");
    }
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
