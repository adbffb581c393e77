//! A server's lifetime is the tree's: an agent aborted mid-call cancels its request and
//! never waits for the reply; `Tree::shutdown` with calls out ends every server within its
//! one deadline, also one that ignores its stdin closing and SIGTERM, leaving no process
//! (checked by pid); dropping the tree kills them.

use std::time::Duration;

use agent_tree::protocol::{AgentStatus, EventKind, SpawnRequest};
use agent_tree::testkit::{Call, ScriptedModel, Turn};
use agent_tree::{AgentHandle, EventStream};
use serde_json::json;

use crate::support::{
    MARK, agent, alive, all_gone, everything, hostile, mark, marked, start, temp_dir, tree,
};

/// Waits for `agent`'s first `tool_progress` event: its call is out at the server.
async fn call_is_out(events: &mut EventStream, agent: &AgentHandle) {
    while let Some(event) = events.next().await {
        if event.agent == agent.id() && matches!(event.kind, EventKind::ToolProgress { .. }) {
            return;
        }
    }
    panic!("the event stream ended before the call was out");
}

/// A long call on the reference server, cancelled by an abort of the calling agent: the
/// agent ends aborted at once, without the reply, and the server serves the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_cancels_a_long_call() {
    let servers = start([("everything", everything())]).await;
    let long = json!({"duration": 60, "steps": 60});
    let model = ScriptedModel::new()
        .script(
            "w",
            [
                Turn::calls([Call::tool(
                    "mcp__everything__trigger-long-running-operation",
                    long,
                )]),
                Turn::answer("never"),
            ],
        )
        .script(
            "next",
            [
                Turn::calls([Call::tool(
                    "mcp__everything__echo",
                    json!({"message": "after"}),
                )]),
                Turn::answer("done"),
            ],
        );
    let tree = tree(
        &servers,
        &model,
        vec![
            agent("w", &["mcp__everything"]),
            agent("next", &["mcp__everything"]),
        ],
    )
    .await;
    let mut events = tree.subscribe();
    let mut worker = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    call_is_out(&mut events, &worker).await;
    let aborted_at = tokio::time::Instant::now();
    tree.abort(worker.id()).unwrap();
    let outcome = worker.outcome().await;
    assert_eq!(outcome.status, AgentStatus::Aborted);
    assert!(
        aborted_at.elapsed() < Duration::from_secs(5),
        "the abort did not wait for the reply"
    );
    let next = tree.run(SpawnRequest::new("next", "go")).await.unwrap();
    assert_eq!(next.text.as_deref(), Some("done"));
    assert_eq!(
        crate::support::tool_results(&model).last().unwrap().content,
        "Echo: after"
    );
    tree.shutdown().await;
    assert_eq!(servers.live_processes(), 0);
}

/// The server is told an aborted agent's call is cancelled (`notifications/cancelled` for
/// its request).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_sends_the_cancellation_notice() {
    let dir = temp_dir("abort");
    let log = dir.join("cancelled.log");
    let servers = start([(
        "h",
        hostile("well").env("HOSTILE_LOG", log.display().to_string()),
    )])
    .await;
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([Call::tool("mcp__h__hang", json!({}))]),
            Turn::answer("never"),
        ],
    );
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__h"])]).await;
    let mut events = tree.subscribe();
    let mut worker = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    call_is_out(&mut events, &worker).await;
    tree.abort(worker.id()).unwrap();
    assert_eq!(worker.outcome().await.status, AgentStatus::Aborted);
    // The notice is on its way before the shutdown closes the server's input, which the
    // server reads to its end.
    tree.shutdown().await;
    let cancelled = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(cancelled.starts_with("cancelled "), "{cancelled:?}");
}

/// A shutdown while calls are out, of a server that ignores its stdin closing and SIGTERM
/// and has a child of its own: every process of it is gone when the shutdown returns,
/// within the one deadline, checked by pid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_with_calls_out_leaves_no_process() {
    let servers = start([("stubborn", hostile("stubborn"))]).await;
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([Call::tool("mcp__stubborn__pid", json!({}))]),
            Turn::calls([Call::tool("mcp__stubborn__hang", json!({}))]),
            Turn::answer("never"),
        ],
    );
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__stubborn"])]).await;
    let mut events = tree.subscribe();
    let worker = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    call_is_out(&mut events, &worker).await;
    let pids: Vec<u32> = crate::support::tool_results(&model)[0]
        .content
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "the server and its child");
    assert!(pids.iter().all(|&p| alive(p)));
    let started = tokio::time::Instant::now();
    let report = tree.shutdown().await;
    let took = started.elapsed();
    assert!(
        took <= tree.config().shutdown_grace + Duration::from_millis(500),
        "{took:?}"
    );
    assert!(report.killed.is_empty() || report.killed.contains(&worker.id()));
    for pid in pids {
        assert!(!alive(pid), "process {pid} outlived the shutdown");
    }
    assert_eq!(servers.live_processes(), 0);
}

/// Dropping the tree (no shutdown) kills every server process at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_tree_kills_its_servers() {
    let servers = start([
        ("stubborn", hostile("stubborn")),
        ("everything", everything()),
    ])
    .await;
    let pids = [
        servers.pid("stubborn").unwrap(),
        servers.pid("everything").unwrap(),
    ];
    let tree = tree(&servers, &ScriptedModel::new(), vec![]).await;
    drop(tree);
    // SIGKILL is sent before the drop returns; the kernel ends the processes a moment
    // later, and nothing tells a process that isn't their parent when: look until they
    // are gone, within a bound.
    let gone = async {
        while servers.live_processes() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), gone)
        .await
        .expect("processes left after the drop");
    assert!(pids.iter().all(|&p| !alive(p)));
}

