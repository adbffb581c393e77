//! Ownership audit: every delegation and control rule exercised for real, through the agents'
//! own tools, with a scripted model. Each line prints the verdict the runtime returned.
//!
//! ```text
//! main (d0) └─ A coordinator (d1; tools: read; allowed_subagents: writer, reviewer)
//!              ├─ B writer (d2; tools: read, write, bash)
//!              └─ C reviewer (d2; allowed_subagents: evidence-checker)
//!                 └─ D evidence-checker (d3)
//! ```
//!
//! `max_depth` is 3 and the catalog holds the fallback type `general-purpose`, which is never
//! substituted for a mistyped name. The cleanup part runs a second tree with `max_depth` 4.
//! Time is virtual (paused), so the run is deterministic.

use std::process::ExitCode;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{Message, ToolSet};
use agent_tree::testkit::{Call, ModelCall, Script, ScriptedModel, Target, Turn};
use agent_tree::{FnTool, ToolError};

fn tool(
    name: &'static str,
) -> FnTool<
    impl Fn(agent_tree::ToolContext, serde_json::Value) -> std::future::Ready<Result<String, ToolError>>
    + Send
    + Sync
    + 'static,
> {
    FnTool::new(name, format!("the {name} tool"), move |_, _| {
        std::future::ready(Ok(format!("{name}: ok")))
    })
}

fn catalog() -> Catalog {
    Catalog::new([
        AgentDefinition::new("coordinator", "You coordinate a review.")
            .with_tools(ToolSet::only(["read"]))
            .with_allowed_subagents(SubagentAllowance::only(["writer", "reviewer"])),
        AgentDefinition::new("writer", "You write.")
            .with_tools(ToolSet::only(["read", "write", "bash"])),
        AgentDefinition::new("reviewer", "You review.")
            .with_allowed_subagents(SubagentAllowance::only(["evidence-checker"])),
        AgentDefinition::new("evidence-checker", "You check evidence.")
            .with_allowed_subagents(SubagentAllowance::All),
        AgentDefinition::new("general-purpose", "The project's fallback type."),
    ])
    .expect("the audit's definitions are valid")
}

async fn tree(model: &ScriptedModel, config: TreeConfig) -> Tree {
    Tree::builder()
        .config(config)
        .catalog(catalog())
        .model(model.clone())
        .tool(tool("read"))
        .and_then(|b| b.tool(tool("write")))
        .and_then(|b| b.tool(tool("bash")))
        .expect("tool names are free")
        .build()
        .await
        .expect("the tree builds")
}

/// The tool results agent `agent` saw on its `turn`-th model call (from 1).
fn results(model: &ScriptedModel, agent: AgentId, turn: usize) -> Vec<Message> {
    model
        .log_of(agent)
        .get(turn - 1)
        .map(|call| call.results.clone())
        .unwrap_or_default()
}

fn verdict(result: Option<&Message>) -> &'static str {
    match result {
        Some(m) if !m.is_error => "allowed",
        Some(_) => "rejected",
        None => "missing",
    }
}

