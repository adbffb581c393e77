//! Capabilities hold for MCP tools: an agent sees only the MCP tools its definition names,
//! attenuation covers them, unknown MCP names are reported like unknown tools, and the
//! orchestration tools' names cannot be taken.

use agent_tree::protocol::{AgentDefinition, SpawnRequest, SubagentAllowance};
use agent_tree::testkit::{Call, ScriptedModel, Turn};
use agent_tree::{Catalog, ToolProblem, Tree, TreeConfig};
use serde_json::json;

use crate::support::{agent, everything, filesystem, start, temp_dir, tool_results, tree};

/// Two agents with different MCP tool sets, on two servers: each is offered exactly the
/// tools its definition names, and calling another's is refused as not available; an
/// agent without a tool list holds no MCP tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_agent_sees_only_the_mcp_tools_it_names() {
    let dir = temp_dir("two-sets");
    std::fs::write(dir.join("note.txt"), "from disk").unwrap();
    let servers = start([("everything", everything()), ("fs", filesystem(&dir))]).await;
    let note = dir.join("note.txt").display().to_string();
    let model = ScriptedModel::new()
        .script(
            "echoer",
            [
                Turn::calls([Call::tool(
                    "mcp__everything__echo",
                    json!({"message": "hi"}),
                )]),
                Turn::calls([Call::tool("mcp__fs__read_text_file", json!({"path": note}))]),
                Turn::answer("done"),
            ],
        )
        .script(
            "reader",
            [
                Turn::calls([Call::tool("mcp__fs__read_text_file", json!({"path": note}))]),
                Turn::answer("done"),
            ],
        )
        .script("plain", [Turn::answer("done")]);
    let definitions = vec![
        agent("echoer", &["mcp__everything__echo"]),
        agent("reader", &["mcp__fs"]),
        AgentDefinition::new("plain", ""),
    ];
    let tree = tree(&servers, &model, definitions).await;
    for agent_type in ["echoer", "reader", "plain"] {
        tree.run(SpawnRequest::new(agent_type, "go")).await.unwrap();
    }
    let offered = |agent_type: &str| {
        model
            .log()
            .into_iter()
            .find(|c| c.agent_type == agent_type)
            .unwrap()
            .tools
    };
    assert_eq!(offered("echoer"), ["mcp__everything__echo"]);
    let reader = offered("reader");
    assert!(
        reader.iter().all(|t| t.starts_with("mcp__fs__"))
            && reader.contains(&"mcp__fs__read_text_file".to_owned()),
        "{reader:?}"
    );
    assert!(offered("plain").is_empty(), "{:?}", offered("plain"));
    let results = tool_results(&model);
    assert_eq!(results[0].content, "Echo: hi");
    assert!(
        results[1].is_error,
        "the echoer does not hold the fs tools: {:?}",
        results[1]
    );
    assert_eq!(results[2].content, "from disk");
    tree.shutdown().await;
    assert_eq!(servers.live_processes(), 0);
}

/// Under attenuation a child holds an MCP tool only if its owner does, whatever its own
/// definition names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attenuation_covers_mcp_tools() {
    let servers = start([("everything", everything())]).await;
    let model = ScriptedModel::new()
        .script(
            "lead",
            [Turn::spawn("worker", "echo"), Turn::answer("done")],
        )
        .script("worker", [Turn::answer("done")]);
    let lead =
        agent("lead", &["mcp__everything__echo"]).with_allowed_subagents(SubagentAllowance::All);
    let worker = agent("worker", &["mcp__everything"]);
    let tree = Tree::builder()
        .config(TreeConfig::default().with_attenuated_tools(true))
        .catalog(Catalog::new([lead, worker]).unwrap())
        .model(model.clone())
        .tool_source(servers.clone())
        .unwrap()
        .build()
        .await
        .unwrap();
    tree.run(SpawnRequest::new("lead", "go")).await.unwrap();
    tree.idle().await;
    let worker = model
        .log()
        .into_iter()
        .find(|c| c.agent_type == "worker")
        .unwrap();
    let mcp: Vec<&String> = worker
        .tools
        .iter()
        .filter(|t| t.starts_with("mcp__"))
        .collect();
    assert_eq!(mcp, ["mcp__everything__echo"]);
    tree.shutdown().await;
}

/// An agent file naming an MCP tool no server lists is reported like any unknown tool,
/// naming the registered ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_mcp_names_are_reported_like_unknown_tools() {
    let servers = start([("everything", everything())]).await;
    let catalog = Catalog::new([agent(
        "w",
        &[
            "mcp__everything__nope",
            "mcp__elsewhere",
            "mcp__everything__echo",
        ],
    )])
    .unwrap();
    let problems = catalog.tool_problems(servers.tool_names());
    let unknown: Vec<&str> = problems
        .iter()
        .filter_map(|p| match p {
            ToolProblem::Unknown { tool, .. } => Some(tool.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(unknown, ["mcp__everything__nope", "mcp__elsewhere"]);
    assert!(
        problems[0].to_string().contains("mcp__everything__echo"),
        "{}",
        problems[0]
    );
    servers.kill();
}