/// A start given up on (its future dropped, as under a timeout) while one server is up and
/// another is still coming up leaves no process of either behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_given_up_on_leaves_no_server_process() {
    let mark = mark("given-up");
    let config = agent_tree::mcp::McpConfig::new()
        .server("well", hostile("well").env(MARK, &mark))
        .unwrap()
        .server(
            "mute",
            hostile("mute")
                .env(MARK, &mark)
                .start_timeout(Duration::from_secs(60)),
        )
        .unwrap();
    let start = agent_tree::mcp::McpServers::start(config);
    let given_up = tokio::time::timeout(Duration::from_secs(3), start).await;
    assert!(given_up.is_err(), "the mute server cannot come up");
    all_gone(&mark).await;
}

/// `McpServers` dropped without ever being given to a tree kills its servers' processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_servers_without_a_tree_kills_them() {
    let mark = mark("dropped");
    let servers = start([
        ("stubborn", hostile("stubborn").env(MARK, &mark)),
        ("well", hostile("well").env(MARK, &mark)),
    ])
    .await;
    assert_eq!(
        marked(&mark).len(),
        3,
        "two servers and the stubborn one's child"
    );
    drop(servers);
    all_gone(&mark).await;
}

/// A shutdown while a server is restarting (its new process not answering yet) returns
/// within the one deadline and leaves no process of the old or the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_while_a_server_restarts_leaves_no_process() {
    let dir = temp_dir("restarting");
    let flag = dir.join("started-once");
    let script =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/fixtures/hostile.js");
    // The first process crashes on `echo`; every later one never answers its handshake.
    let sh = format!(
        "if [ -e '{flag}' ]; then exec node '{script}' mute; else touch '{flag}'; exec node '{script}' crash; fi",
        flag = flag.display(),
        script = script.display()
    );
    let mark = mark("restarting");
    let server = agent_tree::mcp::ServerConfig::stdio("sh", ["-c".to_owned(), sh])
        .env(MARK, &mark)
        .start_timeout(Duration::from_secs(60));
    let servers = start([("h", server)]).await;
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([Call::tool("mcp__h__echo", json!({"text": "dies"}))]),
            Turn::answer("done"),
        ],
    );
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__h"])]).await;
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    // The restart has begun: the call above saw the server go away, and waited for the
    // supervisor to take that connection down.
    assert_eq!(servers.pid("h"), None, "the server is not up");
    let started = tokio::time::Instant::now();
    tree.shutdown().await;
    let took = started.elapsed();
    assert!(
        took <= tree.config().shutdown_grace + Duration::from_millis(500),
        "{took:?}"
    );
    assert_eq!(servers.live_processes(), 0);
    all_gone(&mark).await;
}

/// Servers given to two trees end with the first tree's shutdown: the other tree's calls
/// then fail at once, saying the server has been shut down, never hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_shared_by_two_trees_end_with_the_first_saying_so() {
    let servers = start([("h", hostile("well"))]).await;
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([Call::tool("mcp__h__echo", json!({"text": "x"}))]),
            Turn::answer("done"),
        ],
    );
    let first = tree(&servers, &ScriptedModel::new(), vec![]).await;
    let second = tree(&servers, &model, vec![agent("w", &["mcp__h"])]).await;
    first.shutdown().await;
    assert_eq!(servers.live_processes(), 0);
    let run = second.run(SpawnRequest::new("w", "go"));
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("the call did not hang")
        .unwrap();
    let result = crate::support::tool_results(&model).pop().unwrap();
    assert!(result.is_error, "{result:?}");
    assert_eq!(result.content, "MCP server `h` has been shut down");
    second.shutdown().await;
}

/// Aborts and kills racing a call's progress and reply, many rounds on worker threads:
/// every agent settles at once, no progress of a call follows its agent's end, and the
/// server serves on and ends with the tree, no process left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborts_and_kills_racing_a_reply_never_hang_or_leak() {
    let servers = start([("h", hostile("well"))]).await;
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([Call::tool("mcp__h__progress", json!({}))]),
            Turn::answer("done"),
        ],
    );
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__h"])]).await;
    for round in 0..20 {
        let mut events = tree.subscribe();
        let mut worker = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
        call_is_out(&mut events, &worker).await;
        if round % 2 == 0 {
            tree.abort(worker.id()).unwrap();
        } else {
            tree.kill(worker.id()).unwrap();
        }
        let outcome = tokio::time::timeout(Duration::from_secs(5), worker.outcome())
            .await
            .expect("the agent settles");
        let expected = if round % 2 == 0 {
            AgentStatus::Aborted
        } else {
            AgentStatus::Killed
        };
        assert_eq!(outcome.status, expected, "round {round}");
        // The call's remaining progress (it answers 100 ms on) reaches no event of the
        // ended agent: read past where it would have.
        let later = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
        let mut ended = false;
        while let Some(event) = events.next().await {
            if event.agent == worker.id() {
                assert!(
                    !(ended && matches!(event.kind, EventKind::ToolProgress { .. })),
                    "round {round}: progress after the end"
                );
                ended |= event.kind.terminal_status().is_some();
            }
            if event.agent == later.id() && event.kind.terminal_status().is_some() {
                break;
            }
        }
    }
    tree.shutdown().await;
    assert_eq!(servers.live_processes(), 0);
}
