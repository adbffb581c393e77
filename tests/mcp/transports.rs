//! The streamable-HTTP transport, against the reference server started on 127.0.0.1, and
//! `.mcp.json` read as Claude Code writes it.

use std::time::Duration;

use agent_tree::mcp::{McpConfig, McpServers, ServerConfig};
use agent_tree::protocol::SpawnRequest;
use agent_tree::testkit::{Call, ScriptedModel, Turn};
use serde_json::json;

use crate::support::{agent, everything_http_command, temp_dir, tool_results, tree};

/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts the reference server over streamable HTTP on `port` and waits for its own word
/// that it listens (`... listening on port <port>` on its standard error).
async fn serving(port: u16) -> tokio::process::Child {
    use tokio::io::AsyncBufReadExt;
    let mut server = everything_http_command(port)
        .spawn()
        .expect("node runs the server");
    let stderr = server.stderr.take().expect("piped");
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let listening = async {
        while let Some(line) = lines.next_line().await.expect("the server's output") {
            if line.contains(&format!("listening on port {port}")) {
                return;
            }
        }
        panic!("the HTTP server ended before it listened");
    };
    tokio::time::timeout(Duration::from_secs(20), listening)
        .await
        .expect("the HTTP server did not start listening");
    // The rest of its output is read too: a closed pipe would end it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    server
}

/// A server over streamable HTTP, its headers sent: its tools are listed and called like a
/// stdio server's, and the tree's shutdown ends the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamable_http_server_is_listed_and_called() {
    let port = free_port();
    let _server = serving(port).await;
    let config = McpConfig::new()
        .server(
            "web",
            ServerConfig::http(format!("http://127.0.0.1:{port}/mcp"))
                .header("x-agent-tree", "test"),
        )
        .unwrap();
    let servers = McpServers::start(config).await.unwrap();
    assert!(servers.tool_names().any(|t| t == "mcp__web__echo"));
    assert_eq!(servers.pid("web"), None, "no process of ours");
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([Call::tool(
                "mcp__web__echo",
                json!({"message": "over http"}),
            )]),
            Turn::answer("done"),
        ],
    );
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__web__echo"])]).await;
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(tool_results(&model)[0].content, "Echo: over http");
    tree.shutdown().await;
}

/// A `.mcp.json` as Claude Code writes it starts its servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_code_mcp_json_starts_its_servers() {
    let dir = temp_dir("mcp-json");
    let bin = crate::support::everything_bin();
    let file = dir.join(".mcp.json");
    let text = json!({"mcpServers": {"everything": {"type": "stdio", "command": bin, "args": ["stdio"], "env": {}}}});
    std::fs::write(&file, text.to_string()).unwrap();
    let servers = McpServers::start(McpConfig::from_mcp_json(&file).unwrap())
        .await
        .unwrap();
    assert!(
        servers
            .tool_names()
            .any(|t| t == "mcp__everything__get-sum")
    );
    servers
        .shutdown(tokio::time::Instant::now() + Duration::from_secs(3))
        .await;
    assert_eq!(servers.live_processes(), 0);
}

/// A streamable-HTTP server that goes away mid-session: a call meanwhile fails at once,
/// clearly, instead of waiting out its timeout; once the server is back on its address,
/// calls reach it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_that_goes_away_is_reached_again_when_back() {
    let port = free_port();
    let mut server = serving(port).await;
    let config = McpConfig::new()
        .server(
            "web",
            ServerConfig::http(format!("http://127.0.0.1:{port}/mcp"))
                .call_timeout(Duration::from_secs(20)),
        )
        .unwrap();
    let servers = McpServers::start(config).await.unwrap();
    let echo = |text: &str| Turn::calls([Call::tool("mcp__web__echo", json!({"message": text}))]);
    let model = ScriptedModel::new()
        .script("before", [echo("before"), Turn::answer("done")])
        .script("gone", [echo("gone"), Turn::answer("done")])
        .script("back", [echo("back"), Turn::answer("done")]);
    let definitions = ["before", "gone", "back"]
        .iter()
        .map(|t| agent(t, &["mcp__web__echo"]))
        .collect();
    let tree = tree(&servers, &model, definitions).await;
    tree.run(SpawnRequest::new("before", "go")).await.unwrap();
    assert_eq!(tool_results(&model)[0].content, "Echo: before");

    server.kill().await.unwrap();
    let started = tokio::time::Instant::now();
    tree.run(SpawnRequest::new("gone", "go")).await.unwrap();
    let gone = tool_results(&model)[1].clone();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the call waited {:?}: {gone:?}",
        started.elapsed()
    );
    assert!(gone.is_error, "{gone:?}");

    let _server = serving(port).await;
    tree.run(SpawnRequest::new("back", "go")).await.unwrap();
    let results = tool_results(&model);
    assert_eq!(
        results[2].content, "Echo: back",
        "while it was gone: {:?}",
        results[1].content
    );
    tree.shutdown().await;
}
