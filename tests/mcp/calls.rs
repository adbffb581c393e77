//! Calls: listed tools offered as `mcp__<server>__<tool>`, results made into text the model
//! reads, errors, size caps, progress, timeouts and cancellation.

use std::time::Duration;

use agent_tree::protocol::{EventKind, SpawnRequest};
use agent_tree::testkit::{Call, ScriptedModel, Turn};
use serde_json::json;

use crate::support::{
    agent, everything, hostile, only_result, start, temp_dir, tool_results, tree,
};

/// A server's tools are listed and offered under `mcp__<server>__<tool>`; a call reaches
/// the server and its text result is the model's tool result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_tools_are_called_under_their_mcp_names() {
    let servers = start([("everything", everything())]).await;
    let names: Vec<&str> = servers.tool_names().collect();
    assert!(names.contains(&"mcp__everything__echo"), "{names:?}");
    assert!(names.contains(&"mcp__everything__get-sum"), "{names:?}");
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([
                Call::tool("mcp__everything__echo", json!({"message": "hello"})),
                Call::tool("mcp__everything__get-sum", json!({"a": 2, "b": 40})),
            ]),
            Turn::answer("done"),
        ],
    );
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__everything"])]).await;
    let outcome = tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(outcome.text.as_deref(), Some("done"));
    let results = tool_results(&model);
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].content, "Echo: hello");
    assert!(results[1].content.contains("42"), "{}", results[1].content);
    assert!(!results[0].is_error && !results[1].is_error);
    assert_eq!(servers.stats().calls, 2);
    assert_eq!(servers.stats().errors, 0);
    tree.shutdown().await;
    assert_eq!(servers.live_processes(), 0);
}

/// Text is read as it is, structured content as JSON, images, audio and links described
/// (never their bytes); `isError` is a tool error to the model; output past the server's
/// cap is cut, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_become_text_the_model_reads() {
    let servers = start([("h", hostile("well").max_output_bytes(1000))]).await;
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([
                Call::tool("mcp__h__mixed", json!({})),
                Call::tool("mcp__h__fail", json!({})),
                Call::tool("mcp__h__big", json!({"bytes": 50_000})),
                Call::tool("mcp__h__structured", json!({})),
            ]),
            Turn::answer("done"),
        ],
    );
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__h"])]).await;
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    let results = tool_results(&model);
    let mixed = &results[0].content;
    assert!(
        mixed.starts_with("hello\n[image image/png, 1000 bytes]\n[audio "),
        "{mixed}"
    );
    assert!(
        mixed.contains("[resource link file:///tmp/a.txt (a.txt)]"),
        "{mixed}"
    );
    assert!(
        mixed.contains("[resource file:///tmp/b.txt]\nbee"),
        "{mixed}"
    );
    assert!(
        !mixed.contains("answer"),
        "structured content beside text is not read twice: {mixed}"
    );
    assert_eq!(
        (results[1].content.as_str(), results[1].is_error),
        ("it broke", true)
    );
    let big = &results[2].content;
    assert!(
        big.len() < 1100 && big.ends_with("[output cut: 1000 of 50000 bytes shown]"),
        "{big}"
    );
    assert_eq!(results[3].content, "{\"answer\":42}");
    assert_eq!(servers.stats().errors, 1);
    tree.shutdown().await;
}

/// A server's progress notifications for a call are the calling agent's `tool_progress`
/// events, naming the call and the tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_notifications_are_events_of_the_calling_agent() {
    let servers = start([("h", hostile("well"))]).await;
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([Call::tool("mcp__h__progress", json!({}))]),
            Turn::answer("done"),
        ],
    );
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__h__progress"])]).await;
    let mut events = tree.subscribe();
    let mut worker = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    worker.outcome().await;
    assert_eq!(only_result(&model), "done");
    let mut progress = Vec::new();
    while let Some(event) = events.try_next() {
        if event.agent == worker.id()
            && let EventKind::ToolProgress {
                tool,
                progress: p,
                total,
                message,
                ..
            } = event.kind
        {
            progress.push((tool, p.to_string(), total.map(|t| t.to_string()), message));
        }
    }
    let step = |n: u32| {
        (
            "mcp__h__progress".to_owned(),
            n.to_string(),
            Some("3".to_owned()),
            Some(format!("step {n}")),
        )
    };
    assert_eq!(progress, [step(1), step(2), step(3)]);
    tree.shutdown().await;
}

/// A call past its tool's timeout fails, saying so, and the server is told it is
/// cancelled; the server stays up for the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_is_cancelled() {
    let dir = temp_dir("timeout");
    let log = dir.join("cancelled.log");
    let server = hostile("well")
        .env("HOSTILE_LOG", log.display().to_string())
        .tool_timeout("hang", Duration::from_millis(300));
    let servers = start([("h", server)]).await;
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([Call::tool("mcp__h__hang", json!({}))]),
            Turn::calls([Call::tool("mcp__h__echo", json!({"text": "still here"}))]),
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
            .contains("did not answer `hang` within 300ms; the call was cancelled"),
        "{}",
        results[0].content
    );
    assert_eq!(results[1].content, "still here");
    tree.shutdown().await;
    let cancelled = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(cancelled.starts_with("cancelled "), "{cancelled:?}");
}

