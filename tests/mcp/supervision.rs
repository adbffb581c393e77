//! Servers are supervised the OTP way: one that exits mid-call is restarted (the call
//! fails, saying so; the next one reaches the new process), past its restart intensity its
//! tools fail at once saying why, one that never comes up fails the start or is reported,
//! and hostile output (a flood, garbage) is bounded and never hangs a call.

use std::time::Duration;

use agent_tree::mcp::{McpConfig, McpError, McpServers, StartFailure};
use agent_tree::protocol::SpawnRequest;
use agent_tree::testkit::{Call, ScriptedModel, Turn};
use serde_json::json;

use crate::support::{agent, alive, hostile, start, tool_results, tree};

/// A server killed mid-call: the call fails, saying the server went away, the server is
/// restarted as a new process, and the next call reaches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_mid_call_is_restarted() {
    let servers = start([("h", hostile("crash").restarts(3, Duration::from_secs(60)))]).await;
    let first = servers.pid("h").unwrap();
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([Call::tool("mcp__h__echo", json!({"text": "dies"}))]),
            Turn::calls([Call::tool("mcp__h__pid", json!({}))]),
            Turn::answer("done"),
        ],
    );
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__h"])]).await;
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    let results = tool_results(&model);
    assert!(results[0].is_error);
    assert!(
        results[0]
            .content
            .contains("MCP server `h` went away during the call of `echo`"),
        "{}",
        results[0].content
    );
    let second: u32 = results[1]
        .content
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{:?}", results[1]));
    assert_ne!(second, first, "a new process answers");
    assert!(!alive(first));
    tree.shutdown().await;
    assert_eq!(servers.live_processes(), 0);
}

/// Past its restart intensity a server stays down, and its tools fail at once, saying
/// why, instead of hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_intensity_a_servers_tools_fail_at_once() {
    let servers = start([("h", hostile("crash").restarts(1, Duration::from_secs(60)))]).await;
    let crash = || Turn::calls([Call::tool("mcp__h__echo", json!({"text": "dies"}))]);
    let model = ScriptedModel::new().script("w", [crash(), crash(), crash(), Turn::answer("done")]);
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__h"])]).await;
    let started = tokio::time::Instant::now();
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    let results = tool_results(&model);
    assert!(results.iter().all(|r| r.is_error));
    assert!(
        results[2].content.contains(
            "MCP server `h` is down: it failed 2 time(s) within 60s and is not restarted again"
        ),
        "{}",
        results[2].content
    );
    assert!(started.elapsed() < Duration::from_secs(20), "no call hung");
    tree.shutdown().await;
    assert_eq!(servers.live_processes(), 0);
}

/// A server that never answers its handshake fails the start, naming it, within its start
/// timeout; under `StartFailure::Report` the others start and it is listed as failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_comes_up_fails_the_start_or_is_reported() {
    let mute = || hostile("mute").start_timeout(Duration::from_millis(800));
    let config = McpConfig::new().server("mute", mute()).unwrap();
    let error = McpServers::start(config).await.unwrap_err();
    assert!(
        matches!(&error, McpError::Start { server, reason } if server == "mute" && reason.contains("did not come up within 800ms")),
        "{error}"
    );
    let config = McpConfig::new()
        .server("mute", mute())
        .unwrap()
        .server("well", hostile("well"))
        .unwrap()
        .on_start_failure(StartFailure::Report);
    let servers = McpServers::start(config).await.unwrap();
    assert_eq!(servers.failed().len(), 1);
    assert_eq!(servers.failed()[0].server, "mute");
    assert!(servers.tool_names().all(|t| t.starts_with("mcp__well__")));
    assert_eq!(servers.stats().servers, 1);
    servers
        .shutdown(tokio::time::Instant::now() + Duration::from_secs(3))
        .await;
    assert_eq!(servers.live_processes(), 0);
}

/// A command that cannot be run fails the start with the system's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_cannot_run_fails_the_start_saying_why() {
    let config = McpConfig::new()
        .server(
            "ghost",
            agent_tree::mcp::ServerConfig::stdio("/nonexistent/mcp-server", Vec::<String>::new()),
        )
        .unwrap();
    let error = McpServers::start(config).await.unwrap_err().to_string();
    assert!(
        error.starts_with(
            "MCP server `ghost` did not start: `/nonexistent/mcp-server` could not be run"
        ),
        "{error}"
    );
}

/// A server that floods its output without a line end, or writes garbage and never
/// answers: the call fails within its timeout, memory stays bounded, nothing panics, and
/// the server is ended with the tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_output_is_bounded_and_never_hangs_a_call() {
    let timeout = Duration::from_secs(3);
    let servers = start([
        ("flood", hostile("flood").call_timeout(timeout)),
        ("garbage", hostile("garbage").call_timeout(timeout)),
    ])
    .await;
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([
                Call::tool("mcp__flood__echo", json!({"text": "x"})),
                Call::tool("mcp__garbage__echo", json!({"text": "x"})),
            ]),
            Turn::answer("done"),
        ],
    );
    let tree = tree(
        &servers,
        &model,
        vec![agent("w", &["mcp__flood", "mcp__garbage"])],
    )
    .await;
    let started = tokio::time::Instant::now();
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert!(started.elapsed() < timeout + Duration::from_secs(2));
    let results = tool_results(&model);
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|r| r.is_error), "{results:?}");
    tree.shutdown().await;
    assert_eq!(servers.live_processes(), 0);
}

