//! A tree of three levels on a real model server: a lead delegates to a researcher, which
//! delegates to a checker; the checker's work and every agent's answer come from llama.cpp's
//! server (Gemma 3 270M), the two delegation decisions from a script routed beside it (the
//! tiny model rarely calls a tool on its own). It checks that every agent completed, that
//! the tree has three levels, and that the tree's usage equals the server's own counters,
//! then prints one line:
//!
//! ```text
//! real server: levels=3 agents=3 completed=3 usage_matches=true
//! ```
//!
//! ```sh
//! eval "$(.ci/llama-server env)"
//! cargo run -p agent-tree-models --features real-server --example real_server
//! ```

// Shared with the `real_server` tests, which use all of it.
#[allow(dead_code)]
#[path = "../tests/real_server/rig.rs"]
mod rig;
#[allow(dead_code)]
#[path = "../tests/real_server/server.rs"]
mod server;

use std::process::ExitCode;

use agent_tree_actors::{Tree, TreeConfig};
use agent_tree_protocol::{AgentStatus, SpawnRequest};

use rig::{AdapterShape, Api, Routed, adapter, delegate, three_levels, usage_matches};
use server::{LlamaServer, ServerShape};

#[tokio::main]
async fn main() -> ExitCode {
    let api = match std::env::args().nth(1).as_deref() {
        None | Some("--openai") => Api::OpenAi,
        Some("--anthropic") => Api::Anthropic,
        Some("-h" | "--help") => {
            println!(
                "usage: real_server [--openai | --anthropic]\n\n{}",
                server::HOW_TO_START
            );
            return ExitCode::SUCCESS;
        }
        Some(other) => {
            eprintln!("unknown option {other}; usage: real_server [--openai | --anthropic]");
            return ExitCode::FAILURE;
        }
    };
    let server = LlamaServer::start(ServerShape::default()).await;
    let routed = Routed::new(adapter(api, &server, AdapterShape::default()), delegate);
    let config = TreeConfig::default().with_sampling(rig::sampling(64));
    let tree = Tree::builder()
        .config(config)
        .catalog(three_levels())
        .shared_model(routed.clone())
        .build()
        .await
        .expect("tree");
    let outcome = tree
        .run(SpawnRequest::new("lead", "What is the capital of France?"))
        .await
        .expect("spawn");
    let (usage_ok, ours, theirs) = usage_matches(&tree, &server).await;
    let snapshot = tree.snapshot();
    print!("{}", snapshot.render_text());
    println!("lead's answer: {}", outcome.summary());
    println!("usage: tree {ours:?}, server {theirs:?}");
    tree.shutdown().await;

    let levels = snapshot.agents().map(|r| r.depth).max().unwrap_or(0);
    let agents = snapshot.agents().count();
    let completed = snapshot
        .agents()
        .filter(|r| r.status == AgentStatus::Completed)
        .count();
    let answered: Vec<String> = routed
        .sent()
        .iter()
        .map(|r| r.agent_type().to_owned())
        .collect();
    let mut failures = Vec::new();
    if levels != 3 {
        failures.push(format!("{levels} levels, not 3"));
    }
    if completed != agents {
        failures.push(format!("{completed} of {agents} agents completed"));
    }
    if answered != ["checker", "researcher", "lead"] {
        failures.push(format!(
            "the server answered {answered:?}, not each agent once"
        ));
    }
    if !usage_ok {
        failures.push("the tree's usage is not the server's".to_owned());
    }
    if !failures.is_empty() {
        eprintln!("real server: {}", failures.join("; "));
        return ExitCode::FAILURE;
    }
    println!(
        "real server: levels={levels} agents={agents} completed={completed} usage_matches={usage_ok}"
    );
    ExitCode::SUCCESS
}