/// Arguments that are not an object (a string, a list, a number) fail the call without
/// reaching the server, telling the model the tool takes an object; the server serves the
/// next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_that_are_not_an_object_fail_saying_the_tool_takes_one() {
    let servers = start([("h", hostile("well"))]).await;
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([
                Call::tool("mcp__h__echo", json!("hello")),
                Call::tool("mcp__h__echo", json!([1, 2])),
                Call::tool("mcp__h__echo", json!(7)),
            ]),
            Turn::calls([Call::tool("mcp__h__echo", json!({"text": "fine"}))]),
            Turn::answer("done"),
        ],
    );
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__h"])]).await;
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    let results = tool_results(&model);
    for result in &results[..3] {
        assert!(result.is_error, "{result:?}");
        assert!(
            result
                .content
                .starts_with("`mcp__h__echo` takes an object of arguments, not "),
            "{}",
            result.content
        );
    }
    assert_eq!(results[3].content, "fine");
    tree.shutdown().await;
}

/// Of a server's tools whose names are the same once made provider-safe, the first listed
/// is offered, once, and a call reaches it; a tool whose name would pass 64 characters is
/// left out; a huge description is cut. The others are offered as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awkward_tool_names_and_specs_are_offered_safely() {
    use agent_tree::ToolSource;
    let servers = start([("odd", hostile("odd"))]).await;
    let names: Vec<&str> = servers.tool_names().collect();
    assert_eq!(
        names.iter().filter(|n| **n == "mcp__odd__dot_name").count(),
        1,
        "{names:?}"
    );
    assert!(names.iter().all(|n| n.len() <= 64), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("xxxx")), "{names:?}");
    assert!(names.contains(&"mcp__odd__echo"), "{names:?}");
    let huge = servers
        .tools()
        .into_iter()
        .map(|t| t.spec())
        .find(|s| s.name == "mcp__odd__huge")
        .expect("the huge tool is offered");
    assert!(
        huge.description.len() < 10_000,
        "{}",
        huge.description.len()
    );
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([Call::tool("mcp__odd__dot_name", json!({}))]),
            Turn::answer("done"),
        ],
    );
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__odd"])]).await;
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert_eq!(only_result(&model), "called dot.name");
    tree.shutdown().await;
}

/// A server's `call_timeout` bounds every call of its tools; a tool's own timeout,
/// longer, lets that tool's call run past the server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tools_timeout_overrides_its_servers_call_timeout() {
    let server = hostile("well")
        .call_timeout(Duration::from_millis(300))
        .tool_timeout("freeze", Duration::from_secs(5));
    let servers = start([("h", server)]).await;
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([Call::tool("mcp__h__hang", json!({}))]),
            Turn::calls([Call::tool("mcp__h__freeze", json!({"ms": 800}))]),
            Turn::answer("done"),
        ],
    );
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__h"])]).await;
    let started = tokio::time::Instant::now();
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(4));
    let results = tool_results(&model);
    assert!(
        results[0].is_error
            && results[0]
                .content
                .contains("did not answer `hang` within 300ms"),
        "{:?}",
        results[0]
    );
    assert_eq!(results[1].content, "thawed");
    tree.shutdown().await;
}