/// A stop arriving while the supervisor waits on a ping the server does not answer (it is
/// busy) still ends the server by the shutdown's deadline: the tree's shutdown returns
/// within its grace, not when the ping gives up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_an_unanswered_ping_ends_the_server_by_its_deadline() {
    let server = hostile("well")
        .ping_interval(Some(Duration::from_millis(100)))
        .tool_timeout("freeze", Duration::from_millis(500));
    let servers = start([("h", server)]).await;
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([Call::tool("mcp__h__freeze", json!({"ms": 8000}))]),
            Turn::answer("done"),
        ],
    );
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__h"])]).await;
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    // The call timed out after 500ms; pings every 100ms meanwhile: one is out, unanswered.
    assert!(tool_results(&model)[0].is_error);
    let started = tokio::time::Instant::now();
    tree.shutdown().await;
    let took = started.elapsed();
    assert!(
        took <= tree.config().shutdown_grace + Duration::from_millis(500),
        "the shutdown took {took:?}"
    );
    assert_eq!(servers.live_processes(), 0);
}

/// A call made after the server's process died, before the supervisor saw it go, is not
/// lost on the dead connection: it reaches the restarted process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_racing_a_restart_reaches_the_new_process() {
    const ROUNDS: usize = 5;
    let servers = start([("h", hostile("well").restarts(20, Duration::from_secs(60)))]).await;
    let types: Vec<String> = (0..ROUNDS).map(|i| format!("w{i}")).collect();
    let mut model = ScriptedModel::new();
    for agent_type in &types {
        model = model.script(
            agent_type,
            [
                Turn::calls([Call::tool("mcp__h__pid", json!({}))]),
                Turn::answer("done"),
            ],
        );
    }
    let definitions = types.iter().map(|t| agent(t, &["mcp__h"])).collect();
    let tree = tree(&servers, &model, definitions).await;
    let mut failures = Vec::new();
    for agent_type in &types {
        let pid = loop {
            // Up again after the previous round's kill.
            if let Some(pid) = servers.pid("h") {
                break pid;
            }
            tokio::task::yield_now().await;
        };
        let killed = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        // Dead (the kernel ends a killed process a moment after the signal), but maybe not
        // yet seen by the supervisor.
        let dead = async {
            while alive(pid) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), dead)
            .await
            .expect("the killed process ends");
        tree.run(SpawnRequest::new(agent_type, "go")).await.unwrap();
        let result = tool_results(&model).pop().unwrap();
        if result.is_error || result.content.trim() == pid.to_string() {
            failures.push(result.content);
        }
    }
    assert!(
        failures.is_empty(),
        "calls lost on a dead connection: {failures:?}"
    );
    tree.shutdown().await;
    assert_eq!(servers.live_processes(), 0);
}

/// A server busy with a call (it answers nothing meanwhile, as a single-threaded server
/// does) is not restarted for the pings it misses while the call is within its timeout:
/// the call gets its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_busy_with_a_call_within_its_timeout_is_not_restarted_for_missed_pings() {
    let server = hostile("well")
        .ping_interval(Some(Duration::from_millis(100)))
        .tool_timeout("freeze", Duration::from_secs(30));
    let servers = start([("h", server)]).await;
    let first = servers.pid("h").unwrap();
    let busy = agent_tree::mcp::PING_TIMEOUT + Duration::from_secs(2);
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([Call::tool(
                "mcp__h__freeze",
                json!({"ms": busy.as_millis() as u64}),
            )]),
            Turn::answer("done"),
        ],
    );
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__h"])]).await;
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    let result = tool_results(&model).pop().unwrap();
    assert_eq!(result.content, "thawed", "{result:?}");
    assert_eq!(
        servers.pid("h"),
        Some(first),
        "the server was not restarted"
    );
    tree.shutdown().await;
}

/// A start that fails for one server (under `StartFailure::Fail`) ends the servers that
/// did come up: no process of theirs is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_start_ends_the_servers_that_came_up() {
    let mark = crate::support::mark("failed-start");
    let config = McpConfig::new()
        .server(
            "ghost",
            agent_tree::mcp::ServerConfig::stdio("/nonexistent/mcp-server", Vec::<String>::new()),
        )
        .unwrap()
        .server("well", hostile("well").env(crate::support::MARK, &mark))
        .unwrap();
    let error = McpServers::start(config).await.unwrap_err();
    assert!(
        matches!(&error, McpError::Start { server, .. } if server == "ghost"),
        "{error}"
    );
    crate::support::all_gone(&mark).await;
}