/// The user tools an agent was offered, in a stable order.
fn user_tools(call: Option<&ModelCall>) -> String {
    let mut tools: Vec<String> = call
        .map(|c| {
            c.tools
                .iter()
                .filter(|t| ["read", "write", "bash"].contains(&t.as_str()))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let order = ["read", "write", "bash"];
    tools.sort_by_key(|t| order.iter().position(|o| o == t));
    tools.join(",")
}

fn a(n: u64) -> AgentId {
    AgentId::new(n)
}

async fn audit(lines: &mut Vec<String>, failures: &mut Vec<String>) {
    // Ids are assigned in admission order: A=a1, B=a2, C=a3, D=a4.
    let model = ScriptedModel::new()
        .script(
            "coordinator",
            Script::new([
                Turn::calls([
                    Call::spawn_background("writer", "draft the report"),
                    Call::spawn_background("reviewer", "review the evidence"),
                ]),
                Turn::calls([
                    Call::spawn("wrtier", "draft it again"),
                    Call::result(Target::Spawned(0)),
                    Call::result(Target::Spawned(1)),
                ]),
                Turn::calls(
                    (0..50).map(|i| Call::spawn_background("writer", format!("flood {i}"))),
                ),
                Turn::answer("audited"),
            ]),
        )
        .script(
            "writer",
            Script::new([
                Turn::calls([Call::peek(Target::Raw("a3".into()))]),
                Turn::answer("written").after(Duration::from_millis(10)),
            ]),
        )
        .script(
            "reviewer",
            Script::new([
                Turn::spawn("evidence-checker", "check the sources"),
                Turn::answer("reviewed"),
            ]),
        )
        .script(
            "evidence-checker",
            Script::new([
                Turn::spawn("general-purpose", "dig deeper"),
                Turn::answer("checked"),
            ]),
        );
    let tree = tree(&model, TreeConfig::default().with_max_depth(3)).await;
    let outcome = tree
        .run(SpawnRequest::new("coordinator", "audit the release"))
        .await
        .expect("the coordinator is admitted");
    tree.idle().await;
    if !outcome.is_completed() {
        failures.push(format!("coordinator: {}", outcome.summary()));
    }

    // 1: A's first turn spawned B; B's own offered tools show the grant.
    let spawn_b = results(&model, a(1), 2);
    lines.push(format!("1 A spawns writer: {}", verdict(spawn_b.first())));
    let b_tools = user_tools(model.log_of(a(2)).first());
    lines.push(format!(
        "  B runs with {b_tools} (its own definition's tools; A holds read)"
    ));
    if b_tools != "read,write,bash" {
        failures.push(format!("B's tools are {b_tools}"));
    }

    // 2: B's second call saw the result of reading C's result.
    lines.push(format!(
        "2 B reads C's result: {}",
        verdict(results(&model, a(2), 2).first())
    ));

    // 3: A's third call saw the mistyped spawn's result first.
    let typo = results(&model, a(1), 3);
    lines.push(format!("3 A spawns wrtier: {}", verdict(typo.first())));
    if typo
        .first()
        .is_some_and(|m| m.content.contains("general-purpose") && !m.is_error)
    {
        failures.push("a fallback type was substituted".into());
    }

    // 4: C's spawn of D, answered when D settled.
    let d = tree.record(a(4));
    let d_depth = d.as_ref().map(|r| r.depth).unwrap_or_default();
    lines.push(format!(
        "4 C spawns evidence-checker at depth {d_depth}: {}",
        verdict(results(&model, a(3), 2).first())
    ));

    // 5: D is at the cap: the Agent tool is not offered, and calling it anyway fails.
    let d_offered = model
        .log_of(a(4))
        .first()
        .is_some_and(|c| c.tools.iter().any(|t| t == "Agent"));
    lines.push(format!(
        "5 D spawns a child: {}",
        verdict(results(&model, a(4), 2).first())
    ));
    if d_offered {
        failures.push("D was offered the Agent tool at the depth cap".into());
    }

    // 6: A's last call saw the 50 spawn results.
    let flood = results(&model, a(1), 4);
    let admitted = flood.iter().filter(|m| !m.is_error).count();
    let refused = flood
        .iter()
        .filter(|m| m.is_error && m.content.contains("max_children_per_agent"))
        .count();
    let bounded = admitted <= 4 && admitted + refused == 50;
    lines.push(format!(
        "6 A spawns 50 background children: {} (admitted {admitted}, refused {refused})",
        if bounded { "bounded" } else { "unbounded" }
    ));
    if !bounded {
        failures.push("the flood was not bounded".into());
    }
    tree.shutdown().await;
}

async fn attenuated(lines: &mut Vec<String>, failures: &mut Vec<String>) {
    let model = ScriptedModel::new()
        .script(
            "coordinator",
            Script::new([Turn::spawn("writer", "draft"), Turn::answer("done")]),
        )
        .script("writer", Script::new([Turn::answer("drafted")]));
    let config = TreeConfig::default()
        .with_max_depth(3)
        .with_attenuated_tools(true);
    let tree = tree(&model, config).await;
    let outcome = tree.run(SpawnRequest::new("coordinator", "go")).await;
    let verdict = verdict(results(&model, a(1), 2).first());
    let tools = user_tools(model.log_of(a(2)).first());
    lines.push(format!(
        "1b A spawns writer with attenuation on: {verdict}, attenuated to {tools}"
    ));
    if tools != "read" || !outcome.is_ok_and(|o| o.is_completed()) {
        failures.push(format!("attenuation gave {tools}"));
    }
    tree.shutdown().await;
}

async fn cleanup(lines: &mut Vec<String>, failures: &mut Vec<String>) {
    // A=a1 → C=a2 → D=a3 → E=a4. C settles after D has spawned E; D and E hang.
    let model = ScriptedModel::new()
        .script(
            "coordinator",
            Script::new([Turn::spawn("reviewer", "review"), Turn::answer("done")]),
        )
        .script(
            "reviewer",
            Script::new([
                Turn::spawn_background("evidence-checker", "check"),
                Turn::answer("reviewed").after(Duration::from_millis(200)),
            ]),
        )
        .script(
            "evidence-checker",
            Script::new([
                Turn::spawn_background("general-purpose", "dig"),
                Turn::hang(),
            ]),
        )
        .script("general-purpose", Script::new([Turn::hang()]));
    let tree = tree(&model, TreeConfig::default().with_max_depth(4)).await;
    let mut events = tree.subscribe();
    let top = tree
        .spawn(SpawnRequest::new("coordinator", "go"))
        .await
        .expect("admitted");
    let c = a(2);
    // C is admitted by A's first tool call; wait for its start, then for its outcome.
    while let Some(event) = events.next().await {
        if event.agent == c {
            break;
        }
    }
    let c_outcome = match tree.handle(c) {
        Some(mut handle) => handle.outcome().await,
        None => {
            failures.push("C was never started".into());
            return;
        }
    };
    let snapshot = tree.snapshot();
    let below_c = |r: &agent_tree::protocol::AgentRecord| {
        let mut cursor = r.parent;
        while let Some(p) = cursor {
            if p == c {
                return true;
            }
            cursor = snapshot.record(p).and_then(|p| p.parent);
        }
        false
    };
    let live = snapshot
        .agents()
        .filter(|r| below_c(r) && r.status.is_live())
        .count();
    let d_had_child = snapshot
        .record(a(3))
        .is_some_and(|d| !d.children.is_empty());
    let aborted_at = snapshot
        .record(a(3))
        .and_then(|d| d.ended_ms)
        .map(|ms| tree.epoch() + Duration::from_millis(ms));
    drop(top);
    tree.idle().await;
    let after = model
        .log()
        .iter()
        .filter(|call| call.agent == a(3) || call.agent == a(4))
        .filter(|call| aborted_at.is_none_or(|t| call.at >= t))
        .count();
    if !c_outcome.is_completed() || !d_had_child {
        failures.push(format!(
            "cleanup setup: C {} / D had a child: {d_had_child}",
            c_outcome.status
        ));
    }
    lines.push(format!(
        "cleanup: live={live} model_calls_after_abort={after}"
    ));
    tree.shutdown().await;
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> ExitCode {
    let mut lines = Vec::new();
    let mut failures = Vec::new();
    audit(&mut lines, &mut failures).await;
    // The attenuated variant of operation 1 prints right after it.
    let mut variant = Vec::new();
    attenuated(&mut variant, &mut failures).await;
    let at = lines
        .iter()
        .position(|l| l.starts_with("2 "))
        .unwrap_or(lines.len());
    lines.splice(at..at, variant);
    cleanup(&mut lines, &mut failures).await;
    for line in &lines {
        println!("{line}");
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