/// An agent aborted right after its call went out, round after round on a multi-thread
/// runtime, racing the reply: it ends aborted or completed, never hangs, and the server's
/// progress notifications for its call never become events after the agent's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_racing_a_calls_reply_ends_the_agent_and_its_progress() {
    use agent_tree::protocol::AgentStatus;
    const ROUNDS: usize = 40;
    let servers = start([("h", hostile("well"))]).await;
    let types: Vec<String> = (0..ROUNDS).map(|i| format!("w{i}")).collect();
    let mut model = ScriptedModel::new().script(
        "last",
        [
            Turn::calls([Call::tool("mcp__h__progress", json!({}))]),
            Turn::answer("done"),
        ],
    );
    for agent_type in &types {
        model = model.script(
            agent_type,
            [
                Turn::calls([Call::tool("mcp__h__progress", json!({}))]),
                Turn::answer("done"),
            ],
        );
    }
    let mut definitions: Vec<_> = types.iter().map(|t| agent(t, &["mcp__h"])).collect();
    definitions.push(agent("last", &["mcp__h"]));
    let tree = tree(&servers, &model, definitions).await;
    let mut events = tree.subscribe();
    let mut ended = Vec::new();
    for (round, agent_type) in types.iter().enumerate() {
        let mut worker = tree
            .spawn(SpawnRequest::new(agent_type, "go"))
            .await
            .unwrap();
        // Every other round aborts at the first progress, the rest as soon as spawned.
        if round % 2 == 0 {
            loop {
                let event = events.next().await.expect("events go on");
                if event.agent == worker.id()
                    && matches!(event.kind, EventKind::ToolProgress { .. })
                {
                    break;
                }
            }
        }
        let _ = tree.abort(worker.id());
        let outcome = tokio::time::timeout(Duration::from_secs(5), worker.outcome())
            .await
            .expect("the aborted agent ends at once");
        assert!(
            matches!(
                outcome.status,
                AgentStatus::Aborted | AgentStatus::Completed
            ),
            "{:?}",
            outcome.status
        );
        ended.push(worker.id());
    }
    // The last agent's call completes after every earlier call's notifications came in
    // (one pipe, in order).
    let last = tree.run(SpawnRequest::new("last", "go")).await.unwrap();
    assert_eq!(last.text.as_deref(), Some("done"));
    let mut over = Vec::new();
    let mut late = Vec::new();
    while let Some(event) = events.try_next() {
        if !ended.contains(&event.agent) {
            continue;
        }
        if matches!(event.kind, EventKind::ToolProgress { .. }) && over.contains(&event.agent) {
            late.push(event.agent);
        }
        if event.kind.terminal_status().is_some() {
            over.push(event.agent);
        }
    }
    assert!(late.is_empty(), "progress after the agent's end: {late:?}");
    tree.shutdown().await;
    assert_eq!(servers.live_processes(), 0);
}

/// Each MCP call runs in the calling agent's `execute_tool` span, its `server` field the
/// server's name beside the tool's offered name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_calls_execute_tool_span_names_its_server() {
    use std::sync::{Arc, Mutex};
    use tracing::field::{Field, Visit};
    use tracing_subscriber::layer::{Context, SubscriberExt};

    type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;
    /// Records each `execute_tool` span's tool name and server.
    struct Spans(Seen);
    #[derive(Default)]
    struct Fields {
        tool: String,
        server: Option<String>,
    }
    impl Visit for Fields {
        fn record_str(&mut self, field: &Field, value: &str) {
            match field.name() {
                "server" => self.server = Some(value.to_owned()),
                "gen_ai.tool.name" => self.tool = value.to_owned(),
                _ => {}
            }
        }
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            let text = format!("{value:?}");
            self.record_str(field, text.trim_matches('"'));
        }
    }
    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Spans {
        fn on_new_span(
            &self,
            attrs: &tracing::span::Attributes<'_>,
            _id: &tracing::span::Id,
            _ctx: Context<'_, S>,
        ) {
            if attrs.metadata().name() == "execute_tool" {
                let mut fields = Fields::default();
                attrs.record(&mut fields);
                self.0.lock().unwrap().push((fields.tool, fields.server));
            }
        }
    }
    let seen = Seen::default();
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(Spans(seen.clone())),
    )
    .expect("no other test sets the global subscriber");

    let servers = start([("spanned", hostile("well"))]).await;
    let model = ScriptedModel::new().script(
        "w",
        [
            Turn::calls([Call::tool("mcp__spanned__echo", json!({"text": "x"}))]),
            Turn::answer("done"),
        ],
    );
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__spanned"])]).await;
    tree.run(SpawnRequest::new("w", "go")).await.unwrap();
    tree.shutdown().await;
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.contains(&("mcp__spanned__echo".to_owned(), Some("spanned".to_owned()))),
        "{seen:?}"
    );
}

/// Every progress notification a server sends before its result is an event of the
/// calling agent, also the one sent just before the result: four calls at a time, turn
/// after turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_progress_sent_before_the_result_is_an_event() {
    const ROUNDS: usize = 8;
    let servers = start([("h", hostile("well"))]).await;
    let progress = || Call::tool("mcp__h__progress", json!({}));
    let turns: [Turn; ROUNDS + 1] = std::array::from_fn(|i| {
        if i < ROUNDS {
            Turn::calls([progress(), progress(), progress(), progress()])
        } else {
            Turn::answer("done")
        }
    });
    let model = ScriptedModel::new().script("w", turns);
    let tree = tree(&servers, &model, vec![agent("w", &["mcp__h"])]).await;
    let mut events = tree.subscribe();
    let mut worker = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    let outcome = worker.outcome().await;
    assert_eq!(outcome.text.as_deref(), Some("done"), "{outcome:?}");
    tree.shutdown().await;
    let mut steps = Vec::new();
    while let Some(event) = events.try_next() {
        if event.agent == worker.id()
            && let EventKind::ToolProgress { progress, .. } = event.kind
        {
            steps.push(progress.to_string());
        }
    }
    assert_eq!(
        steps.len(),
        12 * ROUNDS,
        "progress events lost: {} of {}",
        12 * ROUNDS - steps.len(),
        12 * ROUNDS
    );
}
